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
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use kmirror_control::metadata::ClusterMetadata;
use kmirror_control::quorum::{
    ApplyError, ClusterCommand, MembershipChange, Outcome, ProposalId, ProposalResult,
    ProposeError, QuorumConfig, QuorumError, QuorumNode,
};
use raft::eraftpb::Message;

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
    /// A node joining an existing cluster (not one of the founding voters): it starts empty
    /// and is added by a membership change.
    pub join: bool,
    pub tick: Duration,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    pub snapshot_every: u64,
}

impl DriverConfig {
    pub fn new(node_id: u64, data_dir: PathBuf, listen: String, voters: Vec<Voter>) -> Self {
        DriverConfig {
            node_id,
            data_dir,
            listen,
            voters,
            join: false,
            tick: Duration::from_millis(100),
            election_ticks: 10,
            heartbeat_ticks: 1,
            snapshot_every: 1000,
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
}

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
}

enum Event {
    Raft(Message),
    Propose {
        request: Request,
        deadline: Instant,
        reply: mpsc::Sender<Result<Outcome, ProposalError>>,
    },
}

struct Waiter {
    request: Request,
    deadline: Instant,
    reply: mpsc::Sender<Result<Outcome, ProposalError>>,
    last_leader: Option<u64>,
}

/// A cloneable handle for proposing and reading the status.
#[derive(Clone)]
pub struct DriverHandle {
    tx: SyncSender<Event>,
    status: Arc<Mutex<QuorumStatus>>,
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

    pub fn status(&self) -> QuorumStatus {
        self.status.lock().expect("status lock").clone()
    }

    fn submit(&self, request: Request, timeout: Duration) -> Result<Outcome, ProposalError> {
        let (reply, rx) = mpsc::channel();
        let deadline = Instant::now() + timeout;
        let ev = Event::Propose {
            request,
            deadline,
            reply,
        };
        match self.tx.try_send(ev) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                return Err(ProposalError::Unavailable)
            }
        }
        // The driver answers by the deadline; the margin covers one loop iteration.
        rx.recv_timeout(timeout + Duration::from_secs(1))
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
        let node = QuorumNode::open(&cfg.data_dir, qcfg)?;

        let (tx, rx) = mpsc::sync_channel(EVENT_QUEUE);
        let blocked = Blocked::default();
        let listener = {
            let tx = tx.clone();
            Listener::bind(&cfg.listen, blocked.clone(), move |m| {
                // A full queue drops the message; Raft retransmits.
                let _ = tx.try_send(Event::Raft(m));
            })
            .map_err(|source| DriverError::Listen {
                addr: cfg.listen.clone(),
                source,
            })?
        };
        let senders = Arc::new(Senders::new(cfg.node_id, blocked.clone()));
        for v in &cfg.voters {
            senders.add_peer(v.id, &v.addr);
        }
        let status = Arc::new(Mutex::new(QuorumStatus::default()));
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
    status: Arc<Mutex<QuorumStatus>>,
    stop: Arc<AtomicBool>,
    tick: Duration,
    waiting: HashMap<ProposalId, Waiter>,
    /// Proposals waiting for a leader, or to be proposed again after a drop.
    retry: Vec<Waiter>,
    publish: Box<dyn Fn(Arc<ClusterMetadata>) + Send>,
}

impl Run {
    fn run(&mut self) {
        (self.publish)(Arc::new(self.node.metadata().clone()));
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
            Event::Raft(m) => {
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
        }
    }

    fn try_propose(&mut self, mut w: Waiter) {
        let r = match &w.request {
            Request::Command(cmd) => self.node.propose(cmd),
            Request::Membership(change) => self.node.propose_membership(*change),
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
        if polled.metadata_changed {
            // Status first: whoever sees the new metadata also sees the voters and indexes
            // that came with it.
            self.update_status();
            (self.publish)(Arc::new(self.node.metadata().clone()));
        }
        for (id, result) in polled.completed {
            let Some(w) = self.waiting.remove(&id) else {
                continue;
            };
            match result {
                ProposalResult::Committed(Ok(outcome)) => {
                    let _ = w.reply.send(Ok(outcome));
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
        };
        *self.status.lock().expect("status lock") = s;
    }
}
