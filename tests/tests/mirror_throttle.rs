//! Issue 10, step 4: the mirror byte-rate ceiling holds as a total over every partition and
//! core, changes at runtime through `kafka-configs` (the broker's dynamic config
//! `mirror.replication.throttled.rate`), and a topic in the mirror's `mirror.priority.topics`
//! keeps its lag near zero while a bulk backlog saturates the ceiling. Source: real Apache
//! Kafka 4.1.1; the rate is measured on the destination's log ends, the bytes per record from
//! the batches the test wrote.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kmirror_tests::helpers::{now_ms, start_kafka_and_kmirror};
use kmirror_tests::{java, mirror, records, KafkaCluster, KmirrorNode, WireClient};

const BULK_PARTITIONS: i32 = 4;
/// Each bulk batch: 10 records of 2 KiB. Fetches are capped at 256 KiB per partition: one
/// response is a quarter of a second of the first ceiling, so a partition that waited its
/// turn behind the bulk ones would fall a second or more behind.
const RECORDS_PER_BATCH: usize = 10;
const VALUE: usize = 2048;
/// Batches per bulk partition: 4 × 800 × 20 KiB ≈ 65 MB of backlog, more than the three
/// measured windows copy.
const BATCHES: usize = 800;
const FIRST_RATE: u64 = 1_000_000;
const SECOND_RATE: u64 = 2_000_000;
/// The mirror's own ceiling, set last with `mirror alter`: below the broker's, so it binds.
const MIRROR_RATE: u64 = 1_500_000;
const WARMUP: Duration = Duration::from_secs(2);
const WINDOW: Duration = Duration::from_secs(6);

fn total(ends: &[i64]) -> i64 {
    ends.iter().sum()
}

/// Bytes per second the destination gains over `WINDOW` (after `WARMUP`): the least-squares
/// slope of its log ends sampled every 200 ms, so a response landing just before or after
/// either end of the window does not skew the figure.
fn measure(dst: &str, bytes_per_record: f64, hot_lag: &mut impl FnMut()) -> f64 {
    let until = Instant::now() + WARMUP;
    while Instant::now() < until {
        hot_lag();
        std::thread::sleep(Duration::from_millis(200));
    }
    let t0 = Instant::now();
    let mut samples = Vec::new();
    while t0.elapsed() < WINDOW {
        let r = total(&mirror::end_offsets(dst, "bulk", BULK_PARTITIONS));
        samples.push((t0.elapsed().as_secs_f64(), r as f64 * bytes_per_record));
        hot_lag();
        std::thread::sleep(Duration::from_millis(200));
    }
    let n = samples.len() as f64;
    let (mx, my) = (
        samples.iter().map(|s| s.0).sum::<f64>() / n,
        samples.iter().map(|s| s.1).sum::<f64>() / n,
    );
    let cov: f64 = samples.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = samples.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    cov / var
}

