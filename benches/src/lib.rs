//! Benchmark helpers: the SVG charts the end-to-end harnesses write beside their tables, and
//! the record batches the criterion benchmarks move.

pub mod charts;

use bytes::Bytes;
use kmirror_log::batch::{build_batch, BatchSpec, KeyValue};
use kmirror_log::{FlushPolicy, LogConfig};

/// Record size of [`record_batches`].
pub const RECORD_BYTES: usize = 1024;

/// Batches of 1 KiB records, about `batch_bytes` each (one record at least), at consecutive
/// offsets from 0 in leader epoch `epoch`, until they total at least `total_bytes`.
pub fn record_batches(batch_bytes: usize, total_bytes: usize, epoch: i32) -> Vec<Bytes> {
    let per_batch = (batch_bytes / RECORD_BYTES).max(1);
    let value: Vec<u8> = (0..RECORD_BYTES).map(|i| (i * 13 % 251) as u8).collect();
    let recs: Vec<KeyValue<'_>> = (0..per_batch).map(|_| (None, Some(&value[..]))).collect();
    let mut out = Vec::new();
    let mut total = 0;
    let mut base = 0i64;
    while total < total_bytes {
        let b = build_batch(
            &BatchSpec {
                base_offset: base,
                partition_leader_epoch: epoch,
                attributes: 0,
                base_timestamp: 1_700_000_000_000,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            },
            &recs,
        );
        total += b.len();
        base += per_batch as i64;
        out.push(Bytes::from(b));
    }
    out
}

/// The log configuration the criterion benchmarks append under: no time-based roll or
/// retention, flushing left to the OS (the page cache is what they measure).
pub fn bench_log_config() -> LogConfig {
    LogConfig {
        segment_ms: None,
        retention_ms: None,
        flush: FlushPolicy::Os,
        ..LogConfig::default()
    }
}
