//! Issue 11 step 3, "a drop-in Kafka 4.x broker": the admin APIs Kafka 4.1's tools and
//! AdminClient use — DescribeTopicPartitions (kafka-topics --describe), DescribeLogDirs,
//! DescribeProducers, ListTransactions, DescribeTransactions, ElectLeaders — each exercised by
//! the Kafka 4.1.1 tools and by franz-go raw requests, on Apache Kafka 4.1.1 and on kmirror,
//! and the user-visible outcomes compared (error codes, partition lists, producer epochs and
//! sequences, transaction states; node ids, topic ids, producer ids, paths, sizes and
//! timestamps legitimately differ and are normalised).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use kmirror_tests::java::{self, tools};
use kmirror_tests::proc::{self, LineChild};
use kmirror_tests::{golang, KafkaCluster, KmirrorNode};
use serde_json::Value;

const T: Duration = Duration::from_secs(120);
/// TxnProducer's transactional id for topic `txnt`.
const TXN_ID: &str = "txn-txnt";

fn topics_tool(boot: &str, args: &[&str]) -> proc::Ran {
    let mut a = vec!["--bootstrap-server", boot];
    a.extend_from_slice(args);
    proc::run(java::tool(tools::TOPIC_COMMAND).args(&a), T)
}

fn tool(main: &str, boot: &str, args: &[&str]) -> proc::Ran {
    let mut a = vec!["--bootstrap-server", boot];
    a.extend_from_slice(args);
    proc::run(java::tool(main).args(&a), T)
}

/// Words of a tool's table row, or None for the header.
fn columns(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_string).collect()
}

/// Replaces the number after `key` (up to the next tab) by `N`.
fn mask_after(line: &str, key: &str) -> String {
    match line.find(key) {
        None => line.to_string(),
        Some(i) => {
            let start = i + key.len();
            let end = line[start..].find('\t').map_or(line.len(), |j| start + j);
            format!("{}N{}", &line[..start], &line[end..])
        }
    }
}

/// A tool's log line without its `[hh:mm:ss.mmm] ` prefix.
fn without_timestamp(l: &str) -> &str {
    let l = l.trim();
    match l.strip_prefix('[').and_then(|r| r.split_once("] ")) {
        Some((_, rest)) => rest,
        None => l,
    }
}

