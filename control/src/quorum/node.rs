//! One member of the metadata quorum: raft-rs's `RawNode` over [`DurableStorage`], with the
//! metadata state machine it applies committed entries to.
//!
//! Sans-IO and single-threaded: the owner calls [`QuorumNode::tick`] on a clock,
//! [`QuorumNode::step`] with each message from a peer, and [`QuorumNode::poll`] after either;
//! `poll` makes everything raft produced durable, applies committed entries and returns the
//! messages to send and the proposals that finished.
//!
//! Proposals: [`QuorumNode::propose`] works on the leader and on a follower that knows the
//! leader (raft forwards it; the entry carries the proposer's [`ProposalId`], so the proposer
//! recognises it when it applies the entry itself: a completed proposal is visible in this
//! node's state). Each proposal ends exactly once as
//! - `Committed(result)`: applied (with this apply result, the same on every node);
//! - `Dropped`: it will never be applied. Decided when an entry of a later term than the
//!   proposal's is applied first: terms never decrease along the log, so the proposal's entry
//!   (of its term, appended by that term's leader) can no longer follow;
//! - `Unknown`: a snapshot skipped over it, or it timed out (e.g. the forwarded message was
//!   lost). It may or may not be applied; callers answer "timed out" and clients retry, as
//!   Kafka's do after a controller failover.
//!
//! A forwarded proposal is stamped with the proposer's term and a leader takes it only in
//! that same term, so no proposal can be appended in a later term than the one its `Dropped`
//! decision is based on.
//!
//! Membership: one voter added or removed at a time ([`QuorumNode::propose_membership`], on the
//! leader). A node joining an existing cluster opens with no initial voters and waits for the
//! leader's snapshot.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChangeSingle, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, Message,
    MessageType, Snapshot,
};
use raft::{RawNode, StateRole, Storage as _};
use serde::{Deserialize, Serialize};

use super::command::{self, ClusterCommand, MetadataCommand, Outcome};
use super::storage::{DurableStorage, StorageError};
use crate::acl::{AclBinding, AclStore};
use crate::metadata::{ClusterMetadata, MetadataError, MetadataStore};
use crate::mirror::owners::SyncOwners;
use crate::mirror::{MirrorRecord, MirrorStateStore};
use crate::quota::{self, QuotaRow, QuotaStore};
use crate::replicated::CoordinatorLogs;
use crate::scram::{self, ScramRow, ScramStore};

/// Entries applied after a failed snapshot before the next try.
const RETRY_SNAPSHOT_AFTER: u64 = 100;

/// Settings of one quorum member.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// This node's id (> 0).
    pub id: u64,
    /// The founding voters, identical on each of them; used only when the storage is empty.
    /// Empty for a node that joins an existing cluster.
    pub initial_voters: Vec<u64>,
    /// Ticks without a leader before an election (randomised up to twice this).
    pub election_tick: usize,
    /// Ticks between leader heartbeats.
    pub heartbeat_tick: usize,
    /// Take a snapshot (and drop the log before it) once this many entries were applied
    /// since the last one.
    pub snapshot_every: u64,
    /// Ticks after which a proposal still undecided is reported `Unknown`.
    pub proposal_timeout_ticks: u64,
}

impl QuorumConfig {
    pub fn new(id: u64, initial_voters: Vec<u64>) -> QuorumConfig {
        QuorumConfig {
            id,
            initial_voters,
            election_tick: 10,
            heartbeat_tick: 1,
            snapshot_every: 1000,
            proposal_timeout_ticks: 300,
        }
    }
}

/// Identifies one proposal across the whole cluster and across restarts of its proposer
/// (the nonce is fresh on every open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProposalId {
    pub node: u64,
    pub nonce: u64,
    pub seq: u64,
}

impl ProposalId {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24);
        for v in [self.node, self.nonce, self.seq] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<ProposalId> {
        if bytes.len() != 24 {
            return None;
        }
        let word = |i: usize| u64::from_be_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
        Some(ProposalId {
            node: word(0),
            nonce: word(1),
            seq: word(2),
        })
    }
}

/// Why a committed command did not apply (identically on every node).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error("membership change refused: {0}")]
    Membership(String),
    /// A coordinator write from a term that is over (its node no longer leads).
    #[error("coordinator of term {coordinator} fenced by term {entry}")]
    CoordinatorFenced { coordinator: u64, entry: u64 },
    /// A partition leader's mirror record from a leader epoch that is over.
    #[error(
        "mirror record of {topic}-{partition} at leader epoch {written} fenced by epoch {current}"
    )]
    MirrorLeaderFenced {
        topic: String,
        partition: i32,
        written: i32,
        current: i32,
    },
}

/// How a proposal ended.
#[derive(Debug)]
pub enum ProposalResult {
    Committed(Result<Outcome, ApplyError>),
    Dropped,
    Unknown,
}

/// Why a proposal was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<u64> },
    #[error("proposal refused: {0}")]
    Refused(String),
}

/// A failure that stops the node (its storage or its log is unusable).
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("entry {index} cannot be applied: {reason}")]
    BadEntry { index: u64, reason: String },
}

