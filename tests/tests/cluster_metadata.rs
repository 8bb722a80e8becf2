//! Issue 12, step 1 wired: three `kmirror serve --quorum` nodes serve one cluster whose
//! metadata comes from Raft, checked with Kafka's own tools and clients, and the same
//! scenario on a three-node Apache Kafka 4.1.1 (KRaft combined mode) as the reference:
//! - `kafka-topics --create --replication-factor 3 --partitions 6` through node 2, then
//!   `--describe` through every node shows the same leaders, replicas and ISR, leaders spread
//!   over the three brokers;
//! - replication factor 4 on three brokers is INVALID_REPLICATION_FACTOR;
//! - Produce and ListOffsets on a follower: NOT_LEADER_OR_FOLLOWER, Produce naming the
//!   current leader (KIP-951); a consumer Fetch v11+ is served by a follower, as Kafka does;
//! - `kafka-leader-election --election-type preferred` where the preferred replica leads is
//!   ELECTION_NOT_NEEDED;
//! - `kafka-metadata-quorum describe --status / --replication` shows three voters and a leader;
//! - InitProducerId (no transactional id) at every node: no producer id handed out twice;
//!   an idempotent Java producer through node 1 and an idempotent librdkafka producer through
//!   node 2 route to the leaders, write without errors under two distinct ids
//!   (DescribeProducers) and read back what they wrote at the acknowledged offsets;
//! - SIGKILL of a node: after the broker session timeout `--describe` shows new leaders and
//!   ISRs without it, and producing to every partition keeps working; restarted, it is
//!   unfenced and listed again, and once back in the ISRs the periodic preferred-leader
//!   balancing (`auto.leader.rebalance.enable`, check interval shortened to 2 s on both
//!   sides) gives it back the partitions whose preferred replica it is.
//!
//! Follower copies of the records are asserted in `cluster_replication`, not here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kmirror_tests::cluster::{
    describe_topic, run_seq_producer, ClusterOpts, Described, KmirrorCluster, ThreeNodes as Under,
};
use kmirror_tests::helpers::now_ms;
use kmirror_tests::java::{self, tools};
use kmirror_tests::proc;
use kmirror_tests::python;
use kmirror_tests::wire::WireClient;

const TOPIC: &str = "spread";
const PARTITIONS: i32 = 6;
/// broker.session.timeout.ms on both sides (Kafka's default is 9000; shorter keeps the test
/// short, the mechanism is the same).
const SESSION_MS: u64 = 3000;
/// leader.imbalance.check.interval.seconds on both sides (Kafka's default is 300).
const IMBALANCE_CHECK_SECS: u64 = 2;

/// `kafka-topics --describe --topic TOPIC` through `addr`, by partition.
fn describe(addr: &str) -> BTreeMap<i32, Described> {
    let d = describe_topic(addr, TOPIC);
    assert_eq!(d.len(), PARTITIONS as usize, "describe via {addr}: {d:?}");
    d
}

fn sorted(v: &[i32]) -> Vec<i32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

/// Runs a producer program; its ACK lines as (partition, seq, offset) and the DONE counts.
fn produce(mut cmd: std::process::Command, what: &str) -> (Vec<(i32, u64, i64)>, u64, u64) {
    let (acks, acked, errors, _) = run_seq_producer(&mut cmd, what, Duration::from_secs(180));
    (acks, acked, errors)
}

fn java_produce(boot: &str, records: u64) -> (Vec<(i32, u64, i64)>, u64, u64) {
    let mut cmd = java::program("SeqProducer");
    cmd.args([
        boot,
        TOPIC,
        &PARTITIONS.to_string(),
        &records.to_string(),
        "acks=all",
    ]);
    produce(cmd, "Java SeqProducer")
}

fn librdkafka_produce(boot: &str, records: u64) -> (Vec<(i32, u64, i64)>, u64, u64) {
    let mut cmd = python::script("seq_producer.py");
    cmd.args([boot, TOPIC, &PARTITIONS.to_string(), &records.to_string()]);
    produce(cmd, "librdkafka seq_producer.py")
}

