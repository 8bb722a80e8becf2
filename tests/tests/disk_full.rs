//! Issue 8 item 11: the destination's disk fills up while it mirrors from a real Apache Kafka
//! 4.1.1 source. kmirror's data dir is a 64 MiB tmpfs (the test runs as root, as CI does); a
//! filler file leaves less room than the mirrored topic needs.
//!
//! What a user must see: the mirror partitions go FAILED with "No space left on device" as
//! the reason, the node stays up and serves what it mirrored (byte-identical to the source,
//! no torn batch), a produce to a local topic answers KAFKA_STORAGE_ERROR (56, what Apache
//! Kafka's clients see when a log dir goes offline) and leaves nothing behind, and once space
//! is freed mirroring resumes by itself and ends log-equal, nothing lost or duplicated.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kmirror_tests::helpers::{committed_p0, now_ms, start_kafka_and_kmirror};
use kmirror_tests::java::{self, tools};
use kmirror_tests::mirror::{self, PartitionRow, FAST};
use kmirror_tests::proc::{self, LineChild};
use kmirror_tests::{python, records, KafkaCluster, KmirrorNode, WireClient};

const KAFKA_STORAGE_ERROR: i16 = 56;
const MIB: u64 = 1 << 20;

/// A size-limited tmpfs mounted on a fresh temp dir; unmounted on drop (lazily if busy).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size_mib: u64) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("kmirror-diskfull-")
            .tempdir()
            .expect("temp dir for the tmpfs");
        let ran = proc::run(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
                .arg(dir.path()),
            Duration::from_secs(30),
        );
        assert!(
            ran.status.success(),
            "`mount -t tmpfs -o size={size_mib}m tmpfs {}` was refused ({}): this test needs \
             root (CI runs as root) to give kmirror a small disk that fills up.\n{}{}",
            dir.path().display(),
            ran.status,
            ran.stdout,
            ran.stderr
        );
        Tmpfs { dir }
    }

    /// Grows (or shrinks) the mounted tmpfs in place, as an operator adding space would.
    fn remount(&self, size_mib: u64) {
        proc::run_ok(
            Command::new("mount")
                .args(["-o", &format!("remount,size={size_mib}m")])
                .arg(self.path()),
            Duration::from_secs(30),
        );
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Free bytes for an unprivileged writer (`stat -f`).
    fn available(&self) -> u64 {
        let ran = proc::run_ok(
            Command::new("stat")
                .args(["-f", "-c", "%a %S"])
                .arg(self.path()),
            Duration::from_secs(10),
        );
        let mut it = ran.stdout.split_whitespace().map(|x| x.parse::<u64>());
        match (it.next(), it.next()) {
            (Some(Ok(blocks)), Some(Ok(bsize))) => blocks * bsize,
            _ => panic!("stat -f printed {:?}", ran.stdout),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // A process we started may still hold a file there: detach now, freed on close.
            let _ = Command::new("umount").arg("-l").arg(self.path()).status();
        }
    }
}

/// Writes `bytes` of zeros (real pages on tmpfs, unlike a sparse set_len) at `path`,
/// stopping early if the tmpfs is full.
fn write_filler(path: &Path, bytes: u64) {
    let mut f = std::fs::File::create(path).expect("create filler");
    let chunk = vec![0u8; MIB as usize];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(MIB) as usize;
        if f.write_all(&chunk[..n]).is_err() {
            break;
        }
        left -= n as u64;
    }
}

/// ProducerPerformance writing `records` records of 200 bytes as fast as it can (acks=all).
fn fill_source(boot: &str, topic: &str, records: u64) {
    let (status, lines) = LineChild::spawn(java::tool(tools::PRODUCER_PERFORMANCE).args([
        "--topic",
        topic,
        "--num-records",
        &records.to_string(),
        "--record-size",
        "200",
        "--throughput",
        "-1",
        "--producer-props",
        &format!("bootstrap.servers={boot}"),
        "acks=all",
        "linger.ms=5",
    ]))
    .wait(Duration::from_secs(240));
    let summary = lines
        .iter()
        .rev()
        .find(|l| l.contains("records sent"))
        .cloned()
        .unwrap_or_default();
    assert!(
        status.success() && summary.starts_with(&format!("{records} records sent")),
        "ProducerPerformance exited {status}: {summary}"
    );
}

