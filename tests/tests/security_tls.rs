//! TLS listeners with real clients (issue 9): kmirror serving PLAINTEXT and SSL at once, the
//! Java client (kafka-clients 4.1.1) and librdkafka (confluent-kafka) producing and consuming
//! over SSL with the records identical at identical offsets on both listeners, a client
//! bootstrapping on SSL told the SSL port, mutual TLS refusing clients without a certificate
//! from the client CA, and plaintext bytes on the SSL port failing only that connection.
//!
//! The mutual-TLS scenario runs against Apache Kafka 4.1.1 too (PEM key and trust stores,
//! `ssl.client.auth=required`, the StandardAuthorizer with only `User:CN=alice,OU=eng,O=acme`
//! as a super user): Kafka authorizing alice proves the principal name kmirror logs for the
//! same certificate is Kafka's, and both brokers must hand back the same records.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kmirror_tests::helpers::port_of;
use kmirror_tests::kafka::{AdminAuth, KafkaOptions, KafkaSecurity, KafkaTls, SecureProtocol};
use kmirror_tests::pki::{Identity, TestPki};
use kmirror_tests::{java, proc, python, KafkaCluster, KmirrorNode, WireClient};

const RECORDS: u64 = 2000;
const PARTITIONS: i32 = 2;
const ALICE: &str = "User:CN=alice,OU=eng,O=acme";

/// A broker's two ways in.
struct Target {
    /// PLAINTEXT bootstrap (topic creation, the reference dump).
    plain: String,
    /// SSL bootstrap.
    ssl: String,
    /// `host:port`s the SSL listener advertises.
    ssl_ports: Vec<u16>,
}

/// Java client properties for SSL: trust the test CA, present `cert` if given.
fn java_ssl(ca: &Path, cert: Option<&Identity>) -> Vec<String> {
    let mut p = vec![
        "security.protocol=SSL".to_string(),
        "ssl.truststore.type=PEM".into(),
        format!("ssl.truststore.location={}", ca.display()),
    ];
    if let Some(id) = cert {
        p.push("ssl.keystore.type=PEM".into());
        p.push(format!("ssl.keystore.location={}", id.keystore.display()));
    }
    p
}

/// librdkafka configuration for SSL.
fn rdk_ssl(ca: &Path, cert: Option<&Identity>) -> Vec<String> {
    let mut p = vec![
        "security.protocol=SSL".to_string(),
        format!("ssl.ca.location={}", ca.display()),
    ];
    if let Some(id) = cert {
        p.push(format!("ssl.certificate.location={}", id.cert.display()));
        p.push(format!("ssl.key.location={}", id.key.display()));
    }
    p
}

fn create_topic(plain: &str, topic: &str) {
    let mut c = WireClient::connect(plain).expect("connect");
    assert_eq!(
        c.create_topic(topic, PARTITIONS, 1, &[])
            .expect("CreateTopics"),
        0
    );
}

/// `ACK`/`DONE` output of a SeqProducer twin: every record acknowledged, none failed.
fn assert_all_acked(who: &str, out: &str) {
    let done = out.lines().find(|l| l.starts_with("DONE ")).unwrap_or("");
    assert_eq!(done, format!("DONE {RECORDS} 0"), "{who}:\n{out}");
}

/// RecordDump's `R <p> <offset> <key> <value>` lines (headers dropped), sorted.
fn java_records(boot: &str, topic: &str, props: &[String]) -> Vec<String> {
    let ran = proc::run_ok(
        java::program("RecordDump")
            .args([boot, topic, "read_uncommitted", "records"])
            .args(props),
        Duration::from_secs(180),
    );
    assert!(ran.stdout.lines().any(|l| l == "END"), "{}", ran.stderr);
    sorted(
        ran.stdout
            .lines()
            .filter(|l| l.starts_with("R "))
            .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
            .collect(),
    )
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort_by_key(|l| {
        let mut c = l.split(' ').skip(1).map(|x| x.parse::<i64>().unwrap_or(-1));
        (c.next().unwrap_or(-1), c.next().unwrap_or(-1))
    });
    v
}

/// librdkafka reading `topic` in a group over SSL: (advertised broker ports, records).
fn rdk_records(boot: &str, topic: &str, props: &[String]) -> (Vec<u16>, Vec<String>) {
    let ran = proc::run_ok(
        python::script("record_dump.py")
            .args([boot, topic, &PARTITIONS.to_string()])
            .arg(format!("group.id=dump-{topic}"))
            .args(props),
        Duration::from_secs(180),
    );
    assert!(
        ran.stdout.lines().any(|l| l == "COMMITTED"),
        "the group's commit (coordinator from FindCoordinator, over SSL) failed:\n{}{}",
        ran.stdout,
        ran.stderr
    );
    let ports = ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("BROKER "))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    let recs = ran
        .stdout
        .lines()
        .filter(|l| l.starts_with("R "))
        .map(str::to_string)
        .collect();
    (ports, sorted(recs))
}

