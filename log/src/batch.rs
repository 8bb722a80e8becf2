//! Zero-copy view of Kafka RecordBatch v2 headers, validation, and the few batch builders the log
//! needs (control markers). Nothing here allocates from a count or length read off the wire:
//! header validation allocates nothing, record validation ([`validate_client_records`]) walks
//! the records in place (or streams them out of a decompressor, whose output is capped) and
//! holds at most a decoder's fixed buffers.
//!
//! Layout (big endian), offsets in bytes:
//! `baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch i32 @12, magic i8 @16,
//! crc u32 @17, attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27,
//! maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53,
//! recordsCount i32 @57, records @61`. The CRC32C covers attributes..end, so the log may stamp
//! baseOffset and partitionLeaderEpoch without recomputing it.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};

use kmirror_types::{LeaderEpoch, Offset};

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

pub const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_MASK: i16 = 0x10;
const CONTROL_MASK: i16 = 0x20;
/// KIP-534: baseTimestamp holds the batch's delete horizon (set by the cleaner).
pub const DELETE_HORIZON_MASK: i16 = 0x40;

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
    /// recordsCount cannot fit the bytes of the records section.
    CountExceedsBytes {
        records_count: i32,
        records_bytes: usize,
    },
    /// The records disagree with the header or are malformed (Kafka: InvalidRecordException,
    /// INVALID_RECORD). `index` is the record at fault.
    InvalidRecords {
        index: i64,
        reason: String,
    },
    /// The records section does not decompress, or uses an unknown codec (CORRUPT_MESSAGE).
    Undecodable(String),
    /// The records decompress to more than the allowed number of bytes (INVALID_RECORD).
    DecompressedTooLarge {
        limit: usize,
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
            BatchError::CountExceedsBytes {
                records_count,
                records_bytes,
            } => write!(
                f,
                "recordsCount {records_count} cannot fit in {records_bytes} bytes of records"
            ),
            BatchError::InvalidRecords { index, reason } => {
                write!(f, "invalid record {index}: {reason}")
            }
            BatchError::Undecodable(e) => write!(f, "records do not decompress: {e}"),
            BatchError::DecompressedTooLarge { limit } => {
                write!(f, "records decompress to more than {limit} bytes")
            }
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

/// Whether the batch's offsets are representable: baseOffset >= 0, lastOffsetDelta >= 0 and
/// baseOffset + lastOffsetDelta + 1 (the next offset) does not overflow i64. Headers from a
/// source cluster or a segment file are checked with this before offset arithmetic.
pub fn offsets_in_range(h: &BatchHeader<'_>) -> bool {
    h.base_offset() >= 0
        && h.last_offset_delta() >= 0
        && h.base_offset()
            .checked_add(h.last_offset_delta() as i64 + 1)
            .is_some()
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

/// Smallest encoded record: length varint, attributes, timestampDelta, offsetDelta, key length,
/// value length and header count, one byte each.
pub const MIN_RECORD_SIZE: usize = 7;

/// Cap on the decompressed size of one produced batch's records when
/// `max.message.bytes` is small: 64 MiB.
pub const MIN_DECOMPRESSED_LIMIT: usize = 64 << 20;

/// Most bytes a produced batch's records may decompress to: 4 × `max.message.bytes`, at
/// least [`MIN_DECOMPRESSED_LIMIT`]. Kafka has no such cap; it bounds the CPU and memory a
/// decompression bomb can take (validation streams, so memory stays at the decoder's buffers).
pub fn decompressed_limit(max_message_bytes: u32) -> usize {
    (max_message_bytes as usize)
        .saturating_mul(4)
        .max(MIN_DECOMPRESSED_LIMIT)
}

/// The records section of a batch whose frame was validated (bytes past batchLength ignored).
fn records_section<'a>(h: &BatchHeader<'a>) -> &'a [u8] {
    let raw = h.raw();
    let end = h.total_size().min(raw.len()).max(HEADER_SIZE);
    &raw[HEADER_SIZE..end]
}

/// Header-against-bytes check for batches stored verbatim (the mirror path), O(1): an
/// uncompressed records section must hold at least [`MIN_RECORD_SIZE`] bytes per claimed
/// record, and records bytes without any record (or records without bytes) are refused.
/// Compressed sections are only checked for the latter (their records are never decoded here;
/// nothing downstream allocates from their count).
pub fn check_count_fits_bytes(h: &BatchHeader<'_>) -> Result<(), BatchError> {
    let count = h.records_count();
    let bytes = records_section(h).len();
    let bad = || BatchError::CountExceedsBytes {
        records_count: count,
        records_bytes: bytes,
    };
    if count < 0 || (count == 0) != (bytes == 0) {
        return Err(bad());
    }
    if h.compression() == Compression::None
        && (count as usize).saturating_mul(MIN_RECORD_SIZE) > bytes
    {
        return Err(bad());
    }
    Ok(())
}

/// Kafka's LogValidator record walk for a producer's batch (after [`validate`] and
/// [`check_client_counts`] passed): decompresses the records section (gzip, snappy, lz4, zstd;
/// at most `max_decompressed` bytes) and checks every record: its length varint matches the
/// bytes its fields take, offsetDelta is its index, key/value lengths are -1 or fit, header
/// counts and header key lengths are not negative and fit, varints are well formed (5 bytes
/// at most for 32-bit ones), and exactly recordsCount records fill the section with no byte
/// left over. Nothing is allocated from any count or length.
pub fn validate_client_records(batch: &[u8], max_decompressed: usize) -> Result<(), BatchError> {
    validate_client_records_with(batch, max_decompressed, &mut |_, _| {})
}

