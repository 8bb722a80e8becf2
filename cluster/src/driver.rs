//! The driver thread: owns one [`QuorumNode`], ticks it, steps the messages the listener
//! receives, sends what it produces, runs proposals to their end and publishes the applied
//! metadata.
//!
//! Proposals go through any node: a follower forwards them to the leader inside Raft, and a
//! proposal completes on the node it was made on once that node has applied it, so the
//! metadata published by that node already holds the change when the caller gets the answer
//! (a broker answering CreateTopics can then serve the topic at once). Kafka forwards admin
//! requests to the active controller the same way. A proposal Raft reports dropped (never
//! applied) or that finds no leader is retried until its deadline.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;

use arc_swap::ArcSwap;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use kmirror_control::acl::AclBinding;
use kmirror_control::metadata::ClusterMetadata;
use kmirror_control::quorum::{
    ApplyError, ClusterCommand, MembershipChange, MetadataCommand, Outcome, ProposalId,
    ProposalResult, ProposeError, QuorumConfig, QuorumError, QuorumMember, QuorumNode,
};
use raft::eraftpb::{Message, MessageType};

use crate::transport::{Blocked, Listener, Senders};
use crate::voters::Voter;

/// Events queued for the driver thread.
const EVENT_QUEUE: usize = 4096;

/// Settings of one controller.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub node_id: u64,
    /// The quorum's storage directory (`<data-dir>/__cluster_metadata-0`).
    pub data_dir: PathBuf,
    /// The controller listener, `HOST:PORT` (port 0 picks a free one).
    pub listen: String,
    /// The voters and their controller addresses.
    pub voters: Vec<Voter>,
    /// A node joining an existing cluster (not one of the founding voters): it starts empty,
    /// asks the voters to take it as an observer (a raft learner) and may be made a voter
    /// later (AddRaftVoter). The voters' addresses are only where it asks.
    pub join: bool,
    /// Kafka's `directory.id` of this node's metadata directory (reported in DescribeQuorum,
    /// checked by AddRaftVoter / RemoveRaftVoter).
    pub directory_id: String,
    /// The controller address others reach this node at (default: `listen`, or this node's
    /// entry in `voters`).
    pub advertise: Option<String>,
    pub tick: Duration,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    pub snapshot_every: u64,
    /// Kafka's `broker.session.timeout.ms`: while this node leads, a registered broker it has
    /// not heard from for this long is fenced, and unfenced once it is heard again. `None`:
    /// the driver never fences (brokers are managed by whoever proposes).
    pub session_timeout: Option<Duration>,
    /// Kafka's `auto.leader.rebalance.enable` with `leader.imbalance.check.interval.seconds`:
    /// while this node leads, every interval it elects the preferred leader of each partition
    /// led elsewhere whose preferred replica is unfenced and in the ISR. `None`: never.
    pub leader_rebalance: Option<Duration>,
    /// Mutual TLS on the controller listener and to the peers (`None`: plaintext).
    pub tls: Option<crate::transport::ControllerTls>,
    /// The state a founding voter's empty log starts from (an old one-node data dir,
    /// `kmirror_control::quorum::upgrade`); `None`: empty.
    pub founding: Option<Arc<kmirror_control::quorum::upgrade::LegacyState>>,
}

impl DriverConfig {
    pub fn new(node_id: u64, data_dir: PathBuf, listen: String, voters: Vec<Voter>) -> Self {
        DriverConfig {
            node_id,
            data_dir,
            listen,
            voters,
            join: false,
            directory_id: String::new(),
            advertise: None,
            tick: Duration::from_millis(100),
            election_ticks: 10,
            heartbeat_ticks: 1,
            snapshot_every: 1000,
            session_timeout: None,
            leader_rebalance: None,
            tls: None,
            founding: None,
        }
    }
}

/// The quorum as one node sees it (for DescribeQuorum and logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuorumStatus {
    pub node_id: u64,
    pub leader: Option<u64>,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub snapshot_index: u64,
    pub voters: Vec<u64>,
    /// The observers (raft learners): members that receive the log and do not vote.
    pub learners: Vec<u64>,
    /// The members' controller addresses and directory ids, as replicated.
    pub members: Vec<QuorumMember>,
    /// On the leader: each member's replicated log end (`(id, index)`); empty on a follower.
    pub progress: Vec<(u64, u64)>,
    /// On the leader: how long ago each member was last heard from (`(id, ms)`).
    pub last_heard_ms: Vec<(u64, u64)>,
    /// This node leads and applied its whole log: it may run the group and transaction
    /// coordinators (`QuorumNode::coordinator_ready`).
    pub coordinator_ready: bool,
}

/// Which replicated stores besides metadata and ACLs an applied poll changed (all set once
/// at start, and after a snapshot was installed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateChanges {
    pub scram: bool,
    pub quotas: bool,
    /// The ACL or quota owners ([`QuorumNode::sync_owners`]) may have changed.
    pub owners: bool,
    pub mirrors: bool,
    pub coordinator: bool,
}

impl StateChanges {
    fn any(&self) -> bool {
        self.scram || self.quotas || self.owners || self.mirrors || self.coordinator
    }
}

