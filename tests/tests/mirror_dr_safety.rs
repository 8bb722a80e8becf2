//! Issue 8's DR-safety holes, each against a real Apache Kafka 4.1.1 source and real clients:
//! nothing writes into a mirror topic (transactions, admin APIs), a metadata glitch or an ACL
//! change on the source never fails a topic over, a source topic re-created under the same
//! name is never mirrored into the old one, and a failover never completes while the fetcher
//! still runs.

use std::time::{Duration, Instant};

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, DeleteTopicsRequest, EndTxnRequest, InitProducerIdRequest,
    ProducerId, TopicName, TransactionalId,
};
use kmirror_tests::helpers::{now_ms, start_kafka_and_kmirror, str_bytes as s};
use kmirror_tests::java::{self, tools};
use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::mirror::{self, PartitionRow};
use kmirror_tests::oracle::read_batches;
use kmirror_tests::proc;
use kmirror_tests::{python, KafkaCluster, KmirrorNode, WireClient};

/// KIP-1279 READ_ONLY_TOPIC.
const READ_ONLY_TOPIC: i16 = 134;

const FAST: &[(&str, &str)] = &[
    ("mirror.metadata.sync.interval.ms", "500"),
    ("mirror.group.sync.interval.ms", "1000"),
    ("mirror.retry.backoff.ms", "100"),
    ("mirror.retry.backoff.max.ms", "1000"),
];

fn start_both(opts: KafkaOptions, kmirror_env: &[(&str, &str)]) -> (KafkaCluster, KmirrorNode) {
    start_kafka_and_kmirror(
        move || KafkaCluster::start_with(opts),
        || KmirrorNode::builder().env(kmirror_env).start(),
    )
}

fn produce(boot: &str, topic: &str, records: u64) {
    let n = records.to_string();
    let bs = format!("bootstrap.servers={boot}");
    let ran = java::run_tool(
        tools::PRODUCER_PERFORMANCE,
        &[
            "--topic",
            topic,
            "--num-records",
            &n,
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            &bs,
            "acks=all",
            "linger.ms=5",
        ],
        Duration::from_secs(120),
    );
    assert!(
        ran.stdout.contains(&format!("{records} records sent")),
        "ProducerPerformance into {topic}:\n{}\n{}",
        ran.stdout,
        ran.stderr
    );
}

/// Every batch of every partition below its end, as raw bytes with offsets: "byte-unchanged"
/// compares these.
/// Per partition: log start, then each batch's base offset and bytes.
type LogBytes = Vec<(i64, Vec<(i64, Vec<u8>)>)>;

fn log_bytes(boot: &str, topic: &str, ends: &[i64]) -> LogBytes {
    ends.iter()
        .enumerate()
        .map(|(p, &end)| {
            let (start, batches) = read_batches(boot, topic, p as i32, end)
                .unwrap_or_else(|e| panic!("read {topic}-{p}: {e}"));
            (
                start,
                batches
                    .into_iter()
                    .map(|b| (b.base_offset, b.bytes.to_vec()))
                    .collect(),
            )
        })
        .collect()
}

fn delete_topic_code(boot: &str, topic: &str) -> i16 {
    let mut c = WireClient::connect(boot.split(',').next().expect("addr")).expect("connect");
    let v = c
        .version_of::<DeleteTopicsRequest>()
        .expect("DeleteTopics version");
    let mut req = DeleteTopicsRequest::default().with_timeout_ms(30_000);
    if v >= 6 {
        req.topics = vec![DeleteTopicState::default().with_name(Some(TopicName(s(topic))))];
    } else {
        req.topic_names = vec![TopicName(s(topic))];
    }
    let resp = c.send(req).expect("DeleteTopics");
    resp.responses[0].error_code
}

fn rows(dst: &str, topic: &str) -> Vec<PartitionRow> {
    mirror::describe(dst, Some("dr"))
        .into_iter()
        .filter(|r| r.topic == topic)
        .collect()
}

