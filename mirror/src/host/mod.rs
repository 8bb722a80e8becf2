//! Mirroring wired into the running broker: the mirror control thread, and the
//! [`ExtensionApis`] that serves the mirror wire APIs.
//!
//! One plain thread ("kmirror-mirror") owns the [`MirrorService`] (coordinator + store) and
//! serializes everything that changes mirror state: wire requests, fetcher events and the
//! per-mirror sync rounds. It may block (the host's failover steps wait for the owning core and
//! fsync), which is why it is never an engine core. Engine cores only hand it frames and await
//! the reply over a channel; at a node without the seat the reply names the seat and the core
//! forwards the frame there itself, so the thread never waits on a peer.
//!
//! The thread's work is split by concern, one module each, each tested on its own:
//! - [`placement`]: after every message the thread reconciles: each topic with a read-only
//!   mirror partition carries `TopicMeta::mirror` (clients are refused with
//!   READ_ONLY_TOPIC), a topic whose partitions are all STOPPED is writable again,
//!   PREPARING/MIRRORING/FAILED partitions have a fetcher on the core their mirror's
//!   placement names, others do not;
//! - [`topic_sync`]: each mirror's sync round reads the source from an engine core (the
//!   source client is glommio-based) and sends the snapshot back; the thread plans with
//!   `kmirror_control::mirror::sync` and creates, grows and reconfigures mirror topics;
//! - [`group_sync`], [`acl_sync`], [`quota_sync`]: the same round's group offsets (through
//!   each group's coordinator), ACLs and client quotas (through the quorum);
//! - [`failover`]: unfinished failovers retried, and the seat's BumpLeaderEpochs;
//! - [`broker_host`]: the broker as these reach it (`BrokerHost`). The sync and failover
//!   tasks see it only through small traits (`Topics`, `GroupCoordinators`, `AclStore`,
//!   `ClientQuotas`), which their tests implement in memory.

use kmirror_control::quorum::{ClusterCommand, MetadataCommand};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::protocol::StrBytes;
use kmirror_control::metadata::{topic_config, TopicMeta};
use kmirror_control::mirror::{
    id_changed_reason, plan_metadata_sync, DeletionConfirmations, HostError, LocalTopic,
    MirrorCoordinator, MirrorDefinition, MirrorHost, MirrorStateStore, MissingVerdict,
    PartitionState, SourceLookup, SourceTopic, SyncAction,
};
use kmirror_engine::Router;
use kmirror_log::ControlKind;
use kmirror_types::{LeaderEpoch, Offset, ProducerId, TopicPartition};

use crate::client::security::ClientSecurity;
use crate::fetcher::{FetchEvent, FetcherConfig, KafkaSource};
use crate::keys::{self, api};
use crate::manager::{FetchTask, FetcherManager};
use crate::metrics::{MirrorMetrics, SyncErrorKind};
use crate::service::{LivePartition, MirrorLiveStatus, MirrorService};
use crate::throttle::{BrokerRate, RateLevel, RateSource, BROKER_THROTTLED_RATE};
use kmirror_net::broker::ExtensionApis;
use kmirror_net::broker::{BrokerConfigLevel, BrokerConfigSource, ExtensionConfig};
use kmirror_net::mirror_deps::MirrorDeps;

mod acl_sync;
mod broker_host;
mod failover;
mod group_sync;
mod placement;
mod quota_sync;
mod share_sync;
mod topic_sync;

use broker_host::BrokerHost;

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
    /// The source's last stable offsets a `remove --wait-for-sync` waits for (its id).
    SourceLsos(u64, Result<BTreeMap<TopicPartition, i64>, String>),
}

