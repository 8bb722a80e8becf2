//! End to end through the real binaries: Apache Kafka 4.1.1 as the source, `kmirror serve` as
//! the destination, driven only by the `kmirror mirror` CLI. The mirror topic must be
//! log-equal with the source, refuse a Java producer, and after failover (remove) be writable
//! at a higher leader epoch with its end right after the source's last stable offset.

use std::time::{Duration, Instant};

use kmirror_tests::cluster::run_seq_producer;
use kmirror_tests::helpers::{commit_offset, fetch_offset, now_ms, produce_batches};
use kmirror_tests::java;
use kmirror_tests::kafka::KafkaCluster;
use kmirror_tests::kmirror::KmirrorNode;
use kmirror_tests::mirror::{cli_ok as cli, end_offsets};
use kmirror_tests::oracle::log_equal;
use kmirror_tests::proc;
use kmirror_tests::wire::WireClient;

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 3;

/// `describe --json` rows: (partition, state, source_offset, destination_offset, lag).
fn describe(dst: &str) -> Vec<(i64, String, i64, i64, i64)> {
    let ran = cli(dst, &["describe", "dr", "--json"]);
    let v: serde_json::Value = serde_json::from_str(ran.stdout.trim())
        .or_else(|_| {
            // One object per line is accepted too.
            let rows: Vec<serde_json::Value> = ran
                .stdout
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(serde_json::from_str)
                .collect::<Result<_, _>>()?;
            Ok::<_, serde_json::Error>(serde_json::Value::Array(rows))
        })
        .unwrap_or_else(|e| panic!("describe --json output is not JSON ({e}): {}", ran.stdout));
    let rows = v.as_array().cloned().unwrap_or_default();
    rows.iter()
        .map(|r| {
            (
                r["partition"].as_i64().unwrap_or(-1),
                r["state"].as_str().unwrap_or("").to_owned(),
                r["source_offset"].as_i64().unwrap_or(-1),
                r["destination_offset"].as_i64().unwrap_or(-1),
                r["lag"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

fn leader_epochs(boot: &str) -> Vec<i32> {
    let first = boot.split(',').next().expect("bootstrap");
    let mut c = WireClient::connect(first).expect("connect");
    (0..PARTITIONS)
        .map(|p| {
            c.partition_info(TOPIC, p)
                .expect("partition info")
                .leader_epoch
        })
        .collect()
}

/// Runs the Java SeqProducer; (acked, errors) from its DONE line and the first ERR line's
/// error ("" when none).
fn java_produce(boot: &str, records: u64, props: &[&str]) -> (u64, u64, String) {
    let (_, acked, errors, errs) = run_seq_producer(
        java::program("SeqProducer")
            .args([boot, TOPIC, &PARTITIONS.to_string(), &records.to_string()])
            .args(props),
        "SeqProducer",
        Duration::from_secs(120),
    );
    (acked, errors, errs.first().cloned().unwrap_or_default())
}

#[test]
fn kafka_topic_is_mirrored_log_equal_read_only_then_fails_over_writable() {
    let kafka = KafkaCluster::single();
    let src = kafka.bootstrap();
    kafka.create_topic(TOPIC, PARTITIONS, &[]);
    let (acked, errors, _) = java_produce(&src, 3_000, &[]);
    assert_eq!((acked, errors), (3_000, 0), "producing to Kafka");

    let node = KmirrorNode::builder().args(&["--cores", "2"]).start();
    let dst = node.addr();
    cli(
        &dst,
        &[
            "create",
            "dr",
            "--source",
            &src,
            "--set",
            "mirror.metadata.sync.interval.ms=1000",
        ],
    );
    cli(&dst, &["add", "dr", "--topics", TOPIC]);

    // More data while mirroring runs.
    let (acked, _, _) = java_produce(&src, 1_500, &[]);
    assert_eq!(acked, 1_500);
    let src_end = end_offsets(&src, TOPIC, PARTITIONS);

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = describe(&dst);
        let done = rows.len() == PARTITIONS as usize
            && rows.iter().all(|(p, state, s, d, lag)| {
                state == "MIRRORING" && *lag == 0 && *s == src_end[*p as usize] && s == d
            });
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "mirror did not catch up to {src_end:?}: {rows:?}\n{}",
            proc::tail(&node.log_path(), 30)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let dst_end = end_offsets(&dst, TOPIC, PARTITIONS);
    assert_eq!(dst_end, src_end, "destination end offsets");
    for p in 0..PARTITIONS {
        log_equal(&src, &dst, TOPIC, p, src_end[p as usize])
            .unwrap_or_else(|e| panic!("not log-equal: {e}"));
    }
    // Same topic id on both sides.
    let id = |b: &str| {
        WireClient::connect(b.split(',').next().unwrap())
            .unwrap()
            .partition_info(TOPIC, 0)
            .unwrap()
            .topic_id
    };
    assert_eq!(id(&src), id(&dst), "mirror topic id");

    // A real Java producer is refused on the mirror topic and nothing is appended.
    let (acked, errors, first_err) = java_produce(
        &dst,
        30,
        &[
            "delivery.timeout.ms=8000",
            "request.timeout.ms=3000",
            "linger.ms=0",
        ],
    );
    assert_eq!(acked, 0, "a produce to a mirror topic was accepted");
    assert_eq!(errors, 30);
    assert!(!first_err.is_empty(), "no ERR line from the producer");
    assert_eq!(
        end_offsets(&dst, TOPIC, PARTITIONS),
        src_end,
        "the mirror topic changed"
    );

    // Failover.
    let epochs_before = leader_epochs(&src);
    cli(&dst, &["remove", "dr", "--topics", TOPIC]);
    let rows = describe(&dst);
    assert!(
        rows.iter().all(|r| r.1 == "STOPPED"),
        "after remove: {rows:?}"
    );
    let lso: Vec<i64> = (0..PARTITIONS)
        .map(|p| {
            let mut c = WireClient::connect_leader(&src, TOPIC, p).unwrap();
            // No open transaction on the source: LSO == high watermark == end.
            c.log_bounds(TOPIC, p).unwrap().1
        })
        .collect();
    let after = end_offsets(&dst, TOPIC, PARTITIONS);
    for p in 0..PARTITIONS as usize {
        // Truncated to the LSO, then one MIRROR_PID_RESET control record.
        assert_eq!(after[p], lso[p] + 1, "partition {p} end after failover");
        log_equal(&src, &dst, TOPIC, p as i32, lso[p]).unwrap_or_else(|e| panic!("{e}"));
    }
    let epochs_after = leader_epochs(&dst);
    for p in 0..PARTITIONS as usize {
        assert!(
            epochs_after[p] > epochs_before[p],
            "partition {p}: epoch {} not above the source's {}",
            epochs_after[p],
            epochs_before[p]
        );
    }
    let (acked, errors, first_err) = java_produce(&dst, 300, &["enable.idempotence=true"]);
    assert_eq!((acked, errors), (300, 0), "after failover: {first_err}");
    let total: i64 = end_offsets(&dst, TOPIC, PARTITIONS)
        .iter()
        .zip(&after)
        .map(|(a, b)| a - b)
        .sum();
    assert_eq!(total, 300, "records appended after failover");
}

fn wait_caught_up(dst: &str, mirror: &str, src: &str, topic: &str, node: &KmirrorNode) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let end = {
            let mut c = WireClient::connect(src).expect("connect source");
            c.log_bounds(topic, 0).expect("source bounds").1
        };
        let ran = cli(dst, &["describe", mirror, "--json"]);
        let rows: serde_json::Value = serde_json::from_str(ran.stdout.trim()).expect("json");
        let ok = rows.as_array().is_some_and(|rs| {
            !rs.is_empty()
                && rs.iter().all(|r| {
                    r["state"] == "MIRRORING"
                        && r["lag"] == 0
                        && r["destination_offset"].as_i64() == Some(end)
                })
        });
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{mirror} did not catch up to {end}: {rows}\n{}",
            proc::tail(&node.log_path(), 30)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn kmirror_failback_truncates_exactly_the_divergent_tail() {
    let a = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let b = KmirrorNode::builder().args(&["--cores", "2"]).start();
    let (aa, ba) = (a.addr(), b.addr());
    let t = "payments";
    let code = WireClient::connect(&aa)
        .unwrap()
        .create_topic(t, 1, 1, &[])
        .unwrap();
    assert_eq!(code, 0);
    produce_batches(&aa, t, 10, "a1");

    // A -> B, then fail over to B.
    cli(
        &ba,
        &[
            "create",
            "ab",
            "--source",
            &aa,
            "--set",
            "mirror.metadata.sync.interval.ms=500",
        ],
    );
    cli(&ba, &["add", "ab", "--topics", t]);
    wait_caught_up(&ba, "ab", &aa, t, &b);
    cli(&ba, &["remove", "ab", "--topics", t]);
    let bounds = |x: &str| WireClient::connect(x).unwrap().log_bounds(t, 0).unwrap();
    let stopped_at = bounds(&ba).1;
    assert_eq!(
        stopped_at,
        20 + 1,
        "B: 20 mirrored records + the PID reset marker"
    );

    // Both sides write: A's tail (3 batches) never reached B.
    produce_batches(&ba, t, 5, "b");
    produce_batches(&aa, t, 3, "a2");
    assert_eq!(bounds(&aa).1, 26);

    // Reverse: A mirrors from B; A must drop exactly its divergent tail (offsets 20..26).
    cli(
        &aa,
        &[
            "create",
            "ba",
            "--source",
            &ba,
            "--set",
            "mirror.metadata.sync.interval.ms=500",
        ],
    );
    cli(&aa, &["add", "ba", "--topics", t]);
    wait_caught_up(&aa, "ba", &ba, t, &a);
    let end = bounds(&ba).1;
    assert_eq!(end, 21 + 10);
    assert_eq!(bounds(&aa).1, end);
    log_equal(&ba, &aa, t, 0, end).unwrap_or_else(|e| panic!("after failback: {e}"));
}

#[test]
fn mirroring_resumes_after_sigkill_of_the_destination_without_operator_action() {
    let a = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let mut b = KmirrorNode::builder().args(&["--cores", "2"]).start();
    let (aa, ba) = (a.addr(), b.addr());
    let t = "events";
    assert_eq!(
        WireClient::connect(&aa)
            .unwrap()
            .create_topic(t, 1, 1, &[])
            .unwrap(),
        0
    );
    produce_batches(&aa, t, 200, "x");
    cli(
        &ba,
        &[
            "create",
            "m",
            "--source",
            &aa,
            "--set",
            "mirror.metadata.sync.interval.ms=500",
        ],
    );
    cli(&ba, &["add", "m", "--topics", t]);
    // `add` returns before the mirror's sync creates the topic; the kills below are meant to
    // land while its fetcher copies, so wait until the mirror topic exists.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while WireClient::connect(&ba)
        .and_then(|mut c| c.partition_info(t, 0))
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "mirror never created {t}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for round in 0..3 {
        // Kill while the source is being written to and the fetcher is busy.
        produce_batches(&aa, t, 100, &format!("r{round}"));
        b.kill_now();
        produce_batches(&aa, t, 100, &format!("s{round}"));
        b.start_again();
        // Still read-only right after the restart.
        let mut c = WireClient::connect(&ba).unwrap();
        let (code, _) = c
            .produce_raw(t, 0, kmirror_tests::records::batch(&[b"no"], 1), -1)
            .unwrap();
        assert_eq!(code, 134, "produce after restart must be READ_ONLY_TOPIC");
    }
    wait_caught_up(&ba, "m", &aa, t, &b);
    let end = WireClient::connect(&aa)
        .unwrap()
        .log_bounds(t, 0)
        .unwrap()
        .1;
    assert_eq!(end, 2 * (200 + 600));
    log_equal(&aa, &ba, t, 0, end).unwrap_or_else(|e| panic!("after restarts: {e}"));
}

#[test]
fn group_offsets_are_synced_and_clamped_to_the_mirrored_log() {
    let a = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let b = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let (aa, ba) = (a.addr(), b.addr());
    let t = "clicks";
    assert_eq!(
        WireClient::connect(&aa)
            .unwrap()
            .create_topic(t, 1, 1, &[])
            .unwrap(),
        0
    );
    produce_batches(&aa, t, 10, "c");
    commit_offset(&aa, "readers", t, 7);
    // Beyond anything the destination can have: clamped to its end offset.
    commit_offset(&aa, "ahead", t, 1_000);
    cli(
        &ba,
        &[
            "create",
            "g",
            "--source",
            &aa,
            "--set",
            "mirror.metadata.sync.interval.ms=300",
        ],
    );
    cli(&ba, &["add", "g", "--topics", t]);
    wait_caught_up(&ba, "g", &aa, t, &b);
    proc::wait_for(
        Duration::from_secs(30),
        "group offsets on the destination",
        || {
            (fetch_offset(&ba, "readers", t) == 7 && fetch_offset(&ba, "ahead", t) == 20)
                .then_some(())
        },
    );
    commit_offset(&aa, "readers", t, 12);
    proc::wait_for(Duration::from_secs(30), "updated group offset", || {
        (fetch_offset(&ba, "readers", t) == 12).then_some(())
    });
}

fn describe_one(dst: &str, mirror: &str) -> serde_json::Value {
    let ran = cli(dst, &["describe", mirror, "--json"]);
    let rows: serde_json::Value = serde_json::from_str(ran.stdout.trim()).expect("json");
    rows.as_array()
        .and_then(|r| r.first())
        .cloned()
        .expect("one row")
}

#[test]
fn paused_partition_shows_source_progress_and_growing_lag_ms_then_resumes() {
    let a = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let b = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let (aa, ba) = (a.addr(), b.addr());
    let t = "audit";
    assert_eq!(
        WireClient::connect(&aa)
            .unwrap()
            .create_topic(t, 1, 1, &[])
            .unwrap(),
        0
    );
    produce_batches(&aa, t, 5, "p");
    cli(
        &ba,
        &[
            "create",
            "p",
            "--source",
            &aa,
            "--set",
            "mirror.metadata.sync.interval.ms=200",
        ],
    );
    cli(&ba, &["add", "p", "--topics", t]);
    wait_caught_up(&ba, "p", &aa, t, &b);
    cli(&ba, &["pause", "p", "--topics", t]);
    produce_batches(&aa, t, 5, "q");
    let first = proc::wait_for(Duration::from_secs(20), "paused lag", || {
        let r = describe_one(&ba, "p");
        (r["state"] == "PAUSED" && r["lag"] == 10).then_some(r)
    });
    assert_eq!(
        first["destination_offset"], 10,
        "nothing mirrored while paused"
    );
    std::thread::sleep(Duration::from_millis(1_000));
    let later = describe_one(&ba, "p");
    let (l1, l2) = (
        first["lag_ms"].as_i64().unwrap(),
        later["lag_ms"].as_i64().unwrap(),
    );
    assert!(
        l1 > 0 && l2 >= l1 + 900,
        "lag_ms must keep growing while paused: {l1} -> {l2}"
    );
    cli(&ba, &["resume", "p", "--topics", t]);
    wait_caught_up(&ba, "p", &aa, t, &b);
    log_equal(&aa, &ba, t, 0, 20).unwrap_or_else(|e| panic!("{e}"));
}

/// Issue 11 step 2: a KIP-848 consumer-protocol group on the source (an active member that
/// commits with its member epoch) is listed and its offsets are synced like a classic group's.
fn consumer_protocol_group_offsets_sync_from(src: &str, b: &KmirrorNode) {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        ConsumerGroupHeartbeatRequest, FindCoordinatorRequest, GroupId, OffsetCommitRequest,
        TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let sb = |v: &str| StrBytes::from_string(v.to_string());
    let ba = b.addr();
    let t = "kip848";
    let mut c = WireClient::connect(src).unwrap();
    assert_eq!(c.create_topic(t, 1, 1, &[]).unwrap(), 0);
    let now = now_ms();
    for i in 0..10 {
        let v = format!("k-{i}");
        let batch = kmirror_tests::records::batch(&[v.as_bytes(), v.as_bytes()], now);
        assert_eq!(c.produce_raw(t, 0, batch, -1).expect("produce").0, 0);
    }
    // Kafka needs its offsets topic up before it coordinates a group.
    proc::wait_for(Duration::from_secs(60), "a group coordinator", || {
        let r = c
            .send(
                FindCoordinatorRequest::default()
                    .with_key_type(0)
                    .with_coordinator_keys(vec![sb("cg")]),
            )
            .expect("FindCoordinator");
        (r.coordinators.first().map(|k| k.error_code) == Some(0)).then_some(())
    });
    let member = uuid::Uuid::new_v4().simple().to_string();
    let joined = proc::wait_for(
        Duration::from_secs(60),
        "joining the consumer group",
        || {
            let r = c
                .send(
                    ConsumerGroupHeartbeatRequest::default()
                        .with_group_id(GroupId(sb("cg")))
                        .with_member_id(sb(&member))
                        .with_member_epoch(0)
                        .with_rebalance_timeout_ms(30_000)
                        .with_subscribed_topic_names(Some(vec![TopicName(sb(t))]))
                        .with_topic_partitions(Some(Vec::<TopicPartitions>::new())),
                )
                .expect("ConsumerGroupHeartbeat");
            (r.error_code == 0).then_some(r)
        },
    );
    let commit = |offset: i64| {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(sb("cg")))
            .with_member_id(sb(&member))
            .with_generation_id_or_member_epoch(joined.member_epoch)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(sb(t)))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)])])
    };
    let r = c.send(commit(9)).expect("OffsetCommit");
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "OffsetCommit");
    cli(
        &ba,
        &[
            "create",
            "g",
            "--source",
            src,
            "--set",
            "mirror.metadata.sync.interval.ms=300",
        ],
    );
    cli(&ba, &["add", "g", "--topics", t]);
    wait_caught_up(&ba, "g", src, t, b);
    proc::wait_for(
        Duration::from_secs(30),
        "the consumer group's offset on the destination",
        || (fetch_offset(&ba, "cg", t) == 9).then_some(()),
    );
    let r = c.send(commit(15)).expect("OffsetCommit");
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "OffsetCommit");
    proc::wait_for(
        Duration::from_secs(30),
        "updated consumer group offset",
        || (fetch_offset(&ba, "cg", t) == 15).then_some(()),
    );
}

