//! Issue 12: a secured three-node kmirror cluster. Every node's only listener is SASL_SSL
//! (SCRAM-SHA-512), the authorizer is on, the super users are the inter-broker user and an
//! admin, `User:ANONYMOUS` has no ACL at all, and the Raft transport uses mutual TLS
//! (`--controller-listener-tls`). So every node-to-node request (replica fetches, transaction
//! markers, forwarded requests) must authenticate as the broker's own user over TLS.
//! - an RF=3 topic (min.insync.replicas=2): a Java idempotent producer (acks=all) writes,
//!   the leader of partition 0 is SIGKILLed, then Java and librdkafka transactional producers
//!   write (markers go to leaders on other nodes); the killed node restarts and rejoins every
//!   ISR; read_committed, every acknowledged and committed record is at its offset, and after
//!   a clean stop every node's log of every partition is byte-equal;
//! - a plaintext client and a client with a wrong password are refused as Kafka refuses them;
//! - a raw connection to a controller port without a certificate is refused (logged), and
//!   the cluster keeps serving.
//!
//! The SCRAM users come from `kmirror scram add` on one node's data directory, which seeds the
//! empty quorum (Kafka: `kafka-storage format --add-scram`).
//!
//! The same scenario runs first on three Apache Kafka 4.1.1 nodes with the same settings:
//! `inter.broker.listener.name` = the SASL_SSL listener, `sasl.mechanism.inter.broker.protocol`
//! SCRAM-SHA-512 with the broker user's JAAS, that user a super user, the controller listener
//! SSL with `ssl.client.auth=required`. The harness keeps a PLAINTEXT listener on Kafka (for
//! its own readiness checks; ANONYMOUS is a super user there), so on Kafka only the
//! inter-broker and controller parts are the same; the byte-equal log check and the controller
//! refusal are kmirror only.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use kmirror_tests::cluster::{log_bytes, run_seq_producer, Described};
use kmirror_tests::java::{self, tools};
use kmirror_tests::kafka::{KafkaCluster, KafkaOptions, KafkaSecurity, KafkaTls, SaslUser};
use kmirror_tests::pki::TestPki;
use kmirror_tests::{deps, proc, python, sasl, KmirrorNode};

const BROKER_USER: &str = "kmirror-broker";
const BROKER_PW: &str = "broker-secret";
const ADMIN_PW: &str = "admin-secret";
const TOPIC: &str = "secured";
const PARTITIONS: i32 = 3;
const RECORDS: u64 = 600;
const TXNS: usize = 4;
const PER_TXN: usize = 5;

struct Secured {
    nodes: Vec<KmirrorNode>,
    controllers: Vec<u16>,
    dir: tempfile::TempDir,
    pki: TestPki,
}

fn java_props(ca: &Path, user: &str, pw: &str) -> Vec<String> {
    vec![
        "security.protocol=SASL_SSL".into(),
        "sasl.mechanism=SCRAM-SHA-512".into(),
        format!("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" password=\"{pw}\";"),
        "ssl.truststore.type=PEM".into(),
        format!("ssl.truststore.location={}", ca.display()),
    ]
}

fn rdk_props(ca: &Path, user: &str, pw: &str) -> Vec<String> {
    vec![
        "security.protocol=SASL_SSL".into(),
        "sasl.mechanisms=SCRAM-SHA-512".into(),
        format!("sasl.username={user}"),
        format!("sasl.password={pw}"),
        format!("ssl.ca.location={}", ca.display()),
    ]
}

/// What the scenario needs of a secured three-node cluster.
trait Under {
    fn name(&self) -> &'static str;
    /// Node `id`'s SASL_SSL listener.
    fn addr(&self, id: i32) -> String;
    fn ca(&self) -> &Path;
    fn dir(&self) -> &Path;
    fn kill(&mut self, id: i32);
    fn restart(&mut self, id: i32);

    fn bootstrap(&self) -> String {
        (1..=3).map(|i| self.addr(i)).collect::<Vec<_>>().join(",")
    }

    fn admin_java(&self) -> Vec<String> {
        java_props(self.ca(), "admin", ADMIN_PW)
    }

    fn admin_rdk(&self) -> Vec<String> {
        rdk_props(self.ca(), "admin", ADMIN_PW)
    }

    fn command_config(&self) -> String {
        let p = self.dir().join("admin.properties");
        std::fs::write(&p, self.admin_java().join("\n")).unwrap();
        p.display().to_string()
    }

