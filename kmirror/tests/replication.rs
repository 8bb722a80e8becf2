//! Partition replication on three real brokers in one process (issue 12, step 2), before
//! `serve --quorum` exists: every node's metadata store gets the same commands (brokers,
//! an RF=3 topic) through the quorum's own apply function, so the nodes agree on replicas,
//! ISR and leader as a Raft-published document would make them. Everything after that is
//! the real data path over loopback TCP: followers' replica fetchers, the leader's replica
//! state, acks=all, ISR shrink through AlterPartition, OffsetsForLeaderEpoch truncation.
//! Logs are compared byte for byte by opening each node's segment files after a stop.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kmirror::node::{RunningBroker, ServerConfig};
use kmirror_control::metadata::{BrokerEndpoint, BrokerRegistration};
use kmirror_control::quorum::command::{ClusterCommand, MetadataCommand};
use kmirror_engine::EngineConfig;
use kmirror_log::{Log, LogConfig};
use kmirror_tests::records::batch;
use kmirror_tests::wire::{WireClient, WireError};
use kmirror_types::Offset;

const TOPIC: &str = "replicated";
const LAG_MS: u64 = 1_500;

struct Node {
    id: i32,
    lag_ms: u64,
    dir: PathBuf,
    /// The listener address, kept across restarts (it is registered in the metadata).
    listen: String,
    running: Option<RunningBroker>,
}

impl Node {
    fn start(id: i32, dir: PathBuf, lag_ms: u64) -> Node {
        let mut n = Node {
            id,
            lag_ms,
            dir,
            listen: "127.0.0.1:0".into(),
            running: None,
        };
        n.restart();
        n
    }

    fn restart(&mut self) {
        std::fs::create_dir_all(&self.dir).unwrap();
        let broker = kmirror::node::start(
            ServerConfig {
                listeners: vec![kmirror_net::ListenerSpec::plaintext(&self.listen).unwrap()],
                tls: Default::default(),
                node_id: self.id,
                data_dir: self.dir.clone(),
                max_request_bytes: 8 << 20,
                auto_create_topics: false,
                default_partitions: 1,
                engine: EngineConfig {
                    cores: 1,
                    pin: false,
                    replica_lag_time_max_ms: self.lag_ms,
                    ..EngineConfig::default()
                },
                authz: Default::default(),
                sasl: Default::default(),
                groups: Default::default(),
            },
            None,
        )
        .unwrap();
        self.listen = broker.addr().to_string();
        self.running = Some(broker);
    }

    fn broker(&self) -> &RunningBroker {
        self.running.as_ref().expect("running")
    }

    fn addr(&self) -> String {
        self.broker().addr().to_string()
    }

    fn stop(&mut self) {
        if let Some(b) = self.running.take() {
            b.stop();
        }
    }

    fn apply(&self, cmd: MetadataCommand) {
        self.broker()
            .broker()
            .cluster
            .propose_blocking(ClusterCommand::Metadata(cmd))
            .unwrap();
    }

    fn leader_and_epoch(&self) -> (i32, i32) {
        let m = self.broker().broker().cluster.snapshot();
        let t = &m.topics[TOPIC];
        (t.assignments[0].leader, t.leader_epochs[0])
    }

    fn isr(&self) -> Vec<i32> {
        let m = self.broker().broker().cluster.snapshot();
        let mut isr = m.topics[TOPIC].assignments[0].isr.clone();
        isr.sort();
        isr
    }

    /// The partition's records as stored: every byte from the log start to the log end.
    fn log_bytes(&self) -> (i64, Bytes) {
        assert!(self.running.is_none(), "read the files of a stopped node");
        let log = Log::open(
            &self.dir.join("topics").join(format!("{TOPIC}-0")),
            LogConfig::default(),
        )
        .unwrap();
        let end = log.log_end_offset();
        let mut out = Vec::new();
        let mut at = log.log_start_offset();
        while at < end {
            let r = log.read(at, 1 << 20, end).unwrap();
            assert!(!r.records.is_empty());
            let mut next = at;
            for (h, _, _) in kmirror_log::batch::BatchIter::headers(&r.records).map(|r| r.unwrap())
            {
                next = Offset(h.base_offset() + i64::from(h.last_offset_delta()) + 1);
            }
            out.extend_from_slice(&r.records);
            at = next;
        }
        (end.get(), Bytes::from(out))
    }
}

fn registration(id: i32, addr: &str) -> BrokerRegistration {
    let (host, port) = addr.rsplit_once(':').unwrap();
    BrokerRegistration {
        id,
        incarnation: uuid::Uuid::new_v4(),
        endpoints: vec![BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host: host.into(),
            port: port.parse().unwrap(),
            security_protocol: 0,
        }],
        rack: None,
        fenced: false,
    }
}

