//! RecordBatch v2 bytes: a minimal builder (so tests control every byte, including a broken
//! CRC) and a splitter that walks raw fetch payloads batch by batch without re-encoding.

use bytes::{BufMut, Bytes, BytesMut};

/// Byte offsets of RecordBatch v2 header fields (Kafka's DefaultRecordBatch layout).
pub mod layout {
    /// baseOffset: i64
    pub const BASE_OFFSET: usize = 0;
    /// batchLength: i32 (bytes after this field)
    pub const LENGTH: usize = 8;
    /// partitionLeaderEpoch: i32
    pub const LEADER_EPOCH: usize = 12;
    /// magic: i8
    pub const MAGIC: usize = 16;
    /// crc: u32 (CRC32C of attributes..end)
    pub const CRC: usize = 17;
    /// attributes: i16
    pub const ATTRIBUTES: usize = 21;
    /// lastOffsetDelta: i32
    pub const LAST_OFFSET_DELTA: usize = 23;
    /// baseTimestamp: i64
    pub const BASE_TIMESTAMP: usize = 27;
    /// maxTimestamp: i64
    pub const MAX_TIMESTAMP: usize = 35;
    /// producerId: i64
    pub const PRODUCER_ID: usize = 43;
    /// producerEpoch: i16
    pub const PRODUCER_EPOCH: usize = 51;
    /// baseSequence: i32
    pub const BASE_SEQUENCE: usize = 53;
    /// records count: i32
    pub const RECORDS_COUNT: usize = 57;
    /// first record
    pub const RECORDS: usize = 61;

    /// The header field that contains byte `at`, for diff messages.
    pub fn field_at(at: usize) -> &'static str {
        match at {
            0..=7 => "baseOffset",
            8..=11 => "batchLength",
            12..=15 => "partitionLeaderEpoch",
            16 => "magic",
            17..=20 => "crc",
            21..=22 => "attributes",
            23..=26 => "lastOffsetDelta",
            27..=34 => "baseTimestamp",
            35..=42 => "maxTimestamp",
            43..=50 => "producerId",
            51..=52 => "producerEpoch",
            53..=56 => "baseSequence",
            57..=60 => "recordsCount",
            _ => "records",
        }
    }
}

