//! What a broker does on its cores while it starts: serve a core ([`serve_core`]: its
//! listeners and both sides of in-cluster replication), register with the metadata quorum
//! ([`register`], with the SCRAM credentials of `kmirror scram add` as the quorum's seed,
//! [`ScramSeed`]), and turn an older data dir's described-only internal topics into real
//! ones ([`convert_described_internal_topics`]). The node (the `kmirror` crate's `node`)
//! assembles the broker and calls these; they are here because they run as tasks on the
//! engine's cores, whose runtime this crate owns.
//!
//! Must not: block a core (proposals are messages to the controller thread, retried with a
//! timer).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use kmirror_engine::{CoreContext, EngineError, Router};

use crate::broker::{Broker, Ctx};
use crate::cluster::Cluster;
use crate::listeners::Endpoint;
use crate::session::SecurityProtocol;
use crate::{replication, server};

/// A listener bound on one core, or the address that could not be bound and why.
pub type Bound = Result<(), (SocketAddr, std::io::Error)>;

/// Serves one engine core for `broker` until the engine stops: binds every listener on
/// this core (SO_REUSEPORT; each core accepts on its own socket), reports on `bound` (once),
/// runs the leader and follower sides of in-cluster replication, then serves connections.
pub async fn serve_core(
    broker: Arc<Broker>,
    core: CoreContext,
    listeners: Vec<(SocketAddr, server::ListenerCtx)>,
    bound: std::sync::mpsc::Sender<Bound>,
) {
    let mut sockets = Vec::new();
    for (addr, lctx) in listeners {
        match server::bind(addr) {
            Ok((listener, _)) => sockets.push((listener, lctx)),
            Err(e) => {
                let _ = bound.send(Err((addr, e)));
                return;
            }
        }
    }
    let _ = bound.send(Ok(()));
    let ctx = Rc::new(Ctx::new(broker, core));
    glommio::spawn_local(replication::run(ctx.clone())).detach();
    glommio::spawn_local(replication::follower::run(ctx.clone())).detach();
    let tasks: Vec<_> = sockets
        .into_iter()
        .map(|(listener, lctx)| glommio::spawn_local(server::serve(ctx.clone(), listener, lctx)))
        .collect();
    for t in tasks {
        t.await;
    }
}

/// Internal topics an older version only described (`ClusterMetadata::internal_topics`: an
/// id and a partition count, no partitions) become real topics once this node is
/// registered, keeping their ids and partition counts, so nothing serves them as a special
/// case and their coordinators load the moved state from real partitions. A task on core 0
/// (a proposal is a message to the controller thread), retried while no leader takes it;
/// any node may propose it, and a topic already converted is left alone.
pub fn convert_described_internal_topics(
    broker: &Arc<Broker>,
    router: &Router,
) -> Result<(), EngineError> {
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
}

/// Registers this broker with the quorum (with its advertised listeners), in the
/// background (a task on core 0; proposals are messages to the controller thread): until a
/// leader exists the proposal is retried every 500 ms. A new incarnation id per start
/// replaces the earlier registration.
pub fn register(
    cluster: &Cluster,
    router: &Router,
    node_id: i32,
    endpoints: &[Endpoint],
    seed: Option<ScramSeed>,
) -> Result<flume::Receiver<()>, EngineError> {
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
    router.spawn_on_queued(0, move || async move {
        loop {
            let cmd = ClusterCommand::Metadata(MetadataCommand::RegisterBroker(reg.clone()));
            match cluster.propose(cmd).await {
                Ok(_) => {
                    tracing::info!(node = node_id, "broker registered with the metadata quorum");
                    cluster.mark_registered();
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
    })?;
    Ok(registered)
}

/// The SCRAM credentials `kmirror scram add` wrote to this node's data directory, offered to
/// a quorum that holds none (Kafka's `kafka-storage format --add-scram` bootstrap records):
/// a cluster whose only listeners need SASL has its inter-broker user before any node can
/// authenticate to another.
pub struct ScramSeed {
    local: kmirror_control::scram::Credentials,
    replicated: Arc<kmirror_control::scram::ScramRegistry>,
}

impl ScramSeed {
    /// The credentials in `data_dir` (None: there are none), to be offered to the quorum
    /// whose applied set is `replicated`.
    pub fn load(
        data_dir: &std::path::Path,
        replicated: Arc<kmirror_control::scram::ScramRegistry>,
    ) -> Result<Option<ScramSeed>, kmirror_control::scram::ScramError> {
        let local = kmirror_control::scram::ScramStore::open(data_dir)?
            .credentials()
            .clone();
        Ok((!local.is_empty()).then_some(ScramSeed { local, replicated }))
    }

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
