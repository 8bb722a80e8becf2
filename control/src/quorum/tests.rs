//! Deterministic multi-node tests: quorum nodes on temp-dir storage exchanging messages in
//! memory, with a seeded RNG dropping, duplicating and reordering messages and crashing nodes
//! (dropping them and reopening from disk).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use raft::eraftpb::Message;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use super::*;

#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    drop_pct: u32,
    dup_pct: u32,
    reorder: bool,
}

/// How a proposal ended, as the test saw it.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Ok,
    Err(String),
    Dropped,
    Unknown,
}

struct Sim {
    dirs: BTreeMap<u64, tempfile::TempDir>,
    cfgs: BTreeMap<u64, QuorumConfig>,
    nodes: BTreeMap<u64, Option<QuorumNode>>,
    net: Vec<Message>,
    rng: StdRng,
    faults: Faults,
    /// Nodes cut off from everyone (messages to and from them are lost).
    isolated: BTreeSet<u64>,
    /// proposal -> (topic name, topic id)
    proposed: HashMap<ProposalId, (String, Uuid)>,
    seen: HashMap<ProposalId, Seen>,
    /// Proposals whose proposer crashed before they ended.
    orphaned: BTreeSet<ProposalId>,
    names: u64,
}

impl Sim {
    fn new(voters: &[u64], seed: u64, snapshot_every: u64) -> Sim {
        let mut sim = Sim {
            dirs: BTreeMap::new(),
            cfgs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            net: Vec::new(),
            rng: StdRng::seed_from_u64(seed),
            faults: Faults::default(),
            isolated: BTreeSet::new(),
            proposed: HashMap::new(),
            seen: HashMap::new(),
            orphaned: BTreeSet::new(),
            names: 0,
        };
        for &id in voters {
            sim.add_node(id, voters.to_vec(), snapshot_every);
        }
        sim
    }

    fn add_node(&mut self, id: u64, initial_voters: Vec<u64>, snapshot_every: u64) {
        let mut cfg = QuorumConfig::new(id, initial_voters);
        cfg.snapshot_every = snapshot_every;
        cfg.proposal_timeout_ticks = 200;
        let dir = tempfile::tempdir().unwrap();
        let node = QuorumNode::open(dir.path(), cfg.clone()).unwrap();
        self.dirs.insert(id, dir);
        self.cfgs.insert(id, cfg);
        self.nodes.insert(id, Some(node));
    }

    fn node(&mut self, id: u64) -> &mut QuorumNode {
        self.nodes
            .get_mut(&id)
            .unwrap()
            .as_mut()
            .expect("node is up")
    }

    fn crash(&mut self, id: u64) {
        self.nodes.insert(id, None);
        for (pid, _) in self.proposed.iter() {
            if pid.node == id && !self.seen.contains_key(pid) {
                self.orphaned.insert(*pid);
            }
        }
    }

    fn restart(&mut self, id: u64) {
        let node = QuorumNode::open(self.dirs[&id].path(), self.cfgs[&id].clone()).unwrap();
        self.nodes.insert(id, Some(node));
    }

