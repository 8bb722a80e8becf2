//! Zero-copy view of Kafka RecordBatch v2 headers, validation, and the few batch builders the log
//! needs (control markers). Nothing here allocates on the parse/validate path.
//!
//! Layout (big endian), offsets in bytes:
//! `baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch i32 @12, magic i8 @16,
//! crc u32 @17, attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27,
//! maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53,
//! recordsCount i32 @57, records @61`. The CRC32C covers attributes..end, so the log may stamp
//! baseOffset and partitionLeaderEpoch without recomputing it.

use std::fmt;

/// Size of baseOffset + batchLength (the part not counted by batchLength).
pub const LOG_OVERHEAD: usize = 12;
/// Size of the whole v2 header, records start here.
pub const HEADER_SIZE: usize = 61;
/// Smallest legal batchLength value (header without the 12-byte overhead).
pub const MIN_BATCH_LENGTH: i32 = (HEADER_SIZE - LOG_OVERHEAD) as i32;

pub const BASE_OFFSET_POS: usize = 0;
pub const LENGTH_POS: usize = 8;
pub const PARTITION_LEADER_EPOCH_POS: usize = 12;
pub const MAGIC_POS: usize = 16;
pub const CRC_POS: usize = 17;
pub const ATTRIBUTES_POS: usize = 21;
pub const LAST_OFFSET_DELTA_POS: usize = 23;
pub const BASE_TIMESTAMP_POS: usize = 27;
pub const MAX_TIMESTAMP_POS: usize = 35;
pub const PRODUCER_ID_POS: usize = 43;
pub const PRODUCER_EPOCH_POS: usize = 51;
pub const BASE_SEQUENCE_POS: usize = 53;
pub const RECORDS_COUNT_POS: usize = 57;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_MASK: i16 = 0x10;
const CONTROL_MASK: i16 = 0x20;

/// Kafka's `ControlRecordType` ids we interpret. Kafka uses 0..=6 (ABORT, COMMIT, LEADER_CHANGE,
/// SNAPSHOT_HEADER, SNAPSHOT_FOOTER, KRAFT_VERSION, KRAFT_VOTERS).
pub const CONTROL_TYPE_ABORT: i16 = 0;
pub const CONTROL_TYPE_COMMIT: i16 = 1;
/// kmirror's own control type: MIRROR_PID_RESET, written at failover; it expires all producer
/// state (and open transactions) of the partition. Chosen far above Kafka's range so future
/// Kafka types cannot collide; Kafka clients parse unknown control types as UNKNOWN and skip them.
pub const CONTROL_TYPE_MIRROR_PID_RESET: i16 = 0x4B4D; // "KM"

/// Why a batch failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than a header, or fewer than batchLength says.
    Truncated {
        have: usize,
        need: usize,
    },
    BadLength(i32),
    BadMagic(i8),
    CrcMismatch {
        stored: u32,
        computed: u32,
    },
    /// lastOffsetDelta / recordsCount disagree.
    BadCount {
        last_offset_delta: i32,
        records_count: i32,
    },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Truncated { have, need } => {
                write!(f, "truncated batch: have {have} bytes, need {need}")
            }
            BatchError::BadLength(l) => write!(f, "invalid batch length {l}"),
            BatchError::BadMagic(m) => write!(f, "unsupported magic {m} (only v2)"),
            BatchError::CrcMismatch { stored, computed } => {
                write!(
                    f,
                    "CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            }
            BatchError::BadCount {
                last_offset_delta,
                records_count,
            } => write!(
                f,
                "lastOffsetDelta {last_offset_delta} inconsistent with recordsCount {records_count}"
            ),
        }
    }
}

impl std::error::Error for BatchError {}

/// Compression codec from the attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
    Unknown(u8),
}

#[inline]
fn be_i64(b: &[u8], pos: usize) -> i64 {
    i64::from_be_bytes(b[pos..pos + 8].try_into().expect("8 bytes"))
}
#[inline]
fn be_i32(b: &[u8], pos: usize) -> i32 {
    i32::from_be_bytes(b[pos..pos + 4].try_into().expect("4 bytes"))
}
#[inline]
fn be_i16(b: &[u8], pos: usize) -> i16 {
    i16::from_be_bytes(b[pos..pos + 2].try_into().expect("2 bytes"))
}

