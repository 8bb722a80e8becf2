//! A share group's membership, as Kafka 4.1's group coordinator keeps it
//! (ShareGroupHeartbeat, key 76).
//!
//! Members name themselves (a Uuid the client draws) and join with epoch 0, heartbeat with
//! the epoch they were given, and leave with -1. There is no revocation phase: a member takes
//! its target partitions at once, with the target assignment's epoch. The target is computed by
//! the simple assignor over the partitions whose share state is initialized; the subscribed
//! partitions that are not are handed back to the caller to initialize
//! (InitializeShareGroupState at the group epoch, start offset -1). Once it reports them
//! initialized, the next heartbeat bumps the group epoch and the member gets them, so a member's
//! first assignment usually arrives one heartbeat after it joins, as on Kafka.
//!
//! Durability: [`ShareGroup::delta`] gives the records (types 10–15 on `__consumer_offsets`,
//! [`super::group_record`]) a change wrote, including tombstones for a member that left, and
//! [`ShareGroup::replay`] rebuilds the group from them; appending them is the hosting
//! coordinator's.

use std::collections::{BTreeMap, BTreeSet};

use super::assignor::{self, MemberSpec};
use super::group_record::{GroupKey, GroupValue, TopicPartitions, TopicPartitionsInfo};

/// A topic as the group sees it: id and partition count.
pub type TopicInfo = (uuid::Uuid, i32);

/// A ShareGroupHeartbeat, validated for shape by the caller.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// `None`: unchanged.
    pub subscribed_topics: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// Why a heartbeat is refused (Kafka's codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// INVALID_REQUEST (42), with Kafka's message.
    #[error("{0}")]
    InvalidRequest(String),
    /// UNKNOWN_MEMBER_ID (25).
    #[error("the member is not in the group")]
    UnknownMember,
    /// FENCED_MEMBER_EPOCH (110).
    #[error("the member epoch is fenced")]
    FencedEpoch,
    /// GROUP_MAX_SIZE_REACHED (81).
    #[error("the group is full")]
    GroupFull,
}

impl HeartbeatError {
    pub fn code(&self) -> i16 {
        match self {
            HeartbeatError::InvalidRequest(_) => 42,
            HeartbeatError::UnknownMember => 25,
            HeartbeatError::FencedEpoch => 110,
            HeartbeatError::GroupFull => 81,
        }
    }
}

/// A stable hash (FNV-1a) of topic names and partition counts: a change of either changes it.
fn metadata_hash(seen: &BTreeMap<String, i32>) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (t, n) in seen {
        for b in t.bytes().chain([0]).chain(n.to_be_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h as i64
}

/// The shape checks Kafka makes before the coordinator looks at the group.
pub fn validate(group_id: &str, hb: &Heartbeat) -> Result<(), HeartbeatError> {
    let bad = |m: &str| Err(HeartbeatError::InvalidRequest(m.into()));
    if hb.member_id.trim().is_empty() {
        return bad("MemberId can't be empty.");
    }
    if group_id.is_empty() {
        return bad("GroupId can't be empty.");
    }
    if hb.rack_id.as_deref().is_some_and(str::is_empty) {
        return bad("RackId can't be empty.");
    }
    if hb.member_epoch == 0 && hb.subscribed_topics.as_ref().is_none_or(Vec::is_empty) {
        return bad("SubscribedTopicNames must be set in first request.");
    }
    if hb.member_epoch < -1 {
        return bad("MemberEpoch is invalid.");
    }
    Ok(())
}

/// What a heartbeat answers, and what the caller must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub member_epoch: i32,
    /// Included on a join, a full request, or when the member's partitions changed.
    pub assignment: Option<BTreeMap<uuid::Uuid, BTreeSet<i32>>>,
    /// Partitions to initialize now, at `initialize_epoch`.
    pub initialize: Vec<(uuid::Uuid, i32)>,
    pub initialize_epoch: i32,
}

/// A member as it joins: epoch 0, nothing subscribed or assigned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareMember {
    pub epoch: i32,
    pub previous_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: BTreeSet<String>,
    pub assigned: BTreeSet<(uuid::Uuid, i32)>,
    /// When the member is fenced if it does not heartbeat.
    pub deadline_ms: i64,
}

