//! Issue 12 step 3: group offsets and transaction state survive the loss of the coordinator's
//! node in a three-node kmirror cluster (`serve --quorum`).
//!
//! A Java consumer group (classic protocol, synchronous commits) consumes 20 records and
//! stops; a Java transactional producer commits two transactions and leaves a third one open.
//! Then the node that coordinates both (the leader of their `__consumer_offsets` and
//! `__transaction_state` partitions) is SIGKILLed. On the new coordinator:
//! - the group's committed offset is still 20, and the restarted member resumes from it:
//!   it receives exactly the 5 records produced after the kill, nothing re-delivered;
//! - a new producer with the same `transactional.id` initializes (fencing the old one and
//!   aborting its open transaction) and commits;
//! - a read_committed reader sees every committed transaction's records and none of the
//!   open one's: the open transaction ended aborted, never both.
//!
//! Before that, on the same cluster (issue 20): FindCoordinator for 30 groups names more than
//! one node, each group commits through its coordinator, and Kafka's `OffsetsMessageFormatter`
//! prints every commit from `__consumer_offsets` ([`offsets_scenario`]).
//!
//! The data partitions are led by other nodes than the coordinator: this test is about the
//! coordinator state, not the replication data path. The same scenario runs on a three-node
//! Apache Kafka (RF 3 internal topics), where FindCoordinator names the node to kill and the
//! topic names are chosen so that one node coordinates both the group and the transactional
//! id.

use std::time::{Duration, Instant};

use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::proc::{self, LineChild};
use kmirror_tests::{java, python, KafkaCluster, KmirrorNode, WireClient};

const T: Duration = Duration::from_secs(120);

struct Cluster {
    nodes: Vec<Option<KmirrorNode>>,
}

impl Cluster {
    fn start() -> Cluster {
        let controller: Vec<u16> = (0..3).map(|_| proc::free_port()).collect();
        let quorum = controller
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = (0..3)
            .map(|i| {
                let id = (i + 1).to_string();
                let listen = format!("127.0.0.1:{}", controller[i]);
                Some(
                    KmirrorNode::builder()
                        .args(&[
                            "--cores",
                            "1",
                            "--node-id",
                            &id,
                            "--controller-listen",
                            &listen,
                            "--quorum",
                            &quorum,
                        ])
                        .start(),
                )
            })
            .collect();
        Cluster { nodes }
    }

    fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .flatten()
            .map(|n| n.addr())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The metadata quorum's leader (1-based id), once every live node names the same one
    /// and it is not `after` (a node just killed).
    fn quorum_leader(&self, after: usize) -> usize {
        proc::wait_for(T, "a quorum leader every node agrees on", || {
            let mut named = self.nodes.iter().flatten().map(|n| {
                let mut c = WireClient::connect(&n.addr()).ok()?;
                let (leader, _) = c.quorum_leader().ok()?;
                usize::try_from(leader).ok().filter(|l| *l >= 1)
            });
            let first = named.next()??;
            named
                .all(|l| l == Some(first))
                .then_some(first)
                .filter(|l| *l != after)
        })
    }
}

fn value_lines(lines: &[String], prefix: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.starts_with(prefix))
        .cloned()
        .collect()
}

/// Three nodes the scenario runs on: kmirror or Apache Kafka.
trait Nodes {
    fn bootstrap(&self) -> String;
    /// SIGKILL node `id`.
    fn kill(&mut self, id: i32);
}

impl Nodes for Cluster {
    fn bootstrap(&self) -> String {
        Cluster::bootstrap(self)
    }
    fn kill(&mut self, id: i32) {
        let i = usize::try_from(id - 1).unwrap();
        self.nodes[i].as_mut().unwrap().kill_now();
        self.nodes[i] = None;
    }
}

impl Nodes for KafkaCluster {
    fn bootstrap(&self) -> String {
        KafkaCluster::bootstrap(self)
    }
    fn kill(&mut self, id: i32) {
        self.kill_node(id);
    }
}

/// The broker FindCoordinator names for `key` (0 group, 1 transactional id).
fn coordinator_of(boot: &str, key_type: i8, key: &str) -> Option<i32> {
    use kafka_protocol::messages::FindCoordinatorRequest;
    use kafka_protocol::protocol::StrBytes;
    let first = boot.split(',').next()?;
    let mut c = WireClient::connect(first).ok()?;
    let r = c
        .send_at(
            FindCoordinatorRequest::default()
                .with_key_type(key_type)
                .with_coordinator_keys(vec![StrBytes::from_string(key.to_string())]),
            4,
        )
        .ok()?;
    let c = r.coordinators.first()?;
    (c.error_code == 0).then_some(c.node_id.0)
}

