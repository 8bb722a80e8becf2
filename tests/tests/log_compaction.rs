//! Issue 11 step 1: log compaction with Kafka's semantics. The same keyed workload (updates,
//! tombstones, a committed and an aborted transaction, written step by step with librdkafka so
//! offsets match) goes into Apache Kafka 4.1.1 and kmirror, on a topic with
//! cleanup.policy=compact, fast segment rolls, min.cleanable.dirty.ratio=0.01 and a short
//! delete.retention.ms. Filler records then keep both cleaners busy until both logs are
//! compacted (each live key once, tombstones and aborted records gone). Asserted: the surviving
//! (offset, key, value) records below the workload's end are identical on both brokers, and
//! are exactly the workload's final value per live key.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::{proc, python, BrokerUnderTest, KafkaCluster, KmirrorNode, WireClient};

const TOPIC: &str = "compacted";
const ROLL_MS: &str = "300";

type Row = (i64, String, String);

/// Every record (read_committed) below the high watermark: (offset, key, value), value "-"
/// for a tombstone.
fn dump(boot: &str, group: &str) -> Vec<Row> {
    let ran = proc::run_ok(
        python::script("record_dump.py").args([
            boot,
            TOPIC,
            "1",
            &format!("group.id={group}"),
            "isolation.level=read_committed",
        ]),
        Duration::from_secs(150),
    );
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
    let ran = proc::run_ok(
        python::script("compact_workload.py").args([boot, TOPIC, "workload", ROLL_MS]),
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
    proc::run_ok(
        python::script("compact_workload.py").args([boot, TOPIC, "filler", &n.to_string()]),
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
    let node = KmirrorNode::start_with(&["--log-cleaner-backoff-ms", "200"]);
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

    let model = workload(&kb);
    assert_eq!(workload(&mb), model, "the workload is deterministic");
    let mut kc = WireClient::connect(&kb).expect("connect kafka");
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
