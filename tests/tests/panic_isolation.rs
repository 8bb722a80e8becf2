//! A panic while handling one request must cost only that request. Two failpoints
//! (`KMIRROR_FAILPOINT`, test-only) inject panics into a one-core kmirror (`--cores 1`, so
//! everything shares the core that panics):
//! - `panic-on-client-id:boom` panics in the request handling of a connection whose client
//!   id is "boom": each such request closes only that connection, while a Java producer
//!   (ProducerPerformance, acks=all) keeps writing on the same core with nothing lost, and
//!   another connection keeps being answered;
//! - `panic-in-append:doomed` panics inside the append job on the partition's owning core:
//!   that produce gets UNKNOWN_SERVER_ERROR (-1), produces to another topic on the same core
//!   succeed, and the doomed partition is reopened and still readable.

use std::time::Duration;

use kmirror_tests::helpers::now_ms;
use kmirror_tests::java::{self, tools};
use kmirror_tests::{proc, python, KmirrorNode, WireClient};

#[test]
fn a_panicking_connection_closes_alone_while_the_core_keeps_serving() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut node = KmirrorNode::builder()
        .args(&["--cores", "1"])
        .env(&[("KMIRROR_FAILPOINT", "panic-on-client-id:boom")])
        .start();
    let boot = node.addr();
    let mut admin = WireClient::connect(&boot).expect("connect");
    assert_eq!(admin.create_topic("steady", 1, 1, &[]).expect("create"), 0);
    assert_eq!(admin.create_topic("other", 2, 1, &[]).expect("create"), 0);
    const RECORDS: u64 = 30_000;
    let producer = {
        let boot = boot.clone();
        std::thread::spawn(move || {
            let bs = format!("bootstrap.servers={boot}");
            java::run_tool(
                tools::PRODUCER_PERFORMANCE,
                &[
                    "--topic",
                    "steady",
                    "--num-records",
                    &RECORDS.to_string(),
                    "--record-size",
                    "100",
                    "--throughput",
                    "2000",
                    "--producer-props",
                    &bs,
                    "acks=all",
                    "enable.idempotence=true",
                    "client.id=steady-producer",
                ],
                Duration::from_secs(180),
            )
        })
    };
    let mut panics = 0;
    for i in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        let mut probe = WireClient::connect(&boot).expect("probe connects");
        probe.set_client_id("boom");
        let r = probe.metadata(None);
        assert!(r.is_err(), "the panicking request got an answer: {r:?}");
        panics += 1;
        // The other connection on the same core is still answered, both partitions of
        // another topic are still served.
        for p in 0..2 {
            let batch = kmirror_tests::records::batch(&[format!("r{i}").as_bytes()], now_ms());
            let (code, base) = admin.produce_raw("other", p, batch, -1).expect("produce");
            assert_eq!(
                (code, base),
                (0, i as i64),
                "other-{p} after {panics} panics"
            );
        }
    }
    let ran = producer.join().expect("producer thread");
    let summary = ran
        .stdout
        .lines()
        .rev()
        .find(|l| l.contains("records sent"))
        .unwrap_or_else(|| panic!("no ProducerPerformance summary:\n{}", ran.stdout));
    assert!(
        summary.starts_with(&format!("{RECORDS} records sent")),
        "{summary}"
    );
    assert_eq!(
        admin.log_bounds("steady", 0).expect("bounds"),
        (0, RECORDS as i64),
        "every acknowledged record once"
    );
    let read = proc::run_ok(
        python::script("read_all.py").args([boot.as_str(), "steady", "1"]),
        Duration::from_secs(120),
    );
    assert!(
        read.stdout.contains(&format!("DONE {RECORDS}")),
        "{}",
        read.stdout
    );
    assert!(node.alive(), "the process survived {panics} panics");
    let log = std::fs::read_to_string(node.log_path()).unwrap_or_default();
    assert!(
        log.matches("closing connection: its request handling panicked")
            .count()
            >= panics,
        "each panic closed its connection"
    );
}

#[test]
fn a_panicking_append_job_fails_that_produce_only() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut node = KmirrorNode::builder()
        .args(&["--cores", "1"])
        .env(&[("KMIRROR_FAILPOINT", "panic-in-append:doomed")])
        .start();
    let boot = node.addr();
    let mut c = WireClient::connect(&boot).expect("connect");
    assert_eq!(c.create_topic("doomed", 1, 1, &[]).expect("create"), 0);
    assert_eq!(c.create_topic("fine", 1, 1, &[]).expect("create"), 0);
    for i in 0..5 {
        let batch = kmirror_tests::records::batch(&[b"x"], now_ms());
        let (code, _) = c.produce_raw("doomed", 0, batch, -1).expect("produce");
        assert_eq!(code, -1, "UNKNOWN_SERVER_ERROR for the panicking append");
        let batch = kmirror_tests::records::batch(&[b"y"], now_ms());
        assert_eq!(
            c.produce_raw("fine", 0, batch, -1).expect("produce"),
            (0, i),
            "another topic on the same core"
        );
    }
    assert_eq!(c.log_bounds("fine", 0).expect("bounds"), (0, 5));
    assert_eq!(
        c.log_bounds("doomed", 0)
            .expect("the doomed partition reopens"),
        (0, 0)
    );
    let read = proc::run_ok(
        python::script("read_all.py").args([boot.as_str(), "fine", "1"]),
        Duration::from_secs(60),
    );
    assert!(read.stdout.contains("DONE 5"), "{}", read.stdout);
    assert!(node.alive());
}
