//! Broker-wide shared state and the per-core request context handed to handlers.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use kmirror_control::metadata::{ClusterMetadata, MetadataError, TopicMeta};
use kmirror_engine::{CoreContext, EngineError, Router};
use kmirror_log::ControlKind;
use kmirror_types::{ProducerId, TopicPartition};
use uuid::Uuid;

use crate::cluster::{Cluster, MetaCache, ProposeFailure};
use crate::errors;
use crate::groups::{GroupsService, MarkerSink, MarkersDone, TxnMarker};
use kmirror_control::quorum::{MetadataCommand, Outcome};

/// Static broker settings.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// Advertised host and port of the first listener (the coordinator's own address).
    pub host: String,
    pub port: i32,
    /// Every listener, in configuration order; a client is told the endpoint of the
    /// listener it came in through.
    pub listeners: Vec<crate::listeners::Endpoint>,
    pub data_dir: PathBuf,
    /// `socket.request.max.bytes`: larger frames close the connection unread.
    pub max_request_bytes: usize,
    pub auto_create_topics: bool,
    /// `num.partitions` for auto-created topics and CreateTopics with -1.
    pub default_partitions: i32,
    /// `offsets.topic.num.partitions`: partitions `__consumer_offsets` is described with.
    pub offsets_topic_partitions: i32,
    /// `transaction.state.log.num.partitions`: partitions of `__transaction_state`.
    pub transaction_state_partitions: i32,
    /// `offsets.topic.replication.factor`: replicas of each `__consumer_offsets` partition.
    pub offsets_topic_replication_factor: i16,
    /// `transaction.state.log.replication.factor`, likewise for `__transaction_state`.
    pub transaction_state_replication_factor: i16,
    /// `replica.lag.time.max.ms` (from the engine config).
    pub replica_lag_time_max_ms: i64,
    /// `default.replication.factor` for CreateTopics with -1 and auto-created topics (1 on
    /// a one-node broker).
    pub default_replication_factor: i16,
    /// Where and how this node reaches its peers (Kafka's `inter.broker.listener.name`).
    pub inter_broker: crate::interbroker::InterBroker,
}

impl BrokerConfig {
    /// The host and port advertised to a client connected through `listener`.
    pub fn advertised(&self, listener: &str) -> (&str, i32) {
        self.listeners
            .iter()
            .find(|l| l.name == listener)
            .map(|l| (l.host.as_str(), l.port))
            .unwrap_or((self.host.as_str(), self.port))
    }
}

/// A broker config change being applied on the calling core.
pub type ConfigChange = Pin<Box<dyn Future<Output = Result<(), ExtensionError>>>>;

/// Why an extension refused or failed a broker-side change (a dynamic config, a feature
/// level): the one error type at the [`ExtensionApis`] seam, mapped to Kafka codes by
/// [`crate::errors::extension_error_code`].
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ExtensionError {
    /// The change is not acceptable as asked (a malformed value, the extension not ready).
    #[error("{0}")]
    Invalid(String),
    /// Making the change durable failed.
    #[error("persisting {what}: {source}")]
    Persist {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// Which level a broker-resource config change or description addresses: the resource named
/// by this node's id, or the cluster-wide default (the empty name, `--entity-default`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerConfigLevel {
    Node,
    ClusterDefault,
}

/// Where a broker config's value comes from (DescribeConfigs' config source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerConfigSource {
    /// Set dynamically for this broker.
    DynamicBroker,
    /// Set dynamically as the cluster-wide default.
    DynamicDefault,
    /// From the config file or flags.
    Static,
}

/// One of an extension's dynamic broker configs, as DescribeConfigs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionConfig {
    pub name: &'static str,
    pub value: String,
    pub source: BrokerConfigSource,
}

/// A feature flag an extension owns (`mirror.version`): supported range and finalized level
/// (0 = not finalized).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionFeature {
    pub name: &'static str,
    pub min: i16,
    pub max: i16,
    pub level: i16,
}

