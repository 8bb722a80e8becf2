//! Producer-id allocation and the transaction coordinator (Kafka transaction protocol v1:
//! InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn with commit/abort markers).
//!
//! Single-threaded, runtime-free state; `now_ms` is explicit. Durable in
//! `__transaction_state-0/records.log`: producer ids are handed out from blocks whose upper end
//! is persisted before any id of the block is returned, so ids never repeat across restarts
//! (a restart skips the rest of the block). Transaction metadata is persisted on every state
//! change; the caller must call [`TxnCoordinator::flush`] before replying.
//!
//! Ending a transaction yields a [`MarkerJob`]; the caller writes the markers (data partitions
//! through the broker, the offsets "partition" by [`crate::group::GroupCoordinator::complete_txn`])
//! and reports back with [`TxnCoordinator::markers_written`]. EndTxn replies are parked until
//! then. Jobs for transactions found in a Prepare state at open are returned for resumption.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::group::codes::*;
use crate::group::Token;
use crate::offsets_log::{RecordFile, StoreError};

mod record;
use record::TxnRec;

const LOG_NAME: &str = "records.log";

/// Coordinator tunables (Kafka names in the comments).
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// transaction.max.timeout.ms
    pub max_timeout_ms: i32,
    /// Producer ids reserved per durable write.
    pub pid_block_size: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            max_timeout_ms: 900_000,
            pid_block_size: 1000,
        }
    }
}

/// Kafka's transaction states (Dead / PrepareEpochFence are folded into the others here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    /// Kafka's name of the state (DescribeTransactions, ListTransactions).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    /// Every state name Kafka knows (a ListTransactions filter naming another is reported
    /// back as unknown). Dead and PrepareEpochFence are never reported here.
    pub const KAFKA_NAMES: [&'static str; 8] = [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ];
}

/// One transactional id as DescribeTransactions / ListTransactions show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnView {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub state: TxnState,
    pub timeout_ms: i32,
    /// -1 unless a transaction has started (Kafka keeps it through completion).
    pub start_ms: i64,
    /// The transaction's partitions while it is open or being completed (Kafka clears them
    /// on completion).
    pub partitions: Vec<(String, i32)>,
}

/// Markers to write for one transaction outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    /// Data partitions that need a control batch.
    pub partitions: Vec<(String, i32)>,
    /// Consumer groups whose pending transactional offsets this outcome settles.
    pub groups: Vec<String>,
}

#[derive(Debug, Clone)]
struct TxnMeta {
    pid: i64,
    epoch: i16,
    timeout_ms: i32,
    state: TxnState,
    partitions: BTreeSet<(String, i32)>,
    groups: BTreeSet<String>,
    start_ms: i64,
    /// EndTxn requests waiting for the markers.
    parked: Vec<Token>,
}

/// The transaction coordinator of this node (every transactional id maps here).
pub struct TxnCoordinator {
    cfg: TxnConfig,
    txns: BTreeMap<String, TxnMeta>,
    next_pid: i64,
    block_end: i64,
    file: RecordFile,
    write_error: Option<StoreError>,
    /// Where producer-id blocks come from when they are not this log's own (coordinators on
    /// several nodes must never hand out the same id: the metadata quorum allocates them).
    pid_source: Option<Box<dyn ProducerIdSource>>,
}

/// Producer-id blocks from outside the coordinator (the metadata quorum's
/// AllocateProducerIds, as Kafka's coordinators take them from the controller).
pub trait ProducerIdSource: Send {
    /// A fresh block `start..end` of about `count` ids, never handed out before; `None` when
    /// none can be had now (the client is told COORDINATOR_NOT_AVAILABLE and retries).
    fn allocate(&mut self, count: u32) -> Option<(i64, i64)>;
}

