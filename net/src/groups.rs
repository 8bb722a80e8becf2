//! Glue between the Kafka wire types and the runtime-agnostic group / transaction coordinators
//! of `kmirror-control`.
//!
//! One dedicated OS thread ("kmirror-coord") owns both coordinators; any core thread talks to it
//! through the cheap cloneable [`GroupsService`] handle: a bounded channel carrying the decoded
//! request and a one-shot reply channel. The thread drains a batch of requests, applies them,
//! fires timers, fsyncs the coordinator logs once (group commit), and only then sends the
//! replies, so an acknowledged OffsetCommit survives a crash. Parked JoinGroup / SyncGroup /
//! EndTxn requests are answered from later batches. Transaction markers are written through the
//! broker's [`MarkerSink`], as tasks on engine cores; failures are retried every second.
//!
//! KIP-848 ConsumerGroupHeartbeat / ConsumerGroupDescribe arrive with a snapshot of the
//! cluster's topics ([`topic_view`], built by the connection), since the coordinator thread
//! computes assignments and names topics by id but owns no metadata.
//!
//! Every node runs [`GroupsService::start_clustered`] (a lone node is a one-voter quorum), as
//! Kafka does: a group is coordinated by the leader of its `__consumer_offsets` partition, a
//! transactional id by the leader of its `__transaction_state` partition, with their records
//! in those partitions in Kafka's own format (`kmirror_control::coordinator_batch`). The
//! thread asks its [`CoordinatorSeat`] before each batch which of those partitions this node
//! leads; when that changed (or a write failed) it loads both coordinators again from the led
//! partitions (COORDINATOR_LOAD_IN_PROGRESS until it could). A request whose keys are led
//! elsewhere gets NOT_COORDINATOR and FindCoordinator names each key's partition leader, so
//! clients re-find as after a Kafka coordinator move. A flush appends each partition's
//! records as its leader in the epoch it was loaded in and waits for the ISR; a refused or
//! unreplicated append fences the coordinators until they load again. Transaction markers
//! for groups coordinated elsewhere go to their `__consumer_offsets` partition's leader
//! (WriteTxnMarkers, [`GroupsService::group_markers`] there).

use std::collections::HashMap;
#[cfg(test)]
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnResult;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use kmirror_control::coordinator_batch;
use kmirror_control::coordinator_partition::partition_for;
use kmirror_control::coordinator_record::{payload_key_id, Payload};
use kmirror_control::group::codes;
use kmirror_control::group::consumer::{CgHeartbeat, Parts, TopicView};
use kmirror_control::group::{
    CommitContext, GroupConfig, GroupCoordinator, JoinRequest as CJoin, JoinResponse as CJoinResp,
    LeavingMember, OffsetToCommit, Reply, SyncRequest as CSync, SyncResponse as CSyncResp, Token,
};
use kmirror_control::offsets_log::StoreError;
use kmirror_control::replicated::{
    Committer, CoordinatorLog, CoordinatorLogs, Loaded, PartitionWriter,
};
use kmirror_control::share::store::ShareStateStore;

mod share;
use kmirror_control::txn::{MarkerJob, ProducerIdSource, TxnConfig, TxnCoordinator};

/// Writes transaction markers (commit/abort control batches) to data partitions. Implemented by
/// the broker, which routes each marker to the core owning the partition.
pub trait MarkerSink: Send + Sync {
    /// Starts writing `markers` as a task on an engine core and returns at once: the
    /// coordinator thread never waits on a partition or a peer. The task ends with
    /// [`MarkersDone::report`]. `Err`: no core took the job (the engine has not started or is
    /// stopping); nothing was written and `done` is dropped.
    fn write_markers(&self, markers: Vec<TxnMarker>, done: MarkersDone) -> Result<(), String>;

    /// Starts initializing the share state of `parts` of `group` at `state_epoch` and
    /// `start_offset` (-1: the leader's auto-offset-reset) on the share coordinators of
    /// other nodes (InitializeShareGroupState), as a task that ends with
    /// [`ShareInitDone::report`]. `Err`: not started (a one-node sink has no peers).
    fn initialize_share_state(
        &self,
        group: String,
        parts: Vec<(uuid::Uuid, i32)>,
        state_epoch: i32,
        start_offset: i64,
        done: ShareInitDone,
    ) -> Result<(), String> {
        let _ = (group, parts, state_epoch, start_offset, done);
        Err("no share coordinators on other nodes".into())
    }

    /// Starts deleting the share state of `parts` of `group` on the share coordinators of
    /// other nodes (DeleteShareGroupState), as a task nobody waits for: a failure is logged,
    /// and the state is overwritten when the partition is initialized again. `Err`: not
    /// started.
    fn delete_share_state(
        &self,
        group: String,
        parts: Vec<(uuid::Uuid, i32)>,
    ) -> Result<(), String> {
        let _ = (group, parts);
        Err("no share coordinators on other nodes".into())
    }
}

/// A remote share-state initialization's way back to the coordinator thread.
pub struct ShareInitDone {
    group: String,
    tx: flume::Sender<Msg>,
    generation: u64,
}

impl ShareInitDone {
    /// Reports which partitions were initialized and which were not (retried by a later
    /// heartbeat).
    pub async fn report(self, ok: Vec<(uuid::Uuid, i32)>, failed: Vec<(uuid::Uuid, i32)>) {
        let msg = Msg::ShareInitialized {
            group: self.group,
            ok,
            failed,
            generation: self.generation,
        };
        let _ = self.tx.send_async(msg).await;
    }
}

/// A marker job's way back to the coordinator thread.
pub struct MarkersDone {
    job: MarkerJob,
    tx: flume::Sender<Msg>,
    generation: u64,
}

impl MarkersDone {
    /// Hands the job's outcome to the coordinator (a failed job is retried a second later).
    /// Waits for room in the coordinator's queue without blocking the core.
    pub async fn report(self, result: Result<(), String>) {
        if let Err(e) = &result {
            tracing::warn!(
                transactional_id = %self.job.transactional_id,
                error = %e,
                "writing transaction markers failed; will retry"
            );
        }
        let msg = Msg::MarkersDone {
            job: self.job,
            ok: result.is_ok(),
            generation: self.generation,
        };
        let _ = self.tx.send_async(msg).await;
    }
}

/// One commit/abort marker to append to `topic`/`partition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarker {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
}

/// Errors starting the coordinator service.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupsError {
    #[error("coordinator storage: {0}")]
    Io(#[from] std::io::Error),
    #[error("coordinator storage: {0}")]
    Store(#[from] StoreError),
}

/// One node: only one coordinator epoch exists, this node has always been the coordinator.
/// On partitions, a transaction's coordinator epoch is its `__transaction_state` partition's
/// leader epoch.
const COORDINATOR_EPOCH: i32 = 0;

/// The coordinator partitions this node leads: of `__consumer_offsets` (groups) and of
/// `__transaction_state` (transactional ids), each with its leader epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Led {
    pub offsets: Loaded,
    pub txns: Loaded,
    /// Of `__share_group_state` (the share coordinator's keys).
    pub shares: Loaded,
}

impl Led {
    fn of(&self, log: CoordinatorLog) -> &Loaded {
        match log {
            CoordinatorLog::Offsets => &self.offsets,
            CoordinatorLog::Transactions => &self.txns,
            CoordinatorLog::ShareState => &self.shares,
        }
    }
}

/// Where the coordinator of a key is, as the metadata says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// This node leads the key's partition.
    Here,
    /// Broker `node_id` leads it (NOT_COORDINATOR here; FindCoordinator names it).
    Elsewhere {
        node_id: i32,
        host: String,
        port: i32,
    },
    /// The topic does not exist yet or the partition has no leader (COORDINATOR_NOT_AVAILABLE).
    Unknown,
}

/// What the coordinator thread needs of the node (implemented by the node's wiring,
/// [`crate::coordinator_partitions::PartitionSeat`]): which coordinator partitions it leads,
/// their logs, and producer-id blocks. Called from the coordinator thread, which may block on
/// the engine cores and on the quorum.
pub trait CoordinatorSeat: Send + Sync {
    /// The coordinator partitions this node leads now (`None`: no metadata yet).
    fn led(&self) -> Option<Led>;
    /// Where the coordinator of `key` in `log` is.
    fn locate(&self, log: CoordinatorLog, key: &str) -> Located;
    /// Partition `partition` of `log`'s topic, whole from its log start, led here in
    /// `leader_epoch`: its batches and its log end offset.
    fn read(
        &self,
        log: CoordinatorLog,
        partition: i32,
        leader_epoch: i32,
    ) -> std::io::Result<(Vec<u8>, i64)>;
    /// Appends the coordinators' records to the partitions they lead.
    fn writer(&self) -> Arc<dyn PartitionWriter>;
    /// The coordinator logs an older version kept on the Raft log (`None`: not readable now).
    /// A partition that was never written gets its part of them once (the one-time move).
    fn legacy_logs(&self) -> Option<CoordinatorLogs>;
    /// A block of producer ids from the quorum (`start..end`). Blocks the coordinator thread.
    fn allocate_producer_ids(&self, _count: u32) -> Option<(i64, i64)> {
        None
    }
    /// Where the mirror coordinator is (FindCoordinator key type MIRROR): the node whose
    /// quorum seat runs the mirror service.
    fn locate_mirror(&self) -> Located {
        Located::Unknown
    }
}

/// Producer-id blocks of the transaction coordinator, from the quorum.
struct SeatPids(Arc<dyn CoordinatorSeat>);

impl ProducerIdSource for SeatPids {
    fn allocate(&mut self, count: u32) -> Option<(i64, i64)> {
        self.0.allocate_producer_ids(count)
    }
}

/// The groups' coordinator topic: a transaction marker for it goes to the group
/// coordinator of that partition, not into the log as a data partition's marker.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

const QUEUE_DEPTH: usize = 4096;
const TICK: Duration = Duration::from_millis(50);
const MARKER_RETRY: Duration = Duration::from_secs(1);
/// Producer ids a non-coordinating node takes from the quorum at a time (Kafka's
/// AllocateProducerIds block size).
const PID_BLOCK: u32 = 1000;

enum Msg {
    Request {
        version: i16,
        client_id: String,
        req: Box<RequestKind>,
        /// Topic metadata for the KIP-848 APIs (assignment, topic names by id).
        topics: Option<Arc<TopicView>>,
        /// Group configs, for the KIP-848 heartbeat (session timeout, heartbeat interval).
        group_configs: Option<Arc<GroupConfigsView>>,
        reply: flume::Sender<ResponseKind>,
    },
    MarkersDone {
        job: MarkerJob,
        ok: bool,
        generation: u64,
    },
    /// Share state initialized (or not) on other nodes' share coordinators.
    ShareInitialized {
        group: String,
        ok: Vec<(uuid::Uuid, i32)>,
        failed: Vec<(uuid::Uuid, i32)>,
        generation: u64,
    },
    /// A transaction's marker for `__consumer_offsets` partition `partition`, from its
    /// transaction coordinator.
    GroupMarkers {
        partition: i32,
        producer_id: i64,
        commit: bool,
        reply: flume::Sender<ResponseKind>,
    },
    Shutdown {
        done: flume::Sender<()>,
    },
}

/// Cheap, cloneable handle to the coordinator thread; usable from any thread.
#[derive(Clone)]
pub struct GroupsService {
    tx: flume::Sender<Msg>,
}

impl GroupsService {
    /// Unit tests of the coordinator thread: its logs in local files (the broker always runs
    /// it on the quorum, [`GroupsService::start_clustered`]).
    ///
    /// Opens `data_dir/__consumer_offsets-0` and `data_dir/__transaction_state-0`, restores
    /// groups, offsets and transactions, and starts the coordinator thread. Transactions that
    /// were being completed when the node stopped are resumed (markers re-sent).
    #[cfg(test)]
    pub fn start(
        data_dir: &Path,
        node_id: i32,
        host: String,
        port: i32,
        markers: Arc<dyn MarkerSink>,
    ) -> Result<GroupsService, GroupsError> {
        Self::start_with(
            data_dir,
            node_id,
            host,
            port,
            markers,
            GroupConfig::default(),
            TxnConfig::default(),
        )
    }