#[test]
fn consumer_protocol_group_offsets_are_synced_from_kmirror() {
    let a = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let b = KmirrorNode::builder().args(&["--cores", "1"]).start();
    consumer_protocol_group_offsets_sync_from(&a.addr(), &b);
}

#[test]
fn consumer_protocol_group_offsets_are_synced_from_apache_kafka() {
    let kafka = KafkaCluster::single();
    let b = KmirrorNode::builder().args(&["--cores", "1"]).start();
    consumer_protocol_group_offsets_sync_from(&kafka.bootstrap(), &b);
}

/// The mirror's health as one state: ACTIVE, PAUSED while its topics are paused, and
/// SOURCE_UNAVAILABLE (with since when and the error) once the source is gone; with
/// `mirror.auto.failover.ms` the mirror then fails over by itself, counted in a metric, and
/// its topics take writes.
#[test]
fn link_state_shows_a_lost_source_and_auto_failover_fails_the_whole_mirror_over() {
    let maddr = format!("127.0.0.1:{}", proc::free_port());
    let mut a = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let b = KmirrorNode::builder()
        .args(&["--cores", "1", "--metrics", &maddr])
        .start();
    let (aa, ba) = (a.addr(), b.addr());
    for t in ["orders", "payments"] {
        assert_eq!(
            WireClient::connect(&aa)
                .unwrap()
                .create_topic(t, 1, 1, &[])
                .unwrap(),
            0
        );
        produce_batches(&aa, t, 10, t);
    }
    cli(
        &ba,
        &[
            "create",
            "dr",
            "--source",
            &aa,
            "--set",
            "mirror.metadata.sync.interval.ms=300",
            "--set",
            "mirror.auto.failover.ms=3000",
            "--set",
            "mirror.retry.backoff.max.ms=500",
        ],
    );
    cli(&ba, &["add", "dr", "--topics", "orders,payments"]);
    for t in ["orders", "payments"] {
        kmirror_tests::mirror::wait_caught_up(&aa, &ba, t, 1, false, Duration::from_secs(60));
    }
    let state = || -> String {
        let out = cli(&ba, &["list", "--json"]).stdout;
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
        v[0]["state"].as_str().unwrap_or("").to_owned()
    };
    assert_eq!(state(), "ACTIVE");
    // FindCoordinator key type MIRROR (2): a lone node is its own mirror coordinator.
    assert_eq!(
        kmirror_tests::mirror::find_mirror_coordinator(&ba, "dr"),
        (1, 0)
    );
    cli(&ba, &["pause", "dr", "--topics", "orders,payments"]);
    assert_eq!(state(), "PAUSED");
    cli(&ba, &["resume", "dr", "--topics", "orders,payments"]);
    assert_eq!(state(), "ACTIVE");

    // The source is gone: SOURCE_UNAVAILABLE, with since when, then the automatic failover.
    a.kill_now();
    let lost = proc::wait_for(Duration::from_secs(30), "SOURCE_UNAVAILABLE", || {
        let out = cli(&ba, &["describe", "dr"]).stdout;
        out.lines()
            .find(|l| l.starts_with("Mirror 'dr': SOURCE_UNAVAILABLE since"))
            .map(str::to_owned)
    });
    assert!(lost.contains(" s)"), "{lost}");
    proc::wait_for(Duration::from_secs(60), "automatic failover", || {
        let rows = kmirror_tests::mirror::describe(&ba, Some("dr"));
        (rows.len() == 2 && rows.iter().all(|r| r.state == "STOPPED")).then_some(())
    });
    let m = kmirror_tests::metrics::scrape(&maddr);
    assert_eq!(
        m.value("kmirror_mirror_auto_failovers_total", &[("mirror", "dr")]),
        Some(1.0)
    );
    assert_eq!(
        m.value(
            "kmirror_mirror_link_state",
            &[("mirror", "dr"), ("state", "SOURCE_UNAVAILABLE")]
        ),
        Some(1.0)
    );
    // Every record the source had is there, and the topics take writes.
    for t in ["orders", "payments"] {
        let (_, end) = WireClient::connect(&ba).unwrap().log_bounds(t, 0).unwrap();
        assert!(end >= 20, "{t}: {end}");
        produce_batches(&ba, t, 1, "after");
    }
}
