//! Issue 12 step 1, joining and removing nodes (KIP-853 dynamic quorums, KRaft combined
//! mode): three kmirror nodes; a fourth started with `--quorum <the three voters>` and a
//! node id not among them joins as an observer, catches up the metadata log, registers as a
//! broker and takes replicas of a new topic. Kafka 4.1.1's own `kafka-metadata-quorum
//! add-controller` (Java Admin `addRaftVoter`, through a broker listener, with the node's
//! config file and its meta.properties directory id) makes it a voter; franz-go's
//! `kmsg.RemoveRaftVoterRequest` removes the active controller (it stays a broker and an
//! observer, leadership moves). Then another voter is SIGKILLed: the two voters left (the new
//! one among them) still elect and commit, so the new voter counts. Records produced with
//! acks=all into an RF=3 topic before and after are all consumed at their acknowledged
//! offsets. Error codes: DUPLICATE_VOTER (126) for adding a voter again, VOTER_NOT_FOUND (127) for a
//! wrong directory id, REQUEST_TIMED_OUT for adding a node that is not an observer. A voter
//! whose data dir is wiped is not counted until removed by its old directory id and added
//! back with its new one (Kafka's procedure).
//!
//! Against Apache Kafka 4.1.1 (one combined node formatted `--standalone`, a dynamic quorum:
//! the three-node runner formats a static `controller.quorum.voters` quorum, which refuses
//! both APIs with UNSUPPORTED_VERSION): the same tool and client get DUPLICATE_VOTER for
//! adding a voter again and VOTER_NOT_FOUND for a wrong directory id and for the last voter.
//! The join/add/remove/kill flow itself is not run on Kafka (it needs a second Kafka
//! controller joining a dynamic quorum).

use std::collections::BTreeMap;
use std::time::Duration;

use kmirror_tests::cluster::{run_seq_producer, ClusterOpts, KmirrorCluster};
use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::{heavy_test_lock, java, proc, KafkaCluster, KmirrorNode, WireClient};

const TOPIC: &str = "membership";
const PARTITIONS: i32 = 3;

/// `describe` while the quorum may be between leaders (the tool fails while the leader it
/// is told is not among the voters).
fn try_describe(addr: &str, what: &str) -> Option<String> {
    let ran = proc::run(
        java::tool(java::tools::METADATA_QUORUM_COMMAND).args([
            "--bootstrap-server",
            addr,
            "describe",
            what,
        ]),
        Duration::from_secs(60),
    );
    ran.status.success().then_some(ran.stdout)
}

fn describe(addr: &str, what: &str) -> String {
    java::run_tool(
        java::tools::METADATA_QUORUM_COMMAND,
        &["--bootstrap-server", addr, "describe", what],
        Duration::from_secs(60),
    )
    .stdout
}

