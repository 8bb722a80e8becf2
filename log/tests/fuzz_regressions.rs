//! Replays every input the fuzz targets (fuzz/, scripts/fuzz.sh) ever crashed on, kept under
//! log/testdata/fuzz/<target>/, with the target's own invariants: a crasher becomes a
//! regression test by copying its file there.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use kmirror_log::batch::{ATTRIBUTES_POS, CRC_POS, HEADER_SIZE, LENGTH_POS, LOG_OVERHEAD};
use kmirror_log::{LeaderEpoch, Log, LogConfig, Offset};

fn inputs(target: &str) -> Vec<(PathBuf, u8, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/fuzz")
        .join(target);
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let data = std::fs::read(&p).unwrap();
        if let Some((&mode, rest)) = data.split_first() {
            out.push((p, mode, rest.to_vec()));
        }
    }
    out
}

/// The fuzz targets' CRC fix-up (fuzz/fuzz_targets/common.rs).
fn fix_crcs(b: &mut [u8]) {
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

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 10,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

fn read_all(log: &Log) {
    let end = log.log_end_offset();
    let mut at = log.log_start_offset();
    while at < end {
        let r = log.read(at, 1 << 20, end).unwrap();
        if r.records.is_empty() {
            break;
        }
        let mut next = at;
        for b in kmirror_log::batch::BatchIter::headers(&r.records) {
            next = Offset(b.unwrap().0.next_offset());
        }
        assert!(next > at);
        at = next;
    }
}

#[test]
fn mirror_append_crashers() {
    for (path, mode, mut b) in inputs("mirror_append") {
        if mode & 1 != 0 {
            fix_crcs(&mut b);
        }
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        if let Ok(info) = log.append_mirror(Bytes::from(b.clone())) {
            let end = log.log_end_offset();
            assert_eq!(end, Offset(info.last_offset.0 + 1), "{}", path.display());
            assert_eq!(log.size_bytes(), b.len() as u64, "{}", path.display());
            log.set_high_watermark(end);
            read_all(&log);
            log.close().unwrap();
            let log = Log::open(dir.path(), config()).unwrap();
            assert_eq!(log.log_end_offset(), end, "reopen: {}", path.display());
            read_all(&log);
        } else {
            assert_eq!(log.log_end_offset(), Offset(0));
            assert_eq!(log.size_bytes(), 0);
        }
    }
}

#[test]
fn produce_batch_crashers() {
    for (path, mode, mut b) in inputs("produce_batch") {
        if mode & 1 != 0 && b.len() >= HEADER_SIZE {
            let len = (b.len() - LOG_OVERHEAD) as i32;
            b[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&len.to_be_bytes());
        }
        if mode & 2 != 0 {
            fix_crcs(&mut b);
        }
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        match log.append_leader(Bytes::from(b), LeaderEpoch(3), 1_000) {
            Ok(info) => {
                assert!(
                    !info.duplicate,
                    "duplicate on a fresh log: {}",
                    path.display()
                );
                assert_eq!(log.log_end_offset(), Offset(info.last_offset.0 + 1));
                log.set_high_watermark(log.log_end_offset());
                read_all(&log);
                let _ = log.offset_for_timestamp(0);
                let _ = log.max_timestamp_offset();
            }
            Err(_) => assert_eq!(log.size_bytes(), 0, "{}", path.display()),
        }
    }
}

#[test]
fn segment_recovery_crashers() {
    for (path, mode, mut b) in inputs("segment_recovery") {
        if mode & 1 != 0 {
            fix_crcs(&mut b);
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("00000000000000000000.log"), &b).unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        log.set_high_watermark(log.log_end_offset());
        read_all(&log);
        let _ = log.offset_for_timestamp(0);
        let _ = log.max_timestamp_offset();
        let end = log.log_end_offset();
        log.close().unwrap();
        let log = Log::open(dir.path(), config()).unwrap();
        assert_eq!(log.log_end_offset(), end, "{}", path.display());
    }
}