/// [`validate_client_records`], calling `on_record(index, timestamp_delta)` for every record
/// walked (the timestamp checks of Kafka's LogValidator need each record's timestamp).
pub fn validate_client_records_with(
    batch: &[u8],
    max_decompressed: usize,
    on_record: &mut dyn FnMut(i64, i64),
) -> Result<(), BatchError> {
    let h = BatchHeader::parse(batch)?;
    let section = records_section(&h);
    let count = h.records_count();
    let undecodable = |e: io::Error| BatchError::Undecodable(e.to_string());
    match h.compression() {
        Compression::None => walk_records(&mut Walker::new(section), count, on_record),
        Compression::Gzip => {
            let d = flate2::bufread::MultiGzDecoder::new(section);
            walk_decompressed(d, count, max_decompressed, on_record)
        }
        Compression::Snappy => {
            let d = SnappyReader::new(section, max_decompressed);
            walk_decompressed(d, count, max_decompressed, on_record)
        }
        Compression::Lz4 => {
            let d = lz4::Decoder::new(section).map_err(undecodable)?;
            walk_decompressed(d, count, max_decompressed, on_record)
        }
        Compression::Zstd => {
            let d = zstd::stream::read::Decoder::with_buffer(section).map_err(undecodable)?;
            walk_decompressed(d, count, max_decompressed, on_record)
        }
        Compression::Unknown(n) => Err(BatchError::Undecodable(format!(
            "unknown compression codec {n}"
        ))),
    }
}

/// The records section of a stored batch, decompressed (at most `max_decompressed` bytes).
/// For the cleaner, which must see every record of a batch it rewrites.
pub(crate) fn decompress_records(
    batch: &[u8],
    max_decompressed: usize,
) -> Result<Vec<u8>, BatchError> {
    let h = BatchHeader::parse(batch)?;
    let section = records_section(&h);
    let undecodable = |e: io::Error| BatchError::Undecodable(e.to_string());
    fn read_capped<R: Read>(r: R, limit: usize) -> Result<Vec<u8>, BatchError> {
        let mut capped = Capped {
            inner: r,
            left: limit,
            exceeded: false,
        };
        let mut out = Vec::new();
        match capped.read_to_end(&mut out) {
            Ok(_) => Ok(out),
            Err(_) if capped.exceeded => Err(BatchError::DecompressedTooLarge { limit }),
            Err(e) => Err(io_error(e)),
        }
    }
    match h.compression() {
        Compression::None => Ok(section.to_vec()),
        Compression::Gzip => read_capped(
            flate2::bufread::MultiGzDecoder::new(section),
            max_decompressed,
        ),
        Compression::Snappy => read_capped(
            SnappyReader::new(section, max_decompressed),
            max_decompressed,
        ),
        Compression::Lz4 => read_capped(
            lz4::Decoder::new(section).map_err(undecodable)?,
            max_decompressed,
        ),
        Compression::Zstd => read_capped(
            zstd::stream::read::Decoder::with_buffer(section).map_err(undecodable)?,
            max_decompressed,
        ),
        Compression::Unknown(n) => Err(BatchError::Undecodable(format!(
            "unknown compression codec {n}"
        ))),
    }
}

/// Compresses a records section with `codec` in a form Kafka's clients read: gzip, snappy in
/// snappy-java's framing, lz4 frames with independent blocks (Kafka's lz4 reader decodes each
/// block on its own), zstd. `Compression::None` returns the bytes as they are.
pub(crate) fn compress_records(codec: Compression, raw: &[u8]) -> io::Result<Vec<u8>> {
    compress_records_at(codec, raw, None)
}

