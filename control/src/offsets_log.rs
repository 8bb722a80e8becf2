//! A small durable append-only record file used by the group and transaction coordinators
//! (`__consumer_offsets-0/records.log`, `__transaction_state-0/records.log`).
//!
//! Layout: a sequence of frames `[u32 len BE][u32 crc32c(payload) BE][payload]`. A torn or
//! corrupt tail (crash mid-write) ends replay and is truncated away on open; everything before
//! it is intact because frames are only ever written after whole frames: a failed write is cut
//! back to the last whole frame ([`AppendFile`]), so no torn frame can hide later ones.
//! `append` buffers; `sync` writes the buffer and fsyncs, and callers answer a client only after
//! `sync` returned. A failed `sync` keeps the buffered frames and writes them again on the next
//! `sync` (the coordinators already applied them in memory, so disk catches up with memory).
//! `rewrite` compacts the file atomically (write a temporary file, fsync, rename, fsync the
//! directory).
//!
//! In a cluster the same interface writes to the Raft log instead ([`RecordFile::replicated`],
//! see `crate::replicated`): `sync` proposes the buffered records as one entry and returns once
//! it committed; `rewrite` replaces the replicated log. A failed replicated `sync` may still
//! commit later (a leader change leaves its fate unknown), so it is not retried: the file is
//! fenced, every later call fails, and the owner reopens its coordinator from the applied copy
//! once this node leads again (Kafka likewise unloads a coordinator whose log write failed).

use std::fs;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::append_file::AppendFile;
use crate::coordinator_batch;
use crate::coordinator_partition::partition_for;
use crate::coordinator_record::{self, Payload};
use crate::quorum::ClusterCommand;
use crate::replicated::{Committer, CoordinatorLog, Loaded, LogOp, PartitionWriter};

/// Errors of the coordinators' durable storage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("record {index} in {path} does not decode: {reason}")]
    BadRecord {
        path: PathBuf,
        index: usize,
        reason: String,
    },
}

/// Frames larger than this are treated as corruption (no coordinator record comes close).
const MAX_FRAME: u32 = 64 << 20;
const HEADER: usize = 8;

/// An open record file and the frames appended since the last successful `sync`.
#[derive(Debug)]
pub struct RecordFile {
    sink: Sink,
    pending: Vec<u8>,
}

enum Sink {
    File(AppendFile),
    Replicated(Replicated),
}

struct Replicated {
    log: CoordinatorLog,
    target: Target,
    /// The records buffered since the last sync (`pending` holds them framed, for `len_bytes`).
    records: Vec<Vec<u8>>,
    /// Framed size of the committed records.
    committed_len: u64,
    /// Set by a failed sync or rewrite: see the module doc.
    fenced: bool,
}

/// Where a replicated log's records go.
enum Target {
    /// The Raft log, fenced by the quorum term the coordinator was loaded in.
    Quorum {
        term: u64,
        committer: Arc<dyn Committer>,
    },
    /// The coordinator topic's partitions this node leads, each fenced by the leader epoch it
    /// was loaded in; a record goes to its key's partition.
    Partitions {
        loaded: Loaded,
        writer: Arc<dyn PartitionWriter>,
    },
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::File(file) => f.debug_tuple("File").field(&file.path()).finish(),
            Sink::Replicated(r) => f
                .debug_struct("Replicated")
                .field("log", &r.log)
                .field("fenced", &r.fenced)
                .finish(),
        }
    }
}

impl RecordFile {
    /// Opens (creating `dir` and the file if needed) and returns every intact payload in order.
    pub fn open(dir: &Path, name: &str) -> Result<(RecordFile, Vec<Vec<u8>>), StoreError> {
        let path = dir.join(name);
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(dir).map_err(io)?;
        let (mut file, data) = AppendFile::open(&path).map_err(io)?;
        let (payloads, valid) = parse_frames(&data);
        if valid < data.len() {
            tracing::warn!(
                path = %path.display(),
                kept = valid,
                dropped = data.len() - valid,
                "truncating torn tail of coordinator record file"
            );
        }
        file.set_valid_len(valid as u64).map_err(io)?;
        Ok((
            RecordFile {
                sink: Sink::File(file),
                pending: Vec::new(),
            },
            payloads,
        ))
    }

