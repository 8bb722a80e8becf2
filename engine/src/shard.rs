//! A core's partitions. Only the owning core's thread ever touches a [`Shard`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use kmirror_log::{AppendInfo, CleanJob, Cleaned, ControlKind, Log, LogConfig};
use kmirror_types::{LeaderEpoch, NodeId, Offset, ProducerId, TopicPartition};

use crate::assign::Routing;
use crate::replica::{AckState, FollowerState, IsrChange, LeaderState, ReplicaSet, Role};
use crate::EngineError;

/// What the engine needs to open a partition; provided by the cluster metadata.
#[derive(Debug, Clone)]
pub struct PartitionSpec {
    pub dir: PathBuf,
    pub config: LogConfig,
    pub leader_epoch: LeaderEpoch,
    pub topic_id: u128,
    /// Set while the topic is mirrored: client writes are refused.
    pub mirror: Option<String>,
    /// Set while a switchover fences client writes: refused with a retriable error.
    pub write_fence: Option<String>,
    /// The partition has other replicas (issue 12): it opens without a leader (writes and
    /// consumer reads refused, NOT_LEADER_OR_FOLLOWER) until its role is applied, so nothing
    /// is acknowledged as if it had a single replica.
    pub replicated: bool,
}

/// Which partitions exist. Implemented over the cluster metadata by the broker.
pub trait Catalog: Send + Sync + 'static {
    fn partition_spec(&self, tp: &TopicPartition) -> Option<PartitionSpec>;
    /// Every partition that exists (opened by its owner at startup, which runs recovery).
    fn all_partitions(&self) -> Vec<TopicPartition>;
}

/// One partition as owned by a core.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: u128,
    pub log: Log,
    /// The epoch stamped on batches this broker appends as leader.
    pub leader_epoch: LeaderEpoch,
    /// Mirror name while mirrored (read-only for clients).
    pub mirror: Option<String>,
    /// The switchover fencing client writes (retriable for producers), if any.
    pub write_fence: Option<String>,
    waiters: Vec<flume::Sender<()>>,
    /// Alone, leader of replicas, or follower (issue 12); `Alone` until the cluster says
    /// otherwise.
    role: Role,
    /// The high watermark checkpointed before this open: what a replica takes over with
    /// (as `Alone` the recovered log end counts instead, see [`Shard`]'s open).
    recovered_hw: Offset,
    /// The controller made this partition a single replica (`become_alone`): its whole log
    /// is committed, so a leader of more replicas later (a reassignment adding one) keeps the
    /// high watermark at the log end instead of falling back to `recovered_hw`.
    alone_committed: bool,
}

/// Why a replica's Fetch was not recorded: Kafka's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaFetchError {
    /// This node does not lead the partition (NOT_LEADER_OR_FOLLOWER).
    NotLeader,
    /// The fetching node is not one of the replicas (UNKNOWN_LEADER_EPOCH when the request
    /// named a leader epoch, else NOT_LEADER_OR_FOLLOWER, as Kafka's Partition does).
    NotReplica,
}

impl Partition {
    /// Appends a client's produce batches. On success the high watermark moves to the log end
    /// (single replica) and long-polling fetchers are woken.
    pub fn append_leader(
        &mut self,
        batches: Bytes,
        now_ms: i64,
    ) -> Result<AppendInfo, EngineError> {
        if let Some(m) = &self.mirror {
            return Err(EngineError::ReadOnly {
                tp: self.tp.clone(),
                mirror: m.clone(),
            });
        }
        if let Some(by) = &self.write_fence {
            return Err(EngineError::WriteFenced {
                tp: self.tp.clone(),
                by: by.clone(),
            });
        }
        self.check_leader()?;
        let info = self.log.append_leader(batches, self.leader_epoch, now_ms)?;
        self.after_append();
        Ok(info)
    }

