//! Helpers shared by the fuzz targets (included with `#[path]`).
#![allow(dead_code)]

use std::path::PathBuf;

use kmirror_log::batch::{ATTRIBUTES_POS, CRC_POS, HEADER_SIZE, LENGTH_POS, LOG_OVERHEAD};
use kmirror_log::{Log, LogConfig};

/// Rewrites the CRC32C of every whole frame in `b` (so mutations reach the code behind the
/// CRC check); stops at the first bad frame length.
pub fn fix_crcs(b: &mut [u8]) {
    let mut pos = 0;
    while b.len() - pos >= HEADER_SIZE {
        let len = i32::from_be_bytes(
            b[pos + LENGTH_POS..pos + LENGTH_POS + 4]
                .try_into()
                .unwrap(),
        );
        if len < (HEADER_SIZE - LOG_OVERHEAD) as i32 {
            return;
        }
        let end = match pos.checked_add(len as usize + LOG_OVERHEAD) {
            Some(e) if e <= b.len() => e,
            _ => return,
        };
        let crc = crc32c::crc32c(&b[pos + ATTRIBUTES_POS..end]);
        b[pos + CRC_POS..pos + CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        pos = end;
    }
}

/// Makes `b` one frame: batchLength = the bytes after the 12-byte prefix.
pub fn fit_one_frame(b: &mut [u8]) {
    if b.len() >= HEADER_SIZE {
        let len = (b.len() - LOG_OVERHEAD) as i32;
        b[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&len.to_be_bytes());
    }
}

/// A scratch directory in memory when /dev/shm exists (no disk I/O per execution).
pub fn scratch_dir() -> tempfile::TempDir {
    let base = PathBuf::from("/dev/shm");
    let mut b = tempfile::Builder::new();
    b.prefix("kmirror-fuzz-");
    if base.is_dir() {
        b.tempdir_in(base).expect("temp dir")
    } else {
        b.tempdir().expect("temp dir")
    }
}

/// Small segments and indexes so rolls and index entries happen on fuzz-sized inputs.
pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 10,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

/// Reads the whole log from its start, checking that reads make progress and stay in range.
pub fn read_all(log: &Log) {
    let end = log.log_end_offset();
    let mut at = log.log_start_offset();
    let mut rounds = 0;
    while at < end {
        let r = log
            .read(at, 1 << 20, end)
            .expect("read inside [start, end]");
        if r.records.is_empty() {
            break;
        }
        let mut next = at;
        for b in kmirror_log::batch::BatchIter::headers(&r.records) {
            let (h, _, _) = b.expect("served bytes are whole frames");
            next = kmirror_types::Offset(h.next_offset());
        }
        assert!(next > at, "read from {at:?} made no progress");
        at = next;
        rounds += 1;
        assert!(rounds < 100_000, "read loop");
    }
}

/// The lookups every log answers without decoding anything trusted from a header.
pub fn lookups(log: &Log) {
    for ts in [i64::MIN, -1, 0, 1, 1_000, 1 << 40, i64::MAX] {
        if ts >= 0 {
            let _ = log.offset_for_timestamp(ts);
        }
    }
    let _ = log.max_timestamp_offset();
    let _ = log.epoch_entries();
    let _ = log.aborted_transactions(log.log_start_offset(), log.log_end_offset());
    let _ = log.last_stable_offset();
}