/// [`compress_records`] at a level (Kafka's compression.gzip.level, compression.lz4.level,
/// compression.zstd.level; None or gzip's -1: the codec's default).
pub(crate) fn compress_records_at(
    codec: Compression,
    raw: &[u8],
    level: Option<i32>,
) -> io::Result<Vec<u8>> {
    use std::io::Write;
    match codec {
        Compression::None => Ok(raw.to_vec()),
        Compression::Gzip => {
            let level = match level {
                Some(l @ 1..=9) => flate2::Compression::new(l as u32),
                _ => flate2::Compression::default(),
            };
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(raw)?;
            e.finish()
        }
        Compression::Snappy => {
            // snappy-java's framing: magic, version 1, compatible version 1, then blocks of
            // (u32 compressed length, raw snappy block) of at most 32 KiB input each.
            let mut out = Vec::with_capacity(raw.len() / 2 + SNAPPY_HEADER);
            out.extend_from_slice(SNAPPY_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut enc = snap::raw::Encoder::new();
            for chunk in raw.chunks(32 << 10) {
                let block = enc.compress_vec(chunk).map_err(io::Error::other)?;
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
        Compression::Lz4 => {
            let mut e = lz4::EncoderBuilder::new()
                .level(level.unwrap_or(0).max(0) as u32)
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::new())?;
            e.write_all(raw)?;
            let (out, res) = e.finish();
            res.map(|()| out)
        }
        Compression::Zstd => zstd::stream::encode_all(raw, level.unwrap_or(3)),
        Compression::Unknown(n) => Err(io::Error::other(format!("unknown codec {n}"))),
    }
}

/// The attribute bits of a codec.
fn codec_bits(codec: Compression) -> i16 {
    match codec {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Snappy => 2,
        Compression::Lz4 => 3,
        Compression::Zstd => 4,
        Compression::Unknown(n) => i16::from(n & 0x07),
    }
}

/// Kafka's LogValidator re-encoding of a producer's batch (already validated) for a topic
/// whose compression.type names a codec other than the batch's: the records section is
/// decompressed and compressed again with `codec` at `level`; the records themselves
/// (offset and timestamp deltas, keys, values, headers) and every other header field stay as
/// they were. With `log_append_time`, the batch is also stamped as [`stamp_log_append_time`]
/// does. The result has a fresh CRC; base offset and leader epoch are left to the caller
/// (they are outside the CRC).
pub fn recompress_client_batch(
    batch: &[u8],
    codec: Compression,
    level: Option<i32>,
    log_append_time: Option<i64>,
    max_decompressed: usize,
) -> Result<Vec<u8>, BatchError> {
    let raw = decompress_records(batch, max_decompressed)?;
    let section = compress_records_at(codec, &raw, level)
        .map_err(|e| BatchError::Undecodable(format!("re-compression failed: {e}")))?;
    let mut out = Vec::with_capacity(HEADER_SIZE + section.len());
    out.extend_from_slice(&batch[..HEADER_SIZE]);
    out.extend_from_slice(&section);
    let length = (out.len() - LENGTH_POS - 4) as i32;
    out[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&length.to_be_bytes());
    let attrs = (be_i16(&out, ATTRIBUTES_POS) & !COMPRESSION_MASK) | codec_bits(codec);
    out[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attrs.to_be_bytes());
    if let Some(t) = log_append_time {
        set_log_append_time(&mut out[..HEADER_SIZE], t);
    }
    let crc = crc32c::crc32c(&out[ATTRIBUTES_POS..]);
    out[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Sets the LogAppendTime bit and maxTimestamp = `t` in a batch header (no CRC update).
fn set_log_append_time(header: &mut [u8], t: i64) {
    let attrs = be_i16(header, ATTRIBUTES_POS) | TIMESTAMP_TYPE_MASK;
    header[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attrs.to_be_bytes());
    header[MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8].copy_from_slice(&t.to_be_bytes());
}

/// The first [`STAMPED_PREFIX`] bytes of a validated batch as Kafka's LogValidator leaves them
/// on a message.timestamp.type=LogAppendTime topic when no re-compression is needed: the
/// timestamp-type bit set, maxTimestamp = the append time `t`, the CRC recomputed over the
/// changed header and the untouched rest (`batch[STAMPED_PREFIX..]`, which the caller writes
/// as it is: no copy of the records). Record timestamps are not rewritten; readers take
/// maxTimestamp as every record's timestamp in a LogAppendTime batch.
pub fn stamp_log_append_time(batch: &[u8], t: i64) -> [u8; STAMPED_PREFIX] {
    let mut pre = [0u8; STAMPED_PREFIX];
    pre.copy_from_slice(&batch[..STAMPED_PREFIX]);
    set_log_append_time(&mut pre, t);
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(&pre[ATTRIBUTES_POS..]),
        &batch[STAMPED_PREFIX..],
    );
    pre[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    pre
}

/// Header bytes [`stamp_log_append_time`] rewrites (up to and including maxTimestamp).
pub const STAMPED_PREFIX: usize = MAX_TIMESTAMP_POS + 8;

/// Buffer between a decompressor and the record walker.
const DECOMPRESS_BUF: usize = 16 << 10;

fn walk_decompressed<R: Read>(
    r: R,
    count: i32,
    limit: usize,
    on_record: &mut dyn FnMut(i64, i64),
) -> Result<(), BatchError> {
    let capped = Capped {
        inner: r,
        left: limit,
        exceeded: false,
    };
    let mut w = Walker::new(BufReader::with_capacity(DECOMPRESS_BUF, capped));
    match walk_records(&mut w, count, on_record) {
        Err(BatchError::DecompressedTooLarge { .. }) => {
            Err(BatchError::DecompressedTooLarge { limit })
        }
        _ if w.r.get_ref().exceeded => Err(BatchError::DecompressedTooLarge { limit }),
        r => r,
    }
}

/// The error a capped decompression stops with.
#[derive(Debug)]
struct CapExceeded;

impl fmt::Display for CapExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("decompressed size limit exceeded")
    }
}

impl std::error::Error for CapExceeded {}

/// A decompressor's error as a batch error (the cap's own error keeps its meaning).
fn io_error(e: io::Error) -> BatchError {
    if e.get_ref().is_some_and(|i| i.is::<CapExceeded>()) {
        BatchError::DecompressedTooLarge { limit: 0 }
    } else {
        BatchError::Undecodable(e.to_string())
    }
}

/// A reader that fails once more than `left` bytes were read through it.
struct Capped<R> {
    inner: R,
    left: usize,
    exceeded: bool,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Ask for one byte more than allowed so that exceeding the cap is seen.
        let want = buf.len().min(self.left.saturating_add(1));
        let n = self.inner.read(&mut buf[..want])?;
        if n > self.left {
            self.exceeded = true;
            return Err(io::Error::other(CapExceeded));
        }
        self.left -= n;
        Ok(n)
    }
}

/// Kafka's snappy framing (snappy-java's SnappyOutputStream): the 8-byte magic
/// `\x82SNAPPY\0`, two 4-byte versions, then blocks of (u32 length, raw snappy block). Input
/// without the magic is one raw snappy block, as snappy-java reads it.
struct SnappyReader<'a> {
    input: &'a [u8],
    framed: bool,
    block: Vec<u8>,
    pos: usize,
    /// Decompressed bytes still allowed (a block claiming more is refused before allocating).
    budget: usize,
    started: bool,
}

const SNAPPY_MAGIC: &[u8] = b"\x82SNAPPY\0";
const SNAPPY_HEADER: usize = 16;
/// Largest expansion of raw snappy (a 3-byte copy op yields at most 64 bytes), rounded up.
const SNAPPY_MAX_RATIO: usize = 24;

impl<'a> SnappyReader<'a> {
    fn new(input: &'a [u8], budget: usize) -> Self {
        SnappyReader {
            input,
            framed: false,
            block: Vec::new(),
            pos: 0,
            budget,
            started: false,
        }
    }

    fn bad(msg: String) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, msg)
    }

    /// Decodes the next block into `self.block`; false at the end of the input.
    fn next_block(&mut self) -> io::Result<bool> {
        if !self.started {
            self.started = true;
            if self.input.starts_with(SNAPPY_MAGIC) {
                if self.input.len() < SNAPPY_HEADER {
                    return Err(Self::bad("truncated snappy header".into()));
                }
                self.framed = true;
                self.input = &self.input[SNAPPY_HEADER..];
            }
        }
        if self.input.is_empty() {
            return Ok(false);
        }
        let block = if self.framed {
            if self.input.len() < 4 {
                return Err(Self::bad("truncated snappy block length".into()));
            }
            let n = u32::from_be_bytes(self.input[..4].try_into().expect("4 bytes")) as usize;
            let rest = &self.input[4..];
            if n > rest.len() {
                return Err(Self::bad(format!(
                    "snappy block of {n} bytes, {} left",
                    rest.len()
                )));
            }
            self.input = &rest[n..];
            &rest[..n]
        } else {
            std::mem::take(&mut self.input)
        };
        let len = snap::raw::decompress_len(block).map_err(|e| Self::bad(e.to_string()))?;
        let most = block
            .len()
            .saturating_mul(SNAPPY_MAX_RATIO)
            .saturating_add(64);
        if len > most {
            return Err(Self::bad(format!(
                "snappy block of {} bytes claims {len} bytes decompressed",
                block.len()
            )));
        }
        if len > self.budget {
            return Err(io::Error::other(CapExceeded));
        }
        self.block.clear();
        self.block.resize(len, 0);
        let n = snap::raw::Decoder::new()
            .decompress(block, &mut self.block)
            .map_err(|e| Self::bad(e.to_string()))?;
        self.block.truncate(n);
        self.budget = self.budget.saturating_sub(n);
        self.pos = 0;
        Ok(true)
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.block.len() - self.pos);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Why a record walk stopped.
enum WalkError {
    Io(io::Error),
    /// Input ended (cleanly) where a byte was needed.
    Eof,
    Invalid(String),
}

