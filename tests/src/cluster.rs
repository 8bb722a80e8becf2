//! A kmirror cluster of N nodes on loopback ports (issue 12): each node runs `kmirror serve
//! --node-id I --listen 127.0.0.1:P --controller-listen 127.0.0.1:C --quorum
//! 1@127.0.0.1:C1,... --data-dir D` (KRaft combined mode: every node is a voter and a
//! broker). Nodes are [`KmirrorNode`]s, so each keeps its log file across restarts like the
//! single-node harness, and its ports and data dir.
//!
//! With [`ClusterOpts::netns`] each node runs in a network namespace of its own
//! ([`crate::netns`], needs root) on `10.x.y.(10+i):9092` (controller listener `:9093`), so
//! [`KmirrorCluster::isolate`] can cut one node off the network while it keeps running.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;

use crate::kmirror::KmirrorNode;
use crate::netns::NetNs;
use crate::proc;
use crate::wire::WireClient;

/// Settings of a test cluster.
#[derive(Debug, Clone)]
pub struct ClusterOpts {
    /// Extra `serve` arguments for every node (e.g. `["--cores", "1"]`).
    pub extra: Vec<String>,
    /// `--broker-session-timeout-ms` (Kafka's `broker.session.timeout.ms`).
    pub session_timeout_ms: u64,
    /// Each node in a network namespace of its own, for [`KmirrorCluster::isolate`].
    pub netns: bool,
}

impl Default for ClusterOpts {
    fn default() -> Self {
        ClusterOpts {
            extra: vec!["--cores".into(), "1".into()],
            session_timeout_ms: 9000,
            netns: false,
        }
    }
}

/// A running kmirror cluster; node ids are 1..=n. Dropping it kills every node.
#[derive(Debug)]
pub struct KmirrorCluster {
    nodes: Vec<KmirrorNode>,
    quorum: String,
    /// Per node: cut off by [`KmirrorCluster::isolate`].
    isolated: Vec<bool>,
    /// After `nodes`: the processes die before their namespaces go.
    net: Option<NetNs>,
}

impl KmirrorCluster {
    /// Starts `n` nodes and waits until each one lists all `n` brokers in Metadata (all
    /// registered and unfenced, a Raft leader elected).
    pub fn start(n: usize, opts: ClusterOpts) -> Self {
        assert!(n >= 1, "at least one node");
        let net = opts.netns.then(|| NetNs::create(n));
        // In a namespace every node has the ports to itself.
        let host_of = |i: usize| -> String {
            net.as_ref()
                .map(|net| net.ip_of(i + 1).to_string())
                .unwrap_or_else(|| "127.0.0.1".into())
        };
        let controller_ports: Vec<u16> = (0..n)
            .map(|_| {
                if net.is_some() {
                    9093
                } else {
                    proc::free_port()
                }
            })
            .collect();
        let quorum = controller_ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@{}:{p}", i + 1, host_of(i)))
            .collect::<Vec<_>>()
            .join(",");
        let session = opts.session_timeout_ms.to_string();
        let nodes = controller_ports
            .iter()
            .enumerate()
            .map(|(i, cport)| {
                let id = (i + 1).to_string();
                let controller = format!("{}:{cport}", host_of(i));
                let mut extra: Vec<&str> = vec![
                    "--node-id",
                    &id,
                    "--controller-listen",
                    &controller,
                    "--quorum",
                    &quorum,
                    "--broker-session-timeout-ms",
                    &session,
                ];
                extra.extend(opts.extra.iter().map(String::as_str));
                match &net {
                    Some(net) => KmirrorNode::builder()
                        .netns(net.ns_of(i + 1), &host_of(i), 9092)
                        .args(&extra)
                        .start(),
                    None => KmirrorNode::builder().args(&extra).start(),
                }
            })
            .collect();
        let c = KmirrorCluster {
            nodes,
            quorum,
            isolated: vec![false; n],
            net,
        };
        for i in 1..=n {
            c.wait_brokers(i, n, Duration::from_secs(60));
        }
        c
    }

    /// The quorum string (`1@127.0.0.1:C1,...`).
    pub fn quorum(&self) -> &str {
        &self.quorum
    }

    /// Every node's client address, comma-separated.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.addr())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Node `id` (1-based).
    pub fn node(&self, id: usize) -> &KmirrorNode {
        &self.nodes[id - 1]
    }

