//! The partition log: segments, offsets, checkpoints, recovery and the append/read paths.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use kmirror_types::{LeaderEpoch, Offset, ProducerId};

use crate::batch::{
    self, BatchHeader, BatchIter, Compression, CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT,
    CONTROL_TYPE_MIRROR_PID_RESET, HEADER_SIZE, PARTITION_LEADER_EPOCH_POS,
};
use crate::checkpoint::{sync_dir, Checkpoint};
use crate::cleaner::{CleanJob, CleanStats, Cleaned, SegmentInput};
use crate::epoch::EpochCache;
use crate::producer::{Producer, ProducerState};
use crate::segment::{
    file_name, parse_base, Segment, Tracked, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX,
};
use crate::{
    AbortedTxn, AppendInfo, ControlKind, FlushPolicy, LogConfig, LogError, ProducerEntry,
    ReadResult,
};

/// Relative offsets in a segment must fit an i32 (Kafka's index format has the same limit).
const MAX_RELATIVE_OFFSET: i64 = i32::MAX as i64;

/// A token no other open log or earlier state of this one has: a cleaning job made against
/// one state of a log is installed only into that same state (not after a truncation, nor
/// into the same partition closed and reopened, e.g. moved between cores and back).
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The header bytes the log stamps into a batch it assigns offsets to: base offset, batch
/// length and partition leader epoch (all before the CRC's range, so the CRC stays valid).
const OFFSET_AND_EPOCH: usize = PARTITION_LEADER_EPOCH_POS + 4;

/// Writes base offset `first` and partition leader epoch `epoch` into a batch's first bytes
/// (at least [`OFFSET_AND_EPOCH`] of them).
fn stamp_offset_and_epoch(pre: &mut [u8], first: i64, epoch: LeaderEpoch) {
    pre[..8].copy_from_slice(&first.to_be_bytes());
    pre[PARTITION_LEADER_EPOCH_POS..OFFSET_AND_EPOCH].copy_from_slice(&epoch.0.to_be_bytes());
}

/// One partition's log. Single-threaded: every mutation takes `&mut self`.
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    pub(crate) segments: BTreeMap<i64, Segment>,
    leo: i64,
    log_start: i64,
    hw: i64,
    recovery_point: i64,
    epochs: EpochCache,
    producers: ProducerState,
    unflushed_messages: u64,
    last_flush_ms: i64,
    /// Cleaner checkpoint: offsets below were cleaned at least once.
    pub(crate) first_dirty: i64,
    /// Bumped by truncations: a cleaning job made before one is not installed.
    generation: u64,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.dir)
            .field("log_start", &self.log_start)
            .field("log_end", &self.leo)
            .field("high_watermark", &self.hw)
            .field("segments", &self.segments.len())
            .finish()
    }
}

/// Metadata of a batch being appended, taken from the caller's bytes.
struct Pending {
    start: usize,
    end: usize,
    first: i64,
    last: i64,
    max_ts: i64,
    /// How the batch is written: as produced, or rewritten for the topic's configs.
    form: Form,
}

/// A coordinator batch being appended: its bytes in the caller's input and, for a control
/// batch, its marker (type, coordinator epoch).
struct CoordinatorBatch {
    start: usize,
    end: usize,
    control: Option<(i16, i32)>,
}

/// A produced batch's stored form (Kafka's LogValidator: in place or re-built).
enum Form {
    /// As produced; only base offset and leader epoch are stamped.
    AsProduced,
    /// message.timestamp.type=LogAppendTime, codec unchanged: a new header prefix (with its
    /// CRC), the rest written from the request's bytes.
    Stamped([u8; batch::STAMPED_PREFIX]),
    /// Re-compressed into the topic's compression.type (owned; fresh CRC).
    Rebuilt(Vec<u8>),
}

impl Log {
    fn active_cap(&self) -> usize {
        let seg = self.config.segment_bytes.min(i32::MAX as u64) as usize;
        seg.saturating_add(self.config.max_message_bytes as usize)
    }

    fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Opens the log in `dir`, creating it if needed, and recovers from a crash: batches from
    /// the recovery point on are re-validated (CRC included); the first invalid batch and
    /// everything after it (including later segments) are removed; indexes, the epoch cache
    /// and producer state are rebuilt or checked against the data.
    pub fn open(dir: &Path, config: LogConfig) -> Result<Log, LogError> {
        fs::create_dir_all(dir)?;
        // A group swap interrupted by a crash is finished first (its file is complete).
        for entry in fs::read_dir(dir)? {
            let name = entry?.file_name();
            if let Some(b) = name.to_str().and_then(|n| {
                n.strip_suffix(".swap")
                    .and_then(|n| parse_base(n, LOG_SUFFIX))
            }) {
                crate::cleaner::complete_swap(dir, b)?;
            }
        }
        let mut bases = Vec::new();
        let mut index_files = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".tmp")
                || name.ends_with(".truncating")
                || name.ends_with(crate::cleaner::CLEANED_SUFFIX)
            {
                fs::remove_file(entry.path())?;
            } else if let Some(b) = parse_base(name, LOG_SUFFIX) {
                bases.push(b);
            } else if let Some(b) =
                parse_base(name, INDEX_SUFFIX).or_else(|| parse_base(name, TIME_INDEX_SUFFIX))
            {
                index_files.push((b, entry.path()));
            }
        }
        bases.sort_unstable();
        for (b, path) in index_files {
            if bases.binary_search(&b).is_err() {
                fs::remove_file(path)?;
            }
        }
        let cp = Checkpoint::read(dir)?;
        let interval = config.index_interval_bytes;
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            segments: BTreeMap::new(),
            leo: 0,
            log_start: 0,
            hw: 0,
            recovery_point: 0,
            epochs: EpochCache::default(),
            producers: ProducerState::default(),
            unflushed_messages: 0,
            last_flush_ms: wall_ms(),
            first_dirty: crate::cleaner::read_checkpoint(dir).unwrap_or(0),
            generation: next_generation(),
        };
        if bases.is_empty() {
            let start = cp.map_or(0, |c| c.log_start.max(0));
            let seg = Segment::create(dir, start, log.active_cap())?;
            log.segments.insert(start, seg);
            log.leo = start;
            log.log_start = start;
            log.hw = start;
            log.recovery_point = start;
            log.write_open_metadata();
            return Ok(log);
        }
        // Without a checkpoint nothing is known to be durable: validate everything.
        let recovery_point = cp.map_or(i64::MIN, |c| c.recovery_point);
        let persisted_epochs = EpochCache::read(dir)?;
        let mut rebuilt_epochs = EpochCache::default();
        let mut replay_epochs: Vec<(i32, i64)> = Vec::new();
        let mut cut = false;
        let mut expected_min = i64::MIN;
        for (i, &base) in bases.iter().enumerate() {
            if cut || base < expected_min {
                // Past the first invalid batch: unflushed leftovers, never served.
                tracing::warn!(dir = %dir.display(), base, "deleting segment after recovery cut");
                Self::delete_segment_files(dir, base)?;
                cut = true;
                continue;
            }
            let validate = bases.get(i + 1).is_none_or(|&nb| nb > recovery_point);
            let (mut seg, len) = Segment::open_existing(dir, base)?;
            let map = seg.mapped();
            let mut pos = 0;
            let mut min_offset = base.max(expected_min);
            while pos < len {
                let rest = &map[pos..len];
                let checked = if validate {
                    batch::validate(rest)
                } else {
                    batch::check_frame(rest)
                };
                let Ok((h, total)) = checked else { break };
                if !batch::offsets_in_range(&h)
                    || h.base_offset() < min_offset
                    || h.last_offset() - base > MAX_RELATIVE_OFFSET
                    || h.last_offset_delta() < 0
                {
                    break;
                }
                seg.track(&Tracked::of(&h), pos, interval);
                rebuilt_epochs.assign(h.partition_leader_epoch(), h.base_offset());
                if h.base_offset() >= recovery_point {
                    replay_epochs.push((h.partition_leader_epoch(), h.base_offset()));
                }
                min_offset = h.next_offset();
                pos += total;
            }
            if pos < len {
                tracing::warn!(
                    dir = %dir.display(), base, valid = pos, len,
                    "truncating segment at first invalid batch"
                );
                seg.truncate_file(pos)?;
                cut = true;
            }
            expected_min = seg.next_offset;
            // The in-memory indexes are authoritative; a rewrite that fails (ENOSPC) must not
            // keep the data from being served: the files are checked again on the next open.
            match seg.verify_indexes() {
                Ok(true) => tracing::info!(dir = %dir.display(), base, "rebuilt segment indexes"),
                Ok(false) => {}
                Err(e) => tracing::warn!(dir = %dir.display(), base, error = %e,
                    "could not rewrite segment indexes"),
            }
            log.segments.insert(base, seg);
        }
        let last = log.active();
        log.leo = last.next_offset;
        let first_base = *log.segments.keys().next().expect("non-empty");
        let cp = cp.unwrap_or(Checkpoint {
            recovery_point: first_base,
            high_watermark: 0,
            log_start: first_base,
        });
        log.log_start = cp.log_start.max(first_base).min(log.leo);
        log.hw = cp.high_watermark.clamp(log.log_start, log.leo);
        log.epochs = match persisted_epochs {
            Some(mut e) => {
                e.truncate_from_end(log.leo);
                for (ep, off) in replay_epochs {
                    e.assign(ep, off);
                }
                e
            }
            None => rebuilt_epochs,
        };
        log.epochs.truncate_from_start(log.log_start);
        log.rebuild_producers();
        let n = log.segments.len();
        let cap = log.active_cap();
        for (i, seg) in log.segments.values_mut().enumerate() {
            if i + 1 == n {
                seg.ensure_capacity(cap)?;
            } else {
                seg.seal()?;
            }
        }
        if cut {
            sync_dir(dir)?;
        }
        log.recovery_point = log.leo;
        log.write_open_metadata();
        Ok(log)
    }

    /// The epoch file, then the checkpoint, after open. Both are derived from the data, so a
    /// failure (a full disk on restart) is logged and the log still opens and serves: the old
    /// checkpoint stays, and as the epoch file is written first, a checkpoint never claims
    /// more than the epoch file on disk covers (the next open replays epochs from it).
    fn write_open_metadata(&self) {
        if let Err(e) = self
            .epochs
            .write(&self.dir)
            .and_then(|()| self.write_checkpoint())
        {
            tracing::warn!(dir = %self.dir.display(), error = %e,
                "could not write the epoch file or checkpoint on open");
        }
    }

    fn delete_segment_files(dir: &Path, base: i64) -> io::Result<()> {
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            match fs::remove_file(dir.join(file_name(base, suffix))) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn write_checkpoint(&self) -> io::Result<()> {
        Checkpoint {
            recovery_point: self.recovery_point,
            high_watermark: self.hw,
            log_start: self.log_start,
        }
        .write(&self.dir)
    }

    /// Replays every batch's producer fields (headers only; control batches parse their one
    /// record).
    fn rebuild_producers(&mut self) {
        let mut state = ProducerState::default();
        for seg in self.segments.values() {
            for (h, s, e) in BatchIter::headers(seg.data()).map_while(Result::ok) {
                let control = if h.is_control() {
                    batch::control_record(&seg.data()[s..e])
                } else {
                    None
                };
                state.apply(&h, h.base_offset(), h.last_offset(), control);
            }
        }
        state.on_log_start(self.log_start);
        self.producers = state;
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    /// Rolls first if the append would not fit the active segment (size, time, or relative
    /// offset range).
    fn maybe_roll(&mut self, bytes: usize, first: i64, last: i64, max_ts: i64) -> io::Result<()> {
        let seg_bytes = self.config.segment_bytes;
        let seg_ms = self.config.segment_ms;
        let active = self.active();
        if active.is_empty() {
            if active.base > first || last - active.base > MAX_RELATIVE_OFFSET {
                // An empty segment named below/above this append: rename it by recreating.
                // Create the new one first: if that fails (ENOSPC) the log keeps an active
                // segment instead of panicking on the next append or read.
                let base = active.base;
                let cap = self.active_cap();
                let seg = Segment::create(&self.dir, first, cap)?;
                let old = self.segments.remove(&base).expect("active");
                self.segments.insert(first, seg);
                old.delete()?;
            }
            return Ok(());
        }
        let too_big = active.size as u64 + bytes as u64 > seg_bytes;
        let too_old = match (seg_ms, active.first_batch_ts) {
            (Some(ms), Some(t)) => max_ts.saturating_sub(t) > ms as i64,
            _ => false,
        };
        let overflow = last - active.base > MAX_RELATIVE_OFFSET;
        if too_big || too_old || overflow {
            let base = if overflow { first } else { self.leo };
            self.roll_at(base)?;
        }
        Ok(())
    }

    fn roll_at(&mut self, base: i64) -> io::Result<()> {
        let cap = self.active_cap();
        let active = self.active_mut();
        active.sync()?;
        active.write_indexes()?;
        active.seal()?;
        let seg = Segment::create(&self.dir, base, cap)?;
        self.segments.insert(base, seg);
        // Everything before the new segment is on disk now.
        self.recovery_point = self.leo;
        self.write_checkpoint()
    }

    /// Writes whole batches at the end of the active segment, after epoch bookkeeping.
    fn write_batches(
        &mut self,
        bufs: &[IoSlice<'_>],
        epoch_starts: &[(i32, i64)],
        tracked: &[Tracked],
    ) -> Result<(), LogError> {
        let (Some(first), Some(end)) = (tracked.first(), tracked.last()) else {
            return Ok(());
        };
        let (first, last) = (first.base, end.next - 1);
        let total = tracked.iter().map(|t| t.size).sum();
        let max_ts = tracked.iter().map(|t| t.max_ts).max().unwrap_or(-1);
        self.maybe_roll(total, first, last, max_ts)?;
        // The epoch checkpoint is written before the data (like Kafka); recovery drops
        // entries past the log end.
        let mut changed = false;
        for &(e, o) in epoch_starts {
            changed |= self.epochs.assign(e, o);
        }
        let interval = self.config.index_interval_bytes;
        let res = if changed {
            self.epochs.write(&self.dir)
        } else {
            Ok(())
        }
        .and_then(|()| self.active_mut().append(bufs, total, tracked, interval));
        if let Err(e) = res {
            // ENOSPC and friends: the data write was cut back, so the epoch entries of this
            // append would point past the log end; drop them (the file too, best effort).
            self.drop_epochs_past_end();
            return Err(e.into());
        }
        self.leo = last + 1;
        Ok(())
    }

    /// Forgets leader-epoch entries that start at or past the log end (after a failed write).
    fn drop_epochs_past_end(&mut self) {
        if self.epochs.truncate_from_end(self.leo) {
            let _ = self.epochs.write(&self.dir);
        }
    }

    /// Undoes the append whose `bytes` were just written at the end of the active segment and
    /// tracked (the log end was `prev_leo` before). Safe to cut in place: the append has not
    /// returned yet and reads run on the same thread, so no byte of it was handed out.
    fn undo_append(&mut self, prev_leo: i64, bytes: usize) {
        let interval = self.config.index_interval_bytes;
        let active = self.active_mut();
        let keep = active.size.saturating_sub(bytes);
        if let Err(e) = active.cut_unserved_tail(keep, interval) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cutting back a failed append");
        }
        self.leo = prev_leo;
        self.drop_epochs_past_end();
    }

    /// The flush policy's work after an append's data is written. Only a failed fsync of the
    /// data fails the append (the caller then cuts it back, so an error never leaves records
    /// that are served later). Index and checkpoint files are rebuilt from the data on open:
    /// failing to write them (ENOSPC on a full disk) is logged, not an append error, which
    /// would report stored and served records as failed and make a retry duplicate them.
    fn after_append(&mut self, messages: u64, now_ms: i64) -> Result<(), LogError> {
        self.unflushed_messages += messages;
        match self.config.flush {
            FlushPolicy::EveryAppend => {
                self.active_mut().sync()?;
                self.unflushed_messages = 0;
            }
            FlushPolicy::Interval { messages, ms } => {
                if (messages > 0 && self.unflushed_messages >= messages)
                    || (ms > 0 && now_ms.saturating_sub(self.last_flush_ms) >= ms as i64)
                {
                    self.sync_data()?;
                    self.last_flush_ms = now_ms;
                    if let Err(e) = self.write_flushed_metadata() {
                        tracing::warn!(dir = %self.dir.display(), error = %e,
                            "index/checkpoint write failed after flush; retried on the next");
                    }
                }
            }
            FlushPolicy::Os => {}
        }
        Ok(())
    }

    /// [`Self::write_batches`] then [`Self::after_append`] for an append that assigned its
    /// offsets from the log end. If the flush fails the append is cut back: its caller reports
    /// an error (and retries, for a marker or coordinator write), so the batches must not stay
    /// in the log to be served.
    fn write_and_flush(
        &mut self,
        bufs: &[IoSlice<'_>],
        epoch_starts: &[(i32, i64)],
        tracked: &[Tracked],
        messages: u64,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let prev_leo = self.leo;
        self.write_batches(bufs, epoch_starts, tracked)?;
        if let Err(e) = self.after_append(messages, now_ms) {
            self.undo_append(prev_leo, tracked.iter().map(|t| t.size).sum());
            return Err(e);
        }
        Ok(())
    }

    /// One or more concatenated batches from a producer. All are validated (frame, CRC,
    /// counts, size, producer sequence/epoch/transaction state) before anything is written;
    /// then each gets base offset = log end offset and partition leader epoch `epoch` stamped
    /// in its header (both outside the CRC's range, so the CRC stays valid). As Kafka's
    /// LogValidator, a batch is re-compressed when [`LogConfig::compression`] names a codec
    /// other than its own, and stamped with `now_ms` (timestamp type, maxTimestamp, new CRC)
    /// when [`LogConfig::log_append_time`]; otherwise its bytes are written as they came.
    pub fn append_leader(
        &mut self,
        batches: Bytes,
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        if batches.is_empty() {
            return Err(LogError::InvalidRecord("empty records".into()));
        }
        let max = self.config.max_message_bytes;
        let decompressed_limit = batch::decompressed_limit(max);
        let mut pending = Vec::new();
        let mut next = self.leo;
        let mut max_ts = -1i64;
        let mut messages = 0u64;
        let mut staged: Vec<(i64, Producer)> = Vec::new();
        let mut it = BatchIter::validating(&batches);
        for r in it.by_ref() {
            let (h, start, end) = r.map_err(|e| LogError::corrupt(Some(next), e))?;
            if end - start > max as usize {
                return Err(LogError::RecordTooLarge {
                    size: end - start,
                    max,
                });
            }
            batch::check_client_counts(&h).map_err(|e| LogError::InvalidRecord(e.to_string()))?;
            // Kafka's LogValidator: every record is walked (decompressed under a cap) and must
            // agree with the header, so no count or length a producer sent is trusted later.
            let (lo, hi) = (
                now_ms.saturating_sub(self.config.timestamp_before_max_ms),
                now_ms.saturating_add(self.config.timestamp_after_max_ms),
            );
            let lat = self.config.log_append_time;
            let create_time = !lat && !h.is_log_append_time();
            let base_ts = h.base_timestamp();
            let mut bad_ts: Vec<(i32, String)> = Vec::new();
            batch::validate_client_records_with(
                &batches[start..end],
                decompressed_limit,
                &mut |index, delta| {
                    let ts = base_ts.saturating_add(delta);
                    if create_time && (ts < lo || ts > hi) {
                        bad_ts.push((
                            index as i32,
                            format!(
                                "Timestamp {ts} of message with offset {index} is out of range. The timestamp should be within [{lo}, {hi}]"
                            ),
                        ));
                    }
                },
            )
            .map_err(|e| record_error(next, e))?;
            // Kafka's LogValidator checks each record's key (compacted topics: the cleaner
            // could never keep a keyless record) before its timestamp, and reports every
            // record at fault (KIP-467), so a client fails only those records.
            let keyless = match self.config.compaction {
                Some(_) => {
                    crate::cleaner::keyless_indexes(&batches[start..end], decompressed_limit)
                        .map_err(|e| record_error(next, e))?
                }
                None => Vec::new(),
            };
            if !keyless.is_empty() {
                bad_ts.retain(|(i, _)| !keyless.contains(i));
                return Err(LogError::KeylessRecords {
                    keyless,
                    bad_timestamps: bad_ts,
                });
            }
            if !bad_ts.is_empty() {
                return Err(LogError::InvalidTimestamp { records: bad_ts });
            }
            if h.is_control() {
                return Err(LogError::InvalidRecord(
                    "producers may not write control batches".into(),
                ));
            }
            if h.is_transactional() && !h.has_producer_id() {
                return Err(LogError::InvalidRecord(
                    "transactional batch without producer id".into(),
                ));
            }
            let first = next;
            let last = next + h.last_offset_delta() as i64;
            if h.has_producer_id() {
                let pid = h.producer_id();
                let idx = match staged.iter().position(|(p, _)| *p == pid) {
                    Some(i) => i,
                    None => {
                        let p = self.producers.get(pid).cloned().unwrap_or_default();
                        staged.push((pid, p));
                        staged.len() - 1
                    }
                };
                let p = &mut staged[idx].1;
                if let Some(dup) = p.check_client(pid, &h)? {
                    // A retry is answered with its original offsets only when it is the whole
                    // request: otherwise the other batches would be dropped while the client is
                    // told it succeeded (found by fuzzing; Kafka allows one batch per request).
                    if !pending.is_empty() || end < batches.len() {
                        return Err(LogError::InvalidRecord(
                            "a duplicate batch must be the only batch of its request".into(),
                        ));
                    }
                    return Ok(AppendInfo {
                        first_offset: Offset(dup.first_offset),
                        last_offset: Offset(dup.last_offset),
                        max_timestamp: dup.max_timestamp,
                        // The stored batch's append time, as Kafka answers a duplicate.
                        log_append_time: if lat { dup.max_timestamp } else { -1 },
                        duplicate: true,
                    });
                }
                p.apply_data(&h, first, last);
            }
            // Kafka's LogValidator: a topic codec other than `producer` that differs from the
            // batch's re-compresses it; LogAppendTime stamps it. Matching codecs on a
            // CreateTime topic (the common case) write the request's bytes as they are.
            let recompress = self
                .config
                .compression
                .filter(|c| c.codec != h.compression());
            let append_time = lat.then_some(now_ms);
            let form = match (recompress, append_time) {
                (Some(c), t) => {
                    let b = batch::recompress_client_batch(
                        &batches[start..end],
                        c.codec,
                        c.level,
                        t,
                        decompressed_limit,
                    )
                    .map_err(|e| record_error(next, e))?;
                    if b.len() > max as usize {
                        return Err(LogError::RecordTooLarge { size: b.len(), max });
                    }
                    Form::Rebuilt(b)
                }
                (None, Some(t)) => {
                    Form::Stamped(batch::stamp_log_append_time(&batches[start..end], t))
                }
                (None, None) => Form::AsProduced,
            };
            let batch_max_ts = append_time.unwrap_or(h.max_timestamp());
            max_ts = max_ts.max(batch_max_ts);
            messages += h.records_count() as u64;
            pending.push(Pending {
                start,
                end,
                first,
                last,
                max_ts: batch_max_ts,
                form,
            });
            next = last + 1;
        }
        // Base offset and leader epoch go into each batch's first bytes (outside the CRC).
        let stamp = |pre: &mut [u8], first: i64| stamp_offset_and_epoch(pre, first, epoch);
        let mut prefixes: Vec<[u8; batch::STAMPED_PREFIX]> = Vec::with_capacity(pending.len());
        for p in pending.iter_mut() {
            let mut pre = [0u8; batch::STAMPED_PREFIX];
            match &mut p.form {
                Form::AsProduced => {
                    pre.copy_from_slice(&batches[p.start..p.start + batch::STAMPED_PREFIX])
                }
                Form::Stamped(s) => pre = *s,
                Form::Rebuilt(b) => stamp(b, p.first),
            }
            stamp(&mut pre, p.first);
            prefixes.push(pre);
        }
        let tracked: Vec<Tracked> = pending
            .iter()
            .map(|p| Tracked {
                base: p.first,
                next: p.last + 1,
                max_ts: p.max_ts,
                size: match &p.form {
                    Form::Rebuilt(b) => b.len(),
                    _ => p.end - p.start,
                },
            })
            .collect();
        let mut bufs = Vec::with_capacity(pending.len() * 2);
        for (p, pre) in pending.iter().zip(&prefixes) {
            match &p.form {
                Form::Rebuilt(b) => bufs.push(IoSlice::new(b)),
                _ => {
                    bufs.push(IoSlice::new(pre));
                    bufs.push(IoSlice::new(&batches[p.start + pre.len()..p.end]));
                }
            }
        }
        let first = self.leo;
        let last = next - 1;
        self.write_and_flush(&bufs, &[(epoch.0, first)], &tracked, messages, now_ms)?;
        let mut hdr = Vec::new();
        for (p, pre) in pending.iter().zip(&prefixes) {
            // The stored header (a retry is answered with the stored max timestamp).
            let stored = match &p.form {
                Form::Rebuilt(b) => &b[..HEADER_SIZE],
                Form::Stamped(_) => {
                    hdr.clear();
                    hdr.extend_from_slice(pre);
                    hdr.extend_from_slice(&batches[p.start + pre.len()..p.start + HEADER_SIZE]);
                    &hdr[..]
                }
                Form::AsProduced => &batches[p.start..p.end],
            };
            let h = BatchHeader::parse(stored).expect("validated");
            self.producers.apply(&h, p.first, p.last, None);
        }
        Ok(AppendInfo {
            first_offset: Offset(first),
            last_offset: Offset(last),
            max_timestamp: max_ts,
            log_append_time: if self.config.log_append_time {
                now_ms
            } else {
                -1
            },
            duplicate: false,
        })
    }

    /// Appends batches from a source cluster unchanged at their own offsets. The first base
    /// offset must be >= the log end offset and offsets must increase; gaps are allowed.
    /// Per batch only the frame, CRC and a few header fields are looked at. Frames, counts
    /// and offsets are checked before any write; the CRC32C is checked in the same pass as
    /// the write (chunk by chunk, so data is read from memory once) and a mismatch cuts the
    /// file back: the append is all-or-nothing and no byte of it is ever readable.
    pub fn append_mirror(&mut self, batches: Bytes) -> Result<AppendInfo, LogError> {
        if batches.is_empty() {
            return Err(LogError::InvalidRecord("empty records".into()));
        }
        // Pass 1, headers only: frame (length, magic), counts, offset order.
        let mut expected = self.leo;
        let mut max_ts = -1i64;
        let mut messages = 0u64;
        let mut epoch_starts: Vec<(i32, i64)> = Vec::new();
        let mut tracked = Vec::new();
        let mut crcs = Vec::new();
        for r in BatchIter::headers(&batches) {
            let (h, s, e) = r.map_err(|e| LogError::corrupt(Some(expected), e))?;
            let (lod, count) = (h.last_offset_delta(), h.records_count());
            if lod < 0 || count < 0 || (count > 0 && lod < count - 1) {
                return Err(LogError::corrupt(
                    Some(h.base_offset()),
                    batch::BatchError::BadCount {
                        last_offset_delta: lod,
                        records_count: count,
                    },
                ));
            }
            // Stored verbatim, never decoded: the header must at least fit its bytes, and its
            // offsets must be representable.
            batch::check_count_fits_bytes(&h)
                .map_err(|e| LogError::corrupt(Some(h.base_offset()), e))?;
            if !batch::offsets_in_range(&h) {
                return Err(LogError::corrupt(
                    Some(expected),
                    format!(
                        "batch offsets {} + {} out of range",
                        h.base_offset(),
                        h.last_offset_delta()
                    ),
                ));
            }
            if h.base_offset() < expected {
                return Err(LogError::NonMonotonicMirrorOffset {
                    base: Offset(h.base_offset()),
                    log_end: Offset(self.leo),
                });
            }
            expected = h.next_offset();
            max_ts = max_ts.max(h.max_timestamp());
            messages += count as u64;
            let ep = h.partition_leader_epoch();
            if ep >= 0 && epoch_starts.last().is_none_or(|&(e, _)| e != ep) {
                epoch_starts.push((ep, h.base_offset()));
            }
            tracked.push(Tracked::of(&h));
            crcs.push((s, e, h.crc()));
        }
        let first = tracked[0].base;
        let last = expected - 1;
        if last - first > MAX_RELATIVE_OFFSET {
            return self.append_mirror_split(batches, &crcs, &tracked);
        }
        // Pass 2: CRC32C verified while writing (see Segment::append_verifying); a mismatch
        // cuts the write back so nothing is appended.
        self.maybe_roll(batches.len(), first, last, max_ts)?;
        // Epoch entries are checkpointed before the data (like Kafka); entries past the log
        // end are dropped again on failure here and by recovery after a crash.
        let mut changed = false;
        for &(e, o) in &epoch_starts {
            changed |= self.epochs.assign(e, o);
        }
        let interval = self.config.index_interval_bytes;
        let written = if changed {
            self.epochs.write(&self.dir)
        } else {
            Ok(())
        }
        .and_then(|()| {
            self.active_mut()
                .append_verifying(&batches, &crcs, &tracked, interval)
        });
        let verified = match written {
            Ok(v) => v,
            Err(e) => {
                // ENOSPC and friends: the data was cut back; so must the epoch entries be.
                self.drop_epochs_past_end();
                return Err(e.into());
            }
        };
        if let Err(bad) = verified {
            if self.epochs.truncate_from_end(self.leo) {
                self.epochs.write(&self.dir)?;
            }
            let (s, e, _) = crcs[bad];
            let err = batch::validate(&batches[s..e])
                .err()
                .map_or_else(|| "CRC mismatch".to_string(), |e| e.to_string());
            return Err(LogError::corrupt(Some(tracked[bad].base), err));
        }
        let prev_leo = self.leo;
        self.leo = last + 1;
        if let Err(e) = self.after_append(messages, wall_ms()) {
            // The fetcher retries from the log end: leave nothing it would not expect.
            self.undo_append(prev_leo, batches.len());
            return Err(e);
        }
        for (h, s, e) in BatchIter::headers(&batches).map_while(Result::ok) {
            if h.has_producer_id() || h.is_control() {
                let control = if h.is_control() {
                    batch::control_record(&batches[s..e])
                } else {
                    None
                };
                self.producers
                    .apply(&h, h.base_offset(), h.last_offset(), control);
            }
        }
        Ok(AppendInfo {
            first_offset: Offset(first),
            last_offset: Offset(last),
            max_timestamp: max_ts,
            log_append_time: -1,
            duplicate: false,
        })
    }

    /// A mirror append whose offsets span more than one segment can index (relative offsets
    /// are i32; recovery cuts a segment where they overflow): every CRC is checked first, so
    /// the append stays all-or-nothing, then each run of batches that fits one segment is
    /// appended on its own (rolling a segment at the run's first offset).
    fn append_mirror_split(
        &mut self,
        batches: Bytes,
        ranges: &[(usize, usize, u32)],
        tracked: &[Tracked],
    ) -> Result<AppendInfo, LogError> {
        for (&(s, e, _), t) in ranges.iter().zip(tracked) {
            batch::validate(&batches[s..e]).map_err(|err| LogError::corrupt(Some(t.base), err))?;
        }
        let mut out: Option<AppendInfo> = None;
        let mut i = 0;
        while i < ranges.len() {
            let run_first = tracked[i].base;
            let mut j = i + 1;
            while j < ranges.len() && tracked[j].next - 1 - run_first <= MAX_RELATIVE_OFFSET {
                j += 1;
            }
            let part = self.append_mirror(batches.slice(ranges[i].0..ranges[j - 1].1))?;
            out = Some(match out {
                None => part,
                Some(mut o) => {
                    o.last_offset = part.last_offset;
                    o.max_timestamp = o.max_timestamp.max(part.max_timestamp);
                    o
                }
            });
            i = j;
        }
        Ok(out.expect("at least one batch"))
    }

    /// Writes a control batch at the log end: a transaction marker (commit/abort) for
    /// `producer_id`, or kmirror's MIRROR_PID_RESET which expires all producer state.
    pub fn append_control(
        &mut self,
        kind: ControlKind,
        producer_id: ProducerId,
        producer_epoch: i16,
        coordinator_epoch: i32,
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let ctype = match kind {
            ControlKind::Commit => CONTROL_TYPE_COMMIT,
            ControlKind::Abort => CONTROL_TYPE_ABORT,
            ControlKind::MirrorPidReset => CONTROL_TYPE_MIRROR_PID_RESET,
        };
        if kind != ControlKind::MirrorPidReset {
            self.producers
                .check_marker(producer_id.0, producer_epoch, coordinator_epoch)?;
        }
        let offset = self.leo;
        let bytes = batch::build_control_batch(
            offset,
            epoch.0,
            producer_id.0,
            producer_epoch,
            ctype,
            coordinator_epoch,
            now_ms,
        );
        let h = BatchHeader::parse(&bytes).expect("built");
        self.write_and_flush(
            &[IoSlice::new(&bytes)],
            &[(epoch.0, offset)],
            &[Tracked::of(&h)],
            1,
            now_ms,
        )?;
        self.producers
            .apply(&h, offset, offset, Some((ctype, coordinator_epoch)));
        Ok(AppendInfo {
            first_offset: Offset(offset),
            last_offset: Offset(offset),
            max_timestamp: now_ms,
            log_append_time: -1,
            duplicate: false,
        })
    }

    /// Batches the partition's own coordinator built (Kafka's AppendOrigin.COORDINATOR): the
    /// group and transaction coordinators' state, written into `__consumer_offsets` /
    /// `__transaction_state` as Kafka v2 batches (`batches`: one or more back to back, as
    /// `kmirror_control::coordinator_batch::encode` makes them).
    ///
    /// Every batch is checked before anything is written: frame and CRC, size against
    /// max.message.bytes ([`LogError::RecordTooLarge`]), counts agreeing with its offsets and
    /// bytes, a producer id on transactional and control batches, and a COMMIT/ABORT marker
    /// as a control batch's record ([`LogError::InvalidRecord`] otherwise). None of a
    /// producer's rules apply: no sequence or epoch check against producer state, control
    /// batches and sequence-less transactional batches are accepted, timestamps are not
    /// range-checked, and nothing is re-compressed or stamped with LogAppendTime (the
    /// coordinator's topics use CreateTime).
    ///
    /// Each batch gets base offset = log end offset and partition leader epoch `epoch` in its
    /// header (outside the CRC's range); its other bytes are stored as given. Producer state
    /// follows as on the leader path: a transactional batch opens (or continues) its
    /// producer's transaction, holding the last stable offset below it; a control batch ends
    /// it, and an ABORT is then listed by [`Log::aborted_transactions`].
    pub fn append_coordinator(
        &mut self,
        batches: &[u8],
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        if batches.is_empty() {
            return Err(LogError::InvalidRecord("empty records".into()));
        }
        let max = self.config.max_message_bytes;
        let mut next = self.leo;
        let mut max_ts = -1i64;
        let mut messages = 0u64;
        // Each batch's bytes and marker, with its assigned offsets in `tracked`.
        let mut pending: Vec<CoordinatorBatch> = Vec::new();
        let mut tracked: Vec<Tracked> = Vec::new();
        for r in BatchIter::validating(batches) {
            let (h, start, end) = r.map_err(|e| LogError::corrupt(Some(next), e))?;
            if end - start > max as usize {
                return Err(LogError::RecordTooLarge {
                    size: end - start,
                    max,
                });
            }
            // Offsets are assigned from lastOffsetDelta, so it must agree with the records the
            // batch holds (as Kafka's LogValidator checks for every origin).
            batch::check_client_counts(&h)
                .and_then(|()| batch::check_count_fits_bytes(&h))
                .map_err(|e| LogError::InvalidRecord(e.to_string()))?;
            if (h.is_transactional() || h.is_control()) && !h.has_producer_id() {
                return Err(LogError::InvalidRecord(
                    "transactional or control batch without producer id".into(),
                ));
            }
            let control = if h.is_control() {
                // Only a transaction marker: kmirror's MIRROR_PID_RESET (or an unreadable
                // record, which replay would take for a data batch) would corrupt producer
                // state.
                match batch::control_record(&batches[start..end]) {
                    Some((t, ce)) if t == CONTROL_TYPE_COMMIT || t == CONTROL_TYPE_ABORT => {
                        Some((t, ce))
                    }
                    _ => {
                        return Err(LogError::InvalidRecord(
                            "control batch is not a COMMIT/ABORT transaction marker".into(),
                        ))
                    }
                }
            } else {
                None
            };
            let first = next;
            let last = first + h.last_offset_delta() as i64;
            tracked.push(Tracked {
                base: first,
                next: last + 1,
                max_ts: h.max_timestamp(),
                size: end - start,
            });
            pending.push(CoordinatorBatch {
                start,
                end,
                control,
            });
            max_ts = max_ts.max(h.max_timestamp());
            messages += h.records_count() as u64;
            next = last + 1;
        }
        let prefixes: Vec<[u8; OFFSET_AND_EPOCH]> = pending
            .iter()
            .zip(&tracked)
            .map(|(b, t)| {
                let mut pre = [0u8; OFFSET_AND_EPOCH];
                pre.copy_from_slice(&batches[b.start..b.start + OFFSET_AND_EPOCH]);
                stamp_offset_and_epoch(&mut pre, t.base, epoch);
                pre
            })
            .collect();
        let mut bufs = Vec::with_capacity(pending.len() * 2);
        for (b, pre) in pending.iter().zip(&prefixes) {
            bufs.push(IoSlice::new(pre));
            bufs.push(IoSlice::new(&batches[b.start + OFFSET_AND_EPOCH..b.end]));
        }
        let first = self.leo;
        self.write_and_flush(&bufs, &[(epoch.0, first)], &tracked, messages, now_ms)?;
        for (b, t) in pending.iter().zip(&tracked) {
            // Producer fields are the batch's own; offsets are the assigned ones.
            let h = BatchHeader::parse(&batches[b.start..b.end]).expect("validated");
            self.producers.apply(&h, t.base, t.next - 1, b.control);
        }
        Ok(AppendInfo {
            first_offset: Offset(first),
            last_offset: Offset(next - 1),
            max_timestamp: max_ts,
            log_append_time: -1,
            duplicate: false,
        })
    }

    /// Whole batches starting with the one containing `from`, as one zero-copy slice of a
    /// segment's mapping. Only batches entirely below `upper_bound` (HW or LSO, clamped to the
    /// log end) are returned, as Kafka does; at least one batch is returned if any qualifies,
    /// even if larger than `max_bytes`. `from` outside [log start, log end] is
    /// OffsetOutOfRange.
    pub fn read(
        &self,
        from: Offset,
        max_bytes: usize,
        upper_bound: Offset,
    ) -> Result<ReadResult, LogError> {
        let from = from.0;
        if from < self.log_start || from > self.leo {
            return Err(LogError::OffsetOutOfRange {
                requested: Offset(from),
                log_start: Offset(self.log_start),
                log_end: Offset(self.leo),
            });
        }
        let upper = upper_bound.0.min(self.leo);
        let empty = ReadResult {
            records: Bytes::new(),
            first_offset: Offset(from),
            file: None,
        };
        if from >= upper {
            return Ok(empty);
        }
        let start_base = self
            .segments
            .range(..=from)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        // A slice holding only empty batches (what compaction leaves of a segment) is not
        // answered alone when a later segment has batches below the bound: librdkafka treats
        // a fetch answer without a record or control batch as "message too large" and, after
        // a few, fails the partition. The empty batches still go out, in front of the next
        // segment's batches, so a kmirror mirroring this log copies them too (log-equal): the
        // two slices are joined into one owned buffer. That copy is rare (a read starting in
        // such a segment) and bounded by `max_bytes` plus one batch.
        let mut empties: Option<(Offset, BytesMut)> = None;
        for seg in self.segments.range(start_base..).map(|(_, s)| s) {
            let Some((start, h)) = seg.find(from) else {
                continue;
            };
            if h.last_offset() >= upper {
                break;
            }
            let first_offset = h.base_offset();
            let budget = max_bytes.saturating_sub(empties.as_ref().map_or(0, |(_, b)| b.len()));
            let data = seg.data();
            let mut end = start;
            let mut has_records = false;
            while end < data.len() {
                let Ok(h) = BatchHeader::parse(&data[end..]) else {
                    break;
                };
                let size = h.total_size();
                if h.last_offset() >= upper || (end > start && end + size - start > budget) {
                    break;
                }
                has_records |= h.records_count() != 0 || h.is_control();
                end += size;
            }
            match (&mut empties, has_records) {
                (None, true) => {
                    return Ok(ReadResult {
                        records: seg.slice(start, end),
                        first_offset: Offset(first_offset),
                        file: (end > start).then(|| seg.region(start)),
                    })
                }
                (Some((first, joined)), true) => {
                    joined.extend_from_slice(&data[start..end]);
                    return Ok(ReadResult {
                        records: std::mem::take(joined).freeze(),
                        first_offset: *first,
                        file: None,
                    });
                }
                (None, false) => {
                    empties = Some((Offset(first_offset), BytesMut::from(&data[start..end])));
                }
                (Some((_, joined)), false) => joined.extend_from_slice(&data[start..end]),
            }
        }
        Ok(match empties {
            Some((first_offset, joined)) if !joined.is_empty() => ReadResult {
                records: joined.freeze(),
                first_offset,
                file: None,
            },
            _ => empty,
        })
    }

    pub fn log_start_offset(&self) -> Offset {
        Offset(self.log_start)
    }

    /// Next offset to be assigned.
    pub fn log_end_offset(&self) -> Offset {
        Offset(self.leo)
    }

    pub fn high_watermark(&self) -> Offset {
        Offset(self.hw)
    }

    /// Clamped to [log start, log end]. Persisted on the next flush/close.
    pub fn set_high_watermark(&mut self, hw: Offset) {
        self.hw = hw.0.clamp(self.log_start, self.leo);
    }

    /// min(HW, first offset of the earliest open transaction).
    pub fn last_stable_offset(&self) -> Offset {
        let first_open = self.producers.first_unstable_offset().unwrap_or(i64::MAX);
        Offset(self.hw.min(first_open))
    }

    /// Aborted transactions overlapping [from, upper_bound) (Fetch read_committed).
    pub fn aborted_transactions(&self, from: Offset, upper_bound: Offset) -> Vec<AbortedTxn> {
        self.producers.aborted_in(from.0, upper_bound.0)
    }

    /// Removes everything at and above `offset` (Kafka semantics: a batch containing `offset`
    /// goes entirely; the log end offset becomes `offset`).
    pub fn truncate_to(&mut self, offset: Offset) -> Result<(), LogError> {
        let offset = offset.0;
        if offset >= self.leo {
            return Ok(());
        }
        let first_base = *self.segments.keys().next().expect("non-empty");
        if offset < first_base {
            return self.truncate_fully_and_start_at(Offset(offset));
        }
        self.generation = next_generation();
        self.first_dirty = self.first_dirty.min(offset);
        let doomed: Vec<i64> = self.segments.range(offset + 1..).map(|(b, _)| *b).collect();
        for b in doomed {
            let seg = self.segments.remove(&b).expect("listed");
            seg.delete()?;
        }
        let interval = self.config.index_interval_bytes;
        let cap = self.active_cap();
        let active = self.active_mut();
        let cut = active.find(offset).map(|(pos, _)| pos);
        if let Some(pos) = cut {
            active.truncate_rewrite(pos, interval)?;
        }
        active.ensure_capacity(cap)?;
        let data_end = active.next_offset;
        sync_dir(&self.dir)?;
        self.leo = offset;
        if data_end < offset {
            // The cut fell inside a batch or a gap: an empty segment named `offset` records
            // the log end on disk, so it survives a restart.
            self.roll_at(offset)?;
        }
        self.log_start = self.log_start.min(offset);
        self.hw = self.hw.min(offset);
        self.recovery_point = self.recovery_point.min(offset);
        self.epochs.truncate_from_end(offset);
        self.epochs.write(&self.dir)?;
        self.rebuild_producers();
        self.write_checkpoint()?;
        Ok(())
    }

    /// Deletes all data and restarts the log (empty) at `offset`, which becomes log start,
    /// log end and HW. Clears the epoch cache and producer state.
    pub fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LogError> {
        let offset = offset.0.max(0);
        self.generation = next_generation();
        self.first_dirty = offset;
        for (_, seg) in std::mem::take(&mut self.segments) {
            seg.delete()?;
        }
        let seg = Segment::create(&self.dir, offset, self.active_cap())?;
        self.segments.insert(offset, seg);
        self.leo = offset;
        self.log_start = offset;
        self.hw = offset;
        self.recovery_point = offset;
        self.epochs.clear();
        self.epochs.write(&self.dir)?;
        self.producers = ProducerState::default();
        self.write_checkpoint()?;
        Ok(())
    }

    /// Advances the log start offset to `offset` (DeleteRecords); must be <= HW. Whole
    /// segments below it are deleted. Returns the (possibly unchanged) log start offset.
    pub fn delete_records_before(&mut self, offset: Offset) -> Result<Offset, LogError> {
        let offset = offset.0;
        if offset > self.hw {
            return Err(LogError::OffsetOutOfRange {
                requested: Offset(offset),
                log_start: Offset(self.log_start),
                log_end: Offset(self.hw),
            });
        }
        if offset <= self.log_start {
            return Ok(Offset(self.log_start));
        }
        self.log_start = offset;
        if self.active().next_offset <= offset && !self.active().is_empty() {
            self.roll_at(self.leo)?;
        }
        self.delete_segments_below_start()?;
        Ok(Offset(self.log_start))
    }

    /// Deletes segments that lie entirely below the log start and persists the new start.
    fn delete_segments_below_start(&mut self) -> Result<(), LogError> {
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for w in bases.windows(2) {
            if w[1] <= self.log_start {
                let seg = self.segments.remove(&w[0]).expect("listed");
                seg.delete()?;
            }
        }
        self.epochs.truncate_from_start(self.log_start);
        self.epochs.write(&self.dir)?;
        self.producers.on_log_start(self.log_start);
        self.write_checkpoint()?;
        Ok(())
    }

    /// Deletes the oldest segments beyond retention.ms (by the segment's largest timestamp)
    /// or retention.bytes. Only segments that are not active and lie below the HW go.
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<(), LogError> {
        let mut size = self.size_bytes();
        let mut new_start = self.log_start;
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for w in bases.windows(2) {
            let seg = &self.segments[&w[0]];
            if seg.next_offset > self.hw || w[1] > self.hw {
                break;
            }
            let expired = self
                .config
                .retention_ms
                .is_some_and(|ms| seg.max_ts >= 0 && seg.max_ts < now_ms.saturating_sub(ms as i64));
            let oversized = self
                .config
                .retention_bytes
                .is_some_and(|rb| size.saturating_sub(seg.size as u64) >= rb);
            if !(expired || oversized) {
                break;
            }
            size -= seg.size as u64;
            new_start = new_start.max(w[1]);
        }
        if new_start > self.log_start {
            self.log_start = new_start;
            self.delete_segments_below_start()?;
        }
        Ok(())
    }

    /// A cleaning pass to run (see the `cleaner` module), or None when the log is not
    /// compacted or not dirty enough: dirty bytes / cleanable bytes below
    /// min.cleanable.dirty.ratio and no dirty segment older than max.compaction.lag.ms.
    pub fn cleaning_job(&self, now_ms: i64) -> Option<CleanJob> {
        let cc = self.config.compaction.as_ref()?;
        let active_base = self.active().base;
        let min_lag = now_ms.saturating_sub(cc.min_compaction_lag_ms.min(i64::MAX as u64) as i64);
        let mut end = active_base.min(self.last_stable_offset().0);
        let first_dirty = self.first_dirty.clamp(self.log_start, self.leo);
        // Whole segments below `end`, from the one holding the log start.
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        let mut picked = Vec::new();
        for w in bases.windows(2) {
            let seg = &self.segments[&w[0]];
            if w[1] > end || w[1] <= self.log_start {
                if w[1] > end {
                    break;
                }
                continue;
            }
            // Records newer than min.compaction.lag.ms stay uncleaned, with all after them.
            if w[0] >= first_dirty && seg.max_ts > min_lag && cc.min_compaction_lag_ms > 0 {
                end = w[0];
                break;
            }
            picked.push((w[0], w[1]));
        }
        end = picked.last().map_or(end, |p| p.1);
        let size = |b: i64| self.segments[&b].size as u64;
        let dirty: u64 = picked
            .iter()
            .filter(|p| p.1 > first_dirty)
            .map(|p| size(p.0))
            .sum();
        let total: u64 = picked.iter().map(|p| size(p.0)).sum();
        if dirty == 0 {
            return None;
        }
        let max_lag = cc.max_compaction_lag_ms.min(i64::MAX as u64) as i64;
        let forced = picked
            .iter()
            .find(|p| p.1 > first_dirty)
            .and_then(|p| self.segments[&p.0].first_batch_ts)
            .is_some_and(|t| t < now_ms.saturating_sub(max_lag));
        if (dirty as f64) < cc.min_cleanable_dirty_ratio * total as f64 && !forced {
            return None;
        }
        let segments = picked
            .iter()
            .map(|&(b, _)| {
                let s = &self.segments[&b];
                SegmentInput {
                    base: b,
                    data: s.slice(0, s.size),
                }
            })
            .collect();
        Some(CleanJob {
            dir: self.dir.clone(),
            segments,
            map_start: first_dirty,
            end,
            aborted: self.producers.aborted_entries(),
            last_records: self.producers.last_records(),
            now_ms,
            delete_retention_ms: cc.delete_retention_ms.min(i64::MAX as u64) as i64,
            max_decompressed: batch::decompressed_limit(self.config.max_message_bytes),
            generation: self.generation,
            segment_bytes: self.config.segment_bytes.min(i32::MAX as u64),
        })
    }

    /// Swaps the segments a pass cleaned into the log (each still present, sealed and of the
    /// size it had when the job was made; otherwise its cleaned file is dropped) and advances
    /// the cleaner checkpoint. Readers holding slices of the old files keep them.
    pub fn install_cleaned(&mut self, cleaned: Cleaned) -> Result<CleanStats, LogError> {
        if cleaned.generation != self.generation {
            let stats = cleaned.stats.clone();
            cleaned.discard();
            return Ok(stats);
        }
        let interval = self.config.index_interval_bytes;
        let active_base = self.active().base;
        let mut first_err = None;
        for r in cleaned.replaced {
            let ok = r.old.iter().all(|&(b, size)| {
                b != active_base && self.segments.get(&b).is_some_and(|s| s.size == size)
            });
            if !ok || first_err.is_some() {
                let _ = fs::remove_file(&r.path);
                continue;
            }
            if let Err(e) = self.swap_group(&r, interval) {
                first_err = Some(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e.into());
        }
        self.first_dirty = cleaned.end;
        crate::cleaner::write_checkpoint(&self.dir, cleaned.end)?;
        Ok(cleaned.stats)
    }

    /// Replaces a group of segments by one cleaned file: renamed to `<base>.log.swap` (from
    /// here a crash is finished by open), the group's later segments deleted, the swap file
    /// renamed over the first one. Readers holding slices of any of them keep their mappings.
    fn swap_group(&mut self, r: &crate::cleaner::Replacement, interval: u32) -> io::Result<()> {
        let swap = self.dir.join(format!(
            "{}{}",
            file_name(r.base, ""),
            crate::cleaner::SWAP_SUFFIX
        ));
        if let Err(e) = fs::rename(&r.path, &swap).and_then(|()| sync_dir(&self.dir)) {
            let _ = fs::remove_file(&r.path);
            return Err(e);
        }
        let mut first_err = None;
        for &(b, _) in &r.old[1..] {
            let seg = self.segments.remove(&b).expect("checked");
            if let Err(e) = seg.delete() {
                first_err.get_or_insert(e);
            }
        }
        let seg = self.segments.get_mut(&r.base).expect("checked");
        seg.swap_in(&swap, interval)?;
        first_err.map_or(Ok(()), Err)
    }

    /// One whole cleaning pass on this thread (tests and tools; the broker runs
    /// [`CleanJob::run`] off its cores).
    pub fn clean(&mut self, now_ms: i64) -> Result<Option<CleanStats>, LogError> {
        let Some(job) = self.cleaning_job(now_ms) else {
            return Ok(None);
        };
        let cleaned = job.run()?;
        self.install_cleaned(cleaned).map(Some)
    }

    /// First dirty offset (the cleaner checkpoint).
    pub fn first_dirty_offset(&self) -> Offset {
        Offset(self.first_dirty.max(self.log_start))
    }

    /// Starts a new segment at the log end (no-op if the active segment is empty).
    pub fn roll(&mut self) -> Result<(), LogError> {
        if !self.active().is_empty() {
            self.roll_at(self.leo)?;
        }
        Ok(())
    }

    /// fsyncs data and indexes, then checkpoints recovery point = log end, HW and log start.
    pub fn flush(&mut self) -> Result<(), LogError> {
        self.sync_data()?;
        self.write_flushed_metadata()?;
        Ok(())
    }

    /// fsyncs every segment's data: everything below the log end is durable afterwards.
    fn sync_data(&mut self) -> io::Result<()> {
        for seg in self.segments.values_mut() {
            seg.sync()?;
        }
        self.recovery_point = self.leo;
        self.unflushed_messages = 0;
        Ok(())
    }

    /// Index files of the active segment and the checkpoint, after [`Log::sync_data`].
    fn write_flushed_metadata(&mut self) -> io::Result<()> {
        self.active().write_indexes()?;
        self.write_checkpoint()
    }

    /// Persists HW and log start (atomically) without fsyncing data — Kafka's periodic
    /// high-watermark checkpoint. The recovery point is left as is.
    pub fn write_checkpoints(&mut self) -> Result<(), LogError> {
        self.write_checkpoint()?;
        Ok(())
    }

    /// Flushes and checkpoints; dropping a Log without close is a crash as far as the files
    /// are concerned (recovery runs on the next open).
    pub fn close(mut self) -> Result<(), LogError> {
        self.flush()
    }

    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.latest().map(|(e, _)| LeaderEpoch(e))
    }

    /// Kafka OffsetsForLeaderEpoch: the largest epoch <= `epoch` and the start offset of the
    /// next higher epoch (or the log end for the latest epoch); None = UNDEFINED.
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.epochs
            .end_offset_for(epoch.0, self.leo)
            .map(|(e, o)| (LeaderEpoch(e), Offset(o)))
    }

    /// Epoch cache entries (epoch, start offset), oldest first.
    pub fn epoch_entries(&self) -> Vec<(LeaderEpoch, Offset)> {
        self.epochs
            .entries()
            .iter()
            .map(|&(e, o)| (LeaderEpoch(e), Offset(o)))
            .collect()
    }

    /// ListOffsets by timestamp: the first record (at or after log start) whose timestamp is
    /// at least `ts`, with its timestamp. Records of compressed batches are not decoded: the
    /// batch's base offset and max timestamp stand for them.
    pub fn offset_for_timestamp(&self, ts: i64) -> Option<(Offset, i64)> {
        for seg in self.segments.values() {
            if seg.max_ts < ts {
                continue;
            }
            let start = seg.lookup_time(ts);
            let data = seg.data();
            for (h, s, e) in BatchIter::headers(&data[start..]).map_while(Result::ok) {
                if h.max_timestamp() < ts || h.last_offset() < self.log_start {
                    continue;
                }
                let found = record_with_ts(&data[start + s..start + e], |t| t >= ts)
                    .filter(|(o, _)| *o >= self.log_start)
                    .unwrap_or((h.base_offset().max(self.log_start), h.max_timestamp()));
                return Some((Offset(found.0), found.1));
            }
        }
        None
    }

    /// ListOffsets MAX_TIMESTAMP: offset and value of the largest timestamp in the log.
    pub fn max_timestamp_offset(&self) -> Option<(Offset, i64)> {
        let seg = self.segments.values().filter(|s| s.max_ts >= 0).fold(
            None::<&Segment>,
            |best, s| match best {
                Some(b) if b.max_ts >= s.max_ts => Some(b),
                _ => Some(s),
            },
        )?;
        let (pos, h) = seg.find(seg.max_ts_offset)?;
        let bytes = &seg.data()[pos..pos + h.total_size()];
        let max = h.max_timestamp();
        let found = record_with_ts(bytes, |t| t == max).unwrap_or((h.last_offset(), max));
        Some((Offset(found.0), found.1))
    }

    pub fn producer_state(&self, pid: ProducerId) -> Option<ProducerEntry> {
        self.producers.entry(pid.0)
    }

    /// Every producer the log remembers (DescribeProducers), by producer id.
    pub fn producers(&self) -> Vec<(ProducerId, ProducerEntry)> {
        self.producers.all()
    }

    /// Bytes of batch data held (all segments).
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size as u64).sum()
    }

    /// Number of segments (for tests and metrics).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Maps a record-walk failure to the log error Kafka's LogValidator would produce:
