//! kmirror-log: one partition's crash-safe, segmented log of Kafka RecordBatch v2 bytes,
//! stored and served exactly as they arrived. The only re-encoding is Kafka's, on the leader
//! (produce) path: into the topic's compression.type when it names another codec, and the
//! LogAppendTime stamp; mirrored batches are never re-encoded.
//!
//! Owns: segment files and their indexes, append (leader and mirror paths), zero-copy reads,
//! truncation, delete-records, retention, compaction (the `cleaner` module: Kafka's log
//! cleaner semantics), the leader-epoch cache, producer/transaction state,
//! the aborted-transaction index and the LSO, checkpoints and crash recovery. Also, because
//! it is mmap code and `unsafe` lives here only: [`ReservingAllocator`], the process allocator
//! the kmirror binary installs so a decoder sizing a vector from a hostile wire count (one in a
//! dependency) reserves address space instead of aborting the broker.
//! Must not depend on: any async runtime (glommio stays in engine/net), the network layer, or
//! other kmirror crates except `kmirror-types`. `unsafe` lives only in the `mmap` module.
//!
//! # On-disk layout (one directory per partition)
//! ```text
//! <dir>/<base offset, 20 digits>.log        batches back to back, as received (leader path:
//!                                           baseOffset and partitionLeaderEpoch stamped;
//!                                           re-compressed / LogAppendTime-stamped as the
//!                                           topic says)
//! <dir>/<base offset>.index                 sparse offset index: (u32 offset-base, u32 position)
//!                                           big endian, one entry per index.interval.bytes
//! <dir>/<base offset>.timeindex             (i64 max timestamp before, u32 offset-base) entries
//! <dir>/leader-epoch-checkpoint             Kafka format: "0\n<n>\n<epoch> <start offset>\n"...
//! <dir>/log.checkpoint                      "kmirror-log-checkpoint 1", recovery_point, HW,
//!                                           log_start (one "<name> <value>" line each)
//! <dir>/cleaner-offset-checkpoint           "kmirror-cleaner-checkpoint 1", first_dirty
//! <dir>/<base offset>.log.cleaned           a cleaner's output before its swap (deleted on
//!                                           open)
//! <dir>/<base offset>.log.swap              a complete cleaner output replacing the segments
//!                                           from <base offset> to its end (finished on open)
//! ```
//! Segment files are not preallocated; the active one is mapped with room to grow and written
//! with write(2), so the page cache makes appends visible to the mapping. Checkpoint files are
//! replaced atomically (temp file, fsync, rename, fsync directory). Index files are rewritten
//! on roll/flush and checked against the data on open (rebuilt if missing or different).
//!
//! # Invariants worth naming
//! - log start <= HW <= log end; LSO = min(HW, first offset of the earliest open transaction).
//! - Every byte below a segment's logical size is a batch that passed validation (CRC32C
//!   included) when it entered, or was written by the cleaner; bytes handed out by `read` are
//!   never rewritten in place (truncation copies the kept prefix into a fresh file, the
//!   cleaner renames a fresh file over a sealed segment), so zero-copy slices stay valid.
//! - Batches are re-encoded only by the cleaner, which keeps each batch's offsets, producer
//!   fields and epoch (records go, offsets do not move) and never touches the active segment
//!   or anything at or above the LSO.
//! - An append that returns an error leaves the log as it was (bytes, log end, epochs): a
//!   partial write is cut back, and so is a whole write whose fsync failed. Index, epoch and
//!   checkpoint files are derived data: failing to rewrite them (ENOSPC) after the data is
//!   written, or while opening, is logged and retried, never an append or open error.
//! - Leader-path batches passed Kafka's LogValidator record walk
//!   ([`batch::validate_client_records`], compressed ones decompressed under a cap): their
//!   recordsCount is the number of records present. Mirror-path batches are stored verbatim and
//!   only their header is checked against their length ([`batch::check_count_fits_bytes`]).
//!   Either way no reader sizes anything from a stored count or length.
//! - Offsets strictly increase across batches and segments; gaps are allowed (mirror path,
//!   compaction at the source).
//! - Recovery re-validates (CRC included) from the recovery point and keeps exactly the valid
//!   prefix; a batch failing its CRC is never served (a valid batch whose CRC value is 0 is just
//!   a batch). Segments wholly below the recovery point were fsynced and get frame checks only.
//! - Open does a header scan of every segment (producer state, txns, indexes); there is no
//!   producer-state snapshot yet, so open time grows with the number of batches.
//! - Producer state, open transactions and the aborted-transaction index are derived from the
//!   log (rebuilt by a header scan on open and after truncation).
//! - Control type [`batch::CONTROL_TYPE_MIRROR_PID_RESET`] (0x4B4D) is kmirror's
//!   MIRROR_PID_RESET marker: applying it expires all producer state and open transactions.

pub mod batch;
mod checkpoint;
mod cleaner;
mod config;
mod epoch;
mod error;
mod log;
mod mmap;
pub use mmap::ReservingAllocator;
mod producer;
mod segment;

use bytes::Bytes;
pub use cleaner::{CleanJob, CleanStats, Cleaned};
pub use config::{CompactionConfig, FlushPolicy, LogConfig, TopicCodec};
pub use error::LogError;
pub use kmirror_types::{LeaderEpoch, Offset, ProducerId};
pub use log::Log;

/// Kinds of control batch the log writes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    Commit,
    Abort,
    /// kmirror's MIRROR_PID_RESET (control type [`batch::CONTROL_TYPE_MIRROR_PID_RESET`]).
    MirrorPidReset,
}

/// Outcome of an append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    /// Assigned (leader) or kept (mirror) offsets.
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp: i64,
    /// -1 for CreateTime (the only type the log stamps).
    pub log_append_time: i64,
    /// Idempotent retry of one of the producer's last 5 batches: nothing was appended and the
    /// offsets are the originally assigned ones (Kafka answers NONE).
    pub duplicate: bool,
}

/// Outcome of a read.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole batches, a zero-copy slice of one segment's mapping; may be empty.
    pub records: Bytes,
    /// Base offset of the first batch in `records` (or the requested offset if empty).
    pub first_offset: Offset,
    /// Where `records` lie in their segment file, for a sendfile(2) to a socket (`None` when
    /// empty).
    pub file: Option<FileRegion>,
}

/// The file bytes behind a read: `records.len()` bytes from `position` of `file`. They are
/// the same bytes as the read's mapping slice and, by the same rule (bytes below a segment's
/// logical size are never rewritten in place), stay so while the region is held.
#[derive(Debug, Clone)]
pub struct FileRegion {
    pub file: std::sync::Arc<std::fs::File>,
    pub position: u64,
}

impl FileRegion {
    /// Sends up to `len` bytes from `skip` bytes into the region to the stream socket
    /// `socket` without blocking (sendfile(2)): `Ok(n)` bytes went, `WouldBlock` when the
    /// socket buffer is full. The caller owns `socket` and keeps it open during the call.
    pub fn send_nonblocking(
        &self,
        socket: std::os::fd::RawFd,
        skip: usize,
        len: usize,
    ) -> std::io::Result<usize> {
        mmap::sendfile_nonblocking(socket, &self.file, self.position + skip as u64, len)
    }
}

/// An aborted transaction overlapping a fetch range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
}

/// Snapshot of one producer's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_epoch: i16,
    /// Last sequence of the newest batch (-1 if none is remembered).
    pub last_sequence: i32,
    pub last_offset: Offset,
    pub coordinator_epoch: i32,
    pub current_txn_first_offset: Option<Offset>,
    pub last_timestamp: i64,
}
