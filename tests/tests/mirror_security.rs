//! Mirrors reaching a secured Apache Kafka 4.1.1 source (issue 9, items 5 and 6): SASL_SSL with
//! SCRAM-SHA-512 and the StandardAuthorizer, mutual TLS, SASL_PLAINTEXT with PLAIN, SCRAM
//! credential rotation through `mirror alter`, a wrong password, and secrets kept out of
//! `describe` and world-readable files.
//!
//! The source's PLAINTEXT listener (User:ANONYMOUS, a super user) feeds the producers and the
//! log-equal oracle; the mirror only ever gets the SECURE listener and its own principal.

use std::time::Duration;

use kmirror_tests::kafka::{AclResource, KafkaOptions, KafkaSecurity, KafkaTls, SaslUser};
use kmirror_tests::pki::TestPki;
use kmirror_tests::KafkaCluster;

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