/// A membership change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipChange {
    /// Adds a voter (or promotes a learner).
    AddVoter(u64),
    /// Removes a node from the configuration altogether (voter or learner).
    RemoveVoter(u64),
    /// Adds a non-voting member (raft-rs learner, Kafka's observer): it receives the log.
    AddLearner(u64),
    /// Turns a voter into a learner: Kafka's RemoveRaftVoter on a combined node, which keeps
    /// following the log as an observer.
    DemoteVoter(u64),
}

/// A member of the quorum as the replicated state knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumMember {
    pub id: u64,
    /// The controller listener, `HOST:PORT`.
    pub addr: String,
    /// Kafka's `directory.id` of the node's metadata directory (base64url uuid text).
    pub directory_id: String,
}

/// What one [`QuorumNode::poll`] produced.
#[derive(Debug, Default)]
pub struct Polled {
    /// Messages for peers (`to` names the peer).
    pub messages: Vec<Message>,
    /// Proposals of this node that ended.
    pub completed: Vec<(ProposalId, ProposalResult)>,
    /// Whether the applied metadata changed (publish [`QuorumNode::metadata`]).
    pub metadata_changed: bool,
    /// Whether an ACL command was applied (publish [`QuorumNode::acls`]).
    pub acls_changed: bool,
    /// Whether SCRAM credentials changed (publish [`QuorumNode::scram`]).
    pub scram_changed: bool,
    /// Whether client quotas changed (publish [`QuorumNode::quotas`]).
    pub quotas_changed: bool,
    /// Whether a mirror definition or mirror partition state changed ([`QuorumNode::mirrors`]).
    pub mirrors_changed: bool,
    /// Whether a coordinator log changed ([`QuorumNode::coordinator_logs`]); a node that is
    /// not the coordinator needs nothing from it until it becomes leader.
    pub coordinator_changed: bool,
    /// Whether the configuration or a member's address changed ([`QuorumNode::members`]).
    pub members_changed: bool,
}

/// Everything applied, as the Raft snapshot carries it. Fields added after the first
/// version default to empty, so older snapshots still load.
#[derive(Serialize, Deserialize)]
struct SnapshotData {
    metadata: ClusterMetadata,
    #[serde(default)]
    acls: Vec<AclBinding>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    scram: Vec<ScramRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    quotas: Vec<QuotaRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    mirrors: Vec<MirrorRecord>,
    #[serde(default, skip_serializing_if = "CoordinatorLogs::is_empty")]
    coordinators: CoordinatorLogs,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    members: BTreeMap<u64, QuorumMember>,
    #[serde(default, skip_serializing_if = "SyncOwners::is_empty")]
    owners: SyncOwners,
}

/// The applied state besides the metadata store.
struct Applied {
    acls: AclStore,
    scram: ScramStore,
    quotas: QuotaStore,
    mirrors: MirrorStateStore,
    coordinators: CoordinatorLogs,
    members: BTreeMap<u64, QuorumMember>,
    /// Which mirror wrote each synced ACL binding and quota entity.
    owners: SyncOwners,
}

impl Applied {
    fn empty() -> Applied {
        Applied {
            acls: AclStore::in_memory([]),
            scram: ScramStore::in_memory(Default::default()),
            quotas: QuotaStore::in_memory(Default::default()),
            mirrors: MirrorStateStore::in_memory(),
            coordinators: CoordinatorLogs::default(),
            members: BTreeMap::new(),
            owners: SyncOwners::default(),
        }
    }

    fn from_snapshot(
        data: SnapshotData,
        index: u64,
    ) -> Result<(MetadataStore, Applied), QuorumError> {
        let scram = scram::from_rows(data.scram).map_err(|reason| QuorumError::BadEntry {
            index,
            reason: format!("snapshot SCRAM credentials: {reason}"),
        })?;
        let mut mirrors = MirrorStateStore::in_memory();
        for r in data.mirrors {
            mirrors.apply(r);
        }
        Ok((
            MetadataStore::in_memory(data.metadata),
            Applied {
                acls: AclStore::in_memory(data.acls),
                scram: ScramStore::in_memory(scram),
                quotas: QuotaStore::in_memory(quota::from_rows(data.quotas)),
                mirrors,
                coordinators: data.coordinators,
                members: data.members,
                owners: data.owners,
            },
        ))
    }
}

#[derive(Debug)]
struct Pending {
    term: u64,
    age: u64,
}

/// A member of the metadata quorum.
pub struct QuorumNode {
    raw: RawNode<DurableStorage>,
    cfg: QuorumConfig,
    store: MetadataStore,
    /// The replicated ACLs, SCRAM credentials, quotas, mirror state and coordinator logs.
    applied_state: Applied,
    conf_state: ConfState,
    applied: u64,
    pending: HashMap<ProposalId, Pending>,
    timed_out: Vec<ProposalId>,
    nonce: u64,
    next_seq: u64,
    /// The term in which this node, as leader, last proposed the cluster id.
    init_proposed_in: u64,
    /// Set when this leader applied its own removal.
    step_down: bool,
    /// Warned that a leader's commit index was beyond this node's log (logged once).
    warned_lost_log: bool,
    /// A ready whose entries or hard state could not be written (a full or failing disk):
    /// written again by every poll until it succeeds; nothing newer is taken meanwhile.
    held: Option<raft::Ready>,
    /// The applied index at which taking a snapshot last failed (retried after more entries).
    snapshot_failed_at: Option<u64>,
    /// The failed write was logged (once per episode).
    held_since_warned: bool,
}