/// A borrowed RecordBatch v2 header. Construct with [`BatchHeader::parse`]; accessors read the
/// bytes in place.
#[derive(Clone, Copy)]
pub struct BatchHeader<'a> {
    bytes: &'a [u8],
}

impl fmt::Debug for BatchHeader<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchHeader")
            .field("base_offset", &self.base_offset())
            .field("batch_length", &self.batch_length())
            .field("partition_leader_epoch", &self.partition_leader_epoch())
            .field("magic", &self.magic())
            .field("attributes", &self.attributes())
            .field("last_offset_delta", &self.last_offset_delta())
            .field("producer_id", &self.producer_id())
            .field("producer_epoch", &self.producer_epoch())
            .field("base_sequence", &self.base_sequence())
            .field("records_count", &self.records_count())
            .finish()
    }
}

impl<'a> BatchHeader<'a> {
    /// Parses the fixed header at the start of `bytes`. Checks only that 61 bytes are present;
    /// use [`validate`] for the full checks.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, BatchError> {
        if bytes.len() < HEADER_SIZE {
            return Err(BatchError::Truncated {
                have: bytes.len(),
                need: HEADER_SIZE,
            });
        }
        Ok(BatchHeader { bytes })
    }

    /// The bytes this header was parsed from (may extend past the batch).
    pub fn raw(&self) -> &'a [u8] {
        self.bytes
    }
    pub fn base_offset(&self) -> i64 {
        be_i64(self.bytes, BASE_OFFSET_POS)
    }
    /// batchLength field (excludes the 12-byte baseOffset + length prefix).
    pub fn batch_length(&self) -> i32 {
        be_i32(self.bytes, LENGTH_POS)
    }
    /// Whole batch size in bytes including the 12-byte prefix (0 if the length is negative).
    pub fn total_size(&self) -> usize {
        let l = self.batch_length();
        if l < 0 {
            0
        } else {
            l as usize + LOG_OVERHEAD
        }
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        be_i32(self.bytes, PARTITION_LEADER_EPOCH_POS)
    }
    pub fn magic(&self) -> i8 {
        self.bytes[MAGIC_POS] as i8
    }
    pub fn crc(&self) -> u32 {
        u32::from_be_bytes(
            self.bytes[CRC_POS..CRC_POS + 4]
                .try_into()
                .expect("4 bytes"),
        )
    }
    pub fn attributes(&self) -> i16 {
        be_i16(self.bytes, ATTRIBUTES_POS)
    }
    pub fn compression(&self) -> Compression {
        match (self.attributes() & COMPRESSION_MASK) as u8 {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            n => Compression::Unknown(n),
        }
    }
    /// true for LogAppendTime, false for CreateTime.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes() & TIMESTAMP_TYPE_MASK != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL_MASK != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL_MASK != 0
    }
    pub fn last_offset_delta(&self) -> i32 {
        be_i32(self.bytes, LAST_OFFSET_DELTA_POS)
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset() + self.last_offset_delta() as i64
    }
    /// Offset following this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn base_timestamp(&self) -> i64 {
        be_i64(self.bytes, BASE_TIMESTAMP_POS)
    }
    pub fn max_timestamp(&self) -> i64 {
        be_i64(self.bytes, MAX_TIMESTAMP_POS)
    }
    pub fn producer_id(&self) -> i64 {
        be_i64(self.bytes, PRODUCER_ID_POS)
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id() >= 0
    }
    pub fn producer_epoch(&self) -> i16 {
        be_i16(self.bytes, PRODUCER_EPOCH_POS)
    }
    pub fn base_sequence(&self) -> i32 {
        be_i32(self.bytes, BASE_SEQUENCE_POS)
    }
    /// Last sequence, wrapping at i32::MAX like Kafka.
    pub fn last_sequence(&self) -> i32 {
        let base = self.base_sequence();
        if base < 0 {
            return -1;
        }
        let last = base as i64 + self.last_offset_delta() as i64;
        if last > i32::MAX as i64 {
            (last - i32::MAX as i64 - 1) as i32
        } else {
            last as i32
        }
    }
    pub fn records_count(&self) -> i32 {
        be_i32(self.bytes, RECORDS_COUNT_POS)
    }
    /// The batch bytes (header + records) if `bytes` holds all of it.
    pub fn batch_bytes(&self) -> Option<&'a [u8]> {
        let n = self.total_size();
        (n >= HEADER_SIZE && self.bytes.len() >= n).then(|| &self.bytes[..n])
    }
}

