//! Mirrors reaching a secured Apache Kafka 4.1.1 source (issue 9, items 5 and 6): SASL_SSL with
//! SCRAM-SHA-512 and the StandardAuthorizer, mutual TLS, SASL_PLAINTEXT with PLAIN, SCRAM
//! credential rotation through `mirror alter`, a wrong password, and secrets kept out of
//! `describe` and world-readable files.
//!
//! The source's PLAINTEXT listener (User:ANONYMOUS, a super user) feeds the producers and the
//! log-equal oracle; the mirror only ever gets the SECURE listener and its own principal.

use std::time::Duration;

use kmirror_tests::helpers::now_ms;
use kmirror_tests::kafka::{AclResource, KafkaOptions, KafkaSecurity, KafkaTls, SaslUser};
use kmirror_tests::mirror::{self, PartitionRow};
use kmirror_tests::pki::TestPki;
use kmirror_tests::records;
use kmirror_tests::{KafkaCluster, KmirrorNode, WireClient};

const CATCH_UP: Duration = Duration::from_secs(90);
const SCRAM_JAAS: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// `n` single-record batches on every partition of `topic`, through the PLAINTEXT listener.
/// Timestamps are now: older ones would fall to the source's 7-day retention (a time-based
/// roll, then deletion) while a long test runs, moving the source's log start.
fn produce(src: &KafkaCluster, topic: &str, partitions: i32, n: usize, tag: &str) {
    let now = now_ms();
    for p in 0..partitions {
        let mut c = WireClient::connect_leader(&src.bootstrap(), topic, p).expect("leader");
        for i in 0..n {
            let v = format!("{tag}-{p}-{i}");
            let (code, _) = c
                .produce_raw(topic, p, records::batch(&[v.as_bytes()], now), -1)
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

    // After a failover of payments, a failback dry run reaches the secured source only with
    // --source-config (the mirror's own secrets never leave the broker).
    let ran = mirror::remove_topics(&d, "dr", &["payments"]);
    assert!(ran.status.success(), "{}{}", ran.stdout, ran.stderr);
    wait_rows(&d, "dr", "payments", "payments STOPPED", |r| {
        r.state == "STOPPED"
    });
    let args = ["add", "dr", "--topics", "payments", "--dry-run", "--json"];
    let ran = mirror::cli(&d, &args);
    assert!(
        !ran.status.success() && ran.stderr.contains("dry run"),
        "no credentials, no dry run: {}{}",
        ran.stdout,
        ran.stderr
    );
    let admin = src.admin_config().display().to_string();
    let mut with = args.to_vec();
    with.extend(["--source-config", admin.as_str()]);
    let ran = mirror::cli_ok(&d, &with);
    // Failback keeps exactly what the source has (the local failover marker goes).
    let src_end = mirror::end_offsets(&src.bootstrap(), "payments", 1)[0];
    assert!(
        ran.stdout.contains(&format!("\"truncate_to\":{src_end},")),
        "truncate to the source end {src_end}: {}",
        ran.stdout
    );
}

/// Writes `props` as a Java properties file (0600, as an operator would keep it).
fn properties_file(dir: &std::path::Path, name: &str, props: &[(&str, &str)]) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(&path, text).expect("write properties");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

fn scram_jaas(user: &str, password: &str) -> String {
    format!("{SCRAM_JAAS} required username=\"{user}\" password=\"{password}\";")
}

/// 5(d) and 5(f): the mirror's credentials come from `--mirror-config`; the source rotates
/// the mirror user's SCRAM password and its sessions expire (connections.max.reauth.ms), so
/// the mirror fails with the SASL reason; `mirror alter --mirror-config` with the new password
/// reconnects it and it resumes from its log end: log-equal, nothing duplicated. `describe`
/// shows the settings with secrets hidden, the stored state is 0600 and the broker's log never
/// contains a password.
#[test]
fn given_rotated_scram_password_when_mirror_is_altered_should_resume_log_equal_and_hide_secrets() {
    let _g = kmirror_tests::heavy_test_lock();
    let pki = TestPki::new();
    let tls = KafkaTls {
        server: pki.server("kafka"),
        ca_pem: pki.ca_pem.clone(),
        client_auth_required: false,
    };
    let src = KafkaCluster::start_with(KafkaOptions {
        security: Some(KafkaSecurity::sasl_ssl_scram(
            tls,
            vec![SaslUser::new("mirror", "first-secret")],
        )),
        // Sessions end after 8 s: a mirror must re-authenticate (KIP-368) with what it has.
        props: vec![("connections.max.reauth.ms".into(), "8000".into())],
        ..KafkaOptions::default()
    });
    src.create_topic("orders", 2, &[]);
    grant_mirror_acls(&src, "User:mirror", &["orders"]);
    produce(&src, "orders", 2, 10, "a");

    let dst = KmirrorNode::start();
    let d = dst.addr();
    let ca = pki.ca_pem.display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let first = scram_jaas("mirror", "first-secret");
    let cfg = properties_file(
        dir.path(),
        "mirror.properties",
        &[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.jaas.config", &first),
            ("ssl.truststore.location", &ca),
        ],
    );
    mirror::cli_ok(
        &d,
        &[
            "create",
            "dr",
            "--source",
            &src.secure_bootstrap(),
            "--mirror-config",
            &cfg,
            "--set",
            "mirror.retry.backoff.max.ms=1000",
        ],
    );
    mirror::add_topics(&d, "dr", &["orders"]);
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);

    // 5(f): secrets never shown, never stored world-readable, never logged.
    let table = mirror::cli_ok(&d, &["describe", "dr"]).stdout;
    assert!(
        table.contains("sasl.jaas.config=[hidden]") && table.contains("security.protocol=SASL_SSL"),
        "describe should list the settings with the JAAS config hidden:\n{table}"
    );
    let json = mirror::cli_ok(&d, &["describe", "dr", "--json"]).stdout;
    for out in [&table, &json] {
        assert!(
            !out.contains("first-secret"),
            "a secret in describe:\n{out}"
        );
    }
    // The mirror state is on the metadata quorum's log (a lone node is a one-voter quorum).
    let state_dir = dst.data_dir().join("__cluster_metadata-0");
    let mut files = 0;
    for e in std::fs::read_dir(&state_dir).expect("__cluster_metadata-0") {
        use std::os::unix::fs::PermissionsExt;
        let e = e.unwrap();
        let mode = e.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", e.path().display());
        if std::fs::read(e.path())
            .unwrap()
            .windows(b"first-secret".len())
            .any(|w| w == b"first-secret")
        {
            files += 1;
        }
    }
    assert!(files >= 1, "the settings are persisted in the metadata log");

    // Rotation on the source: current sessions run out, re-authentication fails.
    src.set_scram_password("SCRAM-SHA-512", "mirror", "second-secret");
    produce(&src, "orders", 2, 10, "b");
    let failed = wait_rows(&d, "dr", "orders", "FAILED with the SASL reason", |r| {
        r.state == "FAILED" && r.reason().contains("SASL_AUTHENTICATION_FAILED")
    });
    assert!(failed.iter().all(|r| r.state == "FAILED"), "{failed:?}");

    let second = scram_jaas("mirror", "second-secret");
    let cfg2 = properties_file(
        dir.path(),
        "rotated.properties",
        &[("sasl.jaas.config", &second)],
    );
    let ran = mirror::cli_ok(&d, &["alter", "dr", "--mirror-config", &cfg2]);
    assert!(!ran.stdout.contains("second-secret"), "{}", ran.stdout);
    produce(&src, "orders", 2, 10, "c");
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    mirror::wait_mirroring_at_lag_zero(&d, "dr", 2, CATCH_UP);
    // Past another session lifetime: re-authentication now works with the new password.
    std::thread::sleep(Duration::from_secs(10));
    produce(&src, "orders", 2, 10, "d");
    let ends = mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    assert_eq!(ends.len(), 2);
    assert_eq!(
        mirror::end_offsets(&d, "orders", 2),
        vec![40, 40],
        "40 records a partition, none duplicated"
    );
    let log = std::fs::read_to_string(dst.log_path()).unwrap_or_default();
    for secret in ["first-secret", "second-secret"] {
        assert!(!log.contains(secret), "the broker log contains a password");
    }
}

/// 5(b): a source that requires client certificates (SSL, ssl.client.auth=required): the
/// mirror presents its PEM keystore and is log-equal.
#[test]
fn given_mutual_tls_source_when_mirroring_should_be_log_equal() {
    let _g = kmirror_tests::heavy_test_lock();
    let pki = TestPki::new();
    let admin = pki.client("admin", &[("CN", "admin")]);
    let mirror_id = pki.client("mirror", &[("CN", "mirror")]);
    let src = KafkaCluster::start_with(KafkaOptions {
        security: Some(KafkaSecurity {
            protocol: kmirror_tests::kafka::SecureProtocol::Ssl,
            sasl_mechanisms: Vec::new(),
            users: Vec::new(),
            tls: Some(KafkaTls {
                server: pki.server("kafka"),
                ca_pem: pki.ca_pem.clone(),
                client_auth_required: true,
            }),
            authorizer: true,
            super_users: Vec::new(),
            admin: kmirror_tests::kafka::AdminAuth::Certificate {
                identity: admin,
                principal: "CN=admin".into(),
            },
        }),
        ..KafkaOptions::default()
    });
    src.create_topic("orders", 2, &[]);
    grant_mirror_acls(&src, "User:CN=mirror", &["orders"]);
    produce(&src, "orders", 2, 25, "a");
    let dst = KmirrorNode::start();
    let d = dst.addr();
    let ca = pki.ca_pem.display().to_string();
    let ks = mirror_id.keystore.display().to_string();
    mirror::create(
        &d,
        "dr",
        &src.secure_bootstrap(),
        &[
            ("security.protocol", "SSL"),
            ("ssl.truststore.location", &ca),
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", &ks),
        ],
    );
    mirror::add_topics(&d, "dr", &["orders"]);
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);

    // A second mirror of the same source without a client certificate is refused by the
    // source, and says so, while the first keeps mirroring (per-mirror connections).
    src.create_topic("other", 1, &[]);
    grant_mirror_acls(&src, "User:CN=mirror", &["other"]);
    mirror::create(
        &d,
        "nocert",
        &src.secure_bootstrap(),
        &[
            ("security.protocol", "SSL"),
            ("ssl.truststore.location", &ca),
            ("mirror.metadata.sync.interval.ms", "1000"),
        ],
    );
    mirror::add_topics(&d, "nocert", &["other"]);
    let table = kmirror_tests::proc::wait_for(
        Duration::from_secs(60),
        "describe nocert reports the refused handshake",
        || {
            let t = mirror::cli_ok(&d, &["describe", "nocert"]).stdout;
            t.contains("metadata sync with the source is failing")
                .then_some(t)
        },
    );
    assert!(
        table.to_lowercase().contains("certificate"),
        "the reason names the missing certificate: {table}"
    );
    produce(&src, "orders", 2, 25, "b");
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    mirror::wait_mirroring_at_lag_zero(&d, "dr", 2, CATCH_UP);
    assert!(mirror::describe(&d, Some("nocert")).is_empty());
}