impl std::fmt::Debug for QuorumNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumNode")
            .field("id", &self.cfg.id)
            .field("term", &self.term())
            .field("leader", &self.leader_id())
            .field("applied", &self.applied)
            .finish()
    }
}

fn empty_metadata() -> ClusterMetadata {
    ClusterMetadata {
        cluster_id: String::new(),
        version: 0,
        topics: Default::default(),
        internal_topics: Default::default(),
        broker_configs: Default::default(),
        group_configs: Default::default(),
        features: Default::default(),
        brokers: Default::default(),
    }
}

fn encode_state(metadata: &ClusterMetadata, a: &Applied) -> Vec<u8> {
    serde_json::to_vec(&SnapshotData {
        metadata: metadata.clone(),
        acls: a.acls.all(),
        scram: scram::to_rows(a.scram.credentials()),
        quotas: quota::to_rows(&a.quotas.all()),
        mirrors: a.mirrors.live(),
        coordinators: a.coordinators.clone(),
        members: a.members.clone(),
        owners: a.owners.clone(),
    })
    .expect("metadata serializes")
}

fn decode_state(snap: &Snapshot) -> Result<SnapshotData, QuorumError> {
    let data: SnapshotData =
        serde_json::from_slice(snap.get_data()).map_err(|e| QuorumError::BadEntry {
            index: snap.get_metadata().index,
            reason: format!("snapshot data: {e}"),
        })?;
    Ok(data)
}

impl QuorumNode {
    /// Opens the node's storage in `dir` (bootstrapping a founding voter's empty storage) and
    /// restores the state machine from the latest snapshot; the log after it is applied again
    /// by the first polls.
    pub fn open(dir: &Path, cfg: QuorumConfig) -> Result<QuorumNode, QuorumError> {
        Self::open_founding(dir, cfg, None)
    }

