//! Planning of the metadata sync loop and the consumer-group offset sync (seed 003), as pure
//! functions over snapshots: the async side (net) fetches the source snapshot (Metadata,
//! DescribeConfigs, ListGroups, OffsetFetch) and the local one, calls these, and applies the
//! returned actions through the broker. Keeping the decisions here makes them testable without
//! any cluster.
//!
//! Invariants: a destination topic is never deleted (a vanished source topic only stops its
//! mirror partitions); a topic is created with the source's id and partition count, and never
//! over a local topic with another id; STOPPED partitions are never restarted by the loop (only
//! an explicit AddTopicsToMirror does that).
//!
//! Absence is not deletion: a topic missing from one Metadata answer (an ACL change on the
//! source, a partial answer) only becomes [`SourceTopicMissing`](SyncAction::SourceTopicMissing);
//! [`DeletionConfirmations`] stops it only after a direct lookup by name and by id says it is
//! gone in two consecutive rounds. Not being allowed to see it is a failure, never a deletion,
//! and a source topic with a new id under the same name is never mirrored into the old one.

use std::collections::{BTreeMap, BTreeSet};

use kmirror_types::TopicPartition;
use uuid::Uuid;

use super::definition::{settings, split_list, MirrorDefinition};
use super::owners::SyncOwners;
use super::state::PartitionState;
use super::MirrorError;

/// A topic as the source describes it: only explicitly set (non-default) configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTopic {
    pub name: String,
    pub topic_id: Uuid,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

/// A local topic: its explicitly set configs (including `mirror.name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalTopic {
    pub name: String,
    pub topic_id: Uuid,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

/// One change the sync loop must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncAction {
    /// Create the mirror topic: same name, id and partition count; configs already filtered
    /// and with `mirror.name` set.
    CreateTopic {
        name: String,
        topic_id: Uuid,
        partitions: i32,
        configs: BTreeMap<String, String>,
    },
    /// Grow the local topic to the source's partition count.
    CreatePartitions { name: String, count: i32 },
    /// Align synced configs: set these, delete those (back to defaults).
    AlterConfigs {
        name: String,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    },
    /// UNKNOWN partition of a mirrored topic: move it to PREPARING.
    Materialize(TopicPartition),
    /// A mirrored topic is absent from the source's topic list: deleted, hidden by an ACL or
    /// a partial answer. Needs a direct lookup and [`DeletionConfirmations`] before any action.
    SourceTopicMissing { name: String, topic_id: Uuid },
    /// The source topic under this name has another id than the one mirrored (deleted and
    /// re-created): the mirror partitions fail, nothing from the new topic is mirrored.
    SourceTopicIdChanged {
        name: String,
        mirrored_id: Uuid,
        source_id: Uuid,
    },
    /// Cannot mirror this topic; reported, nothing done.
    Conflict { name: String, reason: String },
}

