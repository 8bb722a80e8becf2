//! Classic consumer-group coordinator (Kafka's "classic" rebalance protocol) and the durable
//! committed-offset store.
//!
//! Single-threaded, runtime-free state: every call takes an explicit `now_ms` and returns the
//! replies it produced. JoinGroup and SyncGroup may be parked (the join/sync barrier); the caller
//! passes a [`Token`] with them and receives `(Token, response)` pairs later, from the same call
//! or from a later call of any method (typically [`GroupCoordinator::tick`]).
//!
//! Durability: every state change that must survive a restart (offset commits, group
//! generation/assignment, deletions, transactional offsets and their outcome) is appended to the
//! record file; the caller must call [`GroupCoordinator::flush`] before sending any reply.
//!
//! KIP-848 consumer groups ([`consumer`]) live in the same map, with the same offsets store and
//! log: a group id is either classic or consumer. An empty classic group becomes a consumer group
//! on its first ConsumerGroupHeartbeat, an empty consumer group a classic one on a JoinGroup.
//! Non-empty groups convert as in Kafka 4.1 (online migration, `migration_policy`): a
//! ConsumerGroupHeartbeat joining a classic group turns its members into classic members of a
//! consumer group, which keep speaking JoinGroup / SyncGroup / Heartbeat while the server-side
//! assignor places them ([`embedded`] reads and writes their protocol bytes); when the last
//! consumer-protocol member goes, the group turns classic again and rebalances.
//!
//! State machine (Kafka `ClassicGroupState`): Empty → PreparingRebalance → CompletingRebalance →
//! Stable, any → Dead on deletion. Member liveness: session timeout refreshed by heartbeats,
//! JoinGroup, SyncGroup and OffsetCommit; members parked in a join or sync are kept alive.

pub mod codes;
pub mod consumer;
pub mod embedded;
mod record;
mod state;

pub use state::{GroupCoordinator, GroupState, ShareGroupDescription, ShareHeartbeatOk};

use bytes::Bytes;

/// Opaque id of a parked request, chosen by the caller.
pub type Token = u64;

/// Coordinator tunables (Kafka names in the comments).
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// group.min.session.timeout.ms
    pub min_session_timeout_ms: i32,
    /// group.max.session.timeout.ms
    pub max_session_timeout_ms: i32,
    /// group.initial.rebalance.delay.ms. Default 0, as in the server.properties Kafka ships
    /// (Kafka's built-in default is 3000: fewer rebalances when many members start at once,
    /// but every new group waits 3 s before its first assignment).
    pub initial_rebalance_delay_ms: i32,
    /// group.max.size
    pub max_group_size: usize,
    /// How long a new member's parked JoinGroup may wait (Kafka: 5 minutes).
    pub new_member_join_timeout_ms: i32,
    /// offset.metadata.max.bytes
    pub max_metadata_bytes: usize,
    /// group.consumer.session.timeout.ms (KIP-848 groups)
    pub consumer_session_timeout_ms: i32,
    /// group.consumer.heartbeat.interval.ms
    pub consumer_heartbeat_interval_ms: i32,
    /// group.consumer.max.size
    pub consumer_max_size: usize,
    /// offsets.topic.num.partitions: partitions `__consumer_offsets` is described with
    /// (kmirror keeps offsets in one store, so only Metadata shows the count).
    pub offsets_topic_num_partitions: i32,
    /// transaction.state.log.num.partitions, likewise for `__transaction_state`.
    pub transaction_state_num_partitions: i32,
    /// offsets.topic.replication.factor (Kafka's default 3): replicas of each
    /// `__consumer_offsets` partition, at most the brokers there are when it is created.
    pub offsets_topic_replication_factor: i16,
    /// transaction.state.log.replication.factor, likewise for `__transaction_state`.
    pub transaction_state_replication_factor: i16,
    /// offsets.retention.minutes, in ms (Kafka default 7 days): committed offsets of a group
    /// expire this long after the group became Empty (classic groups) or after their commit
    /// (groups that never had members, KIP-848 groups without members, and topics a Stable
    /// classic consumer group no longer subscribes to), as Kafka 4.1 (KIP-211).
    pub offsets_retention_ms: i64,
    /// offsets.retention.check.interval.ms: how often expired offsets are looked for.
    pub offsets_retention_check_interval_ms: i64,
    /// group.consumer.migration.policy: whether non-empty groups convert between the classic
    /// and the consumer protocol (empty groups always do).
    pub migration_policy: MigrationPolicy,
}