/// Called on the driver thread after a poll changed replicated state: read what changed
/// from the node (quickly; it must not propose).
type StateListener = Box<dyn Fn(&QuorumNode, StateChanges) + Send>;
/// A read of the applied state on the driver thread.
type Reader = Box<dyn FnOnce(&QuorumNode) + Send>;

/// Why a proposal did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ProposalError {
    /// Committed, and refused by the state machine on every node (e.g. the topic exists).
    #[error(transparent)]
    Rejected(ApplyError),
    /// No leader could take it before the deadline; it was not applied.
    #[error("no leader before the deadline (last known leader: {leader:?})")]
    NoLeader { leader: Option<u64> },
    /// It may or may not be applied (the deadline passed while it was in flight).
    #[error("the outcome is unknown (timed out while in flight)")]
    Unknown,
    /// Refused without being proposed (e.g. a membership change while another is pending).
    #[error("refused: {0}")]
    Refused(String),
    /// The driver is stopped or overloaded.
    #[error("the controller is not running or is overloaded")]
    Unavailable,
    /// An AddRaftVoter / RemoveRaftVoter refused by its checks (Kafka's answers).
    #[error(transparent)]
    Voter(#[from] VoterError),
}

/// Why a voter change was refused before it was proposed (Kafka's `AddVoterHandler` /
/// `RemoveVoterHandler` checks, in their order).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoterError {
    /// Another membership change is not applied yet (Kafka: REQUEST_TIMED_OUT).
    #[error("waiting for the previous voter change to be applied")]
    ChangePending,
    /// The id is a voter already (DUPLICATE_VOTER).
    #[error("node {0} is already a voter")]
    Duplicate(u64),
    /// The node is not an observer with that directory id, or it lags (REQUEST_TIMED_OUT,
    /// as Kafka answers for a replica it does not see caught up).
    #[error("node {id} with directory id {directory_id} is not a caught-up observer")]
    NotCaughtUp { id: u64, directory_id: String },
    /// No voter with that id and directory id, or it is the last one (VOTER_NOT_FOUND).
    #[error("no voter {id} with directory id {directory_id} that can be removed")]
    NotFound { id: u64, directory_id: String },
}

/// A voter change as Kafka's AddRaftVoter / RemoveRaftVoter ask it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoterChange {
    Add {
        id: u64,
        directory_id: String,
    },
    Remove {
        id: u64,
        directory_id: String,
    },
    /// Drops an observer from the configuration (after UnregisterBroker of a node gone for
    /// good); a node that is not an observer is left alone.
    RemoveObserver {
        id: u64,
    },
}

/// Errors starting a driver.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("controller listener {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Quorum(#[from] QuorumError),
    #[error("cannot start the driver thread: {0}")]
    Thread(std::io::Error),
}

enum Request {
    Command(ClusterCommand),
    Membership(MembershipChange),
    /// Checked against the applied state, then proposed as a membership change (on any
    /// node: raft forwards it to the leader).
    Voter(VoterChange),
    /// A checked voter change, proposed (again after a drop).
    Checked(MembershipChange),
}

enum Event {
    /// A Raft message, the directory id its connection's hello stated, and when it arrived
    /// (the sender's liveness).
    Raft(Message, Option<Arc<str>>, Instant),
    Propose {
        request: Request,
        deadline: Instant,
        reply: flume::Sender<Result<Outcome, ProposalError>>,
    },
    /// Runs a read of the applied state (e.g. the coordinator logs a new coordinator loads).
    Read(Reader),
}

struct Waiter {
    request: Request,
    deadline: Instant,
    reply: flume::Sender<Result<Outcome, ProposalError>>,
    last_leader: Option<u64>,
}

/// A cloneable handle for proposing and reading the status.
#[derive(Clone)]
pub struct DriverHandle {
    tx: SyncSender<Event>,
    status: Arc<ArcSwap<QuorumStatus>>,
}

impl DriverHandle {
    /// Proposes `cmd` and waits (at most `timeout`) until this node applied it.
    pub fn propose(
        &self,
        cmd: ClusterCommand,
        timeout: Duration,
    ) -> Result<Outcome, ProposalError> {
        self.submit(Request::Command(cmd), timeout)
    }

    /// Adds or removes a voter (proposed on the leader; this node must be it).
    pub fn change_membership(
        &self,
        change: MembershipChange,
        timeout: Duration,
    ) -> Result<Outcome, ProposalError> {
        self.submit(Request::Membership(change), timeout)
    }

    /// Kafka's AddRaftVoter / RemoveRaftVoter: checks the change against the applied state
    /// (and, on the leader, the observer's progress), then proposes it through any node.
    /// Removing a voter demotes it to an observer, as a Kafka combined node that left the
    /// voter set keeps fetching the log.
    pub fn change_voters(
        &self,
        change: VoterChange,
        timeout: Duration,
    ) -> Result<Outcome, ProposalError> {
        self.submit(Request::Voter(change), timeout)
    }

    /// The latest status (lock-free: engine cores read it for Metadata's controller id).
    pub fn status(&self) -> Arc<QuorumStatus> {
        self.status.load_full()
    }

