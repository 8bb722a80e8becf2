//! `__mirror_state`: the durable store of mirror definitions and mirror partition states.
//!
//! Layout: one append-only file `<dir>/__mirror_state/state.log` of records
//! `[u32 BE payload length][u32 BE CRC32C(payload)][payload: JSON record]`. A record is keyed
//! (a mirror name, or a topic-partition) and the latest record per key wins, like a compacted
//! topic; a `None` value is a tombstone. When dead records outnumber live ones the file is
//! rewritten (temp file, fsync, rename, fsync dir), so it stays small.
//!
//! Invariants:
//! - Every mutation is appended and fsynced *before* the in-memory view changes and before the
//!   method returns, so a caller that performs the effect after the call can never have an
//!   effect whose state was not recorded ("write before the transition takes effect").
//! - Recovery reads records up to the first torn or corrupt one (a crash mid-append), truncates
//!   the file there, and rebuilds the view; [`MirrorStateStore::recovery_plan`] then tells the
//!   coordinator what to resume for each partition, with no operator action.
//! - Illegal transitions are refused without writing anything.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use kmirror_types::TopicPartition;
use serde::{Deserialize, Serialize};

use super::definition::MirrorDefinition;
use super::state::{FailoverStep, PartitionState};
use super::MirrorError;

const FILE_NAME: &str = "state.log";
const HEADER: usize = 8;
/// A record larger than this is treated as corruption (a torn length field).
const MAX_RECORD: u32 = 16 * 1024 * 1024;

/// Durable state of one mirror partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionEntry {
    /// Mirror that owns (or last owned) the partition.
    pub mirror: String,
    pub state: PartitionState,
    /// Source topic id (hyphenated UUID) once known.
    #[serde(default)]
    pub topic_id: Option<String>,
    /// Last mirrored epoch (LME), persisted at failover; served by LastMirroredEpochs.
    #[serde(default)]
    pub last_mirrored_epoch: Option<i32>,
    /// Last completed failover step while STOPPING (None = none done yet).
    #[serde(default)]
    pub failover_done: Option<FailoverStep>,
    /// Why the partition is FAILED (or the reason given with the last transition).
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
enum Record {
    Mirror {
        name: String,
        def: Option<MirrorDefinition>,
    },
    Partition {
        topic: String,
        partition: i32,
        entry: Option<PartitionEntry>,
    },
}

/// What the coordinator must do for a partition after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryAction {
    /// PREPARING: redo the preparation (truncation check), then MIRRORING.
    ResumePreparing,
    /// MIRRORING: start the fetcher from the local log end.
    StartFetcher,
    /// STOPPING: continue the failover after the given completed step (None = from the start).
    ResumeFailover { after: Option<FailoverStep> },
    /// FAILED: retry with backoff.
    RetryFailed,
}

/// The mirror state store. Single-threaded (`&mut self`); owned by the control thread.
#[derive(Debug)]
pub struct MirrorStateStore {
    path: PathBuf,
    file: File,
    mirrors: BTreeMap<String, MirrorDefinition>,
    partitions: BTreeMap<TopicPartition, PartitionEntry>,
    records_in_file: usize,
}

impl MirrorStateStore {
    /// Open (creating if needed) `<data_dir>/__mirror_state/` and recover its contents.
    pub fn open(data_dir: &Path) -> Result<Self, MirrorError> {
        let dir = data_dir.join("__mirror_state");
        fs::create_dir_all(&dir)?;
        let path = dir.join(FILE_NAME);
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;

        let mut store = MirrorStateStore {
            path,
            file,
            mirrors: BTreeMap::new(),
            partitions: BTreeMap::new(),
            records_in_file: 0,
        };
        let mut pos = 0usize;
        while pos + HEADER <= buf.len() {
            let len = u32::from_be_bytes(buf[pos..pos + 4].try_into().expect("4 bytes"));
            let crc = u32::from_be_bytes(buf[pos + 4..pos + 8].try_into().expect("4 bytes"));
            if len > MAX_RECORD || pos + HEADER + len as usize > buf.len() {
                break;
            }
            let payload = &buf[pos + HEADER..pos + HEADER + len as usize];
            if crc32c::crc32c(payload) != crc {
                break;
            }
            let Ok(rec) = serde_json::from_slice::<Record>(payload) else {
                break;
            };
            store.apply(rec);
            store.records_in_file += 1;
            pos += HEADER + len as usize;
        }
        if pos < buf.len() {
            // Torn tail from a crash mid-append: drop it so new records follow valid ones.
            tracing::warn!(
                valid = pos,
                total = buf.len(),
                "__mirror_state: dropping torn tail"
            );
            store.file.set_len(pos as u64)?;
            store.file.sync_all()?;
        }
        Ok(store)
    }

