//! The commands of the replicated metadata log and their deterministic apply.
//!
//! One [`MetadataCommand`] per mutation of [`MetadataStore`]. Whatever is nondeterministic
//! (topic ids, the cluster id) is chosen by the proposer and carried in the command, so every
//! node applying the same log reaches byte-identical state. Apply validates exactly as the
//! single-node store does (it calls the same methods on an in-memory store), so a command that
//! fails validation on one node fails identically on all of them and changes nothing.
//!
//! Commands travel as JSON inside Raft entries. An entry a node cannot decode stops that node
//! (see `node`): skipping it would let replicas diverge. Adding a variant is therefore a
//! protocol change that needs every node upgraded first (Kafka gates this with
//! `metadata.version`; kmirror will need the same before mixed-version clusters).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::controller;
use crate::acl::{AclBinding, AclFilter, AclStore};
use crate::metadata::{BrokerRegistration, ConfigOp, MetadataError, MetadataStore, TopicMeta};
use crate::mirror::owners::{self, MirrorWriter, SyncOwners};
use crate::mirror::MirrorRecord;
use crate::quota::{Alteration, QuotaError};
use crate::replicated::{CoordinatorLog, LogOp};
use crate::scram::{AlterResults, ScramEdit};

/// Everything the cluster log carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ClusterCommand {
    Metadata(MetadataCommand),
    Acl(AclCommand),
    /// AlterUserScramCredentials: the proposer derived the keys ([`ScramEdit::from_change`]);
    /// apply repeats Kafka's per-user checks on the replicated set.
    Scram {
        edits: Vec<ScramEdit>,
    },
    /// AlterClientQuotas: the proposer validated (host names included) and sends only what
    /// is to apply (not `validate_only` requests); apply repeats the pure checks.
    Quota {
        alterations: Vec<Alteration>,
        /// A mirror's quota sync (None: AlterClientQuotas); see [`crate::mirror::owners`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        writer: Option<MirrorWriter>,
    },
    /// One record of `__mirror_state` (a mirror definition or a mirror partition's state),
    /// committed by the mirror coordinator before its transition takes effect.
    Mirror {
        /// The quorum term the proposing coordinator was loaded in (see `Coordinator`).
        term: u64,
        record: MirrorRecord,
        /// A partition leader's failover step or fetcher event: the leader epoch it led
        /// the partition at. Apply refuses it once the partition's epoch has moved on, so a
        /// deposed leader cannot commit a step after its successor (Kafka fences a stale
        /// partition leader by its leader epoch). None: an admin record of the seat.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        leader_epoch: Option<i32>,
    },
    /// A block of `count` producer ids for the idempotent producers a node that is not the
    /// coordinator initializes (Kafka's AllocateProducerIds to the controller). Blocks come
    /// from a replicated counter starting at [`crate::replicated::PRODUCER_ID_BLOCKS_START`],
    /// above the transaction coordinator's own blocks, so the two never meet.
    AllocateProducerIds {
        count: u32,
    },
    /// Records of a group or transaction coordinator's log (see `replicated`).
    Coordinator {
        log: CoordinatorLog,
        /// The quorum term the proposing coordinator was loaded in. Applied only from an
        /// entry of that same term, i.e. appended while its node still led: a deposed
        /// coordinator's late write is refused identically everywhere (Kafka fences a stale
        /// coordinator by the leader epoch of its partition).
        term: u64,
        op: LogOp,
    },
    /// A quorum member's controller address and directory id (Kafka's voter endpoints and
    /// `ReplicaDirectoryId`): each member states its own once it is in the configuration;
    /// a joining node's comes with the conf change that adds it.
    QuorumMember(super::node::QuorumMember),
}

/// One mutation of the ACL set. The proposer validates (`acl::validate_binding`,
/// `AclFilter::validate`) and answers invalid items itself; apply skips an invalid item
/// identically on every node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AclCommand {
    Create {
        bindings: Vec<AclBinding>,
        /// A mirror's ACL sync (None: CreateAcls); see [`crate::mirror::owners`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        writer: Option<MirrorWriter>,
    },
    Delete {
        filters: Vec<AclFilter>,
        /// A mirror's ACL sync (None: DeleteAcls).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        writer: Option<MirrorWriter>,
    },
}

