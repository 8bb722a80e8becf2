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

use std::fs;
use std::path::{Path, PathBuf};

use crate::append_file::AppendFile;

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
    file: AppendFile,
    pending: Vec<u8>,
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
                file,
                pending: Vec::new(),
            },
            payloads,
        ))
    }

    /// Buffers one record; durable only after [`RecordFile::sync`].
    pub fn append(&mut self, payload: &[u8]) -> Result<(), StoreError> {
        self.pending.extend_from_slice(&frame(payload));
        Ok(())
    }

    /// Writes buffered records and fsyncs; a no-op when nothing was appended since the last
    /// successful sync. On error the file holds no part of them and they stay buffered.
    pub fn sync(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.file
            .append_durable(&self.pending)
            .map_err(|e| self.io(e))?;
        self.pending.clear();
        Ok(())
    }

    /// Size of the file in bytes, including buffered records.
    pub fn len_bytes(&self) -> u64 {
        self.file.valid_len() + self.pending.len() as u64
    }

    /// Replaces the whole file with `payloads` atomically (used to compact away superseded
    /// records). Pending appends are discarded: callers pass the complete live state.
    pub fn rewrite(&mut self, payloads: &[Vec<u8>]) -> Result<(), StoreError> {
        let mut out = Vec::new();
        for p in payloads {
            out.extend_from_slice(&frame(p));
        }
        self.file.replace(&out).map_err(|e| self.io(e))?;
        self.pending.clear();
        Ok(())
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: self.file.path().to_path_buf(),
            source,
        }
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
            let faults = f.file.faults();
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