    /// Runs `f` on the driver thread against the applied state and returns its result
    /// (`None`: the driver is gone, overloaded, or did not answer within `timeout`). Blocks
    /// the calling thread: never call it from an engine core.
    pub fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&QuorumNode) -> R + Send + 'static,
        timeout: Duration,
    ) -> Option<R> {
        let (tx, rx) = mpsc::channel();
        let reader: Reader = Box::new(move |n| {
            let _ = tx.send(f(n));
        });
        self.tx.try_send(Event::Read(reader)).ok()?;
        rx.recv_timeout(timeout).ok()
    }

    /// [`DriverHandle::propose`] for async callers (an engine core): the driver thread
    /// answers on a channel the caller awaits, so no thread waits for the commit. The driver
    /// answers every proposal by its deadline, or drops the channel when it stops.
    pub async fn propose_async(
        &self,
        cmd: ClusterCommand,
        timeout: Duration,
    ) -> Result<Outcome, ProposalError> {
        self.submit_async(Request::Command(cmd), timeout).await
    }

    /// [`DriverHandle::change_voters`] for async callers.
    pub async fn change_voters_async(
        &self,
        change: VoterChange,
        timeout: Duration,
    ) -> Result<Outcome, ProposalError> {
        self.submit_async(Request::Voter(change), timeout).await
    }

    fn enqueue(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<flume::Receiver<Result<Outcome, ProposalError>>, ProposalError> {
        let (reply, rx) = flume::bounded(1);
        let deadline = Instant::now() + timeout;
        let ev = Event::Propose {
            request,
            deadline,
            reply,
        };
        match self.tx.try_send(ev) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                Err(ProposalError::Unavailable)
            }
        }
    }

    fn submit(&self, request: Request, timeout: Duration) -> Result<Outcome, ProposalError> {
        let rx = self.enqueue(request, timeout)?;
        // The driver answers by the deadline; the margin covers one loop iteration.
        rx.recv_timeout(timeout + Duration::from_secs(1))
            .unwrap_or(Err(ProposalError::Unavailable))
    }

    async fn submit_async(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Outcome, ProposalError> {
        let rx = self.enqueue(request, timeout)?;
        rx.recv_async()
            .await
            .unwrap_or(Err(ProposalError::Unavailable))
    }
}

/// A running controller: listener, senders and the driver thread. Dropping it stops all of
/// them (as a crash would: nothing beyond what is already durable is written).
pub struct Driver {
    handle: DriverHandle,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    listener: Option<Listener>,
    senders: Arc<Senders>,
    /// The partition switch shared with the transport (driven by tests).
    #[cfg_attr(not(test), allow(dead_code))]
    blocked: Blocked,
}

impl Driver {
    /// Opens the quorum storage, binds the listener and starts the driver thread. `publish`
    /// is called on the driver thread with the applied metadata: once at start and after
    /// every change. It must be quick and must not propose (the driver would wait on itself).
    pub fn start(
        cfg: DriverConfig,
        publish: impl Fn(Arc<ClusterMetadata>) + Send + 'static,
    ) -> Result<Driver, DriverError> {
        Self::start_with_acls(cfg, publish, |_| {})
    }

    /// [`Driver::start`], also publishing the replicated ACL set through `publish_acls` (at
    /// start and after every ACL command, before the proposer gets its answer).
    pub fn start_with_acls(
        cfg: DriverConfig,
        publish: impl Fn(Arc<ClusterMetadata>) + Send + 'static,
        publish_acls: impl Fn(Vec<AclBinding>) + Send + 'static,
    ) -> Result<Driver, DriverError> {
        Self::start_with_state(cfg, publish, publish_acls, |_, _| {})
    }

