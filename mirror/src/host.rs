//! Mirroring wired into the running broker: the broker's [`MirrorHost`], the mirror control
//! thread, and the [`ExtensionApis`] that serves the mirror wire APIs.
//!
//! One plain thread ("kmirror-mirror") owns the [`MirrorService`] (coordinator + store) and
//! serializes everything that changes mirror state: wire requests, fetcher events and the
//! per-mirror sync rounds. It may block (the host's failover steps wait for the owning core and
//! fsync), which is why it is never an engine core. Engine cores only hand it frames and await
//! the reply over a channel; at a node without the seat the reply names the seat and the core
//! forwards the frame there itself, so the thread never waits on a peer.
//!
//! After every message the thread reconciles: each topic with a read-only mirror partition
//! carries `TopicMeta::mirror` (clients are refused with READ_ONLY_TOPIC), a topic whose
//! partitions are all STOPPED is writable again, PREPARING/MIRRORING/FAILED partitions have a
//! fetcher, others do not.
//!
//! Sync rounds (topics, partitions, configs, group offsets) talk to the source from an engine
//! core (the source client is glommio-based) and send the snapshot back to the thread, which
//! plans with `kmirror_control::mirror::sync` and applies. ACL sync (create missing, delete
//! extra, `mirror.acl.principals.exclude`) runs with the group offsets and writes the broker's
//! ACL store (`kmirror_net::acl`); a source without an authorizer leaves the local ACLs alone.

use kmirror_control::quorum::{AclCommand, ClusterCommand, MetadataCommand};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest, RequestHeader, RequestKind,
    ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_control::metadata::{topic_config, TopicMeta};
use kmirror_control::mirror::{
    id_changed_reason, plan_group_sync, plan_metadata_sync, DeletionConfirmations, HostError,
    LocalTopic, MirrorCoordinator, MirrorDefinition, MirrorHost, MirrorStateStore, MissingVerdict,
    PartitionState, SourceLookup, SourceTopic, SyncAction,
};
use kmirror_engine::Router;
use kmirror_log::ControlKind;
use kmirror_types::{LeaderEpoch, Offset, ProducerId, TopicPartition};

use crate::client_security::ClientSecurity;
use crate::fetcher::{FetchEvent, FetcherConfig, KafkaSource};
use crate::keys::{self, api};
use crate::manager::{FetchTask, FetcherManager};
use crate::metrics::{MirrorMetrics, SyncErrorKind};
use crate::service::{LivePartition, MirrorLiveStatus, MirrorService};
use crate::throttle::{BrokerRate, RateLevel, RateSource, BROKER_THROTTLED_RATE};
use kmirror_net::broker::{Broker, ExtensionApis};
use kmirror_net::broker::{BrokerConfigLevel, BrokerConfigSource, ExtensionConfig};

/// How long a failover waits for a fetcher to exit before truncating anyway is not an
/// option: the step fails (and is retried) if the fetcher does not stop in time.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a retried stop waits for a fetcher that already missed [`STOP_TIMEOUT`].
const RETRY_STOP_WAIT: Duration = Duration::from_millis(200);
/// How often an unfinished failover (a STOPPING partition) is retried.
const FAILOVER_RETRY: Duration = Duration::from_secs(2);
/// How long a failover step waits for the ISR to replicate a partition's log end.
const REPLICATED_WAIT: Duration = Duration::from_secs(10);
/// Most partitions a mirror topic may take from its source (the local topic limit).
const MAX_MIRROR_PARTITIONS: i32 = 100_000;

/// Settings of the broker's mirroring.
#[derive(Debug, Clone)]
pub struct MirrorSettings {
    /// `mirror.version` feature level (0 = mirror APIs answer UNSUPPORTED_VERSION).
    pub feature_level: i16,
    pub fetcher: FetcherConfig,
    /// Broker-wide mirror byte-rate ceiling (bytes/s, 0 = unlimited).
    pub byte_rate: u64,
}

impl Default for MirrorSettings {
    fn default() -> Self {
        MirrorSettings {
            feature_level: 1,
            fetcher: FetcherConfig::default(),
            byte_rate: 0,
        }
    }
}

/// The control thread's answer to a mirror request.
enum Answer {
    /// The response frame (None: send nothing).
    Frame(Option<Bytes>),
    /// This node does not hold the seat: the core that read the request forwards it to
    /// `addr`, the seat's inter-broker listener (async on that core; the control thread
    /// serves the fetchers' events meanwhile).
    Forward {
        addr: String,
        frame: Bytes,
        ib: kmirror_net::interbroker::InterBroker,
    },
}

type Reply = flume::Sender<Answer>;

enum Msg {
    Request(Bytes, Reply),
    /// UpdateFeatures finalized `mirror.version` at this level.
    FeatureLevel(i16),
    Synced(String, Result<SourceSnapshot, String>),
}

struct SourceSnapshot {
    topics: Vec<SourceTopic>,
    /// Present when the round also fetched group offsets.
    groups: Option<BTreeMap<String, BTreeMap<TopicPartition, i64>>>,
    /// Source last stable offsets of partitions without a running fetcher (paused), so
    /// their lag keeps growing in DescribeMirrors.
    idle_ends: Vec<(TopicPartition, i64)>,
    /// Source ACLs, when the round fetched them and the source has an authorizer.
    acls: Option<Vec<kmirror_control::mirror::AclBinding>>,
    /// Source client quotas, when the round fetched them and the source serves the API.
    quotas: Option<BTreeMap<kmirror_control::quota::Entity, kmirror_control::quota::Values>>,
    quotas_failed: bool,
    /// The round tried to read group offsets / ACLs from the source and failed (counted as
    /// sync errors).
    groups_failed: bool,
    acls_failed: bool,
    /// Direct lookups of mirrored topics missing from the topic list.
    lookups: BTreeMap<String, SourceLookup>,
}

/// The broker's mirroring: pass it to [`kmirror_net::start`] as the extension.
pub struct MirrorBroker {
    tx: flume::Sender<Msg>,
    /// Set when the broker starts: the authorizer the mirror APIs are checked against.
    broker: std::sync::OnceLock<Arc<Broker>>,
    pending: Mutex<Option<(flume::Receiver<Msg>, MirrorService, MirrorSettings)>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The broker-wide byte-rate ceiling as a dynamic broker config (set when started).
    broker_rate: std::sync::OnceLock<Arc<BrokerRate>>,
    /// Mirror progress and counters, for the metrics endpoint.
    metrics: Arc<MirrorMetrics>,
    /// The finalized `mirror.version` level and the file that keeps an UpdateFeatures change
    /// across restarts (the configured level is only the bootstrap value, as Kafka's
    /// feature levels are set at format time and then only by UpdateFeatures).
    feature_level: std::sync::atomic::AtomicI16,
    feature_file: std::path::PathBuf,
}

/// File (in the data directory) holding `mirror.version` once UpdateFeatures set it.
const FEATURE_FILE: &str = "mirror.version";

impl MirrorBroker {
    /// Opens `<data_dir>/__mirror_state`. The control thread starts with the broker.
    pub fn open(
        data_dir: &std::path::Path,
        settings: MirrorSettings,
    ) -> Result<Arc<Self>, kmirror_control::mirror::MirrorError> {
        // The mirror state is the quorum's (`__mirror_state` on the Raft log); the view is
        // loaded from the driver once the broker runs.
        let store = MirrorStateStore::in_memory();
        let feature_file = data_dir.join(FEATURE_FILE);
        let level = std::fs::read_to_string(&feature_file)
            .ok()
            .and_then(|l| l.trim().parse::<i16>().ok())
            .filter(|l| (keys::feature::DISABLED..=keys::feature::MAX_LEVEL).contains(l))
            .unwrap_or(settings.feature_level);
        let service = MirrorService::new(MirrorCoordinator::new(store), level);
        let (tx, rx) = flume::unbounded();
        Ok(Arc::new(MirrorBroker {
            tx,
            broker: std::sync::OnceLock::new(),
            pending: Mutex::new(Some((rx, service, settings))),
            stop: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            thread: Mutex::new(None),
            broker_rate: std::sync::OnceLock::new(),
            metrics: Arc::new(MirrorMetrics::default()),
            feature_level: std::sync::atomic::AtomicI16::new(level),
            feature_file,
        }))
    }

    /// Mirror progress, states and counters (read by the metrics endpoint).
    pub fn metrics(&self) -> &Arc<MirrorMetrics> {
        &self.metrics
    }

    /// Stops the fetchers and the control thread (call before stopping the engine).
    pub fn shutdown(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let h = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}

impl ExtensionApis for MirrorBroker {
    fn versions(&self) -> Vec<(i16, i16, i16)> {
        MirrorService::versions()
    }

    fn handles(&self, api_key: i16) -> bool {
        api::is_mirror_api(api_key)
    }