/// Limits and timings (`group.share.*`, or the group's own `share.*` configs).
#[derive(Debug, Clone, Copy)]
pub struct ShareGroupLimits {
    pub max_size: usize,
    pub session_timeout_ms: i64,
    pub heartbeat_interval_ms: i32,
    /// How long a partition stays "initializing" before it is asked for again (Kafka: twice
    /// `offsets.commit.timeout.ms`).
    pub initialize_retry_ms: i64,
}

impl Default for ShareGroupLimits {
    fn default() -> Self {
        ShareGroupLimits {
            max_size: 200,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            initialize_retry_ms: 10_000,
        }
    }
}

/// One share group.
#[derive(Debug, Clone, Default)]
pub struct ShareGroup {
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    target: BTreeMap<String, BTreeSet<(uuid::Uuid, i32)>>,
    /// Partitions whose share state exists.
    pub initialized: BTreeSet<(uuid::Uuid, i32)>,
    /// Partitions being initialized, and since when.
    initializing: BTreeMap<(uuid::Uuid, i32), i64>,
    /// A hash of the subscribed topics' names and partition counts the target was computed
    /// with (ShareGroupMetadata's `MetadataHash`).
    pub metadata_hash: i64,
}

impl ShareGroup {
    /// "Empty" or "Stable", as Kafka names a share group's state.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect()
    }

    /// Handles one heartbeat at `now_ms`; `topics` is the cluster's topics by name.
    pub fn heartbeat(
        &mut self,
        hb: &Heartbeat,
        topics: &BTreeMap<String, TopicInfo>,
        limits: ShareGroupLimits,
        now_ms: i64,
    ) -> Result<HeartbeatReply, HeartbeatError> {
        if hb.member_epoch == -1 {
            if self.members.remove(&hb.member_id).is_none() {
                return Err(HeartbeatError::UnknownMember);
            }
            self.target.remove(&hb.member_id);
            self.epoch += 1;
            return Ok(HeartbeatReply {
                member_epoch: -1,
                assignment: None,
                initialize: Vec::new(),
                initialize_epoch: self.epoch,
            });
        }
        let subscriptions_before = self.subscribed_topics();
        match self.members.get(&hb.member_id) {
            None if hb.member_epoch != 0 => return Err(HeartbeatError::UnknownMember),
            None if self.members.len() >= limits.max_size => return Err(HeartbeatError::GroupFull),
            None => {
                self.members
                    .insert(hb.member_id.clone(), ShareMember::default());
            }
            Some(m) => {
                let e = hb.member_epoch;
                if e > m.epoch || (e < m.epoch && e != m.previous_epoch) {
                    return Err(HeartbeatError::FencedEpoch);
                }
            }
        }
        let member = self.members.get_mut(&hb.member_id).expect("inserted above");
        let mut subscription_changed = false;
        if let Some(subs) = &hb.subscribed_topics {
            let subs: BTreeSet<String> = subs.iter().cloned().collect();
            subscription_changed = subs != member.subscribed;
            member.subscribed = subs;
        }
        if hb.rack_id.is_some() {
            member.rack_id = hb.rack_id.clone();
        }
        member.client_id = hb.client_id.clone();
        member.client_host = hb.client_host.clone();
        member.deadline_ms = now_ms + limits.session_timeout_ms;

        // The group epoch moves when a member's subscription (a new member's too), the
        // subscribed topics' partitions, or the initialized partitions the target could use
        // changed.
        let subscribed = self.subscribed_topics();
        let seen: BTreeMap<String, i32> = subscribed
            .iter()
            .filter_map(|t| topics.get(t).map(|(_, n)| (t.clone(), *n)))
            .collect();
        let assignable = self.assignable(topics, &subscribed);
        let targeted: BTreeSet<(uuid::Uuid, i32)> =
            self.target.values().flatten().copied().collect();
        let assignable_set: BTreeSet<(uuid::Uuid, i32)> = assignable
            .iter()
            .flat_map(|(t, ps)| {
                let id = topics[t].0;
                ps.iter().map(move |p| (id, *p))
            })
            .collect();
        if subscription_changed
            || subscribed != subscriptions_before
            || metadata_hash(&seen) != self.metadata_hash
            || assignable_set != targeted
        {
            self.epoch += 1;
            self.metadata_hash = metadata_hash(&seen);
        }
        if self.epoch > self.assignment_epoch {
            self.recompute_target(topics, &assignable);
        }
        let member = self.members.get_mut(&hb.member_id).expect("present");
        let target = self.target.get(&hb.member_id).cloned().unwrap_or_default();
        let changed = member.assigned != target;
        if member.epoch != self.assignment_epoch || changed {
            member.previous_epoch = member.epoch;
            member.epoch = self.assignment_epoch;
            member.assigned = target;
        }
        let full = hb.member_epoch == 0 || hb.subscribed_topics.is_some();
        let assignment = (full || changed).then(|| {
            let mut by_topic: BTreeMap<uuid::Uuid, BTreeSet<i32>> = BTreeMap::new();
            for (t, p) in &member.assigned {
                by_topic.entry(*t).or_default().insert(*p);
            }
            by_topic
        });
        let member_epoch = member.epoch;
        let initialize = self.partitions_to_initialize(topics, &subscribed, limits, now_ms);
        Ok(HeartbeatReply {
            member_epoch,
            assignment,
            initialize,
            initialize_epoch: self.epoch,
        })
    }

    /// The initialized partitions of the subscribed topics, by topic name.
    fn assignable(
        &self,
        topics: &BTreeMap<String, TopicInfo>,
        subscribed: &BTreeSet<String>,
    ) -> BTreeMap<String, BTreeSet<i32>> {
        subscribed
            .iter()
            .filter_map(|t| {
                let (id, n) = topics.get(t)?;
                let ps: BTreeSet<i32> = (0..*n)
                    .filter(|p| self.initialized.contains(&(*id, *p)))
                    .collect();
                Some((t.clone(), ps))
            })
            .collect()
    }

    fn recompute_target(
        &mut self,
        topics: &BTreeMap<String, TopicInfo>,
        assignable: &BTreeMap<String, BTreeSet<i32>>,
    ) {
        let specs: BTreeMap<String, MemberSpec> = self
            .members
            .iter()
            .map(|(id, m)| {
                let current = m
                    .assigned
                    .iter()
                    .filter_map(|(tid, p)| {
                        topics
                            .iter()
                            .find(|(_, (i, _))| i == tid)
                            .map(|(name, _)| (name.clone(), *p))
                    })
                    .collect();
                (
                    id.clone(),
                    MemberSpec {
                        topics: m.subscribed.clone(),
                        current,
                    },
                )
            })
            .collect();
        self.target = assignor::assign(&specs, assignable)
            .into_iter()
            .map(|(m, tps)| {
                let ids = tps
                    .into_iter()
                    .filter_map(|(t, p)| topics.get(&t).map(|(id, _)| (*id, p)))
                    .collect();
                (m, ids)
            })
            .collect();
        self.assignment_epoch = self.epoch;
    }

    /// Subscribed partitions neither initialized nor being initialized (recently); they are
    /// marked as being initialized now.
    fn partitions_to_initialize(
        &mut self,
        topics: &BTreeMap<String, TopicInfo>,
        subscribed: &BTreeSet<String>,
        limits: ShareGroupLimits,
        now_ms: i64,
    ) -> Vec<(uuid::Uuid, i32)> {
        let mut out = Vec::new();
        for t in subscribed {
            let Some((id, n)) = topics.get(t) else {
                continue;
            };
            for p in 0..*n {
                let tp = (*id, p);
                if self.initialized.contains(&tp) {
                    continue;
                }
                let recent = self
                    .initializing
                    .get(&tp)
                    .is_some_and(|since| now_ms - since < limits.initialize_retry_ms);
                if !recent {
                    self.initializing.insert(tp, now_ms);
                    out.push(tp);
                }
            }
        }
        out
    }

    /// The caller's InitializeShareGroupState for `partitions` succeeded.
    pub fn initialized(&mut self, partitions: &[(uuid::Uuid, i32)]) {
        for tp in partitions {
            self.initializing.remove(tp);
            self.initialized.insert(*tp);
        }
    }

    /// It failed: they may be asked for again at once.
    pub fn initialize_failed(&mut self, partitions: &[(uuid::Uuid, i32)]) {
        for tp in partitions {
            self.initializing.remove(tp);
        }
    }

    /// Fences the members whose session expired by `now_ms`; their ids.
    pub fn expire(&mut self, now_ms: i64) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.deadline_ms <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            self.members.remove(id);
            self.target.remove(id);
        }
        if !gone.is_empty() {
            self.epoch += 1;
        }
        gone
    }
}

