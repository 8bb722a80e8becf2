//! KIP-848 ("consumer" protocol) group state: members with epochs, a target assignment computed
//! here by a server-side assignor (uniform or range), and per-member incremental reconciliation
//! (Kafka `CurrentAssignmentBuilder`): a member only receives a partition once its previous
//! owner has acknowledged revoking it.
//!
//! Pure state, no I/O and no clock: the caller ([`super::GroupCoordinator`]) passes `now` and a
//! view of the topic metadata, persists the group snapshot after a change and owns the offsets.
//!
//! Invariants: the target epoch never exceeds the group epoch; a member's epoch never exceeds
//! the target epoch; a partition is held (assigned or pending revocation) by at most one member.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::codes::*;

/// Partitions by topic id.
pub type Parts = BTreeMap<Uuid, BTreeSet<i32>>;

/// The topics a heartbeat can subscribe to: name → (topic id, partition count).
pub type TopicView = BTreeMap<String, (Uuid, i32)>;

/// Member epoch sent by a member leaving the group.
pub const LEAVE_EPOCH: i32 = -1;
/// Member epoch sent by a static member leaving temporarily (its assignment is kept).
pub const STATIC_LEAVE_EPOCH: i32 = -2;
/// Assignors served (group.consumer.assignors); the first is the default.
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// A ConsumerGroupHeartbeat request.
#[derive(Debug, Clone, Default)]
pub struct CgHeartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    /// None: unchanged.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// None: unchanged since the last heartbeat.
    pub owned: Option<Parts>,
    pub client_id: String,
    pub client_host: String,
    pub api_version: i16,
}

/// A ConsumerGroupHeartbeat response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CgHeartbeatResponse {
    pub error: i16,
    pub message: Option<String>,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Sent when the member must (re)learn its assignment.
    pub assignment: Option<Parts>,
}

impl CgHeartbeatResponse {
    pub(crate) fn error(error: i16, message: impl Into<String>) -> CgHeartbeatResponse {
        CgHeartbeatResponse {
            error,
            message: Some(message.into()),
            ..Default::default()
        }
    }
}

/// Reconciliation state of a member (Kafka `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberState {
    Stable,
    /// Must revoke `revoking` before its epoch advances.
    UnrevokedPartitions,
    /// At the target epoch but waits for partitions other members still hold.
    UnreleasedPartitions,
}

