//! Apache Kafka 4.1.1 clusters in KRaft combined mode (every node broker + controller), run
//! from the Maven Central jars on loopback ports with temp dirs.
//!
//! A cluster may also be *secured* ([`KafkaOptions::security`]): each node then gets a second
//! client listener, SECURE (SSL, SASL_SSL or SASL_PLAINTEXT; PEM keystores from
//! [`crate::pki`]), optionally the StandardAuthorizer, and SCRAM users written at format time.
//! The PLAINTEXT listener stays for the harness's own producers and the oracle; with the
//! authorizer on, its principal (User:ANONYMOUS, also the controllers' and the inter-broker
//! principal) is a super user, so the harness sees everything while the SECURE listener
//! enforces what a test grants. Runtime changes (SCRAM credentials, ACLs) go through the Java
//! tools on the SECURE listener with an admin `--command-config`, which also proves a Java
//! client authenticates there.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::deps;
use crate::netns::NetNs;
use crate::pki::Identity;
use crate::proc::{self, ChildGuard};
use crate::wire::WireClient;

/// One node's fixed identity; survives restarts.
#[derive(Debug)]
struct Node {
    id: i32,
    /// The address the node binds and advertises: 127.0.0.1, or its namespace's address.
    host: String,
    port: u16,
    /// Cut off by [`KafkaCluster::isolate_node`] (still running).
    isolated: bool,
    /// The PROXIED listener's real port, when [`KafkaOptions::proxied_ports`] asked for one.
    proxied: Option<(u16, u16)>,
    /// The SECURE listener's port, when [`KafkaOptions::security`] asked for one.
    secure: Option<u16>,
    config: PathBuf,
    log: PathBuf,
    child: Option<ChildGuard>,
}

/// A running Apache Kafka cluster. Dropping it kills every node and deletes its data.
#[derive(Debug)]
pub struct KafkaCluster {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    heap: String,
    security: Option<KafkaSecurity>,
    /// Java client properties of the admin identity on the SECURE listener.
    admin_config: Option<PathBuf>,
    /// The nodes' network namespaces ([`KafkaOptions::netns`]); after `nodes`, so the
    /// processes die before their namespaces go.
    net: Option<NetNs>,
}

/// Settings for [`KafkaCluster::start_with`].
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// Nodes (each broker + controller; 3 gives a quorum of 3).
    pub nodes: usize,
    /// Extra `server.properties` lines, `key=value`.
    pub props: Vec<(String, String)>,
    /// JVM max heap.
    pub heap: String,
    /// Per node (in node order), the port of a proxy in front of it (a
    /// [`crate::faultproxy::FaultProxy`]). Each such node gets a second client listener,
    /// PROXIED, that listens on a port of its own but advertises `127.0.0.1:<proxy port>`:
    /// a client that bootstraps through the proxy learns only proxy addresses from Metadata,
    /// so all its traffic (a mirror fetcher's too) crosses the proxy, while the PLAINTEXT
    /// listener ([`KafkaCluster::bootstrap`]) stays direct for producers and the oracle.
    /// Empty (the default): no such listener.
    pub proxied_ports: Vec<u16>,
    /// A secured client listener (SECURE) on every node, the authorizer, SCRAM users.
    pub security: Option<KafkaSecurity>,
    /// Run each node in a network namespace of its own ([`crate::netns`]), so
    /// [`KafkaCluster::isolate_node`] can partition it. Needs root. Not combinable with
    /// `proxied_ports` or `security` (their listeners are on 127.0.0.1).
    pub netns: bool,
    /// A KIP-853 dynamic quorum (one node only): `controller.quorum.bootstrap.servers`
    /// instead of `controller.quorum.voters`, storage formatted with `--standalone`, so
    /// AddRaftVoter / RemoveRaftVoter are served (a static quorum refuses them).
    pub dynamic_quorum: bool,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        KafkaOptions {
            nodes: 1,
            props: Vec::new(),
            heap: "512m".into(),
            proxied_ports: Vec::new(),
            security: None,
            netns: false,
            dynamic_quorum: false,
        }
    }
}

/// Security protocol of the SECURE listener (Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecureProtocol {
    Ssl,
    SaslSsl,
    SaslPlaintext,
}