/// A share-group record: key and value (`None`: tombstone).
pub type Record = (GroupKey, Option<GroupValue>);

impl ShareGroup {
    /// Every record that describes the group now (`names`: topic names by id, for the
    /// state-partition record).
    pub fn records(&self, group: &str, names: &BTreeMap<uuid::Uuid, String>) -> Vec<Record> {
        let g = || group.to_string();
        let by_topic = |tps: &BTreeSet<(uuid::Uuid, i32)>| -> Vec<TopicPartitions> {
            let mut m: BTreeMap<uuid::Uuid, Vec<i32>> = BTreeMap::new();
            for (t, p) in tps {
                m.entry(*t).or_default().push(*p);
            }
            m.into_iter().collect()
        };
        let infos = |tps: &mut dyn Iterator<Item = (uuid::Uuid, i32)>| {
            let mut m: BTreeMap<uuid::Uuid, Vec<i32>> = BTreeMap::new();
            for (t, p) in tps {
                m.entry(t).or_default().push(p);
            }
            m.into_iter()
                .map(|(id, partitions)| TopicPartitionsInfo {
                    id,
                    name: names.get(&id).cloned().unwrap_or_default(),
                    partitions,
                })
                .collect::<Vec<_>>()
        };
        let mut out: Vec<Record> = vec![
            (
                GroupKey::Metadata { group: g() },
                Some(GroupValue::Metadata {
                    epoch: self.epoch,
                    metadata_hash: self.metadata_hash,
                }),
            ),
            (
                GroupKey::TargetAssignmentMetadata { group: g() },
                Some(GroupValue::TargetAssignmentMetadata {
                    assignment_epoch: self.assignment_epoch,
                }),
            ),
            (
                GroupKey::StatePartitionMetadata { group: g() },
                Some(GroupValue::StatePartitionMetadata {
                    initializing: infos(&mut self.initializing.keys().copied()),
                    initialized: infos(&mut self.initialized.iter().copied()),
                    deleting: Vec::new(),
                }),
            ),
        ];
        for (id, m) in &self.members {
            let member = || id.clone();
            out.push((
                GroupKey::MemberMetadata {
                    group: g(),
                    member: member(),
                },
                Some(GroupValue::MemberMetadata {
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topics: m.subscribed.iter().cloned().collect(),
                }),
            ));
            out.push((
                GroupKey::TargetAssignmentMember {
                    group: g(),
                    member: member(),
                },
                Some(GroupValue::TargetAssignmentMember {
                    partitions: by_topic(&self.target.get(id).cloned().unwrap_or_default()),
                }),
            ));
            out.push((
                GroupKey::CurrentMemberAssignment {
                    group: g(),
                    member: member(),
                },
                Some(GroupValue::CurrentMemberAssignment {
                    member_epoch: m.epoch,
                    previous_member_epoch: m.previous_epoch,
                    state: 0,
                    partitions: by_topic(&m.assigned),
                }),
            ));
        }
        out
    }

