//! Issue 11, step 4: the Kafka 4.1.1 command-line tools a user points at a broker, run against
//! kmirror and, to validate each expectation, against Apache Kafka 4.1.1 with the same steps.
//!
//! Each row of the matrix is one tool invocation reduced to what its user reads from it (exit
//! status, the lines that carry the answer, with node ids, hosts, sizes and timings taken out).
//! A row passes when kmirror's outcome equals Kafka's. Rows kmirror does not serve yet are named
//! in [`GAPS`] with the reason; the test checks they still differ, so closing a gap fails the
//! test until the row moves out of the list (and docs/COMPATIBILITY.md says so).
//! The matrix is printed and written to `target/test-logs/cli-matrix.md`.

use std::collections::BTreeMap;
use std::time::Duration;

use kmirror_tests::{deps, java, proc, python, KafkaCluster, KmirrorNode};

/// Rows kmirror does not pass yet, and why. Each must still differ from Kafka.
const GAPS: &[(&str, &str)] = &[];

/// One broker the matrix runs against.
struct Target<'a> {
    bootstrap: &'a str,
    /// A per-broker dynamic rate config the broker has (Kafka's replication throttle; kmirror's
    /// mirror ceiling, its equivalent).
    rate_key: &'a str,
}

/// (row id, tool, what it does) and the outcome, in the order run.
type Matrix = Vec<(String, String)>;

const TOPIC: &str = "cli-matrix";
const GROUP: &str = "cli-matrix-group";
const RECORDS: usize = 3000;

fn run(class: &str, args: &[&str]) -> proc::Ran {
    let mut cmd = java::tool(class);
    cmd.args(args);
    proc::run(&mut cmd, Duration::from_secs(120))
}

/// [`run`] with `--bootstrap-server bootstrap` in front of `args`.
fn run_at(class: &str, bootstrap: &str, args: &[&str]) -> proc::Ran {
    let mut all = vec!["--bootstrap-server", bootstrap];
    all.extend_from_slice(args);
    run(class, &all)
}