/// Full validation of the batch at the start of `bytes`: length, magic 2, CRC32C over
/// attributes..end, lastOffsetDelta/recordsCount consistency (lenient: compaction may leave
/// lastOffsetDelta above count-1). Returns the header and the batch's total size.
pub fn validate(bytes: &[u8]) -> Result<(BatchHeader<'_>, usize), BatchError> {
    let h = BatchHeader::parse(bytes)?;
    let len = h.batch_length();
    if len < MIN_BATCH_LENGTH {
        return Err(BatchError::BadLength(len));
    }
    let total = len as usize + LOG_OVERHEAD;
    if bytes.len() < total {
        return Err(BatchError::Truncated {
            have: bytes.len(),
            need: total,
        });
    }
    if h.magic() != 2 {
        return Err(BatchError::BadMagic(h.magic()));
    }
    let computed = crc32c::crc32c(&bytes[ATTRIBUTES_POS..total]);
    let stored = h.crc();
    if computed != stored {
        return Err(BatchError::CrcMismatch { stored, computed });
    }
    let lod = h.last_offset_delta();
    let count = h.records_count();
    if lod < 0 || count < 0 || (count > 0 && lod < count - 1) {
        return Err(BatchError::BadCount {
            last_offset_delta: lod,
            records_count: count,
        });
    }
    Ok((h, total))
}

/// Stricter check a producer's batch must pass (Kafka's LogValidator for client appends):
/// at least one record and offsets 0..count-1 exactly.
pub fn check_client_counts(h: &BatchHeader<'_>) -> Result<(), BatchError> {
    let count = h.records_count();
    if count <= 0 || h.last_offset_delta() != count - 1 {
        return Err(BatchError::BadCount {
            last_offset_delta: h.last_offset_delta(),
            records_count: count,
        });
    }
    Ok(())
}

/// Iterates validated batches of a concatenation (a Produce/Fetch `records` field).
/// Yields `(header, start, end)` byte ranges; stops with an error at the first bad batch.
pub struct BatchIter<'a> {
    bytes: &'a [u8],
    pos: usize,
    check_crc: bool,
}

impl<'a> BatchIter<'a> {
    /// Full validation (CRC included) of every batch.
    pub fn validating(bytes: &'a [u8]) -> Self {
        BatchIter {
            bytes,
            pos: 0,
            check_crc: true,
        }
    }
    /// Header-only walk (lengths and magic), for bytes already validated once.
    pub fn headers(bytes: &'a [u8]) -> Self {
        BatchIter {
            bytes,
            pos: 0,
            check_crc: false,
        }
    }
    /// Position of the next batch.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<(BatchHeader<'a>, usize, usize), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.pos..];
        let r = if self.check_crc {
            validate(rest)
        } else {
            check_frame(rest)
        };
        match r {
            Ok((h, total)) => {
                let start = self.pos;
                self.pos += total;
                Some(Ok((h, start, self.pos)))
            }
            Err(e) => {
                self.pos = self.bytes.len();
                Some(Err(e))
            }
        }
    }
}

/// Frame checks only (length, magic), no CRC: for bytes that were validated when written.
pub fn check_frame(bytes: &[u8]) -> Result<(BatchHeader<'_>, usize), BatchError> {
    let h = BatchHeader::parse(bytes)?;
    let len = h.batch_length();
    if len < MIN_BATCH_LENGTH {
        return Err(BatchError::BadLength(len));
    }
    let total = len as usize + LOG_OVERHEAD;
    if bytes.len() < total {
        return Err(BatchError::Truncated {
            have: bytes.len(),
            need: total,
        });
    }
    if h.magic() != 2 {
        return Err(BatchError::BadMagic(h.magic()));
    }
    Ok((h, total))
}

/// Reads a zig-zag varint (Kafka record field encoding). Returns (value, bytes used).
pub fn read_varint(b: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, byte) in b.iter().enumerate().take(10) {
        raw |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            let v = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
            return Some((v, i + 1));
        }
    }
    None
}

/// Appends a zig-zag varint.
pub fn write_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

