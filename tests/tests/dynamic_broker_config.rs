//! Issue 10, step 4: the broker-wide mirror ceiling `mirror.replication.throttled.rate` is a
//! dynamic broker config, and behaves as Kafka's own dynamic broker configs do for clients
//! other than Kafka's `kafka-configs` (which `mirror_throttle` drives): librdkafka's and
//! franz-go's IncrementalAlterConfigs and DescribeConfigs, per broker and at the cluster-wide
//! default, validate-only, a refused value, deletes. The expectation is Apache Kafka 4.1.1's
//! answers to the same steps for its dynamic `leader.replication.throttled.rate`. The same
//! walks of Kafka's own dynamic key `log.retention.ms` must give Kafka's answers on both.
//! And (issue 23) a broker-level log config is the default of topics without their own value.

use std::time::Duration;

use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::{golang, java, proc, python, KafkaCluster, KmirrorNode};

/// (step, error name, value, source) per step, as a client printed them.
type Steps = Vec<(String, Option<String>, Option<String>, Option<String>)>;

fn parse(out: &str) -> Steps {
    out.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            let s = |k: &str| v[k].as_str().map(str::to_owned);
            (
                s("step").expect("step"),
                s("error"),
                s("value"),
                s("source"),
            )
        })
        .collect()
}

/// Runs one client's walk through the steps; panics with its output if it failed.
fn run_steps(mut cmd: std::process::Command, what: &str) -> Steps {
    let ran = proc::run(&mut cmd, Duration::from_secs(180));
    assert!(
        ran.status.success(),
        "{what}: {}\n{}",
        ran.stdout,
        ran.stderr
    );
    parse(&ran.stdout)
}

fn librdkafka(bootstrap: &str, broker: &str, key: &str) -> Steps {
    let mut c = python::script("broker_config.py");
    c.args([bootstrap, broker, key, "3000000", "2000000"]);
    run_steps(c, "broker_config.py")
}

fn franz(bootstrap: &str, broker: &str, key: &str) -> Steps {
    let mut c = golang::franz("brokercfg", bootstrap, "-");
    c.args([
        "-broker", broker, "-config", key, "-v1", "3000000", "-v2", "2000000",
    ]);
    run_steps(c, "franz brokercfg")
}

/// Once no dynamic value is left, Kafka sometimes leaves the config out of DescribeConfigs
/// and sometimes lists it with its built-in default (seen both ways after deleting the
/// cluster default); kmirror leaves it out, or shows its static `mirror_byte_rate` when one
/// is set. All of these mean "not dynamic", which is what the test compares.
fn normalize_static(mut steps: Steps) -> Steps {
    for s in &mut steps {
        let unset = s.2.is_none() && s.3.is_none();
        if unset
            || matches!(
                s.3.as_deref(),
                Some("STATIC_BROKER_CONFIG" | "DEFAULT_CONFIG")
            )
        {
            s.2 = Some("<static>".into());
            s.3 = Some("<static>".into());
        }
    }
    steps
}

#[test]
fn librdkafka_and_franz_go_walk_the_mirror_ceiling_and_a_kafka_key_through_its_levels_like_kafka() {
    let kafka = KafkaCluster::single();
    // A dynamic key of Kafka's own, the same on both brokers: stored in kmirror's
    // replicated metadata and described with its level.
    let generic = "log.retention.ms";
    let kafka_generic = (
        normalize_static(librdkafka(&kafka.bootstrap(), "1", generic)),
        normalize_static(franz(&kafka.bootstrap(), "1", generic)),
    );
    let want_rd = normalize_static(librdkafka(
        &kafka.bootstrap(),
        "1",
        "leader.replication.throttled.rate",
    ));
    let want_go = normalize_static(franz(
        &kafka.bootstrap(),
        "1",
        "leader.replication.throttled.rate",
    ));
    eprintln!("Apache Kafka, librdkafka: {want_rd:?}\nApache Kafka, franz-go: {want_go:?}");

    let node = KmirrorNode::start();
    let got_rd = normalize_static(librdkafka(
        &node.addr(),
        "1",
        "mirror.replication.throttled.rate",
    ));
    let got_go = normalize_static(franz(
        &node.addr(),
        "1",
        "mirror.replication.throttled.rate",
    ));
    eprintln!("kmirror, librdkafka: {got_rd:?}\nkmirror, franz-go: {got_go:?}");

    assert_eq!(want_rd.len(), 4, "every librdkafka step reported on Kafka");
    assert_eq!(want_go.len(), 6, "every franz-go step reported on Kafka");
    assert_eq!(got_rd, want_rd, "librdkafka: kmirror differs from Kafka");
    assert_eq!(got_go, want_go, "franz-go: kmirror differs from Kafka");

    let kmirror_generic = (
        normalize_static(librdkafka(&node.addr(), "1", generic)),
        normalize_static(franz(&node.addr(), "1", generic)),
    );
    eprintln!("{generic}: Apache Kafka {kafka_generic:?}\nkmirror {kmirror_generic:?}");
    assert_eq!(kafka_generic.0.len(), 4);
    assert_eq!(kafka_generic.1.len(), 6);
    assert_eq!(
        kmirror_generic, kafka_generic,
        "{generic}: kmirror differs from Kafka"
    );
}

const CONFIGS: &str = "kafka.admin.ConfigCommand";

/// `kafka-configs` (Java AdminClient) with `args` after the bootstrap server.
fn kafka_configs(boot: &str, args: &[&str]) -> String {
    let mut all = vec!["--bootstrap-server", boot];
    all.extend_from_slice(args);
    java::run_tool(CONFIGS, &all, Duration::from_secs(90)).stdout
}

