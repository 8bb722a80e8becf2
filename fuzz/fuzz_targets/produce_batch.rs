//! Target 1: the leader (produce) append path. The first input byte picks what is fixed up
//! before the bytes reach the log (bit 0: batchLength fitted to the input, bit 1: CRCs
//! recomputed, bit 2: a 4 KiB decompression cap for the direct validator call), so mutations
//! get past the frame and CRC checks into the record walk and the decompressors.
//! Invariants: nothing panics or aborts; a refused append leaves the log unchanged; a batch the
//! validator refuses is never appended; an accepted one reads back.
#![no_main]

use std::sync::Mutex;

use bytes::Bytes;
use kmirror_log::batch::{self, BatchError, Compression};
use kmirror_log::{LeaderEpoch, Log, Offset};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

static LOG: Mutex<Option<(tempfile::TempDir, Log)>> = Mutex::new(None);

fn direct(b: &[u8], cap: usize) -> Result<usize, BatchError> {
    let (h, total) = batch::validate(b)?;
    batch::check_client_counts(&h)?;
    batch::validate_client_records(&b[..total], cap)?;
    if h.compression() == Compression::None {
        // A walk that passed means recordsCount records are really there.
        let recs = batch::uncompressed_records(&b[..total]).expect("validated records parse");
        assert_eq!(recs.len() as i64, h.records_count() as i64);
        for (i, (p, _)) in recs.iter().enumerate() {
            assert_eq!(p.offset_delta, i as i64);
        }
    }
    batch::check_count_fits_bytes(&h)?;
    Ok(total)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut b = rest.to_vec();
    if mode & 1 != 0 {
        common::fit_one_frame(&mut b);
    }
    if mode & 2 != 0 {
        common::fix_crcs(&mut b);
    }
    let cap = if mode & 4 != 0 {
        4096
    } else {
        batch::MIN_DECOMPRESSED_LIMIT
    };
    let single = direct(&b, cap);
    let full_cap = direct(&b, batch::MIN_DECOMPRESSED_LIMIT);

    let mut guard = LOG.lock().unwrap_or_else(|p| p.into_inner());
    let (_, log) = guard.get_or_insert_with(|| {
        let dir = common::scratch_dir();
        let log = Log::open(dir.path(), common::small_config()).expect("open");
        (dir, log)
    });
    let (leo, size) = (log.log_end_offset(), log.size_bytes());
    match log.append_leader(Bytes::from(b.clone()), LeaderEpoch(3), 1_000) {
        Ok(info) => {
            if let Ok(total) = single {
                assert!(total <= b.len());
            }
            // A first batch the validator refuses must never be appended.
            assert!(
                full_cap.is_ok(),
                "appended a batch the validator refuses: {full_cap:?}"
            );
            if info.duplicate {
                // Only a whole-request retry of a batch already in the log is a duplicate.
                assert!(info.last_offset < leo, "duplicate of offsets never written");
                assert_eq!((log.log_end_offset(), log.size_bytes()), (leo, size));
                return;
            }
            assert_eq!(info.first_offset, leo);
            assert_eq!(log.log_end_offset(), Offset(info.last_offset.0 + 1));
            common::read_all(log);
            common::lookups(log);
            log.set_high_watermark(log.log_end_offset());
            let r = log
                .read(info.first_offset, 1 << 20, log.log_end_offset())
                .expect("read back");
            assert!(!r.records.is_empty());
            // Fresh log for the next input: executions stay independent.
            log.truncate_fully_and_start_at(Offset(0)).expect("reset");
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