/// A record's optional key and optional value.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);
/// A record's position data and optional key.
pub type RecordKey<'a> = (RecordPosition, Option<&'a [u8]>);

/// One record's (timestamp delta, offset delta) inside an uncompressed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordPosition {
    pub timestamp_delta: i64,
    pub offset_delta: i64,
}

/// Walks the records of an uncompressed batch, yielding each record's timestamp and offset
/// deltas plus its key. Returns None for compressed batches or malformed records.
pub fn uncompressed_records(batch: &[u8]) -> Option<Vec<RecordKey<'_>>> {
    let h = BatchHeader::parse(batch).ok()?;
    if h.compression() != Compression::None {
        return None;
    }
    let total = h.total_size().min(batch.len());
    let mut pos = HEADER_SIZE;
    let mut out = Vec::with_capacity(h.records_count().max(0) as usize);
    while pos < total {
        let (len, n) = read_varint(&batch[pos..total])?;
        pos += n;
        let end = pos.checked_add(usize::try_from(len).ok()?)?;
        if end > total {
            return None;
        }
        let rec = &batch[pos..end];
        let mut p = 1; // attributes
        let (ts, n) = read_varint(rec.get(p..)?)?;
        p += n;
        let (od, n) = read_varint(rec.get(p..)?)?;
        p += n;
        let (klen, n) = read_varint(rec.get(p..)?)?;
        p += n;
        let key = if klen >= 0 {
            Some(rec.get(p..p + klen as usize)?)
        } else {
            None
        };
        out.push((
            RecordPosition {
                timestamp_delta: ts,
                offset_delta: od,
            },
            key,
        ));
        pos = end;
    }
    Some(out)
}

/// Key and value of the first record of an uncompressed batch.
fn first_record_key_value(batch: &[u8]) -> Option<KeyValue<'_>> {
    let h = BatchHeader::parse(batch).ok()?;
    if h.compression() != Compression::None || h.records_count() < 1 {
        return None;
    }
    let total = h.total_size().min(batch.len());
    let b = batch.get(HEADER_SIZE..total)?;
    let (len, n) = read_varint(b)?;
    let rec = b.get(n..n + usize::try_from(len).ok()?)?;
    let mut p = 1; // attributes
    for _ in 0..2 {
        // timestamp delta, offset delta
        p += read_varint(rec.get(p..)?)?.1;
    }
    let field = |p: &mut usize| -> Option<Option<&[u8]>> {
        let (l, n) = read_varint(rec.get(*p..)?)?;
        *p += n;
        if l < 0 {
            return Some(None);
        }
        let v = rec.get(*p..*p + l as usize)?;
        *p += l as usize;
        Some(Some(v))
    };
    let key = field(&mut p)?;
    let value = field(&mut p)?;
    Some((key, value))
}

/// Control record of a control batch: (type, coordinator epoch or -1). The key is
/// (version i16, type i16); commit/abort values are (version i16, coordinator epoch i32).
pub fn control_record(batch: &[u8]) -> Option<(i16, i32)> {
    let (key, value) = first_record_key_value(batch)?;
    let key = key?;
    if key.len() < 4 {
        return None;
    }
    let coord = match value {
        Some(v) if v.len() >= 6 => be_i32(v, 2),
        _ => -1,
    };
    Some((be_i16(key, 2), coord))
}