/// Plan one sync round of `def` given both snapshots. `state_of` gives the mirror partition
/// state of a local partition; `owner_of` the mirror currently owning a topic (a partition not
/// STOPPED), if any.
pub fn plan_metadata_sync(
    def: &MirrorDefinition,
    source: &[SourceTopic],
    local: &[LocalTopic],
    state_of: impl Fn(&TopicPartition) -> PartitionState,
    owner_of: impl Fn(&str) -> Option<String>,
) -> Result<Vec<SyncAction>, MirrorError> {
    let filter = def.topic_filter()?;
    let exclude = def.config_exclude()?;
    let local_by_name: BTreeMap<&str, &LocalTopic> =
        local.iter().map(|t| (t.name.as_str(), t)).collect();
    let local_by_id: BTreeMap<Uuid, &LocalTopic> = local.iter().map(|t| (t.topic_id, t)).collect();
    let mut actions = Vec::new();

    for s in source.iter().filter(|s| filter.matches(&s.name)) {
        if let Some(owner) = owner_of(&s.name) {
            if owner != def.name {
                actions.push(SyncAction::Conflict {
                    name: s.name.clone(),
                    reason: format!("already mirrored by '{owner}'"),
                });
                continue;
            }
        }
        let wanted_configs =
            exclude.filter(s.configs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        match local_by_name.get(s.name.as_str()) {
            None => {
                if let Some(other) = local_by_id.get(&s.topic_id) {
                    actions.push(SyncAction::Conflict {
                        name: s.name.clone(),
                        reason: format!(
                            "topic id {} is already used by local topic '{}'",
                            s.topic_id, other.name
                        ),
                    });
                    continue;
                }
                let mut configs = wanted_configs;
                configs.insert(super::MIRROR_NAME_CONFIG.to_owned(), def.name.clone());
                actions.push(SyncAction::CreateTopic {
                    name: s.name.clone(),
                    topic_id: s.topic_id,
                    partitions: s.partitions,
                    configs,
                });
                for p in 0..s.partitions {
                    actions.push(SyncAction::Materialize(TopicPartition::new(
                        s.name.clone(),
                        p,
                    )));
                }
            }
            Some(l) if l.topic_id != s.topic_id => {
                let ours = (0..l.partitions).any(|p| {
                    let st = state_of(&TopicPartition::new(l.name.clone(), p));
                    st != PartitionState::Unknown && st != PartitionState::Stopped
                });
                if ours {
                    // Re-created on the source: the old mirror partitions fail (never deleted,
                    // never fed from the new topic).
                    actions.push(SyncAction::SourceTopicIdChanged {
                        name: l.name.clone(),
                        mirrored_id: l.topic_id,
                        source_id: s.topic_id,
                    });
                }
                actions.push(SyncAction::Conflict {
                    name: s.name.clone(),
                    reason: format!(
                        "local topic has id {} but the source topic has id {}",
                        l.topic_id, s.topic_id
                    ),
                });
            }
            Some(l) => {
                let stopped = (0..l.partitions).all(|p| {
                    state_of(&TopicPartition::new(l.name.clone(), p)) == PartitionState::Stopped
                });
                if stopped && l.partitions > 0 {
                    // Failed over: no longer synced until explicitly re-added.
                    continue;
                }
                if s.partitions > l.partitions {
                    actions.push(SyncAction::CreatePartitions {
                        name: l.name.clone(),
                        count: s.partitions,
                    });
                }
                let mut set = BTreeMap::new();
                for (k, v) in &wanted_configs {
                    if l.configs.get(k) != Some(v) {
                        set.insert(k.clone(), v.clone());
                    }
                }
                let delete: Vec<String> = l
                    .configs
                    .keys()
                    .filter(|k| !exclude.is_excluded(k) && !wanted_configs.contains_key(*k))
                    .cloned()
                    .collect();
                if !set.is_empty() || !delete.is_empty() {
                    actions.push(SyncAction::AlterConfigs {
                        name: l.name.clone(),
                        set,
                        delete,
                    });
                }
                for p in 0..s.partitions {
                    let tp = TopicPartition::new(l.name.clone(), p);
                    if state_of(&tp) == PartitionState::Unknown {
                        actions.push(SyncAction::Materialize(tp));
                    }
                }
            }
        }
    }

    // Local topics this mirror manages whose source topic vanished.
    let source_names: BTreeSet<&str> = source.iter().map(|s| s.name.as_str()).collect();
    for l in local {
        if source_names.contains(l.name.as_str()) {
            continue;
        }
        let managed = (0..l.partitions).any(|p| {
            let st = state_of(&TopicPartition::new(l.name.clone(), p));
            st != PartitionState::Unknown && st != PartitionState::Stopped
        }) && owner_of(&l.name).as_deref() == Some(def.name.as_str());
        if managed {
            actions.push(SyncAction::SourceTopicMissing {
                name: l.name.clone(),
                topic_id: l.topic_id,
            });
        }
    }
    Ok(actions)
}

/// What a direct Metadata lookup of one mirrored topic on the source found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceLookup {
    /// By name UNKNOWN_TOPIC_OR_PARTITION and by id UNKNOWN_TOPIC_ID.
    Gone,
    /// The name resolves, to this id.
    Present(Uuid),
    /// TOPIC_AUTHORIZATION_FAILED (or another authorization error), with the source's words.
    Unauthorized(String),
    /// The lookup itself failed (unreachable, timeout, other error): no conclusion.
    Failed(String),
}

/// What to do about a mirrored topic after a round's lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissingVerdict {
    /// Not confirmed yet: do nothing this round.
    Wait,
    /// Gone in two consecutive rounds: stop its partitions (failover to STOPPED).
    Deleted,
    /// Visible again with the mirrored id: the earlier answer was partial.
    Present,
    /// FAILED with this reason (never STOPPED): id changed or not authorized.
    Fail(String),
}

/// Consecutive-round confirmation of source topic deletions, per (mirror, topic).
#[derive(Debug, Default)]
pub struct DeletionConfirmations {
    gone_rounds: BTreeMap<(String, String), u32>,
}

