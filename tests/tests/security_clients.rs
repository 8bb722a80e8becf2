//! The client matrix over secured kmirror (issue 9): Java (kafka-clients 4.1.1), librdkafka
//! (confluent-kafka) and franz-go, each over SASL_SSL with SCRAM-SHA-512 and over mutual TLS
//! (principal `User:CN=carol`), with the authorizer on and ACLs granting each principal only
//! what it uses. Every client produces, reads the whole topic in its own group and commits,
//! and writes transactions: all read the same records at the same offsets, read_committed
//! hides aborted records; a topic or group without an ACL is refused with
//! TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED. `kafka-acls`, `kafka-configs
//! --entity-type users` and `kmirror mirror --command-config` work over SASL_SSL.
//!
//! One node serves the whole file: PLAINTEXT (User:ANONYMOUS, a super user, for the harness's
//! topic creation and offset checks), SASL_SSL and SSL with a client CA. The SASL_SSL clients
//! present no certificate: as in Kafka, the client CA makes only the SSL listener mutual.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kmirror_tests::golang::{self, FranzOut};
use kmirror_tests::java::tools::ACL_COMMAND;
use kmirror_tests::pki::{Identity, TestPki};
use kmirror_tests::proc::{self, LineChild};
use kmirror_tests::{deps, java, python, sasl, KmirrorNode, WireClient};

const ADMIN_PW: &str = "admin-secret";
const ALICE_PW: &str = "alice-secret";
const CONFIG_COMMAND: &str = "kafka.admin.ConfigCommand";
const CAROL: &str = "User:CN=carol";
/// Records each client produces.
const N: usize = 10;

/// How one client family authenticates over one transport.
struct Creds {
    java: Vec<String>,
    rdk: Vec<String>,
    franz: Vec<String>,
    boot: String,
}

fn jaas(user: &str, pw: &str) -> String {
    format!("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{pw}\";")
}

fn sasl_ssl(boot: &str, ca: &Path, user: &str, pw: &str) -> Creds {
    Creds {
        java: vec![
            "security.protocol=SASL_SSL".into(),
            "sasl.mechanism=SCRAM-SHA-512".into(),
            jaas(user, pw),
            "ssl.truststore.type=PEM".into(),
            format!("ssl.truststore.location={}", ca.display()),
        ],
        rdk: vec![
            "security.protocol=SASL_SSL".into(),
            "sasl.mechanisms=SCRAM-SHA-512".into(),
            format!("sasl.username={user}"),
            format!("sasl.password={pw}"),
            format!("ssl.ca.location={}", ca.display()),
        ],
        franz: vec![
            "-ca".into(),
            ca.display().to_string(),
            "-user".into(),
            user.into(),
            "-password".into(),
            pw.into(),
        ],
        boot: boot.into(),
    }
}

fn mtls(boot: &str, ca: &Path, id: &Identity) -> Creds {
    Creds {
        java: vec![
            "security.protocol=SSL".into(),
            "ssl.truststore.type=PEM".into(),
            format!("ssl.truststore.location={}", ca.display()),
            "ssl.keystore.type=PEM".into(),
            format!("ssl.keystore.location={}", id.keystore.display()),
        ],
        rdk: vec![
            "security.protocol=SSL".into(),
            format!("ssl.ca.location={}", ca.display()),
            format!("ssl.certificate.location={}", id.cert.display()),
            format!("ssl.key.location={}", id.key.display()),
        ],
        franz: vec![
            "-ca".into(),
            ca.display().to_string(),
            "-cert".into(),
            id.cert.display().to_string(),
            "-key".into(),
            id.key.display().to_string(),
        ],
        boot: boot.into(),
    }
}

fn franz(c: &Creds, mode: &str, topic: &str, extra: &[&str]) -> FranzOut {
    golang::run(
        golang::franz(mode, &c.boot, topic)
            .args(&c.franz)
            .args(extra),
    )
}

/// SeqFormat's value "0:<seq>:" padded with '.' to 100 bytes.
fn seq_value(seq: &str) -> String {
    format!("{:.<100}", format!("0:{seq}:"))
}

