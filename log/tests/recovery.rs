//! Recovery after damage of the kind crashes leave: a tail cut mid-batch, a zero-filled tail,
//! junk from a random position, bit flips, deleted or garbage index files. Exactly the valid
//! prefix must survive, nothing invalid may be served, and the log must accept appends again.
mod common;

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::*;
use kmirror_log::batch::BatchIter;
use kmirror_log::*;
use rand::{rngs::StdRng, Rng, SeedableRng};

/// One stored batch: segment file, byte range in it, offsets and bytes.
#[derive(Debug, Clone)]
struct Stored {
    file: PathBuf,
    start: usize,
    end: usize,
    last: i64,
    bytes: Bytes,
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

fn stored(dir: &Path) -> Vec<Stored> {
    let mut out = Vec::new();
    for file in segment_files(dir) {
        let data = Bytes::from(fs::read(&file).unwrap());
        for r in BatchIter::validating(&data) {
            let (h, s, e) = r.unwrap();
            out.push(Stored {
                file: file.clone(),
                start: s,
                end: e,
                last: h.last_offset(),
                bytes: data.slice(s..e),
            });
        }
    }
    out
}

/// Writes a log of mixed batches over several segments and drops it without a clean close.
fn build(dir: &Path, rng: &mut StdRng) -> Vec<Stored> {
    let mut log = Log::open(dir, small_config(4000)).unwrap();
    for i in 0..60 {
        let n = rng.gen_range(1..6);
        let size = rng.gen_range(0..200);
        if rng.gen_bool(0.5) {
            log.append_leader(
                plain(0, 0, n, size, i, rng.gen()),
                LeaderEpoch(1 + i as i32 / 20),
                0,
            )
            .unwrap();
        } else {
            let base = log.log_end_offset().0 + rng.gen_range(0..3);
            log.append_mirror(plain(base, 1 + i as i32 / 20, n, size, i, rng.gen()))
                .unwrap();
        }
    }
    drop(log);
    stored(dir)
}

fn read_all(log: &Log) -> Vec<Bytes> {
    let end = log.log_end_offset();
    let mut out = Vec::new();
    let mut from = log.log_start_offset();
    while from < end {
        let r = log.read(from, 1000, end).unwrap();
        if r.records.is_empty() {
            break;
        }
        for x in BatchIter::validating(&r.records) {
            let (h, s, e) = x.expect("a served batch always validates");
            out.push(r.records.slice(s..e));
            from = Offset(h.next_offset());
        }
    }
    out
}

/// Opens the damaged log and checks that exactly `expected` survived, then that it appends.
fn check_survivors(dir: &Path, expected: &[Stored]) {
    let mut log = Log::open(dir, small_config(4000)).unwrap();
    let want_end = expected.last().map_or(0, |s| s.last + 1);
    assert_eq!(log.log_end_offset(), Offset(want_end));
    let got = read_all(&log);
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(expected) {
        assert_eq!(g, &e.bytes);
    }
    log.append_leader(plain(0, 0, 1, 10, 0, 1), LeaderEpoch(99), 0)
        .unwrap();
    drop(log);
    let log = Log::open(dir, small_config(4000)).unwrap();
    assert_eq!(log.log_end_offset(), Offset(want_end + 1));
    assert_eq!(read_all(&log).len(), expected.len() + 1);
}

/// Batches that survive damage starting at byte `pos` of `file`.
fn prefix_before(all: &[Stored], file: &Path, pos: usize) -> Vec<Stored> {
    let mut out = Vec::new();
    for s in all {
        if s.file.as_path() < file || (s.file == file && s.end <= pos) {
            out.push(s.clone());
        } else {
            break;
        }
    }
    out
}

fn last_file(all: &[Stored]) -> PathBuf {
    all.last().unwrap().file.clone()
}

#[test]
fn given_tail_cut_mid_batch_when_reopened_then_only_whole_batches_remain() {
    for seed in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let all = build(dir.path(), &mut rng);
        let file = last_file(&all);
        let len = fs::metadata(&file).unwrap().len() as usize;
        let cut = rng.gen_range(0..len);
        OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(cut as u64)
            .unwrap();
        check_survivors(dir.path(), &prefix_before(&all, &file, cut));
    }
}

#[test]
fn given_zero_filled_tail_when_reopened_then_zeros_are_dropped() {
    for seed in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(100 + seed);
        let all = build(dir.path(), &mut rng);
        let file = last_file(&all);
        let mut data = fs::read(&file).unwrap();
        let pos = rng.gen_range(0..data.len());
        let extra = rng.gen_range(0..8192);
        data.truncate(pos);
        data.resize(
            pos + (fs::metadata(&file).unwrap().len() as usize - pos) + extra,
            0,
        );
        fs::write(&file, &data).unwrap();
        check_survivors(dir.path(), &prefix_before(&all, &file, pos));
    }
}

