#![allow(dead_code, unreachable_pub)]
//! Batch builders shared by the log's integration tests.

use bytes::Bytes;
use kmirror_log::batch::{build_batch, BatchSpec, TRANSACTIONAL_ATTRIBUTES};
use kmirror_log::{FlushPolicy, LogConfig};

/// A non-idempotent batch of `n` records with `size`-byte values derived from `seed`.
pub fn plain(base: i64, epoch: i32, n: usize, size: usize, ts: i64, seed: u64) -> Bytes {
    producer_batch(base, epoch, n, size, ts, seed, -1, -1, -1, false)
}

#[allow(clippy::too_many_arguments)]
pub fn producer_batch(
    base: i64,
    epoch: i32,
    n: usize,
    size: usize,
    ts: i64,
    seed: u64,
    pid: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
) -> Bytes {
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            (0..size)
                .map(|j| (seed.wrapping_mul(31).wrapping_add((i * 7 + j) as u64) % 251) as u8)
                .collect()
        })
        .collect();
    let recs: Vec<kmirror_log::batch::KeyValue<'_>> =
        values.iter().map(|v| (None, Some(v.as_slice()))).collect();
    Bytes::from(build_batch(
        &BatchSpec {
            base_offset: base,
            partition_leader_epoch: epoch,
            attributes: if transactional {
                TRANSACTIONAL_ATTRIBUTES
            } else {
                0
            },
            base_timestamp: ts,
            producer_id: pid,
            producer_epoch,
            base_sequence,
        },
        &recs,
    ))
}

pub fn small_config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        segment_ms: None,
        retention_bytes: None,
        retention_ms: None,
        index_interval_bytes: 256,
        max_message_bytes: 1 << 20,
        flush: FlushPolicy::Os,
        ..LogConfig::default()
    }
}

pub fn concat(parts: &[Bytes]) -> Bytes {
    let mut v = Vec::new();
    for p in parts {
        v.extend_from_slice(p);
    }
    Bytes::from(v)
}