impl SecureProtocol {
    /// Kafka's `security.protocol` value.
    pub fn name(self) -> &'static str {
        match self {
            SecureProtocol::Ssl => "SSL",
            SecureProtocol::SaslSsl => "SASL_SSL",
            SecureProtocol::SaslPlaintext => "SASL_PLAINTEXT",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecureProtocol::Ssl | SecureProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecureProtocol::SaslSsl | SecureProtocol::SaslPlaintext
        )
    }
}

/// A SASL user: SCRAM credentials for every enabled SCRAM mechanism (written at format
/// time), and a PLAIN user in the listener's JAAS when PLAIN is enabled.
#[derive(Debug, Clone)]
pub struct SaslUser {
    pub name: String,
    pub password: String,
}

impl SaslUser {
    pub fn new(name: &str, password: &str) -> Self {
        SaslUser {
            name: name.into(),
            password: password.into(),
        }
    }
}

/// The broker side of TLS on the SECURE listener.
#[derive(Debug, Clone)]
pub struct KafkaTls {
    /// The broker's identity (PEM keystore: key + chain).
    pub server: Identity,
    /// The CA every peer trusts (`ssl.truststore.location`, PEM).
    pub ca_pem: PathBuf,
    /// `ssl.client.auth=required` (mutual TLS) instead of `none`.
    pub client_auth_required: bool,
}

/// How the harness's admin tools authenticate on the SECURE listener; the identity must be a
/// super user when the authorizer is on ([`KafkaSecurity::super_users`] gets it added).
#[derive(Debug, Clone)]
pub enum AdminAuth {
    /// SASL with this mechanism (`SCRAM-SHA-512`, `PLAIN`…) and user.
    Sasl { mechanism: String, user: SaslUser },
    /// A client certificate (SSL with mutual TLS), principal `User:<principal>`.
    Certificate {
        identity: Identity,
        principal: String,
    },
}

impl AdminAuth {
    fn principal(&self) -> String {
        match self {
            AdminAuth::Sasl { user, .. } => format!("User:{}", user.name),
            AdminAuth::Certificate { principal, .. } => format!("User:{principal}"),
        }
    }
}

/// Settings of a secured cluster.
#[derive(Debug, Clone)]
pub struct KafkaSecurity {
    pub protocol: SecureProtocol,
    /// Enabled SASL mechanisms: `SCRAM-SHA-512`, `SCRAM-SHA-256`, `PLAIN`, `OAUTHBEARER`
    /// (Kafka's unsecured-JWT validator: see [`unsecured_jwt`]).
    pub sasl_mechanisms: Vec<String>,
    /// Users known to SCRAM (format time) and PLAIN (listener JAAS); the admin user is added.
    pub users: Vec<SaslUser>,
    /// Required for SSL and SASL_SSL.
    pub tls: Option<KafkaTls>,
    /// The StandardAuthorizer (`allow.everyone.if.no.acl.found=false`).
    pub authorizer: bool,
    /// Extra super users (`User:x`); the admin and User:ANONYMOUS are always super users.
    pub super_users: Vec<String>,
    pub admin: AdminAuth,
}

impl KafkaSecurity {
    /// SASL_SSL with SCRAM-SHA-512, the authorizer on, an admin super user `admin`.
    pub fn sasl_ssl_scram(tls: KafkaTls, users: Vec<SaslUser>) -> Self {
        KafkaSecurity {
            protocol: SecureProtocol::SaslSsl,
            sasl_mechanisms: vec!["SCRAM-SHA-512".into()],
            users,
            tls: Some(tls),
            authorizer: true,
            super_users: Vec::new(),
            admin: AdminAuth::Sasl {
                mechanism: "SCRAM-SHA-512".into(),
                user: SaslUser::new("admin", "admin-secret"),
            },
        }
    }

    fn all_users(&self) -> Vec<SaslUser> {
        let mut users = self.users.clone();
        if let AdminAuth::Sasl { user, .. } = &self.admin {
            if !users.iter().any(|u| u.name == user.name) {
                users.push(user.clone());
            }
        }
        users
    }