    pub fn node_mut(&mut self, id: usize) -> &mut KmirrorNode {
        &mut self.nodes[id - 1]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// SIGKILL node `id`.
    pub fn kill(&mut self, id: usize) {
        self.node_mut(id).kill_now();
    }

    /// SIGTERM node `id` and wait; whether it exited cleanly.
    pub fn stop(&mut self, id: usize) -> bool {
        self.node_mut(id).stop()
    }

    /// Starts node `id` again (after `kill` or `stop`; a running node is stopped first)
    /// with its ports and data dir.
    pub fn restart(&mut self, id: usize) {
        let node = self.node_mut(id);
        if node.alive() {
            node.stop();
        }
        node.start_again();
    }

    /// Cuts node `id` off the network (from the other nodes and from clients); it keeps
    /// running. Needs [`ClusterOpts::netns`].
    pub fn isolate(&mut self, id: usize) {
        self.net
            .as_ref()
            .expect("isolate needs ClusterOpts::netns")
            .isolate(id);
        self.isolated[id - 1] = true;
    }

    /// Joins node `id` to the network again after [`KmirrorCluster::isolate`].
    pub fn heal(&mut self, id: usize) {
        self.net
            .as_ref()
            .expect("heal needs ClusterOpts::netns")
            .heal(id);
        self.isolated[id - 1] = false;
    }

    /// Client addresses of the nodes that run and are not isolated, comma-separated.
    pub fn reachable_bootstrap(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, node)| !self.isolated[*i] && node.started())
            .map(|(_, node)| node.addr())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The broker ids node `via` lists in Metadata (sorted).
    pub fn listed_brokers(&self, via: usize) -> Option<Vec<i32>> {
        let mut c = WireClient::connect(&self.node(via).addr()).ok()?;
        let m = c.metadata(Some(&[])).ok()?;
        let mut ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
        ids.sort_unstable();
        Some(ids)
    }

    /// Waits until node `via` lists `count` brokers.
    pub fn wait_brokers(&self, via: usize, count: usize, timeout: Duration) -> Vec<i32> {
        proc::wait_for(
            timeout,
            &format!("node {via} to list {count} brokers"),
            || self.listed_brokers(via).filter(|b| b.len() == count),
        )
    }

    /// The last `n` lines of every node's log (for assertion messages).
    pub fn logs(&self, n: usize) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                format!(
                    "---- node {} ----\n{}",
                    i + 1,
                    proc::tail(&node.log_path(), n)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// What a three-node scenario needs from a cluster, kmirror or Apache Kafka (node ids
/// 1..=3), so one scenario runs on both. Unlike [`crate::faults::ClusterUnderTest`],
/// `restart` returns once the node serves, without waiting for it to be registered.
pub trait ThreeNodes {
    fn name(&self) -> &'static str;
    fn addr(&self, id: i32) -> String;
    fn kill(&mut self, id: i32);
    fn restart(&mut self, id: i32);
}

impl ThreeNodes for KmirrorCluster {
    fn name(&self) -> &'static str {
        "kmirror"
    }
    fn addr(&self, id: i32) -> String {
        self.node(id as usize).addr()
    }
    fn kill(&mut self, id: i32) {
        KmirrorCluster::kill(self, id as usize)
    }
    fn restart(&mut self, id: i32) {
        KmirrorCluster::restart(self, id as usize)
    }
}

impl ThreeNodes for crate::kafka::KafkaCluster {
    fn name(&self) -> &'static str {
        "Kafka"
    }
    fn addr(&self, id: i32) -> String {
        self.addr_of(id)
    }
    fn kill(&mut self, id: i32) {
        self.kill_node(id)
    }
    fn restart(&mut self, id: i32) {
        self.start_node(id)
    }
}

impl KmirrorCluster {
    /// Runs `f` on the cluster; if it panics, prints the last `lines` of every node's log
    /// before passing the panic on.
    pub fn dump_logs_on_panic<R>(&mut self, lines: usize, f: impl FnOnce(&mut Self) -> R) -> R {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        match r {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{}", self.logs(lines));
                std::panic::resume_unwind(e);
            }
        }
    }
}

/// One partition as `kafka-topics --describe` prints it (lists in the tool's order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A `1,2,3` broker id list; an id that does not parse is -2.
fn broker_ids(list: &str) -> Vec<i32> {
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap_or(-2))
        .collect()
}

