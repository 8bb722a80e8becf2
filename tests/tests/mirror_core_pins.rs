//! Issue 10 step 3: users tune which engine core owns a mirror's partitions, at runtime.
//! Against a real Apache Kafka 4.1.1 source and `kmirror serve --cores 2`: while a Java
//! producer keeps writing to the source and a Java consumer group reads the mirror topic on
//! kmirror, `kmirror mirror alter --set mirror.core.pins=…` pins one partition, then the
//! whole topic, to the other core. Afterwards the mirror is log-equal with the source (same
//! records at the same offsets, nothing lost or duplicated), `describe` and the
//! `kmirror_mirror_partition_core` gauge show the new cores, the consumer saw every record
//! exactly once and in order, bad pins are refused with a clear error and change nothing, a
//! restart keeps the placement, and the `topic` policy puts the topic on one core.

use std::collections::BTreeMap;
use std::time::Duration;

use kmirror_tests::helpers::start_kafka_and_kmirror;
use kmirror_tests::metrics::scrape;
use kmirror_tests::mirror::FAST;
use kmirror_tests::proc::{self, LineChild};
use kmirror_tests::{java, mirror, KafkaCluster, KmirrorNode};

const TOPIC: &str = "pinned";
const PARTS: i32 = 2;
const RECORDS: u64 = 30_000;

/// Each partition's core as `describe --json` reports it.
fn described_cores(dst: &str) -> BTreeMap<i32, i64> {
    mirror::describe(dst, Some("dr"))
        .into_iter()
        .filter(|r| r.topic == TOPIC)
        .map(|r| {
            let core = r.raw.get("core").and_then(|c| c.as_i64()).unwrap_or(-2);
            (r.partition, core)
        })
        .collect()
}

/// Each partition's core as the metrics endpoint reports it.
fn metric_cores(maddr: &str) -> BTreeMap<i32, i64> {
    let s = scrape(maddr);
    (0..PARTS)
        .filter_map(|p| {
            let ps = p.to_string();
            let v = s.value(
                "kmirror_mirror_partition_core",
                &[("mirror", "dr"), ("topic", TOPIC), ("partition", &ps)],
            )?;
            Some((p, v as i64))
        })
        .collect()
}

fn wait_cores(dst: &str, maddr: &str, want: &BTreeMap<i32, i64>, what: &str) {
    proc::wait_for(Duration::from_secs(60), what, || {
        (described_cores(dst) == *want && metric_cores(maddr) == *want).then_some(())
    });
}

/// Lets the mirror copy `more` further records (the consumer and producer keep running).
fn wait_mirrored_more(dst: &str, more: i64) {
    let total = || -> Option<i64> {
        let b = mirror::bounds(dst, TOPIC, PARTS).ok()?;
        Some(b.iter().map(|(_, e)| e).sum())
    };
    let goal = (total().unwrap_or(0) + more).min(RECORDS as i64);
    proc::wait_for(Duration::from_secs(90), "mirror makes progress", || {
        (total()? >= goal).then_some(())
    });
}

struct Tail(std::path::PathBuf);
impl Drop for Tail {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kmirror log tail:\n{}", proc::tail(&self.0, 60));
        }
    }
}

