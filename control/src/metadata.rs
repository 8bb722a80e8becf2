//! Durable cluster metadata: topics, topic IDs, partition counts, per-partition leader epochs
//! and dynamic topic configs.
//!
//! Stored as one JSON document (`cluster-metadata.json` in the data directory), replaced
//! atomically on every change (write temp file, fsync, rename, fsync directory), so a crash
//! leaves either the old or the new state, never a torn one. Metadata changes are rare
//! (admin operations), so rewriting the whole document is cheap enough and keeps recovery
//! trivial. Runtime-agnostic: callers own the store (the engine runs it on the control-plane
//! thread) and publish snapshots to the data path.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use kmirror_log::{CompactionConfig, FlushPolicy, LogConfig, TopicCodec};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

const FILE_NAME: &str = "cluster-metadata.json";

/// Errors from the metadata store; each maps to one Kafka error code in `net`.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("unknown topic '{0}'")]
    UnknownTopic(String),
    #[error("invalid topic name '{name}': {reason}")]
    InvalidTopicName { name: String, reason: String },
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    #[error("invalid replication factor {0}: this cluster has a single broker")]
    InvalidReplicationFactor(i16),
    /// A replicated cluster: more replicas asked for than unfenced brokers exist.
    #[error("replication factor {requested} is larger than the {available} available brokers")]
    ReplicationFactorTooLarge { requested: i32, available: usize },
    /// An assignment or command names a broker that is not registered.
    #[error("broker {0} is not registered")]
    BrokerNotRegistered(i32),
    /// A partition index the topic does not have (UNKNOWN_TOPIC_OR_PARTITION).
    #[error("Unable to find partition {topic}:{partition}.")]
    UnknownPartition { topic: String, partition: i32 },
    /// A reassignment's target replicas are unusable (INVALID_REPLICA_ASSIGNMENT); the
    /// message is Kafka's.
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    /// A reassignment that would change the replication factor while the request forbids it
    /// (KIP-860, INVALID_REPLICATION_FACTOR).
    #[error("The replication factor is changed from {from} to {to}")]
    ReplicationFactorChange { from: usize, to: usize },
    /// Cancelling a reassignment of a partition that has none (NO_REASSIGNMENT_IN_PROGRESS).
    #[error("No partition reassignment is in progress.")]
    NoReassignmentInProgress,
    /// AlterPartition from a broker that does not lead the partition (NOT_LEADER_OR_FOLLOWER).
    #[error("broker {broker} is not the leader of {topic}-{partition}")]
    NotLeader {
        topic: String,
        partition: i32,
        broker: i32,
    },
    /// AlterPartition with a leader epoch other than the current one (FENCED_LEADER_EPOCH).
    #[error("leader epoch {given} of {topic}-{partition} is not the current {current}")]
    FencedLeaderEpoch {
        topic: String,
        partition: i32,
        given: i32,
        current: i32,
    },
    /// AlterPartition with a stale partition epoch (INVALID_UPDATE_VERSION).
    #[error("partition epoch {given} of {topic}-{partition} is not the current {current}")]
    InvalidUpdateVersion {
        topic: String,
        partition: i32,
        given: i32,
        current: i32,
    },
    /// A proposed ISR member that is not an unfenced, registered replica (INELIGIBLE_REPLICA).
    #[error("broker {broker} cannot join the ISR of {topic}-{partition}: {reason}")]
    IneligibleReplica {
        topic: String,
        partition: i32,
        broker: i32,
        reason: String,
    },
    /// A malformed controller request (INVALID_REQUEST).
    #[error("{0}")]
    InvalidRequest(String),
    /// ElectLeaders PREFERRED where the preferred replica already leads (ELECTION_NOT_NEEDED).
    #[error("{topic}-{partition} is already led by its preferred replica")]
    ElectionNotNeeded { topic: String, partition: i32 },
    /// The preferred replica is fenced or out of the ISR (PREFERRED_LEADER_NOT_AVAILABLE).
    #[error("the preferred leader of {topic}-{partition} is not available")]
    PreferredLeaderNotAvailable { topic: String, partition: i32 },
    /// `reason` names the key and reads like Kafka's message for the same refusal.
    #[error("{reason}")]
    InvalidConfig { key: String, reason: String },
    #[error("topic '{0}' is a mirror topic and is read-only")]
    MirrorReadOnly(String),
    #[error("metadata file {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("metadata i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// One topic's durable description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    #[serde(with = "uuid_text")]
    pub id: Uuid,
    /// Current leader epoch of each partition; its length is the partition count.
    pub leader_epochs: Vec<i32>,
    /// Dynamic (explicitly set) topic configs only; defaults come from [`topic_config`].
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
    /// Name of the mirror this topic belongs to while it is mirrored (read-only for clients).
    #[serde(default)]
    pub mirror: Option<String>,
    #[serde(default)]
    pub internal: bool,
    /// Per partition: replicas, ISR, leader and partition epoch, in a replicated cluster.
    /// Empty for a one-node broker's topic (the sentinel "every partition lives on the local
    /// node alone": replicas = ISR = leader = this node, partition epoch 0), which keeps the
    /// one-node document and behaviour unchanged; otherwise as long as `leader_epochs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assignments: Vec<PartitionAssignment>,
}

/// "No leader" (Kafka's `-1`): no live ISR member, until one returns.
pub const NO_LEADER: i32 = -1;

/// Where one partition lives in a replicated cluster (Kafka's PartitionRecord fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionAssignment {
    /// Broker ids in preference order; the first is the preferred leader.
    pub replicas: Vec<i32>,
    /// The in-sync replicas; never empty (KRaft keeps the last member when it is fenced).
    pub isr: Vec<i32>,
    /// The leader's broker id, or [`NO_LEADER`].
    pub leader: i32,
    /// Kafka's partition epoch: bumped on every change of replicas, ISR or leader, so an
    /// AlterPartition built on an older state is refused (INVALID_UPDATE_VERSION).
    pub partition_epoch: i32,
    /// While a reassignment runs (Kafka's PartitionRecord `AddingReplicas`): the target
    /// replicas not in the original set, sorted. They are in `replicas` already.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<i32>,
    /// While a reassignment runs (`RemovingReplicas`): the original replicas not in the
    /// target, sorted; still in `replicas` until the target is all in the ISR.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<i32>,
}

impl PartitionAssignment {
    /// The one-node sentinel made explicit for `node`.
    pub fn local(node: i32) -> PartitionAssignment {
        PartitionAssignment {
            replicas: vec![node],
            isr: vec![node],
            leader: node,
            partition_epoch: 0,
            adding: Vec::new(),
            removing: Vec::new(),
        }
    }

    /// Whether a reassignment is in progress (Kafka: adding or removing replicas listed).
    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replica set before the running reassignment: `replicas` without the adding ones.
    pub fn original_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.adding.contains(r))
            .collect()
    }
}

/// One listener a broker registered (Kafka's BrokerEndpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerEndpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: i16,
}

/// A registered broker (Kafka's RegisterBrokerRecord and its fencing state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub id: i32,
    /// Changes on every start of the broker process; a new one replaces the registration.
    #[serde(with = "uuid_text")]
    pub incarnation: Uuid,
    pub endpoints: Vec<BrokerEndpoint>,
    #[serde(default)]
    pub rack: Option<String>,
    /// A fenced broker leads nothing and is in no ISR it could leave (missed heartbeats,
    /// controlled shutdown, or not yet caught up after registering).
    pub fenced: bool,
}

impl TopicMeta {
    pub fn partition_count(&self) -> i32 {
        self.leader_epochs.len() as i32
    }

    /// Partition `p`'s assignment; a one-node topic's partitions resolve to `local`.
    pub fn assignment(&self, p: i32, local: i32) -> Option<PartitionAssignment> {
        let idx = usize::try_from(p).ok()?;
        if idx >= self.leader_epochs.len() {
            return None;
        }
        Some(match self.assignments.get(idx) {
            Some(a) => a.clone(),
            None => PartitionAssignment::local(local),
        })
    }

    /// The effective value of a topic config (dynamic value, else the default).
    pub fn config_value(&self, key: &str) -> Option<String> {
        self.configs
            .get(key)
            .cloned()
            .or_else(|| topic_config::default_value(key).map(str::to_string))
    }

    /// Set while a switchover fences client writes (see
    /// [`crate::mirror::WRITE_FENCE_CONFIG`]): the switchover's name.
    pub fn write_fence(&self) -> Option<String> {
        self.configs
            .get(crate::mirror::WRITE_FENCE_CONFIG)
            .filter(|v| !v.is_empty())
            .cloned()
    }
}