    /// [`Driver::start_with_acls`], also calling `on_state` (on the driver thread) at start
    /// and whenever SCRAM credentials, quotas, mirror state or coordinator logs changed,
    /// before the proposer of the change gets its answer.
    pub fn start_with_state(
        cfg: DriverConfig,
        publish: impl Fn(Arc<ClusterMetadata>) + Send + 'static,
        publish_acls: impl Fn(Vec<AclBinding>) + Send + 'static,
        on_state: impl Fn(&QuorumNode, StateChanges) + Send + 'static,
    ) -> Result<Driver, DriverError> {
        let initial: Vec<u64> = if cfg.join {
            Vec::new()
        } else {
            cfg.voters.iter().map(|v| v.id).collect()
        };
        let mut qcfg = QuorumConfig::new(cfg.node_id, initial);
        qcfg.election_tick = cfg.election_ticks;
        qcfg.heartbeat_tick = cfg.heartbeat_ticks;
        qcfg.snapshot_every = cfg.snapshot_every;
        // Deadlines are enforced by the driver; this only bounds the node's bookkeeping.
        qcfg.proposal_timeout_ticks = 10_000;
        let node = QuorumNode::open_founding(&cfg.data_dir, qcfg, cfg.founding.as_deref())?;

        let (tx, rx) = mpsc::sync_channel(EVENT_QUEUE);
        let blocked = Blocked::default();
        let listener = {
            let tx = tx.clone();
            Listener::bind(
                &cfg.listen,
                blocked.clone(),
                cfg.tls.clone(),
                move |m, dir| {
                    // A full queue drops the message; Raft retransmits.
                    let _ = tx.try_send(Event::Raft(m, dir, Instant::now()));
                },
            )
            .map_err(|source| DriverError::Listen {
                addr: cfg.listen.clone(),
                source,
            })?
        };
        let senders = Arc::new(Senders::new(
            cfg.node_id,
            cfg.directory_id.clone(),
            blocked.clone(),
            cfg.tls.clone(),
        ));
        let mut peers = HashMap::new();
        for v in &cfg.voters {
            senders.add_peer(v.id, &v.addr);
            peers.insert(v.id, v.addr.clone());
        }
        let bound = listener.local_addr();
        let addr = cfg
            .advertise
            .clone()
            .or_else(|| {
                // Port 0 (a lone node's loopback controller listener): the bound address.
                cfg.voters
                    .iter()
                    .find(|v| v.id == cfg.node_id && !v.addr.ends_with(":0"))
                    .map(|v| v.addr.clone())
            })
            .unwrap_or_else(|| {
                if bound.ip().is_unspecified() {
                    format!("127.0.0.1:{}", bound.port())
                } else {
                    bound.to_string()
                }
            });
        let me = QuorumMember {
            id: cfg.node_id,
            addr,
            directory_id: cfg.directory_id.clone(),
        };
        let bootstrap: Vec<u64> = cfg
            .voters
            .iter()
            .map(|v| v.id)
            .filter(|id| *id != cfg.node_id)
            .collect();
        let status = Arc::new(ArcSwap::from_pointee(QuorumStatus::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let mut run = Run {
                node,
                rx,
                senders: senders.clone(),
                status: status.clone(),
                stop: stop.clone(),
                tick: cfg.tick,
                waiting: HashMap::new(),
                retry: Vec::new(),
                publish: Box::new(publish),
                publish_acls: Box::new(publish_acls),
                on_state: Box::new(on_state),
                liveness: Liveness {
                    session_timeout: cfg.session_timeout,
                    last_heard: HashMap::new(),
                    leading: false,
                    proposed: HashMap::new(),
                    may_unfence: Default::default(),
                },
                rebalance: Rebalance {
                    interval: cfg.leader_rebalance,
                    next: None,
                },
                membership: Membership {
                    me,
                    bootstrap,
                    peers,
                    next_join: Instant::now(),
                    next_report: Instant::now(),
                    proposed_learner: HashMap::new(),
                    warned: Default::default(),
                    heard_dir: HashMap::new(),
                },
            };
            thread::Builder::new()
                .name(format!("controller-{}", cfg.node_id))
                .spawn(move || run.run())
                .map_err(DriverError::Thread)?
        };
        Ok(Driver {
            handle: DriverHandle { tx, status },
            stop,
            thread: Some(thread),
            listener: Some(listener),
            senders,
            blocked,
        })
    }

    pub fn handle(&self) -> DriverHandle {
        self.handle.clone()
    }

    /// The bound controller listener address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .as_ref()
            .map(|l| l.local_addr())
            .expect("listener runs while the driver lives")
    }

    /// Makes `voter` reachable (before proposing to add it).
    pub fn add_peer(&self, voter: &Voter) {
        self.senders.add_peer(voter.id, &voter.addr);
    }

    /// Test aid: the address this node advertises as a member.
    #[cfg(test)]
    pub(crate) fn member(&self) -> Option<QuorumMember> {
        self.handle.read(
            |n| n.members().get(&n.id()).cloned(),
            Duration::from_secs(2),
        )?
    }

