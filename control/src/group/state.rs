//! The classic group state machine and offset store (see the module doc of `group`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use bytes::Bytes;

use super::codes::*;
use super::consumer::{
    ids_of, names_of, CMember, CgHeartbeat, CgHeartbeatResponse, CgLimits, ClassicMeta,
    ConsumerGroup, TopicView, LEAVE_EPOCH,
};
use super::embedded;
use super::record::{self, MemberRec, Rec};
use super::{
    subscription_topics, CommitContext, CommittedOffset, FetchedOffset, GroupConfig,
    GroupDescription, GroupListing, JoinRequest, JoinResponse, JoinedMember, LeavingMember,
    MemberDescription, OffsetToCommit, Reply, SyncRequest, SyncResponse, Token,
};
use crate::offsets_log::{RecordFile, StoreError};
use crate::share::group::ShareGroup;

#[path = "share_host.rs"]
mod share_host;
pub use share_host::{ShareGroupDescription, ShareHeartbeatOk};

const LOG_NAME: &str = "records.log";
/// Compact the offsets log after this many appends (superseded commits dominate the file).
const COMPACT_AFTER_APPENDS: u64 = 200_000;
/// How often empty groups without offsets are forgotten.
const CLEANUP_INTERVAL_MS: i64 = 60_000;

/// Kafka's classic group states; `as_str` gives the names clients display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn as_str(&self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

#[derive(Debug)]
struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    join_token: Option<Token>,
    sync_token: Option<Token>,
    /// Joined during the current rebalance; not yet part of a generation.
    is_new: bool,
    heartbeat_deadline: i64,
}

impl Member {
    fn metadata(&self, protocol: Option<&str>) -> Bytes {
        protocol
            .and_then(|p| self.protocols.iter().find(|(n, _)| n == p))
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn matches(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    fn vote(&self, candidates: &HashSet<String>) -> Option<String> {
        self.protocols
            .iter()
            .find(|(n, _)| candidates.contains(n))
            .map(|(n, _)| n.clone())
    }

    /// Kafka `hasSatisfiedHeartbeat` once the deadline passed: members parked in a join or
    /// sync are kept alive, except new members whose join may time out.
    fn kept_alive_while_parked(&self) -> bool {
        !self.is_new && (self.join_token.is_some() || self.sync_token.is_some())
    }
}

#[derive(Debug, Clone, Copy)]
enum JoinTimer {
    /// First rebalance of an empty group: wait `delay` for more members, extended while
    /// members keep arriving, at most the rebalance timeout in total.
    Initial {
        deadline: i64,
        delay: i32,
        remaining: i32,
    },
    Normal {
        deadline: i64,
    },
}

#[derive(Debug)]
struct Group {
    id: String,
    state: GroupState,
    previous_state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    /// Insertion order matters: a departed leader is replaced by the oldest member.
    members: Vec<Member>,
    /// Members that got MEMBER_ID_REQUIRED and must rejoin before the deadline.
    pending_members: HashMap<String, i64>,
    pending_sync: HashSet<String>,
    join_timer: Option<JoinTimer>,
    new_member_added: bool,
    sync_deadline: Option<(i64, i32)>,
    offsets: BTreeMap<(String, i32), CommittedOffset>,
    txn_offsets: HashMap<i64, BTreeMap<(String, i32), CommittedOffset>>,
    /// Set while this is a KIP-848 consumer group (then the classic part stays Empty).
    consumer: Option<ConsumerGroup>,
    /// When the classic group last became Empty (its last member left), durable in the
    /// group record; offsets of an Empty group expire counting from it.
    empty_since: Option<i64>,
}

/// Mutable context of one coordinator call: collected replies and records to persist.
struct Cx<'a> {
    cfg: &'a GroupConfig,
    now: i64,
    replies: Vec<Reply>,
    records: Vec<Rec>,
}

impl Group {
    fn new(id: &str) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            previous_state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: Vec::new(),
            pending_members: HashMap::new(),
            pending_sync: HashSet::new(),
            join_timer: None,
            new_member_added: false,
            sync_deadline: None,
            offsets: BTreeMap::new(),
            txn_offsets: HashMap::new(),
            consumer: None,
            empty_since: None,
        }
    }

    fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    fn member_mut(&mut self, id: &str) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.id == id)
    }

    fn static_member_id(&self, instance: &str) -> Option<String> {
        self.members
            .iter()
            .find(|m| m.instance_id.as_deref() == Some(instance))
            .map(|m| m.id.clone())
    }

    fn is_leader(&self, id: &str) -> bool {
        self.leader.as_deref() == Some(id)
    }

    fn num_awaiting_join(&self) -> usize {
        self.members
            .iter()
            .filter(|m| m.join_token.is_some())
            .count()
    }

    fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.num_awaiting_join() && self.pending_members.is_empty()
    }

    fn rebalance_timeout_ms(&self) -> i32 {
        self.members
            .iter()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    fn can_rebalance(&self) -> bool {
        matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        )
    }

    fn transition(&mut self, to: GroupState) {
        self.previous_state = self.state;
        self.state = to;
    }

    fn candidate_protocols(&self) -> HashSet<String> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for m in &self.members {
            for (name, _) in &m.protocols {
                *counts.entry(name.as_str()).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .filter(|(_, c)| *c == self.members.len())
            .map(|(n, _)| n.to_string())
            .collect()
    }

    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let candidates = self.candidate_protocols();
        protocols.iter().any(|(n, _)| candidates.contains(n))
    }

    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: Vec<(String, usize)> = Vec::new();
        for m in &self.members {
            if let Some(v) = m.vote(&candidates) {
                match votes.iter_mut().find(|(n, _)| *n == v) {
                    Some((_, c)) => *c += 1,
                    None => votes.push((v, 1)),
                }
            }
        }
        // Most votes wins; ties go to the first protocol voted for (deterministic).
        let best = votes.iter().map(|(_, c)| *c).max()?;
        votes.into_iter().find(|(_, c)| *c == best).map(|(n, _)| n)
    }

    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), i16> {
        if let Some(instance) = instance_id {
            match self.static_member_id(instance) {
                None => return Err(UNKNOWN_MEMBER_ID),
                Some(existing) if existing != member_id => return Err(FENCED_INSTANCE_ID),
                Some(_) => {}
            }
        }
        if self.member(member_id).is_none() {
            return Err(UNKNOWN_MEMBER_ID);
        }
        Ok(())
    }

    fn add_member(&mut self, m: Member) {
        if self.leader.is_none() {
            self.leader = Some(m.id.clone());
        }
        if self.members.is_empty() {
            // The first member of an empty group sets its type (an empty group keeps the last).
            self.protocol_type = Some(m.protocol_type.clone());
        }
        self.members.push(m);
    }

    /// Removes a member, answering any request it has parked.
    fn remove_member(&mut self, id: &str, cx: &mut Cx<'_>) {
        if let Some(pos) = self.members.iter().position(|m| m.id == id) {
            let m = self.members.remove(pos);
            if let Some(t) = m.join_token {
                cx.replies
                    .push(Reply::Join(t, JoinResponse::error(UNKNOWN_MEMBER_ID, "")));
            }
            if let Some(t) = m.sync_token {
                cx.replies
                    .push(Reply::Sync(t, SyncResponse::error(UNKNOWN_MEMBER_ID)));
            }
        }
        if self.is_leader(id) {
            self.leader = self.members.first().map(|m| m.id.clone());
        }
        self.pending_members.remove(id);
        self.pending_sync.remove(id);
    }

    fn joined_members(&self) -> Vec<JoinedMember> {
        self.members
            .iter()
            .map(|m| JoinedMember {
                member_id: m.id.clone(),
                group_instance_id: m.instance_id.clone(),
                metadata: m.metadata(self.protocol_name.as_deref()),
            })
            .collect()
    }

    fn join_response(&self, member_id: &str, with_members: bool) -> JoinResponse {
        JoinResponse {
            error: NONE,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if with_members {
                self.joined_members()
            } else {
                Vec::new()
            },
        }
    }

    fn group_record(&self) -> Rec {
        Rec::Group {
            group: self.id.clone(),
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol_name.clone(),
            leader: self.leader.clone(),
            empty_since: self.empty_since.filter(|_| self.state == GroupState::Empty),
            members: self
                .members
                .iter()
                .map(|m| MemberRec {
                    id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    metadata: m.metadata(self.protocol_name.as_deref()).to_vec(),
                    assignment: m.assignment.to_vec(),
                })
                .collect(),
        }
    }

    fn reschedule_heartbeat(&mut self, member_id: &str, now: i64) {
        if let Some(m) = self.member_mut(member_id) {
            m.heartbeat_deadline = now + m.session_timeout_ms as i64;
        }
    }

    fn subscribed_topics(&self) -> Option<HashSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let mut all = HashSet::new();
        for m in &self.members {
            let meta = m.metadata(self.protocol_name.as_deref());
            all.extend(subscription_topics(&meta)?);
        }
        Some(all)
    }

    fn is_live(&self) -> bool {
        !self.members.is_empty()
            || !self.offsets.is_empty()
            || !self.txn_offsets.is_empty()
            || self
                .consumer
                .as_ref()
                .is_some_and(|c| !c.members.is_empty())
    }

    fn consumer_record(&self) -> Option<Rec> {
        self.consumer.as_ref().map(|c| Rec::Consumer {
            group: self.id.clone(),
            state: c.clone(),
        })
    }
}

// ---- online migration between the protocols (Kafka 4.1) ----

