//! Issue 11: `__consumer_offsets` and `__transaction_state` are described as internal topics
//! once Kafka would have created them (first FindCoordinator for a group / a transactional
//! id), with 50 partitions each led by the node. The same scenario runs on Apache Kafka 4.1.1
//! and on kmirror and must give the same client-visible answers: Metadata(all) before and
//! after, `kafka-topics --list` with and without `--exclude-internal`, `--describe` of the
//! internal topic, a Produce to `__consumer_offsets` (refused), and regex subscriptions of the
//! Java consumer (console consumer `--include`) and librdkafka (`^.*`) reading only the data
//! topic, with no consume error or error callback. Both keep the coordinators' records in the
//! internal partitions, but how many records a run leaves there differs (kmirror batches a
//! flush's records, Kafka writes its own), so ListOffsets error codes are compared, the
//! offsets are not.

use std::time::Duration;

use kmirror_tests::helpers::now_ms;
use kmirror_tests::java::{self, tools};
use kmirror_tests::{proc, python, KafkaCluster, KmirrorNode, WireClient};

const T: Duration = Duration::from_secs(120);
const DATA: &str = "data-x";

#[derive(Debug, PartialEq)]
struct Outcome {
    /// Internal topics in Metadata(all) before any group/transaction lookup.
    internal_before: Vec<(String, usize)>,
    /// (name, is_internal, partitions, every partition led by the broker) after.
    internal_after: Vec<(String, bool, usize, bool)>,
    list: Vec<String>,
    list_exclude_internal: Vec<String>,
    describe_summary: String,
    produce_code: i16,
    java_regex_values: Vec<String>,
    /// librdkafka has no exclude.internal.topics: `^.*` is assigned the internal topics too
    /// (and reads their records).
    rdkafka_regex_assigned: Vec<String>,
    /// librdkafka's consume errors ("E topic code") and error callbacks ("X code ...").
    rdkafka_errors: Vec<String>,
    /// (partition, timestamp, error code) of ListOffsets on the internal topics.
    internal_list_offsets_codes: Vec<(String, i64, i16)>,
}

fn topics_tool(boot: &str, args: &[&str]) -> Vec<String> {
    let mut a = vec!["--bootstrap-server", boot];
    a.extend_from_slice(args);
    let ran = java::run_tool(tools::TOPIC_COMMAND, &a, T);
    let mut lines: Vec<String> = ran.stdout.lines().map(|l| l.trim().to_string()).collect();
    lines.retain(|l| !l.is_empty());
    lines.sort();
    lines
}

fn internal_in_metadata(c: &mut WireClient) -> Vec<(String, bool, usize, bool)> {
    let md = c.metadata(None).expect("metadata");
    let node = md.brokers[0].node_id;
    let mut v: Vec<_> = md
        .topics
        .iter()
        .filter(|t| {
            t.is_internal
                || t.name
                    .as_ref()
                    .is_some_and(|n| n.starts_with("__consumer") || n.starts_with("__trans"))
        })
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.is_internal,
                t.partitions.len(),
                t.partitions
                    .iter()
                    .all(|p| p.leader_id == node && p.error_code == 0),
            )
        })
        .collect();
    v.sort();
    v
}