impl DeletionConfirmations {
    /// Rounds in a row a topic must be looked up as gone before it is treated as deleted.
    pub const ROUNDS: u32 = 2;

    /// The topic was in this round's answer: any count starts over.
    pub fn seen(&mut self, mirror: &str, topic: &str) {
        self.gone_rounds
            .remove(&(mirror.to_owned(), topic.to_owned()));
    }

    /// The topic was missing from this round's answer and a direct lookup found `lookup`.
    pub fn missing(
        &mut self,
        mirror: &str,
        topic: &str,
        mirrored_id: Uuid,
        lookup: &SourceLookup,
    ) -> MissingVerdict {
        let key = (mirror.to_owned(), topic.to_owned());
        match lookup {
            SourceLookup::Gone => {
                let n = self.gone_rounds.entry(key.clone()).or_insert(0);
                *n += 1;
                if *n >= Self::ROUNDS {
                    self.gone_rounds.remove(&key);
                    MissingVerdict::Deleted
                } else {
                    MissingVerdict::Wait
                }
            }
            SourceLookup::Present(id) if *id == mirrored_id => {
                self.gone_rounds.remove(&key);
                MissingVerdict::Present
            }
            SourceLookup::Present(id) => {
                self.gone_rounds.remove(&key);
                MissingVerdict::Fail(id_changed_reason(mirrored_id, *id))
            }
            SourceLookup::Unauthorized(why) => {
                self.gone_rounds.remove(&key);
                MissingVerdict::Fail(format!(
                    "not authorized to describe the source topic: {why}"
                ))
            }
            // No conclusion: neither count up nor start over.
            SourceLookup::Failed(_) => MissingVerdict::Wait,
        }
    }
}

/// The FAILED reason of a mirror topic whose source was re-created under the same name.
pub fn id_changed_reason(mirrored_id: Uuid, source_id: Uuid) -> String {
    format!("source topic id changed (mirrored {mirrored_id}, source now {source_id})")
}

/// Offset a synced group gets on the destination:
/// `max(dest log start, min(source committed, dest end offset))`.
pub fn clamp_group_offset(source_committed: i64, dest_log_start: i64, dest_end: i64) -> i64 {
    source_committed.min(dest_end).max(dest_log_start)
}

/// One committed offset to write on the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffsetCommit {
    pub group: String,
    pub tp: TopicPartition,
    pub offset: i64,
}

/// Plan a consumer-group offset sync round. `source` is group -> committed offsets on the
/// source; only groups passing the mirror's group filters and not active on the destination
/// are synced, only for partitions this mirror mirrors, and only when the clamped offset
/// differs from what the destination has.
pub fn plan_group_sync(
    def: &MirrorDefinition,
    source: &BTreeMap<String, BTreeMap<TopicPartition, i64>>,
    active_on_destination: &BTreeSet<String>,
    dest_committed: impl Fn(&str, &TopicPartition) -> Option<i64>,
    dest_bounds: impl Fn(&TopicPartition) -> Option<(i64, i64)>,
    mirrored: impl Fn(&TopicPartition) -> bool,
) -> Result<Vec<GroupOffsetCommit>, MirrorError> {
    let include = def
        .settings
        .get(settings::GROUPS_INCLUDE)
        .map(|s| split_list(s))
        .unwrap_or_else(|| vec![".*".to_owned()]);
    let exclude = def
        .settings
        .get(settings::GROUPS_EXCLUDE)
        .map(|s| split_list(s))
        .unwrap_or_default();
    let filter = super::definition::TopicFilter::new(&[], &include, &exclude)?;
    let mut out = Vec::new();
    for (group, offsets) in source {
        if active_on_destination.contains(group) || !filter.matches(group) {
            continue;
        }
        for (tp, committed) in offsets {
            if *committed < 0 || !mirrored(tp) {
                continue;
            }
            let Some((start, end)) = dest_bounds(tp) else {
                continue;
            };
            let offset = clamp_group_offset(*committed, start, end);
            if dest_committed(group, tp) != Some(offset) {
                out.push(GroupOffsetCommit {
                    group: group.clone(),
                    tp: tp.clone(),
                    offset,
                });
            }
        }
    }
    Ok(out)
}

/// One ACL binding (Kafka's resource pattern + access control entry), as DescribeAcls lists
/// it. Codes are Kafka's (resource type, pattern type, operation, permission type).
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