/// The topic config `key` as the two clients describe it: librdkafka's value and source, and
/// `kafka-configs --describe --all`'s value with the source of its first synonym (the level
/// the value comes from).
fn described(boot: &str, topic: &str, key: &str) -> String {
    let ran = proc::run_ok(
        python::script("topic_config.py").args([boot, topic, key]),
        Duration::from_secs(60),
    );
    let line = ran
        .stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or("{}");
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
    let rdk = format!(
        "{}/{}",
        v["value"].as_str().unwrap_or("null"),
        v["source"].as_str().unwrap_or("null")
    );
    let out = kafka_configs(
        boot,
        &[
            "--describe",
            "--all",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
        ],
    );
    let prefix = format!("{key}=");
    let java = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&prefix))
        .map(|l| {
            let value = l[prefix.len()..].split_whitespace().next().unwrap_or("");
            let source = l
                .split_once("synonyms={")
                .and_then(|(_, rest)| rest.split(':').next())
                .filter(|s| !s.is_empty() && !s.starts_with('}'))
                .unwrap_or("none");
            format!("{value}/{source}")
        })
        .unwrap_or_else(|| format!("missing:\n{out}"));
    format!("{topic} {key}: librdkafka {rdk}, java {java}")
}

/// The earliest offset of `topic`'s partition 0 (`kafka-get-offsets --time -2`).
fn earliest(boot: &str, topic: &str) -> i64 {
    let ran = java::run_tool(
        "org.apache.kafka.tools.GetOffsetShell",
        &["--bootstrap-server", boot, "--topic", topic, "--time", "-2"],
        Duration::from_secs(60),
    );
    ran.stdout
        .lines()
        .find(|l| l.starts_with(&format!("{topic}:0:")))
        .and_then(|l| l.rsplit(':').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no offset for {topic}:0 in {:?}", ran.stdout))
}

/// Issue 23: a dynamic broker-level log config is the default of every topic without its own
/// value, as Kafka's `DynamicLogConfig` makes it: `log.retention.bytes` at the cluster-wide
/// default and then per broker, set with `kafka-configs`, described by librdkafka and the
/// Java AdminClient with its level as the source, and applied (the retention check deletes
/// old segments of the topic without its own value, not of the one with its own). Returns
/// the observations, to compare with Kafka's.
fn broker_log_defaults(boot: &str, node: &str) -> Vec<String> {
    let mut seen = Vec::new();
    for (topic, extra) in [("bl-plain", None), ("bl-own", Some("retention.bytes=-1"))] {
        let mut args = vec![
            "--bootstrap-server",
            boot,
            "--create",
            "--topic",
            topic,
            "--partitions",
            "1",
            "--replication-factor",
            "1",
            "--config",
            "segment.bytes=1048576",
        ];
        if let Some(e) = extra {
            args.extend(["--config", e]);
        }
        java::run_tool(java::tools::TOPIC_COMMAND, &args, Duration::from_secs(60));
        // 4 MiB in 1 MiB segments.
        let perf = java::producer_performance_args(boot, topic, 4096, 1024, &["acks=all"]);
        let perf: Vec<&str> = perf.iter().map(String::as_str).collect();
        java::run_tool(
            java::tools::PRODUCER_PERFORMANCE,
            &perf,
            Duration::from_secs(120),
        );
    }
    seen.push(described(boot, "bl-plain", "retention.bytes"));
    kafka_configs(
        boot,
        &[
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            "--add-config",
            "log.retention.bytes=1048576",
        ],
    );
    std::thread::sleep(Duration::from_secs(2));
    seen.push(described(boot, "bl-plain", "retention.bytes"));
    seen.push(described(boot, "bl-own", "retention.bytes"));
    // The retention check (every second on both brokers here) trims the topic without its
    // own value to about the retention; the other keeps every segment.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let trimmed = loop {
        let e = earliest(boot, "bl-plain");
        if e > 0 || std::time::Instant::now() > deadline {
            break e > 0;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    seen.push(format!(
        "bl-plain trimmed by the cluster default: {trimmed}"
    ));
    seen.push(format!(
        "bl-own earliest offset: {}",
        earliest(boot, "bl-own")
    ));
    kafka_configs(
        boot,
        &[
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            node,
            "--add-config",
            "log.retention.bytes=2097152",
        ],
    );
    std::thread::sleep(Duration::from_secs(2));
    seen.push(described(boot, "bl-plain", "retention.bytes"));
    for entity in [vec!["--entity-name", node], vec!["--entity-default"]] {
        let mut args = vec!["--alter", "--entity-type", "brokers"];
        args.extend(entity);
        args.extend(["--delete-config", "log.retention.bytes"]);
        kafka_configs(boot, &args);
    }
    std::thread::sleep(Duration::from_secs(2));
    seen.push(described(boot, "bl-plain", "retention.bytes"));
    seen
}

#[test]
fn a_broker_level_log_config_is_the_default_of_topics_without_their_own_as_on_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let want = {
        let kafka = KafkaCluster::start_with(KafkaOptions {
            props: vec![("log.retention.check.interval.ms".into(), "1000".into())],
            ..Default::default()
        });
        broker_log_defaults(&kafka.bootstrap(), "1")
    };
    eprintln!("Apache Kafka: {want:#?}");
    let node = KmirrorNode::builder()
        .args(&["--retention-check-secs", "1"])
        .start();
    let got = broker_log_defaults(&node.addr(), "1");
    eprintln!("kmirror: {got:#?}");
    assert!(
        want.iter()
            .any(|l| l.ends_with("trimmed by the cluster default: true")),
        "the scenario does not hold on Kafka: {want:#?}"
    );
    assert_eq!(got, want, "kmirror differs from Kafka");
}