mod parts_serde {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(p: &Parts, s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<(String, &BTreeSet<i32>)> = p.iter().map(|(k, v)| (k.to_string(), v)).collect();
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Parts, D::Error> {
        let v: Vec<(String, BTreeSet<i32>)> = Vec::deserialize(d)?;
        v.into_iter()
            .map(|(k, p)| {
                Uuid::parse_str(&k)
                    .map(|u| (u, p))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

mod target_serde {
    use super::*;
    use serde::{Deserializer, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Entry(String, #[serde(with = "parts_serde")] Parts);

    pub(super) fn serialize<S: Serializer>(
        t: &BTreeMap<String, Parts>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let v: Vec<Entry> = t.iter().map(|(k, p)| Entry(k.clone(), p.clone())).collect();
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Parts>, D::Error> {
        let v: Vec<Entry> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|Entry(k, p)| (k, p)).collect())
    }
}

mod view_serde {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(t: &TopicView, s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<(&String, String, i32)> = t
            .iter()
            .map(|(k, (id, n))| (k, id.to_string(), *n))
            .collect();
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TopicView, D::Error> {
        let v: Vec<(String, String, i32)> = Vec::deserialize(d)?;
        v.into_iter()
            .map(|(k, id, n)| {
                Uuid::parse_str(&id)
                    .map(|u| (k, (u, n)))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

/// One member of a consumer group.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    /// Sorted, deduplicated.
    pub subscribed: Vec<String>,
    pub regex: Option<String>,
    pub server_assignor: Option<String>,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    #[serde(with = "parts_serde")]
    pub assigned: Parts,
    #[serde(with = "parts_serde")]
    pub revoking: Parts,
    /// Set for a member that speaks the classic protocol (JoinGroup / SyncGroup / Heartbeat)
    /// inside this group (Kafka 4.1's online migration).
    #[serde(default)]
    pub classic: Option<ClassicMeta>,
    #[serde(skip)]
    pub(crate) session_deadline: i64,
    #[serde(skip)]
    pub(crate) revoke_deadline: Option<i64>,
    /// Classic member told to rejoin (REBALANCE_IN_PROGRESS): fenced if it has not rejoined
    /// by then (Kafka's classic join timer, armed once).
    #[serde(skip)]
    pub(crate) join_deadline: Option<i64>,
    /// Classic member answered a JoinGroup: fenced if no SyncGroup by then.
    #[serde(skip)]
    pub(crate) sync_deadline: Option<i64>,
}

/// What a classic-protocol member of a consumer group joined with (Kafka's
/// ClassicMemberMetadata, persisted with the member).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ClassicMeta {
    pub session_timeout_ms: i32,
    /// (protocol name, metadata) in the member's preference order; the metadata is a
    /// ConsumerProtocolSubscription.
    pub protocols: Vec<(String, Vec<u8>)>,
}

/// A consumer-protocol group (without its offsets, which the coordinator keeps for both kinds).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ConsumerGroup {
    pub epoch: i32,
    pub target_epoch: i32,
    pub members: BTreeMap<String, CMember>,
    #[serde(with = "target_serde")]
    pub target: BTreeMap<String, Parts>,
    /// Metadata of the subscribed topics when the target was last computed: a change (partitions
    /// added, topic created or recreated) bumps the group epoch.
    #[serde(with = "view_serde")]
    pub subscribed_meta: TopicView,
}

/// Kafka's consumer group states as clients display them.
pub fn state_name(g: &ConsumerGroup) -> &'static str {
    if g.members.is_empty() {
        "Empty"
    } else if g.target_epoch != g.epoch {
        "Assigning"
    } else if g
        .members
        .values()
        .any(|m| m.epoch != g.target_epoch || m.state != MemberState::Stable)
    {
        "Reconciling"
    } else {
        "Stable"
    }
}

fn parts_len(p: &Parts) -> usize {
    p.values().map(|s| s.len()).sum()
}

fn is_subset(a: &Parts, b: &Parts) -> bool {
    a.iter().all(|(t, ps)| {
        ps.is_empty() || b.get(t).is_some_and(|bs| ps.iter().all(|p| bs.contains(p)))
    })
}

fn intersects(a: &Parts, b: &Parts) -> bool {
    a.iter()
        .any(|(t, ps)| b.get(t).is_some_and(|bs| ps.iter().any(|p| bs.contains(p))))
}

fn normalize(mut p: Parts) -> Parts {
    p.retain(|_, s| !s.is_empty());
    p
}

/// Tunables of consumer groups (Kafka names).
#[derive(Debug, Clone, Copy)]
pub struct CgLimits {
    /// group.consumer.session.timeout.ms
    pub session_timeout_ms: i32,
    /// group.consumer.heartbeat.interval.ms
    pub heartbeat_interval_ms: i32,
    /// group.consumer.max.size
    pub max_size: usize,
}

impl ConsumerGroup {
    /// Topics any member subscribes to (names and regex matches) that exist in `topics`.
    pub(crate) fn subscribed_view(&self, topics: &TopicView) -> TopicView {
        let mut out = TopicView::new();
        for m in self.members.values() {
            if m.epoch == STATIC_LEAVE_EPOCH && m.subscribed.is_empty() && m.regex.is_none() {
                continue;
            }
            for t in m.topics(topics) {
                if let Some(v) = topics.get(&t) {
                    out.insert(t, *v);
                }
            }
        }
        out
    }

    /// Partition → member holding it (assigned or pending revocation).
    fn holders(&self) -> BTreeMap<(Uuid, i32), String> {
        let mut h = BTreeMap::new();
        for m in self.members.values() {
            for (t, ps) in m.assigned.iter().chain(m.revoking.iter()) {
                for p in ps {
                    h.insert((*t, *p), m.id.clone());
                }
            }
        }
        h
    }

    /// The assignor the group uses: the one most members ask for, else the default.
    pub fn assignor(&self) -> &'static str {
        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.server_assignor.as_deref() {
                if let Some(known) = ASSIGNORS.iter().find(|x| **x == a) {
                    *counts.entry(known).or_default() += 1;
                }
            }
        }
        counts
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(a, _)| a)
            .unwrap_or(ASSIGNORS[0])
    }

    fn compute_target(&mut self, topics: &TopicView) {
        let subs: BTreeMap<String, BTreeSet<(Uuid, i32)>> = self
            .members
            .values()
            .map(|m| {
                let topics_of: BTreeSet<(Uuid, i32)> = m
                    .topics(topics)
                    .into_iter()
                    .filter_map(|t| topics.get(&t).copied())
                    .collect();
                (m.id.clone(), topics_of)
            })
            .collect();
        self.target = match self.assignor() {
            "range" => range_assign(&subs),
            _ => uniform_assign(&subs, &self.target),
        };
        self.target_epoch = self.epoch;
    }

    /// Advances `member_id` towards its target assignment (Kafka `CurrentAssignmentBuilder`).
    /// `owned` is what the member reported, None if it did not say.
    fn reconcile(&mut self, member_id: &str, owned: Option<&Parts>, now: i64) {
        let holders = self.holders();
        let target_epoch = self.target_epoch;
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let m = self.members.get_mut(member_id).expect("member present");
        let owns = |revoking: &Parts| owned.is_none_or(|o| intersects(o, revoking));
        let advance = match m.state {
            MemberState::Stable => m.epoch != target_epoch,
            MemberState::UnrevokedPartitions => !owns(&m.revoking),
            MemberState::UnreleasedPartitions => true,
        };
        if !advance {
            return;
        }
        let mut kept = Parts::new();
        let mut revoke = Parts::new();
        for (t, ps) in &m.assigned {
            for p in ps {
                let to = if target.get(t).is_some_and(|s| s.contains(p)) {
                    &mut kept
                } else {
                    &mut revoke
                };
                to.entry(*t).or_default().insert(*p);
            }
        }
        let mut free = kept.clone();
        let mut unreleased = false;
        for (t, ps) in &target {
            for p in ps {
                if m.assigned.get(t).is_some_and(|s| s.contains(p)) {
                    continue;
                }
                match holders.get(&(*t, *p)) {
                    Some(h) if h != member_id => unreleased = true,
                    _ => {
                        free.entry(*t).or_default().insert(*p);
                    }
                }
            }
        }
        let set_epoch = |m: &mut CMember| {
            if m.epoch != target_epoch {
                m.previous_epoch = m.epoch;
                m.epoch = target_epoch;
            }
        };
        if !revoke.is_empty() && owns(&revoke) {
            m.state = MemberState::UnrevokedPartitions;
            m.assigned = kept;
            m.revoking = revoke;
            m.revoke_deadline = Some(now + m.rebalance_timeout_ms.max(0) as i64);
        } else if unreleased {
            set_epoch(m);
            m.state = MemberState::UnreleasedPartitions;
            m.assigned = normalize(free);
            m.revoking.clear();
            m.revoke_deadline = None;
        } else {
            set_epoch(m);
            m.state = MemberState::Stable;
            m.assigned = normalize(target);
            m.revoking.clear();
            m.revoke_deadline = None;
        }
    }

    /// Removes a member (left, fenced or expired); the group epoch moves on.
    pub(crate) fn remove_member(&mut self, member_id: &str) -> bool {
        self.fence(&[member_id.to_string()])
    }

    /// Drops members whose session or revocation deadline passed (for classic members: their
    /// join or sync deadline). Returns whether any went.
    pub(crate) fn expire(&mut self, group_id: &str, now: i64) -> bool {
        let due = |d: Option<i64>| d.is_some_and(|d| d <= now);
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.session_deadline <= now
                    || due(m.revoke_deadline)
                    || due(m.join_deadline)
                    || due(m.sync_deadline)
            })
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            tracing::info!(group = %group_id, member = %id, "consumer group member expired");
        }
        self.fence(&gone)
    }

    /// Removes members at once (left, fenced or expired): the group epoch moves on by one.
    pub(crate) fn fence(&mut self, ids: &[String]) -> bool {
        let mut any = false;
        for id in ids {
            if self.members.remove(id).is_some() {
                self.target.remove(id);
                any = true;
            }
        }
        if any {
            self.epoch += 1;
        }
        any
    }

    /// Whether every member speaks the classic protocol (and there is one).
    pub(crate) fn only_classic_members(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.classic.is_some())
    }

