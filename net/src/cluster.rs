//! Cluster metadata as the broker sees it, and the one way to change it.
//!
//! Reads: every change is published as an immutable snapshot ([`MetaView`]) that cores read
//! lock-free in the steady state (a version check, then a cached `Arc`).
//!
//! Writes: [`Cluster::propose`] takes a [`ClusterCommand`] (data, never a closure) to the
//! Raft driver (`kmirror_cluster::DriverHandle`), and the answer comes once this node applied
//! the command, so its published snapshot already holds it. Every node is a member of a
//! quorum: a lone node is a one-voter quorum of itself (Kafka's combined mode with one
//! controller), so one writer and one apply path serve one node and a cluster alike.
//! Must never block an engine core: the async variant waits on a channel.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kmirror_cluster::{DriverHandle, ProposalError, QuorumStatus};
use kmirror_control::metadata::{ClusterMetadata, MetadataError, MetadataStore, TopicMeta};
use kmirror_control::quorum::command;
use kmirror_control::quorum::{ApplyError, ClusterCommand, MetadataCommand, Outcome};
use kmirror_engine::{Catalog, EngineError, PartitionSpec, Router};
use kmirror_types::{LeaderEpoch, TopicPartition};

/// The latest published metadata snapshot.
pub struct MetaView {
    current: RwLock<Arc<ClusterMetadata>>,
    version: AtomicU64,
    /// Woken (one `()`, dropped when one is already queued) on every publish: the per-core
    /// replication tasks apply a committed ISR or leader change at once instead of at their
    /// next poll.
    watchers: Mutex<Vec<flume::Sender<()>>>,
}

impl MetaView {
    fn new(m: ClusterMetadata) -> MetaView {
        MetaView {
            version: AtomicU64::new(m.version),
            current: RwLock::new(Arc::new(m)),
            watchers: Mutex::new(Vec::new()),
        }
    }

    /// A receiver that gets a `()` after each publish (coalesced: capacity one).
    pub fn watch(&self) -> flume::Receiver<()> {
        let (tx, rx) = flume::bounded(1);
        let mut w = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        w.retain(|t| !t.is_disconnected());
        w.push(tx);
        rx
    }

    fn wake(&self) {
        for w in self
            .watchers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = w.try_send(());
        }
    }

    pub fn load(&self) -> Arc<ClusterMetadata> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Publishes a snapshot the Raft driver applied (its versions only grow).
    pub fn publish_arc(&self, m: Arc<ClusterMetadata>) {
        let v = m.version;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = m;
        self.version.store(v, Ordering::Release);
        self.wake();
    }
}

/// Per-thread cache of the snapshot (no lock unless the version moved).
pub struct MetaCache {
    cached: RefCell<Arc<ClusterMetadata>>,
}

impl MetaCache {
    pub fn new(view: &MetaView) -> MetaCache {
        MetaCache {
            cached: RefCell::new(view.load()),
        }
    }

    pub fn get(&self, view: &MetaView) -> Arc<ClusterMetadata> {
        let v = view.version();
        if self.cached.borrow().version != v {
            *self.cached.borrow_mut() = view.load();
        }
        self.cached.borrow().clone()
    }
}

/// Why a proposed command did not take effect. Kafka codes: `errors::propose_failure_code`.
#[derive(Debug, thiserror::Error)]
pub enum ProposeFailure {
    /// Applied and refused by the state machine (identically on every node).
    #[error(transparent)]
    Rejected(ApplyError),
    /// No controller took it before the deadline; it was not applied.
    #[error("no active controller (last known leader: {leader:?})")]
    NoLeader { leader: Option<u64> },
    /// Timed out in flight: it may or may not be applied.
    #[error("the outcome of the metadata change is unknown (timed out)")]
    Unknown,
    /// The control plane is stopped or overloaded.
    #[error("the controller is unavailable: {0}")]
    Unavailable(String),
    /// AddRaftVoter / RemoveRaftVoter refused by Kafka's checks.
    #[error(transparent)]
    Voter(kmirror_cluster::VoterError),
}

