//! Mirrors reaching a secured Apache Kafka 4.1.1 source (issue 9, items 5 and 6): SASL_SSL with
//! SCRAM-SHA-512 and the StandardAuthorizer, mutual TLS, SASL_PLAINTEXT with PLAIN, SCRAM
//! credential rotation through `mirror alter`, a wrong password, and secrets kept out of
//! `describe` and world-readable files.
//!
//! The source's PLAINTEXT listener (User:ANONYMOUS, a super user) feeds the producers and the
//! log-equal oracle; the mirror only ever gets the SECURE listener and its own principal.

use std::time::Duration;

use kmirror_tests::kafka::{AclResource, KafkaOptions, KafkaSecurity, KafkaTls, SaslUser};
use kmirror_tests::mirror::{self, PartitionRow};
use kmirror_tests::pki::TestPki;
use kmirror_tests::records;
use kmirror_tests::{KafkaCluster, KmirrorNode, WireClient};

const CATCH_UP: Duration = Duration::from_secs(90);
const SCRAM_JAAS: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// `n` single-record batches on every partition of `topic`, through the PLAINTEXT listener.
fn produce(src: &KafkaCluster, topic: &str, partitions: i32, n: usize, tag: &str) {
    for p in 0..partitions {
        let mut c = WireClient::connect_leader(&src.bootstrap(), topic, p).expect("leader");
        for i in 0..n {
            let v = format!("{tag}-{p}-{i}");
            let (code, _) = c
                .produce_raw(
                    topic,
                    p,
                    records::batch(&[v.as_bytes()], 1_700_000_000_000),
                    -1,
                )
                .expect("produce");
            assert_eq!(code, 0, "produce to the source");
        }
    }
}

/// The grants seed 000 lists for a mirror principal on the source, for `topics`.
fn grant_mirror_acls(src: &KafkaCluster, principal: &str, topics: &[&str]) {
    for t in topics {
        let r = AclResource::Topic((*t).into());
        for op in ["Read", "Describe", "DescribeConfigs"] {
            src.add_acl(principal, op, &r);
        }
    }
    src.add_acl(principal, "Describe", &AclResource::Group("*".into()));
    src.add_acl(principal, "Describe", &AclResource::Cluster);
}

fn rows_of<'a>(rows: &'a [PartitionRow], topic: &str) -> Vec<&'a PartitionRow> {
    rows.iter().filter(|r| r.topic == topic).collect()
}

/// Waits until every partition of `topic` in `describe NAME` satisfies `ok`.
fn wait_rows(
    dst: &str,
    name: &str,
    topic: &str,
    what: &str,
    ok: impl Fn(&PartitionRow) -> bool,
) -> Vec<PartitionRow> {
    kmirror_tests::proc::wait_for(Duration::from_secs(90), what, || {
        let rows = mirror::describe(dst, Some(name));
        let mine: Vec<PartitionRow> = rows_of(&rows, topic).into_iter().cloned().collect();
        (!mine.is_empty() && mine.iter().all(&ok)).then_some(mine)
    })
}

fn secured_source(pki: &TestPki, security: impl FnOnce(KafkaTls) -> KafkaSecurity) -> KafkaCluster {
    let tls = KafkaTls {
        server: pki.server("kafka"),
        ca_pem: pki.ca_pem.clone(),
        client_auth_required: false,
    };
    KafkaCluster::start_with(KafkaOptions {
        security: Some(security(tls)),
        ..KafkaOptions::default()
    })
}

/// The harness itself: a SASL_SSL + SCRAM-SHA-512 Kafka with the authorizer starts, the Java
/// admin tools authenticate on the SECURE listener, ACLs and SCRAM credentials change at run
/// time.
#[test]
fn given_sasl_ssl_scram_kafka_when_java_admin_connects_should_authenticate_and_manage_acls() {
    let _g = kmirror_tests::heavy_test_lock();
    let pki = TestPki::new();
    let src = secured_source(&pki, |tls| {
        KafkaSecurity::sasl_ssl_scram(tls, vec![SaslUser::new("mirror", "mirror-secret")])
    });
    src.create_topic("orders", 2, &[]);
    let topics = src.admin_tool("org.apache.kafka.tools.TopicCommand", &["--list"]);
    assert!(topics.stdout.contains("orders"), "{}", topics.stdout);
    src.add_acl("User:mirror", "Read", &AclResource::Topic("orders".into()));
    let acls = src.list_acls("User:mirror");
    assert!(acls.contains("operation=READ"), "{acls}");
    src.remove_acl("User:mirror", "Read", &AclResource::Topic("orders".into()));
    let acls = src.list_acls("User:mirror");
    assert!(!acls.contains("operation=READ"), "{acls}");
    src.set_scram_password("SCRAM-SHA-512", "mirror", "rotated");
    // A wrong password is refused: the listener really authenticates.
    let sec = src.security_settings();
    let bad = sec.client_properties(
        Some(("SCRAM-SHA-512", &SaslUser::new("admin", "wrong"))),
        None,
    );
    let f = src.dir().join("bad.properties");
    std::fs::write(&f, bad).unwrap();
    let boot = src.secure_bootstrap();
    let ran = kmirror_tests::proc::run(
        kmirror_tests::kafka::java_cmd("256m", "org.apache.kafka.tools.TopicCommand")
            .args(["--bootstrap-server", &boot, "--command-config"])
            .arg(&f)
            .arg("--list"),
        Duration::from_secs(120),
    );
    assert!(
        !ran.status.success(),
        "a wrong password must fail: {}",
        ran.stdout
    );
}