/// What the Kafka tools printed, normalised.
fn java_outcome(boot: &str) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    // kafka-topics --describe: DescribeTopicPartitions in 4.x.
    let r = topics_tool(boot, &["--describe", "--topic", "dtp"]);
    assert!(r.status.success(), "describe dtp: {}", r.stderr);
    let lines: Vec<String> = r
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let l = l.split("\tConfigs:").next().unwrap_or(l);
            let l = mask_after(l, "TopicId: ");
            let l = mask_after(&l, "Leader: ");
            let l = mask_after(&l, "Replicas: ");
            mask_after(&l, "Isr: ")
        })
        .collect();
    out.insert("topics.describe", lines.join("\n"));
    let r = topics_tool(boot, &["--describe", "--topic", "no-such-topic"]);
    out.insert(
        "topics.describe.unknown",
        format!(
            "exit {:?}: {}",
            r.status.code(),
            r.stderr
                .lines()
                .chain(r.stdout.lines())
                .find(|l| l.contains("does not exist"))
                .map(without_timestamp)
                .unwrap_or("")
        ),
    );

    // kafka-log-dirs --describe: DescribeLogDirs.
    let r = tool(
        "org.apache.kafka.tools.LogDirsCommand",
        boot,
        &["--describe", "--topic-list", "dtp,other"],
    );
    assert!(r.status.success(), "log dirs: {}", r.stderr);
    let json = r
        .stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON from kafka-log-dirs: {}", r.stdout));
    let v: Value = serde_json::from_str(json).expect("kafka-log-dirs JSON");
    let mut parts = Vec::new();
    let mut sized = 0i64;
    for b in v["brokers"].as_array().expect("brokers") {
        for d in b["logDirs"].as_array().expect("logDirs") {
            assert!(d["error"].is_null(), "log dir error: {d}");
            assert!(d["logDir"].as_str().is_some_and(|p| p.starts_with('/')));
            for p in d["partitions"].as_array().expect("partitions") {
                sized += p["size"].as_i64().expect("size");
                parts.push(format!(
                    "{} lag={} future={}",
                    p["partition"].as_str().unwrap(),
                    p["offsetLag"],
                    p["isFuture"]
                ));
            }
        }
    }
    assert!(sized > 0, "the partitions written to have a size: {json}");
    parts.sort();
    out.insert("log-dirs", parts.join("\n"));

    // kafka-transactions list / describe / describe-producers.
    let txns = "org.apache.kafka.tools.TransactionsCommand";
    let r = tool(txns, boot, &["list"]);
    assert!(r.status.success(), "transactions list: {}", r.stderr);
    let mut rows: Vec<String> = r
        .stdout
        .lines()
        .skip(1)
        .map(columns)
        .filter(|c| c.len() >= 4)
        .map(|c| format!("{} {}", c[0], c[3]))
        .collect();
    rows.sort();
    out.insert("transactions.list", rows.join("\n"));
    let r = tool(txns, boot, &["describe", "--transactional-id", TXN_ID]);
    assert!(r.status.success(), "transactions describe: {}", r.stderr);
    let row = columns(r.stdout.lines().nth(1).unwrap_or(""));
    assert!(row.len() >= 8, "transactions describe: {}", r.stdout);
    // The last column: TopicPartitions.
    let mut tps: Vec<&str> = row[row.len() - 1].split(',').collect();
    tps.sort();
    out.insert(
        "transactions.describe",
        format!("{} epoch={} {} {}", row[1], row[3], row[4], tps.join(",")),
    );
    let r = tool(
        txns,
        boot,
        &["describe", "--transactional-id", "no-such-txn"],
    );
    out.insert(
        "transactions.describe.unknown",
        format!(
            "exit {:?} not-found={}",
            r.status.code(),
            (r.stdout.clone() + &r.stderr).contains("TransactionalIdNotFound")
        ),
    );
    let r = tool(
        txns,
        boot,
        &["describe-producers", "--topic", "txnt", "--partition", "0"],
    );
    assert!(r.status.success(), "describe-producers: {}", r.stderr);
    let rows: Vec<String> = r
        .stdout
        .lines()
        .skip(1)
        .map(columns)
        .filter(|c| c.len() >= 6)
        .map(|c| {
            format!(
                "epoch={} coord={} seq={} txnstart={}",
                c[1], c[2], c[3], c[5]
            )
        })
        .collect();
    out.insert("transactions.describe-producers", rows.join("\n"));

    // kafka-leader-election: ElectLeaders.
    let elect = "org.apache.kafka.tools.LeaderElectionCommand";
    for (name, args) in [
        (
            "elect.named",
            &[
                "--election-type",
                "PREFERRED",
                "--topic",
                "dtp",
                "--partition",
                "0",
            ][..],
        ),
        (
            "elect.all",
            &["--election-type", "PREFERRED", "--all-topic-partitions"][..],
        ),
        (
            "elect.unknown",
            &[
                "--election-type",
                "PREFERRED",
                "--topic",
                "no-such-topic",
                "--partition",
                "0",
            ][..],
        ),
    ] {
        let r = tool(elect, boot, args);
        let said: Vec<&str> = r
            .stdout
            .lines()
            .chain(r.stderr.lines())
            .filter(|l| {
                l.contains("elected")
                    || l.contains("Exception")
                    || l.contains("partitions")
                    || l.contains("Error")
            })
            .map(|l| without_timestamp(l).split(": ").next().unwrap_or(l).trim())
            .collect();
        out.insert(
            name,
            format!("exit {:?}: {}", r.status.code(), said.join(" | ")),
        );
    }
    out
}

/// Normalises a franz-printed response: drops versions, throttles and tags; masks node ids,
/// topic ids, producer ids, paths, sizes and timestamps.
fn normalise(key: &str, v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("Version");
            m.remove("ThrottleMillis");
            m.remove("UnknownTags");
            for (k, x) in m.iter_mut() {
                normalise(k, x);
            }
        }
        Value::Array(a) => {
            let masked_list = matches!(key, "ReplicaNodes" | "ISRNodes");
            if masked_list {
                for x in a.iter_mut() {
                    *x = Value::from("N");
                }
            } else if key == "TopicID" {
                let zero = a.iter().all(|x| x.as_i64() == Some(0));
                *v = Value::from(if zero { "zero" } else { "id" });
            } else {
                for x in a.iter_mut() {
                    normalise(key, x);
                }
            }
        }
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(0);
            let masked = match key {
                "LeaderID" => Some("N"),
                "ProducerID" if n >= 0 => Some("PID"),
                "Size" | "TotalBytes" | "UsableBytes" if n >= 0 => Some("B"),
                "LastTimestamp" | "StartTimestamp" if n > 0 => Some("T"),
                _ => None,
            };
            if let Some(m) = masked {
                *v = Value::from(m);
            }
        }
        Value::String(_) if key == "Dir" => *v = Value::from("DIR"),
        _ => {}
    }
}