impl From<MetadataError> for ProposeFailure {
    fn from(e: MetadataError) -> Self {
        ProposeFailure::Rejected(ApplyError::Metadata(e))
    }
}

impl From<ProposalError> for ProposeFailure {
    fn from(e: ProposalError) -> Self {
        match e {
            ProposalError::Rejected(e) => ProposeFailure::Rejected(e),
            ProposalError::NoLeader { leader } => ProposeFailure::NoLeader { leader },
            ProposalError::Unknown => ProposeFailure::Unknown,
            ProposalError::Refused(why) => ProposeFailure::Rejected(ApplyError::Membership(why)),
            ProposalError::Unavailable => ProposeFailure::Unavailable("overloaded".into()),
            ProposalError::Voter(e) => ProposeFailure::Voter(e),
        }
    }
}

impl From<EngineError> for ProposeFailure {
    fn from(e: EngineError) -> Self {
        ProposeFailure::Unavailable(e.to_string())
    }
}

/// How long a proposal may wait for a leader and its commit (Kafka's admin requests time
/// out on the controller similarly).
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(15);

/// Handle to the cluster metadata: its published snapshot plus the way to change it.
#[derive(Clone)]
pub struct Cluster {
    driver: DriverHandle,
    view: Arc<MetaView>,
    data_dir: PathBuf,
    /// This node's id (partitions are hosted only where it is a replica).
    local: i32,
    /// The quorum's founding voters and their controller addresses.
    voters: Arc<Vec<kmirror_cluster::Voter>>,
    /// Moves whenever the applied `__mirror_state` changed (the mirror host reloads its
    /// view of the replicated store then).
    mirror_state_version: Arc<std::sync::atomic::AtomicU64>,
    /// This start's broker registration is applied: the node has caught up with the
    /// metadata log at least to it (see [`Cluster::ready`]).
    registered: Arc<std::sync::atomic::AtomicBool>,
}

/// The settings of this node's part in the metadata quorum (`serve --quorum`, or
/// [`QuorumOptions::single`] for a lone node).
#[derive(Debug, Clone)]
pub struct QuorumOptions {
    /// The controller listener, `HOST:PORT`.
    pub controller_listen: String,
    /// Every voter (this node among them) and its controller address.
    pub voters: Vec<kmirror_cluster::Voter>,
    /// `broker.session.timeout.ms`: the active controller fences a broker it has not heard
    /// from for this long (`None`: never).
    pub session_timeout: Option<Duration>,
    /// `auto.leader.rebalance.enable` and `leader.imbalance.check.interval.seconds`: the
    /// active controller moves leaderships back to preferred replicas this often (`None`:
    /// disabled).
    pub leader_rebalance: Option<Duration>,
    /// `default.replication.factor` for CreateTopics with -1 and auto-created topics.
    pub default_replication_factor: i16,
    /// Kafka's `inter.broker.listener.name`: the listener (one of this node's) peers are
    /// reached on; `None`: the first listener.
    pub inter_broker_listener: Option<String>,
    /// The TLS and SASL that listener needs (the broker's own client credentials); the
    /// default is in the clear.
    pub inter_broker_security: crate::client::security::ClientSecurity,
    /// Mutual TLS on the controller listener (Kafka's controller listener with SSL).
    pub controller_tls: Option<kmirror_cluster::transport::ControllerTls>,
}

impl QuorumOptions {
    /// A lone node: the only voter of its own quorum (Kafka's combined mode formatted with
    /// one controller), its controller listener on a free loopback port nobody else dials.
    pub fn single(node_id: i32) -> QuorumOptions {
        QuorumOptions {
            controller_listen: "127.0.0.1:0".into(),
            voters: vec![kmirror_cluster::Voter {
                id: u64::try_from(node_id).unwrap_or(0),
                addr: "127.0.0.1:0".into(),
            }],
            // Brokers are heard through Raft traffic, which a lone voter never gets: it
            // fences nobody (its own broker counts as alive).
            session_timeout: None,
            leader_rebalance: None,
            default_replication_factor: 1,
            inter_broker_listener: None,
            inter_broker_security: crate::client::security::ClientSecurity::plaintext(),
            controller_tls: None,
        }
    }