    /// [`GroupsService::start`] with explicit coordinator settings.
    #[cfg(test)]
    pub fn start_with(
        data_dir: &Path,
        node_id: i32,
        host: String,
        port: i32,
        markers: Arc<dyn MarkerSink>,
        group_cfg: GroupConfig,
        txn_cfg: TxnConfig,
    ) -> Result<GroupsService, GroupsError> {
        let clock = Clock::new();
        let now = clock.now();
        let groups =
            GroupCoordinator::open(&data_dir.join("__consumer_offsets-0"), group_cfg, now)?;
        let (txns, resume) =
            TxnCoordinator::open(&data_dir.join("__transaction_state-0"), txn_cfg)?;
        let (tx, rx) = flume::bounded(QUEUE_DEPTH);
        let mut state = CoordinatorThread {
            node_id,
            host,
            port,
            groups,
            txns,
            shares: ShareStateStore::unloaded(),
            markers,
            self_tx: tx.clone(),
            parked: HashMap::new(),
            parked_txn: HashMap::new(),
            next_token: 1,
            retry: Vec::new(),
            done_locally: Vec::new(),
            clock,
            seat: None,
            loaded: None,
            led_now: Led::default(),
            generation: 0,
            load_error_logged: None,
            pid_block: (0, 0),
            group_cfg: GroupConfig::default(),
            txn_cfg: TxnConfig::default(),
        };
        for job in resume {
            state.start_job(job, now);
        }
        std::thread::Builder::new()
            .name("kmirror-coord".into())
            .spawn(move || state.run(rx))?;
        Ok(GroupsService { tx })
    }

    /// Cluster mode: the coordinators run while `seat` says this node leads the quorum, with
    /// their logs on the Raft log; nothing is read from or written to `__consumer_offsets-0` or
    /// `__transaction_state-0` on disk.
    pub fn start_clustered(
        seat: Arc<dyn CoordinatorSeat>,
        node_id: i32,
        host: String,
        port: i32,
        markers: Arc<dyn MarkerSink>,
        group_cfg: GroupConfig,
        txn_cfg: TxnConfig,
    ) -> Result<GroupsService, GroupsError> {
        let clock = Clock::new();
        let (groups, txns) = unloaded(&group_cfg, &txn_cfg, clock.now())?;
        let (tx, rx) = flume::bounded(QUEUE_DEPTH);
        let state = CoordinatorThread {
            node_id,
            host,
            port,
            groups,
            txns,
            shares: ShareStateStore::unloaded(),
            markers,
            self_tx: tx.clone(),
            parked: HashMap::new(),
            parked_txn: HashMap::new(),
            next_token: 1,
            retry: Vec::new(),
            done_locally: Vec::new(),
            clock,
            seat: Some(seat),
            loaded: None,
            led_now: Led::default(),
            generation: 0,
            load_error_logged: None,
            pid_block: (0, 0),
            group_cfg,
            txn_cfg,
        };
        std::thread::Builder::new()
            .name("kmirror-coord".into())
            .spawn(move || state.run(rx))?;
        Ok(GroupsService { tx })
    }

    /// Serves one coordinator API request. Never fails: problems become Kafka error codes
    /// (COORDINATOR_NOT_AVAILABLE if the coordinator thread is gone).
    pub async fn handle(
        &self,
        api_key: ApiKey,
        version: i16,
        header: &RequestHeader,
        req: RequestKind,
    ) -> ResponseKind {
        self.handle_with_topics(api_key, version, header, req, None, None)
            .await
    }

    /// [`GroupsService::handle`] with the cluster's topics, which ConsumerGroupHeartbeat and
    /// ConsumerGroupDescribe need.
    pub async fn handle_with_topics(
        &self,
        api_key: ApiKey,
        version: i16,
        header: &RequestHeader,
        req: RequestKind,
        topics: Option<Arc<TopicView>>,
        group_configs: Option<Arc<GroupConfigsView>>,
    ) -> ResponseKind {
        let fallback = error_response(&req, version, codes::COORDINATOR_NOT_AVAILABLE);
        let (reply, rx) = flume::bounded(1);
        // The request kind already identifies the API.
        let _ = api_key;
        let msg = Msg::Request {
            version,
            client_id: header
                .client_id
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default(),
            req: Box::new(req),
            topics,
            group_configs,
            reply,
        };
        if self.tx.send_async(msg).await.is_err() {
            return fallback;
        }
        rx.recv_async().await.unwrap_or(fallback)
    }

    /// A transaction marker for `__consumer_offsets` partition `partition` (WriteTxnMarkers
    /// on its leader): settles producer `producer_id`'s pending offsets of the groups of that
    /// partition, durably. NONE, or NOT_LEADER_OR_FOLLOWER while the partition's coordinator
    /// is not loaded here (the transaction coordinator retries).
    pub async fn group_markers(&self, partition: i32, producer_id: i64, commit: bool) -> i16 {
        let unavailable = kafka_protocol::ResponseError::NotLeaderOrFollower.code();
        let (reply, rx) = flume::bounded(1);
        let msg = Msg::GroupMarkers {
            partition,
            producer_id,
            commit,
            reply,
        };
        if self.tx.send_async(msg).await.is_err() {
            return unavailable;
        }
        match rx.recv_async().await {
            Ok(ResponseKind::Heartbeat(r)) => r.error_code,
            _ => unavailable,
        }
    }

    /// Flushes the offsets and transaction logs and stops the coordinator thread; idempotent.
    pub fn shutdown(&self) {
        let (done, rx) = flume::bounded(1);
        if self.tx.send(Msg::Shutdown { done }).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
    }
}

/// Coordinators holding nothing, for a node that does not coordinate: every write fails
/// (they are never asked to write: requests are answered before reaching them).
fn unloaded(
    group_cfg: &GroupConfig,
    txn_cfg: &TxnConfig,
    now: i64,
) -> Result<(GroupCoordinator, TxnCoordinator), StoreError> {
    let groups = GroupCoordinator::open_replicated(&[], nowhere(), 0, group_cfg.clone(), now)?;
    let (txns, _) = TxnCoordinator::open_replicated(&[], nowhere(), 0, txn_cfg.clone())?;
    Ok((groups, txns))
}

/// A committer that refuses every write: for coordinators that must never write.
fn nowhere() -> Arc<dyn Committer> {
    struct Nowhere;
    impl Committer for Nowhere {
        fn commit(&self, _: kmirror_control::quorum::ClusterCommand) -> std::io::Result<()> {
            Err(std::io::Error::other("not the coordinator"))
        }
    }
    Arc::new(Nowhere)
}

/// A view of the metadata built once per metadata version and cluster: the last one built
/// on this thread, or a fresh one from `build`.
type Cached<T> = std::cell::RefCell<Option<(String, u64, Arc<T>)>>;

fn cached<T>(
    cache: &'static std::thread::LocalKey<Cached<T>>,
    meta: &kmirror_control::metadata::ClusterMetadata,
    build: impl FnOnce() -> T,
) -> Arc<T> {
    cache.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((cluster, version, view)) = c.as_ref() {
            if *version == meta.version && *cluster == meta.cluster_id {
                return view.clone();
            }
        }
        let view = Arc::new(build());
        *c = Some((meta.cluster_id.clone(), meta.version, view.clone()));
        view
    })
}

/// The topics consumer groups may subscribe to: every topic, by name, the internal ones too
/// (Kafka's coordinator resolves a KIP-848 regex over all topics; a classic client leaves
/// internal topics out itself with `exclude.internal.topics`). Cached per thread by metadata
/// version, so heartbeats do not rebuild it while topics stay the same.
pub fn topic_view(meta: &kmirror_control::metadata::ClusterMetadata) -> Arc<TopicView> {
    thread_local! {
        static CACHE: Cached<TopicView> = const { std::cell::RefCell::new(None) };
    }
    cached(&CACHE, meta, || {
        meta.topics
            .values()
            .map(|t| (t.name.clone(), (t.id, t.partition_count())))
            .collect()
    })
}

/// Group configs by group id, as the coordinator thread reads them.
pub type GroupConfigsView =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

