//! Issue 11 step 1: log compaction with Kafka's semantics. The same keyed workload (updates,
//! tombstones, a committed and an aborted transaction, written step by step with librdkafka so
//! offsets match) goes into Apache Kafka 4.1.1 and kmirror, on a topic with
//! cleanup.policy=compact, fast segment rolls, min.cleanable.dirty.ratio=0.01 and a short
//! delete.retention.ms. Filler records then keep both cleaners busy until both logs are
//! compacted (each live key once, tombstones and aborted records gone). Asserted: the surviving
//! (offset, key, value) records below the workload's end are identical on both brokers, and
//! are exactly the workload's final value per live key. A mirror topic carrying the source's
//! cleanup.policy=compact is not cleaned while mirroring (it stays log-equal to a source whose
//! cleaner is off) and is cleaned like any topic once failed over.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_tests::helpers::now_ms;
use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::{mirror, proc, python, BrokerUnderTest, KafkaCluster, KmirrorNode, WireClient};

const TOPIC: &str = "compacted";
const ROLL_MS: &str = "300";

type Row = (i64, String, String);

/// Every record (read_committed) below the high watermark: (offset, key, value), value "-"
/// for a tombstone.
fn dump(boot: &str, group: &str) -> Vec<Row> {
    dump_topic(boot, TOPIC, group)
}

fn dump_topic(boot: &str, topic: &str, group: &str) -> Vec<Row> {
    let ran = proc::run(
        python::script("record_dump.py").args([
            boot,
            topic,
            "1",
            &format!("group.id={group}"),
            "isolation.level=read_committed",
        ]),
        Duration::from_secs(150),
    );
    if !ran.status.success() {
        let hw = WireClient::connect(boot)
            .and_then(|mut c| c.log_bounds(topic, 0))
            .map_or(0, |b| b.1);
        let batches = kmirror_tests::oracle::read_batches(boot, topic, 0, hw).map(|(_, b)| {
            b.iter()
                .map(|b| {
                    let attrs = i16::from_be_bytes([b.bytes[21], b.bytes[22]]);
                    let count = i32::from_be_bytes(b.bytes[57..61].try_into().unwrap());
                    format!(
                        "{}..{} len {} attrs {attrs:#x} count {count} crc_ok {}",
                        b.base_offset,
                        b.last_offset,
                        b.bytes.len(),
                        b.crc_ok()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        });
        panic!(
            "record_dump on {boot} failed:\n{}\n{}\nbatches:\n{}",
            proc::last_lines(&ran.stdout, 5),
            proc::last_lines(&ran.stderr, 5),
            batches.unwrap_or_else(|e| e)
        );
    }
    let mut rows: Vec<Row> = ran
        .stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 5 && f[0] == "R").then(|| (f[2].parse().unwrap(), f[3].into(), f[4].into()))
        })
        .collect();
    rows.sort();
    rows
}

fn workload(boot: &str) -> BTreeMap<String, String> {
    workload_on(boot, TOPIC)
}

fn workload_on(boot: &str, topic: &str) -> BTreeMap<String, String> {
    let ran = proc::run_ok(
        python::script("compact_workload.py").args([boot, topic, "workload", ROLL_MS]),
        Duration::from_secs(180),
    );
    assert!(ran.stdout.contains("DONE"), "{}", ran.stdout);
    ran.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("FINAL "))
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn filler(boot: &str, n: usize) {
    filler_on(boot, TOPIC, n)
}

fn filler_on(boot: &str, topic: &str, n: usize) {
    proc::run_ok(
        python::script("compact_workload.py").args([boot, topic, "filler", &n.to_string()]),
        Duration::from_secs(60),
    );
}

/// Compacted as far as Kafka goes: each live key once, with its final value.
fn compacted(rows: &[Row], model: &BTreeMap<String, String>) -> bool {
    let got: BTreeMap<String, String> = rows
        .iter()
        .map(|(_, k, v)| (k.clone(), v.clone()))
        .collect();
    rows.len() == model.len() && &got == model
}

