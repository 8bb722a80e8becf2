//! Behaviour of the append and read paths, truncation, delete-records, retention, epochs,
//! producer state and transactions, across reopen.
mod common;

use bytes::Bytes;
use common::*;
use kmirror_log::batch::{validate, BatchIter};
use kmirror_log::*;

fn batches_in(b: &Bytes) -> Vec<(i64, i64, i32)> {
    BatchIter::validating(b)
        .map(|r| {
            let (h, _, _) = r.expect("served batches are valid");
            (h.base_offset(), h.last_offset(), h.partition_leader_epoch())
        })
        .collect()
}

#[test]
fn leader_append_assigns_offsets_and_stamps_epoch_keeping_crc_valid() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    let a = log
        .append_leader(plain(999, -1, 3, 10, 50, 1), LeaderEpoch(4), 0)
        .unwrap();
    let b = log
        .append_leader(
            concat(&[plain(0, 0, 2, 10, 70, 2), plain(0, 0, 1, 10, 60, 3)]),
            LeaderEpoch(4),
            0,
        )
        .unwrap();
    assert_eq!((a.first_offset, a.last_offset), (Offset(0), Offset(2)));
    assert_eq!(
        (b.first_offset, b.last_offset, b.max_timestamp),
        (Offset(3), Offset(5), 70)
    );
    log.set_high_watermark(Offset(6));
    let r = log.read(Offset(0), 1 << 20, Offset(6)).unwrap();
    assert_eq!(
        batches_in(&r.records),
        vec![(0, 2, 4), (3, 4, 4), (5, 5, 4)]
    );
}

#[test]
fn mirror_append_keeps_bytes_and_offsets_and_allows_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    let b1 = plain(10, 3, 2, 20, 5, 1);
    let b2 = plain(40, 5, 4, 20, 6, 2);
    let info = log
        .append_mirror(concat(&[b1.clone(), b2.clone()]))
        .unwrap();
    assert_eq!(
        (info.first_offset, info.last_offset),
        (Offset(10), Offset(43))
    );
    assert_eq!(log.log_end_offset(), Offset(44));
    log.set_high_watermark(Offset(44));
    let r = log.read(Offset(20), 1 << 20, Offset(44)).unwrap();
    assert_eq!(r.records, b2, "offset in a gap starts at the next batch");
    assert_eq!(r.first_offset, Offset(40));
    // Offsets below the first mirrored batch are in range (log start 0) and lead to it.
    let first = log.read(Offset(0), 1, Offset(44)).unwrap();
    assert_eq!(first.records, b1);
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(3)),
        Some((LeaderEpoch(3), Offset(40)))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(5)),
        Some((LeaderEpoch(5), Offset(44)))
    );
}

#[test]
fn mirror_append_below_log_end_or_corrupt_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    log.append_mirror(plain(0, 1, 5, 20, 5, 1)).unwrap();
    let err = log.append_mirror(plain(3, 1, 1, 20, 5, 1)).unwrap_err();
    assert!(
        matches!(err, LogError::NonMonotonicMirrorOffset { .. }),
        "{err}"
    );
    let mut bad = plain(6, 1, 1, 20, 5, 1).to_vec();
    let n = bad.len();
    bad[n - 2] ^= 1;
    let good_then_bad = concat(&[plain(5, 1, 1, 20, 5, 1), Bytes::from(bad)]);
    let err = log.append_mirror(good_then_bad).unwrap_err();
    assert!(matches!(err, LogError::Corrupt { .. }), "{err}");
    let err = log
        .append_leader(plain(0, 0, 1, 20, 5, 1).slice(..70), LeaderEpoch(1), 0)
        .unwrap_err();
    assert!(matches!(err, LogError::Corrupt { .. }), "{err}");
    assert_eq!(log.log_end_offset(), Offset(5));
    assert_eq!(log.size_bytes() as usize, plain(0, 1, 5, 20, 5, 1).len());
    let file = dir.path().join("00000000000000000000.log");
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        log.size_bytes(),
        "a rejected append leaves no bytes behind"
    );
    // the log still appends where it was
    log.append_mirror(plain(5, 1, 1, 20, 5, 1)).unwrap();
    log.set_high_watermark(Offset(6));
    assert_eq!(
        log.read(Offset(5), 100, Offset(6)).unwrap().first_offset,
        Offset(5)
    );
}