/// The cluster's group configs, cached per thread by metadata version like [`topic_view`].
pub fn group_configs_view(
    meta: &kmirror_control::metadata::ClusterMetadata,
) -> Arc<GroupConfigsView> {
    thread_local! {
        static CACHE: Cached<GroupConfigsView> = const { std::cell::RefCell::new(None) };
    }
    cached(&CACHE, meta, || meta.group_configs.clone())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Wall-clock milliseconds that never go backwards: the wall time at start plus monotonic
/// elapsed time, so a clock step cannot expire every session at once.
struct Clock {
    wall0: i64,
    mono0: Instant,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            wall0: now_ms(),
            mono0: Instant::now(),
        }
    }

    fn now(&self) -> i64 {
        self.wall0 + self.mono0.elapsed().as_millis() as i64
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn opt_s(v: Option<&String>) -> Option<StrBytes> {
    v.map(|x| s(x))
}

/// A parked JoinGroup / SyncGroup.
struct Parked {
    version: i16,
    reply: flume::Sender<ResponseKind>,
    /// A JoinGroup (else a SyncGroup), to answer it if the coordinator moves meanwhile.
    join: bool,
}

/// A parked EndTxn.
struct ParkedTxn {
    producer_id: i64,
    producer_epoch: i16,
    reply: flume::Sender<ResponseKind>,
}

/// A computed reply plus the request it answers (to turn it into an error if the log flush
/// fails).
struct Outgoing {
    reply: flume::Sender<ResponseKind>,
    resp: ResponseKind,
    req: Option<(Box<RequestKind>, i16)>,
}

/// The live records of the Raft-log coordinator state: offsets log, transaction log.
type LegacyLive = (Vec<Vec<u8>>, Vec<Vec<u8>>);

struct CoordinatorThread {
    node_id: i32,
    host: String,
    port: i32,
    groups: GroupCoordinator,
    txns: TxnCoordinator,
    /// The share coordinator of the led `__share_group_state` partitions.
    shares: ShareStateStore,
    markers: Arc<dyn MarkerSink>,
    self_tx: flume::Sender<Msg>,
    parked: HashMap<Token, Parked>,
    parked_txn: HashMap<Token, ParkedTxn>,
    next_token: Token,
    retry: Vec<(Instant, MarkerJob)>,
    /// Jobs with no data partition: complete within the current batch.
    done_locally: Vec<MarkerJob>,
    clock: Clock,
    /// Cluster mode: the node's answer of which coordinator partitions it leads (`None`:
    /// unit tests' local files, where every key is coordinated here).
    seat: Option<Arc<dyn CoordinatorSeat>>,
    /// The partitions the coordinators were loaded from (`None`: nothing loaded), and the
    /// ones the node led at the start of this batch.
    loaded: Option<Led>,
    led_now: Led,
    /// Bumped on every load: marker jobs of an earlier load are not reported to this one.
    generation: u64,
    /// When a failed load was last logged (it is retried every tick).
    load_error_logged: Option<Instant>,
    /// Producer ids from the quorum for idempotent producers.
    pid_block: (i64, i64),
    group_cfg: GroupConfig,
    txn_cfg: TxnConfig,
}

impl CoordinatorThread {
    fn run(mut self, rx: flume::Receiver<Msg>) {
        let mut shutdown: Option<flume::Sender<()>> = None;
        // The flush is retried every tick while it fails (a full disk): log the first failure,
        // then at most every 10 s, and the recovery, instead of 20 lines a second.
        let mut flush_failing_since: Option<Instant> = None;
        let mut flush_error_logged = Instant::now();
        while shutdown.is_none() {
            let mut batch = Vec::new();
            match rx.recv_timeout(TICK) {
                Ok(m) => batch.push(m),
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => break,
            }
            while batch.len() < 512 {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            let now = self.clock.now();
            let mut out = Vec::new();
            self.take_seat(now, &mut out);
            for m in batch {
                match m {
                    Msg::Request {
                        version,
                        client_id,
                        req,
                        topics,
                        group_configs,
                        reply,
                    } => {
                        if let Some(resp) = self.route(&req, version) {
                            out.push(Outgoing {
                                reply,
                                resp,
                                req: None,
                            });
                            continue;
                        }
                        if let Some(t) = &topics {
                            self.groups.set_topics(t.clone());
                        }
                        if let Some(c) = group_configs {
                            self.groups.set_group_configs(c);
                        }
                        let resp = match (&*req, topics) {
                            (RequestKind::ConsumerGroupHeartbeat(r), topics) => {
                                let view = topics.unwrap_or_default();
                                Some(self.consumer_heartbeat(
                                    r, version, &client_id, &view, now, &mut out,
                                ))
                            }
                            (RequestKind::ConsumerGroupDescribe(r), topics) => {
                                let view = topics.unwrap_or_default();
                                Some(self.consumer_describe(r, &view))
                            }
                            (RequestKind::ShareGroupHeartbeat(r), topics) => {
                                let view = topics.unwrap_or_default();
                                Some(self.share_heartbeat(r, &client_id, &view, now))
                            }
                            (RequestKind::ShareGroupDescribe(r), topics) => {
                                let view = topics.unwrap_or_default();
                                Some(self.share_describe(r, &view))
                            }
                            (RequestKind::DescribeShareGroupOffsets(r), topics) => {
                                let view = topics.unwrap_or_default();
                                Some(self.share_offsets(r, &view))
                            }
                            (RequestKind::AlterShareGroupOffsets(r), topics) => {
                                let view = topics.unwrap_or_default();
                                Some(self.share_alter_offsets(r, &view, now))
                            }
                            (RequestKind::DeleteShareGroupOffsets(r), topics) => {
                                let view = topics.unwrap_or_default();
                                Some(self.share_delete_offsets(r, &view))
                            }
                            (r, _) if share::is_state_rpc(r) => self.share_state_rpc(r, now),
                            _ => self.dispatch(version, &client_id, &req, &reply, now, &mut out),
                        };
                        if let Some(resp) = resp {
                            out.push(Outgoing {
                                reply,
                                resp,
                                req: Some((req, version)),
                            });
                        }
                    }
                    // Markers of coordinators since unloaded: the next coordinator resumes
                    // the transaction from the log.
                    Msg::MarkersDone { generation, .. } if generation != self.generation => {}
                    Msg::MarkersDone { job, ok, .. } => self.markers_done(job, ok, &mut out),
                    Msg::ShareInitialized {
                        group,
                        ok,
                        failed,
                        generation,
                    } => {
                        // A coordinator since unloaded left the group to the next one.
                        if generation == self.generation {
                            self.share_initialized_remotely(&group, &ok, &failed);
                        }
                    }
                    Msg::GroupMarkers {
                        partition,
                        producer_id,
                        commit,
                        reply,
                    } => {
                        let code = self.group_markers(partition, producer_id, commit, now);
                        // The answer is a bare error code (a Heartbeat response carries one);
                        // a failed flush turns it into COORDINATOR_NOT_AVAILABLE below.
                        let probe = RequestKind::Heartbeat(HeartbeatRequest::default());
                        out.push(Outgoing {
                            reply,
                            resp: ResponseKind::Heartbeat(
                                HeartbeatResponse::default().with_error_code(code),
                            ),
                            req: (code == codes::NONE).then(|| (Box::new(probe), 0)),
                        });
                    }
                    Msg::Shutdown { done } => shutdown = Some(done),
                }
            }
            let replies = self.groups.tick(now);
            self.deliver(replies, &mut out);
            for job in self.txns.tick(now) {
                self.start_job(job, now);
            }
            let due = Instant::now();
            let (ready, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retry)
                .into_iter()
                .partition(|(at, _)| *at <= due);
            self.retry = later;
            for (_, job) in ready {
                self.start_job(job, now);
            }
            for job in std::mem::take(&mut self.done_locally) {
                self.markers_done(job, true, &mut out);
            }
            let flushed = self
                .groups
                .flush()
                .and_then(|()| self.txns.flush())
                .and_then(|()| self.shares.flush())
                .map_err(|e| {
                    if flush_failing_since.is_none()
                        || flush_error_logged.elapsed() >= Duration::from_secs(10)
                    {
                        tracing::error!(error = %e, "coordinator log flush failed");
                        flush_error_logged = Instant::now();
                    }
                    flush_failing_since.get_or_insert_with(Instant::now);
                });
            if flushed.is_ok() {
                if let Some(since) = flush_failing_since.take() {
                    tracing::info!(
                        failed_for_ms = since.elapsed().as_millis() as u64,
                        "coordinator log flush recovered"
                    );
                }
            }
            for o in out {
                let resp = match (&flushed, &o.req) {
                    (Err(()), Some((req, version))) => {
                        error_response(req, *version, codes::COORDINATOR_NOT_AVAILABLE)
                    }
                    _ => o.resp,
                };
                let _ = o.reply.send(resp);
            }
        }
        if let Err(e) = self
            .groups
            .flush()
            .and_then(|()| self.txns.flush())
            .and_then(|()| self.shares.flush())
        {
            tracing::error!(error = %e, "coordinator log flush at shutdown failed");
        }
        if let Some(done) = shutdown {
            let _ = done.send(());
        }
    }

    /// Cluster mode: loads the coordinators again whenever the partitions this node leads (or
    /// their leader epochs) changed or a write failed. A load reads every led partition from
    /// its log start; until it succeeds, keys of those partitions get
    /// COORDINATOR_LOAD_IN_PROGRESS.
    fn take_seat(&mut self, now: i64, out: &mut Vec<Outgoing>) {
        let Some(source) = self.seat.clone() else {
            return;
        };
        let Some(led) = source.led() else {
            return;
        };
        let fenced = self.groups.is_fenced() || self.txns.is_fenced() || self.shares.is_fenced();
        self.led_now = led.clone();
        if self.loaded.as_ref() == Some(&led) && !fenced {
            return;
        }
        self.unload(out);
        if led.offsets.epochs.is_empty()
            && led.txns.epochs.is_empty()
            && led.shares.epochs.is_empty()
        {
            self.loaded = Some(led);
            return;
        }
        match self.load(&source, &led, now) {
            Ok(resume) => {
                tracing::info!(
                    offsets = ?led.offsets.epochs.keys().collect::<Vec<_>>(),
                    transactions = ?led.txns.epochs.keys().collect::<Vec<_>>(),
                    share_state = ?led.shares.epochs.keys().collect::<Vec<_>>(),
                    "coordinators loaded from their partitions"
                );
                self.loaded = Some(led);
                self.generation += 1;
                self.load_error_logged = None;
                for job in resume {
                    self.start_job(job, now);
                }
            }
            Err(e) => {
                if self
                    .load_error_logged
                    .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
                {
                    tracing::warn!(error = %e, "cannot load the coordinators yet; retrying");
                    self.load_error_logged = Some(Instant::now());
                }
            }
        }
    }

    /// Reads the led partitions and opens both coordinators from them. A partition never
    /// written gets its part of the coordinator logs an older version kept on the Raft log
    /// first (the one-time move; Kafka's format, so every record lands on its key's
    /// partition).
    fn load(
        &mut self,
        source: &Arc<dyn CoordinatorSeat>,
        led: &Led,
        now: i64,
    ) -> Result<Vec<MarkerJob>, String> {
        let writer = source.writer();
        let mut legacy: Option<LegacyLive> = None;
        let mut records: [Vec<Vec<u8>>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        for (i, log) in [
            CoordinatorLog::Offsets,
            CoordinatorLog::Transactions,
            CoordinatorLog::ShareState,
        ]
        .into_iter()
        .enumerate()
        {
            let l = led.of(log);
            for (&p, &epoch) in &l.epochs {
                let (bytes, log_end) = source
                    .read(log, p, epoch)
                    .map_err(|e| format!("reading {log:?} partition {p}: {e}"))?;
                let mut payloads = coordinator_batch::decode(&bytes)
                    .map_err(|e| format!("{log:?} partition {p}: {e}"))?;
                // The Raft log never held share state.
                if log_end == 0 && log != CoordinatorLog::ShareState {
                    if legacy.is_none() {
                        legacy = Some(self.legacy_live(source, now)?);
                    }
                    let (offsets, txns) = legacy.as_ref().expect("set above");
                    let all = if i == 0 { offsets } else { txns };
                    let mine: Vec<Payload> = all
                        .iter()
                        .filter_map(|r| Payload::decode(r).ok())
                        .filter(|pl| {
                            payload_key_id(pl)
                                .is_some_and(|id| partition_for(&id, l.partitions) == p)
                        })
                        .collect();
                    if !mine.is_empty() {
                        let batches = coordinator_batch::encode(&mine, epoch, now)
                            .map_err(|e| e.to_string())?;
                        let bytes: Vec<u8> = batches.into_iter().flat_map(|b| b.bytes).collect();
                        writer
                            .append(log, p, epoch, bytes)
                            .map_err(|e| format!("moving {log:?} partition {p}: {e}"))?;
                        tracing::info!(
                            ?log,
                            partition = p,
                            records = mine.len(),
                            "coordinator state moved from the metadata log to its partition"
                        );
                        payloads.extend(mine);
                    }
                }
                records[i].extend(payloads.iter().map(Payload::encode));
            }
        }
        let groups = GroupCoordinator::open_partitioned(
            &records[0],
            writer.clone(),
            led.offsets.clone(),
            self.group_cfg.clone(),
            now,
        )
        .map_err(|e| e.to_string())?;
        let shares =
            ShareStateStore::open_partitioned(&records[2], writer.clone(), led.shares.clone())?;
        let (txns, resume) = TxnCoordinator::open_partitioned(
            &records[1],
            writer,
            led.txns.clone(),
            self.txn_cfg.clone(),
            Box::new(SeatPids(source.clone())),
        )
        .map_err(|e| e.to_string())?;
        self.groups = groups;
        self.txns = txns;
        self.shares = shares;
        Ok(resume)
    }

    /// The live records of the coordinator logs an older version kept on the Raft log
    /// (offsets, transactions), in Kafka's format.
    fn legacy_live(
        &self,
        source: &Arc<dyn CoordinatorSeat>,
        now: i64,
    ) -> Result<LegacyLive, String> {
        let logs = source
            .legacy_logs()
            .ok_or("the metadata log's coordinator state is not readable yet")?;
        if logs.offsets.is_empty() && logs.transactions.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let g = GroupCoordinator::open_replicated(
            &logs.offsets,
            nowhere(),
            0,
            self.group_cfg.clone(),
            now,
        )
        .map_err(|e| e.to_string())?;
        let (t, _) =
            TxnCoordinator::open_replicated(&logs.transactions, nowhere(), 0, self.txn_cfg.clone())
                .map_err(|e| e.to_string())?;
        Ok((g.live_payloads(), t.live_payloads()))
    }

    /// Drops the loaded coordinators; parked requests learn the coordinator moved.
    fn unload(&mut self, out: &mut Vec<Outgoing>) {
        if self.loaded.take().is_none() {
            return;
        }
        tracing::info!("coordinators unloaded");
        for (_, p) in self.parked.drain() {
            let resp = if p.join {
                join_response(
                    CJoinResp {
                        error: codes::NOT_COORDINATOR,
                        generation_id: -1,
                        ..Default::default()
                    },
                    p.version,
                )
            } else {
                sync_response(
                    CSyncResp {
                        error: codes::NOT_COORDINATOR,
                        ..Default::default()
                    },
                    p.version,
                )
            };
            out.push(Outgoing {
                reply: p.reply,
                resp,
                req: None,
            });
        }
        for (_, p) in self.parked_txn.drain() {
            out.push(Outgoing {
                reply: p.reply,
                resp: ResponseKind::EndTxn(
                    EndTxnResponse::default()
                        .with_error_code(codes::NOT_COORDINATOR)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                ),
                req: None,
            });
        }
        self.retry.clear();
        self.done_locally.clear();
        if let Ok((g, t)) = unloaded(&self.group_cfg, &self.txn_cfg, self.clock.now()) {
            self.groups = g;
            self.txns = t;
        }
        self.shares = ShareStateStore::unloaded();
    }

    /// The answer to a request this node does not serve now (`None`: serve it). Every
    /// group or transactional id it names must be coordinated here (clients send each
    /// coordinator only its own keys); otherwise all get the first key's error.
    fn route(&mut self, req: &RequestKind, version: i16) -> Option<ResponseKind> {
        let seat = self.seat.clone()?;
        match req {
            RequestKind::FindCoordinator(r) => {
                return Some(self.find_coordinator_at(&*seat, r, version))
            }
            // Any broker serves an idempotent producer's InitProducerId, as in Kafka, with
            // ids from the quorum's blocks.
            RequestKind::InitProducerId(r) if r.transactional_id.is_none() => {
                return Some(self.idempotent_producer_id(&*seat, req, version));
            }
            // Each node lists the groups and transactions it coordinates, as a Kafka broker
            // lists those of the partitions it leads.
            RequestKind::ListGroups(_) | RequestKind::ListTransactions(_) => return None,
            _ => {}
        }
        let code = request_keys(req, version)
            .into_iter()
            .map(|(log, key)| self.key_code(log, &key))
            .find(|c| *c != codes::NONE)?;
        Some(error_response(req, version, code))
    }

    /// Whether the coordinator of `key` is loaded here (NONE), loading, elsewhere or unknown.
    fn key_code(&self, log: CoordinatorLog, key: &str) -> i16 {
        let led = self.led_now.of(log);
        if led.partitions < 1 {
            return codes::COORDINATOR_NOT_AVAILABLE;
        }
        let p = partition_for(key, led.partitions);
        if self
            .loaded
            .as_ref()
            .is_some_and(|l| l.of(log).epochs.contains_key(&p))
        {
            codes::NONE
        } else if led.epochs.contains_key(&p) {
            codes::COORDINATOR_LOAD_IN_PROGRESS
        } else {
            codes::NOT_COORDINATOR
        }
    }

    /// Settles `producer_id`'s pending offsets of the groups of `__consumer_offsets`
    /// partition `partition`, if it is loaded here.
    fn group_markers(&mut self, partition: i32, producer_id: i64, commit: bool, now: i64) -> i16 {
        let loaded = self.seat.is_none()
            || self
                .loaded
                .as_ref()
                .is_some_and(|l| l.offsets.epochs.contains_key(&partition));
        if !loaded {
            return kafka_protocol::ResponseError::NotLeaderOrFollower.code();
        }
        let partitions = self.led_now.offsets.partitions;
        for g in self.groups.groups_in_txn(producer_id) {
            if self.seat.is_none() || partition_for(&g, partitions) == partition {
                self.groups.complete_txn(&g, producer_id, commit, now);
            }
        }
        codes::NONE
    }

    /// Whether the group's offsets partition is loaded here (always, with local files).
    fn group_is_local(&self, group: &str) -> bool {
        self.seat.is_none() || self.key_code(CoordinatorLog::Offsets, group) == codes::NONE
    }

    /// The coordinator epoch of a transaction's markers: its `__transaction_state`
    /// partition's leader epoch (Kafka's), fencing markers of a deposed coordinator.
    fn txn_coordinator_epoch(&self, transactional_id: &str) -> i32 {
        let Some(loaded) = self.loaded.as_ref().filter(|_| self.seat.is_some()) else {
            return COORDINATOR_EPOCH;
        };
        let p = partition_for(transactional_id, loaded.txns.partitions);
        loaded
            .txns
            .epochs
            .get(&p)
            .copied()
            .unwrap_or(COORDINATOR_EPOCH)
    }

    fn idempotent_producer_id(
        &mut self,
        seat: &dyn CoordinatorSeat,
        req: &RequestKind,
        version: i16,
    ) -> ResponseKind {
        if self.pid_block.0 >= self.pid_block.1 {
            match seat.allocate_producer_ids(PID_BLOCK) {
                Some(b) => self.pid_block = b,
                None => return error_response(req, version, codes::COORDINATOR_NOT_AVAILABLE),
            }
        }
        let pid = self.pid_block.0;
        self.pid_block.0 += 1;
        ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(0),
        )
    }

    fn token(&mut self) -> Token {
        self.next_token += 1;
        self.next_token
    }

    /// Routes a group reply to its parked request.
    fn deliver(&mut self, replies: Vec<Reply>, out: &mut Vec<Outgoing>) {
        for r in replies {
            let (token, build): (Token, Box<dyn FnOnce(i16) -> ResponseKind>) = match r {
                Reply::Join(t, j) => (t, Box::new(move |v| join_response(j, v))),
                Reply::Sync(t, sy) => (t, Box::new(move |v| sync_response(sy, v))),
            };
            if let Some(p) = self.parked.remove(&token) {
                out.push(Outgoing {
                    reply: p.reply,
                    resp: build(p.version),
                    req: None,
                });
            }
        }
    }

    fn start_job(&mut self, job: MarkerJob, now: i64) {
        // A group coordinated here settles its pending offsets directly; a group coordinated
        // elsewhere gets the marker on its `__consumer_offsets` partition, as in Kafka (its
        // coordinator completes the producer's offsets there).
        let mut group_partitions = std::collections::BTreeSet::new();
        for g in &job.groups {
            if self.group_is_local(g) {
                self.groups
                    .complete_txn(g, job.producer_id, job.commit, now);
            } else {
                group_partitions.insert(partition_for(g, self.led_now.offsets.partitions));
            }
        }
        if job.partitions.is_empty() && group_partitions.is_empty() {
            self.done_locally.push(job);
            return;
        }
        let coordinator_epoch = self.txn_coordinator_epoch(&job.transactional_id);
        let markers: Vec<TxnMarker> = job
            .partitions
            .iter()
            .cloned()
            .chain(
                group_partitions
                    .into_iter()
                    .map(|p| (OFFSETS_TOPIC.to_string(), p)),
            )
            .map(|(topic, partition)| TxnMarker {
                topic,
                partition,
                producer_id: job.producer_id,
                producer_epoch: job.producer_epoch,
                coordinator_epoch,
                commit: job.commit,
            })
            .collect();
        let done = MarkersDone {
            job: job.clone(),
            tx: self.self_tx.clone(),
            generation: self.generation,
        };
        if let Err(e) = self.markers.write_markers(markers, done) {
            tracing::warn!(
                transactional_id = %job.transactional_id,
                error = %e,
                "cannot start writing transaction markers; will retry"
            );
            self.retry.push((Instant::now() + MARKER_RETRY, job));
        }
    }

    fn markers_done(&mut self, job: MarkerJob, ok: bool, out: &mut Vec<Outgoing>) {
        if !ok {
            self.retry.push((Instant::now() + MARKER_RETRY, job));
            return;
        }
        for (token, code) in self.txns.markers_written(&job, true) {
            if let Some(p) = self.parked_txn.remove(&token) {
                out.push(Outgoing {
                    reply: p.reply,
                    resp: ResponseKind::EndTxn(
                        EndTxnResponse::default()
                            .with_error_code(code)
                            .with_producer_id(ProducerId(p.producer_id))
                            .with_producer_epoch(p.producer_epoch),
                    ),
                    req: None,
                });
            }
        }
    }

    /// Handles one request; `None` when the request was parked.
    fn dispatch(
        &mut self,
        version: i16,
        client_id: &str,
        req: &RequestKind,
        reply: &flume::Sender<ResponseKind>,
        now: i64,
        out: &mut Vec<Outgoing>,
    ) -> Option<ResponseKind> {
        Some(match req {
            RequestKind::FindCoordinator(r) => self.find_coordinator(r, version),
            RequestKind::JoinGroup(r) => {
                let token = self.token();
                let cj = CJoin {
                    group_id: r.group_id.0.to_string(),
                    member_id: r.member_id.to_string(),
                    group_instance_id: r.group_instance_id.as_ref().map(|x| x.to_string()),
                    client_id: client_id.to_string(),
                    client_host: "/127.0.0.1".to_string(),
                    session_timeout_ms: r.session_timeout_ms,
                    rebalance_timeout_ms: if version == 0 || r.rebalance_timeout_ms <= 0 {
                        r.session_timeout_ms
                    } else {
                        r.rebalance_timeout_ms
                    },
                    protocol_type: r.protocol_type.to_string(),
                    protocols: r
                        .protocols
                        .iter()
                        .map(|p| (p.name.to_string(), p.metadata.clone()))
                        .collect(),
                    require_known_member_id: version >= 4,
                };
                self.parked.insert(
                    token,
                    Parked {
                        version,
                        reply: reply.clone(),
                        join: true,
                    },
                );
                let replies = self.groups.join(token, cj, now);
                return self.immediate(token, replies, out);
            }
            RequestKind::SyncGroup(r) => {
                let token = self.token();
                let cs = CSync {
                    group_id: r.group_id.0.to_string(),
                    member_id: r.member_id.to_string(),
                    group_instance_id: r.group_instance_id.as_ref().map(|x| x.to_string()),
                    generation_id: r.generation_id,
                    protocol_type: r.protocol_type.as_ref().map(|x| x.to_string()),
                    protocol_name: r.protocol_name.as_ref().map(|x| x.to_string()),
                    assignments: r
                        .assignments
                        .iter()
                        .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                        .collect(),
                };
                self.parked.insert(
                    token,
                    Parked {
                        version,
                        reply: reply.clone(),
                        join: false,
                    },
                );
                let replies = self.groups.sync(token, cs, now);
                return self.immediate(token, replies, out);
            }
            RequestKind::Heartbeat(r) => {
                let code = self.groups.heartbeat(
                    &r.group_id.0,
                    &r.member_id,
                    r.group_instance_id.as_deref(),
                    r.generation_id,
                    now,
                );
                ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
            }
            RequestKind::LeaveGroup(r) => self.leave_group(r, version, now, out),
            RequestKind::ListGroups(r) => self.list_groups(r),
            RequestKind::DescribeGroups(r) => self.describe_groups(r, version),
            RequestKind::DeleteGroups(r) => {
                let ids: Vec<String> = r.groups_names.iter().map(|g| g.0.to_string()).collect();
                // A share group's state goes with it, as Kafka's persister deletes it.
                let shares: Vec<Vec<(uuid::Uuid, i32)>> = ids
                    .iter()
                    .map(|g| self.groups.share_initialized_partitions(g))
                    .collect();
                let codes = self.groups.delete_groups(&ids);
                for ((g, parts), c) in ids.iter().zip(&shares).zip(&codes) {
                    if *c == codes::NONE && !parts.is_empty() {
                        self.delete_shares(g, parts);
                    }
                }
                ResponseKind::DeleteGroups(
                    DeleteGroupsResponse::default().with_results(
                        r.groups_names
                            .iter()
                            .zip(codes)
                            .map(|(g, c)| {
                                DeletableGroupResult::default()
                                    .with_group_id(g.clone())
                                    .with_error_code(c)
                            })
                            .collect(),
                    ),
                )
            }
            RequestKind::OffsetCommit(r) => self.offset_commit(r, version, now),
            RequestKind::OffsetFetch(r) => self.offset_fetch(r, version),
            RequestKind::OffsetDelete(r) => self.offset_delete(r),
            RequestKind::InitProducerId(r) => self.init_producer_id(r, version, now),
            RequestKind::AddPartitionsToTxn(r) => self.add_partitions(r, version, now),
            RequestKind::AddOffsetsToTxn(r) => {
                let code = self.txns.add_offsets(
                    &r.transactional_id.0,
                    r.producer_id.0,
                    r.producer_epoch,
                    &r.group_id.0,
                    now,
                );
                ResponseKind::AddOffsetsToTxn(
                    AddOffsetsToTxnResponse::default().with_error_code(fenced(code, version, 2)),
                )
            }
            RequestKind::EndTxn(r) => {
                let token = self.token();
                match self.txns.end_txn(
                    token,
                    &r.transactional_id.0,
                    r.producer_id.0,
                    r.producer_epoch,
                    r.committed,
                ) {
                    Ok(job) => {
                        self.parked_txn.insert(
                            token,
                            ParkedTxn {
                                producer_id: r.producer_id.0,
                                producer_epoch: r.producer_epoch,
                                reply: reply.clone(),
                            },
                        );
                        self.start_job(job, now);
                        return None;
                    }
                    Err(code) => ResponseKind::EndTxn(
                        EndTxnResponse::default()
                            .with_error_code(fenced(code, version, 2))
                            .with_producer_id(r.producer_id)
                            .with_producer_epoch(r.producer_epoch),
                    ),
                }
            }
            RequestKind::TxnOffsetCommit(r) => self.txn_offset_commit(r, version, now),
            RequestKind::DescribeTransactions(r) => {
                crate::handlers::transactions::describe(&self.txns, r)
            }
            RequestKind::ListTransactions(r) => {
                crate::handlers::transactions::list(&self.txns, r, version, now)
            }
            other => error_response(other, version, codes::INVALID_REQUEST),
        })
    }

    /// Returns the reply for `token` if it was answered at once (else it stays parked); other
    /// replies the call produced join this batch's outgoing list (sent after the flush).
    fn immediate(
        &mut self,
        token: Token,
        replies: Vec<Reply>,
        out: &mut Vec<Outgoing>,
    ) -> Option<ResponseKind> {
        let mut mine = None;
        let mut others = Vec::new();
        for r in replies {
            let t = match &r {
                Reply::Join(t, _) | Reply::Sync(t, _) => *t,
            };
            if t == token {
                mine = Some(r);
            } else {
                others.push(r);
            }
        }
        self.deliver(others, out);
        let r = mine?;
        let p = self.parked.remove(&token)?;
        Some(match r {
            Reply::Join(_, j) => join_response(j, p.version),
            Reply::Sync(_, sy) => sync_response(sy, p.version),
        })
    }

    fn consumer_heartbeat(
        &mut self,
        r: &ConsumerGroupHeartbeatRequest,
        version: i16,
        client_id: &str,
        topics: &TopicView,
        now: i64,
        out: &mut Vec<Outgoing>,
    ) -> ResponseKind {
        let owned = r.topic_partitions.as_ref().map(|tps| {
            let mut p = Parts::new();
            for tp in tps {
                p.entry(tp.topic_id)
                    .or_default()
                    .extend(tp.partitions.iter().copied());
            }
            p
        });
        let req = CgHeartbeat {
            group_id: r.group_id.0.to_string(),
            member_id: r.member_id.to_string(),
            member_epoch: r.member_epoch,
            instance_id: r.instance_id.as_ref().map(|x| x.to_string()),
            rack_id: r.rack_id.as_ref().map(|x| x.to_string()),
            rebalance_timeout_ms: r.rebalance_timeout_ms,
            subscribed_topic_names: r
                .subscribed_topic_names
                .as_ref()
                .map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
            subscribed_topic_regex: r.subscribed_topic_regex.as_ref().map(|x| x.to_string()),
            server_assignor: r.server_assignor.as_ref().map(|x| x.to_string()),
            owned,
            client_id: client_id.to_string(),
            client_host: "/127.0.0.1".to_string(),
            api_version: version,
        };
        let (c, replies) = self.groups.consumer_heartbeat(&req, topics, now);
        // Classic JoinGroup / SyncGroup calls parked when the group was upgraded.
        self.deliver(replies, out);
        let assignment = c.assignment.map(|a| {
            consumer_group_heartbeat_response::Assignment::default().with_topic_partitions(
                a.into_iter()
                    .map(|(id, ps)| {
                        consumer_group_heartbeat_response::TopicPartitions::default()
                            .with_topic_id(id)
                            .with_partitions(ps.into_iter().collect())
                    })
                    .collect(),
            )
        });
        ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(c.error)
                .with_error_message(c.message.as_deref().map(s))
                .with_member_id(c.member_id.as_deref().map(s))
                .with_member_epoch(c.member_epoch)
                .with_heartbeat_interval_ms(c.heartbeat_interval_ms)
                .with_assignment(assignment),
        )
    }

    fn consumer_describe(
        &mut self,
        r: &ConsumerGroupDescribeRequest,
        topics: &TopicView,
    ) -> ResponseKind {
        use consumer_group_describe_response as d;
        let names: HashMap<uuid::Uuid, &String> =
            topics.iter().map(|(n, (id, _))| (*id, n)).collect();
        let assignment = |p: &Parts| {
            d::Assignment::default().with_topic_partitions(
                p.iter()
                    .map(|(id, ps)| {
                        d::TopicPartitions::default()
                            .with_topic_id(*id)
                            .with_topic_name(TopicName(s(names
                                .get(id)
                                .map(|n| n.as_str())
                                .unwrap_or_default())))
                            .with_partitions(ps.iter().copied().collect())
                    })
                    .collect(),
            )
        };
        let groups = r
            .group_ids
            .iter()
            .map(|id| match self.groups.consumer_describe(&id.0) {
                Ok((g, state, assignor)) => d::DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_group_state(s(state))
                    .with_group_epoch(g.epoch)
                    .with_assignment_epoch(g.target_epoch)
                    .with_assignor_name(s(assignor))
                    .with_authorized_operations(i32::MIN)
                    .with_members(
                        g.members
                            .values()
                            .map(|m| {
                                d::Member::default()
                                    .with_member_id(s(&m.id))
                                    .with_instance_id(opt_s(m.instance_id.as_ref()))
                                    .with_rack_id(opt_s(m.rack_id.as_ref()))
                                    .with_member_epoch(m.epoch)
                                    .with_client_id(s(&m.client_id))
                                    .with_client_host(s(&m.client_host))
                                    .with_subscribed_topic_names(
                                        m.subscribed.iter().map(|t| TopicName(s(t))).collect(),
                                    )
                                    .with_subscribed_topic_regex(opt_s(m.regex.as_ref()))
                                    .with_assignment(assignment(&m.assigned))
                                    .with_target_assignment(assignment(
                                        &g.target.get(&m.id).cloned().unwrap_or_default(),
                                    ))
                                    .with_member_type(if m.classic.is_some() { 0 } else { 1 })
                            })
                            .collect(),
                    ),
                Err(code) => {
                    let msg = match self.groups.group_type(&id.0) {
                        Some(_) => format!("Group {} is not a consumer group.", &*id.0),
                        None => format!("Group {} not found.", &*id.0),
                    };
                    d::DescribedGroup::default()
                        .with_group_id(id.clone())
                        .with_error_code(code)
                        .with_error_message(Some(s(&msg)))
                        .with_group_state(s("Dead"))
                        .with_authorized_operations(i32::MIN)
                }
            })
            .collect();
        ResponseKind::ConsumerGroupDescribe(
            ConsumerGroupDescribeResponse::default().with_groups(groups),
        )
    }

    /// FindCoordinator with local files: this node coordinates every key.
    fn find_coordinator(&mut self, r: &FindCoordinatorRequest, version: i16) -> ResponseKind {
        let here = (self.node_id, self.host.clone(), self.port);
        find_coordinator_response(r, version, |_| Ok(here.clone()))
    }

    /// FindCoordinator naming, per key, the leader of its coordinator partition.
    fn find_coordinator_at(
        &self,
        seat: &dyn CoordinatorSeat,
        r: &FindCoordinatorRequest,
        version: i16,
    ) -> ResponseKind {
        let log = if r.key_type == 1 {
            CoordinatorLog::Transactions
        } else {
            CoordinatorLog::Offsets
        };
        find_coordinator_response(r, version, |key| {
            match if r.key_type == 2 {
                seat.locate_mirror()
            } else {
                seat.locate(log, key)
            } {
                Located::Here => Ok((self.node_id, self.host.clone(), self.port)),
                Located::Elsewhere {
                    node_id,
                    host,
                    port,
                } => Ok((node_id, host, port)),
                Located::Unknown => Err(codes::COORDINATOR_NOT_AVAILABLE),
            }
        })
    }

    fn leave_group(
        &mut self,
        r: &LeaveGroupRequest,
        version: i16,
        now: i64,
        out: &mut Vec<Outgoing>,
    ) -> ResponseKind {
        let members: Vec<LeavingMember> = if version >= 3 {
            r.members
                .iter()
                .map(|m| LeavingMember {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.as_ref().map(|x| x.to_string()),
                })
                .collect()
        } else {
            vec![LeavingMember {
                member_id: r.member_id.to_string(),
                group_instance_id: None,
            }]
        };
        let (result, replies) = self.groups.leave(&r.group_id.0, &members, now);
        self.deliver(replies, out);
        let mut resp = LeaveGroupResponse::default();
        match result {
            Err(code) => resp.error_code = code,
            Ok(codes_) => {
                if version >= 3 {
                    resp.members = r
                        .members
                        .iter()
                        .zip(codes_)
                        .map(|(m, c)| {
                            MemberResponse::default()
                                .with_member_id(m.member_id.clone())
                                .with_group_instance_id(m.group_instance_id.clone())
                                .with_error_code(c)
                        })
                        .collect();
                } else {
                    resp.error_code = codes_.first().copied().unwrap_or(codes::NONE);
                }
            }
        }
        ResponseKind::LeaveGroup(resp)
    }

    fn list_groups(&mut self, r: &ListGroupsRequest) -> ResponseKind {
        let states: Vec<String> = r.states_filter.iter().map(|x| x.to_string()).collect();
        let types: Vec<String> = r.types_filter.iter().map(|x| x.to_string()).collect();
        let groups = self
            .groups
            .list_groups(&states, &types)
            .into_iter()
            .map(|g| {
                ListedGroup::default()
                    .with_group_id(GroupId(s(&g.group_id)))
                    .with_protocol_type(s(&g.protocol_type))
                    .with_group_state(s(g.state_name))
                    .with_group_type(s(g.group_type))
            })
            .collect();
        ResponseKind::ListGroups(ListGroupsResponse::default().with_groups(groups))
    }

    fn describe_groups(&mut self, r: &DescribeGroupsRequest, version: i16) -> ResponseKind {
        let groups = r
            .groups
            .iter()
            .map(|id| match self.groups.describe(&id.0) {
                Some(d) => DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_group_state(s(d.state.as_str()))
                    .with_protocol_type(s(&d.protocol_type))
                    .with_protocol_data(s(&d.protocol_name))
                    .with_authorized_operations(i32::MIN)
                    .with_members(
                        d.members
                            .into_iter()
                            .map(|m| {
                                DescribedGroupMember::default()
                                    .with_member_id(s(&m.member_id))
                                    .with_group_instance_id(opt_s(m.group_instance_id.as_ref()))
                                    .with_client_id(s(&m.client_id))
                                    .with_client_host(s(&m.client_host))
                                    .with_member_metadata(m.metadata)
                                    .with_member_assignment(m.assignment)
                            })
                            .collect(),
                    ),
                None => {
                    let mut g = DescribedGroup::default()
                        .with_group_id(id.clone())
                        .with_group_state(s("Dead"))
                        .with_authorized_operations(i32::MIN);
                    if version >= 6 {
                        g.error_code = codes::GROUP_ID_NOT_FOUND;
                        g.error_message = Some(s(&format!("Group {} not found.", &*id.0)));
                    }
                    g
                }
            })
            .collect();
        ResponseKind::DescribeGroups(DescribeGroupsResponse::default().with_groups(groups))
    }

    fn offset_commit(&mut self, r: &OffsetCommitRequest, version: i16, now: i64) -> ResponseKind {
        let ctx = CommitContext {
            group_id: r.group_id.0.to_string(),
            member_id: r.member_id.to_string(),
            group_instance_id: r.group_instance_id.as_ref().map(|x| x.to_string()),
            generation_id: r.generation_id_or_member_epoch,
            api_version: version,
        };
        let offsets: Vec<OffsetToCommit> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| OffsetToCommit {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                })
            })
            .collect();
        let codes_ = match self.groups.commit_offsets(&ctx, &offsets, now) {
            Ok(c) => c,
            Err(code) => vec![code; offsets.len()],
        };
        let mut it = codes_.into_iter();
        ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(it.next().unwrap_or(codes::NONE))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        )
    }

    fn txn_offset_commit(
        &mut self,
        r: &TxnOffsetCommitRequest,
        version: i16,
        now: i64,
    ) -> ResponseKind {
        // Kafka fences zombies when appending to the offsets partition (producer epoch check);
        // the transaction coordinator holds the same facts here.
        let fence = match self.txns.state(&r.transactional_id.0) {
            None => Some(codes::INVALID_PRODUCER_ID_MAPPING),
            Some((pid, _, _)) if pid != r.producer_id.0 => Some(codes::INVALID_PRODUCER_ID_MAPPING),
            Some((_, epoch, _)) if epoch != r.producer_epoch => {
                Some(fenced(codes::PRODUCER_FENCED, version, 3))
            }
            Some(_) => None,
        };
        if let Some(code) = fence {
            let req = RequestKind::TxnOffsetCommit(r.clone());
            return error_response(&req, version, code);
        }
        let ctx = CommitContext {
            group_id: r.group_id.0.to_string(),
            member_id: r.member_id.to_string(),
            group_instance_id: r.group_instance_id.as_ref().map(|x| x.to_string()),
            generation_id: r.generation_id,
            api_version: 0,
        };
        let offsets: Vec<OffsetToCommit> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| OffsetToCommit {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                })
            })
            .collect();
        let codes_ = match self
            .groups
            .txn_commit_offsets(&ctx, r.producer_id.0, &offsets, now)
        {
            Ok(c) => c,
            Err(code) => vec![code; offsets.len()],
        };
        let mut it = codes_.into_iter();
        ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        TxnOffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        TxnOffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(it.next().unwrap_or(codes::NONE))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        )
    }

    fn offset_fetch(&mut self, r: &OffsetFetchRequest, version: i16) -> ResponseKind {
        if version >= 8 {
            let groups = r
                .groups
                .iter()
                .map(|g| {
                    if let Err(code) = self.groups.validate_fetch(
                        &g.group_id.0,
                        g.member_id.as_deref(),
                        g.member_epoch,
                    ) {
                        return OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(code);
                    }
                    let topics: Option<Vec<(String, Vec<i32>)>> = g.topics.as_ref().map(|ts| {
                        ts.iter()
                            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                            .collect()
                    });
                    let fetched = self.groups.fetch_offsets(
                        &g.group_id.0,
                        topics.as_deref(),
                        r.require_stable,
                    );
                    let mut by_topic: Vec<OffsetFetchResponseTopics> = Vec::new();
                    for f in fetched {
                        let part = OffsetFetchResponsePartitions::default()
                            .with_partition_index(f.partition)
                            .with_committed_offset(f.offset)
                            .with_committed_leader_epoch(f.leader_epoch)
                            .with_metadata(f.metadata.as_ref().map(|m| s(m)))
                            .with_error_code(f.error);
                        match by_topic.iter_mut().find(|t| *t.name.0 == *f.topic) {
                            Some(t) => t.partitions.push(part),
                            None => by_topic.push(
                                OffsetFetchResponseTopics::default()
                                    .with_name(TopicName(s(&f.topic)))
                                    .with_partitions(vec![part]),
                            ),
                        }
                    }
                    OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_topics(by_topic)
                })
                .collect();
            return ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_groups(groups));
        }
        let topics: Option<Vec<(String, Vec<i32>)>> = r.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                .collect()
        });
        let fetched = self.groups.fetch_offsets(
            &r.group_id.0,
            topics.as_deref(),
            version >= 7 && r.require_stable,
        );
        let mut by_topic: Vec<OffsetFetchResponseTopic> = Vec::new();
        for f in fetched {
            let part = OffsetFetchResponsePartition::default()
                .with_partition_index(f.partition)
                .with_committed_offset(f.offset)
                .with_committed_leader_epoch(f.leader_epoch)
                .with_metadata(f.metadata.as_ref().map(|m| s(m)))
                .with_error_code(f.error);
            match by_topic.iter_mut().find(|t| *t.name.0 == *f.topic) {
                Some(t) => t.partitions.push(part),
                None => by_topic.push(
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(s(&f.topic)))
                        .with_partitions(vec![part]),
                ),
            }
        }
        ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_topics(by_topic))
    }

    fn offset_delete(&mut self, r: &OffsetDeleteRequest) -> ResponseKind {
        let topics: Vec<(String, Vec<i32>)> = r
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.0.to_string(),
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect();
        let mut resp = OffsetDeleteResponse::default();
        match self.groups.delete_offsets(&r.group_id.0, &topics) {
            Err(code) => resp.error_code = code,
            Ok(results) => {
                for (topic, partition, code) in results {
                    let part = OffsetDeleteResponsePartition::default()
                        .with_partition_index(partition)
                        .with_error_code(code);
                    match resp.topics.iter_mut().find(|t| *t.name.0 == *topic) {
                        Some(t) => t.partitions.push(part),
                        None => resp.topics.push(
                            OffsetDeleteResponseTopic::default()
                                .with_name(TopicName(s(&topic)))
                                .with_partitions(vec![part]),
                        ),
                    }
                }
            }
        }
        ResponseKind::OffsetDelete(resp)
    }

    fn init_producer_id(
        &mut self,
        r: &InitProducerIdRequest,
        version: i16,
        now: i64,
    ) -> ResponseKind {
        let expected = if version >= 3 && r.producer_id.0 >= 0 {
            Some((r.producer_id.0, r.producer_epoch))
        } else {
            None
        };
        let (result, job) = self.txns.init_producer_id(
            r.transactional_id.as_ref().map(|t| &*t.0),
            r.transaction_timeout_ms,
            expected,
            now,
        );
        if let Some(job) = job {
            self.start_job(job, now);
        }
        let resp = match result {
            Ok((pid, epoch)) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch),
            Err(code) => InitProducerIdResponse::default()
                .with_error_code(fenced(code, version, 4))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        };
        ResponseKind::InitProducerId(resp)
    }

    fn add_partitions(
        &mut self,
        r: &AddPartitionsToTxnRequest,
        version: i16,
        now: i64,
    ) -> ResponseKind {
        let topic_results = |topics: &[AddPartitionsToTxnTopic], codes_: &[i16]| {
            let mut it = codes_.iter().copied();
            crate::handlers::txn::topic_results(topics, |_, _| it.next().unwrap_or(codes::NONE))
        };
        let flat = |topics: &[AddPartitionsToTxnTopic]| -> Vec<(String, i32)> {
            topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
                .collect()
        };
        if version <= 3 {
            let parts = flat(&r.v3_and_below_topics);
            let code = self.txns.add_partitions(
                &r.v3_and_below_transactional_id.0,
                r.v3_and_below_producer_id.0,
                r.v3_and_below_producer_epoch,
                &parts,
                now,
            );
            let code = fenced(code, version, 2);
            return ResponseKind::AddPartitionsToTxn(
                AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(
                    topic_results(&r.v3_and_below_topics, &vec![code; parts.len()]),
                ),
            );
        }
        let results = r
            .transactions
            .iter()
            .map(|t| {
                let parts = flat(&t.topics);
                let codes_ = if t.verify_only {
                    self.txns.verify_partitions(
                        &t.transactional_id.0,
                        t.producer_id.0,
                        t.producer_epoch,
                        &parts,
                    )
                } else {
                    let c = self.txns.add_partitions(
                        &t.transactional_id.0,
                        t.producer_id.0,
                        t.producer_epoch,
                        &parts,
                        now,
                    );
                    vec![c; parts.len()]
                };
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(t.transactional_id.clone())
                    .with_topic_results(topic_results(&t.topics, &codes_))
            })
            .collect();
        ResponseKind::AddPartitionsToTxn(
            AddPartitionsToTxnResponse::default().with_results_by_transaction(results),
        )
    }
}