/// APIs served outside kafka-protocol's key set (the mirror APIs). The extension gets the
/// whole request frame (header included) and returns the whole response (header included,
/// no length prefix), or None to send nothing.
pub trait ExtensionApis: Send + Sync {
    /// (api key, min version, max version) to advertise in ApiVersions.
    fn versions(&self) -> Vec<(i16, i16, i16)>;
    fn handles(&self, api_key: i16) -> bool;
    /// The future runs on the core that read the request (it may use that core's sockets).
    fn handle(
        &self,
        session: &crate::session::Session,
        api_key: i16,
        frame: Bytes,
    ) -> Pin<Box<dyn Future<Output = Option<Bytes>>>>;
    /// Called once by [`crate::start`] when every core accepts connections, handing the
    /// extension what it may use of the broker ([`crate::mirror_deps::MirrorDeps`]) and the
    /// router (partition owners).
    fn started(&self, deps: Arc<dyn crate::mirror_deps::MirrorDeps>, router: &Router) {
        let _ = (deps, router);
    }
    /// The feature flags the extension owns, advertised in ApiVersions.
    fn features(&self) -> Vec<ExtensionFeature> {
        Vec::new()
    }
    /// Finalizes the extension's feature `name` at `level` (validated against
    /// [`ExtensionApis::features`]) durably; runs on a blocking thread. `None`: not the
    /// extension's feature.
    fn update_feature(&self, name: &str, level: i16) -> Option<Result<(), ExtensionError>> {
        let _ = (name, level);
        None
    }
    /// The extension's dynamic broker configs for DescribeConfigs at `level`: at `Node`, the
    /// values in force on this broker (whatever their source; unset ones left out), at
    /// `ClusterDefault`, only the values set as the cluster-wide default (as Kafka does).
    fn broker_configs(&self, level: BrokerConfigLevel) -> Vec<ExtensionConfig> {
        let _ = level;
        Vec::new()
    }
    /// Set (`Some`) or delete (`None`) one of the extension's dynamic broker configs at
    /// `level`; `None` when `key` is not the extension's. The future runs on the calling core.
    fn alter_broker_config(
        &self,
        level: BrokerConfigLevel,
        key: &str,
        value: Option<&str>,
        validate_only: bool,
    ) -> Option<ConfigChange> {
        let _ = (level, key, value, validate_only);
        None
    }
}

/// Shared by all cores.
pub struct Broker {
    pub config: BrokerConfig,
    pub cluster: Cluster,
    pub groups: Option<GroupsService>,
    pub extension: Option<Arc<dyn ExtensionApis>>,
    pub metrics: crate::metrics::NetMetrics,
    pub authz: crate::authz::Authz,
    /// SASL settings and the SCRAM credential store.
    pub sasl: Arc<crate::sasl::Sasl>,
    /// The applied ACLs (published by the Raft driver; the authorizer reads the same).
    pub acls: crate::acl::SharedAcls,
    /// The applied client quotas (published by the Raft driver) and their budgets.
    pub quotas: crate::quota::SharedQuotas,
    /// Open connections against the dynamic broker configs' connection limits.
    pub conn_limits: Arc<crate::conn_limits::ConnLimits>,
    /// The broker's share sessions (ShareFetch / ShareAcknowledge).
    pub shares: crate::share_fetch::BrokerShares,
}

/// One core's view: the broker plus the engine context and a metadata cache.
pub struct Ctx {
    /// Reached only through the accessors below: a handler asks for the part it needs.
    broker: Arc<Broker>,
    pub core: CoreContext,
    meta: MetaCache,
    /// This core's client fetch sessions (never borrowed across an await).
    pub fetch_sessions: std::cell::RefCell<crate::fetch_session::Sessions>,
    /// The node was ready for clients when last looked at (it stays so).
    ready: std::cell::Cell<bool>,
}