struct SourceSnapshot {
    topics: Vec<SourceTopic>,
    /// Present when the round also fetched group offsets.
    groups: Option<BTreeMap<String, BTreeMap<TopicPartition, i64>>>,
    /// Share groups' start offsets, when the round fetched them and the source has share
    /// groups to offer.
    share_groups: Option<BTreeMap<String, BTreeMap<TopicPartition, i64>>>,
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

/// The broker's mirroring: pass it to `kmirror::node::start` as the extension.
pub struct MirrorBroker {
    tx: flume::Sender<Msg>,
    /// Set when the broker starts: the authorizer the mirror APIs are checked against.
    broker: std::sync::OnceLock<Arc<dyn MirrorDeps>>,
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
        if let Some(refused) = self
            .broker
            .get()
            .and_then(|b| crate::authz::refuse_mirror_api(&b.access(session), api_key, &frame))
        {
            return Box::pin(async move { Some(refused) });
        }
        // DescribeMirrors' AuthorizedOperations are the asking principal's, known here.
        let ops = (api_key == api::DESCRIBE_MIRRORS).then(|| {
            self.broker
                .get()
                .map_or(-1, |b| crate::authz::mirror_operations(&b.access(session)))
        });
        let request = ops.map(|_| frame.clone());
        let (rtx, rrx) = flume::bounded(1);
        let sent = self.tx.send(Msg::Request(frame, rtx)).is_ok();
        Box::pin(async move {
            if !sent {
                return None;
            }
            let out = match rrx.recv_async().await.ok()? {
                Answer::Frame(out) => out,
                Answer::Forward { addr, frame, ib } => forward(&ib, &addr, frame).await,
            };
            match (out, request, ops) {
                (Some(out), Some(req), Some(ops)) => {
                    Some(crate::authz::with_authorized_operations(&req, out, ops))
                }
                (out, _, _) => out,
            }
        })
    }

