//! Issue 10, step 4: the broker-wide mirror ceiling `mirror.replication.throttled.rate` is a
//! dynamic broker config, and behaves as Kafka's own dynamic broker configs do for clients
//! other than Kafka's `kafka-configs` (which `mirror_throttle` drives): librdkafka's and
//! franz-go's IncrementalAlterConfigs and DescribeConfigs, per broker and at the cluster-wide
//! default, validate-only, a refused value, deletes. The expectation is Apache Kafka 4.1.1's
//! answers to the same steps for its dynamic `leader.replication.throttled.rate`. The same
//! walks of Kafka's own dynamic key `log.retention.ms` must give Kafka's answers on both.

use std::time::Duration;

use kmirror_tests::{golang, proc, python, KafkaCluster, KmirrorNode};

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