    /// Whether this node is the quorum's only voter.
    pub fn is_single(&self, node_id: i32) -> bool {
        self.voters.len() == 1 && i64::try_from(self.voters[0].id).ok() == Some(i64::from(node_id))
    }
}

/// This node's part in one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader { epoch: i32 },
    Follower { leader: i32, epoch: i32 },
    NotReplica { leader: i32, epoch: i32 },
}

/// A broker as Metadata lists it: id, advertised host and port on the asked listener, rack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedBroker {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl Cluster {
    /// Metadata comes from the Raft driver, which publishes into `view` (see
    /// [`MetaView::publish_arc`]); mutations are proposed through `handle`.
    pub fn replicated(
        data_dir: &Path,
        view: Arc<MetaView>,
        handle: DriverHandle,
        node_id: i32,
        voters: Vec<kmirror_cluster::Voter>,
    ) -> Cluster {
        Cluster {
            driver: handle,
            view,
            data_dir: data_dir.to_path_buf(),
            local: node_id,
            voters: Arc::new(voters),
            mirror_state_version: Arc::default(),
            registered: Arc::default(),
        }
    }

    /// This start's registration was committed and applied here (the startup's
    /// registration task says so).
    pub fn mark_registered(&self) {
        self.registered
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Ready for clients, as a Kafka broker opens its listeners: this start's registration
    /// is applied (so is everything before it in the metadata log) and a controller is
    /// known, so Metadata names it and admin requests reach it.
    pub fn ready(&self) -> bool {
        // A lone node's startup already waited for its registration.
        self.voters.len() <= 1
            || (self.registered.load(std::sync::atomic::Ordering::Acquire)
                && self.controller_id() >= 0)
    }

    /// Shares `version`, which the driver's state listener moves on every applied change of
    /// the replicated mirror state.
    pub fn with_mirror_state_version(
        mut self,
        version: Arc<std::sync::atomic::AtomicU64>,
    ) -> Cluster {
        self.mirror_state_version = version;
        self
    }

    /// How many times the applied mirror state changed.
    pub fn mirror_state_version(&self) -> u64 {
        self.mirror_state_version
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The quorum's founding voters (this node alone on a lone node).
    pub fn voters(&self) -> &[kmirror_cluster::Voter] {
        &self.voters
    }

    /// Whether this node holds a replica of partition `p` of `t`.
    pub fn hosts(&self, t: &TopicMeta, p: i32) -> bool {
        hosts(self.local, t, p)
    }

    /// This node's role for `tp` in `meta` (None: no such partition). A topic without
    /// assignments (none is created so; the old one-node layout's sentinel): leader, at the
    /// topic's leader epoch.
    pub fn role(&self, meta: &ClusterMetadata, tp: &TopicPartition) -> Option<Role> {
        let t = meta.topics.get(&tp.topic)?;
        let i = usize::try_from(tp.partition).ok()?;
        let epoch = *t.leader_epochs.get(i)?;
        let node = self.local;
        let Some(a) = t.assignments.get(i) else {
            return Some(Role::Leader { epoch });
        };
        Some(if a.leader == node {
            Role::Leader { epoch }
        } else if a.replicas.contains(&node) {
            Role::Follower {
                leader: a.leader,
                epoch,
            }
        } else {
            Role::NotReplica {
                leader: a.leader,
                epoch,
            }
        })
    }

    /// This node's id.
    pub fn local_node(&self) -> i32 {
        self.local
    }

    /// The brokers Metadata lists, by id, with their endpoint on `listener` (Kafka lists
    /// each broker at the listener the client came in through): the unfenced registered
    /// brokers.
    pub fn listed_brokers(&self, meta: &ClusterMetadata, listener: &str) -> Vec<ListedBroker> {
        meta.brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                let e = b
                    .endpoints
                    .iter()
                    .find(|e| e.name == listener)
                    .or_else(|| b.endpoints.first())?;
                Some(ListedBroker {
                    id: b.id,
                    host: e.host.clone(),
                    port: i32::from(e.port),
                    rack: b.rack.clone(),
                })
            })
            .collect()
    }

    /// The id Metadata and DescribeCluster give as the controller: the Raft leader (-1
    /// while there is none).
    pub fn controller_id(&self) -> i32 {
        self.driver
            .status()
            .leader
            .and_then(|l| i32::try_from(l).ok())
            .unwrap_or(-1)
    }

    /// The controller id Metadata and DescribeCluster name among `listed` (the brokers the
    /// same answer lists): the quorum leader when it is one of them, else this node, else
    /// any listed broker (-1 when none is). A client sends admin requests to the broker with
    /// that id, and any node takes them (proposals reach the leader), as Kafka's brokers
    /// forward to the active controller and name a live broker; a leader whose broker is not
    /// registered yet (a forming cluster) must not be named, or librdkafka waits "for
    /// controller" until it times out.
    pub fn listed_controller_id(&self, listed: &[ListedBroker]) -> i32 {
        let leader = self.controller_id();
        [leader, self.local]
            .into_iter()
            .find(|id| listed.iter().any(|b| b.id == *id))
            .or_else(|| listed.first().map(|b| b.id))
            .unwrap_or(-1)
    }

    /// An empty view for [`Cluster::replicated`], filled by the driver's first publish.
    pub fn empty_view() -> Arc<MetaView> {
        Arc::new(MetaView::new(ClusterMetadata {
            cluster_id: String::new(),
            version: 0,
            topics: Default::default(),
            internal_topics: Default::default(),
            broker_configs: Default::default(),
            group_configs: Default::default(),
            features: Default::default(),
            brokers: Default::default(),
        }))
    }

    /// The Raft driver of this node, for reads of the applied state.
    pub fn driver(&self) -> &DriverHandle {
        &self.driver
    }

    /// The metadata quorum as this node sees it.
    pub fn quorum_status(&self) -> Arc<QuorumStatus> {
        self.driver.status()
    }

    pub fn view(&self) -> &Arc<MetaView> {
        &self.view
    }

    pub fn snapshot(&self) -> Arc<ClusterMetadata> {
        self.view.load()
    }

    /// Proposes `cmd` to the quorum and waits until this node applied it. Never blocks the
    /// calling thread: the wait is on a channel.
    pub async fn propose(&self, cmd: ClusterCommand) -> Result<Outcome, ProposeFailure> {
        // A message to the controller thread; its answer comes on a channel awaited here.
        self.driver
            .propose_async(cmd, PROPOSE_TIMEOUT)
            .await
            .map_err(ProposeFailure::from)
    }

    /// [`Cluster::propose`] for plain threads (never an engine core).
    pub fn propose_blocking(&self, cmd: ClusterCommand) -> Result<Outcome, ProposeFailure> {
        self.driver
            .propose(cmd, PROPOSE_TIMEOUT)
            .map_err(ProposeFailure::from)
    }

    /// A metadata command proposed; the topic it leaves (or deleted).
    pub async fn propose_topic(&self, cmd: MetadataCommand) -> Result<TopicMeta, ProposeFailure> {
        topic_of(self.propose(ClusterCommand::Metadata(cmd)).await?)
    }

    /// [`Cluster::propose_topic`] for plain threads.
    pub fn propose_topic_blocking(
        &self,
        cmd: MetadataCommand,
    ) -> Result<TopicMeta, ProposeFailure> {
        topic_of(self.propose_blocking(ClusterCommand::Metadata(cmd))?)
    }

    /// What `cmd` would do to the current snapshot, changing nothing (validate_only
    /// requests): the same apply on a throwaway in-memory copy.
    pub fn validate(&self, cmd: &MetadataCommand) -> Result<Outcome, MetadataError> {
        let mut scratch = MetadataStore::in_memory((*self.snapshot()).clone());
        command::apply(&mut scratch, cmd)
    }
    /// Directory of a partition's log.
    pub fn partition_dir(&self, tp: &TopicPartition) -> PathBuf {
        partition_dir(&self.data_dir, tp)
    }

    pub fn catalog(&self) -> Arc<dyn Catalog> {
        Arc::new(MetaCatalog {
            view: self.view.clone(),
            data_dir: self.data_dir.clone(),
            local: self.local,
        })
    }

    /// Pushes a topic's current metadata (log config, leader epoch, mirror flag) to its open
    /// partitions on their owning cores. Call after changing a topic in the store.
    pub async fn refresh_partitions(
        &self,
        router: &Router,
        topic: &TopicMeta,
    ) -> Result<(), EngineError> {
        let mut pending = Vec::new();
        let cfg = self.view.load().topic_log_config(topic, self.local);
        for p in 0..topic.partition_count() {
            let tp = TopicPartition::new(topic.name.clone(), p);
            let cfg = cfg.clone();
            let epoch = LeaderEpoch(topic.leader_epochs[p as usize]);
            let mirror = topic.mirror.clone();
            let fence = topic.write_fence();
            pending.push(
                router
                    .submit(router.owner(&tp), move |s| {
                        if let Ok(part) = s.partition(&tp) {
                            part.log.set_config(cfg);
                            part.leader_epoch = part.leader_epoch.max(epoch);
                            part.mirror = mirror;
                            part.write_fence = fence;
                        }
                    })
                    .await?,
            );
        }
        for p in pending {
            p.wait().await?;
        }
        Ok(())
    }
}