/// What an ACL sync round does: bindings to create (as this mirror's) and to delete (this
/// mirror's in `owned` mode, any extra one in `exact` mode), and the source bindings it
/// leaves alone because another mirror owns them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclSyncPlan {
    pub create: Vec<AclBinding>,
    pub delete: Vec<AclBinding>,
    pub clashes: Vec<SyncClash>,
}

/// A source entry this mirror does not write because someone else wrote it first: the first
/// owner keeps it. Reported once per round (log, `describe`, metric).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncClash {
    /// The binding or entity, as a person reads it.
    pub entry: String,
    /// The mirror that owns it; None: a local admin.
    pub owner: Option<String>,
}

/// How a mirror's ACL or quota sync treats entries it did not write (`mirror.acl.sync.mode`,
/// `mirror.quota.sync.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Create and update only what this mirror wrote; delete only its own (the default).
    Owned,
    /// The seed's sync: the destination's set (of the selected principals or entities) made
    /// equal to the source's, whoever wrote it.
    Exact,
}

/// Setting: regexes of principals whose ACLs the sync never touches.
pub const ACL_PRINCIPALS_EXCLUDE: &str = "mirror.acl.principals.exclude";

fn writer_of(def: &MirrorDefinition, mode: SyncMode) -> super::owners::MirrorWriter {
    super::owners::MirrorWriter {
        mirror: def.name.clone(),
        exact: mode == SyncMode::Exact,
    }
}

/// The writer a mirror's ACL sync proposes its changes as.
pub fn acl_sync_writer(def: &MirrorDefinition) -> super::owners::MirrorWriter {
    writer_of(def, def.acl_sync_mode().unwrap_or(SyncMode::Owned))
}

/// The writer a mirror's quota sync proposes its changes as.
pub fn quota_sync_writer(def: &MirrorDefinition) -> super::owners::MirrorWriter {
    writer_of(def, def.quota_sync_mode().unwrap_or(SyncMode::Owned))
}

/// Plan an ACL sync round (seed 003: create missing, delete extra), in the mirror's
/// `mirror.acl.sync.mode`. Only bindings whose principal passes
/// `mirror.acl.principals.exclude` are considered.
pub fn plan_acl_sync(
    def: &MirrorDefinition,
    source: &[AclBinding],
    destination: &[AclBinding],
    owners: &SyncOwners,
) -> Result<AclSyncPlan, MirrorError> {
    if def
        .settings
        .get(settings::ACL_SYNC_ENABLE)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
    {
        return Ok(AclSyncPlan::default());
    }
    let mode = def.acl_sync_mode()?;
    let exclude = def
        .settings
        .get(ACL_PRINCIPALS_EXCLUDE)
        .map(|s| split_list(s))
        .unwrap_or_default();
    let filter = super::definition::TopicFilter::new(&[], &[".*".to_owned()], &exclude)?;
    let keep = |a: &&AclBinding| filter.matches(&a.principal);
    let src: BTreeSet<&AclBinding> = source.iter().filter(keep).collect();
    let dst: BTreeSet<&AclBinding> = destination.iter().filter(keep).collect();
    let mine = |b: &AclBinding| owners.acl_owner(b) == Some(def.name.as_str());
    let mut plan = AclSyncPlan {
        create: src.difference(&dst).map(|a| (*a).clone()).collect(),
        ..AclSyncPlan::default()
    };
    match mode {
        SyncMode::Exact => {
            plan.delete = dst.difference(&src).map(|a| (*a).clone()).collect();
        }
        SyncMode::Owned => {
            plan.delete = dst
                .difference(&src)
                .filter(|b| mine(b))
                .map(|a| (*a).clone())
                .collect();
            plan.clashes = src
                .intersection(&dst)
                .filter_map(|b| {
                    let owner = owners.acl_owner(b)?;
                    (owner != def.name).then(|| SyncClash {
                        entry: acl_text(b),
                        owner: Some(owner.to_owned()),
                    })
                })
                .collect();
        }
    }
    Ok(plan)
}

/// A binding as `kafka-acls --list` shows it.
fn acl_text(b: &AclBinding) -> String {
    format!(
        "{} on resource type {} '{}' (pattern type {}): operation {} permission {} from host {}",
        b.principal,
        b.resource_type,
        b.resource_name,
        b.pattern_type,
        b.operation,
        b.permission_type,
        b.host
    )
}