/// Waits until every partition row of `topic` satisfies `pred`, asserting `never` holds for
/// every row seen on the way. Returns the final rows.
fn wait_rows(
    dst: &str,
    topic: &str,
    within: Duration,
    what: &str,
    pred: impl Fn(&PartitionRow) -> bool,
    never: impl Fn(&PartitionRow) -> bool,
) -> Vec<PartitionRow> {
    let deadline = Instant::now() + within;
    loop {
        let r = rows(dst, topic);
        if let Some(bad) = r.iter().find(|x| never(x)) {
            panic!("{topic}: forbidden state while waiting for {what}: {bad:?}");
        }
        if !r.is_empty() && r.iter().all(&pred) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: not {what} within {within:?}: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn produce_code(dst: &str, topic: &str) -> i16 {
    let mut c = WireClient::connect(dst).expect("connect kmirror");
    let batch = kmirror_tests::records::batch(&[b"intruder"], 1_700_000_000_000);
    c.produce_raw(topic, 0, batch, -1).expect("produce").0
}

/// Hole 1: Java and librdkafka transactional producers, a raw AddPartitionsToTxn + EndTxn,
/// DeleteRecords, CreatePartitions, AlterConfigs and DeleteTopics on a mirror topic are all
/// refused; the mirror log is byte-unchanged and still log-equal with the source. After
/// failover the topic can be deleted.
#[test]
fn transactions_and_admin_writes_into_a_mirror_topic_are_refused_and_the_log_is_byte_unchanged() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_both(KafkaOptions::default(), &[]);
    let (src, dst) = (kafka.bootstrap(), node.addr());
    let parts = 2;
    kafka.create_topic("ro", parts, &[]);
    produce(&src, "ro", 2000);
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &["ro"]);
    let before = mirror::wait_caught_up(&src, &dst, "ro", parts, false, Duration::from_secs(60));
    let bytes_before = log_bytes(&dst, "ro", &before);

    // Java transactional producer: the transaction must not commit.
    let java_run = proc::run(
        java::program("TxnProducer").args([
            dst.as_str(),
            "ro",
            "2",
            "1",
            "10",
            "0",
            "false",
            "max.block.ms=10000",
            "delivery.timeout.ms=10000",
            "request.timeout.ms=5000",
        ]),
        Duration::from_secs(90),
    );
    assert!(
        !java_run.stdout.contains("COMMITTED"),
        "Java transaction committed into a mirror topic:\n{}",
        java_run.stdout
    );
    // librdkafka transactional producer.
    let py_run = proc::run(
        python::script("txn_producer.py").args([
            dst.as_str(),
            "ro",
            "2",
            "10",
            "message.timeout.ms=10000",
        ]),
        Duration::from_secs(90),
    );
    assert!(
        py_run.stdout.contains("ERR ") && !py_run.stdout.contains("COMMITTED"),
        "librdkafka transaction must fail on a mirror topic:\n{}\n{}",
        py_run.stdout,
        py_run.stderr
    );
    eprintln!(
        "Java: {:?}\nlibrdkafka: {}",
        java_run.stderr.lines().find(|l| l.contains("Exception")),
        py_run.stdout.trim()
    );

    // Raw: AddPartitionsToTxn names the mirror partitions -> READ_ONLY_TOPIC each; an
    // aborting EndTxn then writes no marker anywhere.
    let mut c = WireClient::connect(&dst).expect("connect kmirror");
    let init = c
        .send(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s("raw-txn"))))
                .with_transaction_timeout_ms(60_000),
        )
        .expect("InitProducerId");
    assert_eq!(init.error_code, 0, "InitProducerId");
    let add = c
        .send_at(
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(s("raw-txn")))
                .with_v3_and_below_producer_id(init.producer_id)
                .with_v3_and_below_producer_epoch(init.producer_epoch)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s("ro")))
                    .with_partitions(vec![0, 1])]),
            3,
        )
        .expect("AddPartitionsToTxn");
    let codes: Vec<i16> = add.results_by_topic_v3_and_below[0]
        .results_by_partition
        .iter()
        .map(|p| p.partition_error_code)
        .collect();
    assert_eq!(codes, vec![READ_ONLY_TOPIC, READ_ONLY_TOPIC]);
    let _ = c.send(
        EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s("raw-txn")))
            .with_producer_id(ProducerId(init.producer_id.0))
            .with_producer_epoch(init.producer_epoch)
            .with_committed(false),
    );

    // Admin writes.
    assert_eq!(
        mirror::delete_records(&dst, "ro", 0, 5).0,
        READ_ONLY_TOPIC,
        "DeleteRecords"
    );
    assert_eq!(
        mirror::create_partitions(&dst, "ro", 4),
        READ_ONLY_TOPIC,
        "CreatePartitions"
    );
    assert_eq!(
        mirror::set_topic_configs(&dst, "ro", &[("retention.ms", "1000")]),
        READ_ONLY_TOPIC,
        "IncrementalAlterConfigs of a synced key"
    );
    assert_eq!(
        delete_topic_code(&dst, "ro"),
        READ_ONLY_TOPIC,
        "DeleteTopics"
    );
    // kafka-topics --delete reports the failure and the topic stays.
    let tool = proc::run(
        java::tool(tools::TOPIC_COMMAND).args([
            "--bootstrap-server",
            dst.as_str(),
            "--delete",
            "--topic",
            "ro",
        ]),
        Duration::from_secs(90),
    );
    assert!(
        !tool.status.success() && tool.stdout.contains("read-only"),
        "kafka-topics --delete on a mirror topic must fail:\n{}\n{}",
        tool.stdout,
        tool.stderr
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        mirror::partition_count(&dst, "ro"),
        2,
        "mirror topic still there"
    );

    // Byte-unchanged, still equal to the source, still mirroring.
    assert_eq!(
        mirror::end_offsets(&dst, "ro", parts),
        before,
        "end offsets moved"
    );
    assert!(
        log_bytes(&dst, "ro", &before) == bytes_before,
        "mirror log bytes changed by refused writes"
    );
    mirror::assert_log_equal(&src, &dst, "ro", &before);
    produce(&src, "ro", 300);
    mirror::assert_mirrored(&src, &dst, "ro", parts, Duration::from_secs(60));

    // After failover the topic is the operator's: DeleteTopics succeeds.
    let ran = mirror::remove_topics(&dst, "dr", &["ro"]);
    assert!(
        ran.status.success(),
        "remove: {}\n{}",
        ran.stdout,
        ran.stderr
    );
    assert_eq!(
        delete_topic_code(&dst, "ro"),
        0,
        "DeleteTopics after failover"
    );
}