impl From<io::Error> for WalkError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            WalkError::Eof
        } else {
            WalkError::Io(e)
        }
    }
}

/// Byte-level reader over a record stream that counts what it consumed.
struct Walker<R> {
    r: R,
    consumed: u64,
}

impl<R: BufRead> Walker<R> {
    fn new(r: R) -> Self {
        Walker { r, consumed: 0 }
    }

    /// Next byte, or None at a clean end of input.
    fn byte_or_end(&mut self) -> Result<Option<u8>, WalkError> {
        let b = match self.r.fill_buf()? {
            [] => return Ok(None),
            b => b[0],
        };
        self.r.consume(1);
        self.consumed += 1;
        Ok(Some(b))
    }

    fn byte(&mut self) -> Result<u8, WalkError> {
        self.byte_or_end()?.ok_or(WalkError::Eof)
    }

    /// Zig-zag varint of at most `max_bytes` bytes whose unsigned form fits `bits`; `first`
    /// is an already-read first byte.
    fn varint_from(&mut self, first: u8, max_bytes: u32, bits: u32) -> Result<i64, WalkError> {
        let mut raw: u64 = (first & 0x7f) as u64;
        let mut b = first;
        let mut i = 1;
        while b & 0x80 != 0 {
            if i == max_bytes {
                return Err(WalkError::Invalid(format!(
                    "varint longer than {max_bytes} bytes"
                )));
            }
            b = self.byte()?;
            raw |= ((b & 0x7f) as u64) << (7 * i);
            i += 1;
        }
        if bits < 64 && raw >> bits != 0 {
            return Err(WalkError::Invalid(format!("varint overflows {bits} bits")));
        }
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    fn varint32(&mut self) -> Result<i64, WalkError> {
        let first = self.byte()?;
        self.varint_from(first, 5, 32)
    }

    fn varint64(&mut self) -> Result<i64, WalkError> {
        let first = self.byte()?;
        self.varint_from(first, 10, 64)
    }

    fn skip(&mut self, mut n: usize) -> Result<(), WalkError> {
        while n > 0 {
            let have = self.r.fill_buf()?.len();
            if have == 0 {
                return Err(WalkError::Eof);
            }
            let k = have.min(n);
            self.r.consume(k);
            self.consumed += k as u64;
            n -= k;
        }
        Ok(())
    }
}

/// Walks exactly `count` records (see [`validate_client_records`]).
fn walk_records<R: BufRead>(
    w: &mut Walker<R>,
    count: i32,
    on_record: &mut dyn FnMut(i64, i64),
) -> Result<(), BatchError> {
    let mut index: i64 = 0;
    let invalid = |index: i64, reason: String| BatchError::InvalidRecords { index, reason };
    loop {
        let first = match w.byte_or_end() {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(WalkError::Io(e)) => return Err(io_error(e)),
            Err(WalkError::Eof) => break,
            Err(WalkError::Invalid(r)) => return Err(invalid(index, r)),
        };
        if index >= count as i64 {
            return Err(invalid(
                index,
                format!("bytes remain after the {count} records the batch declares"),
            ));
        }
        match walk_record(w, first, index) {
            Ok(timestamp_delta) => on_record(index, timestamp_delta),
            Err(WalkError::Io(e)) => return Err(io_error(e)),
            Err(WalkError::Eof) => {
                return Err(invalid(index, "record truncated (premature end)".into()))
            }
            Err(WalkError::Invalid(r)) => return Err(invalid(index, r)),
        }
        index += 1;
    }
    if index != count as i64 {
        return Err(invalid(
            index,
            format!("batch declares {count} records but holds {index}"),
        ));
    }
    Ok(())
}

/// One record, its length varint's first byte already read.
/// Returns the record's timestamp delta.
fn walk_record<R: BufRead>(w: &mut Walker<R>, first: u8, index: i64) -> Result<i64, WalkError> {
    let len = w.varint_from(first, 5, 32)?;
    if len < 0 {
        return Err(WalkError::Invalid(format!("negative record length {len}")));
    }
    let len = len as u64;
    let start = w.consumed;
    // Bytes of this record not yet consumed; a field running past the end is refused.
    let left = |w: &Walker<R>| -> Result<u64, WalkError> {
        len.checked_sub(w.consumed - start)
            .ok_or_else(|| WalkError::Invalid(format!("record fields run past its length {len}")))
    };
    let field = |w: &mut Walker<R>, what: &str, l: i64, nullable: bool| -> Result<(), WalkError> {
        if l < 0 {
            if nullable && l == -1 {
                return Ok(());
            }
            return Err(WalkError::Invalid(format!("{what} length {l}")));
        }
        if l as u64 > left(w)? {
            return Err(WalkError::Invalid(format!(
                "{what} length {l} exceeds the record's {len} bytes"
            )));
        }
        w.skip(l as usize)
    };
    let _attributes = w.byte()?;
    let timestamp_delta = w.varint64()?;
    let offset_delta = w.varint32()?;
    if offset_delta != index {
        return Err(WalkError::Invalid(format!(
            "offsetDelta {offset_delta}, expected {index}"
        )));
    }
    left(w)?;
    let key = w.varint32()?;
    field(w, "key", key, true)?;
    let value = w.varint32()?;
    field(w, "value", value, true)?;
    let headers = w.varint32()?;
    if headers < 0 {
        return Err(WalkError::Invalid(format!("header count {headers}")));
    }
    for _ in 0..headers {
        left(w)?;
        let k = w.varint32()?;
        field(w, "header key", k, false)?;
        let v = w.varint32()?;
        field(w, "header value", v, true)?;
    }
    if left(w)? != 0 {
        return Err(WalkError::Invalid(format!(
            "record length {len} but its fields take {}",
            w.consumed - start
        )));
    }
    Ok(timestamp_delta)
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
/// deltas plus its key. Returns None for compressed batches or malformed records. The vector
/// grows with the records actually present, never from the header's recordsCount.
pub fn uncompressed_records(batch: &[u8]) -> Option<Vec<RecordKey<'_>>> {
    UncompressedRecords::new(batch)?.collect()
}

/// Iterator form of [`uncompressed_records`]: yields `Some(record)` per record and a final
/// `None` (then stops) at the first malformed one. Allocates nothing.
pub struct UncompressedRecords<'a> {
    batch: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> UncompressedRecords<'a> {
    /// None for a batch shorter than a header or a compressed one.
    pub fn new(batch: &'a [u8]) -> Option<Self> {
        let h = BatchHeader::parse(batch).ok()?;
        if h.compression() != Compression::None {
            return None;
        }
        Some(UncompressedRecords {
            batch,
            pos: HEADER_SIZE,
            end: h.total_size().min(batch.len()),
        })
    }