    /// [`QuorumNode::open`]; a founding voter whose storage is empty starts its log from
    /// `founding` (a one-node data dir of the old layout, see [`super::upgrade`]) instead of
    /// an empty state. Ignored when the storage holds a log already.
    pub fn open_founding(
        dir: &Path,
        cfg: QuorumConfig,
        founding: Option<&super::upgrade::LegacyState>,
    ) -> Result<QuorumNode, QuorumError> {
        let mut storage = DurableStorage::open(dir)?;
        if storage.is_empty() && !cfg.initial_voters.is_empty() {
            let mut voters = cfg.initial_voters.clone();
            voters.sort_unstable();
            voters.dedup();
            let state = match founding {
                Some(f) => serde_json::to_vec(&SnapshotData {
                    metadata: f.metadata.clone(),
                    acls: f.acls.clone(),
                    scram: scram::to_rows(&f.scram),
                    quotas: quota::to_rows(&f.quotas),
                    mirrors: f.mirrors.clone(),
                    coordinators: f.coordinators.clone(),
                    members: BTreeMap::new(),
                    owners: SyncOwners::default(),
                })
                .expect("metadata serializes"),
                None => encode_state(&empty_metadata(), &Applied::empty()),
            };
            storage.bootstrap(&voters, state)?;
        }
        let snap = storage.snapshot_ref().clone();
        let applied = snap.get_metadata().index;
        let (store, applied_state) = if applied > 0 {
            Applied::from_snapshot(decode_state(&snap)?, applied)?
        } else {
            (MetadataStore::in_memory(empty_metadata()), Applied::empty())
        };
        let raft_cfg = raft::Config {
            id: cfg.id,
            election_tick: cfg.election_tick,
            heartbeat_tick: cfg.heartbeat_tick,
            applied,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            // A leader cut off from a majority steps down; a partitioned node rejoining does
            // not disrupt the others with a higher term.
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        raft_cfg.validate()?;
        let raw = RawNode::new(&raft_cfg, storage, &logger(cfg.id))?;
        let uuid = uuid::Uuid::new_v4();
        let mut node = QuorumNode {
            raw,
            store,
            applied_state,
            conf_state: snap.get_metadata().get_conf_state().clone(),
            applied,
            pending: HashMap::new(),
            timed_out: Vec::new(),
            nonce: uuid.as_u64_pair().0,
            next_seq: 0,
            init_proposed_in: 0,
            step_down: false,
            warned_lost_log: false,
            held: None,
            snapshot_failed_at: None,
            held_since_warned: false,
            cfg,
        };
        node.commit_persisted_if_sole_voter()?;
        Ok(node)
    }

    /// A lone voter's every persisted entry is committed (the quorum is itself), though the
    /// commit index on disk may lag when its last write failed (a full disk): mark them
    /// committed at open, so they apply before the node's new term has a durable entry.
    /// Not done when an entry after the commit index changes the configuration.
    fn commit_persisted_if_sole_voter(&mut self) -> Result<(), QuorumError> {
        if self.voters() != [self.cfg.id] || !self.conf_state.learners.is_empty() {
            return Ok(());
        }
        let log = &self.raw.raft.raft_log;
        let (committed, last) = (log.committed, log.last_index());
        if last <= committed {
            return Ok(());
        }
        let after = log.entries(
            committed + 1,
            u64::MAX,
            raft::GetEntriesContext::empty(false),
        )?;
        if after
            .iter()
            .any(|e| e.get_entry_type() != EntryType::EntryNormal)
        {
            return Ok(());
        }
        tracing::info!(
            node = self.cfg.id,
            from = committed + 1,
            to = last,
            "a lone voter's persisted entries after the recorded commit index are committed"
        );
        self.raw.raft.raft_log.commit_to(last);
        Ok(())
    }

    pub fn id(&self) -> u64 {
        self.cfg.id
    }

    /// The applied metadata.
    pub fn metadata(&self) -> &ClusterMetadata {
        self.store.state()
    }

    /// The replicated ACL set.
    pub fn acls(&self) -> &AclStore {
        &self.applied_state.acls
    }

    /// The replicated SCRAM credentials.
    pub fn scram(&self) -> &ScramStore {
        &self.applied_state.scram
    }

    /// The replicated client quotas.
    pub fn quotas(&self) -> &QuotaStore {
        &self.applied_state.quotas
    }

    /// Which mirror wrote each synced ACL binding and quota entity.
    pub fn sync_owners(&self) -> &SyncOwners {
        &self.applied_state.owners
    }

    /// The replicated `__mirror_state`: mirror definitions and mirror partition states.
    pub fn mirrors(&self) -> &MirrorStateStore {
        &self.applied_state.mirrors
    }

    /// The replicated group and transaction coordinator logs.
    pub fn coordinator_logs(&self) -> &CoordinatorLogs {
        &self.applied_state.coordinators
    }

    /// Everything applied, serialized as the snapshot holds it (tests compare nodes by it).
    pub fn state_bytes(&self) -> Vec<u8> {
        encode_state(self.store.state(), &self.applied_state)
    }

    /// The applied metadata store, for proposers that need a fresh id (`unused_topic_id`) or a
    /// dry run of a command against a copy.
    pub fn store(&self) -> &MetadataStore {
        &self.store
    }

    pub fn leader_id(&self) -> Option<u64> {
        Some(self.raw.raft.leader_id).filter(|id| *id != raft::INVALID_ID)
    }

    /// On the leader: each voter's replicated log end (Raft's `matched` index, the leader's
    /// own is its last index), for DescribeQuorum. Empty on a follower.
    pub fn progress(&self) -> Vec<(u64, u64)> {
        if !self.is_leader() {
            return Vec::new();
        }
        let own = self.raw.raft.raft_log.last_index();
        let mut out: Vec<(u64, u64)> = self
            .raw
            .raft
            .prs()
            .iter()
            .map(|(id, p)| (*id, if *id == self.cfg.id { own } else { p.matched }))
            .collect();
        out.sort_unstable();
        out
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// Whether this node may run the coordinators: it leads, an entry of its own term has
    /// committed (so every entry of earlier terms has too) and it has applied everything
    /// committed. Until then a new leader answers COORDINATOR_LOAD_IN_PROGRESS, as Kafka
    /// does while it loads a coordinator partition.
    pub fn coordinator_ready(&self) -> bool {
        self.is_leader()
            && self.applied >= self.commit_index()
            && (self.raw.raft.commit_to_current_term() || self.sole_voter_applied_all())
    }

    /// A lone voter that applied every entry raft knows as persisted: nobody else can have
    /// committed anything, so its applied state is the quorum's even before its new term's
    /// first entry is durable (a restart on a full disk must still serve what it holds).
    /// Entries of a held ready may sit in the file already (the entries fit, the hard state
    /// did not); nobody was answered for them, so they do not count until raft is told.
    fn sole_voter_applied_all(&self) -> bool {
        self.voters() == [self.cfg.id] && self.applied >= self.raw.raft.raft_log.persisted
    }

    /// Whether writes to this node's storage are failing (proposals are refused until a
    /// poll writes the held ready).
    pub fn storage_stalled(&self) -> bool {
        self.held.is_some()
    }

    /// raft-rs requires the log to stay as a ready left it until that ready is advanced.
    fn refuse_while_held(&self) -> Result<(), ProposeError> {
        if self.held.is_some() {
            return Err(ProposeError::Refused(
                "the metadata log cannot be written (disk full or failing)".into(),
            ));
        }
        Ok(())
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    pub fn applied_index(&self) -> u64 {
        self.applied
    }

    /// The voters as of the applied index.
    pub fn voters(&self) -> Vec<u64> {
        let mut v = self.conf_state.voters.clone();
        v.sort_unstable();
        v
    }

    /// Kafka's `ReplicaKey` check: the directory id the replicated state records for voter
    /// `id` when `directory_id` is another one (a voter whose data dir was re-formatted and
    /// came back under the same id). `None` when `id` is not a voter, has no record or no
    /// recorded directory id yet (a founder before its first `QuorumMember`), or matches.
    pub fn replaced_voter(&self, id: u64, directory_id: &str) -> Option<&str> {
        if !self.conf_state.voters.contains(&id) {
            return None;
        }
        let recorded = self.applied_state.members.get(&id)?.directory_id.as_str();
        (!recorded.is_empty() && recorded != directory_id).then_some(recorded)
    }

    /// As leader, forgets how far peer `id`'s log matches: it came back with another
    /// directory id, so the entries it acknowledged are gone. raft-rs never lowers a
    /// follower's match index (it ignores the peer's rejections at or below it, and its
    /// heartbeats carry that commit index), so without this the peer is never sent the log
    /// or a snapshot again while this leader leads. Probing from the start is always safe:
    /// a lower match index only delays commits.
    pub fn forget_progress(&mut self, id: u64) {
        if !self.is_leader() || id == self.cfg.id {
            return;
        }
        if let Some(pr) = self.raw.raft.mut_prs().get_mut(id) {
            pr.matched = 0;
            pr.become_probe();
        }
    }

    /// The learners (Kafka's observers) as of the applied index.
    pub fn learners(&self) -> Vec<u64> {
        let mut v = self.conf_state.learners.clone();
        v.sort_unstable();
        v
    }

    /// Members' controller addresses and directory ids, as replicated.
    pub fn members(&self) -> &BTreeMap<u64, QuorumMember> {
        &self.applied_state.members
    }

    /// On the leader: a membership change is proposed and not yet applied.
    pub fn has_pending_conf(&self) -> bool {
        self.raw.raft.has_pending_conf()
    }

    /// Index of the latest snapshot on disk.
    pub fn snapshot_index(&self) -> u64 {
        self.raw.store().snapshot_ref().get_metadata().index
    }

    /// Proposes `cmd`. On `Ok` the proposal ends exactly once in a later `poll`'s `completed`.
    pub fn propose(&mut self, cmd: &ClusterCommand) -> Result<ProposalId, ProposeError> {
        self.refuse_while_held()?;
        let term = self.term();
        let leader = self
            .leader_id()
            .ok_or(ProposeError::NotLeader { leader: None })?;
        let id = self.next_id();
        let before = self.raw.raft.msgs.len();
        self.raw
            .propose(id.encode(), cmd.encode())
            .map_err(|_| ProposeError::NotLeader {
                leader: Some(leader).filter(|l| *l != self.cfg.id),
            })?;
        self.track_proposal(before, id, term);
        Ok(id)
    }

    /// Stamps the proposal messages raft-rs queued since `before` with the proposer's term (a
    /// forwarded proposal carries it, see the module doc) and waits for `id`'s outcome.
    fn track_proposal(&mut self, before: usize, id: ProposalId, term: u64) {
        for m in &mut self.raw.raft.msgs[before..] {
            if m.get_msg_type() == MessageType::MsgPropose {
                m.term = term;
            }
        }
        self.pending.insert(id, Pending { term, age: 0 });
    }

    /// Proposes adding or removing one voter; only on the leader, one change at a time.
    pub fn propose_membership(
        &mut self,
        change: MembershipChange,
    ) -> Result<ProposalId, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader {
                leader: self.leader_id(),
            });
        }
        self.propose_membership_with(change, None)
    }