    fn up(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    fn leader(&self) -> Option<u64> {
        self.nodes
            .values()
            .flatten()
            .filter(|n| n.is_leader() && !self.isolated.contains(&n.id()))
            .max_by_key(|n| n.term())
            .map(|n| n.id())
    }

    /// One tick of every live node, then a few rounds of delivery and polling.
    fn tick(&mut self) {
        for id in self.up() {
            self.node(id).tick();
        }
        for _ in 0..3 {
            self.poll_all();
            self.deliver();
        }
        self.poll_all();
    }

    fn poll_all(&mut self) {
        for id in self.up() {
            let polled = self.node(id).poll().unwrap();
            self.net.extend(polled.messages);
            for (pid, r) in polled.completed {
                let seen = match r {
                    ProposalResult::Committed(Ok(_)) => Seen::Ok,
                    ProposalResult::Committed(Err(e)) => Seen::Err(e.to_string()),
                    ProposalResult::Dropped => Seen::Dropped,
                    ProposalResult::Unknown => Seen::Unknown,
                };
                let prev = self.seen.insert(pid, seen.clone());
                assert!(
                    prev.is_none(),
                    "{pid:?} ended twice: {prev:?} then {seen:?}"
                );
            }
        }
    }

    fn deliver(&mut self) {
        let mut msgs = std::mem::take(&mut self.net);
        if self.faults.reorder {
            msgs.shuffle(&mut self.rng);
        }
        for m in msgs {
            if self.isolated.contains(&m.from) || self.isolated.contains(&m.to) {
                continue;
            }
            if self.rng.gen_range(0..100) < self.faults.drop_pct {
                continue;
            }
            let copies = if self.rng.gen_range(0..100) < self.faults.dup_pct {
                2
            } else {
                1
            };
            for _ in 0..copies {
                if let Some(Some(n)) = self.nodes.get_mut(&m.to) {
                    n.step(m.clone()).unwrap();
                }
            }
        }
    }

    fn run_until(&mut self, max_ticks: usize, mut done: impl FnMut(&Sim) -> bool) -> bool {
        for _ in 0..max_ticks {
            if done(self) {
                return true;
            }
            self.tick();
        }
        done(self)
    }

    fn elect(&mut self) -> u64 {
        assert!(self.run_until(500, |s| s.leader().is_some()), "no leader");
        self.leader().unwrap()
    }

    /// Proposes a topic creation with a fresh name through `via`.
    fn propose(&mut self, via: u64) -> Result<ProposalId, ProposeError> {
        self.names += 1;
        let name = format!("t{}", self.names);
        let node = self.node(via);
        let id = node.store().unused_topic_id();
        let cmd = ClusterCommand::Metadata(MetadataCommand::CreateTopic {
            name: name.clone(),
            partitions: 1,
            configs: BTreeMap::new(),
            id,
            assignments: Vec::new(),
        });
        let pid = node.propose(&cmd)?;
        self.proposed.insert(pid, (name, id));
        Ok(pid)
    }

    fn all_ended(&self) -> bool {
        self.proposed
            .keys()
            .all(|p| self.seen.contains_key(p) || self.orphaned.contains(p))
    }

    fn converged(&self) -> bool {
        let states: Vec<Vec<u8>> = self
            .nodes
            .values()
            .flatten()
            .map(|n| serde_json::to_vec(n.metadata()).unwrap())
            .collect();
        let commits: BTreeSet<u64> = self
            .nodes
            .values()
            .flatten()
            .map(|n| n.applied_index())
            .collect();
        states.windows(2).all(|w| w[0] == w[1]) && commits.len() == 1
    }

    /// The checks every test ends with.
    fn check(&self) {
        let live: Vec<&QuorumNode> = self.nodes.values().flatten().collect();
        let first = serde_json::to_vec(live[0].metadata()).unwrap();
        for n in &live {
            assert_eq!(
                serde_json::to_vec(n.metadata()).unwrap(),
                first,
                "node {} diverged",
                n.id()
            );
            assert!(!n.metadata().cluster_id.is_empty());
        }
        let topics = &live[0].metadata().topics;
        for (pid, (name, id)) in &self.proposed {
            match self.seen.get(pid) {
                Some(Seen::Ok) => {
                    let t = topics
                        .get(name)
                        .unwrap_or_else(|| panic!("{name} committed, missing"));
                    assert_eq!(t.id, *id, "{name} applied from another proposal");
                }
                Some(Seen::Dropped) => {
                    assert!(!topics.contains_key(name), "{name} dropped but applied")
                }
                Some(Seen::Err(e)) => panic!("{name}: unexpected apply error {e}"),
                Some(Seen::Unknown) | None => {
                    if let Some(t) = topics.get(name) {
                        assert_eq!(t.id, *id);
                    }
                }
            }
        }
    }
}

#[test]
fn a_leader_is_elected_and_proposals_through_any_node_commit_everywhere() {
    let mut sim = Sim::new(&[1, 2, 3], 1, 1000);
    let leader = sim.elect();
    for via in [1, 2, 3, 1, 2, 3] {
        sim.propose(via).unwrap();
        sim.tick();
    }
    assert!(sim.run_until(200, |s| s.all_ended() && s.converged()));
    assert!(sim.seen.values().all(|s| *s == Seen::Ok), "{:?}", sim.seen);
    sim.check();
    let n = sim.node(leader);
    assert_eq!(n.metadata().topics.len(), 6);
    assert_eq!(n.voters(), vec![1, 2, 3]);
    assert!(n.commit_index() >= n.applied_index() && n.applied_index() > 6);
}

#[test]
fn a_proposal_on_a_deposed_leader_is_dropped_and_never_applied() {
    let mut sim = Sim::new(&[1, 2, 3], 2, 1000);
    let old = sim.elect();
    sim.propose(old).unwrap();
    assert!(sim.run_until(100, |s| s.all_ended()));
    // Cut the leader off; it still believes it leads and accepts a proposal.
    sim.isolated.insert(old);
    let lost = sim.propose(old).unwrap();
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|i| *i != old).collect();
    assert!(sim.run_until(500, |s| s.leader().is_some_and(|l| l != old)));
    let new = sim.leader().unwrap();
    assert!(others.contains(&new));
    let kept = sim.propose(new).unwrap();
    assert!(sim.run_until(200, |s| s.seen.contains_key(&kept)));
    sim.isolated.clear();
    assert!(sim.run_until(500, |s| s.all_ended() && s.converged()));
    assert_eq!(sim.seen[&lost], Seen::Dropped);
    assert_eq!(sim.seen[&kept], Seen::Ok);
    sim.check();
}