/// Applies one ACL command to the replicated ACL set and its owners: per filter of a
/// deletion, the bindings it removed (empty for a creation).
pub fn apply_acl(
    acls: &mut AclStore,
    owners: &mut SyncOwners,
    cmd: &AclCommand,
) -> Vec<Vec<AclBinding>> {
    match cmd {
        AclCommand::Create { bindings, writer } => {
            owners::create_acls(acls, owners, bindings, writer.as_ref());
            Vec::new()
        }
        AclCommand::Delete { filters, writer } => {
            owners::delete_acls(acls, owners, filters, writer.as_ref())
        }
    }
}

/// One mutation of the topic metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MetadataCommand {
    /// Names the cluster; applies only to a cluster without a name (the first leader proposes
    /// it, a duplicate from a later leader is a no-op).
    InitCluster {
        cluster_id: String,
    },
    CreateTopic {
        name: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
        #[serde(with = "crate::metadata::uuid_text")]
        id: Uuid,
        /// Replica lists per partition, chosen by the proposer
        /// ([`controller::propose_placement`]); empty for a one-node topic (the local-node
        /// sentinel of `TopicMeta::assignments`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        assignments: Vec<Vec<i32>>,
    },
    CreateMirrorTopic {
        name: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
        source_configs: BTreeMap<String, String>,
        #[serde(with = "crate::metadata::uuid_text")]
        id: Uuid,
        mirror: String,
        /// Replica lists per partition ([`controller::propose_placement`]); empty on a
        /// one-node broker, as for `CreateTopic`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        assignments: Vec<Vec<i32>>,
    },
    /// Records internal topic `name` (`__consumer_offsets`, `__transaction_state`) the first
    /// time Kafka would create it; a no-op when it exists.
    CreateInternalTopic {
        name: String,
        partitions: i32,
        #[serde(with = "crate::metadata::uuid_text")]
        id: Uuid,
        /// Replica lists, one per partition: the topic is a real, replicated topic (its
        /// partitions hold the coordinators' records, as in Kafka). Empty in entries written
        /// before that: a described-only entry, which a later creation with replica lists
        /// turns into a real topic.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        assignments: Vec<Vec<i32>>,
        /// The partitions' first leader epoch: the proposer's quorum term, so a transaction
        /// coordinator's epoch (its partition's leader epoch) stays above the terms an older
        /// version used as coordinator epoch, which producers' state on data partitions keeps.
        #[serde(default)]
        first_leader_epoch: i32,
    },
    /// A client's deletion: refused for a topic a mirror owns (deleting it would silently
    /// drop the DR copy).
    DeleteTopic {
        name: String,
    },
    /// Grows a (non-mirror) topic to `total` partitions.
    CreatePartitions {
        name: String,
        total: i32,
        /// Replica lists of the new partitions (empty for a one-node topic).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        assignments: Vec<Vec<i32>>,
    },
    /// A client's config change (AlterConfigs / IncrementalAlterConfigs): refused for a
    /// mirror topic, whose configs come from its source.
    AlterConfigs {
        name: String,
        ops: Vec<ConfigOp>,
    },
    ReplaceConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// Raises one partition's leader epoch to at least `at_least` (never lowers it).
    BumpLeaderEpoch {
        name: String,
        partition: i32,
        at_least: i32,
    },
    /// (Incremental)AlterConfigs of a BROKER resource: `entity` is "" (the cluster-wide
    /// default) or a node id; a `None` value deletes the key; `replace` (legacy
    /// AlterConfigs) drops the entity's other keys. The proposer validated the changes as
    /// Kafka does ([`crate::broker_config::validate`]).
    AlterBrokerConfigs {
        entity: String,
        changes: Vec<(String, Option<String>)>,
        #[serde(default)]
        replace: bool,
    },
    /// (Incremental)AlterConfigs of a GROUP resource: a `None` value deletes the key. The
    /// proposer validated the group's resulting keys ([`crate::group_config`]).
    AlterGroupConfigs {
        group: String,
        changes: Vec<(String, Option<String>)>,
        #[serde(default)]
        replace: bool,
    },
    /// UpdateFeatures of a feature the cluster keeps (`share.version`): level 0 removes it.
    /// The proposer validated the level as Kafka's controller does.
    SetFeature {
        name: String,
        level: i16,
    },
    /// Marks a topic as owned by a mirror (read-only for clients) or releases it.
    SetMirror {
        name: String,
        mirror: Option<String>,
    },
    /// Grows a mirror topic to the source's partition count (the mirror's sync; bypasses the
    /// read-only check of `CreatePartitions`). Never shrinks.
    GrowMirrorTopic {
        name: String,
        total: i32,
        /// Replica lists of the new partitions on a replicated topic (empty on one node).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        assignments: Vec<Vec<i32>>,
    },
    /// Config values synced from a mirror source.
    SyncSourceConfigs {
        name: String,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    },
    /// A broker registers (or re-registers after a restart).
    RegisterBroker(BrokerRegistration),
    /// The broker missed its heartbeats or shuts down: out of ISRs, leaderships moved.
    FenceBroker {
        id: i32,
    },
    /// The broker caught up again: leaderless partitions it is in the ISR of may elect it.
    UnfenceBroker {
        id: i32,
    },
    UnregisterBroker {
        id: i32,
    },
    /// Kafka's AlterPartition: the leader `broker` proposes a new ISR, built on the given
    /// leader epoch and partition epoch.
    AlterPartition {
        name: String,
        partition: i32,
        broker: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<i32>,
    },
    /// ElectLeaders PREFERRED for one partition.
    ElectPreferredLeader {
        name: String,
        partition: i32,
    },
    /// AlterPartitionReassignments for one partition: `replicas` is the target, `None`
    /// cancels the running reassignment ([`controller::reassign`]). The completion needs no
    /// command of its own: the AlterPartition that brings the last target replica into the
    /// ISR completes it when applied.
    ReassignPartition {
        name: String,
        partition: i32,
        replicas: Option<Vec<i32>>,
        #[serde(default = "yes")]
        allow_replication_factor_change: bool,
    },
}

