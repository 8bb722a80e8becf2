//! kmirror-net: the Kafka protocol server. Mirroring lives in `kmirror-mirror`, which plugs in
//! through one seam, [`ExtensionApis`] (extra API keys, their versions, and a hook once the
//! broker has started); this crate does not depend on it.
//!
//! Owns: framing with the size check before allocation (`frame`), the ACL APIs over the
//! durable store (`acl`), the per-API authorization table (`authz`), the served API table and
//! ApiVersions with KIP-511 fallback (`versions`), the listener list (`listeners`: several
//! `PROTOCOL://HOST:PORT`, each advertised to the clients that use it), TLS and certificate
//! principals (`tls`), SASL authentication and the SCRAM credential APIs (`sasl`), client quotas and
//! their produce/fetch byte-rate enforcement (`quota`), the Kafka client with its TLS and SASL
//! (`client`: one stack for peers, mirror sources and the CLI), in-cluster replication, leader
//! and follower side (`replication`), the
//! per-core listeners and connection loop (`server`), the API handlers (`handlers`),
//! zero-copy Fetch response writing (`fetch_encode`; under TLS the chunks are encrypted, so
//! copied), the single internal-error → Kafka-code mapping
//! (`errors`), the broker's view of cluster metadata (`cluster`), and [`start`], which wires
//! the metadata quorum's controller (a lone node: a one-voter quorum), the group coordinator
//! and the engine together.
//!
//! Must not: depend on the mirror crate or talk to other clusters (the client here reaches
//! this cluster's peers; the mirror crate uses it for sources);
//! touch a partition's log except through the engine's router (the owning core); re-encode
//! record batches (they pass through as `Bytes`).
//!
//! Invariants: a malformed frame, unknown key or unsupported version closes only that
//! connection (ApiVersions answers instead, per KIP-511); every error code a client sees
//! comes from `errors`.

pub mod acl;
pub mod authz;
pub mod broker;
pub mod client;
pub mod cluster;
pub mod coordinator_partitions;
pub mod errors;
pub mod features;
pub mod fetch_encode;
pub mod fetch_session;
pub mod frame;
pub mod groups;
pub mod handlers;
pub mod interbroker;
pub mod keys;
pub mod listeners;
pub mod metrics;
pub mod mirror_deps;
pub mod quota;
pub mod replication;
pub mod sasl;
pub mod server;
pub mod session;
pub mod tls;
pub mod txn_markers;
pub mod versions;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use broker::{Broker, BrokerConfig, Ctx, EngineMarkerSink, ExtensionApis};
pub use cluster::Cluster;
use kmirror_engine::{Engine, EngineConfig, Router};
pub use listeners::{Endpoint, ListenerSpec};
use session::SecurityProtocol;
pub use tls::TlsFiles;