/// `kafka-topics --describe --topic topic` through `addr`, by partition (whatever the tool
/// listed: fewer partitions, or none, if it failed).
pub fn describe_topic(addr: &str, topic: &str) -> BTreeMap<i32, Described> {
    let ran = crate::java::run_tool(
        crate::java::tools::TOPIC_COMMAND,
        &["--bootstrap-server", addr, "--describe", "--topic", topic],
        Duration::from_secs(60),
    );
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
        out.insert(
            p,
            Described {
                leader: f.get("Leader").and_then(|l| l.parse().ok()).unwrap_or(-2),
                replicas: broker_ids(f.get("Replicas").copied().unwrap_or("")),
                isr: broker_ids(f.get("Isr").copied().unwrap_or("")),
            },
        );
    }
    out
}

/// Every byte of a partition's log in `dir` (a stopped node's files), and its log end.
pub fn log_bytes(dir: &Path) -> (i64, Bytes) {
    use kmirror_log::{Log, LogConfig};
    let log = Log::open(dir, LogConfig::default()).unwrap();
    let end = log.log_end_offset();
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < end {
        let r = log.read(at, 1 << 20, end).unwrap();
        assert!(!r.records.is_empty(), "{} at {at:?}", dir.display());
        for h in kmirror_log::batch::BatchIter::headers(&r.records) {
            let (h, _, _) = h.unwrap();
            at = kmirror_types::Offset(h.base_offset() + i64::from(h.last_offset_delta()) + 1);
        }
        out.extend_from_slice(&r.records);
    }
    (end.get(), Bytes::from(out))
}

impl KmirrorCluster {
    /// Stops every node cleanly (SIGTERM), asserting each exits cleanly, so its files can
    /// be read.
    pub fn stop_all(&mut self) {
        for id in 1..=self.len() {
            assert!(self.stop(id), "node {id} stops cleanly");
        }
    }

    /// Every node's copy of `topic`-`partition` as [`log_bytes`] reads it, by node (node 1
    /// first); the nodes must be stopped.
    pub fn replica_logs(&self, topic: &str, partition: i32) -> Vec<(i64, Bytes)> {
        (1..=self.len())
            .map(|id| {
                log_bytes(
                    &self
                        .node(id)
                        .data_dir()
                        .join("topics")
                        .join(format!("{topic}-{partition}")),
                )
            })
            .collect()
    }
}

/// Three Apache Kafka nodes (KRaft combined mode) fencing a broker after `session_ms`
/// without heartbeats (every 500 ms), as the three-node kmirror scenarios run.
pub fn kafka_three_nodes(session_ms: u64) -> crate::kafka::KafkaCluster {
    crate::kafka::KafkaCluster::start_with(crate::kafka::KafkaOptions {
        nodes: 3,
        props: vec![
            ("broker.session.timeout.ms".into(), session_ms.to_string()),
            ("broker.heartbeat.interval.ms".into(), "500".into()),
        ],
        ..crate::kafka::KafkaOptions::default()
    })
}

/// What a sequence producer (Java `SeqProducer`, `seq_producer.py`) printed: its
/// (partition, seq, offset) ACK lines, the DONE line's acked and error counts, and the ERR
/// lines' error names.
pub type Produced = (Vec<(i32, u64, i64)>, u64, u64, Vec<String>);

/// Runs a sequence producer to its end (`what` names it in messages); panics if it prints
/// no DONE line within `timeout`.
pub fn run_seq_producer(
    cmd: &mut std::process::Command,
    what: &str,
    timeout: Duration,
) -> Produced {
    let ran = proc::run(cmd, timeout);
    let mut acks = Vec::new();
    let mut errs = Vec::new();
    let mut done = None;
    for l in ran.stdout.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["ACK", p, s, o] => {
                acks.push((p.parse().unwrap(), s.parse().unwrap(), o.parse().unwrap()))
            }
            ["ERR", _, _, e] => errs.push(e.to_string()),
            ["DONE", a, e] => done = Some((a.parse().unwrap(), e.parse().unwrap())),
            _ => {}
        }
    }
    let (acked, errors) = done.unwrap_or_else(|| {
        panic!(
            "{what} did not finish:\n{}\n{}",
            proc::last_lines(&ran.stdout, 20),
            proc::last_lines(&ran.stderr, 30)
        )
    });
    (acks, acked, errors, errs)
}