/// franz-go's raw requests, normalised and sorted.
fn franz_outcome(boot: &str) -> Vec<(String, Value)> {
    let ran = proc::run(
        Command::new(golang::franz_bin()).args([
            "-mode",
            "admin",
            "-bootstrap",
            boot,
            "-admin-topics",
            "dtp,other",
            "-txn-topic",
            "txnt",
            "-txn-id",
            TXN_ID,
        ]),
        T,
    );
    assert!(
        ran.status.success(),
        "franz admin failed: {}\n{}",
        ran.stdout,
        ran.stderr
    );
    let mut out = Vec::new();
    for line in ran.stdout.lines() {
        let v: Value = serde_json::from_str(line).expect("franz JSON line");
        let api = v["api"].as_str().expect("api").to_string();
        let mut body = v["body"].clone();
        normalise("", &mut body);
        if api == "ElectLeaders.all" {
            // Kafka's internal topics exist once their coordinator was first used; kmirror's
            // coordinators are not partitions of topics (issue 11 step 6 shows them in
            // Metadata): compare the user topics.
            if let Some(ts) = body["Topics"].as_array_mut() {
                ts.retain(|t| !t["Topic"].as_str().unwrap_or("").starts_with("__"));
            }
        }
        sort_lists(&mut body);
        out.push((api, body));
    }
    out
}

/// Kafka's list orders are not stable: every array is sorted by its elements' JSON text.
fn sort_lists(v: &mut Value) {
    match v {
        Value::Object(m) => m.values_mut().for_each(sort_lists),
        Value::Array(a) => {
            a.iter_mut().for_each(sort_lists);
            a.sort_by_key(|x| x.to_string());
        }
        _ => {}
    }
}

#[derive(Debug)]
struct Outcome {
    java: BTreeMap<&'static str, String>,
    franz: Vec<(String, Value)>,
}

/// Topics `dtp` (3 partitions, some records), `other` (1) and `txnt` (2) with one open
/// transaction of TxnProducer; then the tools and franz look.
fn scenario(boot: &str) -> Outcome {
    for (t, n) in [("dtp", "3"), ("other", "1"), ("txnt", "2")] {
        let r = topics_tool(
            boot,
            &[
                "--create",
                "--topic",
                t,
                "--partitions",
                n,
                "--replication-factor",
                "1",
            ],
        );
        assert!(r.status.success(), "create {t}: {}", r.stderr);
    }
    let produced = golang::run(golang::franz("produce", boot, "dtp").args(["-n", "30"]));
    assert!(produced.error.is_none(), "produce: {}", produced.raw);
    let mut open = LineChild::spawn(
        java::program("TxnProducer").args([boot, "txnt", "2", "0", "10", "0", "true"]),
    );
    proc::wait_for(Duration::from_secs(90), "the open transaction", || {
        (open.count("OPEN") == 1).then_some(())
    });
    assert!(
        open.exited().is_none(),
        "TxnProducer keeps its transaction open"
    );
    let java = java_outcome(boot);
    let franz = franz_outcome(boot);
    drop(open);
    Outcome { java, franz }
}