/// The whole durable document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterMetadata {
    pub cluster_id: String,
    /// Bumped on every change; lets readers cache snapshots cheaply.
    pub version: u64,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Older versions' described-only `__consumer_offsets` and `__transaction_state` (an id
    /// and a partition count, no partitions: their coordinators kept their state elsewhere).
    /// Each node converts them to real topics (same id and partition count) once it is
    /// registered, so nothing else serves them. Left out of the document while empty, as
    /// `brokers` is, so an older one-node document reads and writes back unchanged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub internal_topics: BTreeMap<String, TopicMeta>,
    /// The registered brokers of a replicated cluster (empty on a one-node broker, whose
    /// document keeps its old form).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    /// Dynamic broker configs set with (Incremental)AlterConfigs, as Kafka keeps them in its
    /// metadata log: per entity ("" is the cluster-wide default, else a node id), key to
    /// value. See [`crate::broker_config`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Group configs set with (Incremental)AlterConfigs of a GROUP resource, per group id
    /// (Kafka keeps them in its metadata log too; they outlive the group). See
    /// [`crate::group_config`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Finalized levels of the features the cluster upgrades with UpdateFeatures
    /// (`share.version`); a feature not here is at level 0, as in Kafka's metadata log.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub features: BTreeMap<String, i16>,
}

/// The internal topics kmirror describes itself (its coordinators' topics).
pub const INTERNAL_TOPICS: [&str; 2] = ["__consumer_offsets", "__transaction_state"];

/// The share coordinator's topic (KIP-932): created on first use like the two above, but a
/// user may create it too (Kafka lets CreateTopics make it), so its name is not reserved.
pub const SHARE_STATE_TOPIC: &str = "__share_group_state";

/// Whether `name` is a coordinator's topic ([`INTERNAL_TOPICS`] or [`SHARE_STATE_TOPIC`]).
pub fn is_coordinator_topic(name: &str) -> bool {
    INTERNAL_TOPICS.contains(&name) || name == SHARE_STATE_TOPIC
}

/// Kafka 4.1's internal topics (Topic.INTERNAL_TOPICS): described with is_internal.
pub const KAFKA_INTERNAL_TOPICS: [&str; 3] = [
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
];

/// Kafka's configs of its internal topics (`GroupCoordinatorService.groupMetadataTopicConfigs`,
/// `TransactionStateManager.transactionTopicConfigs`): compacted, 100 MiB segments; the
/// transaction log uncompressed with `min.insync.replicas` of
/// `transaction.state.log.min.isr` (2), at most its replication factor.
pub fn internal_topic_configs(name: &str, replication_factor: usize) -> BTreeMap<String, String> {
    let mut c = BTreeMap::new();
    if name == SHARE_STATE_TOPIC {
        // ShareCoordinatorService's: kept by time-less deletion, pruned by the coordinator.
        c.insert("cleanup.policy".to_string(), "delete".to_string());
        c.insert("retention.ms".to_string(), "-1".to_string());
        c.insert("segment.bytes".to_string(), "104857600".to_string());
        c.insert("compression.type".to_string(), "producer".to_string());
        let min_isr = replication_factor.clamp(1, 2);
        c.insert("min.insync.replicas".to_string(), min_isr.to_string());
        return c;
    }
    c.insert("cleanup.policy".to_string(), "compact".to_string());
    c.insert("segment.bytes".to_string(), "104857600".to_string());
    if name == "__transaction_state" {
        c.insert("compression.type".to_string(), "uncompressed".to_string());
        let min_isr = replication_factor.clamp(1, 2);
        c.insert("min.insync.replicas".to_string(), min_isr.to_string());
        c.insert(
            "unclean.leader.election.enable".to_string(),
            "false".to_string(),
        );
    } else {
        c.insert("compression.type".to_string(), "producer".to_string());
    }
    c
}

impl ClusterMetadata {
    /// The dynamic broker configs topic config `key` falls back to on node `node`, in Kafka's
    /// order (DescribeConfigs' synonyms): the key's broker synonyms in priority order, each
    /// for the node and then at the cluster-wide default. Each is (broker config name, value
    /// as stored, whether the node's own, factor to the topic config's unit).
    pub fn broker_topic_synonyms(
        &self,
        node: i32,
        key: &str,
    ) -> Vec<(&'static str, &str, bool, i64)> {
        let own = self.broker_configs.get(&node.to_string());
        let default = self.broker_configs.get("");
        let mut out = Vec::new();
        for (name, factor) in topic_config::broker_synonyms(key) {
            for (level, node_own) in [(own, true), (default, false)] {
                if let Some(v) = level.and_then(|m| m.get(*name)) {
                    out.push((*name, v.as_str(), node_own, *factor));
                }
            }
        }
        out
    }

    /// The dynamic broker-level value topic config `key` falls back to on node `node`, as
    /// Kafka's `DynamicLogConfig` makes broker configs the defaults of topics: the first of
    /// [`Self::broker_topic_synonyms`], converted to the topic config's unit. The flag says
    /// whether the value is the node's own (else the cluster default's).
    pub fn broker_topic_default(&self, node: i32, key: &str) -> Option<(String, bool)> {
        let (_, v, own, factor) = *self.broker_topic_synonyms(node, key).first()?;
        let v = match (factor, v.trim().parse::<i64>()) {
            (1, _) | (_, Err(_)) => v.to_string(),
            // Kafka: any negative retention (or roll) means "none", -1.
            (_, Ok(n)) if n < 0 => "-1".to_string(),
            (f, Ok(n)) => n.saturating_mul(f).to_string(),
        };
        Some((v, own))
    }

    /// A topic's configs with the broker-level defaults (see [`Self::broker_topic_default`])
    /// filled in for the keys it does not set itself.
    pub fn effective_topic_configs(&self, t: &TopicMeta, node: i32) -> BTreeMap<String, String> {
        let mut configs = t.configs.clone();
        if self.broker_configs.is_empty() {
            return configs;
        }
        for (key, ..) in topic_config::KNOWN {
            if !configs.contains_key(*key) {
                if let Some((v, _)) = self.broker_topic_default(node, key) {
                    configs.insert((*key).to_string(), v);
                }
            }
        }
        configs
    }

    /// The log settings `t`'s partitions run with on node `node`: the topic's configs over
    /// the dynamic broker configs over the built-in defaults.
    pub fn topic_log_config(&self, t: &TopicMeta, node: i32) -> LogConfig {
        topic_config::log_config(&self.effective_topic_configs(t, node))
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicMeta> {
        self.topics.values().find(|t| t.id == id)
    }

    /// Every topic a client may see described: the topics, then the internal topics.
    pub fn described_topics(&self) -> impl Iterator<Item = &TopicMeta> {
        self.topics.values().chain(self.internal_topics.values())
    }

    /// A topic or internal topic by name, for describing it.
    pub fn described(&self, name: &str) -> Option<&TopicMeta> {
        self.topics
            .get(name)
            .or_else(|| self.internal_topics.get(name))
    }

    /// A topic or internal topic by id, for describing it.
    pub fn described_by_id(&self, id: Uuid) -> Option<&TopicMeta> {
        self.described_topics().find(|t| t.id == id)
    }
}

/// A config change, as IncrementalAlterConfigs expresses it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigOp {
    Set(String, String),
    Delete(String),
    Append(String, String),
    Subtract(String, String),
}

impl ConfigOp {
    /// The config key the operation changes.
    pub fn key(&self) -> &str {
        match self {
            ConfigOp::Set(k, _)
            | ConfigOp::Delete(k)
            | ConfigOp::Append(k, _)
            | ConfigOp::Subtract(k, _) => k,
        }
    }
}

/// The durable metadata store. Single owner; not thread-safe by itself.
#[derive(Debug)]
pub struct MetadataStore {
    /// `None` for an in-memory store (the Raft state machine: its log is the durable copy).
    path: Option<PathBuf>,
    state: ClusterMetadata,
}