#[test]
fn the_ceiling_holds_as_a_total_changes_at_runtime_and_priority_topics_keep_up() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder()
            .args(&[
                "--mirror-byte-rate",
                &FIRST_RATE.to_string(),
                "--cores",
                "2",
            ])
            .start()
    });
    let src = kafka.bootstrap();
    let dst = node.addr();
    kafka.create_topic("bulk", BULK_PARTITIONS, &[]);
    kafka.create_topic("hot", 1, &[]);

    // The backlog, with current timestamps (the source's retention must not take it).
    let value = vec![b'b'; VALUE];
    let values: Vec<&[u8]> = (0..RECORDS_PER_BATCH).map(|_| value.as_slice()).collect();
    let batch_len = records::batch(&values, now_ms()).len();
    let bytes_per_record = batch_len as f64 / RECORDS_PER_BATCH as f64;
    for p in 0..BULK_PARTITIONS {
        let mut c = WireClient::connect_leader(&src, "bulk", p).expect("connect source leader");
        for _ in 0..BATCHES {
            let (code, _) = c
                .produce_raw("bulk", p, records::batch(&values, now_ms()), -1)
                .expect("produce");
            assert_eq!(code, 0, "produce the backlog");
        }
    }
    let backlog = (BATCHES * RECORDS_PER_BATCH) as i64 * BULK_PARTITIONS as i64;

    mirror::create(
        &dst,
        "dr",
        &src,
        &[
            ("mirror.metadata.sync.interval.ms", "1000"),
            ("mirror.retry.backoff.ms", "100"),
            ("mirror.fetch.partition.max.bytes", "262144"),
            ("mirror.fetch.max.wait.ms", "100"),
            ("mirror.priority.topics", "hot"),
        ],
    );
    mirror::add_topics(&dst, "dr", &["bulk", "hot"]);

    // The priority topic gets a record every 50 ms for the whole run.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let hot_src = src.clone();
        let stop_ref = &stop;
        s.spawn(move || {
            let mut c = WireClient::connect_leader(&hot_src, "hot", 0).expect("connect");
            let v = vec![b'h'; 1024];
            while !stop_ref.load(Ordering::Relaxed) {
                let (code, _) = c
                    .produce_raw("hot", 0, records::batch(&[&v], now_ms()), -1)
                    .expect("produce hot");
                assert_eq!(code, 0);
                std::thread::sleep(Duration::from_millis(50));
            }
        });

        kmirror_tests::proc::wait_for(Duration::from_secs(60), "mirroring to start", || {
            (mirror::partition_count(&dst, "bulk") == BULK_PARTITIONS as usize
                && total(&mirror::end_offsets(&dst, "bulk", BULK_PARTITIONS)) > 0)
                .then_some(())
        });
        let mut worst_hot_lag = 0i64;
        let mut hot_samples = 0;
        let mut hot_lag = || {
            let s = mirror::end_offsets(&src, "hot", 1)[0];
            let d = mirror::end_offsets(&dst, "hot", 1)
                .first()
                .copied()
                .unwrap_or(0);
            worst_hot_lag = worst_hot_lag.max(s - d);
            hot_samples += 1;
        };

        let first = measure(&dst, bytes_per_record, &mut hot_lag);

        // Raise the ceiling at runtime with Kafka's own tool, as an operator would.
        let alter = java::run_tool(
            "kafka.admin.ConfigCommand",
            &[
                "--bootstrap-server",
                &dst,
                "--entity-type",
                "brokers",
                "--entity-default",
                "--alter",
                "--add-config",
                &format!("mirror.replication.throttled.rate={SECOND_RATE}"),
            ],
            Duration::from_secs(90),
        );
        assert!(
            alter.status.success(),
            "kafka-configs --alter: {}\n{}",
            alter.stdout,
            alter.stderr
        );
        let second = measure(&dst, bytes_per_record, &mut hot_lag);
        // The mirror's own ceiling, changed on the running mirror.
        mirror::cli_ok(
            &dst,
            &[
                "alter",
                "dr",
                "--set",
                &format!("mirror.throttled.rate={MIRROR_RATE}"),
            ],
        );
        let third = measure(&dst, bytes_per_record, &mut hot_lag);
        let described = java::run_tool(
            "kafka.admin.ConfigCommand",
            &[
                "--bootstrap-server",
                &dst,
                "--entity-type",
                "brokers",
                "--entity-name",
                "1", // kmirror's default node id
                "--describe",
                "--all",
            ],
            Duration::from_secs(90),
        );
        stop.store(true, Ordering::Relaxed);
        let left = backlog - total(&mirror::end_offsets(&dst, "bulk", BULK_PARTITIONS));

        eprintln!(
            "ceiling {FIRST_RATE} B/s: measured {first:.0}; raised to {SECOND_RATE}: measured \
             {second:.0}; mirror ceiling {MIRROR_RATE}: measured {third:.0}; hot topic's worst lag {worst_hot_lag} records over {hot_samples} \
             samples; {left} bulk records still to copy"
        );
        assert!(
            left > 0,
            "the backlog ran out before the second window ended"
        );
        for (want, got) in [
            (FIRST_RATE, first),
            (SECOND_RATE, second),
            (MIRROR_RATE, third),
        ] {
            let err = (got - want as f64) / want as f64;
            assert!(
                err.abs() <= 0.10,
                "measured {got:.0} B/s under a {want} B/s ceiling ({:+.1}%)",
                err * 100.0
            );
        }
        // 20 records/s: a lag of 5 is a quarter of a second. Without priority the hot
        // partition waits behind the bulk partitions' debt (measured: 20+ records).
        assert!(
            worst_hot_lag <= 5,
            "the priority topic fell {worst_hot_lag} records behind"
        );
        assert!(
            described
                .stdout
                .contains(&format!("mirror.replication.throttled.rate={SECOND_RATE}")),
            "kafka-configs --describe: {}",
            described.stdout
        );
    });
}

