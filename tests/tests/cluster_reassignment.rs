//! Partition reassignment (AlterPartitionReassignments 45 / ListPartitionReassignments 46)
//! on three `kmirror serve --quorum` nodes, with the same scenario on three Apache Kafka 4.1.1
//! nodes as the reference:
//! - `--generate` proposes a plan; a topic with two partitions on brokers {1,2} (leader 1);
//!   a Java idempotent producer writes acks=all while `kafka-reassign-partitions --execute` (Kafka's own tool) moves
//!   partition 0 to {2,3} and franz-go (kmsg AlterPartitionAssignments, as kadm sends it)
//!   moves partition 1 to {3,2}: both lose their leader 1. `--verify` reports both complete,
//!   ListPartitionReassignments lists nothing, `kafka-topics --describe` shows the targets
//!   with full ISRs; read back, every acknowledged record is at its offset, exactly once and
//!   in order;
//! - Kafka's refusals, by code: unknown partition (3), a repeated broker and an unregistered
//!   one (INVALID_REPLICA_ASSIGNMENT, 39), a cancel with nothing running
//!   (NO_REASSIGNMENT_IN_PROGRESS, 85);
//! - a single replica (RF 1) moved to another node: its records read back at their offsets;
//! - a reassignment that cannot finish (its new replica's node is down) is listed with its
//!   adding/removing replicas and full replica set (also by `--list`), `--verify` says it is
//!   in progress, and `--cancel` reverts it;
//! - kmirror only: the removed replicas' directories are gone, and after a clean stop the
//!   final replicas' segment files are byte-equal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_tests::cluster::{
    describe_topic, kafka_three_nodes, log_bytes, run_seq_producer, ClusterOpts, Described,
    KmirrorCluster, Produced, ThreeNodes as Under,
};
use kmirror_tests::helpers::read_back;
use kmirror_tests::java;
use kmirror_tests::proc;

const TOPIC: &str = "moved";
const STUCK: &str = "stuck";
const SINGLE: &str = "single";
const PARTITIONS: i32 = 2;
const SESSION_MS: u64 = 3000;
const RECORDS: u64 = 4000;
const REASSIGN: &str = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";

fn create(c: &dyn Under, topic: &str, assignment: &str) {
    java::run_tool(
        java::tools::TOPIC_COMMAND,
        &[
            "--bootstrap-server",
            &c.addr(1),
            "--create",
            "--topic",
            topic,
            "--replica-assignment",
            assignment,
        ],
        Duration::from_secs(60),
    );
}

fn describe(c: &dyn Under, via: i32, topic: &str) -> BTreeMap<i32, Described> {
    describe_topic(&c.addr(via), topic)
}

/// Waits until `topic` is described with exactly these (replicas, in order) and every replica
/// in the ISR, led by one of them.
fn wait_assignment(c: &dyn Under, via: i32, topic: &str, want: &[&[i32]], timeout: Duration) {
    proc::wait_for(
        timeout,
        &format!("{topic} on {want:?}, all in sync"),
        || {
            let d = describe(c, via, topic);
            let ok = d.len() == want.len()
                && d.iter().all(|(p, d)| {
                    let mut isr = d.isr.clone();
                    isr.sort_unstable();
                    let mut r = d.replicas.clone();
                    r.sort_unstable();
                    d.replicas == want[*p as usize] && isr == r && r.contains(&d.leader)
                });
            ok.then_some(())
        },
    );
}

/// Runs kafka-reassign-partitions with `args`; (exit ok, stdout + stderr).
fn reassign_tool(c: &dyn Under, args: &[&str]) -> (bool, String) {
    let boot = c.addr(2);
    let ran = proc::run(
        java::tool(REASSIGN)
            .args(["--bootstrap-server", &boot])
            .args(args),
        Duration::from_secs(120),
    );
    (
        ran.status.success(),
        format!("{}\n{}", ran.stdout, ran.stderr),
    )
}

