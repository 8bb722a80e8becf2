//! SASL authentication on kmirror's SASL_PLAINTEXT listener, judged from outside: raw wire
//! exchanges (error codes and whether the connection is closed) checked against Apache Kafka
//! 4.1.1 configured the same way, real clients (Java SCRAM-SHA-512, librdkafka SCRAM-SHA-256,
//! PLAIN and OAUTHBEARER) producing and consuming, `kafka-configs --entity-type users`, and
//! KIP-368 re-authentication of a long-running Java consumer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kmirror_tests::kafka::{AdminAuth, KafkaOptions, KafkaSecurity, SaslUser, SecureProtocol};
use kmirror_tests::proc::{self, LineChild};
use kmirror_tests::sasl::{self, AuthOutcome, JwtKey, SCRAM_SHA_256, SCRAM_SHA_512};
use kmirror_tests::{deps, java, python, KafkaCluster, KmirrorNode, WireClient};

const ADMIN_PW: &str = "admin-secret";
const ALICE_PW: &str = "alice-secret";

/// Kafka error codes the tests expect.
const ILLEGAL_SASL_STATE: i16 = 34;
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const SASL_AUTHENTICATION_FAILED: i16 = 58;
const RESOURCE_NOT_FOUND: i16 = 91;
const DUPLICATE_RESOURCE: i16 = 92;
const UNACCEPTABLE_CREDENTIAL: i16 = 93;

fn jaas_scram(user: &str, pw: &str) -> String {
    format!("org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{pw}\";")
}

/// `kmirror scram add` into a stopped node's data dir (the offline bootstrap).
fn scram_add(data_dir: &std::path::Path, user: &str, mech: &str, pw: &str) {
    let dir = tempfile::tempdir().unwrap();
    let pw_file = dir.path().join("pw");
    std::fs::write(&pw_file, format!("{pw}\n")).unwrap();
    let ran = proc::run_ok(
        std::process::Command::new(deps::kmirror_bin())
            .args(["scram", "add", "--data-dir"])
            .arg(data_dir)
            .args(["--user", user, "--mechanism", mech, "--password-file"])
            .arg(&pw_file),
        Duration::from_secs(30),
    );
    assert!(ran.stdout.contains("added"), "{}", ran.stdout);
}

/// A kmirror node with PLAINTEXT and SASL_PLAINTEXT listeners and `admin` bootstrapped
/// offline with SCRAM-SHA-512.
fn kmirror_sasl(extra: &[&str]) -> KmirrorNode {
    let mut node = KmirrorNode::start_listeners(&["PLAINTEXT", "SASL_PLAINTEXT"], extra);
    assert!(node.stop(), "clean stop");
    scram_add(&node.data_dir(), "admin", "SCRAM-SHA-512", ADMIN_PW);
    node.start_again();
    node
}

/// Apache Kafka with a SASL_PLAINTEXT listener (SCRAM-SHA-512/256, no authorizer) next to
/// PLAINTEXT; `admin` is created at format time. Returns the cluster and the SASL address.
fn kafka_sasl() -> (KafkaCluster, String) {
    let cluster = KafkaCluster::start_with(KafkaOptions {
        security: Some(KafkaSecurity {
            protocol: SecureProtocol::SaslPlaintext,
            sasl_mechanisms: vec!["SCRAM-SHA-512".into(), "SCRAM-SHA-256".into()],
            users: Vec::new(),
            tls: None,
            authorizer: false,
            super_users: Vec::new(),
            admin: AdminAuth::Sasl {
                mechanism: "SCRAM-SHA-512".into(),
                user: SaslUser::new("admin", ADMIN_PW),
            },
        }),
        ..KafkaOptions::default()
    });
    let addr = cluster.secure_bootstrap();
    (cluster, addr)
}

/// Kafka propagates credentials from the controller to the broker asynchronously: wait
/// until alice can authenticate.
fn wait_alice(sasl_addr: &str) {
    proc::wait_for(Duration::from_secs(30), "alice's credential", || {
        let mut c = WireClient::connect(sasl_addr).ok()?;
        matches!(
            sasl::scram(&mut c, "SCRAM-SHA-256", "alice", ALICE_PW).ok()?,
            AuthOutcome::Ok { .. }
        )
        .then_some(())
    });
}

