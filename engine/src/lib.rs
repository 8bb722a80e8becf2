//! kmirror engine: the thread-per-core runtime.
//!
//! Owns: one glommio executor per core (pinned when possible), the partition → core
//! assignment, each core's [`Shard`] (the partitions it owns, their [`kmirror_log::Log`]s and
//! their long-poll waiters), the bounded cross-core job channels ([`Router`]), the stop
//! signal, log compaction scheduling (the `cleaner` module: one cleaner thread, passes
//! installed by the owning core), and the
//! leader's replica state of a replicated partition ([`ReplicaSet`]: follower log ends, ISR
//! changes to propose, high watermark, `acks=all` completion) and its [`Role`] on the
//! [`Partition`] (alone, leader, follower; issue 12).
//!
//! Must not depend on: the Kafka wire protocol (`net`) or cluster-metadata policy (`control`);
//! it learns which partitions exist through the [`Catalog`] trait.
//!
//! Invariants worth naming:
//! - A partition's `Log` lives on exactly one core (its owner, [`Router::owner`]) and is only
//!   touched from that core's thread, so the data path has no locks. Owners can change at
//!   runtime (per-topic rules, [`Router::set_topic_rule_blocking`]); a shard opens a partition
//!   only if the current routing table says it owns it, so the log is never open twice. Other cores and threads
//!   reach it by sending a job ([`Router::run_on`] / [`Router::with_partition`]); a job on the
//!   owner's own thread runs inline, without a channel hop.
//! - Jobs are synchronous closures over `&mut Shard`: they never await, so no shard borrow is
//!   ever held across a suspension point. A job must not call back into the router for its
//!   own core.
//! - Cross-core channels are bounded: a flooded core applies back-pressure to senders.
//!
//! Using it from other subsystems (the whole partition-ownership API):
//! - append verbatim on the owner: `router.with_partition(tp, |p| p.append_mirror(bytes)).await`
//! - read state: `router.with_partition(tp, |p| (p.log.log_end_offset(), p.leader_epoch)).await`
//! - several partitions of one core at once: `router.run_on(core, |shard| ...)`;
//!   fan out first with [`Router::submit`] / [`Router::submit_partition`], then `wait()`
//! - a long-lived task on the owning core (a fetcher): [`Router::spawn_on`]
//! - from plain threads: the `*_blocking` variants (never call those on a core thread)
//! - epoch bumps and the read-only (`mirror`) flag are durable cluster metadata: change them
//!   there first; the broker then pushes them into the open [`Partition`]s.

mod assign;
mod cleaner;
mod partition_meta;
mod replica;
mod router;
mod runtime;
mod shard;

pub use assign::{Assignment, Routing, TopicRule};
pub use cleaner::CleanerConfig;
pub use replica::{AckState, FollowerState, IsrChange, LeaderState, ReplicaSet, Role};
pub use router::{Moved, Pending, Router};
pub use runtime::{CoreContext, Engine, EngineConfig, StopToken};
pub use shard::{Catalog, Partition, PartitionSpec, ReplicaFetchError, Shard};

/// Engine errors.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("unknown topic or partition {0}")]
    UnknownPartition(kmirror_types::TopicPartition),
    #[error("partition {tp} is read-only: it is mirrored by '{mirror}'")]
    ReadOnly {
        tp: kmirror_types::TopicPartition,
        mirror: String,
    },
    /// A planned switchover fences client writes for now (retriable: the producer retries
    /// until the topic has moved, then learns where it is).
    #[error("writes to {tp} are fenced by the switchover of mirror '{by}'; retry")]
    WriteFenced {
        tp: kmirror_types::TopicPartition,
        by: String,
    },
    /// This node follows the partition: writes and consumer reads go to the leader.
    #[error("this node is not the leader of {0}")]
    NotLeader(kmirror_types::TopicPartition),
    /// `acks=all` refused before the append: the ISR is smaller than `min.insync.replicas`.
    #[error("the in-sync replicas of {tp} are fewer than min.insync.replicas={min_insync}")]
    NotEnoughReplicas {
        tp: kmirror_types::TopicPartition,
        min_insync: usize,
    },
    /// The partition is owned by another core, or is moving between cores: retriable.
    #[error("partition {0} is not owned by this core (moving between cores?)")]
    NotOwner(kmirror_types::TopicPartition),
    #[error("the engine is shutting down")]
    ShuttingDown,
    #[error("core {0} does not exist")]
    NoSuchCore(usize),
    #[error("executor: {0}")]
    Executor(String),
    /// The job panicked on its core; the core and its other partitions keep running (a
    /// partition job's partition is reopened from its files on next use).
    #[error("internal error: a job panicked on core {core}: {message}")]
    JobPanicked { core: usize, message: String },
    #[error(transparent)]
    Log(#[from] kmirror_log::LogError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Milliseconds since the Unix epoch (wall clock, as Kafka timestamps are).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
