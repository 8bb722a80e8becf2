//! Cluster mirroring control plane (KIP-1279), runtime-agnostic.
//!
//! Owns: mirror definitions and their settings ([`definition`]), the partition state machine
//! ([`state`]), its durable store `__mirror_state` ([`store`]) and the coordinator that applies
//! user operations and the failover sequence through a broker trait ([`coordinator`]), and the
//! planning of the metadata and group-offset sync loops ([`sync`]), and who wrote each synced
//! ACL and quota ([`owners`]). It must not depend on any
//! async runtime or on the network layer: `net` (fetchers, wire APIs) and `engine` drive it.
//!
//! Invariants: a state change is persisted before it takes effect (see [`store`]); a partition
//! is writable on the destination only in STOPPED (or when never mirrored).

pub mod coordinator;
pub mod definition;
pub mod failpoint;
pub mod owners;
pub mod state;
pub mod store;
pub mod sync;

use kmirror_types::TopicPartition;

pub use coordinator::{
    DescribedPartition, HostError, MirrorCoordinator, MirrorHost, TopicOpError, TopicResults,
};
pub use definition::{ConfigExclude, CorePlacement, MirrorDefinition, TopicFilter};
pub use owners::{MirrorWriter, SyncOwners};
pub use state::{FailoverStep, LinkState, PartitionState, StateRefusal, UserOp};
pub use store::{MirrorRecord, MirrorStateStore, PartitionEntry, RecoveryAction};
pub use sync::{
    acl_sync_writer, clamp_group_offset, id_changed_reason, plan_acl_sync, plan_group_sync,
    plan_metadata_sync, plan_quota_sync, quota_sync_writer, AclBinding, AclSyncPlan,
    DeletionConfirmations, GroupOffsetCommit, LocalTopic, MissingVerdict, QuotaSyncPlan,
    SourceLookup, SourceTopic, SyncAction, SyncClash, SyncMode,
};

/// Topic config naming the mirror that owns a topic (hidden from DescribeConfigs).
pub const MIRROR_NAME_CONFIG: &str = "mirror.name";

/// Topic config that fences client writes during a planned switchover (`kmirror mirror
/// switchover`): while set, Produce is answered NOT_ENOUGH_REPLICAS, a code every Kafka
/// producer retries, so nothing is written and nothing is lost while the mirror drains. Its
/// value names the switchover (the mirror). Never synced by a mirror, and settable on a
/// mirror topic (the switchover lifts it once the topic follows the new primary).
pub const WRITE_FENCE_CONFIG: &str = "mirror.write.fence";

/// Topic config (seed 000) naming the partitions whose mirror traffic the broker-wide
/// ceiling throttles on this cluster, in Kafka's `*` / `partition:broker,...` form.
pub const THROTTLED_REPLICAS_CONFIG: &str = "mirror.replication.throttled.replicas";

/// Topic configs that belong to the destination cluster: a mirror never copies them from
/// its source, and a client may change them on a mirror topic (its other configs are the
/// source's).
pub const LOCAL_TOPIC_CONFIGS: [&str; 2] = [WRITE_FENCE_CONFIG, THROTTLED_REPLICAS_CONFIG];

/// Errors of the mirror control plane. `net::keys::mirror_error_code` maps them to Kafka codes.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("invalid mirror name '{name}': {reason}")]
    InvalidMirrorName { name: String, reason: String },
    #[error("invalid mirror setting {key}: {reason}")]
    InvalidSetting { key: String, reason: String },
    #[error("invalid regular expression '{pattern}': {reason}")]
    InvalidRegex { pattern: String, reason: String },
    #[error("mirror '{0}' does not exist")]
    UnknownMirror(String),
    #[error("mirror '{0}' already exists")]
    MirrorAlreadyExists(String),
    #[error("mirror '{mirror}' still has active topics: {}", topics.join(", "))]
    MirrorNotEmpty { mirror: String, topics: Vec<String> },
    #[error("topic '{topic}' does not belong to mirror '{mirror}'")]
    TopicNotInMirror { topic: String, mirror: String },
    #[error("{tp}: illegal mirror state transition {from} -> {to}")]
    IllegalTransition {
        tp: TopicPartition,
        from: PartitionState,
        to: PartitionState,
    },
    #[error("{tp}: failover step {step:?} out of order (last done: {done:?})")]
    FailoverOutOfOrder {
        tp: TopicPartition,
        done: Option<FailoverStep>,
        step: FailoverStep,
    },
    #[error("{0}: not a mirror partition")]
    UnknownPartition(TopicPartition),
    #[error("__mirror_state is corrupt: {0}")]
    Corrupt(String),
    #[error("__mirror_state I/O: {0}")]
    Io(#[from] std::io::Error),
}