    fn read_one(&mut self) -> Option<RecordKey<'a>> {
        let batch = self.batch;
        let (len, n) = read_varint(batch.get(self.pos..self.end)?)?;
        let start = self.pos + n;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        if end > self.end {
            return None;
        }
        let rec = &batch[start..end];
        let mut p = 1; // attributes
        let (ts, n) = read_varint(rec.get(p..)?)?;
        p += n;
        let (od, n) = read_varint(rec.get(p..)?)?;
        p += n;
        let (klen, n) = read_varint(rec.get(p..)?)?;
        p += n;
        let key = if klen >= 0 {
            Some(rec.get(p..p.checked_add(usize::try_from(klen).ok()?)?)?)
        } else {
            None
        };
        self.pos = end;
        Some((
            RecordPosition {
                timestamp_delta: ts,
                offset_delta: od,
            },
            key,
        ))
    }
}

impl<'a> Iterator for UncompressedRecords<'a> {
    type Item = Option<RecordKey<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.end {
            return None;
        }
        let r = self.read_one();
        if r.is_none() {
            self.pos = self.end;
        }
        Some(r)
    }
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
    let rec = b.get(n..n.checked_add(usize::try_from(len).ok()?)?)?;
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
        let end = p.checked_add(usize::try_from(l).ok()?)?;
        let v = rec.get(*p..end)?;
        *p = end;
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
        write_record(&mut body, i, *k, *v, &[]);
    }
    frame_batch(spec, records.len(), &body)
}

/// A record header: its key (a string, as Kafka's headers have) and optional value.
pub type Header<'a> = (&'a str, Option<&'a [u8]>);

/// One record of [`build_batch_with_headers`].
#[derive(Debug, Clone, Default)]
pub struct RecordParts<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<Header<'a>>,
}

/// [`build_batch`] for records that carry headers (e.g. kmirror's coordinator records, which
/// keep in headers what Kafka's schemas have no field for).
pub fn build_batch_with_headers(spec: &BatchSpec, records: &[RecordParts<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, r) in records.iter().enumerate() {
        write_record(&mut body, i, r.key, r.value, &r.headers);
    }
    frame_batch(spec, records.len(), &body)
}

/// Appends one record (length varint first) at offset delta `index`, timestamp delta 0.
fn write_record(
    body: &mut Vec<u8>,
    index: usize,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) {
    fn nullable(rec: &mut Vec<u8>, b: Option<&[u8]>) {
        match b {
            Some(b) => {
                write_varint(rec, b.len() as i64);
                rec.extend_from_slice(b);
            }
            None => write_varint(rec, -1),
        }
    }
    let mut rec = Vec::with_capacity(
        16 + key.map_or(0, <[u8]>::len)
            + value.map_or(0, <[u8]>::len)
            + headers
                .iter()
                .map(|(k, v)| 4 + k.len() + v.map_or(0, <[u8]>::len))
                .sum::<usize>(),
    );
    rec.push(0); // attributes
    write_varint(&mut rec, 0); // timestamp delta
    write_varint(&mut rec, index as i64); // offset delta
    nullable(&mut rec, key);
    nullable(&mut rec, value);
    write_varint(&mut rec, headers.len() as i64);
    for (k, v) in headers {
        nullable(&mut rec, Some(k.as_bytes()));
        nullable(&mut rec, *v);
    }
    write_varint(body, rec.len() as i64);
    body.extend_from_slice(&rec);
}

/// The header of `n` records in `body` (built by [`write_record`]), then `body`, with its CRC.
fn frame_batch(spec: &BatchSpec, n: usize, body: &[u8]) -> Vec<u8> {
    let n = n as i32;
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
    out.extend_from_slice(body);
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

/// The whole batches at the front of fetched bytes (a Fetch response's records for one
/// partition), as a zero-copy slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WholeBatches {
    pub bytes: bytes::Bytes,
    pub first_base: Offset,
    pub last_offset: Offset,
    /// The largest partition leader epoch stamped in them.
    pub max_epoch: LeaderEpoch,
}