/// Old clients do not know PRODUCER_FENCED; Kafka answers INVALID_PRODUCER_EPOCH below
/// `first_version_with_fenced`.
/// A FindCoordinator answer with each key's coordinator from `locate` (node, host, port) or
/// its error.
fn find_coordinator_response(
    r: &FindCoordinatorRequest,
    version: i16,
    locate: impl Fn(&str) -> Result<(i32, String, i32), i16>,
) -> ResponseKind {
    let answer = |key: &StrBytes| -> Result<(i32, String, i32), (i16, Option<StrBytes>)> {
        if !(0..=2).contains(&r.key_type) {
            return Err((
                codes::INVALID_REQUEST,
                Some(s("unknown coordinator key type")),
            ));
        }
        if r.key_type == 1 && key.is_empty() {
            return Err((codes::INVALID_REQUEST, Some(s("empty transactional id"))));
        }
        locate(key).map_err(|code| (code, None))
    };
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        resp.coordinators = r
            .coordinator_keys
            .iter()
            .map(|k| match answer(k) {
                Ok((node_id, host, port)) => Coordinator::default()
                    .with_key(k.clone())
                    .with_node_id(BrokerId(node_id))
                    .with_host(s(&host))
                    .with_port(port),
                Err((code, msg)) => Coordinator::default()
                    .with_key(k.clone())
                    .with_node_id(BrokerId(-1))
                    .with_host(s(""))
                    .with_port(-1)
                    .with_error_code(code)
                    .with_error_message(msg),
            })
            .collect();
    } else {
        match answer(&r.key) {
            Ok((node_id, host, port)) => {
                resp.node_id = BrokerId(node_id);
                resp.host = s(&host);
                resp.port = port;
            }
            Err((code, msg)) => {
                resp.error_code = code;
                resp.error_message = msg;
                resp.node_id = BrokerId(-1);
                resp.host = s("");
                resp.port = -1;
            }
        }
    }
    ResponseKind::FindCoordinator(resp)
}

