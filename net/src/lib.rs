//! kmirror-net: the Kafka protocol server (and, in the mirror modules, the client side).
//!
//! Owns: framing with the size check before allocation (`frame`), the ACL APIs over the
//! durable store (`acl`), the per-API authorization table (`authz`), the served API table and
//! ApiVersions with KIP-511 fallback (`versions`), the per-core listener and connection loop
//! (`server`), the API handlers (`handlers`), zero-copy Fetch response writing
//! (`fetch_encode`), the single internal-error → Kafka-code mapping
//! (`errors`), the broker's view of cluster metadata (`cluster`), and [`start`], which wires
//! the metadata control thread, the group coordinator and the engine together.
//!
//! Must not: touch a partition's log except through the engine's router (the owning core);
//! re-encode record batches (they pass through as `Bytes`).
//!
//! Invariants: a malformed frame, unknown key or unsupported version closes only that
//! connection (ApiVersions answers instead, per KIP-511); every error code a client sees
//! comes from `errors`.

pub mod acl;
pub mod authz;
pub mod broker;
pub mod client;
pub mod cluster;
pub mod errors;
pub mod fetch_encode;
pub mod frame;
pub mod groups;
pub mod handlers;
pub mod keys;
pub mod metrics;
pub mod mirror_api;
pub mod mirror_fetcher;
pub mod mirror_host;
pub mod mirror_manager;
pub mod mirror_service;
pub mod server;
pub mod session;
pub mod versions;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use broker::{Broker, BrokerConfig, Ctx, EngineMarkerSink, ExtensionApis};
pub use cluster::Cluster;
use kmirror_engine::{Engine, EngineConfig, Router};

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
}

/// Everything needed to run a broker.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// HOST:PORT to listen on; the host is also the advertised host. Port 0 picks a free port.
    pub listen: String,
    pub node_id: i32,
    pub data_dir: PathBuf,
    pub max_request_bytes: usize,
    pub auto_create_topics: bool,
    pub default_partitions: i32,
    pub engine: EngineConfig,
    /// `authorizer`, `super_users`, `allow_everyone_if_no_acl_found`.
    pub authz: kmirror_control::authz::AuthzConfig,
}

/// A running broker.
pub struct RunningBroker {
    engine: Engine,
    addr: SocketAddr,
    broker: Arc<Broker>,
}

impl RunningBroker {
    /// The address every core listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
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
        let RunningBroker { engine, broker, .. } = self;
        engine.stop();
        if let Some(g) = &broker.groups {
            g.shutdown();
        }
    }
}

fn resolve(listen: &str) -> Result<(String, SocketAddr), NetError> {
    let bind_err = |e: std::io::Error| NetError::Bind {
        addr: listen.to_string(),
        source: e,
    };
    let mut addr = listen
        .to_socket_addrs()
        .map_err(bind_err)?
        .next()
        .ok_or_else(|| bind_err(std::io::ErrorKind::AddrNotAvailable.into()))?;
    let host = listen.rsplit_once(':').map(|(h, _)| h).unwrap_or(listen);
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if addr.port() == 0 {
        // Every core must bind the same port: pick one now.
        let probe = std::net::TcpListener::bind(addr).map_err(bind_err)?;
        addr.set_port(probe.local_addr().map_err(bind_err)?.port());
    }
    let host = if host.is_empty() || host == "0.0.0.0" || host == "::" {
        "localhost".to_string()
    } else {
        host
    };
    Ok((host, addr))
}

/// Starts the broker: metadata control thread, group coordinator, per-core listeners.
/// Returns once every core accepts connections.
pub fn start(
    cfg: ServerConfig,
    extension: Option<Arc<dyn ExtensionApis>>,
) -> Result<RunningBroker, NetError> {
    let (host, addr) = resolve(&cfg.listen)?;
    std::fs::create_dir_all(&cfg.data_dir)?;
    let cluster = Cluster::start(&cfg.data_dir)?;
    let router_cell = Arc::new(OnceLock::new());
    let groups = groups::GroupsService::start(
        &cfg.data_dir,
        cfg.node_id,
        host.clone(),
        addr.port() as i32,
        Arc::new(EngineMarkerSink::new(router_cell.clone())),
    )?;
    let broker = Arc::new(Broker {
        config: BrokerConfig {
            node_id: cfg.node_id,
            host,
            port: addr.port() as i32,
            data_dir: cfg.data_dir.clone(),
            max_request_bytes: cfg.max_request_bytes,
            auto_create_topics: cfg.auto_create_topics,
            default_partitions: cfg.default_partitions,
        },
        cluster: cluster.clone(),
        groups: Some(groups),
        extension,
        metrics: Default::default(),
        authz: authz::Authz::new(
            cfg.authz.clone(),
            acl::store_for(&cfg.data_dir).map_err(|e| NetError::Acls(e.to_string()))?,
        ),
    });
    let (bound_tx, bound_rx) = flume::unbounded::<Result<(), std::io::Error>>();
    let b = broker.clone();
    let engine = Engine::start(cfg.engine.clone(), cluster.catalog(), move |core| {
        let broker = b.clone();
        let bound_tx = bound_tx.clone();
        async move {
            match server::bind(addr) {
                Ok((listener, _)) => {
                    let _ = bound_tx.send(Ok(()));
                    server::serve(Rc::new(Ctx::new(broker, core)), listener).await;
                }
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                }
            }
        }
    })?;
    let _ = router_cell.set(engine.router().clone());
    for _ in 0..engine.router().cores() {
        let r = bound_rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()));
        if let Err(e) = r {
            engine.stop();
            return Err(NetError::Bind {
                addr: addr.to_string(),
                source: e,
            });
        }
    }
    if let Some(ext) = &broker.extension {
        ext.started(&broker, engine.router());
    }
    Ok(RunningBroker {
        engine,
        addr,
        broker,
    })
}