/// One raw-wire scenario per line of the contract; returns what each observed so the same
/// function judges kmirror and Kafka.
fn raw_contract(sasl_addr: &str, plain_addr: &str) -> BTreeMap<&'static str, String> {
    let mut seen = BTreeMap::new();
    // ApiVersions is served before authentication; Metadata is not: the connection closes.
    let mut c = WireClient::connect(sasl_addr).expect("ApiVersions before authentication");
    let md = c.metadata(None);
    seen.insert(
        "metadata before auth",
        format!("{:?}", md.map(|_| "answered").map_err(|_| "closed")),
    );
    // An unknown mechanism: 33 with the enabled list, then closed.
    let mut c = WireClient::connect(sasl_addr).unwrap();
    let h = sasl::handshake(&mut c, "GSSAPI").unwrap();
    assert!(
        h.mechanisms.iter().any(|m| m.as_str() == "SCRAM-SHA-512"),
        "enabled list: {:?}",
        h.mechanisms
    );
    seen.insert(
        "unknown mechanism",
        format!("{} then {}", h.error_code, closed(&mut c)),
    );
    // Wrong password: 58 with a message, then closed.
    let mut c = WireClient::connect(sasl_addr).unwrap();
    let o = sasl::scram(&mut c, "SCRAM-SHA-512", "alice", "wrong").unwrap();
    let AuthOutcome::Authenticate { code, message } = o else {
        panic!("wrong password: {o:?}")
    };
    assert!(!message.is_empty(), "a failure message");
    seen.insert("wrong password", format!("{code} then {}", closed(&mut c)));
    // Unknown user: the same.
    let mut c = WireClient::connect(sasl_addr).unwrap();
    let o = sasl::scram(&mut c, "SCRAM-SHA-256", "nobody", "x").unwrap();
    seen.insert(
        "unknown user",
        format!("{o:?}").split(" {").next().unwrap().to_string()
            + &match o {
                AuthOutcome::Authenticate { code, .. } => {
                    format!(" {code} then {}", closed(&mut c))
                }
                _ => String::new(),
            },
    );
    // Right password (both mechanisms); then requests are served; SaslAuthenticate again is
    // answered ILLEGAL_SASL_STATE.
    for mech in ["SCRAM-SHA-512", "SCRAM-SHA-256"] {
        let mut c = WireClient::connect(sasl_addr).unwrap();
        let o = sasl::scram(&mut c, mech, "alice", ALICE_PW).unwrap();
        assert_eq!(
            o,
            AuthOutcome::Ok {
                session_lifetime_ms: 0
            },
            "{mech}"
        );
        c.metadata(None).expect("Metadata after authentication");
    }
    let mut c = WireClient::connect(sasl_addr).unwrap();
    sasl::scram(&mut c, "SCRAM-SHA-512", "alice", ALICE_PW).unwrap();
    let r: SaslAuthenticateResponse = c
        .send_at(SaslAuthenticateRequest::default(), 2)
        .expect("an answer");
    seen.insert(
        "authenticate after success",
        format!(
            "{} then {}",
            r.error_code,
            if c.metadata(None).is_ok() {
                "served"
            } else {
                "closed"
            }
        ),
    );
    // SaslAuthenticate before SaslHandshake.
    let mut c = WireClient::connect(sasl_addr).unwrap();
    let r = c.send_at(SaslAuthenticateRequest::default(), 2);
    seen.insert(
        "authenticate before handshake",
        match r {
            Ok(r) => format!("{} then {}", r.error_code, closed(&mut c)),
            Err(_) => "closed".into(),
        },
    );
    // SaslHandshake on a listener without SASL.
    let mut c = WireClient::connect(plain_addr).unwrap();
    let h = sasl::handshake(&mut c, "SCRAM-SHA-512");
    seen.insert(
        "handshake on PLAINTEXT",
        match h {
            Ok(h) => format!(
                "{} then {}",
                h.error_code,
                if c.metadata(None).is_ok() {
                    "served"
                } else {
                    "closed"
                }
            ),
            Err(_) => "closed".into(),
        },
    );
    seen
}

/// "closed" if the next request gets no answer, "open" otherwise.
fn closed(c: &mut WireClient) -> &'static str {
    c.stream()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    match c.send_at(ApiVersionsRequest::default(), 3) {
        Ok(_) => "open",
        Err(_) => "closed",
    }
}

fn alter(c: &mut WireClient, req: AlterUserScramCredentialsRequest) -> Vec<(String, i16)> {
    let r: AlterUserScramCredentialsResponse =
        c.send_at(req, 0).expect("AlterUserScramCredentials");
    r.results
        .iter()
        .map(|x| (x.user.to_string(), x.error_code))
        .collect()
}

fn create_alice(c: &mut WireClient) {
    // One mechanism per request: Kafka refuses a user named twice in one request.
    for (mech, iterations) in [(SCRAM_SHA_512, 4096), (SCRAM_SHA_256, 8192)] {
        let r = alter(
            c,
            AlterUserScramCredentialsRequest::default()
                .with_upsertions(vec![sasl::upsertion("alice", mech, ALICE_PW, iterations)]),
        );
        assert_eq!(r, vec![("alice".to_string(), 0)]);
    }
}