    /// `server.properties` lines for the SECURE listener (prefix `listener.name.secure.`).
    fn server_props(&self) -> Vec<(String, String)> {
        let pre = "listener.name.secure.";
        let mut out = Vec::new();
        if let Some(tls) = &self.tls {
            out.push((format!("{pre}ssl.keystore.type"), "PEM".into()));
            out.push((
                format!("{pre}ssl.keystore.location"),
                tls.server.keystore.display().to_string(),
            ));
            out.push((format!("{pre}ssl.truststore.type"), "PEM".into()));
            out.push((
                format!("{pre}ssl.truststore.location"),
                tls.ca_pem.display().to_string(),
            ));
            out.push((
                format!("{pre}ssl.client.auth"),
                if tls.client_auth_required {
                    "required"
                } else {
                    "none"
                }
                .into(),
            ));
        } else {
            assert!(
                !self.protocol.uses_tls(),
                "{} needs KafkaSecurity::tls",
                self.protocol.name()
            );
        }
        if self.protocol.uses_sasl() {
            assert!(!self.sasl_mechanisms.is_empty(), "SASL without mechanisms");
            out.push((
                format!("{pre}sasl.enabled.mechanisms"),
                self.sasl_mechanisms.join(","),
            ));
            for m in &self.sasl_mechanisms {
                let jaas = match m.as_str() {
                    "PLAIN" => {
                        let users: String = self
                            .all_users()
                            .iter()
                            .map(|u| format!(" user_{}=\"{}\"", u.name, u.password))
                            .collect();
                        format!(
                            "org.apache.kafka.common.security.plain.PlainLoginModule required{users};"
                        )
                    }
                    // Kafka's default validator: unsecured (alg "none") JWTs, principal = sub.
                    "OAUTHBEARER" => {
                        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
                            .to_string()
                    }
                    m if m.starts_with("SCRAM-") => {
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                            .to_string()
                    }
                    other => panic!("unsupported SASL mechanism {other} in the harness"),
                };
                out.push((format!("{pre}{}.sasl.jaas.config", m.to_lowercase()), jaas));
            }
        }
        if self.authorizer {
            out.push((
                "authorizer.class.name".into(),
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
            ));
            out.push(("allow.everyone.if.no.acl.found".into(), "false".into()));
            let mut supers = vec!["User:ANONYMOUS".to_string(), self.admin.principal()];
            supers.extend(self.super_users.iter().cloned());
            out.push(("super.users".into(), supers.join(";")));
        }
        out
    }

    /// `kafka-storage format` arguments creating every user's SCRAM credentials.
    fn format_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if !self.protocol.uses_sasl() {
            return args;
        }
        for m in self
            .sasl_mechanisms
            .iter()
            .filter(|m| m.starts_with("SCRAM-"))
        {
            for u in self.all_users() {
                args.push("--add-scram".into());
                args.push(format!("{m}=[name={},password={}]", u.name, u.password));
            }
        }
        args
    }

    /// Java client properties for the admin identity.
    fn admin_properties(&self) -> String {
        match &self.admin {
            AdminAuth::Sasl { mechanism, user } => {
                self.client_properties(Some((mechanism, user)), None)
            }
            AdminAuth::Certificate { identity, .. } => self.client_properties(None, Some(identity)),
        }
    }

    /// Java client properties (`security.protocol`, SASL JAAS, PEM trust/key stores) for a
    /// SASL user and/or a client certificate on the SECURE listener. The same keys are the
    /// ones a kmirror mirror understands.
    pub fn client_properties(
        &self,
        sasl: Option<(&str, &SaslUser)>,
        cert: Option<&Identity>,
    ) -> String {
        let mut p = format!("security.protocol={}\n", self.protocol.name());
        if let Some((mechanism, user)) = sasl {
            let module = if mechanism == "PLAIN" {
                "org.apache.kafka.common.security.plain.PlainLoginModule"
            } else {
                "org.apache.kafka.common.security.scram.ScramLoginModule"
            };
            p.push_str(&format!(
                "sasl.mechanism={mechanism}\nsasl.jaas.config={module} required username=\"{}\" password=\"{}\";\n",
                user.name, user.password
            ));
        }
        if let Some(tls) = &self.tls {
            p.push_str(&format!(
                "ssl.truststore.type=PEM\nssl.truststore.location={}\n",
                tls.ca_pem.display()
            ));
        }
        if let Some(id) = cert {
            p.push_str(&format!(
                "ssl.keystore.type=PEM\nssl.keystore.location={}\n",
                id.keystore.display()
            ));
        }
        p
    }
}