impl TxnCoordinator {
    /// Opens the transaction log; returns marker jobs to resume (transactions that were in
    /// PrepareCommit / PrepareAbort when the node stopped).
    pub fn open(
        dir: &Path,
        cfg: TxnConfig,
    ) -> Result<(TxnCoordinator, Vec<MarkerJob>), StoreError> {
        let (file, payloads) = RecordFile::open(dir, LOG_NAME)?;
        Self::restore(file, &payloads, &dir.join(LOG_NAME), cfg)
    }

    /// The coordinator of a cluster's quorum leader: restores from the applied copy of the
    /// replicated transaction log and writes through `committer`. Producer ids continue after
    /// the last block any earlier leader reserved, so they never repeat across leaders.
    /// `term` is the quorum term this node leads in (its writes are fenced by it).
    pub fn open_replicated(
        records: &[Vec<u8>],
        committer: std::sync::Arc<dyn crate::replicated::Committer>,
        term: u64,
        cfg: TxnConfig,
    ) -> Result<(TxnCoordinator, Vec<MarkerJob>), StoreError> {
        let log = crate::replicated::CoordinatorLog::Transactions;
        let file = RecordFile::replicated(log, term, records, committer);
        let path = Path::new("<quorum>/__transaction_state");
        Self::restore(file, records, path, cfg)
    }

    /// The coordinator of the `__transaction_state` partitions this node leads (`loaded`):
    /// restores from their records and writes through `writer`; producer ids come from
    /// `pids`.
    pub fn open_partitioned(
        records: &[Vec<u8>],
        writer: std::sync::Arc<dyn crate::replicated::PartitionWriter>,
        loaded: crate::replicated::Loaded,
        cfg: TxnConfig,
        pids: Box<dyn ProducerIdSource>,
    ) -> Result<(TxnCoordinator, Vec<MarkerJob>), StoreError> {
        let log = crate::replicated::CoordinatorLog::Transactions;
        let file = RecordFile::partitioned(log, loaded, records, writer);
        let path = Path::new("<partitions>/__transaction_state");
        let (mut c, jobs) = Self::restore(file, records, path, cfg)?;
        c.pid_source = Some(pids);
        // Ids below a block from the quorum are not this coordinator's to reuse.
        c.next_pid = 0;
        c.block_end = 0;
        Ok((c, jobs))
    }

    /// Whether a replicated write failed: this coordinator must be reopened.
    pub fn is_fenced(&self) -> bool {
        self.file.is_fenced()
    }

