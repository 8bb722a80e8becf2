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
        self.commit_cmd(ClusterCommand::Metadata(cmd))
    }

    fn commit_cmd(&mut self, cmd: ClusterCommand) -> Result<(), String> {
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
        adding: Vec::new(),
        removing: Vec::new(),
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
        writer: None,
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
        writer: None,
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

// ---- SCRAM credentials, client quotas and mirror state on the log ----

impl Sim {
    /// Every live node's whole applied state, asserted byte-identical.
    fn identical(&self) -> Vec<u8> {
        assert!(self.converged());
        let states: BTreeSet<Vec<u8>> = self
            .nodes
            .values()
            .flatten()
            .map(|n| n.state_bytes())
            .collect();
        assert_eq!(states.len(), 1, "nodes diverged");
        states.into_iter().next().unwrap()
    }

    fn any(&self) -> &QuorumNode {
        self.nodes.values().flatten().next().unwrap()
    }
}

/// A committer that only records what the coordinator's store wants committed; the test
/// commits it through the simulated quorum.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<ClusterCommand>>);

impl crate::replicated::Committer for Recorder {
    fn commit(&self, cmd: ClusterCommand) -> std::io::Result<()> {
        self.0.lock().unwrap().push(cmd);
        Ok(())
    }
}

impl Recorder {
    fn take(&self) -> Vec<ClusterCommand> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[test]
fn scram_quota_and_mirror_commands_apply_identically_and_survive_snapshots_and_restarts() {
    use crate::mirror::{MirrorDefinition, MirrorStateStore, PartitionState};
    use crate::quota::{keys, Alteration};
    use crate::scram::{ScramChange, ScramEdit, ScramError, ScramMechanism};
    use kmirror_types::TopicPartition;

    // snapshot_every = 3: every kind of state travels in snapshots too.
    let mut sim = Sim::new(&[1, 2, 3], 45, 3);
    sim.elect();

    // SCRAM: the proposer derives the keys; the log never holds the salted password.
    let salt = b"salt-chosen-by-the-client".to_vec();
    let upsert = |user: &str, pw: &str, iterations: i32| {
        ScramEdit::from_change(&ScramChange::Upsert {
            user: user.into(),
            mechanism: ScramMechanism::Sha256.code(),
            iterations,
            salt: salt.clone(),
            salted_password: ScramMechanism::Sha256.salted_password(
                pw.as_bytes(),
                &salt,
                iterations as u32,
            ),
        })
    };
    let cmd = ClusterCommand::Scram {
        edits: vec![
            upsert("alice", "alice-pw", 4096),
            upsert("bob", "bob-pw", 8192),
            upsert("few", "x", 100),
        ],
    };
    let salted = ScramMechanism::Sha256.salted_password(b"alice-pw", &salt, 4096);
    let wire = cmd.encode();
    assert!(!wire.windows(salted.len()).any(|w| w == salted.as_slice()));
    sim.commit_cmd(cmd).unwrap();
    sim.identical();
    let creds = sim.any().scram().credentials().clone();
    assert_eq!(creds.keys().collect::<Vec<_>>(), ["alice", "bob"]);
    assert!(creds["alice"][&ScramMechanism::Sha256]
        .matches_password(ScramMechanism::Sha256, "alice-pw"));
    // Deleting a missing credential is refused identically (Kafka: RESOURCE_NOT_FOUND).
    let leader = sim.elect();
    let p = sim
        .node(leader)
        .propose(&ClusterCommand::Scram {
            edits: vec![
                ScramEdit::Delete {
                    user: "bob".into(),
                    mechanism: ScramMechanism::Sha256.code(),
                },
                ScramEdit::Delete {
                    user: "ghost".into(),
                    mechanism: ScramMechanism::Sha512.code(),
                },
            ],
        })
        .unwrap();
    assert!(sim.run_until(500, |s| s.seen.contains_key(&p) && s.converged()));
    assert_eq!(sim.seen[&p], Seen::Ok);
    sim.identical();
    let creds = sim.any().scram().credentials().clone();
    assert_eq!(creds.keys().collect::<Vec<_>>(), ["alice"]);
    let mut again = crate::scram::ScramStore::in_memory(creds);
    let r = again.apply_edits(&[ScramEdit::Delete {
        user: "ghost".into(),
        mechanism: ScramMechanism::Sha512.code(),
    }]);
    assert!(matches!(r[0].1, Err(ScramError::NotFound(_))));

    // Quotas: an invalid key is refused everywhere, the valid alteration applies.
    let alt = |user: Option<&str>, key: &str, v: Option<f64>| Alteration {
        entity: vec![(keys::USER.into(), user.map(str::to_owned))],
        ops: vec![(key.into(), v)],
    };
    sim.commit_cmd(ClusterCommand::Quota {
        alterations: vec![
            alt(Some("alice"), keys::PRODUCER_BYTE_RATE, Some(1048576.0)),
            alt(None, keys::CONSUMER_BYTE_RATE, Some(2097152.0)),
            alt(Some("bob"), "no.such.quota", Some(1.0)),
            alt(Some("carol"), keys::REQUEST_PERCENTAGE, Some(12.5)),
        ],
        writer: None,
    })
    .unwrap();
    sim.commit_cmd(ClusterCommand::Quota {
        alterations: vec![alt(Some("carol"), keys::REQUEST_PERCENTAGE, None)],
        writer: None,
    })
    .unwrap();
    sim.identical();
    let q = sim.any().quotas();
    assert_eq!(q.all().len(), 2);
    assert_eq!(
        q.resolve("alice", "any", keys::PRODUCER_BYTE_RATE)
            .map(|r| r.1),
        Some(1048576.0)
    );
    assert_eq!(
        q.resolve("dave", "any", keys::CONSUMER_BYTE_RATE)
            .map(|r| r.1),
        Some(2097152.0)
    );

    // A mirror's quota sync creates and owns a new entity but cannot change a local one;
    // the ownership is replicated state like the quotas.
    let dr = crate::mirror::owners::MirrorWriter {
        mirror: "dr".into(),
        exact: false,
    };
    sim.commit_cmd(ClusterCommand::Quota {
        alterations: vec![
            alt(Some("erin"), keys::PRODUCER_BYTE_RATE, Some(5.0)),
            alt(Some("alice"), keys::PRODUCER_BYTE_RATE, Some(7.0)),
        ],
        writer: Some(dr),
    })
    .unwrap();
    sim.identical();
    let n = sim.any();
    let erin: crate::quota::Entity = [(keys::USER.to_owned(), Some("erin".to_owned()))].into();
    assert_eq!(n.sync_owners().quota_owner(&erin), Some("dr"));
    assert_eq!(
        n.quotas()
            .resolve("alice", "any", keys::PRODUCER_BYTE_RATE)
            .map(|r| r.1),
        Some(1048576.0),
        "a local quota is not the mirror's to change"
    );

    // Mirror state: the coordinator's replicated store commits each record before its view
    // changes; every node's copy ends equal to it.
    let recorder = std::sync::Arc::new(Recorder::default());
    let leader = sim.elect();
    let term = sim.node(leader).term();
    let mut coord = MirrorStateStore::replicated(sim.any().mirrors(), recorder.clone(), term);
    let mut settings = BTreeMap::new();
    settings.insert("bootstrap.servers".to_owned(), "source:9092".to_owned());
    coord
        .create_mirror(MirrorDefinition::new("dr", settings).unwrap())
        .unwrap();
    let tp = |p: i32| TopicPartition::new("orders", p);
    for p in 0..2 {
        coord
            .transition(&tp(p), "dr", PartitionState::Preparing, None)
            .unwrap();
        coord
            .transition(&tp(p), "dr", PartitionState::Mirroring, None)
            .unwrap();
    }
    coord.set_topic_id(&tp(0), "a-source-topic-id").unwrap();
    coord.set_last_mirrored_epoch(&tp(1), 7).unwrap();
    // Refused transitions commit nothing.
    assert!(coord
        .transition(&tp(0), "dr", PartitionState::Preparing, None)
        .is_err());
    let cmds = recorder.take();
    assert_eq!(cmds.len(), 7);
    for c in cmds {
        sim.commit_cmd(c).unwrap();
    }
    sim.identical();
    assert_eq!(sim.any().mirrors().live(), coord.live());
    assert_eq!(
        sim.any().mirrors().state_of(&tp(1)),
        PartitionState::Mirroring
    );
    assert_eq!(sim.any().mirrors().last_mirrored_epoch(&tp(1)), Some(7));
    // A new leader's coordinator starts from the applied copy.
    let next = MirrorStateStore::replicated(sim.any().mirrors(), recorder.clone(), term);
    assert_eq!(next.live(), coord.live());
    assert!(next.mirror("dr").is_some());

    // Snapshots (every 3 entries) hold all of it; a restarted node and a whole-cluster
    // restart come back byte-identical.
    let before = sim.identical();
    assert!(sim.nodes.values().flatten().all(|n| n.snapshot_index() > 1));
    sim.crash(2);
    sim.commit(register(1)).unwrap();
    sim.restart(2);
    assert!(sim.run_until(500, |s| s.converged()));
    sim.identical();
    for id in [1, 2, 3] {
        sim.crash(id);
    }
    for id in [1, 2, 3] {
        sim.restart(id);
    }
    sim.elect();
    sim.commit(register(2)).unwrap();
    let after = sim.identical();
    let strip = |b: &[u8]| {
        let mut v: serde_json::Value = serde_json::from_slice(b).unwrap();
        v["metadata"] = serde_json::Value::Null;
        v
    };
    assert_eq!(strip(&after), strip(&before));
    let n = sim.any();
    assert!(n.scram().credentials().contains_key("alice"));
    // alice and the default user as before, and erin the mirror wrote (still its own).
    assert_eq!(n.quotas().all().len(), 3);
    assert_eq!(n.sync_owners().quota_owner(&erin), Some("dr"));
    assert_eq!(n.mirrors().live(), coord.live());
}

// ---- coordinator state (groups, transactions) on the log ----

/// A committer whose commits fail (a leader change left their fate unknown).
struct Failing(std::sync::atomic::AtomicUsize);

impl crate::replicated::Committer for Failing {
    fn commit(&self, _: ClusterCommand) -> std::io::Result<()> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err(std::io::Error::other("unknown"))
    }
}

impl Sim {
    /// The leader, once it may run the coordinators.
    fn coordinator(&mut self) -> u64 {
        assert!(self.run_until(500, |s| s
            .leader()
            .is_some_and(|l| s.nodes[&l].as_ref().unwrap().coordinator_ready())));
        self.leader().unwrap()
    }

    fn commit_recorded(&mut self, recorder: &Recorder) -> usize {
        let cmds = recorder.take();
        let n = cmds.len();
        for c in cmds {
            self.commit_cmd(c).unwrap();
        }
        n
    }
}

#[test]
fn group_and_transaction_state_survives_the_loss_of_the_coordinator_node() {
    use crate::group::{CommitContext, GroupConfig, GroupCoordinator, OffsetToCommit};
    use crate::replicated::CoordinatorLog;
    use crate::txn::{TxnConfig, TxnCoordinator, TxnState};

    let mut sim = Sim::new(&[1, 2, 3], 46, 4);
    let first = sim.coordinator();
    let recorder = std::sync::Arc::new(Recorder::default());
    let logs = sim.node(first).coordinator_logs().clone();
    let term = sim.node(first).term();
    let mut groups = GroupCoordinator::open_replicated(
        logs.log(CoordinatorLog::Offsets),
        recorder.clone(),
        term,
        GroupConfig::default(),
        1_000,
    )
    .unwrap();
    let txn_cfg = TxnConfig {
        pid_block_size: 10,
        ..TxnConfig::default()
    };
    let (mut txns, resume) = TxnCoordinator::open_replicated(
        logs.log(CoordinatorLog::Transactions),
        recorder.clone(),
        term,
        txn_cfg.clone(),
    )
    .unwrap();
    assert!(resume.is_empty());

    // A simple-consumer commit of two partitions: one flush, one entry.
    let ctx = CommitContext {
        group_id: "g".into(),
        generation_id: -1,
        api_version: 8,
        ..Default::default()
    };
    let offset = |partition: i32, offset: i64| OffsetToCommit {
        topic: "t".into(),
        partition,
        offset,
        leader_epoch: 3,
        metadata: Some("m".into()),
    };
    let codes = groups
        .commit_offsets(&ctx, &[offset(0, 42), offset(1, 7)], 2_000)
        .unwrap();
    assert_eq!(codes, [0, 0]);
    groups.flush().unwrap();
    assert_eq!(sim.commit_recorded(&recorder), 1);

    // A transaction left ongoing, and an idempotent producer id.
    let (pid, epoch) = txns
        .init_producer_id(Some("tx"), 60_000, None, 2_000)
        .0
        .unwrap();
    assert_eq!(
        txns.add_partitions("tx", pid, epoch, &[("t".into(), 0)], 2_001),
        0
    );
    let (idempotent, _) = txns.init_producer_id(None, 0, None, 2_002).0.unwrap();
    txns.flush().unwrap();
    assert_eq!(sim.commit_recorded(&recorder), 1);
    sim.identical();

    // The coordinator's node dies; the new leader loads both coordinators from its copy.
    sim.crash(first);
    let second = sim.coordinator();
    assert_ne!(second, first);
    let logs = sim.node(second).coordinator_logs().clone();
    let term2 = sim.node(second).term();
    assert!(term2 > term);
    // The deposed coordinator's late write is fenced by its term, identically everywhere.
    assert!(sim.run_until(500, |s| s.converged()));
    let before = sim.identical();
    let late = ClusterCommand::Coordinator {
        log: CoordinatorLog::Offsets,
        term,
        op: crate::replicated::LogOp::Replace(Vec::new()),
    };
    let p = sim.node(second).propose(&late).unwrap();
    assert!(sim.run_until(500, |s| s.seen.contains_key(&p) && s.converged()));
    assert!(
        matches!(&sim.seen[&p], Seen::Err(e) if e.contains("fenced")),
        "{:?}",
        sim.seen[&p]
    );
    let mut after = sim.identical();
    let strip = |b: &mut Vec<u8>| {
        let mut v: serde_json::Value = serde_json::from_slice(b).unwrap();
        v["metadata"] = serde_json::Value::Null;
        v
    };
    assert_eq!(strip(&mut after), strip(&mut before.clone()));
    let groups = GroupCoordinator::open_replicated(
        logs.log(CoordinatorLog::Offsets),
        recorder.clone(),
        term2,
        GroupConfig::default(),
        3_000,
    )
    .unwrap();
    let fetched: Vec<(i32, i64, i32)> = groups
        .fetch_offsets("g", None, false)
        .into_iter()
        .map(|f| (f.partition, f.offset, f.leader_epoch))
        .collect();
    assert_eq!(fetched, [(0, 42, 3), (1, 7, 3)]);
    let (mut txns, resume) = TxnCoordinator::open_replicated(
        logs.log(CoordinatorLog::Transactions),
        recorder.clone(),
        term2,
        txn_cfg,
    )
    .unwrap();
    assert!(resume.is_empty());
    assert_eq!(txns.state("tx"), Some((pid, epoch, TxnState::Ongoing)));
    // A new producer instance with the same transactional.id fences the old one and aborts
    // its transaction (CONCURRENT_TRANSACTIONS until the abort markers are written).
    let (r, job) = txns.init_producer_id(Some("tx"), 60_000, None, 3_001);
    assert_eq!(r, Err(crate::group::codes::CONCURRENT_TRANSACTIONS));
    let job = job.expect("the ongoing transaction is aborted");
    assert!(!job.commit);
    assert_eq!(job.partitions, [("t".to_string(), 0)]);
    // Producer ids never repeat across coordinators.
    let (fresh, _) = txns.init_producer_id(None, 0, None, 3_002).0.unwrap();
    assert!(fresh > idempotent && fresh > pid);
    txns.flush().unwrap();
    assert_eq!(sim.commit_recorded(&recorder), 1);
    assert_eq!(
        txns.state("tx"),
        Some((pid, epoch + 1, TxnState::PrepareAbort))
    );

    // Idempotent producer ids for non-coordinating nodes: disjoint blocks from the quorum.
    for _ in 0..2 {
        sim.commit_cmd(ClusterCommand::AllocateProducerIds { count: 1000 })
            .unwrap();
    }
    assert_eq!(
        sim.any().coordinator_logs().next_producer_id,
        crate::replicated::PRODUCER_ID_BLOCKS_START + 2000
    );
    assert!(fresh < crate::replicated::PRODUCER_ID_BLOCKS_START);

    // The dead node comes back and catches up (by snapshot: every 4 entries).
    sim.restart(first);
    assert!(sim.run_until(500, |s| s.converged()));
    sim.identical();
    assert!(sim.nodes.values().flatten().all(|n| n.snapshot_index() > 1));
    // A leader that loads while the abort is still being written resumes it.
    let logs = sim.any().coordinator_logs().clone();
    let (_, resume) = TxnCoordinator::open_replicated(
        logs.log(CoordinatorLog::Transactions),
        recorder.clone(),
        term2,
        TxnConfig::default(),
    )
    .unwrap();
    assert_eq!(resume, [job]);
}

#[test]
fn a_failed_replicated_write_fences_the_coordinator_log() {
    use crate::group::{CommitContext, GroupConfig, GroupCoordinator, OffsetToCommit};
    let failing = std::sync::Arc::new(Failing(Default::default()));
    let mut groups =
        GroupCoordinator::open_replicated(&[], failing.clone(), 1, GroupConfig::default(), 0)
            .unwrap();
    let ctx = CommitContext {
        group_id: "g".into(),
        generation_id: -1,
        api_version: 8,
        ..Default::default()
    };
    let o = OffsetToCommit {
        topic: "t".into(),
        partition: 0,
        offset: 1,
        leader_epoch: 0,
        metadata: None,
    };
    groups
        .commit_offsets(&ctx, std::slice::from_ref(&o), 1)
        .unwrap();
    assert!(groups.flush().is_err());
    assert!(groups.is_fenced());
    // Not retried: the first entry may still commit, and a second copy could land after it.
    groups.commit_offsets(&ctx, &[o], 2).unwrap();
    assert!(groups.flush().is_err());
    assert_eq!(failing.0.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn a_coordinator_compaction_replaces_the_replicated_log() {
    use crate::offsets_log::RecordFile;
    use crate::replicated::{CoordinatorLog, CoordinatorLogs, LogOp};
    let recorder = std::sync::Arc::new(Recorder::default());
    let mut f = RecordFile::replicated(
        CoordinatorLog::Offsets,
        1,
        &[b"old".to_vec()],
        recorder.clone(),
    );
    assert_eq!(f.len_bytes(), 11);
    f.append(b"a").unwrap();
    f.append(b"b").unwrap();
    assert_eq!(f.len_bytes(), 11 + 18);
    f.sync().unwrap();
    f.rewrite(&[b"live".to_vec()]).unwrap();
    assert_eq!(f.len_bytes(), 12);
    let mut logs = CoordinatorLogs {
        offsets: vec![b"old".to_vec()],
        ..Default::default()
    };
    for c in recorder.take() {
        let ClusterCommand::Coordinator { log, op, .. } = &c else {
            panic!("{c:?}")
        };
        // Through the wire form.
        let ClusterCommand::Coordinator { op: decoded, .. } =
            ClusterCommand::decode(&c.encode()).unwrap()
        else {
            unreachable!()
        };
        assert_eq!(&decoded, op);
        logs.apply(*log, op);
        if let LogOp::Append(r) = op {
            assert_eq!(r, &[b"a".to_vec(), b"b".to_vec()]);
        }
    }
    assert_eq!(logs.offsets, [b"live".to_vec()]);
}

#[test]
fn a_deposed_partition_leaders_failover_step_is_fenced_by_its_leader_epoch() {
    use crate::mirror::{FailoverStep, MirrorDefinition, MirrorStateStore, PartitionState};
    use kmirror_types::TopicPartition;

    let mut sim = Sim::new(&[1, 2, 3], 11, 1000);
    sim.elect();
    for b in [1, 2, 3] {
        sim.commit(register(b)).unwrap();
    }
    sim.commit(MetadataCommand::CreateMirrorTopic {
        name: "orders".into(),
        partitions: 1,
        configs: BTreeMap::new(),
        source_configs: BTreeMap::new(),
        id: Uuid::from_u128(5),
        mirror: "dr".into(),
        assignments: vec![vec![1, 2, 3]],
    })
    .unwrap();
    assert_eq!(sim.agreed().topics["orders"].leader_epochs, [0]);

    let recorder = std::sync::Arc::new(Recorder::default());
    let leader = sim.elect();
    let term = sim.node(leader).term();
    let mut coord = MirrorStateStore::replicated(sim.any().mirrors(), recorder.clone(), term);
    let mut settings = BTreeMap::new();
    settings.insert("bootstrap.servers".to_owned(), "source:9092".to_owned());
    coord
        .create_mirror(MirrorDefinition::new("dr", settings).unwrap())
        .unwrap();
    let tp = TopicPartition::new("orders", 0);
    for s in [
        PartitionState::Preparing,
        PartitionState::Mirroring,
        PartitionState::Stopping,
    ] {
        coord.transition(&tp, "dr", s, None).unwrap();
    }
    for c in recorder.take() {
        sim.commit_cmd(c).unwrap();
    }

    // The leader at epoch 0 records its first step; before it commits, another node is
    // elected leader of the partition (epoch 1).
    coord.set_step_fence(&tp, Some(0));
    coord
        .record_failover_step(&tp, FailoverStep::FetchersStopped)
        .unwrap();
    coord.clear_step_fence();
    let late = recorder.take();
    assert_eq!(late.len(), 1);
    assert!(
        matches!(
            late[0],
            ClusterCommand::Mirror {
                leader_epoch: Some(0),
                ..
            }
        ),
        "{late:?}"
    );
    sim.commit(MetadataCommand::BumpLeaderEpoch {
        name: "orders".into(),
        partition: 0,
        at_least: 1,
    })
    .unwrap();
    let e = sim.commit_cmd(late[0].clone()).unwrap_err();
    assert!(e.contains("fenced by epoch 1"), "{e}");
    sim.identical();
    let applied = sim.any().mirrors().partition(&tp).cloned().unwrap();
    assert_eq!(
        (applied.state, applied.failover_done),
        (PartitionState::Stopping, None),
        "the deposed leader's step is not applied anywhere"
    );

    // The new leader's step (epoch 1) applies; so does an admin record without an epoch.
    let mut next = MirrorStateStore::replicated(sim.any().mirrors(), recorder.clone(), term);
    next.set_step_fence(&tp, Some(1));
    next.record_failover_step(&tp, FailoverStep::FetchersStopped)
        .unwrap();
    next.clear_step_fence();
    next.set_reason(&tp, Some("operator note".into())).unwrap();
    for c in recorder.take() {
        sim.commit_cmd(c).unwrap();
    }
    sim.identical();
    assert_eq!(
        sim.any().mirrors().partition(&tp).unwrap().failover_done,
        Some(FailoverStep::FetchersStopped)
    );
    // A record without the field (written before fencing existed) still decodes.
    let old = r#"{"Mirror":{"term":1,"record":{"Mirror":{"name":"x","def":null}}}}"#;
    assert!(matches!(
        ClusterCommand::decode(old.as_bytes()).unwrap(),
        ClusterCommand::Mirror {
            leader_epoch: None,
            ..
        }
    ));
}

#[test]
fn a_voter_keeps_its_directory_id_and_a_wiped_follower_survives_the_leaders_commit() {
    let mut sim = Sim::new(&[1, 2, 3], 17, 1000);
    let leader = sim.elect();
    for id in [1, 2, 3] {
        let me = QuorumMember {
            id,
            addr: format!("127.0.0.1:{}", 9000 + id),
            directory_id: format!("dir-{id}"),
        };
        sim.node(leader)
            .propose(&ClusterCommand::QuorumMember(me))
            .unwrap();
    }
    for _ in 0..5 {
        sim.propose(leader).unwrap();
    }
    assert!(sim.run_until(300, |s| s.converged()
        && s.nodes
            .values()
            .flatten()
            .all(|n| n.members().len() == 3 && n.metadata().topics.len() == 5)));
    let n = sim.node(leader);
    assert_eq!(n.replaced_voter(3, "new"), Some("dir-3"));
    assert_eq!(n.replaced_voter(3, "dir-3"), None);
    assert_eq!(n.replaced_voter(9, "new"), None);
    // A record cannot move a voter to another directory id.
    let moved = QuorumMember {
        id: 3,
        addr: "127.0.0.1:9003".into(),
        directory_id: "new".into(),
    };
    sim.node(leader)
        .propose(&ClusterCommand::QuorumMember(moved))
        .unwrap();
    sim.propose(leader).unwrap();
    assert!(sim.run_until(300, |s| s.converged()
        && s.nodes
            .values()
            .flatten()
            .all(|n| n.metadata().topics.len() == 6)));
    assert_eq!(sim.node(leader).members()[&3].directory_id, "dir-3");

    // Wipe a follower's storage: the leader's heartbeats carry a commit index beyond its
    // (bootstrapped) log. raft-rs would panic; it commits nothing from them. The leader
    // ignores its rejections (they are at or below the match index it remembers), so it
    // gets nothing until the leader forgets that progress, as the driver does when the peer
    // states a new directory id (this in-memory network has no directory-id guard).
    let follower = [1, 2, 3].into_iter().find(|i| *i != leader).unwrap();
    sim.crash(follower);
    let dir = sim.dirs[&follower].path().to_path_buf();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    sim.restart(follower);
    for _ in 0..50 {
        sim.tick();
    }
    assert_eq!(sim.leader(), Some(leader));
    assert_eq!(sim.node(follower).metadata().topics.len(), 0);
    sim.node(leader).forget_progress(follower);
    assert!(sim.run_until(300, |s| s.converged()
        && s.nodes
            .values()
            .flatten()
            .all(|n| n.metadata().topics.len() == 6)));
}
