//! The coordinators' replicated stores: their `__consumer_offsets` / `__transaction_state`
//! partitions ([`PartitionWriter`], [`Loaded`]; issue 20), and the Raft log an older version
//! kept them on, still read once to move that state into the partitions.
//!
//! Owns: the [`PartitionWriter`] seam (a coordinator's batches appended by the partition's
//! leader, answered once replicated) and [`Loaded`] (the partitions a coordinator was loaded
//! from, with the leader epochs that fence its writes); the [`Committer`] seam (proposing a
//! [`ClusterCommand`] and waiting for it to commit), the Raft-log coordinator commands
//! ([`CoordinatorLog`], [`LogOp`]) and the applied copy every quorum node keeps of them
//! ([`CoordinatorLogs`]), which the mirror's state also uses.
//!
//! The Raft-log coordinator model (the coordinators on the quorum leader, every flush one
//! proposal, compaction a `Replace`) is what data dirs of earlier versions hold: applying
//! those entries stays deterministic, and the coordinators move that state to their
//! partitions the first time they load a partition never written.
//!
//! Must not depend on a runtime: [`Committer::commit`] blocks the calling thread (the
//! coordinator thread, never an engine core); so does [`PartitionWriter::append`].

use serde::{Deserialize, Serialize};

use crate::quorum::ClusterCommand;

/// Proposes commands to the quorum on behalf of a coordinator store.
pub trait Committer: Send + Sync {
    /// Proposes `cmd` and blocks until it committed and was applied on this node (`Ok`).
    /// `Err` if it was refused, dropped or its fate is unknown (a leader change): the caller
    /// answers the client with an error and the client retries, as with a failed fsync.
    fn commit(&self, cmd: ClusterCommand) -> std::io::Result<()>;
}

/// Appends a coordinator's batches to the log of a coordinator partition this node leads
/// (implemented by the node on its engine; Kafka's coordinator runtime writing through the
/// partition's leader).
pub trait PartitionWriter: Send + Sync {
    /// Appends `batches` (back to back) to partition `partition` of `log`'s topic as its
    /// leader in `leader_epoch`, and returns once the high watermark covers them (acks=all).
    /// `Err`: not that leader any more, or not replicated in time; the coordinator is then
    /// fenced and reloaded, as Kafka unloads a coordinator whose write failed.
    fn append(
        &self,
        log: CoordinatorLog,
        partition: i32,
        leader_epoch: i32,
        batches: Vec<u8>,
    ) -> std::io::Result<()>;
}

/// The partitions of one coordinator topic a node coordinates: each with the leader epoch it
/// was loaded in (its writes are fenced by it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The topic's partition count (keys map to partitions by Kafka's `partitionFor`).
    pub partitions: i32,
    pub epochs: std::collections::BTreeMap<i32, i32>,
}

/// The first producer id of the quorum's replicated blocks (`AllocateProducerIds`). The
/// transaction coordinator hands out ids from its own blocks below it (from 0 up, 1000 per
/// block): reaching 2^32 would take four billion producer ids.
pub const PRODUCER_ID_BLOCKS_START: i64 = 1 << 32;

/// The replicated coordinator logs (the local files' counterparts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CoordinatorLog {
    /// `__consumer_offsets-0/records.log`: group metadata and committed offsets.
    Offsets,
    /// `__transaction_state-0/records.log`: producer-id blocks and transaction metadata.
    Transactions,
    /// `__share_group_state`: share partitions' state (KIP-932). Only ever on its partitions;
    /// the Raft log never held it.
    ShareState,
}

/// One change of a coordinator log: records appended, or the whole log replaced by its live
/// records (the coordinator's compaction).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogOp {
    Append(#[serde(with = "records_b64")] Vec<Vec<u8>>),
    Replace(#[serde(with = "records_b64")] Vec<Vec<u8>>),
}

/// Every node's applied copy of the coordinator logs; also the form they take in the Raft
/// snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorLogs {
    #[serde(default, with = "records_b64")]
    pub offsets: Vec<Vec<u8>>,
    #[serde(default, with = "records_b64")]
    pub transactions: Vec<Vec<u8>>,
    /// The next id of the replicated producer-id blocks (0: none handed out yet).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_producer_id: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl CoordinatorLogs {
    pub fn log(&self, log: CoordinatorLog) -> &[Vec<u8>] {
        match log {
            CoordinatorLog::Offsets => &self.offsets,
            CoordinatorLog::Transactions => &self.transactions,
            CoordinatorLog::ShareState => &[],
        }
    }

    /// Applies one op (a pure function of state and op).
    pub fn apply(&mut self, log: CoordinatorLog, op: &LogOp) {
        let records = match log {
            CoordinatorLog::Offsets => &mut self.offsets,
            CoordinatorLog::Transactions => &mut self.transactions,
            // Never proposed: the share coordinator writes only to its partitions.
            CoordinatorLog::ShareState => return,
        };
        match op {
            LogOp::Append(r) => records.extend(r.iter().cloned()),
            LogOp::Replace(r) => *records = r.clone(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty() && self.transactions.is_empty() && self.next_producer_id == 0
    }

    /// Hands out the next block of `count` producer ids (a pure function of state and count).
    pub fn allocate_producer_ids(&mut self, count: u32) -> (i64, i64) {
        let start = self.next_producer_id.max(PRODUCER_ID_BLOCKS_START);
        let end = start + i64::from(count.clamp(1, 1_000_000));
        self.next_producer_id = end;
        (start, end)
    }
}

/// Records as base64 strings: the Raft entries and snapshot are JSON.
mod records_b64 {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        let text: Vec<String> = v.iter().map(|r| B64.encode(r)).collect();
        text.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let text = Vec::<String>::deserialize(d)?;
        text.iter()
            .map(|t| B64.decode(t).map_err(serde::de::Error::custom))
            .collect()
    }
}