/// 5(c): SASL_PLAINTEXT with PLAIN: log-equal. Also item 4: `--command-config` drives the
/// CLI's own connection through SASL (here against the Kafka listener, which authenticates
/// it and then has no mirror APIs to offer), and a wrong password is refused with the SASL
/// error.
#[test]
fn given_sasl_plaintext_plain_source_when_mirroring_should_be_log_equal() {
    let _g = kmirror_tests::heavy_test_lock();
    let src = KafkaCluster::start_with(KafkaOptions {
        security: Some(KafkaSecurity {
            protocol: kmirror_tests::kafka::SecureProtocol::SaslPlaintext,
            sasl_mechanisms: vec!["PLAIN".into()],
            users: vec![SaslUser::new("mirror", "plain-secret")],
            tls: None,
            authorizer: true,
            super_users: Vec::new(),
            admin: kmirror_tests::kafka::AdminAuth::Sasl {
                mechanism: "PLAIN".into(),
                user: SaslUser::new("admin", "admin-secret"),
            },
        }),
        ..KafkaOptions::default()
    });
    src.create_topic("orders", 2, &[]);
    grant_mirror_acls(&src, "User:mirror", &["orders"]);
    produce(&src, "orders", 2, 25, "a");
    let dst = KmirrorNode::start();
    let d = dst.addr();
    mirror::create(
        &d,
        "dr",
        &src.secure_bootstrap(),
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "mirror"),
            ("sasl.password", "plain-secret"),
        ],
    );
    mirror::add_topics(&d, "dr", &["orders"]);
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    produce(&src, "orders", 2, 25, "b");
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    let table = mirror::cli_ok(&d, &["describe", "dr"]).stdout;
    assert!(table.contains("sasl.password=[hidden]"), "{table}");
    assert!(!table.contains("plain-secret"), "{table}");

    // --command-config: the CLI authenticates (then finds no mirror APIs on Apache Kafka).
    let ok = src.admin_config().display().to_string();
    let ran = mirror::cli(&src.secure_bootstrap(), &["--command-config", &ok, "list"]);
    assert!(!ran.status.success());
    assert!(
        ran.stderr.contains("does not offer the mirror APIs"),
        "authenticated, then refused for lack of mirror APIs: {}",
        ran.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = properties_file(
        dir.path(),
        "bad.properties",
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "admin"),
            ("sasl.password", "wrong"),
        ],
    );
    let ran = mirror::cli(&src.secure_bootstrap(), &["--command-config", &bad, "list"]);
    assert!(!ran.status.success());
    assert!(
        ran.stderr.contains("SASL_AUTHENTICATION_FAILED"),
        "a wrong password is a SASL failure: {}",
        ran.stderr
    );
}

