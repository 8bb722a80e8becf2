//! Issue 4's fault matrix against a real Apache Kafka 4.1.1 source: kmirror SIGKILLed at random
//! moments while mirroring, and the source partition leader killed mid-stream on a
//! three-broker source. Judged by SPEC's log-equal oracle.

use std::time::{Duration, Instant};

use kmirror_tests::helpers::start_kafka_and_kmirror;
use kmirror_tests::java::{self, tools};
use kmirror_tests::mirror::{self, FAST};
use kmirror_tests::proc::{self, LineChild};
use kmirror_tests::{KafkaCluster, KmirrorNode, WireClient};
use rand::Rng;

/// ProducerPerformance writing `records` at `rate` records/s (acks=all), in the background.
fn background_producer(boot: &str, topic: &str, records: u64, rate: u32) -> LineChild {
    LineChild::spawn(java::tool(tools::PRODUCER_PERFORMANCE).args([
        "--topic",
        topic,
        "--num-records",
        &records.to_string(),
        "--record-size",
        "200",
        "--throughput",
        &rate.to_string(),
        "--producer-props",
        &format!("bootstrap.servers={boot}"),
        "acks=all",
        "linger.ms=5",
        "delivery.timeout.ms=120000",
    ]))
}

fn finish_producer(p: LineChild, records: u64) {
    let (status, lines) = p.wait(Duration::from_secs(240));
    assert!(status.success(), "ProducerPerformance exited {status}");
    let summary = lines
        .iter()
        .rev()
        .find(|l| l.contains("records sent"))
        .cloned()
        .unwrap_or_default();
    assert!(
        summary.starts_with(&format!("{records} records sent")),
        "ProducerPerformance: {summary}"
    );
}

/// Six SIGKILLs of kmirror at random moments while it mirrors a topic that is also being
/// produced to; each time it is started again with no operator action. At the end the logs
/// are log-equal: no gap, no duplicate, bytes identical.
#[test]
fn sigkill_kmirror_at_random_moments_while_mirroring_then_log_equal_without_gap_or_duplicate() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, mut node) = start_kafka_and_kmirror(KafkaCluster::single, KmirrorNode::start);
    let src = kafka.bootstrap();
    let dst = node.addr();
    let parts = 4;
    kafka.create_topic("crashy", parts, &[]);
    // A backlog to copy, plus a producer that keeps writing through all the kills.
    finish_producer(
        background_producer(&src, "crashy", 300_000, 1_000_000),
        300_000,
    );
    let live = 150_000;
    let producer = background_producer(&src, "crashy", live, 6_000);

    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &["crashy"]);
    let mut rng = rand::thread_rng();
    let mut progress = Vec::new();
    for kill in 0..6 {
        let wait_ms = rng.gen_range(200..2500);
        std::thread::sleep(Duration::from_millis(wait_ms));
        let dest_end: i64 = mirror::bounds(&dst, "crashy", parts)
            .map(|b| b.iter().map(|(_, e)| e).sum())
            .unwrap_or(-1);
        node.kill_now();
        progress.push((kill, wait_ms, dest_end));
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..500)));
        node.start_again();
    }
    eprintln!("(kill, ms after previous start, destination records at kill): {progress:?}");
    finish_producer(producer, live);
    let ends = mirror::wait_caught_up(&src, &dst, "crashy", parts, false, Duration::from_secs(180));
    assert_eq!(ends.iter().sum::<i64>(), 300_000 + live as i64);
    let reports = mirror::assert_log_equal(&src, &dst, "crashy", &ends);
    assert!(reports.iter().all(|r| r.log_start == 0));
    // Describe agrees after the crashes: every partition MIRRORING at lag 0.
    mirror::wait_mirroring_at_lag_zero(&dst, "dr", parts, Duration::from_secs(30));
    let kills_mid_copy = progress
        .iter()
        .filter(|(_, _, d)| *d > 0 && *d < 300_000 + live as i64)
        .count();
    assert!(
        kills_mid_copy >= 3,
        "too few kills landed while copying was under way: {progress:?}"
    );
}

/// A three-broker source whose mirrored partition leaders are killed mid-stream: the fetchers
/// follow the new leaders, mirroring continues, and the logs end log-equal.
#[test]
fn three_broker_source_leader_killed_mid_stream_mirroring_continues_log_equal() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (mut kafka, node) = start_kafka_and_kmirror(KafkaCluster::three, KmirrorNode::start);
    let src = kafka.bootstrap();
    let dst = node.addr();
    let parts = 4;
    kafka.create_topic("ha", parts, &[]);
    let records = 120_000;
    let producer = background_producer(&src, "ha", records, 8_000);
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &["ha"]);
    proc::wait_for(
        Duration::from_secs(60),
        "the mirror to copy something",
        || {
            mirror::bounds(&dst, "ha", parts)
                .ok()
                .filter(|b| b.iter().all(|(_, e)| *e > 0))
                .map(|_| ())
        },
    );
    let victim = kafka.leader_of("ha", 0);
    let before: i64 = mirror::bounds(&dst, "ha", parts)
        .expect("bounds")
        .iter()
        .map(|(_, e)| e)
        .sum();
    kafka.kill_node(victim);
    let killed_at = Instant::now();
    let src_alive = kafka.bootstrap();
    proc::wait_for(Duration::from_secs(60), "a new leader for ha-0", || {
        // Metadata may still name the dead leader for a moment: retry, don't panic.
        let first = src_alive.split(',').next()?.to_string();
        let l = WireClient::connect(&first)
            .and_then(|mut c| c.partition_info("ha", 0))
            .ok()?
            .leader_id;
        (l != victim && l > 0).then_some(())
    });
    // Mirroring continues while the producer keeps going.
    proc::wait_for(
        Duration::from_secs(60),
        "destination to advance after the leader died",
        || {
            let now: i64 = mirror::bounds(&dst, "ha", parts)
                .ok()?
                .iter()
                .map(|(_, e)| e)
                .sum();
            (now > before + 10_000).then_some(())
        },
    );
    eprintln!(
        "killed node {victim}; destination advancing again {:.1} s later",
        killed_at.elapsed().as_secs_f64()
    );
    finish_producer(producer, records);
    let ends = mirror::wait_caught_up(
        &src_alive,
        &dst,
        "ha",
        parts,
        false,
        Duration::from_secs(120),
    );
    assert_eq!(ends.iter().sum::<i64>(), records as i64);
    mirror::assert_log_equal(&src_alive, &dst, "ha", &ends);
}