/// The scenario of the module doc; the coordinator of the group and of the transactional id
/// (one node: the topic names are chosen so, on Kafka too) is SIGKILLed.
fn scenario(nodes: &mut dyn Nodes) {
    let boot = nodes.bootstrap();
    proc::wait_for(T, "three brokers in Metadata", || {
        let mut c = WireClient::connect(boot.split(',').next()?).ok()?;
        (c.metadata(Some(&[])).ok()?.brokers.len() == 3).then_some(())
    });
    let coord = proc::wait_for(T, "the group's coordinator", || {
        coordinator_of(&boot, 0, "g")
    });
    // One-partition RF 3 topics led by other nodes than the coordinator (kmirror's data path
    // is not what this test is about): one for the group; one for the transactions, whose
    // transactional id ("txn-<topic>") the same node coordinates.
    let led_away = |prefix: &str, same_coordinator: bool| {
        proc::wait_for(T, "a topic led away from the coordinator", || {
            let name = format!("{prefix}-{}", proc::free_port());
            if same_coordinator && coordinator_of(&boot, 1, &format!("txn-{name}")) != Some(coord) {
                return None;
            }
            let mut c = WireClient::connect(boot.split(',').next()?).ok()?;
            assert_eq!(c.create_topic(&name, 1, 3, &[]).unwrap(), 0);
            let info = c.partition_info(&name, 0).ok()?;
            (info.leader_id != coord).then_some(name)
        })
    };
    let topic = led_away("events", false);
    let txn_topic = led_away("txns", true);

    // 20 records, consumed and committed by a Java group member.
    let produce = |n: u64| {
        let ran = proc::run_ok(
            python::script("seq_producer.py").args([&boot, &topic, "1", &n.to_string()]),
            T,
        );
        assert!(
            ran.stdout.contains(&format!("DONE {n} 0")),
            "{}",
            ran.stdout
        );
    };
    produce(20);
    let dir = tempfile::tempdir().unwrap();
    let consume = |stop: &std::path::Path, expect: usize| -> Vec<String> {
        let mut c = java::program("GroupConsumer");
        c.args([&boot, "g", &topic, stop.to_str().unwrap(), "0"]);
        let member = LineChild::spawn(&mut c);
        let deadline = Instant::now() + T;
        while member.count("R ") < expect && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        // A little longer: a re-delivery would show up now.
        std::thread::sleep(Duration::from_secs(2));
        std::fs::write(stop, b"stop").unwrap();
        let (_, lines) = member.wait(T);
        assert!(
            lines.iter().any(|l| l == "CLOSED"),
            "{:?}",
            &lines[lines.len().saturating_sub(5)..]
        );
        value_lines(&lines, "R ")
    };
    let first = consume(&dir.path().join("stop1"), 20);
    assert_eq!(first.len(), 20, "{first:?}");

    // Two committed transactions and an open one, from a Java transactional producer.
    let mut producer = java::program("TxnProducer");
    producer.args([&boot, &txn_topic, "1", "3", "4", "0", "true"]);
    let old = LineChild::spawn(&mut producer);
    proc::wait_for(T, "the open transaction", || {
        (old.count("OPEN") == 1).then_some(())
    });
    assert_eq!(old.count("COMMITTED "), 3, "{:?}", old.lines());
    // The group's offsets and the transactions are on their replicated internal partitions:
    // every record of both topics acknowledged so far must survive the coordinator's loss.

    // SIGKILL the coordinator's node.
    nodes.kill(coord);
    drop(old);
    let boot = nodes.bootstrap();

    // The group resumes from its committed offset: only the new records arrive.
    let committed = proc::run_ok(
        python::script("committed.py").args([&boot, "g", &topic, "1"]),
        T,
    );
    assert!(
        committed.stdout.lines().any(|l| l == "C 0 20"),
        "{}",
        committed.stdout
    );
    produce(5);
    let again = consume(&dir.path().join("stop2"), 5);
    let offsets: Vec<i64> = again
        .iter()
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(offsets, [20, 21, 22, 23, 24], "{again:?}");

    // A new producer with the same transactional.id fences the old one and commits.
    let mut producer = java::program("TxnProducer");
    producer.args([&boot, &txn_topic, "1", "1", "4", "0", "false"]);
    let (status, lines) = LineChild::spawn(&mut producer).wait(T);
    assert!(status.success(), "{lines:?}");
    assert!(lines.iter().any(|l| l == "DONE"), "{lines:?}");

    // read_committed: the three committed transactions (12 records) and the new one (4),
    // none of the open one's.
    let mut dump = java::program("RecordDump");
    dump.args([&boot, &txn_topic, "read_committed", "records"]);
    let read = proc::run_ok(&mut dump, T);
    // "R <partition> <offset> <key> <value> <header-keys>"
    let values: Vec<&str> = read
        .stdout
        .lines()
        .filter(|l| l.starts_with("R "))
        .filter_map(|l| l.split_whitespace().nth(4))
        .collect();
    assert_eq!(
        values.iter().filter(|v| v.starts_with("C:")).count(),
        16,
        "{}",
        read.stdout
    );
    assert!(
        !values.iter().any(|v| v.starts_with("O:")),
        "{}",
        read.stdout
    );
    // The new producer's transaction is the fourth: "C:0:" values appear twice (old + new).
    assert_eq!(
        values.iter().filter(|v| v.starts_with("C:0:")).count(),
        8,
        "{}",
        read.stdout
    );
}

