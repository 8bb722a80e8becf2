//! The leader's view of a replicated partition (issue 12, step 2): where each follower's log
//! ends, which followers are in sync, the high watermark, and whether an `acks=all` append has
//! reached enough replicas.
//!
//! Pure state, driven by the owning core with explicit `now_ms` and the leader's log end;
//! it neither reads the log nor talks to the controller. An ISR change it finds is returned
//! as a proposal ([`IsrChange`]): the controller makes it durable, and only then does the
//! leader apply it ([`ReplicaSet::set_isr`]), as Kafka's AlterPartition does. Until then the
//! high watermark already counts a follower that has caught up (Kafka's "maximal ISR"), so it
//! never waits on the controller, and a follower leaving the ISR keeps counting until the
//! change is applied, so it never moves on a change that may not happen.
//!
//! Semantics follow Kafka's `Replica` / `Partition`:
//! - a follower is caught up at a fetch when its fetch offset reaches the leader's log end at
//!   that fetch, or the leader's log end at its previous fetch (then it was caught up as of
//!   that previous fetch);
//! - it drops out of the ISR when it has not been caught up for `replica.lag.time.max.ms`
//!   (and is not at the log end);
//! - it joins the ISR once its log end reaches the high watermark and the start of the
//!   leader's current epoch;
//! - the high watermark is the smallest log end among the leader, the ISR and the followers
//!   that are caught up, and never goes back.

use std::collections::{BTreeMap, BTreeSet};

use kmirror_types::{NodeId, Offset};

/// "Never caught up": far enough in the past for any lag limit, without overflow.
const NEVER: i64 = i64::MIN / 2;

/// One follower as the leader last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Follower {
    /// The offset the follower asked for last: its log end.
    log_end: Offset,
    last_fetch_ms: i64,
    /// The leader's log end when that fetch arrived.
    last_fetch_leader_end: Offset,
    last_caught_up_ms: i64,
}

/// An ISR change the leader wants the controller to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsrChange {
    Expand(BTreeSet<NodeId>),
    Shrink(BTreeSet<NodeId>),
}

/// Whether an `acks=all` append up to `offset` may be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckState {
    /// Not yet replicated to the ISR: keep waiting.
    Waiting,
    /// The high watermark passed it with at least `min.insync.replicas` in sync.
    Done,
    /// Replicated, but the ISR shrank below `min.insync.replicas` meanwhile
    /// (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    NotEnoughReplicasAfterAppend,
    /// This node stopped leading the partition before the append was replicated
    /// (NOT_LEADER_OR_FOLLOWER, as Kafka completes a pending produce on a leader change).
    NotLeader,
}

/// How this node holds a partition (issue 12). `Alone` is one node or a single replica: the
/// high watermark is the log end at once, exactly the behaviour before replication.
#[derive(Debug)]
pub enum Role {
    Alone,
    Leader(LeaderState),
    Follower(FollowerState),
}

/// A leader's replica state plus what waits on it.
#[derive(Debug)]
pub struct LeaderState {
    pub set: ReplicaSet,
    /// The leader epoch this node took the lead at.
    pub epoch: kmirror_types::LeaderEpoch,
    /// The partition epoch of the assignment the ISR was taken from (AlterPartition's base).
    pub partition_epoch: i32,
    /// An ISR change sent to the controller and not answered yet: one at a time, as Kafka's
    /// pending ISR state, so two proposals never race on the same partition epoch.
    pub pending_isr: Option<IsrChange>,
    waiters: Vec<AckWaiter>,
}

/// An `acks=all` produce waiting for the high watermark to pass `required`.
#[derive(Debug)]
pub struct AckWaiter {
    required: Offset,
    min_insync: usize,
    tx: flume::Sender<AckState>,
}

impl LeaderState {
    pub fn new(
        set: ReplicaSet,
        epoch: kmirror_types::LeaderEpoch,
        partition_epoch: i32,
    ) -> LeaderState {
        LeaderState {
            set,
            epoch,
            partition_epoch,
            pending_isr: None,
            waiters: Vec::new(),
        }
    }

    /// Registers an `acks=all` wait; answered at once when it is already decided.
    pub fn wait_ack(&mut self, required: Offset, min_insync: usize) -> flume::Receiver<AckState> {
        let (tx, rx) = flume::bounded(1);
        match self.set.ack_state(required, min_insync) {
            AckState::Waiting => {
                // Waiters whose produce timed out are dropped here, so the list stays short.
                self.waiters.retain(|w| !w.tx.is_disconnected());
                self.waiters.push(AckWaiter {
                    required,
                    min_insync,
                    tx,
                });
            }
            done => {
                let _ = tx.try_send(done);
            }
        }
        rx
    }