#[test]
fn admin_apis_answer_kafka_4_tools_and_franz_go_as_apache_kafka_does() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let expected = {
        let kafka = KafkaCluster::single();
        scenario(&kafka.bootstrap())
    };
    let got = {
        let node = KmirrorNode::start();
        scenario(&node.addr())
    };
    eprintln!("Kafka tools on Apache Kafka: {:#?}", expected.java);
    // The expectations themselves, as Kafka answered them.
    assert!(expected.java["transactions.describe"].contains("Ongoing"));
    assert!(expected.java["topics.describe"].contains("Partition: 2"));
    assert!(expected.java["transactions.describe-producers"].contains("epoch=0"));
    assert_eq!(
        expected
            .franz
            .iter()
            .filter(|(a, _)| a == "DescribeTopicPartitions.page")
            .count(),
        2,
        "4 partitions at 2 a page: {:?}",
        expected.franz
    );
    let mut diffs = Vec::new();
    for (k, want) in &expected.java {
        if got.java.get(k) != Some(want) {
            diffs.push(format!(
                "{k}:\n  kmirror: {:?}\n  kafka:   {want:?}",
                got.java.get(k)
            ));
        }
    }
    for ((api, g), (_, w)) in got.franz.iter().zip(&expected.franz) {
        if g != w {
            diffs.push(format!("{api}:\n  kmirror: {g}\n  kafka:   {w}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "kmirror differs from Apache Kafka:\n{}",
        diffs.join("\n")
    );
    assert_eq!(
        got.franz.iter().map(|(a, _)| a).collect::<Vec<_>>(),
        expected.franz.iter().map(|(a, _)| a).collect::<Vec<_>>(),
        "franz requests (pages of DescribeTopicPartitions included)"
    );
    for ((api, g), (_, w)) in got.franz.iter().zip(&expected.franz) {
        assert_eq!(
            g, w,
            "{api}: kmirror (left) differs from Apache Kafka (right)\nkmirror: {g}\nkafka:   {w}"
        );
    }
}

/// Kafka's features kmirror finalizes too; the others (transaction.version, group.version,
/// ...) are protocols kmirror does not advertise.
const SHARED_FEATURES: [&str; 2] = ["metadata.version", "kraft.version"];

/// `kafka-features describe` lines of `features`, without the epoch.
fn features_described(boot: &str, features: &[&str]) -> Vec<String> {
    let r = tool("org.apache.kafka.tools.FeatureCommand", boot, &["describe"]);
    assert!(r.status.success(), "kafka-features describe: {}", r.stderr);
    let mut lines: Vec<String> = r
        .stdout
        .lines()
        .filter(|l| {
            features
                .iter()
                .any(|f| l.starts_with(&format!("Feature: {f}\t")))
        })
        .map(|l| l.split("\tEpoch:").next().unwrap_or(l).to_string())
        .collect();
    lines.sort();
    lines
}

/// `kafka-features ARGS`: exit code and the error class named, if any.
fn features_tool(boot: &str, args: &[&str]) -> String {
    let r = tool("org.apache.kafka.tools.FeatureCommand", boot, args);
    let out = format!("{}\n{}", r.stdout, r.stderr);
    let error = out
        .split(|c: char| c.is_whitespace() || c == ':')
        .find(|w| w.ends_with("Exception") && w.contains('.'))
        .unwrap_or("");
    format!("exit {:?} {error}", r.status.code())
}

/// Updates whose answer must be Kafka's: unknown feature, level out of range, downgrade
/// without a downgrade type, a valid no-op (validate-only), and all-or-nothing.
const UPDATES: &str = "no.such.feature=1/1;metadata.version=999/1;metadata.version=8/1;\
metadata.version=27/1/validate;kraft.version=0/1/validate;\
metadata.version=27/1,no.such.feature=1/1";

fn franz_features(boot: &str, updates: &str) -> Vec<(String, Value)> {
    let ran = proc::run(
        Command::new(golang::franz_bin()).args([
            "-mode",
            "features",
            "-bootstrap",
            boot,
            "-updates",
            updates,
        ]),
        T,
    );
    assert!(
        ran.status.success(),
        "franz features failed: {}\n{}",
        ran.stdout,
        ran.stderr
    );
    ran.stdout
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("franz JSON line");
            let mut body = v["body"].clone();
            normalise("", &mut body);
            (v["api"].as_str().unwrap().to_string(), body)
        })
        .collect()
}

/// The features of an ApiVersions answer as `name min..max finalized`, for `names`.
fn feature_levels(body: &Value, names: &[&str]) -> Vec<String> {
    let finalized = |n: &str| {
        body["FinalizedFeatures"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["Name"] == n)
            .map(|f| format!("{}..{}", f["MinVersionLevel"], f["MaxVersionLevel"]))
            .unwrap_or_else(|| "-".into())
    };
    let mut v: Vec<String> = body["SupportedFeatures"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| names.contains(&f["Name"].as_str().unwrap_or("")))
        .map(|f| {
            let n = f["Name"].as_str().unwrap();
            format!(
                "{n} {}..{} finalized {}",
                f["MinVersion"],
                f["MaxVersion"],
                finalized(n)
            )
        })
        .collect();
    v.sort();
    v
}

#[derive(Debug, PartialEq)]
struct FeatureOutcome {
    described: Vec<String>,
    tool: Vec<String>,
    advertised: Vec<String>,
    updates: Vec<(String, Value)>,
}

