//! Self-checks of the test harness against real Apache Kafka 4.1.1: the oracle must accept
//! equal logs and name the first difference otherwise, and the cluster runner must survive
//! losing a partition leader. If these fail, no other test's verdict can be trusted.

use std::time::Duration;

use kmirror_tests::helpers::now_ms;
use kmirror_tests::{log_equal, proc, records, KafkaCluster, WireClient};

#[test]
fn log_equal_accepts_identical_kafka_logs_and_names_the_first_divergence() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(KafkaCluster::single);
        let b = s.spawn(KafkaCluster::single);
        (a.join().expect("kafka a"), b.join().expect("kafka b"))
    });
    a.create_topic("oracle", 1, &[]);
    b.create_topic("oracle", 1, &[]);
    let ts = now_ms();
    let batches = [
        records::batch(&[b"one", b"two", b"three"], ts),
        records::batch(&[b"four"], ts + 1),
        records::batch(&[b"five", b"six"], ts + 2),
    ];
    let mut ca = WireClient::connect(&a.bootstrap()).expect("connect a");
    let mut cb = WireClient::connect(&b.bootstrap()).expect("connect b");
    for batch in &batches {
        assert_eq!(
            ca.produce_raw("oracle", 0, batch.clone(), -1)
                .expect("produce a")
                .0,
            0
        );
        assert_eq!(
            cb.produce_raw("oracle", 0, batch.clone(), -1)
                .expect("produce b")
                .0,
            0
        );
    }
    let report = log_equal(&a.bootstrap(), &b.bootstrap(), "oracle", 0, 6)
        .expect("identical produce sequences give equal logs");
    assert_eq!(report.batches, 3);
    assert_eq!(report.log_start, 0);

    // A log with one batch more is reported as such, with the offset.
    let extra = records::batch(&[b"seven"], ts + 3);
    assert_eq!(
        cb.produce_raw("oracle", 0, extra, -1).expect("produce").0,
        0
    );
    let err = log_equal(&a.bootstrap(), &b.bootstrap(), "oracle", 0, 7)
        .expect_err("source has no offset 6");
    assert!(err.contains("log ends at 6"), "{err}");
    assert!(log_equal(&a.bootstrap(), &b.bootstrap(), "oracle", 0, 6).is_ok());

    // Same offsets, different bytes: the first differing batch and field are named.
    let other = records::batch(&[b"SEVEN"], ts + 3);
    assert_eq!(
        ca.produce_raw("oracle", 0, other, -1).expect("produce").0,
        0
    );
    let err =
        log_equal(&a.bootstrap(), &b.bootstrap(), "oracle", 0, 7).expect_err("batch at 6 differs");
    assert!(err.contains("batch at offset 6"), "{err}");
    assert!(
        err.contains("crc"),
        "the CRC is the first differing field: {err}"
    );
}

#[test]
fn three_node_kafka_keeps_serving_a_partition_after_its_leader_is_killed() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut k = KafkaCluster::three();
    k.create_topic("ha", 2, &[]);
    let ts = now_ms();
    let mut c = WireClient::connect_leader(&k.bootstrap(), "ha", 0).expect("leader");
    assert_eq!(
        c.produce_raw("ha", 0, records::batch(&[b"a"], ts), -1)
            .expect("produce")
            .0,
        0
    );
    let old = k.leader_of("ha", 0);
    k.kill_node(old);
    let new = proc::wait_for(Duration::from_secs(60), "a new leader", || {
        let survivors = k.bootstrap();
        let candidate = WireClient::connect(survivors.split(',').next()?)
            .and_then(|mut c| c.partition_info("ha", 0))
            .ok()
            .filter(|p| p.leader_id != old && p.leader_id > 0)?
            .leader_id;
        // The new leader's own metadata can lag the survivor's for a moment (it still names
        // the killed leader, which it no longer lists): wait until it knows it leads.
        WireClient::connect(&k.addr_of(candidate))
            .and_then(|mut c| c.partition_info("ha", 0))
            .ok()
            .filter(|p| p.leader_id == candidate)
            .map(|_| candidate)
    });
    assert_ne!(new, old);
    let mut c = WireClient::connect(&k.addr_of(new)).expect("new leader");
    assert_eq!(
        c.produce_raw("ha", 0, records::batch(&[b"b"], ts), -1)
            .expect("produce")
            .0,
        0
    );
    assert_eq!(c.log_bounds("ha", 0).expect("bounds"), (0, 2));
    k.start_node(old);
    assert_eq!(k.bootstrap().split(',').count(), 3);
}