/// Turns a non-empty classic group into a consumer group whose members are its classic
/// members (Kafka `ConsumerGroup.fromClassicGroup`): each keeps the partitions of its last
/// SyncGroup at member epoch = generation, which is also the group and target epoch; parked
/// JoinGroup / SyncGroup calls are answered REBALANCE_IN_PROGRESS. `Err` is the reason the
/// group stays classic (answered GROUP_ID_NOT_FOUND, as Kafka).
fn upgrade_to_consumer(g: &mut Group, topics: &TopicView, cx: &mut Cx<'_>) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "Cannot upgrade classic group {} to consumer group because {why}.",
            g.id
        ))
    };
    if !cx.cfg.migration_policy.upgrades() {
        return refuse("online upgrade is disabled");
    }
    if g.protocol_type.as_deref() != Some("consumer") {
        return refuse("the group does not use the consumer embedded protocol");
    }
    if g.members.len() > cx.cfg.consumer_max_size {
        return refuse("the group size exceeds the consumer group maximum size");
    }
    // A group still in its first rebalance has no protocol yet (Kafka fails there with an
    // unknown server error; this says why).
    let Some(protocol) = g.protocol_name.clone() else {
        return refuse("the group has not completed its first rebalance");
    };
    let mut c = ConsumerGroup {
        epoch: g.generation,
        target_epoch: g.generation,
        ..Default::default()
    };
    for m in &g.members {
        let sub = embedded::read_subscription(&m.metadata(Some(&protocol)));
        let assignment = embedded::read_assignment(&m.assignment);
        let (Some(sub), Some(assignment)) = (sub, assignment) else {
            return refuse("the embedded consumer protocol is malformed");
        };
        if assignment.user_data.as_ref().is_some_and(|u| !u.is_empty()) {
            return refuse(
                "an unsupported custom assignor is in use. Please refer to the documentation \
                 or switch to a default assignor before re-attempting the upgrade",
            );
        }
        let assigned = ids_of(&assignment.partitions, topics);
        let mut subscribed = sub.topics;
        subscribed.sort();
        subscribed.dedup();
        let member = CMember {
            instance_id: m.instance_id.clone(),
            rack_id: sub.rack_id,
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            subscribed,
            epoch: g.generation,
            previous_epoch: g.generation,
            assigned: assigned.clone(),
            classic: Some(ClassicMeta {
                session_timeout_ms: m.session_timeout_ms,
                protocols: m
                    .protocols
                    .iter()
                    .map(|(n, b)| (n.clone(), b.to_vec()))
                    .collect(),
            }),
            session_deadline: cx.now + m.session_timeout_ms as i64,
            ..CMember::new(&m.id)
        };
        c.target.insert(m.id.clone(), assigned);
        c.members.insert(m.id.clone(), member);
    }
    c.subscribed_meta = c.subscribed_view(topics);
    for m in g.members.drain(..) {
        if let Some(t) = m.join_token {
            let resp = JoinResponse::error(REBALANCE_IN_PROGRESS, &m.id);
            cx.replies.push(Reply::Join(t, resp));
        }
        if let Some(t) = m.sync_token {
            let resp = SyncResponse::error(REBALANCE_IN_PROGRESS);
            cx.replies.push(Reply::Sync(t, resp));
        }
    }
    g.pending_members.clear();
    g.pending_sync.clear();
    g.join_timer = None;
    g.sync_deadline = None;
    g.new_member_added = false;
    g.leader = None;
    g.protocol_type = None;
    g.protocol_name = None;
    g.transition(GroupState::Empty);
    g.consumer = Some(c);
    tracing::info!(group = %g.id, "classic group upgraded to a consumer group");
    Ok(())
}

/// After members left a consumer group: if only classic members remain and the policy allows
/// it, the group turns classic again (Kafka `ClassicGroup.fromConsumerGroup`): generation =
/// group epoch, each member holding its target assignment, then a rebalance. Returns whether
/// it did (the group record is then written instead of the consumer-group records).
fn maybe_downgrade(g: &mut Group, epoch_before: i32, topics: &TopicView, cx: &mut Cx<'_>) -> bool {
    let Some(c) = g.consumer.as_ref() else {
        return false;
    };
    if !c.only_classic_members()
        || !cx.cfg.migration_policy.downgrades()
        || c.members.len() > cx.cfg.max_group_size
    {
        return false;
    }
    let c = g.consumer.take().expect("consumer group");
    // Kafka converts instead of fencing: the generation is the epoch the remaining members
    // were told before the leaver went, so their next heartbeat gets REBALANCE_IN_PROGRESS
    // rather than ILLEGAL_GENERATION.
    g.generation = epoch_before;
    g.protocol_type = Some("consumer".to_string());
    g.members = c
        .members
        .values()
        .map(|m| {
            let meta = m.classic.clone().unwrap_or_default();
            Member {
                id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: meta.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocol_type: "consumer".to_string(),
                protocols: meta
                    .protocols
                    .into_iter()
                    .map(|(n, b)| (n, Bytes::from(b)))
                    .collect(),
                assignment: Bytes::new(),
                join_token: None,
                sync_token: None,
                is_new: false,
                heartbeat_deadline: cx.now + meta.session_timeout_ms as i64,
            }
        })
        .collect();
    let Some(protocol) = g.select_protocol() else {
        // No protocol every member supports (cannot happen: a classic member joins only with
        // one): stay a consumer group.
        g.members.clear();
        g.protocol_type = None;
        g.consumer = Some(c);
        return false;
    };
    for m in g.members.iter_mut() {
        let version = embedded::version(&m.metadata(Some(&protocol))).unwrap_or(0);
        let target = c.target.get(&m.id).cloned().unwrap_or_default();
        m.assignment = embedded::write_assignment(&names_of(&target, topics), version).into();
    }
    g.protocol_name = Some(protocol);
    g.leader = g.members.first().map(|m| m.id.clone());
    g.empty_since = None;
    g.transition(GroupState::Stable);
    cx.records.push(g.group_record());
    tracing::info!(group = %g.id, "consumer group downgraded to a classic group");
    prepare_rebalance(g, cx);
    true
}

// ---- rebalance transitions (Kafka GroupMetadataManager, classic part) ----

fn prepare_rebalance(g: &mut Group, cx: &mut Cx<'_>) {
    if g.state == GroupState::CompletingRebalance {
        reset_and_propagate_error(g, REBALANCE_IN_PROGRESS, cx);
    }
    g.pending_sync.clear();
    g.sync_deadline = None;
    let initial = g.state == GroupState::Empty;
    if initial {
        let delay = cx.cfg.initial_rebalance_delay_ms;
        let remaining = (g.rebalance_timeout_ms() - delay).max(0);
        g.join_timer = Some(JoinTimer::Initial {
            deadline: cx.now + delay as i64,
            delay,
            remaining,
        });
    }
    g.transition(GroupState::PreparingRebalance);
    if !initial {
        if g.has_all_members_joined() {
            complete_join(g, cx);
        } else {
            g.join_timer = Some(JoinTimer::Normal {
                deadline: cx.now + g.rebalance_timeout_ms() as i64,
            });
        }
    }
}

fn maybe_prepare_rebalance_or_complete_join(g: &mut Group, cx: &mut Cx<'_>) {
    if g.can_rebalance() {
        prepare_rebalance(g, cx);
    } else {
        maybe_complete_join_phase(g, cx);
    }
}

fn maybe_complete_join_phase(g: &mut Group, cx: &mut Cx<'_>) {
    if g.state == GroupState::PreparingRebalance
        && g.previous_state != GroupState::Empty
        && g.has_all_members_joined()
    {
        complete_join(g, cx);
    }
}

fn complete_join(g: &mut Group, cx: &mut Cx<'_>) {
    g.join_timer = None;
    let not_rejoined: Vec<String> = g
        .members
        .iter()
        .filter(|m| m.join_token.is_none() && m.instance_id.is_none())
        .map(|m| m.id.clone())
        .collect();
    for id in not_rejoined {
        g.remove_member(&id, cx);
    }
    if g.state == GroupState::Dead {
        return;
    }
    if !maybe_elect_new_joined_leader(g) && !g.members.is_empty() {
        // Only static members that have not rejoined remain: wait for them to rejoin or expire.
        g.join_timer = Some(JoinTimer::Normal {
            deadline: cx.now + g.rebalance_timeout_ms() as i64,
        });
        return;
    }
    g.generation += 1;
    g.pending_sync.clear();
    if g.members.is_empty() {
        // The protocol type stays (Kafka's ListGroups/DescribeGroups still show an empty group
        // as a "consumer" group); only the chosen protocol is forgotten.
        g.protocol_name = None;
        g.transition(GroupState::Empty);
        g.empty_since = Some(cx.now);
        cx.records.push(g.group_record());
        return;
    }
    g.protocol_name = g.select_protocol();
    g.transition(GroupState::CompletingRebalance);
    let leader = g.leader.clone().unwrap_or_default();
    let leader_view = g.join_response(&leader, true);
    let follower_view = g.join_response("", false);
    let now = cx.now;
    for m in g.members.iter_mut() {
        if let Some(t) = m.join_token.take() {
            let mut resp = if m.id == leader {
                leader_view.clone()
            } else {
                follower_view.clone()
            };
            resp.member_id = m.id.clone();
            cx.replies.push(Reply::Join(t, resp));
        }
        m.heartbeat_deadline = now + m.session_timeout_ms as i64;
        m.is_new = false;
        g.pending_sync.insert(m.id.clone());
    }
    g.sync_deadline = Some((now + g.rebalance_timeout_ms() as i64, g.generation));
}

fn maybe_elect_new_joined_leader(g: &mut Group) -> bool {
    let Some(leader) = g.leader.clone() else {
        return false;
    };
    if g.member(&leader).is_some_and(|m| m.join_token.is_some()) {
        return true;
    }
    match g.members.iter().find(|m| m.join_token.is_some()) {
        Some(m) => {
            g.leader = Some(m.id.clone());
            true
        }
        None => false,
    }
}