fn yes() -> bool {
    true
}

/// What a successfully applied command did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The topic as it is after the command.
    Topic(TopicMeta),
    /// The topic as it was before its deletion.
    Deleted(TopicMeta),
    /// `InitCluster`: the cluster id now in force (the earlier one if it was already set).
    ClusterId(String),
    /// A membership change (see `node`): the voters after it.
    Voters(Vec<u64>),
    /// A broker registration, fencing or unregistration was applied.
    Brokers,
    /// An ACL command: per filter of a deletion, the bindings it removed.
    Acls(Vec<Vec<AclBinding>>),
    /// SCRAM edits: per user (in the order users first appear), applied or why not.
    Scram(AlterResults),
    /// Quota alterations: per alteration, applied or why not.
    Quotas(Vec<Result<(), QuotaError>>),
    /// A mirror record or coordinator records were applied.
    Applied,
    /// `AllocateProducerIds`: the ids `start..end` are this proposer's.
    ProducerIds { start: i64, end: i64 },
}

impl ClusterCommand {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("commands always serialize")
    }

    pub fn decode(bytes: &[u8]) -> Result<ClusterCommand, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// Applies one command to the replicated state. A pure function of (state, command): on
/// `Err` the state is unchanged.
pub fn apply(store: &mut MetadataStore, cmd: &MetadataCommand) -> Result<Outcome, MetadataError> {
    use MetadataCommand as C;
    Ok(match cmd {
        C::InitCluster { cluster_id } => {
            store.init_cluster_id(cluster_id)?;
            Outcome::ClusterId(store.state().cluster_id.clone())
        }
        C::CreateTopic {
            name,
            partitions,
            configs,
            id,
            assignments,
        } if assignments.is_empty() => Outcome::Topic(store.create_topic(
            name,
            *partitions,
            configs.clone(),
            Some(*id),
            false,
        )?),
        C::CreateTopic {
            name,
            partitions,
            configs,
            id,
            assignments,
        } => {
            if assignments.len() != usize::try_from(*partitions).unwrap_or(0) {
                return Err(MetadataError::InvalidRequest(format!(
                    "{} replica lists for {partitions} partitions",
                    assignments.len()
                )));
            }
            let mut meta =
                store.create_topic(name, *partitions, configs.clone(), Some(*id), true)?;
            meta.assignments = controller::new_partitions(store.state(), assignments)?;
            Outcome::Topic(store.update_cluster(|s| {
                s.topics.insert(meta.name.clone(), meta.clone());
                Ok(meta)
            })?)
        }
        C::CreateMirrorTopic {
            name,
            partitions,
            configs,
            source_configs,
            id,
            mirror,
            assignments,
        } => {
            // Replica lists are checked before the topic exists, so a refused placement
            // leaves no unassigned topic behind.
            let placed = if assignments.is_empty() {
                Vec::new()
            } else {
                if assignments.len() != usize::try_from(*partitions).unwrap_or(0) {
                    return Err(MetadataError::InvalidRequest(format!(
                        "{} replica lists for {partitions} partitions",
                        assignments.len()
                    )));
                }
                controller::new_partitions(store.state(), assignments)?
            };
            let meta = store.create_mirror_topic(
                name,
                *partitions,
                configs.clone(),
                source_configs.clone(),
                *id,
                mirror,
            )?;
            if placed.is_empty() {
                Outcome::Topic(meta)
            } else {
                Outcome::Topic(store.update_topic(name, move |t| t.assignments = placed)?)
            }
        }
        C::CreateInternalTopic {
            name,
            partitions,
            id,
            assignments,
            ..
        } if assignments.is_empty() => {
            store.ensure_internal_topic_with_id(name, *partitions, *id)?;
            Outcome::Topic(
                store
                    .state()
                    .described(name)
                    .cloned()
                    .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?,
            )
        }
        C::CreateInternalTopic {
            name,
            partitions,
            id,
            assignments,
            first_leader_epoch,
        } => {
            if let Some(t) = store.state().topics.get(name) {
                return Ok(Outcome::Topic(t.clone()));
            }
            if assignments.len() != usize::try_from(*partitions).unwrap_or(0) {
                return Err(MetadataError::InvalidRequest(format!(
                    "{} replica lists for {partitions} partitions",
                    assignments.len()
                )));
            }
            let placed = controller::new_partitions(store.state(), assignments)?;
            Outcome::Topic(store.create_internal_topic(name, *id, placed, *first_leader_epoch)?)
        }
        C::DeleteTopic { name } => {
            refuse_mirror_topic(store, name)?;
            refuse_internal_topic(store, name, "deleted")?;
            Outcome::Deleted(store.delete_topic(name)?)
        }
        C::CreatePartitions {
            name,
            total,
            assignments,
        } => {
            refuse_internal_topic(store, name, "given more partitions")?;
            let replicated = store.topic(name).is_some_and(|t| !t.assignments.is_empty());
            if !replicated && assignments.is_empty() {
                Outcome::Topic(store.create_partitions(name, *total, false)?)
            } else {
                let mut meta = store.create_partitions(name, *total, true)?;
                let current = meta.assignments.len();
                if !replicated || current + assignments.len() != meta.leader_epochs.len() {
                    return Err(MetadataError::InvalidRequest(format!(
                        "{} replica lists for {} new partitions",
                        assignments.len(),
                        meta.leader_epochs.len() - current
                    )));
                }
                let new = controller::new_partitions(store.state(), assignments)?;
                if new[0].replicas.len() != meta.assignments[0].replicas.len() {
                    return Err(MetadataError::InvalidRequest(
                        "new partitions need the topic's replication factor".into(),
                    ));
                }
                meta.assignments.extend(new);
                Outcome::Topic(store.update_cluster(|s| {
                    s.topics.insert(meta.name.clone(), meta.clone());
                    Ok(meta)
                })?)
            }
        }
        C::AlterConfigs { name, ops } => {
            // The destination's own keys (the switchover's write fence, the mirror throttle's
            // replicas) are the ones a client may change on a mirror topic.
            if !ops
                .iter()
                .all(|op| crate::mirror::LOCAL_TOPIC_CONFIGS.contains(&op.key()))
            {
                refuse_mirror_topic(store, name)?;
            }
            Outcome::Topic(store.alter_configs(name, ops, false)?)
        }
        C::ReplaceConfigs { name, configs } => {
            refuse_mirror_topic(store, name)?;
            Outcome::Topic(store.replace_configs(name, configs.clone(), false)?)
        }
        C::BumpLeaderEpoch {
            name,
            partition,
            at_least,
        } => {
            let count = store
                .topic(name)
                .ok_or_else(|| MetadataError::UnknownTopic(name.clone()))?
                .partition_count();
            if *partition < 0 || *partition >= count {
                return Err(MetadataError::InvalidPartitions(format!(
                    "topic '{name}' has no partition {partition}"
                )));
            }
            let (idx, at_least) = (*partition as usize, *at_least);
            Outcome::Topic(store.update_topic(name, move |t| {
                t.leader_epochs[idx] = t.leader_epochs[idx].max(at_least);
            })?)
        }
        C::SetMirror { name, mirror } => {
            let m = mirror.clone();
            Outcome::Topic(store.update_topic(name, move |t| t.mirror = m)?)
        }
        C::GrowMirrorTopic {
            name,
            total,
            assignments,
        } => {
            if *total > 100_000 {
                return Err(MetadataError::InvalidPartitions(format!(
                    "{total} is too many partitions"
                )));
            }
            let total = (*total).max(0) as usize;
            let current = store.topic(name).map_or(0, |t| t.leader_epochs.len());
            let replicated = store.topic(name).is_some_and(|t| !t.assignments.is_empty());
            // A replicated topic grows only with a replica list per new partition, of the
            // topic's replication factor: a partition without one would have no leader.
            let placed = if replicated && total > current {
                if assignments.len() != total - current {
                    return Err(MetadataError::InvalidRequest(format!(
                        "{} replica lists for {} new partitions",
                        assignments.len(),
                        total - current
                    )));
                }
                let new = controller::new_partitions(store.state(), assignments)?;
                let rf = store
                    .topic(name)
                    .and_then(|t| t.assignments.first())
                    .map_or(0, |a| a.replicas.len());
                if new.first().map_or(rf, |a| a.replicas.len()) != rf {
                    return Err(MetadataError::InvalidRequest(
                        "new partitions need the topic's replication factor".into(),
                    ));
                }
                new
            } else {
                Vec::new()
            };
            Outcome::Topic(store.update_topic(name, move |t| {
                if t.leader_epochs.len() < total {
                    t.leader_epochs.resize(total, 0);
                    t.assignments.extend(placed);
                }
            })?)
        }
        C::SyncSourceConfigs { name, set, delete } => {
            let (set, delete) = (set.clone(), delete.clone());
            Outcome::Topic(store.update_topic(name, move |t| {
                for k in &delete {
                    t.configs.remove(k);
                }
                t.configs.extend(set);
            })?)
        }
        C::AlterBrokerConfigs {
            entity,
            changes,
            replace,
        } => {
            store.update_cluster(|s| {
                apply_configs(&mut s.broker_configs, entity, changes, *replace);
                Ok(())
            })?;
            Outcome::Brokers
        }
        C::AlterGroupConfigs {
            group,
            changes,
            replace,
        } => {
            store.update_cluster(|s| {
                apply_configs(&mut s.group_configs, group, changes, *replace);
                Ok(())
            })?;
            Outcome::Applied
        }
        C::SetFeature { name, level } => {
            store.update_cluster(|s| {
                if *level == 0 {
                    s.features.remove(name);
                } else {
                    s.features.insert(name.clone(), *level);
                }
                Ok(())
            })?;
            Outcome::Applied
        }
        C::RegisterBroker(reg) => {
            store.update_cluster(|s| controller::register_broker(s, reg))?;
            Outcome::Brokers
        }
        C::FenceBroker { id } => {
            store.update_cluster(|s| controller::set_fenced(s, *id, true))?;
            Outcome::Brokers
        }
        C::UnfenceBroker { id } => {
            store.update_cluster(|s| controller::set_fenced(s, *id, false))?;
            Outcome::Brokers
        }
        C::UnregisterBroker { id } => {
            store.update_cluster(|s| controller::unregister_broker(s, *id))?;
            Outcome::Brokers
        }
        C::AlterPartition {
            name,
            partition,
            broker,
            leader_epoch,
            partition_epoch,
            isr,
        } => Outcome::Topic(store.update_cluster(|s| {
            controller::alter_partition(
                s,
                name,
                *partition,
                *broker,
                *leader_epoch,
                *partition_epoch,
                isr,
            )?;
            Ok(s.topics[name].clone())
        })?),
        C::ElectPreferredLeader { name, partition } => {
            Outcome::Topic(store.update_cluster(|s| {
                controller::elect_preferred(s, name, *partition)?;
                Ok(s.topics[name].clone())
            })?)
        }
        C::ReassignPartition {
            name,
            partition,
            replicas,
            allow_replication_factor_change,
        } => Outcome::Topic(store.update_cluster(|s| {
            controller::reassign(
                s,
                name,
                *partition,
                replicas.as_deref(),
                *allow_replication_factor_change,
            )?;
            Ok(s.topics[name].clone())
        })?),
    })
}