/// `exit N` and the lines of stdout for which `keep` returns a normalized line.
fn outcome(ran: &proc::Ran, keep: impl Fn(&str) -> Option<String>) -> String {
    let code = ran.status.code().unwrap_or(-1);
    let mut lines: Vec<String> = ran.stdout.lines().filter_map(|l| keep(l.trim())).collect();
    lines.sort();
    lines.dedup();
    if code != 0 {
        // A failing tool prints its reason on stderr or stdout: keep the root exception's
        // class (the first one that is not a wrapper), not its wording or stack.
        let err = ran
            .stderr
            .lines()
            .chain(ran.stdout.lines())
            .flat_map(|l| {
                l.split([' ', ':', '(', ')'])
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .filter(|w| w.ends_with("Exception"))
            .map(|w| w.rsplit('.').next().unwrap_or(&w).to_string())
            .find(|w| w != "ExecutionException")
            .unwrap_or_else(|| {
                ran.stderr
                    .lines()
                    .chain(ran.stdout.lines())
                    .find(|l| !l.trim().is_empty())
                    .map(|l| {
                        l.chars()
                            .filter(|c| !c.is_ascii_digit())
                            .take(100)
                            .collect()
                    })
                    .unwrap_or_default()
            });
        return format!("exit {code}: {err}");
    }
    format!("exit 0: {}", lines.join(" | "))
}

/// Whitespace-separated `Key: value` pairs of a kafka-topics describe line, minus node ids.
fn describe_line(l: &str) -> Option<String> {
    if !l.contains("Topic:") {
        return None;
    }
    let mut out = Vec::new();
    let mut it = l.split('\t').map(str::trim).filter(|s| !s.is_empty());
    for field in it.by_ref() {
        let (k, v) = field.split_once(':').unwrap_or((field, ""));
        let v = v.trim();
        let v = match k {
            "TopicId" => "<id>".to_string(),
            // The test Kafka sets min.insync.replicas=1 in its server.properties, which
            // kafka-topics lists as a (static broker) config of every topic.
            "Configs" => v
                .split(',')
                .filter(|c| *c != "min.insync.replicas=1")
                .collect::<Vec<_>>()
                .join(","),
            "Leader" | "Replicas" | "Isr" => {
                if v.is_empty() || v == "none" {
                    v.to_string()
                } else {
                    "<node>".to_string()
                }
            }
            _ => v.to_string(),
        };
        out.push(format!("{k}={v}"));
    }
    Some(out.join(" "))
}

fn topics(t: &Target<'_>, m: &mut Matrix) {
    let tc = java::tools::TOPIC_COMMAND;
    let b = t.bootstrap;
    let ran = run_at(
        tc,
        b,
        &[
            "--create",
            "--topic",
            TOPIC,
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=86400000",
        ],
    );
    push(m, "topics.create", &ran, |l| {
        l.starts_with("Created topic").then(|| l.to_string())
    });
    let ran = run_at(tc, b, &["--create", "--topic", TOPIC, "--partitions", "3"]);
    push(m, "topics.create-existing", &ran, |_| None);
    let ran = run_at(tc, b, &["--list"]);
    push(m, "topics.list", &ran, |l| {
        (l == TOPIC).then(|| l.to_string())
    });
    let ran = run_at(tc, b, &["--describe", "--topic", TOPIC]);
    push(m, "topics.describe", &ran, describe_line);
    let ran = run_at(tc, b, &["--alter", "--topic", TOPIC, "--partitions", "4"]);
    push(m, "topics.alter-partitions", &ran, |_| None);
    let ran = run_at(tc, b, &["--describe", "--topic", TOPIC]);
    push(m, "topics.describe-after-alter", &ran, describe_line);
    let ran = run_at(tc, b, &["--describe", "--under-replicated-partitions"]);
    push(m, "topics.under-replicated", &ran, describe_line);
    let ran = run_at(
        tc,
        b,
        &[
            "--create",
            "--topic",
            "cli-matrix-doomed",
            "--partitions",
            "1",
        ],
    );
    push(m, "topics.create-second", &ran, |_| None);
    let ran = run_at(tc, b, &["--delete", "--topic", "cli-matrix-doomed"]);
    push(m, "topics.delete", &ran, |_| None);
    proc::wait_for(Duration::from_secs(30), "deleted topic gone", || {
        let ran = run_at(tc, b, &["--list"]);
        (!ran.stdout.lines().any(|l| l.trim() == "cli-matrix-doomed")).then_some(())
    });
}

fn configs(t: &Target<'_>, m: &mut Matrix) {
    let cc = "kafka.admin.ConfigCommand";
    let b = t.bootstrap;
    let cfg_line = |l: &str| {
        // "retention.ms=1000 sensitive=false synonyms={...}" → "retention.ms=1000"
        let first = l.split_whitespace().next()?;
        (first.contains('=') && !first.starts_with("synonyms")).then(|| first.to_string())
    };
    let ran = run_at(
        cc,
        b,
        &[
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            TOPIC,
            "--add-config",
            "retention.ms=600000,max.message.bytes=200000",
        ],
    );
    push(m, "configs.topic-add", &ran, |l| {
        l.starts_with("Completed").then(|| l.to_string())
    });
    let ran = run_at(
        cc,
        b,
        &[
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            TOPIC,
        ],
    );
    push(m, "configs.topic-describe", &ran, cfg_line);
    let ran = run_at(
        cc,
        b,
        &[
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            TOPIC,
            "--delete-config",
            "max.message.bytes",
        ],
    );
    push(m, "configs.topic-delete", &ran, |_| None);
    let ran = run_at(
        cc,
        b,
        &[
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            TOPIC,
        ],
    );
    push(m, "configs.topic-describe-after-delete", &ran, cfg_line);
    let ran = run_at(
        cc,
        b,
        &[
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            TOPIC,
            "--add-config",
            "no.such.config=1",
        ],
    );
    push(m, "configs.topic-unknown-key", &ran, |_| None);
    // Brokers: a per-broker dynamic rate, set, described, deleted.
    let rate = format!("{}=5000000", t.rate_key);
    let ran = run_at(
        cc,
        b,
        &[
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--add-config",
            &rate,
        ],
    );
    push(m, "configs.broker-add", &ran, |_| None);
    let key = t.rate_key;
    let rate_line = move |l: &str| {
        l.starts_with(key).then(|| {
            l.split_whitespace()
                .next()
                .unwrap_or("")
                .replacen(key, "<rate>", 1)
        })
    };
    let ran = run_at(
        cc,
        b,
        &[
            "--describe",
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
        ],
    );
    push(m, "configs.broker-describe", &ran, rate_line);
    let ran = run_at(
        cc,
        b,
        &[
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--delete-config",
            key,
        ],
    );
    push(m, "configs.broker-delete", &ran, |_| None);
    // Users: a SCRAM credential.
    let ran = run_at(
        cc,
        b,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "cli-alice",
            "--add-config",
            "SCRAM-SHA-256=[iterations=8192,password=alice-secret]",
        ],
    );
    push(m, "configs.user-scram-add", &ran, |_| None);
    let ran = run_at(
        cc,
        b,
        &[
            "--describe",
            "--entity-type",
            "users",
            "--entity-name",
            "cli-alice",
        ],
    );
    push(m, "configs.user-scram-describe", &ran, |l| {
        l.contains("SCRAM").then(|| l.to_string())
    });
    // Clients: a byte-rate quota.
    let ran = run_at(
        cc,
        b,
        &[
            "--alter",
            "--entity-type",
            "clients",
            "--entity-name",
            "cli-client",
            "--add-config",
            "producer_byte_rate=1048576,consumer_byte_rate=2097152",
        ],
    );
    push(m, "configs.client-quota-add", &ran, |_| None);
    let ran = run_at(
        cc,
        b,
        &[
            "--describe",
            "--entity-type",
            "clients",
            "--entity-name",
            "cli-client",
        ],
    );
    push(m, "configs.client-quota-describe", &ran, |l| {
        l.contains("byte_rate").then(|| l.to_string())
    });
}

/// Producer tools, then consumer tools and kafka-consumer-groups on the group they leave.
fn produce_consume(t: &Target<'_>, m: &mut Matrix) {
    let b = t.bootstrap;
    let n = RECORDS.to_string();
    let ran = run(
        java::tools::PRODUCER_PERFORMANCE,
        &[
            "--topic",
            TOPIC,
            "--num-records",
            &n,
            "--record-size",
            "200",
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={b}"),
            "acks=all",
        ],
    );
    push(m, "producer-perf-test", &ran, |l| {
        l.split_once(" records sent")
            .map(|(n, _)| format!("{} records sent", n.trim()))
    });
    let ran = run_at(
        "org.apache.kafka.tools.VerifiableProducer",
        b,
        // Keyed records (keys 0..99 in turn): every partition gets some on both sides
        // whatever the sticky partitioner did with producer-perf-test's unkeyed ones (once
        // it left Kafka's partition 0 empty, so its group describe listed one partition
        // fewer and delete-records at 10 was out of range there).
        &[
            "--topic",
            TOPIC,
            "--max-messages",
            &n,
            "--acks",
            "-1",
            "--repeating-keys",
            "100",
        ],
    );
    let acked = json_events(&ran.stdout, "producer_send_success");
    let errors = json_events(&ran.stdout, "producer_send_error");
    m.push((
        "verifiable-producer".into(),
        format!(
            "exit {}: acked={} errors={}",
            ran.status.code().unwrap_or(-1),
            acked.len(),
            errors.len()
        ),
    ));
    let ran = run_at(
        "org.apache.kafka.tools.VerifiableConsumer",
        b,
        &[
            "--topic",
            TOPIC,
            "--group-id",
            GROUP,
            "--max-messages",
            &(2 * RECORDS).to_string(),
            "--reset-policy",
            "earliest",
            "--verbose",
        ],
    );
    let consumed: u64 = json_events(&ran.stdout, "records_consumed")
        .iter()
        .map(|v| v["count"].as_u64().unwrap_or(0))
        .sum();
    let committed_ok = json_events(&ran.stdout, "offsets_committed")
        .iter()
        .all(|v| v["success"].as_bool() == Some(true));
    m.push((
        "verifiable-consumer".into(),
        format!(
            "exit {}: consumed={consumed} commits_ok={committed_ok}",
            ran.status.code().unwrap_or(-1)
        ),
    ));
    let ran = run_at(
        "org.apache.kafka.tools.GetOffsetShell",
        b,
        &["--topic", TOPIC],
    );
    eprintln!("kafka-get-offsets:\n{}", ran.stdout);
    let total: i64 = ran
        .stdout
        .lines()
        .filter_map(|l| l.rsplit(':').next()?.trim().parse::<i64>().ok())
        .sum();
    m.push((
        "get-offsets.latest".into(),
        format!(
            "exit {}: partitions={} total={total}",
            ran.status.code().unwrap_or(-1),
            ran.stdout.lines().filter(|l| l.starts_with(TOPIC)).count()
        ),
    ));
    consumer_groups(t, m);
    // kafka-delete-records: cut partition 0 at 10, then get-offsets --time earliest.
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("delete.json");
    std::fs::write(
        &json,
        format!(
            r#"{{"partitions":[{{"topic":"{TOPIC}","partition":0,"offset":10}}],"version":1}}"#
        ),
    )
    .expect("write offsets json");
    let ran = run_at(
        "org.apache.kafka.tools.DeleteRecordsCommand",
        b,
        &["--offset-json-file", json.to_str().expect("utf-8 path")],
    );
    push(m, "delete-records", &ran, |l| {
        l.contains("low_watermark").then(|| l.replace('\t', " "))
    });
    let ran = run_at(
        "org.apache.kafka.tools.GetOffsetShell",
        b,
        &["--topic", TOPIC, "--partitions", "0", "--time", "-2"],
    );
    push(m, "get-offsets.earliest", &ran, |l| {
        l.starts_with(TOPIC).then(|| l.to_string())
    });
}

fn consumer_groups(t: &Target<'_>, m: &mut Matrix) {
    let b = t.bootstrap;
    let cg = java::tools::CONSUMER_GROUP_COMMAND;
    let ran = run_at(cg, b, &["--list"]);
    push(m, "consumer-groups.list", &ran, |l| {
        (l == GROUP).then(|| l.to_string())
    });
    let ran = run_at(cg, b, &["--describe", "--group", GROUP]);
    m.push(("consumer-groups.describe".into(), group_lag(&ran)));
    let ran = run_at(
        cg,
        b,
        &[
            "--reset-offsets",
            "--group",
            GROUP,
            "--topic",
            TOPIC,
            "--to-earliest",
            "--execute",
        ],
    );
    push(m, "consumer-groups.reset-offsets", &ran, |l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&GROUP)).then(|| format!("{} {} {}", f[1], f[2], f[3]))
    });
    let ran = run_at(cg, b, &["--describe", "--group", GROUP]);
    m.push((
        "consumer-groups.describe-after-reset".into(),
        group_lag(&ran),
    ));
    let ran = run_at(
        cg,
        b,
        &[
            "--delete-offsets",
            "--group",
            GROUP,
            "--topic",
            &format!("{TOPIC}:1"),
        ],
    );
    push(m, "consumer-groups.delete-offsets", &ran, |l| {
        l.starts_with(TOPIC)
            .then(|| l.split_whitespace().collect::<Vec<_>>().join(" "))
    });
    let ran = run_at("org.apache.kafka.tools.GroupsCommand", b, &["--list"]);
    push(m, "groups.list", &ran, |l| {
        l.starts_with(GROUP)
            .then(|| l.split_whitespace().collect::<Vec<_>>().join(" "))
    });
    let ran = run_at(cg, b, &["--delete", "--group", GROUP]);
    push(m, "consumer-groups.delete", &ran, |l| {
        l.contains("successful").then(|| l.to_string())
    });
    let ran = run_at(cg, b, &["--list"]);
    push(m, "consumer-groups.list-after-delete", &ran, |l| {
        (l == GROUP).then(|| l.to_string())
    });
}

