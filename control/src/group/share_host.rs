//! Share groups (KIP-932) hosted by the group coordinator, next to classic and consumer
//! groups: one group-id namespace, the same `__consumer_offsets` log (records 10–15).
//!
//! A share group lives in [`GroupCoordinator::shares`], never also in `groups`: a share
//! heartbeat for an id that is a classic or consumer group is refused, and so are the classic
//! and consumer APIs on a share group id (Kafka 4.1's cross-type answers). Every change
//! appends the records it wrote ([`ShareGroup::delta`]), tombstones included; a load replays
//! them ([`ShareGroup::replay`]).

use std::collections::BTreeMap;

use super::*;
use crate::group_config::{GroupOverrides, SHARE_HEARTBEAT_INTERVAL_MS, SHARE_SESSION_TIMEOUT_MS};
use crate::share::group::{
    self as share, Heartbeat, HeartbeatError, HeartbeatReply, ShareGroup, ShareGroupLimits,
};
use crate::share::group_record::{GroupKey as ShareKey, GroupValue as ShareValue};

/// A ShareGroupHeartbeat's answer: the group's reply and the interval the member is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareHeartbeatOk {
    pub reply: HeartbeatReply,
    pub heartbeat_interval_ms: i32,
}

/// ShareGroupDescribe of one group.
#[derive(Debug, Clone)]
pub struct ShareGroupDescription {
    pub state: &'static str,
    pub group: ShareGroup,
}

impl GroupCoordinator {
    /// The group's share limits: the broker's, or the group's own `share.*` configs.
    fn share_limits(&self, group_id: &str) -> ShareGroupLimits {
        let own = GroupOverrides::new(self.group_configs.get(group_id));
        let d = ShareGroupLimits::default();
        ShareGroupLimits {
            session_timeout_ms: own
                .int(SHARE_SESSION_TIMEOUT_MS)
                .map_or(d.session_timeout_ms, i64::from),
            heartbeat_interval_ms: own
                .int(SHARE_HEARTBEAT_INTERVAL_MS)
                .unwrap_or(d.heartbeat_interval_ms),
            ..d
        }
    }

    /// Topic names by id, for the state-partition record.
    fn topic_names(&self) -> BTreeMap<uuid::Uuid, String> {
        self.topics
            .iter()
            .map(|(name, (id, _))| (*id, name.clone()))
            .collect()
    }

    /// Appends the records `after` wrote over `before` (a missing group: nothing before).
    fn persist_share(&mut self, group_id: &str, before: &ShareGroup, after: &ShareGroup) {
        let names = self.topic_names();
        for (key, value) in after.delta(before, group_id, &names) {
            self.persist(&Rec::Share { key, value });
        }
    }