/// Three nodes that agree on brokers and on an RF=3 topic led by node 1.
fn cluster(root: &Path, min_insync: &str, lag_ms: u64) -> Vec<Node> {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    let nodes: Vec<Node> = (1..=3)
        .map(|id| Node::start(id, root.join(format!("node{id}")), lag_ms))
        .collect();
    let regs: Vec<BrokerRegistration> = nodes
        .iter()
        .map(|n| registration(n.id, &n.addr()))
        .collect();
    let id = uuid::Uuid::new_v4();
    for n in &nodes {
        for r in &regs {
            n.apply(MetadataCommand::RegisterBroker(r.clone()));
        }
        n.apply(MetadataCommand::CreateTopic {
            name: TOPIC.into(),
            partitions: 1,
            configs: BTreeMap::from([("min.insync.replicas".into(), min_insync.into())]),
            id,
            assignments: vec![vec![1, 2, 3]],
        });
    }
    nodes
}

fn eventually(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Until the node applies its role (a replicated partition opens leaderless), Produce is
/// answered NOT_LEADER_OR_FOLLOWER (6), which appends nothing; clients retry it.
fn wait_led(c: &mut WireClient) {
    eventually(
        "the leader's role applied",
        Duration::from_secs(10),
        || match c.list_offset(TOPIC, 0, -1) {
            Ok(_) => true,
            Err(WireError::Broker { code: 6, .. }) => false,
            Err(e) => panic!("{e:?}"),
        },
    );
}

fn values(round: usize) -> Vec<Vec<u8>> {
    (0..5)
        .map(|i| format!("r{round}-{i}").into_bytes())
        .collect()
}

fn produce(c: &mut WireClient, round: usize) -> (i16, i64, Duration) {
    let v = values(round);
    let refs: Vec<&[u8]> = v.iter().map(|v| v.as_slice()).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let t = Instant::now();
    let r = c.produce_response(TOPIC, 0, batch(&refs, now)).unwrap();
    (r.error_code, r.base_offset, t.elapsed())
}

/// One acks=all Produce of one batch with `timeout_ms`; returns the partition's error code.
fn produce_with_timeout(c: &mut WireClient, timeout_ms: i32) -> i16 {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let v = c.version_of::<ProduceRequest>().unwrap();
    let topic = if v >= 13 {
        TopicProduceData::default().with_topic_id(c.partition_info(TOPIC, 0).unwrap().topic_id)
    } else {
        TopicProduceData::default().with_name(TopicName(StrBytes::from_static_str(TOPIC)))
    };
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![topic.with_partition_data(vec![
            PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&[b"t"], kmirror_engine::now_ms()))),
        ])]);
    let resp = c.send_at(req, v).unwrap();
    resp.responses[0].partition_responses[0].error_code
}

#[test]
fn three_nodes_replicate_acks_all_shrink_the_isr_and_refuse_below_min_insync() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = cluster(root.path(), "2", LAG_MS);
    let mut leader = WireClient::connect(&nodes[0].addr()).unwrap();

    // acks=all answers only once the followers have the batch: 20 rounds of 5 records.
    wait_led(&mut leader);
    for round in 0..20 {
        let (code, base, _) = produce(&mut leader, round);
        assert_eq!((code, base), (0, round as i64 * 5), "round {round}");
    }
    // The high watermark (ListOffsets latest) is the replicated end.
    assert_eq!(leader.list_offset(TOPIC, 0, -1).unwrap(), 100);
    // Followers refuse consumers: NOT_LEADER_OR_FOLLOWER (6).
    let mut follower = WireClient::connect(&nodes[1].addr()).unwrap();
    match follower.list_offset(TOPIC, 0, -1) {
        Err(WireError::Broker { code, .. }) => assert_eq!(code, 6),
        other => panic!("a follower answered ListOffsets: {other:?}"),
    }

    // Node 3 goes away: the next acks=all produce waits until the leader shrinks the ISR to
    // {1,2} (replica.lag.time.max.ms) through AlterPartition, then succeeds (min.insync 2).
    nodes[2].stop();
    let (code, base, took) = produce(&mut leader, 20);
    assert_eq!((code, base), (0, 100));
    assert!(
        took >= Duration::from_millis(500),
        "waited for the shrink: {took:?}"
    );
    eventually("ISR {1,2}", Duration::from_secs(10), || {
        nodes[0].isr() == vec![1, 2]
    });

    // min.insync.replicas=3 with two in sync: NOT_ENOUGH_REPLICAS (19), nothing appended.
    nodes[0].apply(MetadataCommand::ReplaceConfigs {
        name: TOPIC.into(),
        configs: BTreeMap::from([("min.insync.replicas".into(), "3".into())]),
    });
    let (code, _, _) = produce(&mut leader, 21);
    assert_eq!(code, 19);
    assert_eq!(leader.list_offset(TOPIC, 0, -1).unwrap(), 105);

    // Node 3 comes back: it catches up from its log end and rejoins the ISR; acks=all with
    // min.insync 3 works again.
    nodes[2].restart();
    eventually("ISR {1,2,3}", Duration::from_secs(20), || {
        nodes[0].isr() == vec![1, 2, 3]
    });
    let (code, base, _) = produce(&mut leader, 22);
    assert_eq!((code, base), (0, 105));

    drop((leader, follower));
    for n in &mut nodes {
        n.stop();
    }
    let logs: Vec<(i64, Bytes)> = nodes.iter().map(|n| n.log_bytes()).collect();
    assert_eq!(logs[0].0, 110);
    for (i, l) in logs.iter().enumerate() {
        assert_eq!(l, &logs[0], "node {} is log-equal with the leader", i + 1);
    }
}