/// Parameters of a batch built by [`build_batch`].
#[derive(Debug, Clone)]
pub struct BatchSpec {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub base_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

/// Builds an uncompressed batch from (key, value) records with consecutive offsets and the
/// same timestamp. Used for control markers and by tests/benches to make producer batches.
pub fn build_batch(spec: &BatchSpec, records: &[KeyValue<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, (k, v)) in records.iter().enumerate() {
        let mut rec = Vec::with_capacity(16 + k.map_or(0, |k| k.len()) + v.map_or(0, |v| v.len()));
        rec.push(0); // attributes
        write_varint(&mut rec, 0); // timestamp delta
        write_varint(&mut rec, i as i64); // offset delta
        match k {
            Some(k) => {
                write_varint(&mut rec, k.len() as i64);
                rec.extend_from_slice(k);
            }
            None => write_varint(&mut rec, -1),
        }
        match v {
            Some(v) => {
                write_varint(&mut rec, v.len() as i64);
                rec.extend_from_slice(v);
            }
            None => write_varint(&mut rec, -1),
        }
        write_varint(&mut rec, 0); // headers
        write_varint(&mut body, rec.len() as i64);
        body.extend_from_slice(&rec);
    }
    let n = records.len() as i32;
    let mut out = Vec::with_capacity(HEADER_SIZE + body.len());
    out.extend_from_slice(&spec.base_offset.to_be_bytes());
    out.extend_from_slice(&((HEADER_SIZE - LOG_OVERHEAD + body.len()) as i32).to_be_bytes());
    out.extend_from_slice(&spec.partition_leader_epoch.to_be_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 4]); // crc, filled below
    out.extend_from_slice(&spec.attributes.to_be_bytes());
    out.extend_from_slice(&(n - 1).max(0).to_be_bytes());
    out.extend_from_slice(&spec.base_timestamp.to_be_bytes());
    out.extend_from_slice(&spec.base_timestamp.to_be_bytes());
    out.extend_from_slice(&spec.producer_id.to_be_bytes());
    out.extend_from_slice(&spec.producer_epoch.to_be_bytes());
    out.extend_from_slice(&spec.base_sequence.to_be_bytes());
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(&body);
    let crc = crc32c::crc32c(&out[ATTRIBUTES_POS..]);
    out[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Attribute bits for a transactional control batch.
pub const CONTROL_ATTRIBUTES: i16 = CONTROL_MASK | TRANSACTIONAL_MASK;
/// Attribute bit for a transactional data batch.
pub const TRANSACTIONAL_ATTRIBUTES: i16 = TRANSACTIONAL_MASK;

/// Builds a control batch with one record: key (version 0, `control_type`), value
/// (version 0, coordinator epoch) as Kafka's EndTransactionMarker.
pub fn build_control_batch(
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    control_type: i16,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Vec<u8> {
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&control_type.to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    build_batch(
        &BatchSpec {
            base_offset,
            partition_leader_epoch,
            attributes: CONTROL_ATTRIBUTES,
            base_timestamp: timestamp,
            producer_id,
            producer_epoch,
            base_sequence: -1,
        },
        &[(Some(&key), Some(&value))],
    )
}

/// Test helper: 4 bytes that, placed between `prefix` and `suffix`, make the CRC32C of the
/// whole 0. CRC is linear, so the bytes are found by running the register backwards.
#[cfg(test)]
pub(crate) fn forge_zero_crc(prefix: &[u8], suffix: &[u8]) -> [u8; 4] {
    let mut table = [0u32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
        }
        *t = c;
    }
    let back = |r: u32, b: u8| -> u32 {
        let j = table
            .iter()
            .position(|&t| t >> 24 == r >> 24)
            .expect("unique top byte");
        ((r ^ table[j]) << 8) | (j as u32 ^ b as u32)
    };
    // crc = !register, so a CRC of 0 is a final register of all ones.
    let mut r = u32::MAX;
    for &b in suffix.iter().rev() {
        r = back(r, b);
    }
    for _ in 0..4 {
        r = back(r, 0);
    }
    let x = !crc32c::crc32c(prefix) ^ r;
    x.to_le_bytes()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        let v = b"value-bytes".to_vec();
        let recs: Vec<KeyValue<'_>> = (0..n).map(|_| (Some(&b"k"[..]), Some(&v[..]))).collect();
        build_batch(
            &BatchSpec {
                base_offset: 100,
                partition_leader_epoch: 7,
                attributes: 0,
                base_timestamp: 1234,
                producer_id: 42,
                producer_epoch: 3,
                base_sequence: 9,
            },
            &recs,
        )
    }

    #[test]
    fn header_fields_read_back_as_built() {
        let b = sample(3);
        let (h, total) = validate(&b).unwrap();
        assert_eq!(total, b.len());
        assert_eq!(h.base_offset(), 100);
        assert_eq!(h.last_offset(), 102);
        assert_eq!(h.partition_leader_epoch(), 7);
        assert_eq!(h.producer_id(), 42);
        assert_eq!(h.producer_epoch(), 3);
        assert_eq!(h.base_sequence(), 9);
        assert_eq!(h.last_sequence(), 11);
        assert_eq!(h.records_count(), 3);
        assert_eq!(h.max_timestamp(), 1234);
        assert_eq!(h.compression(), Compression::None);
        assert!(!h.is_control() && !h.is_transactional());
        let recs = uncompressed_records(&b).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[2].0.offset_delta, 2);
        assert_eq!(recs[2].1, Some(&b"k"[..]));
    }