fn feature_scenario(boot: &str) -> FeatureOutcome {
    let described = features_described(boot, &SHARED_FEATURES);
    let tool = vec![
        features_tool(boot, &["upgrade", "--feature", "no.such.feature=1"]),
        features_tool(boot, &["upgrade", "--feature", "metadata.version=999"]),
        features_tool(boot, &["downgrade", "--feature", "metadata.version=8"]),
        features_tool(boot, &["upgrade", "--metadata", "4.1-IV1", "--dry-run"]),
    ];
    let mut out = franz_features(boot, UPDATES);
    let (_, api_versions) = out.remove(0);
    FeatureOutcome {
        described,
        tool,
        advertised: feature_levels(&api_versions, &SHARED_FEATURES),
        updates: out,
    }
}

#[test]
fn features_and_update_features_answer_as_apache_kafka_and_mirror_version_is_a_real_level() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let expected = {
        let kafka = KafkaCluster::single();
        feature_scenario(&kafka.bootstrap())
    };
    eprintln!("features on Apache Kafka: {expected:#?}");
    let mut node = KmirrorNode::start();
    let boot = node.addr();
    let got = feature_scenario(&boot);
    assert_eq!(
        got, expected,
        "kmirror (left) differs from Apache Kafka (right)"
    );

    // mirror.version: advertised, finalized at 1, and turned off and on by UpdateFeatures,
    // durably.
    let mirror = |boot: &str| {
        let (_, av) = franz_features(boot, "").remove(0);
        feature_levels(&av, &["mirror.version"])
    };
    assert_eq!(mirror(&boot), ["mirror.version 0..1 finalized 1..1"]);
    assert_eq!(
        features_described(&boot, &["mirror.version"]),
        ["Feature: mirror.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1"]
    );
    assert!(kmirror_tests::mirror::cli(&boot, &["list"])
        .status
        .success());
    // An upgrade to a lower level is refused; a downgrade to 0 turns mirroring off.
    let refused = tool(
        "org.apache.kafka.tools.FeatureCommand",
        &boot,
        &["upgrade", "--feature", "mirror.version=0"],
    );
    assert!(
        !refused.status.success()
            && (refused.stdout.clone() + &refused.stderr).contains("DOWNGRADE"),
        "{}{}",
        refused.stdout,
        refused.stderr
    );
    // The AdminClient refuses that itself; the broker too (INVALID_UPDATE_VERSION).
    let raw = franz_features(&boot, "mirror.version=0/1;mirror.version=2/1");
    assert_eq!(raw[1].1["ErrorCode"], 95, "{raw:?}");
    assert_eq!(raw[2].1["ErrorCode"], 95, "{raw:?}");
    assert_eq!(mirror(&boot), ["mirror.version 0..1 finalized 1..1"]);
    assert_eq!(
        features_tool(&boot, &["downgrade", "--feature", "mirror.version=0"]),
        "exit Some(0) "
    );
    assert_eq!(mirror(&boot), ["mirror.version 0..1 finalized -"]);
    let off = kmirror_tests::mirror::cli(&boot, &["list"]);
    assert!(
        !off.status.success(),
        "mirror APIs answer UNSUPPORTED_VERSION at mirror.version 0: {}{}",
        off.stdout,
        off.stderr
    );
    node.stop();
    node.start_again();
    let boot = node.addr();
    assert_eq!(
        mirror(&boot),
        ["mirror.version 0..1 finalized -"],
        "the level survives a restart"
    );
    assert_eq!(
        features_tool(&boot, &["upgrade", "--feature", "mirror.version=1"]),
        "exit Some(0) "
    );
    assert_eq!(mirror(&boot), ["mirror.version 0..1 finalized 1..1"]);
    assert!(kmirror_tests::mirror::cli(&boot, &["list"])
        .status
        .success());
}

/// Masks the numbers in a message (timestamps and bounds depend on the broker's clock).
fn mask_digits(v: &mut Value) {
    match v {
        Value::String(s) => {
            let mut out = String::new();
            let mut in_num = false;
            for c in s.chars() {
                if c.is_ascii_digit() {
                    if !in_num {
                        out.push('N');
                    }
                    in_num = true;
                } else {
                    in_num = false;
                    out.push(c);
                }
            }
            *s = out;
        }
        Value::Object(m) => m.values_mut().for_each(mask_digits),
        Value::Array(a) => a.iter_mut().for_each(mask_digits),
        _ => {}
    }
}