/// An unsecured JWT (`alg: none`) for `sub`, valid `lifetime_s` from now: what Kafka's default
/// OAUTHBEARER validator accepts (principal `User:<sub>`).
pub fn unsecured_jwt(sub: &str, lifetime_s: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let header = r#"{"alg":"none"}"#;
    let claims = format!(
        r#"{{"sub":"{sub}","iat":{now},"exp":{}}}"#,
        now + lifetime_s
    );
    format!(
        "{}.{}.",
        base64url(header.as_bytes()),
        base64url(claims.as_bytes())
    )
}

fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// An ACL resource for [`KafkaCluster::add_acl`] / [`KafkaCluster::remove_acl`].
#[derive(Debug, Clone)]
pub enum AclResource {
    Topic(String),
    Group(String),
    Cluster,
}

impl AclResource {
    fn args(&self) -> Vec<String> {
        match self {
            AclResource::Topic(t) => vec!["--topic".into(), t.clone()],
            AclResource::Group(g) => vec!["--group".into(), g.clone()],
            AclResource::Cluster => vec!["--cluster".into()],
        }
    }
}

fn cluster_id() -> String {
    // KRaft cluster ids are 16 random bytes in URL-safe base64 without padding.
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = String::new();
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        n += 8;
        while n >= 6 {
            n -= 6;
            out.push(A[((bits >> n) & 63) as usize] as char);
        }
    }
    if n > 0 {
        out.push(A[((bits << (6 - n)) & 63) as usize] as char);
    }
    out
}

/// A `java` command with the Kafka classpath, small heap and quiet logging.
pub fn java_cmd(heap: &str, main_class: &str) -> Command {
    let mut c = Command::new(deps::java());
    c.args(java_args(heap, main_class));
    c
}

/// The arguments of [`java_cmd`] after `java` (to run it under another launcher).
fn java_args(heap: &str, main_class: &str) -> Vec<std::ffi::OsString> {
    vec![
        format!("-Xmx{heap}").into(),
        "-XX:+UseSerialGC".into(),
        "-XX:TieredStopAtLevel=1".into(),
        "-Djava.awt.headless=true".into(),
        format!(
            "-Dlog4j2.configurationFile={}",
            deps::log4j_config().display()
        )
        .into(),
        "-cp".into(),
        deps::kafka_classpath().into(),
        main_class.into(),
    ]
}

impl KafkaCluster {
    /// A single-node cluster with defaults.
    pub fn single() -> Self {
        Self::start_with(KafkaOptions::default())
    }

    /// A three-node cluster (quorum of 3 controllers, 3 brokers, replication factor 3).
    pub fn three() -> Self {
        Self::start_with(KafkaOptions {
            nodes: 3,
            ..KafkaOptions::default()
        })
    }

    /// Three nodes for replication fault tests (issue 12): RF 3 everywhere,
    /// `min.insync.replicas=2`, each node in its own network namespace (needs root) so a test
    /// can partition it, and shorter failure-detection timeouts than Kafka's defaults (same
    /// semantics, seconds instead of tens of seconds): a broker is fenced after 4 s without
    /// heartbeats, a follower leaves the ISR after 5 s behind.
    pub fn three_replicated() -> Self {
        Self::start_with(Self::three_replicated_options())
    }

    /// The options of [`KafkaCluster::three_replicated`], to extend.
    pub fn three_replicated_options() -> KafkaOptions {
        let props = [
            ("min.insync.replicas", "2"),
            ("transaction.state.log.min.isr", "2"),
            ("share.coordinator.state.topic.min.isr", "2"),
            ("broker.heartbeat.interval.ms", "500"),
            ("broker.session.timeout.ms", "4000"),
            ("replica.lag.time.max.ms", "5000"),
            ("unclean.leader.election.enable", "false"),
        ];
        KafkaOptions {
            nodes: 3,
            props: props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            netns: true,
            ..KafkaOptions::default()
        }
    }