    /// Proposes one membership change, carrying `member` (its address and directory id,
    /// applied on every node with the change). On a follower that knows the leader, raft
    /// forwards it; the leader refuses it while another change is pending (it then ends
    /// `Unknown` or `Dropped` here, never applied).
    pub fn propose_membership_with(
        &mut self,
        change: MembershipChange,
        member: Option<&QuorumMember>,
    ) -> Result<ProposalId, ProposeError> {
        self.refuse_while_held()?;
        let term = self.term();
        let leader = self
            .leader_id()
            .ok_or(ProposeError::NotLeader { leader: None })?;
        if self.is_leader() && self.raw.raft.has_pending_conf() {
            return Err(ProposeError::Refused(
                "a membership change is still being applied".into(),
            ));
        }
        let (kind, node) = match change {
            MembershipChange::AddVoter(n) => (ConfChangeType::AddNode, n),
            MembershipChange::RemoveVoter(n) => (ConfChangeType::RemoveNode, n),
            MembershipChange::AddLearner(n) | MembershipChange::DemoteVoter(n) => {
                (ConfChangeType::AddLearnerNode, n)
            }
        };
        let mut single = ConfChangeSingle::default();
        single.set_change_type(kind);
        single.node_id = node;
        let mut cc = ConfChangeV2::default();
        cc.mut_changes().push(single);
        if let Some(m) = member {
            cc.context = serde_json::to_vec(m).expect("members serialize").into();
        }
        let id = self.next_id();
        let before = self.raw.raft.msgs.len();
        self.raw
            .propose_conf_change(id.encode(), cc)
            .map_err(|_| ProposeError::NotLeader {
                leader: Some(leader).filter(|l| *l != self.cfg.id),
            })?;
        self.track_proposal(before, id, term);
        Ok(id)
    }