/// The group and transactional ids a coordinator request names, with the log coordinating
/// each (FindCoordinator, ListGroups, ListTransactions and an idempotent InitProducerId name
/// none).
fn request_keys(req: &RequestKind, version: i16) -> Vec<(CoordinatorLog, String)> {
    let g = |id: &str| (CoordinatorLog::Offsets, id.to_string());
    let t = |id: &str| (CoordinatorLog::Transactions, id.to_string());
    match req {
        RequestKind::JoinGroup(r) => vec![g(&r.group_id)],
        RequestKind::SyncGroup(r) => vec![g(&r.group_id)],
        RequestKind::Heartbeat(r) => vec![g(&r.group_id)],
        RequestKind::LeaveGroup(r) => vec![g(&r.group_id)],
        RequestKind::OffsetCommit(r) => vec![g(&r.group_id)],
        RequestKind::OffsetDelete(r) => vec![g(&r.group_id)],
        RequestKind::TxnOffsetCommit(r) => vec![g(&r.group_id)],
        RequestKind::OffsetFetch(r) if version >= 8 => {
            r.groups.iter().map(|x| g(&x.group_id)).collect()
        }
        RequestKind::OffsetFetch(r) => vec![g(&r.group_id)],
        RequestKind::DescribeGroups(r) => r.groups.iter().map(|x| g(x)).collect(),
        RequestKind::DeleteGroups(r) => r.groups_names.iter().map(|x| g(x)).collect(),
        RequestKind::ConsumerGroupHeartbeat(r) => vec![g(&r.group_id)],
        RequestKind::ConsumerGroupDescribe(r) => r.group_ids.iter().map(|x| g(x)).collect(),
        RequestKind::ShareGroupHeartbeat(r) => vec![g(&r.group_id)],
        RequestKind::ShareGroupDescribe(r) => r.group_ids.iter().map(|x| g(x)).collect(),
        RequestKind::DescribeShareGroupOffsets(r) => {
            r.groups.iter().map(|x| g(&x.group_id)).collect()
        }
        RequestKind::AlterShareGroupOffsets(r) => vec![g(&r.group_id)],
        RequestKind::DeleteShareGroupOffsets(r) => vec![g(&r.group_id)],
        RequestKind::InitProducerId(r) => r.transactional_id.iter().map(|x| t(x)).collect(),
        RequestKind::AddPartitionsToTxn(r) if version >= 4 => r
            .transactions
            .iter()
            .map(|x| t(&x.transactional_id))
            .collect(),
        RequestKind::AddPartitionsToTxn(r) => vec![t(&r.v3_and_below_transactional_id)],
        RequestKind::AddOffsetsToTxn(r) => vec![t(&r.transactional_id)],
        RequestKind::EndTxn(r) => vec![t(&r.transactional_id)],
        RequestKind::DescribeTransactions(r) => r.transactional_ids.iter().map(|x| t(x)).collect(),
        RequestKind::WriteTxnMarkers(_) => Vec::new(),
        _ => Vec::new(),
    }
}