    #[test]
    fn any_flipped_bit_in_crc_range_is_rejected() {
        let b = sample(2);
        for pos in [ATTRIBUTES_POS, 30, b.len() - 1] {
            let mut bad = b.clone();
            bad[pos] ^= 0x10;
            assert!(
                matches!(validate(&bad), Err(BatchError::CrcMismatch { .. })),
                "pos {pos}"
            );
        }
    }

    #[test]
    fn base_offset_and_epoch_are_outside_the_crc() {
        let mut b = sample(2);
        b[..8].copy_from_slice(&5000i64.to_be_bytes());
        b[PARTITION_LEADER_EPOCH_POS..PARTITION_LEADER_EPOCH_POS + 4]
            .copy_from_slice(&99i32.to_be_bytes());
        let (h, _) = validate(&b).unwrap();
        assert_eq!((h.base_offset(), h.partition_leader_epoch()), (5000, 99));
    }

    #[test]
    fn frame_errors_are_typed() {
        let b = sample(1);
        assert!(matches!(
            validate(&b[..40]),
            Err(BatchError::Truncated { .. })
        ));
        assert!(matches!(
            validate(&b[..b.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        let mut m = b.clone();
        m[MAGIC_POS] = 1;
        assert_eq!(validate(&m).unwrap_err(), BatchError::BadMagic(1));
        let mut l = b.clone();
        l[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&10i32.to_be_bytes());
        assert_eq!(validate(&l).unwrap_err(), BatchError::BadLength(10));
        assert!(matches!(
            validate(&[0u8; 80]),
            Err(BatchError::BadLength(0))
        ));
    }

    #[test]
    fn inconsistent_counts_are_rejected() {
        let mut b = sample(3);
        // recordsCount 5 with lastOffsetDelta 2, CRC recomputed so only the count is wrong.
        b[RECORDS_COUNT_POS..RECORDS_COUNT_POS + 4].copy_from_slice(&5i32.to_be_bytes());
        let crc = crc32c::crc32c(&b[ATTRIBUTES_POS..]);
        b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(validate(&b), Err(BatchError::BadCount { .. })));
        // Compaction leaves lastOffsetDelta above count-1: valid for mirrors, not producers.
        let mut c = sample(3);
        c[RECORDS_COUNT_POS..RECORDS_COUNT_POS + 4].copy_from_slice(&1i32.to_be_bytes());
        let crc = crc32c::crc32c(&c[ATTRIBUTES_POS..]);
        c[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        let (h, _) = validate(&c).unwrap();
        assert!(check_client_counts(&h).is_err());
    }

    #[test]
    fn a_batch_whose_crc_is_zero_validates() {
        let b = zero_crc_batch();
        let (h, _) = validate(&b).unwrap();
        assert_eq!(h.crc(), 0);
    }

    /// A well-formed one-record batch whose stored (and computed) CRC is 0.
    pub(crate) fn zero_crc_batch() -> Vec<u8> {
        let value = [0u8; 8];
        let mut b = build_batch(
            &BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 0,
                attributes: 0,
                base_timestamp: 77,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            },
            &[(None, Some(&value[..]))],
        );
        // The record ends with the value's last 4 bytes, then the headers count (1 byte).
        let n = b.len();
        let x = forge_zero_crc(&b[ATTRIBUTES_POS..n - 5], &b[n - 1..]);
        b[n - 5..n - 1].copy_from_slice(&x);
        b[CRC_POS..CRC_POS + 4].copy_from_slice(&0u32.to_be_bytes());
        b
    }

    #[test]
    fn control_records_parse() {
        let b = build_control_batch(10, 2, 55, 4, CONTROL_TYPE_ABORT, 17, 999);
        let (h, _) = validate(&b).unwrap();
        assert!(h.is_control() && h.is_transactional());
        assert_eq!(control_record(&b), Some((CONTROL_TYPE_ABORT, 17)));
    }

    #[test]
    fn varints_round_trip() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            300,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(read_varint(&out), Some((v, out.len())));
        }
    }
}