/// Hole 3a: an ACL on the source hides a mirrored topic (absent from Metadata, lookups answer
/// TOPIC_AUTHORIZATION_FAILED): the partitions go FAILED with that reason over many sync
/// rounds, never STOPPED, and stay read-only. When the ACL goes, mirroring resumes log-equal.
#[test]
fn a_source_acl_hiding_a_mirrored_topic_fails_it_never_fails_it_over() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let props = [
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("allow.everyone.if.no.acl.found", "true"),
    ];
    let opts = KafkaOptions {
        props: props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..KafkaOptions::default()
    };
    let (kafka, node) = start_both(opts, &[]);
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("hidden", 1, &[]);
    produce(&src, "hidden", 500);
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &["hidden"]);
    let before = mirror::wait_caught_up(&src, &dst, "hidden", 1, false, Duration::from_secs(60));

    let acl = |op: &str| {
        let ran = java::run_tool(
            "org.apache.kafka.tools.AclCommand",
            &[
                "--bootstrap-server",
                &src,
                op,
                "--force",
                "--deny-principal",
                "User:ANONYMOUS",
                "--operation",
                "Describe",
                "--topic",
                "hidden",
            ],
            Duration::from_secs(90),
        );
        assert!(
            ran.status.success(),
            "kafka-acls {op}: {}\n{}",
            ran.stdout,
            ran.stderr
        );
    };
    acl("--add");
    // FAILED with an authorization reason, never STOPPED on the way.
    let failed = wait_rows(
        &dst,
        "hidden",
        Duration::from_secs(60),
        "FAILED",
        |r| r.state == "FAILED",
        |r| r.state == "STOPPED" || r.state == "STOPPING",
    );
    eprintln!("reason while hidden: {}", failed[0].reason());
    // Many more sync rounds (500 ms each): still FAILED, never stopped, still read-only.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        for r in rows(&dst, "hidden") {
            assert_eq!(r.state, "FAILED", "{r:?}");
            assert!(
                r.reason().to_ascii_lowercase().contains("authoriz"),
                "reason must name the authorization error: {r:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(produce_code(&dst, "hidden"), READ_ONLY_TOPIC);
    assert_eq!(mirror::end_offsets(&dst, "hidden", 1), before);
    // The mirror as a whole is DEGRADED, naming the partition; `describe --failed` lists
    // only FAILED partitions.
    let described = mirror::cli_ok(&dst, &["describe", "dr"]).stdout;
    assert!(
        described.contains("Mirror 'dr': DEGRADED: FAILED partitions hidden-0"),
        "{described}"
    );
    let failed_only = mirror::cli_ok(&dst, &["describe", "dr", "--failed", "--json"]).stdout;
    let v: serde_json::Value = serde_json::from_str(failed_only.trim()).expect("json");
    let listed: Vec<(&str, &str)> = v
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (r["topic"].as_str().unwrap(), r["state"].as_str().unwrap()))
        .collect();
    assert_eq!(listed, [("hidden", "FAILED")]);

    // The ACL goes: mirroring resumes and copies what is written after.
    acl("--remove");
    produce(&src, "hidden", 200);
    wait_rows(
        &dst,
        "hidden",
        Duration::from_secs(60),
        "MIRRORING again",
        |r| r.state == "MIRRORING",
        |r| r.state == "STOPPED",
    );
    mirror::assert_mirrored(&src, &dst, "hidden", 1, Duration::from_secs(60));
    assert_eq!(produce_code(&dst, "hidden"), READ_ONLY_TOPIC);
    let failed_only = mirror::cli_ok(&dst, &["describe", "dr", "--failed", "--json"]).stdout;
    assert_eq!(failed_only.trim(), "[]", "nothing FAILED any more");
}

