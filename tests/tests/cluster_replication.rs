//! Issue 12, step 2: records replicated between three `kmirror serve --quorum` nodes, with
//! the same scenario on three Apache Kafka 4.1.1 nodes as the reference.
//! - an RF=3 topic (min.insync.replicas=2); a Java idempotent producer and a librdkafka
//!   producer write with acks=all while the leader of partition 0 is SIGKILLed mid-produce:
//!   both finish without errors on the new leaders; consumed back, every acknowledged record
//!   is at its acknowledged offset, the idempotent producer's exactly once and in order;
//! - the killed node restarts, truncates if it must, catches up and rejoins every ISR
//!   (`kafka-topics --describe`);
//! - min.insync.replicas=3 with a node down: the Java producer gets
//!   NotEnoughReplicasException (NOT_ENOUGH_REPLICAS, 19);
//! - kmirror only: after a clean stop, every node's segment files of every partition are
//!   byte-equal (read with the log crate; no replica-id reads needed).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_tests::cluster::{
    describe_topic, kafka_three_nodes, run_seq_producer, ClusterOpts, Described, KmirrorCluster,
    Produced, ThreeNodes as Under,
};
use kmirror_tests::helpers::read_back;
use kmirror_tests::java::{self, tools};
use kmirror_tests::proc;
use kmirror_tests::python;

const TOPIC: &str = "replicated";
/// The librdkafka producer's topic (its own topic: only the Java producer's records
/// are checked for exactly once).
const RD_TOPIC: &str = "replicated-rd";
const STRICT: &str = "strict";
const PARTITIONS: i32 = 3;
const SESSION_MS: u64 = 3000;
const RECORDS: u64 = 3000;

/// `kafka-topics --describe --topic topic` through `addr`, by partition, ISRs sorted (None:
/// the tool failed or listed fewer partitions, e.g. while the node it asked is going away).
fn describe(addr: &str, topic: &str, partitions: i32) -> Option<BTreeMap<i32, Described>> {
    let mut out = describe_topic(addr, topic);
    for d in out.values_mut() {
        d.replicas.sort_unstable();
        d.isr.sort_unstable();
    }
    (out.len() == partitions as usize).then_some(out)
}

fn create(c: &dyn Under, topic: &str, partitions: i32, min_insync: u32) {
    let ran = java::run_tool(
        tools::TOPIC_COMMAND,
        &[
            "--bootstrap-server",
            &c.addr(1),
            "--create",
            "--topic",
            topic,
            "--partitions",
            &partitions.to_string(),
            "--replication-factor",
            "3",
            "--config",
            &format!("min.insync.replicas={min_insync}"),
        ],
        Duration::from_secs(60),
    );
    assert!(
        ran.status.success(),
        "{}: create {topic}: {}",
        c.name(),
        ran.stderr
    );
}

/// Waits until every partition of `topic` has all three replicas in its ISR.
fn wait_full_isr(c: &dyn Under, via: i32, topic: &str, partitions: i32, timeout: Duration) {
    proc::wait_for(timeout, "every replica in every ISR", || {
        describe(&c.addr(via), topic, partitions)
            .filter(|d| d.values().all(|p| p.isr == vec![1, 2, 3] && p.leader > 0))
    });
}

fn produce(mut cmd: std::process::Command, what: &str) -> Produced {
    run_seq_producer(&mut cmd, what, Duration::from_secs(240))
}

fn java_produce(
    boot: &str,
    topic: &str,
    partitions: i32,
    records: u64,
    props: &[&str],
) -> Produced {
    let mut cmd = java::program("SeqProducer");
    cmd.args([boot, topic, &partitions.to_string(), &records.to_string()]);
    cmd.args(props);
    produce(cmd, "Java SeqProducer")
}

fn librdkafka_produce(boot: &str, records: u64) -> Produced {
    let mut cmd = python::script("seq_producer.py");
    // Idempotent too: producer ids are unique cluster-wide (AllocateProducerIds blocks).
    cmd.args([
        boot,
        RD_TOPIC,
        &PARTITIONS.to_string(),
        &records.to_string(),
        "seqproducer.rate=1000",
    ]);
    produce(cmd, "librdkafka seq_producer.py")
}