/// undecodable compressed data is CORRUPT_MESSAGE, everything else INVALID_RECORD.
fn record_error(offset_hint: i64, e: batch::BatchError) -> LogError {
    match e {
        batch::BatchError::Undecodable(_) => LogError::corrupt(Some(offset_hint), e),
        e => LogError::InvalidRecord(e.to_string()),
    }
}

/// First record of an uncompressed CreateTime batch whose timestamp satisfies `pred`.
fn record_with_ts(batch: &[u8], pred: impl Fn(i64) -> bool) -> Option<(i64, i64)> {
    let h = BatchHeader::parse(batch).ok()?;
    if h.is_log_append_time() {
        let t = h.max_timestamp();
        return pred(t).then_some((h.base_offset(), t));
    }
    if h.compression() != Compression::None {
        return None;
    }
    // Walks the records in place: nothing is sized from the header's recordsCount.
    batch::UncompressedRecords::new(batch)?
        .map_while(|r| r)
        .find_map(|(r, _)| {
            let t = h.base_timestamp().wrapping_add(r.timestamp_delta);
            pred(t).then_some((h.base_offset().wrapping_add(r.offset_delta), t))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 8 hole 2: one record claiming 2^31-1 records (lastOffsetDelta agreeing) used to be
    /// appended, and a ListOffsets by timestamp then sized a vector from the count and aborted
    /// the process. Now the producer gets INVALID_RECORD and the log is unchanged.
    #[test]
    fn a_batch_claiming_i32_max_records_is_refused_and_the_log_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        let good = crate::batch::tests::raw_batch(0, 2, 1, &crate::batch::tests::records_of(2));
        log.append_leader(Bytes::from(good), LeaderEpoch(0), 5)
            .unwrap();
        log.set_high_watermark(Offset(2));
        let size = log.size_bytes();
        let bad = Bytes::from(crate::batch::tests::one_record_claiming_i32_max());
        let e = log
            .append_leader(bad.clone(), LeaderEpoch(0), 6)
            .unwrap_err();
        assert!(matches!(e, LogError::InvalidRecord(_)), "{e}");
        assert_eq!(log.log_end_offset(), Offset(2));
        assert_eq!(log.size_bytes(), size);
        // The mirror path refuses it as well (the count cannot fit the bytes).
        let mut m = bad.to_vec();
        m[..8].copy_from_slice(&2i64.to_be_bytes());
        let e = log.append_mirror(Bytes::from(m)).unwrap_err();
        assert!(matches!(e, LogError::Corrupt { .. }), "{e}");
        assert_eq!(log.log_end_offset(), Offset(2));
        assert_eq!(log.size_bytes(), size);
        assert_eq!(log.offset_for_timestamp(0), Some((Offset(0), 1_000)));
    }

    /// A lying count already on disk (written before validation existed) is served and looked
    /// up by timestamp without anything being sized from it.
    #[test]
    fn time_lookup_over_a_stored_lying_count_allocates_nothing_from_it() {
        let dir = tempfile::tempdir().unwrap();
        drop(Log::open(dir.path(), LogConfig::default()).unwrap());
        let bad = crate::batch::tests::one_record_claiming_i32_max();
        std::fs::write(dir.path().join(file_name(0, LOG_SUFFIX)), &bad).unwrap();
        std::fs::remove_file(dir.path().join(crate::checkpoint::CHECKPOINT_FILE)).unwrap();
        let log = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(log.log_end_offset(), Offset(i32::MAX as i64));
        assert_eq!(log.offset_for_timestamp(0), Some((Offset(0), 1_000)));
        assert_eq!(log.offset_for_timestamp(1_000), Some((Offset(0), 1_000)));
        assert_eq!(log.max_timestamp_offset(), Some((Offset(0), 1_000)));
    }

    /// Found by the produce_batch fuzz target: two batches of one producer with the same
    /// sequence in one request were answered as a duplicate (success, offsets 0..0) and
    /// nothing was written.
    #[test]
    fn a_duplicate_inside_a_multi_batch_request_is_refused_not_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        let one = crate::batch::build_batch(
            &crate::batch::BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 0,
                attributes: 0,
                base_timestamp: 1,
                producer_id: 42,
                producer_epoch: 3,
                base_sequence: 9,
            },
            &[(None, Some(&b"v"[..]))],
        );
        let two = [one.clone(), one.clone()].concat();
        let e = log
            .append_leader(Bytes::from(two), LeaderEpoch(0), 1)
            .unwrap_err();
        assert!(matches!(e, LogError::InvalidRecord(_)), "{e}");
        assert_eq!((log.log_end_offset(), log.size_bytes()), (Offset(0), 0));
        // The batch alone is appended, and its retry alone is the duplicate.
        let first = log
            .append_leader(Bytes::from(one.clone()), LeaderEpoch(0), 1)
            .unwrap();
        let retry = log
            .append_leader(Bytes::from(one), LeaderEpoch(0), 1)
            .unwrap();
        assert!(retry.duplicate && retry.first_offset == first.first_offset);
        assert_eq!(log.log_end_offset(), Offset(1));
    }

    /// Found by the mirror_append fuzz target: one mirror append whose batches span more than
    /// 2^31 offsets went into one segment, and recovery (relative offsets are i32) cut it back.
    #[test]
    fn a_mirror_append_spanning_more_than_a_segment_index_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        let recs = crate::batch::tests::records_of(1);
        let mut a = crate::batch::tests::raw_batch(0, 1, 0, &recs);
        let mut b = a.clone();
        let far = MAX_RELATIVE_OFFSET + 10;
        b[..8].copy_from_slice(&far.to_be_bytes());
        a.extend_from_slice(&b);
        let info = log.append_mirror(Bytes::from(a)).unwrap();
        assert_eq!(info.last_offset, Offset(far));
        assert_eq!(log.segment_count(), 2);
        log.close().unwrap();
        let log = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(log.log_end_offset(), Offset(far + 1));
        // Offsets that overflow i64 are refused, not wrapped.
        let mut log = log;
        let mut c = crate::batch::tests::raw_batch(0, 1, 0, &recs);
        c[..8].copy_from_slice(&i64::MAX.to_be_bytes());
        assert!(matches!(
            log.append_mirror(Bytes::from(c)),
            Err(LogError::Corrupt { .. })
        ));
    }

    /// compression.type and message.timestamp.type=LogAppendTime on the produce path: every
    /// (produced codec, topic codec, timestamp type) pair stores a batch whose CRC is valid,
    /// whose codec is the topic's, whose records are the produced ones byte for byte, and
    /// (LogAppendTime) whose timestamp type and max timestamp are the append time's.
    #[test]
    fn produced_batches_are_recompressed_and_stamped_as_the_topic_says() {
        use crate::batch::tests::{raw_batch, records_of};
        use crate::batch::{Compression as C, HEADER_SIZE};
        use crate::TopicCodec;
        let records = records_of(5);
        let codecs = [
            (C::None, 0),
            (C::Gzip, 1),
            (C::Snappy, 2),
            (C::Lz4, 3),
            (C::Zstd, 4),
        ];
        let now = 1_700_000_000_000;
        for (target, _) in codecs
            .iter()
            .copied()
            .map(|(c, b)| (Some(c), b))
            .chain([(None, 0)])
        {
            for (source, bits) in codecs {
                for lat in [false, true] {
                    let case = format!("{source:?} into {target:?}, LogAppendTime {lat}");
                    let section = batch::compress_records(source, &records).unwrap();
                    let produced = raw_batch(bits, 5, 4, &section);
                    let dir = tempfile::tempdir().unwrap();
                    let config = LogConfig {
                        compression: target.map(|codec| TopicCodec {
                            codec,
                            level: Some(if codec == C::Zstd { 9 } else { 1 }),
                        }),
                        log_append_time: lat,
                        ..LogConfig::default()
                    };
                    let mut log = Log::open(dir.path(), config).unwrap();
                    // One batch first, so the rewritten one gets a non-zero base offset.
                    log.append_leader(Bytes::from(produced.clone()), LeaderEpoch(3), now)
                        .unwrap();
                    let info = log
                        .append_leader(Bytes::from(produced.clone()), LeaderEpoch(3), now + 1)
                        .unwrap();
                    assert_eq!(info.first_offset, Offset(5), "{case}");
                    assert_eq!(
                        info.log_append_time,
                        if lat { now + 1 } else { -1 },
                        "{case}"
                    );
                    let r = log.read(Offset(5), 1 << 20, Offset(10)).unwrap();
                    let (h, n) = batch::validate(&r.records).expect(&case); // CRC valid
                    assert_eq!(n, r.records.len(), "{case}");
                    assert_eq!(h.compression(), target.unwrap_or(source), "{case}");
                    assert_eq!(
                        (
                            h.base_offset(),
                            h.partition_leader_epoch(),
                            h.last_offset_delta()
                        ),
                        (5, 3, 4),
                        "{case}"
                    );
                    let p = BatchHeader::parse(&produced).unwrap();
                    assert_eq!(
                        (h.base_timestamp(), h.producer_id(), h.records_count()),
                        (p.base_timestamp(), p.producer_id(), p.records_count()),
                        "{case}"
                    );
                    assert_eq!(h.is_log_append_time(), lat, "{case}");
                    let max_ts = if lat { now + 1 } else { p.max_timestamp() };
                    assert_eq!(h.max_timestamp(), max_ts, "{case}");
                    assert_eq!(
                        batch::decompress_records(&r.records, 1 << 26).unwrap(),
                        records,
                        "{case}"
                    );
                    batch::validate_client_records(&r.records, 1 << 26).expect(&case);
                    if target.is_none_or(|t| t == source) {
                        // Not re-compressed: the records section is the request's bytes.
                        assert_eq!(
                            &r.records[HEADER_SIZE..],
                            &produced[HEADER_SIZE..],
                            "{case}"
                        );
                        if !lat {
                            assert_eq!(&r.records[16..], &produced[16..], "{case}");
                        }
                    }
                    // A reopened log (recovery re-validates every batch) serves the same bytes.
                    let before = r.records.clone();
                    drop(log);
                    std::fs::remove_file(dir.path().join(crate::checkpoint::CHECKPOINT_FILE)).ok();
                    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
                    assert_eq!(
                        log.read(Offset(5), 1 << 20, Offset(10)).unwrap().records,
                        before,
                        "{case}"
                    );
                }
            }
        }
    }

    /// The mirror path never re-encodes: a log configured to re-compress and stamp
    /// LogAppendTime stores a mirrored batch byte for byte.
    #[test]
    fn mirrored_batches_are_never_recompressed_or_stamped() {
        use crate::batch::tests::{raw_batch, records_of};
        use crate::batch::Compression as C;
        let section = batch::compress_records(C::Lz4, &records_of(5)).unwrap();
        let mirrored = Bytes::from(raw_batch(3, 5, 4, &section));
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            compression: Some(crate::TopicCodec {
                codec: C::Zstd,
                level: None,
            }),
            log_append_time: true,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config).unwrap();
        let info = log.append_mirror(mirrored.clone()).unwrap();
        assert_eq!(info.log_append_time, -1);
        assert_eq!(
            log.read(Offset(0), 1 << 20, Offset(5)).unwrap().records,
            mirrored
        );
    }

    /// A re-compressed batch larger than max.message.bytes is refused (Kafka's
    /// RecordTooLargeException after re-compression), and nothing is written.
    #[test]
    fn a_recompressed_batch_over_max_message_bytes_is_refused() {
        use crate::batch::tests::{raw_batch, records_of};
        use crate::batch::Compression as C;
        let records = records_of(50);
        let section = batch::compress_records(C::Zstd, &records).unwrap();
        let produced = raw_batch(4, 50, 49, &section);
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            compression: Some(crate::TopicCodec {
                codec: C::None,
                level: None,
            }),
            max_message_bytes: (produced.len() + 1) as u32,
            ..LogConfig::default()
        };
        assert!(records.len() > produced.len(), "zstd shrinks the sample");
        let mut log = Log::open(dir.path(), config).unwrap();
        let e = log
            .append_leader(Bytes::from(produced), LeaderEpoch(0), 5)
            .unwrap_err();
        assert!(matches!(e, LogError::RecordTooLarge { .. }), "{e}");
        assert_eq!(log.log_end_offset(), Offset(0));
    }

    #[test]
    fn a_valid_batch_with_crc_zero_is_stored_recovered_and_served() {
        let dir = tempfile::tempdir().unwrap();
        let b = Bytes::from(crate::batch::tests::zero_crc_batch());
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        log.append_mirror(b.clone()).unwrap();
        log.set_high_watermark(Offset(1));
        drop(log); // no clean close: recovery re-validates everything
        std::fs::remove_file(dir.path().join(crate::checkpoint::CHECKPOINT_FILE)).unwrap();
        let log = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(log.log_end_offset(), Offset(1));
        let r = log.read(Offset(0), 1 << 20, Offset(1)).unwrap();
        assert_eq!(r.records, b);
    }

    /// Coordinator-built batches for the `append_coordinator` tests, shaped as
    /// `kmirror_control::coordinator_batch::encode` makes them: base offset 0, a stale
    /// partitionLeaderEpoch (the log stamps its own), CreateTime 1_000, no sequence.
    mod coordinator {
        use crate::batch::{
            self, BatchSpec, RecordParts, CONTROL_ATTRIBUTES, TRANSACTIONAL_ATTRIBUTES,
        };

        pub(super) const TS: i64 = 1_000;

        fn spec(attributes: i16, producer_id: i64, producer_epoch: i16) -> BatchSpec {
            BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 1,
                attributes,
                base_timestamp: TS,
                producer_id,
                producer_epoch,
                base_sequence: -1,
            }
        }

        /// A plain batch of `n` records (no producer), with a record header as group
        /// metadata records carry.
        pub(super) fn plain(n: usize) -> Vec<u8> {
            let records: Vec<RecordParts<'_>> = (0..n)
                .map(|_| RecordParts {
                    key: Some(&b"group-key"[..]),
                    value: Some(&b"state"[..]),
                    headers: vec![("kmirror.h", Some(&b"v"[..]))],
                })
                .collect();
            batch::build_batch_with_headers(&spec(0, -1, -1), &records)
        }

        /// A transactional batch of `n` offset records of `pid` (epoch 0, no sequence).
        pub(super) fn txn(pid: i64, n: usize) -> Vec<u8> {
            let records: Vec<_> = (0..n).map(|_| (Some(&b"k"[..]), Some(&b"v"[..]))).collect();
            batch::build_batch(&spec(TRANSACTIONAL_ATTRIBUTES, pid, 0), &records)
        }

        /// An EndTransactionMarker control batch of `pid` with a `kmirror.group` record header.
        pub(super) fn marker(pid: i64, control_type: i16) -> Vec<u8> {
            let key = [0i16.to_be_bytes(), control_type.to_be_bytes()].concat();
            let value = [&0i16.to_be_bytes()[..], &0i32.to_be_bytes()[..]].concat();
            let record = RecordParts {
                key: Some(&key),
                value: Some(&value),
                headers: vec![("kmirror.group", Some(&b"g"[..]))],
            };
            batch::build_batch_with_headers(&spec(CONTROL_ATTRIBUTES, pid, 0), &[record])
        }
    }

    /// Plain coordinator batches get consecutive offsets from the log end and the given leader
    /// epoch; every other byte is stored as given (no re-compression, no LogAppendTime even
    /// where the topic config asks for them), the CRC stays valid, and recovery keeps them.
    #[test]
    fn coordinator_batches_get_consecutive_offsets_and_the_epoch() {
        use coordinator::{plain, TS};
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            compression: Some(crate::TopicCodec {
                codec: Compression::Zstd,
                level: None,
            }),
            log_append_time: true,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config.clone()).unwrap();
        let now = 1_700_000_000_000;
        let info = log
            .append_coordinator(&plain(2), LeaderEpoch(6), now)
            .unwrap();
        assert_eq!(
            (info.first_offset, info.last_offset),
            (Offset(0), Offset(1))
        );
        let input = [plain(1), plain(3), plain(2)];
        let info = log
            .append_coordinator(&input.concat(), LeaderEpoch(7), now)
            .unwrap();
        assert_eq!(
            (
                info.first_offset,
                info.last_offset,
                info.max_timestamp,
                info.log_append_time,
                info.duplicate
            ),
            (Offset(2), Offset(7), TS, -1, false)
        );
        assert_eq!(log.log_end_offset(), Offset(8));
        assert_eq!(
            log.epoch_entries(),
            vec![(LeaderEpoch(6), Offset(0)), (LeaderEpoch(7), Offset(2))]
        );
        let check = |log: &Log| {
            let r = log.read(Offset(2), 1 << 20, Offset(8)).unwrap();
            let mut n = 0;
            for ((got, want), base) in BatchIter::validating(&r.records)
                .map(|b| b.expect("CRC valid"))
                .zip(&input)
                .zip([2i64, 3, 6])
            {
                let (h, start, end) = got;
                let stored = &r.records[start..end];
                batch::validate(stored).expect("CRC valid");
                assert_eq!((h.base_offset(), h.partition_leader_epoch()), (base, 7));
                // Only base offset and leader epoch differ (the length between them is equal).
                assert_eq!(&stored[8..PARTITION_LEADER_EPOCH_POS], &want[8..12]);
                assert_eq!(&stored[OFFSET_AND_EPOCH..], &want[OFFSET_AND_EPOCH..]);
                n += 1;
            }
            assert_eq!(n, 3);
        };
        check(&log);
        // Recovery re-validates every batch (no checkpoint) and keeps all of them.
        drop(log);
        std::fs::remove_file(dir.path().join(crate::checkpoint::CHECKPOINT_FILE)).unwrap();
        let log = Log::open(dir.path(), config).unwrap();
        assert_eq!(log.log_end_offset(), Offset(8));
        check(&log);
    }

    /// A coordinator's transactional batch holds the LSO at its offset until its COMMIT
    /// marker; an ABORTed one is listed by aborted_transactions; both survive a reopen.
    #[test]
    fn coordinator_transactions_hold_the_lso_until_their_marker() {
        use coordinator::{marker, plain, txn};
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        let now = 5_000;
        log.append_coordinator(&[plain(1), txn(9, 2)].concat(), LeaderEpoch(0), now)
            .unwrap(); // 0, 1..=2
        log.append_coordinator(&plain(1), LeaderEpoch(0), now)
            .unwrap(); // 3
        log.set_high_watermark(Offset(4));
        assert_eq!(log.last_stable_offset(), Offset(1));
        assert_eq!(
            log.producer_state(ProducerId(9))
                .unwrap()
                .current_txn_first_offset,
            Some(Offset(1))
        );
        let info = log
            .append_coordinator(&marker(9, CONTROL_TYPE_COMMIT), LeaderEpoch(0), now)
            .unwrap();
        assert_eq!(
            (info.first_offset, info.last_offset),
            (Offset(4), Offset(4))
        );
        log.set_high_watermark(Offset(5));
        assert_eq!(log.last_stable_offset(), Offset(5));
        // A transaction and its ABORT in one append.
        log.append_coordinator(
            &[txn(10, 1), plain(1), marker(10, CONTROL_TYPE_ABORT)].concat(),
            LeaderEpoch(0),
            now,
        )
        .unwrap(); // 5, 6, 7
        log.set_high_watermark(Offset(8));
        assert_eq!(log.last_stable_offset(), Offset(8));
        let aborted = vec![AbortedTxn {
            producer_id: ProducerId(10),
            first_offset: Offset(5),
        }];
        assert_eq!(log.aborted_transactions(Offset(0), Offset(8)), aborted);
        assert!(log.aborted_transactions(Offset(8), Offset(8)).is_empty());
        // Recovery replays the stored batches into the same producer state.
        log.close().unwrap();
        let log = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(log.last_stable_offset(), Offset(8));
        assert_eq!(log.aborted_transactions(Offset(0), Offset(8)), aborted);
    }

    /// One bad batch (CRC, size) anywhere in the input and nothing of it is written.
    #[test]
    fn a_coordinator_append_with_a_bad_batch_in_the_middle_writes_nothing() {
        use coordinator::{plain, txn};
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
        log.append_coordinator(&plain(1), LeaderEpoch(0), 1)
            .unwrap();
        let (leo, size) = (log.log_end_offset(), log.size_bytes());
        let mut bad = txn(9, 2);
        let last = bad.len() - 1;
        bad[last] ^= 0xff; // inside the CRC's range
        let input = [plain(2), bad, plain(1)].concat();
        let e = log
            .append_coordinator(&input, LeaderEpoch(0), 1)
            .unwrap_err();
        assert!(matches!(e, LogError::Corrupt { .. }), "{e}");
        assert_eq!((log.log_end_offset(), log.size_bytes()), (leo, size));
        assert_eq!(log.last_stable_offset(), log.high_watermark());
        assert!(log.producer_state(ProducerId(9)).is_none());
        // A batch over max.message.bytes in the middle: RecordTooLarge, nothing written.
        let big = plain(20);
        log.set_config(LogConfig {
            max_message_bytes: (big.len() - 1) as u32,
            ..LogConfig::default()
        });
        let e = log
            .append_coordinator(&[plain(1), big, plain(1)].concat(), LeaderEpoch(0), 1)
            .unwrap_err();
        assert!(matches!(e, LogError::RecordTooLarge { .. }), "{e}");
        assert_eq!((log.log_end_offset(), log.size_bytes()), (leo, size));
    }

    /// What the coordinator may write and a producer may not: control batches, transactional
    /// batches without sequence, an older producer epoch, timestamps out of range. Control
    /// batches other than COMMIT/ABORT are refused even here.
    #[test]
    fn control_and_sequenceless_transactional_batches_are_coordinator_only() {
        use coordinator::{marker, txn};
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            timestamp_before_max_ms: 60_000,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config).unwrap();
        let now = 1_700_000_000_000;
        // A producer's control batch (timestamp in range) is refused as such.
        let control = batch::build_control_batch(0, 0, 9, 0, CONTROL_TYPE_COMMIT, 0, now);
        let e = log
            .append_leader(Bytes::from(control), LeaderEpoch(0), now)
            .unwrap_err();
        assert!(
            matches!(&e, LogError::InvalidRecord(r) if r.contains("control")),
            "{e}"
        );
        let e = log
            .append_leader(Bytes::from(txn(9, 1)), LeaderEpoch(0), now)
            .unwrap_err();
        assert!(matches!(e, LogError::InvalidTimestamp { .. }), "{e}");
        assert_eq!(log.log_end_offset(), Offset(0));
        // Producer 9 at epoch 3 (a producer's batch, sequence 0, timestamp in range).
        let produced = batch::build_batch(
            &batch::BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 0,
                attributes: batch::TRANSACTIONAL_ATTRIBUTES,
                base_timestamp: now,
                producer_id: 9,
                producer_epoch: 3,
                base_sequence: 0,
            },
            &[(None, Some(&b"v"[..]))],
        );
        log.append_leader(Bytes::from(produced), LeaderEpoch(0), now)
            .unwrap(); // 0
        let info = log
            .append_coordinator(
                &[txn(9, 2), marker(9, CONTROL_TYPE_COMMIT)].concat(),
                LeaderEpoch(0),
                now,
            )
            .unwrap(); // 1..=2, 3
        assert_eq!(
            (info.first_offset, info.last_offset),
            (Offset(1), Offset(3))
        );
        log.set_high_watermark(Offset(4));
        assert_eq!(log.last_stable_offset(), Offset(4));
        let p = log.producer_state(ProducerId(9)).unwrap();
        assert_eq!((p.producer_epoch, p.current_txn_first_offset), (0, None));
        // MIRROR_PID_RESET would wipe producer state; a control batch without producer id
        // cannot end a transaction: both refused, nothing written.
        for bad in [
            marker(9, CONTROL_TYPE_MIRROR_PID_RESET),
            marker(-1, CONTROL_TYPE_COMMIT),
        ] {
            let e = log
                .append_coordinator(&bad, LeaderEpoch(0), now)
                .unwrap_err();
            assert!(matches!(e, LogError::InvalidRecord(_)), "{e}");
        }
        assert_eq!(log.log_end_offset(), Offset(4));
    }
}