fn reset_and_propagate_error(g: &mut Group, error: i16, cx: &mut Cx<'_>) {
    for m in g.members.iter_mut() {
        m.assignment = Bytes::new();
    }
    propagate_assignment(g, error, cx);
}

fn propagate_assignment(g: &mut Group, error: i16, cx: &mut Cx<'_>) {
    let (ptype, pname) = if error == NONE {
        (g.protocol_type.clone(), g.protocol_name.clone())
    } else {
        (None, None)
    };
    let now = cx.now;
    for m in g.members.iter_mut() {
        if let Some(t) = m.sync_token.take() {
            cx.replies.push(Reply::Sync(
                t,
                SyncResponse {
                    error,
                    protocol_type: ptype.clone(),
                    protocol_name: pname.clone(),
                    assignment: m.assignment.clone(),
                },
            ));
            m.heartbeat_deadline = now + m.session_timeout_ms as i64;
        }
    }
}

fn remove_member_and_update(g: &mut Group, id: &str, cx: &mut Cx<'_>) {
    g.remove_member(id, cx);
    match g.state {
        GroupState::Stable | GroupState::CompletingRebalance => {
            maybe_prepare_rebalance_or_complete_join(g, cx)
        }
        GroupState::PreparingRebalance if g.has_all_members_joined() => complete_join(g, cx),
        _ => {}
    }
}

fn add_member_then_rebalance(
    g: &mut Group,
    req: &JoinRequest,
    id: String,
    token: Token,
    cx: &mut Cx<'_>,
) {
    let m = Member {
        id,
        instance_id: req.group_instance_id.clone(),
        client_id: req.client_id.clone(),
        client_host: req.client_host.clone(),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        protocol_type: req.protocol_type.clone(),
        protocols: req.protocols.clone(),
        assignment: Bytes::new(),
        join_token: Some(token),
        sync_token: None,
        is_new: true,
        heartbeat_deadline: cx.now + cx.cfg.new_member_join_timeout_ms as i64,
    };
    if g.state == GroupState::PreparingRebalance && g.previous_state == GroupState::Empty {
        g.new_member_added = true;
    }
    g.add_member(m);
    maybe_prepare_rebalance_or_complete_join(g, cx);
}

fn update_member(g: &mut Group, id: &str, req: &JoinRequest, token: Token, cx: &mut Cx<'_>) {
    if let Some(m) = g.member_mut(id) {
        m.protocols = req.protocols.clone();
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        m.session_timeout_ms = req.session_timeout_ms;
        if let Some(old) = m.join_token.replace(token) {
            // A duplicate JoinGroup supersedes the parked one; never leave a request unanswered.
            cx.replies.push(Reply::Join(
                old,
                JoinResponse::error(REBALANCE_IN_PROGRESS, id),
            ));
        }
    }
}

fn tick_group(g: &mut Group, cx: &mut Cx<'_>) {
    let now = cx.now;
    if let Some(timer) = g.join_timer {
        match timer {
            JoinTimer::Initial {
                deadline,
                delay,
                remaining,
            } if deadline <= now => {
                if g.new_member_added && remaining != 0 {
                    g.new_member_added = false;
                    let new_delay = cx.cfg.initial_rebalance_delay_ms.min(remaining);
                    g.join_timer = Some(JoinTimer::Initial {
                        deadline: now + new_delay as i64,
                        delay: new_delay,
                        remaining: (remaining - delay).max(0),
                    });
                } else {
                    complete_join(g, cx);
                }
            }
            JoinTimer::Normal { deadline } if deadline <= now => complete_join(g, cx),
            _ => {}
        }
    }
    if let Some((deadline, generation)) = g.sync_deadline {
        if deadline <= now {
            g.sync_deadline = None;
            if generation == g.generation
                && matches!(
                    g.state,
                    GroupState::CompletingRebalance | GroupState::Stable
                )
                && !g.pending_sync.is_empty()
            {
                let missing: Vec<String> = g.pending_sync.iter().cloned().collect();
                for id in missing {
                    g.remove_member(&id, cx);
                }
                prepare_rebalance(g, cx);
            }
        }
    }
    let expired_pending: Vec<String> = g
        .pending_members
        .iter()
        .filter(|(_, d)| **d <= now)
        .map(|(id, _)| id.clone())
        .collect();
    for id in expired_pending {
        g.pending_members.remove(&id);
        if g.state == GroupState::PreparingRebalance && g.has_all_members_joined() {
            complete_join(g, cx);
        }
    }
    let expired: Vec<String> = g
        .members
        .iter()
        .filter(|m| m.heartbeat_deadline <= now && !m.kept_alive_while_parked())
        .map(|m| m.id.clone())
        .collect();
    for id in expired {
        // An earlier removal may have completed a join that refreshed this member.
        let still_expired = g
            .member(&id)
            .is_some_and(|m| m.heartbeat_deadline <= now && !m.kept_alive_while_parked());
        if still_expired {
            tracing::info!(group = %g.id, member = %id, "member session expired");
            remove_member_and_update(g, &id, cx);
        }
    }
}

/// The coordinator of every classic group on this node, with the durable offsets store.
pub struct GroupCoordinator {
    cfg: GroupConfig,
    groups: BTreeMap<String, Group>,
    file: RecordFile,
    appends_since_compact: u64,
    write_error: Option<StoreError>,
    next_cleanup_ms: i64,
    next_offsets_check_ms: i64,
    /// Per consumer group, the key and payload of each record its state was last written as:
    /// a change writes only the records that differ, and tombstones for keys that went away.
    written: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// The cluster's topics as last passed in ([`GroupCoordinator::set_topics`]): classic
    /// members of consumer groups are assigned and answered by topic name from it.
    topics: std::sync::Arc<TopicView>,
    /// Group configs (`kafka-configs --entity-type groups`) by group id, from the metadata.
    group_configs: std::sync::Arc<BTreeMap<String, BTreeMap<String, String>>>,
    /// Share groups (KIP-932), by id; an id is never also in `groups` ([`share_host`]).
    shares: BTreeMap<String, ShareGroup>,
}

impl GroupCoordinator {
    /// Opens (or creates) the offsets log in `dir` and restores groups and offsets. Groups that
    /// had members come back Stable with fresh session deadlines from `now_ms`.
    pub fn open(dir: &Path, cfg: GroupConfig, now_ms: i64) -> Result<GroupCoordinator, StoreError> {
        let (file, payloads) = RecordFile::open(dir, LOG_NAME)?;
        Self::restore(file, &payloads, &dir.join(LOG_NAME), cfg, now_ms)
    }

    /// The coordinator of a cluster's quorum leader: restores from the applied copy of the
    /// replicated offsets log (`QuorumNode::coordinator_logs`) and writes through `committer`.
    /// `term` is the quorum term this node leads in (its writes are fenced by it).
    pub fn open_replicated(
        records: &[Vec<u8>],
        committer: std::sync::Arc<dyn crate::replicated::Committer>,
        term: u64,
        cfg: GroupConfig,
        now_ms: i64,
    ) -> Result<GroupCoordinator, StoreError> {
        let log = crate::replicated::CoordinatorLog::Offsets;
        let file = RecordFile::replicated(log, term, records, committer);
        Self::restore(
            file,
            records,
            Path::new("<quorum>/__consumer_offsets"),
            cfg,
            now_ms,
        )
    }

    /// The coordinator of the `__consumer_offsets` partitions this node leads (`loaded`):
    /// restores from their records and writes each record to its group's partition through
    /// `writer`.
    pub fn open_partitioned(
        records: &[Vec<u8>],
        writer: std::sync::Arc<dyn crate::replicated::PartitionWriter>,
        loaded: crate::replicated::Loaded,
        cfg: GroupConfig,
        now_ms: i64,
    ) -> Result<GroupCoordinator, StoreError> {
        let log = crate::replicated::CoordinatorLog::Offsets;
        let file = RecordFile::partitioned(log, loaded, records, writer);
        let path = Path::new("<partitions>/__consumer_offsets");
        Self::restore(file, records, path, cfg, now_ms)
    }

    /// Every record of the live state (what a compaction keeps), in Kafka's format: to move
    /// this coordinator's state into another store.
    pub fn live_payloads(&self) -> Vec<Vec<u8>> {
        self.live_records()
    }

    /// The groups holding offsets of producer `producer_id`'s open transaction.
    pub fn groups_in_txn(&self, producer_id: i64) -> Vec<String> {
        self.groups
            .values()
            .filter(|g| g.txn_offsets.contains_key(&producer_id))
            .map(|g| g.id.clone())
            .collect()
    }

    /// Whether a replicated write failed: this coordinator must be reopened (see
    /// `offsets_log`); until then it answers nothing durable.
    pub fn is_fenced(&self) -> bool {
        self.file.is_fenced()
    }