    fn topics_tool(&self, via: i32, args: &[&str]) -> proc::Ran {
        let (boot, cfg) = (self.addr(via), self.command_config());
        let mut a = vec!["--bootstrap-server", &boot, "--command-config", &cfg];
        a.extend_from_slice(args);
        java::run_tool(tools::TOPIC_COMMAND, &a, Duration::from_secs(60))
    }

    fn describe(&self, via: i32) -> Option<BTreeMap<i32, Described>> {
        let ran = self.topics_tool(via, &["--describe", "--topic", TOPIC]);
        let mut out = BTreeMap::new();
        for line in ran.stdout.lines() {
            let f: BTreeMap<&str, &str> = line
                .split('\t')
                .filter_map(|f| f.split_once(':'))
                .map(|(k, v)| (k.trim(), v.trim()))
                .collect();
            let Some(p) = f.get("Partition").and_then(|p| p.parse().ok()) else {
                continue;
            };
            let ids = |k: &str| -> Vec<i32> {
                let mut v: Vec<i32> = f
                    .get(k)
                    .unwrap_or(&"")
                    .split(',')
                    .filter_map(|s| s.trim().parse().ok())
                    .collect();
                v.sort_unstable();
                v
            };
            out.insert(
                p,
                Described {
                    leader: f.get("Leader").and_then(|l| l.parse().ok()).unwrap_or(-2),
                    replicas: ids("Replicas"),
                    isr: ids("Isr"),
                },
            );
        }
        (out.len() == PARTITIONS as usize).then_some(out)
    }

    fn wait_full_isr(&self, via: i32) -> BTreeMap<i32, Described> {
        proc::wait_for(
            Duration::from_secs(90),
            "every replica in every ISR",
            || {
                self.describe(via)
                    .filter(|d| d.values().all(|p| p.isr == vec![1, 2, 3] && p.leader > 0))
            },
        )
    }
}

impl Under for Secured {
    fn name(&self) -> &'static str {
        "kmirror"
    }

    fn addr(&self, id: i32) -> String {
        self.nodes[id as usize - 1].listener_addr("SASL_SSL")
    }

    fn ca(&self) -> &Path {
        &self.pki.ca_pem
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn kill(&mut self, id: i32) {
        self.nodes[id as usize - 1].kill_now();
    }

    fn restart(&mut self, id: i32) {
        self.nodes[id as usize - 1].start_again();
    }
}

/// Three Kafka nodes configured as the kmirror ones (see the module doc).
struct SecuredKafka {
    kafka: KafkaCluster,
    secure: Vec<String>,
    dir: tempfile::TempDir,
    pki: TestPki,
}

impl SecuredKafka {
    fn start() -> SecuredKafka {
        let pki = TestPki::new();
        let server = pki.server("kafka");
        let dir = tempfile::tempdir().unwrap();
        let mut security = KafkaSecurity::sasl_ssl_scram(
            KafkaTls {
                server: server.clone(),
                ca_pem: pki.ca_pem.clone(),
                client_auth_required: false,
            },
            vec![SaslUser::new(BROKER_USER, BROKER_PW)],
        );
        security.admin = kmirror_tests::kafka::AdminAuth::Sasl {
            mechanism: "SCRAM-SHA-512".into(),
            user: SaslUser::new("admin", ADMIN_PW),
        };
        // The controllers authenticate with their certificate (principal CN=kafka), which
        // must be a super user with the authorizer on (Kafka authorizes Vote and Fetch on the
        // controller listener as CLUSTER_ACTION).
        security.super_users = vec![format!("User:{BROKER_USER}"), "User:CN=kafka".into()];
        let ctl = "listener.name.controller.";
        let p = |k: &str, v: &str| (k.to_string(), v.to_string());
        let props = vec![
            p("inter.broker.listener.name", "SECURE"),
            p("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
            p(
                "listener.name.secure.scram-sha-512.sasl.jaas.config",
                &format!("org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{BROKER_USER}\" password=\"{BROKER_PW}\";"),
            ),
            p(
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL,SECURE:SASL_SSL",
            ),
            p(&format!("{ctl}ssl.keystore.type"), "PEM"),
            p(
                &format!("{ctl}ssl.keystore.location"),
                server.keystore.to_str().unwrap(),
            ),
            p(&format!("{ctl}ssl.truststore.type"), "PEM"),
            p(
                &format!("{ctl}ssl.truststore.location"),
                pki.ca_pem.to_str().unwrap(),
            ),
            p(&format!("{ctl}ssl.client.auth"), "required"),
            p("broker.session.timeout.ms", "3000"),
            p("broker.heartbeat.interval.ms", "500"),
        ];
        let kafka = KafkaCluster::start_with(KafkaOptions {
            nodes: 3,
            props,
            security: Some(security),
            ..KafkaOptions::default()
        });
        let secure = kafka
            .secure_bootstrap()
            .split(',')
            .map(str::to_string)
            .collect::<Vec<_>>();
        assert_eq!(secure.len(), 3);
        SecuredKafka {
            kafka,
            secure,
            dir,
            pki,
        }
    }
}

impl Under for SecuredKafka {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn addr(&self, id: i32) -> String {
        self.secure[id as usize - 1].clone()
    }

