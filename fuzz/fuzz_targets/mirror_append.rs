//! Target 2: the mirror append path (`Log::append_mirror`) on arbitrary bytes. Bit 0 of the
//! first byte recomputes every frame's CRC so mutations reach the header checks and the write;
//! bit 1 closes and reopens the log after an accepted append (recovery must agree).
//! Invariants: nothing panics or aborts; a refused append leaves the log unchanged; an accepted
//! one reads back byte for byte, survives lookups, and recovers to the same end after a reopen.
#![no_main]

use std::sync::Mutex;

use bytes::Bytes;
use kmirror_log::{Log, Offset};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

static LOG: Mutex<Option<(tempfile::TempDir, Option<Log>)>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut b = rest.to_vec();
    if mode & 1 != 0 {
        common::fix_crcs(&mut b);
    }
    let mut guard = LOG.lock().unwrap_or_else(|p| p.into_inner());
    let (dir, slot) = guard.get_or_insert_with(|| {
        let dir = common::scratch_dir();
        let log = Log::open(dir.path(), common::small_config()).expect("open");
        (dir, Some(log))
    });
    let log = slot.as_mut().expect("log");
    let (leo, size) = (log.log_end_offset(), log.size_bytes());
    match log.append_mirror(Bytes::from(b.clone())) {
        Ok(info) => {
            assert!(info.first_offset >= leo);
            assert_eq!(log.log_end_offset(), Offset(info.last_offset.0 + 1));
            assert_eq!(
                log.size_bytes(),
                size + b.len() as u64,
                "mirror bytes stored verbatim"
            );
            log.set_high_watermark(log.log_end_offset());
            common::read_all(log);
            common::lookups(log);
            if mode & 2 == 0 {
                log.truncate_fully_and_start_at(Offset(0)).expect("reset");
                return;
            }
            // Recovery after a clean close agrees on the end.
            let end = log.log_end_offset();
            let log = slot.take().expect("log");
            log.close().expect("close");
            let mut reopened = Log::open(dir.path(), common::small_config()).expect("reopen");
            assert_eq!(reopened.log_end_offset(), end, "reopen changed the log end");
            common::read_all(&reopened);
            reopened
                .truncate_fully_and_start_at(Offset(0))
                .expect("reset");
            *slot = Some(reopened);
        }
        Err(_) => {
            assert_eq!(
                log.log_end_offset(),
                leo,
                "refused append moved the log end"
            );
            assert_eq!(log.size_bytes(), size, "refused append wrote bytes");
        }
    }
});