/// Setting: regexes of entity names (user or client-id; `<default>` for a default entity)
/// whose client quotas the sync never touches.
pub const QUOTA_ENTITIES_EXCLUDE: &str = "mirror.quota.entities.exclude";

/// What a quota sync round does: one alteration per entity to change, and the source
/// entities it leaves alone because a local admin or another mirror owns them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QuotaSyncPlan {
    pub alterations: Vec<crate::quota::Alteration>,
    pub clashes: Vec<SyncClash>,
}

/// Plan a client quota sync round, as ACLs: one alteration per entity whose quotas differ,
/// setting the source's values and removing keys the source does not have. In `owned` mode
/// only entities with no quota yet or this mirror's are altered (another owner's entity that
/// the source would change is a clash); in `exact` mode every selected entity is made the
/// source's.
pub fn plan_quota_sync(
    def: &MirrorDefinition,
    source: &BTreeMap<crate::quota::Entity, crate::quota::Values>,
    destination: &BTreeMap<crate::quota::Entity, crate::quota::Values>,
    owners: &SyncOwners,
) -> Result<QuotaSyncPlan, MirrorError> {
    if def
        .settings
        .get(settings::QUOTA_SYNC_ENABLE)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
    {
        return Ok(QuotaSyncPlan::default());
    }
    let mode = def.quota_sync_mode()?;
    let exclude = def
        .settings
        .get(QUOTA_ENTITIES_EXCLUDE)
        .map(|s| split_list(s))
        .unwrap_or_default();
    let filter = super::definition::TopicFilter::new(&[], &[".*".to_owned()], &exclude)?;
    let keep = |e: &crate::quota::Entity| {
        e.values()
            .all(|n| filter.matches(n.as_deref().unwrap_or("<default>")))
    };
    let empty = crate::quota::Values::new();
    let entities: BTreeSet<&crate::quota::Entity> = source
        .keys()
        .chain(destination.keys())
        .filter(|e| keep(e))
        .collect();
    let mut plan = QuotaSyncPlan::default();
    for e in entities {
        let src = source.get(e).unwrap_or(&empty);
        let dst = destination.get(e).unwrap_or(&empty);
        let owner = owners.quota_owner(e);
        if mode == SyncMode::Owned && !dst.is_empty() && owner != Some(def.name.as_str()) {
            // Not ours: a clash when the source would change it (or another mirror holds it).
            if !src.is_empty() && (src != dst || owner.is_some()) {
                plan.clashes.push(SyncClash {
                    entry: format!("{e:?}"),
                    owner: owner.map(str::to_owned),
                });
            }
            continue;
        }
        let mut ops: Vec<(String, Option<f64>)> = src
            .iter()
            .filter(|(k, v)| dst.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), Some(*v)))
            .collect();
        ops.extend(
            dst.keys()
                .filter(|k| !src.contains_key(*k))
                .map(|k| (k.clone(), None)),
        );
        if !ops.is_empty() {
            plan.alterations.push(crate::quota::Alteration {
                entity: e.iter().map(|(t, n)| (t.clone(), n.clone())).collect(),
                ops,
            });
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(extra: &[(&str, &str)]) -> MirrorDefinition {
        let mut s: BTreeMap<String, String> =
            BTreeMap::from([("bootstrap.servers".to_owned(), "h:1".to_owned())]);
        for (k, v) in extra {
            s.insert(k.to_string(), v.to_string());
        }
        let mut d = MirrorDefinition::new("dr", s).unwrap();
        d.include_patterns = vec!["orders.*".into()];
        d
    }

    fn id(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn cfg(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn src(name: &str, n: u8, parts: i32, c: &[(&str, &str)]) -> SourceTopic {
        SourceTopic {
            name: name.into(),
            topic_id: id(n),
            partitions: parts,
            configs: cfg(c),
        }
    }

    fn loc(name: &str, n: u8, parts: i32, c: &[(&str, &str)]) -> LocalTopic {
        LocalTopic {
            name: name.into(),
            topic_id: id(n),
            partitions: parts,
            configs: cfg(c),
        }
    }

    #[test]
    fn new_source_topic_is_created_with_same_id_partitions_and_filtered_configs() {
        let a = plan_metadata_sync(
            &def(&[]),
            &[
                src(
                    "orders",
                    1,
                    3,
                    &[("retention.ms", "1000"), ("min.insync.replicas", "2")],
                ),
                src("payments", 2, 1, &[]),
            ],
            &[],
            |_| PartitionState::Unknown,
            |_| None,
        )
        .unwrap();
        assert_eq!(
            a[0],
            SyncAction::CreateTopic {
                name: "orders".into(),
                topic_id: id(1),
                partitions: 3,
                configs: cfg(&[("retention.ms", "1000"), ("mirror.name", "dr")]),
            }
        );
        assert_eq!(a.len(), 4, "create + 3 materialize; payments not selected");
    }

    #[test]
    fn expansion_and_config_changes_are_synced_but_excluded_keys_are_not() {
        let a = plan_metadata_sync(
            &def(&[]),
            &[src(
                "orders",
                1,
                4,
                &[("retention.ms", "2000"), ("min.insync.replicas", "3")],
            )],
            &[loc(
                "orders",
                1,
                2,
                &[
                    ("retention.ms", "1000"),
                    ("cleanup.policy", "compact"),
                    ("mirror.name", "dr"),
                    ("min.insync.replicas", "1"),
                ],
            )],
            |tp| {
                if tp.partition < 2 {
                    PartitionState::Mirroring
                } else {
                    PartitionState::Unknown
                }
            },
            |_| Some("dr".into()),
        )
        .unwrap();
        assert!(a.contains(&SyncAction::CreatePartitions {
            name: "orders".into(),
            count: 4
        }));
        assert!(a.contains(&SyncAction::AlterConfigs {
            name: "orders".into(),
            set: cfg(&[("retention.ms", "2000")]),
            delete: vec!["cleanup.policy".into()],
        }));
        assert!(a.contains(&SyncAction::Materialize(TopicPartition::new("orders", 2))));
        assert!(a.contains(&SyncAction::Materialize(TopicPartition::new("orders", 3))));
        assert!(!a.contains(&SyncAction::Materialize(TopicPartition::new("orders", 0))));
    }

    #[test]
    fn missing_or_recreated_source_topics_are_reported_and_never_deleted() {
        let a = plan_metadata_sync(
            &def(&[]),
            &[src("orders-b", 9, 1, &[])],
            &[loc("orders-a", 1, 1, &[]), loc("orders-b", 2, 1, &[])],
            |_| PartitionState::Mirroring,
            |_| Some("dr".into()),
        )
        .unwrap();
        assert!(a.contains(&SyncAction::SourceTopicMissing {
            name: "orders-a".into(),
            topic_id: id(1),
        }));
        assert!(a.contains(&SyncAction::SourceTopicIdChanged {
            name: "orders-b".into(),
            mirrored_id: id(2),
            source_id: id(9),
        }));
        assert!(a
            .iter()
            .any(|x| matches!(x, SyncAction::Conflict { name, .. } if name == "orders-b")));
        assert!(!a
            .iter()
            .any(|x| matches!(x, SyncAction::CreateTopic { .. })));
    }

    #[test]
    fn deletion_needs_two_consecutive_gone_lookups_and_auth_errors_never_stop() {
        let mut c = DeletionConfirmations::default();
        let (m, t) = ("dr", "orders");
        // One partial answer, then the topic is back: nothing happens, the count restarts.
        assert_eq!(
            c.missing(m, t, id(1), &SourceLookup::Gone),
            MissingVerdict::Wait
        );
        c.seen(m, t);
        assert_eq!(
            c.missing(m, t, id(1), &SourceLookup::Gone),
            MissingVerdict::Wait
        );
        // A failed lookup neither confirms nor resets.
        assert_eq!(
            c.missing(m, t, id(1), &SourceLookup::Failed("timeout".into())),
            MissingVerdict::Wait
        );
        assert_eq!(
            c.missing(m, t, id(1), &SourceLookup::Gone),
            MissingVerdict::Deleted
        );
        // Present by direct lookup with the same id: a partial answer, not a deletion.
        assert_eq!(
            c.missing(m, t, id(1), &SourceLookup::Present(id(1))),
            MissingVerdict::Present
        );
        // Hidden by an ACL: FAILED with the reason, however many rounds.
        for _ in 0..3 {
            match c.missing(
                m,
                t,
                id(1),
                &SourceLookup::Unauthorized("TOPIC_AUTHORIZATION_FAILED".into()),
            ) {
                MissingVerdict::Fail(r) => assert!(r.contains("not authorized"), "{r}"),
                v => panic!("unauthorized must fail, got {v:?}"),
            }
        }
        // Re-created under the same name: FAILED, id changed.
        match c.missing(m, t, id(1), &SourceLookup::Present(id(7))) {
            MissingVerdict::Fail(r) => assert!(r.contains("source topic id changed"), "{r}"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn topic_id_in_use_and_foreign_mirror_are_conflicts() {
        let a = plan_metadata_sync(
            &def(&[]),
            &[src("orders", 1, 1, &[]), src("orders2", 3, 1, &[])],
            &[loc("local-x", 1, 1, &[])],
            |_| PartitionState::Unknown,
            |t| (t == "orders2").then(|| "other".to_owned()),
        )
        .unwrap();
        assert_eq!(a.len(), 2);
        assert!(a.iter().all(|x| matches!(x, SyncAction::Conflict { .. })));
    }

    #[test]
    fn stopped_topics_are_left_alone_by_the_loop() {
        let a = plan_metadata_sync(
            &def(&[]),
            &[src("orders", 1, 4, &[("retention.ms", "5")])],
            &[loc("orders", 1, 2, &[])],
            |_| PartitionState::Stopped,
            |_| None,
        )
        .unwrap();
        assert!(a.is_empty(), "{a:?}");
    }

    fn acl(principal: &str, op: i8) -> AclBinding {
        AclBinding {
            resource_type: 2,
            resource_name: "orders".into(),
            pattern_type: 3,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission_type: 3,
        }
    }

    #[test]
    fn exact_acl_sync_creates_missing_deletes_extra_and_spares_excluded_principals() {
        let d = def(&[
            (ACL_PRINCIPALS_EXCLUDE, "User:admin"),
            ("mirror.acl.sync.mode", "exact"),
        ]);
        let plan = plan_acl_sync(
            &d,
            &[acl("User:app", 3), acl("User:app", 4)],
            &[acl("User:app", 3), acl("User:old", 3), acl("User:admin", 2)],
            &SyncOwners::default(),
        )
        .unwrap();
        assert_eq!(plan.create, vec![acl("User:app", 4)]);
        assert_eq!(plan.delete, vec![acl("User:old", 3)]);
        let off = def(&[("mirror.acl.sync.enable", "false")]);
        assert_eq!(
            plan_acl_sync(&off, &[acl("User:app", 3)], &[], &SyncOwners::default()).unwrap(),
            AclSyncPlan::default()
        );
    }

    #[test]
    fn owned_acl_sync_deletes_only_its_own_and_reports_another_mirrors() {
        let d = def(&[]);
        let mut owners = SyncOwners::default();
        owners.acls.insert(acl("User:gone", 3), "dr".into());
        owners.acls.insert(acl("User:other", 3), "hub2".into());
        owners.acls.insert(acl("User:shared", 3), "hub2".into());
        let plan = plan_acl_sync(
            &d,
            &[
                acl("User:app", 4),
                acl("User:shared", 3),
                acl("User:local", 3),
            ],
            &[
                acl("User:gone", 3),
                acl("User:other", 3),
                acl("User:shared", 3),
                acl("User:local", 3),
                acl("User:ops", 3),
            ],
            &owners,
        )
        .unwrap();
        assert_eq!(plan.create, vec![acl("User:app", 4)]);
        assert_eq!(plan.delete, vec![acl("User:gone", 3)]);
        assert_eq!(plan.clashes.len(), 1, "{:?}", plan.clashes);
        assert_eq!(plan.clashes[0].owner.as_deref(), Some("hub2"));
        assert!(plan.clashes[0].entry.contains("User:shared"));
        assert!(MirrorDefinition::new(
            "dr",
            BTreeMap::from([
                ("bootstrap.servers".to_owned(), "h:1".to_owned()),
                ("mirror.acl.sync.mode".to_owned(), "mine".to_owned()),
            ])
        )
        .is_err());
    }

    #[test]
    fn group_offsets_are_clamped_filtered_and_skip_active_groups() {
        assert_eq!(clamp_group_offset(50, 10, 40), 40);
        assert_eq!(clamp_group_offset(5, 10, 40), 10);
        assert_eq!(clamp_group_offset(20, 10, 40), 20);
        let d = def(&[("mirror.groups.exclude", "tmp-.*")]);
        let tp = TopicPartition::new("orders", 0);
        let other = TopicPartition::new("unmirrored", 0);
        let source = BTreeMap::from([
            (
                "app".to_owned(),
                BTreeMap::from([(tp.clone(), 55), (other.clone(), 3)]),
            ),
            ("busy".to_owned(), BTreeMap::from([(tp.clone(), 7)])),
            ("tmp-1".to_owned(), BTreeMap::from([(tp.clone(), 7)])),
            ("same".to_owned(), BTreeMap::from([(tp.clone(), 30)])),
        ]);
        let plan = plan_group_sync(
            &d,
            &source,
            &BTreeSet::from(["busy".to_owned()]),
            |g, _| (g == "same").then_some(30),
            |_| Some((10, 40)),
            |t| t.topic == "orders",
        )
        .unwrap();
        assert_eq!(
            plan,
            vec![GroupOffsetCommit {
                group: "app".into(),
                tp,
                offset: 40
            }]
        );
    }

    #[test]
    fn quota_sync_sets_differences_removes_extras_and_spares_excluded_entities() {
        use crate::quota::{Entity, Values};
        let ent = |t: &str, n: Option<&str>| -> Entity {
            [(t.to_owned(), n.map(str::to_owned))].into_iter().collect()
        };
        let vals = |kv: &[(&str, f64)]| -> Values {
            kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let src = BTreeMap::from([
            (
                ent("user", Some("alice")),
                vals(&[("producer_byte_rate", 10.0)]),
            ),
            (ent("client-id", None), vals(&[("consumer_byte_rate", 5.0)])),
        ]);
        let dst = BTreeMap::from([
            (
                ent("user", Some("alice")),
                vals(&[("producer_byte_rate", 10.0), ("consumer_byte_rate", 1.0)]),
            ),
            (
                ent("user", Some("ops")),
                vals(&[("producer_byte_rate", 1.0)]),
            ),
            (
                ent("user", Some("local")),
                vals(&[("producer_byte_rate", 1.0)]),
            ),
        ]);
        let d = def(&[
            (QUOTA_ENTITIES_EXCLUDE, "local"),
            ("mirror.quota.sync.mode", "exact"),
        ]);
        let none = SyncOwners::default();
        let plan = plan_quota_sync(&d, &src, &dst, &none).unwrap();
        let by: BTreeMap<String, Vec<(String, Option<f64>)>> = plan
            .alterations
            .into_iter()
            .map(|a| (format!("{:?}", a.entity), a.ops))
            .collect();
        assert_eq!(by.len(), 3, "{by:?}");
        assert_eq!(
            by[&format!("{:?}", vec![("user".to_owned(), Some("alice".to_owned()))])],
            vec![("consumer_byte_rate".to_owned(), None)]
        );
        assert_eq!(
            by[&format!("{:?}", vec![("client-id".to_owned(), None::<String>)])],
            vec![("consumer_byte_rate".to_owned(), Some(5.0))]
        );
        assert_eq!(
            by[&format!("{:?}", vec![("user".to_owned(), Some("ops".to_owned()))])],
            vec![("producer_byte_rate".to_owned(), None)]
        );
        let off = def(&[("mirror.quota.sync.enable", "false")]);
        assert_eq!(
            plan_quota_sync(&off, &src, &dst, &none).unwrap(),
            QuotaSyncPlan::default()
        );

        // Owned mode: alice and ops are local, so only the new default client-id is written
        // and alice (whose values the source would change) is a clash; an entity the mirror
        // owns and the source dropped is removed.
        let mut owners = SyncOwners::default();
        owners
            .quotas
            .insert(ent("user", Some("mine")), "dr".to_owned());
        let mut dst = dst;
        dst.insert(
            ent("user", Some("mine")),
            vals(&[("producer_byte_rate", 3.0)]),
        );
        let plan = plan_quota_sync(&def(&[]), &src, &dst, &owners).unwrap();
        let by: BTreeMap<String, Vec<(String, Option<f64>)>> = plan
            .alterations
            .into_iter()
            .map(|a| (format!("{:?}", a.entity), a.ops))
            .collect();
        assert_eq!(by.len(), 2, "{by:?}");
        assert_eq!(
            by[&format!("{:?}", vec![("client-id".to_owned(), None::<String>)])],
            vec![("consumer_byte_rate".to_owned(), Some(5.0))]
        );
        assert_eq!(
            by[&format!("{:?}", vec![("user".to_owned(), Some("mine".to_owned()))])],
            vec![("producer_byte_rate".to_owned(), None)]
        );
        assert_eq!(plan.clashes.len(), 1, "{:?}", plan.clashes);
        assert!(plan.clashes[0].entry.contains("alice"));
        assert_eq!(plan.clashes[0].owner, None);
    }
}