#[test]
fn a_node_restarted_from_disk_catches_up() {
    let mut sim = Sim::new(&[1, 2, 3], 3, 1000);
    let leader = sim.elect();
    let follower = [1, 2, 3].into_iter().find(|i| *i != leader).unwrap();
    sim.propose(leader).unwrap();
    assert!(sim.run_until(100, |s| s.all_ended() && s.converged()));
    sim.crash(follower);
    for _ in 0..10 {
        sim.propose(leader).unwrap();
        sim.tick();
    }
    assert!(sim.run_until(200, |s| s.all_ended()));
    sim.restart(follower);
    // Its first poll, before any message, replays what it had committed from its own disk.
    let polled = sim.node(follower).poll().unwrap();
    sim.net.extend(polled.messages);
    assert_eq!(sim.node(follower).metadata().topics.len(), 1);
    assert!(sim.run_until(300, |s| s.converged()));
    assert_eq!(sim.node(follower).metadata().topics.len(), 11);
    sim.check();
    // The whole cluster restarts and comes back with the same state.
    for id in [1, 2, 3] {
        sim.crash(id);
    }
    for id in [1, 2, 3] {
        sim.restart(id);
        assert_eq!(sim.node(id).metadata().topics.len(), 0, "before replay");
    }
    sim.elect();
    assert!(sim.run_until(300, |s| s.converged()
        && s.nodes
            .values()
            .flatten()
            .all(|n| n.metadata().topics.len() == 11)));
    sim.check();
}

#[test]
fn a_lagging_node_is_brought_up_by_a_snapshot_after_compaction() {
    let mut sim = Sim::new(&[1, 2, 3], 4, 5);
    let leader = sim.elect();
    let lagging = [1, 2, 3].into_iter().find(|i| *i != leader).unwrap();
    sim.crash(lagging);
    for _ in 0..30 {
        sim.propose(leader).unwrap();
        sim.tick();
    }
    assert!(sim.run_until(200, |s| s.all_ended()));
    let snap = sim.node(leader).snapshot_index();
    assert!(snap > 20, "leader snapshot at {snap}");
    sim.restart(lagging);
    assert!(sim.node(lagging).snapshot_index() < snap);
    assert!(sim.run_until(300, |s| s.converged()));
    assert!(sim.node(lagging).snapshot_index() >= snap);
    assert_eq!(sim.node(lagging).metadata().topics.len(), 30);
    sim.check();
    // It restarts from the installed snapshot.
    sim.crash(lagging);
    sim.restart(lagging);
    assert!(!sim.node(lagging).metadata().topics.is_empty());
    assert!(sim.run_until(300, |s| s.converged()));
    sim.check();
}