#[test]
fn pin_at_runtime_moves_partitions_between_cores_without_losing_position() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let maddr = format!("127.0.0.1:{}", proc::free_port());
    let (kafka, mut node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder()
            .args(&["--cores", "2", "--metrics", &maddr])
            .start()
    });
    let (src, dst) = (kafka.bootstrap(), node.addr());
    let _tail = Tail(node.log_path());
    kafka.create_topic(TOPIC, PARTS, &[]);

    // A producer that keeps writing for the whole test (~20 s at 1,500 records/s).
    let producer = LineChild::spawn(java::program("SeqProducer").args([
        src.as_str(),
        TOPIC,
        &PARTS.to_string(),
        &RECORDS.to_string(),
        "seqproducer.rate=1500",
    ]));
    proc::wait_for(Duration::from_secs(60), "the producer is acked", || {
        (producer.count("ACK ") > 500).then_some(())
    });
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &[TOPIC]);
    wait_mirrored_more(&dst, 1_000);

    // A consumer group on the mirror reads through every move.
    let dir = tempfile::tempdir().expect("temp");
    let stop = dir.path().join("stop");
    let consumer = LineChild::spawn(java::program("GroupConsumer").args([
        dst.as_str(),
        "pin-readers",
        TOPIC,
        &stop.display().to_string(),
        "0",
    ]));

    // The broker's spread policy puts the two partitions on different cores.
    let before = described_cores(&dst);
    assert_eq!(before.len(), PARTS as usize, "describe rows: {before:?}");
    let (c0, c1) = (before[&0], before[&1]);
    assert!(
        c0 != c1 && (0..2).contains(&c0) && (0..2).contains(&c1),
        "{before:?}"
    );
    wait_cores(&dst, &maddr, &before, "metrics show the spread cores");

    // Pin partition 0 onto partition 1's core, while records flow.
    wait_mirrored_more(&dst, 2_000);
    mirror::cli_ok(
        &dst,
        &[
            "alter",
            "dr",
            "--set",
            &format!("mirror.core.pins={TOPIC}:0:{c1}"),
        ],
    );
    let both_on_c1: BTreeMap<i32, i64> = [(0, c1), (1, c1)].into();
    wait_cores(
        &dst,
        &maddr,
        &both_on_c1,
        "partition 0 moved to the other core",
    );
    wait_mirrored_more(&dst, 2_000);

    // Pin the whole topic to the first core (replacing the partition pin): both move there
    // (partition 0 back, partition 1 away from where it started).
    mirror::cli_ok(
        &dst,
        &[
            "alter",
            "dr",
            "--set",
            &format!("mirror.core.pins={TOPIC}:{c0}"),
        ],
    );
    let both_on_c0: BTreeMap<i32, i64> = [(0, c0), (1, c0)].into();
    wait_cores(
        &dst,
        &maddr,
        &both_on_c0,
        "the whole topic moved to one core",
    );
    // The logs really moved (not just the reported numbers): partition 0 twice, 1 once.
    let log = std::fs::read_to_string(node.log_path()).expect("node log");
    let moves = |tp: &str| {
        log.lines()
            .filter(|l| l.contains("partition moved between cores") && l.contains(tp))
            .count()
    };
    assert_eq!(
        (moves(&format!("{TOPIC}-0")), moves(&format!("{TOPIC}-1"))),
        (2, 1),
        "moves in the node's log"
    );
    wait_mirrored_more(&dst, 2_000);

    // Bad pins: a clear error, nothing changes.
    for (value, says) in [
        (format!("{TOPIC}:7"), "core 7 does not exist"),
        (TOPIC.to_owned(), "unknown format"),
        (format!("{TOPIC}:zero"), "not a non-negative integer"),
    ] {
        let ran = mirror::cli(
            &dst,
            &["alter", "dr", "--set", &format!("mirror.core.pins={value}")],
        );
        let out = format!("{}{}", ran.stdout, ran.stderr);
        assert!(!ran.status.success(), "pin '{value}' accepted:\n{out}");
        assert!(
            out.contains(says) && out.contains("mirror.core.pins"),
            "{value}: {out}"
        );
    }
    let ran = mirror::cli(
        &dst,
        &["alter", "dr", "--set", "mirror.core.assignment=round-robin"],
    );
    let out = format!("{}{}", ran.stdout, ran.stderr);
    assert!(
        !ran.status.success() && out.contains("mirror.core.assignment"),
        "{out}"
    );
    let shown = mirror::cli_ok(&dst, &["describe", "dr"]).stdout;
    assert!(
        shown.contains(&format!("mirror.core.pins={TOPIC}:{c0}")),
        "the setting in force changed:\n{shown}"
    );
    assert_eq!(
        described_cores(&dst),
        both_on_c0,
        "a refused pin moved something"
    );

    // The producer finishes; the mirror is log-equal with the source.
    let (status, lines) = producer.wait(Duration::from_secs(180));
    assert!(status.success(), "producer failed");
    let acked = lines.iter().filter(|l| l.starts_with("ACK ")).count() as u64;
    assert_eq!(acked, RECORDS, "every produced record acked by the source");
    let ends = mirror::wait_caught_up(&src, &dst, TOPIC, PARTS, false, Duration::from_secs(90));
    assert_eq!(ends.iter().sum::<i64>(), RECORDS as i64);
    mirror::assert_log_equal(&src, &dst, TOPIC, &ends);

    // The consumer saw every offset of every partition exactly once, in order, and each
    // record's payload is the source's sequence for that partition.
    proc::wait_for(
        Duration::from_secs(90),
        "the consumer read everything",
        || (consumer.count("R ") >= RECORDS as usize).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(&stop, b"stop").expect("stop file");
    let (status, lines) = consumer.wait(Duration::from_secs(60));
    assert!(status.success(), "consumer failed");
    let mut per: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.starts_with("R ")) {
        let c: Vec<&str> = l.split_whitespace().collect();
        per.entry(c[1].parse().expect("partition"))
            .or_default()
            .push((c[2].parse().expect("offset"), c[3].to_owned()));
    }
    for p in 0..PARTS {
        let got = per.remove(&p).unwrap_or_default();
        let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
        let want: Vec<i64> = (0..ends[p as usize]).collect();
        assert!(
            offsets == want,
            "partition {p}: consumer offsets differ from 0..{} ({} read, first {:?}, last {:?})",
            ends[p as usize],
            offsets.len(),
            offsets.first(),
            offsets.last()
        );
        for (i, (_, v)) in got.iter().enumerate() {
            assert_eq!(*v, format!("{p}:{i}"), "partition {p} record {i}");
        }
    }

    // A restart keeps the placement (it is part of the mirror's durable settings) and the
    // mirror stays log-equal.
    node.stop();
    node.start_again();
    wait_cores(
        &dst,
        &maddr,
        &both_on_c0,
        "the placement survives a restart",
    );
    mirror::assert_mirrored(&src, &dst, TOPIC, PARTS, Duration::from_secs(60));

    // The `topic` policy instead of pins: both partitions on one core (whichever the topic
    // name hashes to), still log-equal.
    mirror::cli_ok(
        &dst,
        &[
            "alter",
            "dr",
            "--unset",
            "mirror.core.pins",
            "--set",
            "mirror.core.assignment=topic",
        ],
    );
    proc::wait_for(Duration::from_secs(60), "topic policy applied", || {
        let (d, m) = (described_cores(&dst), metric_cores(&maddr));
        (d == m && d.len() == PARTS as usize && d[&0] == d[&1] && d[&0] >= 0).then_some(())
    });
    mirror::assert_mirrored(&src, &dst, TOPIC, PARTS, Duration::from_secs(60));
}