/// Create-time checks: unknown protocol, missing password, unreadable PEM are refused with
/// INVALID_CONFIG naming the key; nothing is created.
#[test]
fn given_bad_security_settings_when_creating_should_refuse_with_invalid_config() {
    let dst = KmirrorNode::start();
    let d = dst.addr();
    for (sets, key) in [
        (vec![("security.protocol", "TLS")], "security.protocol"),
        (
            vec![
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", "SCRAM-SHA-512"),
                ("sasl.username", "m"),
            ],
            "sasl.password",
        ),
        (
            vec![
                ("security.protocol", "SSL"),
                ("ssl.truststore.location", "/nonexistent/ca.pem"),
            ],
            "ssl.truststore.location",
        ),
    ] {
        let mut args = vec![
            "create".to_string(),
            "dr".into(),
            "--source".into(),
            "127.0.0.1:1".into(),
        ];
        for (k, v) in &sets {
            args.push("--set".into());
            args.push(format!("{k}={v}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ran = mirror::cli(&d, &args);
        assert!(!ran.status.success(), "{sets:?} accepted");
        assert!(
            ran.stderr.contains("INVALID_CONFIG") && ran.stderr.contains(key),
            "{sets:?}: {}",
            ran.stderr
        );
    }
    let list = mirror::cli_ok(&d, &["list", "--json"]).stdout;
    assert!(!list.contains("\"dr\""), "nothing created: {list}");
}

/// 5(e): a wrong password from the start. The source refuses the mirror, `describe` says so
/// (SASL_AUTHENTICATION_FAILED, from the metadata sync, since no partition could be learned),
/// and nothing is written on the destination. Fixing it with `alter` starts mirroring.
#[test]
fn given_wrong_password_when_mirroring_should_report_sasl_failure_and_write_nothing() {
    let _g = kmirror_tests::heavy_test_lock();
    let pki = TestPki::new();
    let src = secured_source(&pki, |tls| {
        KafkaSecurity::sasl_ssl_scram(tls, vec![SaslUser::new("mirror", "right-secret")])
    });
    src.create_topic("orders", 2, &[]);
    grant_mirror_acls(&src, "User:mirror", &["orders"]);
    produce(&src, "orders", 2, 10, "a");
    let dst = KmirrorNode::start();
    let d = dst.addr();
    let ca = pki.ca_pem.display().to_string();
    mirror::create(
        &d,
        "dr",
        &src.secure_bootstrap(),
        &[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "mirror"),
            ("sasl.password", "wrong-secret"),
            ("ssl.truststore.location", &ca),
            ("mirror.metadata.sync.interval.ms", "1000"),
        ],
    );
    mirror::add_topics(&d, "dr", &["orders"]);
    let table = kmirror_tests::proc::wait_for(
        Duration::from_secs(60),
        "describe reports the SASL failure",
        || {
            let t = mirror::cli_ok(&d, &["describe", "dr"]).stdout;
            t.contains("SASL_AUTHENTICATION_FAILED").then_some(t)
        },
    );
    assert!(!table.contains("wrong-secret"), "{table}");
    std::thread::sleep(Duration::from_secs(3));
    let rows = mirror::describe(&d, Some("dr"));
    assert!(
        rows.iter().all(|r| r.state != "MIRRORING"),
        "nothing mirrors with a wrong password: {rows:?}"
    );
    let mut c = WireClient::connect(&d).expect("destination");
    let md = c.metadata(Some(&["orders"])).expect("metadata");
    let written: i64 = if md.topics.iter().any(|t| t.error_code == 0) {
        mirror::end_offsets(&d, "orders", 2).iter().sum()
    } else {
        0
    };
    assert_eq!(written, 0, "nothing written on the destination");

    mirror::cli_ok(&d, &["alter", "dr", "--set", "sasl.password=right-secret"]);
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    let table = mirror::cli_ok(&d, &["describe", "dr"]).stdout;
    assert!(
        !table.contains("metadata sync with the source is failing"),
        "{table}"
    );
}

/// OAUTHBEARER: the mirror reads its token from a file (`sasl.oauthbearer.token.endpoint.url=
/// file:///…`, re-read on every connect) and authenticates as the token's subject; Kafka's
/// default (unsecured JWT) validator checks it. Log-equal; a token for a subject without ACLs
/// fails the partitions with the authorization reason.
#[test]
fn given_oauthbearer_source_when_token_comes_from_a_file_should_be_log_equal() {
    let _g = kmirror_tests::heavy_test_lock();
    let src = KafkaCluster::start_with(KafkaOptions {
        security: Some(KafkaSecurity {
            protocol: kmirror_tests::kafka::SecureProtocol::SaslPlaintext,
            sasl_mechanisms: vec!["OAUTHBEARER".into(), "PLAIN".into()],
            users: Vec::new(),
            tls: None,
            authorizer: true,
            super_users: Vec::new(),
            admin: kmirror_tests::kafka::AdminAuth::Sasl {
                mechanism: "PLAIN".into(),
                user: SaslUser::new("admin", "admin-secret"),
            },
        }),
        ..KafkaOptions::default()
    });
    src.create_topic("orders", 2, &[]);
    grant_mirror_acls(&src, "User:mirror", &["orders"]);
    produce(&src, "orders", 2, 25, "a");
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, kmirror_tests::kafka::unsecured_jwt("mirror", 3600)).unwrap();
    let url = format!("file://{}", token.display());
    let dst = KmirrorNode::start();
    let d = dst.addr();
    mirror::create(
        &d,
        "dr",
        &src.secure_bootstrap(),
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.token.endpoint.url", &url),
            ("mirror.retry.backoff.max.ms", "1000"),
        ],
    );
    mirror::add_topics(&d, "dr", &["orders"]);
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    mirror::wait_mirroring_at_lag_zero(&d, "dr", 2, CATCH_UP);

    // A token for another subject (no ACLs): the next connection (each metadata sync round
    // connects afresh and re-reads the file) is refused the topic, which fails it.
    std::fs::write(&token, kmirror_tests::kafka::unsecured_jwt("nobody", 3600)).unwrap();
    // Altering a non-connection setting keeps the fetchers (and their sessions) running.
    mirror::cli_ok(&d, &["alter", "dr", "--set", "mirror.retry.backoff.ms=200"]);
    produce(&src, "orders", 2, 5, "b");
    wait_rows(&d, "dr", "orders", "FAILED (not authorized)", |r| {
        r.state == "FAILED" && r.reason().contains("AUTHORIZATION_FAILED")
    });
    // The file holds the mirror's token again: it recovers on its next connect.
    std::fs::write(&token, kmirror_tests::kafka::unsecured_jwt("mirror", 3600)).unwrap();
    mirror::assert_mirrored(&src.bootstrap(), &d, "orders", 2, CATCH_UP);
    mirror::wait_mirroring_at_lag_zero(&d, "dr", 2, CATCH_UP);
}