    /// The records that turn `before`'s into this group's: the changed ones, and tombstones
    /// for the keys that are gone (a member's three records when it left).
    pub fn delta(
        &self,
        before: &ShareGroup,
        group: &str,
        names: &BTreeMap<uuid::Uuid, String>,
    ) -> Vec<Record> {
        let old = before.records(group, names);
        let new = self.records(group, names);
        let mut out: Vec<Record> = new.iter().filter(|r| !old.contains(r)).cloned().collect();
        for (k, _) in &old {
            if !new.iter().any(|(nk, _)| nk == k) {
                out.push((k.clone(), None));
            }
        }
        out
    }

    /// Applies one record read back from `__consumer_offsets` (in log order). Session
    /// deadlines are not stored: [`ShareGroup::rearm`] them once loaded.
    pub fn replay(&mut self, key: &GroupKey, value: Option<&GroupValue>) {
        let flat = |tps: &[TopicPartitions]| -> BTreeSet<(uuid::Uuid, i32)> {
            tps.iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                .collect()
        };
        match (key, value) {
            (
                GroupKey::Metadata { .. },
                Some(GroupValue::Metadata {
                    epoch,
                    metadata_hash,
                }),
            ) => {
                self.epoch = *epoch;
                self.metadata_hash = *metadata_hash;
            }
            (
                GroupKey::TargetAssignmentMetadata { .. },
                Some(GroupValue::TargetAssignmentMetadata { assignment_epoch }),
            ) => self.assignment_epoch = *assignment_epoch,
            (
                GroupKey::StatePartitionMetadata { .. },
                Some(GroupValue::StatePartitionMetadata {
                    initializing,
                    initialized,
                    ..
                }),
            ) => {
                let flat_infos = |v: &[TopicPartitionsInfo]| -> Vec<(uuid::Uuid, i32)> {
                    v.iter()
                        .flat_map(|i| i.partitions.iter().map(move |p| (i.id, *p)))
                        .collect()
                };
                // Asked for again at once: when they were asked is not stored.
                self.initializing = flat_infos(initializing)
                    .into_iter()
                    .map(|tp| (tp, i64::MIN / 2))
                    .collect();
                self.initialized = flat_infos(initialized).into_iter().collect();
            }
            (
                GroupKey::MemberMetadata { member, .. },
                Some(GroupValue::MemberMetadata {
                    rack_id,
                    client_id,
                    client_host,
                    topics,
                }),
            ) => {
                let m = self.members.entry(member.clone()).or_default();
                m.rack_id = rack_id.clone();
                m.client_id = client_id.clone();
                m.client_host = client_host.clone();
                m.subscribed = topics.iter().cloned().collect();
            }
            (
                GroupKey::TargetAssignmentMember { member, .. },
                Some(GroupValue::TargetAssignmentMember { partitions }),
            ) => {
                self.target.insert(member.clone(), flat(partitions));
            }
            (
                GroupKey::CurrentMemberAssignment { member, .. },
                Some(GroupValue::CurrentMemberAssignment {
                    member_epoch,
                    previous_member_epoch,
                    partitions,
                    ..
                }),
            ) => {
                if let Some(m) = self.members.get_mut(member) {
                    m.epoch = *member_epoch;
                    m.previous_epoch = *previous_member_epoch;
                    m.assigned = flat(partitions);
                }
            }
            (GroupKey::MemberMetadata { member, .. }, None) => {
                self.members.remove(member);
            }
            (GroupKey::TargetAssignmentMember { member, .. }, None) => {
                self.target.remove(member);
            }
            // Other tombstones belong to a deleted group (the host drops it) or to a member
            // already gone; a value of the wrong kind is not the host's to send.
            _ => {}
        }
    }