#[test]
fn a_fourth_node_joins_and_a_voter_is_removed() {
    let mut sim = Sim::new(&[1, 2, 3], 5, 10);
    let leader = sim.elect();
    for _ in 0..15 {
        sim.propose(leader).unwrap();
        sim.tick();
    }
    assert!(sim.run_until(200, |s| s.all_ended()));
    // Node 4 starts empty and joins.
    sim.add_node(4, Vec::new(), 10);
    let add = sim
        .node(leader)
        .propose_membership(MembershipChange::AddVoter(4))
        .unwrap();
    assert!(sim.run_until(300, |s| s.seen.contains_key(&add) && s.converged()));
    assert_eq!(sim.seen[&add], Seen::Ok);
    assert_eq!(sim.node(4).voters(), vec![1, 2, 3, 4]);
    assert_eq!(sim.node(4).metadata().topics.len(), 15);
    // Remove the current leader itself: the others elect a new one and go on.
    let leader = sim.leader().unwrap();
    let remove = sim
        .node(leader)
        .propose_membership(MembershipChange::RemoveVoter(leader))
        .unwrap();
    assert!(sim.run_until(300, |s| s.seen.contains_key(&remove)));
    assert_eq!(sim.seen[&remove], Seen::Ok);
    sim.crash(leader);
    sim.nodes.remove(&leader);
    let new = sim.elect();
    assert_ne!(new, leader);
    let mut voters: Vec<u64> = [1, 2, 3, 4].into_iter().filter(|i| *i != leader).collect();
    voters.sort();
    assert_eq!(sim.node(new).voters(), voters);
    let p = sim.propose(4).unwrap();
    assert!(sim.run_until(300, |s| s.seen.contains_key(&p) && s.converged()));
    assert_eq!(sim.seen[&p], Seen::Ok);
    sim.check();
}

#[test]
fn proposals_refused_where_they_cannot_be_taken() {
    let mut sim = Sim::new(&[1, 2, 3], 6, 1000);
    // No leader yet.
    assert!(matches!(
        sim.propose(1),
        Err(ProposeError::NotLeader { leader: None })
    ));
    let leader = sim.elect();
    let follower = [1, 2, 3].into_iter().find(|i| *i != leader).unwrap();
    assert!(matches!(
        sim.node(follower).propose_membership(MembershipChange::AddVoter(9)),
        Err(ProposeError::NotLeader { leader: Some(l) }) if l == leader
    ));
}