/// `ACK 0 <seq> <offset>` lines of SeqProducer / seq_producer.py as offset → value.
fn seq_acks(who: &str, out: &str) -> BTreeMap<i64, String> {
    assert!(out.contains(&format!("DONE {N} 0")), "{who}:\n{out}");
    out.lines()
        .filter_map(|l| l.strip_prefix("ACK 0 "))
        .map(|l| {
            let (seq, off) = l.split_once(' ').unwrap();
            (off.parse().unwrap(), seq_value(seq))
        })
        .collect()
}

/// The group's committed offset of partition 0 (OffsetFetch over PLAINTEXT).
fn committed(plain: &str, group: &str, topic: &str) -> i64 {
    let mut c = WireClient::connect(plain).unwrap();
    let r: OffsetFetchResponse = c
        .send_at(
            OffsetFetchRequest::default()
                .with_group_id(StrBytes::from_string(group.to_string()).into())
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(StrBytes::from_string(topic.to_string()).into())
                    .with_partition_indexes(vec![0])])),
            5,
        )
        .expect("OffsetFetch");
    assert_eq!(r.error_code, 0);
    r.topics[0].partitions[0].committed_offset
}

/// Produce with all three clients, then read the whole topic in a group with each and commit:
/// the same records at the same offsets everywhere, and the groups' offsets at the end.
fn produce_and_consume(tr: &str, c: &Creds, plain: &str) {
    let topic = format!("sec-{tr}");
    let mut w = WireClient::connect(plain).unwrap();
    assert_eq!(w.create_topic(&topic, 1, 1, &[]).unwrap(), 0);
    let ran = proc::run_ok(
        java::program("SeqProducer")
            .args([c.boot.as_str(), &topic, "1", &N.to_string()])
            .args(&c.java),
        Duration::from_secs(120),
    );
    let mut expected = seq_acks("Java", &ran.stdout);
    let ran = proc::run_ok(
        python::script("seq_producer.py")
            .args([c.boot.as_str(), &topic, "1", &N.to_string()])
            .args(&c.rdk),
        Duration::from_secs(120),
    );
    expected.extend(seq_acks("librdkafka", &ran.stdout));
    let f = franz(c, "produce", &topic, &["-n", &N.to_string()]);
    assert!(f.error.is_none(), "franz produce over {tr}: {}", f.raw);
    expected.extend(f.acks);
    let total = 3 * N as i64;
    assert_eq!(
        expected.keys().copied().collect::<Vec<_>>(),
        (0..total).collect::<Vec<_>>(),
        "{tr}: every ack at its own offset"
    );

    // franz-go in a group.
    let group = format!("g-franz-{tr}");
    let f = franz(
        c,
        "consume",
        &topic,
        &["-n", &total.to_string(), "-group", &group],
    );
    assert!(f.error.is_none(), "franz consume over {tr}: {}", f.raw);
    let got: BTreeMap<i64, String> = f.records.into_iter().collect();
    assert_eq!(got, expected, "{tr}: franz-go read other records");
    assert_eq!(f.committed, vec![(0, total)]);
    assert_eq!(committed(plain, &group, &topic), total);

    // librdkafka in a group.
    let group = format!("g-rdk-{tr}");
    let ran = proc::run_ok(
        python::script("record_dump.py")
            .args([c.boot.as_str(), &topic, "1"])
            .arg(format!("group.id={group}"))
            .args(&c.rdk),
        Duration::from_secs(120),
    );
    assert!(
        ran.stdout.lines().any(|l| l == "COMMITTED"),
        "{}",
        ran.stdout
    );
    let got: BTreeMap<i64, String> = ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("R 0 "))
        .map(|l| {
            let mut it = l.split(' ');
            let off = it.next().unwrap().parse().unwrap();
            let _key = it.next();
            (off, it.next().unwrap().to_string())
        })
        .collect();
    assert_eq!(got, expected, "{tr}: librdkafka read other records");
    assert_eq!(committed(plain, &group, &topic), total);

    // Java in a group (GroupConsumer prints "<first>:<second>" of each value).
    let group = format!("g-java-{tr}");
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    let consumer = LineChild::spawn(
        java::program("GroupConsumer")
            .args([c.boot.as_str(), &group, &topic, stop.to_str().unwrap(), "0"])
            .args(&c.java),
    );
    proc::wait_for(
        Duration::from_secs(60),
        "the Java group consumer to read every record",
        || (consumer.count("R ") >= total as usize).then_some(()),
    );
    std::fs::write(&stop, "").unwrap();
    let (_, lines) = consumer.wait(Duration::from_secs(60));
    let got: Vec<String> = lines.into_iter().filter(|l| l.starts_with("R ")).collect();
    let want: Vec<String> = expected
        .iter()
        .map(|(o, v)| {
            let key: Vec<&str> = v.splitn(3, ':').take(2).collect();
            format!("R 0 {o} {}", key.join(":"))
        })
        .collect();
    assert_eq!(got, want, "{tr}: Java read other records");
    assert_eq!(committed(plain, &group, &topic), total);
}