    /// Gives every member a full session from `now_ms` (after a load).
    pub fn rearm(&mut self, now_ms: i64, session_timeout_ms: i64) {
        for m in self.members.values_mut() {
            m.deadline_ms = now_ms + session_timeout_ms;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(member: &str, epoch: i32, topics: Option<&[&str]>) -> Heartbeat {
        Heartbeat {
            member_id: member.into(),
            member_epoch: epoch,
            rack_id: None,
            subscribed_topics: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
        }
    }

    fn topics() -> BTreeMap<String, TopicInfo> {
        [("t".to_string(), (uuid::Uuid::from_u128(1), 2))].into()
    }

    fn count(r: &HeartbeatReply) -> usize {
        r.assignment
            .as_ref()
            .map_or(0, |a| a.values().map(BTreeSet::len).sum())
    }

    #[test]
    fn the_first_assignment_comes_once_the_partitions_are_initialized() {
        let mut g = ShareGroup::default();
        let lim = ShareGroupLimits::default();
        let r = g
            .heartbeat(&hb("a", 0, Some(&["t"])), &topics(), lim, 0)
            .unwrap();
        assert_eq!(count(&r), 0);
        assert_eq!(r.initialize.len(), 2);
        assert_eq!(g.state(), "Stable");
        // Asked again within the retry time: not handed out twice.
        let r2 = g
            .heartbeat(&hb("a", r.member_epoch, None), &topics(), lim, 5)
            .unwrap();
        assert!(r2.initialize.is_empty());
        g.initialized(&r.initialize);
        let r3 = g
            .heartbeat(&hb("a", r2.member_epoch, None), &topics(), lim, 10)
            .unwrap();
        assert!(r3.member_epoch > r2.member_epoch);
        assert_eq!(count(&r3), 2);
        // A second member gets partitions too (both may share them).
        let rb = g
            .heartbeat(&hb("b", 0, Some(&["t"])), &topics(), lim, 20)
            .unwrap();
        assert!(count(&rb) >= 1);
    }

    #[test]
    fn epochs_fence_stale_members_and_leave_and_expiry_remove_them() {
        let mut g = ShareGroup::default();
        let lim = ShareGroupLimits::default();
        assert_eq!(
            g.heartbeat(&hb("a", 3, None), &topics(), lim, 0),
            Err(HeartbeatError::UnknownMember)
        );
        let r = g
            .heartbeat(&hb("a", 0, Some(&["t"])), &topics(), lim, 0)
            .unwrap();
        g.initialized(&r.initialize);
        let r = g
            .heartbeat(&hb("a", r.member_epoch, None), &topics(), lim, 1)
            .unwrap();
        assert_eq!(
            g.heartbeat(&hb("a", r.member_epoch + 1, None), &topics(), lim, 2),
            Err(HeartbeatError::FencedEpoch)
        );
        let left = g.heartbeat(&hb("a", -1, None), &topics(), lim, 3).unwrap();
        assert_eq!(left.member_epoch, -1);
        assert_eq!(g.state(), "Empty");
        g.heartbeat(&hb("b", 0, Some(&["t"])), &topics(), lim, 10)
            .unwrap();
        assert!(g.expire(10 + lim.session_timeout_ms - 1).is_empty());
        assert_eq!(g.expire(10 + lim.session_timeout_ms), vec!["b".to_string()]);
        let full = ShareGroupLimits { max_size: 0, ..lim };
        assert_eq!(
            g.heartbeat(&hb("c", 0, Some(&["t"])), &topics(), full, 0),
            Err(HeartbeatError::GroupFull)
        );
    }

    #[test]
    fn requests_are_checked_for_shape_with_kafkas_messages() {
        let err = |g: &str, h: Heartbeat| match validate(g, &h) {
            Err(HeartbeatError::InvalidRequest(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err("g", hb(" ", 0, Some(&["t"]))),
            "MemberId can't be empty."
        );
        assert_eq!(err("", hb("a", 0, Some(&["t"]))), "GroupId can't be empty.");
        assert_eq!(
            err("g", hb("a", 0, None)),
            "SubscribedTopicNames must be set in first request."
        );
        assert_eq!(err("g", hb("a", -2, None)), "MemberEpoch is invalid.");
        let mut rack = hb("a", 1, None);
        rack.rack_id = Some(String::new());
        assert_eq!(err("g", rack), "RackId can't be empty.");
        assert!(validate("g", &hb("a", 1, None)).is_ok());
    }

    #[test]
    fn records_replayed_in_order_rebuild_the_group_and_a_leave_is_tombstoned() {
        let mut g = ShareGroup::default();
        let lim = ShareGroupLimits::default();
        let names: BTreeMap<uuid::Uuid, String> =
            [(uuid::Uuid::from_u128(1), "t".to_string())].into();
        let mut log: Vec<Record> = Vec::new();
        let mut step = |g: &mut ShareGroup, f: &mut dyn FnMut(&mut ShareGroup)| {
            let before = g.clone();
            f(g);
            log.extend(g.delta(&before, "grp", &names));
        };
        let mut init = Vec::new();
        step(&mut g, &mut |g| {
            init = g
                .heartbeat(&hb("a", 0, Some(&["t"])), &topics(), lim, 0)
                .unwrap()
                .initialize;
        });
        step(&mut g, &mut |g| g.initialized(&init));
        step(&mut g, &mut |g| {
            g.heartbeat(&hb("b", 0, Some(&["t"])), &topics(), lim, 1)
                .unwrap();
        });
        step(&mut g, &mut |g| {
            let e = g.members["a"].epoch;
            g.heartbeat(&hb("a", e, None), &topics(), lim, 2).unwrap();
        });
        // Through the wire format.
        let decoded: Vec<Record> = log
            .iter()
            .map(|(k, v)| {
                let k2 = GroupKey::decode(&k.encode()).unwrap().unwrap();
                let v2 = v
                    .as_ref()
                    .map(|v| GroupValue::decode(&k2, &v.encode()).unwrap());
                (k2, v2)
            })
            .collect();
        let mut back = ShareGroup::default();
        for (k, v) in &decoded {
            back.replay(k, v.as_ref());
        }
        back.rearm(0, lim.session_timeout_ms);
        let mut want = g.clone();
        want.rearm(0, lim.session_timeout_ms);
        assert_eq!(back.records("grp", &names), want.records("grp", &names));
        assert_eq!(back.members, want.members);
        // b leaves: its records are tombstoned and replay drops it.
        let before = g.clone();
        g.heartbeat(&hb("b", -1, None), &topics(), lim, 3).unwrap();
        let d = g.delta(&before, "grp", &names);
        assert!(d.iter().any(|(k, v)| v.is_none()
            && *k
                == GroupKey::MemberMetadata {
                    group: "grp".into(),
                    member: "b".into()
                }));
        for (k, v) in &d {
            back.replay(k, v.as_ref());
        }
        assert!(!back.members.contains_key("b"));
        assert_eq!(back.epoch, g.epoch);
    }
}