    /// Whether `protocols` has a name every classic member supports (Kafka
    /// `ConsumerGroup.supportsClassicProtocols`).
    fn supports_classic(&self, protocol_type: &str, protocols: &[(String, bytes::Bytes)]) -> bool {
        if protocol_type != "consumer" || protocols.is_empty() {
            return false;
        }
        let classic: Vec<&ClassicMeta> = self
            .members
            .values()
            .filter_map(|m| m.classic.as_ref())
            .collect();
        protocols.iter().any(|(name, _)| {
            classic
                .iter()
                .all(|c| c.protocols.iter().any(|(n, _)| n == name))
        })
    }

    /// Whether a partition of `member_id`'s target is still held by another member.
    fn waiting_on_unreleased(&self, member_id: &str) -> bool {
        let Some(target) = self.target.get(member_id) else {
            return false;
        };
        let holders = self.holders();
        target.iter().any(|(t, ps)| {
            ps.iter()
                .any(|p| holders.get(&(*t, *p)).is_some_and(|h| h != member_id))
        })
    }

    /// The classic member `member_id` (with `instance_id` if static), as SyncGroup, Heartbeat
    /// and LeaveGroup check it: UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID.
    fn classic_member(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<&mut CMember, i16> {
        if let Some(i) = instance_id {
            match self
                .members
                .values()
                .find(|m| m.instance_id.as_deref() == Some(i))
            {
                None => return Err(UNKNOWN_MEMBER_ID),
                Some(m) if m.id != member_id => return Err(FENCED_INSTANCE_ID),
                Some(_) => {}
            }
        }
        match self.members.get_mut(member_id) {
            Some(m) if m.classic.is_some() => Ok(m),
            _ => Err(UNKNOWN_MEMBER_ID),
        }
    }

    /// JoinGroup of a classic member (Kafka `classicGroupJoinToConsumerGroup`): the member's
    /// subscription and owned partitions come from its first protocol's metadata; it is
    /// reconciled like a consumer member and answered at once, as a follower, with its member
    /// epoch as the generation. Errors carry the member id to answer with.
    pub(crate) fn classic_join(
        &mut self,
        req: &super::JoinRequest,
        topics: &TopicView,
        limits: CgLimits,
        now: i64,
    ) -> Result<ClassicJoined, (i16, String)> {
        let err = |code| Err((code, req.member_id.clone()));
        let member_id = if req.member_id.is_empty() {
            Uuid::new_v4().to_string()
        } else {
            req.member_id.clone()
        };
        if !self.members.contains_key(&member_id) && self.members.len() >= limits.max_size {
            return err(GROUP_MAX_SIZE_REACHED);
        }
        if !self.supports_classic(&req.protocol_type, &req.protocols) {
            return err(INCONSISTENT_GROUP_PROTOCOL);
        }
        if req.require_known_member_id
            && req.member_id.is_empty()
            && req.group_instance_id.is_none()
        {
            return Err((MEMBER_ID_REQUIRED, member_id));
        }
        let Some(sub) = super::embedded::read_subscription(&req.protocols[0].1) else {
            return err(UNKNOWN_SERVER_ERROR);
        };
        let mut joined = false;
        match req.group_instance_id.as_deref() {
            Some(instance) => {
                let prev = self
                    .members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(instance))
                    .map(|m| m.id.clone());
                match prev {
                    Some(prev) if req.member_id.is_empty() => {
                        // A restarted static member takes over its predecessor's assignment.
                        let mut m = self.members.remove(&prev).expect("found");
                        if let Some(t) = self.target.remove(&prev) {
                            self.target.insert(member_id.clone(), t);
                        }
                        m.id = member_id.clone();
                        m.epoch = 0;
                        self.members.insert(member_id.clone(), m);
                    }
                    None if req.member_id.is_empty() => joined = true,
                    None => return err(UNKNOWN_MEMBER_ID),
                    Some(prev) if prev != member_id => return err(FENCED_INSTANCE_ID),
                    Some(_) => {}
                }
            }
            None => joined = !self.members.contains_key(&member_id),
        }
        let m = self
            .members
            .entry(member_id.clone())
            .or_insert_with(|| CMember::new(&member_id));
        m.instance_id = req.group_instance_id.clone();
        m.client_id = req.client_id.clone();
        m.client_host = req.client_host.clone();
        m.rack_id = sub.rack_id.clone();
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        m.classic = Some(ClassicMeta {
            session_timeout_ms: req.session_timeout_ms,
            protocols: req
                .protocols
                .iter()
                .map(|(n, b)| (n.clone(), b.to_vec()))
                .collect(),
        });
        let mut subscribed = sub.topics.clone();
        subscribed.sort();
        subscribed.dedup();
        let changed = joined || subscribed != m.subscribed || m.regex.is_some();
        m.subscribed = subscribed;
        m.regex = None;
        let view = self.subscribed_view(topics);
        if changed || view != self.subscribed_meta {
            self.subscribed_meta = view;
            self.epoch += 1;
        }
        if self.target_epoch < self.epoch {
            self.compute_target(topics);
        }
        let owned = ids_of(&sub.owned, topics);
        self.reconcile(&member_id, Some(&owned), now);
        let m = self.members.get_mut(&member_id).expect("present");
        // Classic members have join and sync timers instead of the revocation deadline.
        m.revoke_deadline = None;
        m.join_deadline = None;
        m.session_deadline = now + req.session_timeout_ms as i64;
        m.sync_deadline = Some(now + req.rebalance_timeout_ms.max(0) as i64);
        Ok(ClassicJoined {
            member_id,
            generation: m.epoch,
            protocol_name: req.protocols[0].0.clone(),
        })
    }