/// How long a request waits for its node to become ready (see [`Ctx::wait_ready`]) before
/// it is answered anyway.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Ctx {
    /// Holds a client request until the node is ready ([`crate::cluster::Cluster::ready`]):
    /// Kafka enables its listeners only once the broker has caught up, so a client asking
    /// the moment the port opens must not learn "no controller" and cache it. A startup
    /// gate only: once ready, or once one request waited [`READY_WAIT`] in vain (a node that
    /// cannot register, e.g. on a full disk, answers as it can rather than stall every
    /// request), a flag check.
    pub async fn wait_ready(&self) {
        if self.ready.get() {
            return;
        }
        let deadline = std::time::Instant::now() + READY_WAIT;
        while !self.cluster().ready() && std::time::Instant::now() < deadline {
            glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
        }
        if !self.cluster().ready() {
            tracing::warn!(
                core = self.core.core,
                "not registered with a controller after {READY_WAIT:?}; answering clients anyway"
            );
        }
        self.ready.set(true);
    }
}

/// An error for one item of an admin request: Kafka code plus message.
pub type ItemError = (i16, String);

fn meta_err(e: MetadataError) -> ItemError {
    (errors::metadata_error_code(&e), e.to_string())
}

fn engine_err(e: EngineError) -> ItemError {
    (errors::engine_error_code(&e), e.to_string())
}

/// A failed proposal as an admin item's error.
pub fn propose_err(e: ProposeFailure) -> ItemError {
    (errors::propose_failure_code(&e), e.to_string())
}

/// A random id no topic has (the proposer chooses it, so apply is deterministic).
fn unused_topic_id(meta: &ClusterMetadata) -> Uuid {
    loop {
        let id = Uuid::new_v4();
        if meta.topic_by_id(id).is_none() && !id.is_nil() {
            break id;
        }
    }
}

impl Broker {
    /// Creates internal topic `name` (`__consumer_offsets` or `__transaction_state`) the
    /// first time Kafka would have: a real topic, `offsets.topic.num.partitions` partitions
    /// with `offsets.topic.replication.factor` replicas (at most the unfenced brokers, where
    /// Kafka would refuse until there are enough), placed like any topic; a described-only
    /// entry of an older version keeps its id and partition count. A cheap snapshot check
    /// once it exists. Returns the topic when this call created it (its partitions open on
    /// their replicas as the metadata arrives there).
    pub async fn propose_internal_topic(&self, name: &str) -> Result<Option<TopicMeta>, ItemError> {
        let meta = self.cluster.snapshot();
        if meta.topics.get(name).is_some_and(|t| t.internal) {
            return Ok(None);
        }
        let cfg = &self.config;
        let (configured, rf) = if name == "__transaction_state" {
            (
                cfg.transaction_state_partitions,
                cfg.transaction_state_replication_factor,
            )
        } else if name == kmirror_control::metadata::SHARE_STATE_TOPIC {
            // Kafka's `share.coordinator.state.topic.num.partitions` and replication factor
            // defaults (50, 3: as the offsets topic's).
            (50, cfg.offsets_topic_replication_factor)
        } else {
            (
                cfg.offsets_topic_partitions,
                cfg.offsets_topic_replication_factor,
            )
        };
        let legacy = meta.internal_topics.get(name);
        let partitions = legacy.map_or(configured, |t| t.partition_count());
        let id = legacy.map(|t| t.id).unwrap_or_else(|| loop {
            let id = Uuid::new_v4();
            if meta.described_by_id(id).is_none() && !id.is_nil() {
                break id;
            }
        });
        let live = kmirror_control::quorum::controller::unfenced_brokers(&meta).len();
        let rf = i16::try_from(live).map_or(rf, |n| rf.min(n)).max(1);
        let assignments =
            kmirror_control::quorum::controller::propose_placement(&meta, 0, partitions, rf, rf)
                .map_err(meta_err)?;
        let term = self.cluster.quorum_status().term;
        let cmd = MetadataCommand::CreateInternalTopic {
            name: name.to_string(),
            partitions,
            id,
            assignments,
            first_leader_epoch: i32::try_from(term).unwrap_or(i32::MAX),
        };
        let t = self.cluster.propose_topic(cmd).await.map_err(propose_err)?;
        Ok(Some(t))
    }
}

impl Ctx {
    /// This node's static settings (id, listeners, data dir, defaults).
    pub fn config(&self) -> &BrokerConfig {
        &self.broker.config
    }

    /// The metadata quorum: the applied metadata view and proposals.
    pub fn cluster(&self) -> &Cluster {
        &self.broker.cluster
    }