fn scenario(boot: &str) -> Outcome {
    let mut c = WireClient::connect(boot).expect("connect");
    assert_eq!(c.create_topic(DATA, 2, 1, &[]).expect("create"), 0);
    let internal_before = internal_in_metadata(&mut c)
        .into_iter()
        .map(|(n, _, p, _)| (n, p))
        .collect();
    // A transactional producer (FindCoordinator for a transactional id) writes 10 records.
    let ran = proc::run_ok(
        python::script("txn_producer.py").args([boot, DATA, "2", "10"]),
        T,
    );
    assert!(ran.stdout.contains("COMMITTED"), "{}", ran.stdout);
    // Java consumer, Pattern subscription (classic protocol, exclude.internal.topics=true).
    let ran = java::run_tool(
        tools::CONSOLE_CONSUMER,
        &[
            "--bootstrap-server",
            boot,
            "--include",
            ".*",
            "--group",
            "java-regex",
            "--from-beginning",
            "--max-messages",
            "10",
            "--timeout-ms",
            "30000",
        ],
        T,
    );
    // Only the data topic's values ("txn:<n>"): an internal topic's binary records would
    // show up here too.
    let mut java_regex_values: Vec<String> = ran.stdout.lines().map(str::to_string).collect();
    java_regex_values.sort();
    let ran = proc::run_ok(
        python::script("regex_consumer.py").args([boot, "rdk-regex", "^.*", "10"]),
        T,
    );
    let data_records = ran
        .stdout
        .lines()
        .filter(|l| *l == format!("R {DATA}"))
        .count();
    assert_eq!(data_records, 10, "{}", ran.stdout);
    let rdkafka_regex_assigned = ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("A "))
        .map(str::to_string)
        .collect();
    let rdkafka_errors = ran
        .stdout
        .lines()
        .filter(|l| l.starts_with("E ") || l.starts_with("X "))
        .map(str::to_string)
        .collect();
    let internal_after = internal_in_metadata(&mut c);
    let list = topics_tool(boot, &["--list"]);
    let list_exclude_internal = topics_tool(boot, &["--list", "--exclude-internal"]);
    let describe = topics_tool(boot, &["--describe", "--topic", "__consumer_offsets"]);
    // "Topic: __consumer_offsets\tTopicId: ...\tPartitionCount: 50\t..." without the id and
    // the configs (Kafka's are set at creation, kmirror's are not stored).
    let describe_summary = describe
        .iter()
        .find(|l| l.contains("PartitionCount"))
        .map(|l| {
            l.split('\t')
                .filter(|f| f.starts_with("Topic:") || f.starts_with("PartitionCount:"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let now = now_ms();
    let batch = kmirror_tests::records::keyed_batch(&[(Some(b"k"), b"v")], now);
    let produce_code = c
        .produce_raw("__consumer_offsets", 0, batch, -1)
        .expect("produce")
        .0;
    let mut internal_list_offsets_codes = Vec::new();
    for (t, p) in [("__consumer_offsets", 0), ("__transaction_state", 0)] {
        for ts in [-2, -1] {
            let r = c.list_offset(t, p, ts);
            eprintln!("{boot}: ListOffsets {t}-{p} ts {ts}: {r:?}");
            let code = match r {
                Ok(_) => 0,
                Err(kmirror_tests::wire::WireError::Broker { code, .. }) => code,
                Err(e) => panic!("ListOffsets {t}-{p}: {e}"),
            };
            internal_list_offsets_codes.push((format!("{t}-{p}"), ts, code));
        }
    }
    Outcome {
        internal_before,
        internal_after,
        list,
        list_exclude_internal,
        describe_summary,
        produce_code,
        java_regex_values,
        rdkafka_regex_assigned,
        rdkafka_errors,
        internal_list_offsets_codes,
    }
}

#[test]
fn internal_topics_are_described_as_kafka_describes_them() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let expected = {
        let kafka = KafkaCluster::single();
        scenario(&kafka.bootstrap())
    };
    eprintln!("Apache Kafka: {expected:#?}");
    assert_eq!(
        expected.internal_after,
        [
            ("__consumer_offsets".to_string(), true, 8, true),
            ("__transaction_state".to_string(), true, 8, true),
        ]
    );
    assert_eq!(expected.java_regex_values.len(), 10);
    // The harness's Kafka runs with offsets.topic.num.partitions=8 (and 8 for transactions).
    let node = KmirrorNode::builder()
        .args(&[
            "--offsets-topic-num-partitions",
            "8",
            "--transaction-state-log-num-partitions",
            "8",
        ])
        .start();
    let got = scenario(&node.addr());
    assert!(got.rdkafka_errors.is_empty(), "{:?}", got.rdkafka_errors);
    assert!(
        got.internal_list_offsets_codes.iter().all(|c| c.2 == 0),
        "{:?}",
        got.internal_list_offsets_codes
    );
    let mut c = WireClient::connect(&node.addr()).expect("connect");
    for ts in [-2, -1] {
        assert_eq!(c.list_offset("__consumer_offsets", 0, ts).unwrap(), 0);
    }
    assert_eq!(
        got, expected,
        "kmirror (left) differs from Apache Kafka (right)"
    );
}

/// (topic, CreateTopics code, is_internal in Metadata) for user-created `__` topics.
fn user_dunder_topics(boot: &str) -> Vec<(String, i16, bool)> {
    let mut c = WireClient::connect(boot).expect("connect");
    let mut out = Vec::new();
    for name in ["__mine", "__share_group_state"] {
        let code = c.create_topic(name, 1, 1, &[]).expect("create");
        let md = c.metadata(Some(&[name])).expect("metadata");
        let internal = md
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == name))
            .is_some_and(|t| t.is_internal);
        out.push((name.to_string(), code, internal));
    }
    out
}

/// Kafka marks only its own internal topics (Topic.INTERNAL_TOPICS) is_internal; a user topic
/// named `__mine` is a normal topic.
#[test]
fn only_kafkas_internal_topics_are_internal() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let expected = {
        let kafka = KafkaCluster::single();
        user_dunder_topics(&kafka.bootstrap())
    };
    eprintln!("Apache Kafka: {expected:?}");
    assert_eq!(expected[0], ("__mine".to_string(), 0, false));
    let node = KmirrorNode::start();
    let got = user_dunder_topics(&node.addr());
    assert_eq!(
        got, expected,
        "kmirror (left) differs from Apache Kafka (right)"
    );
}