    /// SyncGroup of a classic member (Kafka `classicGroupSyncToConsumerGroup`): its current
    /// assignment (without partitions it must revoke or still waits for), in the consumer
    /// protocol version of its metadata. A leader's assignments are ignored.
    pub(crate) fn classic_sync(
        &mut self,
        req: &super::SyncRequest,
        topics: &TopicView,
        now: i64,
    ) -> Result<super::SyncResponse, i16> {
        let group_epoch = self.epoch;
        let m = self.classic_member(&req.member_id, req.group_instance_id.as_deref())?;
        if req.generation_id != m.epoch {
            return Err(ILLEGAL_GENERATION);
        }
        let meta = m.classic.as_ref().expect("classic member");
        let first = meta.protocols.first();
        if req
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != "consumer")
            || req
                .protocol_name
                .as_deref()
                .is_some_and(|n| first.is_none_or(|(f, _)| f != n))
        {
            return Err(INCONSISTENT_GROUP_PROTOCOL);
        }
        if group_epoch > m.epoch && m.state != MemberState::UnrevokedPartitions {
            m.join_deadline
                .get_or_insert(now + m.rebalance_timeout_ms.max(0) as i64);
            return Err(REBALANCE_IN_PROGRESS);
        }
        let version = first
            .and_then(|(_, b)| super::embedded::version(b))
            .unwrap_or(0);
        m.sync_deadline = None;
        m.session_deadline = now + meta.session_timeout_ms as i64;
        let assignment = super::embedded::write_assignment(&names_of(&m.assigned, topics), version);
        Ok(super::SyncResponse {
            error: NONE,
            protocol_type: req.protocol_type.clone(),
            protocol_name: req.protocol_name.clone(),
            assignment: assignment.into(),
        })
    }

    /// Heartbeat of a classic member (Kafka `classicGroupHeartbeatToConsumerGroup`):
    /// REBALANCE_IN_PROGRESS while the group epoch is ahead of the member's, while it must
    /// revoke, or when partitions it waited for are free: it then rejoins.
    pub(crate) fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: i64,
    ) -> i16 {
        let group_epoch = self.epoch;
        let waiting = self.waiting_on_unreleased(member_id);
        let m = match self.classic_member(member_id, instance_id) {
            Ok(m) => m,
            Err(e) => return e,
        };
        if generation != m.epoch {
            return ILLEGAL_GENERATION;
        }
        let session = m.classic.as_ref().map_or(0, |c| c.session_timeout_ms);
        m.session_deadline = now + session as i64;
        let rejoin = m.epoch < group_epoch
            || m.state == MemberState::UnrevokedPartitions
            || (m.state == MemberState::UnreleasedPartitions && !waiting);
        if rejoin {
            m.join_deadline
                .get_or_insert(now + m.rebalance_timeout_ms.max(0) as i64);
            return REBALANCE_IN_PROGRESS;
        }
        NONE
    }

    /// LeaveGroup in this group (Kafka `classicGroupLeaveToConsumerGroup`): one code per
    /// leaving identity; the valid ones are fenced together.
    pub(crate) fn classic_leave(&mut self, leaving: &[super::LeavingMember]) -> Vec<i16> {
        let mut gone = Vec::new();
        let codes = leaving
            .iter()
            .map(|l| {
                let by_instance = l.group_instance_id.as_deref().map(|i| {
                    self.members
                        .values()
                        .find(|m| m.instance_id.as_deref() == Some(i))
                        .map(|m| m.id.clone())
                });
                let id = match by_instance {
                    Some(None) => return UNKNOWN_MEMBER_ID,
                    Some(Some(id)) if !l.member_id.is_empty() && id != l.member_id => {
                        return FENCED_INSTANCE_ID
                    }
                    Some(Some(id)) => id,
                    None if self.members.contains_key(&l.member_id) => l.member_id.clone(),
                    None => return UNKNOWN_MEMBER_ID,
                };
                gone.push(id);
                NONE
            })
            .collect();
        self.fence(&gone);
        codes
    }

    /// Serves one heartbeat; also says whether the persisted state changed (a plain heartbeat
    /// only moves the session deadline, which is not persisted).
    pub(crate) fn heartbeat(
        &mut self,
        req: &CgHeartbeat,
        topics: &TopicView,
        limits: CgLimits,
        now: i64,
    ) -> (CgHeartbeatResponse, bool) {
        let before = (
            self.epoch,
            self.target_epoch,
            self.members.len(),
            self.members.get(&req.member_id).map(CMember::persisted),
        );
        let resp = self.heartbeat_inner(req, topics, limits, now);
        let id = resp.member_id.as_deref().unwrap_or(&req.member_id);
        let after = (
            self.epoch,
            self.target_epoch,
            self.members.len(),
            self.members.get(id).map(CMember::persisted),
        );
        (resp, before != after)
    }

    fn heartbeat_inner(
        &mut self,
        req: &CgHeartbeat,
        topics: &TopicView,
        limits: CgLimits,
        now: i64,
    ) -> CgHeartbeatResponse {
        let epoch = req.member_epoch;
        if epoch == LEAVE_EPOCH || epoch == STATIC_LEAVE_EPOCH {
            return self.leave(req, now);
        }
        let mut member_id = req.member_id.clone();
        let mut joined = false;
        if epoch == 0 {
            if member_id.is_empty() {
                member_id = Uuid::new_v4().simple().to_string();
            }
            let static_prev = req.instance_id.as_deref().and_then(|i| {
                self.members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(i))
                    .map(|m| (m.id.clone(), m.epoch))
            });
            match static_prev {
                Some((prev, e)) if prev != member_id => {
                    // A classic static member is replaced at once (Kafka does the same).
                    let prev_classic = self.members[&prev].classic.is_some();
                    if e != STATIC_LEAVE_EPOCH && !prev_classic {
                        return CgHeartbeatResponse::error(
                            UNRELEASED_INSTANCE_ID,
                            format!(
                                "Static member {prev} with the same instance id is still active."
                            ),
                        );
                    }
                    // A restarted static member takes over its predecessor's assignment.
                    let mut m = self.members.remove(&prev).expect("found");
                    if let Some(t) = self.target.remove(&prev) {
                        self.target.insert(member_id.clone(), t);
                    }
                    m.id = member_id.clone();
                    m.epoch = m.previous_epoch.max(0);
                    self.members.insert(member_id.clone(), m);
                }
                _ => {}
            }
            if !self.members.contains_key(&member_id) {
                if self.members.len() >= limits.max_size {
                    return CgHeartbeatResponse::error(
                        GROUP_MAX_SIZE_REACHED,
                        "The consumer group has reached its maximum capacity.",
                    );
                }
                self.members.insert(
                    member_id.clone(),
                    CMember {
                        instance_id: req.instance_id.clone(),
                        ..CMember::new(&member_id)
                    },
                );
                joined = true;
            }
        } else {
            let Some(m) = self.members.get(&member_id) else {
                return CgHeartbeatResponse::error(
                    UNKNOWN_MEMBER_ID,
                    format!(
                        "Member {member_id} is not a member of group {}.",
                        req.group_id
                    ),
                );
            };
            if epoch > m.epoch {
                return CgHeartbeatResponse::error(
                    FENCED_MEMBER_EPOCH,
                    format!(
                        "The member epoch {epoch} is larger than the expected {}.",
                        m.epoch
                    ),
                );
            }
            if epoch < m.epoch {
                // A lost response: the member may stay at its previous epoch if it owns no
                // partitions it was not given since.
                let lost_response = epoch == m.previous_epoch
                    && req.owned.as_ref().is_none_or(|o| is_subset(o, &m.assigned));
                if !lost_response {
                    return CgHeartbeatResponse::error(
                        FENCED_MEMBER_EPOCH,
                        format!(
                            "The member epoch {epoch} is smaller than the expected {}.",
                            m.epoch
                        ),
                    );
                }
            }
        }
        let before = self.members.get(&member_id).cloned().expect("present");
        let m = self.members.get_mut(&member_id).expect("present");
        // A member heartbeating with this API speaks the consumer protocol from now on.
        m.classic = None;
        m.join_deadline = None;
        m.sync_deadline = None;
        m.client_id = req.client_id.clone();
        m.client_host = req.client_host.clone();
        if req.rack_id.is_some() {
            m.rack_id = req.rack_id.clone();
        }
        if req.rebalance_timeout_ms > 0 {
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        if req.server_assignor.is_some() {
            m.server_assignor = req.server_assignor.clone();
        }
        let mut subscription_changed = false;
        if let Some(names) = &req.subscribed_topic_names {
            let mut n = names.clone();
            n.sort();
            n.dedup();
            subscription_changed |= n != m.subscribed;
            m.subscribed = n;
        }
        if let Some(r) = &req.subscribed_topic_regex {
            let r = (!r.is_empty()).then(|| r.clone());
            subscription_changed |= r != m.regex;
            m.regex = r;
        }
        m.session_deadline = now + limits.session_timeout_ms as i64;
        let assignor_changed = before.server_assignor != m.server_assignor;
        let view = self.subscribed_view(topics);
        let meta_changed = view != self.subscribed_meta;
        if joined || subscription_changed || meta_changed || assignor_changed {
            self.subscribed_meta = view;
            self.epoch += 1;
        }
        if self.target_epoch < self.epoch {
            self.compute_target(topics);
        }
        self.reconcile(&member_id, req.owned.as_ref(), now);
        let m = &self.members[&member_id];
        let send_assignment = epoch == 0
            || m.assigned != before.assigned
            || req
                .owned
                .as_ref()
                .is_some_and(|o| normalize(o.clone()) != m.assigned);
        CgHeartbeatResponse {
            error: NONE,
            message: None,
            member_id: Some(member_id.clone()),
            member_epoch: m.epoch,
            heartbeat_interval_ms: limits.heartbeat_interval_ms,
            assignment: send_assignment.then(|| m.assigned.clone()),
        }
    }

    fn leave(&mut self, req: &CgHeartbeat, now: i64) -> CgHeartbeatResponse {
        let id = &req.member_id;
        let ok = CgHeartbeatResponse {
            member_id: Some(id.clone()),
            member_epoch: req.member_epoch,
            ..Default::default()
        };
        let Some(m) = self.members.get_mut(id) else {
            return CgHeartbeatResponse::error(
                UNKNOWN_MEMBER_ID,
                format!("Member {id} is not a member of group {}.", req.group_id),
            );
        };
        if req.member_epoch == STATIC_LEAVE_EPOCH && m.instance_id.is_some() {
            // Keeps its partitions until the session times out or it comes back.
            if m.epoch != STATIC_LEAVE_EPOCH {
                m.previous_epoch = m.epoch;
                m.epoch = STATIC_LEAVE_EPOCH;
            }
            let _ = now;
            return ok;
        }
        self.remove_member(id);
        ok
    }

    /// Offset commit validation (Kafka `ConsumerGroup.validateOffsetCommit`).
    pub(crate) fn validate_commit(
        &self,
        member_id: &str,
        member_epoch: i32,
        transactional: bool,
        api_version: i16,
    ) -> Result<(), i16> {
        if member_epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let Some(m) = self.members.get(member_id) else {
            return Err(UNKNOWN_MEMBER_ID);
        };
        if m.classic.is_some() {
            // A classic member commits with its generation, any version.
            return if member_epoch == m.epoch {
                Ok(())
            } else {
                Err(ILLEGAL_GENERATION)
            };
        }
        if !transactional && api_version < 9 {
            return Err(UNSUPPORTED_VERSION);
        }
        if member_epoch != m.epoch {
            return Err(if transactional {
                ILLEGAL_GENERATION
            } else {
                STALE_MEMBER_EPOCH
            });
        }
        Ok(())
    }

    /// All topics members subscribe to (for OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC).
    pub(crate) fn subscribed_topics(&self, topics: &TopicView) -> BTreeSet<String> {
        self.members
            .values()
            .flat_map(|m| m.topics(topics))
            .collect()
    }

    pub(crate) fn restore_deadlines(&mut self, now: i64, session_timeout_ms: i32) {
        for m in self.members.values_mut() {
            m.session_deadline = now + session_timeout_ms as i64;
            if m.state == MemberState::UnrevokedPartitions {
                m.revoke_deadline = Some(now + m.rebalance_timeout_ms.max(0) as i64);
            }
        }
    }
}