    /// The coordinator log `log` on the Raft log for a coordinator loaded in quorum `term`,
    /// holding `existing` (the applied copy the
    /// caller replays, as it replays what [`RecordFile::open`] returns).
    pub fn replicated(
        log: CoordinatorLog,
        term: u64,
        existing: &[Vec<u8>],
        committer: Arc<dyn Committer>,
    ) -> RecordFile {
        RecordFile {
            sink: Sink::Replicated(Replicated {
                log,
                target: Target::Quorum { term, committer },
                records: Vec::new(),
                committed_len: existing.iter().map(|r| (HEADER + r.len()) as u64).sum(),
                fenced: false,
            }),
            pending: Vec::new(),
        }
    }

    /// The coordinator log `log` on the partitions of its topic this node leads (`loaded`),
    /// holding `existing` (read from them, which the caller replays).
    pub fn partitioned(
        log: CoordinatorLog,
        loaded: Loaded,
        existing: &[Vec<u8>],
        writer: Arc<dyn PartitionWriter>,
    ) -> RecordFile {
        RecordFile {
            sink: Sink::Replicated(Replicated {
                log,
                target: Target::Partitions { loaded, writer },
                records: Vec::new(),
                committed_len: existing.iter().map(|r| (HEADER + r.len()) as u64).sum(),
                fenced: false,
            }),
            pending: Vec::new(),
        }
    }

    /// Buffers one record; durable only after [`RecordFile::sync`].
    pub fn append(&mut self, payload: &[u8]) -> Result<(), StoreError> {
        if let Sink::Replicated(r) = &mut self.sink {
            r.records.push(payload.to_vec());
        }
        self.pending.extend_from_slice(&frame(payload));
        Ok(())
    }