/// Reads every record of `topic` with librdkafka; returns (high watermarks, records read).
fn read_all(boot: &str, topic: &str, partitions: i32) -> (Vec<i64>, u64) {
    let ran = proc::run(
        python::script("read_all.py").args([boot, topic, &partitions.to_string()]),
        Duration::from_secs(180),
    );
    assert!(
        ran.status.success(),
        "read_all.py {topic} failed ({}):\n{}{}",
        ran.status,
        proc::last_lines(&ran.stdout, 20),
        proc::last_lines(&ran.stderr, 20)
    );
    let ends = ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("END "))
        .map(|l| l.split(' ').nth(1).expect("END p hw").parse().expect("hw"))
        .collect();
    let done = ran
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("DONE "))
        .unwrap_or_else(|| panic!("read_all.py printed no DONE:\n{}", ran.stdout))
        .parse()
        .expect("count");
    (ends, done)
}

/// Every record value of partition 0 of `topic` on `boot`, read with raw Fetch.
fn local_values(boot: &str, topic: &str) -> Vec<Vec<u8>> {
    let mut c = WireClient::connect(boot).expect("connect");
    let end = c.list_offset(topic, 0, -1).expect("latest");
    let mut next = 0;
    let mut out = Vec::new();
    while next < end {
        let p = c
            .fetch_raw(topic, 0, next, 8 << 20, false)
            .expect("fetch local");
        if p.error_code != 0 {
            let start = c.list_offset(topic, 0, -2);
            panic!(
                "fetch {topic} at {next}: code {}; start {start:?} end {end}",
                p.error_code
            );
        }
        let recs = p.records.unwrap_or_default();
        let vals = records::decode_values(&recs).expect("served batches decode whole");
        assert!(
            !vals.is_empty(),
            "fetch at {next} below end {end} returned nothing"
        );
        for (o, v) in vals {
            if o >= next {
                out.push(v.map(|b| b.to_vec()).unwrap_or_default());
                next = o + 1;
            }
        }
    }
    out
}

/// A standalone librdkafka commit of `offset` on partition 0: "OK", "ERR <name>", or
/// "TIMEOUT" (no answer but retriable errors within 15 s).
fn commit(boot: &str, group: &str, topic: &str, offset: i64) -> String {
    let ran = proc::run(
        python::script("commit_offset.py").args([
            boot,
            group,
            topic,
            "0",
            &offset.to_string(),
            "15",
        ]),
        Duration::from_secs(60),
    );
    ran.stdout
        .lines()
        .find(|l| *l == "OK" || *l == "TIMEOUT" || l.starts_with("ERR "))
        .unwrap_or_else(|| panic!("commit_offset.py: {}{}", ran.stdout, ran.stderr))
        .to_string()
}

/// Values "tag-i" padded to `len` bytes, i in 0..n.
fn values(tag: &str, n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut v = format!("{tag}-{i}").into_bytes();
            v.resize(len, b'.');
            v
        })
        .collect()
}

/// Values as text without the padding, for readable assertion messages.
fn texts(vals: &[Vec<u8>]) -> Vec<String> {
    vals.iter()
        .map(|v| String::from_utf8_lossy(v).trim_end_matches('.').to_string())
        .collect()
}

/// One batch of `vals`.
fn batch_of(vals: &[Vec<u8>]) -> bytes::Bytes {
    let refs: Vec<&[u8]> = vals.iter().map(Vec::as_slice).collect();
    // Now: an old timestamp would let time retention delete the records under the test.
    records::batch(&refs, now_ms())
}

/// Local (non-mirror) topics: the default flush policy, and one that flushes (index and
/// checkpoint files written) every 2 records, so a write that still fits the last page of
/// its segment file meets ENOSPC in the flush after it.
const LOCAL_TOPICS: &[(&str, &[(&str, &str)])] =
    &[("local", &[]), ("flushy", &[("flush.messages", "2")])];