    /// Appends batches the partition's own coordinator built (kmirror's group or transaction
    /// coordinator on `__consumer_offsets` / `__transaction_state`) as leader in `epoch`: a
    /// coordinator loaded in an older epoch is refused (NOT_LEADER_OR_FOLLOWER), so a deposed
    /// coordinator never writes behind the new one.
    pub fn append_coordinator(
        &mut self,
        batches: &[u8],
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, EngineError> {
        self.check_leader()?;
        if self.leader_epoch != epoch {
            return Err(EngineError::NotLeader(self.tp.clone()));
        }
        let info = self.log.append_coordinator(batches, epoch, now_ms)?;
        self.after_append();
        Ok(info)
    }

    /// Appends batches copied verbatim from a mirror source at their own offsets.
    pub fn append_mirror(&mut self, batches: Bytes) -> Result<AppendInfo, EngineError> {
        let info = self.log.append_mirror(batches)?;
        self.after_append();
        Ok(info)
    }

    /// Appends a control record at the log end. Transaction markers (COMMIT/ABORT) are client
    /// writes and are refused while the partition is mirrored: a marker would take an offset
    /// that belongs to the source. The mirror's own PID-reset record is written by failover.
    pub fn append_control(
        &mut self,
        kind: ControlKind,
        producer_id: ProducerId,
        producer_epoch: i16,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, EngineError> {
        if let (Some(m), ControlKind::Commit | ControlKind::Abort) = (&self.mirror, kind) {
            return Err(EngineError::ReadOnly {
                tp: self.tp.clone(),
                mirror: m.clone(),
            });
        }
        self.check_leader()?;
        let info = self.log.append_control(
            kind,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            self.leader_epoch,
            now_ms,
        )?;
        self.after_append();
        Ok(info)
    }

    fn after_append(&mut self) {
        let leo = self.log.log_end_offset();
        match &mut self.role {
            Role::Alone => self.log.set_high_watermark(leo),
            Role::Leader(l) => {
                l.set.advance(leo, crate::now_ms());
                self.log.set_high_watermark(l.set.high_watermark());
                l.complete_waiters();
            }
            // A follower's high watermark moves with the leader's (append_follower).
            Role::Follower(_) => {}
        }
        self.notify_waiters();
    }

    /// NOT_LEADER_OR_FOLLOWER for writes and consumer reads on a follower.
    pub fn check_leader(&self) -> Result<(), EngineError> {
        match self.role {
            Role::Follower(_) => Err(EngineError::NotLeader(self.tp.clone())),
            _ => Ok(()),
        }
    }

    pub fn role(&self) -> &Role {
        &self.role
    }

    /// The leader of this partition, as far as this node knows: itself unless following.
    pub fn is_leader(&self) -> bool {
        !matches!(self.role, Role::Follower(_))
    }

    /// Back to a single replica (one node, or RF 1): the high watermark is the log end.
    pub fn become_alone(&mut self, epoch: LeaderEpoch) {
        if let Role::Leader(l) = &mut self.role {
            l.fail_waiters(AckState::Done);
        }
        self.role = Role::Alone;
        self.alone_committed = true;
        self.leader_epoch = self.leader_epoch.max(epoch);
        let leo = self.log.log_end_offset();
        self.log.set_high_watermark(leo);
        self.notify_waiters();
    }

    /// Takes (or keeps) the lead at `epoch` with the controller's replicas and ISR. At a new
    /// epoch the replica state starts over from the log end (the epoch start, Kafka's
    /// makeLeader); at the same epoch only a newer committed ISR is applied.
    #[allow(clippy::too_many_arguments)]
    pub fn become_leader(
        &mut self,
        node: NodeId,
        epoch: LeaderEpoch,
        replicas: &[NodeId],
        isr: std::collections::BTreeSet<NodeId>,
        partition_epoch: i32,
        lag_max_ms: i64,
        min_insync: usize,
        now_ms: i64,
    ) {
        let leo = self.log.log_end_offset();
        if let Role::Leader(l) = &mut self.role {
            if epoch == l.epoch {
                let hw = l.set.high_watermark();
                // Replicas added by a reassignment come at the same leader epoch, possibly
                // after a produce already synced the newer ISR (so not only when `newer`).
                l.set.set_replicas(replicas, now_ms);
                l.set.set_min_insync(min_insync, leo, now_ms);
                let newer = partition_epoch > l.partition_epoch;
                if newer {
                    l.partition_epoch = partition_epoch;
                    l.pending_isr = None;
                    l.set.set_isr(isr, leo, now_ms);
                }
                if newer || l.set.high_watermark() != hw {
                    self.log.set_high_watermark(l.set.high_watermark());
                    l.complete_waiters();
                    self.notify_waiters();
                }
                return;
            }
        }
        // Still the leader at a new epoch (a reassignment dropped a replica, Kafka bumps the
        // epoch to fence it): pending acks=all produces stay, as in Kafka's purgatory, and
        // are answered by the new replica state's high watermark.
        let carried = match &mut self.role {
            Role::Leader(l) => l.take_waiters(),
            _ => Vec::new(),
        };
        let hw = match &self.role {
            Role::Alone if !self.alone_committed => self.recovered_hw,
            _ => self.log.high_watermark(),
        }
        .min(leo);
        self.leader_epoch = self.leader_epoch.max(epoch);
        let mut set = ReplicaSet::new(node, replicas, isr, hw, leo, lag_max_ms, now_ms);
        set.set_min_insync(min_insync, leo, now_ms);
        self.log.set_high_watermark(set.high_watermark());
        let mut state = LeaderState::new(set, epoch, partition_epoch);
        state.adopt_waiters(carried);
        self.role = Role::Leader(state);
        self.notify_waiters();
    }

    /// Follows `leader` at `epoch`. At a new epoch (or leader) the log must be truncated
    /// before fetching ([`Partition::truncate_as_follower`]); pending `acks=all` produces are
    /// answered NOT_LEADER_OR_FOLLOWER.
    pub fn become_follower(&mut self, leader: NodeId, epoch: LeaderEpoch) {
        if let Role::Follower(f) = &self.role {
            if f.leader == leader && epoch == f.epoch {
                return;
            }
        }
        if let Role::Leader(l) = &mut self.role {
            l.fail_waiters(AckState::NotLeader);
        }
        if matches!(self.role, Role::Alone) {
            self.log.set_high_watermark(self.recovered_hw);
        }
        self.leader_epoch = self.leader_epoch.max(epoch);
        self.role = Role::Follower(FollowerState {
            leader,
            epoch,
            truncated: false,
        });
        self.notify_waiters();
    }

    /// Cuts the follower's log at `offset` (from the OffsetsForLeaderEpoch answer). With
    /// `complete` the fetcher goes on fetching; otherwise it asks again with the epoch the
    /// log now ends in (KIP-279's intermediate step).
    pub fn truncate_as_follower(
        &mut self,
        offset: Offset,
        complete: bool,
    ) -> Result<(), EngineError> {
        self.log.truncate_to(offset)?;
        if let Role::Follower(f) = &mut self.role {
            f.truncated = complete;
        }
        Ok(())
    }

    /// The leader no longer has the follower's fetch position: truncate again after an
    /// OffsetsForLeaderEpoch round (the follower is ahead of the leader's log end).
    pub fn retruncate_as_follower(&mut self) {
        if let Role::Follower(f) = &mut self.role {
            f.truncated = false;
        }
    }

    /// The leader's log starts after the follower's end (retention, DeleteRecords): the
    /// follower empties its log and starts at the leader's log start, as Kafka's does.
    pub fn restart_follower_at(&mut self, log_start: Offset) -> Result<(), EngineError> {
        self.log.truncate_fully_and_start_at(log_start)?;
        Ok(())
    }

    /// Appends the leader's batches as they arrived (same offsets, never re-encoded), moves
    /// the follower's high watermark to min(leader's, own log end) and its log start up to
    /// the leader's (DeleteRecords, retention), never past its own high watermark (Kafka's
    /// follower does the same).
    pub fn append_follower(
        &mut self,
        batches: Bytes,
        leader_hw: Offset,
        leader_log_start: Offset,
    ) -> Result<Option<AppendInfo>, EngineError> {
        let info = if batches.is_empty() {
            None
        } else {
            Some(self.log.append_mirror(batches)?)
        };
        let hw = leader_hw.min(self.log.log_end_offset());
        if hw > self.log.high_watermark() {
            self.log.set_high_watermark(hw);
        }
        let start = leader_log_start.min(self.log.high_watermark());
        if start > self.log.log_start_offset() {
            self.log.delete_records_before(start)?;
        }
        if info.is_some() {
            self.notify_waiters();
        }
        Ok(info)
    }

    /// Records a replica's Fetch at `fetch_offset` on the leader. Returns an ISR expansion to
    /// propose (none while another change is pending).
    pub fn on_replica_fetch(
        &mut self,
        node: NodeId,
        fetch_offset: Offset,
        now_ms: i64,
    ) -> Result<Option<IsrChange>, ReplicaFetchError> {
        let Role::Leader(l) = &mut self.role else {
            return Err(ReplicaFetchError::NotLeader);
        };
        if l.set.follower_log_end(node).is_none() {
            return Err(ReplicaFetchError::NotReplica);
        }
        let leo = self.log.log_end_offset();
        let change = l.set.on_follower_fetch(node, fetch_offset, leo, now_ms);
        if l.set.high_watermark() > self.log.high_watermark() {
            self.log.set_high_watermark(l.set.high_watermark());
            l.complete_waiters();
            // Consumers long-polling at the old high watermark can read now.
            for w in self.waiters.drain(..) {
                let _ = w.try_send(());
            }
        }
        Ok(match l.pending_isr {
            Some(_) => None,
            None => {
                l.pending_isr = change.clone();
                change
            }
        })
    }

    /// The periodic ISR check (Kafka's isr-expiration): a shrink to propose, if any and
    /// if no other change is pending.
    pub fn isr_expiration(&mut self, now_ms: i64) -> Option<(IsrChange, i32)> {
        let Role::Leader(l) = &mut self.role else {
            return None;
        };
        if l.pending_isr.is_some() {
            return None;
        }
        let change = l.set.shrink(self.log.log_end_offset(), now_ms)?;
        l.pending_isr = Some(change.clone());
        Some((change, l.partition_epoch))
    }

    /// The partition epoch the pending ISR change is based on.
    pub fn partition_epoch(&self) -> Option<i32> {
        match &self.role {
            Role::Leader(l) => Some(l.partition_epoch),
            _ => None,
        }
    }

    /// The controller committed an ISR change (`partition_epoch` is the new one): applied
    /// now, as Kafka applies AlterPartition's answer.
    pub fn isr_committed(
        &mut self,
        isr: std::collections::BTreeSet<NodeId>,
        partition_epoch: i32,
        now_ms: i64,
    ) {
        let leo = self.log.log_end_offset();
        if let Role::Leader(l) = &mut self.role {
            if partition_epoch < l.partition_epoch {
                return;
            }
            l.partition_epoch = partition_epoch;
            l.pending_isr = None;
            l.set.set_isr(isr, leo, now_ms);
            self.log.set_high_watermark(l.set.high_watermark());
            l.complete_waiters();
        }
    }

    /// The ISR this node's published metadata holds for the epoch it leads at (Kafka's leader
    /// learns ISR changes from the metadata log it replays). Applied at once when newer than
    /// the partition's, so a request that already sees the committed ISR (a fence-driven
    /// shrink, an expansion answered to another task) is decided by it, not by the ISR the
    /// replication task has not re-applied yet.
    pub fn sync_committed_isr(
        &mut self,
        epoch: LeaderEpoch,
        isr: std::collections::BTreeSet<NodeId>,
        partition_epoch: i32,
        now_ms: i64,
    ) {
        let newer = match &self.role {
            Role::Leader(l) => l.epoch == epoch && partition_epoch > l.partition_epoch,
            _ => false,
        };
        if newer {
            self.isr_committed(isr, partition_epoch, now_ms);
            self.notify_waiters();
        }
    }

    /// The controller refused or lost the pending change: it may be proposed again.
    pub fn isr_change_failed(&mut self) {
        if let Role::Leader(l) = &mut self.role {
            l.pending_isr = None;
        }
    }

    /// Whether an `acks=all` append may go ahead: ISR at least `min.insync.replicas`
    /// (NOT_ENOUGH_REPLICAS otherwise). Alone, the ISR is this node.
    pub fn enough_replicas(&self, min_insync: usize) -> bool {
        match &self.role {
            Role::Leader(l) => l.set.enough_replicas_to_append(min_insync),
            _ => min_insync <= 1,
        }
    }

    /// Waits for an `acks=all` append ending before `required`: None when it is already
    /// acknowledged (alone, or the high watermark is past it), else the state once decided.
    pub fn wait_ack(
        &mut self,
        required: Offset,
        min_insync: usize,
    ) -> Result<(), flume::Receiver<AckState>> {
        match &mut self.role {
            Role::Leader(l) => {
                let rx = l.wait_ack(required, min_insync);
                match rx.try_recv() {
                    Ok(AckState::Done) => Ok(()),
                    Ok(other) => {
                        let (tx, rx) = flume::bounded(1);
                        let _ = tx.try_send(other);
                        Err(rx)
                    }
                    Err(_) => Err(rx),
                }
            }
            _ => Ok(()),
        }
    }

    /// Registers a long-poll waiter, woken (one `()` message) on the next append.
    pub fn watch(&mut self, waiter: flume::Sender<()>) {
        self.waiters.retain(|w| !w.is_disconnected());
        self.waiters.push(waiter);
    }

    pub fn notify_waiters(&mut self) {
        for w in self.waiters.drain(..) {
            let _ = w.try_send(());
        }
    }
}

/// The partitions owned by one core.
pub struct Shard {
    core: usize,
    cores: usize,
    catalog: Arc<dyn Catalog>,
    /// The router's table: a partition is opened only by the core it lets open it.
    routing: Arc<ArcSwap<Routing>>,
    partitions: HashMap<TopicPartition, Partition>,
}

impl Shard {
    pub(crate) fn new(
        core: usize,
        cores: usize,
        catalog: Arc<dyn Catalog>,
        routing: Arc<ArcSwap<Routing>>,
    ) -> Shard {
        Shard {
            core,
            cores,
            catalog,
            routing,
            partitions: HashMap::new(),
        }
    }

    pub fn core(&self) -> usize {
        self.core
    }

    /// The partition, opening (and recovering) its log on first use if the catalog has it.
    pub fn partition(&mut self, tp: &TopicPartition) -> Result<&mut Partition, EngineError> {
        if !self.partitions.contains_key(tp) {
            let spec = self
                .catalog
                .partition_spec(tp)
                .ok_or_else(|| EngineError::UnknownPartition(tp.clone()))?;
            self.open(tp, spec)?;
        }
        Ok(self.partitions.get_mut(tp).expect("just inserted"))
    }

    /// Creates a brand-new partition: any stale directory left by a deleted topic of the same
    /// name is removed first, so a re-created topic never resurrects old records.
    pub fn create_partition(&mut self, tp: &TopicPartition) -> Result<&mut Partition, EngineError> {
        if !self.routing.load().may_open(tp, self.core, self.cores) {
            return Err(EngineError::NotOwner(tp.clone()));
        }
        let spec = self
            .catalog
            .partition_spec(tp)
            .ok_or_else(|| EngineError::UnknownPartition(tp.clone()))?;
        if let Some(p) = self.partitions.remove(tp) {
            let _ = p.log.close();
        }
        if spec.dir.exists() {
            std::fs::remove_dir_all(&spec.dir)?;
        }
        self.open(tp, spec)?;
        Ok(self.partitions.get_mut(tp).expect("just inserted"))
    }

    fn open(&mut self, tp: &TopicPartition, spec: PartitionSpec) -> Result<(), EngineError> {
        // Ownership is checked before touching the files: a job routed here under an older
        // table (or during a move) must not open a second copy of another core's log.
        if !self.routing.load().may_open(tp, self.core, self.cores) {
            return Err(EngineError::NotOwner(tp.clone()));
        }
        // A log left by a deleted topic of the same name (this node was down meanwhile) is
        // removed, never served as the new topic's (0: a catalog without topic ids).
        if spec.topic_id != 0 {
            crate::partition_meta::remove_if_stray(&spec.dir, spec.topic_id)?;
        }
        let mut log = Log::open(&spec.dir, spec.config)?;
        if spec.topic_id != 0 {
            crate::partition_meta::ensure(&spec.dir, spec.topic_id)?;
        }
        let recovered_hw = log.high_watermark();
        // Single replica: as leader with ISR = {self}, everything recovered is committed
        // (Kafka's leader sets HW to its LEO when the ISR is only itself). The checkpointed
        // HW can lag after a crash, which would hide acknowledged records.
        let leo = log.log_end_offset();
        log.set_high_watermark(if spec.replicated { recovered_hw } else { leo });
        tracing::debug!(core = self.core, %tp, "opened partition");
        self.partitions.insert(
            tp.clone(),
            Partition {
                tp: tp.clone(),
                topic_id: spec.topic_id,
                log,
                leader_epoch: spec.leader_epoch,
                mirror: spec.mirror,
                write_fence: spec.write_fence,
                waiters: Vec::new(),
                role: if spec.replicated {
                    Role::Follower(FollowerState {
                        leader: NodeId(-1),
                        epoch: LeaderEpoch(-1),
                        truncated: false,
                    })
                } else {
                    Role::Alone
                },
                recovered_hw,
                alone_committed: false,
            },
        );
        Ok(())
    }

    /// Drops a partition's in-memory state without closing it (no flush, no checkpoint of
    /// state that may be inconsistent after a panic): the next use reopens it from its files
    /// with crash recovery. Long-poll waiters are woken and find it reopened or gone.
    pub(crate) fn discard_partition(&mut self, tp: &TopicPartition) {
        if let Some(mut p) = self.partitions.remove(tp) {
            p.notify_waiters();
            tracing::error!(core = self.core, %tp, "partition state discarded after a panic; reopening on next use");
        }
    }

    /// Closes the partition and, if `delete_files`, removes its directory.
    pub fn remove_partition(
        &mut self,
        tp: &TopicPartition,
        dir: Option<PathBuf>,
    ) -> Result<(), EngineError> {
        if let Some(mut p) = self.partitions.remove(tp) {
            p.notify_waiters();
            p.log.close()?;
        }
        if let Some(dir) = dir {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
        }
        Ok(())
    }

    /// Flushes and closes the open partitions matching `moving` (they change cores); returns
    /// them. Their long-poll waiters are woken and find the partition gone. The close fsyncs
    /// on this core, as deleting a topic does: a rare operator action, not the data path; it
    /// leaves clean checkpoints, so the new owner opens without a recovery scan.
    pub(crate) fn close_partitions_where(
        &mut self,
        moving: impl Fn(&TopicPartition) -> bool,
    ) -> Result<Vec<TopicPartition>, EngineError> {
        let tps: Vec<TopicPartition> = self
            .partitions
            .keys()
            .filter(|tp| moving(tp))
            .cloned()
            .collect();
        // Every matching partition leaves the map even if one close fails: its new owner may
        // open it as soon as the router publishes the new table.
        let mut failed = None;
        for tp in &tps {
            if let Some(mut p) = self.partitions.remove(tp) {
                p.notify_waiters();
                if let Err(e) = p.log.close() {
                    tracing::error!(core = self.core, %tp, error = %e, "closing moving partition");
                    failed.get_or_insert(EngineError::from(e));
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(tps),
        }
    }

    /// Partitions currently open on this core.
    pub fn open_partitions(&mut self) -> impl Iterator<Item = &mut Partition> {
        self.partitions.values_mut()
    }

    /// Opens every partition of the catalog this core owns (crash recovery happens here).
    pub(crate) fn open_owned(&mut self, owns: impl Fn(&TopicPartition) -> bool) {
        for tp in self.catalog.all_partitions() {
            if owns(&tp) {
                if let Err(e) = self.partition(&tp) {
                    tracing::error!(core = self.core, %tp, error = %e, "cannot open partition");
                }
            }
        }
    }

    /// Time and size retention of every partition except mirror partitions: their data is
    /// deleted only when the source deletes it (the fetcher follows the source's log start),
    /// so a destination default can never drop what the source still keeps.
    pub(crate) fn apply_retention(&mut self, now_ms: i64) {
        for p in self.partitions.values_mut().filter(|p| p.mirror.is_none()) {
            if let Err(e) = p.log.apply_retention(now_ms) {
                tracing::warn!(tp = %p.tp, error = %e, "retention failed");
            }
        }
    }

    /// Compacted partitions that may be cleaned now: not mirror partitions while mirroring
    /// (the source's log drives them; after failover `mirror` is cleared and they are).
    pub(crate) fn cleanable_partitions(&self) -> Vec<TopicPartition> {
        self.partitions
            .values()
            .filter(|p| p.mirror.is_none() && p.log.config().compaction.is_some())
            .map(|p| p.tp.clone())
            .collect()
    }

    /// A cleaning pass for `tp` if it is compacted, writable and dirty enough.
    pub(crate) fn cleaning_job(&self, tp: &TopicPartition, now_ms: i64) -> Option<CleanJob> {
        let p = self.partitions.get(tp)?;
        if p.mirror.is_some() {
            return None;
        }
        p.log.cleaning_job(now_ms)
    }

    /// Swaps a finished pass into `tp`'s log (dropped if the partition left this core or
    /// became a mirror partition meanwhile).
    pub(crate) fn install_cleaned(&mut self, tp: &TopicPartition, cleaned: Cleaned) {
        match self.partitions.get_mut(tp) {
            Some(p) if p.mirror.is_none() => match p.log.install_cleaned(cleaned) {
                Ok(stats) => tracing::debug!(%tp, ?stats, "log cleaned"),
                Err(e) => tracing::warn!(%tp, error = %e, "installing cleaned segments failed"),
            },
            _ => cleaned.discard(),
        }
    }

    /// Flushes and closes every log (clean shutdown: checkpoints written).
    pub(crate) fn close_all(&mut self) {
        for (tp, mut p) in self.partitions.drain() {
            p.notify_waiters();
            if let Err(e) = p.log.flush().and_then(|_| p.log.close()) {
                tracing::error!(%tp, error = %e, "closing partition failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_log::batch::{build_batch, BatchSpec};
    use std::collections::BTreeSet;

    /// Node 1 leads at epoch 1 with replicas and ISR {1, 2, 3}, a 30 s lag limit.
    fn lead_replicas_1_2_3(p: &mut Partition, min_insync: usize, now_ms: i64) {
        p.become_leader(
            NodeId(1),
            LeaderEpoch(1),
            &ids(&[1, 2, 3]),
            set(&[1, 2, 3]),
            1,
            30_000,
            min_insync,
            now_ms,
        );
    }

    fn open(dir: &std::path::Path) -> Partition {
        let log = Log::open(dir, LogConfig::default()).unwrap();
        let recovered_hw = log.high_watermark();
        Partition {
            tp: TopicPartition::new("t".to_string(), 0),
            topic_id: 1,
            log,
            leader_epoch: LeaderEpoch(0),
            mirror: None,
            write_fence: None,
            waiters: Vec::new(),
            role: Role::Alone,
            recovered_hw,
            alone_committed: false,
        }
    }

    fn batch(base: i64, epoch: i32, n: usize) -> Bytes {
        let recs: Vec<kmirror_log::batch::KeyValue<'_>> =
            (0..n).map(|_| (None, Some(&b"v"[..]))).collect();
        Bytes::from(build_batch(
            &BatchSpec {
                base_offset: base,
                partition_leader_epoch: epoch,
                attributes: 0,
                base_timestamp: crate::now_ms(),
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            },
            &recs,
        ))
    }

    fn ids(v: &[i32]) -> Vec<NodeId> {
        v.iter().map(|i| NodeId(*i)).collect()
    }

    fn set(v: &[i32]) -> BTreeSet<NodeId> {
        v.iter().map(|i| NodeId(*i)).collect()
    }

    fn leader_of_three(p: &mut Partition) {
        lead_replicas_1_2_3(p, 1, crate::now_ms());
    }

    #[test]
    fn a_write_fence_refuses_client_appends_and_keeps_the_log_until_lifted() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        p.append_leader(batch(0, 0, 2), crate::now_ms()).unwrap();
        p.write_fence = Some("dr".into());
        let e = p
            .append_leader(batch(2, 0, 3), crate::now_ms())
            .unwrap_err();
        assert!(
            matches!(e, EngineError::WriteFenced { ref by, .. } if by == "dr"),
            "{e}"
        );
        assert_eq!(
            p.log.log_end_offset(),
            Offset(2),
            "nothing appended while fenced"
        );
        // A mirror copy (the reverse mirror) still appends at the source's offsets.
        p.append_mirror(batch(2, 0, 3)).unwrap();
        assert_eq!(p.log.log_end_offset(), Offset(5));
        p.write_fence = None;
        p.append_leader(batch(5, 0, 1), crate::now_ms()).unwrap();
        assert_eq!(p.log.log_end_offset(), Offset(6));
    }

    #[test]
    fn alone_the_high_watermark_is_the_log_end_and_acks_all_needs_no_wait() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        p.append_leader(batch(0, 0, 3), crate::now_ms()).unwrap();
        assert_eq!(p.log.high_watermark(), Offset(3));
        assert!(p.enough_replicas(1));
        assert!(
            !p.enough_replicas(2),
            "Kafka: ISR {{self}} is below min.insync.replicas=2"
        );
        assert!(p.wait_ack(Offset(3), 1).is_ok());
    }

    #[test]
    fn as_leader_the_high_watermark_waits_for_the_isr_and_acks_all_waiters_are_woken() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        leader_of_three(&mut p);
        let now = crate::now_ms();
        p.append_leader(batch(0, 1, 5), now).unwrap();
        assert_eq!(
            p.log.high_watermark(),
            Offset(0),
            "followers have not fetched"
        );
        let rx = p.wait_ack(Offset(5), 2).unwrap_err();
        assert!(rx.try_recv().is_err(), "still waiting");
        assert_eq!(p.on_replica_fetch(NodeId(2), Offset(5), now), Ok(None));
        assert_eq!(
            p.log.high_watermark(),
            Offset(0),
            "3 is in the ISR and holds it"
        );
        p.on_replica_fetch(NodeId(3), Offset(5), now).unwrap();
        assert_eq!(p.log.high_watermark(), Offset(5));
        assert_eq!(rx.try_recv(), Ok(AckState::Done));
        // A node that is no replica, and a fetch on a non-leader, get Kafka's refusals.
        assert_eq!(
            p.on_replica_fetch(NodeId(9), Offset(5), now),
            Err(ReplicaFetchError::NotReplica)
        );
        p.become_follower(NodeId(2), LeaderEpoch(2));
        assert_eq!(
            p.on_replica_fetch(NodeId(2), Offset(5), now),
            Err(ReplicaFetchError::NotLeader)
        );
    }

    #[test]
    fn a_shrink_is_proposed_once_and_applied_only_when_committed() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        let t0 = crate::now_ms();
        lead_replicas_1_2_3(&mut p, 1, t0);
        p.append_leader(batch(0, 1, 2), t0).unwrap();
        p.on_replica_fetch(NodeId(2), Offset(2), t0).unwrap();
        let rx = p.wait_ack(Offset(2), 2).unwrap_err();
        // Follower 3 never fetches: after the lag limit the shrink is proposed, once.
        assert_eq!(p.isr_expiration(t0 + 10_000), None);
        let (change, base) = p.isr_expiration(t0 + 31_000).unwrap();
        assert_eq!(change, IsrChange::Shrink(set(&[1, 2])));
        assert_eq!(base, 1);
        assert_eq!(
            p.isr_expiration(t0 + 32_000),
            None,
            "one pending change at a time"
        );
        assert_eq!(
            p.log.high_watermark(),
            Offset(0),
            "not applied before the commit"
        );
        p.isr_committed(set(&[1, 2]), 2, t0 + 32_000);
        assert_eq!(p.log.high_watermark(), Offset(2));
        assert_eq!(rx.try_recv(), Ok(AckState::Done));
        assert_eq!(p.partition_epoch(), Some(2));
    }

    #[test]
    fn an_isr_below_min_insync_refuses_appends_and_answers_waiters_not_enough_after_append() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        let t0 = crate::now_ms();
        // Took the lead a minute ago: follower 3 (never fetched) is no longer caught up.
        lead_replicas_1_2_3(&mut p, 1, t0 - 60_000);
        p.append_leader(batch(0, 1, 1), t0).unwrap();
        let rx = p.wait_ack(Offset(1), 3).unwrap_err();
        p.on_replica_fetch(NodeId(2), Offset(1), t0).unwrap();
        // 3 leaves the ISR (committed); the HW passes the batch with ISR {1,2} < 3.
        p.isr_committed(set(&[1, 2]), 2, t0);
        assert_eq!(rx.try_recv(), Ok(AckState::NotEnoughReplicasAfterAppend));
        assert!(!p.enough_replicas(3));
        assert!(p.enough_replicas(2));
    }

    #[test]
    fn a_committed_isr_seen_in_metadata_is_applied_once_and_only_at_the_leaders_epoch() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        let t0 = crate::now_ms();
        lead_replicas_1_2_3(&mut p, 3, t0);
        assert!(p.enough_replicas(3));
        // Another epoch's state, or an older partition epoch, changes nothing.
        p.sync_committed_isr(LeaderEpoch(2), set(&[1, 2]), 2, t0);
        p.sync_committed_isr(LeaderEpoch(1), set(&[1, 2]), 1, t0);
        assert!(p.enough_replicas(3));
        // A fence-driven shrink committed at partition epoch 2: refused before the append.
        p.sync_committed_isr(LeaderEpoch(1), set(&[1, 2]), 2, t0);
        assert!(!p.enough_replicas(3));
        assert_eq!(p.partition_epoch(), Some(2));
        // The expansion, then a stale answer for the shrink: the newer ISR stays.
        p.sync_committed_isr(LeaderEpoch(1), set(&[1, 2, 3]), 3, t0);
        p.isr_committed(set(&[1, 2]), 2, t0);
        assert!(p.enough_replicas(3));
        assert_eq!(p.partition_epoch(), Some(3));
        // A follower applies nothing.
        p.become_follower(NodeId(2), LeaderEpoch(2));
        p.sync_committed_isr(LeaderEpoch(2), set(&[2]), 4, t0);
        assert_eq!(p.partition_epoch(), None);
    }

    #[test]
    fn a_reassignment_adds_a_follower_at_the_same_epoch_and_keeps_waiters_across_a_new_one() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        let t0 = crate::now_ms();
        lead_replicas_1_2_3(&mut p, 1, t0);
        p.append_leader(batch(0, 1, 1), t0).unwrap();
        let rx = p.wait_ack(Offset(1), 1).unwrap_err();
        assert!(matches!(
            p.on_replica_fetch(NodeId(4), Offset(0), t0),
            Err(ReplicaFetchError::NotReplica)
        ));
        // Replica 4 added at the same leader epoch (partition epoch 2): it may fetch now, and
        // joins the ISR once caught up.
        p.become_leader(
            NodeId(1),
            LeaderEpoch(1),
            &ids(&[1, 2, 3, 4]),
            set(&[1, 2, 3]),
            2,
            30_000,
            1,
            t0,
        );
        assert!(p.on_replica_fetch(NodeId(4), Offset(0), t0).is_ok());
        // The reassignment completes without 2 and 3: a new leader epoch on the same leader.
        // The pending acks=all produce is not failed; it completes once 4 has it.
        p.become_leader(
            NodeId(1),
            LeaderEpoch(2),
            &ids(&[1, 4]),
            set(&[1, 4]),
            3,
            30_000,
            1,
            t0,
        );
        assert!(rx.try_recv().is_err(), "still waiting");
        p.on_replica_fetch(NodeId(4), Offset(1), t0).unwrap();
        assert_eq!(rx.try_recv(), Ok(AckState::Done));
    }

    #[test]
    fn a_single_replica_that_gains_a_follower_keeps_its_high_watermark() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        let t0 = crate::now_ms();
        p.become_alone(LeaderEpoch(0));
        p.append_leader(batch(0, 0, 3), t0).unwrap();
        assert_eq!(p.log.high_watermark(), Offset(3));
        // RF 1 -> 2 by a reassignment: the leader's committed log stays visible.
        p.become_leader(
            NodeId(1),
            LeaderEpoch(0),
            &ids(&[2, 1]),
            set(&[1]),
            1,
            30_000,
            1,
            t0,
        );
        assert_eq!(p.log.high_watermark(), Offset(3));
    }