    /// Test aid: drops all traffic to and from `peer` (a network partition).
    #[cfg(test)]
    pub(crate) fn block(&self, peer: u64, blocked: bool) {
        self.blocked.set(peer, blocked);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The listener first: no more deliveries.
        self.listener.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The driver thread's state.
struct Run {
    node: QuorumNode,
    rx: Receiver<Event>,
    senders: Arc<Senders>,
    status: Arc<ArcSwap<QuorumStatus>>,
    stop: Arc<AtomicBool>,
    tick: Duration,
    waiting: HashMap<ProposalId, Waiter>,
    /// Proposals waiting for a leader, or to be proposed again after a drop.
    retry: Vec<Waiter>,
    publish: Box<dyn Fn(Arc<ClusterMetadata>) + Send>,
    publish_acls: Box<dyn Fn(Vec<AclBinding>) + Send>,
    on_state: StateListener,
    liveness: Liveness,
    rebalance: Rebalance,
    membership: Membership,
}

/// Joining and the members' addresses.
struct Membership {
    /// This node as a member (its advertised controller address and directory id).
    me: QuorumMember,
    /// Where a node that is not a member yet asks to join (the voters it was given).
    bootstrap: Vec<u64>,
    /// The address each sender uses, to start or move senders when members change.
    peers: HashMap<u64, String>,
    next_join: Instant,
    next_report: Instant,
    /// Learners this leader proposed recently (not proposed again before the instant).
    proposed_learner: HashMap<u64, Instant>,
    /// Replaced voters already warned about: (id, directory id).
    warned: std::collections::HashSet<(u64, String)>,
    /// The directory id each peer's connection last stated.
    heard_dir: HashMap<u64, Arc<str>>,
}

/// A join request travels as a Raft-transport frame that raft-rs never sends between nodes
/// (`MsgUnreachable` is local-only), marked by this context prefix and carrying the
/// joiner's [`QuorumMember`] as JSON. Kafka's observers make themselves known the same
/// way, by fetching from the leader.
const JOIN_TAG: &[u8] = b"kmirror-join:";

fn join_request(from: &QuorumMember, to: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgUnreachable);
    m.from = from.id;
    m.to = to;
    let mut ctx = JOIN_TAG.to_vec();
    ctx.extend(serde_json::to_vec(from).expect("members serialize"));
    m.context = ctx.into();
    m
}

fn parse_join(m: &Message) -> Option<QuorumMember> {
    if m.get_msg_type() != MessageType::MsgUnreachable {
        return None;
    }
    let body = m.get_context().strip_prefix(JOIN_TAG)?;
    serde_json::from_slice::<QuorumMember>(body)
        .ok()
        .filter(|j| j.id == m.from && j.id != 0)
}

/// The leader's periodic preferred-leader balancing.
struct Rebalance {
    interval: Option<Duration>,
    /// The next check while this node leads; `None` while it follows (a new leader waits a
    /// whole interval first, as Kafka's new active controller does).
    next: Option<Instant>,
}

/// Kafka's cap on elections per balancing run (`maxElectionsPerImbalance`); the rest wait
/// for the next tick.
const MAX_ELECTIONS_PER_RUN: usize = 1000;

/// The leader's broker liveness: every Raft message a peer sends (its answers to the leader's
/// heartbeats, every tick) counts as that broker's heartbeat, Kafka's BrokerHeartbeat to the
/// active controller. In KRaft combined mode, as here, each broker is also a voter.
struct Liveness {
    session_timeout: Option<Duration>,
    last_heard: HashMap<u64, Instant>,
    /// Whether this node led at the last check (a new leader gives every broker a full
    /// session before fencing it, as Kafka's new active controller does).
    leading: bool,
    /// Fence/unfence proposals in flight: not proposed again before this instant.
    proposed: HashMap<(i32, bool), Instant>,
    /// Fenced brokers this leader may unfence when heard: those fenced for silence (by this
    /// leader, or before it led). A broker that fenced itself while this node leads (a
    /// controlled shutdown) stays fenced until it registers again.
    may_unfence: std::collections::HashSet<i32>,
}

impl Run {
    fn run(&mut self) {
        (self.publish)(Arc::new(self.node.metadata().clone()));
        (self.publish_acls)(self.node.acls().all());
        let all = StateChanges {
            scram: true,
            quotas: true,
            owners: true,
            mirrors: true,
            coordinator: true,
        };
        (self.on_state)(&self.node, all);
        // A one-voter quorum (a lone node) elects itself now, not after the election timeout.
        match self.node.campaign_if_sole_voter() {
            Ok(true) => {
                if let Err(e) = self.poll() {
                    tracing::error!(node = self.node.id(), error = %e, "the metadata quorum node failed; controller stopped");
                    return;
                }
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(node = self.node.id(), error = %e, "cannot start an election"),
        }
        self.update_status();
        let mut next_tick = Instant::now() + self.tick;
        while !self.stop.load(Ordering::SeqCst) {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok(ev) => {
                    self.handle(ev);
                    for _ in 0..256 {
                        match self.rx.try_recv() {
                            Ok(ev) => self.handle(ev),
                            Err(_) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let now = Instant::now();
            if now >= next_tick {
                self.node.tick();
                next_tick += self.tick;
                if next_tick < now {
                    next_tick = now + self.tick;
                }
                self.retry_and_expire(now);
                self.fence_or_unfence(now);
                self.balance_leaders(now);
                self.join_or_report(now);
            }
            if let Err(e) = self.poll() {
                tracing::error!(node = self.node.id(), error = %e, "the metadata quorum node failed; controller stopped");
                break;
            }
        }
        for (_, w) in self.waiting.drain() {
            let _ = w.reply.send(Err(ProposalError::Unknown));
        }
        for w in self.retry.drain(..) {
            let _ = w.reply.send(Err(ProposalError::Unavailable));
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Raft(m, dir, at) => {
                if let Some(j) = parse_join(&m) {
                    self.on_join(j, at);
                    return;
                }
                if let Some(dir) = dir {
                    if self.membership.heard_dir.get(&m.from) != Some(&dir) {
                        if self.membership.heard_dir.contains_key(&m.from) {
                            // The peer came back with another directory id: its log is gone.
                            self.node.forget_progress(m.from);
                        }
                        self.membership.heard_dir.insert(m.from, dir.clone());
                    }
                    if self.sent_by_replaced_voter(m.from, &dir) {
                        return;
                    }
                }
                self.liveness.last_heard.insert(m.from, at);
                if let Err(e) = self.node.step(m) {
                    tracing::warn!(error = %e, "raft refused a message");
                }
            }
            Event::Propose {
                request,
                deadline,
                reply,
            } => self.try_propose(Waiter {
                request,
                deadline,
                reply,
                last_leader: None,
            }),
            Event::Read(f) => f(&self.node),
        }
    }

    fn try_propose(&mut self, mut w: Waiter) {
        // This node cannot write its metadata log (a full disk): refuse at once, as a failed
        // write would be, instead of letting the proposer wait out its deadline.
        if self.node.storage_stalled() {
            // The disk may have room again since the last poll: write the held ready first.
            if let Err(e) = self.poll() {
                tracing::warn!(node = self.node.id(), error = %e, "poll before a proposal failed");
            }
            if self.node.storage_stalled() {
                let _ = w.reply.send(Err(ProposalError::Unavailable));
                return;
            }
        }
        if let Request::Voter(change) = &w.request {
            match self.check_voter_change(change) {
                Ok(c) => w.request = Request::Checked(c),
                Err(e) => {
                    let _ = w.reply.send(Err(e.into()));
                    return;
                }
            }
        }
        let r = match &w.request {
            Request::Command(cmd) => self.node.propose(cmd),
            Request::Membership(change) => self.node.propose_membership(*change),
            Request::Checked(change) => self.node.propose_membership_with(*change, None),
            Request::Voter(_) => unreachable!("checked above"),
        };
        match r {
            Ok(id) => {
                self.waiting.insert(id, w);
            }
            Err(ProposeError::NotLeader { leader }) => {
                w.last_leader = leader.or(w.last_leader);
                if matches!(w.request, Request::Membership(_)) && leader.is_some() {
                    let _ = w.reply.send(Err(ProposalError::NoLeader { leader }));
                } else {
                    self.retry.push(w);
                }
            }
            Err(ProposeError::Refused(why)) => {
                let _ = w.reply.send(Err(ProposalError::Refused(why)));
            }
        }
    }

    fn retry_and_expire(&mut self, now: Instant) {
        for w in std::mem::take(&mut self.retry) {
            if now >= w.deadline {
                let leader = w.last_leader;
                let _ = w.reply.send(Err(ProposalError::NoLeader { leader }));
            } else {
                self.try_propose(w);
            }
        }
        let expired: Vec<ProposalId> = self
            .waiting
            .iter()
            .filter(|(_, w)| now >= w.deadline)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some(w) = self.waiting.remove(&id) {
                let _ = w.reply.send(Err(ProposalError::Unknown));
            }
        }
    }

    fn poll(&mut self) -> Result<(), QuorumError> {
        let polled = self.node.poll()?;
        for m in polled.messages {
            self.senders.send(m);
        }
        if polled.members_changed {
            self.follow_members();
        }
        if polled.metadata_changed || polled.members_changed {
            // Status first: whoever sees the new metadata also sees the voters and indexes
            // that came with it.
            self.update_status();
            (self.publish)(Arc::new(self.node.metadata().clone()));
        }
        if polled.acls_changed {
            (self.publish_acls)(self.node.acls().all());
        }
        let changes = StateChanges {
            scram: polled.scram_changed,
            quotas: polled.quotas_changed,
            owners: polled.acls_changed || polled.quotas_changed,
            mirrors: polled.mirrors_changed,
            coordinator: polled.coordinator_changed,
        };
        if changes.any() {
            (self.on_state)(&self.node, changes);
        }
        for (id, result) in polled.completed {
            let Some(w) = self.waiting.remove(&id) else {
                continue;
            };
            match result {
                ProposalResult::Committed(Ok(outcome)) => {
                    let _ = w.reply.send(Ok(outcome));
                }
                ProposalResult::Committed(Err(ApplyError::Membership(why)))
                    if matches!(w.request, Request::Checked(_)) =>
                {
                    // The leader had another change pending and appended an empty entry.
                    tracing::info!(%why, "voter change not applied");
                    let _ = w.reply.send(Err(VoterError::ChangePending.into()));
                }
                ProposalResult::Committed(Err(e)) => {
                    let _ = w.reply.send(Err(ProposalError::Rejected(e)));
                }
                // Never applied: safe to propose again (the command carries its ids).
                ProposalResult::Dropped => self.retry.push(w),
                ProposalResult::Unknown => {
                    let _ = w.reply.send(Err(ProposalError::Unknown));
                }
            }
        }
        self.update_status();
        Ok(())
    }

    /// On the leader, once per tick: fences registered brokers not heard from within the
    /// session timeout and unfences those heard again. The commands are proposed here
    /// directly (nobody waits for them); a lost one is proposed again after a while.
    fn fence_or_unfence(&mut self, now: Instant) {
        let Some(timeout) = self.liveness.session_timeout else {
            return;
        };
        if !self.node.is_leader() {
            self.liveness.leading = false;
            return;
        }
        if !self.liveness.leading {
            self.liveness.leading = true;
            self.liveness.may_unfence = self
                .node
                .metadata()
                .brokers
                .values()
                .filter(|b| b.fenced)
                .map(|b| b.id)
                .collect();
            // Unfenced brokers get a full session; a fenced one stays fenced until it is
            // heard (as Kafka's new active controller: only a heartbeat unfences). Without
            // this a new leader unfenced a stopped or wiped node for one session.
            // What this node heard as a follower does not count for a fenced one either:
            // otherwise a node stopped just before the election is unfenced for a session.
            for id in self.node.voters().into_iter().chain(self.node.learners()) {
                let fenced =
                    i32::try_from(id).is_ok_and(|b| self.liveness.may_unfence.contains(&b));
                if fenced {
                    self.liveness.last_heard.remove(&id);
                } else {
                    self.liveness.last_heard.insert(id, now);
                }
            }
            self.liveness.proposed.clear();
        }
        self.liveness.proposed.retain(|_, until| *until > now);
        let me = self.node.id();
        let mut cmds = Vec::new();
        for b in self.node.metadata().brokers.values() {
            let alive = b.id as u64 == me
                || self
                    .liveness
                    .last_heard
                    .get(&(b.id as u64))
                    .is_some_and(|t| now.saturating_duration_since(*t) < timeout);
            let wanted = alive == b.fenced && (!alive || self.liveness.may_unfence.contains(&b.id));
            if wanted && !self.liveness.proposed.contains_key(&(b.id, alive)) {
                cmds.push((b.id, alive));
            }
            if !b.fenced {
                // Registered again or unfenced: a later self-fencing is a controlled shutdown.
                self.liveness.may_unfence.remove(&b.id);
            }
        }
        for (id, alive) in cmds {
            let cmd = if alive {
                MetadataCommand::UnfenceBroker { id }
            } else {
                MetadataCommand::FenceBroker { id }
            };
            match self.node.propose(&ClusterCommand::Metadata(cmd)) {
                Ok(_) => {
                    if !alive {
                        self.liveness.may_unfence.insert(id);
                    }
                    tracing::info!(broker = id, fenced = !alive, "broker liveness changed");
                    self.liveness
                        .proposed
                        .insert((id, alive), now + Duration::from_secs(2));
                }
                Err(e) => tracing::debug!(broker = id, error = %e, "cannot propose fencing"),
            }
        }
    }

    /// On the leader, every rebalance interval: proposes `ElectPreferredLeader` for each
    /// partition not led by its preferred replica while that replica is unfenced and in the
    /// ISR. Apply checks the same conditions again, so a proposal made stale by a later
    /// change is refused there (ELECTION_NOT_NEEDED / PREFERRED_LEADER_NOT_AVAILABLE) and
    /// changes nothing. Nobody waits for these proposals; the next run retries what was lost.
    fn balance_leaders(&mut self, now: Instant) {
        let Some(interval) = self.rebalance.interval else {
            return;
        };
        if !self.node.is_leader() {
            self.rebalance.next = None;
            return;
        }
        let next = *self.rebalance.next.get_or_insert(now + interval);
        if now < next {
            return;
        }
        let picks = kmirror_control::quorum::controller::preferred_leader_imbalance(
            self.node.metadata(),
            MAX_ELECTIONS_PER_RUN,
        );
        // A full run may leave more: look again soon (once these applied) rather than an
        // interval later.
        self.rebalance.next = Some(if picks.len() >= MAX_ELECTIONS_PER_RUN {
            now + Duration::from_secs(1)
        } else {
            now + interval
        });
        for (name, partition) in picks {
            let cmd = MetadataCommand::ElectPreferredLeader {
                name: name.clone(),
                partition,
            };
            match self.node.propose(&ClusterCommand::Metadata(cmd)) {
                Ok(_) => tracing::info!(topic = %name, partition, "electing the preferred leader"),
                Err(e) => {
                    tracing::debug!(topic = %name, partition, error = %e, "cannot propose a preferred leader election");
                    break;
                }
            }
        }
    }

    /// Kafka's checks of AddRaftVoter / RemoveRaftVoter against the applied state. The
    /// progress of an observer is known only on the leader; elsewhere the leader's raft
    /// takes the forwarded change as it is.
    fn check_voter_change(&self, change: &VoterChange) -> Result<MembershipChange, VoterError> {
        let n = &self.node;
        if n.is_leader() && n.has_pending_conf() {
            return Err(VoterError::ChangePending);
        }
        let voters = n.voters();
        let dir_of = |id: u64| n.members().get(&id).map(|m| m.directory_id.as_str());
        match change {
            VoterChange::Add { id, directory_id } => {
                if voters.contains(id) {
                    return Err(VoterError::Duplicate(*id));
                }
                let observer =
                    n.learners().contains(id) && dir_of(*id) == Some(directory_id.as_str());
                let caught_up = !n.is_leader()
                    || n.progress()
                        .iter()
                        .any(|(p, matched)| p == id && *matched >= n.commit_index());
                if !observer || !caught_up {
                    return Err(VoterError::NotCaughtUp {
                        id: *id,
                        directory_id: directory_id.clone(),
                    });
                }
                Ok(MembershipChange::AddVoter(*id))
            }
            VoterChange::RemoveObserver { id } => {
                if !n.learners().contains(id) {
                    return Err(VoterError::NotFound {
                        id: *id,
                        directory_id: String::new(),
                    });
                }
                Ok(MembershipChange::RemoveVoter(*id))
            }
            VoterChange::Remove { id, directory_id } => {
                // A founding voter that has not reported its directory id yet matches any.
                let dir_ok = dir_of(*id).is_none_or(|d| d == directory_id);
                if !voters.contains(id) || !dir_ok || voters.len() <= 1 {
                    return Err(VoterError::NotFound {
                        id: *id,
                        directory_id: directory_id.clone(),
                    });
                }
                Ok(MembershipChange::DemoteVoter(*id))
            }
        }
    }

    /// The leader takes a joining node as a learner (once; a lost proposal is made again
    /// after a while) and keeps its sender pointed at the address it gave.
    fn on_join(&mut self, j: QuorumMember, at: Instant) {
        let n = &self.node;
        let member = n.voters().contains(&j.id) || n.learners().contains(&j.id);
        if !n.is_leader() {
            return;
        }
        self.liveness.last_heard.insert(j.id, at);
        if self.membership.peers.get(&j.id) != Some(&j.addr) {
            self.senders.add_peer(j.id, &j.addr);
            self.membership.peers.insert(j.id, j.addr.clone());
        }
        if member || n.has_pending_conf() {
            return;
        }
        if self
            .membership
            .proposed_learner
            .get(&j.id)
            .is_some_and(|until| *until > at)
        {
            return;
        }
        match self
            .node
            .propose_membership_with(MembershipChange::AddLearner(j.id), Some(&j))
        {
            Ok(_) => {
                tracing::info!(node = j.id, addr = %j.addr, "a node joins as an observer");
                self.membership
                    .proposed_learner
                    .insert(j.id, at + Duration::from_secs(3));
            }
            Err(e) => tracing::debug!(node = j.id, error = %e, "cannot add an observer yet"),
        }
    }

    /// Whether a message comes from a voter id whose replicated record names another
    /// directory id: a node whose data dir was wiped, with an empty log and no persisted
    /// term or vote. Kafka counts only the voter set's `(id, directory id)`; here all its
    /// messages are dropped, so it neither votes, nor acks, nor counts as alive for
    /// check_quorum or broker fencing. Warned once per (id, directory id).
    fn sent_by_replaced_voter(&mut self, id: u64, dir: &str) -> bool {
        let Some(recorded) = self.node.replaced_voter(id, dir) else {
            return false;
        };
        if self.membership.warned.insert((id, dir.to_string())) {
            tracing::warn!(
                node = id,
                directory_id = dir,
                voter_directory_id = recorded,
                "node {id} sends with directory id {dir} but is the voter with directory id \
                 {recorded} (its metadata dir was re-formatted?); its votes and acks do not \
                 count. To re-admit it: kafka-metadata-quorum remove-controller \
                 --controller-id {id} --controller-directory-id {recorded}, wait for it to \
                 catch up as an observer, then add-controller with its config (directory id {dir})"
            );
        }
        true
    }

    /// Starts or moves senders to the members' replicated addresses.
    fn follow_members(&mut self) {
        let me = self.node.id();
        for m in self.node.members().values() {
            if m.id != me && self.membership.peers.get(&m.id) != Some(&m.addr) {
                self.senders.add_peer(m.id, &m.addr);
                self.membership.peers.insert(m.id, m.addr.clone());
            }
        }
    }

    /// Once a second: a node outside the configuration asks the bootstrap voters to take
    /// it; a member whose replicated address or directory id is missing or stale states it.
    fn join_or_report(&mut self, now: Instant) {
        let me = self.node.id();
        let member = self.node.voters().contains(&me) || self.node.learners().contains(&me);
        if !member {
            if now >= self.membership.next_join {
                self.membership.next_join = now + Duration::from_secs(1);
                for to in &self.membership.bootstrap {
                    self.senders.send(join_request(&self.membership.me, *to));
                }
            }
            return;
        }
        if self.node.members().get(&me) == Some(&self.membership.me)
            || now < self.membership.next_report
            || self.node.leader_id().is_none()
        {
            return;
        }
        self.membership.next_report = now + Duration::from_secs(3);
        let cmd = ClusterCommand::QuorumMember(self.membership.me.clone());
        if let Err(e) = self.node.propose(&cmd) {
            tracing::debug!(error = %e, "cannot report this member's address yet");
        }
    }

    fn update_status(&self) {
        let n = &self.node;
        let s = QuorumStatus {
            node_id: n.id(),
            leader: n.leader_id(),
            term: n.term(),
            commit_index: n.commit_index(),
            applied_index: n.applied_index(),
            snapshot_index: n.snapshot_index(),
            voters: n.voters(),
            learners: n.learners(),
            members: n.members().values().cloned().collect(),
            progress: n.progress(),
            coordinator_ready: n.coordinator_ready(),
            last_heard_ms: if n.is_leader() {
                let now = Instant::now();
                n.voters()
                    .into_iter()
                    .chain(n.learners())
                    .map(|id| {
                        let ago = if id == n.id() {
                            0
                        } else {
                            self.liveness.last_heard.get(&id).map_or(u64::MAX, |t| {
                                now.saturating_duration_since(*t).as_millis() as u64
                            })
                        };
                        (id, ago)
                    })
                    .collect()
            } else {
                Vec::new()
            },
        };
        if **self.status.load() != s {
            self.status.store(Arc::new(s));
        }
    }
}
