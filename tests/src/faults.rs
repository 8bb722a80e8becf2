//! Issue 12's replication fault scenarios, written once against [`ClusterUnderTest`] and run on
//! a three-node Apache Kafka ([`crate::KafkaCluster`], which validates each scenario's
//! expectations) and on a three-node kmirror cluster.
//!
//! The scenario drives real clients (Java kafka-clients and librdkafka, idempotent, acks=all)
//! into RF=3 topics while nodes die and get cut off, and judges only what a user sees: every
//! acknowledged record is read back once, at its acknowledged offset, in order; a consumer
//! group resumes from its committed offsets.
//!
//! Must not depend on kmirror's crates; talks to the cluster over the wire and through the
//! [`ClusterUnderTest`] operations (process kills, network namespaces).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::clients::{parse_acks, parse_consumed, Client, Seq};
use crate::helpers::now_ms;
use crate::proc::{self, LineChild};
use crate::wire::{PartitionInfo, WireClient};

/// A multi-node cluster a fault scenario can run against. Node ids are the cluster's own
/// (1-based for both Kafka and kmirror).
pub trait ClusterUnderTest {
    /// For messages: "kafka" or "kmirror".
    fn name(&self) -> String;
    /// `host:port,…` of the nodes that run and are reachable.
    fn bootstrap(&self) -> String;
    /// Every node id.
    fn node_ids(&self) -> Vec<i32>;
    /// SIGKILL node `id`.
    fn kill(&mut self, id: i32);
    /// Starts node `id` again on its data after [`ClusterUnderTest::kill`]; returns once it
    /// serves and is registered.
    fn restart(&mut self, id: i32);
    /// Cuts node `id` off from the other nodes and from clients; it keeps running.
    fn isolate(&mut self, id: i32);
    /// Undoes [`ClusterUnderTest::isolate`].
    fn heal(&mut self, id: i32);

    /// A wire connection to some reachable node.
    fn any_node(&self) -> WireClient {
        proc::wait_for(Duration::from_secs(30), "a reachable node", || {
            self.bootstrap()
                .split(',')
                .find_map(|a| WireClient::connect(a).ok())
        })
    }

    /// Leader, replicas and ISR of a partition as Metadata reports them now.
    fn partition(&self, topic: &str, partition: i32) -> PartitionInfo {
        proc::wait_for(
            Duration::from_secs(30),
            &format!("metadata of {topic}-{partition}"),
            || self.any_node().partition_info(topic, partition).ok(),
        )
    }

    /// Leader, replicas and ISR of a partition as the partition leader's own Metadata answer
    /// reports them: what that leader acts on. Another node may show a committed ISR change
    /// before the leader has replayed it (Kafka's brokers learn the metadata log at their own
    /// pace too).
    fn partition_at_leader(&self, topic: &str, partition: i32) -> PartitionInfo {
        proc::wait_for(
            Duration::from_secs(30),
            &format!("metadata of {topic}-{partition} from its leader"),
            || {
                let mut c = WireClient::connect_leader(&self.bootstrap(), topic, partition).ok()?;
                let info = c.partition_info(topic, partition).ok()?;
                // The leader named by the first node may have moved on: its answer only
                // counts when it names itself.
                (info.leader == c.addr()).then_some(info)
            },
        )
    }

    /// The node leading `topic`/`partition`.
    fn leader_of(&self, topic: &str, partition: i32) -> i32 {
        self.partition(topic, partition).leader_id
    }

    /// The active controller: the metadata quorum's leader (DescribeQuorum).
    fn controller(&self) -> i32 {
        proc::wait_for(Duration::from_secs(30), "a quorum leader", || {
            self.any_node()
                .quorum_leader()
                .ok()
                .filter(|(l, _)| *l >= 0)
                .map(|(l, _)| l)
        })
    }

    /// Creates a topic with replication factor `rf` and waits for leaders.
    fn create_topic(&self, topic: &str, partitions: i32, rf: i16, configs: &[(&str, &str)]) {
        let code = self
            .any_node()
            .create_topic(topic, partitions, rf, configs)
            .expect("CreateTopics");
        assert_eq!(code, 0, "CreateTopics {topic} answered error code {code}");
        for p in 0..partitions {
            self.partition(topic, p);
        }
    }