/// Client changes of a mirror topic are refused: it is read-only while mirrored.
/// The coordinators' topics stay as created: deleting one would drop every group's offsets
/// and every transaction's state, and more partitions would move keys to other partitions.
/// Applies config changes to one entity's keys (broker or group configs); an entity left
/// without keys is dropped.
fn apply_configs(
    all: &mut BTreeMap<String, BTreeMap<String, String>>,
    entity: &str,
    changes: &[(String, Option<String>)],
    replace: bool,
) {
    let stored = all.entry(entity.to_string()).or_default();
    crate::broker_config::apply(stored, changes, replace);
    if stored.is_empty() {
        all.remove(entity);
    }
}

fn refuse_internal_topic(
    store: &MetadataStore,
    name: &str,
    what: &str,
) -> Result<(), MetadataError> {
    if store.topic(name).is_some_and(|t| t.internal) {
        return Err(MetadataError::InvalidRequest(format!(
            "internal topic {name} cannot be {what}"
        )));
    }
    Ok(())
}

fn refuse_mirror_topic(store: &MetadataStore, name: &str) -> Result<(), MetadataError> {
    if store.topic(name).is_some_and(|t| t.mirror.is_some()) {
        return Err(MetadataError::MirrorReadOnly(name.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::ClusterMetadata;

    fn empty() -> MetadataStore {
        MetadataStore::in_memory(ClusterMetadata {
            cluster_id: String::new(),
            version: 0,
            topics: BTreeMap::new(),
            internal_topics: BTreeMap::new(),
            broker_configs: Default::default(),
            group_configs: Default::default(),
            features: Default::default(),
            brokers: BTreeMap::new(),
        })
    }

    fn all_commands() -> Vec<MetadataCommand> {
        use MetadataCommand as C;
        let id = Uuid::from_u128(0x1234);
        let cfg: BTreeMap<String, String> = [("retention.ms".into(), "1000".into())].into();
        vec![
            C::InitCluster {
                cluster_id: "c1".into(),
            },
            C::InitCluster {
                cluster_id: "c2".into(),
            },
            C::AlterBrokerConfigs {
                entity: "".into(),
                changes: vec![("log.retention.ms".into(), Some("5".into()))],
                replace: false,
            },
            C::AlterBrokerConfigs {
                entity: "1".into(),
                changes: vec![("log.retention.ms".into(), None)],
                replace: true,
            },
            C::AlterGroupConfigs {
                group: "g".into(),
                changes: vec![
                    ("consumer.session.timeout.ms".into(), Some("50000".into())),
                    (
                        "share.isolation.level".into(),
                        Some("read_committed".into()),
                    ),
                ],
                replace: false,
            },
            C::AlterGroupConfigs {
                group: "g".into(),
                changes: vec![("share.isolation.level".into(), None)],
                replace: false,
            },
            C::AlterGroupConfigs {
                group: "h".into(),
                changes: vec![],
                replace: true,
            },
            C::SetFeature {
                name: "share.version".into(),
                level: 1,
            },
            C::CreateTopic {
                name: "a".into(),
                partitions: 2,
                configs: cfg.clone(),
                id,
                assignments: Vec::new(),
            },
            C::CreateTopic {
                name: "a".into(),
                partitions: 2,
                configs: BTreeMap::new(),
                id: Uuid::from_u128(9),
                assignments: Vec::new(),
            },
            C::CreateTopic {
                name: "bad/name".into(),
                partitions: 1,
                configs: BTreeMap::new(),
                id: Uuid::from_u128(10),
                assignments: Vec::new(),
            },
            C::CreateMirrorTopic {
                name: "m".into(),
                partitions: 1,
                configs: BTreeMap::new(),
                source_configs: [("cleanup.policy".into(), "compact".into())].into(),
                id: Uuid::from_u128(11),
                mirror: "dr".into(),
                assignments: Vec::new(),
            },
            C::CreatePartitions {
                name: "a".into(),
                total: 4,
                assignments: Vec::new(),
            },
            C::CreatePartitions {
                name: "m".into(),
                total: 4,
                assignments: Vec::new(),
            },
            C::AlterConfigs {
                name: "a".into(),
                ops: vec![ConfigOp::Set("retention.ms".into(), "5".into())],
            },
            C::AlterConfigs {
                name: "a".into(),
                ops: vec![ConfigOp::Set("retention.ms".into(), "x".into())],
            },
            C::ReplaceConfigs {
                name: "a".into(),
                configs: BTreeMap::new(),
            },
            C::BumpLeaderEpoch {
                name: "a".into(),
                partition: 3,
                at_least: 7,
            },
            C::BumpLeaderEpoch {
                name: "a".into(),
                partition: 3,
                at_least: 2,
            },
            C::BumpLeaderEpoch {
                name: "a".into(),
                partition: 9,
                at_least: 2,
            },
            C::GrowMirrorTopic {
                name: "m".into(),
                total: 3,
                assignments: Vec::new(),
            },
            C::SyncSourceConfigs {
                name: "m".into(),
                set: [("retention.ms".into(), "9".into())].into(),
                delete: vec!["cleanup.policy".into()],
            },
            C::SetMirror {
                name: "m".into(),
                mirror: None,
            },
            // One-node topics have no replica sets to reassign; through the wire all the same.
            C::ReassignPartition {
                name: "a".into(),
                partition: 0,
                replicas: Some(vec![1, 2]),
                allow_replication_factor_change: false,
            },
            C::ReassignPartition {
                name: "a".into(),
                partition: 9,
                replicas: None,
                allow_replication_factor_change: true,
            },
            C::DeleteTopic { name: "a".into() },
            C::DeleteTopic { name: "a".into() },
        ]
    }

    #[test]
    fn the_same_commands_give_byte_identical_state_and_identical_errors() {
        let (mut a, mut b) = (empty(), empty());
        let mut results = Vec::new();
        for cmd in all_commands() {
            // Through the wire form, as a follower sees it.
            let wire =
                ClusterCommand::decode(&ClusterCommand::Metadata(cmd.clone()).encode()).unwrap();
            let ClusterCommand::Metadata(decoded) = wire else {
                unreachable!()
            };
            assert_eq!(decoded, cmd);
            let ra = apply(&mut a, &cmd).map_err(|e| e.to_string());
            let rb = apply(&mut b, &decoded).map_err(|e| e.to_string());
            assert_eq!(format!("{ra:?}"), format!("{rb:?}"));
            results.push(ra.is_ok());
        }
        assert_eq!(
            serde_json::to_vec(a.state()).unwrap(),
            serde_json::to_vec(b.state()).unwrap()
        );
        // The invalid ones failed, the rest succeeded.
        assert_eq!(
            results,
            [
                true, true, true, true, true, true, true, true, true, false, false, true, true,
                false, true, false, true, true, true, false, true, true, true, false, false, true,
                false
            ]
        );
        let s = a.state();
        assert_eq!(s.cluster_id, "c1");
        assert_eq!(s.features.get("share.version"), Some(&1));
        assert_eq!(
            s.broker_configs
                .get("")
                .and_then(|m| m.get("log.retention.ms")),
            Some(&"5".to_string())
        );
        assert!(
            !s.broker_configs.contains_key("1"),
            "an emptied entity is dropped"
        );
        let g: BTreeMap<String, String> =
            [("consumer.session.timeout.ms".into(), "50000".into())].into();
        assert_eq!(s.group_configs.get("g"), Some(&g));
        assert!(
            !s.group_configs.contains_key("h"),
            "an emptied group is dropped"
        );
        assert!(!s.topics.contains_key("a"));
        let m = &s.topics["m"];
        assert_eq!(m.partition_count(), 3);
        assert_eq!(m.mirror, None);
        assert_eq!(m.configs.get("retention.ms").map(String::as_str), Some("9"));
        assert!(!m.configs.contains_key("cleanup.policy"));
    }

    #[test]
    fn a_failed_command_changes_nothing() {
        let mut s = empty();
        apply(
            &mut s,
            &MetadataCommand::CreateTopic {
                name: "t".into(),
                partitions: 1,
                configs: BTreeMap::new(),
                id: Uuid::from_u128(1),
                assignments: Vec::new(),
            },
        )
        .unwrap();
        let before = serde_json::to_vec(s.state()).unwrap();
        for cmd in [
            MetadataCommand::AlterConfigs {
                name: "t".into(),
                ops: vec![
                    ConfigOp::Set("retention.ms".into(), "1".into()),
                    ConfigOp::Set("cleanup.policy".into(), "bogus".into()),
                ],
            },
            MetadataCommand::BumpLeaderEpoch {
                name: "t".into(),
                partition: 1,
                at_least: 3,
            },
            MetadataCommand::CreatePartitions {
                name: "t".into(),
                total: 1,
                assignments: Vec::new(),
            },
        ] {
            assert!(apply(&mut s, &cmd).is_err(), "{cmd:?}");
        }
        assert_eq!(serde_json::to_vec(s.state()).unwrap(), before);
    }

    #[test]
    fn a_mirror_topic_takes_only_the_write_fence_from_clients() {
        use crate::mirror::WRITE_FENCE_CONFIG as FENCE;
        let mut s = empty();
        let create = MetadataCommand::CreateTopic {
            name: "t".into(),
            partitions: 1,
            configs: BTreeMap::new(),
            id: Uuid::from_u128(1),
            assignments: Vec::new(),
        };
        apply(&mut s, &create).unwrap();
        let alter = |ops: Vec<ConfigOp>| MetadataCommand::AlterConfigs {
            name: "t".into(),
            ops,
        };
        let fence = alter(vec![ConfigOp::Set(FENCE.into(), "dr".into())]);
        apply(&mut s, &fence).unwrap();
        assert_eq!(s.topic("t").unwrap().write_fence().as_deref(), Some("dr"));
        let empty_value = alter(vec![ConfigOp::Set(FENCE.into(), " ".into())]);
        assert!(
            apply(&mut s, &empty_value).is_err(),
            "an empty fence is refused"
        );
        apply(
            &mut s,
            &MetadataCommand::SetMirror {
                name: "t".into(),
                mirror: Some("back".into()),
            },
        )
        .unwrap();
        // Mirrored: the fence can be lifted, nothing else changed.
        let mixed = alter(vec![
            ConfigOp::Delete(FENCE.into()),
            ConfigOp::Set("retention.ms".into(), "1".into()),
        ]);
        assert!(matches!(
            apply(&mut s, &mixed),
            Err(MetadataError::MirrorReadOnly(_))
        ));
        apply(&mut s, &alter(vec![ConfigOp::Delete(FENCE.into())])).unwrap();
        assert_eq!(s.topic("t").unwrap().write_fence(), None);
    }
}