#[test]
fn oversized_leader_batch_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small_config(1 << 20);
    cfg.max_message_bytes = 500;
    let mut log = Log::open(dir.path(), cfg).unwrap();
    let err = log
        .append_leader(plain(0, 0, 10, 100, 5, 1), LeaderEpoch(0), 0)
        .unwrap_err();
    assert!(
        matches!(err, LogError::RecordTooLarge { max: 500, .. }),
        "{err}"
    );
    assert_eq!(log.log_end_offset(), Offset(0));
}

#[test]
fn read_respects_max_bytes_upper_bound_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    for i in 0..10 {
        log.append_leader(plain(0, 0, 2, 50, i, i as u64), LeaderEpoch(1), 0)
            .unwrap();
    }
    let one = plain(0, 0, 2, 50, 0, 0).len();
    log.set_high_watermark(Offset(12));
    // max_bytes smaller than one batch still returns one whole batch
    let r = log.read(Offset(3), 1, Offset(20)).unwrap();
    assert_eq!(batches_in(&r.records), vec![(2, 3, 1)]);
    // room for 3 batches
    let r = log.read(Offset(0), 3 * one + 10, Offset(20)).unwrap();
    assert_eq!(r.records.len(), 3 * one);
    // upper bound (HW = 12): batches ending at or after it are not served
    let r = log.read(Offset(8), 1 << 20, log.high_watermark()).unwrap();
    assert_eq!(batches_in(&r.records), vec![(8, 9, 1), (10, 11, 1)]);
    let r = log.read(Offset(12), 1 << 20, log.high_watermark()).unwrap();
    assert!(r.records.is_empty());
    assert_eq!(r.first_offset, Offset(12));
    // log end is in range (empty), beyond is not
    assert!(log
        .read(Offset(20), 100, Offset(20))
        .unwrap()
        .records
        .is_empty());
    assert!(matches!(
        log.read(Offset(21), 100, Offset(21)),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn segments_roll_by_size_and_reads_cross_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(2000)).unwrap();
    let mut all = Vec::new();
    for i in 0..30 {
        let b = plain(0, 0, 3, 100, i, i as u64);
        log.append_leader(b, LeaderEpoch(2), 0).unwrap();
        all.push(i * 3);
    }
    assert!(log.segment_count() > 5, "{} segments", log.segment_count());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .collect();
    assert!(names.contains(&"00000000000000000000.log".to_string()));
    log.set_high_watermark(Offset(90));
    let mut from = Offset(0);
    let mut seen = Vec::new();
    while from < Offset(90) {
        let r = log.read(from, 700, Offset(90)).unwrap();
        let b = batches_in(&r.records);
        assert!(!b.is_empty());
        seen.extend(b.iter().map(|x| x.0));
        from = Offset(b.last().unwrap().1 + 1);
    }
    assert_eq!(seen, all);
}

#[test]
fn segments_roll_by_time_using_batch_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small_config(1 << 30);
    cfg.segment_ms = Some(1000);
    let mut log = Log::open(dir.path(), cfg).unwrap();
    log.append_leader(plain(0, 0, 1, 10, 10_000, 1), LeaderEpoch(0), 0)
        .unwrap();
    log.append_leader(plain(0, 0, 1, 10, 10_500, 1), LeaderEpoch(0), 0)
        .unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append_leader(plain(0, 0, 1, 10, 11_001, 1), LeaderEpoch(0), 0)
        .unwrap();
    assert_eq!(log.segment_count(), 2);
}

#[test]
fn truncate_to_removes_batches_and_epochs_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1500)).unwrap();
    for e in 0..4 {
        for i in 0..5 {
            log.append_leader(plain(0, 0, 2, 60, i, i as u64), LeaderEpoch(e), 0)
                .unwrap();
        }
    }
    log.set_high_watermark(Offset(40));
    // keep a slice from before the truncation: it must stay intact (zero-copy safety)
    let held = log.read(Offset(20), 1 << 20, Offset(40)).unwrap();
    let held_copy = held.records.to_vec();
    log.truncate_to(Offset(21)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(21));
    assert_eq!(log.high_watermark(), Offset(21));
    assert_eq!(log.latest_epoch(), Some(LeaderEpoch(2)));
    assert_eq!(held.records.to_vec(), held_copy);
    let r = log.read(Offset(18), 1 << 20, Offset(21)).unwrap();
    assert_eq!(batches_in(&r.records), vec![(18, 19, 1)]);
    log.append_leader(plain(0, 0, 1, 60, 0, 9), LeaderEpoch(7), 0)
        .unwrap();
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config(1500)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(22));
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(2)),
        Some((LeaderEpoch(2), Offset(21)))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(5)),
        Some((LeaderEpoch(2), Offset(21)))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(7)),
        Some((LeaderEpoch(7), Offset(22)))
    );
}