fn fenced(code: i16, version: i16, first_version_with_fenced: i16) -> i16 {
    if code == codes::PRODUCER_FENCED && version < first_version_with_fenced {
        codes::INVALID_PRODUCER_EPOCH
    } else {
        code
    }
}

fn join_response(j: CJoinResp, version: i16) -> ResponseKind {
    // Before v7 the protocol name is a non-nullable string.
    let name = match (j.protocol_name, version < 7) {
        (None, true) => Some(s("")),
        (n, _) => n.map(|x| s(&x)),
    };
    ResponseKind::JoinGroup(
        JoinGroupResponse::default()
            .with_error_code(j.error)
            .with_generation_id(j.generation_id)
            .with_protocol_type(j.protocol_type.map(|x| s(&x)))
            .with_protocol_name(name)
            .with_leader(s(&j.leader))
            .with_member_id(s(&j.member_id))
            .with_members(
                j.members
                    .into_iter()
                    .map(|m| {
                        JoinGroupResponseMember::default()
                            .with_member_id(s(&m.member_id))
                            .with_group_instance_id(opt_s(m.group_instance_id.as_ref()))
                            .with_metadata(m.metadata)
                    })
                    .collect(),
            ),
    )
}

fn sync_response(r: CSyncResp, _version: i16) -> ResponseKind {
    ResponseKind::SyncGroup(
        SyncGroupResponse::default()
            .with_error_code(r.error)
            .with_protocol_type(r.protocol_type.map(|x| s(&x)))
            .with_protocol_name(r.protocol_name.map(|x| s(&x)))
            .with_assignment(r.assignment),
    )
}

/// A share group API (76, 77, 83-87) answered `code` without reaching a coordinator.
pub fn share_refused(req: &RequestKind, code: i16) -> ResponseKind {
    share::share_error_response(req, code).expect("a share group API")
}