    /// Writes buffered records and fsyncs; a no-op when nothing was appended since the last
    /// successful sync. On error the file holds no part of them and they stay buffered.
    /// Replicated: commits them as one entry; an error fences the log (module doc).
    pub fn sync(&mut self) -> Result<(), StoreError> {
        if let Sink::Replicated(r) = &mut self.sink {
            if r.fenced {
                return Err(fenced(r.log));
            }
            if r.records.is_empty() {
                return Ok(());
            }
            let records = std::mem::take(&mut r.records);
            let log = r.log;
            let written = match &r.target {
                Target::Quorum { term, committer } => {
                    let op = LogOp::Append(records);
                    committer.commit(ClusterCommand::Coordinator {
                        log,
                        term: *term,
                        op,
                    })
                }
                Target::Partitions { loaded, writer } => {
                    write_partitions(log, loaded, writer.as_ref(), &records)
                }
            };
            if let Err(e) = written {
                r.fenced = true;
                return Err(StoreError::Io {
                    path: log_path(r.log),
                    source: e,
                });
            }
            r.committed_len += self.pending.len() as u64;
            self.pending.clear();
            return Ok(());
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let Sink::File(file) = &mut self.sink else {
            unreachable!("handled above")
        };
        if let Err(e) = file.append_durable(&self.pending) {
            return Err(self.io(e));
        }
        self.pending.clear();
        Ok(())
    }

    /// Size of the file in bytes, including buffered records.
    pub fn len_bytes(&self) -> u64 {
        let durable = match &self.sink {
            Sink::File(file) => file.valid_len(),
            Sink::Replicated(r) => r.committed_len,
        };
        durable + self.pending.len() as u64
    }

    /// Replaces the whole file with `payloads` atomically (used to compact away superseded
    /// records). Pending appends are discarded: callers pass the complete live state.
    pub fn rewrite(&mut self, payloads: &[Vec<u8>]) -> Result<(), StoreError> {
        if let Sink::Replicated(r) = &mut self.sink {
            if r.fenced {
                return Err(fenced(r.log));
            }
            let Target::Quorum { term, committer } = &r.target else {
                // On partitions the log cleaner compacts by key; every removal was written as
                // a tombstone, and callers synced their appends first.
                r.records.clear();
                self.pending.clear();
                return Ok(());
            };
            let op = LogOp::Replace(payloads.to_vec());
            let cmd = ClusterCommand::Coordinator {
                log: r.log,
                term: *term,
                op,
            };
            if let Err(e) = committer.commit(cmd) {
                r.fenced = true;
                return Err(StoreError::Io {
                    path: log_path(r.log),
                    source: e,
                });
            }
            r.records.clear();
            r.committed_len = payloads.iter().map(|p| (HEADER + p.len()) as u64).sum();
            self.pending.clear();
            return Ok(());
        }
        let mut out = Vec::new();
        for p in payloads {
            out.extend_from_slice(&frame(p));
        }
        let Sink::File(file) = &mut self.sink else {
            unreachable!("handled above")
        };
        if let Err(e) = file.replace(&out) {
            return Err(self.io(e));
        }
        self.pending.clear();
        Ok(())
    }

    /// Whether a replicated sync failed: the owner must reopen from the applied copy.
    pub fn is_fenced(&self) -> bool {
        matches!(&self.sink, Sink::Replicated(r) if r.fenced)
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        let path = match &self.sink {
            Sink::File(file) => file.path().to_path_buf(),
            Sink::Replicated(r) => log_path(r.log),
        };
        StoreError::Io { path, source }
    }
}

/// The partition of `log`'s topic a payload belongs on: its key's (a share-state key names
/// a group, a topic id and a partition: Kafka's `SharePartitionKey` string is hashed).
fn payload_partition(log: CoordinatorLog, payload: &Payload, partitions: i32) -> Option<i32> {
    if log == CoordinatorLog::ShareState {
        let Payload::Record { key, value, .. } = payload else {
            return None;
        };
        let r = crate::share::state_record::StateRecord::decode(key, value.as_deref()).ok()?;
        let k = r.key();
        return Some(crate::share::state_record::state_partition(
            &k.group,
            k.topic,
            k.partition,
            partitions,
        ));
    }
    let id = coordinator_record::payload_key_id(payload)?;
    Some(partition_for(&id, partitions))
}

/// Writes one sync's records to their keys' partitions, one append (of one or more batches)
/// per partition. Producer-id blocks are not written: on partitions they come from the
/// metadata quorum.
fn write_partitions(
    log: CoordinatorLog,
    loaded: &Loaded,
    writer: &dyn PartitionWriter,
    records: &[Vec<u8>],
) -> std::io::Result<()> {
    let mut by_partition: BTreeMap<i32, Vec<Payload>> = BTreeMap::new();
    for r in records {
        let payload = Payload::decode(r).map_err(std::io::Error::other)?;
        let Some(p) = payload_partition(log, &payload, loaded.partitions) else {
            continue;
        };
        by_partition.entry(p).or_default().push(payload);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    for (p, payloads) in by_partition {
        let Some(&epoch) = loaded.epochs.get(&p) else {
            return Err(std::io::Error::other(format!(
                "{} partition {p} is not coordinated here",
                log_path(log).display()
            )));
        };
        let batches =
            coordinator_batch::encode(&payloads, epoch, now).map_err(std::io::Error::other)?;
        let bytes: Vec<u8> = batches.into_iter().flat_map(|b| b.bytes).collect();
        writer.append(log, p, epoch, bytes)?;
    }
    Ok(())
}

/// The name a replicated log's errors carry.
fn log_path(log: CoordinatorLog) -> PathBuf {
    PathBuf::from(match log {
        CoordinatorLog::Offsets => "<quorum>/__consumer_offsets",
        CoordinatorLog::Transactions => "<quorum>/__transaction_state",
        CoordinatorLog::ShareState => "<partitions>/__share_group_state",
    })
}

fn fenced(log: CoordinatorLog) -> StoreError {
    StoreError::Io {
        path: log_path(log),
        source: std::io::Error::other("an earlier write's outcome is unknown; reload required"),
    }
}

pub(crate) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Returns the intact payloads and the byte length of the intact prefix.
pub(crate) fn parse_frames(data: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let mut pos = 0;
    let mut out = Vec::new();
    while data.len() - pos >= HEADER {
        let len = u32::from_be_bytes(data[pos..pos + 4].try_into().expect("4 bytes"));
        let crc = u32::from_be_bytes(data[pos + 4..pos + 8].try_into().expect("4 bytes"));
        if len > MAX_FRAME || data.len() - pos - HEADER < len as usize {
            break;
        }
        let payload = &data[pos + HEADER..pos + HEADER + len as usize];
        if crc32c::crc32c(payload) != crc {
            break;
        }
        out.push(payload.to_vec());
        pos += HEADER + len as usize;
    }
    (out, pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_records_are_replayed_in_order_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut f, existing) = RecordFile::open(dir.path(), "r.log").unwrap();
            assert!(existing.is_empty());
            f.append(b"one").unwrap();
            f.append(b"two").unwrap();
            f.sync().unwrap();
        }
        let (_, got) = RecordFile::open(dir.path(), "r.log").unwrap();
        assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()]);
    }

    #[test]
    fn torn_tail_is_dropped_and_later_appends_survive() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut f, _) = RecordFile::open(dir.path(), "r.log").unwrap();
            f.append(b"intact").unwrap();
            f.sync().unwrap();
        }
        // Simulate a crash mid-frame: half a header plus garbage.
        let path = dir.path().join("r.log");
        let mut raw = fs::read(&path).unwrap();
        raw.extend_from_slice(&[0, 0, 0, 9, 1, 2]);
        fs::write(&path, &raw).unwrap();
        {
            let (mut f, got) = RecordFile::open(dir.path(), "r.log").unwrap();
            assert_eq!(got, vec![b"intact".to_vec()]);
            f.append(b"after").unwrap();
            f.sync().unwrap();
        }
        let (_, got) = RecordFile::open(dir.path(), "r.log").unwrap();
        assert_eq!(got, vec![b"intact".to_vec(), b"after".to_vec()]);
    }

    #[test]
    fn corrupted_payload_stops_replay_at_the_bad_record() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut f, _) = RecordFile::open(dir.path(), "r.log").unwrap();
            f.append(b"good").unwrap();
            f.append(b"flipped").unwrap();
            f.sync().unwrap();
        }
        let path = dir.path().join("r.log");
        let mut raw = fs::read(&path).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0xff;
        fs::write(&path, &raw).unwrap();
        let (_, got) = RecordFile::open(dir.path(), "r.log").unwrap();
        assert_eq!(got, vec![b"good".to_vec()]);
    }

    #[test]
    fn given_short_write_enospc_and_failed_fsync_when_reopened_should_replay_every_synced_record_once(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut synced: Vec<Vec<u8>> = Vec::new();
        {
            let (mut f, _) = RecordFile::open(dir.path(), "r.log").unwrap();
            let Sink::File(file) = &f.sink else {
                unreachable!()
            };
            let faults = file.faults();
            f.append(b"first").unwrap();
            f.sync().unwrap();
            synced.push(b"first".to_vec());
            // Disk full after 5 bytes of the next frame: a short write, then ENOSPC.
            faults.disk_full_after(5);
            f.append(b"second").unwrap();
            assert!(f.sync().is_err());
            assert!(f.sync().is_err());
            // Space is back: the buffered frame goes out whole, after "first", then more.
            faults.disk_freed();
            f.append(b"third").unwrap();
            f.sync().unwrap();
            synced.push(b"second".to_vec());
            synced.push(b"third".to_vec());
            // A failed fsync is reported and retried too, never duplicated.
            faults.fail_syncs(1);
            f.append(b"fourth").unwrap();
            assert!(f.sync().is_err());
            f.sync().unwrap();
            synced.push(b"fourth".to_vec());
            // Crash with a frame still failing: it is simply not there on reopen.
            faults.disk_full_after(3);
            f.append(b"never-synced").unwrap();
            assert!(f.sync().is_err());
        }
        let (mut f, got) = RecordFile::open(dir.path(), "r.log").unwrap();
        assert_eq!(got, synced);
        f.append(b"fifth").unwrap();
        f.sync().unwrap();
        synced.push(b"fifth".to_vec());
        drop(f);
        let (_, got) = RecordFile::open(dir.path(), "r.log").unwrap();
        assert_eq!(got, synced);
    }

    #[test]
    fn rewrite_replaces_content_and_accepts_new_appends() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut f, _) = RecordFile::open(dir.path(), "r.log").unwrap();
            for i in 0..10u8 {
                f.append(&[i]).unwrap();
            }
            f.sync().unwrap();
            f.rewrite(&[vec![42]]).unwrap();
            f.append(&[43]).unwrap();
            f.sync().unwrap();
        }
        let (_, got) = RecordFile::open(dir.path(), "r.log").unwrap();
        assert_eq!(got, vec![vec![42], vec![43]]);
    }
}
