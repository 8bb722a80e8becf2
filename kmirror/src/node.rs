//! The node: assembles one kmirror broker from its parts and runs it (Kafka's
//! `KafkaRaftServer` / `BrokerServer` in combined mode). `serve`, `demo` and the in-process
//! tests start a node here; nothing below this crate knows how the parts fit together.
//!
//! Owns: the node's settings ([`ServerConfig`]); [`start`] / [`start_with`], which resolve
//! the listeners and their TLS, start the metadata quorum's controller thread (a lone node:
//! a one-voter quorum; an older one-node data dir converted on the way), the ACL, quota and
//! SCRAM registries it publishes into, the coordinators on their internal partitions, the
//! broker, the engine with one `kmirror_net::startup::serve_core` per core, the replica
//! reconciler, the registration (with the SCRAM seed) and the internal-topic conversion,
//! then hand the mirror extension its [`kmirror_net::mirror_deps::MirrorDeps`]; and
//! [`RunningBroker::stop`], Kafka's controlled shutdown.
//!
//! Must not: serve requests or touch partitions itself (the net crate's tasks on the cores
//! do), or use the core runtime directly (tasks on the cores are the net crate's).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kmirror_engine::{Engine, EngineConfig, Router};
use kmirror_net::acl::{AclRegistry, SharedAcls};
use kmirror_net::authz::Authz;
use kmirror_net::broker::{Broker, BrokerConfig, EngineMarkerSink, ExtensionApis};
use kmirror_net::cluster::{Cluster, QuorumOptions};
use kmirror_net::coordinator_partitions::PartitionSeat;
use kmirror_net::groups::{GroupsService, MarkerSink};
use kmirror_net::interbroker::InterBroker;
use kmirror_net::quota::{QuotaRegistry, SharedQuotas};
use kmirror_net::sasl::Sasl;
use kmirror_net::server::ListenerCtx;
use kmirror_net::startup::{self, ScramSeed};
use kmirror_net::txn_markers::RoutingMarkerSink;
use kmirror_net::{Endpoint, ListenerSpec, TlsFiles};