/// Per partition (CURRENT-OFFSET, LOG-END-OFFSET, LAG) of a group describe, summed, plus the
/// partition count: what an operator reads from it.
fn group_lag(ran: &proc::Ran) -> String {
    // The per-partition rows, shown with a failure (a partition missing from the sum once
    // failed CI and the summary alone could not tell which one).
    eprintln!("kafka-consumer-groups --describe:\n{}", ran.stdout);
    let mut parts = 0;
    let (mut cur, mut end, mut lag) = (0i64, 0i64, 0i64);
    for l in ran.stdout.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 6 && f[0] == GROUP && f[1] == TOPIC {
            parts += 1;
            cur += f[3].parse::<i64>().unwrap_or(0);
            end += f[4].parse::<i64>().unwrap_or(0);
            lag += f[5].parse::<i64>().unwrap_or(0);
        }
    }
    format!(
        "exit {}: partitions={parts} current={cur} end={end} lag={lag}",
        ran.status.code().unwrap_or(-1)
    )
}

/// kafka-transactions after one committed librdkafka transaction.
fn transactions(t: &Target<'_>, m: &mut Matrix) {
    let b = t.bootstrap;
    let mut py = python::script("txn_producer.py");
    py.args([b, TOPIC, "4", "20"]);
    let ran = proc::run(&mut py, Duration::from_secs(120));
    assert!(
        ran.stdout.contains("COMMITTED"),
        "transactional producer: {}\n{}",
        ran.stdout,
        ran.stderr
    );
    let txn_id = format!("py-txn-{TOPIC}");
    let tx = "org.apache.kafka.tools.TransactionsCommand";
    let ran = run_at(tx, b, &["list"]);
    push(m, "transactions.list", &ran, |l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&txn_id.as_str())).then(|| format!("{} {}", f[0], f[3]))
    });
    let ran = run_at(tx, b, &["describe", "--transactional-id", &txn_id]);
    push(m, "transactions.describe", &ran, |l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState ...
        (f.get(1) == Some(&txn_id.as_str())).then(|| format!("{} {}", f[1], f[4]))
    });
    let ran = run_at(
        tx,
        b,
        &["describe-producers", "--topic", TOPIC, "--partition", "0"],
    );
    push(m, "transactions.describe-producers", &ran, |l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
        // CurrentTransactionOffset CurrentTransactionStartTimestamp
        (f.len() >= 5 && f[0].parse::<i64>().is_ok()).then(|| "a producer".to_string())
    });
}