    /// Answers every waiter the current state decides.
    pub fn complete_waiters(&mut self) {
        let set = &self.set;
        self.waiters
            .retain(|w| match set.ack_state(w.required, w.min_insync) {
                AckState::Waiting => !w.tx.is_disconnected(),
                done => {
                    let _ = w.tx.try_send(done);
                    false
                }
            });
    }

    /// The pending waiters, for the state of the next leader epoch on this same node.
    pub fn take_waiters(&mut self) -> Vec<AckWaiter> {
        std::mem::take(&mut self.waiters)
    }

    /// Takes over waiters of this node's previous leader epoch; decided ones are answered.
    pub fn adopt_waiters(&mut self, waiters: Vec<AckWaiter>) {
        self.waiters.extend(waiters);
        self.complete_waiters();
    }

    /// Answers every waiter with `state` (leadership lost).
    pub fn fail_waiters(&mut self, state: AckState) {
        for w in self.waiters.drain(..) {
            let _ = w.tx.try_send(state);
        }
    }

    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }
}

/// A follower's state: whom it fetches from, and whether it has truncated its log for the
/// current leader epoch yet (KIP-101/KIP-279: OffsetsForLeaderEpoch first, then fetch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerState {
    pub leader: NodeId,
    /// The leader epoch this node follows at.
    pub epoch: kmirror_types::LeaderEpoch,
    pub truncated: bool,
}

/// The leader's replica state for one partition.
#[derive(Debug, Clone)]
pub struct ReplicaSet {
    leader: NodeId,
    followers: BTreeMap<NodeId, Follower>,
    /// The ISR the controller has made durable (includes the leader).
    isr: BTreeSet<NodeId>,
    high_watermark: Offset,
    /// The leader's log end when its current epoch began: a follower below it may still hold
    /// a divergent tail, so it cannot join the ISR yet.
    epoch_start: Offset,
    lag_max_ms: i64,
    /// The topic's `min.insync.replicas`: while the ISR is smaller, the high watermark stays
    /// put (Kafka 4.1 with eligible leader replicas, KIP-966, on by default for new clusters),
    /// so an `acks=1` record is not visible to consumers until enough replicas hold it.
    min_insync: usize,
}

impl ReplicaSet {
    /// A leader taking over at `epoch_start` (its log end then) with the controller's `isr`.
    /// As in Kafka, an ISR follower starts as caught up `now_ms` (so it is not dropped before
    /// it had a chance to fetch) and with its log end unknown, which holds the high watermark
    /// until it fetches; a follower outside the ISR starts as never caught up.
    pub fn new(
        leader: NodeId,
        replicas: &[NodeId],
        isr: BTreeSet<NodeId>,
        high_watermark: Offset,
        epoch_start: Offset,
        lag_max_ms: i64,
        now_ms: i64,
    ) -> ReplicaSet {
        let followers = replicas
            .iter()
            .filter(|r| **r != leader)
            .map(|r| {
                (
                    *r,
                    Follower {
                        log_end: Offset(-1),
                        last_fetch_ms: now_ms,
                        last_fetch_leader_end: epoch_start,
                        last_caught_up_ms: if isr.contains(r) { now_ms } else { NEVER },
                    },
                )
            })
            .collect();
        ReplicaSet {
            leader,
            followers,
            isr,
            high_watermark,
            epoch_start,
            lag_max_ms,
            min_insync: 1,
        }
    }

    /// Applies the topic's `min.insync.replicas` (it can change with IncrementalAlterConfigs);
    /// the high watermark may move when it drops.
    pub fn set_min_insync(&mut self, min_insync: usize, leader_end: Offset, now_ms: i64) {
        self.min_insync = min_insync;
        self.advance(leader_end, now_ms);
    }

    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    pub fn isr(&self) -> &BTreeSet<NodeId> {
        &self.isr
    }

    /// A follower's log end as last reported (-1 before its first fetch).
    pub fn follower_log_end(&self, node: NodeId) -> Option<Offset> {
        self.followers.get(&node).map(|f| f.log_end)
    }

    /// The controller changed the replica set at the same leader epoch (a reassignment adds
    /// replicas; Kafka bumps only the partition epoch then): a new follower starts with its
    /// log end unknown and out of sync, as at a leader start; a dropped one is forgotten.
    pub fn set_replicas(&mut self, replicas: &[NodeId], now_ms: i64) {
        self.followers.retain(|id, _| replicas.contains(id));
        for r in replicas.iter().filter(|r| **r != self.leader) {
            self.followers.entry(*r).or_insert(Follower {
                log_end: Offset(-1),
                last_fetch_ms: now_ms,
                last_fetch_leader_end: self.epoch_start,
                last_caught_up_ms: NEVER,
            });
        }
    }

