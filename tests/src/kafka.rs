//! Apache Kafka 4.1.1 clusters in KRaft combined mode (every node broker + controller), run
//! from the Maven Central jars on loopback ports with temp dirs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::deps;
use crate::proc::{self, ChildGuard};
use crate::wire::WireClient;

/// One node's fixed identity; survives restarts.
#[derive(Debug)]
struct Node {
    id: i32,
    port: u16,
    /// The PROXIED listener's real port, when [`KafkaOptions::proxied_ports`] asked for one.
    proxied: Option<(u16, u16)>,
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
}

impl Default for KafkaOptions {
    fn default() -> Self {
        KafkaOptions {
            nodes: 1,
            props: Vec::new(),
            heap: "512m".into(),
            proxied_ports: Vec::new(),
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
    c.arg(format!("-Xmx{heap}"))
        .arg("-XX:+UseSerialGC")
        .arg("-XX:TieredStopAtLevel=1")
        .arg("-Djava.awt.headless=true")
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            deps::log4j_config().display()
        ))
        .arg("-cp")
        .arg(deps::kafka_classpath())
        .arg(main_class);
    c
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

    /// Formats storage and starts every node; returns once all brokers are in Metadata.
    pub fn start_with(opts: KafkaOptions) -> Self {
        assert!(opts.nodes >= 1);
        let dir = tempfile::Builder::new()
            .prefix("kmirror-kafka-")
            .tempdir()
            .expect("temp dir for Kafka");
        let n = opts.nodes;
        let ports: Vec<(u16, u16)> = (0..n)
            .map(|_| (proc::free_port(), proc::free_port()))
            .collect();
        let voters: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, c))| format!("{}@127.0.0.1:{c}", i + 1))
            .collect();
        let rf = n.min(3);
        let cid = cluster_id();
        let mut nodes = Vec::new();
        for (i, (port, cport)) in ports.iter().enumerate() {
            let id = i as i32 + 1;
            let ndir = dir.path().join(format!("node{id}"));
            std::fs::create_dir_all(&ndir).expect("node dir");
            let proxied = opts
                .proxied_ports
                .get(i)
                .map(|advertised| (proc::free_port(), *advertised));
            let (extra_listener, extra_advertised, extra_map) = match proxied {
                Some((real, adv)) => (
                    format!(",PROXIED://127.0.0.1:{real}"),
                    format!(",PROXIED://127.0.0.1:{adv}"),
                    ",PROXIED:PLAINTEXT",
                ),
                None => (String::new(), String::new(), ""),
            };
            let mut props = vec![
                ("process.roles".to_string(), "broker,controller".to_string()),
                ("node.id".into(), id.to_string()),
                ("controller.quorum.voters".into(), voters.join(",")),
                (
                    "listeners".into(),
                    format!(
                        "PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}{extra_listener}"
                    ),
                ),
                (
                    "advertised.listeners".into(),
                    format!("PLAINTEXT://127.0.0.1:{port}{extra_advertised}"),
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
            for (k, v) in &opts.props {
                props.retain(|(pk, _)| pk != k);
                props.push((k.clone(), v.clone()));
            }
            let config = ndir.join("server.properties");
            let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            std::fs::write(&config, text).expect("write server.properties");
            nodes.push(Node {
                id,
                port: *port,
                proxied,
                config,
                log: ndir.join("kafka.log"),
                child: None,
            });
        }
        // Format every node's storage in parallel: each is a JVM start.
        std::thread::scope(|s| {
            for node in &nodes {
                let cid = cid.clone();
                let heap = opts.heap.clone();
                s.spawn(move || format_storage(&heap, &cid, &node.config));
            }
        });
        let mut cluster = KafkaCluster {
            dir,
            nodes,
            heap: opts.heap.clone(),
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
        let child = java_cmd(&heap, "kafka.Kafka")
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
            .filter(|n| n.child.is_some())
            .map(|n| n.id)
            .collect();
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| format!("127.0.0.1:{}", n.port))
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

    /// `127.0.0.1:p1,127.0.0.1:p2,…` of the nodes that are running.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Address of node `id` (1-based, as Kafka's node.id).
    pub fn addr_of(&self, id: i32) -> String {
        let n = self.node(id);
        format!("127.0.0.1:{}", n.port)
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

fn format_storage(heap: &str, cluster_id: &str, config: &Path) {
    // `--cluster-id=ID` in one argument: a random id may start with '-', which argparse
    // would otherwise take for a flag.
    let out = java_cmd(heap, "kafka.tools.StorageTool")
        .args(["format", "--ignore-formatted"])
        .arg(format!("--cluster-id={cluster_id}"))
        .arg("-c")
        .arg(config)
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