    fn restore(
        file: RecordFile,
        payloads: &[Vec<u8>],
        path: &Path,
        cfg: GroupConfig,
        now_ms: i64,
    ) -> Result<GroupCoordinator, StoreError> {
        let mut groups: BTreeMap<String, Group> = BTreeMap::new();
        let mut shares: BTreeMap<String, ShareGroup> = BTreeMap::new();
        let n = payloads.len();
        for (index, p) in payloads.iter().enumerate() {
            let rec = Rec::decode(p).map_err(|reason| StoreError::BadRecord {
                path: path.to_path_buf(),
                index,
                reason,
            })?;
            match rec {
                Rec::Share { key, value } => share_host::replay_share(&mut shares, key, value),
                rec => replay(&mut groups, rec, now_ms),
            }
        }
        for g in groups.values_mut() {
            if !g.members.is_empty() {
                g.state = GroupState::Stable;
                g.previous_state = GroupState::Stable;
            }
            if let Some(c) = g.consumer.as_mut() {
                c.restore_deadlines(now_ms, cfg.consumer_session_timeout_ms);
            }
        }
        groups.retain(|_, g| g.is_live() || g.generation > 0);
        // Share members get a full session from the load (deadlines are not stored).
        for g in shares.values_mut() {
            g.rearm(
                now_ms,
                crate::share::group::ShareGroupLimits::default().session_timeout_ms,
            );
        }
        let mut c = GroupCoordinator {
            cfg,
            groups,
            file,
            appends_since_compact: n as u64,
            write_error: None,
            next_cleanup_ms: now_ms + CLEANUP_INTERVAL_MS,
            next_offsets_check_ms: 0,
            written: BTreeMap::new(),
            topics: Default::default(),
            group_configs: Default::default(),
            shares,
        };
        c.reset_written();
        let live = c.live_records().len();
        if n > 2 * live + 1000 {
            c.compact()?;
        }
        Ok(c)
    }

    pub fn config(&self) -> &GroupConfig {
        &self.cfg
    }

    /// The cluster's topics (name → id, partitions), for classic members of consumer groups.
    pub fn set_topics(&mut self, topics: std::sync::Arc<TopicView>) {
        self.topics = topics;
    }

    /// The group configs of every group (from the cluster metadata): a consumer group's
    /// `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` override the
    /// broker's from the next heartbeat on, as in Kafka.
    pub fn set_group_configs(
        &mut self,
        configs: std::sync::Arc<BTreeMap<String, BTreeMap<String, String>>>,
    ) {
        self.group_configs = configs;
    }

    fn limits(&self, group_id: &str) -> CgLimits {
        use crate::group_config::{
            GroupOverrides, CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS,
        };
        let own = GroupOverrides::new(self.group_configs.get(group_id));
        CgLimits {
            session_timeout_ms: own
                .int(CONSUMER_SESSION_TIMEOUT_MS)
                .unwrap_or(self.cfg.consumer_session_timeout_ms),
            heartbeat_interval_ms: own
                .int(CONSUMER_HEARTBEAT_INTERVAL_MS)
                .unwrap_or(self.cfg.consumer_heartbeat_interval_ms),
            max_size: self.cfg.consumer_max_size,
        }
    }