#[test]
fn truncate_fully_restarts_the_log_at_an_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    log.append_leader(plain(0, 0, 3, 10, 0, 1), LeaderEpoch(1), 0)
        .unwrap();
    log.truncate_fully_and_start_at(Offset(1000)).unwrap();
    assert_eq!(log.log_start_offset(), Offset(1000));
    assert_eq!(log.log_end_offset(), Offset(1000));
    assert_eq!(log.latest_epoch(), None);
    log.append_mirror(plain(1000, 9, 2, 10, 0, 1)).unwrap();
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.log_start_offset(), Offset(1000));
    assert_eq!(log.log_end_offset(), Offset(1002));
    assert!(log.read(Offset(999), 10, Offset(1002)).is_err());
}

#[test]
fn delete_records_advances_log_start_and_deletes_whole_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1000)).unwrap();
    for i in 0..20 {
        log.append_leader(plain(0, 0, 2, 100, i, 1), LeaderEpoch(1), 0)
            .unwrap();
    }
    let before = log.segment_count();
    assert!(
        matches!(
            log.delete_records_before(Offset(10)),
            Err(LogError::OffsetOutOfRange { .. })
        ),
        "beyond HW"
    );
    log.set_high_watermark(Offset(40));
    assert_eq!(log.delete_records_before(Offset(25)).unwrap(), Offset(25));
    assert!(log.segment_count() < before);
    assert!(matches!(
        log.read(Offset(24), 10, Offset(40)),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    let r = log.read(Offset(25), 1, Offset(40)).unwrap();
    assert_eq!(batches_in(&r.records), vec![(24, 25, 1)]);
    assert_eq!(log.delete_records_before(Offset(3)).unwrap(), Offset(25));
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config(1000)).unwrap();
    assert_eq!(log.log_start_offset(), Offset(25));
    assert_eq!(log.high_watermark(), Offset(40));
}

#[test]
fn retention_by_size_and_time_deletes_oldest_segments_below_hw() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small_config(1000);
    let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
    for i in 0..30 {
        log.append_leader(plain(0, 0, 2, 100, 1000 * i, 1), LeaderEpoch(1), 0)
            .unwrap();
    }
    log.set_high_watermark(Offset(60));
    let total = log.size_bytes();
    cfg.retention_bytes = Some(total / 2);
    log.set_config(cfg.clone());
    log.apply_retention(0).unwrap();
    assert!(
        log.size_bytes() <= total / 2 + 1000,
        "{} of {}",
        log.size_bytes(),
        total
    );
    assert!(log.size_bytes() >= total / 2, "deletes no more than needed");
    let start = log.log_start_offset();
    assert!(start > Offset(0));
    cfg.retention_bytes = None;
    cfg.retention_ms = Some(5000);
    log.set_config(cfg);
    log.apply_retention(29_000).unwrap(); // keeps batches with ts >= 24000
    let start2 = log.log_start_offset();
    assert!(start2 > start);
    let r = log.offset_for_timestamp(0).unwrap();
    assert_eq!(r.0, start2);
    assert!(r.1 <= 24_000 && r.1 >= 20_000, "{r:?}");
}

#[test]
fn offset_for_timestamp_finds_first_record_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(600)).unwrap();
    for i in 0..20 {
        log.append_leader(plain(0, 0, 2, 50, 100 * i, 1), LeaderEpoch(1), 0)
            .unwrap();
    }
    assert_eq!(log.offset_for_timestamp(0), Some((Offset(0), 0)));
    assert_eq!(log.offset_for_timestamp(750), Some((Offset(16), 800)));
    assert_eq!(log.offset_for_timestamp(1900), Some((Offset(38), 1900)));
    assert_eq!(log.offset_for_timestamp(1901), None);
    assert_eq!(log.max_timestamp_offset(), Some((Offset(38), 1900)));
}