/// Splits fetched bytes into the prefix of whole batches; None if there is none. Incomplete
/// trailing data (Kafka may cut the last batch at the size limit) is left out.
pub fn whole_batches(records: &bytes::Bytes) -> Option<WholeBatches> {
    let mut pos = 0usize;
    let mut first = None;
    let mut last = -1i64;
    let mut max_epoch = -1i32;
    while records.len() - pos >= LAST_OFFSET_DELTA_POS + 4 {
        let b = &records[pos..];
        let base = i64::from_be_bytes(b[0..8].try_into().expect("8"));
        let len = i32::from_be_bytes(b[LENGTH_POS..LENGTH_POS + 4].try_into().expect("4"));
        if len <= 0 {
            break;
        }
        let total = LOG_OVERHEAD + len as usize;
        if b.len() < total {
            break;
        }
        let epoch = i32::from_be_bytes(
            b[PARTITION_LEADER_EPOCH_POS..PARTITION_LEADER_EPOCH_POS + 4]
                .try_into()
                .expect("4"),
        );
        let delta = i32::from_be_bytes(
            b[LAST_OFFSET_DELTA_POS..LAST_OFFSET_DELTA_POS + 4]
                .try_into()
                .expect("4"),
        );
        first.get_or_insert(base);
        last = base + i64::from(delta);
        max_epoch = max_epoch.max(epoch);
        pos += total;
    }
    first.map(|f| WholeBatches {
        bytes: records.slice(..pos),
        first_base: Offset(f),
        last_offset: Offset(last),
        max_epoch: LeaderEpoch(max_epoch),
    })
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
    fn whole_batches_stop_before_a_batch_cut_at_the_size_limit() {
        let mut second = sample(2);
        second[..8].copy_from_slice(&103i64.to_be_bytes());
        second[12..16].copy_from_slice(&9i32.to_be_bytes());
        let mut fetched = sample(3);
        fetched.extend_from_slice(&second);
        let whole_len = fetched.len();
        fetched.extend_from_slice(&sample(4)[..30]);
        let w = whole_batches(&bytes::Bytes::from(fetched)).unwrap();
        assert_eq!(w.bytes.len(), whole_len);
        assert_eq!((w.first_base, w.last_offset), (Offset(100), Offset(104)));
        assert_eq!(w.max_epoch, LeaderEpoch(9));
        let cut = bytes::Bytes::copy_from_slice(&sample(1)[..40]);
        assert_eq!(whole_batches(&cut), None);
        assert_eq!(whole_batches(&bytes::Bytes::new()), None);
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

    /// A batch with the given header fields around `records` (already encoded, possibly
    /// compressed), with a correct CRC.
    pub(crate) fn raw_batch(attributes: i16, count: i32, lod: i32, records: &[u8]) -> Vec<u8> {
        let mut b = build_batch(
            &BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 0,
                attributes,
                base_timestamp: 1_000,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            },
            &[],
        );
        b.truncate(HEADER_SIZE);
        b.extend_from_slice(records);
        let len = (b.len() - LOG_OVERHEAD) as i32;
        b[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&len.to_be_bytes());
        b[LAST_OFFSET_DELTA_POS..LAST_OFFSET_DELTA_POS + 4].copy_from_slice(&lod.to_be_bytes());
        b[RECORDS_COUNT_POS..RECORDS_COUNT_POS + 4].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&b[ATTRIBUTES_POS..]);
        b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// The encoded records section of `n` sample records.
    pub(crate) fn records_of(n: usize) -> Vec<u8> {
        sample(n)[HEADER_SIZE..].to_vec()
    }

    /// The batch of issue 8 hole 2: one record, recordsCount 2^31-1, lastOffsetDelta 2^31-2.
    pub(crate) fn one_record_claiming_i32_max() -> Vec<u8> {
        raw_batch(0, i32::MAX, i32::MAX - 1, &records_of(1))
    }

    fn walk(b: &[u8]) -> Result<(), BatchError> {
        validate_client_records(b, MIN_DECOMPRESSED_LIMIT)
    }

    #[test]
    fn one_record_claiming_i32_max_records_is_refused() {
        let b = one_record_claiming_i32_max();
        // Frame, CRC and count/offset agreement all pass: only the record walk sees the lie.
        let (h, _) = validate(&b).unwrap();
        check_client_counts(&h).unwrap();
        let e = walk(&b).unwrap_err();
        assert!(
            matches!(e, BatchError::InvalidRecords { index: 1, .. }),
            "{e}"
        );
        // The mirror path's O(1) check refuses it too.
        assert!(matches!(
            check_count_fits_bytes(&h),
            Err(BatchError::CountExceedsBytes { .. })
        ));
        // Walking its records allocates nothing from the count.
        assert_eq!(uncompressed_records(&b).unwrap().len(), 1);
    }

    #[test]
    fn well_formed_batches_pass_the_record_walk() {
        for n in [1, 2, 50] {
            let b = sample(n);
            walk(&b).unwrap();
            let (h, _) = validate(&b).unwrap();
            check_count_fits_bytes(&h).unwrap();
        }
        walk(&zero_crc_batch()).unwrap();
        // Null key and value, and headers.
        let mut rec = vec![0u8];
        for v in [0i64, 0, -1, -1, 2, 1] {
            write_varint(&mut rec, v);
        }
        rec.push(b'h');
        write_varint(&mut rec, -1);
        write_varint(&mut rec, 2);
        rec.extend_from_slice(b"k2");
        write_varint(&mut rec, 1);
        rec.push(b'v');
        let mut section = Vec::new();
        write_varint(&mut section, rec.len() as i64);
        section.extend_from_slice(&rec);
        walk(&raw_batch(0, 1, 0, &section)).unwrap();
    }

    /// One record whose body is `fields` (varints) followed by `tail`, length varint `len` or
    /// the true length.
    fn record(fields: &[i64], tail: &[u8], len: Option<i64>) -> Vec<u8> {
        let mut rec = vec![0u8];
        for &f in fields {
            write_varint(&mut rec, f);
        }
        rec.extend_from_slice(tail);
        let mut out = Vec::new();
        write_varint(&mut out, len.unwrap_or(rec.len() as i64));
        out.extend_from_slice(&rec);
        out
    }

    #[test]
    fn malformed_records_are_invalid_records() {
        let good = {
            let mut r = vec![0u8];
            for f in [0i64, 0, 1] {
                write_varint(&mut r, f);
            }
            r.push(b'k');
            write_varint(&mut r, 1);
            r.push(b'v');
            write_varint(&mut r, 0);
            let mut out = Vec::new();
            write_varint(&mut out, r.len() as i64);
            out.extend_from_slice(&r);
            out
        };
        walk(&raw_batch(0, 1, 0, &good)).unwrap();
        let cases: Vec<(&str, Vec<u8>, i32)> = vec![
            ("trailing byte", [&good[..], &[0u8][..]].concat(), 1),
            ("two records declared, one present", good.clone(), 2),
            (
                "length says one byte more",
                {
                    let mut g = good.clone();
                    g[0] += 2; // zig-zag: +1
                    g.push(0);
                    g
                },
                1,
            ),
            (
                "length says one byte less",
                {
                    let mut g = good.clone();
                    g[0] -= 2;
                    g
                },
                1,
            ),
            (
                "negative record length",
                record(&[0, 0, -1, -1, 0], b"", Some(-3)),
                1,
            ),
            (
                "offsetDelta 5 for record 0",
                record(&[0, 5, -1, -1, 0], b"", None),
                1,
            ),
            (
                "key length past the record",
                record(&[0, 0, 100], b"k", None),
                1,
            ),
            ("key length -2", record(&[0, 0, -2, -1, 0], b"", None), 1),
            (
                "value length past the record",
                record(&[0, 0, -1, 50], b"v", None),
                1,
            ),
            (
                "negative header count",
                record(&[0, 0, -1, -1, -1], b"", None),
                1,
            ),
            (
                "huge header count",
                record(&[0, 0, -1, -1, i32::MAX as i64], b"", None),
                1,
            ),
            (
                "negative header key length",
                record(&[0, 0, -1, -1, 1, -1, -1], b"", None),
                1,
            ),
            (
                "offsetDelta varint of 6 bytes",
                {
                    let mut r = vec![0u8, 0];
                    r.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]);
                    r.extend_from_slice(&[1, 1, 0]);
                    let mut out = Vec::new();
                    write_varint(&mut out, r.len() as i64);
                    out.extend_from_slice(&r);
                    out
                },
                1,
            ),
            (
                "offsetDelta overflowing 32 bits",
                {
                    let mut r = vec![0u8, 0];
                    r.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x7f]);
                    r.extend_from_slice(&[1, 1, 0]);
                    let mut out = Vec::new();
                    write_varint(&mut out, r.len() as i64);
                    out.extend_from_slice(&r);
                    out
                },
                1,
            ),
            ("record truncated", good[..good.len() - 2].to_vec(), 1),
        ];
        for (name, section, count) in cases {
            let b = raw_batch(0, count, count - 1, &section);
            let e = walk(&b).expect_err(name);
            assert!(
                matches!(e, BatchError::InvalidRecords { .. }),
                "{name}: {e}"
            );
        }
    }

    fn compress(codec: u8, data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        match codec {
            1 => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            2 => {
                // snappy-java framing: magic, versions, (length, raw block) per 32 KiB.
                let mut out = SNAPPY_MAGIC.to_vec();
                out.extend_from_slice(&1i32.to_be_bytes());
                out.extend_from_slice(&1i32.to_be_bytes());
                for chunk in data.chunks(32 << 10) {
                    let c = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
                    out.extend_from_slice(&(c.len() as u32).to_be_bytes());
                    out.extend_from_slice(&c);
                }
                out
            }
            3 => {
                let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
                e.write_all(data).unwrap();
                let (out, r) = e.finish();
                r.unwrap();
                out
            }
            4 => zstd::encode_all(data, 3).unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn compressed_batches_are_walked_after_decompression() {
        for codec in 1..=4u8 {
            let recs = records_of(20);
            let z = compress(codec, &recs);
            walk(&raw_batch(codec as i16, 20, 19, &z))
                .unwrap_or_else(|e| panic!("codec {codec}: {e}"));
            // Unframed snappy is one raw block, as snappy-java reads it.
            if codec == 2 {
                let raw = snap::raw::Encoder::new().compress_vec(&recs).unwrap();
                walk(&raw_batch(2, 20, 19, &raw)).unwrap();
            }
            // A count the decompressed records do not match.
            let e = walk(&raw_batch(codec as i16, i32::MAX, i32::MAX - 1, &z)).unwrap_err();
            assert!(
                matches!(e, BatchError::InvalidRecords { .. }),
                "codec {codec}: {e}"
            );
            // Garbage that does not decompress.
            let e = walk(&raw_batch(codec as i16, 1, 0, &[0x13; 40])).unwrap_err();
            assert!(
                matches!(
                    e,
                    BatchError::Undecodable(_) | BatchError::InvalidRecords { .. }
                ),
                "codec {codec}: {e}"
            );
            // A stream cut short.
            let e = walk(&raw_batch(codec as i16, 20, 19, &z[..z.len() / 2])).unwrap_err();
            assert!(
                matches!(
                    e,
                    BatchError::Undecodable(_) | BatchError::InvalidRecords { .. }
                ),
                "codec {codec}: {e}"
            );
        }
        let e = walk(&raw_batch(5, 1, 0, &records_of(1))).unwrap_err();
        assert!(matches!(e, BatchError::Undecodable(_)), "{e}");
    }

    #[test]
    fn decompression_is_capped() {
        // 300 records of 64 KiB zeros: 19 MiB decompressed from a few KiB.
        let big = vec![0u8; 64 << 10];
        let recs: Vec<KeyValue<'_>> = (0..300).map(|_| (None, Some(&big[..]))).collect();
        let plain = build_batch(
            &BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 0,
                attributes: 0,
                base_timestamp: 0,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            },
            &recs,
        );
        let section = &plain[HEADER_SIZE..];
        for codec in 1..=4u8 {
            let z = compress(codec, section);
            let b = raw_batch(codec as i16, 300, 299, &z);
            validate_client_records(&b, section.len()).unwrap();
            let e = validate_client_records(&b, 1 << 20).unwrap_err();
            assert_eq!(
                e,
                BatchError::DecompressedTooLarge { limit: 1 << 20 },
                "codec {codec}"
            );
        }
        // A raw snappy block claiming far more than its bytes can expand to.
        let mut lie = Vec::new();
        let mut n = 60u64 << 20;
        while n >= 0x80 {
            lie.push((n as u8) | 0x80);
            n >>= 7;
        }
        lie.push(n as u8);
        lie.extend_from_slice(&[0; 8]);
        let e = walk(&raw_batch(2, 1, 0, &lie)).unwrap_err();
        assert!(matches!(e, BatchError::Undecodable(_)), "{e}");
        assert_eq!(decompressed_limit(1 << 20), MIN_DECOMPRESSED_LIMIT);
        assert_eq!(decompressed_limit(100 << 20), 400 << 20);
    }

    #[test]
    fn mirror_count_check_bounds_the_count_by_the_bytes() {
        let b = sample(3);
        let (h, _) = validate(&b).unwrap();
        check_count_fits_bytes(&h).unwrap();
        // Compaction may leave fewer records than offsets: still fine.
        let b = raw_batch(0, 1, 9, &records_of(1));
        check_count_fits_bytes(&validate(&b).unwrap().0).unwrap();
        // An empty batch (all records compacted away) is fine, bytes without a record are not.
        let empty = raw_batch(0, 0, 0, &[]);
        check_count_fits_bytes(&validate(&empty).unwrap().0).unwrap();
        let b = raw_batch(0, 0, 0, &records_of(1));
        assert!(check_count_fits_bytes(&validate(&b).unwrap().0).is_err());
        let b = raw_batch(0, 1000, 999, &records_of(3));
        assert!(check_count_fits_bytes(&validate(&b).unwrap().0).is_err());
    }

    /// Writes the fuzz seed corpora of the log targets (fuzz/corpus/{produce_batch,
    /// mirror_append,segment_recovery}) into `$KMIRROR_FUZZ_SEEDS`:
    /// `KMIRROR_FUZZ_SEEDS=$PWD/fuzz/corpus cargo test -p kmirror-log --lib write_fuzz_seeds -- --ignored`
    #[test]
    #[ignore = "writes the fuzz seed corpora; run by hand"]
    fn write_fuzz_seeds() {
        let root = std::path::PathBuf::from(std::env::var("KMIRROR_FUZZ_SEEDS").unwrap());
        let write = |target: &str, name: &str, mode: u8, bytes: &[u8]| {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            let mut b = vec![mode];
            b.extend_from_slice(bytes);
            std::fs::write(dir.join(name), b).unwrap();
        };
        let with_headers = {
            let mut rec = vec![0u8];
            for v in [0i64, 0, 1] {
                write_varint(&mut rec, v);
            }
            rec.push(b'k');
            write_varint(&mut rec, 1);
            rec.push(b'v');
            write_varint(&mut rec, 1);
            write_varint(&mut rec, 1);
            rec.push(b'h');
            write_varint(&mut rec, -1);
            let mut section = Vec::new();
            write_varint(&mut section, rec.len() as i64);
            section.extend_from_slice(&rec);
            raw_batch(0, 1, 0, &section)
        };
        let idempotent = build_batch(
            &BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 0,
                attributes: 0,
                base_timestamp: 10,
                producer_id: 7,
                producer_epoch: 0,
                base_sequence: 0,
            },
            &[(Some(&b"a"[..]), Some(&b"b"[..])), (None, Some(&b"c"[..]))],
        );
        let txn = build_batch(
            &BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 0,
                attributes: TRANSACTIONAL_ATTRIBUTES,
                base_timestamp: 10,
                producer_id: 9,
                producer_epoch: 1,
                base_sequence: 0,
            },
            &[(None, Some(&b"t"[..]))],
        );
        let mut leader: Vec<(String, Vec<u8>)> = vec![
            ("one".into(), sample(1)),
            ("three".into(), sample(3)),
            ("headers".into(), with_headers),
            ("idempotent".into(), idempotent),
            ("transactional".into(), txn),
            ("zero-crc".into(), zero_crc_batch()),
            ("claims-i32-max".into(), one_record_claiming_i32_max()),
        ];
        for codec in 1..=4u8 {
            let z = compress(codec, &records_of(5));
            leader.push((format!("codec-{codec}"), raw_batch(codec as i16, 5, 4, &z)));
        }
        for (name, b) in &leader {
            write("produce_batch", name, 0, b);
            write("produce_batch", &format!("{name}-fixed"), 3, b);
        }
        // Mirror path: the same batches at source offsets, concatenated runs, control batches.
        let at = |b: &[u8], off: i64| {
            let mut b = b.to_vec();
            b[..8].copy_from_slice(&off.to_be_bytes());
            b
        };
        let mut run = Vec::new();
        let mut next = 0i64;
        for (_, b) in leader.iter().filter(|(n, _)| n != "claims-i32-max") {
            let (h, _) = validate(b).unwrap();
            run.extend_from_slice(&at(b, next));
            next += h.last_offset_delta() as i64 + 1 + 3; // gaps, as compaction leaves
        }
        let marker = build_control_batch(next, 2, 9, 1, CONTROL_TYPE_COMMIT, 4, 20);
        run.extend_from_slice(&marker);
        let reset = build_control_batch(next + 1, 3, -1, -1, CONTROL_TYPE_MIRROR_PID_RESET, -1, 21);
        for (name, b) in &leader {
            write("mirror_append", name, 0, &at(b, 42));
        }
        write("mirror_append", "run", 0, &run);
        write("mirror_append", "run-fixed", 1, &run);
        write(
            "mirror_append",
            "control-abort",
            0,
            &build_control_batch(1, 0, 9, 1, CONTROL_TYPE_ABORT, 0, 5),
        );
        write("mirror_append", "pid-reset", 0, &reset);
        // Recovery: a clean segment, one cut mid-batch, one with a flipped bit in the middle.
        let mut seg = run.clone();
        seg.extend_from_slice(&reset);
        write("segment_recovery", "clean", 0, &seg);
        write("segment_recovery", "torn-tail", 0, &seg[..seg.len() - 7]);
        let mut flipped = seg.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x40;
        write("segment_recovery", "flipped-bit", 0, &flipped);
        write("segment_recovery", "flipped-bit-fixed", 1, &flipped);
        write("segment_recovery", "empty", 0, &[]);
    }

    #[test]
    fn batch_with_headers_writes_kafka_record_headers() {
        let spec = BatchSpec {
            base_offset: 5,
            partition_leader_epoch: 1,
            attributes: 0,
            base_timestamp: 77,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        };
        // Without headers it is build_batch, byte for byte.
        let kv: [KeyValue<'_>; 2] = [(Some(b"k"), Some(b"v")), (None, None)];
        let parts: Vec<RecordParts<'_>> = kv
            .iter()
            .map(|&(key, value)| RecordParts {
                key,
                value,
                headers: Vec::new(),
            })
            .collect();
        assert_eq!(
            build_batch_with_headers(&spec, &parts),
            build_batch(&spec, &kv)
        );

        let b = build_batch_with_headers(
            &spec,
            &[RecordParts {
                key: Some(b"k"),
                value: None,
                headers: vec![("h", Some(b"xy")), ("n", None)],
            }],
        );
        let (h, total) = validate(&b).unwrap();
        assert_eq!(
            (total, h.records_count(), h.max_timestamp()),
            (b.len(), 1, 77)
        );
        validate_client_records(&b, 1 << 20).unwrap();
        // attributes, timestampDelta 0, offsetDelta 0, key "k", null value, 2 headers:
        // ("h", "xy"), ("n", null); varints zig-zag encoded.
        let rec = [0, 0, 0, 2, b'k', 1, 4, 2, b'h', 4, b'x', b'y', 2, b'n', 1];
        let mut section = Vec::new();
        write_varint(&mut section, rec.len() as i64);
        section.extend_from_slice(&rec);
        assert_eq!(&b[HEADER_SIZE..], &section[..]);
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