fn scenario(c: &mut dyn Under) {
    let name = c.name();
    let started = Instant::now();
    // Create through node 2.
    let ran = java::run_tool(
        tools::TOPIC_COMMAND,
        &[
            "--bootstrap-server",
            &c.addr(2),
            "--create",
            "--topic",
            TOPIC,
            "--partitions",
            &PARTITIONS.to_string(),
            "--replication-factor",
            "3",
        ],
        Duration::from_secs(60),
    );
    assert!(
        ran.stdout.contains("Created topic"),
        "{name}: {}",
        ran.stdout
    );

    // Every node describes the same assignment; leaders spread over all three brokers.
    let first = proc::wait_for(Duration::from_secs(30), "every partition led", || {
        let d = describe(&c.addr(1));
        d.values()
            .all(|p| p.leader > 0 && p.isr.len() == 3)
            .then_some(d)
    });
    for id in 2..=3 {
        assert_eq!(
            describe(&c.addr(id)),
            first,
            "{name}: node {id} describes differently"
        );
    }
    for (p, d) in &first {
        assert_eq!(sorted(&d.replicas), vec![1, 2, 3], "{name}: p{p} {d:?}");
        assert_eq!(sorted(&d.isr), vec![1, 2, 3], "{name}: p{p} {d:?}");
        assert_eq!(
            d.leader, d.replicas[0],
            "{name}: p{p} is led by its preferred replica"
        );
    }
    let leaders: BTreeSet<i32> = first.values().map(|d| d.leader).collect();
    assert_eq!(
        leaders,
        BTreeSet::from([1, 2, 3]),
        "{name}: leaders {first:?}"
    );

    // A follower of partition 0 refuses client reads and writes with NOT_LEADER_OR_FOLLOWER
    // and names the leader (KIP-951), so clients reroute without a Metadata round trip.
    let (leader0, follower0) = (first[&0].leader, first[&0].replicas[1]);
    let mut w = WireClient::connect(&c.addr(follower0)).expect("connect to a follower");
    let now = now_ms();
    let r = w
        .produce_response(TOPIC, 0, kmirror_tests::records::batch(&[b"x"], now))
        .expect("Produce to a follower");
    assert_eq!(r.error_code, 6, "{name}: Produce to a follower: {r:?}");
    assert_eq!(r.current_leader.leader_id.0, leader0, "{name}: {r:?}");
    // A consumer Fetch v11+ may read a follower (KIP-392's fetchOnlyFromLeader is false
    // once the request carries client metadata): answered, not refused, by both.
    let f = w
        .fetch_raw(TOPIC, 0, 0, 1 << 20, false)
        .expect("Fetch from a follower");
    assert_eq!(
        f.error_code, 0,
        "{name}: consumer Fetch v11+ from a follower: {f:?}"
    );
    match w.list_offset(TOPIC, 0, -1) {
        Err(kmirror_tests::wire::WireError::Broker { code, .. }) => {
            assert_eq!(code, 6, "{name}: ListOffsets on a follower")
        }
        other => panic!("{name}: ListOffsets on a follower answered {other:?}"),
    }

    // A preferred election where the preferred replica already leads: nothing to do.
    let ran = proc::run(
        java::tool("org.apache.kafka.tools.LeaderElectionCommand").args([
            "--bootstrap-server",
            &c.addr(3),
            "--election-type",
            "preferred",
            "--topic",
            TOPIC,
            "--partition",
            "0",
        ]),
        Duration::from_secs(60),
    );
    assert!(
        ran.stdout.contains(&format!(
            "Valid replica already elected for partitions {TOPIC}-0"
        )),
        "{name}: kafka-leader-election answered:\n{}\n{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 10)
    );

    // Replication factor 4 on three brokers.
    let ran = proc::run(
        java::tool(tools::TOPIC_COMMAND).args([
            "--bootstrap-server",
            &c.addr(3),
            "--create",
            "--topic",
            "too-many",
            "--partitions",
            "1",
            "--replication-factor",
            "4",
        ]),
        Duration::from_secs(60),
    );
    assert!(
        format!("{}{}", ran.stdout, ran.stderr).contains("InvalidReplicationFactorException"),
        "{name}: RF 4 answered:\n{}\n{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 10)
    );

    // The metadata quorum: three voters, a leader among them.
    let ran = java::run_tool(
        "org.apache.kafka.tools.MetadataQuorumCommand",
        &["--bootstrap-server", &c.addr(1), "describe", "--status"],
        Duration::from_secs(60),
    );
    let leader: i32 = ran
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("LeaderId:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name}: no LeaderId in\n{}", ran.stdout));
    assert!((1..=3).contains(&leader), "{name}: leader {leader}");
    let voters = ran
        .stdout
        .lines()
        .find(|l| l.starts_with("CurrentVoters:"))
        .unwrap_or("");
    for id in 1..=3 {
        assert!(
            voters.contains(&format!("\"id\": {id}")),
            "{name}: voters {voters}"
        );
    }
    let ran = java::run_tool(
        "org.apache.kafka.tools.MetadataQuorumCommand",
        &[
            "--bootstrap-server",
            &c.addr(2),
            "describe",
            "--replication",
        ],
        Duration::from_secs(60),
    );
    let rows: Vec<&str> = ran
        .stdout
        .lines()
        .filter(|l| l.contains("Leader") || l.contains("Follower"))
        .collect();
    assert_eq!(rows.len(), 3, "{name}: --replication\n{}", ran.stdout);
    assert_eq!(
        rows.iter().filter(|r| r.contains("Leader")).count(),
        1,
        "{name}"
    );

    // Producer ids are unique cluster-wide: an idempotent producer's InitProducerId is
    // answered by any broker (KIP-730 blocks from the controller), and no two nodes hand out
    // the same id.
    let mut pids = BTreeSet::new();
    for id in 1..=3 {
        for _ in 0..2 {
            // COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE while the node's
            // producer-id manager starts: retriable, as clients treat them.
            let r = proc::wait_for(Duration::from_secs(30), "InitProducerId", || {
                let mut w = WireClient::connect(&c.addr(id)).ok()?;
                let r = w
                    .send(
                        kafka_protocol::messages::InitProducerIdRequest::default()
                            .with_transactional_id(None)
                            .with_transaction_timeout_ms(60_000)
                            .with_producer_id(kafka_protocol::messages::ProducerId(-1))
                            .with_producer_epoch(-1),
                    )
                    .ok()?;
                (![14, 15].contains(&r.error_code)).then_some(r)
            });
            assert_eq!(
                r.error_code, 0,
                "{name}: InitProducerId at node {id}: {r:?}"
            );
            assert!(
                pids.insert(r.producer_id.0),
                "{name}: node {id} handed out producer id {} twice: {pids:?}",
                r.producer_id.0
            );
        }
    }

    // An idempotent Java producer through node 1 only and an idempotent librdkafka producer
    // through node 2 only: they must route to the leaders, and their ids (asked at different
    // nodes) must not collide there (a collision is OUT_OF_ORDER_SEQUENCE or a record
    // dropped as a duplicate). Every acknowledged record is read back at its offset.
    let (java_acks, acked, errors) = java_produce(&c.addr(1), 300);
    assert_eq!((acked, errors), (300, 0), "{name}: Java producer");
    let (rd_acks, acked, errors) = librdkafka_produce(&c.addr(2), 300);
    assert_eq!((acked, errors), (300, 0), "{name}: librdkafka producer");
    // Both are active producers of every partition they wrote, under different ids.
    let mut w = WireClient::connect_leader(&c.addr(3), TOPIC, 0).expect("leader of p0");
    let d = w
        .send(
            kafka_protocol::messages::DescribeProducersRequest::default().with_topics(vec![
                kafka_protocol::messages::describe_producers_request::TopicRequest::default()
                    .with_name(kafka_protocol::messages::TopicName(TOPIC.into()))
                    .with_partition_indexes(vec![0]),
            ]),
        )
        .expect("DescribeProducers");
    let active: BTreeSet<i64> = d
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| &p.active_producers)
        .map(|a| a.producer_id.0)
        .collect();
    assert_eq!(active.len(), 2, "{name}: producers of p0: {d:?}");
    let ran = proc::run(
        python::script("record_dump.py").args([&c.addr(3), TOPIC, &PARTITIONS.to_string()]),
        Duration::from_secs(180),
    );
    let mut stored: BTreeMap<(i32, i64), String> = BTreeMap::new();
    for l in ran.stdout.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let ["R", p, o, _key, value] = f.as_slice() {
            stored.insert((p.parse().unwrap(), o.parse().unwrap()), value.to_string());
        }
    }
    assert_eq!(
        stored.len(),
        600,
        "{name}: read back\n{}",
        proc::last_lines(&ran.stdout, 10)
    );
    for (p, seq, off) in java_acks.iter().chain(&rd_acks) {
        let v = stored.get(&(*p, *off)).map(String::as_str).unwrap_or("");
        assert!(
            v.starts_with(&format!("{p}:{seq}:")),
            "{name}: p{p}@{off} holds {v:?}, want seq {seq}"
        );
    }

    // SIGKILL the leader of partition 0.
    let victim = first[&0].leader;
    let killed_at = Instant::now();
    c.kill(victim);
    let live = (1..=3).find(|i| *i != victim).unwrap();
    let after = proc::wait_for(
        Duration::from_millis(SESSION_MS) + Duration::from_secs(40),
        "leaders and ISR without the killed node",
        || {
            let d = describe(&c.addr(live));
            d.values()
                .all(|p| p.leader > 0 && p.leader != victim && !p.isr.contains(&victim))
                .then_some(d)
        },
    );
    let fenced_after = killed_at.elapsed();
    // Metadata names the killed broker's replicas offline (Kafka: a fenced broker's
    // replicas), on every partition.
    let offline = |addr: &str| -> BTreeMap<i32, Vec<i32>> {
        let mut w = WireClient::connect(addr).expect("connect");
        let m = w.metadata(Some(&[TOPIC])).expect("Metadata");
        m.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| {
                let mut o: Vec<i32> = p.offline_replicas.iter().map(|b| b.0).collect();
                o.sort_unstable();
                (p.partition_index, o)
            })
            .collect()
    };
    let off = offline(&c.addr(live));
    assert_eq!(off.len(), PARTITIONS as usize, "{name}: {off:?}");
    assert!(
        off.values().all(|o| o == &vec![victim]),
        "{name}: offline replicas with node {victim} dead: {off:?}"
    );
    for (p, d) in &after {
        assert_eq!(
            d.replicas, first[p].replicas,
            "{name}: replicas never change"
        );
        assert!(d.isr.contains(&d.leader), "{name}: p{p} {d:?}");
    }
    let others: Vec<String> = (1..=3)
        .filter(|i| *i != victim)
        .map(|i| c.addr(i))
        .collect();
    let (_, acked, errors) = java_produce(&others.join(","), 120);
    assert_eq!(
        (acked, errors),
        (120, 0),
        "{name}: producing with node {victim} dead"
    );

    // Restarted, it is unfenced and listed again by every node.
    c.restart(victim);
    for id in 1..=3 {
        proc::wait_for(Duration::from_secs(60), "three brokers listed", || {
            let mut w = WireClient::connect(&c.addr(id)).ok()?;
            let m = w.metadata(Some(&[])).ok()?;
            (m.brokers.len() == 3).then_some(())
        });
    }
    // Unfenced again: no replica offline.
    proc::wait_for(Duration::from_secs(60), "no offline replica", || {
        offline(&c.addr(live))
            .values()
            .all(Vec::is_empty)
            .then_some(())
    });
    // Back in the ISRs, the balancing returns every partition to its preferred replica:
    // the restarted node leads the partitions listing it first again, on every node's view.
    let restarted = Instant::now();
    for id in 1..=3 {
        proc::wait_for(
            Duration::from_secs(60),
            "preferred leaders after the restart",
            || {
                let d = describe(&c.addr(id));
                (d.len() == PARTITIONS as usize
                    && d.iter().all(|(p, d)| {
                        d.leader == first[p].replicas[0] && sorted(&d.isr) == [1, 2, 3]
                    }))
                .then_some(())
            },
        );
    }
    assert!(
        first.values().any(|d| d.replicas[0] == victim),
        "{name}: node {victim} is the preferred replica of some partition"
    );
    eprintln!(
        "{name}: leaders and ISR without node {victim} {:.1} s after SIGKILL (session {SESSION_MS} ms); preferred leaders back {:.1} s after the restart; scenario {:.1} s",
        fenced_after.as_secs_f64(),
        restarted.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn three_kmirror_nodes_serve_raft_metadata_as_kafka_does() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut c = KmirrorCluster::start(
        3,
        ClusterOpts {
            session_timeout_ms: SESSION_MS,
            extra: [
                "--cores",
                "1",
                "--leader-imbalance-check-interval-seconds",
                &IMBALANCE_CHECK_SECS.to_string(),
            ]
            .map(String::from)
            .to_vec(),
            ..ClusterOpts::default()
        },
    );
    c.dump_logs_on_panic(40, |c| scenario(c));
}