    /// Formats storage and starts every node; returns once all brokers are in Metadata.
    pub fn start_with(opts: KafkaOptions) -> Self {
        assert!(opts.nodes >= 1);
        let dir = tempfile::Builder::new()
            .prefix("kmirror-kafka-")
            .tempdir()
            .expect("temp dir for Kafka");
        let n = opts.nodes;
        assert!(
            !opts.netns || (opts.proxied_ports.is_empty() && opts.security.is_none()),
            "KafkaOptions::netns does not combine with proxied_ports or security"
        );
        let net = opts.netns.then(|| NetNs::create(n));
        let host_of = |i: usize| -> String {
            net.as_ref()
                .map(|net| net.ip_of(i + 1).to_string())
                .unwrap_or_else(|| "127.0.0.1".into())
        };
        let ports: Vec<(u16, u16)> = (0..n)
            .map(|_| (proc::free_port(), proc::free_port()))
            .collect();
        let voters: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, c))| format!("{}@{}:{c}", i + 1, host_of(i)))
            .collect();
        let rf = n.min(3);
        let cid = cluster_id();
        let mut nodes = Vec::new();
        for (i, (port, cport)) in ports.iter().enumerate() {
            let id = i as i32 + 1;
            let host = host_of(i);
            let ndir = dir.path().join(format!("node{id}"));
            std::fs::create_dir_all(&ndir).expect("node dir");
            let proxied = opts
                .proxied_ports
                .get(i)
                .map(|advertised| (proc::free_port(), *advertised));
            let (mut extra_listener, mut extra_advertised, mut extra_map) = match proxied {
                Some((real, adv)) => (
                    format!(",PROXIED://127.0.0.1:{real}"),
                    format!(",PROXIED://127.0.0.1:{adv}"),
                    ",PROXIED:PLAINTEXT".to_string(),
                ),
                None => (String::new(), String::new(), String::new()),
            };
            let secure = opts.security.as_ref().map(|_| proc::free_port());
            if let (Some(sp), Some(sec)) = (secure, &opts.security) {
                extra_listener.push_str(&format!(",SECURE://127.0.0.1:{sp}"));
                extra_advertised.push_str(&format!(",SECURE://127.0.0.1:{sp}"));
                extra_map.push_str(&format!(",SECURE:{}", sec.protocol.name()));
            }
            let mut props = vec![
                ("process.roles".to_string(), "broker,controller".to_string()),
                ("node.id".into(), id.to_string()),
                if opts.dynamic_quorum {
                    (
                        "controller.quorum.bootstrap.servers".into(),
                        format!("{host}:{cport}"),
                    )
                } else {
                    ("controller.quorum.voters".into(), voters.join(","))
                },
                (
                    "listeners".into(),
                    format!(
                        "PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}{extra_listener}"
                    ),
                ),
                (
                    "advertised.listeners".into(),
                    format!("PLAINTEXT://{host}:{port}{extra_advertised}"),
                ),
                ("controller.listener.names".into(), "CONTROLLER".into()),
                (
                    "listener.security.protocol.map".into(),
                    format!("PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{extra_map}"),
                ),
                ("inter.broker.listener.name".into(), "PLAINTEXT".into()),
                ("log.dirs".into(), ndir.join("data").display().to_string()),
                ("num.partitions".into(), "1".into()),
                ("default.replication.factor".into(), rf.to_string()),
                ("offsets.topic.replication.factor".into(), rf.to_string()),
                ("offsets.topic.num.partitions".into(), "8".into()),
                (
                    "transaction.state.log.replication.factor".into(),
                    rf.to_string(),
                ),
                ("transaction.state.log.min.isr".into(), "1".into()),
                ("transaction.state.log.num.partitions".into(), "8".into()),
                (
                    "share.coordinator.state.topic.replication.factor".into(),
                    rf.to_string(),
                ),
                ("share.coordinator.state.topic.min.isr".into(), "1".into()),
                ("min.insync.replicas".into(), "1".into()),
                ("group.initial.rebalance.delay.ms".into(), "0".into()),
                ("auto.create.topics.enable".into(), "false".into()),
                ("num.network.threads".into(), "2".into()),
                ("num.io.threads".into(), "4".into()),
            ];
            if let Some(sec) = &opts.security {
                props.extend(sec.server_props());
            }
            for (k, v) in &opts.props {
                props.retain(|(pk, _)| pk != k);
                props.push((k.clone(), v.clone()));
            }
            let config = ndir.join("server.properties");
            let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            std::fs::write(&config, text).expect("write server.properties");
            nodes.push(Node {
                id,
                host,
                port: *port,
                isolated: false,
                proxied,
                secure,
                config,
                log: ndir.join("kafka.log"),
                child: None,
            });
        }
        assert!(
            !opts.dynamic_quorum || n == 1,
            "KafkaOptions::dynamic_quorum formats one node with --standalone"
        );
        let mut format_args = opts
            .security
            .as_ref()
            .map(|s| s.format_args())
            .unwrap_or_default();
        if opts.dynamic_quorum {
            format_args.push("--standalone".into());
        }
        // Format every node's storage in parallel: each is a JVM start.
        std::thread::scope(|s| {
            for node in &nodes {
                let cid = cid.clone();
                let heap = opts.heap.clone();
                let format_args = &format_args;
                s.spawn(move || format_storage(&heap, &cid, &node.config, format_args));
            }
        });
        let admin_config = opts.security.as_ref().map(|sec| {
            let path = dir.path().join("admin.properties");
            std::fs::write(&path, sec.admin_properties()).expect("write admin.properties");
            path
        });
        let mut cluster = KafkaCluster {
            dir,
            nodes,
            heap: opts.heap.clone(),
            security: opts.security.clone(),
            admin_config,
            net,
        };
        for i in 0..n {
            cluster.spawn_node(i);
        }
        cluster.wait_ready(Duration::from_secs(120));
        cluster
    }

    fn spawn_node(&mut self, i: usize) {
        let heap = self.heap.clone();
        let node = &mut self.nodes[i];
        let log = File::options()
            .create(true)
            .append(true)
            .open(&node.log)
            .expect("open kafka log");
        let mut cmd = match &self.net {
            Some(net) => {
                let mut c = net.command(i + 1, deps::java().as_ref());
                c.args(java_args(&heap, "kafka.Kafka"));
                c
            }
            None => java_cmd(&heap, "kafka.Kafka"),
        };
        let child = cmd
            .arg(&node.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("spawn kafka.Kafka");
        node.child = Some(ChildGuard(child));
    }

    fn wait_ready(&mut self, timeout: Duration) {
        let want: Vec<i32> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some() && !n.isolated)
            .map(|n| n.id)
            .collect();
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some() && !n.isolated)
            .map(|n| format!("{}:{}", n.host, n.port))
            .collect();
        let logs: Vec<PathBuf> = self.nodes.iter().map(|n| n.log.clone()).collect();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            for n in self.nodes.iter_mut() {
                if let Some(c) = n.child.as_mut() {
                    if let Ok(Some(status)) = c.0.try_wait() {
                        panic!(
                            "Kafka node {} exited ({status}) while starting:\n{}",
                            n.id,
                            proc::tail(&n.log, 40)
                        );
                    }
                }
            }
            let ready = addrs.iter().all(|a| {
                WireClient::connect(a)
                    .and_then(|mut c| c.metadata(None))
                    .map(|md| {
                        let ids: Vec<i32> = md.brokers.iter().map(|b| b.node_id.0).collect();
                        want.iter().all(|w| ids.contains(w))
                    })
                    .unwrap_or(false)
            });
            if ready {
                return;
            }
            if std::time::Instant::now() > deadline {
                let tails: Vec<String> = logs.iter().map(|l| proc::tail(l, 30)).collect();
                panic!(
                    "Kafka cluster not ready after {timeout:?}:\n{}",
                    tails.join("\n----\n")
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// `host:p1,host:p2,…` of the nodes that are running and not isolated (the host is
    /// 127.0.0.1, or each node's namespace address with [`KafkaOptions::netns`]).
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some() && !n.isolated)
            .map(|n| format!("{}:{}", n.host, n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Address of node `id` (1-based, as Kafka's node.id).
    pub fn addr_of(&self, id: i32) -> String {
        let n = self.node(id);
        format!("{}:{}", n.host, n.port)
    }

    /// The real address of node `id`'s PROXIED listener: where its proxy forwards to.
    /// Panics if the cluster was started without [`KafkaOptions::proxied_ports`].
    pub fn proxied_listener_of(&self, id: i32) -> String {
        let (real, _) = self
            .node(id)
            .proxied
            .unwrap_or_else(|| panic!("Kafka node {id} has no PROXIED listener"));
        format!("127.0.0.1:{real}")
    }

    /// The proxy addresses the PROXIED listeners advertise, as a bootstrap list: a client
    /// given this reaches every broker only through its proxy.
    pub fn proxied_bootstrap(&self) -> String {
        self.nodes
            .iter()
            .filter_map(|n| n.proxied.map(|(_, adv)| format!("127.0.0.1:{adv}")))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn node(&self, id: i32) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no Kafka node {id}"))
    }

    fn index(&self, id: i32) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id == id)
            .unwrap_or_else(|| panic!("no Kafka node {id}"))
    }

    /// Node `id`'s `server.properties` (what `kafka-metadata-quorum --command-config`
    /// takes for add-controller).
    pub fn node_config(&self, id: i32) -> PathBuf {
        self.nodes[self.index(id)].config.clone()
    }

    /// Node ids, 1-based.
    pub fn node_ids(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The node id currently leading `topic`/`partition`.
    pub fn leader_of(&self, topic: &str, partition: i32) -> i32 {
        WireClient::connect(self.bootstrap().split(',').next().expect("a running node"))
            .and_then(|mut c| c.partition_info(topic, partition))
            .unwrap_or_else(|e| panic!("leader of {topic}-{partition}: {e}"))
            .leader_id
    }

    /// Cuts node `id` off the network (it keeps running): from the other nodes and from the
    /// test's clients. Needs [`KafkaOptions::netns`].
    pub fn isolate_node(&mut self, id: i32) {
        let i = self.index(id);
        self.net
            .as_ref()
            .expect("isolate_node needs KafkaOptions::netns")
            .isolate(i + 1);
        self.nodes[i].isolated = true;
    }

    /// Joins node `id` to the network again after [`KafkaCluster::isolate_node`].
    pub fn heal_node(&mut self, id: i32) {
        let i = self.index(id);
        self.net
            .as_ref()
            .expect("heal_node needs KafkaOptions::netns")
            .heal(i + 1);
        self.nodes[i].isolated = false;
    }

    /// The network namespaces of the nodes, with [`KafkaOptions::netns`].
    pub fn netns(&self) -> Option<&NetNs> {
        self.net.as_ref()
    }

    /// SIGKILL one node.
    pub fn kill_node(&mut self, id: i32) {
        let i = self.index(id);
        if let Some(mut c) = self.nodes[i].child.take() {
            proc::kill_now(&mut c.0);
        }
    }

    /// SIGTERM one node and wait for it to exit (controlled shutdown).
    pub fn stop_node(&mut self, id: i32) {
        let i = self.index(id);
        if let Some(mut c) = self.nodes[i].child.take() {
            proc::terminate(&mut c.0, Duration::from_secs(60));
        }
    }

    /// Starts a stopped or killed node again with its data; waits until it is back.
    pub fn start_node(&mut self, id: i32) {
        let i = self.index(id);
        assert!(self.nodes[i].child.is_none(), "node {id} is running");
        self.spawn_node(i);
        self.wait_ready(Duration::from_secs(120));
    }

    /// PID of a running node.
    pub fn pid_of(&self, id: i32) -> Option<u32> {
        self.node(id).child.as_ref().map(|c| c.0.id())
    }

    /// Where node logs and data live.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The broker's own log for node `id`.
    pub fn log_of(&self, id: i32) -> PathBuf {
        self.node(id).log.clone()
    }

    /// Creates a topic through the wire (replication = min(nodes, 3)) and waits until every
    /// partition has a leader.
    pub fn create_topic(&self, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
        let rf = self.nodes.len().min(3) as i16;
        let boot = self.bootstrap();
        let first = boot.split(',').next().expect("a running node");
        let mut c = WireClient::connect(first).expect("connect to Kafka");
        let code = c
            .create_topic(topic, partitions, rf, configs)
            .expect("CreateTopics");
        assert_eq!(code, 0, "CreateTopics {topic} answered error code {code}");
        proc::wait_for(Duration::from_secs(30), "topic leaders", || {
            (0..partitions)
                .all(|p| c.partition_info(topic, p).is_ok())
                .then_some(())
        });
    }
}

/// Security: the SECURE listener and runtime changes of credentials and ACLs.
impl KafkaCluster {
    fn security(&self) -> &KafkaSecurity {
        self.security
            .as_ref()
            .expect("the cluster was started without KafkaOptions::security")
    }

    /// `127.0.0.1:p1,…` of the running nodes' SECURE listeners.
    pub fn secure_bootstrap(&self) -> String {
        self.security();
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter_map(|n| n.secure.map(|p| format!("127.0.0.1:{p}")))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The security settings the cluster was started with.
    pub fn security_settings(&self) -> &KafkaSecurity {
        self.security()
    }

    /// The admin identity's Java client properties file (`--command-config`).
    pub fn admin_config(&self) -> &Path {
        self.security();
        self.admin_config.as_deref().expect("admin.properties")
    }

    /// Runs a Kafka admin tool against the SECURE listener as the admin identity.
    pub fn admin_tool(&self, main_class: &str, args: &[&str]) -> proc::Ran {
        let boot = self.secure_bootstrap();
        let first = boot.split(',').next().expect("a running node").to_string();
        let mut cmd = java_cmd("256m", main_class);
        cmd.arg("--bootstrap-server")
            .arg(first)
            .arg("--command-config")
            .arg(self.admin_config())
            .args(args);
        proc::run_ok(&mut cmd, Duration::from_secs(120))
    }

    /// Creates or replaces `user`'s SCRAM credential for `mechanism` (kafka-configs).
    pub fn set_scram_password(&self, mechanism: &str, user: &str, password: &str) {
        self.admin_tool(
            "kafka.admin.ConfigCommand",
            &[
                "--alter",
                "--add-config",
                &format!("{mechanism}=[iterations=8192,password={password}]"),
                "--entity-type",
                "users",
                "--entity-name",
                user,
            ],
        );
    }

    /// Deletes `user`'s SCRAM credential for `mechanism`.
    pub fn delete_scram(&self, mechanism: &str, user: &str) {
        self.admin_tool(
            "kafka.admin.ConfigCommand",
            &[
                "--alter",
                "--delete-config",
                mechanism,
                "--entity-type",
                "users",
                "--entity-name",
                user,
            ],
        );
    }

    /// Grants `principal` (e.g. `User:mirror`) `operation` (Read, Describe, DescribeConfigs…)
    /// on `resource` (kafka-acls --add, literal pattern, any host).
    pub fn add_acl(&self, principal: &str, operation: &str, resource: &AclResource) {
        self.acl("--add", principal, operation, resource);
    }

    /// Removes exactly that grant (kafka-acls --remove --force).
    pub fn remove_acl(&self, principal: &str, operation: &str, resource: &AclResource) {
        self.acl("--remove", principal, operation, resource);
    }

    fn acl(&self, verb: &str, principal: &str, operation: &str, resource: &AclResource) {
        let mut args: Vec<String> = vec![
            verb.into(),
            "--allow-principal".into(),
            principal.into(),
            "--operation".into(),
            operation.into(),
        ];
        args.extend(resource.args());
        if verb == "--remove" {
            args.push("--force".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.admin_tool("org.apache.kafka.tools.AclCommand", &args);
    }

    /// Lists the ACLs of `principal` as kafka-acls prints them.
    pub fn list_acls(&self, principal: &str) -> String {
        self.admin_tool(
            "org.apache.kafka.tools.AclCommand",
            &["--list", "--principal", principal],
        )
        .stdout
    }
}

fn format_storage(heap: &str, cluster_id: &str, config: &Path, extra: &[String]) {
    // `--cluster-id=ID` in one argument: a random id may start with '-', which argparse
    // would otherwise take for a flag.
    let out = java_cmd(heap, "kafka.tools.StorageTool")
        .args(["format", "--ignore-formatted"])
        .arg(format!("--cluster-id={cluster_id}"))
        .arg("-c")
        .arg(config)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("spawn StorageTool");
    assert!(
        out.status.success(),
        "StorageTool format failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl crate::BrokerUnderTest for KafkaCluster {
    fn bootstrap(&self) -> String {
        KafkaCluster::bootstrap(self)
    }
    fn restart(&mut self) {
        for id in self.node_ids() {
            self.stop_node(id);
        }
        for i in 0..self.nodes.len() {
            self.spawn_node(i);
        }
        self.wait_ready(Duration::from_secs(120));
    }
    fn kill(&mut self) {
        for id in self.node_ids() {
            self.kill_node(id);
        }
    }
    fn start_again(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                self.spawn_node(i);
            }
        }
        self.wait_ready(Duration::from_secs(120));
    }
    fn rss_kib(&self) -> u64 {
        proc::rss_kib(self.pid_of(self.nodes[0].id).expect("node 1 running"))
    }
    fn is_alive(&mut self) -> bool {
        self.nodes.iter_mut().all(|n| {
            n.child
                .as_mut()
                .map(|c| matches!(c.0.try_wait(), Ok(None)))
                .unwrap_or(false)
        })
    }
}