    /// Runs `f` with a call context and persists what it produced; returns the replies.
    fn run<R>(
        &mut self,
        now: i64,
        f: impl FnOnce(&mut BTreeMap<String, Group>, &mut Cx<'_>) -> R,
    ) -> (R, Vec<Reply>) {
        let cfg = self.cfg.clone();
        let mut cx = Cx {
            cfg: &cfg,
            now,
            replies: Vec::new(),
            records: Vec::new(),
        };
        let r = f(&mut self.groups, &mut cx);
        let records = std::mem::take(&mut cx.records);
        let replies = std::mem::take(&mut cx.replies);
        for rec in records {
            self.persist(&rec);
        }
        (r, replies)
    }

    fn persist(&mut self, rec: &Rec) {
        let payloads = match rec {
            Rec::Consumer { group, state } => {
                let now = record::keyed_payloads(&record::consumer_records(group, state));
                let before = self.written.insert(group.clone(), now.clone());
                let before = before.unwrap_or_default();
                let gone = before.keys().filter(|k| !now.contains_key(*k));
                let mut out: Vec<Vec<u8>> = gone.map(|k| record::tombstone(k)).collect();
                out.extend(
                    now.into_iter()
                        .filter(|(k, p)| before.get(k) != Some(p))
                        .map(|(_, p)| p),
                );
                out
            }
            // A classic group's metadata replaces its consumer-group state; a deletion ends
            // both. Kafka deletes the consumer group's records with tombstones.
            Rec::Group { group, .. } | Rec::GroupDeleted { group } => {
                let before = self.written.remove(group).unwrap_or_default();
                let mut out: Vec<Vec<u8>> = before.keys().map(|k| record::tombstone(k)).collect();
                out.extend(rec.encode());
                out
            }
            rec => rec.encode(),
        };
        for p in payloads {
            if let Err(e) = self.file.append(&p) {
                tracing::error!(error = %e, "offsets log append failed");
                self.write_error.get_or_insert(e);
            }
            self.appends_since_compact += 1;
        }
    }

    /// Sets [`GroupCoordinator::written`] to the groups' current consumer states (after a
    /// restore or a compaction wrote exactly those).
    fn reset_written(&mut self) {
        self.written = self
            .groups
            .values()
            .filter_map(|g| {
                let c = g.consumer.as_ref()?;
                let records = record::consumer_records(&g.id, c);
                Some((g.id.clone(), record::keyed_payloads(&records)))
            })
            .collect();
    }

    /// Makes every state change so far durable. Must succeed before replies are sent.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        if let Some(e) = self.write_error.take() {
            return Err(e);
        }
        self.file.sync()?;
        if self.appends_since_compact >= COMPACT_AFTER_APPENDS {
            self.compact()?;
        }
        Ok(())
    }

    fn live_records(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for g in self.groups.values() {
            if let Some(rec) = g.consumer_record() {
                out.extend(rec.encode());
            } else if g.generation > 0 || !g.members.is_empty() {
                out.extend(g.group_record().encode());
            }
            for ((topic, partition), o) in &g.offsets {
                out.extend(
                    Rec::Offset {
                        group: g.id.clone(),
                        topic: topic.clone(),
                        partition: *partition,
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                        metadata: o.metadata.clone(),
                        ts: o.commit_timestamp_ms,
                    }
                    .encode(),
                );
            }
            for (pid, offsets) in &g.txn_offsets {
                for ((topic, partition), o) in offsets {
                    out.extend(
                        Rec::TxnOffset {
                            group: g.id.clone(),
                            pid: *pid,
                            topic: topic.clone(),
                            partition: *partition,
                            offset: o.offset,
                            leader_epoch: o.leader_epoch,
                            metadata: o.metadata.clone(),
                            ts: o.commit_timestamp_ms,
                        }
                        .encode(),
                    );
                }
            }
        }
        out.extend(self.share_live_records());
        out
    }

    pub(super) fn compact(&mut self) -> Result<(), StoreError> {
        self.file.sync()?;
        let live = self.live_records();
        self.file.rewrite(&live)?;
        self.appends_since_compact = live.len() as u64;
        self.reset_written();
        Ok(())
    }

    // ---- group membership ----

    /// JoinGroup. The reply may come now or from a later call.
    pub fn join(&mut self, token: Token, req: JoinRequest, now_ms: i64) -> Vec<Reply> {
        let cfg = self.cfg.clone();
        if req.group_id.is_empty() {
            return vec![Reply::Join(
                token,
                JoinResponse::error(INVALID_GROUP_ID, &req.member_id),
            )];
        }
        if self.shares.contains_key(&req.group_id) {
            return vec![Reply::Join(
                token,
                JoinResponse::error(INCONSISTENT_GROUP_PROTOCOL, &req.member_id),
            )];
        }
        if req.session_timeout_ms < cfg.min_session_timeout_ms
            || req.session_timeout_ms > cfg.max_session_timeout_ms
        {
            return vec![Reply::Join(
                token,
                JoinResponse::error(INVALID_SESSION_TIMEOUT, &req.member_id),
            )];
        }
        let unknown = req.member_id.is_empty();
        if !unknown && !self.groups.contains_key(&req.group_id) {
            return vec![Reply::Join(
                token,
                JoinResponse::error(UNKNOWN_MEMBER_ID, &req.member_id),
            )];
        }
        let topics = self.topics.clone();
        let limits = self.limits(&req.group_id);
        self.run(now_ms, |groups, cx| {
            let g = groups
                .entry(req.group_id.clone())
                .or_insert_with(|| Group::new(&req.group_id));
            if let Some(c) = g.consumer.as_mut() {
                if !c.members.is_empty() {
                    let resp = match c.classic_join(&req, &topics, limits, cx.now) {
                        Ok(j) => {
                            cx.records.extend(g.consumer_record());
                            JoinResponse {
                                error: NONE,
                                generation_id: j.generation,
                                protocol_type: Some("consumer".to_string()),
                                protocol_name: Some(j.protocol_name),
                                leader: String::new(),
                                member_id: j.member_id,
                                members: Vec::new(),
                            }
                        }
                        Err((code, member)) => JoinResponse::error(code, &member),
                    };
                    cx.replies.push(Reply::Join(token, resp));
                    return;
                }
                // An empty consumer group becomes a classic group (offsets kept).
                g.consumer = None;
                g.generation = 0;
                cx.records.push(g.group_record());
            }
            if !accept_joining_member(g, &req.member_id, cfg.max_group_size) {
                cx.replies.push(Reply::Join(
                    token,
                    JoinResponse::error(GROUP_MAX_SIZE_REACHED, ""),
                ));
                return;
            }
            if unknown {
                join_new_member(g, req, token, cx);
            } else {
                join_existing_member(g, req, token, cx);
            }
        })
        .1
    }

    /// SyncGroup. The reply may come now or from a later call.
    pub fn sync(&mut self, token: Token, req: SyncRequest, now_ms: i64) -> Vec<Reply> {
        let topics = self.topics.clone();
        self.run(now_ms, |groups, cx| {
            let reply =
                |cx: &mut Cx<'_>, e| cx.replies.push(Reply::Sync(token, SyncResponse::error(e)));
            let Some(g) = groups.get_mut(&req.group_id) else {
                return reply(cx, UNKNOWN_MEMBER_ID);
            };
            if let Some(c) = g.consumer.as_mut().filter(|c| !c.members.is_empty()) {
                let resp = c
                    .classic_sync(&req, &topics, cx.now)
                    .unwrap_or_else(SyncResponse::error);
                return cx.replies.push(Reply::Sync(token, resp));
            }
            if g.members.is_empty() {
                return reply(cx, UNKNOWN_MEMBER_ID);
            }
            if g.state == GroupState::Dead {
                return reply(cx, COORDINATOR_NOT_AVAILABLE);
            }
            if let Err(e) = g.validate_member(&req.member_id, req.group_instance_id.as_deref()) {
                return reply(cx, e);
            }
            if req.generation_id != g.generation {
                return reply(cx, ILLEGAL_GENERATION);
            }
            let inconsistent = |asked: &Option<String>, have: &Option<String>| {
                asked.is_some() && have.is_some() && asked != have
            };
            if inconsistent(&req.protocol_type, &g.protocol_type)
                || inconsistent(&req.protocol_name, &g.protocol_name)
            {
                return reply(cx, INCONSISTENT_GROUP_PROTOCOL);
            }
            match g.state {
                GroupState::PreparingRebalance => reply(cx, REBALANCE_IN_PROGRESS),
                GroupState::CompletingRebalance => {
                    let member = g.member_mut(&req.member_id).expect("validated");
                    if let Some(old) = member.sync_token.replace(token) {
                        cx.replies
                            .push(Reply::Sync(old, SyncResponse::error(REBALANCE_IN_PROGRESS)));
                    }
                    g.pending_sync.remove(&req.member_id);
                    if g.pending_sync.is_empty() {
                        g.sync_deadline = None;
                    }
                    if g.is_leader(&req.member_id) {
                        let mut given: HashMap<String, Bytes> =
                            req.assignments.into_iter().collect();
                        for m in g.members.iter_mut() {
                            m.assignment = given.remove(&m.id).unwrap_or_default();
                        }
                        propagate_assignment(g, NONE, cx);
                        g.transition(GroupState::Stable);
                        cx.records.push(g.group_record());
                    }
                }
                GroupState::Stable => {
                    g.pending_sync.remove(&req.member_id);
                    if g.pending_sync.is_empty() {
                        g.sync_deadline = None;
                    }
                    let m = g.member(&req.member_id).expect("validated");
                    cx.replies.push(Reply::Sync(
                        token,
                        SyncResponse {
                            error: NONE,
                            protocol_type: g.protocol_type.clone(),
                            protocol_name: g.protocol_name.clone(),
                            assignment: m.assignment.clone(),
                        },
                    ));
                }
                GroupState::Empty | GroupState::Dead => reply(cx, UNKNOWN_MEMBER_ID),
            }
        })
        .1
    }

    /// Heartbeat; answers immediately.
    pub fn heartbeat(
        &mut self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        now_ms: i64,
    ) -> i16 {
        let Some(g) = self.groups.get_mut(group_id) else {
            return UNKNOWN_MEMBER_ID;
        };
        if g.state == GroupState::Dead {
            return COORDINATOR_NOT_AVAILABLE;
        }
        if let Some(c) = g.consumer.as_mut() {
            return c.classic_heartbeat(member_id, group_instance_id, generation_id, now_ms);
        }
        if let Err(e) = g.validate_member(member_id, group_instance_id) {
            return e;
        }
        if generation_id != g.generation {
            return ILLEGAL_GENERATION;
        }
        match g.state {
            GroupState::Empty | GroupState::Dead => UNKNOWN_MEMBER_ID,
            GroupState::PreparingRebalance => {
                g.reschedule_heartbeat(member_id, now_ms);
                REBALANCE_IN_PROGRESS
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                g.reschedule_heartbeat(member_id, now_ms);
                NONE
            }
        }
    }

    /// LeaveGroup: `Err(code)` is a group-level error, otherwise one code per member.
    pub fn leave(
        &mut self,
        group_id: &str,
        members: &[LeavingMember],
        now_ms: i64,
    ) -> (Result<Vec<i16>, i16>, Vec<Reply>) {
        let topics = self.topics.clone();
        self.run(now_ms, |groups, cx| {
            let Some(g) = groups.get_mut(group_id) else {
                return Err(UNKNOWN_MEMBER_ID);
            };
            if g.state == GroupState::Dead {
                return Err(COORDINATOR_NOT_AVAILABLE);
            }
            if let Some(c) = g.consumer.as_mut().filter(|c| !c.members.is_empty()) {
                let before = c.epoch;
                let codes = c.classic_leave(members);
                if codes.contains(&NONE) && !maybe_downgrade(g, before, &topics, cx) {
                    cx.records.extend(g.consumer_record());
                }
                return Ok(codes);
            }
            let mut codes = Vec::with_capacity(members.len());
            let mut any = false;
            for lm in members {
                let code = if lm.member_id.is_empty() {
                    match lm
                        .group_instance_id
                        .as_deref()
                        .and_then(|i| g.static_member_id(i))
                    {
                        Some(id) => {
                            g.remove_member(&id, cx);
                            NONE
                        }
                        None => UNKNOWN_MEMBER_ID,
                    }
                } else if g.pending_members.remove(&lm.member_id).is_some() {
                    NONE
                } else {
                    match g.validate_member(&lm.member_id, lm.group_instance_id.as_deref()) {
                        Ok(()) => {
                            g.remove_member(&lm.member_id, cx);
                            NONE
                        }
                        Err(e) => e,
                    }
                };
                any |= code == NONE;
                codes.push(code);
            }
            if any {
                match g.state {
                    GroupState::Stable | GroupState::CompletingRebalance => {
                        maybe_prepare_rebalance_or_complete_join(g, cx)
                    }
                    GroupState::PreparingRebalance => maybe_complete_join_phase(g, cx),
                    _ => {}
                }
            }
            Ok(codes)
        })
    }

    /// Fires due timers: initial-rebalance delay, rebalance timeout, pending-sync timeout,
    /// session expiry.
    pub fn tick(&mut self, now_ms: i64) -> Vec<Reply> {
        let topics = self.topics.clone();
        let replies = self
            .run(now_ms, |groups, cx| {
                for g in groups.values_mut() {
                    tick_group(g, cx);
                    let before = g.consumer.as_ref().map_or(0, |c| c.epoch);
                    let expired = g.consumer.as_mut().is_some_and(|c| c.expire(&g.id, cx.now));
                    if expired && !maybe_downgrade(g, before, &topics, cx) {
                        cx.records.extend(g.consumer_record());
                    }
                }
            })
            .1;
        self.expire_share_members(now_ms);
        if now_ms >= self.next_offsets_check_ms {
            self.next_offsets_check_ms = now_ms + self.cfg.offsets_retention_check_interval_ms;
            if self.expire_offsets(now_ms) {
                self.drop_forgotten_groups();
            }
        }
        if now_ms >= self.next_cleanup_ms {
            self.next_cleanup_ms = now_ms + CLEANUP_INTERVAL_MS;
            self.drop_forgotten_groups();
        }
        replies
    }

    /// Kafka 4.1's offset expiry (KIP-211, `OffsetMetadataManager.cleanupExpiredOffsets`):
    /// each committed offset whose base time is `offsets_retention_ms` old is deleted durably,
    /// unless a transactional commit of that partition is pending. Base time: when an Empty
    /// classic group became Empty (else the commit time); the commit time for a group that
    /// never had a protocol (standalone commits), a KIP-848 group without members, and topics
    /// a Stable classic consumer group does not subscribe to. Other groups keep their
    /// offsets. Returns whether anything expired.
    pub fn expire_offsets(&mut self, now_ms: i64) -> bool {
        let retention = self.cfg.offsets_retention_ms;
        let mut expired: Vec<(String, String, i32)> = Vec::new();
        for g in self.groups.values() {
            let subscribed: Option<HashSet<String>>;
            let empty_since = match &g.consumer {
                Some(c) if !c.members.is_empty() => continue,
                Some(_) => {
                    subscribed = None;
                    None
                }
                None => match (&g.protocol_type, g.state) {
                    (None, _) => {
                        subscribed = None;
                        None
                    }
                    (Some(_), GroupState::Empty) => {
                        subscribed = None;
                        g.empty_since
                    }
                    (Some(p), GroupState::Stable) if p == "consumer" => {
                        match g.subscribed_topics() {
                            Some(s) => subscribed = Some(s),
                            None => continue,
                        }
                        None
                    }
                    _ => continue,
                },
            };
            for ((topic, partition), o) in &g.offsets {
                if subscribed.as_ref().is_some_and(|s| s.contains(topic)) {
                    continue;
                }
                let pending = g
                    .txn_offsets
                    .values()
                    .any(|p| p.contains_key(&(topic.clone(), *partition)));
                let base = empty_since.unwrap_or(o.commit_timestamp_ms);
                if !pending && now_ms.saturating_sub(base) >= retention {
                    expired.push((g.id.clone(), topic.clone(), *partition));
                }
            }
        }
        for (group, topic, partition) in &expired {
            if let Some(g) = self.groups.get_mut(group) {
                g.offsets.remove(&(topic.clone(), *partition));
            }
            self.persist(&Rec::OffsetDeleted {
                group: group.clone(),
                topic: topic.clone(),
                partition: *partition,
            });
        }
        if !expired.is_empty() {
            tracing::info!(offsets = expired.len(), "expired committed offsets");
        }
        !expired.is_empty()
    }

    /// Forgets groups with no members and no offsets (Kafka's periodic group cleanup), so
    /// short-lived groups (console consumers with random ids) do not pile up.
    fn drop_forgotten_groups(&mut self) {
        let forgotten: Vec<String> = self
            .groups
            .values()
            .filter(|g| {
                g.state == GroupState::Empty && !g.is_live() && g.pending_members.is_empty()
            })
            .map(|g| g.id.clone())
            .collect();
        for id in forgotten {
            self.groups.remove(&id);
            self.persist(&Rec::GroupDeleted { group: id });
        }
    }

    // ---- admin ----

    /// ListGroups; empty filters match everything. Types are "classic" / "consumer".
    pub fn list_groups(
        &self,
        states_filter: &[String],
        types_filter: &[String],
    ) -> Vec<GroupListing> {
        self.groups
            .values()
            .filter(|g| g.state != GroupState::Dead)
            .map(|g| match &g.consumer {
                Some(c) => GroupListing {
                    group_id: g.id.clone(),
                    protocol_type: "consumer".to_string(),
                    state: g.state,
                    group_type: "consumer",
                    state_name: super::consumer::state_name(c),
                },
                None => GroupListing {
                    group_id: g.id.clone(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    state: g.state,
                    group_type: "classic",
                    state_name: g.state.as_str(),
                },
            })
            .chain(self.share_listings())
            .filter(|l| {
                states_filter.is_empty()
                    || states_filter
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(l.state_name))
            })
            .filter(|l| {
                types_filter.is_empty()
                    || types_filter
                        .iter()
                        .any(|t| t.eq_ignore_ascii_case(l.group_type))
            })
            .collect()
    }

    /// "classic", "consumer" or "share"; None if the group does not exist.
    pub fn group_type(&self, group_id: &str) -> Option<&'static str> {
        if self.shares.contains_key(group_id) {
            return Some("share");
        }
        self.groups
            .get(group_id)
            .filter(|g| g.state != GroupState::Dead)
            .map(|g| {
                if g.consumer.is_some() {
                    "consumer"
                } else {
                    "classic"
                }
            })
    }

    /// DescribeGroups: None for unknown groups and consumer groups (not classic).
    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let g = self.groups.get(group_id)?;
        if g.consumer.is_some() {
            return None;
        }
        let stable = g.state == GroupState::Stable;
        Some(GroupDescription {
            group_id: g.id.clone(),
            state: g.state,
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol_name: if stable {
                g.protocol_name.clone().unwrap_or_default()
            } else {
                String::new()
            },
            members: g
                .members
                .iter()
                .map(|m| MemberDescription {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata(g.protocol_name.as_deref())
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        })
    }

    /// DeleteGroups: one code per group id.
    pub fn delete_groups(&mut self, group_ids: &[String]) -> Vec<i16> {
        let mut codes = Vec::with_capacity(group_ids.len());
        for id in group_ids {
            if self.shares.contains_key(id) {
                codes.push(self.delete_share_group(id));
                continue;
            }
            let code = match self.groups.get(id) {
                None => GROUP_ID_NOT_FOUND,
                Some(g) if g.state == GroupState::Dead => GROUP_ID_NOT_FOUND,
                Some(g) if g.state != GroupState::Empty => NON_EMPTY_GROUP,
                Some(g) if g.consumer.as_ref().is_some_and(|c| !c.members.is_empty()) => {
                    NON_EMPTY_GROUP
                }
                Some(_) => {
                    let g = self.groups.remove(id).expect("checked above");
                    // Tombstones for its offsets too, as Kafka writes: compaction by key keeps
                    // nothing of a deleted group.
                    for (topic, partition) in g.offsets.into_keys() {
                        self.persist(&Rec::OffsetDeleted {
                            group: id.clone(),
                            topic,
                            partition,
                        });
                    }
                    self.persist(&Rec::GroupDeleted { group: id.clone() });
                    NONE
                }
            };
            codes.push(code);
        }
        codes
    }

    // ---- offsets ----

    fn validate_commit(
        &mut self,
        ctx: &CommitContext,
        transactional: bool,
        now_ms: i64,
    ) -> Result<(), i16> {
        if ctx.group_id.is_empty() {
            return Err(INVALID_GROUP_ID);
        }
        // A share group keeps no committed offsets (Kafka's ShareGroup.validateOffsetCommit).
        if self.shares.contains_key(&ctx.group_id) {
            return Err(GROUP_ID_NOT_FOUND);
        }
        if !self.groups.contains_key(&ctx.group_id) {
            if ctx.generation_id < 0 {
                self.groups
                    .insert(ctx.group_id.clone(), Group::new(&ctx.group_id));
            } else if !transactional && ctx.api_version >= 9 {
                return Err(GROUP_ID_NOT_FOUND);
            } else {
                return Err(ILLEGAL_GENERATION);
            }
        }
        let g = self.groups.get_mut(&ctx.group_id).expect("present");
        if g.state == GroupState::Dead {
            return Err(COORDINATOR_NOT_AVAILABLE);
        }
        if let Some(c) = &g.consumer {
            // KIP-848: the generation field carries the member epoch.
            return c.validate_commit(
                &ctx.member_id,
                ctx.generation_id,
                transactional,
                ctx.api_version,
            );
        }
        if ctx.generation_id < 0 && g.state == GroupState::Empty {
            return Ok(());
        }
        if ctx.generation_id >= 0 || !ctx.member_id.is_empty() || ctx.group_instance_id.is_some() {
            g.validate_member(&ctx.member_id, ctx.group_instance_id.as_deref())?;
            if ctx.generation_id != g.generation {
                return Err(ILLEGAL_GENERATION);
            }
        } else if !transactional && g.state != GroupState::Empty {
            return Err(UNKNOWN_MEMBER_ID);
        }
        if !transactional && g.state == GroupState::CompletingRebalance {
            return Err(REBALANCE_IN_PROGRESS);
        }
        if !transactional && g.state == GroupState::Stable {
            g.reschedule_heartbeat(&ctx.member_id, now_ms);
        }
        Ok(())
    }

    /// OffsetCommit: `Err` is a group-level error applied to every partition.
    pub fn commit_offsets(
        &mut self,
        ctx: &CommitContext,
        offsets: &[OffsetToCommit],
        now_ms: i64,
    ) -> Result<Vec<i16>, i16> {
        self.validate_commit(ctx, false, now_ms)?;
        let mut codes = Vec::with_capacity(offsets.len());
        for o in offsets {
            if o.metadata.as_ref().map_or(0, |m| m.len()) > self.cfg.max_metadata_bytes {
                codes.push(OFFSET_METADATA_TOO_LARGE);
                continue;
            }
            let rec = Rec::Offset {
                group: ctx.group_id.clone(),
                topic: o.topic.clone(),
                partition: o.partition,
                offset: o.offset,
                leader_epoch: o.leader_epoch,
                metadata: Some(no_metadata_as_empty(&o.metadata)),
                ts: now_ms,
            };
            self.persist(&rec);
            replay(&mut self.groups, rec, now_ms);
            codes.push(NONE);
        }
        Ok(codes)
    }

    /// TxnOffsetCommit: offsets stay pending until [`GroupCoordinator::complete_txn`].
    pub fn txn_commit_offsets(
        &mut self,
        ctx: &CommitContext,
        producer_id: i64,
        offsets: &[OffsetToCommit],
        now_ms: i64,
    ) -> Result<Vec<i16>, i16> {
        self.validate_commit(ctx, true, now_ms)?;
        let mut codes = Vec::with_capacity(offsets.len());
        for o in offsets {
            if o.metadata.as_ref().map_or(0, |m| m.len()) > self.cfg.max_metadata_bytes {
                codes.push(OFFSET_METADATA_TOO_LARGE);
                continue;
            }
            let rec = Rec::TxnOffset {
                group: ctx.group_id.clone(),
                pid: producer_id,
                topic: o.topic.clone(),
                partition: o.partition,
                offset: o.offset,
                leader_epoch: o.leader_epoch,
                metadata: Some(no_metadata_as_empty(&o.metadata)),
                ts: now_ms,
            };
            self.persist(&rec);
            replay(&mut self.groups, rec, now_ms);
            codes.push(NONE);
        }
        Ok(codes)
    }

    /// Applies a transaction marker to the group's pending transactional offsets.
    pub fn complete_txn(&mut self, group_id: &str, producer_id: i64, commit: bool, now_ms: i64) {
        let has_pending = self
            .groups
            .get(group_id)
            .is_some_and(|g| g.txn_offsets.contains_key(&producer_id));
        if !has_pending {
            return;
        }
        let rec = Rec::TxnEnd {
            group: group_id.to_string(),
            pid: producer_id,
            commit,
        };
        self.persist(&rec);
        replay(&mut self.groups, rec, now_ms);
    }

    /// OffsetFetch for one group. `topics = None` means every committed partition.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
        require_stable: bool,
    ) -> Vec<FetchedOffset> {
        let g = self
            .groups
            .get(group_id)
            .filter(|g| g.state != GroupState::Dead);
        let pending = |topic: &str, partition: i32| {
            g.is_some_and(|g| {
                g.txn_offsets
                    .values()
                    .any(|m| m.contains_key(&(topic.to_string(), partition)))
            })
        };
        let answer = |topic: &str, partition: i32| {
            if require_stable && pending(topic, partition) {
                return FetchedOffset {
                    topic: topic.to_string(),
                    partition,
                    error: UNSTABLE_OFFSET_COMMIT,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: Some(String::new()),
                };
            }
            match g.and_then(|g| g.offsets.get(&(topic.to_string(), partition))) {
                Some(o) => FetchedOffset {
                    topic: topic.to_string(),
                    partition,
                    error: NONE,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: Some(o.metadata.clone().unwrap_or_default()),
                },
                None => FetchedOffset {
                    topic: topic.to_string(),
                    partition,
                    error: NONE,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: Some(String::new()),
                },
            }
        };
        match topics {
            Some(list) => list
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t, *p)))
                .map(|(t, p)| answer(t, p))
                .collect(),
            None => g
                .map(|g| {
                    g.offsets
                        .keys()
                        .map(|(t, p)| answer(t, *p))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        }
    }

    /// OffsetDelete: `Err` is a group-level error, else `(topic, partition, code)`.
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        topics: &[(String, Vec<i32>)],
    ) -> Result<Vec<(String, i32, i16)>, i16> {
        let Some(g) = self.groups.get(group_id) else {
            return Err(GROUP_ID_NOT_FOUND);
        };
        let subscribed = match g.state {
            GroupState::Dead => return Err(GROUP_ID_NOT_FOUND),
            _ if g.consumer.is_some() => g
                .consumer
                .as_ref()
                .expect("consumer group")
                .subscribed_topics(&TopicView::new())
                .into_iter()
                .collect(),
            GroupState::Empty => HashSet::new(),
            _ => match g.subscribed_topics() {
                Some(s) => s,
                None => return Err(NON_EMPTY_GROUP),
            },
        };
        let mut out = Vec::new();
        let mut recs = Vec::new();
        for (topic, partitions) in topics {
            for p in partitions {
                if subscribed.contains(topic) {
                    out.push((topic.clone(), *p, GROUP_SUBSCRIBED_TO_TOPIC));
                } else {
                    out.push((topic.clone(), *p, NONE));
                    recs.push(Rec::OffsetDeleted {
                        group: group_id.to_string(),
                        topic: topic.clone(),
                        partition: *p,
                    });
                }
            }
        }
        for rec in recs {
            self.persist(&rec);
            replay(&mut self.groups, rec, 0);
        }
        Ok(out)
    }

    // ---- KIP-848 consumer groups ----

    /// ConsumerGroupHeartbeat. `topics` is the cluster's topic metadata (name → id, partitions).
    pub fn consumer_heartbeat(
        &mut self,
        req: &CgHeartbeat,
        topics: &TopicView,
        now_ms: i64,
    ) -> (CgHeartbeatResponse, Vec<Reply>) {
        let refuse = |e| (e, Vec::new());
        if req.group_id.is_empty() {
            return refuse(CgHeartbeatResponse::error(
                INVALID_REQUEST,
                "GroupId can't be empty.",
            ));
        }
        if req.member_id.is_empty() && req.api_version >= 1 {
            return refuse(CgHeartbeatResponse::error(
                INVALID_REQUEST,
                "MemberId can't be empty.",
            ));
        }
        if req.instance_id.as_deref() == Some("") {
            return refuse(CgHeartbeatResponse::error(
                INVALID_REQUEST,
                "InstanceId can't be empty.",
            ));
        }
        if req.member_epoch < super::consumer::STATIC_LEAVE_EPOCH {
            return refuse(CgHeartbeatResponse::error(
                INVALID_REQUEST,
                "MemberEpoch is invalid.",
            ));
        }
        if req.member_epoch == 0 {
            let no_subscription =
                req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none();
            if req.rebalance_timeout_ms == -1 || no_subscription {
                return refuse(CgHeartbeatResponse::error(
                    INVALID_REQUEST,
                    "RebalanceTimeoutMs and SubscribedTopicNames must be set in first request.",
                ));
            }
            if req
                .owned
                .as_ref()
                .is_some_and(|o| o.values().any(|p| !p.is_empty()))
            {
                return refuse(CgHeartbeatResponse::error(
                    INVALID_REQUEST,
                    "TopicPartitions must be empty when (re-)joining.",
                ));
            }
        }
        if let Some(r) = req
            .subscribed_topic_regex
            .as_deref()
            .filter(|r| !r.is_empty())
        {
            if regex::Regex::new(r).is_err() {
                return refuse(CgHeartbeatResponse::error(
                    super::codes::INVALID_REGULAR_EXPRESSION,
                    format!("SubscribedTopicRegex `{r}` is not a valid regular expression."),
                ));
            }
        }
        if let Some(a) = req.server_assignor.as_deref() {
            if !super::consumer::ASSIGNORS.contains(&a) {
                return refuse(CgHeartbeatResponse::error(
                    UNSUPPORTED_ASSIGNOR,
                    format!("ServerAssignor {a} is not supported."),
                ));
            }
        }
        if self.shares.contains_key(&req.group_id) {
            return refuse(CgHeartbeatResponse::error(
                GROUP_ID_NOT_FOUND,
                format!("Group {} is not a consumer group.", req.group_id),
            ));
        }
        let limits = self.limits(&req.group_id);
        let create = req.member_epoch == 0;
        self.run(now_ms, |groups, cx| {
            let g = match groups.get_mut(&req.group_id) {
                Some(g) if g.state != GroupState::Dead => g,
                _ if !create => {
                    return CgHeartbeatResponse::error(
                        GROUP_ID_NOT_FOUND,
                        format!("Group {} not found.", req.group_id),
                    )
                }
                _ => groups
                    .entry(req.group_id.clone())
                    .or_insert_with(|| Group::new(&req.group_id)),
            };
            let mut converted = false;
            if g.consumer.is_none() {
                if !g.members.is_empty() {
                    if !create {
                        return CgHeartbeatResponse::error(
                            GROUP_ID_NOT_FOUND,
                            format!("Group {} is not a consumer group.", req.group_id),
                        );
                    }
                    // Kafka 4.1's online upgrade: the classic members stay, as classic
                    // members of the consumer group.
                    if let Err(why) = upgrade_to_consumer(g, topics, cx) {
                        return CgHeartbeatResponse::error(GROUP_ID_NOT_FOUND, why);
                    }
                    converted = true;
                } else {
                    // An empty classic group (or a new one) becomes a consumer group, offsets
                    // kept; members that were only told their id are forgotten.
                    g.pending_members.clear();
                    g.consumer = Some(ConsumerGroup::default());
                }
            }
            let c = g.consumer.as_mut().expect("consumer group");
            let before = c.epoch;
            let (resp, changed) = c.heartbeat(req, topics, limits, cx.now);
            let left = req.member_epoch == LEAVE_EPOCH && resp.error == NONE;
            if left && maybe_downgrade(g, before, topics, cx) {
                return resp;
            }
            if changed || converted {
                cx.records.extend(g.consumer_record());
            }
            resp
        })
    }

    /// OffsetFetch v9+ member check (Kafka `validateOffsetFetch`): only consumer groups check
    /// the member and its epoch; an admin fetch (no member id, epoch -1) always passes.
    pub fn validate_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), i16> {
        if member_id.is_none() && member_epoch < 0 {
            return Ok(());
        }
        let Some(c) = self.groups.get(group_id).and_then(|g| g.consumer.as_ref()) else {
            return Ok(());
        };
        let m = c
            .members
            .get(member_id.unwrap_or_default())
            .ok_or(UNKNOWN_MEMBER_ID)?;
        if m.epoch != member_epoch {
            return Err(STALE_MEMBER_EPOCH);
        }
        Ok(())
    }

    /// A consumer group's state for ConsumerGroupDescribe: GROUP_ID_NOT_FOUND if the group is
    /// unknown or classic.
    pub fn consumer_describe(
        &self,
        group_id: &str,
    ) -> Result<(ConsumerGroup, &'static str, &'static str), i16> {
        let g = self
            .groups
            .get(group_id)
            .filter(|g| g.state != GroupState::Dead)
            .ok_or(GROUP_ID_NOT_FOUND)?;
        let c = g.consumer.as_ref().ok_or(GROUP_ID_NOT_FOUND)?;
        Ok((c.clone(), super::consumer::state_name(c), c.assignor()))
    }

    /// Records appended since the last compaction; for tests.
    #[cfg(test)]
    pub(crate) fn appends(&self) -> u64 {
        self.appends_since_compact
    }

    /// Current state of a group (None if unknown); for tests and metrics.
    pub fn group_state(&self, group_id: &str) -> Option<GroupState> {
        self.groups.get(group_id).map(|g| g.state)
    }

    /// Current generation of a group.
    pub fn generation(&self, group_id: &str) -> Option<i32> {
        self.groups.get(group_id).map(|g| g.generation)
    }
}