    #[test]
    fn losing_the_lead_answers_waiters_not_leader() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        leader_of_three(&mut p);
        p.append_leader(batch(0, 1, 1), crate::now_ms()).unwrap();
        let rx = p.wait_ack(Offset(1), 1).unwrap_err();
        p.become_follower(NodeId(2), LeaderEpoch(2));
        assert_eq!(rx.try_recv(), Ok(AckState::NotLeader));
        assert_eq!(p.leader_epoch, LeaderEpoch(2));
        assert!(matches!(p.role(), Role::Follower(f) if !f.truncated && f.leader == NodeId(2)));
    }

    #[test]
    fn a_follower_appends_the_leaders_batches_verbatim_truncates_and_follows_the_leaders_hw() {
        let d = tempfile::tempdir().unwrap();
        let mut p = open(d.path());
        p.become_follower(NodeId(1), LeaderEpoch(1));
        let b = batch(0, 1, 4);
        p.append_follower(b.clone(), Offset(2), Offset(0)).unwrap();
        assert_eq!(p.log.log_end_offset(), Offset(4));
        assert_eq!(
            p.log.high_watermark(),
            Offset(2),
            "min(leader HW, own log end)"
        );
        let read = p.log.read(Offset(0), 1 << 20, Offset(4)).unwrap();
        assert_eq!(read.records, b, "bytes as the leader sent them");
        p.append_follower(Bytes::new(), Offset(9), Offset(0))
            .unwrap();
        assert_eq!(p.log.high_watermark(), Offset(4));
        // The leader's log start moved (DeleteRecords): followed up to the follower's HW.
        p.append_follower(Bytes::new(), Offset(9), Offset(7))
            .unwrap();
        assert_eq!(p.log.log_start_offset(), Offset(4));
        // A new leader at epoch 2 whose log ends at 3: truncate, then fetch on.
        p.become_follower(NodeId(3), LeaderEpoch(2));
        p.truncate_as_follower(Offset(3), true).unwrap();
        assert_eq!(p.log.log_end_offset(), Offset(3));
        assert!(matches!(p.role(), Role::Follower(f) if f.truncated));
        // Becoming leader at epoch 3: the replica state starts at the log end.
        p.append_follower(batch(3, 2, 2), Offset(5), Offset(0))
            .unwrap();
        assert_eq!(
            p.log.epoch_entries().last(),
            Some(&(LeaderEpoch(2), Offset(3)))
        );
        p.become_leader(
            NodeId(1),
            LeaderEpoch(3),
            &ids(&[1, 2, 3]),
            set(&[1, 2]),
            5,
            30_000,
            1,
            crate::now_ms(),
        );
        assert_eq!(p.leader_epoch, LeaderEpoch(3));
        assert_eq!(p.log.high_watermark(), Offset(5));
        assert!(p.is_leader());
    }
}
