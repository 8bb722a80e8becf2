//! One-time conversion of a one-node data dir written before kmirror had one control plane.
//!
//! Until then a node started without `--quorum` kept its metadata, ACLs, SCRAM credentials,
//! client quotas, mirror state and coordinator logs in files of its own. Now every node is a
//! member of a Raft quorum (a lone node is a one-voter quorum of itself, Kafka's combined mode
//! with one controller), and those files are read once, into the founding snapshot of the
//! quorum's log, when that log is still empty ([`legacy_state`]). Afterwards they are moved
//! into `pre-quorum/` ([`retire_legacy_files`]) so that nothing reads them again and an
//! operator still has them.
//!
//! Invariants worth naming: the snapshot is durable before any file moves, so a crash in
//! between leaves a node that already has its log (the files are then only moved, never read
//! again); the partitions' own logs (`topics/`) are not touched; topics get the assignment a
//! one-node cluster gives them (this node the only replica, leader and ISR), at their stored
//! leader epochs and topic ids.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::acl::AclStore;
use crate::metadata::{ClusterMetadata, MetadataStore, PartitionAssignment};
use crate::mirror::MirrorStateStore;
use crate::offsets_log::RecordFile;
use crate::quota::QuotaStore;
use crate::replicated::CoordinatorLogs;
use crate::scram::ScramStore;

/// The one-node metadata file: its presence marks a data dir of the old layout.
const METADATA_FILE: &str = "cluster-metadata.json";
/// Where the converted files go.
pub const RETIRED_DIR: &str = "pre-quorum";
/// Every file and directory the old one-node layout kept its control state in (the
/// partitions' logs under `topics/` stay where they are).
const LEGACY: [&str; 7] = [
    METADATA_FILE,
    "acls.json",
    "client_quotas.json",
    "scram.json",
    "__mirror_state",
    "__consumer_offsets-0",
    "__transaction_state-0",
];

/// Why an old data dir could not be read.
#[derive(Debug, thiserror::Error)]
#[error("converting the one-node state in {dir}: {what}: {reason}")]
pub struct UpgradeError {
    pub dir: PathBuf,
    pub what: &'static str,
    pub reason: String,
}

/// What the old one-node files of `data_dir` held, for the quorum's founding snapshot; `None`
/// when `data_dir` has no such files (a new node, or one already converted).
pub fn legacy_state(data_dir: &Path, node_id: i32) -> Result<Option<LegacyState>, UpgradeError> {
    if !data_dir.join(METADATA_FILE).is_file() {
        return Ok(None);
    }
    let err = |what: &'static str| {
        let dir = data_dir.to_path_buf();
        move |e: &dyn std::fmt::Display| UpgradeError {
            dir,
            what,
            reason: e.to_string(),
        }
    };
    let mut metadata = MetadataStore::open(data_dir)
        .map_err(|e| err("cluster-metadata.json")(&e))?
        .state()
        .clone();
    assign_to(&mut metadata, node_id);
    let acls = AclStore::open(data_dir)
        .map_err(|e| err("acls.json")(&e))?
        .all();
    let scram = ScramStore::open(data_dir)
        .map_err(|e| err("scram.json")(&e))?
        .credentials()
        .clone();
    let quotas = QuotaStore::open(data_dir)
        .map_err(|e| err("client_quotas.json")(&e))?
        .all();
    let mirrors = MirrorStateStore::open(data_dir)
        .map_err(|e| err("__mirror_state")(&e))?
        .live();
    let records = |dir: &str, what: &'static str| {
        RecordFile::open(&data_dir.join(dir), "records.log")
            .map(|(_, r)| r)
            .map_err(|e| err(what)(&e))
    };
    let coordinators = CoordinatorLogs {
        offsets: records("__consumer_offsets-0", "__consumer_offsets-0")?,
        transactions: records("__transaction_state-0", "__transaction_state-0")?,
        next_producer_id: 0,
    };
    Ok(Some(LegacyState {
        metadata,
        acls,
        scram,
        quotas,
        mirrors,
        coordinators,
    }))
}