#[test]
fn idempotent_producer_duplicates_gaps_and_fencing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    let pb =
        |seq: i32, n: usize, pepoch: i16| producer_batch(0, 0, n, 10, 5, 1, 77, pepoch, seq, false);
    let a = log.append_leader(pb(0, 3, 0), LeaderEpoch(1), 0).unwrap();
    let b = log.append_leader(pb(3, 2, 0), LeaderEpoch(1), 0).unwrap();
    // retry of the first batch: same offsets, nothing appended
    let dup = log.append_leader(pb(0, 3, 0), LeaderEpoch(1), 0).unwrap();
    assert!(dup.duplicate);
    assert_eq!(
        (dup.first_offset, dup.last_offset),
        (a.first_offset, a.last_offset)
    );
    assert_eq!(log.log_end_offset(), Offset(5));
    // a gap in sequence
    let err = log
        .append_leader(pb(7, 1, 0), LeaderEpoch(1), 0)
        .unwrap_err();
    assert!(matches!(err, LogError::OutOfOrderSequence { .. }), "{err}");
    // new epoch must restart at 0; then the old epoch is fenced
    let err = log
        .append_leader(pb(5, 1, 1), LeaderEpoch(1), 0)
        .unwrap_err();
    assert!(matches!(err, LogError::OutOfOrderSequence { .. }), "{err}");
    log.append_leader(pb(0, 1, 1), LeaderEpoch(1), 0).unwrap();
    let err = log
        .append_leader(pb(5, 1, 0), LeaderEpoch(1), 0)
        .unwrap_err();
    assert!(
        matches!(err, LogError::InvalidProducerEpoch { .. }),
        "{err}"
    );
    let st = log.producer_state(ProducerId(77)).unwrap();
    assert_eq!(
        (st.producer_epoch, st.last_sequence, st.last_offset),
        (1, 0, Offset(5))
    );
    assert_eq!(b.last_offset, Offset(4));
    // state survives reopen (rebuilt from the log), duplicates still detected
    log.close().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.producer_state(ProducerId(77)), Some(st));
    assert!(
        log.append_leader(pb(0, 1, 1), LeaderEpoch(1), 0)
            .unwrap()
            .duplicate
    );
}

#[test]
fn only_the_last_five_batches_are_deduplicated() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    for s in 0..7 {
        log.append_leader(
            producer_batch(0, 0, 1, 10, 5, 1, 9, 0, s, false),
            LeaderEpoch(1),
            0,
        )
        .unwrap();
    }
    assert!(
        log.append_leader(
            producer_batch(0, 0, 1, 10, 5, 1, 9, 0, 2, false),
            LeaderEpoch(1),
            0
        )
        .unwrap()
        .duplicate
    );
    let err = log
        .append_leader(
            producer_batch(0, 0, 1, 10, 5, 1, 9, 0, 1, false),
            LeaderEpoch(1),
            0,
        )
        .unwrap_err();
    assert!(matches!(err, LogError::OutOfOrderSequence { .. }), "{err}");
}