/// The ids in a `describe --status` line such as `CurrentVoters: [{"id": 1, ...}, ...]`.
fn ids(status: &str, field: &str) -> Vec<i32> {
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in\n{status}"));
    let mut out: Vec<i32> = line
        .split("\"id\":")
        .skip(1)
        .filter_map(|s| {
            s.trim()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect();
    out.sort_unstable();
    out
}

fn directory_id(node: &KmirrorNode) -> String {
    directory_id_in(&node.data_dir())
}

/// `directory.id` of `dir/meta.properties` (kmirror's data dir, Kafka's log dir).
fn directory_id_in(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(dir.join("meta.properties")).expect("meta.properties");
    text.lines()
        .find_map(|l| l.strip_prefix("directory.id="))
        .expect("directory.id")
        .trim()
        .to_string()
}

fn quorum_leader(addr: &str) -> Option<i32> {
    let (l, _) = WireClient::connect(addr).ok()?.quorum_leader().ok()?;
    (l >= 0).then_some(l)
}

/// franz-go RemoveRaftVoter to broker `via` (bootstrapped at `boot`, one address): the
/// response's ErrorCode.
fn remove_voter(boot: &str, via: i32, voter: i32, dir: &str) -> i64 {
    let ran = proc::run_ok(
        kmirror_tests::golang::franz("rmvoter", boot, "-").args([
            "-broker",
            &via.to_string(),
            "-voter-id",
            &voter.to_string(),
            "-voter-dir",
            dir,
        ]),
        Duration::from_secs(90),
    );
    let line = ran
        .stdout
        .lines()
        .find(|l| l.contains("\"api\":\"RemoveRaftVoter\""))
        .unwrap_or_else(|| panic!("no response:\n{}\n{}", ran.stdout, ran.stderr));
    let v: serde_json::Value = serde_json::from_str(line).expect("json");
    v["body"]["ErrorCode"].as_i64().expect("ErrorCode")
}

/// Produces `n` records with acks=all (Java SeqProducer); (partition, seq, offset) per ack.
fn produce(boot: &str, n: u64) -> Vec<(i32, u64, i64)> {
    let (acks, acked, errors, errs) = run_seq_producer(
        java::program("SeqProducer").args([
            boot,
            TOPIC,
            &PARTITIONS.to_string(),
            &n.to_string(),
            "enable.idempotence=true",
            "request.timeout.ms=5000",
            "delivery.timeout.ms=120000",
            "metadata.max.age.ms=2000",
        ]),
        "SeqProducer",
        Duration::from_secs(180),
    );
    assert_eq!((acked, errors), (n, 0), "producer errors {errs:?}");
    acks
}

#[test]
fn a_node_joins_becomes_a_voter_the_leader_is_removed_and_the_quorum_still_elects() {
    let _lock = heavy_test_lock();
    let mut c = KmirrorCluster::start(
        3,
        ClusterOpts {
            session_timeout_ms: 4000,
            ..ClusterOpts::default()
        },
    );
    let boot = c.bootstrap();
    let mut w = WireClient::connect(&c.node(1).addr()).unwrap();
    assert_eq!(
        w.create_topic(TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")])
            .unwrap(),
        0
    );
    let mut acks = produce(&boot, 300);

    // Node 4: not among the voters it is given, so it joins as an observer.
    let cport = proc::free_port();
    let controller = format!("127.0.0.1:{cport}");
    let quorum = c.quorum().to_string();
    let four = KmirrorNode::builder()
        .args(&[
            "--node-id",
            "4",
            "--controller-listen",
            &controller,
            "--quorum",
            &quorum,
            "--broker-session-timeout-ms",
            "4000",
            "--cores",
            "1",
        ])
        .start();
    c.wait_brokers(1, 4, Duration::from_secs(60));
    c.wait_brokers(2, 4, Duration::from_secs(60));
    let status = proc::wait_for(Duration::from_secs(30), "node 4 as an observer", || {
        let s = describe(&c.node(2).addr(), "--status");
        (ids(&s, "CurrentObservers:") == [4]).then_some(s)
    });
    assert_eq!(ids(&status, "CurrentVoters:"), [1, 2, 3], "{status}");
    let dir4 = directory_id(&four);
    assert!(status.contains(&dir4), "directory id {dir4} in\n{status}");
    // A broker like the others: RF 4 places a replica on it.
    assert_eq!(w.create_topic("on-four", 4, 4, &[]).unwrap(), 0);
    // Its own DescribeQuorum (forwarded to the leader) says the same.
    let own = describe(&four.addr(), "--status");
    assert_eq!(ids(&own, "CurrentObservers:"), [4], "{own}");

    // Kafka's add-controller, with the node's config file as a Kafka operator runs it.
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("node4.properties");
    std::fs::write(
        &cfg,
        format!(
            "node.id=4\nprocess.roles=broker,controller\ncontroller.listener.names=CONTROLLER\n\
             listeners=PLAINTEXT://{},CONTROLLER://{controller}\nmetadata.log.dir={}\n",
            four.addr(),
            four.data_dir().display()
        ),
    )
    .unwrap();
    let add = |via: &str| add_controller(via, &cfg);
    // Through a broker that is not the leader: Kafka's brokers forward; raft forwards here.
    let leader = quorum_leader(&c.node(1).addr()).expect("a leader");
    let via = (1..=3).find(|i| *i != leader).unwrap() as usize;
    let ran = add(&c.node(via).addr());
    assert!(
        ran.status.success() && ran.stdout.contains("Added controller 4"),
        "add-controller:\n{}\n{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 20)
    );
    let status = proc::wait_for(Duration::from_secs(30), "node 4 as a voter", || {
        let s = describe(&c.node(1).addr(), "--status");
        (ids(&s, "CurrentVoters:") == [1, 2, 3, 4]).then_some(s)
    });
    assert_eq!(ids(&status, "CurrentObservers:"), Vec::<i32>::new());
    let repl = describe(&c.node(3).addr(), "--replication");
    let rows: Vec<&str> = repl
        .lines()
        .filter(|l| l.contains("Leader") || l.contains("Follower"))
        .collect();
    assert_eq!(rows.len(), 4, "--replication\n{repl}");
    // Adding it again: DUPLICATE_VOTER.
    let ran = add(&c.node(1).addr());
    assert!(
        !ran.status.success() && ran.stderr.contains("DuplicateVoterException"),
        "second add-controller:\n{}\n{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 20)
    );

    // A restart with the same flags keeps it a voter with the same directory id (the
    // voter list it is given only matters to an empty node).
    let mut four = four;
    assert!(four.stop(), "node 4 stops cleanly");
    four.start_again();
    assert_eq!(directory_id(&four), dir4);
    proc::wait_for(Duration::from_secs(60), "node 4 back as a voter", || {
        let s = try_describe(&four.addr(), "--status")?;
        let back = s.lines().any(|l| l.starts_with("HighWatermark:"));
        (back && ids(&s, "CurrentVoters:") == [1, 2, 3, 4]).then_some(())
    });
    c.wait_brokers(1, 4, Duration::from_secs(60));

    // Remove the active controller with franz-go, through another broker; a wrong
    // directory id first (VOTER_NOT_FOUND).
    let leader = quorum_leader(&c.node(1).addr()).expect("a leader");
    let via = (1..=4).find(|i| *i != leader).unwrap();
    let leader_dir = if leader == 4 {
        dir4.clone()
    } else {
        directory_id(c.node(leader as usize))
    };
    let via_addr = if via == 4 {
        four.addr()
    } else {
        c.node(via as usize).addr()
    };
    assert_eq!(
        remove_voter(&via_addr, via, leader, "AAAAAAAAAAAAAAAAAAAAAQ"),
        127
    );
    assert_eq!(remove_voter(&via_addr, via, leader, &leader_dir), 0);
    let rest: Vec<i32> = (1..=4).filter(|i| *i != leader).collect();
    let status = proc::wait_for(Duration::from_secs(30), "a new leader", || {
        let s = try_describe(&via_addr, "--status")?;
        let new_leader = s
            .lines()
            .find_map(|l| l.strip_prefix("LeaderId:"))
            .and_then(|v| v.trim().parse::<i32>().ok())?;
        (ids(&s, "CurrentVoters:") == rest && new_leader != leader && new_leader > 0).then_some(s)
    });
    assert_eq!(ids(&status, "CurrentObservers:"), [leader], "{status}");
    let repl = describe(&via_addr, "--replication");
    assert!(
        repl.lines()
            .any(|l| l.starts_with(&format!("{leader} ")) && l.contains("Observer")),
        "--replication\n{repl}"
    );
    // The removed node is still a broker.
    let all = c.bootstrap() + "," + &four.addr();
    let brokers = c.listed_brokers(via.min(3) as usize).unwrap_or_default();
    assert_eq!(brokers, [1, 2, 3, 4]);
    acks.extend(produce(&all, 300));

    // SIGKILL a voter other than node 4: two of three voters are left, node 4 one of them.
    let new_leader = quorum_leader(&four.addr()).expect("a leader");
    let victim = if new_leader != 4 {
        new_leader
    } else {
        *rest.iter().find(|i| **i != 4).unwrap()
    };
    c.kill(victim as usize);
    let survivors: Vec<String> = (1..=3)
        .filter(|i| *i != victim)
        .map(|i| c.node(i as usize).addr())
        .chain([four.addr()])
        .collect();
    proc::wait_for(Duration::from_secs(60), "a leader after the kill", || {
        quorum_leader(&four.addr()).filter(|l| *l != victim && rest.contains(l))
    });
    // A metadata change commits with node 4's vote.
    let mut w4 = WireClient::connect(&four.addr()).unwrap();
    assert_eq!(w4.create_topic("after-kill", 1, 2, &[]).unwrap(), 0);
    let boot_alive = survivors.join(",");
    acks.extend(produce(&boot_alive, 300));

    // Every acknowledged record at its offset, nothing else in the log.
    let dump = kmirror_tests::mirror::java_dump(&boot_alive, TOPIC, false, true);
    let mut read: BTreeMap<(i32, i64), String> = BTreeMap::new();
    for l in &dump.records {
        let f: Vec<&str> = l.split(' ').collect();
        read.insert(
            (f[1].parse().unwrap(), f[2].parse().unwrap()),
            f[4].to_string(),
        );
    }
    assert_eq!(read.len(), acks.len(), "records read vs acknowledged");
    for (p, seq, off) in &acks {
        let v = read
            .get(&(*p, *off))
            .unwrap_or_else(|| panic!("acked {p}:{seq} at {off} not read"));
        assert!(v.starts_with(&format!("{p}:{seq}:")), "{p}@{off}: {v}");
    }

    // The removed node leaves for good: stop it, `kafka-cluster unregister` it (Java Admin
    // unregisterBroker, UnregisterBroker 64): it is no longer an observer either; a second
    // unregister is BROKER_ID_NOT_REGISTERED.
    let mut four = four;
    if leader == 4 {
        assert!(four.stop(), "node 4 stops cleanly");
    } else {
        assert!(c.stop(leader as usize), "node {leader} stops cleanly");
    }
    let alive = four_or_survivor(&four, &survivors, leader);
    let unregister = || {
        proc::run(
            java::tool("org.apache.kafka.tools.ClusterTool").args([
                "unregister",
                "--bootstrap-server",
                &alive,
                "--id",
                &leader.to_string(),
            ]),
            Duration::from_secs(90),
        )
    };
    let ran = unregister();
    assert!(
        ran.status.success(),
        "unregister:\n{}\n{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 20)
    );
    proc::wait_for(Duration::from_secs(30), "no observers", || {
        let s = try_describe(&alive, "--status")?;
        ids(&s, "CurrentObservers:").is_empty().then_some(())
    });
    let ran = unregister();
    assert!(
        !ran.status.success() && ran.stderr.contains("BrokerIdNotRegisteredException"),
        "second unregister:\n{}\n{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 20)
    );
    drop(four);
}

/// A running node's address: node 4 unless it is the one stopped.
fn four_or_survivor(four: &KmirrorNode, survivors: &[String], stopped: i32) -> String {
    if stopped == 4 {
        survivors
            .iter()
            .find(|a| **a != four.addr())
            .expect("a survivor")
            .clone()
    } else {
        four.addr()
    }
}

/// `kafka-metadata-quorum add-controller` with `config` through `via`.
fn add_controller(via: &str, config: &std::path::Path) -> proc::Ran {
    proc::run(
        java::tool(java::tools::METADATA_QUORUM_COMMAND).args([
            "--bootstrap-server",
            via,
            "--command-config",
            &config.display().to_string(),
            "add-controller",
        ]),
        Duration::from_secs(90),
    )
}

#[test]
fn kafka_answers_duplicate_voter_and_voter_not_found_as_kmirror_does() {
    let _lock = heavy_test_lock();
    let kafka = KafkaCluster::start_with(KafkaOptions {
        dynamic_quorum: true,
        ..KafkaOptions::default()
    });
    let addr = kafka.bootstrap();
    let status = describe(&addr, "--status");
    assert_eq!(ids(&status, "CurrentVoters:"), [1], "{status}");
    let config = kafka.node_config(1);
    let dir = directory_id_in(&config.parent().unwrap().join("data"));
    assert!(status.contains(&dir), "directory id {dir} in\n{status}");
    // Adding a voter again.
    let ran = add_controller(&addr, &config);
    assert!(
        !ran.status.success() && ran.stderr.contains("DuplicateVoterException"),
        "add-controller of a voter:\n{}\n{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 20)
    );
    // A wrong directory id, then the last voter.
    assert_eq!(remove_voter(&addr, 1, 1, "AAAAAAAAAAAAAAAAAAAAAQ"), 127);
    assert_eq!(remove_voter(&addr, 1, 1, &dir), 127);
    assert_eq!(ids(&describe(&addr, "--status"), "CurrentVoters:"), [1]);
}

/// Node `id`'s controller address in the quorum string (`1@H:P,2@H:P,...`).
fn controller_of(quorum: &str, id: usize) -> String {
    quorum
        .split(',')
        .find_map(|v| v.strip_prefix(&format!("{id}@")))
        .expect("voter in the quorum string")
        .to_string()
}

/// A voter whose data dir is wiped comes back under its id with a new directory id (an empty
/// log, no term or vote). As in Kafka (KIP-853: a voter is `(id, directory id)`), it is not
/// counted: with another voter down there is no leader and nothing commits. Kafka's
/// procedure re-admits it: `RemoveRaftVoter` with the old directory id (the new one is
/// VOTER_NOT_FOUND), it catches up as an observer under the new id, and `add-controller`
/// with its config makes it a voter again; then it counts (another voter killed, the two
/// left commit a CreateTopics). Not run on Kafka: it needs a three-controller dynamic quorum
/// (see the module doc).
#[test]
fn a_wiped_voter_counts_again_only_after_remove_controller_and_add_controller() {
    let _lock = heavy_test_lock();
    let mut c = KmirrorCluster::start(
        3,
        ClusterOpts {
            session_timeout_ms: 4000,
            ..ClusterOpts::default()
        },
    );
    let mut w = WireClient::connect(&c.node(1).addr()).unwrap();
    assert_eq!(w.create_topic("before-wipe", 1, 3, &[]).unwrap(), 0);
    let old3 = directory_id(c.node(3));
    proc::wait_for(Duration::from_secs(30), "voter 3's directory id", || {
        try_describe(&c.node(1).addr(), "--status")?
            .contains(&old3)
            .then_some(())
    });

    // Wipe node 3's data dir and start it again with the same flags.
    assert!(c.stop(3), "node 3 stops cleanly");
    std::fs::remove_dir_all(c.node(3).data_dir()).unwrap();
    c.restart(3);
    let new3 = proc::wait_for(Duration::from_secs(30), "a new meta.properties", || {
        std::fs::read_to_string(c.node(3).data_dir().join("meta.properties"))
            .ok()
            .map(|_| directory_id(c.node(3)))
    });
    assert_ne!(new3, old3);
    assert_eq!(w.create_topic("wiped", 1, 2, &[]).unwrap(), 0);
    // It is not heard, so its broker is fenced after the session timeout. (Until then the
    // Admin client may send DescribeQuorum to it, and it answers from its empty state.)
    proc::wait_for(Duration::from_secs(30), "node 3 fenced", || {
        (c.listed_brokers(2)? == [1, 2]).then_some(())
    });
    // The wiped node knows the leader but not where it listens: it never answers
    // DescribeQuorum from its own empty view, it says NOT_LEADER_OR_FOLLOWER (6) and the
    // Admin client asks again.
    let three = c.node(3).addr();
    // DescribeQuorum is answered before the node is ready: a wiped voter cannot register
    // (once it waited behind the 30 s ready gate and timed this out).
    proc::wait_for(
        Duration::from_secs(30),
        "node 3 refers to the leader",
        || match WireClient::connect(&three).ok()?.quorum_leader() {
            Err(kmirror_tests::wire::WireError::Broker { code: 6, .. }) => Some(()),
            _ => None,
        },
    );
    let status = describe(&c.node(2).addr(), "--status");
    assert_eq!(ids(&status, "CurrentVoters:"), [1, 2, 3], "{status}");
    assert!(
        status.contains(&old3) && !status.contains(&new3),
        "{status}\n{}",
        c.logs(20)
    );

    // Node 1 down: node 2 and the wiped node 3 are not a majority of {1, 2, 3}.
    c.kill(1);
    let two = c.node(2).addr();
    proc::wait_for(Duration::from_secs(30), "no leader", || {
        quorum_leader(&two).is_none().then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(quorum_leader(&two), None);
    let mut w2 = WireClient::connect(&two).unwrap();
    let r = w2.create_topic("no-quorum", 1, 1, &[]);
    assert!(!matches!(r, Ok(0)), "{r:?}");
    // The operator is told which node, both directory ids and the fix.
    let warned = (1..=2).any(|i| {
        let log = std::fs::read_to_string(c.node(i).log_path()).unwrap_or_default();
        log.contains(&format!(
            "node 3 sends with directory id {new3} but is the voter with directory id {old3}"
        )) && log.contains("remove-controller --controller-id 3")
    });
    assert!(warned, "no warning about node 3\n{}", c.logs(20));

    // Kafka's procedure, with node 1 back.
    c.restart(1);
    proc::wait_for(Duration::from_secs(60), "a leader", || {
        quorum_leader(&two).filter(|l| *l != 3)
    });
    let boot = c.node(1).addr();
    assert_eq!(remove_voter(&boot, 1, 3, &new3), 127);
    assert_eq!(remove_voter(&boot, 1, 3, &old3), 0);
    proc::wait_for(
        Duration::from_secs(60),
        "node 3 an observer with its new directory id",
        || {
            let s = try_describe(&boot, "--status")?;
            (ids(&s, "CurrentVoters:") == [1, 2]
                && ids(&s, "CurrentObservers:") == [3]
                && s.contains(&new3))
            .then_some(())
        },
    );
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("node3.properties");
    std::fs::write(
        &cfg,
        format!(
            "node.id=3\nprocess.roles=broker,controller\ncontroller.listener.names=CONTROLLER\n\
             listeners=PLAINTEXT://{},CONTROLLER://{}\nmetadata.log.dir={}\n",
            c.node(3).addr(),
            controller_of(c.quorum(), 3),
            c.node(3).data_dir().display()
        ),
    )
    .unwrap();
    // The observer may not be caught up on the leader at the first try (REQUEST_TIMED_OUT).
    proc::wait_for(Duration::from_secs(60), "add-controller", || {
        let ran = add_controller(&boot, &cfg);
        (ran.status.success() && ran.stdout.contains("Added controller 3")).then_some(())
    });
    let status = proc::wait_for(Duration::from_secs(30), "node 3 a voter again", || {
        let s = describe(&boot, "--status");
        (ids(&s, "CurrentVoters:") == [1, 2, 3]).then_some(s)
    });
    assert!(
        status.contains(&new3) && !status.contains(&old3),
        "{status}"
    );

    // Now it counts: node 1 down again, nodes 2 and 3 elect and commit.
    c.kill(1);
    let three = c.node(3).addr();
    proc::wait_for(Duration::from_secs(60), "a leader of 2 and 3", || {
        quorum_leader(&three).filter(|l| *l == 2 || *l == 3)
    });
    let mut w3 = WireClient::connect(&three).unwrap();
    assert_eq!(w3.create_topic("after", 1, 2, &[]).unwrap(), 0);
    let listed = c.listed_brokers(3).unwrap_or_default();
    assert!(listed.contains(&3), "{listed:?}");
    assert!(w3.partition_info("before-wipe", 0).is_ok());
}