/// librdkafka's Metadata through `boot`: the advertised ports, or the error.
fn probe(boot: &str, props: &[String]) -> Result<Vec<u16>, String> {
    let ran = proc::run(
        python::script("metadata_probe.py")
            .args([boot, "8"])
            .args(props),
        Duration::from_secs(60),
    );
    if !ran.status.success() {
        return Err(format!("{}{}", ran.stdout, ran.stderr));
    }
    Ok(ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("BROKER "))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect())
}

/// Java and librdkafka produce over SSL (as `cert`, if any), then both topics are read over
/// PLAINTEXT (Java), SSL (Java) and SSL in a group (librdkafka): the same records at the same
/// offsets everywhere, and the SSL listener advertises the SSL port. Returns the records.
fn produce_and_consume_over_ssl(t: &Target, ca: &Path, cert: Option<&Identity>) -> Vec<String> {
    let (jp, rp) = (java_ssl(ca, cert), rdk_ssl(ca, cert));
    create_topic(&t.plain, "tls-java");
    create_topic(&t.plain, "tls-rdk");
    let ran = proc::run_ok(
        java::program("SeqProducer")
            .args([
                t.ssl.as_str(),
                "tls-java",
                &PARTITIONS.to_string(),
                &RECORDS.to_string(),
            ])
            .args(&jp),
        Duration::from_secs(180),
    );
    assert_all_acked("Java over SSL", &ran.stdout);
    let ran = proc::run_ok(
        python::script("seq_producer.py")
            .args([
                t.ssl.as_str(),
                "tls-rdk",
                &PARTITIONS.to_string(),
                &RECORDS.to_string(),
            ])
            .args(&rp),
        Duration::from_secs(180),
    );
    assert_all_acked("librdkafka over SSL", &ran.stdout);
    let mut all = Vec::new();
    for topic in ["tls-java", "tls-rdk"] {
        let plain = java_records(&t.plain, topic, &[]);
        assert_eq!(plain.len() as u64, RECORDS, "{topic} over PLAINTEXT");
        let ssl = java_records(&t.ssl, topic, &jp);
        assert_eq!(ssl, plain, "{topic}: Java over SSL reads other records");
        let (ports, rdk) = rdk_records(&t.ssl, topic, &rp);
        assert_eq!(
            rdk, plain,
            "{topic}: librdkafka over SSL reads other records"
        );
        assert_eq!(
            ports, t.ssl_ports,
            "Metadata over SSL must advertise the SSL listener"
        );
        all.extend(plain.into_iter().map(|l| format!("{topic} {l}")));
    }
    all
}

/// A PLAINTEXT client on the SSL port fails (and only that connection).
fn plaintext_on_ssl_port_fails(t: &Target, ok_props: &[String]) {
    let r = probe(&t.ssl, &[]);
    assert!(r.is_err(), "a PLAINTEXT client was served on the SSL port");
    assert_eq!(
        probe(&t.ssl, ok_props).expect("SSL still served"),
        t.ssl_ports
    );
    assert!(probe(&t.plain, &[]).is_ok(), "PLAINTEXT still served");
}

/// Mutual TLS: no certificate, or one from another CA, fails at the handshake.
fn untrusted_clients_are_refused(t: &Target, ca: &Path, other: &TestPki) {
    let stranger = other.client("stranger", &[("O", "acme"), ("OU", "eng"), ("CN", "alice")]);
    let e = probe(&t.ssl, &rdk_ssl(ca, None)).expect_err("a client without a certificate");
    assert!(e.contains("ERR"), "{e}");
    let e = probe(&t.ssl, &rdk_ssl(ca, Some(&stranger))).expect_err("another CA's certificate");
    assert!(e.contains("ERR"), "{e}");
    // Java too: its producer never gets metadata.
    let ran = proc::run(
        java::program("SeqProducer")
            .args([t.ssl.as_str(), "tls-java", "2", "1", "max.block.ms=8000"])
            .args(java_ssl(ca, Some(&stranger))),
        Duration::from_secs(60),
    );
    assert!(
        !ran.stdout.contains("DONE 1 0"),
        "Java with another CA's certificate produced:\n{}",
        ran.stdout
    );
}