/// The response to `req` with `code` at every error field (used when the coordinator is
/// unavailable, a log flush failed, or the API is not a coordinator API).
pub fn error_response(req: &RequestKind, version: i16, code: i16) -> ResponseKind {
    match req {
        RequestKind::FindCoordinator(r) => {
            let mut resp = FindCoordinatorResponse::default();
            if version >= 4 {
                resp.coordinators = r
                    .coordinator_keys
                    .iter()
                    .map(|k| {
                        Coordinator::default()
                            .with_key(k.clone())
                            .with_node_id(BrokerId(-1))
                            .with_port(-1)
                            .with_error_code(code)
                    })
                    .collect();
            } else {
                resp.error_code = code;
                resp.node_id = BrokerId(-1);
                resp.port = -1;
            }
            ResponseKind::FindCoordinator(resp)
        }
        RequestKind::JoinGroup(r) => join_response(
            CJoinResp {
                error: code,
                generation_id: -1,
                member_id: r.member_id.to_string(),
                ..Default::default()
            },
            version,
        ),
        RequestKind::SyncGroup(_) => sync_response(
            CSyncResp {
                error: code,
                ..Default::default()
            },
            version,
        ),
        RequestKind::Heartbeat(_) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        RequestKind::LeaveGroup(_) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        RequestKind::ListGroups(_) => {
            ResponseKind::ListGroups(ListGroupsResponse::default().with_error_code(code))
        }
        RequestKind::DescribeGroups(r) => ResponseKind::DescribeGroups(
            DescribeGroupsResponse::default().with_groups(
                r.groups
                    .iter()
                    .map(|g| {
                        DescribedGroup::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                            .with_group_state(s("Dead"))
                    })
                    .collect(),
            ),
        ),
        RequestKind::DeleteGroups(r) => ResponseKind::DeleteGroups(
            DeleteGroupsResponse::default().with_results(
                r.groups_names
                    .iter()
                    .map(|g| {
                        DeletableGroupResult::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::TxnOffsetCommit(r) => ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        TxnOffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        TxnOffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::OffsetFetch(r) => {
            if version >= 8 {
                ResponseKind::OffsetFetch(
                    OffsetFetchResponse::default().with_groups(
                        r.groups
                            .iter()
                            .map(|g| {
                                OffsetFetchResponseGroup::default()
                                    .with_group_id(g.group_id.clone())
                                    .with_error_code(code)
                            })
                            .collect(),
                    ),
                )
            } else {
                ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_error_code(code))
            }
        }
        RequestKind::OffsetDelete(_) => {
            ResponseKind::OffsetDelete(OffsetDeleteResponse::default().with_error_code(code))
        }
        RequestKind::InitProducerId(_) => ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        RequestKind::AddPartitionsToTxn(r) => {
            let per_topic = |topics: &[AddPartitionsToTxnTopic]| {
                crate::handlers::txn::topic_results(topics, |_, _| code)
            };
            let mut resp = AddPartitionsToTxnResponse::default();
            if version <= 3 {
                resp.results_by_topic_v3_and_below = per_topic(&r.v3_and_below_topics);
            } else {
                resp.error_code = code;
            }
            ResponseKind::AddPartitionsToTxn(resp)
        }
        RequestKind::AddOffsetsToTxn(_) => {
            ResponseKind::AddOffsetsToTxn(AddOffsetsToTxnResponse::default().with_error_code(code))
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(
            EndTxnResponse::default()
                .with_error_code(code)
                .with_producer_id(r.producer_id)
                .with_producer_epoch(r.producer_epoch),
        ),
        RequestKind::ConsumerGroupHeartbeat(_) => ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default().with_error_code(code),
        ),
        RequestKind::ConsumerGroupDescribe(r) => ResponseKind::ConsumerGroupDescribe(
            ConsumerGroupDescribeResponse::default().with_groups(
                r.group_ids
                    .iter()
                    .map(|g| {
                        consumer_group_describe_response::DescribedGroup::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::DescribeTransactions(r) => ResponseKind::DescribeTransactions(
            DescribeTransactionsResponse::default().with_transaction_states(
                r.transactional_ids
                    .iter()
                    .map(|id| {
                        describe_transactions_response::TransactionState::default()
                            .with_error_code(code)
                            .with_transactional_id(id.clone())
                    })
                    .collect(),
            ),
        ),
        RequestKind::ListTransactions(_) => ResponseKind::ListTransactions(
            ListTransactionsResponse::default().with_error_code(code),
        ),
        other => share::share_error_response(other, code).unwrap_or_else(|| {
            // Not a coordinator API: the broker should never route it here.
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use std::sync::Mutex;

    #[derive(Default)]
    struct RecordingSink {
        calls: Mutex<Vec<Vec<TxnMarker>>>,
        fail_first: Mutex<bool>,
    }

    impl MarkerSink for RecordingSink {
        fn write_markers(&self, markers: Vec<TxnMarker>, done: MarkersDone) -> Result<(), String> {
            let fail = std::mem::replace(&mut *self.fail_first.lock().unwrap(), false);
            self.calls.lock().unwrap().push(markers);
            let result = if fail {
                Err("partition offline".to_string())
            } else {
                Ok(())
            };
            // Reported from elsewhere, as a core would: never into the coordinator's own
            // queue from its own thread.
            std::thread::spawn(move || futures_lite::future::block_on(done.report(result)));
            Ok(())
        }
    }

    fn start(dir: &Path, sink: Arc<RecordingSink>) -> GroupsService {
        start_delayed(dir, sink, 0)
    }

    fn start_delayed(dir: &Path, sink: Arc<RecordingSink>, delay_ms: i32) -> GroupsService {
        GroupsService::start_with(
            dir,
            7,
            "localhost".into(),
            9092,
            sink,
            GroupConfig {
                initial_rebalance_delay_ms: delay_ms,
                ..GroupConfig::default()
            },
            TxnConfig::default(),
        )
        .unwrap()
    }

    fn call(svc: &GroupsService, key: ApiKey, version: i16, req: RequestKind) -> ResponseKind {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_client_id(Some(s("test-client")));
        block_on(svc.handle(key, version, &header, req))
    }

    #[test]
    fn find_coordinator_answers_every_batched_key_with_this_node() {
        let dir = tempfile::tempdir().unwrap();
        let svc = start(dir.path(), Arc::default());
        let req = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![s("g1"), s("g2")]);
        let ResponseKind::FindCoordinator(r) = call(
            &svc,
            ApiKey::FindCoordinator,
            4,
            RequestKind::FindCoordinator(req),
        ) else {
            panic!("wrong response kind")
        };
        assert_eq!(r.coordinators.len(), 2);
        for c in &r.coordinators {
            assert_eq!((c.node_id.0, c.port, c.error_code), (7, 9092, 0));
            assert_eq!(&*c.host, "localhost");
        }
        let req = FindCoordinatorRequest::default()
            .with_key(s("tx"))
            .with_key_type(1);
        let ResponseKind::FindCoordinator(r) = call(
            &svc,
            ApiKey::FindCoordinator,
            3,
            RequestKind::FindCoordinator(req),
        ) else {
            panic!("wrong response kind")
        };
        assert_eq!((r.node_id.0, r.error_code), (7, 0));
        svc.shutdown();
    }

    fn join(svc: &GroupsService, member: &str) -> JoinGroupResponse {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(s(member))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(b"\0\0\0\0\0\0"))]);
        match call(svc, ApiKey::JoinGroup, 9, RequestKind::JoinGroup(req)) {
            ResponseKind::JoinGroup(r) => r,
            _ => panic!("wrong response kind"),
        }
    }

    fn sync(
        svc: &GroupsService,
        member: &str,
        generation: i32,
        assign: Vec<(String, &'static [u8])>,
    ) -> SyncGroupResponse {
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")))
            .with_assignments(
                assign
                    .into_iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(&m))
                            .with_assignment(Bytes::from_static(a))
                    })
                    .collect(),
            );
        match call(svc, ApiKey::SyncGroup, 5, RequestKind::SyncGroup(req)) {
            ResponseKind::SyncGroup(r) => r,
            _ => panic!("wrong response kind"),
        }
    }

    use bytes::Bytes;

    #[test]
    fn two_members_complete_a_rebalance_through_the_service() {
        let dir = tempfile::tempdir().unwrap();
        // The initial rebalance delay lets both members into the first generation.
        let svc = start_delayed(dir.path(), Arc::default(), 500);
        let a = join(&svc, "");
        assert_eq!(a.error_code, codes::MEMBER_ID_REQUIRED);
        let b = join(&svc, "");
        let (a_id, b_id) = (a.member_id.to_string(), b.member_id.to_string());
        // Both real joins park until the barrier opens; run them on two threads.
        let (s1, s2) = (svc.clone(), svc.clone());
        let (a1, b1) = (a_id.clone(), b_id.clone());
        let ta = std::thread::spawn(move || join(&s1, &a1));
        std::thread::sleep(Duration::from_millis(20));
        let tb = std::thread::spawn(move || join(&s2, &b1));
        let (ja, jb) = (ta.join().unwrap(), tb.join().unwrap());
        assert_eq!((ja.error_code, jb.error_code), (0, 0));
        assert_eq!(ja.generation_id, jb.generation_id);
        let (leader, follower) = if ja.leader == ja.member_id {
            (ja, jb)
        } else {
            (jb, ja)
        };
        assert_eq!(leader.members.len(), 2);
        let gen = leader.generation_id;
        let f_id = follower.member_id.to_string();
        let s3 = svc.clone();
        let f2 = f_id.clone();
        let tf = std::thread::spawn(move || sync(&s3, &f2, gen, vec![]));
        std::thread::sleep(Duration::from_millis(20));
        let ls = sync(
            &svc,
            &leader.member_id,
            gen,
            vec![(leader.member_id.to_string(), b"L"), (f_id, b"F")],
        );
        let fs = tf.join().unwrap();
        assert_eq!(&ls.assignment[..], b"L");
        assert_eq!(&fs.assignment[..], b"F");
        let ResponseKind::DescribeGroups(d) = call(
            &svc,
            ApiKey::DescribeGroups,
            5,
            RequestKind::DescribeGroups(
                DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g"))]),
            ),
        ) else {
            panic!()
        };
        assert_eq!(&*d.groups[0].group_state, "Stable");
        assert_eq!(d.groups[0].members.len(), 2);
        svc.shutdown();
    }

    fn commit(svc: &GroupsService, group: &str, offset: i64) -> OffsetCommitResponse {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(2)
                    .with_committed_offset(offset)
                    .with_committed_leader_epoch(4)])]);
        match call(svc, ApiKey::OffsetCommit, 9, RequestKind::OffsetCommit(req)) {
            ResponseKind::OffsetCommit(r) => r,
            _ => panic!(),
        }
    }

    #[test]
    fn acknowledged_offset_commit_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let svc = start(dir.path(), Arc::default());
            let r = commit(&svc, "grp", 1234);
            assert_eq!(r.topics[0].partitions[0].error_code, 0);
            // No shutdown: the acknowledgement alone must imply durability.
        }
        let svc = start(dir.path(), Arc::default());
        let req = OffsetFetchRequest::default().with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("grp")))
                .with_topics(None),
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("other")))
                .with_topics(None),
        ]);
        let ResponseKind::OffsetFetch(r) =
            call(&svc, ApiKey::OffsetFetch, 9, RequestKind::OffsetFetch(req))
        else {
            panic!()
        };
        assert_eq!(r.groups.len(), 2);
        let p = &r.groups[0].topics[0].partitions[0];
        assert_eq!(
            (
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch
            ),
            (2, 1234, 4)
        );
        assert!(r.groups[1].topics.is_empty());
        svc.shutdown();
    }

    fn init_pid(svc: &GroupsService, txn: Option<&str>) -> InitProducerIdResponse {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(txn.map(|t| TransactionalId(s(t))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        match call(
            svc,
            ApiKey::InitProducerId,
            5,
            RequestKind::InitProducerId(req),
        ) {
            ResponseKind::InitProducerId(r) => r,
            _ => panic!(),
        }
    }

    #[test]
    fn producer_ids_are_unique_across_service_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2 {
            let svc = start(dir.path(), Arc::default());
            for _ in 0..5 {
                let r = init_pid(&svc, None);
                assert_eq!(r.error_code, 0);
                assert!(seen.insert(r.producer_id.0));
            }
            svc.shutdown();
        }
    }

    #[test]
    fn end_txn_writes_markers_to_all_partitions_before_answering() {
        let dir = tempfile::tempdir().unwrap();
        let sink = Arc::new(RecordingSink::default());
        *sink.fail_first.lock().unwrap() = true;
        let svc = start(dir.path(), sink.clone());
        let r = init_pid(&svc, Some("tx"));
        assert_eq!(r.error_code, 0);
        let (pid, epoch) = (r.producer_id, r.producer_epoch);
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s("tx")))
            .with_v3_and_below_producer_id(pid)
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s("a")))
                    .with_partitions(vec![0, 1]),
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s("b")))
                    .with_partitions(vec![5]),
            ]);
        let ResponseKind::AddPartitionsToTxn(r) = call(
            &svc,
            ApiKey::AddPartitionsToTxn,
            3,
            RequestKind::AddPartitionsToTxn(req),
        ) else {
            panic!()
        };
        assert!(r.results_by_topic_v3_and_below.iter().all(|t| t
            .results_by_partition
            .iter()
            .all(|p| p.partition_error_code == 0)));
        let end = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s("tx")))
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_committed(true);
        let ResponseKind::EndTxn(r) = call(&svc, ApiKey::EndTxn, 4, RequestKind::EndTxn(end))
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        let calls = sink.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 2, "first attempt failed and was retried");
        let mut got: Vec<(String, i32, bool, i64, i16)> = calls[1]
            .iter()
            .map(|m| {
                (
                    m.topic.clone(),
                    m.partition,
                    m.commit,
                    m.producer_id,
                    m.producer_epoch,
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("a".into(), 0, true, pid.0, epoch),
                ("a".into(), 1, true, pid.0, epoch),
                ("b".into(), 5, true, pid.0, epoch)
            ]
        );
        svc.shutdown();
    }

    #[test]
    fn transactional_offsets_become_visible_only_after_commit_and_zombies_are_fenced() {
        use kafka_protocol::messages::txn_offset_commit_request::{
            TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
        };
        let dir = tempfile::tempdir().unwrap();
        let svc = start(dir.path(), Arc::default());
        let first = init_pid(&svc, Some("tx"));
        let cur = init_pid(&svc, Some("tx"));
        assert_eq!(cur.producer_epoch, first.producer_epoch + 1);
        let add = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s("tx")))
            .with_producer_id(cur.producer_id)
            .with_producer_epoch(cur.producer_epoch)
            .with_group_id(GroupId(s("cg")));
        let ResponseKind::AddOffsetsToTxn(r) = call(
            &svc,
            ApiKey::AddOffsetsToTxn,
            3,
            RequestKind::AddOffsetsToTxn(add),
        ) else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        let toc = |epoch: i16| {
            RequestKind::TxnOffsetCommit(
                TxnOffsetCommitRequest::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_group_id(GroupId(s("cg")))
                    .with_producer_id(cur.producer_id)
                    .with_producer_epoch(epoch)
                    .with_generation_id(-1)
                    .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(s("t")))
                        .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(77)])]),
            )
        };
        let code = |resp: ResponseKind| match resp {
            ResponseKind::TxnOffsetCommit(r) => r.topics[0].partitions[0].error_code,
            _ => panic!(),
        };
        assert_eq!(
            code(call(
                &svc,
                ApiKey::TxnOffsetCommit,
                3,
                toc(first.producer_epoch)
            )),
            codes::PRODUCER_FENCED
        );
        assert_eq!(
            code(call(
                &svc,
                ApiKey::TxnOffsetCommit,
                3,
                toc(cur.producer_epoch)
            )),
            0
        );
        let fetch = || {
            let req = OffsetFetchRequest::default()
                .with_group_id(GroupId(s("cg")))
                .with_topics(None);
            match call(&svc, ApiKey::OffsetFetch, 7, RequestKind::OffsetFetch(req)) {
                ResponseKind::OffsetFetch(r) => {
                    r.topics.first().map(|t| t.partitions[0].committed_offset)
                }
                _ => panic!(),
            }
        };
        assert_eq!(
            fetch(),
            None,
            "pending transactional offsets are not committed"
        );
        let end = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s("tx")))
            .with_producer_id(cur.producer_id)
            .with_producer_epoch(cur.producer_epoch)
            .with_committed(true);
        let ResponseKind::EndTxn(r) = call(&svc, ApiKey::EndTxn, 4, RequestKind::EndTxn(end))
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        assert_eq!(fetch(), Some(77));
        svc.shutdown();
    }

    /// The node as the coordinator thread sees it: the partitions the test hands it (held in
    /// memory, each append fenced by the partition's current leader epoch as the engine
    /// does, base offsets stamped), where other keys are, an older version's Raft-log
    /// coordinator state, and the quorum's producer-id blocks.
    #[derive(Default)]
    struct TestSeat {
        led: Mutex<Led>,
        elsewhere: Mutex<Option<(i32, String, i32)>>,
        readable: Mutex<bool>,
        parts: Arc<MemPartitions>,
        legacy: Mutex<CoordinatorLogs>,
        quorum: Mutex<CoordinatorLogs>,
    }

    type Key = (CoordinatorLog, i32);

    #[derive(Default)]
    struct MemPartitions {
        logs: Mutex<std::collections::BTreeMap<Key, (Vec<u8>, i64)>>,
        epochs: Mutex<std::collections::BTreeMap<Key, i32>>,
    }

    impl PartitionWriter for MemPartitions {
        fn append(
            &self,
            log: CoordinatorLog,
            partition: i32,
            leader_epoch: i32,
            mut batches: Vec<u8>,
        ) -> std::io::Result<()> {
            let key = (log, partition);
            if self.epochs.lock().unwrap().get(&key) != Some(&leader_epoch) {
                return Err(std::io::Error::other("fenced"));
            }
            let mut logs = self.logs.lock().unwrap();
            let (bytes, end) = logs.entry(key).or_default();
            let headers: Vec<_> = kmirror_log::batch::BatchIter::headers(&batches)
                .map(|r| r.unwrap())
                .map(|(h, start, _)| (start, h.last_offset_delta()))
                .collect();
            for (start, delta) in headers {
                batches[start..start + 8].copy_from_slice(&end.to_be_bytes());
                *end += i64::from(delta) + 1;
            }
            bytes.extend_from_slice(&batches);
            Ok(())
        }
    }

    impl TestSeat {
        /// Leads every partition of both topics (4 each) in `epoch`.
        fn lead_all(&self, epoch: i32) {
            let all = |log| Loaded {
                partitions: 4,
                epochs: (0..4)
                    .map(|p| {
                        self.parts.epochs.lock().unwrap().insert((log, p), epoch);
                        (p, epoch)
                    })
                    .collect(),
            };
            *self.led.lock().unwrap() = Led {
                offsets: all(CoordinatorLog::Offsets),
                txns: all(CoordinatorLog::Transactions),
                shares: all(CoordinatorLog::ShareState),
            };
        }

        fn lead_none(&self, elsewhere: (i32, &str, i32)) {
            let none = Loaded {
                partitions: 4,
                epochs: Default::default(),
            };
            *self.led.lock().unwrap() = Led {
                offsets: none.clone(),
                txns: none.clone(),
                shares: none,
            };
            *self.elsewhere.lock().unwrap() =
                Some((elsewhere.0, elsewhere.1.to_string(), elsewhere.2));
        }

        fn records(&self, log: CoordinatorLog, key: &str) -> usize {
            let p = partition_for(key, 4);
            let logs = self.parts.logs.lock().unwrap();
            logs.get(&(log, p)).map_or(0, |(b, _)| {
                kmirror_control::coordinator_batch::decode(b).unwrap().len()
            })
        }
    }

    impl CoordinatorSeat for TestSeat {
        fn led(&self) -> Option<Led> {
            Some(self.led.lock().unwrap().clone())
        }
        fn locate(&self, log: CoordinatorLog, key: &str) -> Located {
            let led = self.led.lock().unwrap().clone();
            if led.of(log).epochs.contains_key(&partition_for(key, 4)) {
                return Located::Here;
            }
            match self.elsewhere.lock().unwrap().clone() {
                Some((node_id, host, port)) => Located::Elsewhere {
                    node_id,
                    host,
                    port,
                },
                None => Located::Unknown,
            }
        }
        fn read(
            &self,
            log: CoordinatorLog,
            partition: i32,
            _: i32,
        ) -> std::io::Result<(Vec<u8>, i64)> {
            if !*self.readable.lock().unwrap() {
                return Err(std::io::Error::other("not open yet"));
            }
            let logs = self.parts.logs.lock().unwrap();
            Ok(logs.get(&(log, partition)).cloned().unwrap_or_default())
        }
        fn writer(&self) -> Arc<dyn PartitionWriter> {
            self.parts.clone()
        }
        fn legacy_logs(&self) -> Option<CoordinatorLogs> {
            Some(self.legacy.lock().unwrap().clone())
        }
        fn allocate_producer_ids(&self, count: u32) -> Option<(i64, i64)> {
            Some(self.quorum.lock().unwrap().allocate_producer_ids(count))
        }
    }

    /// Commits coordinator records into a [`CoordinatorLogs`] (an older version's Raft log).
    struct LogCommitter(Arc<Mutex<CoordinatorLogs>>);

    impl Committer for LogCommitter {
        fn commit(&self, cmd: kmirror_control::quorum::ClusterCommand) -> std::io::Result<()> {
            if let kmirror_control::quorum::ClusterCommand::Coordinator { log, op, .. } = cmd {
                self.0.lock().unwrap().apply(log, &op);
            }
            Ok(())
        }
    }

    fn fetch_offset(svc: &GroupsService, group: &str) -> (i16, i64) {
        let req =
            OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s(group)))
                .with_topics(None)]);
        let ResponseKind::OffsetFetch(r) =
            call(svc, ApiKey::OffsetFetch, 9, RequestKind::OffsetFetch(req))
        else {
            panic!()
        };
        let g = &r.groups[0];
        let offset = g
            .topics
            .first()
            .map_or(-1, |t| t.partitions[0].committed_offset);
        (g.error_code, offset)
    }

    #[test]
    fn each_coordinator_runs_on_its_partitions_leader_and_loads_them_with_the_old_raft_state_moved_once(
    ) {
        // An older version's coordinator state on the Raft log: group "old" committed 5.
        let raft = Arc::new(Mutex::new(CoordinatorLogs::default()));
        let mut old = GroupCoordinator::open_replicated(
            &[],
            Arc::new(LogCommitter(raft.clone())),
            1,
            GroupConfig::default(),
            now_ms(),
        )
        .unwrap();
        let ctx = CommitContext {
            group_id: "old".into(),
            generation_id: -1,
            api_version: 8,
            ..Default::default()
        };
        let offsets = vec![OffsetToCommit {
            topic: "t".into(),
            partition: 0,
            offset: 5,
            leader_epoch: -1,
            metadata: None,
        }];
        old.commit_offsets(&ctx, &offsets, now_ms()).unwrap();
        old.flush().unwrap();
        assert!(!raft.lock().unwrap().offsets.is_empty());
        let seat = Arc::new(TestSeat {
            legacy: Mutex::new(raft.lock().unwrap().clone()),
            readable: Mutex::new(true),
            ..Default::default()
        });
        seat.lead_none((2, "node2", 9093));
        let svc = GroupsService::start_clustered(
            seat.clone(),
            7,
            "localhost".into(),
            9092,
            Arc::<RecordingSink>::default(),
            GroupConfig::default(),
            TxnConfig::default(),
        )
        .unwrap();
        // Elsewhere: FindCoordinator names the leader's broker, the rest is NOT_COORDINATOR.
        let req = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![s("grp")]);
        let ResponseKind::FindCoordinator(r) = call(
            &svc,
            ApiKey::FindCoordinator,
            4,
            RequestKind::FindCoordinator(req.clone()),
        ) else {
            panic!()
        };
        let c = &r.coordinators[0];
        assert_eq!(
            (c.error_code, c.node_id.0, c.host.to_string(), c.port),
            (0, 2, "node2".to_string(), 9093)
        );
        let r = commit(&svc, "grp", 10);
        assert_eq!(r.topics[0].partitions[0].error_code, codes::NOT_COORDINATOR);
        assert_eq!(
            init_pid(&svc, Some("tx")).error_code,
            codes::NOT_COORDINATOR
        );
        // An idempotent producer's InitProducerId is served anywhere, from quorum blocks.
        let a = init_pid(&svc, None);
        let b = init_pid(&svc, None);
        assert_eq!((a.error_code, b.error_code), (0, 0));
        assert_eq!(
            a.producer_id.0,
            kmirror_control::replicated::PRODUCER_ID_BLOCKS_START
        );
        assert_eq!(b.producer_id.0, a.producer_id.0 + 1);
        // Led but not readable yet: COORDINATOR_LOAD_IN_PROGRESS.
        *seat.readable.lock().unwrap() = false;
        seat.lead_all(3);
        let r = commit(&svc, "grp", 10);
        assert_eq!(
            r.topics[0].partitions[0].error_code,
            codes::COORDINATOR_LOAD_IN_PROGRESS
        );
        // Loaded: the old state moved into its partition once, new records go to theirs.
        *seat.readable.lock().unwrap() = true;
        let r = commit(&svc, "grp", 42);
        assert_eq!(r.topics[0].partitions[0].error_code, 0);
        assert_eq!(seat.records(CoordinatorLog::Offsets, "old"), 1);
        assert_eq!(fetch_offset(&svc, "old"), (0, 5));
        assert!(seat.records(CoordinatorLog::Offsets, "grp") >= 1);
        let first = init_pid(&svc, Some("tx"));
        assert_eq!((first.error_code, first.producer_epoch), (0, 0));
        assert!(first.producer_id.0 >= kmirror_control::replicated::PRODUCER_ID_BLOCKS_START);
        assert_eq!(seat.records(CoordinatorLog::Transactions, "tx"), 1);
        let ResponseKind::FindCoordinator(r) = call(
            &svc,
            ApiKey::FindCoordinator,
            4,
            RequestKind::FindCoordinator(req),
        ) else {
            panic!()
        };
        assert_eq!(r.coordinators[0].node_id.0, 7);
        // Another node took the partitions: this coordinator's write is fenced, and it
        // loads again once it leads them in the new epoch.
        seat.parts
            .epochs
            .lock()
            .unwrap()
            .values_mut()
            .for_each(|e| *e = 4);
        let r = commit(&svc, "grp", 43);
        assert_ne!(r.topics[0].partitions[0].error_code, 0);
        seat.lead_none((3, "node3", 9094));
        assert_eq!(fetch_offset(&svc, "grp").0, codes::NOT_COORDINATOR);
        let ResponseKind::ListGroups(r) = call(
            &svc,
            ApiKey::ListGroups,
            4,
            RequestKind::ListGroups(ListGroupsRequest::default()),
        ) else {
            panic!()
        };
        assert_eq!((r.error_code, r.groups.len()), (0, 0));
        seat.lead_all(5);
        assert_eq!(fetch_offset(&svc, "grp"), (0, 42));
        assert_eq!(fetch_offset(&svc, "old"), (0, 5));
        assert_eq!(
            seat.records(CoordinatorLog::Offsets, "old"),
            1,
            "the old state is moved once"
        );
        let again = init_pid(&svc, Some("tx"));
        assert_eq!(
            (again.error_code, again.producer_id, again.producer_epoch),
            (0, first.producer_id, 1)
        );
        svc.shutdown();
    }
}
