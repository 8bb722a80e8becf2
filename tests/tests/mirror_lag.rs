//! Issue 8, hole 7: lag in ms is the age of the oldest source record the destination does not
//! have yet, and it survives the fetcher being recreated. Against a real Apache Kafka 4.1.1
//! source: records are written while the mirror cannot copy them (paused, then kmirror
//! SIGKILLed), left to age, and the mirror is throttled so catching up takes seconds. The
//! first lag_ms reported after resume / restart (and while paused across a restart, when no
//! fetcher runs) must be at least the age of the newest of those records (so at least the age
//! of the oldest unmirrored one), not the fetcher's age.

use std::time::{Duration, Instant};

use kmirror_tests::helpers::{now_ms, start_kafka_and_kmirror};
use kmirror_tests::mirror::{self, FAST};
use kmirror_tests::records;
use kmirror_tests::{KafkaCluster, KmirrorNode, WireClient};

/// Mirror byte-rate ceiling: a 16 MB backlog then takes several seconds to copy.
const RATE: &str = "2000000";
/// How long the unmirrored records age before the fetcher is recreated.
const AGE: Duration = Duration::from_secs(4);

/// ~16 MB in 24 batches, each stamped with the time it is produced; returns the newest stamp.
fn produce_backlog(src: &str, topic: &str) -> i64 {
    let mut c = WireClient::connect_leader(src, topic, 0).expect("connect source leader");
    let value = vec![b'v'; 100 * 1024];
    let values: Vec<&[u8]> = (0..7).map(|_| value.as_slice()).collect();
    let mut ts = 0;
    for _ in 0..24 {
        ts = now_ms();
        let (code, _) = c
            .produce_raw(topic, 0, records::batch(&values, ts), -1)
            .expect("produce");
        assert_eq!(code, 0, "produce to the source");
    }
    ts
}

/// Polls describe until the partition reports a known lag > 0; returns (lag_ms, the wall
/// time just before the describe that returned it).
fn first_lag_while_behind(dst: &str, state: &str, what: &str) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let asked_at = now_ms();
        let rows = mirror::describe(dst, Some("dr"));
        if let Some(r) = rows.iter().find(|r| r.lag > 0 && r.lag_ms >= 0) {
            assert_eq!(r.state, state, "{what}: {r:?}");
            return (r.lag_ms, asked_at);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no row with lag > 0 and a known lag_ms: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn lag_ms_after_resume_and_after_a_restart_is_the_age_of_the_oldest_unmirrored_record() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, mut node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder()
            .args(&["--mirror-byte-rate", RATE])
            .start()
    });
    let src = kafka.bootstrap();
    let dst = node.addr();
    let t = "aged";
    kafka.create_topic(t, 1, &[]);
    let mut c = WireClient::connect_leader(&src, t, 0).expect("connect");
    c.produce_raw(t, 0, records::batch(&[b"first"], now_ms()), -1)
        .expect("produce");
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &[t]);
    mirror::wait_caught_up(&src, &dst, t, 1, false, Duration::from_secs(60));

    // 1. Resume: the records were written while paused.
    mirror::cli_ok(&dst, &["pause", "dr", "--topics", t]);
    let newest = produce_backlog(&src, t);
    std::thread::sleep(AGE);
    mirror::cli_ok(&dst, &["resume", "dr", "--topics", t]);
    let (lag_ms, asked_at) = first_lag_while_behind(&dst, "MIRRORING", "after resume");
    let min_age = asked_at - newest;
    assert!(
        min_age >= AGE.as_millis() as i64 && lag_ms >= min_age,
        "after resume: lag_ms {lag_ms} < {min_age} ms, the age of the newest unmirrored record"
    );
    let upto = mirror::wait_caught_up(&src, &dst, t, 1, false, Duration::from_secs(120));

    // 2. Node restart: SIGKILL while caught up, the source moves on, start again.
    node.kill_now();
    let newest = produce_backlog(&src, t);
    std::thread::sleep(AGE);
    node.start_again();
    let (lag_ms, asked_at) = first_lag_while_behind(&dst, "MIRRORING", "after restart");
    let min_age = asked_at - newest;
    assert!(
        min_age >= AGE.as_millis() as i64 && lag_ms >= min_age,
        "after restart: lag_ms {lag_ms} < {min_age} ms, the age of the newest unmirrored record"
    );
    let upto2 = mirror::wait_caught_up(&src, &dst, t, 1, false, Duration::from_secs(120));
    assert!(upto2[0] > upto[0]);

    // 3. Restart while paused: no fetcher runs at all, lag_ms still comes from the data.
    mirror::cli_ok(&dst, &["pause", "dr", "--topics", t]);
    let newest = produce_backlog(&src, t);
    node.kill_now();
    node.start_again();
    std::thread::sleep(AGE);
    let (lag_ms, asked_at) = first_lag_while_behind(&dst, "PAUSED", "paused across a restart");
    let min_age = asked_at - newest;
    assert!(
        min_age >= AGE.as_millis() as i64 && lag_ms >= min_age,
        "paused across a restart: lag_ms {lag_ms} < {min_age} ms"
    );
    mirror::cli_ok(&dst, &["resume", "dr", "--topics", t]);
    let end = mirror::wait_caught_up(&src, &dst, t, 1, false, Duration::from_secs(120));
    assert!(end[0] > upto2[0]);
    mirror::assert_log_equal(&src, &dst, t, &end);
    let rows = mirror::describe(&dst, Some("dr"));
    assert!(
        rows.iter().all(|r| r.lag == 0 && r.lag_ms == 0),
        "caught up: lag and lag_ms are 0: {rows:?}"
    );
}