impl CMember {
    /// A member that just joined: epoch 0, nothing assigned.
    pub(crate) fn new(id: &str) -> CMember {
        CMember {
            id: id.to_string(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            rebalance_timeout_ms: 300_000,
            subscribed: Vec::new(),
            regex: None,
            server_assignor: None,
            epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: Parts::new(),
            revoking: Parts::new(),
            classic: None,
            session_deadline: 0,
            revoke_deadline: None,
            join_deadline: None,
            sync_deadline: None,
        }
    }

    /// The member without its timers (what the log records).
    fn persisted(&self) -> CMember {
        CMember {
            session_deadline: 0,
            revoke_deadline: None,
            join_deadline: None,
            sync_deadline: None,
            ..self.clone()
        }
    }

    /// Topic names this member subscribes to: explicit names plus regex matches in `topics`.
    pub fn topics(&self, topics: &TopicView) -> Vec<String> {
        let mut out = self.subscribed.clone();
        if let Some(r) = &self.regex {
            // Kafka matches the whole name (RE2J `matches`).
            if let Ok(re) = regex::Regex::new(&format!("^(?:{r})$")) {
                out.extend(topics.keys().filter(|t| re.is_match(t)).cloned());
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// The answer to a classic member's JoinGroup in a consumer group.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClassicJoined {
    pub member_id: String,
    /// The member epoch after reconciliation: the generation its SyncGroup and Heartbeat send.
    pub generation: i32,
    /// The member's own first protocol.
    pub protocol_name: String,
}

/// Partitions named by topic → by topic id; topics not in `topics` are left out.
pub(crate) fn ids_of(named: &super::embedded::NamedParts, topics: &TopicView) -> Parts {
    named
        .iter()
        .filter_map(|(t, ps)| topics.get(t).map(|(id, _)| (*id, ps.clone())))
        .filter(|(_, ps)| !ps.is_empty())
        .collect()
}

/// Partitions by topic id → by name; ids of topics since deleted are left out.
pub(crate) fn names_of(parts: &Parts, topics: &TopicView) -> super::embedded::NamedParts {
    let by_id: BTreeMap<Uuid, &String> = topics.iter().map(|(n, (id, _))| (*id, n)).collect();
    parts
        .iter()
        .filter_map(|(id, ps)| by_id.get(id).map(|n| ((*n).clone(), ps.clone())))
        .collect()
}

/// Range assignor: per topic, its subscribers (sorted by member id) get contiguous ranges, the
/// first `partitions % members` one partition more.
pub fn range_assign(subs: &BTreeMap<String, BTreeSet<(Uuid, i32)>>) -> BTreeMap<String, Parts> {
    let mut out: BTreeMap<String, Parts> = subs.keys().map(|m| (m.clone(), Parts::new())).collect();
    let all: BTreeSet<(Uuid, i32)> = subs.values().flatten().copied().collect();
    for (topic, count) in all {
        let members: Vec<&String> = subs
            .iter()
            .filter(|(_, ts)| ts.contains(&(topic, count)))
            .map(|(m, _)| m)
            .collect();
        let n = members.len() as i32;
        let (base, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, m) in members.iter().enumerate() {
            let take = base + i32::from((i as i32) < extra);
            let set: BTreeSet<i32> = (next..next + take).collect();
            next += take;
            if !set.is_empty() {
                out.get_mut(*m).expect("member").insert(topic, set);
            }
        }
    }
    out
}

/// Uniform assignor: balanced (counts differ by at most one among members able to take a
/// partition) and sticky (a partition stays with its previous target owner when balance allows).
pub fn uniform_assign(
    subs: &BTreeMap<String, BTreeSet<(Uuid, i32)>>,
    previous: &BTreeMap<String, Parts>,
) -> BTreeMap<String, Parts> {
    let mut owner: BTreeMap<(Uuid, i32), String> = BTreeMap::new();
    let mut count: BTreeMap<&String, usize> = subs.keys().map(|m| (m, 0)).collect();
    let eligible = |m: &String, t: Uuid| {
        subs.get(m)
            .is_some_and(|ts| ts.iter().any(|(id, _)| *id == t))
    };
    let all: Vec<(Uuid, i32)> = subs
        .values()
        .flatten()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .flat_map(|(t, n)| (0..*n).map(move |p| (*t, p)))
        .collect();
    let valid: BTreeSet<(Uuid, i32)> = all.iter().copied().collect();
    for (m, parts) in previous {
        let Some(m) = subs.keys().find(|k| *k == m) else {
            continue;
        };
        for (t, ps) in parts {
            for p in ps {
                if valid.contains(&(*t, *p)) && eligible(m, *t) && !owner.contains_key(&(*t, *p)) {
                    owner.insert((*t, *p), m.clone());
                    *count.get_mut(m).expect("member") += 1;
                }
            }
        }
    }
    for tp in &all {
        if owner.contains_key(tp) {
            continue;
        }
        if let Some(m) = subs
            .keys()
            .filter(|m| eligible(m, tp.0))
            .min_by_key(|m| (count[*m], (*m).clone()))
        {
            owner.insert(*tp, m.clone());
            *count.get_mut(m).expect("member") += 1;
        }
    }
    // Move partitions from the fullest members until no eligible member has two fewer.
    loop {
        let mut moved = false;
        for tp in &all {
            let Some(from) = owner.get(tp).cloned() else {
                continue;
            };
            let to = subs
                .keys()
                .filter(|m| eligible(m, tp.0) && count[*m] + 1 < count[&from])
                .min_by_key(|m| (count[*m], (*m).clone()));
            if let Some(to) = to {
                let to = to.clone();
                *count.get_mut(&from).expect("member") -= 1;
                *count.get_mut(&to).expect("member") += 1;
                owner.insert(*tp, to);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: BTreeMap<String, Parts> = subs.keys().map(|m| (m.clone(), Parts::new())).collect();
    for ((t, p), m) in owner {
        out.get_mut(&m)
            .expect("member")
            .entry(t)
            .or_default()
            .insert(p);
    }
    out
}

/// Number of partitions in a `Parts`.
pub fn count(p: &Parts) -> usize {
    parts_len(p)
}