/// franz-go (commit, abort, commit), Java (commit, abort) and librdkafka (commit) write
/// transactions; read_committed readers (franz-go and Java) see exactly the committed records,
/// at the same offsets.
fn transactions(tr: &str, c: &Creds, plain: &str) {
    let topic = format!("sec-{tr}-txn");
    let mut w = WireClient::connect(plain).unwrap();
    assert_eq!(w.create_topic(&topic, 1, 1, &[]).unwrap(), 0);
    let txn_n = 5;
    let f = franz(
        c,
        "txn",
        &topic,
        &[
            "-n",
            &txn_n.to_string(),
            "-txn-id",
            &format!("txn-franz-{tr}"),
        ],
    );
    assert!(f.error.is_none(), "franz txn over {tr}: {}", f.raw);
    assert_eq!(f.txns, ["commit", "abort", "commit"]);
    let mut want: Vec<String> = f
        .acks
        .iter()
        .map(|(_, v)| v.clone())
        .filter(|v| !v.contains(":a"))
        .collect();
    let ran = proc::run_ok(
        java::program("TxnProducer")
            .args([
                c.boot.as_str(),
                &topic,
                "1",
                "2",
                &txn_n.to_string(),
                "2",
                "false",
            ])
            .args(&c.java),
        Duration::from_secs(120),
    );
    assert!(
        ran.stdout.contains("COMMITTED 0") && ran.stdout.contains("ABORTED 1"),
        "Java txn over {tr}: {}",
        ran.stdout
    );
    want.extend((0..txn_n).map(|i| format!("{:.<64}", format!("C:0:{i}:"))));
    let ran = proc::run_ok(
        python::script("txn_producer.py")
            .args([c.boot.as_str(), &topic, "1", &txn_n.to_string()])
            .arg(format!("transactional.id=txn-rdk-{tr}"))
            .args(&c.rdk),
        Duration::from_secs(120),
    );
    assert!(
        ran.stdout.contains("COMMITTED"),
        "librdkafka txn over {tr}: {}",
        ran.stdout
    );
    want.extend((0..txn_n).map(|i| format!("txn:{i}")));
    want.sort();

    let f = franz(
        c,
        "consume",
        &topic,
        &["-n", &want.len().to_string(), "-read-committed"],
    );
    assert!(
        f.error.is_none(),
        "franz read_committed over {tr}: {}",
        f.raw
    );
    let mut seen: Vec<String> = f.records.iter().map(|(_, v)| v.clone()).collect();
    seen.sort();
    assert_eq!(seen, want, "{tr}: read_committed (franz-go)");
    let ran = proc::run_ok(
        java::program("RecordDump")
            .args([c.boot.as_str(), &topic, "read_committed", "records"])
            .args(&c.java),
        Duration::from_secs(120),
    );
    let java: Vec<(i64, String)> = ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("R 0 "))
        .map(|l| {
            let mut it = l.split(' ');
            let off = it.next().unwrap().parse().unwrap();
            let _key = it.next();
            (off, it.next().unwrap().to_string())
        })
        .collect();
    assert_eq!(
        java, f.records,
        "{tr}: Java and franz-go read_committed differ"
    );
}