#[test]
fn a_new_leader_makes_the_old_leaders_unreplicated_tail_go_and_every_replica_ends_log_equal() {
    let root = tempfile::tempdir().unwrap();
    // A long lag limit: no ISR change happens unless the test makes it.
    let mut nodes = cluster(root.path(), "1", 30_000);
    let mut c = WireClient::connect(&nodes[0].addr()).unwrap();
    wait_led(&mut c);
    for round in 0..10 {
        assert_eq!(produce(&mut c, round).0, 0);
    }
    // The followers stop; the leader takes two more batches with acks=1 that nobody else has.
    nodes[1].stop();
    nodes[2].stop();
    let v = values(99);
    let refs: Vec<&[u8]> = v.iter().map(|v| v.as_slice()).collect();
    for _ in 0..2 {
        let (code, _) = c
            .produce_raw(TOPIC, 0, batch(&refs, kmirror_engine::now_ms()), 1)
            .unwrap();
        assert_eq!(code, 0);
    }
    // acks=all with nobody to replicate to: REQUEST_TIMED_OUT (7) at the request timeout
    // (the batch stays in the leader's log, unreplicated, like Kafka's).
    let t = Instant::now();
    assert_eq!(produce_with_timeout(&mut c, 500), 7);
    assert!(t.elapsed() >= Duration::from_millis(450));
    assert_eq!(
        c.list_offset(TOPIC, 0, -1).unwrap(),
        50,
        "the HW stays at the replicated end"
    );
    drop(c);
    nodes[0].stop();

    // The controller fences node 1: node 2 leads at epoch 1 (every store gets the command).
    nodes[1].restart();
    nodes[2].restart();
    for n in &nodes[1..] {
        n.apply(MetadataCommand::FenceBroker { id: 1 });
        assert_eq!(n.leader_and_epoch(), (2, 1));
    }
    let mut c = WireClient::connect(&nodes[1].addr()).unwrap();
    eventually("node 2 leads", Duration::from_secs(10), || {
        produce(&mut c, 10).0 == 0
    });
    for round in 11..15 {
        assert_eq!(produce(&mut c, round).0, 0);
    }
    assert_eq!(c.list_offset(TOPIC, 0, -1).unwrap(), 75);

    // Node 1 comes back as a follower at epoch 1: OffsetsForLeaderEpoch tells it epoch 0
    // ended at 50, so its two unreplicated batches go; it fetches the new leader's records
    // and, unfenced, rejoins the ISR.
    nodes[0].restart();
    nodes[0].apply(MetadataCommand::FenceBroker { id: 1 });
    for n in &nodes {
        n.apply(MetadataCommand::UnfenceBroker { id: 1 });
    }
    eventually("ISR {1,2,3} on the leader", Duration::from_secs(20), || {
        nodes[1].isr() == vec![1, 2, 3]
    });
    assert_eq!(produce(&mut c, 15).0, 0);
    drop(c);
    for n in &mut nodes {
        n.stop();
    }
    let logs: Vec<(i64, Bytes)> = nodes.iter().map(|n| n.log_bytes()).collect();
    assert_eq!(logs[1].0, 80);
    for (i, l) in logs.iter().enumerate() {
        assert_eq!(l, &logs[1], "node {} is log-equal with the leader", i + 1);
    }
}