#[test]
fn transactions_drive_lso_and_aborted_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    let tx = |pid: i64, seq: i32| producer_batch(0, 0, 2, 10, 5, 1, pid, 0, seq, true);
    log.append_leader(plain(0, 0, 1, 10, 5, 1), LeaderEpoch(1), 0)
        .unwrap(); // 0
    log.append_leader(tx(1, 0), LeaderEpoch(1), 0).unwrap(); // 1-2 pid 1
    log.append_leader(tx(2, 0), LeaderEpoch(1), 0).unwrap(); // 3-4 pid 2
    log.append_leader(tx(1, 2), LeaderEpoch(1), 0).unwrap(); // 5-6 pid 1
    log.set_high_watermark(Offset(7));
    assert_eq!(log.last_stable_offset(), Offset(1));
    let err = log
        .append_leader(
            producer_batch(0, 0, 1, 10, 5, 1, 1, 0, 4, false),
            LeaderEpoch(1),
            0,
        )
        .unwrap_err();
    assert!(matches!(err, LogError::InvalidTxnState { .. }), "{err}");
    log.append_control(ControlKind::Abort, ProducerId(1), 0, 3, LeaderEpoch(1), 10)
        .unwrap(); // 7
    log.set_high_watermark(Offset(8));
    assert_eq!(log.last_stable_offset(), Offset(3));
    log.append_control(ControlKind::Commit, ProducerId(2), 0, 3, LeaderEpoch(1), 10)
        .unwrap(); // 8
    log.set_high_watermark(Offset(9));
    assert_eq!(log.last_stable_offset(), Offset(9));
    let aborted = log.aborted_transactions(Offset(0), Offset(9));
    assert_eq!(
        aborted,
        vec![AbortedTxn {
            producer_id: ProducerId(1),
            first_offset: Offset(1)
        }]
    );
    assert!(log.aborted_transactions(Offset(8), Offset(9)).is_empty());
    let err = log
        .append_control(ControlKind::Abort, ProducerId(1), 0, 1, LeaderEpoch(1), 10)
        .unwrap_err();
    assert!(
        matches!(err, LogError::TransactionCoordinatorFenced { .. }),
        "{err}"
    );
    // reopen: open transactions and aborted index are rebuilt from the log
    log.append_leader(tx(2, 2), LeaderEpoch(1), 0).unwrap(); // 9-10 open
    log.set_high_watermark(Offset(11));
    log.close().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.last_stable_offset(), Offset(9));
    assert_eq!(log.aborted_transactions(Offset(0), Offset(11)).len(), 1);
    // MIRROR_PID_RESET expires all producer state and open transactions
    log.append_control(
        ControlKind::MirrorPidReset,
        ProducerId(-1),
        -1,
        -1,
        LeaderEpoch(2),
        20,
    )
    .unwrap();
    log.set_high_watermark(Offset(12));
    assert_eq!(log.last_stable_offset(), Offset(12));
    assert_eq!(log.producer_state(ProducerId(2)), None);
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.producer_state(ProducerId(1)), None);
    assert_eq!(log.last_stable_offset(), Offset(12));
}

#[test]
fn mirrored_transactions_are_tracked_from_source_markers() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let mut source = Log::open(src.path(), small_config(1 << 20)).unwrap();
    source
        .append_leader(
            producer_batch(0, 0, 2, 10, 5, 1, 5, 0, 0, true),
            LeaderEpoch(3),
            0,
        )
        .unwrap();
    source
        .append_control(ControlKind::Abort, ProducerId(5), 0, 1, LeaderEpoch(3), 9)
        .unwrap();
    source
        .append_leader(
            producer_batch(0, 0, 2, 10, 5, 1, 5, 0, 2, true),
            LeaderEpoch(3),
            0,
        )
        .unwrap();
    source.set_high_watermark(Offset(5));
    let fetched = source.read(Offset(0), 1 << 20, Offset(5)).unwrap().records;
    let mut mirror = Log::open(dst.path(), small_config(1 << 20)).unwrap();
    mirror.append_mirror(fetched.clone()).unwrap();
    mirror.set_high_watermark(Offset(5));
    assert_eq!(
        mirror.read(Offset(0), 1 << 20, Offset(5)).unwrap().records,
        fetched
    );
    assert_eq!(mirror.last_stable_offset(), Offset(3));
    assert_eq!(
        mirror.aborted_transactions(Offset(0), Offset(5)),
        source.aborted_transactions(Offset(0), Offset(5))
    );
    assert_eq!(
        mirror.end_offset_for_epoch(LeaderEpoch(3)),
        Some((LeaderEpoch(3), Offset(5)))
    );
}

#[test]
fn epoch_cache_persists_and_answers_offsets_for_leader_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    for (epoch, n) in [(1, 3), (4, 2), (6, 1)] {
        for _ in 0..n {
            log.append_leader(plain(0, 0, 1, 10, 5, 1), LeaderEpoch(epoch), 0)
                .unwrap();
        }
    }
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.latest_epoch(), Some(LeaderEpoch(6)));
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(1)),
        Some((LeaderEpoch(1), Offset(3)))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(3)),
        Some((LeaderEpoch(1), Offset(3)))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(4)),
        Some((LeaderEpoch(4), Offset(5)))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(6)),
        Some((LeaderEpoch(6), Offset(6)))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(0)),
        Some((LeaderEpoch(0), Offset(0)))
    );
    assert_eq!(log.end_offset_for_epoch(LeaderEpoch(7)), None);
    let text = std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
    assert_eq!(text, "0\n3\n1 0\n4 3\n6 5\n");
}