    /// The group and transaction coordinators.
    pub fn groups(&self) -> Option<&GroupsService> {
        self.broker.groups.as_ref()
    }

    /// The APIs served outside kafka-protocol's set (the mirror plug-in).
    pub fn extension(&self) -> Option<&Arc<dyn ExtensionApis>> {
        self.broker.extension.as_ref()
    }

    pub fn metrics(&self) -> &crate::metrics::NetMetrics {
        &self.broker.metrics
    }

    pub fn authz(&self) -> &crate::authz::Authz {
        &self.broker.authz
    }

    pub fn sasl(&self) -> &crate::sasl::Sasl {
        &self.broker.sasl
    }

    pub fn acls(&self) -> &crate::acl::SharedAcls {
        &self.broker.acls
    }

    pub fn quotas(&self) -> &crate::quota::SharedQuotas {
        &self.broker.quotas
    }

    pub fn conn_limits(&self) -> &Arc<crate::conn_limits::ConnLimits> {
        &self.broker.conn_limits
    }

    pub fn shares(&self) -> &crate::share_fetch::BrokerShares {
        &self.broker.shares
    }

    pub fn new(broker: Arc<Broker>, core: CoreContext) -> Ctx {
        let meta = MetaCache::new(broker.cluster.view());
        let fetch_sessions =
            std::cell::RefCell::new(crate::fetch_session::Sessions::new(core.core));
        Ctx {
            broker,
            core,
            meta,
            fetch_sessions,
            ready: std::cell::Cell::new(false),
        }
    }

    pub fn meta(&self) -> Arc<ClusterMetadata> {
        self.meta.get(self.cluster().view())
    }

    /// A partition this node does not lead in a cluster: its leader and leader epoch (client
    /// reads and writes answer NOT_LEADER_OR_FOLLOWER with them, KIP-951). None when this
    /// node leads it, it does not exist, or on a one-node broker (the leader of everything).
    pub fn not_leader(
        &self,
        meta: &ClusterMetadata,
        topic: &str,
        partition: i32,
    ) -> Option<(i32, i32)> {
        let t = meta.topics.get(topic)?;
        let i = usize::try_from(partition).ok()?;
        let a = t.assignments.get(i)?;
        (a.leader != self.node_id()).then(|| (a.leader, t.leader_epochs[i]))
    }

    /// KIP-951's node endpoints of the brokers `ids` (the leaders named in a response), at
    /// this node's first listener's name.
    pub fn node_endpoints(
        &self,
        meta: &ClusterMetadata,
        ids: impl IntoIterator<Item = i32>,
    ) -> Vec<crate::cluster::ListedBroker> {
        let listener = &self.config().listeners[0].name;
        let all = self.cluster().listed_brokers(meta, listener);
        let ids: std::collections::BTreeSet<i32> = ids.into_iter().collect();
        all.into_iter().filter(|b| ids.contains(&b.id)).collect()
    }

    pub fn router(&self) -> &Router {
        &self.core.router
    }

    pub fn node_id(&self) -> i32 {
        self.config().node_id
    }

    /// Creates a topic (one node: durably; a cluster: through the quorum, with replicas
    /// placed among the unfenced brokers), then opens its partitions this node hosts.
    /// `replication_factor` -1 is `default.replication.factor`.
    pub async fn create_topic(
        &self,
        name: String,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
        id: Option<Uuid>,
        validate_only: bool,
    ) -> Result<TopicMeta, ItemError> {
        let meta = self.meta();
        let assignments = kmirror_control::quorum::controller::propose_placement(
            &meta,
            0,
            partitions.clamp(0, 100_000),
            replication_factor,
            self.config().default_replication_factor,
        )
        .map_err(meta_err)?;
        let id = id.unwrap_or_else(|| unused_topic_id(&meta));
        let cmd = MetadataCommand::CreateTopic {
            name,
            partitions,
            configs,
            id,
            assignments,
        };
        self.create_from(cmd, validate_only).await
    }