/// Hole 3b: a source topic deleted and re-created under the same name (new topic id) makes the
/// mirror partitions FAILED "source topic id changed": nothing of the new topic is mirrored
/// into the old one, which keeps its bytes and stays read-only. A source topic really deleted
/// (gone by name and id in consecutive rounds) stops its mirror partitions (writable).
#[test]
fn a_source_topic_recreated_with_a_new_id_fails_and_a_deleted_one_stops_after_confirmation() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_both(KafkaOptions::default(), &[]);
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("reborn", 1, &[]);
    kafka.create_topic("gone", 1, &[]);
    produce(&src, "reborn", 400);
    produce(&src, "gone", 400);
    // A slower sync interval, so the re-creation (about a second) fits between two rounds.
    let slow = [
        ("mirror.metadata.sync.interval.ms", "3000"),
        ("mirror.retry.backoff.ms", "100"),
        ("mirror.retry.backoff.max.ms", "1000"),
    ];
    mirror::create(&dst, "dr", &src, &slow);
    mirror::add_topics(&dst, "dr", &["reborn", "gone"]);
    let reborn_end =
        mirror::wait_caught_up(&src, &dst, "reborn", 1, false, Duration::from_secs(60));
    mirror::wait_caught_up(&src, &dst, "gone", 1, false, Duration::from_secs(60));
    let old_id = mirror::topic_id(&dst, "reborn");
    let bytes_before = log_bytes(&dst, "reborn", &reborn_end);

    // Delete and re-create at once (Kafka finishes the deletion asynchronously: retry).
    assert_eq!(delete_topic_code(&src, "reborn"), 0);
    let mut c = WireClient::connect(src.split(',').next().expect("addr")).expect("connect");
    proc::wait_for(Duration::from_secs(30), "re-create reborn", || {
        (c.create_topic("reborn", 1, 1, &[]).ok()? == 0).then_some(())
    });
    proc::wait_for(Duration::from_secs(30), "reborn leader", || {
        c.partition_info("reborn", 0).ok()
    });
    let new_id = mirror::topic_id(&src, "reborn");
    assert_ne!(old_id, new_id, "Kafka gave the re-created topic a new id");
    produce(&src, "reborn", 1000);

    let failed = wait_rows(
        &dst,
        "reborn",
        Duration::from_secs(60),
        "FAILED with source topic id changed",
        |r| r.state == "FAILED" && r.reason().contains("source topic id changed"),
        |r| r.state == "STOPPED" || r.state == "STOPPING",
    );
    eprintln!("reason: {}", failed[0].reason());
    // Several more rounds: still FAILED, nothing of the new topic arrives, bytes unchanged.
    std::thread::sleep(Duration::from_secs(8));
    for r in rows(&dst, "reborn") {
        assert_eq!(r.state, "FAILED", "{r:?}");
    }
    assert_eq!(
        mirror::end_offsets(&dst, "reborn", 1),
        reborn_end,
        "new topic mirrored into the old one"
    );
    assert!(log_bytes(&dst, "reborn", &reborn_end) == bytes_before);
    assert_eq!(mirror::topic_id(&dst, "reborn"), old_id);
    assert_eq!(produce_code(&dst, "reborn"), READ_ONLY_TOPIC);

    // A real deletion: STOPPED only after consecutive confirmed rounds, then writable.
    let deleted_at = Instant::now();
    assert_eq!(delete_topic_code(&src, "gone"), 0);
    wait_rows(
        &dst,
        "gone",
        Duration::from_secs(60),
        "STOPPED",
        |r| r.state == "STOPPED",
        |_| false,
    );
    assert!(
        deleted_at.elapsed() >= Duration::from_secs(3),
        "stopped after {:?}: deletion must be confirmed in two rounds 3 s apart",
        deleted_at.elapsed()
    );
    assert_eq!(
        produce_code(&dst, "gone"),
        0,
        "writable once its source is gone"
    );
}