    fn apply(&mut self, rec: Record) {
        match rec {
            Record::Mirror { name, def: Some(d) } => {
                self.mirrors.insert(name, d);
            }
            Record::Mirror { name, def: None } => {
                self.mirrors.remove(&name);
            }
            Record::Partition {
                topic,
                partition,
                entry,
            } => {
                let tp = TopicPartition::new(topic, partition);
                match entry {
                    Some(e) => {
                        self.partitions.insert(tp, e);
                    }
                    None => {
                        self.partitions.remove(&tp);
                    }
                }
            }
        }
    }

    fn encode(rec: &Record) -> Result<Vec<u8>, MirrorError> {
        let payload = serde_json::to_vec(rec).map_err(|e| MirrorError::Corrupt(e.to_string()))?;
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// Append + fsync, then apply to the in-memory view.
    fn persist(&mut self, rec: Record) -> Result<(), MirrorError> {
        let bytes = Self::encode(&rec)?;
        self.file.write_all(&bytes)?;
        self.file.sync_data()?;
        self.records_in_file += 1;
        self.apply(rec);
        self.maybe_compact()?;
        Ok(())
    }

    fn live_records(&self) -> usize {
        self.mirrors.len() + self.partitions.len()
    }

    fn maybe_compact(&mut self) -> Result<(), MirrorError> {
        if self.records_in_file > 1024 && self.records_in_file > 4 * self.live_records() {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrite the file with only live records (atomic rename).
    pub fn compact(&mut self) -> Result<(), MirrorError> {
        let tmp = self.path.with_extension("log.tmp");
        let mut out = Vec::new();
        for (name, def) in &self.mirrors {
            out.extend(Self::encode(&Record::Mirror {
                name: name.clone(),
                def: Some(def.clone()),
            })?);
        }
        for (tp, e) in &self.partitions {
            out.extend(Self::encode(&Record::Partition {
                topic: tp.topic.clone(),
                partition: tp.partition,
                entry: Some(e.clone()),
            })?);
        }
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&out)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)?;
        self.records_in_file = self.live_records();
        Ok(())
    }

    // ---- mirrors ---------------------------------------------------------------------------

    pub fn mirrors(&self) -> impl Iterator<Item = &MirrorDefinition> {
        self.mirrors.values()
    }

    pub fn mirror(&self, name: &str) -> Option<&MirrorDefinition> {
        self.mirrors.get(name)
    }

    /// CreateMirror: refuses a name in use.
    pub fn create_mirror(&mut self, def: MirrorDefinition) -> Result<(), MirrorError> {
        if self.mirrors.contains_key(&def.name) {
            return Err(MirrorError::MirrorAlreadyExists(def.name));
        }
        self.persist(Record::Mirror {
            name: def.name.clone(),
            def: Some(def),
        })
    }

    /// Replace a mirror's definition (topics/patterns added, cluster id resolved, ...).
    pub fn update_mirror(&mut self, def: MirrorDefinition) -> Result<(), MirrorError> {
        if !self.mirrors.contains_key(&def.name) {
            return Err(MirrorError::UnknownMirror(def.name));
        }
        self.persist(Record::Mirror {
            name: def.name.clone(),
            def: Some(def),
        })
    }

    /// Topics of a mirror that still block its deletion: any partition not STOPPED.
    pub fn active_topics(&self, mirror: &str) -> Vec<String> {
        let mut t: Vec<String> = self
            .partitions
            .iter()
            .filter(|(_, e)| e.mirror == mirror && e.state != PartitionState::Stopped)
            .map(|(tp, _)| tp.topic.clone())
            .collect();
        t.dedup();
        t
    }

    /// DeleteMirror: MIRROR_NOT_EMPTY while any of its partitions is not STOPPED. Stopped
    /// partitions keep their entries (and LMEs) for a later failback.
    pub fn delete_mirror(&mut self, name: &str) -> Result<(), MirrorError> {
        if !self.mirrors.contains_key(name) {
            return Err(MirrorError::UnknownMirror(name.to_owned()));
        }
        let active = self.active_topics(name);
        if !active.is_empty() {
            return Err(MirrorError::MirrorNotEmpty {
                mirror: name.to_owned(),
                topics: active,
            });
        }
        self.persist(Record::Mirror {
            name: name.to_owned(),
            def: None,
        })
    }

    // ---- partitions ------------------------------------------------------------------------

    pub fn partition(&self, tp: &TopicPartition) -> Option<&PartitionEntry> {
        self.partitions.get(tp)
    }

    /// State of a partition; UNKNOWN when the store has never seen it.
    pub fn state_of(&self, tp: &TopicPartition) -> PartitionState {
        self.partitions
            .get(tp)
            .map_or(PartitionState::Unknown, |e| e.state)
    }

    pub fn partitions(&self) -> impl Iterator<Item = (&TopicPartition, &PartitionEntry)> {
        self.partitions.iter()
    }

    pub fn partitions_of<'a>(
        &'a self,
        mirror: &'a str,
    ) -> impl Iterator<Item = (&'a TopicPartition, &'a PartitionEntry)> + 'a {
        self.partitions
            .iter()
            .filter(move |(_, e)| e.mirror == mirror)
    }

    /// Move a partition to `to`, durably, before the caller acts on it. `mirror` names the
    /// owning mirror for UNKNOWN/STOPPED -> PREPARING (a stopped topic may be re-added to a
    /// different mirror for failback); otherwise it must match the current owner.
    pub fn transition(
        &mut self,
        tp: &TopicPartition,
        mirror: &str,
        to: PartitionState,
        reason: Option<String>,
    ) -> Result<PartitionEntry, MirrorError> {
        if !self.mirrors.contains_key(mirror) {
            return Err(MirrorError::UnknownMirror(mirror.to_owned()));
        }
        let current = self.partitions.get(tp).cloned();
        let from = current
            .as_ref()
            .map_or(PartitionState::Unknown, |e| e.state);
        if !from.can_transition_to(to) {
            return Err(MirrorError::IllegalTransition {
                tp: tp.clone(),
                from,
                to,
            });
        }
        let rebinding = matches!(from, PartitionState::Unknown | PartitionState::Stopped);
        if let Some(e) = &current {
            if !rebinding && e.mirror != mirror {
                return Err(MirrorError::TopicNotInMirror {
                    topic: tp.topic.clone(),
                    mirror: mirror.to_owned(),
                });
            }
        }
        let mut entry = current.unwrap_or(PartitionEntry {
            mirror: mirror.to_owned(),
            state: from,
            topic_id: None,
            last_mirrored_epoch: None,
            failover_done: None,
            reason: None,
        });
        entry.mirror = mirror.to_owned();
        entry.state = to;
        entry.reason = reason;
        if to == PartitionState::Stopping || to == PartitionState::Preparing {
            entry.failover_done = None;
        }
        self.persist(Record::Partition {
            topic: tp.topic.clone(),
            partition: tp.partition,
            entry: Some(entry.clone()),
        })?;
        Ok(entry)
    }

    fn update_entry(
        &mut self,
        tp: &TopicPartition,
        f: impl FnOnce(&mut PartitionEntry) -> Result<(), MirrorError>,
    ) -> Result<(), MirrorError> {
        let mut e = self
            .partitions
            .get(tp)
            .cloned()
            .ok_or_else(|| MirrorError::UnknownPartition(tp.clone()))?;
        f(&mut e)?;
        self.persist(Record::Partition {
            topic: tp.topic.clone(),
            partition: tp.partition,
            entry: Some(e),
        })
    }

    /// Replace the reason shown with the partition's state (e.g. why a failover waits).
    pub fn set_reason(
        &mut self,
        tp: &TopicPartition,
        reason: Option<String>,
    ) -> Result<(), MirrorError> {
        if self.partitions.get(tp).is_some_and(|e| e.reason == reason) {
            return Ok(());
        }
        self.update_entry(tp, |e| {
            e.reason = reason;
            Ok(())
        })
    }

    /// Record a completed failover step (STOPPING only; steps must advance in order).
    pub fn record_failover_step(
        &mut self,
        tp: &TopicPartition,
        step: FailoverStep,
    ) -> Result<(), MirrorError> {
        self.update_entry(tp, |e| {
            if e.state != PartitionState::Stopping {
                return Err(MirrorError::IllegalTransition {
                    tp: tp.clone(),
                    from: e.state,
                    to: PartitionState::Stopping,
                });
            }
            let expected = match e.failover_done {
                None => Some(FailoverStep::FetchersStopped),
                Some(s) => s.next(),
            };
            if expected != Some(step) && e.failover_done != Some(step) {
                return Err(MirrorError::FailoverOutOfOrder {
                    tp: tp.clone(),
                    done: e.failover_done,
                    step,
                });
            }
            e.failover_done = Some(step);
            Ok(())
        })
    }

    /// Persist the last mirrored epoch of a partition (failover step 4).
    pub fn set_last_mirrored_epoch(
        &mut self,
        tp: &TopicPartition,
        epoch: i32,
    ) -> Result<(), MirrorError> {
        self.update_entry(tp, |e| {
            e.last_mirrored_epoch = Some(epoch);
            Ok(())
        })
    }

    /// Remember the source topic id of a partition.
    pub fn set_topic_id(&mut self, tp: &TopicPartition, id: &str) -> Result<(), MirrorError> {
        self.update_entry(tp, |e| {
            e.topic_id = Some(id.to_owned());
            Ok(())
        })
    }

    /// LME for LastMirroredEpochs (by topic-partition: the asking mirror's name is the
    /// requester's own and need not match ours).
    pub fn last_mirrored_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        self.partitions.get(tp)?.last_mirrored_epoch
    }

    /// Drop a partition's entry (topic deleted locally).
    pub fn forget_partition(&mut self, tp: &TopicPartition) -> Result<(), MirrorError> {
        if !self.partitions.contains_key(tp) {
            return Ok(());
        }
        self.persist(Record::Partition {
            topic: tp.topic.clone(),
            partition: tp.partition,
            entry: None,
        })
    }

    /// What to resume after a restart, per partition that needs work.
    pub fn recovery_plan(&self) -> Vec<(TopicPartition, RecoveryAction)> {
        self.partitions
            .iter()
            .filter_map(|(tp, e)| {
                let a = match e.state {
                    PartitionState::Preparing => RecoveryAction::ResumePreparing,
                    PartitionState::Mirroring => RecoveryAction::StartFetcher,
                    PartitionState::Stopping => RecoveryAction::ResumeFailover {
                        after: e.failover_done,
                    },
                    PartitionState::Failed => RecoveryAction::RetryFailed,
                    PartitionState::Paused | PartitionState::Stopped | PartitionState::Unknown => {
                        return None
                    }
                };
                Some((tp.clone(), a))
            })
            .collect()
    }

    /// Number of records currently in the file (for tests and metrics).
    pub fn records_in_file(&self) -> usize {
        self.records_in_file
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn def(name: &str) -> MirrorDefinition {
        let mut s = BTreeMap::new();
        s.insert("bootstrap.servers".to_owned(), "127.0.0.1:9092".to_owned());
        MirrorDefinition::new(name, s).unwrap()
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("orders", p)
    }

    #[test]
    fn given_transitions_when_reopened_should_recover_same_states() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut st = MirrorStateStore::open(dir.path()).unwrap();
            st.create_mirror(def("dr")).unwrap();
            st.transition(&tp(0), "dr", PartitionState::Preparing, None)
                .unwrap();
            st.transition(&tp(0), "dr", PartitionState::Mirroring, None)
                .unwrap();
            st.transition(&tp(1), "dr", PartitionState::Preparing, None)
                .unwrap();
            st.transition(&tp(1), "dr", PartitionState::Failed, Some("CRC".into()))
                .unwrap();
        }
        let st = MirrorStateStore::open(dir.path()).unwrap();
        assert_eq!(st.mirror("dr"), Some(&def("dr")));
        assert_eq!(st.state_of(&tp(0)), PartitionState::Mirroring);
        assert_eq!(st.state_of(&tp(1)), PartitionState::Failed);
        assert_eq!(st.partition(&tp(1)).unwrap().reason.as_deref(), Some("CRC"));
        assert_eq!(st.state_of(&tp(2)), PartitionState::Unknown);
        let plan = st.recovery_plan();
        assert!(plan.contains(&(tp(0), RecoveryAction::StartFetcher)));
        assert!(plan.contains(&(tp(1), RecoveryAction::RetryFailed)));
    }

    #[test]
    fn illegal_transition_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = MirrorStateStore::open(dir.path()).unwrap();
        st.create_mirror(def("dr")).unwrap();
        let before = st.records_in_file();
        let err = st
            .transition(&tp(0), "dr", PartitionState::Mirroring, None)
            .unwrap_err();
        assert!(matches!(err, MirrorError::IllegalTransition { .. }));
        assert_eq!(st.records_in_file(), before);
        assert!(matches!(
            st.transition(&tp(0), "nope", PartitionState::Preparing, None),
            Err(MirrorError::UnknownMirror(_))
        ));
    }

    #[test]
    fn given_crash_after_stopping_written_when_reopened_should_resume_failover_from_last_step() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut st = MirrorStateStore::open(dir.path()).unwrap();
            st.create_mirror(def("dr")).unwrap();
            for s in [PartitionState::Preparing, PartitionState::Mirroring] {
                st.transition(&tp(0), "dr", s, None).unwrap();
            }
            st.transition(&tp(0), "dr", PartitionState::Stopping, None)
                .unwrap();
            // Crash here: state written, no effect yet.
        }
        {
            let mut st = MirrorStateStore::open(dir.path()).unwrap();
            assert_eq!(
                st.recovery_plan(),
                vec![(tp(0), RecoveryAction::ResumeFailover { after: None })]
            );
            st.record_failover_step(&tp(0), FailoverStep::FetchersStopped)
                .unwrap();
            st.record_failover_step(&tp(0), FailoverStep::EpochBumped)
                .unwrap();
            // Out-of-order steps are refused; repeating the last one is idempotent.
            assert!(st
                .record_failover_step(&tp(0), FailoverStep::PidResetWritten)
                .is_err());
            st.record_failover_step(&tp(0), FailoverStep::EpochBumped)
                .unwrap();
            // Crash again mid-failover.
        }
        let mut st = MirrorStateStore::open(dir.path()).unwrap();
        assert_eq!(
            st.recovery_plan(),
            vec![(
                tp(0),
                RecoveryAction::ResumeFailover {
                    after: Some(FailoverStep::EpochBumped)
                }
            )]
        );
        st.record_failover_step(&tp(0), FailoverStep::TruncatedToLso)
            .unwrap();
        st.set_last_mirrored_epoch(&tp(0), 7).unwrap();
        st.record_failover_step(&tp(0), FailoverStep::LmePersisted)
            .unwrap();
        st.record_failover_step(&tp(0), FailoverStep::PidResetWritten)
            .unwrap();
        st.transition(&tp(0), "dr", PartitionState::Stopped, None)
            .unwrap();
        drop(st);
        let st = MirrorStateStore::open(dir.path()).unwrap();
        assert!(st.recovery_plan().is_empty());
        assert_eq!(st.last_mirrored_epoch(&tp(0)), Some(7));
        assert!(!st.state_of(&tp(0)).is_read_only());
    }

    #[test]
    fn given_torn_tail_when_reopened_should_keep_valid_records_and_accept_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut st = MirrorStateStore::open(dir.path()).unwrap();
            st.create_mirror(def("dr")).unwrap();
            st.transition(&tp(0), "dr", PartitionState::Preparing, None)
                .unwrap();
        }
        let path = dir.path().join("__mirror_state").join(FILE_NAME);
        let good_len = fs::metadata(&path).unwrap().len();
        // A record header promising 100 bytes, followed by only 3: a crash mid-append.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&100u32.to_be_bytes()).unwrap();
        f.write_all(&[1, 2, 3, 4, 5, 6, 7]).unwrap();
        drop(f);
        {
            let mut st = MirrorStateStore::open(dir.path()).unwrap();
            assert_eq!(fs::metadata(&path).unwrap().len(), good_len);
            assert_eq!(st.state_of(&tp(0)), PartitionState::Preparing);
            st.transition(&tp(0), "dr", PartitionState::Mirroring, None)
                .unwrap();
        }
        let st = MirrorStateStore::open(dir.path()).unwrap();
        assert_eq!(st.state_of(&tp(0)), PartitionState::Mirroring);
    }

    #[test]
    fn corrupted_record_stops_recovery_at_that_point() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut st = MirrorStateStore::open(dir.path()).unwrap();
            st.create_mirror(def("dr")).unwrap();
            st.transition(&tp(0), "dr", PartitionState::Preparing, None)
                .unwrap();
        }
        let path = dir.path().join("__mirror_state").join(FILE_NAME);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 0xff; // flip a payload byte of the last record
        fs::write(&path, &bytes).unwrap();
        let st = MirrorStateStore::open(dir.path()).unwrap();
        assert!(st.mirror("dr").is_some());
        assert_eq!(st.state_of(&tp(0)), PartitionState::Unknown);
    }

    #[test]
    fn delete_mirror_refused_while_topics_are_not_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = MirrorStateStore::open(dir.path()).unwrap();
        st.create_mirror(def("dr")).unwrap();
        assert!(matches!(
            st.create_mirror(def("dr")),
            Err(MirrorError::MirrorAlreadyExists(_))
        ));
        st.transition(&tp(0), "dr", PartitionState::Preparing, None)
            .unwrap();
        match st.delete_mirror("dr") {
            Err(MirrorError::MirrorNotEmpty { topics, .. }) => {
                assert_eq!(topics, vec!["orders".to_string()])
            }
            other => panic!("expected MirrorNotEmpty, got {other:?}"),
        }
        st.transition(&tp(0), "dr", PartitionState::Stopping, None)
            .unwrap();
        st.transition(&tp(0), "dr", PartitionState::Stopped, None)
            .unwrap();
        st.delete_mirror("dr").unwrap();
        assert!(st.mirror("dr").is_none());
        // The stopped partition keeps its entry for a later failback.
        assert_eq!(st.state_of(&tp(0)), PartitionState::Stopped);
    }

    #[test]
    fn stopped_topic_can_join_another_mirror_for_failback() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = MirrorStateStore::open(dir.path()).unwrap();
        st.create_mirror(def("a-to-b")).unwrap();
        st.create_mirror(def("b-to-a")).unwrap();
        st.transition(&tp(0), "a-to-b", PartitionState::Preparing, None)
            .unwrap();
        assert!(matches!(
            st.transition(&tp(0), "b-to-a", PartitionState::Stopping, None),
            Err(MirrorError::TopicNotInMirror { .. })
        ));
        st.transition(&tp(0), "a-to-b", PartitionState::Stopping, None)
            .unwrap();
        st.transition(&tp(0), "a-to-b", PartitionState::Stopped, None)
            .unwrap();
        let e = st
            .transition(&tp(0), "b-to-a", PartitionState::Preparing, None)
            .unwrap();
        assert_eq!(e.mirror, "b-to-a");
    }

    #[test]
    fn compaction_keeps_latest_state_and_shrinks_the_file() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut st = MirrorStateStore::open(dir.path()).unwrap();
            st.create_mirror(def("dr")).unwrap();
            st.transition(&tp(0), "dr", PartitionState::Preparing, None)
                .unwrap();
            st.transition(&tp(0), "dr", PartitionState::Mirroring, None)
                .unwrap();
            for _ in 0..700 {
                st.transition(&tp(0), "dr", PartitionState::Paused, None)
                    .unwrap();
                st.transition(&tp(0), "dr", PartitionState::Mirroring, None)
                    .unwrap();
            }
            assert!(st.records_in_file() < 1100, "{}", st.records_in_file());
        }
        let st = MirrorStateStore::open(dir.path()).unwrap();
        assert_eq!(st.state_of(&tp(0)), PartitionState::Mirroring);
        assert!(st.mirror("dr").is_some());
    }
}