/// Errors starting the broker.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum NetError {
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
    Groups(#[from] groups::GroupsError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("ACL store: {0}")]
    Acls(String),
    #[error("SASL: {0}")]
    Sasl(#[from] sasl::SaslError),
    #[error("listener {listener}: {reason}")]
    Tls {
        listener: String,
        reason: tls::TlsError,
    },
    #[error("metadata quorum: {0}")]
    Quorum(String),
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
    pub sasl: sasl::SaslConfig,
    /// Group coordinator settings (group.initial.rebalance.delay.ms, session bounds, ...).
    pub groups: kmirror_control::group::GroupConfig,
}

impl ServerConfig {
    /// The listener specs, or an error if there are none.
    fn checked_listeners(&self) -> Result<&[ListenerSpec], NetError> {
        if self.listeners.is_empty() {
            return Err(NetError::Bind {
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

/// Resolves every listener (picking the port of those with port 0) and builds the TLS
/// acceptors the listeners need: SSL's requires a client certificate when `tls_client_ca` is
/// set; SASL_SSL's never does, as in Kafka, where a broker-wide `ssl.client.auth` does not
/// apply to SASL_SSL listeners (the client authenticates with SASL there). A TLS listener
/// without a usable certificate and key is an error here, before anything starts.
fn resolve(specs: &[ListenerSpec], tls: &TlsFiles) -> Result<(Vec<Endpoint>, Acceptors), NetError> {
    let mut endpoints = Vec::new();
    let mut acceptors = Acceptors::default();
    for spec in specs {
        let slot = match spec.protocol {
            SecurityProtocol::Ssl => Some((&mut acceptors.ssl, tls.clone())),
            SecurityProtocol::SaslSsl => Some((
                &mut acceptors.sasl_ssl,
                TlsFiles {
                    client_ca: None,
                    ..tls.clone()
                },
            )),
            _ => None,
        };
        if let Some((slot, files)) = slot {
            if slot.is_none() {
                let cfg = tls::server_config(&files).map_err(|reason| NetError::Tls {
                    listener: spec.to_string(),
                    reason,
                })?;
                *slot = Some(futures_rustls::TlsAcceptor::from(cfg));
            }
        }
        let addr = spec.resolve().map_err(|e| NetError::Bind {
            addr: spec.to_string(),
            source: e,
        })?;
        endpoints.push(Endpoint {
            name: spec.name.clone(),
            protocol: spec.protocol,
            host: spec.advertised_host(),
            port: addr.port() as i32,
            addr,
        });
    }
    Ok((endpoints, acceptors))
}

/// The TLS acceptor of each TLS protocol (None: no such listener).
#[derive(Default)]
struct Acceptors {
    ssl: Option<futures_rustls::TlsAcceptor>,
    sasl_ssl: Option<futures_rustls::TlsAcceptor>,
}

impl Acceptors {
    fn for_protocol(&self, p: SecurityProtocol) -> Option<futures_rustls::TlsAcceptor> {
        match p {
            SecurityProtocol::Ssl => self.ssl.clone(),
            SecurityProtocol::SaslSsl => self.sasl_ssl.clone(),
            _ => None,
        }
    }
}

/// Starts a lone node: the only voter of its own metadata quorum (see [`start_with`]).
pub fn start(
    cfg: ServerConfig,
    extension: Option<Arc<dyn ExtensionApis>>,
) -> Result<RunningBroker, NetError> {
    let quorum = cluster::QuorumOptions::single(cfg.node_id);
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
    quorum: cluster::QuorumOptions,
) -> Result<RunningBroker, NetError> {
    let (endpoints, acceptors) = resolve(cfg.checked_listeners()?, &cfg.tls)?;
    let (host, port) = (endpoints[0].host.clone(), endpoints[0].port);
    std::fs::create_dir_all(&cfg.data_dir)?;
    let sasl = Arc::new(sasl::Sasl::open(cfg.sasl.clone())?);
    let acls: acl::SharedAcls = Arc::new(acl::AclRegistry::empty());
    let quotas: quota::SharedQuotas = Arc::new(quota::QuotaRegistry::empty());
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
    let markers: Arc<dyn groups::MarkerSink> = Arc::new(txn_markers::RoutingMarkerSink::new(
        local_markers,
        cluster.clone(),
        cfg.node_id,
        inter_broker.clone(),
    ));
    let txn_cfg = kmirror_control::txn::TxnConfig::default();
    // Each coordinator runs on the leader of its `__consumer_offsets` /
    // `__transaction_state` partition, its records in that partition.
    let seat = coordinator_partitions::PartitionSeat::new(
        cluster.clone(),
        router_cell.clone(),
        cfg.node_id,
        endpoints[0].name.clone(),
    );
    let groups = groups::GroupsService::start_clustered(
        Arc::new(seat),
        cfg.node_id,
        host.clone(),
        port,
        markers,
        cfg.groups.clone(),
        txn_cfg,
    )?;
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
        authz: authz::Authz::new(cfg.authz.clone(), acls.clone()),
        sasl,
        acls,
        quotas,
    });
    // Every core binds every listener (SO_REUSEPORT) and serves each with its protocol.
    let (bound_tx, bound_rx) = flume::unbounded::<Result<(), (SocketAddr, std::io::Error)>>();
    let b = broker.clone();
    let lctxs: Vec<(SocketAddr, server::ListenerCtx)> = endpoints
        .iter()
        .map(|e| {
            (
                e.addr,
                server::ListenerCtx {
                    name: e.name.clone(),
                    protocol: e.protocol,
                    tls: acceptors.for_protocol(e.protocol),
                },
            )
        })
        .collect();
    let engine = Engine::start(cfg.engine.clone(), cluster.catalog(), move |core| {
        let broker = b.clone();
        let bound_tx = bound_tx.clone();
        let lctxs = lctxs.clone();
        async move {
            let mut bound = Vec::new();
            for (addr, lctx) in lctxs {
                match server::bind(addr) {
                    Ok((listener, _)) => bound.push((listener, lctx)),
                    Err(e) => {
                        let _ = bound_tx.send(Err((addr, e)));
                        return;
                    }
                }
            }
            let _ = bound_tx.send(Ok(()));
            let ctx = Rc::new(Ctx::new(broker, core));
            glommio::spawn_local(replication::run(ctx.clone())).detach();
            glommio::spawn_local(replication::follower::run(ctx.clone())).detach();
            let tasks: Vec<_> = bound
                .into_iter()
                .map(|(listener, lctx)| {
                    glommio::spawn_local(server::serve(ctx.clone(), listener, lctx))
                })
                .collect();
            for t in tasks {
                t.await;
            }
        }
    })?;
    let _ = router_cell.set(engine.router().clone());
    for _ in 0..engine.router().cores() {
        let r = bound_rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| Err((endpoints[0].addr, std::io::ErrorKind::TimedOut.into())));
        if let Err((addr, e)) = r {
            engine.stop();
            return Err(NetError::Bind {
                addr: addr.to_string(),
                source: e,
            });
        }
    }
    cluster::spawn_reconciler(cluster.clone(), engine.router().clone(), updates)?;
    let seed = bootstrap_scram(&cfg.data_dir, broker.sasl.scram.clone())?;
    let registered = register(&cluster, engine.router(), cfg.node_id, &endpoints, seed)?;
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
    convert_described_internal_topics(&broker, engine.router())?;
    if let Some(ext) = &broker.extension {
        ext.started(broker.clone(), engine.router());
    }
    Ok(RunningBroker {
        engine,
        broker,
        driver,
    })
}

/// Internal topics an older version only described (`ClusterMetadata::internal_topics`: an
/// id and a partition count, no partitions) become real topics once this node is
/// registered, keeping their ids and partition counts, so nothing serves them as a special
/// case and their coordinators load the moved state from real partitions. A task on core 0
/// (a proposal is a message to the controller thread), retried while no leader takes it;
/// any node may propose it, and a topic already converted is left alone.
fn convert_described_internal_topics(
    broker: &Arc<Broker>,
    router: &kmirror_engine::Router,
) -> Result<(), NetError> {
    let broker = broker.clone();
    router
        .spawn_on_queued(0, move || async move {
            let me = broker.config.node_id;
            loop {
                let meta = broker.cluster.snapshot();
                let registered = meta.brokers.get(&me).is_some_and(|b| !b.fenced);
                if registered && meta.internal_topics.is_empty() {
                    return;
                }
                if registered {
                    for name in meta.internal_topics.keys() {
                        match broker.propose_internal_topic(name).await {
                            Ok(_) => tracing::info!(topic = %name, "described-only internal topic converted to a real one"),
                            Err((code, msg)) => tracing::debug!(topic = %name, code, %msg, "internal topic conversion pending"),
                        }
                    }
                }
                glommio::timer::sleep(Duration::from_millis(500)).await;
            }
        })
        .map_err(|e| NetError::Quorum(format!("starting the internal topic conversion: {e}")))
}

/// The inter-broker listener and client security of a node: the one named in the quorum options (it
/// must be one of this node's listeners), else the first listener in the clear.
fn inter_broker_of(
    q: &cluster::QuorumOptions,
    endpoints: &[Endpoint],
    node_id: i32,
) -> Result<interbroker::InterBroker, NetError> {
    let first = &endpoints[0].name;
    if let Some(name) = &q.inter_broker_listener {
        if !endpoints.iter().any(|e| &e.name == name) {
            return Err(NetError::Quorum(format!(
                "inter-broker listener {name} is not one of this node's listeners ({})",
                endpoints
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(interbroker::InterBroker::new(
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
    acls: acl::SharedAcls,
    quotas: quota::SharedQuotas,
    scram: Arc<kmirror_control::scram::ScramRegistry>,
}

/// Starts this node's metadata quorum driver; its publications go into the cluster's view,
/// the registries and the returned channel (for the replica reconciler).
#[allow(clippy::type_complexity)]
fn start_quorum(
    cfg: &ServerConfig,
    q: &cluster::QuorumOptions,
    registries: Registries,
) -> Result<
    (
        Cluster,
        kmirror_cluster::Driver,
        flume::Receiver<Arc<kmirror_control::metadata::ClusterMetadata>>,
    ),
    NetError,
> {
    let node = u64::try_from(cfg.node_id)
        .map_err(|_| NetError::Quorum(format!("node id {} is not a voter id", cfg.node_id)))?;
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
        .map_err(|e| NetError::Quorum(format!("meta.properties: {e}")))?;
    dcfg.directory_id = meta.directory_id.clone();
    // A lone node's data dir of the old layout (local control files): its log starts from
    // them (the quorum ignores this once its log exists).
    let legacy = if q.is_single(cfg.node_id) {
        kmirror_control::quorum::upgrade::legacy_state(&cfg.data_dir, cfg.node_id)
            .map_err(|e| NetError::Quorum(e.to_string()))?
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
        move |all| acls.publish(all),
        // SCRAM credentials and quotas as the quorum holds them.
        move |node, changed| {
            if changed.scram {
                scram.publish(node.scram().credentials().clone());
            }
            if changed.quotas {
                quotas.publish(node.quotas().all());
            }
            if changed.mirrors {
                mv.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            }
        },
    )
    .map_err(|e| NetError::Quorum(e.to_string()))?;
    // The founding snapshot is durable now: the old files are never read again.
    match kmirror_control::quorum::upgrade::retire_legacy_files(&cfg.data_dir) {
        Ok(moved) if !moved.is_empty() => tracing::info!(
            ?moved,
            to = kmirror_control::quorum::upgrade::RETIRED_DIR,
            "one-node control files converted and moved aside"
        ),
        Ok(_) => {}
        Err(e) => return Err(NetError::Quorum(format!("moving the converted files: {e}"))),
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

/// Registers this broker with the quorum (with its advertised listeners), in the
/// background (a task on core 0; proposals are messages to the controller thread): until a
/// leader exists the proposal is retried every 500 ms. A new incarnation id per start
/// replaces the earlier registration.
fn register(
    cluster: &Cluster,
    router: &kmirror_engine::Router,
    node_id: i32,
    endpoints: &[Endpoint],
    seed: Option<ScramSeed>,
) -> Result<flume::Receiver<()>, NetError> {
    use kmirror_control::metadata::{BrokerEndpoint, BrokerRegistration};
    use kmirror_control::quorum::{ClusterCommand, MetadataCommand};
    let reg = BrokerRegistration {
        id: node_id,
        incarnation: uuid::Uuid::new_v4(),
        endpoints: endpoints
            .iter()
            .map(|e| BrokerEndpoint {
                name: e.name.clone(),
                host: e.host.clone(),
                port: e.port as u16,
                security_protocol: match e.protocol {
                    SecurityProtocol::Plaintext => 0,
                    SecurityProtocol::Ssl => 1,
                    SecurityProtocol::SaslPlaintext => 2,
                    SecurityProtocol::SaslSsl => 3,
                },
            })
            .collect(),
        rack: None,
        fenced: false,
    };
    let cluster = cluster.clone();
    let (done, registered) = flume::bounded(1);
    router
        .spawn_on_queued(0, move || async move {
            loop {
                let cmd = ClusterCommand::Metadata(MetadataCommand::RegisterBroker(reg.clone()));
                match cluster.propose(cmd).await {
                    Ok(_) => {
                        tracing::info!(
                            node = node_id,
                            "broker registered with the metadata quorum"
                        );
                        if let Some(seed) = seed {
                            seed.propose(&cluster).await;
                        }
                        let _ = done.send(());
                        return;
                    }
                    Err(e) => {
                        tracing::info!(node = node_id, error = %e, "broker registration pending");
                        glommio::timer::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        })
        .map_err(|e| NetError::Quorum(format!("starting the registration: {e}")))?;
    Ok(registered)
}

/// The SCRAM credentials `kmirror scram add` wrote to this node's data directory, offered to
/// a quorum that holds none (Kafka's `kafka-storage format --add-scram` bootstrap records):
/// a cluster whose only listeners need SASL has its inter-broker user before any node can
/// authenticate to another.
struct ScramSeed {
    local: kmirror_control::scram::Credentials,
    replicated: Arc<kmirror_control::scram::ScramRegistry>,
}

fn bootstrap_scram(
    data_dir: &std::path::Path,
    replicated: Arc<kmirror_control::scram::ScramRegistry>,
) -> Result<Option<ScramSeed>, NetError> {
    let local = kmirror_control::scram::ScramStore::open(data_dir)
        .map_err(|e| NetError::Quorum(format!("SCRAM credentials: {e}")))?
        .credentials()
        .clone();
    Ok((!local.is_empty()).then_some(ScramSeed { local, replicated }))
}

impl ScramSeed {
    /// Called once this node's registration applied here, so the replicated set it checks
    /// already holds every earlier change: only an empty one is seeded, and a later
    /// rotation through the API is never undone by a stale local file.
    async fn propose(self, cluster: &Cluster) {
        use kmirror_control::quorum::ClusterCommand;
        use kmirror_control::scram::ScramEdit;
        if !self.replicated.snapshot().is_empty() {
            return;
        }
        let edits: Vec<ScramEdit> = self
            .local
            .iter()
            .flat_map(|(user, by_mech)| {
                by_mech.iter().map(move |(mech, c)| ScramEdit::Upsert {
                    user: user.clone(),
                    mechanism: mech.code(),
                    iterations: c.iterations,
                    salt: c.salt.clone(),
                    stored_key: c.stored_key.clone(),
                    server_key: c.server_key.clone(),
                })
            })
            .collect();
        let users = self.local.keys().cloned().collect::<Vec<_>>().join(",");
        match cluster.propose(ClusterCommand::Scram { edits }).await {
            Ok(_) => tracing::info!(%users, "quorum seeded with this node's SCRAM credentials"),
            Err(e) => {
                tracing::warn!(%users, error = %e, "seeding the quorum's SCRAM credentials failed")
            }
        }
    }
}