fn bad_timestamp_scenario(boot: &str) -> Vec<(String, Value)> {
    for (t, cfg) in [
        ("ts-default", None),
        ("ts-before", Some("message.timestamp.before.max.ms=60000")),
    ] {
        let mut args = vec!["--create", "--topic", t, "--partitions", "1"];
        if let Some(c) = cfg {
            args.extend(["--config", c]);
        }
        let r = topics_tool(boot, &args);
        assert!(r.status.success(), "create {t}: {}", r.stderr);
    }
    let ran = proc::run(
        Command::new(golang::franz_bin()).args([
            "-mode",
            "badts",
            "-bootstrap",
            boot,
            "-ts-topics",
            "ts-default,ts-before",
        ]),
        T,
    );
    assert!(
        ran.status.success(),
        "franz badts: {}\n{}",
        ran.stdout,
        ran.stderr
    );
    ran.stdout
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("franz JSON line");
            let mut body = v["body"].clone();
            normalise("", &mut body);
            mask_digits(&mut body);
            sort_lists(&mut body);
            (v["api"].as_str().unwrap().to_string(), body)
        })
        .collect()
}

/// Issue 11 step 6: a Produce batch holding records whose timestamps lie outside
/// message.timestamp.after.max.ms (Kafka 4 default: one hour) or a topic's
/// message.timestamp.before.max.ms is refused with INVALID_TIMESTAMP and KIP-467 record errors
/// naming each bad record, as Apache Kafka 4.1.1 answers; a batch within bounds is appended.
/// OffsetCommit naming a topic that does not exist and a partition beyond an existing topic's
/// count: UNKNOWN_TOPIC_OR_PARTITION for those, the existing partition is committed.
#[test]
fn produce_with_out_of_range_timestamps_gets_kafkas_record_errors() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let expected = {
        let kafka = KafkaCluster::single();
        bad_timestamp_scenario(&kafka.bootstrap())
    };
    eprintln!("Apache Kafka answered: {expected:#?}");
    let first = &expected[0].1["Topics"][0]["Partitions"][0];
    assert_eq!(first["ErrorCode"], 32, "INVALID_TIMESTAMP: {first}");
    assert_eq!(first["ErrorRecords"].as_array().map(Vec::len), Some(2));
    let commit = &expected
        .iter()
        .find(|(a, _)| a == "OffsetCommit")
        .expect("commit")
        .1;
    assert!(commit.to_string().contains("\"ErrorCode\":3"), "{commit}");
    let node = KmirrorNode::start();
    let got = bad_timestamp_scenario(&node.addr());
    assert_eq!(
        got, expected,
        "kmirror (left) differs from Apache Kafka (right)"
    );
}

/// Seconds a franz group consumer takes to read the one record of `topic` on `boot`.
fn group_read_secs(boot: &str, topic: &str, group: &str) -> f64 {
    let mut c = kmirror_tests::WireClient::connect(boot).expect("connect");
    assert_eq!(c.create_topic(topic, 1, 1, &[]).expect("CreateTopics"), 0);
    let produced = golang::run(golang::franz("produce", boot, topic).args(["-n", "1"]));
    assert!(produced.error.is_none(), "produce: {}", produced.raw);
    let start = std::time::Instant::now();
    let read =
        golang::run(golang::franz("consume", boot, topic).args(["-n", "1", "-group", group]));
    assert!(read.error.is_none(), "consume: {}", read.raw);
    assert_eq!(read.records.len(), 1, "{}", read.raw);
    start.elapsed().as_secs_f64()
}

/// `group.initial.rebalance.delay.ms` as a broker setting: a new group's first rebalance
/// waits for it (Kafka's delayed initial join), and without it (kmirror's default 0, as
/// Kafka's shipped server.properties) the group reads at once.
#[test]
fn group_initial_rebalance_delay_is_a_broker_setting() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let delayed = KmirrorNode::builder()
        .args(&["--group-initial-rebalance-delay-ms", "6000"])
        .start();
    let with_delay = group_read_secs(&delayed.addr(), "delay-t", "delay-g");
    drop(delayed);
    let plain = KmirrorNode::start();
    let without = group_read_secs(&plain.addr(), "delay-t", "delay-g");
    assert!(
        with_delay >= 6.0,
        "the first rebalance waits group.initial.rebalance.delay.ms: {with_delay:.1}s"
    );
    assert!(without < 6.0, "no delay by default: {without:.1}s");
}