fn cluster_tools(t: &Target<'_>, m: &mut Matrix) {
    let b = t.bootstrap;
    let ran = run_at(
        "org.apache.kafka.tools.LogDirsCommand",
        b,
        &["--describe", "--topic-list", TOPIC],
    );
    let parts = ran
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with('{'))
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            let mut names: Vec<String> = v["brokers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|b| b["logDirs"].as_array().cloned().unwrap_or_default())
                .flat_map(|d| d["partitions"].as_array().cloned().unwrap_or_default())
                .filter_map(|p| p["partition"].as_str().map(str::to_owned))
                .collect();
            names.sort();
            names.join(",")
        })
        .unwrap_or_default();
    m.push((
        "log-dirs.describe".into(),
        if ran.status.success() {
            format!("exit 0: {parts}")
        } else {
            outcome(&ran, |_| None)
        },
    ));
    let ran = run_at("org.apache.kafka.tools.FeatureCommand", b, &["describe"]);
    push(m, "features.describe", &ran, |l| {
        // Only the features both sides must have; kmirror adds mirror.version.
        l.split_whitespace()
            .nth(1)
            .filter(|f| *f == "metadata.version" || *f == "kraft.version")
            .map(|f| f.to_string())
    });
    let ran = run_at(
        "org.apache.kafka.tools.LeaderElectionCommand",
        b,
        &[
            "--election-type",
            "preferred",
            "--topic",
            TOPIC,
            "--partition",
            "0",
        ],
    );
    push(m, "leader-election.preferred", &ran, |l| {
        l.contains(TOPIC).then(|| l.to_string())
    });
    let ran = run_at("org.apache.kafka.tools.BrokerApiVersionsCommand", b, &[]);
    push(m, "broker-api-versions", &ran, |l| {
        // Whether the APIs a 4.x client needs are listed as usable.
        [
            "Produce(0)",
            "Fetch(1)",
            "Metadata(3)",
            "DescribeTopicPartitions(75)",
        ]
        .iter()
        .find(|api| l.starts_with(**api))
        .map(|api| format!("{api} usable={}", l.contains("[usable")))
    });
    // kafka-acls against a broker without an authorizer.
    let ran = run_at("org.apache.kafka.tools.AclCommand", b, &["--list"]);
    push(m, "acls.list-no-authorizer", &ran, |_| None);
}