    /// Applies the ISR the controller committed; the high watermark may move. A follower the
    /// controller took out (lagging, or fenced: Kafka's HW skips replicas that are not ISR
    /// eligible) no longer holds the high watermark as "caught up" until it fetches the log
    /// end again; otherwise a dead follower would hold it for `replica.lag.time.max.ms`.
    pub fn set_isr(&mut self, isr: BTreeSet<NodeId>, leader_end: Offset, now_ms: i64) {
        for (id, f) in self.followers.iter_mut() {
            if self.isr.contains(id) && !isr.contains(id) {
                f.last_caught_up_ms = NEVER;
            }
        }
        self.isr = isr;
        self.advance(leader_end, now_ms);
    }

    /// Records a follower's fetch at `fetch_offset`. Returns an expansion to propose when the
    /// follower has earned its place in the ISR. The high watermark may move (read it after).
    /// `None` also for a node that is not a follower of this partition (the caller answers
    /// NOT_LEADER_OR_FOLLOWER or UNKNOWN_LEADER_EPOCH as the request deserves).
    pub fn on_follower_fetch(
        &mut self,
        node: NodeId,
        fetch_offset: Offset,
        leader_end: Offset,
        now_ms: i64,
    ) -> Option<IsrChange> {
        let f = self.followers.get_mut(&node)?;
        if fetch_offset >= leader_end {
            f.last_caught_up_ms = f.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= f.last_fetch_leader_end {
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.log_end = fetch_offset;
        f.last_fetch_ms = now_ms;
        f.last_fetch_leader_end = leader_end;
        self.advance(leader_end, now_ms);
        let f = &self.followers[&node];
        let joins = !self.isr.contains(&node)
            && f.log_end >= self.high_watermark
            && f.log_end >= self.epoch_start;
        joins.then(|| {
            let mut isr = self.isr.clone();
            isr.insert(node);
            IsrChange::Expand(isr)
        })
    }

    fn caught_up(&self, f: &Follower, leader_end: Offset, now_ms: i64) -> bool {
        f.log_end == leader_end || now_ms - f.last_caught_up_ms <= self.lag_max_ms
    }

    /// The ISR members that fell behind for longer than `replica.lag.time.max.ms`: a shrink
    /// to propose (checked periodically, as Kafka's `isr-expiration` task does).
    pub fn shrink(&self, leader_end: Offset, now_ms: i64) -> Option<IsrChange> {
        let lagging: Vec<NodeId> = self
            .followers
            .iter()
            .filter(|(id, f)| self.isr.contains(id) && !self.caught_up(f, leader_end, now_ms))
            .map(|(id, _)| *id)
            .collect();
        if lagging.is_empty() {
            return None;
        }
        let mut isr = self.isr.clone();
        for id in lagging {
            isr.remove(&id);
        }
        Some(IsrChange::Shrink(isr))
    }

    /// Moves the high watermark to the smallest log end among the leader, the ISR and the
    /// caught-up followers; never backwards, and not at all while the ISR is smaller than
    /// `min.insync.replicas` (KIP-966). Returns whether it moved.
    pub fn advance(&mut self, leader_end: Offset, now_ms: i64) -> bool {
        if self.isr.len() < self.min_insync {
            return false;
        }
        let mut hw = leader_end;
        for (id, f) in &self.followers {
            if self.isr.contains(id) || self.caught_up(f, leader_end, now_ms) {
                hw = hw.min(f.log_end);
            }
        }
        if hw > self.high_watermark {
            self.high_watermark = hw;
            true
        } else {
            false
        }
    }

    /// Before an `acks=all` append: refused with NOT_ENOUGH_REPLICAS when the ISR is smaller
    /// than `min.insync.replicas`.
    pub fn enough_replicas_to_append(&self, min_insync: usize) -> bool {
        self.isr.len() >= min_insync
    }

    /// Whether an `acks=all` append ending before `required` (its last offset + 1) may be
    /// answered.
    pub fn ack_state(&self, required: Offset, min_insync: usize) -> AckState {
        if self.high_watermark < required {
            AckState::Waiting
        } else if self.isr.len() >= min_insync {
            AckState::Done
        } else {
            AckState::NotEnoughReplicasAfterAppend
        }
    }

    pub fn leader(&self) -> NodeId {
        self.leader
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: i64 = 30_000;

    fn set(ids: &[i32]) -> BTreeSet<NodeId> {
        ids.iter().map(|i| NodeId(*i)).collect()
    }

    /// Leader 1, followers 2 and 3, all in the ISR, log empty.
    fn three(now: i64) -> ReplicaSet {
        ReplicaSet::new(
            NodeId(1),
            &[NodeId(1), NodeId(2), NodeId(3)],
            set(&[1, 2, 3]),
            Offset(0),
            Offset(0),
            LAG,
            now,
        )
    }

    #[test]
    fn the_high_watermark_is_the_smallest_isr_log_end_and_never_goes_back() {
        let mut r = three(0);
        let end = Offset(10);
        assert_eq!(r.on_follower_fetch(NodeId(2), Offset(10), end, 1), None);
        assert_eq!(r.high_watermark(), Offset(0), "follower 3 has not fetched");
        r.on_follower_fetch(NodeId(3), Offset(4), end, 2);
        assert_eq!(r.high_watermark(), Offset(4));
        r.on_follower_fetch(NodeId(3), Offset(10), end, 3);
        assert_eq!(r.high_watermark(), Offset(10));
        // A follower that truncated and asks again from lower does not pull it back.
        r.on_follower_fetch(NodeId(3), Offset(7), end, 4);
        assert_eq!(r.high_watermark(), Offset(10));
    }

    #[test]
    fn acks_all_waits_for_the_isr_and_checks_min_insync() {
        let mut r = three(0);
        let end = Offset(5);
        assert!(r.enough_replicas_to_append(2));
        assert_eq!(r.ack_state(Offset(5), 2), AckState::Waiting);
        r.on_follower_fetch(NodeId(2), end, end, 1);
        r.on_follower_fetch(NodeId(3), end, end, 1);
        assert_eq!(r.ack_state(Offset(5), 2), AckState::Done);
        // The ISR shrinks to the leader alone: new appends are refused, and one already
        // replicated is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND.
        r.set_isr(set(&[1]), end, 2);
        assert!(!r.enough_replicas_to_append(2));
        assert_eq!(
            r.ack_state(Offset(5), 2),
            AckState::NotEnoughReplicasAfterAppend
        );
        assert_eq!(r.ack_state(Offset(5), 1), AckState::Done);
    }

    #[test]
    fn the_high_watermark_stays_while_the_isr_is_below_min_insync() {
        let mut r = three(0);
        r.set_min_insync(3, Offset(0), 0);
        let end = Offset(2);
        r.on_follower_fetch(NodeId(2), end, end, 1);
        r.on_follower_fetch(NodeId(3), end, end, 1);
        assert_eq!(r.high_watermark(), end, "full ISR");
        // Follower 3 leaves the ISR; an acks=1 append on the leader stays invisible.
        r.set_isr(set(&[1, 2]), end, 2);
        let end = Offset(3);
        r.on_follower_fetch(NodeId(2), end, end, 3);
        assert_eq!(
            r.high_watermark(),
            Offset(2),
            "ISR 2 < min.insync.replicas 3"
        );
        // Lowering min.insync.replicas releases it; so would 3 rejoining.
        r.set_min_insync(2, end, 4);
        assert_eq!(r.high_watermark(), end);
    }

    #[test]
    fn a_follower_behind_for_longer_than_the_lag_limit_is_shrunk_out() {
        let mut r = three(0);
        // Follower 2 keeps up; follower 3 fetches once at 0 and then stops.
        r.on_follower_fetch(NodeId(3), Offset(0), Offset(0), 0);
        let mut end = Offset(0);
        for t in 1..=40 {
            end = Offset(t);
            r.on_follower_fetch(NodeId(2), end, end, t * 1000);
        }
        // 3's last caught up was at 0 (it was at the log end then): 40 s ago.
        assert_eq!(r.shrink(end, 40_000), Some(IsrChange::Shrink(set(&[1, 2]))));
        assert_eq!(r.shrink(end, 29_000), None, "within the lag limit");
        // Until the controller commits the shrink, 3 still holds the high watermark.
        assert_eq!(r.high_watermark(), Offset(0));
        r.set_isr(set(&[1, 2]), end, 40_000);
        assert_eq!(r.high_watermark(), end);
    }

    #[test]
    fn a_follower_that_reaches_the_log_end_seen_at_its_previous_fetch_counts_as_caught_up_then() {
        let mut r = three(0);
        // Leader keeps appending; follower 3 always fetches what was the end at its last fetch.
        r.on_follower_fetch(NodeId(3), Offset(0), Offset(10), 1_000);
        r.on_follower_fetch(NodeId(3), Offset(10), Offset(20), 20_000);
        r.on_follower_fetch(NodeId(3), Offset(20), Offset(30), 45_000);
        r.on_follower_fetch(NodeId(2), Offset(30), Offset(30), 45_000);
        // Caught up as of its fetch at 20 s: not behind for 30 s at 45 s.
        assert_eq!(r.shrink(Offset(30), 45_000), None);
        // Never reaching the previous end: behind since the fetch at 1 s.
        let mut slow = three(0);
        slow.on_follower_fetch(NodeId(3), Offset(0), Offset(10), 1_000);
        slow.on_follower_fetch(NodeId(3), Offset(5), Offset(20), 20_000);
        slow.on_follower_fetch(NodeId(3), Offset(15), Offset(30), 45_000);
        assert!(
            matches!(slow.shrink(Offset(30), 45_000), Some(IsrChange::Shrink(isr)) if !isr.contains(&NodeId(3)))
        );
    }

    #[test]
    fn a_follower_rejoins_once_at_the_high_watermark_and_past_the_epoch_start() {
        let t = 1_000_000;
        // Leader 1 took over at offset 50 with 3 in the ISR (lagging) and 2 out of it.
        let mut r = ReplicaSet::new(
            NodeId(1),
            &[NodeId(1), NodeId(2), NodeId(3)],
            set(&[1, 3]),
            Offset(40),
            Offset(50),
            LAG,
            t,
        );
        let end = Offset(60);
        r.on_follower_fetch(NodeId(3), Offset(42), end, t + 1);
        assert_eq!(r.high_watermark(), Offset(42), "ISR member 3 holds it");
        // 2 is at the high watermark but below the epoch start: it may still hold a tail the
        // new leader does not have, so it cannot join yet; and, out of the ISR and not caught
        // up, it does not hold the high watermark.
        assert_eq!(r.on_follower_fetch(NodeId(2), Offset(45), end, t + 2), None);
        assert_eq!(r.high_watermark(), Offset(42));
        let joined = r.on_follower_fetch(NodeId(2), Offset(55), end, t + 3);
        assert_eq!(joined, Some(IsrChange::Expand(set(&[1, 2, 3]))));
        r.set_isr(set(&[1, 2, 3]), end, t + 3);
        r.on_follower_fetch(NodeId(3), end, end, t + 4);
        assert_eq!(r.high_watermark(), Offset(55), "2 now holds it");
    }

    #[test]
    fn after_a_takeover_the_high_watermark_waits_for_every_isr_follower_to_fetch() {
        let t = 1_000_000;
        let mut r = ReplicaSet::new(
            NodeId(1),
            &[NodeId(1), NodeId(2), NodeId(3)],
            set(&[1, 2, 3]),
            Offset(10),
            Offset(20),
            LAG,
            t,
        );
        assert!(!r.advance(Offset(25), t + 1));
        r.on_follower_fetch(NodeId(2), Offset(25), Offset(25), t + 2);
        assert_eq!(r.high_watermark(), Offset(10));
        r.on_follower_fetch(NodeId(3), Offset(25), Offset(25), t + 3);
        assert_eq!(r.high_watermark(), Offset(25));
    }

    #[test]
    fn a_follower_the_controller_takes_out_of_the_isr_stops_holding_the_high_watermark() {
        let mut r = three(0);
        r.on_follower_fetch(NodeId(2), Offset(10), Offset(10), 1);
        r.on_follower_fetch(NodeId(3), Offset(10), Offset(10), 1);
        // 3 dies at 10; the leader appends up to 20 and 2 follows.
        r.on_follower_fetch(NodeId(2), Offset(20), Offset(20), 2);
        assert_eq!(r.high_watermark(), Offset(10));
        // Fenced, 3 leaves the ISR well within the lag limit: the HW moves at once.
        r.set_isr(set(&[1, 2]), Offset(20), 3);
        assert_eq!(r.high_watermark(), Offset(20));
        // Back and caught up, it counts again (and may rejoin).
        assert_eq!(
            r.on_follower_fetch(NodeId(3), Offset(20), Offset(20), 4),
            Some(IsrChange::Expand(set(&[1, 2, 3])))
        );
    }

    #[test]
    fn fetches_from_a_node_that_is_not_a_follower_change_nothing() {
        let mut r = three(0);
        assert_eq!(
            r.on_follower_fetch(NodeId(9), Offset(100), Offset(100), 1),
            None
        );
        assert_eq!(r.follower_log_end(NodeId(9)), None);
        assert_eq!(r.high_watermark(), Offset(0));
    }
}
