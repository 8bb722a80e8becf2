//! Durability contract under SIGKILL: a child process appends with FlushPolicy::EveryAppend
//! and reports each batch's last offset to the parent only after the append (and its fsync)
//! returned. The parent kills it at random moments, at least 20 times; after each kill the
//! reopened log must (1) contain every acknowledged batch, byte for byte, and (2) serve only
//! whole, valid batches with contiguous offsets (no torn batch visible).
mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use kmirror_log::batch::BatchIter;
use kmirror_log::*;
use rand::{Rng, SeedableRng};

const CHILD_ENV: &str = "KMIRROR_LOG_CRASH_CHILD_DIR";

fn config() -> LogConfig {
    let mut c = small_config(64 << 10); // small segments: kills also land around rolls
    c.flush = FlushPolicy::EveryAppend;
    c
}

/// The i-th batch the child writes (records count, payload) — known to the parent too.
fn nth_batch(i: u64) -> Bytes {
    plain(
        0,
        0,
        1 + (i % 4) as usize,
        50 + (i * 37 % 400) as usize,
        i as i64,
        i,
    )
}

fn records_in(i: u64) -> i64 {
    1 + (i % 4) as i64
}

/// Index of the batch that starts at `offset` (offsets are contiguous from 0).
fn index_at(offset: i64) -> u64 {
    let (mut i, mut o) = (0u64, 0i64);
    while o < offset {
        o += records_in(i);
        i += 1;
    }
    assert_eq!(o, offset, "log end is not a batch boundary");
    i
}

/// Child body: append forever, acknowledging each durable batch on stdout.
#[test]
#[ignore = "runs only as the child process of the SIGKILL test"]
fn crash_child_process() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let epoch: i32 = std::env::var("KMIRROR_LOG_CRASH_EPOCH")
        .unwrap()
        .parse()
        .unwrap();
    let mut log = Log::open(Path::new(&dir), config()).unwrap();
    let mut i = index_at(log.log_end_offset().0);
    let mut out = std::io::stdout().lock();
    loop {
        let info = log
            .append_leader(nth_batch(i), LeaderEpoch(epoch), 0)
            .unwrap();
        writeln!(out, "ack {}", info.last_offset.0).unwrap();
        out.flush().unwrap();
        i += 1;
    }
}

/// Checks every batch in the log against what the child wrote; returns the log end.
fn verify(dir: &Path, acked: i64, rounds_so_far: i32) -> i64 {
    let log = Log::open(dir, config()).unwrap();
    let end = log.log_end_offset().0;
    assert!(
        end > acked,
        "acknowledged offset {acked} lost (log end {end})"
    );
    let mut from = 0i64;
    let mut i = 0u64;
    while from < end {
        let r = log.read(Offset(from), 1 << 16, Offset(end)).unwrap();
        assert!(!r.records.is_empty());
        for x in BatchIter::validating(&r.records) {
            let (h, s, e) = x.expect("no torn or corrupt batch is ever served");
            assert_eq!(h.base_offset(), from, "offsets are contiguous");
            assert!((1..=rounds_so_far).contains(&h.partition_leader_epoch()));
            let expect = nth_batch(i);
            assert_eq!(&r.records[s + 16..e], &expect[16..], "batch {i} content");
            from = h.next_offset();
            i += 1;
        }
    }
    log.close().unwrap();
    end
}

#[test]
fn given_sigkill_during_fsynced_appends_then_acknowledged_batches_survive_and_nothing_torn() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut acked = -1i64;
    let rounds = 24;
    for round in 1..=rounds {
        let mut child = Command::new(&exe)
            .args([
                "crash_child_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .env("KMIRROR_LOG_CRASH_EPOCH", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(v) = line.strip_prefix("ack ") {
                    let _ = tx.send(v.parse::<i64>().unwrap());
                }
            }
        });
        // Wait for the child to start appending, then kill it at a random moment.
        let first = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("child appends");
        acked = acked.max(first);
        std::thread::sleep(Duration::from_millis(rng.gen_range(1..80)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        acked = acked.max(rx.try_iter().max().unwrap_or(acked));
        let end = verify(dir.path(), acked, round);
        assert!(end > acked);
    }
    assert!(acked > 100, "the child made progress ({acked})");
}