fn put_varint(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

/// An uncompressed, non-transactional, non-idempotent RecordBatch v2 with `values` as record
/// values (null keys, no headers), base offset 0, all records at `timestamp_ms`.
pub fn batch(values: &[&[u8]], timestamp_ms: i64) -> Bytes {
    let records: Vec<(Option<&[u8]>, &[u8])> = values.iter().map(|v| (None, *v)).collect();
    keyed_batch(&records, timestamp_ms)
}

/// [`batch`] with a key per record (None = null key), e.g. for compacted topics.
pub fn keyed_batch(kvs: &[(Option<&[u8]>, &[u8])], timestamp_ms: i64) -> Bytes {
    let values = kvs;
    let mut records = BytesMut::new();
    for (i, (k, v)) in values.iter().enumerate() {
        let mut r = BytesMut::new();
        r.put_i8(0); // attributes
        put_varint(&mut r, 0); // timestamp delta
        put_varint(&mut r, i as i64); // offset delta
        match k {
            Some(k) => {
                put_varint(&mut r, k.len() as i64);
                r.put_slice(k);
            }
            None => put_varint(&mut r, -1),
        }
        put_varint(&mut r, v.len() as i64);
        r.put_slice(v);
        put_varint(&mut r, 0); // no headers
        put_varint(&mut records, r.len() as i64);
        records.put_slice(&r);
    }
    let mut b = BytesMut::new();
    b.put_i64(0);
    b.put_i32(0); // length, patched below
    b.put_i32(-1); // partition leader epoch: the broker assigns it
    b.put_i8(2);
    b.put_u32(0); // crc, patched below
    b.put_i16(0);
    b.put_i32(values.len().saturating_sub(1) as i32);
    b.put_i64(timestamp_ms);
    b.put_i64(timestamp_ms);
    b.put_i64(-1);
    b.put_i16(-1);
    b.put_i32(-1);
    b.put_i32(values.len() as i32);
    b.put_slice(&records);
    let len = (b.len() - 12) as i32;
    b[layout::LENGTH..layout::LENGTH + 4].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[layout::ATTRIBUTES..]);
    b[layout::CRC..layout::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// The same batch with one bit of its first record's value flipped, CRC left as it was.
pub fn with_broken_crc(batch: &Bytes) -> Bytes {
    let mut b = BytesMut::from(&batch[..]);
    let last = b.len() - 2; // inside the last record's value (headers count is the last byte)
    b[last] ^= 0x01;
    b.freeze()
}

/// The same batch claiming `count` records (lastOffsetDelta `count - 1`, so the two header
/// fields agree), CRC recomputed: only walking the records shows the lie.
pub fn with_claimed_count(batch: &Bytes, count: i32) -> Bytes {
    let mut b = BytesMut::from(&batch[..]);
    b[layout::LAST_OFFSET_DELTA..layout::LAST_OFFSET_DELTA + 4]
        .copy_from_slice(&(count - 1).to_be_bytes());
    b[layout::RECORDS_COUNT..layout::RECORDS_COUNT + 4].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&b[layout::ATTRIBUTES..]);
    b[layout::CRC..layout::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// Whether a batch is a control batch (attributes bit 5).
pub fn is_control(batch: &[u8]) -> bool {
    let attrs = u16::from_be_bytes([batch[layout::ATTRIBUTES], batch[layout::ATTRIBUTES + 1]]);
    attrs & 0x20 != 0
}

/// One complete batch inside a fetch payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawBatch {
    /// First offset in the batch.
    pub base_offset: i64,
    /// Last offset in the batch.
    pub last_offset: i64,
    /// The whole batch, header included, exactly as served.
    pub bytes: Bytes,
}

impl RawBatch {
    /// Whether the stored CRC32C matches the batch content (magic 2 only).
    pub fn crc_ok(&self) -> bool {
        if self.bytes.len() < layout::RECORDS || self.bytes[layout::MAGIC] != 2 {
            return false;
        }
        let stored = u32::from_be_bytes(
            self.bytes[layout::CRC..layout::CRC + 4]
                .try_into()
                .expect("4 bytes"),
        );
        stored == crc32c::crc32c(&self.bytes[layout::ATTRIBUTES..])
    }
}

/// Splits a fetch payload into complete batches; a trailing partial batch (allowed by the
/// protocol when max bytes cuts it) is dropped.
pub fn split_batches(payload: &Bytes) -> Vec<RawBatch> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while payload.len() - at >= 12 + 5 {
        let base_offset = crate::wire::be_i64(payload, at);
        let len = crate::wire::be_i32(payload, at + layout::LENGTH);
        if len < 5 {
            break;
        }
        let end = at + 12 + len as usize;
        if end > payload.len() {
            break;
        }
        let bytes = payload.slice(at..end);
        let last_offset = if bytes[layout::MAGIC] >= 2 && bytes.len() >= layout::RECORDS {
            base_offset + i64::from(crate::wire::be_i32(&bytes, layout::LAST_OFFSET_DELTA))
        } else {
            base_offset
        };
        out.push(RawBatch {
            base_offset,
            last_offset,
            bytes,
        });
        at = end;
    }
    out
}

/// Every record of the complete batches in `payload` as (offset, value), decoded with the
/// kafka-protocol crate (all codecs).
pub fn decode_values(payload: &Bytes) -> Result<Vec<(i64, Option<Bytes>)>, String> {
    let mut out = Vec::new();
    for b in split_batches(payload) {
        let mut buf = b.bytes.clone();
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf)
            .map_err(|e| format!("decode batch at {}: {e:#}", b.base_offset))?;
        out.extend(set.records.into_iter().map(|r| (r.offset, r.value)));
    }
    Ok(out)
}