/// The topic config `mirror.replication.throttled.replicas` (seed 000) picks which mirror
/// partitions the broker-wide ceiling throttles: set on the mirror topics on the destination
/// (with Kafka's `kafka-configs` too), a topic naming only another broker's replica copies
/// at full speed while a topic naming `*` stays under the ceiling.
#[test]
fn throttled_replicas_topic_config_picks_which_partitions_the_broker_ceiling_throttles() {
    let _heavy = kmirror_tests::heavy_test_lock();
    const RATE: u64 = 300_000;
    const BATCHES: usize = 150; // × 20 KiB ≈ 3 MB per topic: ten seconds at RATE
    let (src_node, dst_node) = std::thread::scope(|s| {
        let a = s.spawn(KmirrorNode::start);
        let b = s.spawn(|| {
            KmirrorNode::builder()
                .args(&["--mirror-byte-rate", &RATE.to_string()])
                .start()
        });
        (a.join().expect("source"), b.join().expect("destination"))
    });
    let (src, dst) = (src_node.addr(), dst_node.addr());
    let value = vec![b'b'; VALUE];
    let values: Vec<&[u8]> = (0..RECORDS_PER_BATCH).map(|_| value.as_slice()).collect();
    let mut c = WireClient::connect(&src).expect("connect source");
    for topic in ["capped", "free"] {
        assert_eq!(c.create_topic(topic, 1, 1, &[]).expect("create"), 0);
        for _ in 0..BATCHES {
            let (code, _) = c
                .produce_raw(topic, 0, records::batch(&values, now_ms()), -1)
                .expect("produce");
            assert_eq!(code, 0);
        }
    }
    let backlog = (BATCHES * RECORDS_PER_BATCH) as i64;
    mirror::create(
        &dst,
        "dr",
        &src,
        &[
            ("mirror.metadata.sync.interval.ms", "1000"),
            ("mirror.fetch.partition.max.bytes", "65536"),
        ],
    );
    mirror::add_topics(&dst, "dr", &["capped", "free"]);
    kmirror_tests::proc::wait_for(Duration::from_secs(30), "mirror topics created", || {
        (mirror::partition_count(&dst, "capped") == 1 && mirror::partition_count(&dst, "free") == 1)
            .then_some(())
    });
    // Mirror topics are read-only, but these keys belong to the destination.
    assert_eq!(
        mirror::set_topic_configs(
            &dst,
            "capped",
            &[("mirror.replication.throttled.replicas", "*")]
        ),
        0
    );
    let started = Instant::now();
    let alter = java::run_tool(
        "kafka.admin.ConfigCommand",
        &[
            "--bootstrap-server",
            &dst,
            "--entity-type",
            "topics",
            "--entity-name",
            "free",
            "--alter",
            "--add-config",
            "mirror.replication.throttled.replicas=[0:99]",
        ],
        Duration::from_secs(90),
    );
    assert!(
        alter.status.success(),
        "kafka-configs: {}{}",
        alter.stdout,
        alter.stderr
    );
    kmirror_tests::proc::wait_for(
        Duration::from_secs(30),
        "the unthrottled topic copied",
        || (mirror::end_offsets(&dst, "free", 1)[0] == backlog).then_some(()),
    );
    let capped = mirror::end_offsets(&dst, "capped", 1)[0];
    eprintln!(
        "free copied {backlog} records in {:?} (with kafka-configs); capped at {capped}",
        started.elapsed()
    );
    assert!(
        capped < backlog * 8 / 10,
        "the capped topic copied {capped} of {backlog} records as fast as the free one"
    );
    assert_eq!(
        mirror::topic_configs(&dst, "free")
            .get("mirror.replication.throttled.replicas")
            .cloned()
            .flatten()
            .as_deref(),
        Some("0:99")
    );
}