/// Kafka's `group.consumer.migration.policy` (default `bidirectional`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrationPolicy {
    #[default]
    Bidirectional,
    Upgrade,
    Downgrade,
    Disabled,
}

impl MigrationPolicy {
    /// Case-insensitive, as Kafka's validator; `None` for an unknown value.
    pub fn parse(s: &str) -> Option<MigrationPolicy> {
        Some(match s.to_ascii_lowercase().as_str() {
            "bidirectional" => MigrationPolicy::Bidirectional,
            "upgrade" => MigrationPolicy::Upgrade,
            "downgrade" => MigrationPolicy::Downgrade,
            "disabled" => MigrationPolicy::Disabled,
            _ => return None,
        })
    }

    pub fn upgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Upgrade
        )
    }

    pub fn downgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Downgrade
        )
    }
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 0,
            max_group_size: i32::MAX as usize,
            new_member_join_timeout_ms: 300_000,
            max_metadata_bytes: 4096,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            consumer_max_size: i32::MAX as usize,
            offsets_topic_num_partitions: 50,
            transaction_state_num_partitions: 50,
            offsets_topic_replication_factor: 3,
            transaction_state_replication_factor: 3,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            migration_policy: MigrationPolicy::Bidirectional,
        }
    }
}

/// A JoinGroup request.
#[derive(Debug, Clone, Default)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// (protocol name, member metadata) in the member's preference order.
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED with its id.
    pub require_known_member_id: bool,
}

/// One member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

/// A JoinGroup response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JoinResponse {
    pub error: i16,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Non-empty only for the leader.
    pub members: Vec<JoinedMember>,
}

impl JoinResponse {
    fn error(error: i16, member_id: &str) -> JoinResponse {
        JoinResponse {
            error,
            generation_id: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

/// A SyncGroup request.
#[derive(Debug, Clone, Default)]
pub struct SyncRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// Leader only: (member id, assignment).
    pub assignments: Vec<(String, Bytes)>,
}

/// A SyncGroup response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SyncResponse {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResponse {
    fn error(error: i16) -> SyncResponse {
        SyncResponse {
            error,
            ..Default::default()
        }
    }
}

/// A reply to a parked (or immediately answered) JoinGroup / SyncGroup.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Join(Token, JoinResponse),
    Sync(Token, SyncResponse),
}

/// Member identity in a LeaveGroup request.
#[derive(Debug, Clone, Default)]
pub struct LeavingMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

/// A group in ListGroups.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    /// Classic state; `Empty` for consumer groups (see `state_name`).
    pub state: GroupState,
    /// "classic" or "consumer".
    pub group_type: &'static str,
    /// The state clients display, for either group type.
    pub state_name: &'static str,
}

/// A member in DescribeGroups.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// DescribeGroups result for one group; `None` from describe means the group does not exist.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberDescription>,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp_ms: i64,
}

/// One partition of an OffsetCommit / TxnOffsetCommit.
#[derive(Debug, Clone)]
pub struct OffsetToCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// Group-level identity of an OffsetCommit / TxnOffsetCommit.
#[derive(Debug, Clone, Default)]
pub struct CommitContext {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    /// OffsetCommit v9+: GROUP_ID_NOT_FOUND instead of ILLEGAL_GENERATION for unknown groups.
    pub api_version: i16,
}

/// One partition of an OffsetFetch answer.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedOffset {
    pub topic: String,
    pub partition: i32,
    pub error: i16,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// Reads the topic list of a consumer-protocol subscription (ConsumerProtocolSubscription v0+:
/// `version:int16, topics:[string]`, strings as int16 length + UTF-8). `None` if malformed.
pub fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut p = metadata;
    let take = |p: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        if p.len() < n {
            return None;
        }
        let (a, b) = p.split_at(n);
        *p = b;
        Some(a.to_vec())
    };
    let _version = i16::from_be_bytes(take(&mut p, 2)?.try_into().ok()?);
    let count = i32::from_be_bytes(take(&mut p, 4)?.try_into().ok()?);
    if count < 0 {
        return Some(Vec::new());
    }
    let mut topics = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        let len = i16::from_be_bytes(take(&mut p, 2)?.try_into().ok()?);
        if len < 0 {
            return None;
        }
        topics.push(String::from_utf8(take(&mut p, len as usize)?).ok()?);
    }
    Some(topics)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod consumer_tests;

#[cfg(test)]
mod migration_tests;

#[cfg(test)]
mod share_tests;