/// 5(a): SASL_SSL + SCRAM-SHA-512 with the StandardAuthorizer; the mirror principal holds
/// exactly the seed's grants. The mirror is log-equal; taking Read on one topic away fails that
/// topic's partitions with the authorization reason (not STOPPED, not failed over, the other
/// topic keeps mirroring); giving it back resumes and the logs are equal again.
#[test]
fn given_sasl_ssl_scram_source_with_acls_when_read_is_revoked_should_fail_then_resume_log_equal() {
    let _g = kmirror_tests::heavy_test_lock();
    let pki = TestPki::new();
    let src = secured_source(&pki, |tls| {
        KafkaSecurity::sasl_ssl_scram(tls, vec![SaslUser::new("mirror", "mirror-secret")])
    });
    src.create_topic("orders", 2, &[]);
    src.create_topic("payments", 1, &[]);
    grant_mirror_acls(&src, "User:mirror", &["orders", "payments"]);
    produce(&src, "orders", 2, 20, "a");
    produce(&src, "payments", 1, 20, "a");

    let dst = KmirrorNode::start();
    let d = dst.addr();
    let ca = pki.ca_pem.display().to_string();
    let jaas = format!("{SCRAM_JAAS} required username=\"mirror\" password=\"mirror-secret\";");
    mirror::create(
        &d,
        "dr",
        &src.secure_bootstrap(),
        &[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.jaas.config", &jaas),
            ("ssl.truststore.location", &ca),
            ("mirror.retry.backoff.max.ms", "1000"),
        ],
    );
    mirror::add_topics(&d, "dr", &["orders", "payments"]);
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    mirror::assert_mirrored(&src.bootstrap(), &d, "payments", 1, CATCH_UP);
    mirror::wait_mirroring_at_lag_zero(&d, "dr", 3, CATCH_UP);

    src.remove_acl(
        "User:mirror",
        "Read",
        &AclResource::Topic("payments".into()),
    );
    // The revocation reaches the broker's authorizer asynchronously: keep producing until
    // the fetcher is refused.
    let failed = wait_rows(
        &d,
        "dr",
        "payments",
        "payments FAILED (authorization)",
        |r| {
            produce(&src, "payments", 1, 1, "r");
            r.state == "FAILED" && r.reason().contains("AUTHORIZATION_FAILED")
        },
    );
    let at_failure = mirror::end_offsets(&d, "payments", 1);
    produce(&src, "payments", 1, 5, "b");
    produce(&src, "orders", 2, 5, "b");
    assert!(
        failed[0].reason().contains("TOPIC_AUTHORIZATION_FAILED"),
        "{:?}",
        failed[0].raw
    );
    // The other topic keeps mirroring; nothing of payments' new records arrived.
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    let orders = mirror::describe(&d, Some("dr"));
    assert!(
        rows_of(&orders, "orders")
            .iter()
            .all(|r| r.state == "MIRRORING"),
        "{orders:?}"
    );
    let dst_end = mirror::end_offsets(&d, "payments", 1);
    assert_eq!(dst_end, at_failure, "nothing fetched while Read is revoked");
    let src_end = mirror::end_offsets(&src.bootstrap(), "payments", 1);
    assert!(
        src_end[0] >= at_failure[0] + 5,
        "{src_end:?} vs {at_failure:?}"
    );

    src.add_acl(
        "User:mirror",
        "Read",
        &AclResource::Topic("payments".into()),
    );
    wait_rows(&d, "dr", "payments", "payments MIRRORING again", |r| {
        r.state == "MIRRORING"
    });
    mirror::assert_mirrored(&src.bootstrap(), &d, "payments", 1, CATCH_UP);
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    mirror::wait_mirroring_at_lag_zero(&d, "dr", 3, CATCH_UP);
}