    fn ca(&self) -> &Path {
        &self.pki.ca_pem
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn kill(&mut self, id: i32) {
        self.kafka.kill_node(id);
    }

    fn restart(&mut self, id: i32) {
        self.kafka.start_node(id);
    }
}

impl Secured {
    fn start() -> Secured {
        Secured::start_with_super_users(&format!("User:{BROKER_USER};User:admin"))
    }

    fn start_with_super_users(super_users: &str) -> Secured {
        let pki = TestPki::new();
        let server = pki.server("kmirror");
        let dir = tempfile::tempdir().unwrap();
        let broker_pw = dir.path().join("broker.pw");
        std::fs::write(&broker_pw, format!("{BROKER_PW}\n")).unwrap();
        let controllers: Vec<u16> = (0..3).map(|_| proc::free_port()).collect();
        let quorum = controllers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let super_users = super_users.to_string();
        let nodes: Vec<KmirrorNode> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|i| {
                    let (id, ctrl) = ((i + 1).to_string(), format!("127.0.0.1:{}", controllers[i]));
                    let (server, pki, quorum, su, bpw) =
                        (&server, &pki, &quorum, &super_users, &broker_pw);
                    s.spawn(move || {
                        KmirrorNode::builder()
                            .listeners(&["SASL_SSL"])
                            .args(&[
                                "--node-id",
                                &id,
                                "--controller-listen",
                                &ctrl,
                                "--quorum",
                                quorum,
                                "--broker-session-timeout-ms",
                                "3000",
                                "--cores",
                                "1",
                                "--tls-cert",
                                server.cert.to_str().unwrap(),
                                "--tls-key",
                                server.key.to_str().unwrap(),
                                "--sasl-mechanisms",
                                "SCRAM-SHA-512",
                                "--authorizer",
                                "true",
                                "--super-users",
                                su,
                                "--inter-broker-listener-name",
                                "SASL_SSL",
                                "--inter-broker-sasl-mechanism",
                                "SCRAM-SHA-512",
                                "--inter-broker-sasl-username",
                                BROKER_USER,
                                "--inter-broker-sasl-password-file",
                                bpw.to_str().unwrap(),
                                "--inter-broker-tls-ca",
                                pki.ca_pem.to_str().unwrap(),
                                "--controller-listener-tls",
                                "--default-replication-factor",
                                "3",
                            ])
                            .start()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut c = Secured {
            nodes,
            controllers,
            dir,
            pki,
        };
        // The users, written offline into node 1's data dir, seed the (empty) quorum when it
        // registers again.
        assert!(c.nodes[0].stop(), "clean stop of node 1");
        let data = c.nodes[0].data_dir();
        sasl::scram_add(&data, BROKER_USER, "SCRAM-SHA-512", BROKER_PW);
        sasl::scram_add(&data, "admin", "SCRAM-SHA-512", ADMIN_PW);
        c.nodes[0].start_again();
        proc::wait_for(
            Duration::from_secs(90),
            "three brokers over SASL_SSL",
            || {
                let ran = proc::run(
                    python::script("metadata_probe.py")
                        .args([c.bootstrap().as_str(), "10"])
                        .args(c.admin_rdk()),
                    Duration::from_secs(30),
                );
                (ran.stdout.matches("BROKER ").count() == 3).then_some(())
            },
        );
        c
    }

    fn log_of(&self, id: usize) -> String {
        std::fs::read_to_string(self.nodes[id - 1].log_path()).unwrap_or_default()
    }
}

#[test]
fn a_cluster_whose_only_listener_is_sasl_ssl_replicates_and_runs_transactions() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut c = Secured::start();
    scenario(&mut c);
    mirror_cli(&c);
    controller_refusals(&c);

    // Every node's log of every partition is the same, byte for byte.
    std::thread::sleep(Duration::from_secs(2));
    for n in &mut c.nodes {
        assert!(n.stop(), "clean stop");
    }
    for p in 0..PARTITIONS {
        let logs: Vec<_> = c
            .nodes
            .iter()
            .map(|n| log_bytes(&n.data_dir().join("topics").join(format!("{TOPIC}-{p}"))))
            .collect();
        assert!(logs[0].0 > 0, "{TOPIC}-{p} is empty");
        for (i, l) in logs.iter().enumerate() {
            assert_eq!(l.0, logs[0].0, "{TOPIC}-{p}: node {} log end", i + 1);
            assert!(
                l.1 == logs[0].1,
                "{TOPIC}-{p}: node {} differs from node 1",
                i + 1
            );
        }
    }
}

/// The broker user authenticates but is no super user: followers are refused
/// (CLUSTER_AUTHORIZATION_FAILED on the replica Fetch), stay out of the ISR, and the refusal
/// is in the log.
#[test]
fn without_cluster_action_the_broker_user_cannot_replicate() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let c = Secured::start_with_super_users("User:admin");
    let ran = c.topics_tool(
        1,
        &[
            "--create",
            "--topic",
            TOPIC,
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ],
    );
    assert!(ran.status.success(), "create: {}", ran.stderr);
    std::thread::sleep(Duration::from_secs(5));
    let d = proc::wait_for(Duration::from_secs(30), "a description", || {
        let ran = c.topics_tool(1, &["--describe", "--topic", TOPIC]);
        ran.stdout
            .lines()
            .find(|l| l.contains("Partition: 0"))
            .map(str::to_string)
    });
    let leader: usize = d
        .split('\t')
        .find_map(|f| f.trim().strip_prefix("Leader: "))
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no leader in {d}"));
    assert!(
        d.contains(&format!("Isr: {leader}")),
        "only the leader in the ISR: {d}"
    );
    let follower = leader % 3 + 1;
    proc::wait_for(
        Duration::from_secs(20),
        "the refusal in the follower's log",
        || {
            c.log_of(follower)
                .contains("the broker's principal needs CLUSTER_ACTION")
                .then_some(())
        },
    );
}

#[test]
fn the_same_settings_hold_on_three_kafka_nodes() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut k = SecuredKafka::start();
    scenario(&mut k);
}

/// Create, produce, kill a leader, transactions, restart, read back (see the module doc);
/// then plaintext and a wrong password on the SASL_SSL listener are refused.
fn scenario(c: &mut dyn Under) {
    let name = c.name();
    let ran = c.topics_tool(
        1,
        &[
            "--create",
            "--topic",
            TOPIC,
            "--partitions",
            &PARTITIONS.to_string(),
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ],
    );
    assert!(ran.status.success(), "{name}: create: {}", ran.stderr);
    // Full ISRs: the followers fetch from the leaders over SASL_SSL as the broker user.
    let first = c.wait_full_isr(2);

    // An idempotent acks=all producer, then the leader of partition 0 dies.
    let boot = c.bootstrap();
    let (acks, acked, errors, errs) = run_seq_producer(
        java::program("SeqProducer")
            .args([
                boot.as_str(),
                TOPIC,
                &PARTITIONS.to_string(),
                &RECORDS.to_string(),
            ])
            .arg("enable.idempotence=true")
            .args(c.admin_java()),
        "Java SeqProducer",
        Duration::from_secs(180),
    );
    assert_eq!((acked, errors), (RECORDS, 0), "Java producer: {errs:?}");
    let victim = first[&0].leader;
    c.kill(victim);

    // Transactions with a node down: markers go to the partition leaders on other nodes.
    let ran = proc::run_ok(
        java::program("TxnProducer")
            .args([
                boot.as_str(),
                TOPIC,
                &PARTITIONS.to_string(),
                &TXNS.to_string(),
                &PER_TXN.to_string(),
                "2",
                "false",
            ])
            .args(c.admin_java()),
        Duration::from_secs(180),
    );
    assert!(
        ran.stdout.contains("COMMITTED 0") && ran.stdout.contains("ABORTED 1"),
        "Java transactions: {}",
        ran.stdout
    );
    let ran = proc::run_ok(
        python::script("txn_producer.py")
            .args([
                boot.as_str(),
                TOPIC,
                &PARTITIONS.to_string(),
                &PER_TXN.to_string(),
            ])
            .arg("transactional.id=rdk-secured")
            .args(c.admin_rdk()),
        Duration::from_secs(180),
    );
    assert!(
        ran.stdout.contains("COMMITTED"),
        "librdkafka: {}",
        ran.stdout
    );

    // The killed node comes back and catches up over the secured listener.
    c.restart(victim);
    c.wait_full_isr(victim % 3 + 1);

    // read_committed: every acknowledged record at its offset, the aborted ones hidden.
    let ran = proc::run_ok(
        java::program("RecordDump")
            .args([boot.as_str(), TOPIC, "read_committed", "records"])
            .args(c.admin_java()),
        Duration::from_secs(180),
    );
    let stored: BTreeMap<(i32, i64), String> = ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("R "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                (f[0].parse().unwrap(), f[1].parse().unwrap()),
                f[3].to_string(),
            )
        })
        .collect();
    for (p, seq, off) in &acks {
        let v = stored.get(&(*p, *off)).map(String::as_str).unwrap_or("");
        assert!(
            v.starts_with(&format!("{p}:{seq}:")),
            "p{p}@{off} holds {v:?}, want seq {seq}"
        );
    }
    let committed_java = stored.values().filter(|v| v.starts_with("C:")).count();
    let aborted = stored.values().filter(|v| v.starts_with("A:")).count();
    let rdk = stored.values().filter(|v| v.starts_with("txn:")).count();
    assert_eq!(
        (committed_java, aborted, rdk),
        ((TXNS / 2) * PER_TXN, 0, PER_TXN),
        "committed Java, aborted, librdkafka records read_committed"
    );
    assert_eq!(
        stored.len(),
        acks.len() + committed_java + rdk,
        "nothing else"
    );