#[test]
fn given_junk_from_random_position_when_reopened_then_valid_prefix_survives() {
    for seed in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(200 + seed);
        let all = build(dir.path(), &mut rng);
        let file = last_file(&all);
        let mut data = fs::read(&file).unwrap();
        let pos = rng.gen_range(0..data.len());
        let extra = rng.gen_range(0..3000);
        data.truncate(pos);
        data.extend((0..(extra + 100)).map(|_| rng.gen::<u8>()));
        fs::write(&file, &data).unwrap();
        check_survivors(dir.path(), &prefix_before(&all, &file, pos));
    }
}

#[test]
fn given_bit_flip_in_an_older_segment_without_checkpoint_then_later_segments_are_dropped() {
    for seed in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = StdRng::seed_from_u64(300 + seed);
        let all = build(dir.path(), &mut rng);
        let files = segment_files(dir.path());
        assert!(files.len() >= 3, "need several segments");
        // No checkpoint: nothing is known flushed, so everything is re-validated.
        fs::remove_file(dir.path().join("log.checkpoint")).unwrap();
        let victim = &all[rng.gen_range(0..all.len() - 1)];
        let mut data = fs::read(&victim.file).unwrap();
        let pos = rng.gen_range(victim.start + 21..victim.end);
        data[pos] ^= 1 << rng.gen_range(0..8);
        fs::write(&victim.file, &data).unwrap();
        check_survivors(dir.path(), &prefix_before(&all, &victim.file, victim.start));
        let remaining = segment_files(dir.path());
        assert!(remaining
            .iter()
            .all(|f| f <= &victim.file || f.as_path() > files.last().unwrap()));
    }
}

#[test]
fn given_deleted_or_garbage_indexes_when_reopened_then_they_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(400);
    let mut log = Log::open(dir.path(), small_config(4000)).unwrap();
    for i in 0..80 {
        log.append_leader(plain(0, 0, 3, 100, 10 * i, rng.gen()), LeaderEpoch(1), 0)
            .unwrap();
    }
    log.close().unwrap();
    let indexes: Vec<PathBuf> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "index" || e == "timeindex")
        })
        .collect();
    assert!(indexes.len() >= 6);
    let originals: Vec<Vec<u8>> = indexes.iter().map(|p| fs::read(p).unwrap()).collect();
    assert!(originals.iter().any(|o| !o.is_empty()));
    let all = stored(dir.path());
    for (i, p) in indexes.iter().enumerate() {
        if i % 2 == 0 {
            fs::remove_file(p).unwrap();
        } else {
            fs::write(p, (0..37).map(|_| rng.gen::<u8>()).collect::<Vec<u8>>()).unwrap();
        }
    }
    let log = Log::open(dir.path(), small_config(4000)).unwrap();
    let got = read_all(&log);
    assert_eq!(got, all.iter().map(|s| s.bytes.clone()).collect::<Vec<_>>());
    for t in [0, 5, 333, 790] {
        let (o, ts) = log.offset_for_timestamp(t).unwrap();
        assert_eq!(ts, (t + 9) / 10 * 10);
        assert_eq!(o, Offset(ts / 10 * 3));
    }
    for (p, o) in indexes.iter().zip(&originals) {
        assert_eq!(&fs::read(p).unwrap(), o, "{} rebuilt", p.display());
    }
}

#[test]
fn given_garbage_checkpoints_when_reopened_then_everything_is_revalidated() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(500);
    let all = build(dir.path(), &mut rng);
    fs::write(dir.path().join("log.checkpoint"), b"\x00\x01garbage").unwrap();
    fs::write(dir.path().join("leader-epoch-checkpoint"), b"0\n9\n1 2\n").unwrap();
    let file = last_file(&all);
    let first = &all[0];
    let mut data = fs::read(&first.file).unwrap();
    data[first.end - 1] ^= 0xff;
    fs::write(&first.file, &data).unwrap();
    let log = Log::open(dir.path(), small_config(4000)).unwrap();
    assert_eq!(
        log.log_end_offset(),
        Offset(0),
        "first batch corrupt: nothing survives"
    );
    assert!(read_all(&log).is_empty());
    assert_eq!(log.latest_epoch(), None);
    assert!(!file.exists() || file == first.file);
}