fn accept_joining_member(g: &Group, member_id: &str, max: usize) -> bool {
    match g.state {
        GroupState::Empty | GroupState::Dead => true,
        GroupState::PreparingRebalance => {
            g.member(member_id).is_some_and(|m| m.join_token.is_some())
                || g.num_awaiting_join() < max
        }
        GroupState::CompletingRebalance | GroupState::Stable => {
            g.member(member_id).is_some() || g.members.len() < max
        }
    }
}

fn join_new_member(g: &mut Group, req: JoinRequest, token: Token, cx: &mut Cx<'_>) {
    if g.state == GroupState::Dead {
        cx.replies.push(Reply::Join(
            token,
            JoinResponse::error(COORDINATOR_NOT_AVAILABLE, ""),
        ));
        return;
    }
    if !g.supports_protocols(&req.protocol_type, &req.protocols) {
        cx.replies.push(Reply::Join(
            token,
            JoinResponse::error(INCONSISTENT_GROUP_PROTOCOL, ""),
        ));
        return;
    }
    let prefix = req
        .group_instance_id
        .clone()
        .unwrap_or_else(|| req.client_id.clone());
    let new_id = format!("{}-{}", prefix, uuid::Uuid::new_v4());
    match req.group_instance_id.clone() {
        Some(instance) => match g.static_member_id(&instance) {
            Some(old_id) => replace_static_member(g, &req, old_id, new_id, token, cx),
            None => add_member_then_rebalance(g, &req, new_id, token, cx),
        },
        None if req.require_known_member_id => {
            g.pending_members
                .insert(new_id.clone(), cx.now + req.session_timeout_ms as i64);
            cx.replies.push(Reply::Join(
                token,
                JoinResponse::error(MEMBER_ID_REQUIRED, &new_id),
            ));
        }
        None => add_member_then_rebalance(g, &req, new_id, token, cx),
    }
}

