//! Durable `raft::Storage` in one directory (Kafka names it `__cluster_metadata-0`).
//!
//! Files:
//! - `entries.log`: the log entries after the snapshot, as CRC frames (`offsets_log::frame`)
//!   of protobuf `Entry`s, appended through [`AppendFile`] (never a torn frame in front of a
//!   whole one). A conflicting suffix is cut off (durably) before the new entries are appended.
//! - `hardstate.json`: term, vote, commit; replaced whole with `replace_durably`.
//! - `snapshot.bin`: the latest snapshot (protobuf `Snapshot`: index, term, `ConfState`, and the
//!   state machine's bytes); replaced whole.
//!
//! The `ConfState` lives in the snapshot only. A restarted node applies from the snapshot
//! index again (raft's `applied` = snapshot index), so the membership it starts with must be
//! the one at that index; later conf changes are in the log and are applied again on replay.
//!
//! Crash safety: every method returns only after its change is durable. Installing a snapshot
//! and compacting write the snapshot first and rewrite the entry file second; on open, entries
//! at or below the snapshot index are ignored, and if the file's entry at the snapshot index
//! has another term than the snapshot (a received snapshot replaced a conflicting log) the
//! entries after it are dropped too. Errors are returned, never papered over: the node holds
//! a ready whose write failed and writes it again until it succeeds (a full disk stalls
//! metadata changes, it does not stop the controller).

use std::cell::Cell;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage};
use serde::{Deserialize, Serialize};

use crate::append_file::AppendFile;
use crate::offsets_log::{frame, parse_frames};
use crate::replace_file::replace_durably;

const ENTRIES: &str = "entries.log";
const HARD_STATE: &str = "hardstate.json";
const SNAPSHOT: &str = "snapshot.bin";
/// Frame header bytes (length + CRC) in front of each entry.
const FRAME_HEADER: u64 = 8;

/// Errors of the durable Raft storage.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("raft storage i/o on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("raft storage file {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("raft storage: {0}")]
    Invalid(String),
}

#[derive(Serialize, Deserialize)]
struct HardStateFile {
    term: u64,
    vote: u64,
    commit: u64,
}

/// The durable log, hard state and latest snapshot of one Raft node.
pub struct DurableStorage {
    dir: PathBuf,
    hard_state: HardState,
    /// The latest snapshot; index 0 (and an empty `ConfState`) when there is none.
    snapshot: Snapshot,
    /// Entries `snapshot.index + 1 ..`, contiguous.
    entries: Vec<Entry>,
    /// File offset of each entry's frame, parallel to `entries`.
    offsets: Vec<u64>,
    file: AppendFile,
    /// Set when raft asked for a snapshot the stored one cannot serve (too old, or the peer is
    /// not in its configuration); the node takes a fresh one and raft asks again.
    snapshot_wanted: Cell<bool>,
}

impl std::fmt::Debug for DurableStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableStorage")
            .field("dir", &self.dir)
            .field("snapshot_index", &self.snapshot.get_metadata().index)
            .field("first_index", &self.first())
            .field("last_index", &self.last())
            .finish()
    }
}

