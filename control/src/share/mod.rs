//! Share groups (KIP-932, Kafka 4.1): the state a share group keeps on one topic partition.
//!
//! [`partition::SharePartition`] is the in-flight window of one (share group, topic partition)
//! as the partition's leader keeps it: which records are available, acquired (by which member,
//! until when), acknowledged or archived, their delivery counts, and the share-partition start
//! offset (SPSO). It is plain single-threaded state driven by explicit `now_ms` arguments, as
//! the rest of this crate; reading the log, the share sessions, persisting the state on
//! `__share_group_state` and the group coordinator live elsewhere and call it.
//! [`assignor`] is the group coordinator's "simple" assignor for share groups; [`session`]
//! holds the broker's share sessions (the epochs ShareFetch and ShareAcknowledge carry);
//! [`state_record`] is the share coordinator's record format on `__share_group_state`, and
//! [`coordinator`] its answers to the share-group state RPCs over those records; [`group`] is
//! a share group's membership (ShareGroupHeartbeat) as the group coordinator keeps it, and
//! [`group_record`] the records (types 10–15) it is kept in on `__consumer_offsets`.
//!
//! Invariants: a record is acquired by at most one member at a time; it is delivered at most
//! the delivery limit times (a release by a closed session does not count); an acknowledgement
//! either applies to every offset it names in the partition or to none; the SPSO only moves
//! forward, past records that are acknowledged or archived.

pub mod assignor;
pub mod coordinator;
pub mod group;
pub mod group_record;
pub mod partition;
pub mod session;
pub mod state_record;
pub mod store;

/// A kmirror-private tagged field of AlterShareGroupOffsets (v0 is flexible): a mirror's
/// share-offset sync sets it, and the coordinator then creates the share group Empty when
/// it is missing instead of answering GROUP_ID_NOT_FOUND. Honoured only from a principal
/// with CLUSTER_ACTION (brokers); stripped from everyone else's requests. Kafka 4.1 defines
/// no tagged fields on this request, and tag numbers this high are far from any it may add.
pub const MIRROR_SYNC_TAG: i32 = 10_000;

/// Helpers of this module's tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::partition::{RecordState, StateBatch};
    use kmirror_types::Offset;

    /// A persisted run `first..=last` in `state` with `count` deliveries.
    pub(crate) fn sb(first: i64, last: i64, state: RecordState, count: i16) -> StateBatch {
        StateBatch {
            first: Offset(first),
            last: Offset(last),
            state,
            delivery_count: count,
        }
    }
}