/// Many seeds: lossy, duplicating, reordering network, random crashes and restarts and
/// isolations, proposals through random nodes; then heal and check.
#[test]
fn random_faults_never_diverge_or_apply_a_proposal_twice() {
    let seeds: u64 = std::env::var("QUORUM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut totals: BTreeMap<&'static str, usize> = BTreeMap::new();
    for seed in 0..seeds {
        for s in run_random(seed).seen.values() {
            let k = match s {
                Seen::Ok => "committed",
                Seen::Err(_) => "error",
                Seen::Dropped => "dropped",
                Seen::Unknown => "unknown",
            };
            *totals.entry(k).or_default() += 1;
        }
    }
    eprintln!("proposal outcomes over {seeds} seeds: {totals:?}");
    // The faults are strong enough to exercise every ending.
    assert!(
        totals.get("dropped").copied().unwrap_or(0) > 0,
        "{totals:?}"
    );
    assert!(
        totals.get("committed").copied().unwrap_or(0) > 0,
        "{totals:?}"
    );
}

fn run_random(seed: u64) -> Sim {
    let mut sim = Sim::new(&[1, 2, 3], 1000 + seed, 7);
    sim.faults = Faults {
        drop_pct: 10,
        dup_pct: 10,
        reorder: true,
    };
    for _ in 0..150 {
        let r = sim.rng.gen_range(0..100);
        let id = sim.rng.gen_range(1..=3u64);
        let up = sim.nodes[&id].is_some();
        match r {
            0..=29 if up => {
                let _ = sim.propose(id);
            }
            30..=32 if up && sim.up().len() == 3 => sim.crash(id),
            33..=39 if !up => sim.restart(id),
            40..=41 if sim.isolated.is_empty() => {
                sim.isolated.insert(id);
            }
            42..=46 => sim.isolated.clear(),
            _ => {}
        }
        sim.tick();
    }
    // Heal: everyone up, a perfect network.
    sim.isolated.clear();
    sim.faults = Faults::default();
    for id in [1, 2, 3] {
        if sim.nodes[&id].is_none() {
            sim.restart(id);
        }
    }
    sim.elect();
    // A last proposal proves the healed cluster commits. It can still be dropped by one
    // last leader change (a restarted node's election), so it is retried like a client would.
    let mut committed = false;
    for _ in 0..5 {
        let leader = sim.elect();
        let Ok(p) = sim.propose(leader) else {
            sim.tick();
            continue;
        };
        assert!(
            sim.run_until(500, |s| s.seen.contains_key(&p)),
            "seed {seed}"
        );
        if sim.seen[&p] == Seen::Ok {
            committed = true;
            break;
        }
    }
    assert!(committed, "seed {seed}: the healed cluster commits nothing");
    if !sim.run_until(1000, |s| s.all_ended() && s.converged()) {
        for n in sim.nodes.values().flatten() {
            eprintln!(
                "node {}: term {} leader {:?} commit {} applied {} snap {} topics {}",
                n.id(),
                n.term(),
                n.leader_id(),
                n.commit_index(),
                n.applied_index(),
                n.snapshot_index(),
                n.metadata().topics.len()
            );
        }
        let open: Vec<_> = sim
            .proposed
            .keys()
            .filter(|p| !sim.seen.contains_key(p) && !sim.orphaned.contains(p))
            .collect();
        panic!("seed {seed}: no convergence; open proposals {open:?}");
    }
    sim.check();
    sim
}

// ---- the controller's replicated-cluster state (brokers, assignments, elections) ----

impl Sim {
    /// Commits `cmd` through the leader (retrying a proposal a leader change dropped) and
    /// waits until every node applied it; returns the apply result.
    fn commit(&mut self, cmd: MetadataCommand) -> Result<(), String> {
        let cmd = ClusterCommand::Metadata(cmd);
        for _ in 0..5 {
            let leader = self.elect();
            let Ok(p) = self.node(leader).propose(&cmd) else {
                self.tick();
                continue;
            };
            assert!(self.run_until(500, |s| s.seen.contains_key(&p) && s.converged()));
            match self.seen[&p].clone() {
                Seen::Ok => return Ok(()),
                Seen::Err(e) => return Err(e),
                Seen::Dropped | Seen::Unknown => continue,
            }
        }
        panic!("{cmd:?} never committed");
    }

    /// The state every node agrees on (asserted byte-identical).
    fn agreed(&mut self) -> crate::metadata::ClusterMetadata {
        assert!(self.converged());
        let states: BTreeSet<Vec<u8>> = self
            .nodes
            .values()
            .flatten()
            .map(|n| serde_json::to_vec(n.metadata()).unwrap())
            .collect();
        assert_eq!(states.len(), 1, "nodes diverged");
        self.nodes
            .values()
            .flatten()
            .next()
            .unwrap()
            .metadata()
            .clone()
    }

    fn partition(&mut self, topic: &str, p: usize) -> (PartitionAssignment, i32) {
        let s = self.agreed();
        let t = &s.topics[topic];
        (t.assignments[p].clone(), t.leader_epochs[p])
    }
}

use crate::metadata::{
    BrokerEndpoint, BrokerRegistration, MetadataError, PartitionAssignment, NO_LEADER,
};

fn register(id: i32) -> MetadataCommand {
    MetadataCommand::RegisterBroker(BrokerRegistration {
        id,
        incarnation: Uuid::from_u128(id as u128),
        endpoints: vec![BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host: format!("broker{id}"),
            port: 9092,
            security_protocol: 0,
        }],
        rack: None,
        fenced: false,
    })
}

fn create(name: &str, assignments: Vec<Vec<i32>>) -> MetadataCommand {
    MetadataCommand::CreateTopic {
        name: name.into(),
        partitions: assignments.len() as i32,
        configs: BTreeMap::new(),
        id: Uuid::from_u128(name.len() as u128 + 77),
        assignments,
    }
}

fn alter(
    name: &str,
    partition: i32,
    broker: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: &[i32],
) -> MetadataCommand {
    MetadataCommand::AlterPartition {
        name: name.into(),
        partition,
        broker,
        leader_epoch,
        partition_epoch,
        isr: isr.to_vec(),
    }
}

fn pa(replicas: &[i32], isr: &[i32], leader: i32, partition_epoch: i32) -> PartitionAssignment {
    PartitionAssignment {
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        partition_epoch,
    }
}