    /// CreateTopics with explicit replica lists (a cluster only): apply checks the brokers.
    pub async fn create_topic_assigned(
        &self,
        name: String,
        assignments: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<TopicMeta, ItemError> {
        let cmd = MetadataCommand::CreateTopic {
            name,
            partitions: assignments.len() as i32,
            configs,
            id: unused_topic_id(&self.meta()),
            assignments,
        };
        self.create_from(cmd, validate_only).await
    }

    async fn create_from(
        &self,
        cmd: MetadataCommand,
        validate_only: bool,
    ) -> Result<TopicMeta, ItemError> {
        let cluster = &self.cluster();
        if validate_only {
            return match cluster.validate(&cmd).map_err(meta_err)? {
                Outcome::Topic(t) => Ok(t),
                other => Err((
                    errors::code(kafka_protocol::ResponseError::UnknownServerError),
                    format!("unexpected outcome {other:?}"),
                )),
            };
        }
        let t = cluster.propose_topic(cmd).await.map_err(propose_err)?;
        self.create_partitions_on_cores(&t, 0).await?;
        Ok(t)
    }

    /// Creates internal topic `name` (see [`Broker::propose_internal_topic`]) and opens its
    /// partitions this node hosts; a cheap snapshot check once it exists.
    pub async fn ensure_internal_topic(&self, name: &str) -> Result<(), ItemError> {
        if let Some(t) = self.broker.propose_internal_topic(name).await? {
            self.create_partitions_on_cores(&t, 0).await?;
        }
        Ok(())
    }

    /// Opens fresh logs for partitions `from..count` of `t` (wiping stale directories).
    pub async fn create_partitions_on_cores(
        &self,
        t: &TopicMeta,
        from: i32,
    ) -> Result<(), ItemError> {
        let router = self.router();
        let mut pending = Vec::new();
        // A node of a cluster opens only the partitions it is a replica of.
        for p in (from..t.partition_count()).filter(|p| self.cluster().hosts(t, *p)) {
            let tp = TopicPartition::new(t.name.clone(), p);
            pending.push(
                router
                    .submit(router.owner(&tp), move |s| {
                        s.create_partition(&tp).map(|_| ())
                    })
                    .await
                    .map_err(engine_err)?,
            );
        }
        for p in pending {
            p.wait().await.map_err(engine_err)?.map_err(engine_err)?;
        }
        Ok(())
    }

    /// Deletes a topic: metadata first (clients stop seeing it), then logs and directories.
    /// A mirrored topic is refused (apply checks it): it is deleted only after failover.
    pub async fn delete_topic(&self, name: String) -> Result<TopicMeta, ItemError> {
        let t = self
            .cluster()
            .propose_topic(MetadataCommand::DeleteTopic { name })
            .await
            .map_err(propose_err)?;
        let router = self.router();
        let mut pending = Vec::new();
        for p in 0..t.partition_count() {
            let tp = TopicPartition::new(t.name.clone(), p);
            let dir = self.cluster().partition_dir(&tp);
            pending.push(
                router
                    .submit(router.owner(&tp), move |s| {
                        s.remove_partition(&tp, Some(dir))
                    })
                    .await
                    .map_err(engine_err)?,
            );
        }
        for p in pending {
            if let Err(e) = p.wait().await.map_err(engine_err)? {
                tracing::warn!(topic = %t.name, error = %e, "removing partition files failed");
            }
        }
        Ok(t)
    }

    /// The topic, auto-creating it if allowed and absent.
    pub async fn topic_or_create(
        &self,
        name: &str,
        allow_create: bool,
    ) -> Result<TopicMeta, ItemError> {
        let internal = kmirror_control::metadata::INTERNAL_TOPICS.contains(&name);
        let meta = self.meta();
        // A described-only internal topic of an older version is made real here if a client
        // asks before the node's startup conversion did it.
        if let Some(t) = meta
            .described(name)
            .filter(|t| !internal || meta.topics.contains_key(&t.name))
        {
            return Ok(t.clone());
        }
        if internal && allow_create {
            // Kafka's auto topic creation makes an internal topic with its own partition count.
            self.ensure_internal_topic(name).await?;
            if let Some(t) = self.meta().described(name) {
                return Ok(t.clone());
            }
        }
        if !(allow_create && self.config().auto_create_topics) {
            return Err((
                errors::code(kafka_protocol::ResponseError::UnknownTopicOrPartition),
                format!("unknown topic '{name}'"),
            ));
        }
        match self
            .create_topic(
                name.to_string(),
                self.config().default_partitions,
                -1,
                BTreeMap::new(),
                None,
                false,
            )
            .await
        {
            Ok(t) => Ok(t),
            // Lost a race with another creator: fine.
            Err((36, _)) => self.meta().topics.get(name).cloned().ok_or((
                errors::code(kafka_protocol::ResponseError::UnknownTopicOrPartition),
                name.to_string(),
            )),
            Err(e) => Err(e),
        }
    }
}

/// Writes transaction markers for the coordinator by routing each to its partition's core.
#[derive(Clone)]
pub struct EngineMarkerSink {
    router: Arc<OnceLock<Router>>,
}

impl EngineMarkerSink {
    /// The router is set once the engine has started (the coordinator starts first).
    pub fn new(router: Arc<OnceLock<Router>>) -> EngineMarkerSink {
        EngineMarkerSink { router }
    }