fn json_events(stdout: &str, name: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["name"].as_str() == Some(name))
        .collect()
}

fn push(m: &mut Matrix, row: &str, ran: &proc::Ran, keep: impl Fn(&str) -> Option<String>) {
    let o = outcome(ran, keep);
    if !ran.status.success() {
        eprintln!(
            "{row}: exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            ran.status.code(),
            proc::last_lines(&ran.stdout, 10),
            proc::last_lines(&ran.stderr, 10)
        );
    }
    m.push((row.to_string(), o));
}

fn matrix(t: &Target<'_>) -> Matrix {
    let mut m = Matrix::new();
    topics(t, &mut m);
    configs(t, &mut m);
    produce_consume(t, &mut m);
    transactions(t, &mut m);
    cluster_tools(t, &mut m);
    m
}

#[test]
fn kafka_cli_tools_see_kmirror_as_they_see_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let want = {
        let kafka = KafkaCluster::single();
        matrix(&Target {
            bootstrap: &kafka.bootstrap(),
            rate_key: "leader.replication.throttled.rate",
        })
    };
    let node = KmirrorNode::start();
    let got = matrix(&Target {
        bootstrap: &node.addr(),
        rate_key: "mirror.replication.throttled.rate",
    });
    let want: BTreeMap<_, _> = want.into_iter().collect();
    let gaps: BTreeMap<_, _> = GAPS.iter().copied().collect();
    let mut table =
        String::from("| row | Apache Kafka 4.1.1 | kmirror | result |\n|---|---|---|---|\n");
    let mut wrong = Vec::new();
    for (row, outcome) in &got {
        let expected = want.get(row).cloned().unwrap_or_default();
        let same = &expected == outcome;
        let result = match (same, gaps.get(row.as_str())) {
            (true, None) => "pass".to_string(),
            (false, Some(why)) => format!("gap: {why}"),
            (true, Some(_)) => {
                wrong.push(format!("{row}: gap closed, remove it from GAPS"));
                "pass (listed as gap)".to_string()
            }
            (false, None) => {
                wrong.push(format!("{row}: kafka `{expected}` kmirror `{outcome}`"));
                "FAIL".to_string()
            }
        };
        table.push_str(&format!(
            "| {row} | {} | {} | {result} |\n",
            expected.replace('|', "/"),
            outcome.replace('|', "/")
        ));
    }
    println!("{table}");
    let logs = deps::target_dir().join("test-logs");
    let _ = std::fs::create_dir_all(&logs);
    let _ = std::fs::write(logs.join("cli-matrix.md"), &table);
    assert!(
        wrong.is_empty(),
        "rows differing from Kafka:\n{}",
        wrong.join("\n")
    );
}