#[test]
fn brokers_placement_fencing_and_elections_apply_identically_on_every_node() {
    let mut sim = Sim::new(&[1, 2, 3], 42, 1000);
    sim.elect();
    for b in [1, 2, 3] {
        sim.commit(register(b)).unwrap();
    }
    let s = sim.agreed();
    assert_eq!(s.brokers.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(s.brokers[&2].endpoints[0].host, "broker2");

    // Placement as Kafka's striped placer gives it for start index 0, shift 0.
    let placed = controller::place_replicas(&[1, 2, 3], 0, 6, 3, 0, 0).unwrap();
    sim.commit(create("t", placed)).unwrap();
    let t = sim.agreed().topics["t"].clone();
    let expect = [
        [1, 2, 3],
        [2, 3, 1],
        [3, 1, 2],
        [1, 3, 2],
        [2, 1, 3],
        [3, 2, 1],
    ];
    for (p, r) in expect.iter().enumerate() {
        assert_eq!(t.assignments[p], pa(r, r, r[0], 0), "partition {p}");
    }
    assert_eq!(t.leader_epochs, [0; 6]);
    // The proposer's random placement is refused beyond the unfenced brokers.
    let e = controller::propose_placement(&sim.agreed(), 0, 1, 4, 1).unwrap_err();
    assert!(matches!(
        e,
        MetadataError::ReplicationFactorTooLarge {
            requested: 4,
            available: 3
        }
    ));
    // An assignment naming an unregistered broker is refused at apply.
    let e = sim.commit(create("bad", vec![vec![1, 9]])).unwrap_err();
    assert!(e.contains("broker 9 is not registered"), "{e}");

    // Fence broker 1: it leaves every ISR; p0 and p3 (led by 1) elect the first live ISR
    // member in replica order and bump both epochs; the others bump the partition epoch.
    sim.commit(MetadataCommand::FenceBroker { id: 1 }).unwrap();
    let s = sim.agreed();
    assert!(s.brokers[&1].fenced);
    let t = &s.topics["t"];
    assert_eq!(t.assignments[0], pa(&[1, 2, 3], &[2, 3], 2, 1));
    assert_eq!(t.assignments[1], pa(&[2, 3, 1], &[2, 3], 2, 1));
    assert_eq!(t.assignments[3], pa(&[1, 3, 2], &[3, 2], 3, 1));
    assert_eq!(t.assignments[5], pa(&[3, 2, 1], &[3, 2], 3, 1));
    assert_eq!(t.leader_epochs, [1, 0, 0, 1, 0, 0]);

    // AlterPartition: Kafka's checks, refused identically everywhere and changing nothing.
    let before = sim.agreed();
    let refusals = [
        (alter("t", 1, 3, 0, 1, &[3, 2]), "is not the leader"),
        (alter("t", 0, 2, 0, 1, &[2, 3]), "leader epoch 0"),
        (alter("t", 1, 2, 0, 0, &[2, 3]), "partition epoch 0"),
        (alter("t", 1, 2, 0, 1, &[2, 3, 1]), "it is fenced"),
        (alter("t", 1, 2, 0, 1, &[3]), "must hold the leader"),
        (alter("t", 1, 2, 0, 1, &[2, 4]), "not a replica"),
    ];
    for (cmd, why) in refusals {
        let e = sim.commit(cmd.clone()).unwrap_err();
        assert!(e.contains(why), "{cmd:?}: {e}");
        let mut after = sim.agreed();
        after.version = before.version;
        assert_eq!(after, before, "{cmd:?} changed the state");
    }
    // The error kinds map to Kafka's codes in `net`; check the variants behind the texts.
    let mut probe = sim.agreed();
    assert!(matches!(
        controller::alter_partition(&mut probe, "t", 1, 2, 0, 0, &[2, 3]),
        Err(MetadataError::InvalidUpdateVersion { current: 1, .. })
    ));
    assert!(matches!(
        controller::alter_partition(&mut probe, "t", 0, 2, 0, 1, &[2, 3]),
        Err(MetadataError::FencedLeaderEpoch { current: 1, .. })
    ));
    assert!(matches!(
        controller::alter_partition(&mut probe, "t", 1, 2, 0, 1, &[2, 3, 1]),
        Err(MetadataError::IneligibleReplica { broker: 1, .. })
    ));

    // Broker 1 returns; the leader of p0 expands the ISR, then the preferred leader is elected.
    sim.commit(MetadataCommand::UnfenceBroker { id: 1 })
        .unwrap();
    assert_eq!(sim.partition("t", 0), (pa(&[1, 2, 3], &[2, 3], 2, 1), 1));
    sim.commit(alter("t", 0, 2, 1, 1, &[2, 3, 1])).unwrap();
    assert_eq!(sim.partition("t", 0), (pa(&[1, 2, 3], &[2, 3, 1], 2, 2), 1));
    let elect = MetadataCommand::ElectPreferredLeader {
        name: "t".into(),
        partition: 0,
    };
    sim.commit(elect.clone()).unwrap();
    assert_eq!(sim.partition("t", 0), (pa(&[1, 2, 3], &[2, 3, 1], 1, 3), 2));
    let e = sim.commit(elect).unwrap_err();
    assert!(e.contains("already led by its preferred replica"), "{e}");
    // p3's preferred replica (1) is not in its ISR yet.
    let e = sim
        .commit(MetadataCommand::ElectPreferredLeader {
            name: "t".into(),
            partition: 3,
        })
        .unwrap_err();
    assert!(e.contains("not available"), "{e}");

    // Unclean election is off: a partition whose only ISR member is fenced has no leader
    // (its ISR keeps that member) until it returns.
    sim.commit(create("single", vec![vec![3]])).unwrap();
    sim.commit(MetadataCommand::FenceBroker { id: 3 }).unwrap();
    assert_eq!(
        sim.partition("single", 0),
        (pa(&[3], &[3], NO_LEADER, 1), 1)
    );
    // p5 [3,2,1] was led by 3: 2 is the first live ISR member.
    assert_eq!(sim.partition("t", 5), (pa(&[3, 2, 1], &[2], 2, 2), 1));
    sim.commit(MetadataCommand::UnfenceBroker { id: 3 })
        .unwrap();
    assert_eq!(sim.partition("single", 0), (pa(&[3], &[3], 3, 2), 2));

    // Growing a replicated topic takes the new partitions' replica lists.
    let more = controller::place_replicas(&[1, 2, 3], 6, 2, 3, 0, 0).unwrap();
    // Partition 6 wraps around the three brokers: the shift grows.
    assert_eq!(more, [vec![1, 3, 2], vec![2, 1, 3]]);
    let grow = |assignments| MetadataCommand::CreatePartitions {
        name: "t".into(),
        total: 8,
        assignments,
    };
    let e = sim.commit(grow(vec![vec![1, 2]; 2])).unwrap_err();
    assert!(e.contains("replication factor"), "{e}");
    sim.commit(grow(more)).unwrap();
    let s = sim.agreed();
    assert_eq!(s.topics["t"].partition_count(), 8);
    assert_eq!(
        s.topics["t"].assignments[7],
        pa(&[2, 1, 3], &[2, 1, 3], 2, 0)
    );

    // Unregistering moves leaderships like fencing does.
    sim.commit(MetadataCommand::UnregisterBroker { id: 2 })
        .unwrap();
    let s = sim.agreed();
    assert!(!s.brokers.contains_key(&2));
    assert_eq!(s.topics["t"].assignments[7], pa(&[2, 1, 3], &[1, 3], 1, 1));
    assert!(s.topics["t"].assignments.iter().all(|a| a.leader != 2));
    sim.check();
}

#[test]
fn mirror_topics_are_created_and_grown_with_replica_lists() {
    let mut sim = Sim::new(&[1, 2, 3], 7, 1000);
    sim.elect();
    for b in [1, 2, 3] {
        sim.commit(register(b)).unwrap();
    }
    let mirror = |name: &str, assignments: Vec<Vec<i32>>| MetadataCommand::CreateMirrorTopic {
        name: name.into(),
        partitions: 2,
        configs: BTreeMap::new(),
        source_configs: BTreeMap::new(),
        id: Uuid::from_u128(name.len() as u128 + 99),
        mirror: "dr".into(),
        assignments,
    };
    // A wrong count or an unknown broker is refused before the topic exists.
    let e = sim.commit(mirror("m", vec![vec![1, 2, 3]])).unwrap_err();
    assert!(e.contains("1 replica lists for 2 partitions"), "{e}");
    let e = sim
        .commit(mirror("m", vec![vec![1, 9], vec![2, 1]]))
        .unwrap_err();
    assert!(e.contains("broker 9 is not registered"), "{e}");
    assert!(!sim.agreed().topics.contains_key("m"));

    sim.commit(mirror("m", vec![vec![1, 2, 3], vec![2, 3, 1]]))
        .unwrap();
    let t = sim.agreed().topics["m"].clone();
    assert_eq!(t.mirror.as_deref(), Some("dr"));
    assert_eq!(t.assignments[0], pa(&[1, 2, 3], &[1, 2, 3], 1, 0));
    assert_eq!(t.assignments[1], pa(&[2, 3, 1], &[2, 3, 1], 2, 0));

    // Growing a replicated mirror topic needs a list per new partition at the topic's RF.
    let grow = |total: i32, assignments: Vec<Vec<i32>>| MetadataCommand::GrowMirrorTopic {
        name: "m".into(),
        total,
        assignments,
    };
    let e = sim.commit(grow(3, Vec::new())).unwrap_err();
    assert!(e.contains("0 replica lists for 1 new partitions"), "{e}");
    let e = sim.commit(grow(3, vec![vec![3, 1]])).unwrap_err();
    assert!(e.contains("replication factor"), "{e}");
    sim.commit(grow(3, vec![vec![3, 1, 2]])).unwrap();
    let t = sim.agreed().topics["m"].clone();
    assert_eq!(t.leader_epochs, [0, 0, 0]);
    assert_eq!(t.assignments[2], pa(&[3, 1, 2], &[3, 1, 2], 3, 0));
    // A shrink or a repeat changes nothing.
    sim.commit(grow(2, Vec::new())).unwrap();
    assert_eq!(sim.agreed().topics["m"].assignments.len(), 3);
}

#[test]
fn the_controller_state_survives_a_snapshot_and_a_restart() {
    // snapshot_every = 3: the brokers and assignments travel in snapshots too.
    let mut sim = Sim::new(&[1, 2, 3], 43, 3);
    sim.elect();
    for b in [1, 2, 3] {
        sim.commit(register(b)).unwrap();
    }
    sim.commit(create(
        "t",
        controller::place_replicas(&[1, 2, 3], 0, 3, 2, 1, 1).unwrap(),
    ))
    .unwrap();
    sim.commit(MetadataCommand::FenceBroker { id: 2 }).unwrap();
    let before = sim.agreed();
    sim.crash(3);
    sim.restart(3);
    assert!(sim.run_until(500, |s| s.converged()));
    let mut after = sim.agreed();
    after.version = before.version;
    assert_eq!(after, before);
    assert!(after.brokers[&2].fenced);
}

#[test]
fn acl_commands_apply_identically_and_survive_snapshots_and_restarts() {
    use crate::acl::AclFilter;
    use crate::mirror::AclBinding;
    let binding = |name: &str, principal: &str| AclBinding {
        resource_type: 2, // TOPIC
        resource_name: name.into(),
        pattern_type: 3, // LITERAL
        principal: principal.into(),
        host: "*".into(),
        operation: 3,       // READ
        permission_type: 3, // ALLOW
    };
    let acls = |sim: &Sim| -> Vec<Vec<AclBinding>> {
        sim.nodes
            .values()
            .flatten()
            .map(|n| n.acls().all())
            .collect()
    };
    let mut sim = Sim::new(&[1, 2, 3], 44, 2);
    sim.elect();
    let create = ClusterCommand::Acl(AclCommand::Create {
        bindings: vec![
            binding("a", "User:alice"),
            binding("b", "User:bob"),
            // Invalid (empty resource name): skipped identically everywhere.
            binding("", "User:eve"),
        ],
    });
    let leader = sim.elect();
    let p = sim.node(leader).propose(&create).unwrap();
    assert!(sim.run_until(500, |s| s.seen.contains_key(&p) && s.converged()));
    assert_eq!(sim.seen[&p], Seen::Ok);
    let all = acls(&sim);
    assert!(all.windows(2).all(|w| w[0] == w[1]), "{all:?}");
    assert_eq!(
        all[0],
        [binding("a", "User:alice"), binding("b", "User:bob")]
    );

    let delete = ClusterCommand::Acl(AclCommand::Delete {
        filters: vec![AclFilter {
            principal: Some("User:bob".into()),
            ..AclFilter::any()
        }],
    });
    let leader = sim.elect();
    let p = sim.node(leader).propose(&delete).unwrap();
    assert!(sim.run_until(500, |s| s.seen.contains_key(&p) && s.converged()));
    // A few more entries so that snapshots (every 2) hold the ACLs; then a restart.
    sim.commit(register(1)).unwrap();
    sim.commit(register(2)).unwrap();
    sim.crash(2);
    sim.restart(2);
    assert!(sim.run_until(500, |s| s.converged()));
    for set in acls(&sim) {
        assert_eq!(set, [binding("a", "User:alice")]);
    }
    assert!(sim.nodes.values().flatten().all(|n| n.snapshot_index() > 0));
}