    /// Queues a marker job as a task on the core owning `first`'s partition (whose marker is
    /// then written inline); returns at once. `make` builds the task on that core.
    pub(crate) fn spawn<F, Fut>(&self, first: &TxnMarker, make: F) -> Result<(), String>
    where
        F: FnOnce(Router) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        self.spawn_near(
            &TopicPartition::new(first.topic.clone(), first.partition),
            make,
        )
    }

    /// As [`Self::spawn`], on the core owning `tp`.
    pub(crate) fn spawn_near<F, Fut>(&self, tp: &TopicPartition, make: F) -> Result<(), String>
    where
        F: FnOnce(Router) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let router = self
            .router
            .get()
            .ok_or_else(|| "broker not started".to_string())?
            .clone();
        let core = router.owner(tp);
        let r = router.clone();
        router
            .spawn_on_queued(core, move || make(r))
            .map_err(|e| e.to_string())
    }

    /// Appends each marker on its partition's core (from an engine core).
    pub(crate) async fn write(router: &Router, markers: Vec<TxnMarker>) -> Result<(), String> {
        let mut pending = Vec::new();
        for m in markers {
            if m.topic == crate::groups::OFFSETS_TOPIC {
                // Its group coordinator was not loaded when the job started; the retry
                // settles the offsets there once it is.
                return Err(format!(
                    "the coordinator of {} partition {} is not loaded yet",
                    m.topic, m.partition
                ));
            }
            let tp = TopicPartition::new(m.topic.clone(), m.partition);
            let kind = if m.commit {
                ControlKind::Commit
            } else {
                ControlKind::Abort
            };
            pending.push(
                router
                    .submit_partition(tp, move |p| {
                        p.append_control(
                            kind,
                            ProducerId(m.producer_id),
                            m.producer_epoch,
                            m.coordinator_epoch,
                            kmirror_engine::now_ms(),
                        )
                    })
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        let mut first_err = None;
        for p in pending {
            match p.wait().await {
                Ok(Ok(Ok(_))) => {}
                // A deleted partition has nothing left to mark.
                Ok(Err(EngineError::UnknownPartition(_))) => {}
                // A mirror partition never joins a transaction (AddPartitionsToTxn refuses
                // it); should a marker still target one, it must not write into the
                // mirror, and retrying would never succeed.
                Ok(Ok(Err(EngineError::ReadOnly { tp, mirror }))) => {
                    tracing::warn!(%tp, %mirror, "transaction marker for a mirror partition dropped");
                }
                Ok(Err(e)) | Ok(Ok(Err(e))) | Err(e) => {
                    first_err.get_or_insert(e.to_string());
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl MarkerSink for EngineMarkerSink {
    fn write_markers(&self, markers: Vec<TxnMarker>, done: MarkersDone) -> Result<(), String> {
        let Some(first) = markers.first().cloned() else {
            return Err("no markers".into());
        };
        self.spawn(&first, move |router| async move {
            done.report(Self::write(&router, markers).await).await
        })
    }
}
