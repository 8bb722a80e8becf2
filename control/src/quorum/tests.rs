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
