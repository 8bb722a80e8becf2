//! Three controllers in one process on loopback TCP: election, proposals through followers,
//! a crashed leader, a restart from disk, and a network partition.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kmirror_control::metadata::ClusterMetadata;
use kmirror_control::quorum::{ClusterCommand, MetadataCommand, Outcome};
use uuid::Uuid;

use crate::driver::{Driver, DriverConfig, ProposalError};
use crate::voters::Voter;

const TICK: Duration = Duration::from_millis(30);

struct Node {
    id: u64,
    dir: tempfile::TempDir,
    cfg: DriverConfig,
    driver: Option<Driver>,
    published: Arc<Mutex<Arc<ClusterMetadata>>>,
}

impl Node {
    fn start(&mut self) {
        let published = self.published.clone();
        let driver = Driver::start(self.cfg.clone(), move |m| {
            *published.lock().unwrap() = m;
        })
        .unwrap();
        self.driver = Some(driver);
    }

    fn driver(&self) -> &Driver {
        self.driver.as_ref().expect("running")
    }

    fn published(&self) -> Arc<ClusterMetadata> {
        self.published.lock().unwrap().clone()
    }
}

fn empty_metadata() -> ClusterMetadata {
    ClusterMetadata {
        cluster_id: String::new(),
        version: 0,
        topics: BTreeMap::new(),
        internal_topics: BTreeMap::new(),
        broker_configs: Default::default(),
        group_configs: Default::default(),
        features: Default::default(),
        brokers: BTreeMap::new(),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn cluster() -> Vec<Node> {
    cluster_with(|_| {})
}

/// Three started nodes, each config changed by `tune` first.
fn cluster_with(tune: impl Fn(&mut DriverConfig)) -> Vec<Node> {
    let voters: Vec<Voter> = (1..=3)
        .map(|id| Voter {
            id,
            addr: format!("127.0.0.1:{}", free_port()),
        })
        .collect();
    let mut nodes: Vec<Node> = voters
        .iter()
        .map(|v| {
            let dir = tempfile::tempdir().unwrap();
            let mut cfg = DriverConfig::new(
                v.id,
                dir.path().join("__cluster_metadata-0"),
                v.addr.clone(),
                voters.clone(),
            );
            cfg.tick = TICK;
            cfg.snapshot_every = 20;
            tune(&mut cfg);
            Node {
                id: v.id,
                dir,
                cfg,
                driver: None,
                published: Arc::new(Mutex::new(Arc::new(empty_metadata()))),
            }
        })
        .collect();
    for n in &mut nodes {
        n.start();
    }
    nodes
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// `change_voters` as an operator runs it: Kafka answers REQUEST_TIMED_OUT while the leader
/// has a voter change pending (a new leader counts its first, uncommitted entries as one),
/// and the tool is run again. With `until_caught_up`, an observer that has not caught up on
/// the leader yet is retried too.
fn change_voters_retrying(
    h: &crate::driver::DriverHandle,
    change: crate::driver::VoterChange,
    t: Duration,
    until_caught_up: bool,
) -> Result<Outcome, ProposalError> {
    use crate::driver::VoterError;
    let mut r = h.change_voters(change.clone(), t);
    for _ in 0..40 {
        match &r {
            Err(ProposalError::Voter(VoterError::ChangePending)) => {}
            Err(ProposalError::Voter(VoterError::NotCaughtUp { .. })) if until_caught_up => {}
            _ => break,
        }
        eprintln!("voter change retried: {r:?}");
        std::thread::sleep(Duration::from_millis(250));
        r = h.change_voters(change.clone(), t);
    }
    r
}

/// The leader all running nodes agree on.
fn agreed_leader(nodes: &[Node]) -> Option<u64> {
    let leaders: Vec<Option<u64>> = nodes
        .iter()
        .filter_map(|n| n.driver.as_ref())
        .map(|d| d.handle().status().leader)
        .collect();
    let first = *leaders.first()?;
    (first.is_some() && leaders.iter().all(|l| *l == first)).then_some(first?)
}

fn create(name: &str) -> ClusterCommand {
    ClusterCommand::Metadata(MetadataCommand::CreateTopic {
        name: name.into(),
        partitions: 3,
        configs: BTreeMap::new(),
        id: Uuid::new_v4(),
        assignments: Vec::new(),
    })
}

fn same_everywhere(nodes: &[Node]) -> bool {
    let states: Vec<Vec<u8>> = nodes
        .iter()
        .filter(|n| n.driver.is_some())
        .map(|n| serde_json::to_vec(&*n.published()).unwrap())
        .collect();
    states.windows(2).all(|w| w[0] == w[1])
}

#[test]
fn three_controllers_elect_and_a_follower_proposal_is_published_everywhere() {
    let nodes = cluster();
    let t0 = Instant::now();
    assert!(wait_until(Duration::from_secs(10), || agreed_leader(
        &nodes
    )
    .is_some()));
    eprintln!("leader elected in {:?}", t0.elapsed());
    let leader = agreed_leader(&nodes).unwrap();
    let follower = nodes.iter().find(|n| n.id != leader).unwrap();
    let t1 = Instant::now();
    let out = follower
        .driver()
        .handle()
        .propose(create("orders"), Duration::from_secs(5))
        .unwrap();
    eprintln!("follower proposal committed in {:?}", t1.elapsed());
    let Outcome::Topic(t) = out else {
        panic!("{out:?}")
    };
    assert_eq!(t.partition_count(), 3);
    // Answered after applying: the proposer's published metadata already has it.
    assert!(follower.published().topics.contains_key("orders"));
    // Refused identically: the topic exists.
    let again = nodes[0]
        .driver()
        .handle()
        .propose(create("orders"), Duration::from_secs(5));
    assert!(
        matches!(again, Err(ProposalError::Rejected(_))),
        "{again:?}"
    );
    eprintln!("rejected at {:?}", t1.elapsed());
    assert!(wait_until(Duration::from_secs(5), || same_everywhere(
        &nodes
    ) && nodes
        .iter()
        .all(|n| n.published().topics.len() == 1)));
    let cluster_id = nodes[0].published().cluster_id.clone();
    assert!(!cluster_id.is_empty());
    let status = nodes[0].driver().handle().status();
    assert_eq!(status.voters, vec![1, 2, 3]);
    assert_eq!(status.leader, Some(leader));
    let t2 = Instant::now();
    drop(nodes);
    eprintln!("stopped in {:?}", t2.elapsed());
}

/// A broker fenced for silence stays fenced when the leader changes: the new leader gives a
/// full session only to the brokers that were unfenced (Kafka's new active controller
/// unfences a broker on its heartbeat alone). Before, a new leader unfenced a stopped node
/// for one session, and clients were sent to it.
#[test]
fn a_new_leader_keeps_a_silent_fenced_broker_fenced() {
    let session = Duration::from_millis(600);
    let mut nodes = cluster_with(|cfg| cfg.session_timeout = Some(session));
    assert!(wait_until(Duration::from_secs(10), || agreed_leader(
        &nodes
    )
    .is_some()));
    for id in 1..=3 {
        let reg = kmirror_control::metadata::BrokerRegistration {
            id,
            incarnation: Uuid::new_v4(),
            endpoints: Vec::new(),
            rack: None,
            fenced: false,
        };
        nodes[0]
            .driver()
            .handle()
            .propose(
                ClusterCommand::Metadata(MetadataCommand::RegisterBroker(reg)),
                Duration::from_secs(5),
            )
            .unwrap();
    }
    let fenced = |n: &Node, id: i32| n.published().brokers.get(&id).map(|b| b.fenced);
    // Stop a follower: the leader fences it after the session timeout.
    let leader = agreed_leader(&nodes).unwrap();
    let silent = nodes.iter().position(|n| n.id != leader).unwrap();
    let silent_id = nodes[silent].id as i32;
    nodes[silent].driver = None;
    let leader_idx = nodes.iter().position(|n| n.id == leader).unwrap();
    assert!(wait_until(Duration::from_secs(5), || fenced(
        &nodes[leader_idx],
        silent_id
    ) == Some(true)));
    // A new leadership: crash the leader and start it again (two of three must run).
    nodes[leader_idx].driver = None;
    nodes[leader_idx].start();
    assert!(wait_until(Duration::from_secs(10), || agreed_leader(
        &nodes
    )
    .is_some()));
    // Before the fix the new leader unfenced the silent node at once, for one session.
    let end = Instant::now() + session * 3;
    while Instant::now() < end {
        for n in nodes.iter().filter(|n| n.driver.is_some()) {
            assert_eq!(
                fenced(n, silent_id),
                Some(true),
                "node {} sees it unfenced",
                n.id
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Heard again, it is unfenced.
    nodes[silent].start();
    assert!(wait_until(Duration::from_secs(10), || nodes
        .iter()
        .all(|n| fenced(n, silent_id) == Some(false))));
}

#[test]
fn a_crashed_leader_is_replaced_and_catches_up_after_restart() {
    let mut nodes = cluster();
    assert!(wait_until(Duration::from_secs(10), || agreed_leader(
        &nodes
    )
    .is_some()));
    let old = agreed_leader(&nodes).unwrap();
    nodes[0]
        .driver()
        .handle()
        .propose(create("before"), Duration::from_secs(5))
        .unwrap();
    // Crash the leader.
    let old_idx = nodes.iter().position(|n| n.id == old).unwrap();
    let t0 = Instant::now();
    nodes[old_idx].driver = None;
    assert!(wait_until(Duration::from_secs(5), || agreed_leader(&nodes)
        .is_some_and(|l| l != old)));
    eprintln!("new leader after a leader crash in {:?}", t0.elapsed());
    let survivor = nodes.iter().find(|n| n.driver.is_some()).unwrap();
    let t2 = Instant::now();
    for i in 0..30 {
        survivor
            .driver()
            .handle()
            .propose(create(&format!("after-{i}")), Duration::from_secs(5))
            .unwrap();
    }
    eprintln!(
        "30 sequential proposals on two of three nodes in {:?}",
        t2.elapsed()
    );
    // Restart it from its data dir: it catches up (by snapshot: 30 > snapshot_every).
    nodes[old_idx].start();
    let t1 = Instant::now();
    assert!(wait_until(Duration::from_secs(10), || same_everywhere(
        &nodes
    ) && nodes[old_idx]
        .published()
        .topics
        .len()
        == 31));
    eprintln!("restarted node caught up in {:?}", t1.elapsed());
    let s = nodes[old_idx].driver().handle().status();
    assert!(s.snapshot_index > 20, "{s:?}");
    let _ = &nodes[old_idx].dir;
}

#[test]
fn a_partitioned_node_commits_nothing_and_converges_after_healing() {
    let nodes = cluster();
    assert!(wait_until(Duration::from_secs(10), || agreed_leader(
        &nodes
    )
    .is_some()));
    // Isolate the leader: the worst case for the majority.
    let isolated = agreed_leader(&nodes).unwrap();
    let set_partition = |on: bool| {
        for n in &nodes {
            if n.id == isolated {
                for peer in [1, 2, 3].into_iter().filter(|p| *p != isolated) {
                    n.driver().block(peer, on);
                }
            } else {
                n.driver().block(isolated, on);
            }
        }
    };
    set_partition(true);
    let minority = nodes.iter().find(|n| n.id == isolated).unwrap();
    let majority: Vec<&Node> = nodes.iter().filter(|n| n.id != isolated).collect();
    // The minority cannot commit.
    let r = minority
        .driver()
        .handle()
        .propose(create("minority"), Duration::from_secs(2));
    assert!(
        matches!(
            r,
            Err(ProposalError::NoLeader { .. }) | Err(ProposalError::Unknown)
        ),
        "{r:?}"
    );
    // The majority elects a leader among itself and keeps committing.
    for i in 0..5 {
        majority[i % 2]
            .driver()
            .handle()
            .propose(create(&format!("majority-{i}")), Duration::from_secs(5))
            .unwrap();
    }
    assert!(!minority.published().topics.contains_key("majority-0"));
    set_partition(false);
    assert!(wait_until(Duration::from_secs(10), || same_everywhere(
        &nodes
    ) && nodes[0]
        .published()
        .topics
        .len()
        == 5));
    for n in &nodes {
        assert!(!n.published().topics.contains_key("minority"));
    }
    assert!(wait_until(Duration::from_secs(5), || agreed_leader(&nodes).is_some()));
}

#[test]
fn a_fourth_controller_joins_over_tcp_and_a_voter_is_removed() {
    use kmirror_control::quorum::MembershipChange;
    let mut nodes = cluster();
    assert!(wait_until(Duration::from_secs(10), || agreed_leader(
        &nodes
    )
    .is_some()));
    for i in 0..25 {
        nodes[0]
            .driver()
            .handle()
            .propose(create(&format!("t{i}")), Duration::from_secs(5))
            .unwrap();
    }
    // Node 4 starts empty ("join") and knows everyone; everyone learns its address.
    let mut voters = nodes[0].cfg.voters.clone();
    let four = Voter {
        id: 4,
        addr: format!("127.0.0.1:{}", free_port()),
    };
    voters.push(four.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = DriverConfig::new(
        4,
        dir.path().join("__cluster_metadata-0"),
        four.addr.clone(),
        voters,
    );
    cfg.tick = TICK;
    cfg.join = true;
    cfg.snapshot_every = 20;
    let mut joiner = Node {
        id: 4,
        dir,
        cfg,
        driver: None,
        published: Arc::new(Mutex::new(Arc::new(empty_metadata()))),
    };
    joiner.start();
    for n in &nodes {
        n.driver().add_peer(&four);
    }
    let leader = agreed_leader(&nodes).unwrap();
    let lead = nodes.iter().find(|n| n.id == leader).unwrap();
    // It asks to join and the leader takes it as an observer first.
    assert!(wait_until(Duration::from_secs(10), || lead
        .driver()
        .handle()
        .status()
        .learners
        == [4]));
    let out = lead
        .driver()
        .handle()
        .change_membership(MembershipChange::AddVoter(4), Duration::from_secs(5))
        .unwrap();
    assert_eq!(out, Outcome::Voters(vec![1, 2, 3, 4]));
    nodes.push(joiner);
    assert!(wait_until(Duration::from_secs(10), || same_everywhere(
        &nodes
    ) && nodes[3]
        .published()
        .topics
        .len()
        == 25
        && nodes[3].driver().handle().status().voters == [1, 2, 3, 4]));
    // A follower is not where membership changes are made.
    let follower = nodes.iter().find(|n| n.id != leader).unwrap();
    let r = follower
        .driver()
        .handle()
        .change_membership(MembershipChange::RemoveVoter(4), Duration::from_secs(1));
    assert!(
        matches!(r, Err(ProposalError::NoLeader { leader: Some(l) }) if l == leader),
        "{r:?}"
    );
    // Remove a founding follower; the three others go on committing (node 4 included).
    let gone = nodes
        .iter()
        .find(|n| n.id != leader && n.id != 4)
        .unwrap()
        .id;
    let out = lead_handle(&nodes, leader)
        .change_membership(MembershipChange::RemoveVoter(gone), Duration::from_secs(5))
        .unwrap();
    let mut rest: Vec<u64> = [1, 2, 3, 4].into_iter().filter(|i| *i != gone).collect();
    rest.sort();
    assert_eq!(out, Outcome::Voters(rest.clone()));
    let gone_idx = nodes.iter().position(|n| n.id == gone).unwrap();
    nodes[gone_idx].driver = None;
    nodes[3]
        .driver()
        .handle()
        .propose(create("after-removal"), Duration::from_secs(5))
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || same_everywhere(
        &nodes
    ) && nodes[3]
        .published()
        .topics
        .len()
        == 26
        && nodes[3].driver().handle().status().voters == rest));
}

fn lead_handle(nodes: &[Node], leader: u64) -> crate::driver::DriverHandle {
    nodes
        .iter()
        .find(|n| n.id == leader)
        .unwrap()
        .driver()
        .handle()
}

fn founder_dirs(nodes: &mut [Node]) {
    for n in nodes {
        n.cfg.directory_id = format!("dir-{}", n.id);
    }
}

#[test]
fn a_node_joins_as_an_observer_from_the_voters_alone_and_voters_change_like_kafka() {
    use crate::driver::{VoterChange, VoterError};
    // Founders with directory ids: restart them with the ids set (storage is kept).
    let mut nodes = cluster();
    for n in &mut nodes {
        n.driver = None;
    }
    founder_dirs(&mut nodes);
    for n in &mut nodes {
        n.start();
    }
    assert!(wait_until(Duration::from_secs(10), || agreed_leader(
        &nodes
    )
    .is_some()));
    for i in 0..25 {
        nodes[0]
            .driver()
            .handle()
            .propose(create(&format!("t{i}")), Duration::from_secs(5))
            .unwrap();
    }
    // Node 4 is given only the founders' addresses; nobody is told about it.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = DriverConfig::new(
        4,
        dir.path().join("__cluster_metadata-0"),
        "127.0.0.1:0".into(),
        nodes[0].cfg.voters.clone(),
    );
    cfg.tick = TICK;
    cfg.join = true;
    cfg.directory_id = "dir-4".into();
    let mut joiner = Node {
        id: 4,
        dir,
        cfg,
        driver: None,
        published: Arc::new(Mutex::new(Arc::new(empty_metadata()))),
    };
    joiner.start();
    nodes.push(joiner);
    assert!(wait_until(Duration::from_secs(15), || same_everywhere(
        &nodes
    ) && nodes[3]
        .published()
        .topics
        .len()
        == 25
        && nodes.iter().all(|n| n
            .driver()
            .handle()
            .status()
            .members
            .len()
            == 4)));
    let st = nodes[3].driver().handle().status();
    assert_eq!(
        (st.voters.clone(), st.learners.clone()),
        (vec![1, 2, 3], vec![4])
    );
    let bound = nodes[3].driver().local_addr().port();
    assert_eq!(
        nodes[3].driver().member().unwrap().addr,
        format!("127.0.0.1:{bound}")
    );

    let leader = agreed_leader(&nodes).unwrap();
    let follower = nodes
        .iter()
        .find(|n| n.id != leader && n.id != 4)
        .unwrap()
        .driver()
        .handle();
    let t = Duration::from_secs(5);
    let add = |dir: &str| VoterChange::Add {
        id: 4,
        directory_id: dir.into(),
    };
    // Kafka's answers: another directory is not the observer; a voter is a duplicate.
    let r = change_voters_retrying(&follower, add("other"), t, false);
    assert!(
        matches!(r, Err(ProposalError::Voter(VoterError::NotCaughtUp { .. }))),
        "{r:?}"
    );
    // Through a follower: raft forwards the change to the leader.
    assert_eq!(
        change_voters_retrying(&follower, add("dir-4"), t, false).unwrap(),
        Outcome::Voters(vec![1, 2, 3, 4])
    );
    assert!(wait_until(t, || nodes.iter().all(|n| n
        .driver()
        .handle()
        .status()
        .voters
        == [1, 2, 3, 4])));
    let r = change_voters_retrying(&follower, add("dir-4"), t, false);
    assert!(
        matches!(r, Err(ProposalError::Voter(VoterError::Duplicate(4)))),
        "{r:?}"
    );
    // Removing the leader: wrong directory id first, then the right one; it stays an
    // observer and leadership moves.
    let remove = |id: u64, dir: String| VoterChange::Remove {
        id,
        directory_id: dir,
    };
    let r = change_voters_retrying(&follower, remove(leader, "nope".into()), t, false);
    assert!(
        matches!(r, Err(ProposalError::Voter(VoterError::NotFound { .. }))),
        "{r:?}"
    );
    change_voters_retrying(&follower, remove(leader, format!("dir-{leader}")), t, false).unwrap();
    let rest: Vec<u64> = [1, 2, 3, 4].into_iter().filter(|i| *i != leader).collect();
    assert!(wait_until(Duration::from_secs(10), || {
        let l = agreed_leader(&nodes);
        l.is_some() && l != Some(leader)
    }));
    for n in &nodes {
        let st = n.driver().handle().status();
        assert_eq!(
            (st.voters.clone(), st.learners.clone()),
            (rest.clone(), vec![leader])
        );
    }
    nodes[3]
        .driver()
        .handle()
        .propose(create("after"), t)
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || same_everywhere(
        &nodes
    ) && nodes
        .iter()
        .all(|n| n.published().topics.len() == 26)));
}

/// Stops `nodes[i]`, wipes its metadata dir and starts it again under the same id with a
/// new directory id (an operator re-formatting a voter's disk).
fn wipe_and_restart(nodes: &mut [Node], i: usize, new_dir: &str) {
    nodes[i].driver = None;
    std::fs::remove_dir_all(&nodes[i].cfg.data_dir).unwrap();
    nodes[i].cfg.directory_id = new_dir.into();
    nodes[i].start();
}

#[test]
fn a_wiped_voter_counts_only_after_remove_and_add_with_its_new_directory_id() {
    use crate::driver::{VoterChange, VoterError};
    let mut nodes = cluster();
    for n in &mut nodes {
        n.driver = None;
    }
    founder_dirs(&mut nodes);
    for n in &mut nodes {
        n.start();
    }
    let t = Duration::from_secs(5);
    // Every node has every founder's record with its directory id.
    assert!(wait_until(Duration::from_secs(15), || nodes.iter().all(
        |n| {
            let st = n.driver().handle().status();
            st.members.len() == 3
                && st
                    .members
                    .iter()
                    .all(|m| m.directory_id == format!("dir-{}", m.id))
        }
    )));
    for i in 0..5 {
        nodes[0]
            .driver()
            .handle()
            .propose(create(&format!("t{i}")), t)
            .unwrap();
    }
    // Node 3 comes back with an empty dir and a new directory id.
    wipe_and_restart(&mut nodes, 2, "dir-3-new");
    let originals_agree = |nodes: &[Node]| agreed_leader(&nodes[..2]).filter(|l| *l != 3);
    assert!(wait_until(Duration::from_secs(10), || originals_agree(
        &nodes
    )
    .is_some()));
    nodes[0]
        .driver()
        .handle()
        .propose(create("while-wiped"), t)
        .unwrap();
    // Its answers are dropped: the leader never learns it needs a snapshot.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(nodes[2].published().topics.len(), 0);
    assert_eq!(nodes[2].driver().handle().status().members.len(), 0);

    // With original voter 2 down, node 1 and the wiped node 3 are not a majority: nothing
    // commits, and no term inflation (pre-vote) follows.
    nodes[1].driver = None;
    let term = nodes[0].driver().handle().status().term;
    let r = nodes[0]
        .driver()
        .handle()
        .propose(create("no-quorum"), Duration::from_secs(3));
    assert!(r.is_err(), "{r:?}");
    assert_eq!(nodes[0].driver().handle().status().leader, None);
    assert_eq!(nodes[0].driver().handle().status().term, term);
    assert_eq!(nodes[2].published().topics.len(), 0);

    // Kafka's procedure. Node 2 back; remove voter 3 by its old directory id (its new one
    // is not the voter), it catches up as an observer and states the new id, then add it.
    nodes[1].start();
    assert!(wait_until(Duration::from_secs(10), || originals_agree(
        &nodes
    )
    .is_some()));
    let h = nodes[0].driver().handle();
    let remove = |dir: &str| VoterChange::Remove {
        id: 3,
        directory_id: dir.into(),
    };
    let r = change_voters_retrying(&h, remove("dir-3-new"), t, false);
    assert!(
        matches!(r, Err(ProposalError::Voter(VoterError::NotFound { .. }))),
        "{r:?}"
    );
    assert_eq!(
        change_voters_retrying(&h, remove("dir-3"), t, false).unwrap(),
        Outcome::Voters(vec![1, 2])
    );
    assert!(wait_until(Duration::from_secs(15), || {
        let st = nodes[0].driver().handle().status();
        st.learners == [3]
            && st
                .members
                .iter()
                .any(|m| m.id == 3 && m.directory_id == "dir-3-new")
    }));
    // An observer that has not caught up on the leader yet, or a change while the removal
    // is not applied everywhere, is refused (Kafka's REQUEST_TIMED_OUT); add-controller is
    // retried as an operator would.
    let add = VoterChange::Add {
        id: 3,
        directory_id: "dir-3-new".into(),
    };
    let added = change_voters_retrying(&h, add, t, true);
    assert!(
        matches!(&added, Ok(Outcome::Voters(v)) if *v == [1, 2, 3]),
        "{added:?}"
    );
    // Now node 3 counts: with node 2 down again, nodes 1 and 3 commit.
    nodes[1].driver = None;
    assert!(wait_until(Duration::from_secs(10), || agreed_leader(
        &nodes
    )
    .is_some()));
    nodes[2]
        .driver()
        .handle()
        .propose(create("after"), t)
        .unwrap();
    // ("no-quorum" may commit too: it stayed in node 1's log after its proposer gave up.)
    assert!(
        wait_until(Duration::from_secs(10), || same_everywhere(&nodes)
            && nodes[2].published().topics.contains_key("after")),
        "{:?}",
        nodes[2].published().topics.keys().collect::<Vec<_>>()
    );
    assert!(nodes[2].published().topics.contains_key("while-wiped"));
}

/// The same procedure without any leader change: the leader must forget the wiped
/// follower's old progress (raft-rs keeps its match index and ignores its rejections), or
/// the follower would never get the snapshot it needs to become an observer and a voter.
#[test]
fn a_wiped_follower_is_re_admitted_under_the_same_leader() {
    use crate::driver::VoterChange;
    let mut nodes = cluster();
    for n in &mut nodes {
        n.driver = None;
    }
    founder_dirs(&mut nodes);
    for n in &mut nodes {
        n.start();
    }
    let t = Duration::from_secs(5);
    assert!(wait_until(Duration::from_secs(15), || nodes.iter().all(
        |n| {
            let st = n.driver().handle().status();
            st.members.len() == 3 && st.members.iter().all(|m| !m.directory_id.is_empty())
        }
    )));
    for i in 0..25 {
        nodes[0]
            .driver()
            .handle()
            .propose(create(&format!("t{i}")), t)
            .unwrap();
    }
    let leader = agreed_leader(&nodes).unwrap();
    let lead = lead_handle(&nodes, leader);
    let term = lead.status().term;
    let w = nodes.iter().position(|n| n.id != leader).unwrap();
    let wid = nodes[w].id;
    wipe_and_restart(&mut nodes, w, "dir-new");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(nodes[w].published().topics.len(), 0);
    assert_eq!(
        change_voters_retrying(
            &lead,
            VoterChange::Remove {
                id: wid,
                directory_id: format!("dir-{wid}"),
            },
            t,
            false
        )
        .unwrap()
        .clone(),
        Outcome::Voters([1, 2, 3].into_iter().filter(|i| *i != wid).collect())
    );
    assert!(wait_until(Duration::from_secs(15), || {
        let st = lead.status();
        st.learners == [wid]
            && st
                .members
                .iter()
                .any(|m| m.id == wid && m.directory_id == "dir-new")
            && nodes[w].published().topics.len() == 25
    }));
    let add = VoterChange::Add {
        id: wid,
        directory_id: "dir-new".into(),
    };
    let added = change_voters_retrying(&lead, add, t, true);
    assert!(
        matches!(&added, Ok(Outcome::Voters(v)) if *v == [1, 2, 3]),
        "{added:?}"
    );
    let st = lead.status();
    assert_eq!((st.leader, st.term), (Some(leader), term));
}