impl DurableStorage {
    /// Opens (creating) the storage in `dir`, recovering exactly what was made durable.
    pub fn open(dir: &Path) -> Result<DurableStorage, StorageError> {
        let io_at = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StorageError::Io { path, source }
        };
        fs::create_dir_all(dir).map_err(io_at(dir))?;
        let snap_path = dir.join(SNAPSHOT);
        let snapshot = match fs::read(&snap_path) {
            Ok(bytes) => Snapshot::parse_from_bytes(&bytes).map_err(|e| StorageError::Corrupt {
                path: snap_path.clone(),
                reason: e.to_string(),
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Snapshot::default(),
            Err(e) => return Err(io_at(&snap_path)(e)),
        };
        let hs_path = dir.join(HARD_STATE);
        let mut hard_state = match fs::read(&hs_path) {
            Ok(bytes) => {
                let f: HardStateFile =
                    serde_json::from_slice(&bytes).map_err(|e| StorageError::Corrupt {
                        path: hs_path.clone(),
                        reason: e.to_string(),
                    })?;
                HardState {
                    term: f.term,
                    vote: f.vote,
                    commit: f.commit,
                    ..Default::default()
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => HardState::default(),
            Err(e) => return Err(io_at(&hs_path)(e)),
        };

        let log_path = dir.join(ENTRIES);
        let (mut file, data) = AppendFile::open(&log_path).map_err(io_at(&log_path))?;
        let (payloads, valid) = parse_frames(&data);
        if valid < data.len() {
            tracing::warn!(path = %log_path.display(), kept = valid, dropped = data.len() - valid,
                "dropping the torn tail of the raft log");
        }
        let snap_index = snapshot.get_metadata().index;
        let snap_term = snapshot.get_metadata().term;
        let mut entries = Vec::new();
        let mut offsets = Vec::new();
        let mut pos = 0u64;
        let mut keep_len = 0u64;
        for payload in &payloads {
            let at = pos;
            pos += FRAME_HEADER + payload.len() as u64;
            let e = Entry::parse_from_bytes(payload).map_err(|e| StorageError::Corrupt {
                path: log_path.clone(),
                reason: format!("entry at byte {at}: {e}"),
            })?;
            if e.index <= snap_index {
                if e.index == snap_index && e.term != snap_term {
                    // A received snapshot replaced a conflicting log and the crash came before
                    // the entry file was emptied: nothing after it belongs to this log.
                    break;
                }
                keep_len = pos;
                continue;
            }
            let expected = snap_index + 1 + entries.len() as u64;
            if e.index != expected {
                if entries.is_empty() && e.index > expected {
                    // Entries that follow a newer snapshot than the one on disk cannot exist.
                    return Err(StorageError::Corrupt {
                        path: log_path,
                        reason: format!(
                            "first entry {} does not follow snapshot index {snap_index}",
                            e.index
                        ),
                    });
                }
                return Err(StorageError::Corrupt {
                    path: log_path,
                    reason: format!("entry {} where {expected} was expected", e.index),
                });
            }
            entries.push(e);
            offsets.push(at);
            keep_len = pos;
        }
        file.set_valid_len(keep_len).map_err(io_at(&log_path))?;
        // The commit index must lie within [snapshot index, last index] (raft checks it).
        let last = snap_index + entries.len() as u64;
        hard_state.commit = hard_state.commit.clamp(snap_index, last);
        hard_state.term = hard_state.term.max(snap_term);
        Ok(DurableStorage {
            dir: dir.to_path_buf(),
            hard_state,
            snapshot,
            entries,
            offsets,
            file,
            snapshot_wanted: Cell::new(false),
        })
    }

    /// Whether this storage has never held a log, a vote or a snapshot.
    pub fn is_empty(&self) -> bool {
        self.snapshot.get_metadata().index == 0
            && self.entries.is_empty()
            && self.hard_state == HardState::default()
    }

    /// Starts a new cluster's log: a snapshot at index 1, term 1 with `voters` and the initial
    /// state `data`. Every founding voter must bootstrap with the same arguments; a node that
    /// joins later starts empty and receives a snapshot from the leader (the founding snapshot
    /// is not at index 0 precisely so that a joining node can never replay the log from an
    /// empty configuration).
    pub fn bootstrap(&mut self, voters: &[u64], data: Vec<u8>) -> Result<(), StorageError> {
        if !self.is_empty() {
            return Err(StorageError::Invalid(
                "bootstrap of a storage that already holds state".into(),
            ));
        }
        let mut snap = Snapshot {
            data: data.into(),
            ..Default::default()
        };
        let meta = snap.mut_metadata();
        meta.index = 1;
        meta.term = 1;
        meta.mut_conf_state().voters = voters.to_vec();
        self.apply_snapshot(snap)
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// The latest snapshot (index 0 if none).
    pub fn snapshot_ref(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Persists `hs` if it differs from the stored one.
    pub fn set_hard_state(&mut self, hs: &HardState) -> Result<(), StorageError> {
        if *hs == self.hard_state {
            return Ok(());
        }
        let f = HardStateFile {
            term: hs.term,
            vote: hs.vote,
            commit: hs.commit,
        };
        let path = self.dir.join(HARD_STATE);
        let bytes = serde_json::to_vec(&f).expect("hard state serializes");
        replace_durably(&path, &bytes).map_err(|source| StorageError::Io { path, source })?;
        self.hard_state = hs.clone();
        Ok(())
    }

    /// Persists the commit index (a `LightReady` commit update).
    pub fn set_commit(&mut self, commit: u64) -> Result<(), StorageError> {
        let mut hs = self.hard_state.clone();
        hs.commit = commit;
        self.set_hard_state(&hs)
    }

    /// Appends `ents` durably, first cutting off any stored suffix from `ents[0].index` on.
    pub fn append(&mut self, ents: &[Entry]) -> Result<(), StorageError> {
        let Some(first_new) = ents.first().map(|e| e.index) else {
            return Ok(());
        };
        let first = self.first();
        if first_new < first {
            return Err(StorageError::Invalid(format!(
                "append at {first_new} overwrites compacted entries (first index {first})"
            )));
        }
        if first_new > self.last() + 1 {
            return Err(StorageError::Invalid(format!(
                "append at {first_new} leaves a gap after last index {}",
                self.last()
            )));
        }
        let keep = (first_new - first) as usize;
        let log_path = self.dir.join(ENTRIES);
        if keep < self.entries.len() {
            // Raft only ever replaces an uncommitted suffix; cut it durably before appending.
            let at = self.offsets[keep];
            self.file
                .set_valid_len(at)
                .map_err(|source| StorageError::Io {
                    path: log_path.clone(),
                    source,
                })?;
            self.entries.truncate(keep);
            self.offsets.truncate(keep);
        }
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(ents.len());
        let base = self.file.valid_len();
        for e in ents {
            offsets.push(base + bytes.len() as u64);
            let payload = e.write_to_bytes().expect("entries encode");
            bytes.extend_from_slice(&frame(&payload));
        }
        self.file
            .append_durable(&bytes)
            .map_err(|source| StorageError::Io {
                path: log_path,
                source,
            })?;
        self.entries.extend_from_slice(ents);
        self.offsets.extend(offsets);
        Ok(())
    }

    /// Installs a snapshot received from the leader (or the founding one): it replaces the
    /// whole log.
    pub fn apply_snapshot(&mut self, snap: Snapshot) -> Result<(), StorageError> {
        let (index, term) = (snap.get_metadata().index, snap.get_metadata().term);
        if index < self.snapshot.get_metadata().index {
            return Err(StorageError::Invalid(format!(
                "snapshot at {index} is older than the stored one at {}",
                self.snapshot.get_metadata().index
            )));
        }
        // Durable order: the snapshot, then the emptied log. Memory follows only on success,
        // so a failure leaves it matching what a reopen would find.
        self.write_snapshot(&snap)?;
        self.rewrite_entries(Vec::new())?;
        self.snapshot = snap;
        let mut hs = self.hard_state.clone();
        hs.term = hs.term.max(term);
        hs.commit = hs.commit.max(index);
        self.set_hard_state(&hs)
    }

    /// Stores a snapshot the node took of its own applied state at `snap`'s index and drops
    /// the entries up to it.
    pub fn compact_to(&mut self, snap: Snapshot) -> Result<(), StorageError> {
        let index = snap.get_metadata().index;
        if index <= self.snapshot.get_metadata().index {
            return Ok(());
        }
        if index > self.last() {
            return Err(StorageError::Invalid(format!(
                "snapshot at {index} is past the last entry {}",
                self.last()
            )));
        }
        self.write_snapshot(&snap)?;
        let drop = (index - self.first() + 1) as usize;
        let rest = self.entries[drop..].to_vec();
        self.rewrite_entries(rest)?;
        self.snapshot = snap;
        self.snapshot_wanted.set(false);
        Ok(())
    }

    /// Whether raft asked for a snapshot the stored one could not serve (cleared by
    /// [`DurableStorage::compact_to`]).
    pub fn snapshot_wanted(&self) -> bool {
        self.snapshot_wanted.get()
    }

    /// Number of entries after the snapshot.
    pub fn entries_since_snapshot(&self) -> u64 {
        self.entries.len() as u64
    }

    fn write_snapshot(&self, snap: &Snapshot) -> Result<(), StorageError> {
        let path = self.dir.join(SNAPSHOT);
        let bytes = snap.write_to_bytes().expect("snapshots encode");
        replace_durably(&path, &bytes).map_err(|source| StorageError::Io { path, source })
    }

    fn rewrite_entries(&mut self, rest: Vec<Entry>) -> Result<(), StorageError> {
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(rest.len());
        for e in &rest {
            offsets.push(bytes.len() as u64);
            bytes.extend_from_slice(&frame(&e.write_to_bytes().expect("entries encode")));
        }
        self.file
            .replace(&bytes)
            .map_err(|source| StorageError::Io {
                path: self.dir.join(ENTRIES),
                source,
            })?;
        self.entries = rest;
        self.offsets = offsets;
        Ok(())
    }

    fn first(&self) -> u64 {
        self.snapshot.get_metadata().index + 1
    }

    fn last(&self) -> u64 {
        self.snapshot.get_metadata().index + self.entries.len() as u64
    }
}

fn compacted() -> raft::Error {
    raft::Error::Store(raft::StorageError::Compacted)
}

impl Storage for DurableStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.snapshot.get_metadata().get_conf_state().clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(compacted());
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        let from = (low - self.first()) as usize;
        let to = (high - self.first()) as usize;
        let mut out = self.entries[from..to].to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let meta = self.snapshot.get_metadata();
        if idx == meta.index {
            return Ok(meta.term);
        }
        if idx < self.first() {
            return Err(compacted());
        }
        if idx > self.last() {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let meta = self.snapshot.get_metadata();
        let cs: &ConfState = meta.get_conf_state();
        let has_peer = cs
            .voters
            .iter()
            .chain(&cs.learners)
            .chain(&cs.voters_outgoing)
            .any(|id| *id == to);
        if meta.index >= request_index && has_peer {
            return Ok(self.snapshot.clone());
        }
        self.snapshot_wanted.set(true);
        Err(raft::Error::Store(
            raft::StorageError::SnapshotTemporarilyUnavailable,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &str) -> Entry {
        Entry {
            index,
            term,
            data: data.as_bytes().to_vec().into(),
            ..Default::default()
        }
    }

    fn all(s: &DurableStorage) -> Vec<(u64, u64)> {
        let (lo, hi) = (s.first_index().unwrap(), s.last_index().unwrap() + 1);
        s.entries(lo, hi, None, GetEntriesContext::empty(false))
            .unwrap()
            .iter()
            .map(|e| (e.index, e.term))
            .collect()
    }

    fn boot(dir: &Path) -> DurableStorage {
        let mut s = DurableStorage::open(dir).unwrap();
        s.bootstrap(&[1, 2, 3], b"state".to_vec()).unwrap();
        s
    }

    #[test]
    fn bootstrap_entries_and_hard_state_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = boot(dir.path());
            assert!(s.initial_state().unwrap().initialized());
            s.append(&[entry(2, 1, "a"), entry(3, 2, "b")]).unwrap();
            let hs = HardState {
                term: 2,
                vote: 3,
                commit: 3,
                ..Default::default()
            };
            s.set_hard_state(&hs).unwrap();
        }
        let s = DurableStorage::open(dir.path()).unwrap();
        assert_eq!(all(&s), vec![(2, 1), (3, 2)]);
        assert_eq!(s.term(1).unwrap(), 1);
        assert!(matches!(s.term(0), Err(raft::Error::Store(_))));
        let st = s.initial_state().unwrap();
        assert_eq!(
            (st.hard_state.term, st.hard_state.vote, st.hard_state.commit),
            (2, 3, 3)
        );
        assert_eq!(st.conf_state.voters, vec![1, 2, 3]);
        assert_eq!(s.snapshot_ref().get_data(), b"state");
    }

    #[test]
    fn a_conflicting_suffix_is_cut_durably() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = boot(dir.path());
            s.append(&[entry(2, 1, "a"), entry(3, 1, "b"), entry(4, 1, "c")])
                .unwrap();
            s.append(&[entry(3, 2, "B")]).unwrap();
            assert_eq!(all(&s), vec![(2, 1), (3, 2)]);
            assert!(s.append(&[entry(9, 2, "gap")]).is_err());
            assert!(s.append(&[entry(1, 2, "compacted")]).is_err());
        }
        let s = DurableStorage::open(dir.path()).unwrap();
        assert_eq!(all(&s), vec![(2, 1), (3, 2)]);
        let e = s
            .entries(3, 4, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(e[0].get_data(), b"B");
    }

    #[test]
    fn a_torn_tail_is_dropped_on_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = boot(dir.path());
            s.append(&[entry(2, 1, "a"), entry(3, 1, "b")]).unwrap();
        }
        let path = dir.path().join(ENTRIES);
        let mut raw = fs::read(&path).unwrap();
        raw.truncate(raw.len() - 2);
        fs::write(&path, &raw).unwrap();
        let mut s = DurableStorage::open(dir.path()).unwrap();
        assert_eq!(all(&s), vec![(2, 1)]);
        s.append(&[entry(3, 2, "c")]).unwrap();
        drop(s);
        let s = DurableStorage::open(dir.path()).unwrap();
        assert_eq!(all(&s), vec![(2, 1), (3, 2)]);
    }

    #[test]
    fn compaction_keeps_the_entries_after_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = boot(dir.path());
            s.append(&(2..=6).map(|i| entry(i, 1, "x")).collect::<Vec<_>>())
                .unwrap();
            let mut snap = Snapshot::default();
            snap.mut_metadata().index = 4;
            snap.mut_metadata().term = 1;
            snap.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
            s.compact_to(snap).unwrap();
            assert_eq!(all(&s), vec![(5, 1), (6, 1)]);
            assert_eq!(s.term(4).unwrap(), 1);
            assert!(matches!(
                s.entries(3, 5, None, GetEntriesContext::empty(false)),
                Err(raft::Error::Store(raft::StorageError::Compacted))
            ));
            s.append(&[entry(7, 2, "y")]).unwrap();
        }
        let s = DurableStorage::open(dir.path()).unwrap();
        assert_eq!(all(&s), vec![(5, 1), (6, 1), (7, 2)]);
    }

    #[test]
    fn a_crash_between_snapshot_and_log_rewrite_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let log_before;
        {
            let mut s = boot(dir.path());
            s.append(&(2..=6).map(|i| entry(i, 1, "x")).collect::<Vec<_>>())
                .unwrap();
            log_before = fs::read(dir.path().join(ENTRIES)).unwrap();
            // A local snapshot at 4 (same term as the entry there) ...
            let mut snap = Snapshot::default();
            snap.mut_metadata().index = 4;
            snap.mut_metadata().term = 1;
            snap.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
            s.compact_to(snap).unwrap();
        }
        // ... and the crash came before the entry file was rewritten.
        fs::write(dir.path().join(ENTRIES), &log_before).unwrap();
        let s = DurableStorage::open(dir.path()).unwrap();
        assert_eq!(all(&s), vec![(5, 1), (6, 1)]);
        drop(s);

        // A received snapshot at 5 whose term differs from the local entry 5: nothing after
        // it survives.
        let mut s = DurableStorage::open(dir.path()).unwrap();
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 5;
        snap.mut_metadata().term = 3;
        snap.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
        s.apply_snapshot(snap).unwrap();
        drop(s);
        fs::write(dir.path().join(ENTRIES), &log_before).unwrap();
        let s = DurableStorage::open(dir.path()).unwrap();
        assert_eq!(all(&s), vec![]);
        assert_eq!(s.last_index().unwrap(), 5);
        assert_eq!(s.hard_state().commit, 5);
        assert_eq!(s.hard_state().term, 3);
    }

    #[test]
    fn a_failed_append_is_not_in_the_log_and_later_appends_survive() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = boot(dir.path());
            s.append(&[entry(2, 1, "a")]).unwrap();
            let faults = s.file.faults();
            // Half a frame reaches the disk, then the disk is full.
            faults.disk_full_after(5);
            assert!(s.append(&[entry(3, 1, "b")]).is_err());
            faults.disk_freed();
            faults.fail_syncs(1);
            assert!(s.append(&[entry(3, 1, "b")]).is_err());
            // Raft would stop the node here; the storage itself stays consistent.
            s.append(&[entry(3, 1, "c")]).unwrap();
            assert_eq!(all(&s), vec![(2, 1), (3, 1)]);
        }
        let s = DurableStorage::open(dir.path()).unwrap();
        assert_eq!(all(&s), vec![(2, 1), (3, 1)]);
        let e = s
            .entries(3, 4, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(e[0].get_data(), b"c");
    }

    #[test]
    fn a_snapshot_is_served_only_to_a_peer_in_its_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let s = boot(dir.path());
        assert!(s.snapshot(0, 2).is_ok());
        assert!(!s.snapshot_wanted());
        assert!(s.snapshot(0, 4).is_err());
        assert!(s.snapshot_wanted());
        assert!(s.snapshot(5, 2).is_err());
    }
}