/// The topic an applied topic command left (or deleted).
fn topic_of(o: Outcome) -> Result<TopicMeta, ProposeFailure> {
    match o {
        Outcome::Topic(t) | Outcome::Deleted(t) => Ok(t),
        other => Err(ProposeFailure::Unavailable(format!(
            "unexpected outcome {other:?}"
        ))),
    }
}

/// Kafka's on-disk layout: `<data_dir>/topics/<topic>-<partition>/`.
pub fn partition_dir(data_dir: &Path, tp: &TopicPartition) -> PathBuf {
    data_dir.join("topics").join(tp.to_string())
}

/// Whether node `local` holds a replica of `t`'s partition `p`.
fn hosts(local: i32, t: &TopicMeta, p: i32) -> bool {
    match usize::try_from(p).ok().and_then(|i| t.assignments.get(i)) {
        Some(a) => a.replicas.contains(&local),
        // A topic without assignments (the old one-node layout's sentinel): here.
        None => true,
    }
}

struct MetaCatalog {
    view: Arc<MetaView>,
    data_dir: PathBuf,
    local: i32,
}

impl Catalog for MetaCatalog {
    fn partition_spec(&self, tp: &TopicPartition) -> Option<PartitionSpec> {
        let m = self.view.load();
        let t = m.topics.get(&tp.topic)?;
        let epoch = *t.leader_epochs.get(usize::try_from(tp.partition).ok()?)?;
        // A node opens logs only for the partitions it is a replica of.
        if !hosts(self.local, t, tp.partition) {
            return None;
        }
        Some(PartitionSpec {
            dir: partition_dir(&self.data_dir, tp),
            config: m.topic_log_config(t, self.local),
            leader_epoch: LeaderEpoch(epoch),
            topic_id: t.id.as_u128(),
            mirror: t.mirror.clone(),
            write_fence: t.write_fence(),
            replicated: t
                .assignments
                .get(usize::try_from(tp.partition).ok()?)
                .is_some_and(|a| a.replicas.len() > 1),
        })
    }