impl MetadataStore {
    /// Opens the store in `data_dir`, creating an empty cluster (with a fresh cluster id) if none.
    pub fn open(data_dir: &Path) -> Result<MetadataStore, MetadataError> {
        fs::create_dir_all(data_dir)?;
        let path = data_dir.join(FILE_NAME);
        // A leftover temp file means a crash mid-write: the rename never happened, ignore it.
        let _ = fs::remove_file(path.with_extension("json.tmp"));
        if path.exists() {
            let text = fs::read_to_string(&path)?;
            let state: ClusterMetadata =
                serde_json::from_str(&text).map_err(|e| MetadataError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            return Ok(MetadataStore {
                path: Some(path),
                state,
            });
        }
        let store = MetadataStore {
            path: Some(path),
            state: ClusterMetadata {
                cluster_id: new_cluster_id(),
                version: 0,
                topics: BTreeMap::new(),
                internal_topics: BTreeMap::new(),
                broker_configs: Default::default(),
                group_configs: Default::default(),
                features: Default::default(),
                brokers: BTreeMap::new(),
            },
        };
        store.persist()?;
        Ok(store)
    }

    /// A store that is never written to disk: the replicated state machine, whose durability
    /// is the Raft log and its snapshots. Every method behaves as on a durable store.
    pub fn in_memory(state: ClusterMetadata) -> MetadataStore {
        MetadataStore { path: None, state }
    }

    pub fn state(&self) -> &ClusterMetadata {
        &self.state
    }

    /// Sets the cluster id of a store that has none (a replicated cluster's first command);
    /// returns whether it was set.
    pub fn init_cluster_id(&mut self, cluster_id: &str) -> Result<bool, MetadataError> {
        if !self.state.cluster_id.is_empty() {
            return Ok(false);
        }
        self.state.cluster_id = cluster_id.to_string();
        if let Err(e) = self.commit() {
            self.state.cluster_id.clear();
            return Err(e);
        }
        Ok(true)
    }

    /// A random topic id no topic has: chosen by whoever proposes a topic creation, so that
    /// applying the creation is deterministic.
    pub fn unused_topic_id(&self) -> Uuid {
        loop {
            let id = Uuid::new_v4();
            if self.state.topic_by_id(id).is_none() && !id.is_nil() {
                break id;
            }
        }
    }

    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.state.topics.get(name)
    }