/// A topic and a group no ACL grants: franz-go, librdkafka and Java get the Kafka error codes.
fn denials(tr: &str, c: &Creds) {
    let topic = format!("sec-{tr}");
    let f = franz(c, "produce", "secret", &["-n", "1"]);
    assert_eq!(
        f.error.as_deref(),
        Some("TOPIC_AUTHORIZATION_FAILED"),
        "franz over {tr}: {}",
        f.raw
    );
    let f = franz(
        c,
        "consume",
        &format!("sec-{tr}"),
        &["-n", "1", "-group", "nope"],
    );
    assert_eq!(
        f.error.as_deref(),
        Some("GROUP_AUTHORIZATION_FAILED"),
        "franz over {tr}: {}",
        f.raw
    );
    for (args, want) in [
        (vec!["produce", "secret"], "ERR TOPIC_AUTHORIZATION_FAILED"),
        (
            vec!["consume", &topic, "nope"],
            "ERR GROUP_AUTHORIZATION_FAILED",
        ),
    ] {
        let ran = proc::run(
            python::script("authz_probe.py")
                .arg(&c.boot)
                .args(&args)
                .args(&c.rdk),
            Duration::from_secs(60),
        );
        assert_eq!(
            ran.stdout.trim(),
            want,
            "librdkafka over {tr}: {}",
            ran.stderr
        );
    }
    let ran = proc::run(
        java::program("SeqProducer")
            .args([c.boot.as_str(), "secret", "1", "1", "max.block.ms=15000"])
            .args(&c.java),
        Duration::from_secs(60),
    );
    assert!(
        ran.stdout.contains("ERR 0 0 TopicAuthorizationException"),
        "Java over {tr}: {}{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 10)
    );
    let dir = tempfile::tempdir().unwrap();
    let ran = proc::run(
        java::program("GroupConsumer")
            .args([
                c.boot.as_str(),
                "nope",
                &format!("sec-{tr}"),
                dir.path().join("stop").to_str().unwrap(),
                "0",
            ])
            .args(&c.java),
        Duration::from_secs(60),
    );
    assert!(
        !ran.status.success() && ran.stderr.contains("GroupAuthorizationException"),
        "Java over {tr}: {}",
        proc::last_lines(&ran.stderr, 10)
    );
}