/// The old one-node control state, read from its files.
#[derive(Debug)]
pub struct LegacyState {
    pub metadata: ClusterMetadata,
    pub acls: Vec<crate::acl::AclBinding>,
    pub scram: crate::scram::Credentials,
    pub quotas: std::collections::BTreeMap<crate::quota::Entity, crate::quota::Values>,
    pub mirrors: Vec<crate::mirror::MirrorRecord>,
    pub coordinators: CoordinatorLogs,
}

/// Gives every partition without an assignment the one a one-node cluster has: `node` the
/// only replica, in the ISR and leader (the old layout's sentinel meant exactly that).
fn assign_to(m: &mut ClusterMetadata, node: i32) {
    for t in m.topics.values_mut().chain(m.internal_topics.values_mut()) {
        if t.assignments.is_empty() {
            t.assignments = (0..t.leader_epochs.len())
                .map(|_| PartitionAssignment::local(node))
                .collect();
        }
    }
    // Registrations come from the running node; none is carried over.
    m.brokers.clear();
}

/// Moves the old layout's control files of `data_dir` (those present) into `pre-quorum/`.
/// Call once the quorum's log holds their content. Returns what was moved.
pub fn retire_legacy_files(data_dir: &Path) -> io::Result<Vec<&'static str>> {
    let present: Vec<&'static str> = LEGACY
        .iter()
        .copied()
        .filter(|n| data_dir.join(n).exists())
        .collect();
    if present.is_empty() || !data_dir.join(METADATA_FILE).exists() {
        return Ok(Vec::new());
    }
    let to = data_dir.join(RETIRED_DIR);
    fs::create_dir_all(&to)?;
    // The marker file moves last: until it has, a restart moves the rest again.
    for n in present.iter().filter(|n| **n != METADATA_FILE) {
        let dest = to.join(n);
        if dest.exists() {
            remove_any(&dest)?;
        }
        fs::rename(data_dir.join(n), dest)?;
    }
    fs::rename(data_dir.join(METADATA_FILE), to.join(METADATA_FILE))?;
    sync_dir(data_dir)?;
    Ok(present)
}

fn remove_any(p: &Path) -> io::Result<()> {
    if p.is_dir() {
        fs::remove_dir_all(p)
    } else {
        fs::remove_file(p)
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MetadataStore;

    #[test]
    fn an_empty_dir_has_no_legacy_state() {
        let d = tempfile::tempdir().unwrap();
        assert!(legacy_state(d.path(), 1).unwrap().is_none());
        assert!(retire_legacy_files(d.path()).unwrap().is_empty());
    }

    #[test]
    fn legacy_topics_get_a_one_node_assignment_and_the_files_move_once() {
        let d = tempfile::tempdir().unwrap();
        {
            let mut s = MetadataStore::open(d.path()).unwrap();
            crate::quorum::command::apply(
                &mut s,
                &crate::quorum::MetadataCommand::CreateTopic {
                    name: "orders".into(),
                    partitions: 3,
                    configs: Default::default(),
                    id: uuid::Uuid::from_u128(7),
                    assignments: Vec::new(),
                },
            )
            .unwrap();
        }
        let st = legacy_state(d.path(), 5).unwrap().expect("old layout");
        let t = &st.metadata.topics["orders"];
        assert_eq!(t.id, uuid::Uuid::from_u128(7));
        assert_eq!(t.assignments.len(), 3);
        assert!(t
            .assignments
            .iter()
            .all(|a| a.replicas == [5] && a.isr == [5] && a.leader == 5));
        let moved = retire_legacy_files(d.path()).unwrap();
        assert!(moved.contains(&METADATA_FILE) && moved.contains(&"__consumer_offsets-0"));
        assert!(!d.path().join("__mirror_state").exists());
        assert!(d.path().join(RETIRED_DIR).join(METADATA_FILE).is_file());
        assert!(legacy_state(d.path(), 5).unwrap().is_none());
        assert!(retire_legacy_files(d.path()).unwrap().is_empty());
    }
}