    // Plaintext on the SASL_SSL listener, and a wrong password, are refused.
    let probe = |props: Vec<String>| {
        proc::run(
            python::script("metadata_probe.py")
                .args([c.addr(1).as_str(), "8"])
                .args(props),
            Duration::from_secs(60),
        )
        .stdout
    };
    let plain = probe(Vec::new());
    assert!(
        plain.starts_with("ERR "),
        "{name}: plaintext on SASL_SSL: {plain}"
    );
    let ran = kmirror_cli(c.dir(), &c.addr(1), &java_props(c.ca(), "admin", "wrong"));
    assert!(
        !ran.status.success() && ran.stderr.contains("SASL_AUTHENTICATION_FAILED (58)"),
        "{name}: a wrong password: {}{}",
        ran.stdout,
        ran.stderr
    );
}

/// `kmirror mirror list` through `addr` with these Kafka client properties.
fn kmirror_cli(dir: &Path, addr: &str, props: &[String]) -> proc::Ran {
    let f = dir.join("cli.properties");
    std::fs::write(&f, props.join("\n")).unwrap();
    proc::run(
        std::process::Command::new(deps::kmirror_bin())
            .args(["mirror", "--bootstrap", addr, "--command-config"])
            .arg(&f)
            .arg("list"),
        Duration::from_secs(60),
    )
}