fn scenario(c: &mut dyn Under) {
    let name = c.name();
    let started = Instant::now();
    create(c, TOPIC, PARTITIONS, 2);
    create(c, RD_TOPIC, PARTITIONS, 2);
    create(c, STRICT, 1, 3);
    wait_full_isr(c, 2, TOPIC, PARTITIONS, Duration::from_secs(60));
    wait_full_isr(c, 2, RD_TOPIC, PARTITIONS, Duration::from_secs(60));
    wait_full_isr(c, 2, STRICT, 1, Duration::from_secs(60));
    let first = describe(&c.addr(2), TOPIC, PARTITIONS).unwrap();

    // Both producers run while the leader of partition 0 is SIGKILLed.
    let boot = (1..=3).map(|i| c.addr(i)).collect::<Vec<_>>().join(",");
    let (b1, b2) = (boot.clone(), boot.clone());
    let java = std::thread::spawn(move || {
        let r = java_produce(&b1, TOPIC, PARTITIONS, RECORDS, &["seqproducer.rate=1000"]);
        (r, Instant::now())
    });
    let rd = std::thread::spawn(move || (librdkafka_produce(&b2, RECORDS), Instant::now()));
    std::thread::sleep(Duration::from_millis(1500));
    let victim = first[&0].leader;
    c.kill(victim);
    let killed_at = Instant::now();
    let ((java_acks, acked, errors, errs), java_end) = java.join().unwrap();
    assert_eq!(
        (acked, errors),
        (RECORDS, 0),
        "{name}: Java producer: {errs:?}"
    );
    let ((rd_acks, acked, errors, errs), rd_end) = rd.join().unwrap();
    assert_eq!(
        (acked, errors),
        (RECORDS, 0),
        "{name}: librdkafka producer: {errs:?}"
    );
    let live = (1..=3).find(|i| *i != victim).unwrap();

    // Every acknowledged record at its offset; the idempotent producer's exactly once and
    // in order per partition (its partition p holds seq 0, 1, 2, ... and nothing else).
    let stored = read_back(&c.addr(live), TOPIC, PARTITIONS);
    let stored_rd = read_back(&c.addr(live), RD_TOPIC, PARTITIONS);
    for ((p, seq, off), stored) in java_acks
        .iter()
        .map(|a| (a, &stored))
        .chain(rd_acks.iter().map(|a| (a, &stored_rd)))
    {
        let v = stored.get(&(*p, *off)).map(String::as_str).unwrap_or("");
        assert!(
            v.starts_with(&format!("{p}:{seq}:")),
            "{name}: p{p}@{off} holds {v:?}, want seq {seq}"
        );
    }
    for p in 0..PARTITIONS {
        let seqs: Vec<u64> = stored
            .range((p, 0)..(p + 1, 0))
            .map(|(_, v)| v.split(':').nth(1).unwrap().parse().unwrap())
            .collect();
        let want: Vec<u64> = (0..RECORDS / PARTITIONS as u64).collect();
        assert_eq!(seqs, want, "{name}: p{p}: the Java records in offset order");
    }
    eprintln!(
        "{name}: after the SIGKILL of node {victim} the Java producer finished in {:.1} s, librdkafka in {:.1} s",
        java_end.saturating_duration_since(killed_at).as_secs_f64(),
        rd_end.saturating_duration_since(killed_at).as_secs_f64()
    );

    // The killed node restarts and rejoins every ISR.
    c.restart(victim);
    let t = Instant::now();
    wait_full_isr(c, live, TOPIC, PARTITIONS, Duration::from_secs(90));
    eprintln!(
        "{name}: node {victim} back in every ISR {:.1} s after its restart",
        t.elapsed().as_secs_f64()
    );

    // min.insync.replicas=3 with a node down: NOT_ENOUGH_REPLICAS, as the Java client names it.
    let down = (1..=3).find(|i| *i != victim).unwrap();
    c.kill(down);
    let up = (1..=3).find(|i| *i != down).unwrap();
    proc::wait_for(
        Duration::from_millis(SESSION_MS) + Duration::from_secs(60),
        "the strict topic's ISR without the killed node",
        || {
            describe(&c.addr(up), STRICT, 1)
                .filter(|d| !d[&0].isr.contains(&down) && d[&0].leader > 0)
        },
    );
    let others = (1..=3)
        .filter(|i| *i != down)
        .map(|i| c.addr(i))
        .collect::<Vec<_>>()
        .join(",");
    let (_, acked, errors, errs) = java_produce(
        &others,
        STRICT,
        1,
        5,
        &[
            "enable.idempotence=false",
            "retries=0",
            "request.timeout.ms=10000",
            "delivery.timeout.ms=20000",
        ],
    );
    assert_eq!(
        (acked, errors),
        (0, 5),
        "{name}: min.insync.replicas=3 with two up"
    );
    assert!(
        errs.iter().all(|e| e == "NotEnoughReplicasException"),
        "{name}: {errs:?}"
    );
    c.restart(down);
    wait_full_isr(c, up, TOPIC, PARTITIONS, Duration::from_secs(90));
    eprintln!("{name}: scenario {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn three_kmirror_nodes_replicate_records_as_kafka_does() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut c = KmirrorCluster::start(
        3,
        ClusterOpts {
            session_timeout_ms: SESSION_MS,
            ..ClusterOpts::default()
        },
    );
    c.dump_logs_on_panic(60, |c| {
        scenario(c);
        // Let the followers fetch the last high watermark, then stop every node cleanly and
        // compare the files.
        std::thread::sleep(Duration::from_secs(2));
        c.stop_all();
        for (topic, p) in [TOPIC, RD_TOPIC]
            .into_iter()
            .flat_map(|t| (0..PARTITIONS).map(move |p| (t, p)))
        {
            let logs = c.replica_logs(topic, p);
            assert!(
                logs[0].0 >= (RECORDS / PARTITIONS as u64) as i64,
                "{topic}-{p}: {}",
                logs[0].0
            );
            for (i, l) in logs.iter().enumerate() {
                assert_eq!(l.0, logs[0].0, "{topic}-{p}: node {} log end", i + 1);
                assert!(
                    l.1 == logs[0].1,
                    "{topic}-{p}: node {} is not log-equal with node 1",
                    i + 1
                );
            }
        }
    });
}

#[test]
fn the_same_scenario_on_three_kafka_nodes() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut k = kafka_three_nodes(SESSION_MS);
    scenario(&mut k);
}