/// Both scenarios share one cluster (the offsets one first: the other kills a node).
#[test]
fn groups_spread_over_the_nodes_and_survive_the_loss_of_their_coordinator() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut cluster = Cluster::start();
    cluster.quorum_leader(0);
    offsets_scenario(&cluster.bootstrap());
    scenario(&mut cluster);
}

#[test]
fn the_coordinator_scenarios_hold_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut kafka = KafkaCluster::start_with(KafkaOptions {
        netns: false,
        ..KafkaCluster::three_replicated_options()
    });
    offsets_scenario(&kafka.bootstrap());
    scenario(&mut kafka);
}

/// SCRAM credentials and client quotas altered through one node are served by every node
/// (DescribeUserScramCredentials / DescribeClientQuotas), also after the leader is killed.
#[test]
fn scram_credentials_and_quotas_are_replicated_to_every_node() {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    use kmirror_tests::sasl;
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut cluster = Cluster::start();
    let leader = cluster.quorum_leader(0);
    let addr = |c: &Cluster, i: usize| c.nodes[i].as_ref().unwrap().addr();
    let sb = |s: &str| StrBytes::from_string(s.to_string());
    // Through a node that does not lead: the change is proposed to the leader.
    let via = if leader == 1 { 1 } else { 0 };
    let mut c = WireClient::connect(&addr(&cluster, via)).unwrap();
    let r = c
        .send(
            AlterUserScramCredentialsRequest::default().with_upsertions(vec![sasl::upsertion(
                "alice",
                sasl::SCRAM_SHA_256,
                "alice-pw",
                8192,
            )]),
        )
        .unwrap();
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    let r = c
        .send(
            AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
                .with_entity(vec![EntityData::default()
                    .with_entity_type(sb("user"))
                    .with_entity_name(Some(sb("alice")))])
                .with_ops(vec![OpData::default()
                    .with_key(sb("producer_byte_rate"))
                    .with_value(1048576.0)])]),
        )
        .unwrap();
    assert_eq!(r.entries[0].error_code, 0, "{r:?}");
    let check = |c: &Cluster, i: usize| {
        proc::wait_for(T, "the replicated credential and quota", || {
            let mut w = WireClient::connect(&addr(c, i)).ok()?;
            let d = w
                .send(
                    DescribeUserScramCredentialsRequest::default()
                        .with_users(Some(vec![UserName::default().with_name(sb("alice"))])),
                )
                .ok()?;
            let r = d.results.first()?;
            let creds: Vec<(i8, i32)> = r
                .credential_infos
                .iter()
                .map(|c| (c.mechanism, c.iterations))
                .collect();
            let q = w.send(DescribeClientQuotasRequest::default()).ok()?;
            let quotas: Vec<(String, f64)> = q
                .entries
                .unwrap_or_default()
                .iter()
                .flat_map(|e| e.values.iter().map(|v| (v.key.to_string(), v.value)))
                .collect();
            (r.error_code == 0
                && creds == [(sasl::SCRAM_SHA_256, 8192)]
                && quotas == [("producer_byte_rate".to_string(), 1048576.0)])
            .then_some(())
        })
    };
    for i in 0..3 {
        check(&cluster, i);
    }
    cluster.nodes[leader - 1].as_mut().unwrap().kill_now();
    cluster.nodes[leader - 1] = None;
    cluster.quorum_leader(leader);
    for i in (0..3).filter(|i| *i != leader - 1) {
        check(&cluster, i);
    }
}