    fn all_partitions(&self) -> Vec<TopicPartition> {
        let m = self.view.load();
        m.topics
            .values()
            .flat_map(|t| {
                (0..t.partition_count())
                    .filter(|p| hosts(self.local, t, *p))
                    .map(move |p| TopicPartition::new(t.name.clone(), p))
            })
            .collect()
    }
}

/// Brings this node's open partitions in line with each published metadata
/// (a plain thread; blocking waits on the owning cores are fine here). Opens the partitions
/// this node became a replica of, closes (and deletes) those it no longer hosts or whose
/// topic was deleted or re-created, and pushes leader epoch, configs and the mirror flag to
/// the ones that changed. Opening never wipes a directory, so a restarted node keeps its logs.
pub fn spawn_reconciler(
    cluster: Cluster,
    router: Router,
    updates: flume::Receiver<Arc<ClusterMetadata>>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("kmirror-replicas".into())
        .spawn(move || {
            let mut prev = cluster.snapshot();
            reconcile(&cluster, &router, None, &prev);
            while let Ok(mut next) = updates.recv() {
                // Only the newest state matters.
                while let Ok(n) = updates.try_recv() {
                    next = n;
                }
                reconcile(&cluster, &router, Some(&prev), &next);
                prev = next;
            }
        })
        .map(|_| ())
}