#[test]
fn the_same_scenario_on_three_kafka_nodes() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut k =
        kmirror_tests::kafka::KafkaCluster::start_with(kmirror_tests::kafka::KafkaOptions {
            nodes: 3,
            props: [
                ("broker.session.timeout.ms", SESSION_MS.to_string()),
                ("broker.heartbeat.interval.ms", "500".into()),
                (
                    "leader.imbalance.check.interval.seconds",
                    IMBALANCE_CHECK_SECS.to_string(),
                ),
            ]
            .map(|(k, v)| (k.to_string(), v))
            .to_vec(),
            ..kmirror_tests::kafka::KafkaOptions::default()
        });
    scenario(&mut k);
}

/// kmirror only: ACLs and deletions proposed through one node reach every node (the ACL set
/// and the replicas' directories), SIGTERM is a controlled shutdown (leaderships move at
/// once), and the replicated metadata survives restarting every node (same topic id and
/// replica lists, same ACLs).
#[test]
fn acls_and_deletions_reach_every_kmirror_node_and_survive_a_full_restart() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut extra: Vec<String> = ClusterOpts::default().extra;
    extra.extend(["--authorizer", "true", "--super-users", "User:ANONYMOUS"].map(String::from));
    let mut c = KmirrorCluster::start(
        3,
        ClusterOpts {
            extra,
            session_timeout_ms: SESSION_MS,
            ..ClusterOpts::default()
        },
    );
    let acls = |c: &KmirrorCluster, id: usize| {
        java::run_tool(
            "org.apache.kafka.tools.AclCommand",
            &["--bootstrap-server", &c.node(id).addr(), "--list"],
            Duration::from_secs(60),
        )
        .stdout
    };
    let topic_id = |c: &KmirrorCluster, id: usize, topic: &str| {
        WireClient::connect(&c.node(id).addr())
            .and_then(|mut w| w.partition_info(topic, 0))
            .map(|p| p.topic_id)
            .ok()
    };
    let dirs = |c: &KmirrorCluster, topic: &str| -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for id in 1..=3 {
            let d = c.node(id).data_dir().join("topics");
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if name.starts_with(&format!("{topic}-")) {
                    out.push((id, name));
                }
            }
        }
        out.sort();
        out
    };
    c.dump_logs_on_panic(40, |c| {
        for (topic, rf) in [("kept", "3"), ("dropped", "2")] {
            java::run_tool(
                tools::TOPIC_COMMAND,
                &[
                    "--bootstrap-server",
                    &c.node(1).addr(),
                    "--create",
                    "--topic",
                    topic,
                    "--partitions",
                    "3",
                    "--replication-factor",
                    rf,
                ],
                Duration::from_secs(60),
            );
        }
        // RF 2 x 3 partitions: six replica directories, two per node.
        let placed = proc::wait_for(Duration::from_secs(20), "six replica dirs", || {
            let d = dirs(c, "dropped");
            (d.len() == 6).then_some(d)
        });
        for id in 1..=3 {
            assert_eq!(
                placed.iter().filter(|(n, _)| *n == id).count(),
                2,
                "{placed:?}"
            );
        }
        java::run_tool(
            "org.apache.kafka.tools.AclCommand",
            &[
                "--bootstrap-server",
                &c.node(1).addr(),
                "--add",
                "--allow-principal",
                "User:alice",
                "--operation",
                "Read",
                "--topic",
                "kept",
            ],
            Duration::from_secs(60),
        );
        for id in 1..=3 {
            let l = acls(c, id);
            assert!(
                l.contains("principal=User:alice") && l.contains("name=kept"),
                "node {id}: {l}"
            );
        }
        java::run_tool(
            tools::TOPIC_COMMAND,
            &[
                "--bootstrap-server",
                &c.node(3).addr(),
                "--delete",
                "--topic",
                "dropped",
            ],
            Duration::from_secs(60),
        );
        proc::wait_for(
            Duration::from_secs(20),
            "replica dirs deleted everywhere",
            || dirs(c, "dropped").is_empty().then_some(()),
        );
        // Controlled shutdown (SIGTERM): node 1 fences itself before it exits, so right
        // after, without waiting for the session timeout, it leads nothing and is not listed.
        assert!(c.stop(1), "node 1 stops cleanly on SIGTERM");
        let m = WireClient::connect(&c.node(2).addr())
            .and_then(|mut w| w.metadata(Some(&["kept"])))
            .expect("Metadata via node 2");
        let brokers: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
        assert!(!brokers.contains(&1), "node 1 still listed: {brokers:?}");
        let leaders: Vec<i32> = m.topics[0]
            .partitions
            .iter()
            .map(|p| p.leader_id.0)
            .collect();
        assert!(
            leaders.iter().all(|l| *l == 2 || *l == 3),
            "leaders right after node 1's controlled shutdown: {leaders:?}"
        );
        c.restart(1);
        for n in 1..=3 {
            c.wait_brokers(n, 3, Duration::from_secs(60));
        }
        let id = topic_id(c, 2, "kept").expect("topic id");
        let before = describe_topic(&c.node(2).addr(), "kept");
        for n in 1..=3 {
            assert!(c.stop(n), "node {n} stops cleanly on SIGTERM");
        }
        for n in 1..=3 {
            c.restart(n);
        }
        for n in 1..=3 {
            c.wait_brokers(n, 3, Duration::from_secs(60));
            proc::wait_for(Duration::from_secs(30), "topic after restart", || {
                (topic_id(c, n, "kept") == Some(id)).then_some(())
            });
            assert!(
                topic_id(c, n, "dropped").is_none(),
                "node {n} still has the deleted topic"
            );
            let l = acls(c, n);
            assert!(
                l.contains("principal=User:alice"),
                "node {n} after restart: {l}"
            );
        }
        let after = describe_topic(&c.node(3).addr(), "kept");
        let replicas = |d: &BTreeMap<i32, Described>| {
            d.values().map(|p| p.replicas.clone()).collect::<Vec<_>>()
        };
        assert_eq!(replicas(&after), replicas(&before));
    });
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// kmirror only: node 3 is stopped while a topic is deleted and re-created under the same
/// name with other records. Restarted, it must not serve the old topic's log from the old
/// directory: the directory's `partition.metadata` names the old topic id, so the node
/// removes it (a stray log, as Kafka does) and replicates the new topic from its leader;
/// its replica ends log-equal to the leader's.
#[test]
fn a_node_down_while_its_topic_is_recreated_serves_only_the_new_topic() {
    const T: &str = "reborn";
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut c = KmirrorCluster::start(
        3,
        ClusterOpts {
            session_timeout_ms: SESSION_MS,
            ..ClusterOpts::default()
        },
    );
    let create = |c: &KmirrorCluster| {
        let ran = java::run_tool(
            tools::TOPIC_COMMAND,
            &[
                "--bootstrap-server",
                &c.node(1).addr(),
                "--create",
                "--topic",
                T,
                "--replica-assignment",
                "1:2:3",
            ],
            Duration::from_secs(60),
        );
        assert!(ran.stdout.contains("Created topic"), "{}", ran.stdout);
    };
    let produce = |c: &KmirrorCluster, prefix: &str, n: usize| {
        let values: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("{prefix}-{i}").into_bytes())
            .collect();
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let last = WireClient::connect_leader(&c.node(1).addr(), T, 0).and_then(|mut w| {
                w.produce_response(T, 0, kmirror_tests::records::batch(&refs, now_ms()))
            });
            match last {
                Ok(r) if r.error_code == 0 => break,
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
                other => panic!("{prefix} records not acknowledged: {other:?}"),
            }
        }
    };
    // Everything node `id` serves of partition 0 (a consumer Fetch v11+ reads a follower up
    // to its high watermark) and its high watermark.
    let served = |c: &KmirrorCluster, id: usize| -> Option<(i64, Vec<u8>)> {
        let mut w = WireClient::connect(&c.node(id).addr()).ok()?;
        let f = w.fetch_raw(T, 0, 0, 8 << 20, false).ok()?;
        (f.error_code == 0).then(|| (f.high_watermark, f.records.unwrap_or_default().to_vec()))
    };
    let meta_file = |c: &KmirrorCluster, id: usize| {
        std::fs::read_to_string(
            c.node(id)
                .data_dir()
                .join("topics")
                .join(format!("{T}-0"))
                .join("partition.metadata"),
        )
        .unwrap_or_default()
    };
    c.dump_logs_on_panic(40, |c| {
        create(c);
        produce(c, "old", 50);
        let old = proc::wait_for(
            Duration::from_secs(30),
            "node 3 holds the old topic",
            || {
                let leader = served(c, 1)?;
                (leader.0 > 0 && served(c, 3)? == leader).then_some(leader)
            },
        );
        let old_file = meta_file(c, 3);
        assert!(
            old_file.starts_with("version: 0\ntopic_id: "),
            "partition.metadata: {old_file:?}"
        );
        assert_eq!(meta_file(c, 1), old_file, "one topic id on every replica");

        assert!(c.stop(3), "node 3 stops cleanly");
        // A copy of node 3's old directory, put back below as if removing it had failed.
        let dir3 = c.node(3).data_dir().join("topics").join(format!("{T}-0"));
        let saved = c.node(3).data_dir().with_extension("saved-old-partition");
        copy_dir(&dir3, &saved);
        let ran = java::run_tool(
            tools::TOPIC_COMMAND,
            &[
                "--bootstrap-server",
                &c.node(1).addr(),
                "--delete",
                "--topic",
                T,
            ],
            Duration::from_secs(60),
        );
        assert!(ran.status.success(), "{}", ran.stderr);
        proc::wait_for(Duration::from_secs(30), "topic gone", || {
            let mut w = WireClient::connect(&c.node(2).addr()).ok()?;
            w.partition_info(T, 0).is_err().then_some(())
        });
        create(c);
        produce(c, "new", 7);
        let new_file = meta_file(c, 1);
        assert_ne!(new_file, old_file, "the re-created topic has a new id");
        assert_eq!(
            meta_file(c, 3),
            old_file,
            "node 3 still has the old directory"
        );

        c.restart(3);
        let (hw, records) = proc::wait_for(
            Duration::from_secs(60),
            "node 3 log-equal to the leader",
            || {
                let leader = served(c, 1)?;
                (leader.0 > 0 && served(c, 3)? == leader).then_some(leader)
            },
        );
        assert_ne!((hw, &records), (old.0, &old.1));
        let text = String::from_utf8_lossy(&records);
        assert!(
            text.contains("new-6") && !text.contains("old-"),
            "node 3 serves {text:?}"
        );
        assert_eq!(meta_file(c, 3), new_file, "node 3 records the new topic id");
        // The leader's log end too: nothing of the old log survives past the new one's end.
        let mut w = WireClient::connect(&c.node(1).addr()).unwrap();
        assert_eq!(w.log_bounds(T, 0).unwrap(), (0, hw));

        // Node 3 crashed after applying the deletion but before removing the directory (the
        // reconciler never sees the old topic again): the directory itself says which topic
        // it belongs to, so the stray log is removed when the partition opens.
        assert!(c.stop(3), "node 3 stops cleanly");
        std::fs::remove_dir_all(&dir3).unwrap();
        copy_dir(&saved, &dir3);
        assert_eq!(meta_file(c, 3), old_file);
        c.restart(3);
        let again = proc::wait_for(Duration::from_secs(60), "node 3 log-equal again", || {
            let leader = served(c, 1)?;
            (leader.0 == hw && served(c, 3)? == leader).then_some(leader)
        });
        assert_eq!(again, (hw, records.clone()));
        assert_eq!(meta_file(c, 3), new_file, "the stray log was replaced");
    });
}