    /// Hands a peer's message to raft. Messages for another node, from an unknown peer, or
    /// stale forwarded proposals are dropped (raft tolerates loss).
    pub fn step(&mut self, mut msg: Message) -> Result<(), QuorumError> {
        // While a ready is held (see `held`), raft must not change its log: the message is
        // dropped and its sender retransmits.
        if msg.to != self.cfg.id || self.held.is_some() {
            return Ok(());
        }
        if msg.get_msg_type() == MessageType::MsgPropose {
            if msg.term != self.term() || !self.is_leader() {
                return Ok(());
            }
            msg.term = 0;
        }
        let last = self.raw.raft.raft_log.last_index();
        if msg.get_msg_type() == MessageType::MsgHeartbeat && msg.commit > last {
            // The leader remembers this node acknowledging entries it does not have: its log
            // was lost (a wiped data dir under a voter's id). raft-rs would panic (etcd's
            // "tocommit out of range"); commit nothing and keep following instead. Lowering
            // a commit index is always safe.
            if !self.warned_lost_log {
                self.warned_lost_log = true;
                tracing::warn!(
                    node = self.cfg.id,
                    leader_commit = msg.commit,
                    last_index = last,
                    "the leader's commit index is beyond this node's log: its metadata dir was \
                     re-formatted? It counts again only after RemoveRaftVoter / AddRaftVoter"
                );
            }
            msg.commit = self.raw.raft.raft_log.committed;
        }
        match self.raw.step(msg) {
            Ok(())
            | Err(raft::Error::StepPeerNotFound)
            | Err(raft::Error::StepLocalMsg)
            | Err(raft::Error::ProposalDropped) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Advances raft's clock by one tick and ages pending proposals.
    pub fn tick(&mut self) {
        // No elections or heartbeats while a ready is held: a node that cannot write its log
        // must not campaign, and a leader that cannot is better replaced.
        if self.held.is_none() {
            self.raw.tick();
        }
        let limit = self.cfg.proposal_timeout_ticks;
        let mut expired = Vec::new();
        for (id, p) in &mut self.pending {
            p.age += 1;
            if p.age >= limit {
                expired.push(*id);
            }
        }
        for id in expired {
            self.pending.remove(&id);
            self.timed_out.push(id);
        }
    }

    /// Starts an election at once when this node is the quorum's only voter (a one-node
    /// cluster): it wins it alone, so there is no reason to wait out the election timeout
    /// first. Does nothing otherwise. Returns whether it campaigned.
    pub fn campaign_if_sole_voter(&mut self) -> Result<bool, QuorumError> {
        if self.is_leader() || self.voters() != [self.cfg.id] || self.held.is_some() {
            return Ok(false);
        }
        self.raw.campaign()?;
        Ok(true)
    }

    /// Tells raft a peer could not be reached (it stops pipelining to it until it answers).
    pub fn report_unreachable(&mut self, peer: u64) {
        self.raw.report_unreachable(peer);
    }

    /// Persists, applies and collects everything raft has ready.
    pub fn poll(&mut self) -> Result<Polled, QuorumError> {
        let mut out = Polled::default();
        for id in self.timed_out.drain(..) {
            out.completed.push((id, ProposalResult::Unknown));
        }
        self.maybe_name_cluster();
        // A few rounds: applying a conf change or persisting can make more ready at once.
        for _ in 0..4 {
            if self.raw.store().snapshot_wanted() {
                self.take_snapshot()?;
            }
            if self.held.is_none() && !self.raw.has_ready() {
                break;
            }
            self.handle_ready(&mut out)?;
            if self.held.is_some() {
                break;
            }
        }
        // Raft waits for a report on every snapshot it sends. The transport cannot know
        // whether one arrived, so report it sent right away: the leader then probes, and a
        // follower that did not get it is sent it again (a lost report would stall it forever).
        let snapshot_targets: BTreeSet<u64> = out
            .messages
            .iter()
            .filter(|m| m.get_msg_type() == MessageType::MsgSnapshot)
            .map(|m| m.to)
            .collect();
        for to in snapshot_targets {
            self.raw.report_snapshot(to, raft::SnapshotStatus::Finish);
        }
        let retry_from = self
            .snapshot_failed_at
            .map_or(0, |at| at + RETRY_SNAPSHOT_AFTER);
        if self.applied >= (self.snapshot_index() + self.cfg.snapshot_every).max(retry_from) {
            self.take_snapshot()?;
        }
        Ok(out)
    }

    fn handle_ready(&mut self, out: &mut Polled) -> Result<(), QuorumError> {
        let rd = match self.held.take() {
            Some(rd) => rd,
            None => {
                let mut rd = self.raw.ready();
                // A leader may send before persisting (raft thesis 10.2.1); raft says which
                // are safe.
                out.messages.extend(rd.take_messages());
                if !rd.snapshot().is_empty() {
                    let snap = rd.snapshot().clone();
                    self.raw.mut_store().apply_snapshot(snap.clone())?;
                    self.restore(&snap, out)?;
                }
                let committed = rd.take_committed_entries();
                self.apply_entries(committed, out)?;
                rd
            }
        };
        let mut rd = rd;
        // Writing the entries and the hard state again is idempotent; until it succeeds,
        // nothing of this ready is acknowledged or sent, and no newer ready is taken.
        let written = self
            .raw
            .mut_store()
            .append(rd.entries())
            .and_then(|()| match rd.hs() {
                Some(hs) => self.raw.mut_store().set_hard_state(hs),
                None => Ok(()),
            });
        match written {
            Ok(()) => {
                if self.held_since_warned {
                    self.held_since_warned = false;
                    tracing::warn!(node = self.cfg.id, "metadata log writes succeed again");
                }
            }
            Err(StorageError::Io { path, source }) => {
                if !self.held_since_warned {
                    self.held_since_warned = true;
                    tracing::error!(
                        node = self.cfg.id,
                        path = %path.display(),
                        error = %source,
                        "cannot write the metadata log; metadata changes wait until it can"
                    );
                }
                self.held = Some(rd);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        out.messages.extend(rd.take_persisted_messages());
        let mut light = self.raw.advance(rd);
        if let Some(commit) = light.commit_index() {
            // The entries are durable; a commit index left behind on disk only makes a
            // restarted node learn it again, so a failed write here is not fatal.
            if let Err(e) = self.raw.mut_store().set_commit(commit) {
                tracing::warn!(node = self.cfg.id, error = %e, "cannot record the commit index");
            }
        }
        out.messages.extend(light.take_messages());
        let committed = light.take_committed_entries();
        self.apply_entries(committed, out)?;
        self.raw.advance_apply();
        if std::mem::take(&mut self.step_down) && self.is_leader() {
            let term = self.term();
            self.raw.raft.become_follower(term + 1, raft::INVALID_ID);
        }
        Ok(())
    }

    fn restore(&mut self, snap: &Snapshot, out: &mut Polled) -> Result<(), QuorumError> {
        let meta = snap.get_metadata();
        let (store, applied_state) = Applied::from_snapshot(decode_state(snap)?, meta.index)?;
        self.store = store;
        self.applied_state = applied_state;
        self.conf_state = meta.get_conf_state().clone();
        self.applied = meta.index;
        // Whatever of ours is inside the snapshot cannot be told apart from what is not.
        let snap_term = meta.term;
        let mut unknown: Vec<ProposalId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.term <= snap_term)
            .map(|(id, _)| *id)
            .collect();
        unknown.sort();
        for id in unknown {
            self.pending.remove(&id);
            out.completed.push((id, ProposalResult::Unknown));
        }
        out.metadata_changed = true;
        out.acls_changed = true;
        out.scram_changed = true;
        out.quotas_changed = true;
        out.mirrors_changed = true;
        out.coordinator_changed = true;
        out.members_changed = true;
        Ok(())
    }

    fn apply_entries(&mut self, entries: Vec<Entry>, out: &mut Polled) -> Result<(), QuorumError> {
        for e in entries {
            self.apply_entry(e, out)?;
        }
        Ok(())
    }

    fn apply_entry(&mut self, e: Entry, out: &mut Polled) -> Result<(), QuorumError> {
        let bad = |reason: String| QuorumError::BadEntry {
            index: e.index,
            reason,
        };
        let result: Option<Result<Outcome, ApplyError>> = match e.get_entry_type() {
            EntryType::EntryNormal if e.get_data().is_empty() => None,
            EntryType::EntryNormal => {
                let cmd = ClusterCommand::decode(e.get_data()).map_err(|x| bad(x.to_string()))?;
                match cmd {
                    ClusterCommand::Metadata(cmd) => {
                        let r = command::apply(&mut self.store, &cmd);
                        if r.is_ok() {
                            out.metadata_changed = true;
                        }
                        Some(r.map_err(ApplyError::from))
                    }
                    ClusterCommand::Acl(cmd) => {
                        out.acls_changed = true;
                        let st = &mut self.applied_state;
                        let removed = command::apply_acl(&mut st.acls, &mut st.owners, &cmd);
                        Some(Ok(Outcome::Acls(removed)))
                    }
                    ClusterCommand::Scram { edits } => {
                        out.scram_changed = true;
                        let r = self.applied_state.scram.apply_edits(&edits);
                        Some(Ok(Outcome::Scram(r)))
                    }
                    ClusterCommand::Quota {
                        alterations,
                        writer,
                    } => {
                        out.quotas_changed = true;
                        let st = &mut self.applied_state;
                        let r = crate::mirror::owners::apply_quotas(
                            &mut st.quotas,
                            &mut st.owners,
                            &alterations,
                            writer.as_ref(),
                        );
                        Some(Ok(Outcome::Quotas(r)))
                    }
                    ClusterCommand::Mirror { term, .. }
                    | ClusterCommand::Coordinator { term, .. }
                        if term != e.term =>
                    {
                        Some(Err(ApplyError::CoordinatorFenced {
                            coordinator: term,
                            entry: e.term,
                        }))
                    }
                    ClusterCommand::Mirror {
                        record:
                            MirrorRecord::Partition {
                                ref topic,
                                partition,
                                ..
                            },
                        leader_epoch: Some(written),
                        ..
                    } if self
                        .store
                        .state()
                        .topics
                        .get(topic)
                        .and_then(|t| t.leader_epochs.get(usize::try_from(partition).ok()?))
                        .is_some_and(|&current| written < current) =>
                    {
                        let current = self.store.state().topics[topic].leader_epochs
                            [usize::try_from(partition).unwrap_or_default()];
                        Some(Err(ApplyError::MirrorLeaderFenced {
                            topic: topic.clone(),
                            partition,
                            written,
                            current,
                        }))
                    }
                    ClusterCommand::Mirror { record, .. } => {
                        out.mirrors_changed = true;
                        self.applied_state.mirrors.apply(record);
                        Some(Ok(Outcome::Applied))
                    }
                    ClusterCommand::AllocateProducerIds { count } => {
                        out.coordinator_changed = true;
                        let (start, end) =
                            self.applied_state.coordinators.allocate_producer_ids(count);
                        Some(Ok(Outcome::ProducerIds { start, end }))
                    }
                    ClusterCommand::Coordinator { log, op, .. } => {
                        out.coordinator_changed = true;
                        self.applied_state.coordinators.apply(log, &op);
                        Some(Ok(Outcome::Applied))
                    }
                    ClusterCommand::QuorumMember(m) => {
                        // Only a member of the configuration has an entry, and a voter keeps
                        // its directory id: another one is a re-formatted replica, which
                        // RemoveRaftVoter and AddRaftVoter replace (Kafka's voter set).
                        let id = m.id;
                        if self.replaced_voter(id, &m.directory_id).is_some() {
                            tracing::warn!(
                                node = id,
                                directory_id = %m.directory_id,
                                "a voter's record keeps its directory id; the new one is ignored"
                            );
                        } else if self.conf_state.voters.contains(&id)
                            || self.conf_state.learners.contains(&id)
                        {
                            out.members_changed = true;
                            self.applied_state.members.insert(id, m);
                        }
                        Some(Ok(Outcome::Applied))
                    }
                }
            }
            // This node only proposes V2 changes; a V1 entry means a foreign log.
            EntryType::EntryConfChange => {
                return Err(bad("a version 1 conf change in the log".into()));
            }
            EntryType::EntryConfChangeV2 => {
                let cc =
                    ConfChangeV2::parse_from_bytes(e.get_data()).map_err(|x| bad(x.to_string()))?;
                out.members_changed = true;
                Some(self.apply_membership(&cc))
            }
        };
        self.applied = e.index;
        if let Some(id) = ProposalId::decode(e.get_context()) {
            if self.pending.remove(&id).is_some() {
                let r = result.unwrap_or_else(|| {
                    // Raft replaced a refused conf change with an empty entry.
                    Err(ApplyError::Membership("dropped by the leader".into()))
                });
                out.completed.push((id, ProposalResult::Committed(r)));
            }
        }
        // See the module doc: an applied entry of a later term decides older proposals.
        let mut dropped: Vec<ProposalId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.term < e.term)
            .map(|(id, _)| *id)
            .collect();
        dropped.sort();
        for id in dropped {
            self.pending.remove(&id);
            out.completed.push((id, ProposalResult::Dropped));
        }
        Ok(())
    }

    fn apply_membership(&mut self, cc: &ConfChangeV2) -> Result<Outcome, ApplyError> {
        match self.raw.apply_conf_change(cc) {
            Ok(cs) => {
                self.conf_state = cs;
                for c in cc.get_changes() {
                    if c.get_change_type() == ConfChangeType::RemoveNode {
                        self.applied_state.members.remove(&c.node_id);
                    }
                }
                if let Ok(m) = serde_json::from_slice::<QuorumMember>(cc.get_context()) {
                    if self.conf_state.voters.contains(&m.id)
                        || self.conf_state.learners.contains(&m.id)
                    {
                        self.applied_state.members.insert(m.id, m);
                    }
                }
                if self.is_leader() && !self.conf_state.voters.contains(&self.cfg.id) {
                    // Removed while leading: step down (after this ready) so the others
                    // elect a leader.
                    self.step_down = true;
                }
                Ok(Outcome::Voters(self.voters()))
            }
            Err(e) => Err(ApplyError::Membership(e.to_string())),
        }
    }

    /// As leader of a cluster without a name, proposes one (once per term; the first applied
    /// wins, later ones are no-ops).
    fn maybe_name_cluster(&mut self) {
        if !self.is_leader()
            || !self.store.state().cluster_id.is_empty()
            || self.init_proposed_in == self.term()
        {
            return;
        }
        self.init_proposed_in = self.term();
        let cluster_id = uuid::Uuid::new_v4().simple().to_string()[..22].to_string();
        let cmd = ClusterCommand::Metadata(MetadataCommand::InitCluster { cluster_id });
        if let Err(e) = self.raw.propose(Vec::new(), cmd.encode()) {
            tracing::debug!(error = %e, "cannot propose the cluster id yet");
        }
    }

    /// Snapshots the applied state and drops the log up to it.
    fn take_snapshot(&mut self) -> Result<(), QuorumError> {
        let index = self.applied;
        if index <= self.snapshot_index() {
            return Ok(());
        }
        let term = self.raw.store().term(index)?;
        let mut snap = Snapshot {
            data: encode_state(self.store.state(), &self.applied_state).into(),
            ..Default::default()
        };
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        // A snapshot only bounds the log: failing to write one (a full disk) is retried after
        // more entries, never fatal.
        match self.raw.mut_store().compact_to(snap) {
            Ok(()) => self.snapshot_failed_at = None,
            Err(StorageError::Io { path, source }) => {
                tracing::warn!(node = self.cfg.id, path = %path.display(), error = %source, "cannot write a metadata snapshot; retried later");
                self.snapshot_failed_at = Some(index);
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    fn next_id(&mut self) -> ProposalId {
        self.next_seq += 1;
        ProposalId {
            node: self.cfg.id,
            nonce: self.nonce,
            seq: self.next_seq,
        }
    }
}

/// raft-rs logs through slog; this forwards its records to `tracing`.
fn logger(id: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!("raft_id" => id))
}

struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(
        &self,
        record: &slog::Record<'_>,
        values: &slog::OwnedKVList,
    ) -> Result<(), slog::Never> {
        use slog::KV as _;
        let mut kv = KvText(String::new());
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        match record.level() {
            slog::Level::Critical | slog::Level::Error => tracing::error!("raft: {msg}{}", kv.0),
            slog::Level::Warning => tracing::warn!("raft: {msg}{}", kv.0),
            slog::Level::Info => tracing::info!("raft: {msg}{}", kv.0),
            _ => tracing::trace!("raft: {msg}{}", kv.0),
        }
        Ok(())
    }
}

struct KvText(String);

impl slog::Serializer for KvText {
    fn emit_arguments(&mut self, key: slog::Key, val: &std::fmt::Arguments<'_>) -> slog::Result {
        use std::fmt::Write as _;
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}