#[test]
fn given_secured_kmirror_when_java_librdkafka_and_franz_go_use_sasl_ssl_and_mtls_should_be_served_and_authorized(
) {
    let _g = kmirror_tests::heavy_test_lock();
    let t = Instant::now();
    let pki = TestPki::new();
    let server = pki.server("kmirror");
    let carol = pki.client("carol", &[("CN", "carol")]);
    let mut node = KmirrorNode::builder()
        .listeners(&["PLAINTEXT", "SASL_SSL", "SSL"])
        .args(&[
            "--tls-cert",
            server.cert.to_str().unwrap(),
            "--tls-key",
            server.key.to_str().unwrap(),
            "--tls-client-ca",
            pki.ca_pem.to_str().unwrap(),
            "--sasl-mechanisms",
            "SCRAM-SHA-512",
            "--authorizer",
            "true",
            "--super-users",
            "User:admin;User:ANONYMOUS",
        ])
        .start();
    assert!(node.stop(), "clean stop");
    sasl::scram_add(&node.data_dir(), "admin", "SCRAM-SHA-512", ADMIN_PW);
    node.start_again();
    let plain = node.listener_addr("PLAINTEXT");
    let sasl_addr = node.listener_addr("SASL_SSL");
    let dir = tempfile::tempdir().unwrap();
    let admin_props = dir.path().join("admin.properties");
    std::fs::write(
        &admin_props,
        sasl_ssl(&sasl_addr, &pki.ca_pem, "admin", ADMIN_PW)
            .java
            .join("\n"),
    )
    .unwrap();
    let tool = |class: &str, args: &[&str]| {
        let mut a = vec![
            "--bootstrap-server",
            sasl_addr.as_str(),
            "--command-config",
            admin_props.to_str().unwrap(),
        ];
        a.extend_from_slice(args);
        java::run_tool(class, &a, Duration::from_secs(90)).stdout
    };

    // kafka-configs creates alice's SCRAM-SHA-512 credential over SASL_SSL.
    tool(
        CONFIG_COMMAND,
        &[
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--alter",
            "--add-config",
            &format!("SCRAM-SHA-512=[iterations=8192,password={ALICE_PW}]"),
        ],
    );
    let described = tool(
        CONFIG_COMMAND,
        &[
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--describe",
        ],
    );
    assert!(
        described.contains("SCRAM-SHA-512=iterations=8192"),
        "kafka-configs --describe: {described}"
    );
    // kafka-acls grants alice and carol exactly what the clients use.
    let both = [
        "--allow-principal",
        "User:alice",
        "--allow-principal",
        CAROL,
        "--resource-pattern-type",
        "prefixed",
    ];
    for grant in [
        &[
            "--operation",
            "Read",
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--topic",
            "sec-",
        ][..],
        &["--operation", "Read", "--group", "g-"][..],
        &[
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--transactional-id",
            "txn-",
        ][..],
    ] {
        let mut a = vec!["--add"];
        a.extend_from_slice(&both);
        a.extend_from_slice(grant);
        tool(ACL_COMMAND, &a);
    }
    let listed = tool(ACL_COMMAND, &["--list"]);
    assert!(
        listed.contains("name=sec-")
            && listed.contains("name=g-")
            && listed.contains("name=txn-")
            && listed.contains("principal=User:CN=carol")
            && listed.contains("principal=User:alice"),
        "kafka-acls --list: {listed}"
    );
    let mut w = WireClient::connect(&plain).unwrap();
    assert_eq!(w.create_topic("secret", 1, 1, &[]).unwrap(), 0);

    let transports = [
        ("sasl", sasl_ssl(&sasl_addr, &pki.ca_pem, "alice", ALICE_PW)),
        (
            "mtls",
            mtls(&node.listener_addr("SSL"), &pki.ca_pem, &carol),
        ),
    ];
    for (tr, c) in &transports {
        let s = Instant::now();
        produce_and_consume(tr, c, &plain);
        eprintln!("{tr}: produce/consume {:?}", s.elapsed());
        transactions(tr, c, &plain);
        eprintln!("{tr}: transactions {:?}", s.elapsed());
        denials(tr, c);
        eprintln!("{tr}: denials {:?}", s.elapsed());
    }

    // kafka-acls --remove takes effect: carol loses her groups.
    let mut a = vec!["--remove", "--force", "--allow-principal", CAROL];
    a.extend_from_slice(&[
        "--resource-pattern-type",
        "prefixed",
        "--operation",
        "Read",
        "--group",
        "g-",
    ]);
    tool(ACL_COMMAND, &a);
    let f = franz(
        &transports[1].1,
        "consume",
        "sec-mtls",
        &["-n", "1", "-group", "g-after"],
    );
    assert_eq!(
        f.error.as_deref(),
        Some("GROUP_AUTHORIZATION_FAILED"),
        "{}",
        f.raw
    );

    // The mirror admin CLI on kmirror's own SASL_SSL listener.
    let cli = |props: &Path| {
        proc::run(
            std::process::Command::new(deps::kmirror_bin())
                .args(["mirror", "--bootstrap", &sasl_addr, "--command-config"])
                .arg(props)
                .arg("list"),
            Duration::from_secs(60),
        )
    };
    let ran = cli(&admin_props);
    assert!(
        ran.status.success(),
        "mirror list over SASL_SSL: {}{}",
        ran.stdout,
        ran.stderr
    );
    let wrong = dir.path().join("wrong.properties");
    std::fs::write(
        &wrong,
        sasl_ssl(&sasl_addr, &pki.ca_pem, "admin", "wrong")
            .java
            .join("\n"),
    )
    .unwrap();
    let ran = cli(&wrong);
    assert!(
        !ran.status.success(),
        "a wrong password was accepted: {}",
        ran.stdout
    );
    assert!(
        ran.stderr.contains("SASL_AUTHENTICATION_FAILED (58)"),
        "mirror list with a wrong password: {}",
        ran.stderr
    );
    eprintln!("took {:?}", t.elapsed());
}