fn reconcile(
    cluster: &Cluster,
    router: &Router,
    prev: Option<&ClusterMetadata>,
    next: &ClusterMetadata,
) {
    let remove = |tp: TopicPartition| {
        let dir = cluster.partition_dir(&tp);
        let owner = router.owner(&tp);
        let t = tp.clone();
        match router.run_on_blocking(owner, move |s| s.remove_partition(&t, Some(dir))) {
            Ok(Ok(())) => tracing::info!(%tp, "replica removed"),
            Ok(Err(e)) | Err(e) => tracing::warn!(%tp, error = %e, "cannot remove replica"),
        }
    };
    if let Some(prev) = prev {
        for (name, old) in &prev.topics {
            let same = next.topics.get(name).filter(|t| t.id == old.id);
            for p in 0..old.partition_count() {
                if cluster.hosts(old, p) && !same.is_some_and(|t| cluster.hosts(t, p)) {
                    remove(TopicPartition::new(name.clone(), p));
                }
            }
        }
    }
    for (name, t) in &next.topics {
        let old = prev
            .and_then(|m| m.topics.get(name))
            .filter(|o| o.id == t.id);
        for p in 0..t.partition_count() {
            if !cluster.hosts(t, p) {
                continue;
            }
            let i = p as usize;
            let changed = old.is_none_or(|o| {
                o.leader_epochs.get(i) != t.leader_epochs.get(i)
                    || o.assignments.get(i) != t.assignments.get(i)
                    || o.configs != t.configs
                    || o.mirror != t.mirror
            }) || prev.is_some_and(|m| m.broker_configs != next.broker_configs);
            if !changed {
                continue;
            }
            let tp = TopicPartition::new(name.clone(), p);
            let (cfg, epoch, mirror, fence) = (
                next.topic_log_config(t, cluster.local),
                LeaderEpoch(t.leader_epochs[i]),
                t.mirror.clone(),
                t.write_fence(),
            );
            let t2 = tp.clone();
            // `partition` opens (or recovers) the log from its directory on first use.
            let r = router.run_on_blocking(router.owner(&tp), move |s| {
                s.partition(&t2).map(|part| {
                    part.log.set_config(cfg);
                    part.leader_epoch = part.leader_epoch.max(epoch);
                    part.mirror = mirror;
                    part.write_fence = fence;
                })
            });
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) | Err(e) => tracing::warn!(%tp, error = %e, "cannot open replica"),
            }
        }
    }
}