    fn started(&self, broker: Arc<dyn MirrorDeps>, router: &Router) {
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
            broker.node_id(),
            settings.fetcher.clone(),
            ev_tx,
            self.metrics.clone(),
        );
        let _ = self.broker_rate.set(Arc::new(BrokerRate::open(
            broker.data_dir(),
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
            committer: Arc::new(DepsCommitter(broker.clone())),
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
            pending_syncs: Vec::new(),
            next_pending_id: 0,
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

impl Control {
    /// `remove --wait-for-sync`: parks the request and asks the source (a task on a core)
    /// for the last stable offset of each partition it would fail over, so only what the
    /// source had committed after the request arrived counts. Gives the reply back when
    /// there is nothing to wait for (no such partition, or an invalid request).
    fn wait_for_sync(
        &mut self,
        frame: Bytes,
        reply: Reply,
        request: crate::api::RemoveTopicsFromMirrorRequest,
        now: i64,
    ) -> Option<Reply> {
        let targets = self.service.remove_targets(&request);
        let awaiting = self.awaiting_creation(&request);
        let targets = match targets {
            Ok(t) if !t.is_empty() || !awaiting.is_empty() => t,
            _ => return Some(reply),
        };
        let id = self.next_pending_id;
        self.next_pending_id += 1;
        let wait = request.wait_for_sync_ms.max(0);
        let asked = awaiting.is_empty();
        let mirror = request.mirror_name.clone();
        self.pending_syncs.push(PendingSync {
            id,
            frame,
            reply,
            request,
            lsos: None,
            asked,
            deadline_ms: now.saturating_add(wait),
        });
        if asked {
            self.ask_source_lsos(id, &mirror, targets, wait);
        }
        None
    }

    /// Topics a `remove --wait-for-sync` names that the mirror selects but whose local topic
    /// the metadata sync has not created yet (a `remove` right after `add`): the wait covers
    /// their creation too, as a user who just added them expects, instead of failing them
    /// over as unknown.
    fn awaiting_creation(
        &self,
        request: &crate::api::RemoveTopicsFromMirrorRequest,
    ) -> Vec<String> {
        let store = self.service.coordinator().store();
        let Some(def) = store.mirror(&request.mirror_name) else {
            return Vec::new();
        };
        request
            .topics
            .iter()
            .map(|t| &t.topic_name)
            .filter(|t| def.topics.contains(t))
            .filter(|t| !store.partitions().any(|(tp, _)| &tp.topic == *t))
            .cloned()
            .collect()
    }

    /// Asks the source (a task on a core) for the last stable offset of each of `targets`;
    /// the answer comes back as [`Msg::SourceLsos`] for pending sync `id`.
    fn ask_source_lsos(&mut self, id: u64, mirror: &str, targets: Vec<TopicPartition>, wait: i64) {
        let Some(def) = self.service.coordinator().store().mirror(mirror).cloned() else {
            return;
        };
        let tx = self.tx.clone();
        let bootstrap = def.source_bootstrap().to_owned();
        let security = ClientSecurity::from_properties(&def.client_settings());
        let client_id = format!("kmirror-{}-sync-{}", self.host.broker.node_id(), def.name);
        let timeout = Duration::from_millis(u64::try_from(wait).unwrap_or(0).clamp(1_000, 30_000));
        let r = self.host.router.spawn_on_blocking(0, move || async move {
            use crate::fetcher::Source;
            let mut src = KafkaSource::new(&bootstrap, client_id, timeout).with_security(security);
            let mut lsos = BTreeMap::new();
            let mut failed = None;
            for tp in targets {
                let leader = match src.leader(&tp.topic, tp.partition).await {
                    Ok(l) => l,
                    Err(e) => {
                        failed = Some(format!("{tp}: {e}"));
                        break;
                    }
                };
                match src
                    .list_offset(&leader, &tp.topic, tp.partition, leader.leader_epoch, -1)
                    .await
                {
                    Ok(Ok(lso)) => {
                        lsos.insert(tp, lso.get());
                    }
                    Ok(Err(c)) => {
                        failed = Some(format!("{tp}: {}", keys::error::name(c.code())));
                        break;
                    }
                    Err(e) => {
                        failed = Some(format!("{tp}: {e}"));
                        break;
                    }
                }
            }
            let _ = tx.send(Msg::SourceLsos(id, failed.map_or(Ok(lsos), Err)));
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "cannot ask the source for its last stable offsets");
        }
    }

    /// Carries out a mirror request on the seat and answers it. Flags and fetchers follow
    /// the new states before the caller hears back: a `remove` that returned must leave the
    /// topic writable.
    fn answer_now(&mut self, frame: Bytes, reply: Reply, now: i64) {
        let out = {
            let (svc, host) = (&mut self.service, &mut self.host);
            svc.handle_frame(frame, host, now)
        };
        self.reconcile();
        let _ = reply.send(Answer::Frame(out));
    }

    /// Each waiting `remove --wait-for-sync` whose partitions all hold the source's last
    /// stable offset read after it arrived is carried out now (the failover stops each
    /// fetcher, then truncates to what is mirrored); one past its deadline is answered
    /// REQUEST_TIMED_OUT with what is behind, and nothing fails over.
    fn check_pending_syncs(&mut self) {
        if self.pending_syncs.is_empty() {
            return;
        }
        let now = crate::fetcher::now_ms();
        if !self.is_seat() {
            // The seat moved: the client asks again, and the new seat waits afresh.
            for p in std::mem::take(&mut self.pending_syncs) {
                let _ = p.reply.send(Answer::Frame(coordinator_not_available(
                    &p.frame,
                    "the mirror coordinator moved while waiting for sync",
                )));
            }
            return;
        }
        // Requests that waited for their topics' creation ask the source once all exist.
        for i in 0..self.pending_syncs.len() {
            if self.pending_syncs[i].asked
                || !self
                    .awaiting_creation(&self.pending_syncs[i].request)
                    .is_empty()
            {
                continue;
            }
            let p = &mut self.pending_syncs[i];
            p.asked = true;
            let (id, mirror, wait) = (
                p.id,
                p.request.mirror_name.clone(),
                p.request.wait_for_sync_ms.max(0),
            );
            match self.service.remove_targets(&self.pending_syncs[i].request) {
                Ok(targets) => self.ask_source_lsos(id, &mirror, targets, wait),
                Err(e) => tracing::warn!(error = %e, "remove --wait-for-sync"),
            }
        }
        // Partitions led by other nodes: their log ends, asked now.
        let remote: Vec<TopicPartition> = self
            .pending_syncs
            .iter()
            .filter_map(|p| p.lsos.as_ref())
            .flat_map(|l| l.keys().cloned())
            .filter(|tp| !self.host.leads(&self.host.broker.metadata(), tp))
            .collect();
        if !remote.is_empty() {
            self.host.refresh_leader_hws(&remote);
        }
        for p in std::mem::take(&mut self.pending_syncs) {
            let behind: Option<Vec<String>> = p.lsos.as_ref().map(|lsos| {
                lsos.iter()
                    .filter_map(|(tp, lso)| {
                        let end = self.host.live(tp, now).map_or(-1, |l| l.destination_offset);
                        (end < *lso).then(|| format!("{tp} at {end} of the source's {lso}"))
                    })
                    .collect()
            });
            match behind {
                Some(b) if b.is_empty() => self.answer_now(p.frame, p.reply, now),
                behind if now >= p.deadline_ms => {
                    let awaiting = self.awaiting_creation(&p.request);
                    let what = match behind {
                        Some(b) => b.join(", "),
                        None if !awaiting.is_empty() => format!(
                            "not yet created on this cluster by the mirror: {}",
                            awaiting.join(", ")
                        ),
                        None => "the source did not answer with its last stable offsets".to_owned(),
                    };
                    let msg = format!(
                        "not in sync within {} ms, nothing failed over: {what}",
                        p.request.wait_for_sync_ms
                    );
                    tracing::warn!(mirror = %p.request.mirror_name, %msg, "remove --wait-for-sync");
                    let _ = p.reply.send(Answer::Frame(error_answer(
                        &p.frame,
                        keys::error::REQUEST_TIMED_OUT,
                        &msg,
                    )));
                }
                _ => self.pending_syncs.push(p),
            }
        }
    }

    /// `mirror.auto.failover.ms`: once the source has been unavailable that long, every topic
    /// of the mirror still mirrored fails over, as `remove --all` would (and no topic joins
    /// afterwards). Opt-in: the old source may still be up for its own clients (a network
    /// split), and then both sides take writes; docs/MIRRORING.md says how to fence it.
    fn auto_failover(&mut self, mirror: &str, since: i64, now: i64, error: &str) {
        let Some(def) = self.service.coordinator().store().mirror(mirror).cloned() else {
            return;
        };
        let after = def.setting_u64(
            kmirror_control::mirror::definition::settings::AUTO_FAILOVER_MS,
            0,
        );
        if after == 0 || now.saturating_sub(since) < after as i64 {
            return;
        }
        if self
            .service
            .coordinator()
            .store()
            .active_topics(mirror)
            .is_empty()
        {
            return;
        }
        tracing::warn!(
            %mirror,
            unavailable_ms = now - since,
            mirror_auto_failover_ms = after,
            last_error = %error,
            "source unavailable for longer than mirror.auto.failover.ms: failing over every topic of the mirror"
        );
        let results = {
            let (svc, host) = (&mut self.service, &mut self.host);
            svc.coordinator_mut()
                .remove_topic_patterns(mirror, &[".*".to_owned()], host)
        };
        match results {
            Ok(results) => {
                for (topic, r) in results {
                    if let Err(e) = r {
                        tracing::warn!(%mirror, %topic, error = %e, "automatic failover of a topic did not complete; retried next round");
                    }
                }
                self.host.manager.metrics().count_auto_failover(mirror);
            }
            Err(e) => tracing::warn!(%mirror, error = %e, "automatic failover refused"),
        }
        self.reconcile();
    }
}

/// A clash as `describe` and the log show it.
fn clash_text(c: &kmirror_control::mirror::SyncClash) -> String {
    match &c.owner {
        Some(m) => format!("{} (kept by mirror {m})", c.entry),
        None => format!("{} (kept by a local admin)", c.entry),
    }
}

/// Logs a sync round's clashes once (a count and the first few): the source's entries
/// another owner keeps, which this mirror leaves as they are.
fn report_clashes(mirror: &str, what: &str, clashes: &[kmirror_control::mirror::SyncClash]) {
    if clashes.is_empty() {
        return;
    }
    let first: Vec<String> = clashes.iter().take(3).map(clash_text).collect();
    tracing::warn!(
        %mirror,
        count = clashes.len(),
        first = %first.join("; "),
        "source {what} another owner wrote first are left to it (mirror.acl.sync.mode / mirror.quota.sync.mode = exact takes them over)"
    );
}

/// The COORDINATOR_NOT_AVAILABLE answer (seed 000: "the mirror coordinator is not active")
/// to a mirror request frame, with the request's correlation id.
fn coordinator_not_available(frame: &Bytes, message: &str) -> Option<Bytes> {
    error_answer(frame, keys::error::COORDINATOR_NOT_AVAILABLE, message)
}

/// The response to `frame` carrying only error `code` and `message`.
fn error_answer(frame: &Bytes, code: i16, message: &str) -> Option<Bytes> {
    let mut body = frame.clone();
    let header = crate::api::read_request_header_v2(&mut body).ok()?;
    let resp = crate::api::error_response_body(header.api_key, code, Some(message))?;
    let mut out = bytes::BytesMut::with_capacity(resp.len() + 8);
    crate::api::write_response_header_v1(&mut out, header.correlation_id);
    out.extend_from_slice(&resp);
    Some(out.freeze())
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
struct DepsCommitter(Arc<dyn MirrorDeps>);

impl kmirror_control::replicated::Committer for DepsCommitter {
    fn commit(&self, cmd: ClusterCommand) -> std::io::Result<()> {
        self.0
            .propose(cmd)
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
    /// `remove --wait-for-sync` requests waiting for their partitions to catch up.
    pending_syncs: Vec<PendingSync>,
    next_pending_id: u64,
}

/// A RemoveTopicsFromMirror that fails over only once its partitions are in sync.
struct PendingSync {
    id: u64,
    frame: Bytes,
    reply: Reply,
    request: crate::api::RemoveTopicsFromMirrorRequest,
    /// The source's last stable offset of each chosen partition, read after the request
    /// arrived (None until the source answered).
    lsos: Option<BTreeMap<TopicPartition, i64>>,
    /// Whether the source was asked; not until every named topic exists locally.
    asked: bool,
    deadline_ms: i64,
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
        let deps = &self.host.broker;
        let status = deps.quorum_status();
        let version = deps.mirror_state_version();
        let me = u64::try_from(deps.node_id()).ok();
        let seat = status.leader.is_some() && status.leader == me && status.coordinator_ready;
        if q.loaded == Some((status.term, version)) && q.seat == seat {
            return false;
        }
        let (committer, term) = (q.committer.clone(), status.term);
        let Some(store) = deps.mirror_state(committer, term, Duration::from_secs(5)) else {
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

    /// Where a mirror request goes when this node does not hold the seat: the quorum
    /// leader's inter-broker listener (None: no leader known, or this node leads).
    fn seat_addr(&self) -> Option<String> {
        if self.quorum.seat {
            return None;
        }
        let deps = &self.host.broker;
        let leader = i32::try_from(deps.quorum_status().leader?).ok()?;
        if leader == deps.node_id() {
            return None;
        }
        deps.inter_broker().peer_addr(&deps.metadata(), leader)
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
        let mut last_meta = self.host.broker.metadata_version();
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
            self.check_pending_syncs();
            // Idle, nothing changes the durable states, so a full pass over every partition
            // (5,000 of them cost a tenth of a core at 5 passes a second) runs only after a
            // change, or as a slow safety net.
            // Leadership moves with the published metadata: a new leader starts the
            // fetchers it now owns, a deposed one stops them.
            let meta_version = self.host.broker.metadata_version();
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
                    let ib = self.host.broker.inter_broker().clone();
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
                if key == api::REMOVE_TOPICS_FROM_MIRROR {
                    if let Some(request) = self.service.sync_wait(&frame) {
                        if let Some(reply) = self.wait_for_sync(frame.clone(), reply, request, now)
                        {
                            // Nothing to wait for (or an invalid request): answered now.
                            self.answer_now(frame, reply, now);
                        }
                        return false;
                    }
                }
                self.answer_now(frame, reply, now);
                if matches!(
                    key,
                    api::CREATE_MIRROR | api::ADD_TOPICS_TO_MIRROR | api::RESUME_MIRROR_TOPICS
                ) {
                    // New topics should not wait a whole sync interval.
                    self.next_sync.clear();
                }
                false
            }
            Got::Msg(Msg::SourceLsos(id, r)) => {
                if let Some(i) = self.pending_syncs.iter().position(|p| p.id == id) {
                    match r {
                        Ok(lsos) => self.pending_syncs[i].lsos = Some(lsos),
                        Err(e) => {
                            let p = self.pending_syncs.remove(i);
                            let msg = format!(
                                "cannot read the source's last stable offsets, nothing failed over: {e}"
                            );
                            let _ = p.reply.send(Answer::Frame(error_answer(
                                &p.frame,
                                keys::error::NETWORK_EXCEPTION,
                                &msg,
                            )));
                        }
                    }
                }
                self.check_pending_syncs();
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
                        let now = crate::fetcher::now_ms();
                        let since = self
                            .host
                            .sync_errors
                            .get(&mirror)
                            .map_or(now, |(_, since)| *since);
                        self.host
                            .sync_errors
                            .insert(mirror.clone(), (e.clone(), since));
                        if self.is_seat() {
                            self.auto_failover(&mirror, since, now, &e);
                        }
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