    /// Waits until every partition of every topic in Metadata has all its replicas in sync
    /// (the node that came back caught up), so the next fault starts from a whole cluster.
    fn wait_fully_replicated(&self, timeout: Duration) {
        let mut last = String::new();
        let deadline = Instant::now() + timeout;
        loop {
            let md = self.any_node().metadata(None);
            if let Ok(md) = md {
                let behind: Vec<String> = md
                    .topics
                    .iter()
                    .flat_map(|t| {
                        let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                        t.partitions.iter().filter_map(move |p| {
                            let mut r: Vec<i32> = p.replica_nodes.iter().map(|x| x.0).collect();
                            let mut i: Vec<i32> = p.isr_nodes.iter().map(|x| x.0).collect();
                            r.sort_unstable();
                            i.sort_unstable();
                            (r != i || p.leader_id.0 < 0).then(|| {
                                format!(
                                    "{name}-{} leader {} replicas {r:?} isr {i:?}",
                                    p.partition_index, p.leader_id.0
                                )
                            })
                        })
                    })
                    .collect();
                if behind.is_empty() && md.brokers.len() == self.node_ids().len() {
                    return;
                }
                last = format!("{} brokers; {}", md.brokers.len(), behind.join("; "));
            }
            assert!(
                Instant::now() < deadline,
                "{}: not fully replicated after {timeout:?}: {last}",
                self.name()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl ClusterUnderTest for crate::KafkaCluster {
    fn name(&self) -> String {
        "kafka".into()
    }
    fn bootstrap(&self) -> String {
        crate::KafkaCluster::bootstrap(self)
    }
    fn node_ids(&self) -> Vec<i32> {
        crate::KafkaCluster::node_ids(self)
    }
    fn kill(&mut self, id: i32) {
        self.kill_node(id);
    }
    fn restart(&mut self, id: i32) {
        self.start_node(id);
    }
    fn isolate(&mut self, id: i32) {
        self.isolate_node(id);
    }
    fn heal(&mut self, id: i32) {
        self.heal_node(id);
    }
}

impl ClusterUnderTest for crate::cluster::KmirrorCluster {
    fn name(&self) -> String {
        "kmirror".into()
    }
    fn bootstrap(&self) -> String {
        self.reachable_bootstrap()
    }
    fn node_ids(&self) -> Vec<i32> {
        (1..=self.len() as i32).collect()
    }
    fn kill(&mut self, id: i32) {
        crate::cluster::KmirrorCluster::kill(self, id as usize);
    }
    fn restart(&mut self, id: i32) {
        crate::cluster::KmirrorCluster::restart(self, id as usize);
        let n = self.len();
        // Back once it is registered and unfenced again, as KafkaCluster::start_node waits.
        self.wait_brokers(id as usize, n, Duration::from_secs(60));
    }
    fn isolate(&mut self, id: i32) {
        crate::cluster::KmirrorCluster::isolate(self, id as usize);
    }
    fn heal(&mut self, id: i32) {
        crate::cluster::KmirrorCluster::heal(self, id as usize);
    }
}

/// A three-node kmirror cluster for the fault scenarios, set up like
/// [`crate::KafkaCluster::three_replicated`]: network namespaces, fencing after 4 s.
pub fn kmirror_three_replicated() -> crate::cluster::KmirrorCluster {
    crate::cluster::KmirrorCluster::start(
        3,
        crate::cluster::ClusterOpts {
            session_timeout_ms: 4000,
            netns: true,
            ..crate::cluster::ClusterOpts::default()
        },
    )
}

/// A fault [`acked_records_survive_node_faults`] injects.
#[derive(Clone, Copy)]
enum Fault {
    /// SIGKILL the leader of partition 0, restart it.
    KillLeader,
    /// SIGKILL the active controller, restart it.
    KillController,
    /// Cut the leader of partition 0 off the network, heal it.
    IsolateLeader,
}

/// One client family's producer and consumers on a topic of its own.
struct Stream {
    client: Client,
    topic: String,
    group: String,
    producer: Option<LineChild>,
    consumer: Option<LineChild>,
}

/// Acks per partition so far.
fn acks_per_partition(p: &Option<LineChild>, partitions: i32) -> Vec<usize> {
    let lines = p.as_ref().map(LineChild::lines).unwrap_or_default();
    let (acks, _) = parse_acks(&lines);
    let mut n = vec![0; partitions as usize];
    for a in acks {
        n[a.partition as usize] += 1;
    }
    n
}

const PARTITIONS: i32 = 6;
/// Records per second per producer: enough that every fault lands mid-stream, few enough
/// for a 2-core machine running three brokers and four clients.
const RATE: u32 = 600;

/// Issue 12, step 5: idempotent acks=all producers (each client family on its own RF=3
/// topic, `min.insync.replicas=2`) keep producing while (a) the leader of partition 0 is
/// SIGKILLed and restarted, (b) the active controller is SIGKILLed and restarted, (c) the
/// leader of partition 0 is cut off the network and joined again. A consumer group member
/// reads along during (a) and (b) and commits; a new member of the same group started after
/// (c) must resume at the committed offsets. Then: every acknowledged record was consumed
/// exactly once, at its acknowledged offset; per partition the offsets are gap-free and the
/// sequences in order; nothing consumed twice.
pub fn acked_records_survive_node_faults(cluster: &mut dyn ClusterUnderTest, clients: &[Client]) {
    let name = cluster.name();
    let dir = tempfile::tempdir().expect("temp dir");
    let stop_producers = dir.path().join("stop-producers");
    let stop_first = dir.path().join("stop-first-consumers");
    let stop_second = dir.path().join("stop-second-consumers");
    let s = |p: &std::path::Path| p.display().to_string();
    let boot = cluster.bootstrap();

    let mut streams: Vec<Stream> = Vec::new();
    for client in clients {
        let topic = format!("faults-{client:?}").to_lowercase();
        cluster.create_topic(&topic, PARTITIONS, 3, &[("min.insync.replicas", "2")]);
        let info = cluster.partition(&topic, 0);
        assert_eq!(
            info.replicas.len(),
            3,
            "{topic}-0 replicas {:?}",
            info.replicas
        );
        let stop_arg = format!("seqproducer.stop={}", s(&stop_producers));
        let rate_arg = format!("seqproducer.rate={RATE}");
        // The delivery timeout outlasts every fault: an idempotent producer whose batch
        // expires after being sent bumps its epoch and may write the record twice (Kafka
        // too). Short request timeouts make it leave a dead or cut-off leader quickly.
        let props: Vec<&str> = match client {
            Client::Java => vec![
                "delivery.timeout.ms=300000",
                "request.timeout.ms=5000",
                "max.block.ms=300000",
                "retry.backoff.ms=100",
                "reconnect.backoff.max.ms=500",
                "metadata.max.age.ms=5000",
                "enable.idempotence=true",
                &stop_arg,
                &rate_arg,
            ],
            Client::Librdkafka => vec![
                "message.timeout.ms=300000",
                "request.timeout.ms=5000",
                "retry.backoff.ms=100",
                "reconnect.backoff.max.ms=500",
                "topic.metadata.refresh.interval.ms=5000",
                &stop_arg,
                &rate_arg,
            ],
        };
        let producer =
            LineChild::spawn(&mut client.producer(&boot, &topic, PARTITIONS, 10_000_000, &props));
        let group = format!("{topic}-readers");
        let consumer =
            LineChild::spawn(&mut client.consumer(&boot, &group, &topic, &s(&stop_first), 0));
        streams.push(Stream {
            client: *client,
            topic,
            group,
            producer: Some(producer),
            consumer: Some(consumer),
        });
    }

    // Every partition of every stream gains `n` acks after this point.
    let progress = |streams: &mut Vec<Stream>, what: &str, n: usize| {
        let base: Vec<Vec<usize>> = streams
            .iter()
            .map(|st| acks_per_partition(&st.producer, PARTITIONS))
            .collect();
        let started = Instant::now();
        loop {
            let now: Vec<Vec<usize>> = streams
                .iter()
                .map(|st| acks_per_partition(&st.producer, PARTITIONS))
                .collect();
            let done = now
                .iter()
                .zip(&base)
                .all(|(a, b)| a.iter().zip(b).all(|(x, y)| *x >= y + n));
            if done {
                eprintln!(
                    "{name}: {what}: every partition +{n} acks after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                return;
            }
            for st in streams.iter_mut() {
                let p = st.producer.as_mut().expect("producer");
                assert!(
                    p.exited().is_none(),
                    "{name}: {:?} producer exited during {what}:\n{}",
                    st.client,
                    p.stderr_tail(30)
                );
                if let Some(c) = st.consumer.as_mut() {
                    assert!(
                        c.exited().is_none(),
                        "{name}: {:?} consumer exited during {what}:\n{}",
                        st.client,
                        c.stderr_tail(30)
                    );
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{name}: producers stalled during {what}: acks per partition {now:?}, before {base:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    let topic0 = streams[0].topic.clone();
    progress(&mut streams, "warm-up", 300);

    // One fault: hit the node in `role`, the producers keep acking on every partition,
    // another node takes the role, then the node comes back and catches up.
    let fault =
        |cluster: &mut dyn ClusterUnderTest, streams: &mut Vec<Stream>, step: &str, f: Fault| {
            let find = |cluster: &dyn ClusterUnderTest| match f {
                Fault::KillController => cluster.controller(),
                Fault::KillLeader | Fault::IsolateLeader => cluster.leader_of(&topic0, 0),
            };
            let role = match f {
                Fault::KillController => "the active controller".to_string(),
                Fault::KillLeader | Fault::IsolateLeader => format!("leader of {topic0}-0"),
            };
            let (verb, broken, mended) = match f {
                Fault::KillLeader => ("SIGKILL", "leader killed", "leader restarted"),
                Fault::KillController => ("SIGKILL", "controller killed", "controller restarted"),
                Fault::IsolateLeader => ("isolate", "leader isolated", "isolated node healed"),
            };
            let victim = find(cluster);
            eprintln!("{name}: {step} {verb} node {victim}, {role}");
            match f {
                Fault::IsolateLeader => cluster.isolate(victim),
                Fault::KillLeader | Fault::KillController => cluster.kill(victim),
            }
            progress(streams, broken, 300);
            let now = find(cluster);
            assert_ne!(
                now, victim,
                "{name}: {role} is still node {victim} ({broken})"
            );
            match f {
                Fault::IsolateLeader => cluster.heal(victim),
                Fault::KillLeader | Fault::KillController => cluster.restart(victim),
            }
            cluster.wait_fully_replicated(Duration::from_secs(120));
            progress(streams, mended, 100);
        };
    fault(&mut *cluster, &mut streams, "(a)", Fault::KillLeader);
    fault(&mut *cluster, &mut streams, "(b)", Fault::KillController);

    // The first consumers stop here; their committed offsets must be where the next
    // member of each group starts.
    std::fs::write(&stop_first, b"stop").expect("stop file");
    let mut first: Vec<Vec<Seq>> = Vec::new();
    for st in streams.iter_mut() {
        let c = st.consumer.take().expect("first consumer");
        let (status, lines) = c.wait(Duration::from_secs(90));
        assert!(
            status.success(),
            "{name}: {:?} first consumer exited {status}",
            st.client
        );
        first.push(parse_consumed(&lines));
    }

    fault(&mut *cluster, &mut streams, "(c)", Fault::IsolateLeader);

    // Second members: must start exactly at the committed offsets.
    let boot = cluster.bootstrap();
    let mut committed: Vec<BTreeMap<i32, i64>> = Vec::new();
    for (k, st) in streams.iter_mut().enumerate() {
        let c = st.client.committed(&boot, &st.group, &st.topic, PARTITIONS);
        // What the first member consumed ends where it committed.
        for p in 0..PARTITIONS {
            let next = first[k]
                .iter()
                .filter(|r| r.partition == p)
                .map(|r| r.offset + 1)
                .max()
                .unwrap_or(0);
            assert_eq!(
                c.get(&p).copied().filter(|o| *o >= 0).unwrap_or(0),
                next,
                "{name}: {:?} group committed {c:?} but its member consumed partition {p} up to {next}",
                st.client
            );
        }
        committed.push(c);
        st.consumer = Some(LineChild::spawn(&mut st.client.consumer(
            &boot,
            &st.group,
            &st.topic,
            &s(&stop_second),
            0,
        )));
    }

    std::fs::write(&stop_producers, b"stop").expect("stop file");
    let mut acked: Vec<(Vec<Seq>, usize)> = Vec::new();
    for st in streams.iter_mut() {
        let producer = st.producer.take().expect("producer");
        let (status, lines) = producer.wait(Duration::from_secs(330));
        assert!(
            status.success(),
            "{name}: {:?} producer exited {status}",
            st.client
        );
        let done = lines.iter().any(|l| l.starts_with("DONE "));
        assert!(done, "{name}: {:?} producer did not finish", st.client);
        acked.push(parse_acks(&lines));
    }

    // Each second member reads to the log end (the high watermark after the producers).
    for (k, st) in streams.iter_mut().enumerate() {
        let ends: Vec<i64> = (0..PARTITIONS)
            .map(|p| {
                let mut leader = WireClient::connect_leader(&cluster.bootstrap(), &st.topic, p)
                    .expect("connect to leader");
                leader.log_bounds(&st.topic, p).expect("log bounds").1
            })
            .collect();
        let consumer = st.consumer.as_ref().expect("second consumer");
        proc::wait_for(
            Duration::from_secs(120),
            &format!("{:?} second consumer to reach {ends:?}", st.client),
            || {
                let got = parse_consumed(&consumer.lines());
                (0..PARTITIONS)
                    .all(|p| {
                        let end = ends[p as usize];
                        end == committed[k].get(&p).copied().unwrap_or(0).max(0)
                            || got.iter().any(|r| r.partition == p && r.offset + 1 >= end)
                    })
                    .then_some(())
            },
        );
    }
    // Give duplicates (if any) a moment to show up.
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(&stop_second, b"stop").expect("stop file");

    for (k, st) in streams.iter_mut().enumerate() {
        let c = st.consumer.take().expect("second consumer");
        let (status, lines) = c.wait(Duration::from_secs(90));
        assert!(
            status.success(),
            "{name}: {:?} second consumer exited {status}",
            st.client
        );
        let second = parse_consumed(&lines);
        let (acks, errors) = &acked[k];
        judge(
            &format!("{name} {:?}", st.client),
            acks,
            *errors,
            &first[k],
            &second,
            &committed[k],
        );
    }
}

/// Exactly once, in order, acknowledged records present, the second member resuming at the
/// committed offsets.
fn judge(
    what: &str,
    acks: &[Seq],
    errors: usize,
    first: &[Seq],
    second: &[Seq],
    committed: &BTreeMap<i32, i64>,
) {
    for p in 0..PARTITIONS {
        let c = committed.get(&p).copied().unwrap_or(-1).max(0);
        if let Some(r) = second.iter().find(|r| r.partition == p) {
            assert_eq!(
                r.offset, c,
                "{what}: the group's new member started partition {p} at {} instead of its committed offset {c}",
                r.offset
            );
        }
    }
    let mut by_offset: HashMap<(i32, i64), i64> = HashMap::new();
    let mut by_seq: HashMap<(i32, i64), i64> = HashMap::new();
    for r in first.iter().chain(second) {
        if let Some(seq) = by_offset.insert((r.partition, r.offset), r.seq) {
            panic!(
                "{what}: offset {}-{} consumed twice (seq {seq}, then {})",
                r.partition, r.offset, r.seq
            );
        }
        if let Some(off) = by_seq.insert((r.partition, r.seq), r.offset) {
            panic!(
                "{what}: record {}:{} is in the log twice, at {off} and {}",
                r.partition, r.seq, r.offset
            );
        }
    }
    for p in 0..PARTITIONS {
        let mut offs: Vec<(i64, i64)> = by_offset
            .iter()
            .filter(|((q, _), _)| *q == p)
            .map(|((_, o), s)| (*o, *s))
            .collect();
        offs.sort_unstable();
        for (i, (o, _)) in offs.iter().enumerate() {
            assert_eq!(
                *o, i as i64,
                "{what}: partition {p} consumed with a gap before offset {o}"
            );
        }
        for w in offs.windows(2) {
            assert!(
                w[1].1 > w[0].1,
                "{what}: partition {p} out of order: seq {} at offset {} after seq {} at {}",
                w[1].1,
                w[1].0,
                w[0].1,
                w[0].0
            );
        }
    }
    let mut lost = Vec::new();
    let mut without_offset = 0;
    for a in acks {
        if a.offset < 0 {
            // Acknowledged without an offset (a duplicate the broker recognised): it must be
            // in the log once, wherever.
            without_offset += 1;
            if !by_seq.contains_key(&(a.partition, a.seq)) {
                lost.push((a, None));
            }
            continue;
        }
        match by_offset.get(&(a.partition, a.offset)) {
            Some(seq) if *seq == a.seq => {}
            other => lost.push((a, other.copied())),
        }
    }
    assert!(
        lost.is_empty(),
        "{what}: {} acknowledged records not consumed at their offset, e.g. {:?} (found seq {:?})",
        lost.len(),
        lost.first().map(|x| x.0),
        lost.first().map(|x| x.1)
    );
    eprintln!(
        "{what}: {} acknowledged ({without_offset} without an offset), {errors} failed, {} consumed ({} before the isolation, {} after), each exactly once, in order",
        acks.len(),
        by_offset.len(),
        first.len(),
        second.len()
    );
}

/// `Replicas: 1,2,3 … Isr: 1,2` of `topic`-`partition` as `kafka-topics --describe` prints
/// them (sorted), and whether `--under-replicated-partitions` lists it.
fn topics_tool_describe(boot: &str, topic: &str, partition: i32) -> (Vec<i32>, Vec<i32>, bool) {
    use crate::java::{run_tool, tools};
    let first = boot.split(',').next().expect("a node");
    let ids = |line: &str, key: &str| -> Vec<i32> {
        let mut v: Vec<i32> = line
            .split('\t')
            .find_map(|f| f.trim().strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in kafka-topics line {line:?}"))
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse().expect("replica id"))
            .collect();
        v.sort_unstable();
        v
    };
    let want = format!("Partition: {partition}\t");
    let described = run_tool(
        tools::TOPIC_COMMAND,
        &["--bootstrap-server", first, "--describe", "--topic", topic],
        Duration::from_secs(60),
    );
    let line = described
        .stdout
        .lines()
        .find(|l| l.contains(&want))
        .unwrap_or_else(|| panic!("kafka-topics --describe:\n{}", described.stdout))
        .to_string();
    let under = run_tool(
        tools::TOPIC_COMMAND,
        &[
            "--bootstrap-server",
            first,
            "--describe",
            "--under-replicated-partitions",
        ],
        Duration::from_secs(60),
    );
    let listed = under
        .stdout
        .lines()
        .any(|l| l.contains(&format!("Topic: {topic}\t")) && l.contains(&want));
    (ids(&line, "Replicas: "), ids(&line, "Isr: "), listed)
}

/// Issue 12, steps 2 and 5: what the Kafka tools and a producer see of replication.
/// `kafka-topics --describe` shows 3 replicas and the ISR; `kafka-metadata-quorum describe
/// --status` names the same quorum leader as DescribeQuorum and 3 voters; with
/// `min.insync.replicas=3`, once a killed follower has left the ISR, acks=all is refused with
/// NOT_ENOUGH_REPLICAS (19) and writes nothing, acks=1 is accepted, the partition is listed
/// as under-replicated; after the follower is back in the ISR, acks=all is accepted again.
pub fn replication_seen_by_tools_and_producers(cluster: &mut dyn ClusterUnderTest) {
    use crate::java::{run_tool, tools};
    let name = cluster.name();
    let topic = "isr-probe";
    cluster.create_topic(topic, 1, 3, &[("min.insync.replicas", "3")]);
    cluster.wait_fully_replicated(Duration::from_secs(60));
    let info = cluster.partition(topic, 0);
    let mut replicas = info.replicas.clone();
    replicas.sort_unstable();
    let boot = cluster.bootstrap();
    let (tool_replicas, tool_isr, under) = topics_tool_describe(&boot, topic, 0);
    assert_eq!(tool_replicas, replicas, "{name}: kafka-topics replicas");
    assert_eq!(
        tool_isr, replicas,
        "{name}: kafka-topics ISR of a healthy partition"
    );
    assert!(
        !under,
        "{name}: a healthy partition listed as under-replicated"
    );

    let quorum = run_tool(
        tools::METADATA_QUORUM_COMMAND,
        &[
            "--bootstrap-server",
            boot.split(',').next().expect("a node"),
            "describe",
            "--status",
        ],
        Duration::from_secs(60),
    );
    let field = |key: &str| -> String {
        quorum
            .stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("{name}: no {key} in:\n{}", quorum.stdout))
    };
    let leader: i32 = field("LeaderId:").parse().expect("LeaderId");
    assert_eq!(leader, cluster.controller(), "{name}: quorum leader");
    let voters = field("CurrentVoters:");
    eprintln!("{name}: LeaderId {leader}, CurrentVoters {voters}");
    for id in cluster.node_ids() {
        assert!(
            voters.contains(&format!("\"id\": {id},")),
            "{name}: voter {id} missing from CurrentVoters {voters}"
        );
    }

    let produce = |cluster: &dyn ClusterUnderTest, acks: i16, value: &[u8]| -> i16 {
        let mut c = WireClient::connect_leader(&cluster.bootstrap(), topic, 0).expect("leader");
        c.produce_raw(topic, 0, crate::records::batch(&[value], now_ms()), acks)
            .expect("Produce")
            .0
    };
    assert_eq!(
        produce(cluster, -1, b"first"),
        0,
        "{name}: acks=all, full ISR"
    );

    // Kill a follower (not the quorum leader, so the controller stays put).
    let controller = cluster.controller();
    let follower = *info
        .replicas
        .iter()
        .find(|r| **r != info.leader_id && **r != controller)
        .or_else(|| info.replicas.iter().find(|r| **r != info.leader_id))
        .expect("a follower");
    eprintln!("{name}: SIGKILL follower {follower} of {topic}-0");
    cluster.kill(follower);
    // The leader's own Metadata must show the shrink: a produce that reaches the leader before
    // it has replayed the change waits for the high watermark (Kafka's too).
    proc::wait_for(
        Duration::from_secs(60),
        "the leader's ISR to shrink to 2",
        || (cluster.partition_at_leader(topic, 0).isr.len() == 2).then_some(()),
    );
    let before = WireClient::connect_leader(&cluster.bootstrap(), topic, 0)
        .and_then(|mut c| c.log_bounds(topic, 0))
        .expect("log bounds")
        .1;
    assert_eq!(
        produce(cluster, -1, b"refused"),
        19,
        "{name}: acks=all with ISR 2 < min.insync.replicas 3 must be NOT_ENOUGH_REPLICAS"
    );
    assert_eq!(
        produce(cluster, 1, b"acks-one"),
        0,
        "{name}: acks=1 with ISR 2"
    );
    // Kafka 4.1 (KIP-966, eligible leader replicas, on by default for new clusters) does not
    // advance the high watermark while the ISR is below min.insync.replicas: the acks=1
    // record is in the leader's log but invisible (ListOffsets latest = HW) until the
    // follower is back. The refused acks=all record is never written.
    std::thread::sleep(Duration::from_secs(3));
    let end = WireClient::connect_leader(&cluster.bootstrap(), topic, 0)
        .and_then(|mut c| c.log_bounds(topic, 0))
        .expect("log bounds")
        .1;
    assert_eq!(
        end, before,
        "{name}: the high watermark moved ({before} -> {end}) with the ISR below min.insync.replicas"
    );
    let (_, isr, under) = topics_tool_describe(&cluster.bootstrap(), topic, 0);
    assert_eq!(
        isr.len(),
        2,
        "{name}: kafka-topics ISR with a follower down: {isr:?}"
    );
    assert!(
        !isr.contains(&follower),
        "{name}: dead follower {follower} still in ISR"
    );
    assert!(under, "{name}: {topic}-0 not listed as under-replicated");

    cluster.restart(follower);
    cluster.wait_fully_replicated(Duration::from_secs(120));
    proc::wait_for(
        Duration::from_secs(60),
        "the leader's ISR to grow to 3",
        || (cluster.partition_at_leader(topic, 0).isr.len() == 3).then_some(()),
    );
    assert_eq!(
        produce(cluster, -1, b"last"),
        0,
        "{name}: acks=all after the follower rejoined the ISR"
    );
    let got: Vec<Vec<u8>> = crate::oracle::read_records(&cluster.bootstrap(), topic, 0)
        .expect("read back")
        .into_iter()
        .filter_map(|(_, v)| v.map(|v| v.to_vec()))
        .collect();
    assert_eq!(
        got,
        vec![b"first".to_vec(), b"acks-one".to_vec(), b"last".to_vec()],
        "{name}: the partition's records"
    );
}