    /// Creates a topic. `id` is given when it must match another cluster (mirror topics).
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        id: Option<Uuid>,
        validate_only: bool,
    ) -> Result<TopicMeta, MetadataError> {
        let meta = self.new_topic(name, partitions, configs, id)?;
        if !validate_only {
            self.insert_topic(meta.clone())?;
        }
        Ok(meta)
    }

    /// Creates a topic owned by `mirror`, with the source's `id`. `configs` are validated as
    /// CreateTopics validates them; `source_configs` (values only a source may set, checked
    /// by the mirror's sync) are added as given. The topic reaches disk in one write together
    /// with its owner, so no crash can leave a mirror topic writable.
    pub fn create_mirror_topic(
        &mut self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        source_configs: BTreeMap<String, String>,
        id: Uuid,
        mirror: &str,
    ) -> Result<TopicMeta, MetadataError> {
        let mut meta = self.new_topic(name, partitions, configs, Some(id))?;
        meta.configs.extend(source_configs);
        meta.mirror = Some(mirror.to_string());
        self.insert_topic(meta.clone())?;
        Ok(meta)
    }

    fn insert_topic(&mut self, meta: TopicMeta) -> Result<(), MetadataError> {
        let name = meta.name.clone();
        self.state.topics.insert(name.clone(), meta);
        if let Err(e) = self.commit() {
            self.state.topics.remove(&name);
            return Err(e);
        }
        Ok(())
    }

    /// A validated, not yet inserted topic.
    fn new_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        id: Option<Uuid>,
    ) -> Result<TopicMeta, MetadataError> {
        validate_topic_name(name)?;
        if self.state.topics.contains_key(name) || self.state.internal_topics.contains_key(name) {
            return Err(MetadataError::TopicExists(name.to_string()));
        }
        if INTERNAL_TOPICS.contains(&name) {
            // Its partition directories would be the coordinators' stores.
            return Err(MetadataError::InvalidTopicName {
                name: name.to_string(),
                reason: "reserved for kmirror's internal topic".into(),
            });
        }
        if partitions < 1 {
            return Err(MetadataError::InvalidPartitions(format!(
                "number of partitions must be at least 1, got {partitions}"
            )));
        }
        if partitions > 100_000 {
            return Err(MetadataError::InvalidPartitions(format!(
                "{partitions} partitions is more than this broker supports (100000)"
            )));
        }
        for (k, v) in &configs {
            topic_config::validate(k, v)?;
        }
        let id = id.unwrap_or_else(|| self.unused_topic_id());
        let meta = TopicMeta {
            name: name.to_string(),
            id,
            leader_epochs: vec![0; partitions as usize],
            configs,
            mirror: None,
            // Kafka marks only its own internal topics (Topic.isInternal); `__mine` is a
            // normal topic.
            internal: KAFKA_INTERNAL_TOPICS.contains(&name),
            assignments: Vec::new(),
        };
        Ok(meta)
    }

    /// Records internal topic `name` (one of [`INTERNAL_TOPICS`]) with `partitions`
    /// partitions, if not yet there. Returns whether it was created.
    pub fn ensure_internal_topic(
        &mut self,
        name: &str,
        partitions: i32,
    ) -> Result<bool, MetadataError> {
        let id = self.unused_described_id();
        self.ensure_internal_topic_with_id(name, partitions, id)
    }

    /// A random id no topic (internal ones included) has: chosen by the proposer of an
    /// internal topic's creation.
    pub fn unused_described_id(&self) -> Uuid {
        loop {
            let id = Uuid::new_v4();
            if self.state.described_by_id(id).is_none() && !id.is_nil() {
                break id;
            }
        }
    }

    /// [`Self::ensure_internal_topic`] with the id chosen by the caller (the replicated
    /// command carries it, so apply is deterministic).
    pub fn ensure_internal_topic_with_id(
        &mut self,
        name: &str,
        partitions: i32,
        id: Uuid,
    ) -> Result<bool, MetadataError> {
        if !INTERNAL_TOPICS.contains(&name) {
            return Err(MetadataError::UnknownTopic(name.to_string()));
        }
        if self.state.internal_topics.contains_key(name) {
            return Ok(false);
        }
        let meta = TopicMeta {
            name: name.to_string(),
            id,
            leader_epochs: vec![0; partitions.max(1) as usize],
            configs: BTreeMap::new(),
            mirror: None,
            internal: true,
            assignments: Vec::new(),
        };
        self.state.internal_topics.insert(name.to_string(), meta);
        if let Err(e) = self.commit() {
            self.state.internal_topics.remove(name);
            return Err(e);
        }
        Ok(true)
    }

    /// Makes internal topic `name` a real topic with the given partitions (as Kafka creates
    /// `__consumer_offsets` / `__transaction_state` on first use), with Kafka's configs for
    /// it. A described-only entry of an older version is replaced; its partitions' leader
    /// epochs go up by one, so a client holding the old epoch is told it changed; none starts
    /// below `first_leader_epoch`.
    pub fn create_internal_topic(
        &mut self,
        name: &str,
        id: Uuid,
        assignments: Vec<PartitionAssignment>,
        first_leader_epoch: i32,
    ) -> Result<TopicMeta, MetadataError> {
        if !is_coordinator_topic(name) {
            return Err(MetadataError::UnknownTopic(name.to_string()));
        }
        if assignments.is_empty() {
            return Err(MetadataError::InvalidPartitions(
                "an internal topic needs at least one partition".into(),
            ));
        }
        let legacy = self.state.internal_topics.get(name);
        let first = first_leader_epoch.max(0);
        let leader_epochs = match legacy {
            Some(l) if l.leader_epochs.len() == assignments.len() => l
                .leader_epochs
                .iter()
                .map(|e| e.saturating_add(1).max(first))
                .collect(),
            _ => vec![first; assignments.len()],
        };
        let rf = assignments.first().map_or(1, |a| a.replicas.len());
        let meta = TopicMeta {
            name: name.to_string(),
            id,
            leader_epochs,
            configs: internal_topic_configs(name, rf),
            mirror: None,
            internal: true,
            assignments,
        };
        self.update_cluster(|s| {
            s.internal_topics.remove(name);
            s.topics.insert(name.to_string(), meta.clone());
            Ok(meta)
        })
    }

    pub fn delete_topic(&mut self, name: &str) -> Result<TopicMeta, MetadataError> {
        let meta = self
            .state
            .topics
            .remove(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        if let Err(e) = self.commit() {
            self.state.topics.insert(name.to_string(), meta);
            return Err(e);
        }
        Ok(meta)
    }

    /// Grows a topic to `total` partitions (Kafka never shrinks).
    pub fn create_partitions(
        &mut self,
        name: &str,
        total: i32,
        validate_only: bool,
    ) -> Result<TopicMeta, MetadataError> {
        let t = self
            .state
            .topics
            .get(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        if t.mirror.is_some() {
            return Err(MetadataError::MirrorReadOnly(name.to_string()));
        }
        let current = t.partition_count();
        if total <= current {
            return Err(MetadataError::InvalidPartitions(format!(
                "topic currently has {current} partitions, {total} would not be an increase"
            )));
        }
        if total > 100_000 {
            return Err(MetadataError::InvalidPartitions(format!(
                "{total} is too many partitions"
            )));
        }
        let mut t = t.clone();
        t.leader_epochs.resize(total as usize, 0);
        if !validate_only {
            self.state.topics.insert(name.to_string(), t.clone());
            self.commit()?;
        }
        Ok(t)
    }

    /// Applies incremental config changes atomically (all or nothing).
    pub fn alter_configs(
        &mut self,
        name: &str,
        ops: &[ConfigOp],
        validate_only: bool,
    ) -> Result<TopicMeta, MetadataError> {
        let t = self
            .state
            .topics
            .get(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        let mut configs = t.configs.clone();
        for op in ops {
            match op {
                ConfigOp::Set(k, v) => {
                    topic_config::validate(k, v)?;
                    configs.insert(k.clone(), v.clone());
                }
                ConfigOp::Delete(k) => {
                    topic_config::check_known(k)?;
                    configs.remove(k);
                }
                ConfigOp::Append(k, v) | ConfigOp::Subtract(k, v) => {
                    if !topic_config::is_list(k) {
                        return Err(MetadataError::InvalidConfig {
                            key: k.clone(),
                            reason: format!(
                                "APPEND/SUBTRACT only apply to list-valued configs, not {k}"
                            ),
                        });
                    }
                    let current = configs
                        .get(k)
                        .cloned()
                        .or_else(|| topic_config::default_value(k).map(str::to_string))
                        .unwrap_or_default();
                    let mut items: Vec<String> = current
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect();
                    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        if matches!(op, ConfigOp::Append(..)) {
                            if !items.iter().any(|i| i == item) {
                                items.push(item.to_string());
                            }
                        } else {
                            items.retain(|i| i != item);
                        }
                    }
                    let joined = items.join(",");
                    topic_config::validate(k, &joined)?;
                    configs.insert(k.clone(), joined);
                }
            }
        }
        let mut t = t.clone();
        t.configs = configs;
        if !validate_only {
            self.state.topics.insert(name.to_string(), t.clone());
            self.commit()?;
        }
        Ok(t)
    }

    /// Replaces all dynamic configs (legacy AlterConfigs semantics).
    pub fn replace_configs(
        &mut self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<TopicMeta, MetadataError> {
        for (k, v) in &configs {
            topic_config::validate(k, v)?;
        }
        let t = self
            .state
            .topics
            .get_mut(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        let mut t2 = t.clone();
        t2.configs = configs;
        if !validate_only {
            *t = t2.clone();
            self.commit()?;
        }
        Ok(t2)
    }

    /// General-purpose update for other control-plane components (e.g. mirroring sets
    /// `mirror`, configs synced from a source, or bumps leader epochs). Persisted before return.
    pub fn update_topic(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut TopicMeta),
    ) -> Result<TopicMeta, MetadataError> {
        let t = self
            .state
            .topics
            .get_mut(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        let before = t.clone();
        f(t);
        let after = t.clone();
        if let Err(e) = self.commit() {
            self.state.topics.insert(name.to_string(), before);
            return Err(e);
        }
        Ok(after)
    }

    /// Changes the whole document at once (the replicated controller's commands touch brokers
    /// and many topics together): all of `f` or, when it fails, nothing. Persisted before
    /// return.
    pub fn update_cluster<R>(
        &mut self,
        f: impl FnOnce(&mut ClusterMetadata) -> Result<R, MetadataError>,
    ) -> Result<R, MetadataError> {
        let before = self.state.clone();
        let r = f(&mut self.state).and_then(|r| self.commit().map(|()| r));
        if r.is_err() {
            self.state = before;
        }
        r
    }

    fn commit(&mut self) -> Result<(), MetadataError> {
        self.state.version += 1;
        self.persist()
    }

    fn persist(&self) -> Result<(), MetadataError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let text = serde_json::to_vec_pretty(&self.state).map_err(|e| MetadataError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        crate::replace_file::replace_durably(path, &text)?;
        Ok(())
    }
}

pub(crate) mod uuid_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use uuid::Uuid;

    pub(crate) fn serialize<S: Serializer>(u: &Uuid, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&u.to_string())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Uuid, D::Error> {
        let text = String::deserialize(d)?;
        Uuid::parse_str(&text).map_err(serde::de::Error::custom)
    }
}

fn new_cluster_id() -> String {
    // Kafka cluster ids are 22-char URL-safe base64 of a UUID; any stable string works for
    // clients, a simple hex form is enough.
    Uuid::new_v4().simple().to_string()[..22].to_string()
}

/// Kafka's topic name rules: 1..=249 chars of `[a-zA-Z0-9._-]`, not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), MetadataError> {
    let bad = |reason: &str| {
        Err(MetadataError::InvalidTopicName {
            name: name.to_string(),
            reason: reason.to_string(),
        })
    };
    if name.is_empty() {
        return bad("topic name is empty");
    }
    if name == "." || name == ".." {
        return bad("topic name cannot be \".\" or \"..\"");
    }
    if name.len() > 249 {
        return bad("topic name is longer than 249 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return bad("legal characters are ASCII alphanumerics, '.', '_' and '-'");
    }
    Ok(())
}

/// The topic configs kmirror knows: which it honours, their defaults, and validation.
pub mod topic_config {
    use super::*;

    /// How a known key is validated, with Kafka's type (DescribeConfigs `config_type`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        /// Kafka LONG at least `min`.
        Long { min: i64 },
        /// Kafka INT in [min, max].
        Int { min: i64, max: i64 },
        /// compression.gzip.level: INT, -1 or 1..=9.
        GzipLevel,
        /// Kafka BOOLEAN ("true"/"false", any case).
        Bool,
        /// Kafka STRING, one of a fixed set (case-sensitive, as Kafka's ValidString).
        Choice(&'static [&'static str]),
        /// Kafka LIST whose items are each one of a fixed set; the empty list is allowed.
        ListOf(&'static [&'static str]),
        /// Kafka LIST: `*` or `partition:broker` pairs (replication throttles).
        ThrottledReplicas,
        /// A number in [0, 1] (Kafka DOUBLE).
        Ratio,
        /// remote.storage.enable: BOOLEAN, but `true` is refused (no tiered storage here, as
        /// on a Kafka broker without `remote.log.storage.system.enable`).
        RemoteStorage,
    }

    /// The codecs compression.type accepts (Kafka's BrokerCompressionType names).
    pub const COMPRESSION_TYPES: &[&str] =
        &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

    /// (name, default, kind, documentation): every topic config Apache Kafka 4.1 lists for a
    /// topic (DescribeConfigs), with its default and validator.
    pub const KNOWN: &[(&str, &str, Kind, &str)] = &[
        (
            "cleanup.policy",
            "delete",
            Kind::ListOf(&["compact", "delete"]),
            "'delete' (retention removes old segments), 'compact' (the log cleaner keeps the \
             latest record per key), both, or none (empty).",
        ),
        (
            "compression.gzip.level",
            "-1",
            Kind::GzipLevel,
            "Level used when the broker re-compresses into gzip (-1: the codec's default).",
        ),
        (
            "compression.lz4.level",
            "9",
            Kind::Int { min: 1, max: 17 },
            "Level used when the broker re-compresses into lz4.",
        ),
        (
            "compression.type",
            "producer",
            Kind::Choice(COMPRESSION_TYPES),
            "Codec of stored batches: 'producer' keeps the producer's; any other codec makes \
             the broker re-compress produced batches that use a different one.",
        ),
        (
            "compression.zstd.level",
            "3",
            Kind::Int {
                min: -131072,
                max: 22,
            },
            "Level used when the broker re-compresses into zstd.",
        ),
        (
            "delete.retention.ms",
            "86400000",
            Kind::Long { min: 0 },
            "Compacted topics: how long tombstones and transaction markers are kept after \
             the cleaning pass that first saw them.",
        ),
        (
            "file.delete.delay.ms",
            "60000",
            Kind::Long { min: 0 },
            "No effect.",
        ),
        (
            "flush.messages",
            "9223372036854775807",
            Kind::Long { min: 1 },
            "fsync after this many messages.",
        ),
        (
            "flush.ms",
            "9223372036854775807",
            Kind::Long { min: 0 },
            "fsync after this much time.",
        ),
        (
            "follower.replication.throttled.replicas",
            "",
            Kind::ThrottledReplicas,
            "No effect on a single broker.",
        ),
        (
            "index.interval.bytes",
            "4096",
            Kind::Int {
                min: 0,
                max: i32::MAX as i64,
            },
            "Bytes between offset index entries.",
        ),
        (
            "leader.replication.throttled.replicas",
            "",
            Kind::ThrottledReplicas,
            "No effect on a single broker.",
        ),
        (
            "local.retention.bytes",
            "-2",
            Kind::Long { min: -2 },
            "No tiered storage: no effect.",
        ),
        (
            "local.retention.ms",
            "-2",
            Kind::Long { min: -2 },
            "No tiered storage: no effect.",
        ),
        (
            "max.compaction.lag.ms",
            "9223372036854775807",
            Kind::Long { min: 1 },
            "Compacted topics: a record stays uncompacted at most this long (cleans whatever \
             the dirty ratio).",
        ),
        (
            "max.message.bytes",
            "1048588",
            Kind::Int {
                min: 0,
                max: i32::MAX as i64,
            },
            "Largest record batch accepted.",
        ),
        (
            "message.timestamp.after.max.ms",
            "3600000",
            Kind::Long { min: 0 },
            "Enforced on produce (INVALID_TIMESTAMP with per-record errors).",
        ),
        (
            "message.timestamp.before.max.ms",
            "9223372036854775807",
            Kind::Long { min: 0 },
            "Enforced on produce (INVALID_TIMESTAMP with per-record errors).",
        ),
        (
            "message.timestamp.type",
            "CreateTime",
            Kind::Choice(&["CreateTime", "LogAppendTime"]),
            "CreateTime: the producer's timestamps are kept; LogAppendTime: the broker stamps \
             each batch with its append time.",
        ),
        (
            "min.cleanable.dirty.ratio",
            "0.5",
            Kind::Ratio,
            "Compacted topics: clean when dirty bytes reach this share of the cleanable log.",
        ),
        (
            "min.compaction.lag.ms",
            "0",
            Kind::Long { min: 0 },
            "Compacted topics: a record stays uncompacted at least this long.",
        ),
        (
            "min.insync.replicas",
            "1",
            Kind::Int {
                min: 1,
                max: i32::MAX as i64,
            },
            "Single broker: always satisfied by the leader.",
        ),
        ("preallocate", "false", Kind::Bool, "No effect."),
        (
            "remote.log.copy.disable",
            "false",
            Kind::Bool,
            "No tiered storage: no effect.",
        ),
        (
            "remote.log.delete.on.disable",
            "false",
            Kind::Bool,
            "No tiered storage: no effect.",
        ),
        (
            "remote.storage.enable",
            "false",
            Kind::RemoteStorage,
            "Tiered storage is not supported: only false.",
        ),
        (
            "retention.bytes",
            "-1",
            Kind::Long { min: i64::MIN },
            "Delete old segments when the partition exceeds this size (negative: unlimited).",
        ),
        (
            "retention.ms",
            "604800000",
            Kind::Long { min: -1 },
            "Delete segments older than this (-1: no time limit).",
        ),
        (
            "segment.bytes",
            "1073741824",
            Kind::Int {
                min: 1048576,
                max: i32::MAX as i64,
            },
            "Segment file size before rolling (at least 1 MiB, as Kafka 4.x requires).",
        ),
        (
            "segment.index.bytes",
            "10485760",
            Kind::Int {
                min: 4,
                max: i32::MAX as i64,
            },
            "Accepted; index size is managed by the log.",
        ),
        (
            "segment.jitter.ms",
            "0",
            Kind::Long { min: 0 },
            "No effect.",
        ),
        (
            "segment.ms",
            "604800000",
            Kind::Long { min: 1 },
            "Roll a segment after this time.",
        ),
        (
            "unclean.leader.election.enable",
            "false",
            Kind::Bool,
            "No effect on a single broker.",
        ),
    ];

    fn find(key: &str) -> Option<&'static (&'static str, &'static str, Kind, &'static str)> {
        KNOWN.iter().find(|(k, ..)| *k == key)
    }

    /// kmirror's own topic keys (not in Kafka's list, so DescribeConfigs shows them only
    /// while set): the mirror throttle's replicas.
    const THROTTLED_REPLICAS: (&str, &str, Kind, &str) = (
        crate::mirror::THROTTLED_REPLICAS_CONFIG,
        "",
        Kind::ThrottledReplicas,
        "Partitions whose mirror traffic the broker-wide mirror ceiling \
         (mirror.replication.throttled.rate) throttles on this cluster: '*' or \
         partition:broker pairs; unset: every partition.",
    );

    /// A key's entry: Kafka's, or one of kmirror's own.
    fn entry(key: &str) -> Option<&'static (&'static str, &'static str, Kind, &'static str)> {
        find(key).or((key == THROTTLED_REPLICAS.0).then_some(&THROTTLED_REPLICAS))
    }
    /// Kafka's broker configs a topic config falls back to (`ServerTopicConfigSynonyms`), in
    /// Kafka's priority order, each with the factor from its unit to the topic config's (hours
    /// and minutes to milliseconds).
    pub fn broker_synonyms(key: &str) -> &'static [(&'static str, i64)] {
        const HOUR: i64 = 3_600_000;
        match key {
            "segment.bytes" => &[("log.segment.bytes", 1)],
            "segment.ms" => &[("log.roll.ms", 1), ("log.roll.hours", HOUR)],
            "segment.jitter.ms" => &[("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR)],
            "segment.index.bytes" => &[("log.index.size.max.bytes", 1)],
            "flush.messages" => &[("log.flush.interval.messages", 1)],
            "flush.ms" => &[
                ("log.flush.interval.ms", 1),
                ("log.flush.scheduler.interval.ms", 1),
            ],
            "retention.bytes" => &[("log.retention.bytes", 1)],
            "retention.ms" => &[
                ("log.retention.ms", 1),
                ("log.retention.minutes", 60_000),
                ("log.retention.hours", HOUR),
            ],
            "max.message.bytes" => &[("message.max.bytes", 1)],
            "index.interval.bytes" => &[("log.index.interval.bytes", 1)],
            "delete.retention.ms" => &[("log.cleaner.delete.retention.ms", 1)],
            "min.compaction.lag.ms" => &[("log.cleaner.min.compaction.lag.ms", 1)],
            "max.compaction.lag.ms" => &[("log.cleaner.max.compaction.lag.ms", 1)],
            "file.delete.delay.ms" => &[("log.segment.delete.delay.ms", 1)],
            "min.cleanable.dirty.ratio" => &[("log.cleaner.min.cleanable.ratio", 1)],
            "cleanup.policy" => &[("log.cleanup.policy", 1)],
            "unclean.leader.election.enable" => &[("unclean.leader.election.enable", 1)],
            "min.insync.replicas" => &[("min.insync.replicas", 1)],
            "compression.type" => &[("compression.type", 1)],
            "compression.gzip.level" => &[("compression.gzip.level", 1)],
            "compression.lz4.level" => &[("compression.lz4.level", 1)],
            "compression.zstd.level" => &[("compression.zstd.level", 1)],
            "preallocate" => &[("log.preallocate", 1)],
            "message.timestamp.type" => &[("log.message.timestamp.type", 1)],
            "message.timestamp.before.max.ms" => &[("log.message.timestamp.before.max.ms", 1)],
            "message.timestamp.after.max.ms" => &[("log.message.timestamp.after.max.ms", 1)],
            "local.retention.ms" => &[("log.local.retention.ms", 1)],
            "local.retention.bytes" => &[("log.local.retention.bytes", 1)],
            _ => &[],
        }
    }

    pub fn default_value(key: &str) -> Option<&'static str> {
        find(key).map(|e| e.1)
    }

    pub fn documentation(key: &str) -> Option<&'static str> {
        entry(key).map(|e| e.3)
    }

    pub fn is_list(key: &str) -> bool {
        matches!(
            entry(key).map(|e| e.2),
            Some(Kind::ListOf(_) | Kind::ThrottledReplicas)
        )
    }

    /// Kafka config type codes for DescribeConfigs v3+ (BOOLEAN=1, STRING=2, INT=3, LONG=5,
    /// DOUBLE=6, LIST=7).
    pub fn type_code(key: &str) -> i8 {
        match entry(key).map(|e| e.2) {
            Some(Kind::Bool | Kind::RemoteStorage) => 1,
            Some(Kind::Choice(_)) => 2,
            Some(Kind::Int { .. } | Kind::GzipLevel) => 3,
            Some(Kind::Long { .. }) => 5,
            Some(Kind::Ratio) => 6,
            Some(Kind::ListOf(_) | Kind::ThrottledReplicas) => 7,
            None => 0,
        }
    }

    fn unknown(key: &str) -> MetadataError {
        MetadataError::InvalidConfig {
            key: key.to_string(),
            reason: format!("Unknown topic config name: {key}"),
        }
    }

    pub fn check_known(key: &str) -> Result<(), MetadataError> {
        if key == crate::mirror::WRITE_FENCE_CONFIG {
            return Ok(());
        }
        entry(key).map(|_| ()).ok_or_else(|| unknown(key))
    }

    /// Validates like Kafka 4.1's topic ConfigDef (values are trimmed first, as Kafka parses
    /// them); the reason reads like Kafka's ConfigException message.
    pub fn validate(key: &str, value: &str) -> Result<(), MetadataError> {
        // kmirror's own key (no default: DescribeConfigs shows it only while set).
        if key == crate::mirror::WRITE_FENCE_CONFIG {
            return if value.trim().is_empty() {
                Err(MetadataError::InvalidConfig {
                    key: key.to_string(),
                    reason: format!(
                        "{key} names the switchover that fences writes; delete it to lift the fence"
                    ),
                })
            } else {
                Ok(())
            };
        }
        let Some((_, _, kind, _)) = entry(key) else {
            return Err(unknown(key));
        };
        let invalid = |shown: &str, why: String| MetadataError::InvalidConfig {
            key: key.to_string(),
            reason: format!("Invalid value {shown} for configuration {key}: {why}"),
        };
        let v = value.trim();
        let int = |ty: &str, lo: i64, hi: i64| -> Result<Option<i64>, MetadataError> {
            match v.parse::<i64>() {
                Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
                _ => Err(invalid(v, format!("Not a number of type {ty}"))),
            }
        };
        let range = |n: i64, min: i64, max: i64| {
            if n < min {
                Err(invalid(v, format!("Value must be at least {min}")))
            } else if n > max {
                Err(invalid(v, format!("Value must be no more than {max}")))
            } else {
                Ok(())
            }
        };
        match kind {
            Kind::Long { min } => {
                let n = int("LONG", i64::MIN, i64::MAX)?.unwrap_or_default();
                range(n, *min, i64::MAX)
            }
            Kind::Int { min, max } => {
                let n = int("INT", i32::MIN as i64, i32::MAX as i64)?.unwrap_or_default();
                range(n, *min, *max)
            }
            Kind::GzipLevel => {
                let n = int("INT", i32::MIN as i64, i32::MAX as i64)?.unwrap_or_default();
                if n == -1 || (1..=9).contains(&n) {
                    Ok(())
                } else {
                    Err(invalid(
                        v,
                        "Value must be between 1 and 9 or equal to -1".into(),
                    ))
                }
            }
            Kind::Bool | Kind::RemoteStorage => {
                if v.eq_ignore_ascii_case("false") {
                    Ok(())
                } else if v.eq_ignore_ascii_case("true") {
                    if *kind == Kind::RemoteStorage {
                        return Err(MetadataError::InvalidConfig {
                            key: key.to_string(),
                            reason: "Tiered Storage functionality is disabled in the broker. \
                                     Topic cannot be configured with remote log storage."
                                .into(),
                        });
                    }
                    Ok(())
                } else {
                    Err(invalid(
                        v,
                        "Expected value to be either true or false".into(),
                    ))
                }
            }
            Kind::Choice(allowed) => {
                if allowed.contains(&v) {
                    Ok(())
                } else {
                    Err(invalid(
                        v,
                        format!("String must be one of: {}", allowed.join(", ")),
                    ))
                }
            }
            Kind::ListOf(allowed) => {
                if v.is_empty() {
                    return Ok(());
                }
                for item in v.split(',').map(str::trim) {
                    if !allowed.contains(&item) {
                        return Err(invalid(
                            item,
                            format!("String must be one of: {}", allowed.join(", ")),
                        ));
                    }
                }
                Ok(())
            }
            Kind::ThrottledReplicas => {
                if v.is_empty() || v == "*" {
                    return Ok(());
                }
                let pair = |item: &str| {
                    item.split_once(':').is_some_and(|(p, b)| {
                        p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
                    })
                };
                if v.split(',').map(str::trim).all(pair) {
                    Ok(())
                } else {
                    Err(invalid(
                        &format!("[{v}]"),
                        format!(
                            "{key} must be the literal '*' or a list of replicas in the \
                             following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
                        ),
                    ))
                }
            }
            Kind::Ratio => match v.parse::<f64>() {
                Ok(n) if n < 0.0 => Err(invalid(v, "Value must be at least 0".into())),
                Ok(n) if n > 1.0 => Err(invalid(v, "Value must be no more than 1".into())),
                Ok(_) => Ok(()),
                Err(_) => Err(invalid(v, "Not a number of type DOUBLE".into())),
            },
        }
    }

    /// Validation of a config value copied from a mirror source. Like [`validate`]; the
    /// source's `cleanup.policy` (compact or not) is always kept: a mirror topic carries it,
    /// is not cleaned while mirroring (its data follows the source's log) and is cleaned like
    /// any topic after failover.
    pub fn validate_from_source(key: &str, value: &str) -> Result<(), MetadataError> {
        if key == "cleanup.policy" {
            let ok = value
                .split(',')
                .map(str::trim)
                .all(|p| p.eq_ignore_ascii_case("delete") || p.eq_ignore_ascii_case("compact"));
            if ok {
                return Ok(());
            }
        }
        validate(key, value)
    }

    /// Whether time and size retention may delete this topic's data: only when its
    /// cleanup.policy includes `delete` (a compact-only topic keeps every segment, as Kafka's
    /// retention never deletes from it).
    pub fn retention_deletes(configs: &BTreeMap<String, String>) -> bool {
        configs.get("cleanup.policy").is_none_or(|v| {
            v.split(',')
                .any(|p| p.trim().eq_ignore_ascii_case("delete"))
        })
    }

    /// Whether the topic is compacted (cleanup.policy includes `compact`).
    pub fn compacts(configs: &BTreeMap<String, String>) -> bool {
        configs.get("cleanup.policy").is_some_and(|v| {
            v.split(',')
                .any(|p| p.trim().eq_ignore_ascii_case("compact"))
        })
    }

    fn long(configs: &BTreeMap<String, String>, key: &str) -> i64 {
        configs
            .get(key)
            .map(String::as_str)
            .or_else(|| default_value(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(-1)
    }

    /// compression.type as the log's target codec (None for `producer`), with its level.
    fn topic_codec(configs: &BTreeMap<String, String>) -> Option<TopicCodec> {
        use kmirror_log::batch::Compression as C;
        let (codec, level_key) = match configs.get("compression.type").map(|v| v.trim()) {
            Some("uncompressed") => (C::None, None),
            Some("gzip") => (C::Gzip, Some("compression.gzip.level")),
            Some("snappy") => (C::Snappy, None),
            Some("lz4") => (C::Lz4, Some("compression.lz4.level")),
            Some("zstd") => (C::Zstd, Some("compression.zstd.level")),
            _ => return None,
        };
        let level = level_key.map(|k| long(configs, k) as i32);
        Some(TopicCodec { codec, level })
    }

    /// Builds the log settings from a topic's dynamic configs plus defaults.
    pub fn log_config(configs: &BTreeMap<String, String>) -> LogConfig {
        let deletes = retention_deletes(configs);
        let rb = if deletes {
            long(configs, "retention.bytes")
        } else {
            -1
        };
        let rm = if deletes {
            long(configs, "retention.ms")
        } else {
            -1
        };
        let fm = long(configs, "flush.messages");
        let fms = long(configs, "flush.ms");
        let defaults = LogConfig::default();
        let flush = if configs.contains_key("flush.messages") || configs.contains_key("flush.ms") {
            if fm == 1 || fms == 0 {
                FlushPolicy::EveryAppend
            } else {
                FlushPolicy::Interval {
                    messages: fm.max(1) as u64,
                    ms: fms.max(0) as u64,
                }
            }
        } else {
            defaults.flush.clone()
        };
        // `..defaults` keeps this compiling (and sane) when the log adds settings.
        #[allow(clippy::needless_update)]
        LogConfig {
            segment_bytes: long(configs, "segment.bytes").max(14) as u64,
            segment_ms: Some(long(configs, "segment.ms").max(1) as u64),
            retention_bytes: (rb >= 0).then_some(rb as u64),
            retention_ms: (rm >= 0).then_some(rm as u64),
            index_interval_bytes: long(configs, "index.interval.bytes").clamp(0, u32::MAX as i64)
                as u32,
            max_message_bytes: long(configs, "max.message.bytes").clamp(0, u32::MAX as i64) as u32,
            flush,
            compaction: compacts(configs).then(|| CompactionConfig {
                min_cleanable_dirty_ratio: configs
                    .get("min.cleanable.dirty.ratio")
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .filter(|v| (0.0..=1.0).contains(v))
                    .unwrap_or(0.5),
                min_compaction_lag_ms: long(configs, "min.compaction.lag.ms").max(0) as u64,
                max_compaction_lag_ms: long(configs, "max.compaction.lag.ms").max(1) as u64,
                delete_retention_ms: long(configs, "delete.retention.ms").max(0) as u64,
            }),
            timestamp_before_max_ms: long(configs, "message.timestamp.before.max.ms").max(0),
            timestamp_after_max_ms: long(configs, "message.timestamp.after.max.ms").max(0),
            compression: topic_codec(configs),
            log_append_time: configs
                .get("message.timestamp.type")
                .is_some_and(|v| v.trim() == "LogAppendTime"),
            ..defaults
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_topics_are_recorded_once_durably_and_never_created_as_data_topics() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = MetadataStore::open(dir.path()).unwrap();
        assert!(m.state().described("__consumer_offsets").is_none());
        assert!(m.ensure_internal_topic("__consumer_offsets", 50).unwrap());
        assert!(!m.ensure_internal_topic("__consumer_offsets", 7).unwrap());
        assert!(m.ensure_internal_topic("__other", 1).is_err());
        let t = m.state().described("__consumer_offsets").unwrap().clone();
        assert_eq!((t.internal, t.partition_count()), (true, 50));
        assert!(m.state().topics.is_empty(), "no partition logs for it");
        assert!(matches!(
            m.create_topic("__consumer_offsets", 1, BTreeMap::new(), None, false),
            Err(MetadataError::TopicExists(_))
        ));
        assert!(matches!(
            m.create_topic("__transaction_state", 1, BTreeMap::new(), None, false),
            Err(MetadataError::InvalidTopicName { .. })
        ));
        drop(m);
        let m = MetadataStore::open(dir.path()).unwrap();
        assert_eq!(m.state().described_by_id(t.id), Some(&t));
    }

    #[test]
    fn dynamic_broker_log_configs_are_the_defaults_of_topics_without_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = MetadataStore::open(dir.path()).unwrap();
        m.create_topic("plain", 1, BTreeMap::new(), None, false)
            .unwrap();
        let own: BTreeMap<String, String> = [("retention.ms".to_string(), "5".to_string())].into();
        m.create_topic("own", 1, own, None, false).unwrap();
        let mut state = m.state().clone();
        let (plain, own) = (state.topics["plain"].clone(), state.topics["own"].clone());
        assert_eq!(state.broker_topic_default(1, "retention.ms"), None);
        let set = |state: &mut ClusterMetadata, entity: &str, k: &str, v: &str| {
            state
                .broker_configs
                .entry(entity.to_string())
                .or_default()
                .insert(k.to_string(), v.to_string());
        };
        // Kafka's synonym order: log.retention.ms over minutes over hours, whatever the level.
        set(&mut state, "1", "log.retention.hours", "2");
        assert_eq!(
            state.broker_topic_default(1, "retention.ms"),
            Some(("7200000".to_string(), true))
        );
        set(&mut state, "", "log.retention.ms", "1000");
        assert_eq!(
            state.broker_topic_default(1, "retention.ms"),
            Some(("1000".to_string(), false))
        );
        set(&mut state, "1", "log.retention.ms", "2000");
        assert_eq!(
            state.broker_topic_default(1, "retention.ms"),
            Some(("2000".to_string(), true))
        );
        // Another node sees only the cluster default.
        assert_eq!(
            state.broker_topic_default(2, "retention.ms"),
            Some(("1000".to_string(), false))
        );
        set(&mut state, "", "log.roll.hours", "-5");
        assert_eq!(
            state.broker_topic_default(2, "segment.ms"),
            Some(("-1".to_string(), false))
        );
        set(&mut state, "", "log.cleanup.policy", "compact");
        set(&mut state, "", "message.max.bytes", "4096");
        let cfg = state.topic_log_config(&plain, 1);
        assert_eq!(cfg.max_message_bytes, 4096);
        assert!(cfg.compaction.is_some(), "log.cleanup.policy applies");
        assert_eq!(cfg.retention_ms, None, "compact only: no time retention");
        state
            .broker_configs
            .get_mut("")
            .unwrap()
            .remove("log.cleanup.policy");
        assert_eq!(state.topic_log_config(&plain, 1).retention_ms, Some(2000));
        assert_eq!(state.topic_log_config(&plain, 2).retention_ms, Some(1000));
        // A topic's own value wins.
        assert_eq!(state.topic_log_config(&own, 1).retention_ms, Some(5));
        assert_eq!(state.topic_log_config(&own, 1).max_message_bytes, 4096);
    }

    #[test]
    fn compact_from_a_source_is_kept_and_never_deleted_by_retention() {
        use topic_config::*;
        assert!(validate("cleanup.policy", "compact").is_ok());
        assert!(validate("cleanup.policy", "compact,delete").is_ok());
        assert!(validate("cleanup.policy", "delete, compact").is_ok());
        assert!(validate("min.cleanable.dirty.ratio", "0.01").is_ok());
        assert!(validate("min.cleanable.dirty.ratio", "1.5").is_err());
        // Kafka 4.x: segment.bytes >= 1 MiB for topics.
        assert!(validate("segment.bytes", "1048575").is_err());
        assert!(validate("segment.bytes", "1048576").is_ok());
        assert!(validate_from_source("cleanup.policy", "compact").is_ok());
        assert!(validate_from_source("cleanup.policy", "compact,delete").is_ok());
        assert!(validate_from_source("cleanup.policy", "bogus").is_err());
        let cfg = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let compact = log_config(&cfg(&[
            ("cleanup.policy", "compact"),
            ("retention.ms", "1000"),
        ]));
        assert_eq!(
            (compact.retention_ms, compact.retention_bytes),
            (None, None)
        );
        assert_eq!(compact.compaction, Some(CompactionConfig::default()));
        let tuned = log_config(&cfg(&[
            ("cleanup.policy", "compact"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "100"),
            ("min.compaction.lag.ms", "5"),
            ("max.compaction.lag.ms", "1000"),
        ]))
        .compaction
        .unwrap();
        assert_eq!(
            (
                tuned.min_cleanable_dirty_ratio,
                tuned.delete_retention_ms,
                tuned.min_compaction_lag_ms,
                tuned.max_compaction_lag_ms
            ),
            (0.01, 100, 5, 1000)
        );
        assert_eq!(log_config(&cfg(&[])).compaction, None);
        let both = log_config(&cfg(&[
            ("cleanup.policy", "compact,delete"),
            ("retention.ms", "1000"),
        ]));
        assert_eq!(both.retention_ms, Some(1000));
        let forever = log_config(&cfg(&[("retention.ms", "-1")]));
        assert_eq!(forever.retention_ms, None);
    }

    /// The outcomes measured on Apache Kafka 4.1.1 (CreateTopics, validate_only and real).
    #[test]
    fn values_are_accepted_and_refused_as_kafka_4_1_does() {
        use topic_config::*;
        let ok = [
            ("compression.type", "lz4"),
            ("compression.type", " lz4"),
            ("compression.type", "uncompressed"),
            ("compression.zstd.level", "-131072"),
            ("compression.zstd.level", "22"),
            ("compression.gzip.level", "1"),
            ("compression.gzip.level", "-1"),
            ("compression.lz4.level", "1"),
            ("message.timestamp.type", "LogAppendTime"),
            ("message.timestamp.type", " LogAppendTime"),
            ("remote.storage.enable", "false"),
            ("cleanup.policy", ""),
            ("cleanup.policy", "compact, delete"),
            ("cleanup.policy", "compact,compact"),
            ("preallocate", "TRUE"),
            ("retention.ms", " 100 "),
            ("retention.bytes", "-5"),
            ("min.insync.replicas", "5"),
            ("remote.log.copy.disable", "true"),
            ("remote.log.delete.on.disable", "true"),
            ("local.retention.ms", "100"),
            ("segment.index.bytes", "4"),
            ("max.message.bytes", "0"),
            ("follower.replication.throttled.replicas", "*"),
            ("leader.replication.throttled.replicas", "0:1,1:2"),
            ("segment.bytes", " 1048576"),
        ];
        for (k, v) in ok {
            assert!(validate(k, v).is_ok(), "{k}={v:?}: {:?}", validate(k, v));
        }
        let bad = [
            ("compression.type", "foo"),
            ("compression.type", "LZ4"),
            ("compression.type", "none"),
            ("compression.zstd.level", "99"),
            ("compression.zstd.level", "-131073"),
            ("compression.zstd.level", "abc"),
            ("compression.gzip.level", "10"),
            ("compression.gzip.level", "0"),
            ("compression.gzip.level", "-2"),
            ("compression.lz4.level", "18"),
            ("compression.lz4.level", "0"),
            ("message.timestamp.type", "Foo"),
            ("message.timestamp.type", "logappendtime"),
            ("remote.storage.enable", "true"),
            ("message.format.version", "3.0"),
            ("message.downconversion.enable", "true"),
            ("message.timestamp.difference.max.ms", "1000"),
            ("unknown.key", "1"),
            ("cleanup.policy", "bogus"),
            ("cleanup.policy", "Compact"),
            ("cleanup.policy", "delete,,"),
            ("preallocate", "yes"),
            ("retention.ms", "-2"),
            ("retention.ms", "abc"),
            ("retention.bytes", "abc"),
            ("min.insync.replicas", "0"),
            ("min.insync.replicas", "abc"),
            ("segment.bytes", "100"),
            ("segment.bytes", "3000000000"),
            ("max.message.bytes", "3000000000"),
            ("max.message.bytes", "-1"),
            ("local.retention.ms", "-3"),
            ("local.retention.bytes", "-3"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("min.cleanable.dirty.ratio", "abc"),
            ("segment.jitter.ms", "-1"),
            ("flush.messages", "0"),
            ("flush.ms", "-1"),
            ("index.interval.bytes", "-1"),
            ("segment.index.bytes", "3"),
            ("segment.ms", "0"),
            ("delete.retention.ms", "-1"),
            ("max.compaction.lag.ms", "0"),
            ("min.compaction.lag.ms", "-1"),
            ("message.timestamp.before.max.ms", "-1"),
            ("message.timestamp.after.max.ms", "-1"),
            ("file.delete.delay.ms", "-1"),
            ("follower.replication.throttled.replicas", "foo"),
            ("unclean.leader.election.enable", "maybe"),
        ];
        for (k, v) in bad {
            assert!(
                matches!(validate(k, v), Err(MetadataError::InvalidConfig { .. })),
                "{k}={v:?} accepted"
            );
        }
        let e = validate("compression.zstd.level", "99").unwrap_err();
        assert!(
            e.to_string()
                .contains("Invalid value 99 for configuration compression.zstd.level: Value must be no more than 22"),
            "{e}"
        );
        let codec = |kv: &[(&str, &str)]| {
            log_config(
                &kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        assert_eq!(codec(&[]).compression, None);
        assert!(!codec(&[]).log_append_time);
        assert_eq!(
            codec(&[
                ("compression.type", "zstd"),
                ("compression.zstd.level", "7")
            ])
            .compression,
            Some(TopicCodec {
                codec: kmirror_log::batch::Compression::Zstd,
                level: Some(7)
            })
        );
        assert_eq!(
            codec(&[("compression.type", "gzip")]).compression,
            Some(TopicCodec {
                codec: kmirror_log::batch::Compression::Gzip,
                level: Some(-1)
            })
        );
        assert!(codec(&[("message.timestamp.type", "LogAppendTime")]).log_append_time);
    }

    #[test]
    fn a_one_node_document_from_before_replication_loads_and_is_written_unchanged() {
        // The document as a one-node broker wrote it before assignments and brokers existed.
        let old = r#"{
  "cluster_id": "q1w2e3r4t5y6u7i8o9p0aa",
  "version": 4,
  "topics": {
    "orders": {
      "name": "orders",
      "id": "0f0e0d0c-0b0a-0908-0706-050403020100",
      "leader_epochs": [
        0,
        3
      ],
      "configs": {
        "retention.ms": "1000"
      },
      "mirror": null,
      "internal": false
    }
  }
}"#;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), old).unwrap();
        let mut s = MetadataStore::open(dir.path()).unwrap();
        // Byte for byte the same document when written back.
        assert_eq!(serde_json::to_string_pretty(s.state()).unwrap(), old);
        let t = s.topic("orders").unwrap();
        assert!(t.assignments.is_empty() && s.state().brokers.is_empty());
        // Every partition resolves to the local node.
        assert_eq!(t.assignment(1, 7), Some(PartitionAssignment::local(7)));
        assert_eq!(t.assignment(2, 7), None);
        // And behaves as before: growing, epochs, a new topic; still no new keys on disk.
        s.create_partitions("orders", 3, false).unwrap();
        s.update_topic("orders", |t| t.leader_epochs[2] = 5)
            .unwrap();
        s.create_topic("more", 1, BTreeMap::new(), None, false)
            .unwrap();
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert!(
            !text.contains("assignments") && !text.contains("brokers"),
            "{text}"
        );
        let s = MetadataStore::open(dir.path()).unwrap();
        assert_eq!(s.topic("orders").unwrap().leader_epochs, [0, 3, 5]);
        assert_eq!(s.state().version, 7);
    }

    #[test]
    fn topics_ids_configs_and_epochs_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let id;
        let cluster;
        {
            let mut s = MetadataStore::open(dir.path()).unwrap();
            cluster = s.state().cluster_id.clone();
            let mut cfg = BTreeMap::new();
            cfg.insert("retention.ms".to_string(), "1000".to_string());
            id = s.create_topic("orders", 3, cfg, None, false).unwrap().id;
            s.create_partitions("orders", 5, false).unwrap();
            s.update_topic("orders", |t| t.leader_epochs[4] = 7)
                .unwrap();
        }
        let s = MetadataStore::open(dir.path()).unwrap();
        assert_eq!(s.state().cluster_id, cluster);
        let t = s.topic("orders").unwrap();
        assert_eq!(t.id, id);
        assert_eq!(t.partition_count(), 5);
        assert_eq!(t.leader_epochs[4], 7);
        assert_eq!(t.config_value("retention.ms").unwrap(), "1000");
        assert_eq!(
            topic_config::log_config(&t.configs).retention_ms,
            Some(1000)
        );
    }

    #[test]
    fn a_mirror_topic_reaches_disk_in_one_write_with_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::new_v4();
        {
            let mut s = MetadataStore::open(dir.path()).unwrap();
            let before = s.state().version;
            let source: BTreeMap<String, String> =
                [("cleanup.policy".to_string(), "compact".to_string())].into();
            s.create_mirror_topic("orders", 2, BTreeMap::new(), source, id, "dr")
                .unwrap();
            // One commit: a crash can find the topic only together with its owner.
            assert_eq!(s.state().version, before + 1);
        }
        let s = MetadataStore::open(dir.path()).unwrap();
        let t = s.topic("orders").unwrap();
        assert_eq!((t.id, t.mirror.as_deref()), (id, Some("dr")));
        assert_eq!(t.config_value("cleanup.policy").unwrap(), "compact");
    }

    #[test]
    fn creating_an_existing_or_badly_named_topic_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = MetadataStore::open(dir.path()).unwrap();
        s.create_topic("a", 1, BTreeMap::new(), None, false)
            .unwrap();
        assert!(matches!(
            s.create_topic("a", 1, BTreeMap::new(), None, false),
            Err(MetadataError::TopicExists(_))
        ));
        assert!(matches!(
            s.create_topic("bad/name", 1, BTreeMap::new(), None, false),
            Err(MetadataError::InvalidTopicName { .. })
        ));
        assert!(matches!(
            s.create_topic("z", 0, BTreeMap::new(), None, false),
            Err(MetadataError::InvalidPartitions(_))
        ));
    }

    #[test]
    fn unsupported_config_values_are_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = MetadataStore::open(dir.path()).unwrap();
        s.create_topic("t", 1, BTreeMap::new(), None, false)
            .unwrap();
        let e = s
            .alter_configs(
                "t",
                &[ConfigOp::Set("cleanup.policy".into(), "bogus".into())],
                false,
            )
            .unwrap_err();
        assert!(e.to_string().contains("must be one of"), "{e}");
        let e = s
            .alter_configs(
                "t",
                &[ConfigOp::Set("retention.ms".into(), "abc".into())],
                false,
            )
            .unwrap_err();
        assert!(e.to_string().contains("Not a number of type LONG"), "{e}");
        // Nothing was applied.
        assert!(s.topic("t").unwrap().configs.is_empty());
    }

    #[test]
    fn validate_only_changes_nothing_and_delete_forgets_topic() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = MetadataStore::open(dir.path()).unwrap();
        s.create_topic("t", 1, BTreeMap::new(), None, true).unwrap();
        assert!(s.topic("t").is_none());
        s.create_topic("t", 2, BTreeMap::new(), None, false)
            .unwrap();
        s.delete_topic("t").unwrap();
        let s = MetadataStore::open(dir.path()).unwrap();
        assert!(s.topic("t").is_none());
    }
}