    /// The partitions whose share state `group_id` initialized (empty for an unknown group).
    pub fn share_initialized_partitions(&self, group_id: &str) -> Vec<(uuid::Uuid, i32)> {
        self.shares
            .get(group_id)
            .map(|g| g.initialized.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Whether AlterShareGroupOffsets / DeleteShareGroupOffsets may change `group_id`: an
    /// existing share group without members. Its group epoch (the state epoch an alter
    /// initializes with).
    pub fn share_offsets_editable(&self, group_id: &str) -> Result<i32, (i16, String)> {
        if group_id.is_empty() {
            return Err((INVALID_GROUP_ID, "The group id must not be empty.".into()));
        }
        match self.shares.get(group_id) {
            None => Err((GROUP_ID_NOT_FOUND, format!("Group {group_id} not found."))),
            Some(g) if !g.members.is_empty() => Err((
                NON_EMPTY_GROUP,
                format!("Share group {group_id} is not empty."),
            )),
            Some(g) => Ok(g.epoch),
        }
    }

    /// A mirror's share-offset sync is about to set `group_id`'s start offsets: the group is
    /// created Empty when missing, and its epoch bumped, in one step on the coordinator (so
    /// it never races a joining member). The new epoch is the state epoch to initialize
    /// with: above any state this group wrote before, so an older incarnation's leftover
    /// state (DeleteGroups keeps state led elsewhere) is overwritten, not fenced. Refused
    /// for an empty id, a classic or consumer group, and a group with members.
    pub fn share_mirror_target(&mut self, group_id: &str) -> Result<i32, (i16, String)> {
        if group_id.is_empty() {
            return Err((INVALID_GROUP_ID, "The group id must not be empty.".into()));
        }
        if self.is_other_type_group(group_id) {
            return Err((
                GROUP_ID_NOT_FOUND,
                format!("Group {group_id} is not a share group."),
            ));
        }
        let before = self.shares.get(group_id).cloned().unwrap_or_default();
        if !before.members.is_empty() {
            return Err((
                NON_EMPTY_GROUP,
                format!("Share group {group_id} is not empty."),
            ));
        }
        let mut after = before.clone();
        after.epoch += 1;
        self.persist_share(group_id, &before, &after);
        let epoch = after.epoch;
        self.shares.insert(group_id.to_string(), after);
        Ok(epoch)
    }

    /// DeleteShareGroupOffsets of `topic`: the group forgets its initialized partitions (a
    /// later member initializes them again); which they were.
    pub fn share_forget_topic(&mut self, group_id: &str, topic: uuid::Uuid) -> Vec<i32> {
        let Some(before) = self.shares.get(group_id).cloned() else {
            return Vec::new();
        };
        let mut after = before.clone();
        let gone: Vec<i32> = after
            .initialized
            .iter()
            .filter(|(t, _)| *t == topic)
            .map(|(_, p)| *p)
            .collect();
        after.initialized.retain(|(t, _)| *t != topic);
        if !gone.is_empty() {
            self.persist_share(group_id, &before, &after);
            self.shares.insert(group_id.to_string(), after);
        }
        gone
    }

    /// Whether `group_id` is a live classic or consumer group (the share APIs refuse it).
    fn is_other_type_group(&self, group_id: &str) -> bool {
        self.groups
            .get(group_id)
            .is_some_and(|g| g.state != GroupState::Dead)
    }

    /// Whether `group_id` is a share group (the classic and consumer APIs refuse it).
    pub fn is_share_group(&self, group_id: &str) -> bool {
        self.shares.contains_key(group_id)
    }

    /// ShareGroupHeartbeat (76) at `now_ms`. `topics` is the cluster's topics. Errors are
    /// Kafka's code and message.
    pub fn share_heartbeat(
        &mut self,
        group_id: &str,
        hb: &Heartbeat,
        topics: &TopicView,
        now_ms: i64,
    ) -> Result<ShareHeartbeatOk, (i16, Option<String>)> {
        let refused = |e: HeartbeatError| {
            let msg = match &e {
                HeartbeatError::InvalidRequest(m) => Some(m.clone()),
                _ => None,
            };
            (e.code(), msg)
        };
        share::validate(group_id, hb).map_err(refused)?;
        if self.is_other_type_group(group_id) {
            return Err((
                GROUP_ID_NOT_FOUND,
                Some(format!("Group {group_id} is not a share group.")),
            ));
        }
        if !self.shares.contains_key(group_id) && hb.member_epoch != 0 {
            return Err((
                GROUP_ID_NOT_FOUND,
                Some(format!("Share group {group_id} not found.")),
            ));
        }
        let limits = self.share_limits(group_id);
        let before = self.shares.get(group_id).cloned();
        let mut group = before.clone().unwrap_or_default();
        let reply = group
            .heartbeat(hb, topics, limits, now_ms)
            .map_err(refused)?;
        self.persist_share(group_id, &before.unwrap_or_default(), &group);
        self.shares.insert(group_id.to_string(), group);
        Ok(ShareHeartbeatOk {
            reply,
            heartbeat_interval_ms: limits.heartbeat_interval_ms,
        })
    }

    /// The share state of `partitions` was initialized (InitializeShareGroupState answered):
    /// the group's next heartbeat may assign them.
    pub fn share_initialized(&mut self, group_id: &str, partitions: &[(uuid::Uuid, i32)]) {
        let Some(before) = self.shares.get(group_id).cloned() else {
            return;
        };
        let mut after = before.clone();
        after.initialized(partitions);
        self.persist_share(group_id, &before, &after);
        self.shares.insert(group_id.to_string(), after);
    }

    /// Initializing `partitions` failed: a later heartbeat asks for them again.
    pub fn share_initialize_failed(&mut self, group_id: &str, partitions: &[(uuid::Uuid, i32)]) {
        if let Some(g) = self.shares.get_mut(group_id) {
            g.initialize_failed(partitions);
        }
    }

    /// Fences the share-group members whose session expired; persists what changed.
    pub(super) fn expire_share_members(&mut self, now_ms: i64) {
        let expiring: Vec<String> = self
            .shares
            .iter()
            .filter(|(_, g)| g.members.values().any(|m| m.deadline_ms <= now_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for id in expiring {
            let before = self.shares[&id].clone();
            let mut after = before.clone();
            after.expire(now_ms);
            self.persist_share(&id, &before, &after);
            self.shares.insert(id, after);
        }
    }

    /// ShareGroupDescribe (77) of one group: GROUP_ID_NOT_FOUND for a missing group and for a
    /// group of another type.
    pub fn share_describe(&self, group_id: &str) -> Result<ShareGroupDescription, (i16, String)> {
        match self.shares.get(group_id) {
            Some(g) => Ok(ShareGroupDescription {
                state: g.state(),
                group: g.clone(),
            }),
            None if self.groups.contains_key(group_id) => Err((
                GROUP_ID_NOT_FOUND,
                format!("Group {group_id} is not a share group."),
            )),
            None => Err((GROUP_ID_NOT_FOUND, format!("Group {group_id} not found."))),
        }
    }

    /// DeleteGroups of a share group: NON_EMPTY_GROUP while it has members, else its records
    /// are tombstoned. (Its share-partition state on `__share_group_state` is the share
    /// coordinator's to delete first; nothing writes it yet.)
    pub(super) fn delete_share_group(&mut self, group_id: &str) -> i16 {
        let Some(g) = self.shares.get(group_id) else {
            return GROUP_ID_NOT_FOUND;
        };
        if !g.members.is_empty() {
            return NON_EMPTY_GROUP;
        }
        let names = self.topic_names();
        let keys: Vec<ShareKey> = g
            .records(group_id, &names)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        self.shares.remove(group_id);
        for key in keys {
            self.persist(&Rec::Share { key, value: None });
        }
        NONE
    }

    /// Share groups as ListGroups shows them (type and protocol type "share").
    pub(super) fn share_listings(&self) -> impl Iterator<Item = GroupListing> + '_ {
        self.shares.iter().map(|(id, g)| GroupListing {
            group_id: id.clone(),
            protocol_type: "share".to_string(),
            state: if g.members.is_empty() {
                GroupState::Empty
            } else {
                GroupState::Stable
            },
            group_type: "share",
            state_name: g.state(),
        })
    }

    /// Every record of the live share groups (for a compaction).
    pub(super) fn share_live_records(&self) -> Vec<Vec<u8>> {
        let names = self.topic_names();
        self.shares
            .iter()
            .flat_map(|(id, g)| g.records(id, &names))
            .flat_map(|(key, value)| Rec::Share { key, value }.encode())
            .collect()
    }
}

/// Applies a share-group record read back from the log. A tombstone of the group's metadata
/// record ends the group (Kafka deletes a share group with tombstones for all its records).
pub(super) fn replay_share(
    shares: &mut BTreeMap<String, ShareGroup>,
    key: ShareKey,
    value: Option<ShareValue>,
) {
    let group = key.group().to_string();
    if matches!((&key, &value), (ShareKey::Metadata { .. }, None)) {
        shares.remove(&group);
        return;
    }
    if value.is_none() && !shares.contains_key(&group) {
        return;
    }
    shares
        .entry(group)
        .or_default()
        .replay(&key, value.as_ref());
}