/// A known static member rejoined with an unknown member id (restart): it takes over the old
/// member's slot; the old id is fenced.
fn replace_static_member(
    g: &mut Group,
    req: &JoinRequest,
    old_id: String,
    new_id: String,
    token: Token,
    cx: &mut Cx<'_>,
) {
    let current_leader = g.leader.clone().unwrap_or_default();
    let m = g.member_mut(&old_id).expect("static member present");
    if let Some(t) = m.join_token.take() {
        cx.replies.push(Reply::Join(
            t,
            JoinResponse::error(FENCED_INSTANCE_ID, &old_id),
        ));
    }
    if let Some(t) = m.sync_token.take() {
        cx.replies
            .push(Reply::Sync(t, SyncResponse::error(FENCED_INSTANCE_ID)));
    }
    m.id = new_id.clone();
    m.heartbeat_deadline = cx.now + m.session_timeout_ms as i64;
    if g.leader.as_deref() == Some(old_id.as_str()) {
        g.leader = Some(new_id.clone());
    }
    if g.pending_sync.remove(&old_id) {
        g.pending_sync.insert(new_id.clone());
    }
    update_member(g, &new_id, req, token, cx);
    match g.state {
        GroupState::Stable => {
            if g.select_protocol() == g.protocol_name {
                cx.records.push(g.group_record());
                let m = g.member_mut(&new_id).expect("present");
                let t = m.join_token.take().expect("just set");
                let mut resp = g.join_response(&new_id, false);
                // The old id is reported as leader so the rejoining member does not reassign.
                resp.leader = if current_leader == old_id {
                    old_id
                } else {
                    current_leader
                };
                cx.replies.push(Reply::Join(t, resp));
            } else {
                maybe_prepare_rebalance_or_complete_join(g, cx);
            }
        }
        GroupState::CompletingRebalance => prepare_rebalance(g, cx),
        _ => maybe_complete_join_phase(g, cx),
    }
}