/// Hole 5: a fetcher that keeps running after it was told to stop (failpoint
/// `slow_fetcher_stop`: 40 s more) must not let failover complete: `remove` fails, the
/// partition stays STOPPING (read-only) with the reason, and the failover completes by itself
/// once the fetcher has exited, with the log equal to the source up to the stop LSO.
#[test]
fn failover_does_not_complete_while_the_fetcher_still_runs() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_both(
        KafkaOptions::default(),
        &[("KMIRROR_FAILPOINT", "slow_fetcher_stop")],
    );
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("slow", 1, &[]);
    produce(&src, "slow", 500);
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &["slow"]);
    mirror::wait_caught_up(&src, &dst, "slow", 1, false, Duration::from_secs(60));

    let started = Instant::now();
    let ran = mirror::remove_topics(&dst, "dr", &["slow"]);
    eprintln!(
        "remove after {:?}: ok={} {}{}",
        started.elapsed(),
        ran.status.success(),
        ran.stdout,
        ran.stderr
    );
    // While the fetcher runs: never STOPPED, read-only.
    let r = rows(&dst, "slow");
    assert!(
        r.iter().all(|x| x.state == "STOPPING"),
        "failover recorded while the fetcher still runs: {r:?}"
    );
    assert!(
        r[0].reason().contains("did not stop"),
        "reason: {:?}",
        r[0].raw
    );
    assert!(
        !ran.status.success()
            || ran.stdout.contains("did not stop")
            || ran.stderr.contains("did not stop"),
        "remove must report the unfinished failover:\n{}\n{}",
        ran.stdout,
        ran.stderr
    );
    assert_eq!(produce_code(&dst, "slow"), READ_ONLY_TOPIC);

    // The fetcher exits (40 s after the stop request): the retry completes the failover.
    wait_rows(
        &dst,
        "slow",
        Duration::from_secs(90),
        "STOPPED",
        |r| r.state == "STOPPED",
        |_| false,
    );
    assert_eq!(
        produce_code(&dst, "slow"),
        0,
        "writable after the failover completed"
    );
    let lso = mirror::lso(&src, "slow", 0);
    mirror::assert_log_equal(&src, &dst, "slow", &[lso]);
}