#[test]
fn served_batches_always_validate() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(3000)).unwrap();
    for i in 0..40 {
        log.append_leader(
            plain(0, 0, 1 + i % 4, 30, i as i64, i as u64),
            LeaderEpoch(1),
            0,
        )
        .unwrap();
    }
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    let mut from = Offset(0);
    while from < end {
        let r = log.read(from, 500, end).unwrap();
        let mut pos = 0;
        while pos < r.records.len() {
            let (h, n) = validate(&r.records[pos..]).unwrap();
            from = Offset(h.next_offset());
            pos += n;
        }
    }
}

#[test]
fn hw_checkpoint_survives_a_crash_without_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    log.append_leader(plain(0, 0, 4, 10, 0, 1), LeaderEpoch(1), 0)
        .unwrap();
    log.set_high_watermark(Offset(3));
    drop(log);
    let mut log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.high_watermark(), Offset(0), "HW not checkpointed yet");
    log.set_high_watermark(Offset(4));
    log.write_checkpoints().unwrap();
    drop(log);
    let log = Log::open(dir.path(), small_config(1 << 20)).unwrap();
    assert_eq!(log.high_watermark(), Offset(4));
}

/// A flush whose checkpoint write fails (here: a directory squats on the temp file's name; on
/// a full disk it is ENOSPC) happens after the data is written. Failing the append would
/// answer an error for records that are stored and served later, so a retry duplicates them.
/// The append succeeds and the records survive a reopen.
#[test]
fn a_checkpoint_write_failure_in_a_flush_does_not_fail_an_append_whose_data_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config(1 << 20);
    config.flush = FlushPolicy::Interval { messages: 1, ms: 0 };
    let mut log = Log::open(dir.path(), config.clone()).unwrap();
    let squat = dir.path().join("log.checkpoint.tmp");
    std::fs::create_dir(&squat).unwrap();
    std::fs::write(squat.join("x"), b"x").unwrap();
    let b = plain(0, 0, 3, 10, 50, 1);
    let info = log
        .append_leader(b.clone(), LeaderEpoch(1), 0)
        .expect("the data is written; only the checkpoint failed");
    assert_eq!(
        (info.first_offset, info.last_offset),
        (Offset(0), Offset(2))
    );
    assert_eq!(log.log_end_offset(), Offset(3));
    std::fs::remove_dir_all(&squat).unwrap();
    log.close().unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    assert_eq!(log.log_end_offset(), Offset(3));
    let r = log.read(Offset(0), 1 << 20, Offset(3)).unwrap();
    assert_eq!(batches_in(&r.records), vec![(0, 2, 1)]);
}

/// Fetch serves records with sendfile(2) from the region a read reports: those file bytes must
/// be exactly the read's bytes, in every segment, and stay so after a truncation rewrites the
/// segment (the region keeps the old inode, as a mapping slice does).
#[test]
fn a_read_names_the_file_bytes_it_returned_and_they_survive_truncation() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config(4096)).unwrap();
    for i in 0..40 {
        log.append_leader(plain(0, -1, 3, 100, 10 + i, i as u64), LeaderEpoch(1), 0)
            .unwrap();
    }
    assert!(log.segment_count() > 2, "the test needs several segments");
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    let file_bytes = |r: &ReadResult| {
        let f = r.file.as_ref().expect("a non-empty read has a region");
        let mut buf = vec![0u8; r.records.len()];
        f.file.read_exact_at(&mut buf, f.position).unwrap();
        buf
    };
    let mut at = Offset(0);
    let mut regions = Vec::new();
    while at < end {
        let r = log.read(at, 1000, end).unwrap();
        assert!(!r.records.is_empty());
        assert_eq!(file_bytes(&r), r.records.to_vec(), "read at {at:?}");
        at = Offset(batches_in(&r.records).last().unwrap().1 + 1);
        regions.push(r);
    }
    assert!(log.read(end, 1000, end).unwrap().file.is_none());
    // Truncation rewrites the active segment into a fresh file: old regions still hold the
    // bytes they named.
    let last = regions.last().unwrap().clone();
    log.truncate_to(Offset(end.0 - 2)).unwrap();
    assert_eq!(file_bytes(&last), last.records.to_vec());
    // And sendfile to a socket delivers them.
    let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    let f = last.file.as_ref().unwrap();
    let mut sent = 0;
    while sent < last.records.len() {
        sent += f
            .send_nonblocking(a.as_raw_fd(), sent, last.records.len() - sent)
            .unwrap();
    }
    drop(a);
    let mut got = Vec::new();
    b.read_to_end(&mut got).unwrap();
    assert_eq!(got, last.records.to_vec());
}