/// Issue 20: groups are coordinated by every node (each by the leader of its
/// `__consumer_offsets` partition), and their commits are records there that Kafka's own
/// `OffsetsMessageFormatter` reads. FindCoordinator for 30 groups names more than one node;
/// each group commits through its coordinator; `kafka-console-consumer --formatter
/// org.apache.kafka.tools.consumer.OffsetsMessageFormatter` on `__consumer_offsets` prints
/// every commit.
fn offsets_scenario(boot: &str) {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        FindCoordinatorRequest, GroupId, OffsetCommitRequest, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let first = boot.split(',').next().unwrap().to_string();
    proc::wait_for(T, "three brokers in Metadata", || {
        let mut c = WireClient::connect(&first).ok()?;
        (c.metadata(Some(&[])).ok()?.brokers.len() == 3).then_some(())
    });
    let topic = format!("spread-{}", proc::free_port());
    let mut c = WireClient::connect(&first).unwrap();
    assert_eq!(c.create_topic(&topic, 3, 3, &[]).unwrap(), 0);
    let groups: Vec<String> = (0..30).map(|i| format!("spread-group-{i}")).collect();
    let sb = |s: &str| StrBytes::from_string(s.to_string());
    // (group, node id, host:port) once every group has a coordinator.
    let coordinators = proc::wait_for(T, "a coordinator for every group", || {
        let mut c = WireClient::connect(&first).ok()?;
        let r = c
            .send_at(
                FindCoordinatorRequest::default()
                    .with_key_type(0)
                    .with_coordinator_keys(groups.iter().map(|g| sb(g)).collect()),
                4,
            )
            .ok()?;
        r.coordinators
            .iter()
            .map(|k| {
                (k.error_code == 0).then(|| {
                    (
                        k.key.to_string(),
                        k.node_id.0,
                        format!("{}:{}", k.host, k.port),
                    )
                })
            })
            .collect::<Option<Vec<_>>>()
    });
    let nodes: std::collections::BTreeSet<i32> = coordinators.iter().map(|c| c.1).collect();
    assert!(nodes.len() > 1, "30 groups all coordinated by {nodes:?}");
    // Group i commits offset 100 + i on partition i % 3, through its coordinator.
    for (i, (group, _, addr)) in coordinators.iter().enumerate() {
        let offset = 100 + i as i64;
        proc::wait_for(T, "an offset commit", || {
            let mut c = WireClient::connect(addr).ok()?;
            let r = c
                .send_at(
                    OffsetCommitRequest::default()
                        .with_group_id(GroupId(sb(group)))
                        .with_generation_id_or_member_epoch(-1)
                        .with_topics(vec![OffsetCommitRequestTopic::default()
                            .with_name(TopicName(sb(&topic)))
                            .with_partitions(vec![OffsetCommitRequestPartition::default()
                                .with_partition_index(i as i32 % 3)
                                .with_committed_offset(offset)])]),
                    8,
                )
                .ok()?;
            (r.topics[0].partitions[0].error_code == 0).then_some(())
        });
    }
    // Kafka's formatter prints each OffsetCommit record as
    // {"key":{"type":1,"data":{"group":"g","topic":"t","partition":0}},"value":{..."offset":5,...}}.
    // The consumer exits after --timeout-ms without a record (it has no --max-messages: other
    // records share the topic), so that idle wait is paid on every successful run; a run that
    // ends before every commit arrived is simply run again.
    let printed = proc::wait_for(T, "every commit printed by OffsetsMessageFormatter", || {
        let ran = java::run_tool(
            java::tools::CONSOLE_CONSUMER,
            &[
                "--bootstrap-server",
                boot,
                "--topic",
                "__consumer_offsets",
                "--from-beginning",
                "--formatter",
                "org.apache.kafka.tools.consumer.OffsetsMessageFormatter",
                "--consumer-property",
                "exclude.internal.topics=false",
                "--timeout-ms",
                "5000",
            ],
            T,
        );
        // Kafka 4.1's formatter ends a record without a newline: split on the records.
        let commits: std::collections::BTreeSet<(String, i64)> = ran
            .stdout
            .split("{\"key\":")
            .filter(|l| l.contains(&format!("\"topic\":\"{topic}\"")))
            .filter_map(|l| {
                let group = l.split("\"group\":\"").nth(1)?.split('"').next()?;
                let offset = l.split("\"offset\":").nth(1)?.split([',', '}']).next()?;
                Some((group.to_string(), offset.parse().ok()?))
            })
            .collect();
        (commits.len() == groups.len()).then_some(commits)
    });
    let expected: std::collections::BTreeSet<(String, i64)> = coordinators
        .iter()
        .enumerate()
        .map(|(i, (g, _, _))| (g.clone(), 100 + i as i64))
        .collect();
    assert_eq!(printed, expected);
}