fn plan_file(dir: &std::path::Path, name: &str, moves: &[(&str, i32, &[i32])]) -> String {
    let parts: Vec<String> = moves
        .iter()
        .map(|(t, p, r)| {
            let r: Vec<String> = r.iter().map(|b| b.to_string()).collect();
            format!(
                r#"{{"topic":"{t}","partition":{p},"replicas":[{}]}}"#,
                r.join(",")
            )
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(r#"{{"version":1,"partitions":[{}]}}"#, parts.join(",")),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

/// franz's reassign mode: the responses it printed, by API name.
fn franz_reassign(
    c: &dyn Under,
    topic: &str,
    partition: i32,
    replicas: &str,
) -> BTreeMap<String, serde_json::Value> {
    let mut cmd = kmirror_tests::golang::franz("reassign", &c.addr(1), topic);
    cmd.args([
        "-reassign-partition",
        &partition.to_string(),
        "-reassign-replicas",
        replicas,
    ]);
    let ran = proc::run(&mut cmd, Duration::from_secs(90));
    let mut out = BTreeMap::new();
    for line in ran.stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["ev"], "resp", "franz: {line}\n{}", ran.stderr);
        out.insert(v["api"].as_str().unwrap().to_string(), v["body"].clone());
    }
    out
}

/// The code franz got for its one AlterPartitionReassignments partition.
fn alter_code(c: &dyn Under, topic: &str, partition: i32, replicas: &str) -> i64 {
    let r = franz_reassign(c, topic, partition, replicas);
    let body = &r["AlterPartitionReassignments"];
    assert_eq!(body["ErrorCode"], 0, "{body}");
    body["Topics"][0]["Partitions"][0]["ErrorCode"]
        .as_i64()
        .unwrap()
}

/// ListPartitionReassignments of one partition: (replicas, adding, removing), if listed.
fn listed(c: &dyn Under, topic: &str, partition: i32) -> Option<(Vec<i64>, Vec<i64>, Vec<i64>)> {
    let r = franz_reassign(c, topic, partition, "");
    let body = &r["ListPartitionReassignments"];
    assert_eq!(body["ErrorCode"], 0, "{body}");
    let p = &body["Topics"].as_array()?.first()?["Partitions"][0];
    let ids = |k: &str| -> Vec<i64> {
        p[k].as_array()
            .map(|a| a.iter().filter_map(|v| v.as_i64()).collect())
            .unwrap_or_default()
    };
    Some((
        ids("Replicas"),
        ids("AddingReplicas"),
        ids("RemovingReplicas"),
    ))
}

fn scenario(c: &mut dyn Under) {
    let name = c.name();
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    create(c, TOPIC, "1:2,1:2");
    wait_assignment(c, 2, TOPIC, &[&[1, 2], &[1, 2]], Duration::from_secs(60));
    assert!(describe(c, 2, TOPIC).values().all(|d| d.leader == 1));

    // Refusals, with Kafka's codes.
    assert_eq!(
        alter_code(c, TOPIC, 7, "1,2"),
        3,
        "{name}: unknown partition"
    );
    assert_eq!(
        alter_code(c, TOPIC, 0, "2,2"),
        39,
        "{name}: repeated broker"
    );
    assert_eq!(
        alter_code(c, TOPIC, 0, "1,9"),
        39,
        "{name}: unregistered broker"
    );
    assert_eq!(
        alter_code(c, TOPIC, 0, "cancel"),
        85,
        "{name}: nothing to cancel"
    );
    assert_eq!(alter_code(c, "nope", 0, "1,2"), 3, "{name}: unknown topic");

    // The producer runs while both partitions move off broker 1, their leader.
    let boot = (1..=3).map(|i| c.addr(i)).collect::<Vec<_>>().join(",");
    let producer = std::thread::spawn(move || -> Produced {
        let mut cmd = java::program("SeqProducer");
        cmd.args([
            &boot,
            TOPIC,
            &PARTITIONS.to_string(),
            &RECORDS.to_string(),
            "seqproducer.rate=800",
        ]);
        run_seq_producer(&mut cmd, "Java SeqProducer", Duration::from_secs(240))
    });
    std::thread::sleep(Duration::from_millis(1500));
    // --generate proposes a plan from DescribeCluster and the topic's partitions.
    let topics = tmp.path().join("topics.json");
    std::fs::write(
        &topics,
        format!(r#"{{"version":1,"topics":[{{"topic":"{TOPIC}"}}]}}"#),
    )
    .unwrap();
    let (ok, out) = reassign_tool(
        c,
        &[
            "--topics-to-move-json-file",
            &topics.to_string_lossy(),
            "--broker-list",
            "2,3",
            "--generate",
        ],
    );
    assert!(
        ok && out.contains("Proposed partition reassignment configuration")
            && out.contains(r#""replicas":[1,2]"#),
        "{name}: --generate: {out}"
    );
    let plan = plan_file(tmp.path(), "plan.json", &[(TOPIC, 0, &[2, 3])]);
    let (ok, out) = reassign_tool(c, &["--reassignment-json-file", &plan, "--execute"]);
    assert!(ok, "{name}: --execute: {out}");
    assert!(
        out.contains("Successfully started partition reassignment"),
        "{name}: {out}"
    );
    assert_eq!(alter_code(c, TOPIC, 1, "3,2"), 0, "{name}: franz moves p1");
    let (acks, acked, errors, errs) = producer.join().unwrap();
    assert_eq!((acked, errors), (RECORDS, 0), "{name}: producer: {errs:?}");

    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let verify = loop {
        let (ok, out) = reassign_tool(c, &["--reassignment-json-file", &plan, "--verify"]);
        if ok && out.contains("Reassignment of partition moved-0 is completed") {
            break out;
        }
        assert!(Instant::now() < deadline, "{name}: --verify: {last}");
        last = out;
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(!verify.contains("still in progress"), "{name}: {verify}");
    wait_assignment(c, 1, TOPIC, &[&[2, 3], &[3, 2]], Duration::from_secs(60));
    assert_eq!(
        listed(c, TOPIC, 0),
        None,
        "{name}: nothing listed at the end"
    );
    assert_eq!(
        listed(c, TOPIC, 1),
        None,
        "{name}: nothing listed at the end"
    );

    // Every acknowledged record at its offset, exactly once and in order.
    let stored = read_back(&c.addr(3), TOPIC, PARTITIONS);
    for (p, seq, off) in &acks {
        let v = stored.get(&(*p, *off)).map(String::as_str).unwrap_or("");
        assert!(
            v.starts_with(&format!("{p}:{seq}:")),
            "{name}: p{p}@{off} holds {v:?}, want seq {seq}"
        );
    }
    for p in 0..PARTITIONS {
        let seqs: Vec<u64> = stored
            .range((p, 0)..(p + 1, 0))
            .map(|(_, v)| v.split(':').nth(1).unwrap().parse().unwrap())
            .collect();
        let want: Vec<u64> = (0..RECORDS / PARTITIONS as u64).collect();
        assert_eq!(seqs, want, "{name}: p{p}: the records in offset order");
    }

    // A single replica moved to another node (RF 1 -> the new node alone): its records
    // stay readable at their offsets throughout and after.
    create(c, SINGLE, "1");
    wait_assignment(c, 1, SINGLE, &[&[1]], Duration::from_secs(60));
    let produced = kmirror_tests::golang::run(
        kmirror_tests::golang::franz("produce", &c.addr(1), SINGLE).args(["-n", "20"]),
    );
    assert_eq!(produced.acks.len(), 20, "{name}: {}", produced.raw);
    assert_eq!(alter_code(c, SINGLE, 0, "3"), 0, "{name}: RF 1 onto node 3");
    wait_assignment(c, 2, SINGLE, &[&[3]], Duration::from_secs(60));
    let read = kmirror_tests::golang::run(
        kmirror_tests::golang::franz("consume", &c.addr(2), SINGLE).args(["-n", "20"]),
    );
    assert_eq!(
        read.records, produced.acks,
        "{name}: the moved single replica"
    );

    // A reassignment that cannot finish: its new replica's node is down (registered, fenced).
    create(c, STUCK, "1:2");
    wait_assignment(c, 1, STUCK, &[&[1, 2]], Duration::from_secs(60));
    c.kill(3);
    std::thread::sleep(Duration::from_millis(SESSION_MS + 1000));
    // The tool refuses a broker DescribeCluster does not list (a fenced one), so franz
    // starts this one; the controller accepts any registered broker, as Kafka's does.
    let stuck = plan_file(tmp.path(), "stuck.json", &[(STUCK, 0, &[1, 3])]);
    assert_eq!(
        alter_code(c, STUCK, 0, "1,3"),
        0,
        "{name}: onto the down node"
    );
    assert_eq!(
        listed(c, STUCK, 0),
        Some((vec![1, 3, 2], vec![3], vec![2])),
        "{name}: in progress"
    );
    let (ok, out) = reassign_tool(c, &["--list"]);
    assert!(ok && out.contains("stuck-0"), "{name}: --list: {out}");
    let d = describe(c, 1, STUCK);
    assert_eq!(
        d[&0].replicas,
        [1, 3, 2],
        "{name}: the full replica set meanwhile"
    );
    let (ok, out) = reassign_tool(c, &["--reassignment-json-file", &stuck, "--verify"]);
    assert!(
        ok && out.contains("Reassignment of partition stuck-0 is still in progress"),
        "{name}: {out}"
    );
    // After cancelling, the tool clears throttles on every broker of the plan, which fails
    // (after its API timeout, shortened here) for the one that is down, on Kafka as well.
    let props = tmp.path().join("admin.properties");
    std::fs::write(
        &props,
        "default.api.timeout.ms=8000\nrequest.timeout.ms=4000\n",
    )
    .unwrap();
    let (_, out) = reassign_tool(
        c,
        &[
            "--reassignment-json-file",
            &stuck,
            "--cancel",
            "--command-config",
            &props.to_string_lossy(),
        ],
    );
    assert!(
        out.contains("Successfully cancelled partition reassignment"),
        "{name}: {out}"
    );
    assert_eq!(listed(c, STUCK, 0), None, "{name}: cancelled");
    wait_assignment(c, 1, STUCK, &[&[1, 2]], Duration::from_secs(30));
    c.restart(3);
    wait_assignment(c, 3, TOPIC, &[&[2, 3], &[3, 2]], Duration::from_secs(90));
    eprintln!("{name}: scenario {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn three_kmirror_nodes_reassign_partitions_as_kafka_does() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut c = KmirrorCluster::start(
        3,
        ClusterOpts {
            session_timeout_ms: SESSION_MS,
            ..ClusterOpts::default()
        },
    );
    c.dump_logs_on_panic(60, |c| {
        scenario(c);
        let dirs: Vec<std::path::PathBuf> = (1..=3).map(|n| c.node(n).data_dir()).collect();
        let dir = |node: usize, p: i32| dirs[node - 1].join("topics").join(format!("{TOPIC}-{p}"));
        // The removed replicas' directories are gone.
        for p in 0..PARTITIONS {
            assert!(!dir(1, p).exists(), "{TOPIC}-{p} still on node 1");
        }
        assert!(
            !dirs[0].join("topics").join(format!("{SINGLE}-0")).exists(),
            "{SINGLE}-0 still on node 1"
        );
        assert!(
            !c.node(3)
                .data_dir()
                .join("topics")
                .join(format!("{STUCK}-0"))
                .exists(),
            "the cancelled replica of {STUCK}-0 on node 3"
        );
        // Log-equal final replicas (after the followers fetched the last high watermark).
        std::thread::sleep(Duration::from_secs(2));
        c.stop_all();
        for p in 0..PARTITIONS {
            let (a, b) = (log_bytes(&dir(2, p)), log_bytes(&dir(3, p)));
            assert_eq!(
                a.0,
                (RECORDS / PARTITIONS as u64) as i64,
                "{TOPIC}-{p} log end"
            );
            assert_eq!(a.0, b.0, "{TOPIC}-{p}: log ends of nodes 2 and 3");
            assert!(a.1 == b.1, "{TOPIC}-{p}: nodes 2 and 3 are not log-equal");
        }
    });
}

#[test]
fn the_same_scenario_on_three_kafka_nodes() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut k = kafka_three_nodes(SESSION_MS);
    scenario(&mut k);
}

const MIRRORED: &str = "orders";
const MIRROR_RECORDS: u64 = 60_000;

/// kmirror only (Kafka has no KIP-1279 mirror): a Kafka source mirrored into the three nodes
/// with RF 2; mid catch-up (the mirror throttled), partition 0 moves off its leader (the
/// fetcher restarts on the new leader from its log end) and partition 1 swaps its follower
/// (the new replica replicates from the leader from offset 0). In the end every final replica
/// holds exactly the source's batches, byte for byte, and the removed replicas are gone.
#[test]
fn reassigned_mirror_partitions_stay_log_equal_with_the_source() {
    use kmirror_tests::kafka::KafkaCluster;
    use kmirror_tests::mirror::cli_ok;
    use kmirror_tests::oracle::read_batches;
    use kmirror_tests::wire::WireClient;
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let mut c = KmirrorCluster::start(
        3,
        ClusterOpts {
            extra: vec![
                "--cores".into(),
                "1".into(),
                "--default-replication-factor".into(),
                "2".into(),
            ],
            session_timeout_ms: SESSION_MS,
            ..ClusterOpts::default()
        },
    );
    c.dump_logs_on_panic(80, |c| {
        let src = kafka.bootstrap();
        kafka.create_topic(MIRRORED, PARTITIONS, &[]);
        let mut cmd = java::program("SeqProducer");
        cmd.args([
            &src,
            MIRRORED,
            &PARTITIONS.to_string(),
            &MIRROR_RECORDS.to_string(),
            "linger.ms=20",
        ]);
        let (_, acked, errors, _) =
            run_seq_producer(&mut cmd, "SeqProducer to Kafka", Duration::from_secs(240));
        assert_eq!((acked, errors), (MIRROR_RECORDS, 0));
        let src_end: Vec<i64> = (0..PARTITIONS)
            .map(|p| {
                let mut w = WireClient::connect_leader(&src, MIRRORED, p).unwrap();
                w.log_bounds(MIRRORED, p).unwrap().1
            })
            .collect();
        let n1 = c.node(1).addr();
        cli_ok(
            &n1,
            &[
                "create",
                "dr",
                "--source",
                &src,
                "--set",
                "mirror.metadata.sync.interval.ms=1000",
                "--set",
                "mirror.throttled.rate=400000",
                "--set",
                "mirror.fetch.partition.max.bytes=16384",
                "--set",
                "mirror.fetch.max.bytes=65536",
            ],
        );
        cli_ok(&n1, &["add", "dr", "--topics", MIRRORED]);
        let placed = proc::wait_for(Duration::from_secs(60), "the RF=2 mirror topic", || {
            let d = describe_topic(&n1, MIRRORED);
            (d.len() == PARTITIONS as usize && d.values().all(|p| p.leader > 0 && p.isr.len() == 2))
                .then_some(d)
        });
        let third = |r: &[i32]| (1..=3).find(|b| !r.contains(b)).unwrap();
        let (p0, p1) = (&placed[&0], &placed[&1]);
        let other0 = *p0.replicas.iter().find(|b| **b != p0.leader).unwrap();
        let target0 = vec![third(&p0.replicas), other0];
        let target1 = vec![p1.leader, third(&p1.replicas)];
        eprintln!("placed {placed:?}; moving p0 to {target0:?}, p1 to {target1:?}");
        let ids = |v: &[i32]| {
            v.iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let c1 = &*c as &dyn Under;
        assert_eq!(alter_code(c1, MIRRORED, 0, &ids(&target0)), 0);
        assert_eq!(alter_code(c1, MIRRORED, 1, &ids(&target1)), 0);
        let removed = [
            (p0.leader, 0),
            (*p1.replicas.iter().find(|b| **b != p1.leader).unwrap(), 1),
        ];
        wait_assignment(
            c1,
            1,
            MIRRORED,
            &[&target0, &target1],
            Duration::from_secs(120),
        );
        // The mirror catches up on the final replicas.
        proc::wait_for(Duration::from_secs(180), "the mirror caught up", || {
            (0..PARTITIONS)
                .all(|p| {
                    WireClient::connect_leader(&n1, MIRRORED, p)
                        .ok()
                        .and_then(|mut w| w.log_bounds(MIRRORED, p).ok())
                        .is_some_and(|b| b.1 == src_end[p as usize])
                })
                .then_some(())
        });
        let dirs: Vec<std::path::PathBuf> = (1..=3).map(|n| c.node(n).data_dir()).collect();
        let dir = |node: i32, p: i32| {
            dirs[node as usize - 1]
                .join("topics")
                .join(format!("{MIRRORED}-{p}"))
        };
        for (node, p) in removed {
            proc::wait_for(
                Duration::from_secs(30),
                "the removed replica's directory gone",
                || (!dir(node, p).exists()).then_some(()),
            );
        }
        let source: Vec<bytes::Bytes> = (0..PARTITIONS)
            .map(|p| {
                let (start, batches) =
                    read_batches(&src, MIRRORED, p, src_end[p as usize]).unwrap();
                assert_eq!(start, 0);
                let mut b = Vec::new();
                for x in batches {
                    b.extend_from_slice(&x.bytes);
                }
                bytes::Bytes::from(b)
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        c.stop_all();
        for (p, target) in [(0, &target0), (1, &target1)] {
            for node in target.iter() {
                let (end, bytes) = log_bytes(&dir(*node, p));
                assert_eq!(
                    end, src_end[p as usize],
                    "{MIRRORED}-{p} on node {node}: log end"
                );
                assert!(
                    bytes == source[p as usize],
                    "{MIRRORED}-{p} on node {node} is not log-equal with the source"
                );
            }
        }
    });
}

/// One broker behind [`Under`] (only `addr` is used).
struct One(&'static str, String);

impl Under for One {
    fn name(&self) -> &'static str {
        self.0
    }
    fn addr(&self, _id: i32) -> String {
        self.1.clone()
    }
    fn kill(&mut self, _id: i32) {
        unreachable!("one node")
    }
    fn restart(&mut self, _id: i32) {
        unreachable!("one node")
    }
}

/// A one-node broker: the only valid target is the broker itself (a no-op), anything else
/// names an unregistered broker, and there is never a reassignment to cancel or list.
fn one_node(c: &One) {
    let name = c.name();
    java::run_tool(
        java::tools::TOPIC_COMMAND,
        &[
            "--bootstrap-server",
            &c.addr(1),
            "--create",
            "--topic",
            TOPIC,
            "--partitions",
            "1",
        ],
        Duration::from_secs(60),
    );
    let node = proc::wait_for(Duration::from_secs(30), "a leader", || {
        describe(c, 1, TOPIC)
            .get(&0)
            .map(|d| d.leader)
            .filter(|l| *l >= 0)
    });
    assert_eq!(
        alter_code(c, TOPIC, 0, &node.to_string()),
        0,
        "{name}: onto itself"
    );
    assert_eq!(
        alter_code(c, TOPIC, 0, &format!("{node},{}", node + 1)),
        39,
        "{name}"
    );
    assert_eq!(alter_code(c, TOPIC, 0, "cancel"), 85, "{name}");
    assert_eq!(alter_code(c, TOPIC, 1, &node.to_string()), 3, "{name}");
    assert_eq!(listed(c, TOPIC, 0), None, "{name}");
}

#[test]
fn one_node_answers_as_a_one_node_kafka() {
    let k = kmirror_tests::kafka::KafkaCluster::single();
    one_node(&One("Kafka", k.bootstrap()));
    let n = kmirror_tests::kmirror::KmirrorNode::start();
    one_node(&One("kmirror", n.addr()));
}