fn join_existing_member(g: &mut Group, req: JoinRequest, token: Token, cx: &mut Cx<'_>) {
    let member_id = req.member_id.clone();
    let reply_err = |cx: &mut Cx<'_>, e| {
        cx.replies
            .push(Reply::Join(token, JoinResponse::error(e, &member_id)))
    };
    if g.state == GroupState::Dead {
        return reply_err(cx, COORDINATOR_NOT_AVAILABLE);
    }
    if !g.supports_protocols(&req.protocol_type, &req.protocols) {
        return reply_err(cx, INCONSISTENT_GROUP_PROTOCOL);
    }
    if g.pending_members.remove(&member_id).is_some() {
        return add_member_then_rebalance(g, &req, member_id.clone(), token, cx);
    }
    if let Err(e) = g.validate_member(&member_id, req.group_instance_id.as_deref()) {
        return reply_err(cx, e);
    }
    let matches = g
        .member(&member_id)
        .expect("validated")
        .matches(&req.protocols);
    match g.state {
        GroupState::PreparingRebalance => {
            update_member(g, &member_id, &req, token, cx);
            maybe_prepare_rebalance_or_complete_join(g, cx);
        }
        GroupState::CompletingRebalance => {
            if matches {
                let resp = g.join_response(&member_id, g.is_leader(&member_id));
                cx.replies.push(Reply::Join(token, resp));
            } else {
                update_member(g, &member_id, &req, token, cx);
                maybe_prepare_rebalance_or_complete_join(g, cx);
            }
        }
        GroupState::Stable => {
            if g.is_leader(&member_id) || !matches {
                update_member(g, &member_id, &req, token, cx);
                maybe_prepare_rebalance_or_complete_join(g, cx);
            } else {
                let resp = g.join_response(&member_id, false);
                cx.replies.push(Reply::Join(token, resp));
            }
        }
        GroupState::Empty | GroupState::Dead => reply_err(cx, UNKNOWN_MEMBER_ID),
    }
}

/// Applies one record to the in-memory state (log replay and live writes share this).
fn replay(groups: &mut BTreeMap<String, Group>, rec: Rec, now: i64) {
    match rec {
        Rec::Group {
            group,
            generation,
            protocol_type,
            protocol,
            leader,
            members,
            empty_since,
        } => {
            let g = groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group));
            g.consumer = None;
            g.empty_since = empty_since;
            g.generation = generation;
            g.protocol_type = protocol_type.clone();
            g.protocol_name = protocol.clone();
            g.leader = leader;
            g.members = members
                .into_iter()
                .map(|m| Member {
                    id: m.id,
                    instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocol_type: protocol_type.clone().unwrap_or_default(),
                    protocols: vec![(protocol.clone().unwrap_or_default(), m.metadata.into())],
                    assignment: m.assignment.into(),
                    join_token: None,
                    sync_token: None,
                    is_new: false,
                    heartbeat_deadline: now + m.session_timeout_ms as i64,
                })
                .collect();
        }
        Rec::GroupDeleted { group } => {
            groups.remove(&group);
        }
        // Routed to the share groups before this is called.
        Rec::Share { .. } => {}
        Rec::Consumer { group, state } => {
            *consumer_of(groups, &group) = state;
        }
        Rec::CgEpoch { group, epoch } => match epoch {
            Some(e) => consumer_of(groups, &group).epoch = e,
            None => {
                if let Some(g) = groups.get_mut(&group) {
                    g.consumer = None;
                }
            }
        },
        Rec::CgTopics { group, topics } => {
            if topics.is_some() || has_consumer(groups, &group) {
                consumer_of(groups, &group).subscribed_meta = topics.unwrap_or_default();
            }
        }
        Rec::CgTargetEpoch { group, epoch } => {
            if epoch.is_some() || has_consumer(groups, &group) {
                consumer_of(groups, &group).target_epoch = epoch.unwrap_or_default();
            }
        }
        Rec::CgMember { group, member, sub } => match sub {
            Some(sub) => sub.apply(member_of(groups, &group, &member)),
            None => {
                if let Some(c) = groups.get_mut(&group).and_then(|g| g.consumer.as_mut()) {
                    c.members.remove(&member);
                }
            }
        },
        Rec::CgCurrent {
            group,
            member,
            current,
        } => match current {
            Some(cur) => cur.apply(member_of(groups, &group, &member)),
            None => {
                // Kafka deletes a member's assignment before its subscription.
                let c = groups.get_mut(&group).and_then(|g| g.consumer.as_mut());
                if let Some(m) = c.and_then(|c| c.members.get_mut(&member)) {
                    m.assigned.clear();
                    m.revoking.clear();
                }
            }
        },
        Rec::CgTarget {
            group,
            member,
            parts,
        } => match parts {
            Some(p) => {
                consumer_of(groups, &group).target.insert(member, p);
            }
            None => {
                if let Some(c) = groups.get_mut(&group).and_then(|g| g.consumer.as_mut()) {
                    c.target.remove(&member);
                }
            }
        },
        Rec::Offset {
            group,
            topic,
            partition,
            offset,
            leader_epoch,
            metadata,
            ts,
        } => {
            let g = groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group));
            g.offsets.insert(
                (topic, partition),
                CommittedOffset {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms: ts,
                },
            );
        }
        Rec::OffsetDeleted {
            group,
            topic,
            partition,
        } => {
            if let Some(g) = groups.get_mut(&group) {
                g.offsets.remove(&(topic, partition));
            }
        }
        Rec::TxnOffset {
            group,
            pid,
            topic,
            partition,
            offset,
            leader_epoch,
            metadata,
            ts,
        } => {
            let g = groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group));
            g.txn_offsets.entry(pid).or_default().insert(
                (topic, partition),
                CommittedOffset {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms: ts,
                },
            );
        }
        Rec::TxnEnd { group, pid, commit } => {
            if let Some(g) = groups.get_mut(&group) {
                if let Some(pending) = g.txn_offsets.remove(&pid) {
                    if commit {
                        g.offsets.extend(pending);
                    }
                }
            }
        }
    }
}

/// Kafka stores a commit without metadata as "" (`OffsetAndMetadata.NO_METADATA`), and so
/// answers OffsetFetch with "" for it.
fn no_metadata_as_empty(metadata: &Option<String>) -> String {
    metadata.clone().unwrap_or_default()
}

fn has_consumer(groups: &BTreeMap<String, Group>, group: &str) -> bool {
    groups.get(group).is_some_and(|g| g.consumer.is_some())
}

/// The consumer-group state of `group`, created (replacing any classic metadata) if needed.
fn consumer_of<'a>(groups: &'a mut BTreeMap<String, Group>, group: &str) -> &'a mut ConsumerGroup {
    let g = groups
        .entry(group.to_string())
        .or_insert_with(|| Group::new(group));
    if g.consumer.is_none() {
        g.members.clear();
        g.leader = None;
        g.protocol_type = None;
        g.protocol_name = None;
        g.state = GroupState::Empty;
    }
    g.consumer.get_or_insert_with(ConsumerGroup::default)
}

/// A member of `group`'s consumer-group state, created with defaults if needed (its
/// subscription and assignment are separate records).
fn member_of<'a>(
    groups: &'a mut BTreeMap<String, Group>,
    group: &str,
    member: &str,
) -> &'a mut CMember {
    consumer_of(groups, group)
        .members
        .entry(member.to_string())
        .or_insert_with(|| CMember::new(member))
}
