//! SPEC's test oracle, "log-equal(X)": every batch below offset X read from source and
//! destination by Fetch is byte-identical (CRC included) with the same offset gaps.

use crate::records::{layout, split_batches, RawBatch};
use crate::wire::WireClient;

/// What [`log_equal`] compared when the logs are equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEqualReport {
    /// Batches compared.
    pub batches: usize,
    /// Log start offset (same on both sides).
    pub log_start: i64,
    /// Sum of batch sizes compared, in bytes.
    pub bytes: u64,
}

/// Reads every batch of `topic`/`partition` that starts below `upto`, from the log start,
/// with consumer Fetch (replica id -1, read_uncommitted), from the partition leader reached
/// through `bootstrap`. Checks each batch's CRC on the way.
pub fn read_batches(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    upto: i64,
) -> Result<(i64, Vec<RawBatch>), String> {
    let ctx = |e: crate::wire::WireError| format!("{bootstrap} {topic}-{partition}: {e}");
    let mut c = WireClient::connect_leader(bootstrap, topic, partition).map_err(ctx)?;
    let log_start = c.list_offset(topic, partition, -2).map_err(ctx)?;
    let mut next = log_start;
    let mut out: Vec<RawBatch> = Vec::new();
    while next < upto {
        let p = c
            .fetch_raw(topic, partition, next, 32 << 20, false)
            .map_err(ctx)?;
        if p.error_code != 0 {
            return Err(format!(
                "{bootstrap} {topic}-{partition}: fetch at {next}: error code {}",
                p.error_code
            ));
        }
        let payload = p.records.unwrap_or_default();
        let batches = split_batches(&payload);
        let mut progressed = false;
        for b in batches {
            // A fetch may start with a batch that holds `next` but begins earlier.
            if b.last_offset < next {
                continue;
            }
            if b.base_offset >= upto {
                next = upto;
                break;
            }
            if !b.crc_ok() {
                return Err(format!(
                    "{bootstrap} {topic}-{partition}: batch at {} fails its CRC",
                    b.base_offset
                ));
            }
            next = b.last_offset + 1;
            out.push(b);
            progressed = true;
        }
        if !progressed && next < upto {
            return Err(format!(
                "{bootstrap} {topic}-{partition}: log ends at {next} (high watermark {}), below {upto}",
                p.high_watermark
            ));
        }
    }
    Ok((log_start, out))
}

/// SPEC's log-equal: `Ok` with what was compared, or `Err` with the first difference.
pub fn log_equal(
    src: &str,
    dst: &str,
    topic: &str,
    partition: i32,
    upto: i64,
) -> Result<LogEqualReport, String> {
    let (src_start, a) = read_batches(src, topic, partition, upto)?;
    let (dst_start, b) = read_batches(dst, topic, partition, upto)?;
    if src_start != dst_start {
        return Err(format!(
            "{topic}-{partition}: log start offset differs: source {src_start}, destination {dst_start}"
        ));
    }
    compare_batches(topic, partition, &a, &b)?;
    Ok(LogEqualReport {
        batches: a.len(),
        log_start: src_start,
        bytes: a.iter().map(|x| x.bytes.len() as u64).sum(),
    })
}

/// Log-equal for a mirror that started at a later source offset (`add --start`): the
/// destination's log start S must be a source batch boundary, and from S up to `upto` both
/// logs hold the same batches, byte for byte.
pub fn log_equal_from_destination_start(
    src: &str,
    dst: &str,
    topic: &str,
    partition: i32,
    upto: i64,
) -> Result<LogEqualReport, String> {
    let (dst_start, b) = read_batches(dst, topic, partition, upto)?;
    let (_, mut a) = read_batches(src, topic, partition, upto)?;
    a.retain(|x| x.last_offset >= dst_start);
    if let Some(first) = a.first() {
        if first.base_offset != dst_start {
            return Err(format!(
                "{topic}-{partition}: destination starts at {dst_start}, inside the source batch {}..={}",
                first.base_offset, first.last_offset
            ));
        }
    }
    compare_batches(topic, partition, &a, &b)?;
    Ok(LogEqualReport {
        batches: a.len(),
        log_start: dst_start,
        bytes: a.iter().map(|x| x.bytes.len() as u64).sum(),
    })
}

/// The first difference between two batch lists, if any (offset gaps, bytes, count).
fn compare_batches(
    topic: &str,
    partition: i32,
    a: &[RawBatch],
    b: &[RawBatch],
) -> Result<(), String> {
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        if x.base_offset != y.base_offset || x.last_offset != y.last_offset {
            return Err(format!(
                "{topic}-{partition}: batch #{i}: source covers {}..={}, destination {}..={} (offset gap differs)",
                x.base_offset, x.last_offset, y.base_offset, y.last_offset
            ));
        }
        if x.bytes != y.bytes {
            let at = x
                .bytes
                .iter()
                .zip(y.bytes.iter())
                .position(|(p, q)| p != q)
                .unwrap_or(x.bytes.len().min(y.bytes.len()));
            return Err(format!(
                "{topic}-{partition}: batch at offset {}: bytes differ from byte {at} ({}); lengths {} vs {}",
                x.base_offset,
                layout::field_at(at),
                x.bytes.len(),
                y.bytes.len()
            ));
        }
    }
    if a.len() != b.len() {
        let (longer, name) = if a.len() > b.len() {
            (&a, "source")
        } else {
            (&b, "destination")
        };
        let extra = &longer[a.len().min(b.len())];
        return Err(format!(
            "{topic}-{partition}: only the {name} has batch at offset {} (source {} batches, destination {})",
            extra.base_offset,
            a.len(),
            b.len()
        ));
    }
    Ok(())
}

/// Every record (offset, value) of `topic`/`partition` from log start to log end, read with
/// consumer Fetch (read_uncommitted) from its leader.
pub fn read_records(
    bootstrap: &str,
    topic: &str,
    partition: i32,
) -> Result<Vec<(i64, Option<bytes::Bytes>)>, String> {
    let ctx = |e: crate::wire::WireError| format!("{bootstrap} {topic}-{partition}: {e}");
    let mut c = WireClient::connect_leader(bootstrap, topic, partition).map_err(ctx)?;
    let (start, end) = c.log_bounds(topic, partition).map_err(ctx)?;
    let (_, batches) = read_batches(bootstrap, topic, partition, end)?;
    let mut out = Vec::new();
    for b in batches {
        for (off, v) in crate::records::decode_values(&b.bytes)? {
            if off >= start && off < end {
                out.push((off, v));
            }
        }
    }
    Ok(out)
}