    fn handle(
        &self,
        session: &kmirror_net::session::Session,
        api_key: i16,
        frame: Bytes,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Bytes>>>> {
        if let Some(refused) = self.broker.get().and_then(|b| {
            crate::authz::refuse_mirror_api(&b.authz.access(session), api_key, &frame)
        }) {
            return Box::pin(async move { Some(refused) });
        }
        let (rtx, rrx) = flume::bounded(1);
        let sent = self.tx.send(Msg::Request(frame, rtx)).is_ok();
        Box::pin(async move {
            if !sent {
                return None;
            }
            match rrx.recv_async().await.ok()? {
                Answer::Frame(out) => out,
                Answer::Forward { addr, frame, ib } => forward(&ib, &addr, frame).await,
            }
        })
    }

    fn started(&self, broker: &Arc<Broker>, router: &Router) {
        let _ = self.broker.set(broker.clone());
        let Some((rx, mut service, settings)) = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        service.set_cores(router.cores());
        let (ev_tx, ev_rx) = flume::unbounded();
        let manager = FetcherManager::with_metrics(
            router.clone(),
            broker.config.node_id,
            settings.fetcher.clone(),
            ev_tx,
            self.metrics.clone(),
        );
        let _ = self.broker_rate.set(Arc::new(BrokerRate::open(
            &broker.config.data_dir,
            settings.byte_rate,
            manager.broker_ceiling(),
        )));
        let host = BrokerHost {
            broker: broker.clone(),
            router: router.clone(),
            manager,
            idle_ends: HashMap::new(),
            lost: HashMap::new(),
            stop_pending: BTreeSet::new(),
            sync_errors: HashMap::new(),
            leader_hws: HashMap::new(),
        };
        // The mirror state is the quorum's (`__mirror_state` on the Raft log): the view
        // starts empty until the first load.
        let quorum = QuorumMirror {
            committer: Arc::new(ClusterCommitter(broker.cluster.clone())),
            loaded: None,
            seat: false,
        };
        let mut ctl = Control {
            quorum,
            service,
            host,
            tx: self.tx.clone(),
            next_sync: HashMap::new(),
            next_group_sync: HashMap::new(),
            in_flight: BTreeSet::new(),
            next_core: 0,
            conflicts: BTreeMap::new(),
            failover_retry_at: Instant::now(),
            deletions: DeletionConfirmations::default(),
            blocked: BTreeMap::new(),
            connection_settings: HashMap::new(),
            placement_refused: HashMap::new(),
        };
        let stop = self.stop.clone();
        let h = std::thread::Builder::new()
            .name("kmirror-mirror".into())
            .spawn(move || ctl.run(rx, ev_rx, stop))
            .expect("spawn mirror control thread");
        *self.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
    }

    fn features(&self) -> Vec<kmirror_net::broker::ExtensionFeature> {
        vec![kmirror_net::broker::ExtensionFeature {
            name: keys::feature::MIRROR_VERSION,
            min: keys::feature::DISABLED,
            max: keys::feature::MAX_LEVEL,
            level: self
                .feature_level
                .load(std::sync::atomic::Ordering::Relaxed),
        }]
    }

    fn update_feature(
        &self,
        name: &str,
        level: i16,
    ) -> Option<Result<(), kmirror_net::broker::ExtensionError>> {
        if name != keys::feature::MIRROR_VERSION {
            return None;
        }
        // Durable first (write, fsync, rename), then in force.
        let tmp = self.feature_file.with_extension("tmp");
        let written = (|| -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            writeln!(f, "{level}")?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.feature_file)?;
            if let Some(dir) = self.feature_file.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })();
        if let Err(source) = written {
            return Some(Err(kmirror_net::broker::ExtensionError::Persist {
                what: name.to_owned(),
                source,
            }));
        }
        self.feature_level
            .store(level, std::sync::atomic::Ordering::Relaxed);
        let _ = self.tx.send(Msg::FeatureLevel(level));
        if let Some((_, service, _)) = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            service.set_feature_level(level);
        }
        Some(Ok(()))
    }

    fn broker_configs(&self, level: BrokerConfigLevel) -> Vec<ExtensionConfig> {
        let Some(r) = self.broker_rate.get() else {
            return Vec::new();
        };
        let entry = |value: u64, source| ExtensionConfig {
            name: BROKER_THROTTLED_RATE,
            value: value.to_string(),
            source,
        };
        match level {
            BrokerConfigLevel::ClusterDefault => r
                .cluster_default()
                .map(|v| entry(v, BrokerConfigSource::DynamicDefault))
                .into_iter()
                .collect(),
            BrokerConfigLevel::Node => match r.describe() {
                (v, RateSource::Broker) => vec![entry(v, BrokerConfigSource::DynamicBroker)],
                (v, RateSource::ClusterDefault) => {
                    vec![entry(v, BrokerConfigSource::DynamicDefault)]
                }
                // Unset (0, unlimited) is left out, as Kafka leaves out its replication
                // throttles when no value is set.
                (0, RateSource::Static) => Vec::new(),
                (v, RateSource::Static) => vec![entry(v, BrokerConfigSource::Static)],
            },
        }
    }

    fn alter_broker_config(
        &self,
        level: BrokerConfigLevel,
        key: &str,
        value: Option<&str>,
        validate_only: bool,
    ) -> Option<kmirror_net::broker::ConfigChange> {
        if key != BROKER_THROTTLED_RATE {
            return None;
        }
        let parsed = BrokerRate::parse(value);
        let rate = self.broker_rate.get().cloned();
        let level = match level {
            BrokerConfigLevel::Node => RateLevel::Broker,
            BrokerConfigLevel::ClusterDefault => RateLevel::ClusterDefault,
        };
        Some(Box::pin(async move {
            use kmirror_net::broker::ExtensionError;
            let value = parsed.map_err(ExtensionError::Invalid)?;
            let rate =
                rate.ok_or_else(|| ExtensionError::Invalid("mirroring has not started".into()))?;
            if validate_only {
                return Ok(());
            }
            // The value is persisted with an fsync: off the engine core.
            glommio::executor()
                .spawn_blocking(move || rate.set_blocking(level, value))
                .await
        }))
    }
}

/// [`MirrorHost`] over the broker: metadata through the control thread, logs through the
/// owning cores (blocking calls: this runs on the mirror control thread only).
pub(crate) struct BrokerHost {
    broker: Arc<Broker>,
    router: Router,
    manager: Arc<FetcherManager>,
    /// Source LSO of partitions without a fetcher, from the sync rounds.
    idle_ends: HashMap<TopicPartition, i64>,
    /// Source-deleted, never-mirrored offsets per partition: (sum, latest from, latest to).
    lost: HashMap<TopicPartition, (i64, i64, i64)>,
    /// Fetchers asked to stop that had not exited when last checked.
    stop_pending: BTreeSet<TopicPartition>,
    /// The last failed sync round's reason per mirror, until a round succeeds.
    sync_errors: HashMap<String, String>,
    /// Cluster: high watermarks of mirror partitions led by other nodes, asked from their
    /// leaders just before a DescribeMirrors is answered.
    leader_hws: HashMap<TopicPartition, i64>,
}

