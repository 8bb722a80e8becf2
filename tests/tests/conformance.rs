//! Issue 8, hole 8: the protocol conformance matrix. Every API key and version kmirror
//! advertises gets a minimal, meaningful request built with kafka-protocol at that version; the
//! response must decode at that version, whole, with the right correlation id and the error
//! codes and values a client expects. The same matrix runs on Apache Kafka 4.1.1 to validate
//! the expectations; differences in advertised versions are printed, not failures.

use kmirror_tests::conformance::{self, Matrix};
use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::{KafkaCluster, KmirrorNode};

fn report(who: &str, m: &Matrix) {
    let ok = m.cells.iter().filter(|c| c.result.is_ok()).count();
    println!(
        "{who}: {ok}/{} api/version cells pass over {} APIs",
        m.cells.len(),
        m.cells
            .iter()
            .map(|c| c.key)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    for f in m.failures() {
        println!("{who} FAIL {f}");
    }
}

#[test]
fn every_advertised_api_version_answers_decodably_on_kmirror() {
    let _heavy = kmirror_tests::heavy_test_lock();
    // An authorizer so the ACL APIs answer, as on Kafka below; ANONYMOUS is a super user.
    let node = KmirrorNode::builder()
        .args(&["--authorizer", "true", "--super-users", "User:ANONYMOUS"])
        .start();
    let m = conformance::run(&node.addr());
    report("kmirror", &m);
    // Every standard API kmirror advertises has a builder, and every advertised version of it
    // can be built by kafka-protocol (kmirror must never advertise what it cannot parse).
    let known: Vec<i16> = conformance::KEYS.iter().map(|k| *k as i16).collect();
    let unknown: Vec<i16> = m
        .advertised
        .keys()
        .copied()
        .filter(|k| !known.contains(k) && !(94..=105).contains(k))
        .collect();
    assert!(
        unknown.is_empty(),
        "advertised APIs with no cell: {unknown:?}"
    );
    assert!(m.unbuildable.is_empty(), "unbuildable: {:?}", m.unbuildable);
    for k in conformance::KEYS {
        assert!(
            m.advertised.contains_key(&(*k as i16)),
            "{k:?} not advertised"
        );
    }
    // Produce v0-v2 are listed (and refused, checked by their cells) as Kafka 4 does, or
    // librdkafka < 2.8 silently stops compressing (KAFKA-18659).
    assert_eq!(
        m.advertised.get(&0).map(|r| r.0),
        Some(0),
        "Produce min version"
    );
    let failures = m.failures();
    assert!(
        failures.is_empty(),
        "{} cells failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(m.cells.len() >= 150, "only {} cells", m.cells.len());
}

#[test]
fn the_matrix_expectations_hold_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    // An authorizer so the ACL APIs answer (without one Kafka returns SECURITY_DISABLED);
    // ANONYMOUS is a super user, so nothing else is restricted.
    let kafka = KafkaCluster::start_with(KafkaOptions {
        props: vec![
            (
                "authorizer.class.name".into(),
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
            ),
            ("super.users".into(), "User:ANONYMOUS".into()),
        ],
        ..KafkaOptions::default()
    });
    let m = conformance::run(&kafka.bootstrap());
    report("kafka", &m);
    // Versions Kafka advertises but kafka-protocol cannot build are reported, not failures.
    for (k, v) in &m.unbuildable {
        println!(
            "kafka advertises {} v{v}, kafka-protocol cannot build it",
            conformance::name(*k)
        );
    }
    let node = KmirrorNode::start();
    let ours = conformance::run_api_versions(&node.addr());
    let mut same = 0;
    for k in conformance::KEYS {
        let k = *k as i16;
        let (a, b) = (m.advertised.get(&k), ours.get(&k));
        same += usize::from(a == b);
        if a != b {
            println!(
                "advertised {}: kafka {a:?}, kmirror {b:?}",
                conformance::name(k)
            );
        }
    }
    println!(
        "advertised ranges: {same} of {} APIs identical on kafka and kmirror",
        conformance::KEYS.len()
    );
    let failures = m.failures();
    assert!(
        failures.is_empty(),
        "{} cells failed on Kafka:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(m.cells.len() >= 150, "only {} cells", m.cells.len());
}