#[test]
fn destination_disk_full_fails_mirror_partitions_keeps_serving_refuses_produce_then_resumes_log_equal(
) {
    let _heavy = kmirror_tests::heavy_test_lock();
    // Declared before the node so it is unmounted after the node is killed.
    let disk = Tmpfs::mount(64);
    let data: PathBuf = disk.path().join("data");
    let (kafka, mut node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder().data_dir(&data).start()
    });
    let src = kafka.bootstrap();
    let dst = node.addr();

    // Local (non-mirror) topics with one small acknowledged batch each.
    let mut wc = WireClient::connect(&dst).expect("connect kmirror");
    let mut expected: Vec<Vec<Vec<u8>>> = Vec::new();
    for (topic, configs) in LOCAL_TOPICS {
        assert_eq!(wc.create_topic(topic, 1, 1, configs).expect("create"), 0);
        let vals = values("before", 1, 100);
        let (code, _) = wc
            .produce_raw(topic, 0, batch_of(&vals), -1)
            .expect("produce");
        assert_eq!(code, 0, "produce to {topic} before the disk fills");
        expected.push(vals);
    }

    // ~10 MiB mirrored while there is room; then the destination is left ~4 MiB and the
    // source takes ~38 MiB more, so the disk fills mid-copy.
    let parts = 2;
    let (first, total): (u64, u64) = (50_000, 240_000);
    kafka.create_topic("big", parts, &[]);
    fill_source(&src, "big", first);
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &["big"]);
    mirror::assert_mirrored(&src, &dst, "big", parts, Duration::from_secs(120));
    let filler = disk.path().join("filler");
    let free = disk.available();
    write_filler(&filler, free.saturating_sub(4 * MIB));
    eprintln!(
        "tmpfs: {} MiB free before filler, {} MiB after",
        free / MIB,
        disk.available() / MIB
    );
    fill_source(&src, "big", total - first);

    // Every mirror partition goes FAILED with the OS's reason.
    let failed = proc::wait_for(
        Duration::from_secs(120),
        "mirror partitions FAILED with ENOSPC",
        || {
            let rows: Vec<PartitionRow> = mirror::describe(&dst, Some("dr"));
            (rows.len() == parts as usize
                && rows.iter().all(|r| {
                    r.state == "FAILED"
                        && (r.reason().contains("No space left on device")
                            || r.reason().contains("ENOSPC"))
                }))
            .then_some(rows)
        },
    );
    eprintln!(
        "FAILED: {:?}",
        failed
            .iter()
            .map(|r| (r.partition, r.destination_offset, r.reason()))
            .collect::<Vec<_>>()
    );
    assert!(node.alive(), "kmirror died when its disk filled up");
    // A fetch that did not fit was cut back whole, so some room is left: take it all, so
    // every later write (produce, checkpoints, __mirror_state) meets ENOSPC.
    let filler2 = disk.path().join("filler2");
    write_filler(&filler2, u64::MAX);
    assert!(
        disk.available() < 64 << 10,
        "tmpfs still has {} bytes free",
        disk.available()
    );

    // The node serves reads: what it mirrored is byte-identical to the source (so no torn
    // batch is served), and a real consumer reads all of it.
    let partial = mirror::bounds(&dst, "big", parts).expect("destination bounds");
    let partial_ends: Vec<i64> = partial.iter().map(|(_, e)| *e).collect();
    let mirrored: i64 = partial_ends.iter().sum();
    assert!(
        mirrored >= first as i64 && mirrored < total as i64,
        "the disk should have filled mid-copy: destination ends {partial_ends:?}"
    );
    // describe shows where each FAILED partition stands, not -1.
    let rows = mirror::describe(&dst, Some("dr"));
    for r in &rows {
        assert_eq!(r.state, "FAILED", "{r:?}");
        assert_eq!(
            r.destination_offset, partial_ends[r.partition as usize],
            "describe's destination offset of a FAILED partition: {r:?}"
        );
    }
    mirror::assert_log_equal(&src, &dst, "big", &partial_ends);
    let (ends, read) = read_all(&dst, "big", parts);
    assert_eq!(ends, partial_ends, "librdkafka sees other high watermarks");
    assert_eq!(read as i64, mirrored, "librdkafka read a different count");

    // Produce to local topics: a batch bigger than any page's slack answers
    // KAFKA_STORAGE_ERROR; a tiny one may still fit in the last page of the segment file.
    // Either way the answer must match the log: stored (and later served) only if
    // acknowledged.
    let mut tiny_acks = 0;
    for (t, (topic, _)) in LOCAL_TOPICS.iter().enumerate() {
        for i in 0..3 {
            let (code, _) = wc
                .produce_raw(
                    topic,
                    0,
                    batch_of(&values(&format!("full{i}"), 256, 1000)),
                    -1,
                )
                .expect("produce while full");
            assert_eq!(
                code, KAFKA_STORAGE_ERROR,
                "produce of 256 KB to {topic} on a full disk must answer KAFKA_STORAGE_ERROR"
            );
        }
        for i in 0..3 {
            let vals = values(&format!("tiny{i}"), 1, 10);
            let (code, _) = wc
                .produce_raw(topic, 0, batch_of(&vals), -1)
                .expect("tiny produce while full");
            assert!(
                code == 0 || code == KAFKA_STORAGE_ERROR,
                "tiny produce to {topic} on a full disk answered {code}"
            );
            if code == 0 {
                tiny_acks += 1;
                expected[t].extend(vals);
            }
        }
    }
    eprintln!("tiny produces acknowledged on the full disk: {tiny_acks} of 6");
    // librdkafka, no retries: its records fail with KAFKA_STORAGE_ERROR (a few may fit in the
    // last page's slack and be acknowledged: those must be stored, the others must not).
    let ran = proc::run(
        python::script("seq_producer.py").args([
            dst.as_str(),
            "local",
            "1",
            "3000",
            "enable.idempotence=false",
            "retries=0",
            "message.timeout.ms=20000",
        ]),
        Duration::from_secs(120),
    );
    let errs: Vec<&str> = ran
        .stdout
        .lines()
        .filter(|l| l.starts_with("ERR "))
        .collect();
    assert!(
        !errs.is_empty() && errs.iter().all(|l| l.ends_with("KAFKA_STORAGE_ERROR")),
        "librdkafka produce to a full disk: want KAFKA_STORAGE_ERROR, got {:?} ({})",
        errs.iter().take(3).collect::<Vec<_>>(),
        proc::last_lines(&ran.stdout, 3)
    );
    let mut acked: Vec<(i64, Vec<u8>)> = ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ACK "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let v = format!("{}:{}:", f[0], f[1]);
            let mut v = v.into_bytes();
            v.resize(100, b'.');
            (f[2].parse::<i64>().expect("offset"), v)
        })
        .collect();
    acked.sort();
    expected[0].extend(acked.into_iter().map(|(_, v)| v));
    for (t, (topic, _)) in LOCAL_TOPICS.iter().enumerate() {
        assert_eq!(
            texts(&local_values(&dst, topic)),
            texts(&expected[t]),
            "{topic} must hold exactly the acknowledged records"
        );
    }
    assert!(node.alive(), "kmirror died on produce to a full disk");

    // Internal files on the full disk: a consumer-group commit (__consumer_offsets) and a
    // topic creation (cluster metadata) may fail (the commit is answered with the retriable
    // COORDINATOR_NOT_AVAILABLE until the write succeeds), but must not take the node down.
    let full_commit = commit(&dst, "g-full", "local", 3);
    if full_commit == "OK" {
        assert_eq!(
            committed_p0(&dst, "g-full", "local"),
            3,
            "acknowledged commit"
        );
    }
    let create_code = wc
        .create_topic("born-full", 1, 1, &[])
        .expect("CreateTopics");
    eprintln!("on the full disk: commit {full_commit}, CreateTopics code {create_code}");
    assert!(
        node.alive(),
        "kmirror died writing internal files to a full disk"
    );

    // A restart while the disk is still full: clean stop, and it comes back serving reads.
    assert!(node.stop(), "kmirror did not stop cleanly on a full disk");
    node.start_again();
    mirror::assert_log_equal(&src, &dst, "big", &partial_ends);
    for (t, (topic, _)) in LOCAL_TOPICS.iter().enumerate() {
        assert_eq!(
            texts(&local_values(&dst, topic)),
            texts(&expected[t]),
            "{topic} after a restart on a full disk"
        );
    }
    proc::wait_for(
        Duration::from_secs(60),
        "mirror partitions FAILED with ENOSPC after the restart",
        || {
            let rows = mirror::describe(&dst, Some("dr"));
            (rows.len() == parts as usize
                && rows
                    .iter()
                    .all(|r| r.state == "FAILED" && r.reason().contains("No space left on device")))
            .then_some(())
        },
    );
    let mut wc = WireClient::connect(&dst).expect("reconnect kmirror");

    // Free the space: mirroring resumes by itself and ends log-equal.
    std::fs::remove_file(&filler).expect("remove filler");
    std::fs::remove_file(&filler2).expect("remove filler2");
    let ends = mirror::wait_caught_up(&src, &dst, "big", parts, false, Duration::from_secs(180));
    assert_eq!(ends.iter().sum::<i64>(), total as i64);
    mirror::assert_log_equal(&src, &dst, "big", &ends);
    mirror::wait_mirroring_at_lag_zero(&dst, "dr", parts, Duration::from_secs(30));
    // Space is back: produce works, and what failed earlier never shows up (the high
    // watermark moves past anything a failed append might have left behind).
    for (t, (topic, _)) in LOCAL_TOPICS.iter().enumerate() {
        let vals = values("after", 256, 1000);
        let (code, _) = wc
            .produce_raw(topic, 0, batch_of(&vals), -1)
            .expect("produce after");
        assert_eq!(code, 0, "produce to {topic} once space is back");
        expected[t].extend(vals);
        assert_eq!(
            texts(&local_values(&dst, topic)),
            texts(&expected[t]),
            "{topic} after space is back"
        );
    }
    assert_eq!(
        commit(&dst, "g-full", "local", 7),
        "OK",
        "commit once space is back"
    );
    assert_eq!(committed_p0(&dst, "g-full", "local"), 7);
    assert!(node.alive());

    // Episode 2, no filler: the mirror itself fills what is left (the source takes ~20 MiB
    // more), then the operator grows the tmpfs while kmirror runs.
    let more: u64 = 100_000;
    fill_source(&src, "big", more);
    proc::wait_for(
        Duration::from_secs(120),
        "a mirror partition FAILED with ENOSPC again",
        || {
            let rows = mirror::describe(&dst, Some("dr"));
            rows.iter()
                .any(|r| r.state == "FAILED" && r.reason().contains("No space left on device"))
                .then_some(())
        },
    );
    assert!(node.alive(), "kmirror died when the mirror filled its disk");
    let partial2: Vec<i64> = mirror::bounds(&dst, "big", parts)
        .expect("destination bounds")
        .iter()
        .map(|(_, e)| *e)
        .collect();
    eprintln!("episode 2: destination ends {partial2:?} when full");
    assert!(
        partial2.iter().sum::<i64>() < (total + more) as i64,
        "episode 2: the disk should have filled mid-copy: {partial2:?}"
    );
    mirror::assert_log_equal(&src, &dst, "big", &partial2);
    disk.remount(128);
    let ends = mirror::wait_caught_up(&src, &dst, "big", parts, false, Duration::from_secs(180));
    assert_eq!(ends.iter().sum::<i64>(), (total + more) as i64);
    mirror::assert_log_equal(&src, &dst, "big", &ends);
    mirror::wait_mirroring_at_lag_zero(&dst, "dr", parts, Duration::from_secs(30));
    // Still consistent after a clean restart (recovery keeps exactly what was served).
    assert!(
        node.stop(),
        "kmirror did not stop cleanly after the disk-full episode"
    );
    node.start_again();
    mirror::assert_log_equal(&src, &node.addr(), "big", &ends);
    for (t, (topic, _)) in LOCAL_TOPICS.iter().enumerate() {
        assert_eq!(
            texts(&local_values(&node.addr(), topic)),
            texts(&expected[t]),
            "{topic} after restart"
        );
    }
    assert_eq!(
        committed_p0(&dst, "g-full", "local"),
        7,
        "commit after restart"
    );
}