impl BrokerHost {
    fn on_partition<R: Send + 'static>(
        &self,
        tp: &TopicPartition,
        f: impl FnOnce(&mut kmirror_engine::Partition) -> Result<R, String> + Send + 'static,
    ) -> Result<R, String> {
        let tp2 = tp.clone();
        self.router
            .run_on_blocking(self.router.owner(tp), move |s| match s.partition(&tp2) {
                Ok(p) => f(p),
                Err(e) => Err(e.to_string()),
            })
            .map_err(|e| e.to_string())?
    }

    fn topic(&self, name: &str) -> Option<TopicMeta> {
        self.broker.cluster.snapshot().topics.get(name).cloned()
    }

    /// Cluster: what a consumer can read of `tp`, its high watermark on the leader. Here
    /// where this node leads; else the leader's answer to the last `refresh_leader_hws`, or
    /// this replica's own high watermark (what the leader last told it) when the leader
    /// could not be asked. None on one node, where the log end is readable.
    fn readable_end(&self, tp: &TopicPartition) -> Option<i64> {
        if !self.leads(&self.broker.cluster.snapshot(), tp) {
            if let Some(&hw) = self.leader_hws.get(tp) {
                return Some(hw);
            }
        }
        self.on_partition(tp, |p| Ok(p.log.high_watermark().0)).ok()
    }

    /// Cluster: asks each other leader of `partitions` for their high watermarks (ListOffsets
    /// LATEST, read_uncommitted, as a consumer would), one request per leader. A leader that
    /// does not answer leaves its partitions to `readable_end`'s fallback.
    fn refresh_leader_hws(&mut self, partitions: &[TopicPartition]) {
        use kafka_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        use kafka_protocol::messages::{BrokerId, ListOffsetsRequest};
        self.leader_hws.clear();
        let cluster = &self.broker.cluster;
        let meta = cluster.snapshot();
        let me = self.broker.config.node_id;
        let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
        for tp in partitions {
            let Some(a) = meta
                .topics
                .get(&tp.topic)
                .and_then(|t| t.assignments.get(usize::try_from(tp.partition).ok()?))
            else {
                continue;
            };
            if a.leader >= 0 && a.leader != me {
                by_leader
                    .entry(a.leader)
                    .or_default()
                    .entry(tp.topic.clone())
                    .or_default()
                    .push(tp.partition);
            }
        }
        // v7: the version every Kafka 4.x and kmirror broker serves.
        const VERSION: i16 = 7;
        // The leader's inter-broker listener, authenticated as the broker itself.
        let ib = self.broker.config.inter_broker.clone();
        let mut asks = Vec::new();
        for (leader, topics) in by_leader {
            let Some(addr) = ib.peer_addr(&meta, leader) else {
                continue;
            };
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_isolation_level(0)
                .with_topics(
                    topics
                        .iter()
                        .map(|(name, parts)| {
                            ListOffsetsTopic::default()
                                .with_name(StrBytes::from_string(name.clone()).into())
                                .with_partitions(
                                    parts
                                        .iter()
                                        .map(|&p| {
                                            ListOffsetsPartition::default()
                                                .with_partition_index(p)
                                                .with_timestamp(-1)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            match crate::client::codec::encode_request(&req, VERSION, 1, "kmirror-mirror-seat") {
                Ok(frame) => asks.push((addr, frame.slice(4..))),
                Err(e) => tracing::debug!(error = %e, "cannot encode ListOffsets"),
            }
        }
        if asks.is_empty() {
            return;
        }
        // The requests go out together from a core (async sockets); this thread waits for
        // their answers, each bounded by LEADER_HW_TIMEOUT.
        let (tx, rx) = flume::bounded(1);
        let spawned = self.router.spawn_on_blocking(0, move || async move {
            let asked: Vec<_> = asks
                .into_iter()
                .map(|(addr, frame)| {
                    let ib = ib.clone();
                    glommio::spawn_local(async move {
                        let r = ib.exchange(&addr, frame, LEADER_HW_TIMEOUT).await;
                        (addr, r)
                    })
                })
                .collect();
            let mut answers = Vec::with_capacity(asked.len());
            for a in asked {
                answers.push(a.await);
            }
            let _ = tx.send(answers);
        });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "cannot ask the partition leaders for their high watermarks");
            return;
        }
        let Ok(answers) = rx.recv_timeout(LEADER_HW_TIMEOUT + Duration::from_secs(1)) else {
            return;
        };
        for (addr, answer) in answers {
            let resp = answer.and_then(|frame| {
                crate::client::codec::decode_response::<ListOffsetsRequest>(frame, VERSION, 1)
                    .map_err(|e| e.to_string())
            });
            match resp {
                Ok(r) => {
                    for t in r.topics {
                        for p in t.partitions {
                            if p.error_code == 0 && p.offset >= 0 {
                                self.leader_hws.insert(
                                    TopicPartition::new(t.name.to_string(), p.partition_index),
                                    p.offset,
                                );
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "cannot ask a partition leader for its high watermarks")
                }
            }
        }
    }

    /// Sends `req` to broker `node`'s inter-broker listener (authenticated as this broker)
    /// and returns its answer; the exchange runs on core 0, this thread waits for it.
    fn ask_peer<R>(&self, node: i32, req: R, version: i16) -> Result<R::Response, String>
    where
        R: kafka_protocol::protocol::Request + Send + 'static,
        R::Response: Send + 'static,
    {
        let meta = self.broker.cluster.snapshot();
        let ib = self.broker.config.inter_broker.clone();
        let addr = ib
            .peer_addr(&meta, node)
            .ok_or_else(|| format!("node {node} has no inter-broker endpoint"))?;
        let frame = crate::client::codec::encode_request(&req, version, 1, "kmirror-mirror-seat")
            .map_err(|e| e.to_string())?
            .slice(4..);
        let (tx, rx) = flume::bounded(1);
        self.router
            .spawn_on_blocking(0, move || async move {
                let _ = tx.send(ib.exchange(&addr, frame, PEER_TIMEOUT).await);
            })
            .map_err(|e| e.to_string())?;
        let answer = rx
            .recv_timeout(PEER_TIMEOUT + Duration::from_secs(1))
            .map_err(|_| format!("node {node} did not answer"))?
            .map_err(|e| e.to_string())?;
        crate::client::codec::decode_response::<R>(answer, version, 1).map_err(|e| e.to_string())
    }

    /// Pushes a topic's metadata (epoch, configs, mirror flag) to its open partitions.
    fn refresh(&self, t: &TopicMeta) -> Result<(), String> {
        futures_lite::future::block_on(self.broker.cluster.refresh_partitions(&self.router, t))
            .map_err(|e| e.to_string())
    }

    /// Proposes a topic change (the cluster's one mutation entry point), then pushes the
    /// result to the open partitions.
    fn propose_topic(&self, cmd: MetadataCommand) -> Result<TopicMeta, String> {
        let t = self
            .broker
            .cluster
            .propose_topic_blocking(cmd)
            .map_err(|e| e.to_string())?;
        self.refresh(&t)?;
        Ok(t)
    }

    /// Replica lists for `count` new partitions from `start` in a cluster (`rf` None:
    /// `default.replication.factor`, as Kafka's mirror creates topics like CreateTopics);
    /// empty on a one-node broker.
    fn placement(&self, start: i32, count: i32, rf: Option<i16>) -> Result<Vec<Vec<i32>>, String> {
        let cluster = &self.broker.cluster;
        let default_rf = self.broker.config.default_replication_factor;
        kmirror_control::quorum::controller::propose_placement(
            &cluster.snapshot(),
            start,
            count.clamp(0, MAX_MIRROR_PARTITIONS),
            rf.unwrap_or(default_rf),
            default_rf,
        )
        .map_err(|e| e.to_string())
    }

    /// Whether this node runs the fetcher of `tp`: the partition's leader in a cluster
    /// (followers replicate it like any other partition), always on a one-node broker.
    fn leads(
        &self,
        meta: &kmirror_control::metadata::ClusterMetadata,
        tp: &TopicPartition,
    ) -> bool {
        // A restarted node replays its own metadata log first: until it has heard from the
        // quorum leader and applied what is committed, the leaderships it sees may be old
        // ones, and a fetcher started on them would write beside the real leader.
        let q = self.broker.cluster.quorum_status();
        let current = q.leader.is_some() && q.applied_index >= q.commit_index;
        current
            && matches!(
                self.broker.cluster.role(meta, tp),
                Some(kmirror_net::cluster::Role::Leader { .. })
            )
    }

    /// Opens fresh logs for partitions `from..count` of `t` on their owning cores (in a
    /// cluster only those this node hosts; the replica reconciler opens them too).
    fn create_partitions_on_cores(&self, t: &TopicMeta, from: i32) -> Result<(), String> {
        for p in from..t.partition_count() {
            if !self.broker.cluster.hosts(t, p) {
                continue;
            }
            let tp = TopicPartition::new(t.name.clone(), p);
            let tp2 = tp.clone();
            self.router
                .run_on_blocking(self.router.owner(&tp), move |s| {
                    s.create_partition(&tp2).map(|_| ())
                })
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("{tp}: {e}"))?;
        }
        Ok(())
    }

    /// Cluster mode: waits until the ISR has replicated `tp` to its log end (high watermark
    /// = log end), so a failover step never cuts records the followers have not fetched yet
    /// and a PID-reset marker is committed before STOPPED is. One node: nothing to wait for.
    fn await_replicated(&self, tp: &TopicPartition) -> Result<(), String> {
        let until = Instant::now() + REPLICATED_WAIT;
        loop {
            let (hw, end) = self.on_partition(tp, |p| {
                Ok((p.log.high_watermark().0, p.log.log_end_offset().0))
            })?;
            if hw >= end {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(format!(
                    "{tp}: followers have not replicated to {end} (high watermark {hw}); retrying"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn fetch_task(
        &self,
        mirror: &MirrorDefinition,
        tp: &TopicPartition,
        local_lme: Option<LeaderEpoch>,
        skip_prepare: bool,
    ) -> FetchTask {
        use kmirror_control::mirror::definition::settings::{
            FETCH_MAX_BYTES, FETCH_MAX_WAIT_MS, FETCH_PARTITION_MAX_BYTES, RETRY_BACKOFF_MAX_MS,
            RETRY_BACKOFF_MS, THROTTLED_RATE,
        };
        let setting = |key: &str| {
            mirror
                .settings
                .contains_key(key)
                .then(|| mirror.setting_u64(key, 0))
        };
        FetchTask {
            mirror: mirror.name.clone(),
            source_bootstrap: mirror.source_bootstrap().to_owned(),
            tp: tp.clone(),
            topic_id: self.topic(&tp.topic).map(|t| t.id).unwrap_or_default(),
            local_lme,
            skip_prepare,
            retry_backoff_ms: setting(RETRY_BACKOFF_MS),
            retry_backoff_max_ms: setting(RETRY_BACKOFF_MAX_MS),
            throttled_rate: mirror.setting_u64(THROTTLED_RATE, 0),
            priority: mirror.is_priority_topic(&tp.topic),
            fetch_max_bytes: setting(FETCH_MAX_BYTES),
            fetch_partition_max_bytes: setting(FETCH_PARTITION_MAX_BYTES),
            fetch_max_wait_ms: setting(FETCH_MAX_WAIT_MS),
            security: ClientSecurity::from_properties(&mirror.client_settings()),
        }
    }
}

impl MirrorHost for BrokerHost {
    fn local_partition_count(&self, topic: &str) -> Option<i32> {
        self.topic(topic).map(|t| t.partition_count())
    }

    fn start_fetcher(&mut self, mirror: &MirrorDefinition, tp: &TopicPartition) {
        if !self.leads(&self.broker.cluster.snapshot(), tp) {
            // Its leader runs it (the reconcile there starts it).
            return;
        }
        let task = self.fetch_task(mirror, tp, None, true);
        if let Err(e) = self.manager.start(task) {
            tracing::warn!(%tp, error = %e, "cannot start mirror fetcher");
        }
    }

    fn stop_fetcher(&mut self, tp: &TopicPartition) -> Result<(), HostError> {
        // A fetcher already waited for once is only checked briefly on a retry: the control
        // thread serves every mirror request and must not block 30 s per retry.
        let wait = if self.stop_pending.contains(tp) {
            RETRY_STOP_WAIT
        } else {
            STOP_TIMEOUT
        };
        if self.manager.stop_and_wait(tp, wait) {
            self.stop_pending.remove(tp);
            return Ok(());
        }
        self.stop_pending.insert(tp.clone());
        tracing::error!(%tp, "mirror fetcher did not stop in time");
        Err(HostError::FetcherStillRunning {
            waited_secs: STOP_TIMEOUT.as_secs(),
        })
    }

    fn leader_epoch(&self, tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
        self.on_partition(tp, |p| Ok(p.leader_epoch))
            .map_err(HostError::Failed)
    }

    fn bump_leader_epoch(&mut self, tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
        // Above everything: the in-memory epoch, every epoch in the log, the durable one.
        let local = self
            .on_partition(tp, |p| {
                Ok(p.leader_epoch
                    .0
                    .max(p.log.latest_epoch().map_or(-1, |e| e.0)))
            })
            .map_err(HostError::Failed)?;
        let idx = tp.partition as usize;
        let durable = self
            .topic(&tp.topic)
            .and_then(|t| t.leader_epochs.get(idx).copied())
            .ok_or_else(|| HostError::UnknownPartition(tp.clone()))?;
        let new = local.max(durable) + 1;
        self.propose_topic(MetadataCommand::BumpLeaderEpoch {
            name: tp.topic.clone(),
            partition: tp.partition,
            at_least: new,
        })
        .map_err(HostError::Failed)?;
        self.on_partition(tp, move |p| {
            p.leader_epoch = p.leader_epoch.max(LeaderEpoch(new));
            Ok(LeaderEpoch(new))
        })
        .map_err(HostError::Failed)
    }

    fn truncate_to_lso(&mut self, tp: &TopicPartition) -> Result<Offset, HostError> {
        // The LSO is below the high watermark: mirrored records not yet on the followers
        // would be cut, so they are replicated first.
        self.await_replicated(tp).map_err(HostError::Failed)?;
        self.on_partition(tp, |p| {
            let lso = p.log.last_stable_offset();
            p.log.truncate_to(lso).map_err(|e| e.to_string())?;
            p.log.set_high_watermark(lso);
            p.log.flush().map_err(|e| e.to_string())?;
            Ok(lso)
        })
        .map_err(HostError::Failed)
    }

    fn ends_with_pid_reset(&self, tp: &TopicPartition) -> Result<bool, HostError> {
        let ends = self
            .on_partition(tp, |p| {
                let end = p.log.log_end_offset().0;
                if end <= p.log.log_start_offset().0 {
                    return Ok(false);
                }
                let r = p
                    .log
                    .read(
                        kmirror_types::Offset(end - 1),
                        1,
                        kmirror_types::Offset(end),
                    )
                    .map_err(|e| e.to_string())?;
                let mut b: &[u8] = &r.records;
                // The slice starts at the batch holding end-1: find the last batch in it.
                let mut last = None;
                while let Ok(h) = kmirror_log::batch::BatchHeader::parse(b) {
                    let size = h.total_size();
                    last = Some((h.is_control(), b[..size.min(b.len())].to_vec()));
                    if size >= b.len() {
                        break;
                    }
                    b = &b[size..];
                }
                Ok(match last {
                    Some((true, bytes)) => {
                        kmirror_log::batch::control_record(&bytes).is_some_and(|(t, _)| {
                            t == kmirror_log::batch::CONTROL_TYPE_MIRROR_PID_RESET
                        })
                    }
                    _ => false,
                })
            })
            .map_err(HostError::Failed)?;
        // A marker written by an earlier try counts once the followers have it.
        if ends {
            self.await_replicated(tp).map_err(HostError::Failed)?;
        }
        Ok(ends)
    }

    fn leadership_epoch(&self, tp: &TopicPartition) -> Option<LeaderEpoch> {
        let cluster = &self.broker.cluster;
        match cluster.role(&cluster.snapshot(), tp) {
            Some(kmirror_net::cluster::Role::Leader { epoch }) => Some(LeaderEpoch(epoch)),
            _ => None,
        }
    }

    fn runs_partition_steps(&self, tp: &TopicPartition) -> bool {
        self.leads(&self.broker.cluster.snapshot(), tp)
    }

    fn write_pid_reset(&mut self, tp: &TopicPartition) -> Result<(), HostError> {
        self.on_partition(tp, |p| {
            p.append_control(
                ControlKind::MirrorPidReset,
                ProducerId(-1),
                -1,
                -1,
                kmirror_engine::now_ms(),
            )
            .map_err(|e| e.to_string())?;
            p.log.flush().map_err(|e| e.to_string())
        })
        .map_err(HostError::Failed)?;
        self.await_replicated(tp).map_err(HostError::Failed)
    }
}

impl MirrorLiveStatus for BrokerHost {
    fn sync_error(&self, mirror: &str) -> Option<String> {
        self.sync_errors.get(mirror).cloned()
    }

    fn core(&self, tp: &TopicPartition) -> Option<usize> {
        Some(self.router.owner(tp))
    }

    fn live(&self, tp: &TopicPartition, now_ms: i64) -> Option<LivePartition> {
        // A fetcher's last status counts while it runs, or where this node leads (paused);
        // a replica that does not lead reports its own log.
        let leads = || self.leads(&self.broker.cluster.snapshot(), tp);
        let status = self
            .manager
            .status(tp)
            .filter(|_| self.manager.is_running(tp) || leads());
        let st = match status {
            Some(st) => st,
            // No fetcher ran since this node started (paused across a restart): the local log
            // gives the destination end and the newest mirrored timestamp, the sync rounds the
            // source end, so lag and lag_ms come from data here too.
            None => {
                self.idle_ends.get(tp)?;
                let (end, newest) = self
                    .on_partition(tp, |p| {
                        let newest = p.log.max_timestamp_offset().map_or(-1, |(_, ts)| ts);
                        Ok((p.log.log_end_offset().0, newest))
                    })
                    .ok()?;
                crate::fetcher::FetcherStatus::from_local(end, newest)
            }
        };
        // In a cluster, lag is measured to what a consumer can read (the leader's high
        // watermark), not to the leader's log end.
        let st = match self.readable_end(tp) {
            Some(hw) => st.readable_to(hw),
            None => st,
        };
        let mut l = st.live(now_ms);
        if let Some(&(n, from, to)) = self.lost.get(tp) {
            (l.lost_records, l.lost_from, l.lost_to) = (n, from, to);
        }
        if self.manager.is_running(tp) {
            return Some(l);
        }
        // No fetcher (paused, stopped): the last status is frozen; the source may have moved.
        if let Some(&end) = self.idle_ends.get(tp) {
            if end > l.source_offset && l.destination_offset >= 0 {
                let moved = st.with_source_end(end);
                l.source_offset = end;
                l.lag = moved.lag();
                l.lag_ms = moved.lag_ms(now_ms);
            }
        }
        Some(l)
    }
}

/// Sends a mirror request frame to `addr` (the seat's inter-broker listener, with its TLS and
/// SASL) and returns its response frame (the correlation id is the client's, so the answer
/// passes back as is); COORDINATOR_NOT_AVAILABLE when the seat cannot be reached. Async on
/// the core that read the request.
async fn forward(
    ib: &kmirror_net::interbroker::InterBroker,
    addr: &str,
    frame: Bytes,
) -> Option<Bytes> {
    // A failover on the seat waits for fetchers to stop (up to STOP_TIMEOUT per partition).
    match ib
        .exchange(addr, frame.clone(), Duration::from_secs(120))
        .await
    {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::warn!(%addr, error = %e, "cannot forward a mirror request to the seat");
            coordinator_not_available(
                &frame,
                &format!("mirror coordinator seat {addr} unreachable: {e}"),
            )
        }
    }
}

/// The COORDINATOR_NOT_AVAILABLE answer (seed 000: "the mirror coordinator is not active")
/// to a mirror request frame, with the request's correlation id.
fn coordinator_not_available(frame: &Bytes, message: &str) -> Option<Bytes> {
    let mut body = frame.clone();
    let header = crate::api::read_request_header_v2(&mut body).ok()?;
    let resp = crate::api::error_response_body(
        header.api_key,
        keys::error::COORDINATOR_NOT_AVAILABLE,
        Some(message),
    )?;
    let mut out = bytes::BytesMut::with_capacity(resp.len() + 8);
    crate::api::write_response_header_v1(&mut out, header.correlation_id);
    out.extend_from_slice(&resp);
    Some(out.freeze())
}

const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The node that coordinates `group` (the leader of its `__consumer_offsets` partition), if
/// known.
fn group_coordinator(
    meta: &kmirror_control::metadata::ClusterMetadata,
    group: &str,
) -> Option<i32> {
    let t = meta.topics.get(OFFSETS_TOPIC)?;
    let p = kmirror_control::coordinator_partition::partition_for(group, t.partition_count());
    let a = t.assignments.get(usize::try_from(p).ok()?)?;
    (a.leader >= 0).then_some(a.leader)
}

/// How long the mirror control thread waits for another node's answer to a group request.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the seat waits for another partition leader's high watermarks (DescribeMirrors).
const LEADER_HW_TIMEOUT: Duration = Duration::from_secs(2);

/// What the control loop woke up for.
enum Got {
    Msg(Msg),
    Event(TopicPartition, FetchEvent),
    Idle,
}

/// Queued messages and events handled before one reconcile.
const DRAIN_MAX: usize = 10_000;
/// A reconcile runs at least this often even when nothing changed.
const RECONCILE_SAFETY_NET: Duration = Duration::from_secs(5);

/// Commits mirror records through the metadata quorum (blocks the mirror control thread).
struct ClusterCommitter(kmirror_net::cluster::Cluster);

impl kmirror_control::replicated::Committer for ClusterCommitter {
    fn commit(&self, cmd: ClusterCommand) -> std::io::Result<()> {
        self.0
            .propose_blocking(cmd)
            .map(|_| ())
            .map_err(|e| std::io::Error::other(e.to_string()))
    }
}

/// The mirror host's part in a cluster: its view of the replicated mirror state and whether
/// it holds the mirror coordinator's seat (the quorum leader, as for the group coordinator).
struct QuorumMirror {
    committer: Arc<dyn kmirror_control::replicated::Committer>,
    /// (quorum term, applied mirror-state version) of the loaded view.
    loaded: Option<(u64, u64)>,
    seat: bool,
}

struct Control {
    quorum: QuorumMirror,
    /// Per topic, the core rule the router last refused (a pin beyond this broker's cores,
    /// e.g. after a restart with fewer cores): not retried, nor logged, until it changes.
    placement_refused: HashMap<String, Option<kmirror_engine::TopicRule>>,
    /// Each mirror's source connection settings as its running fetchers use them: a change
    /// (`mirror alter`) restarts them, so they reconnect with the new credentials and resume
    /// from the local log end.
    connection_settings: HashMap<String, BTreeMap<String, String>>,
    service: MirrorService,
    host: BrokerHost,
    tx: flume::Sender<Msg>,
    next_sync: HashMap<String, Instant>,
    next_group_sync: HashMap<String, Instant>,
    in_flight: BTreeSet<String>,
    next_core: usize,
    /// Last conflict reported per topic (logged once).
    conflicts: BTreeMap<String, String>,
    /// Next time unfinished failovers are retried.
    failover_retry_at: Instant,
    /// Source topics missing from Metadata answers, until confirmed deleted.
    deletions: DeletionConfirmations,
    /// Mirror topics whose source cannot be mirrored (id changed, not authorized): topic ->
    /// reason. Their partitions stay FAILED with no fetcher until a sync round clears it.
    blocked: BTreeMap<String, String>,
}

impl Control {
    fn coordinator(&mut self) -> &mut MirrorCoordinator {
        self.service.coordinator_mut()
    }

    /// Whether this node drives the mirrors: admin requests, sync rounds (topic creation,
    /// configs, offsets, ACLs) and read-only flags.
    fn is_seat(&self) -> bool {
        self.quorum.seat
    }

    /// Reloads the view of the replicated mirror state when it changed or the
    /// quorum term moved. Every record this node writes (admin changes on the seat, fetcher
    /// events and failover steps on a partition's leader) is committed at the current term,
    /// so a node that missed a leader change is fenced instead of writing over newer state.
    /// True when the view was reloaded.
    fn follow_quorum(&mut self) -> bool {
        let q = &mut self.quorum;
        let cluster = &self.host.broker.cluster;
        let status = cluster.quorum_status();
        let version = cluster.mirror_state_version();
        let me = u64::try_from(self.host.broker.config.node_id).ok();
        let seat = status.leader.is_some() && status.leader == me && status.coordinator_ready;
        if q.loaded == Some((status.term, version)) && q.seat == seat {
            return false;
        }
        let driver = cluster.driver();
        let (committer, term) = (q.committer.clone(), status.term);
        let Some(store) = driver.read(
            move |n| MirrorStateStore::replicated(n.mirrors(), committer, term),
            Duration::from_secs(5),
        ) else {
            return false;
        };
        if seat != q.seat {
            tracing::info!(term, seat, "mirror coordinator seat changed");
        }
        q.loaded = Some((term, version));
        q.seat = seat;
        *self.service.coordinator_mut() = MirrorCoordinator::new(store);
        true
    }

    /// BumpLeaderEpochs (inter-broker, seeds: a partition leader asks the controller to raise
    /// the destination epoch to at least the source's): each partition's epoch is proposed
    /// to the quorum as `BumpLeaderEpoch { at_least }`, so every replica follows it.
    fn bump_leader_epochs(&mut self, frame: Bytes) -> Option<Bytes> {
        use crate::api::{
            decode_body, encode_body, read_request_header_v2, write_response_header_v1,
            BumpLeaderEpochsRequest, BumpLeaderEpochsResponse, PartitionError,
            TopicPartitionErrors,
        };
        let mut body = frame;
        let header = read_request_header_v2(&mut body).ok()?;
        let resp = match decode_body::<BumpLeaderEpochsRequest>("BumpLeaderEpochs", 0, body) {
            Err(e) => crate::api::error_response_body(
                api::BUMP_LEADER_EPOCHS,
                keys::error::INVALID_REQUEST,
                Some(&e.to_string()),
            )?,
            Ok(r) => {
                let meta = self.host.broker.cluster.snapshot();
                let mut topics = Vec::new();
                for t in r.topics {
                    let found = meta.topics.values().find(|m| m.id == t.topic_id);
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let error_code = match found {
                                None => keys::error::UNKNOWN_TOPIC_ID,
                                Some(m) if p.partition_index < 0
                                    || p.partition_index >= m.partition_count() =>
                                {
                                    keys::error::UNKNOWN_TOPIC_OR_PARTITION
                                }
                                Some(m) => match self.host.propose_topic(
                                    MetadataCommand::BumpLeaderEpoch {
                                        name: m.name.clone(),
                                        partition: p.partition_index,
                                        at_least: p.min_leader_epoch,
                                    },
                                ) {
                                    Ok(_) => keys::error::NONE,
                                    Err(e) => {
                                        tracing::warn!(topic = %m.name, partition = p.partition_index, error = %e, "BumpLeaderEpochs");
                                        keys::error::UNKNOWN_SERVER_ERROR
                                    }
                                },
                            };
                            PartitionError {
                                partition_index: p.partition_index,
                                error_code,
                                ..Default::default()
                            }
                        })
                        .collect();
                    topics.push(TopicPartitionErrors {
                        topic_name: found.map(|m| m.name.clone()).unwrap_or_default(),
                        partitions,
                        ..Default::default()
                    });
                }
                encode_body(&BumpLeaderEpochsResponse {
                    topics,
                    ..Default::default()
                })
            }
        };
        let mut out = bytes::BytesMut::with_capacity(resp.len() + 8);
        write_response_header_v1(&mut out, header.correlation_id);
        out.extend_from_slice(&resp);
        Some(out.freeze())
    }

    /// Where a mirror request goes when this node does not hold the seat: the quorum
    /// leader's inter-broker listener (None: no leader known, or this node leads).
    fn seat_addr(&self) -> Option<String> {
        if self.quorum.seat {
            return None;
        }
        let cluster = &self.host.broker.cluster;
        let leader = i32::try_from(cluster.quorum_status().leader?).ok()?;
        if leader == self.host.broker.config.node_id {
            return None;
        }
        let meta = cluster.snapshot();
        self.host
            .broker
            .config
            .inter_broker
            .peer_addr(&meta, leader)
    }

    fn run(
        &mut self,
        rx: flume::Receiver<Msg>,
        events: flume::Receiver<(TopicPartition, FetchEvent)>,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) {
        self.follow_quorum();
        let recovered = {
            let (svc, host) = (&mut self.service, &mut self.host);
            svc.coordinator_mut().recover(host)
        };
        for (tp, action, r) in recovered {
            match r {
                Ok(()) => tracing::info!(%tp, ?action, "mirror partition recovered"),
                Err(e) => tracing::warn!(%tp, ?action, error = %e, "mirror recovery step failed"),
            }
        }
        self.reconcile();
        let mut last_reconcile = Instant::now();
        let mut last_meta = self.host.broker.cluster.view().version();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let got = flume::Selector::new()
                .recv(&rx, |m| m.map_or(Got::Idle, Got::Msg))
                .recv(&events, |e| {
                    e.map_or(Got::Idle, |(tp, e)| Got::Event(tp, e))
                })
                .wait_timeout(Duration::from_millis(200))
                .unwrap_or(Got::Idle);
            // Everything already queued is handled before one reconcile: a burst of events
            // (5,000 partitions retrying after a source outage) costs one pass, not 5,000.
            let mut dirty = self.follow_quorum();
            dirty |= self.handle(got);
            for _ in 0..DRAIN_MAX {
                let next = match events.try_recv() {
                    Ok((tp, e)) => Got::Event(tp, e),
                    Err(_) => match rx.try_recv() {
                        Ok(m) => Got::Msg(m),
                        Err(_) => break,
                    },
                };
                dirty |= self.handle(next);
            }
            self.retry_failovers();
            // Idle, nothing changes the durable states, so a full pass over every partition
            // (5,000 of them cost a tenth of a core at 5 passes a second) runs only after a
            // change, or as a slow safety net.
            // Leadership moves with the published metadata: a new leader starts the
            // fetchers it now owns, a deposed one stops them.
            let meta_version = self.host.broker.cluster.view().version();
            if dirty
                || meta_version != last_meta
                || last_reconcile.elapsed() >= RECONCILE_SAFETY_NET
            {
                self.reconcile();
                last_reconcile = Instant::now();
                last_meta = meta_version;
            }
            self.schedule_syncs();
        }
        self.host.manager.stop_all(STOP_TIMEOUT);
    }

    /// Handles one message or event; true when durable states may have changed (a
    /// reconcile is due).
    fn handle(&mut self, got: Got) -> bool {
        match got {
            Got::Msg(Msg::Request(frame, reply)) => {
                if !self.quorum.seat {
                    // The seat answers (Kafka forwards mirror admin requests to its
                    // controller); the requesting core forwards it, so this thread goes on
                    // serving the fetchers' events. With
                    // no seat to reach (mid-election) the client hears
                    // COORDINATOR_NOT_AVAILABLE and retries, rather than a dropped request.
                    let Some(addr) = self.seat_addr() else {
                        let _ = reply.send(Answer::Frame(coordinator_not_available(
                            &frame,
                            "no mirror coordinator seat is known",
                        )));
                        return false;
                    };
                    let ib = self.host.broker.config.inter_broker.clone();
                    let _ = reply.send(Answer::Forward { addr, frame, ib });
                    return false;
                }
                let key = kmirror_net::frame::header_prefix(&frame).api_key;
                if key == api::BUMP_LEADER_EPOCHS && self.service.feature_level() > 0 {
                    let _ = reply.send(Answer::Frame(self.bump_leader_epochs(frame)));
                    return false;
                }
                if key == api::DESCRIBE_MIRRORS {
                    let parts: Vec<TopicPartition> = self
                        .coordinator()
                        .store()
                        .partitions()
                        .map(|(tp, _)| tp.clone())
                        .collect();
                    self.host.refresh_leader_hws(&parts);
                }
                let now = crate::fetcher::now_ms();
                let out = {
                    let (svc, host) = (&mut self.service, &mut self.host);
                    svc.handle_frame(frame, host, now)
                };
                // Flags and fetchers follow the new states before the caller hears back:
                // a `remove` that returned must leave the topic writable.
                self.reconcile();
                let _ = reply.send(Answer::Frame(out));
                if matches!(
                    key,
                    api::CREATE_MIRROR | api::ADD_TOPICS_TO_MIRROR | api::RESUME_MIRROR_TOPICS
                ) {
                    // New topics should not wait a whole sync interval.
                    self.next_sync.clear();
                }
                false
            }
            Got::Msg(Msg::FeatureLevel(level)) => {
                tracing::info!(level, "mirror.version finalized");
                self.service.set_feature_level(level);
                false
            }
            Got::Msg(Msg::Synced(mirror, r)) => {
                self.in_flight.remove(&mirror);
                match r {
                    Ok(snap) => {
                        self.host.sync_errors.remove(&mirror);
                        // A round started before this node lost the seat changes nothing.
                        if self.is_seat() {
                            self.apply_sync(&mirror, snap)
                        }
                    }
                    Err(e) => {
                        tracing::warn!(%mirror, error = %e, "mirror sync round failed");
                        self.count_sync_error(&mirror, SyncErrorKind::TopicMetadata);
                        self.host.sync_errors.insert(mirror.clone(), e);
                    }
                }
                true
            }
            Got::Event(tp, ev) => {
                let changes_state = matches!(
                    ev,
                    FetchEvent::Prepared(_) | FetchEvent::Failed { .. } | FetchEvent::Recovered
                );
                self.on_event(tp, ev);
                changes_state
            }
            Got::Idle => false,
        }
    }

    fn on_event(&mut self, tp: TopicPartition, ev: FetchEvent) {
        let r = match ev {
            FetchEvent::Prepared(plan) => {
                if plan.truncated() > 0 {
                    tracing::info!(%tp, truncated = plan.truncated(), to = %plan.truncate_to, "failback truncation");
                }
                let (svc, host) = (&mut self.service, &mut self.host);
                svc.coordinator_mut().preparation_done(&tp, host)
            }
            FetchEvent::Failed { reason } => {
                tracing::warn!(%tp, %reason, "mirror partition failed");
                self.coordinator().on_fetch_failed(&tp, reason)
            }
            FetchEvent::Recovered => self.coordinator().on_fetch_recovered(&tp),
            FetchEvent::EpochBumped { to } => {
                // Durable so a restart never lowers the epoch under mirrored batches.
                if let Err(e) = self.host.propose_topic(MetadataCommand::BumpLeaderEpoch {
                    name: tp.topic.clone(),
                    partition: tp.partition,
                    at_least: to.get(),
                }) {
                    tracing::warn!(%tp, error = %e, "cannot persist leader epoch");
                }
                Ok(())
            }
            FetchEvent::SourceLogStartMoved { lost_from, lost_to } => {
                let (lost_from, lost_to) = (lost_from.get(), lost_to.get());
                tracing::warn!(%tp, lost_from, lost_to, "source retention deleted records before they were mirrored");
                let e = self.host.lost.entry(tp.clone()).or_insert((0, -1, -1));
                *e = (e.0 + (lost_to - lost_from).max(0), lost_from, lost_to);
                Ok(())
            }
            FetchEvent::Retrying { reason } => {
                tracing::debug!(%tp, %reason, "mirror fetch retrying");
                Ok(())
            }
            FetchEvent::LeaderChanged { .. } | FetchEvent::Progress(_) => Ok(()),
        };
        if let Err(e) = r {
            tracing::warn!(%tp, error = %e, "mirror state update failed");
        }
    }

    /// Failovers left unfinished (a fetcher that did not stop, a host error) are retried
    /// until STOPPED; the partition stays read-only meanwhile.
    fn retry_failovers(&mut self) {
        if Instant::now() < self.failover_retry_at {
            return;
        }
        self.failover_retry_at = Instant::now() + FAILOVER_RETRY;
        let stopping: Vec<TopicPartition> = self
            .service
            .coordinator()
            .store()
            .partitions()
            .filter(|(_, e)| e.state == PartitionState::Stopping)
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in stopping {
            let (svc, host) = (&mut self.service, &mut self.host);
            match svc.coordinator_mut().run_failover(&tp, host) {
                Ok(()) => tracing::info!(%tp, "failover completed on retry"),
                Err(e) => tracing::debug!(%tp, error = %e, "failover still waiting"),
            }
        }
    }

    /// Fetchers of a mirror whose connection or fetch settings changed stop here; the
    /// reconcile that follows starts them again with the new settings. Its byte-rate ceiling
    /// changes in place.
    fn restart_on_settings_change(&mut self) {
        let store = self.service.coordinator().store();
        let mut changed = BTreeSet::new();
        let mut seen = HashMap::new();
        for def in store.mirrors() {
            self.host.manager.set_mirror_rate(
                &def.name,
                def.setting_u64(
                    kmirror_control::mirror::definition::settings::THROTTLED_RATE,
                    0,
                ),
            );
            let now = def.fetcher_settings();
            if self
                .connection_settings
                .get(&def.name)
                .is_some_and(|before| *before != now)
            {
                changed.insert(def.name.clone());
            }
            seen.insert(def.name.clone(), now);
        }
        self.connection_settings = seen;
        if changed.is_empty() {
            return;
        }
        let restart: Vec<TopicPartition> = store
            .partitions()
            .filter(|(tp, e)| changed.contains(&e.mirror) && self.host.manager.is_running(tp))
            .map(|(tp, _)| tp.clone())
            .collect();
        for name in &changed {
            tracing::info!(mirror = %name, "fetcher settings changed; reconnecting");
            // The next sync round connects with the new settings too.
            self.next_sync.remove(name);
        }
        for tp in restart {
            self.host.manager.stop_and_wait(&tp, STOP_TIMEOUT);
        }
    }

    /// Each mirror topic's engine-core rule follows its mirror's `mirror.core.assignment` /
    /// `mirror.core.pins` (persisted with the definition, so a restart applies them again).
    /// A partition whose core changes has its fetcher stopped and waited for first; the
    /// router then moves its log ([`Router::set_topic_rule_blocking`]: closed on the old
    /// core, reopened on the new one at the same log end), and the reconcile that follows
    /// starts the fetcher on the new core, resuming at that log end. A topic no mirror
    /// manages any more goes back to the broker's policy.
    fn apply_core_placement(&mut self) {
        use kmirror_engine::{Assignment, TopicRule};
        let store = self.service.coordinator().store();
        let router = self.host.router.clone();
        let mut placements = HashMap::new();
        let mut want: BTreeMap<String, Option<TopicRule>> = BTreeMap::new();
        let mut parts: BTreeMap<String, Vec<TopicPartition>> = BTreeMap::new();
        for (tp, e) in store.partitions() {
            parts.entry(tp.topic.clone()).or_default().push(tp.clone());
            if want.contains_key(&tp.topic) {
                continue;
            }
            let placement = placements.entry(e.mirror.clone()).or_insert_with(|| {
                store
                    .mirror(&e.mirror)
                    .and_then(|d| d.core_placement().ok())
                    .unwrap_or_default()
            });
            let (core, partitions) = placement.for_topic(&tp.topic);
            let rule = TopicRule {
                policy: placement.policy.as_deref().and_then(Assignment::parse),
                core,
                partitions,
            };
            want.insert(tp.topic.clone(), (!rule.is_empty()).then_some(rule));
        }
        for t in router.ruled_topics() {
            want.entry(t).or_insert(None);
        }
        for (topic, rule) in want {
            if router.topic_rule(&topic) == rule
                || self.placement_refused.get(&topic) == Some(&rule)
            {
                continue;
            }
            let moving: Vec<&TopicPartition> = parts
                .get(&topic)
                .into_iter()
                .flatten()
                .filter(|tp| router.owner(tp) != router.owner_under(rule.as_ref(), tp))
                .collect();
            let stopped = moving.iter().all(|tp| {
                !self.host.manager.is_running(tp)
                    || self.host.manager.stop_and_wait(tp, STOP_TIMEOUT)
            });
            if !stopped {
                tracing::warn!(%topic, "a fetcher did not stop; core placement retried later");
                continue;
            }
            match router.set_topic_rule_blocking(&topic, rule.clone()) {
                Ok(moved) if !moved.is_empty() => {
                    tracing::info!(%topic, moved = moved.len(), "mirror partitions changed cores")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(%topic, error = %e, "cannot apply core placement");
                    self.placement_refused.insert(topic, rule);
                    continue;
                }
            }
            self.placement_refused.remove(&topic);
        }
    }

    /// Read-only flags and fetchers follow the durable partition states.
    fn reconcile(&mut self) {
        self.retry_failovers();
        self.restart_on_settings_change();
        self.apply_core_placement();
        let meta = self.host.broker.cluster.snapshot();
        let store = self.service.coordinator().store();
        let mut by_topic: BTreeMap<String, Vec<(TopicPartition, String, PartitionState)>> =
            BTreeMap::new();
        for (tp, e) in store.partitions() {
            by_topic.entry(tp.topic.clone()).or_default().push((
                tp.clone(),
                e.mirror.clone(),
                e.state,
            ));
        }
        let mut starts = Vec::new();
        let mut stops = Vec::new();
        let mut flags = Vec::new();
        for (topic, parts) in &by_topic {
            let Some(t) = meta.topics.get(topic) else {
                continue;
            };
            let owner = parts
                .iter()
                .find(|(_, _, s)| s.is_read_only())
                .map(|(_, m, _)| m.clone());
            if t.mirror != owner && self.is_seat() {
                flags.push((topic.clone(), owner));
            }
            for (tp, mirror, st) in parts {
                let running = self.host.manager.is_running(tp);
                let wants = matches!(
                    st,
                    PartitionState::Preparing | PartitionState::Mirroring | PartitionState::Failed
                ) && !self.blocked.contains_key(topic)
                    && self.host.leads(&meta, tp);
                if wants && !running {
                    if let Some(def) = store.mirror(mirror) {
                        let lme = store.last_mirrored_epoch(tp).map(LeaderEpoch);
                        let skip = *st != PartitionState::Preparing;
                        starts.push(self.host.fetch_task(def, tp, lme, skip));
                    }
                } else if !wants && running && *st != PartitionState::Stopping {
                    stops.push(tp.clone());
                }
            }
        }
        // Read-only before a fetcher starts; writable only once STOPPED everywhere.
        for (topic, owner) in flags {
            match self.host.propose_topic(MetadataCommand::SetMirror {
                name: topic.clone(),
                mirror: owner.clone(),
            }) {
                Ok(_) => tracing::info!(%topic, mirror = ?owner, "mirror read-only flag updated"),
                Err(e) => tracing::warn!(%topic, error = %e, "cannot update read-only flag"),
            }
        }
        for tp in stops {
            self.host.manager.stop_and_wait(&tp, STOP_TIMEOUT);
        }
        for task in starts {
            let tp = task.tp.clone();
            if let Err(e) = self.host.manager.start(task) {
                tracing::warn!(%tp, error = %e, "cannot start mirror fetcher");
            }
        }
        let states = by_topic
            .into_values()
            .flatten()
            .map(|(tp, mirror, st)| (mirror, tp, st))
            .collect();
        self.host.manager.metrics().publish_states(states);
    }

    fn count_sync_error(&self, mirror: &str, kind: SyncErrorKind) {
        self.host.manager.metrics().count_sync_error(mirror, kind);
    }

    fn schedule_syncs(&mut self) {
        if !self.is_seat() {
            return;
        }
        let now = Instant::now();
        let defs: Vec<MirrorDefinition> = self.service.coordinator().mirrors().cloned().collect();
        let names: BTreeSet<String> = defs.iter().map(|d| d.name.clone()).collect();
        self.next_sync.retain(|k, _| names.contains(k));
        for def in defs {
            if self.in_flight.contains(&def.name) {
                continue;
            }
            if self.next_sync.get(&def.name).is_some_and(|t| *t > now) {
                continue;
            }
            let interval = Duration::from_millis(def.metadata_sync_interval_ms().max(100));
            self.next_sync.insert(def.name.clone(), now + interval);
            let group_interval = Duration::from_millis(
                def.setting_u64(
                    kmirror_control::mirror::definition::settings::GROUP_SYNC_INTERVAL_MS,
                    def.metadata_sync_interval_ms(),
                )
                .max(100),
            );
            let groups_due = self
                .next_group_sync
                .get(&def.name)
                .is_none_or(|t| *t <= now);
            if groups_due {
                self.next_group_sync
                    .insert(def.name.clone(), now + group_interval);
            }
            let Ok(filter) = def.topic_filter() else {
                continue;
            };
            let core = self.next_core % self.host.router.cores().max(1);
            self.next_core += 1;
            let tx = self.tx.clone();
            let name = def.name.clone();
            let bootstrap = def.source_bootstrap().to_owned();
            let security = ClientSecurity::from_properties(&def.client_settings());
            let client_id = format!(
                "kmirror-{}-sync-{}",
                self.host.broker.config.node_id, def.name
            );
            // Managed topics are asked for too, so a deselected-but-mirrored topic is not
            // mistaken for a deleted one.
            // Also the partitions led elsewhere in a cluster: the seat answers DescribeMirrors
            // for them from its replica's log end and this source end.
            let meta = self.host.broker.cluster.snapshot();
            let idle: Vec<TopicPartition> = self
                .service
                .coordinator()
                .store()
                .partitions_of(&def.name)
                .filter(|(tp, e)| {
                    (e.state == PartitionState::Paused || !self.host.leads(&meta, tp))
                        && !self.host.manager.is_running(tp)
                })
                .map(|(tp, _)| tp.clone())
                .collect();
            let managed: BTreeSet<String> = self
                .service
                .coordinator()
                .store()
                .partitions_of(&def.name)
                .map(|(tp, _)| tp.topic.clone())
                .collect();
            let meta = self.host.broker.cluster.snapshot();
            let managed_ids: BTreeMap<String, uuid::Uuid> = managed
                .iter()
                .filter_map(|t| meta.topics.get(t).map(|m| (t.clone(), m.id)))
                .collect();
            self.in_flight.insert(def.name.clone());
            let r = self
                .host
                .router
                .spawn_on_blocking(core, move || async move {
                    let mut src = KafkaSource::new(&bootstrap, client_id, Duration::from_secs(30))
                        .with_security(security);
                    let r = async {
                        let (_, topics) = src
                            .topics_snapshot(|t| filter.matches(t) || managed.contains(t))
                            .await
                            .map_err(|e| e.to_string())?;
                        // A mirrored topic absent from the list is looked up directly: absence
                        // alone never stops a mirror (see DeletionConfirmations).
                        let mut lookups = BTreeMap::new();
                        for (name, id) in &managed_ids {
                            if !topics.iter().any(|t| &t.name == name) {
                                lookups.insert(name.clone(), src.lookup_topic(name, *id).await);
                            }
                        }
                        let (mut groups_failed, mut acls_failed) = (false, false);
                        let groups = if groups_due {
                            match src.group_offsets(|_| true).await {
                                Ok(g) => Some(g),
                                Err(e) => {
                                    tracing::warn!(mirror = %name, error = %e, "group offsets");
                                    groups_failed = true;
                                    None
                                }
                            }
                        } else {
                            None
                        };
                        let acls = if groups_due {
                            match src.acls().await {
                                Ok(a) => a,
                                Err(e) => {
                                    tracing::warn!(mirror = %name, error = %e, "source ACLs");
                                    acls_failed = true;
                                    None
                                }
                            }
                        } else {
                            None
                        };
                        let mut quotas_failed = false;
                        let quotas = if groups_due {
                            match src.client_quotas().await {
                                Ok(q) => q,
                                Err(e) => {
                                    tracing::warn!(mirror = %name, error = %e, "source client quotas");
                                    quotas_failed = true;
                                    None
                                }
                            }
                        } else {
                            None
                        };
                        let mut idle_ends = Vec::new();
                        for tp in idle {
                            use crate::fetcher::Source;
                            let Ok(leader) = src.leader(&tp.topic, tp.partition).await else {
                                continue;
                            };
                            if let Ok(Ok(end)) = src
                                .list_offset(&leader, &tp.topic, tp.partition, leader.leader_epoch, -1)
                                .await
                            {
                                idle_ends.push((tp, end.get()));
                            }
                        }
                        Ok(SourceSnapshot {
                            topics,
                            groups,
                            idle_ends,
                            acls,
                            quotas,
                            quotas_failed,
                            lookups,
                            groups_failed,
                            acls_failed,
                        })
                    }
                    .await;
                    let _ = tx.send(Msg::Synced(name, r));
                });
            if let Err(e) = r {
                self.in_flight.remove(&def.name);
                tracing::warn!(mirror = %def.name, error = %e, "cannot schedule sync");
            }
        }
    }

    fn apply_sync(&mut self, mirror: &str, snap: SourceSnapshot) {
        let Some(def) = self.service.coordinator().store().mirror(mirror).cloned() else {
            return;
        };
        self.host.idle_ends.extend(snap.idle_ends.iter().cloned());
        for (tp, end) in &snap.idle_ends {
            if let Some(p) = self.host.manager.metrics().progress(tp) {
                p.set_idle_source_end(*end);
            }
        }
        if snap.groups_failed {
            self.count_sync_error(mirror, SyncErrorKind::GroupOffsets);
        }
        if snap.acls_failed {
            self.count_sync_error(mirror, SyncErrorKind::Acls);
        }
        if snap.quotas_failed {
            self.count_sync_error(mirror, SyncErrorKind::Quotas);
        }
        let meta = self.host.broker.cluster.snapshot();
        let local: Vec<LocalTopic> = meta
            .topics
            .values()
            .filter(|t| !t.internal)
            .map(|t| LocalTopic {
                name: t.name.clone(),
                topic_id: t.id,
                partitions: t.partition_count(),
                configs: t.configs.clone(),
            })
            .collect();
        // Configs kmirror cannot apply are left out so they are not re-planned every round.
        let source: Vec<SourceTopic> = snap
            .topics
            .iter()
            .map(|s| SourceTopic {
                configs: s
                    .configs
                    .iter()
                    .filter(|(k, v)| topic_config::validate_from_source(k, v).is_ok())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                ..s.clone()
            })
            .collect();
        let coord = self.service.coordinator();
        let plan = plan_metadata_sync(
            &def,
            &source,
            &local,
            |tp| coord.store().state_of(tp),
            |t| coord.owner_of(t).map(str::to_owned),
        );
        let actions = match plan {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(%mirror, error = %e, "metadata sync planning failed");
                self.count_sync_error(mirror, SyncErrorKind::TopicMetadata);
                return;
            }
        };
        for s in &snap.topics {
            self.deletions.seen(mirror, &s.name);
        }
        // Topics of this mirror blocked before the round stay blocked only if the round says
        // so again.
        let mut still_blocked = BTreeSet::new();
        for a in actions {
            let kind = match a {
                SyncAction::AlterConfigs { .. } => SyncErrorKind::Config,
                _ => SyncErrorKind::TopicMetadata,
            };
            let r = match a {
                SyncAction::SourceTopicMissing { name, topic_id } => {
                    let lookup = snap
                        .lookups
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| SourceLookup::Failed("not looked up".into()));
                    match self.deletions.missing(mirror, &name, topic_id, &lookup) {
                        MissingVerdict::Deleted => self.stop_deleted_topic(mirror, &name),
                        MissingVerdict::Wait => {
                            tracing::info!(topic = %name, %mirror, ?lookup, "source topic missing from metadata; not confirmed deleted");
                            if self.blocked.contains_key(&name) {
                                still_blocked.insert(name);
                            }
                            Ok(())
                        }
                        MissingVerdict::Present => Ok(()),
                        MissingVerdict::Fail(reason) => {
                            still_blocked.insert(name.clone());
                            self.fail_topic(mirror, &name, reason)
                        }
                    }
                }
                SyncAction::SourceTopicIdChanged {
                    name,
                    mirrored_id,
                    source_id,
                } => {
                    still_blocked.insert(name.clone());
                    self.fail_topic(mirror, &name, id_changed_reason(mirrored_id, source_id))
                }
                a => self.apply_action(mirror, a),
            };
            if let Err(e) = r {
                tracing::warn!(%mirror, error = %e, "metadata sync step failed");
                self.count_sync_error(mirror, kind);
            }
        }
        let store = self.service.coordinator().store();
        let mine: BTreeSet<String> = store
            .partitions_of(mirror)
            .map(|(tp, _)| tp.topic.clone())
            .collect();
        self.blocked.retain(|t, reason| {
            let keep = !mine.contains(t) || still_blocked.contains(t);
            if !keep {
                tracing::info!(topic = %t, %mirror, %reason, "source topic visible again: mirroring resumes");
            }
            keep
        });
        if let Some(groups) = snap.groups {
            if let Err(e) = self.sync_groups(&def, &groups) {
                tracing::warn!(%mirror, error = %e, "group offset sync failed");
                self.count_sync_error(mirror, SyncErrorKind::GroupOffsets);
            }
        }
        if let Some(acls) = snap.acls {
            if let Err(e) = self.sync_acls(&def, &acls) {
                tracing::warn!(%mirror, error = %e, "ACL sync failed");
                self.count_sync_error(mirror, SyncErrorKind::Acls);
            }
        }
        if let Some(quotas) = snap.quotas {
            if let Err(e) = self.sync_quotas(&def, &quotas) {
                tracing::warn!(%mirror, error = %e, "client quota sync failed");
                self.count_sync_error(mirror, SyncErrorKind::Quotas);
            }
        }
    }

    fn apply_action(&mut self, mirror: &str, a: SyncAction) -> Result<(), String> {
        match a {
            SyncAction::CreateTopic {
                name,
                topic_id,
                partitions,
                mut configs,
            } => {
                // The owner is kept in TopicMeta::mirror (hidden from DescribeConfigs).
                configs.remove(kmirror_control::mirror::MIRROR_NAME_CONFIG);
                // Values only a source may set skip the client validation of CreateTopics;
                // they were checked by the sync.
                let (source_configs, checked): (BTreeMap<_, _>, BTreeMap<_, _>) = configs
                    .into_iter()
                    .partition(|(k, v)| topic_config::validate(k, v).is_err());
                let t = self
                    .host
                    .broker
                    .cluster
                    .propose_topic_blocking(MetadataCommand::CreateMirrorTopic {
                        name: name.clone(),
                        partitions,
                        configs: checked,
                        source_configs,
                        id: topic_id,
                        mirror: mirror.to_owned(),
                        assignments: self.host.placement(0, partitions, None)?,
                    })
                    .map_err(|e| e.to_string())?;
                self.host.create_partitions_on_cores(&t, 0)?;
                tracing::info!(topic = %name, %topic_id, partitions, %mirror, "mirror topic created");
                Ok(())
            }
            SyncAction::CreatePartitions { name, count } => {
                // The source's count sizes a vector below: hold it to the limit local topics
                // have (metadata's CreateTopics/CreatePartitions refuse more than 100,000).
                if !(1..=MAX_MIRROR_PARTITIONS).contains(&count) {
                    return Err(format!(
                        "source topic {name} reports {count} partitions (limit {MAX_MIRROR_PARTITIONS})"
                    ));
                }
                let before = self
                    .host
                    .topic(&name)
                    .map(|t| t.partition_count())
                    .unwrap_or(0);
                // Bypasses the client path (which refuses mirror topics).
                let rf = self
                    .host
                    .topic(&name)
                    .and_then(|t| t.assignments.first().map(|a| a.replicas.len() as i16));
                let assignments = if count > before {
                    self.host.placement(before, count - before, rf)?
                } else {
                    Vec::new()
                };
                let t = self.host.propose_topic(MetadataCommand::GrowMirrorTopic {
                    name: name.clone(),
                    total: count,
                    assignments,
                })?;
                self.host.create_partitions_on_cores(&t, before)?;
                tracing::info!(topic = %name, from = before, to = count, "mirror topic expanded");
                Ok(())
            }
            SyncAction::AlterConfigs { name, set, delete } => {
                self.host
                    .propose_topic(MetadataCommand::SyncSourceConfigs { name, set, delete })?;
                Ok(())
            }
            SyncAction::Materialize(tp) => {
                self.coordinator()
                    .materialize_partition(mirror, &tp)
                    .map_err(|e| e.to_string())?;
                // Read-only before the fetcher starts (reconcile does it too, idempotently).
                let m = mirror.to_owned();
                if self
                    .host
                    .topic(&tp.topic)
                    .is_some_and(|t| t.mirror.is_none())
                {
                    self.host.propose_topic(MetadataCommand::SetMirror {
                        name: tp.topic.clone(),
                        mirror: Some(m),
                    })?;
                }
                Ok(())
            }
            // Decided in apply_sync (they need the round's lookups and confirmations).
            SyncAction::SourceTopicMissing { name, .. }
            | SyncAction::SourceTopicIdChanged { name, .. } => Err(format!(
                "{name}: source topic state is handled by apply_sync"
            )),
            SyncAction::Conflict { name, reason } => {
                if self.conflicts.get(&name) != Some(&reason) {
                    tracing::warn!(topic = %name, %mirror, %reason, "cannot mirror topic");
                    self.conflicts.insert(name, reason);
                }
                Ok(())
            }
        }
    }

    /// The source topic is gone (confirmed by [`DeletionConfirmations`]): its mirror
    /// partitions fail over to STOPPED and the topic becomes writable (never deleted here).
    fn stop_deleted_topic(&mut self, mirror: &str, name: &str) -> Result<(), String> {
        tracing::warn!(topic = %name, %mirror, "source topic deleted (gone by name and id in consecutive rounds): stopping its mirror partitions");
        let (svc, host) = (&mut self.service, &mut self.host);
        svc.coordinator_mut()
            .source_topic_deleted(mirror, name, host)
            .map_err(|e| e.to_string())
    }

    /// FAILED with `reason` for every partition of `topic` this mirror still mirrors, and no
    /// fetcher until a sync round clears it. Never STOPPED: the topic stays read-only.
    fn fail_topic(&mut self, mirror: &str, topic: &str, reason: String) -> Result<(), String> {
        if self.blocked.get(topic) != Some(&reason) {
            tracing::warn!(%topic, %mirror, %reason, "mirror topic FAILED");
        }
        self.blocked.insert(topic.to_owned(), reason.clone());
        let tps: Vec<TopicPartition> = self
            .service
            .coordinator()
            .store()
            .partitions_of(mirror)
            .filter(|(tp, e)| {
                tp.topic == topic
                    && matches!(
                        e.state,
                        PartitionState::Preparing
                            | PartitionState::Mirroring
                            | PartitionState::Failed
                    )
            })
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in tps {
            self.coordinator()
                .on_fetch_failed(&tp, reason.clone())
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Consumer-group offset sync through the local group coordinator: only groups with no
    /// active members here, offsets clamped to the local log.
    /// Makes the local ACLs (those the principal filter selects) equal to the source's.
    fn sync_acls(
        &mut self,
        def: &MirrorDefinition,
        source: &[kmirror_control::mirror::AclBinding],
    ) -> Result<(), String> {
        let registry = self.host.broker.acls.clone();
        // Planned against the published ACLs; every change goes through the cluster's one
        // mutation entry point, whose publication the authorizer reads at once.
        let plan = kmirror_control::mirror::plan_acl_sync(def, source, &registry.all())
            .map_err(|e| e.to_string())?;
        let cluster = &self.host.broker.cluster;
        if !plan.create.is_empty() {
            for b in &plan.create {
                kmirror_control::acl::validate_binding(b).map_err(|e| e.to_string())?;
            }
            cluster
                .propose_blocking(ClusterCommand::Acl(AclCommand::Create {
                    bindings: plan.create.clone(),
                }))
                .map_err(|e| e.to_string())?;
        }
        if !plan.delete.is_empty() {
            // One exact filter per binding to remove.
            let filters: Vec<kmirror_control::acl::AclFilter> = plan
                .delete
                .iter()
                .map(|b| kmirror_control::acl::AclFilter {
                    resource_type: b.resource_type,
                    resource_name: Some(b.resource_name.clone()),
                    pattern_type: b.pattern_type,
                    principal: Some(b.principal.clone()),
                    host: Some(b.host.clone()),
                    operation: b.operation,
                    permission_type: b.permission_type,
                })
                .collect();
            cluster
                .propose_blocking(ClusterCommand::Acl(AclCommand::Delete { filters }))
                .map_err(|e| e.to_string())?;
        }
        if !plan.create.is_empty() || !plan.delete.is_empty() {
            tracing::info!(
                mirror = %def.name,
                created = plan.create.len(),
                deleted = plan.delete.len(),
                "ACLs synced from the source"
            );
        }
        Ok(())
    }

    /// Makes the local client quotas (of the entities the filter selects) equal to the
    /// source's. Every change publishes a new snapshot, so enforcement sees it at once.
    fn sync_quotas(
        &mut self,
        def: &MirrorDefinition,
        source: &BTreeMap<kmirror_control::quota::Entity, kmirror_control::quota::Values>,
    ) -> Result<(), String> {
        let registry = self.host.broker.quotas.clone();
        let plan = kmirror_control::mirror::plan_quota_sync(def, source, &registry.all())
            .map_err(|e| e.to_string())?;
        if plan.is_empty() {
            return Ok(());
        }
        // Through the quorum, as AlterClientQuotas: every node enforces the synced quotas.
        for r in kmirror_net::quota::alter(&self.host.broker.cluster, &registry, &plan, false) {
            r.map_err(|e| e.to_string())?;
        }
        tracing::info!(mirror = %def.name, entities = plan.len(), "client quotas synced from the source");
        Ok(())
    }

    fn sync_groups(
        &mut self,
        def: &MirrorDefinition,
        source: &BTreeMap<String, BTreeMap<TopicPartition, i64>>,
    ) -> Result<(), String> {
        let Some(groups) = self.host.broker.groups.clone() else {
            return Ok(());
        };
        // The group coordinators live on the leaders of their `__consumer_offsets`
        // partitions: a group coordinated here is asked in process, another one over the
        // inter-broker listener of the node that coordinates it (as MirrorMaker 2 commits
        // through each group's coordinator).
        futures_lite::future::block_on(self.host.broker.propose_internal_topic(OFFSETS_TOPIC))
            .map_err(|(code, msg)| format!("cannot create {OFFSETS_TOPIC}: {code} {msg}"))?;
        let me = self.host.broker.config.node_id;
        let local = |key: ApiKey, v: i16, req: RequestKind| -> ResponseKind {
            let header = RequestHeader::default()
                .with_request_api_key(key as i16)
                .with_request_api_version(v);
            futures_lite::future::block_on(groups.handle(key, v, &header, req))
        };
        let call = |group: &str, key: ApiKey, v: i16, req: RequestKind| -> ResponseKind {
            let node = group_coordinator(&self.host.broker.cluster.snapshot(), group);
            match (node, req) {
                (Some(n), RequestKind::OffsetFetch(r)) if n != me => {
                    self.host.ask_peer(n, r, v).map_or(
                        ResponseKind::Heartbeat(Default::default()),
                        ResponseKind::OffsetFetch,
                    )
                }
                (Some(n), RequestKind::OffsetCommit(r)) if n != me => {
                    self.host.ask_peer(n, r, v).map_or(
                        ResponseKind::Heartbeat(Default::default()),
                        ResponseKind::OffsetCommit,
                    )
                }
                (_, req) => local(key, v, req),
            }
        };
        let mut active = BTreeSet::new();
        let mut listed = Vec::new();
        if let ResponseKind::ListGroups(r) = local(
            ApiKey::ListGroups,
            4,
            RequestKind::ListGroups(ListGroupsRequest::default()),
        ) {
            listed.push(r);
        }
        let peers: Vec<i32> = self
            .host
            .broker
            .cluster
            .snapshot()
            .brokers
            .keys()
            .copied()
            .filter(|id| *id != me)
            .collect();
        for n in peers {
            match self.host.ask_peer(n, ListGroupsRequest::default(), 4) {
                Ok(r) => listed.push(r),
                // Its groups' states are unknown: none of them may be written now.
                Err(e) => return Err(format!("cannot list the groups of node {n}: {e}")),
            }
        }
        for r in listed {
            for g in r.groups {
                if !matches!(g.group_state.as_str(), "Empty" | "Dead" | "") {
                    active.insert(g.group_id.0.to_string());
                }
            }
        }
        let mut committed: BTreeMap<(String, TopicPartition), i64> = BTreeMap::new();
        for g in source.keys() {
            let req = OffsetFetchRequest::default()
                .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(
                    g.clone(),
                )))
                .with_topics(None);
            if let ResponseKind::OffsetFetch(r) =
                call(g, ApiKey::OffsetFetch, 7, RequestKind::OffsetFetch(req))
            {
                for t in r.topics {
                    for p in t.partitions {
                        if p.committed_offset >= 0 {
                            committed.insert(
                                (
                                    g.clone(),
                                    TopicPartition::new(t.name.to_string(), p.partition_index),
                                ),
                                p.committed_offset,
                            );
                        }
                    }
                }
            }
        }
        let store = self.service.coordinator().store();
        let mirrored: BTreeSet<TopicPartition> = store
            .partitions_of(&def.name)
            .filter(|(_, e)| e.state != PartitionState::Stopped)
            .map(|(tp, _)| tp.clone())
            .collect();
        let mut bounds = BTreeMap::new();
        for tp in &mirrored {
            if let Ok(b) = self.host.on_partition(tp, |p| {
                Ok((p.log.log_start_offset().0, p.log.log_end_offset().0))
            }) {
                bounds.insert(tp.clone(), b);
            }
        }
        let commits = plan_group_sync(
            def,
            source,
            &active,
            |g, tp| committed.get(&(g.to_owned(), tp.clone())).copied(),
            |tp| bounds.get(tp).copied(),
            |tp| mirrored.contains(tp),
        )
        .map_err(|e| e.to_string())?;
        let mut by_group: BTreeMap<String, Vec<(TopicPartition, i64)>> = BTreeMap::new();
        for c in commits {
            by_group.entry(c.group).or_default().push((c.tp, c.offset));
        }
        for (g, offs) in by_group {
            use kafka_protocol::messages::offset_commit_request::{
                OffsetCommitRequestPartition, OffsetCommitRequestTopic,
            };
            let mut topics: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
            for (tp, o) in &offs {
                topics.entry(tp.topic.clone()).or_default().push(
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(tp.partition)
                        .with_committed_offset(*o),
                );
            }
            let req = OffsetCommitRequest::default()
                .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(
                    g.clone(),
                )))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            OffsetCommitRequestTopic::default()
                                .with_name(kafka_protocol::messages::TopicName(
                                    StrBytes::from_string(t),
                                ))
                                .with_partitions(ps)
                        })
                        .collect(),
                );
            match call(&g, ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(req)) {
                ResponseKind::OffsetCommit(r) => {
                    let bad: Vec<i16> = r
                        .topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                        .filter(|c| *c != 0)
                        .collect();
                    if bad.is_empty() {
                        tracing::debug!(group = %g, partitions = offs.len(), "group offsets synced");
                    } else {
                        tracing::info!(group = %g, codes = ?bad, "group offset sync refused");
                    }
                }
                _ => return Err("unexpected OffsetCommit response".into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        decode_body, encode_body, read_response_header_v1, write_request_header_v2,
        WriteMirrorStatesRequest, WriteMirrorStatesResponse,
    };

    #[test]
    fn unreachable_seat_answers_coordinator_not_available() {
        let mut frame = bytes::BytesMut::new();
        write_request_header_v2(&mut frame, api::WRITE_MIRROR_STATES, 0, 41, Some("t"));
        frame.extend_from_slice(&encode_body(&WriteMirrorStatesRequest::default()));
        // A port nothing listens on: the forward fails and the client still gets an answer.
        let frame = frame.freeze();
        let ib = kmirror_net::interbroker::InterBroker::plain("PLAINTEXT");
        // Forwarding runs on the core that read the request.
        let mut out = glommio::LocalExecutorBuilder::default()
            .spawn(move || async move { forward(&ib, "127.0.0.1:1", frame).await })
            .unwrap()
            .join()
            .unwrap()
            .expect("an answer");
        assert_eq!(read_response_header_v1(&mut out).unwrap(), 41);
        let r: WriteMirrorStatesResponse = decode_body("WriteMirrorStates", 0, out).unwrap();
        assert_eq!(r.error_code, keys::error::COORDINATOR_NOT_AVAILABLE);
        assert!(r.error_message.is_some());
    }
}