fn kmirror_tls(pki: &TestPki, server: &Identity, mutual: bool) -> (KmirrorNode, Target) {
    let mut args = vec![
        "--tls-cert".to_string(),
        server.cert.display().to_string(),
        "--tls-key".into(),
        server.key.display().to_string(),
        "--log-level".into(),
        "info,kmirror_net::server=debug".into(),
    ];
    if mutual {
        args.push("--tls-client-ca".into());
        args.push(pki.ca_pem.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let node = KmirrorNode::builder()
        .listeners(&["PLAINTEXT", "SSL"])
        .args(&args)
        .start();
    let ssl = node.listener_addr("SSL");
    let t = Target {
        plain: node.listener_addr("PLAINTEXT"),
        ssl_ports: vec![port_of(&ssl)],
        ssl,
    };
    (node, t)
}

#[test]
fn given_plaintext_and_ssl_listeners_when_java_and_librdkafka_use_ssl_should_round_trip_the_same_records(
) {
    let _g = kmirror_tests::heavy_test_lock();
    let pki = TestPki::new();
    let server = pki.server("kmirror");
    let (mut node, t) = kmirror_tls(&pki, &server, false);
    assert_ne!(port_of(&t.plain), port_of(&t.ssl));
    // PLAINTEXT clients are told the PLAINTEXT port.
    assert_eq!(probe(&t.plain, &[]).unwrap(), vec![port_of(&t.plain)]);
    produce_and_consume_over_ssl(&t, &pki.ca_pem, None);
    plaintext_on_ssl_port_fails(&t, &rdk_ssl(&pki.ca_pem, None));
    let log = std::fs::read_to_string(node.log_path()).unwrap();
    assert!(
        log.contains("User:ANONYMOUS"),
        "an SSL client without a certificate is User:ANONYMOUS"
    );
    assert!(
        node.stop(),
        "kmirror with an SSL listener did not stop cleanly"
    );
}

/// Runs the mutual-TLS scenario and returns the records read back.
fn mutual_tls_scenario(t: &Target, pki: &TestPki, alice: &Identity) -> Vec<String> {
    let records = produce_and_consume_over_ssl(t, &pki.ca_pem, Some(alice));
    untrusted_clients_are_refused(t, &pki.ca_pem, &TestPki::named("other"));
    plaintext_on_ssl_port_fails(t, &rdk_ssl(&pki.ca_pem, Some(alice)));
    records
}

#[test]
fn given_mutual_tls_when_clients_connect_should_serve_ca_signed_certificates_only_and_match_apache_kafka(
) {
    let _g = kmirror_tests::heavy_test_lock();
    let pki = TestPki::new();
    // Encoded most general first, as CAs issue them; Kafka names it most specific first.
    let alice = pki.client("alice", &[("O", "acme"), ("OU", "eng"), ("CN", "alice")]);

    let (node, t) = kmirror_tls(&pki, &pki.server("kmirror"), true);
    let ours = mutual_tls_scenario(&t, &pki, &alice);
    let log = std::fs::read_to_string(node.log_path()).unwrap();
    assert!(
        log.contains(ALICE),
        "kmirror did not name alice's principal {ALICE}"
    );
    drop(node);

    // The same against Apache Kafka, where only alice (and the harness's admin) may act: if
    // Kafka named her certificate differently, her produce would be refused.
    let admin = pki.client("admin", &[("CN", "admin")]);
    let kafka = KafkaCluster::start_with(KafkaOptions {
        security: Some(KafkaSecurity {
            protocol: SecureProtocol::Ssl,
            sasl_mechanisms: Vec::new(),
            users: Vec::new(),
            tls: Some(KafkaTls {
                server: pki.server("kafka"),
                ca_pem: pki.ca_pem.clone(),
                client_auth_required: true,
            }),
            authorizer: true,
            super_users: vec![ALICE.to_string()],
            admin: AdminAuth::Certificate {
                identity: admin,
                principal: "CN=admin".into(),
            },
        }),
        ..KafkaOptions::default()
    });
    let ssl = kafka.secure_bootstrap();
    let t = Target {
        plain: kafka.bootstrap(),
        ssl_ports: ssl.split(',').map(port_of).collect(),
        ssl,
    };
    let theirs = mutual_tls_scenario(&t, &pki, &alice);
    assert_eq!(
        ours, theirs,
        "kmirror and Kafka hold different records after the same mTLS scenario"
    );
    // A CA-signed client that is not a super user is authenticated but not authorized on
    // Kafka: the authorizer is really on, so alice's success above is her principal's.
    let bob = pki.client("bob", &[("O", "acme"), ("CN", "bob")]);
    let ran = proc::run(
        python::script("seq_producer.py")
            .args([
                t.ssl.as_str(),
                "tls-rdk",
                "2",
                "1",
                "message.timeout.ms=10000",
            ])
            .args(rdk_ssl(&pki.ca_pem, Some(&bob))),
        Duration::from_secs(60),
    );
    assert!(
        !ran.stdout.contains("DONE 1 0"),
        "bob was authorized on Kafka:\n{}",
        ran.stdout
    );
}

/// A listener that needs TLS without a certificate is a clear startup error.
#[test]
fn given_an_ssl_listener_without_certificate_when_serve_starts_should_exit_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ran = proc::run(
        Command::new(kmirror_tests::deps::kmirror_bin())
            .args([
                "serve",
                "--listeners",
                "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(dir.path()),
        Duration::from_secs(30),
    );
    assert!(!ran.status.success());
    assert!(
        ran.stderr.contains("tls_cert") && ran.stderr.contains("SSL"),
        "{}",
        ran.stderr
    );
}