/// Hole 4: a compacted topic and a topic inheriting the source broker's infinite retention,
/// both holding records 30 days old, keep every record on the destination (whose default
/// retention is 7 days, checked every second): the mirror topics carry the source's
/// cleanup.policy and effective retention.ms, local retention never deletes mirror data, and
/// after failover the topics keep what the source kept.
#[test]
fn compacted_and_forever_retention_topics_keep_old_data_on_the_destination() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let opts = KafkaOptions {
        props: vec![("log.retention.ms".into(), "-1".into())],
        ..KafkaOptions::default()
    };
    let env: &[(&str, &str)] = &[];
    let (kafka, _unused) = start_both(opts, env);
    drop(_unused);
    let node = KmirrorNode::builder()
        .args(&["--retention-check-secs", "1"])
        .start();
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("forever", 1, &[("segment.bytes", "1048576")]);
    kafka.create_topic(
        "schemas",
        1,
        &[("cleanup.policy", "compact"), ("segment.bytes", "1048576")],
    );
    let month_ago = now_ms() - 30 * 24 * 3600 * 1000;
    let mut c = WireClient::connect_leader(&src, "forever", 0).expect("connect Kafka");
    let value = [b'v'; 8000];
    for b in 0..40 {
        let keys: Vec<Vec<u8>> = (0..10)
            .map(|i| format!("key-{b}-{i}").into_bytes())
            .collect();
        let kvs: Vec<(Option<&[u8]>, &[u8])> = keys
            .iter()
            .map(|k| (Some(k.as_slice()), &value[..]))
            .collect();
        let batch = kmirror_tests::records::keyed_batch(&kvs, month_ago + b);
        for topic in ["forever", "schemas"] {
            let (code, _) = c.produce_raw(topic, 0, batch.clone(), -1).expect("produce");
            assert_eq!(code, 0, "produce old records into {topic}");
        }
    }
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &["forever", "schemas"]);
    let mut ends_at = Vec::new();
    for topic in ["forever", "schemas"] {
        let e = mirror::wait_caught_up(&src, &dst, topic, 1, false, Duration::from_secs(60));
        assert_eq!(e, vec![400], "{topic}: all 400 records mirrored");
        ends_at.push(e);
    }
    let cfg = mirror::topic_configs(&dst, "schemas");
    assert_eq!(
        cfg.get("cleanup.policy").cloned().flatten().as_deref(),
        Some("compact"),
        "mirror topic keeps cleanup.policy"
    );
    let cfg = mirror::topic_configs(&dst, "forever");
    assert_eq!(
        cfg.get("retention.ms").cloned().flatten().as_deref(),
        Some("-1"),
        "mirror topic keeps the source's effective (broker default) retention.ms"
    );
    // Several destination retention passes: nothing deleted, log-equal from offset 0.
    std::thread::sleep(Duration::from_secs(5));
    for (topic, e) in ["forever", "schemas"].iter().zip(&ends_at) {
        let (start, end) = mirror::bounds(&dst, topic, 1).expect("bounds")[0];
        assert_eq!(
            (start, end),
            (0, 400),
            "{topic}: destination deleted old data"
        );
        mirror::assert_log_equal(&src, &dst, topic, e);
    }
    // After failover the topics are the operator's and still keep everything.
    for topic in ["forever", "schemas"] {
        let ran = mirror::remove_topics(&dst, "dr", &[topic]);
        assert!(
            ran.status.success(),
            "remove {topic}: {}{}",
            ran.stdout,
            ran.stderr
        );
    }
    std::thread::sleep(Duration::from_secs(5));
    for topic in ["forever", "schemas"] {
        let (start, _) = mirror::bounds(&dst, topic, 1).expect("bounds")[0];
        assert_eq!(start, 0, "{topic}: retention deleted data after failover");
    }
}