    fn restore(
        file: RecordFile,
        payloads: &[Vec<u8>],
        path: &Path,
        cfg: TxnConfig,
    ) -> Result<(TxnCoordinator, Vec<MarkerJob>), StoreError> {
        let mut txns = BTreeMap::new();
        let mut block_end = 0i64;
        for (index, p) in payloads.iter().enumerate() {
            let rec = TxnRec::decode(p).map_err(|reason| StoreError::BadRecord {
                path: path.to_path_buf(),
                index,
                reason,
            })?;
            match rec {
                TxnRec::PidBlock { end } => block_end = block_end.max(end),
                TxnRec::Txn {
                    id,
                    pid,
                    epoch,
                    timeout_ms,
                    state,
                    partitions,
                    groups,
                    start_ms,
                } => {
                    block_end = block_end.max(pid + 1);
                    txns.insert(
                        id,
                        TxnMeta {
                            pid,
                            epoch,
                            timeout_ms,
                            state,
                            partitions: partitions.into_iter().collect(),
                            groups: groups.into_iter().collect(),
                            start_ms,
                            parked: Vec::new(),
                        },
                    );
                }
            }
        }
        let mut c = TxnCoordinator {
            cfg,
            txns,
            // Skip the rest of the last block: ids in it may have been given out before a crash.
            next_pid: block_end,
            block_end,
            file,
            write_error: None,
            pid_source: None,
        };
        if payloads.len() > 2 * c.txns.len() + 1000 {
            c.compact()?;
        }
        let jobs = c
            .txns
            .iter()
            .filter(|(_, m)| matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort))
            .map(|(id, m)| job(id, m))
            .collect();
        Ok((c, jobs))
    }

    fn persist(&mut self, rec: &TxnRec) {
        let bytes = rec.encode();
        if let Err(e) = self.file.append(&bytes) {
            tracing::error!(error = %e, "transaction log append failed");
            self.write_error.get_or_insert(e);
        }
    }

    fn persist_txn(&mut self, id: &str) {
        let m = &self.txns[id];
        let rec = TxnRec::Txn {
            id: id.to_string(),
            pid: m.pid,
            epoch: m.epoch,
            timeout_ms: m.timeout_ms,
            state: m.state,
            partitions: m.partitions.iter().cloned().collect(),
            groups: m.groups.iter().cloned().collect(),
            start_ms: m.start_ms,
        };
        self.persist(&rec);
    }

    fn compact(&mut self) -> Result<(), StoreError> {
        self.file.sync()?;
        let live = self.live_payloads();
        self.file.rewrite(&live)
    }

    /// Every record of the live state (what a compaction keeps): to move this coordinator's
    /// state into another store.
    pub fn live_payloads(&self) -> Vec<Vec<u8>> {
        let mut live = vec![TxnRec::PidBlock {
            end: self.block_end,
        }
        .encode()];
        for (id, m) in &self.txns {
            live.push(
                TxnRec::Txn {
                    id: id.clone(),
                    pid: m.pid,
                    epoch: m.epoch,
                    timeout_ms: m.timeout_ms,
                    state: m.state,
                    partitions: m.partitions.iter().cloned().collect(),
                    groups: m.groups.iter().cloned().collect(),
                    start_ms: m.start_ms,
                }
                .encode(),
            );
        }
        live
    }

    /// Makes every change so far durable. Must succeed before replies are sent.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        if let Some(e) = self.write_error.take() {
            return Err(e);
        }
        self.file.sync()
    }

    /// A fresh producer id, never handed out before (also across restarts once flushed);
    /// `Err(COORDINATOR_NOT_AVAILABLE)` when an outside block is needed and none came.
    pub fn allocate_producer_id(&mut self) -> Result<i64, i16> {
        if self.next_pid >= self.block_end {
            if let Some(src) = self.pid_source.as_mut() {
                let count = u32::try_from(self.cfg.pid_block_size).unwrap_or(1000);
                let (start, end) = src.allocate(count).ok_or(COORDINATOR_NOT_AVAILABLE)?;
                self.next_pid = start;
                self.block_end = end;
                let pid = self.next_pid;
                self.next_pid += 1;
                return Ok(pid);
            }
            self.block_end = self.next_pid + self.cfg.pid_block_size;
            let rec = TxnRec::PidBlock {
                end: self.block_end,
            };
            self.persist(&rec);
        }
        let pid = self.next_pid;
        self.next_pid += 1;
        Ok(pid)
    }

    /// InitProducerId. Returns `(pid, epoch)` or an error code, plus a marker job when an
    /// ongoing transaction of a previous producer instance must be aborted (fencing); the
    /// client then gets CONCURRENT_TRANSACTIONS and retries.
    pub fn init_producer_id(
        &mut self,
        transactional_id: Option<&str>,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        now_ms: i64,
    ) -> (Result<(i64, i16), i16>, Option<MarkerJob>) {
        let Some(id) = transactional_id else {
            return (self.allocate_producer_id().map(|pid| (pid, 0)), None);
        };
        if id.is_empty() {
            return (Err(INVALID_REQUEST), None);
        }
        if timeout_ms <= 0 || timeout_ms > self.cfg.max_timeout_ms {
            return (Err(INVALID_TRANSACTION_TIMEOUT), None);
        }
        if !self.txns.contains_key(id) {
            let pid = match self.allocate_producer_id() {
                Ok(pid) => pid,
                Err(code) => return (Err(code), None),
            };
            self.txns.insert(
                id.to_string(),
                TxnMeta {
                    pid,
                    epoch: 0,
                    timeout_ms,
                    state: TxnState::Empty,
                    partitions: BTreeSet::new(),
                    groups: BTreeSet::new(),
                    start_ms: now_ms,
                    parked: Vec::new(),
                },
            );
            self.persist_txn(id);
            return (Ok((pid, 0)), None);
        }
        let m = self.txns.get(id).expect("present");
        if let Some((pid, epoch)) = expected {
            // KIP-360: a producer re-initialising must present the current identity.
            if pid != -1 && (pid != m.pid || epoch > m.epoch) {
                return (Err(PRODUCER_FENCED), None);
            }
        }
        match m.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                (Err(CONCURRENT_TRANSACTIONS), None)
            }
            TxnState::Ongoing => {
                // Fence the old producer: bump the epoch and abort its transaction with it.
                let m = self.txns.get_mut(id).expect("present");
                if m.epoch < i16::MAX - 1 {
                    m.epoch += 1;
                }
                m.state = TxnState::PrepareAbort;
                let j = job(id, m);
                self.persist_txn(id);
                (Err(CONCURRENT_TRANSACTIONS), Some(j))
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let exhausted = m.epoch >= i16::MAX - 1;
                let new_pid = if exhausted {
                    match self.allocate_producer_id() {
                        Ok(pid) => Some(pid),
                        Err(code) => return (Err(code), None),
                    }
                } else {
                    None
                };
                let m = self.txns.get_mut(id).expect("present");
                match new_pid {
                    Some(p) => {
                        m.pid = p;
                        m.epoch = 0;
                    }
                    None => m.epoch += 1,
                }
                m.timeout_ms = timeout_ms;
                m.state = TxnState::Empty;
                m.partitions.clear();
                m.groups.clear();
                let r = (m.pid, m.epoch);
                self.persist_txn(id);
                (Ok(r), None)
            }
        }
    }

    fn validate(&self, id: &str, pid: i64, epoch: i16) -> Result<(), i16> {
        let Some(m) = self.txns.get(id) else {
            return Err(INVALID_PRODUCER_ID_MAPPING);
        };
        if m.pid != pid {
            return Err(INVALID_PRODUCER_ID_MAPPING);
        }
        if m.epoch != epoch {
            return Err(PRODUCER_FENCED);
        }
        Ok(())
    }

    fn add(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        group: Option<&str>,
        now_ms: i64,
    ) -> i16 {
        if let Err(e) = self.validate(id, pid, epoch) {
            return e;
        }
        let m = self.txns.get_mut(id).expect("validated");
        let mut changed = false;
        match m.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => return CONCURRENT_TRANSACTIONS,
            TxnState::Ongoing => {}
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                m.state = TxnState::Ongoing;
                m.start_ms = now_ms;
                m.partitions.clear();
                m.groups.clear();
                changed = true;
            }
        }
        for p in partitions {
            changed |= m.partitions.insert(p.clone());
        }
        if let Some(g) = group {
            changed |= m.groups.insert(g.to_string());
        }
        if changed {
            self.persist_txn(id);
        }
        NONE
    }

    /// AddPartitionsToTxn: one code for all the given partitions.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        now_ms: i64,
    ) -> i16 {
        self.add(
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            None,
            now_ms,
        )
    }

    /// AddPartitionsToTxn v4+ `verify_only`: are these partitions part of the ongoing txn?
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Vec<i16> {
        match self.validate(transactional_id, producer_id, producer_epoch) {
            Err(e) => vec![e; partitions.len()],
            Ok(()) => {
                let m = &self.txns[transactional_id];
                partitions
                    .iter()
                    .map(|p| {
                        if m.state == TxnState::Ongoing && m.partitions.contains(p) {
                            NONE
                        } else {
                            INVALID_TXN_STATE
                        }
                    })
                    .collect()
            }
        }
    }

    /// AddOffsetsToTxn: the group's offsets become part of the transaction.
    pub fn add_offsets(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group_id: &str,
        now_ms: i64,
    ) -> i16 {
        self.add(
            transactional_id,
            producer_id,
            producer_epoch,
            &[],
            Some(group_id),
            now_ms,
        )
    }

    /// EndTxn. `Err(code)` answers now; `Ok(job)` parks `token` until
    /// [`TxnCoordinator::markers_written`] reports the job done.
    pub fn end_txn(
        &mut self,
        token: Token,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<MarkerJob, i16> {
        self.validate(transactional_id, producer_id, producer_epoch)?;
        let m = self.txns.get_mut(transactional_id).expect("validated");
        match (m.state, commit) {
            (TxnState::Ongoing, _) => {
                m.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                m.parked.push(token);
                let j = job(transactional_id, m);
                self.persist_txn(transactional_id);
                Ok(j)
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Err(CONCURRENT_TRANSACTIONS)
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Err(NONE),
            _ => Err(INVALID_TXN_STATE),
        }
    }

    /// Reports the outcome of a marker job. On success the transaction completes and the
    /// parked EndTxn tokens are returned with their code; on failure nothing changes and the
    /// caller retries the job later.
    pub fn markers_written(&mut self, job: &MarkerJob, ok: bool) -> Vec<(Token, i16)> {
        if !ok {
            return Vec::new();
        }
        let Some(m) = self.txns.get_mut(&job.transactional_id) else {
            return Vec::new();
        };
        let expected = if job.commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        if m.pid != job.producer_id || m.state != expected {
            return Vec::new();
        }
        m.state = if job.commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        m.partitions.clear();
        m.groups.clear();
        let parked = std::mem::take(&mut m.parked);
        self.persist_txn(&job.transactional_id);
        parked.into_iter().map(|t| (t, NONE)).collect()
    }

    /// Aborts transactions open longer than their timeout (bumping the epoch fences the
    /// producer, as Kafka does). Returns the abort jobs to run.
    pub fn tick(&mut self, now_ms: i64) -> Vec<MarkerJob> {
        let expired: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, m)| {
                m.state == TxnState::Ongoing && now_ms >= m.start_ms + m.timeout_ms as i64
            })
            .map(|(id, _)| id.clone())
            .collect();
        let mut jobs = Vec::new();
        for id in expired {
            let m = self.txns.get_mut(&id).expect("present");
            if m.epoch < i16::MAX - 1 {
                m.epoch += 1;
            }
            m.state = TxnState::PrepareAbort;
            tracing::info!(transactional_id = %id, "aborting timed-out transaction");
            jobs.push(job(&id, m));
            self.persist_txn(&id);
        }
        jobs
    }

    /// Every transactional id with its view (ListTransactions), by id.
    pub fn list(&self) -> Vec<(String, TxnView)> {
        self.txns
            .iter()
            .map(|(id, m)| (id.clone(), view(m)))
            .collect()
    }

    /// One transactional id's view (DescribeTransactions).
    pub fn describe(&self, transactional_id: &str) -> Option<TxnView> {
        self.txns.get(transactional_id).map(view)
    }

    /// State of a transactional id (tests, DescribeTransactions).
    pub fn state(&self, transactional_id: &str) -> Option<(i64, i16, TxnState)> {
        self.txns
            .get(transactional_id)
            .map(|m| (m.pid, m.epoch, m.state))
    }
}

fn view(m: &TxnMeta) -> TxnView {
    let open = matches!(
        m.state,
        TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
    );
    TxnView {
        producer_id: m.pid,
        producer_epoch: m.epoch,
        state: m.state,
        timeout_ms: m.timeout_ms,
        start_ms: if m.state == TxnState::Empty {
            -1
        } else {
            m.start_ms
        },
        partitions: if open {
            m.partitions.iter().cloned().collect()
        } else {
            Vec::new()
        },
    }
}

fn job(id: &str, m: &TxnMeta) -> MarkerJob {
    MarkerJob {
        transactional_id: id.to_string(),
        producer_id: m.pid,
        producer_epoch: m.epoch,
        commit: m.state == TxnState::PrepareCommit,
        partitions: m.partitions.iter().cloned().collect(),
        groups: m.groups.iter().cloned().collect(),
    }
}

#[cfg(test)]
mod tests;