/// Edge cases of the credential APIs: what each user's result code is.
fn credential_edge_cases(c: &mut WireClient) -> Vec<(String, i16)> {
    let mut out = alter(
        c,
        AlterUserScramCredentialsRequest::default()
            .with_deletions(vec![
                sasl::deletion("ghost", SCRAM_SHA_512),
                sasl::deletion("carol", 9),
            ])
            .with_upsertions(vec![
                sasl::upsertion("few", SCRAM_SHA_256, "p", 4095),
                sasl::upsertion("many", SCRAM_SHA_256, "p", 16385),
                sasl::upsertion("dup", SCRAM_SHA_256, "p", 4096),
                sasl::upsertion("dup", SCRAM_SHA_512, "q", 4096),
                sasl::upsertion("edge", SCRAM_SHA_512, "p", 16384),
            ]),
    );
    out.sort();
    let d: DescribeUserScramCredentialsResponse = c
        .send_at(
            DescribeUserScramCredentialsRequest::default().with_users(Some(
                ["alice", "nobody", "edge"]
                    .iter()
                    .map(|u| {
                        describe_user_scram_credentials_request::UserName::default()
                            .with_name(StrBytes::from_string(u.to_string()))
                    })
                    .collect(),
            )),
            0,
        )
        .expect("DescribeUserScramCredentials");
    assert_eq!(d.error_code, 0);
    for r in &d.results {
        let infos: Vec<String> = r
            .credential_infos
            .iter()
            .map(|i| format!("{}:{}", i.mechanism, i.iterations))
            .collect();
        out.push((format!("describe {} {:?}", r.user, infos), r.error_code));
    }
    // Kafka does not answer in request order.
    out.sort();
    out
}

#[test]
fn given_a_sasl_listener_when_clients_skip_or_fail_authentication_should_answer_like_kafka() {
    let _g = kmirror_tests::heavy_test_lock();
    let t = Instant::now();
    let node = kmirror_sasl(&["--sasl-mechanisms", "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN"]);
    let mut admin = WireClient::connect(&node.listener_addr("PLAINTEXT")).unwrap();
    create_alice(&mut admin);
    let ours = raw_contract(
        &node.listener_addr("SASL_PLAINTEXT"),
        &node.listener_addr("PLAINTEXT"),
    );
    let ours_creds = credential_edge_cases(&mut admin);
    // PLAIN is checked against the SCRAM credential (kmirror only: Kafka's PLAIN has its own
    // JAAS user list).
    let sasl_addr = node.listener_addr("SASL_PLAINTEXT");
    let mut c = WireClient::connect(&sasl_addr).unwrap();
    assert_eq!(
        sasl::plain(&mut c, "alice", ALICE_PW).unwrap(),
        AuthOutcome::Ok {
            session_lifetime_ms: 0
        }
    );
    c.metadata(None).unwrap();
    let mut c = WireClient::connect(&sasl_addr).unwrap();
    assert!(matches!(
        sasl::plain(&mut c, "alice", "nope").unwrap(),
        AuthOutcome::Authenticate {
            code: SASL_AUTHENTICATION_FAILED,
            ..
        }
    ));
    assert_eq!(closed(&mut c), "closed");
    // The failures were counted.
    let text = std::fs::read_to_string(node.log_path()).unwrap();
    assert!(text.contains("SASL authentication failed"), "a log line");
    let failures = text.matches("SASL authentication failed").count();
    assert!(
        failures <= 2,
        "one line per peer per minute (per core), got {failures}"
    );

    let (kafka, kafka_sasl_addr) = kafka_sasl();
    let mut kadmin = WireClient::connect(&kafka.bootstrap()).unwrap();
    create_alice(&mut kadmin);
    wait_alice(&kafka_sasl_addr);
    let theirs = raw_contract(&kafka_sasl_addr, &kafka.bootstrap());
    let theirs_creds = credential_edge_cases(&mut kadmin);
    assert_eq!(
        ours, theirs,
        "raw SASL contract: kmirror (left) vs Kafka (right)"
    );
    assert_eq!(
        ours_creds, theirs_creds,
        "credential APIs: kmirror (left) vs Kafka (right)"
    );
    assert_eq!(
        ours["wrong password"],
        format!("{SASL_AUTHENTICATION_FAILED} then closed")
    );
    assert_eq!(
        ours["unknown mechanism"],
        format!("{UNSUPPORTED_SASL_MECHANISM} then closed")
    );
    assert_eq!(ours["metadata before auth"], "Err(\"closed\")");
    let codes: BTreeMap<String, i16> = ours_creds.into_iter().collect();
    assert_eq!(codes["ghost"], RESOURCE_NOT_FOUND);
    assert_eq!(codes["few"], UNACCEPTABLE_CREDENTIAL);
    assert_eq!(codes["dup"], DUPLICATE_RESOURCE);
    assert_eq!(codes["carol"], UNSUPPORTED_SASL_MECHANISM);
    eprintln!("raw contract: {theirs:#?}\ntook {:?}", t.elapsed());
    let _ = ILLEGAL_SASL_STATE;
}