#[test]
fn kafka_and_kmirror_compact_the_same_keyed_workload_to_the_same_records() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::start_with(KafkaOptions {
        props: vec![("log.cleaner.backoff.ms".into(), "200".into())],
        ..KafkaOptions::default()
    });
    let node = KmirrorNode::builder()
        .args(&["--log-cleaner-backoff-ms", "200"])
        .start();
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "200"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "2000"),
    ];
    kafka.create_topic(TOPIC, 1, &configs);
    let mut km = WireClient::connect(&node.bootstrap()).expect("connect kmirror");
    assert_eq!(km.create_topic(TOPIC, 1, 1, &configs).expect("create"), 0);
    let (kb, mb) = (kafka.bootstrap(), node.bootstrap());
    // A keyless record is refused by both (INVALID_RECORD): no cleaner could keep it.
    let now = now_ms();
    let keyless = kmirror_tests::records::batch(&[b"no key"], now);
    let mut kc = WireClient::connect(&kb).expect("connect kafka");
    let k_code = kc
        .produce_raw(TOPIC, 0, keyless.clone(), -1)
        .expect("produce")
        .0;
    let m_code = km.produce_raw(TOPIC, 0, keyless, -1).expect("produce").0;
    assert_eq!(
        (m_code, k_code),
        (87, 87),
        "keyless record to a compacted topic"
    );

    let model = workload(&kb);
    assert_eq!(workload(&mb), model, "the workload is deterministic");
    let end_k = kc.log_bounds(TOPIC, 0).expect("kafka bounds").1;
    let end_m = km.log_bounds(TOPIC, 0).expect("kmirror bounds").1;
    assert_eq!(end_k, end_m, "same offsets for the same workload");
    // Cleaning may already have started; aborted records are never served either way.
    let before = dump(&mb, "before");
    assert!(before.iter().all(|r| !r.2.starts_with("x-")));

    // Keep both cleaners busy (dirty data, rolled segments) until both logs are compacted.
    let start = Instant::now();
    let mut round = 0;
    let (k, m) = loop {
        filler(&kb, 3);
        filler(&mb, 3);
        std::thread::sleep(Duration::from_millis(700));
        round += 1;
        if round % 4 != 0 {
            continue;
        }
        let below =
            |rows: Vec<Row>| -> Vec<Row> { rows.into_iter().filter(|r| r.0 < end_k).collect() };
        let k = below(dump(&kb, &format!("k{round}")));
        let m = below(dump(&mb, &format!("m{round}")));
        if (compacted(&k, &model) && compacted(&m, &model))
            || start.elapsed() > Duration::from_secs(180)
        {
            break (k, m);
        }
    };
    eprintln!(
        "compacted after {:?}: {} records survive below offset {end_k}",
        start.elapsed(),
        m.len()
    );
    assert!(
        compacted(&k, &model),
        "Kafka did not finish compacting: {k:?}"
    );
    assert!(
        compacted(&m, &model),
        "kmirror did not compact like Kafka:\nkmirror {m:?}\nkafka   {k:?}"
    );
    assert_eq!(m, k, "surviving (offset, key, value) differ");
    assert!(m.iter().all(|r| r.2 != "-" && !r.2.starts_with("x-")));
}

#[test]
fn a_compacted_mirror_topic_is_not_cleaned_while_mirroring_and_is_after_failover() {
    let _heavy = kmirror_tests::heavy_test_lock();
    const MT: &str = "mirrored-compacted";
    // The source's cleaner is off: whatever kmirror removed would break log-equality.
    let kafka = KafkaCluster::start_with(KafkaOptions {
        props: vec![("log.cleaner.enable".into(), "false".into())],
        ..KafkaOptions::default()
    });
    let node = KmirrorNode::builder()
        .args(&["--log-cleaner-backoff-ms", "200"])
        .start();
    let (src, dst) = (kafka.bootstrap(), node.bootstrap());
    kafka.create_topic(
        MT,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "200"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "2000"),
        ],
    );
    let model = workload_on(&src, MT);
    mirror::create(
        &dst,
        "dr",
        &src,
        &[
            ("mirror.metadata.sync.interval.ms", "500"),
            ("mirror.retry.backoff.ms", "100"),
        ],
    );
    mirror::add_topics(&dst, "dr", &[MT]);
    // Several cleaner rounds while mirroring, with new data rolling segments on both sides.
    for _ in 0..6 {
        filler_on(&src, MT, 3);
        std::thread::sleep(Duration::from_millis(500));
    }
    let configs = mirror::topic_configs(&dst, MT);
    assert_eq!(
        configs.get("cleanup.policy").cloned().flatten().as_deref(),
        Some("compact"),
        "the mirror topic carries the source's policy"
    );
    let reports = mirror::assert_mirrored(&src, &dst, MT, 1, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let end = mirror::end_offsets(&src, MT, 1)[0];
    mirror::assert_log_equal(&src, &dst, MT, &[end]);
    let mirrored = dump_topic(&dst, MT, "mirrored");
    assert!(
        mirrored.len() > 200,
        "not cleaned while mirroring: {} records ({reports:?})",
        mirrored.len()
    );

    // Failover: the topic is writable and cleaned like any compacted topic.
    let ran = mirror::remove_topics(&dst, "dr", &[MT]);
    assert!(ran.status.success(), "{}{}", ran.stdout, ran.stderr);
    let start = Instant::now();
    let below = loop {
        if filler_try(&dst, MT) {
            std::thread::sleep(Duration::from_millis(700));
        } else {
            std::thread::sleep(Duration::from_millis(300));
        }
        let below: Vec<Row> =
            dump_topic(&dst, MT, &format!("after{}", start.elapsed().as_millis()))
                .into_iter()
                .filter(|r| r.0 < end && !r.1.starts_with('f'))
                .collect();
        if compacted(&below, &model) || start.elapsed() > Duration::from_secs(120) {
            break below;
        }
    };
    assert!(
        compacted(&below, &model),
        "kmirror did not clean the failed-over topic: {} records below {end}: {below:?}",
        below.len()
    );
}

/// One filler record on `boot`; false while the topic is still read-only (failover pending).
fn filler_try(boot: &str, topic: &str) -> bool {
    proc::run(
        python::script("compact_workload.py").args([boot, topic, "filler", "3"]),
        Duration::from_secs(60),
    )
    .status
    .success()
}