/// Errors starting a node.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cluster metadata: {0}")]
    Metadata(#[from] kmirror_control::metadata::MetadataError),
    #[error("engine: {0}")]
    Engine(#[from] kmirror_engine::EngineError),
    #[error("group coordinator: {0}")]
    Groups(#[from] kmirror_net::groups::GroupsError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("ACL store: {0}")]
    Acls(String),
    #[error("SASL: {0}")]
    Sasl(#[from] kmirror_net::sasl::SaslError),
    #[error(transparent)]
    Listener(#[from] kmirror_net::listeners::ListenerError),
    #[error("metadata quorum: {0}")]
    Quorum(String),
    #[error("SCRAM credentials: {0}")]
    Scram(#[from] kmirror_control::scram::ScramError),
}

/// Everything needed to run a broker.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The listeners (at least one); each one's host is also the host advertised to the
    /// clients that came in through it. Port 0 picks a free port.
    pub listeners: Vec<ListenerSpec>,
    /// PEM files for the SSL and SASL_SSL listeners.
    pub tls: TlsFiles,
    pub node_id: i32,
    pub data_dir: PathBuf,
    pub max_request_bytes: usize,
    pub auto_create_topics: bool,
    pub default_partitions: i32,
    pub engine: EngineConfig,
    /// `authorizer`, `super_users`, `allow_everyone_if_no_acl_found`.
    pub authz: kmirror_control::authz::AuthzConfig,
    /// SASL mechanisms, OAUTHBEARER validation, re-authentication.
    pub sasl: kmirror_net::sasl::SaslConfig,
    /// Group coordinator settings (group.initial.rebalance.delay.ms, session bounds, ...).
    pub groups: kmirror_control::group::GroupConfig,
}

impl ServerConfig {
    /// The listener specs, or an error if there are none.
    fn checked_listeners(&self) -> Result<&[ListenerSpec], NodeError> {
        if self.listeners.is_empty() {
            return Err(NodeError::Bind {
                addr: String::new(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no listener"),
            });
        }
        Ok(&self.listeners)
    }
}

/// A running broker.
pub struct RunningBroker {
    engine: Engine,
    broker: Arc<Broker>,
    /// The metadata quorum's controller (stopped after the engine).
    driver: kmirror_cluster::Driver,
}

impl RunningBroker {
    /// The address every core listens on for the first listener.
    pub fn addr(&self) -> SocketAddr {
        self.broker.config.listeners[0].addr
    }

    /// Every listener, bound, in configuration order.
    pub fn listeners(&self) -> &[Endpoint] {
        &self.broker.config.listeners
    }

    /// Routes work to partition owners (for the mirror fetchers and other embedders).
    pub fn router(&self) -> &Router {
        self.engine.router()
    }

    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Clean shutdown: stop accepting, finish in-flight requests, flush and close logs,
    /// flush the coordinator.
    pub fn stop(self) {
        let RunningBroker {
            engine,
            broker,
            driver,
        } = self;
        controlled_shutdown(&driver, &broker.cluster, broker.config.node_id);
        engine.stop();
        if let Some(g) = &broker.groups {
            g.shutdown();
        }
        drop(driver);
    }
}

/// Starts a lone node: the only voter of its own metadata quorum (see [`start_with`]).
pub fn start(
    cfg: ServerConfig,
    extension: Option<Arc<dyn ExtensionApis>>,
) -> Result<RunningBroker, NodeError> {
    let quorum = QuorumOptions::single(cfg.node_id);
    start_with(cfg, extension, quorum)
}

/// Starts the broker as a member of the metadata quorum `quorum` (`serve --quorum`, or a
/// lone node's one-voter quorum): the metadata comes from the Raft driver (storage in
/// `<data-dir>/__cluster_metadata-0`), the broker registers itself and the active controller
/// fences it when it goes silent. Returns once every core accepts connections (a lone node:
/// also once it is registered, so its first Metadata answer lists it).
pub fn start_with(
    cfg: ServerConfig,
    extension: Option<Arc<dyn ExtensionApis>>,
    quorum: QuorumOptions,
) -> Result<RunningBroker, NodeError> {
    let (endpoints, acceptors) =
        kmirror_net::listeners::resolve(cfg.checked_listeners()?, &cfg.tls)?;
    let (host, port) = (endpoints[0].host.clone(), endpoints[0].port);
    std::fs::create_dir_all(&cfg.data_dir)?;
    let sasl = Arc::new(Sasl::open(cfg.sasl.clone())?);
    let acls: SharedAcls = Arc::new(AclRegistry::empty());
    let quotas: SharedQuotas = Arc::new(QuotaRegistry::empty());
    let (cluster, driver, updates) = start_quorum(
        &cfg,
        &quorum,
        Registries {
            acls: acls.clone(),
            quotas: quotas.clone(),
            scram: sasl.scram.clone(),
        },
    )?;
    let inter_broker = inter_broker_of(&quorum, &endpoints, cfg.node_id)?;
    let router_cell = Arc::new(OnceLock::new());
    let local_markers = EngineMarkerSink::new(router_cell.clone());
    // Markers go to each partition's leader (WriteTxnMarkers to the other nodes).
    let markers: Arc<dyn MarkerSink> = Arc::new(RoutingMarkerSink::new(
        local_markers,
        cluster.clone(),
        cfg.node_id,
        inter_broker.clone(),
    ));
    let txn_cfg = kmirror_control::txn::TxnConfig::default();
    // Each coordinator runs on the leader of its `__consumer_offsets` /
    // `__transaction_state` partition, its records in that partition.
    let seat = PartitionSeat::new(
        cluster.clone(),
        router_cell.clone(),
        cfg.node_id,
        endpoints[0].name.clone(),
    );
    let groups = GroupsService::start_clustered(
        Arc::new(seat),
        cfg.node_id,
        host.clone(),
        port,
        markers,
        cfg.groups.clone(),
        txn_cfg,
    )?;
    let conn_limits = Arc::new(kmirror_net::conn_limits::ConnLimits::new(
        cfg.node_id,
        endpoints.iter().map(|e| e.name.clone()).collect(),
        Some(inter_broker.listener().to_string()),
    ));
    let broker = Arc::new(Broker {
        config: BrokerConfig {
            node_id: cfg.node_id,
            host,
            port,
            listeners: endpoints.clone(),
            data_dir: cfg.data_dir.clone(),
            max_request_bytes: cfg.max_request_bytes,
            auto_create_topics: cfg.auto_create_topics,
            default_partitions: cfg.default_partitions,
            offsets_topic_partitions: cfg.groups.offsets_topic_num_partitions,
            transaction_state_partitions: cfg.groups.transaction_state_num_partitions,
            offsets_topic_replication_factor: cfg.groups.offsets_topic_replication_factor,
            transaction_state_replication_factor: cfg.groups.transaction_state_replication_factor,
            replica_lag_time_max_ms: cfg.engine.replica_lag_time_max_ms as i64,
            default_replication_factor: quorum.default_replication_factor,
            inter_broker,
        },
        cluster: cluster.clone(),
        groups: Some(groups),
        extension,
        metrics: Default::default(),
        authz: Authz::new(cfg.authz.clone(), acls.clone()),
        sasl,
        acls,
        quotas,
        conn_limits,
        shares: Default::default(),
    });
    // Every core binds every listener (SO_REUSEPORT) and serves each with its protocol.
    let (bound_tx, bound_rx) = std::sync::mpsc::channel::<startup::Bound>();
    let b = broker.clone();
    let lctxs: Vec<(SocketAddr, ListenerCtx)> = endpoints
        .iter()
        .map(|e| {
            (
                e.addr,
                ListenerCtx {
                    name: e.name.clone(),
                    protocol: e.protocol,
                    tls: acceptors.for_protocol(e.protocol),
                },
            )
        })
        .collect();
    let engine = Engine::start(cfg.engine.clone(), cluster.catalog(), move |core| {
        startup::serve_core(b.clone(), core, lctxs.clone(), bound_tx.clone())
    })?;
    let _ = router_cell.set(engine.router().clone());
    for _ in 0..engine.router().cores() {
        let r = bound_rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| Err((endpoints[0].addr, std::io::ErrorKind::TimedOut.into())));
        if let Err((addr, e)) = r {
            engine.stop();
            return Err(NodeError::Bind {
                addr: addr.to_string(),
                source: e,
            });
        }
    }
    kmirror_net::cluster::spawn_reconciler(cluster.clone(), engine.router().clone(), updates)?;
    let seed = ScramSeed::load(&cfg.data_dir, broker.sasl.scram.clone())?;
    let registered = startup::register(&cluster, engine.router(), cfg.node_id, &endpoints, seed)?;
    if quorum.is_single(cfg.node_id) {
        // Alone, the node elects itself at once: wait for its registration so that the
        // first client it answers finds it in Metadata (a cluster's nodes come up apart).
        if registered.recv_timeout(Duration::from_secs(30)).is_err() {
            tracing::warn!(
                node = cfg.node_id,
                "broker registration not applied after 30 s"
            );
        }
    }
    startup::convert_described_internal_topics(&broker, engine.router())?;
    if let Some(ext) = &broker.extension {
        ext.started(broker.clone(), engine.router());
    }
    Ok(RunningBroker {
        engine,
        broker,
        driver,
    })
}

/// The inter-broker listener and client security of a node: the one named in the quorum options (it
/// must be one of this node's listeners), else the first listener in the clear.
fn inter_broker_of(
    q: &QuorumOptions,
    endpoints: &[Endpoint],
    node_id: i32,
) -> Result<InterBroker, NodeError> {
    let first = &endpoints[0].name;
    if let Some(name) = &q.inter_broker_listener {
        if !endpoints.iter().any(|e| &e.name == name) {
            return Err(NodeError::Quorum(format!(
                "inter-broker listener {name} is not one of this node's listeners ({})",
                endpoints
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(InterBroker::new(
        q.inter_broker_listener.as_deref(),
        first,
        q.inter_broker_security.clone(),
        node_id,
    ))
}

/// Kafka's controlled shutdown: the broker fences itself first, so its leaderships move
/// to the other ISR members now instead of after the session timeout. Bounded: without a
/// quorum the shutdown goes on after a few seconds. Skipped when nobody could take a
/// leadership over: no other broker is registered and unfenced, or this node is its quorum's
/// only voter (a lone node, whose fence would reach no other node).
fn controlled_shutdown(driver: &kmirror_cluster::Driver, cluster: &Cluster, node_id: i32) {
    use kmirror_control::quorum::{ClusterCommand, MetadataCommand};
    let lone = u64::try_from(node_id).is_ok_and(|me| cluster.quorum_status().voters == [me]);
    let others = cluster
        .snapshot()
        .brokers
        .values()
        .any(|b| b.id != node_id && !b.fenced);
    if lone || !others {
        return;
    }
    let cmd = ClusterCommand::Metadata(MetadataCommand::FenceBroker { id: node_id });
    match driver.handle().propose(cmd, Duration::from_secs(5)) {
        Ok(_) => tracing::info!(node = node_id, "fenced for a controlled shutdown"),
        Err(e) => tracing::warn!(node = node_id, error = %e, "controlled shutdown: fencing failed"),
    }
}

/// Where the driver publishes the applied ACLs, quotas and SCRAM credentials.
struct Registries {
    acls: SharedAcls,
    quotas: SharedQuotas,
    scram: Arc<kmirror_control::scram::ScramRegistry>,
}

/// Starts this node's metadata quorum driver; its publications go into the cluster's view,
/// the registries and the returned channel (for the replica reconciler).
#[allow(clippy::type_complexity)]
fn start_quorum(
    cfg: &ServerConfig,
    q: &QuorumOptions,
    registries: Registries,
) -> Result<
    (
        Cluster,
        kmirror_cluster::Driver,
        flume::Receiver<Arc<kmirror_control::metadata::ClusterMetadata>>,
    ),
    NodeError,
> {
    let node = u64::try_from(cfg.node_id)
        .map_err(|_| NodeError::Quorum(format!("node id {} is not a voter id", cfg.node_id)))?;
    let mut dcfg = kmirror_cluster::DriverConfig::new(
        node,
        cfg.data_dir.join("__cluster_metadata-0"),
        q.controller_listen.clone(),
        q.voters.clone(),
    );
    dcfg.session_timeout = q.session_timeout;
    dcfg.leader_rebalance = q.leader_rebalance;
    // A node that is not one of the listed voters joins the running cluster as an observer
    // (a Kafka broker whose controller.quorum.voters lists the controllers).
    dcfg.join = !q.voters.iter().any(|v| v.id == node);
    let meta = kmirror_cluster::meta_properties::load_or_create(&cfg.data_dir, node)
        .map_err(|e| NodeError::Quorum(format!("meta.properties: {e}")))?;
    dcfg.directory_id = meta.directory_id.clone();
    // A lone node's data dir of the old layout (local control files): its log starts from
    // them (the quorum ignores this once its log exists).
    let legacy = if q.is_single(cfg.node_id) {
        kmirror_control::quorum::upgrade::legacy_state(&cfg.data_dir, cfg.node_id)
            .map_err(|e| NodeError::Quorum(e.to_string()))?
    } else {
        None
    };
    if let Some(l) = &legacy {
        tracing::info!(
            topics = l.metadata.topics.len(),
            acls = l.acls.len(),
            scram_users = l.scram.len(),
            quota_entities = l.quotas.len(),
            mirror_records = l.mirrors.len(),
            "converting a one-node data dir to the metadata quorum's log"
        );
    }
    dcfg.founding = legacy.map(Arc::new);
    let named = std::sync::atomic::AtomicBool::new(meta.cluster_id.is_some());
    let data_dir = cfg.data_dir.clone();
    dcfg.tls = q.controller_tls.clone();
    let view = Cluster::empty_view();
    let Registries {
        acls,
        quotas,
        scram,
    } = registries;
    let (tx, rx) = flume::unbounded();
    let v = view.clone();
    let mirror_version = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mv = mirror_version.clone();
    let driver = kmirror_cluster::Driver::start_with_state(
        dcfg,
        move |m| {
            if !m.cluster_id.is_empty() && !named.load(std::sync::atomic::Ordering::Relaxed) {
                match kmirror_cluster::meta_properties::set_cluster_id(&data_dir, &meta, &m.cluster_id) {
                    Ok(()) => named.store(true, std::sync::atomic::Ordering::Relaxed),
                    Err(e) => tracing::warn!(error = %e, "cannot record the cluster id in meta.properties"),
                }
            }
            v.publish_arc(m.clone());
            let _ = tx.send(m);
        },
        {
            let acls = acls.clone();
            move |all| acls.publish(all)
        },
        // SCRAM credentials, quotas and the synced entries' owners as the quorum holds them.
        move |node, changed| {
            if changed.scram {
                scram.publish(node.scram().credentials().clone());
            }
            if changed.quotas {
                quotas.publish(node.quotas().all());
            }
            if changed.owners {
                let owners = node.sync_owners();
                acls.publish_owners(owners.acls.clone());
                quotas.publish_owners(owners.quotas.clone());
            }
            if changed.mirrors {
                mv.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            }
        },
    )
    .map_err(|e| NodeError::Quorum(e.to_string()))?;
    // The founding snapshot is durable now: the old files are never read again.
    match kmirror_control::quorum::upgrade::retire_legacy_files(&cfg.data_dir) {
        Ok(moved) if !moved.is_empty() => tracing::info!(
            ?moved,
            to = kmirror_control::quorum::upgrade::RETIRED_DIR,
            "one-node control files converted and moved aside"
        ),
        Ok(_) => {}
        Err(e) => {
            return Err(NodeError::Quorum(format!(
                "moving the converted files: {e}"
            )))
        }
    }
    let cluster = Cluster::replicated(
        &cfg.data_dir,
        view,
        driver.handle(),
        cfg.node_id,
        q.voters.clone(),
    )
    .with_mirror_state_version(mirror_version);
    Ok((cluster, driver, rx))
}