/// The mirror admin CLI as the admin is served through every node (a mirror request reaching
/// a node without the seat is forwarded to it as the broker user).
fn mirror_cli(c: &Secured) {
    for id in 1..=3 {
        let ran = kmirror_cli(c.dir(), &c.addr(id), &c.admin_java());
        assert!(
            ran.status.success(),
            "mirror list via node {id}: {}{}",
            ran.stdout,
            ran.stderr
        );
    }
}

/// A controller peer without a certificate (a Raft frame in the clear) is refused and
/// logged on every node; the cluster keeps serving.
fn controller_refusals(c: &Secured) {
    for (i, port) in c.controllers.iter().enumerate() {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", *port)).unwrap();
        s.write_all(&[0, 0, 0, 4, 8, 1, 16, 2]).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).unwrap_or(0);
        assert!(
            n == 0 || buf[0] == 0x15,
            "controller {} answered {:?}",
            i + 1,
            &buf[..n]
        );
        proc::wait_for(Duration::from_secs(10), "the refusal in the log", || {
            c.log_of(i + 1)
                .contains("controller connection refused: TLS handshake failed")
                .then_some(())
        });
    }
    let ok = proc::run(
        python::script("metadata_probe.py")
            .args([c.addr(1).as_str(), "8"])
            .args(c.admin_rdk()),
        Duration::from_secs(60),
    )
    .stdout;
    assert_eq!(ok.matches("BROKER ").count(), 3, "after the refusals: {ok}");
}
