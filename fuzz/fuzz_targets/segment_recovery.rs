//! Target 3: crash recovery from arbitrary segment bytes. The input (CRCs recomputed when bit 0
//! of the first byte is set) is written as the only segment file of a log with no checkpoint,
//! the log is opened (recovery validates everything), read end to end, looked up by time,
//! appended to, closed and reopened. Invariants: nothing panics or aborts, reads stay whole
//! frames and make progress, and a reopen keeps the same log end.
#![no_main]

use std::sync::Mutex;

use bytes::Bytes;
use kmirror_log::batch::{build_batch, BatchSpec};
use kmirror_log::{LeaderEpoch, Log};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

static DIR: Mutex<Option<tempfile::TempDir>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut b = rest.to_vec();
    if mode & 1 != 0 {
        common::fix_crcs(&mut b);
    }
    let mut guard = DIR.lock().unwrap_or_else(|p| p.into_inner());
    let dir = guard
        .get_or_insert_with(common::scratch_dir)
        .path()
        .to_path_buf();
    for e in std::fs::read_dir(&dir).expect("scratch dir") {
        std::fs::remove_file(e.expect("entry").path()).expect("clean scratch dir");
    }
    std::fs::write(dir.join("00000000000000000000.log"), &b).expect("write segment");
    let mut log = Log::open(&dir, common::small_config()).expect("recovery opens any bytes");
    assert!(log.log_start_offset() <= log.log_end_offset());
    log.set_high_watermark(log.log_end_offset());
    common::read_all(&log);
    common::lookups(&log);
    let one = build_batch(
        &BatchSpec {
            base_offset: 0,
            partition_leader_epoch: 0,
            attributes: 0,
            base_timestamp: 5,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        },
        &[(Some(b"k"), Some(b"v"))],
    );
    let _ = log.append_leader(Bytes::from(one), LeaderEpoch(1), 5);
    let end = log.log_end_offset();
    log.close().expect("close");
    let log = Log::open(&dir, common::small_config()).expect("reopen");
    assert_eq!(log.log_end_offset(), end, "reopen changed the log end");
    common::read_all(&log);
});
