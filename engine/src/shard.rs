//! A core's partitions. Only the owning core's thread ever touches a [`Shard`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use kmirror_log::{AppendInfo, CleanJob, Cleaned, ControlKind, Log, LogConfig};
use kmirror_types::{LeaderEpoch, ProducerId, TopicPartition};

use crate::assign::Routing;
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
    waiters: Vec<flume::Sender<()>>,
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
        let info = self.log.append_leader(batches, self.leader_epoch, now_ms)?;
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
        self.log.set_high_watermark(leo);
        self.notify_waiters();
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
        let mut log = Log::open(&spec.dir, spec.config)?;
        // Single replica: as leader with ISR = {self}, everything recovered is committed
        // (Kafka's leader sets HW to its LEO when the ISR is only itself). The checkpointed
        // HW can lag after a crash, which would hide acknowledged records.
        let leo = log.log_end_offset();
        log.set_high_watermark(leo);
        tracing::debug!(core = self.core, %tp, "opened partition");
        self.partitions.insert(
            tp.clone(),
            Partition {
                tp: tp.clone(),
                topic_id: spec.topic_id,
                log,
                leader_epoch: spec.leader_epoch,
                mirror: spec.mirror,
                waiters: Vec::new(),
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
