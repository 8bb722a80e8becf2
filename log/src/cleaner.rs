//! Log compaction with Kafka's cleaner semantics, for one partition.
//!
//! Owns: the offset map (key -> latest offset over the dirty section), the per-batch and
//! per-record retention decisions, the rewriting of cleaned segments into `<base>.log.cleaned`
//! files, and the cleaner checkpoint (first dirty offset). The swap of a cleaned file into the
//! log is [`crate::Log::install_cleaned`]'s job, on the log's owning thread.
//! Must not depend on: any runtime. A [`CleanJob`] holds only immutable inputs (zero-copy
//! slices of sealed segments, copies of producer/transaction facts) so it can run on any
//! thread while the log keeps serving; it writes only files named `*.log.cleaned`.
//!
//! Semantics (Kafka 4.x `Cleaner`, `CleanedTransactionMetadata`, KIP-534 delete horizons):
//! - The cleanable range is whole non-active segments below the first uncleanable offset:
//!   min(active segment base, LSO, first segment holding a record newer than
//!   min.compaction.lag.ms). Every cleanable segment, from the log start, is rewritten each
//!   pass; the offset map covers only the dirty part (from the checkpoint on).
//! - A keyed record survives if it is the latest for its key (offset >= the map's) and has a
//!   value, or is a tombstone whose batch has no delete horizon yet or one still in the future.
//!   Keyless records are dropped (Kafka refuses them on compacted topics).
//! - A batch holding a surviving tombstone, or a marker of a transaction with no data left,
//!   gets a delete horizon (now + delete.retention.ms) the first time it is cleaned: attribute
//!   bit 0x40 and baseTimestamp = horizon (record timestamp deltas are re-based, so record
//!   timestamps are unchanged). A later pass past the horizon removes them.
//! - Aborted transactional data is removed; an abort marker stays while data of its
//!   transaction remains, a commit marker while batches of its transaction remain, then until
//!   its delete horizon.
//! - Offsets are preserved: a rewritten batch keeps baseOffset, lastOffsetDelta, producer
//!   fields, partitionLeaderEpoch and codec; only records are removed (gaps). A batch whose
//!   records all go is dropped, except (kept empty, no records, no codec) the last batch of
//!   each active producer (its sequence/epoch state must survive a restart, which rebuilds
//!   producer state from the log) and the last batch of each output segment (so it keeps
//!   its offset range: recovery and lookups see the same segment bounds).
//! - Like Kafka's groupSegmentsBySize, consecutive cleaned segments are written into one
//!   output segment while their inputs fit segment.bytes and one segment's relative offsets.
//!   The group's swap is crash-safe: the fsynced output is renamed `<base>.log.swap`, the
//!   group's later segments are deleted, the swap file is renamed over `<base>.log`; open
//!   finishes a swap a crash interrupted ([`complete_swap`]).
//! - Batches are re-encoded only here, and only when something changes; an unchanged batch is
//!   copied byte for byte, an unchanged segment is not rewritten at all.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::batch::{
    self, read_varint, write_varint, BatchHeader, BatchIter, COMPRESSION_MASK, CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT, DELETE_HORIZON_MASK, HEADER_SIZE, LOG_OVERHEAD,
};
use crate::checkpoint::write_atomic;
use crate::segment::file_name;
use crate::LogError;

pub(crate) const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
pub(crate) const CLEANED_SUFFIX: &str = ".log.cleaned";
/// A complete cleaned file about to replace a group of segments; finished by open after a
/// crash (see [`complete_swap`]).
pub(crate) const SWAP_SUFFIX: &str = ".log.swap";
/// Soft bound on the key bytes an offset map holds; past it the pass ends after the current
/// segment (Kafka bounds its map by log.cleaner.dedupe.buffer.size the same way).
const MAP_KEY_BYTES: usize = 128 << 20;

/// A segment handed to the cleaner.
pub(crate) struct SegmentInput {
    pub(crate) base: i64,
    /// Zero-copy slice of the sealed segment's valid bytes.
    pub(crate) data: Bytes,
}

/// What the cleaner must keep of a producer (Kafka's lastRecordsOfActiveProducers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LastRecord {
    pub(crate) last_data_offset: Option<i64>,
    pub(crate) epoch: i16,
}

/// One cleaning pass, ready to run anywhere (see the module doc).
pub struct CleanJob {
    pub(crate) dir: PathBuf,
    pub(crate) segments: Vec<SegmentInput>,
    /// First dirty offset: the offset map starts here.
    pub(crate) map_start: i64,
    /// First uncleanable offset (end of the last cleanable segment).
    pub(crate) end: i64,
    /// Aborted transactions (producer id, first offset, marker offset).
    pub(crate) aborted: Vec<(i64, i64, i64)>,
    pub(crate) last_records: HashMap<i64, LastRecord>,
    pub(crate) now_ms: i64,
    pub(crate) delete_retention_ms: i64,
    pub(crate) max_decompressed: usize,
    /// The log's truncation generation when the job was made; a different one at install
    /// time means the segments may not be the ones cleaned.
    pub(crate) generation: u64,
    /// segment.bytes: cleaned segments are grouped up to this size.
    pub(crate) segment_bytes: u64,
}

/// A cleaned segment waiting to be swapped in.
pub(crate) struct Replacement {
    /// Base offset of the output (the group's first segment).
    pub(crate) base: i64,
    /// (base, size) of each input segment, in order.
    pub(crate) old: Vec<(i64, usize)>,
    pub(crate) path: PathBuf,
}

/// The result of [`CleanJob::run`], to be given to [`crate::Log::install_cleaned`].
pub struct Cleaned {
    pub(crate) generation: u64,
    pub(crate) replaced: Vec<Replacement>,
    /// New first dirty offset.
    pub(crate) end: i64,
    pub stats: CleanStats,
}

impl Cleaned {
    /// Deletes the cleaned files (a pass that will not be installed).
    pub fn discard(self) {
        for r in self.replaced {
            let _ = fs::remove_file(r.path);
        }
    }
}

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CleanStats {
    /// Segments rewritten (an unchanged segment is not).
    pub segments_rewritten: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_kept: u64,
    /// Distinct keys in the offset map.
    pub keys: usize,
}

/// Decides which batches belong to aborted transactions and when markers may go (Kafka's
/// CleanedTransactionMetadata). Aborted transactions are known by (pid, first, marker) so a
/// stale entry (data and marker already cleaned away) never captures later batches.
struct TxnTracker {
    pending: VecDeque<(i64, i64, i64)>,
    /// pid -> (marker offset, whether a data batch of the transaction was seen).
    ongoing_aborted: HashMap<i64, (i64, bool)>,
    ongoing_committed: HashSet<i64>,
}

impl TxnTracker {
    fn new(aborted: &[(i64, i64, i64)]) -> Self {
        let mut v = aborted.to_vec();
        v.sort_by_key(|a| a.1);
        TxnTracker {
            pending: v.into(),
            ongoing_aborted: HashMap::new(),
            ongoing_committed: HashSet::new(),
        }
    }

    fn consume_up_to(&mut self, offset: i64) {
        while self.pending.front().is_some_and(|a| a.1 <= offset) {
            let (pid, _, marker) = self.pending.pop_front().expect("front");
            if marker >= offset {
                self.ongoing_aborted.entry(pid).or_insert((marker, false));
            }
        }
    }

    /// True if the data batch belongs to an aborted transaction.
    fn on_batch(&mut self, h: &BatchHeader<'_>) -> bool {
        self.consume_up_to(h.last_offset());
        if !h.is_transactional() {
            return false;
        }
        let pid = h.producer_id();
        match self.ongoing_aborted.get_mut(&pid) {
            Some((marker, seen)) if h.base_offset() < *marker => {
                *seen = true;
                true
            }
            stale => {
                if stale.is_some() {
                    self.ongoing_aborted.remove(&pid);
                }
                self.ongoing_committed.insert(pid);
                false
            }
        }
    }

    /// True if the control batch may be discarded (no data of its transaction remains).
    fn on_control(&mut self, h: &BatchHeader<'_>, bytes: &[u8]) -> bool {
        self.consume_up_to(h.last_offset());
        let Some((ctype, _)) = batch::control_record(bytes) else {
            // An empty control batch was cleaned before.
            return h.records_count() == 0;
        };
        let pid = h.producer_id();
        match ctype {
            CONTROL_TYPE_ABORT => match self.ongoing_aborted.remove(&pid) {
                Some((_, seen)) => !seen,
                None => true,
            },
            CONTROL_TYPE_COMMIT => !self.ongoing_committed.remove(&pid),
            _ => false,
        }
    }
}

/// One record of a decompressed records section.
struct Rec<'a> {
    /// The whole record, length prefix included.
    raw: &'a [u8],
    attributes: u8,
    ts_delta: i64,
    /// The record's bytes after its timestamp delta (offset delta, key, value, headers).
    after_ts: &'a [u8],
    offset_delta: i64,
    key: Option<&'a [u8]>,
    has_value: bool,
}

/// The indexes (in the batch) of a (validated) producer batch's records that have no key:
/// Kafka refuses them on compacted topics. Compressed batches are decompressed under
/// `max_decompressed`. An unparsable section counts as all keyless (validation ran first, so
/// it cannot happen).
pub(crate) fn keyless_indexes(
    batch_bytes: &[u8],
    max_decompressed: usize,
) -> Result<Vec<i32>, batch::BatchError> {
    let raw = batch::decompress_records(batch_bytes, max_decompressed)?;
    Ok(match parse_records(&raw) {
        Some(recs) => recs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.key.is_none())
            .map(|(i, _)| i as i32)
            .collect(),
        None => vec![0],
    })
}

fn parse_records(section: &[u8]) -> Option<Vec<Rec<'_>>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < section.len() {
        let (len, n) = read_varint(&section[pos..])?;
        let start = pos + n;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        let rec = section.get(start..end)?;
        let attributes = *rec.first()?;
        let (ts_delta, n1) = read_varint(rec.get(1..)?)?;
        let after = 1 + n1;
        let (offset_delta, n2) = read_varint(rec.get(after..)?)?;
        let mut p = after + n2;
        let (klen, n3) = read_varint(rec.get(p..)?)?;
        p += n3;
        let key = if klen >= 0 {
            let k = rec.get(p..p.checked_add(usize::try_from(klen).ok()?)?)?;
            p += k.len();
            Some(k)
        } else {
            None
        };
        let (vlen, _) = read_varint(rec.get(p..)?)?;
        out.push(Rec {
            raw: &section[pos..end],
            attributes,
            ts_delta,
            after_ts: &rec[after..],
            offset_delta,
            key,
            has_value: vlen >= 0,
        });
        pos = end;
    }
    Some(out)
}

fn corrupt(offset: i64, e: impl std::fmt::Display) -> LogError {
    LogError::corrupt(Some(offset), e)
}

/// Writes a v2 batch with `h`'s offsets and producer fields and the given parts.
fn write_batch(
    out: &mut Vec<u8>,
    h: &BatchHeader<'_>,
    attributes: i16,
    base_ts: i64,
    max_ts: i64,
    count: i32,
    section: &[u8],
) {
    let start = out.len();
    out.extend_from_slice(&h.base_offset().to_be_bytes());
    out.extend_from_slice(&((HEADER_SIZE - LOG_OVERHEAD + section.len()) as i32).to_be_bytes());
    out.extend_from_slice(&h.partition_leader_epoch().to_be_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&h.last_offset_delta().to_be_bytes());
    out.extend_from_slice(&base_ts.to_be_bytes());
    out.extend_from_slice(&max_ts.to_be_bytes());
    out.extend_from_slice(&h.producer_id().to_be_bytes());
    out.extend_from_slice(&h.producer_epoch().to_be_bytes());
    out.extend_from_slice(&h.base_sequence().to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(section);
    let crc = crc32c::crc32c(&out[start + batch::ATTRIBUTES_POS..]);
    out[start + batch::CRC_POS..start + batch::CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Kafka's empty batch: header only, no codec, timestamps = the batch's max timestamp.
fn write_empty_batch(out: &mut Vec<u8>, h: &BatchHeader<'_>) {
    let attrs = h.attributes() & !(COMPRESSION_MASK | DELETE_HORIZON_MASK);
    let ts = h.max_timestamp();
    write_batch(out, h, attrs, ts, ts, 0, &[]);
}

fn horizon_of(h: &BatchHeader<'_>) -> Option<i64> {
    (h.attributes() & DELETE_HORIZON_MASK != 0).then(|| h.base_timestamp())
}

impl CleanJob {
    /// Builds the offset map and writes a `.cleaned` file (fsynced) for every segment that
    /// changes. Reads only the job's inputs; safe on any thread.
    pub fn run(self) -> Result<Cleaned, LogError> {
        self.run_throttled(&mut |_| {})
    }

    /// [`CleanJob::run`], calling `throttle` with the bytes of each batch read and each file
    /// written (the caller may sleep in it to hold an I/O rate).
    pub fn run_throttled(self, throttle: &mut dyn FnMut(usize)) -> Result<Cleaned, LogError> {
        let mut stats = CleanStats::default();
        let (map, end) = self.build_map(throttle)?;
        stats.keys = map.len();
        let mut replaced = Vec::new();
        let res = self.clean_segments(&map, end, &mut stats, &mut replaced, throttle);
        if let Err(e) = res {
            for r in replaced {
                let _ = fs::remove_file(r.path);
            }
            return Err(e);
        }
        Ok(Cleaned {
            generation: self.generation,
            replaced,
            end,
            stats,
        })
    }

    fn records_of(&self, h: &BatchHeader<'_>, bytes: &[u8]) -> Result<Vec<u8>, LogError> {
        batch::decompress_records(bytes, self.max_decompressed)
            .map_err(|e| corrupt(h.base_offset(), e))
    }

    /// key -> latest offset over [map_start, end of the mapped segments); aborted data and
    /// control batches are not mapped. Returns the map and the end of the cleanable range.
    fn build_map(
        &self,
        throttle: &mut dyn FnMut(usize),
    ) -> Result<(HashMap<Vec<u8>, i64>, i64), LogError> {
        let mut map: HashMap<Vec<u8>, i64> = HashMap::new();
        let mut key_bytes = 0usize;
        let mut txn = TxnTracker::new(&self.aborted);
        let mut end = self.map_start;
        for (i, seg) in self.segments.iter().enumerate() {
            let seg_end = self.segments.get(i + 1).map_or(self.end, |s| s.base);
            if seg_end <= self.map_start {
                continue;
            }
            if key_bytes > MAP_KEY_BYTES {
                break;
            }
            for r in BatchIter::headers(&seg.data) {
                let (h, s, e) = r.map_err(|e| corrupt(seg.base, e))?;
                let bytes = &seg.data[s..e];
                throttle(bytes.len());
                if h.is_control() {
                    txn.on_control(&h, bytes);
                    continue;
                }
                if txn.on_batch(&h) || h.last_offset() < self.map_start || h.records_count() == 0 {
                    continue;
                }
                let raw = self.records_of(&h, bytes)?;
                let recs = parse_records(&raw)
                    .ok_or_else(|| corrupt(h.base_offset(), "malformed records"))?;
                for r in recs {
                    let off = h.base_offset() + r.offset_delta;
                    if let (Some(k), true) = (r.key, off >= self.map_start) {
                        match map.get_mut(k) {
                            Some(o) => *o = off,
                            None => {
                                key_bytes += k.len();
                                map.insert(k.to_vec(), off);
                            }
                        }
                    }
                }
            }
            end = seg_end;
        }
        Ok((map, end))
    }

    fn clean_segments(
        &self,
        map: &HashMap<Vec<u8>, i64>,
        end: i64,
        stats: &mut CleanStats,
        replaced: &mut Vec<Replacement>,
        throttle: &mut dyn FnMut(usize),
    ) -> Result<(), LogError> {
        let mut txn = TxnTracker::new(&self.aborted);
        let segs: Vec<&SegmentInput> = self.segments.iter().take_while(|s| s.base < end).collect();
        let mut i = 0;
        while i < segs.len() {
            // Kafka's groupSegmentsBySize: consecutive segments whose inputs fit segment.bytes
            // and one segment's relative offsets become one output segment.
            let mut j = i + 1;
            let mut size = segs[i].data.len() as u64;
            while j < segs.len() {
                let next_end = segs.get(j + 1).map_or(end, |s| s.base);
                if size + segs[j].data.len() as u64 > self.segment_bytes
                    || next_end - 1 - segs[i].base > i32::MAX as i64
                {
                    break;
                }
                size += segs[j].data.len() as u64;
                j += 1;
            }
            let group = &segs[i..j];
            i = j;
            let base = group[0].base;
            let path = self
                .dir
                .join(format!("{}{}", file_name(base, ""), CLEANED_SUFFIX));
            // Written as it is produced (a group is up to segment.bytes); a lone segment that
            // comes out unchanged is not swapped (its partial output is dropped).
            let mut sink = Sink {
                path: &path,
                file: None,
                buf: Vec::with_capacity(SINK_CHUNK),
                written: 0,
            };
            let mut changed = group.len() > 1;
            let res = (|| -> Result<(), LogError> {
                for (gi, seg) in group.iter().enumerate() {
                    let batches: Vec<_> = BatchIter::headers(&seg.data)
                        .collect::<Result<_, _>>()
                        .map_err(|e| corrupt(seg.base, e))?;
                    let n = batches.len();
                    for (bi, &(h, s, e)) in batches.iter().enumerate() {
                        throttle(e - s);
                        let last = gi + 1 == group.len() && bi + 1 == n;
                        changed |= self.clean_batch(
                            &seg.data[s..e],
                            &h,
                            last,
                            map,
                            &mut txn,
                            stats,
                            &mut sink.buf,
                        )?;
                        if sink.buf.len() >= SINK_CHUNK {
                            throttle(sink.buf.len());
                            sink.flush()?;
                        }
                    }
                    stats.bytes_read += seg.data.len() as u64;
                }
                if changed {
                    throttle(sink.buf.len());
                    sink.finish()?;
                }
                Ok(())
            })();
            if res.is_err() || !changed {
                drop(sink.file.take());
                let _ = fs::remove_file(&path);
                res?;
                continue;
            }
            stats.bytes_written += sink.written;
            stats.segments_rewritten += group.len();
            replaced.push(Replacement {
                base,
                old: group.iter().map(|s| (s.base, s.data.len())).collect(),
                path,
            });
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn clean_batch(
        &self,
        bytes: &[u8],
        h: &BatchHeader<'_>,
        last_in_segment: bool,
        map: &HashMap<Vec<u8>, i64>,
        txn: &mut TxnTracker,
        stats: &mut CleanStats,
        out: &mut Vec<u8>,
    ) -> Result<bool, LogError> {
        let now = self.now_ms;
        let horizon = horizon_of(h);
        let control = h.is_control();
        let can_discard = if control {
            txn.on_control(h, bytes)
        } else {
            txn.on_batch(h)
        };
        let discard_records = if control {
            can_discard && horizon.is_some_and(|t| t <= now)
        } else {
            can_discard
        };
        let last_of_producer = h.has_producer_id()
            && self.last_records.get(&h.producer_id()).is_some_and(|lr| {
                match lr.last_data_offset {
                    Some(o) => h.last_offset() == o,
                    None => control && h.producer_epoch() == lr.epoch,
                }
            });
        let retain_empty = last_of_producer || last_in_segment;
        let count = h.records_count();
        stats.records_read += count.max(0) as u64;
        if count == 0 {
            // Already empty (cleaned before): kept only where an empty batch must be.
            if retain_empty {
                out.extend_from_slice(bytes);
            }
            return Ok(!retain_empty);
        }
        if discard_records {
            if retain_empty {
                write_empty_batch(out, h);
            }
            return Ok(true);
        }
        let raw = self.records_of(h, bytes)?;
        let recs =
            parse_records(&raw).ok_or_else(|| corrupt(h.base_offset(), "malformed records"))?;
        let keep_deletes = horizon.is_none_or(|t| now < t);
        let kept: Vec<&Rec<'_>> = recs
            .iter()
            .filter(|r| {
                if control {
                    return true;
                }
                let Some(k) = r.key else { return false };
                let off = h.base_offset() + r.offset_delta;
                let latest = map.get(k).is_none_or(|&o| off >= o);
                latest && (r.has_value || keep_deletes)
            })
            .collect();
        stats.records_kept += kept.len() as u64;
        let tombstones = !control && kept.iter().any(|r| !r.has_value);
        let needs_horizon = (tombstones || (control && can_discard)) && horizon.is_none();
        if kept.len() == recs.len() && !needs_horizon {
            out.extend_from_slice(bytes);
            return Ok(false);
        }
        if kept.is_empty() {
            if retain_empty {
                write_empty_batch(out, h);
            }
            return Ok(true);
        }
        let old_base = h.base_timestamp();
        let new_horizon = if needs_horizon {
            Some(now.saturating_add(self.delete_retention_ms))
        } else {
            horizon
        };
        let base_ts = new_horizon.unwrap_or(old_base);
        let mut section = Vec::with_capacity(raw.len());
        let mut max_ts = i64::MIN;
        for r in &kept {
            let ts = old_base.wrapping_add(r.ts_delta);
            max_ts = max_ts.max(ts);
            if base_ts == old_base {
                section.extend_from_slice(r.raw);
            } else {
                let mut body = Vec::with_capacity(r.raw.len() + 8);
                body.push(r.attributes);
                write_varint(&mut body, ts.wrapping_sub(base_ts));
                body.extend_from_slice(r.after_ts);
                write_varint(&mut section, body.len() as i64);
                section.extend_from_slice(&body);
            }
        }
        if h.is_log_append_time() {
            max_ts = h.max_timestamp();
        }
        let compressed = batch::compress_records(h.compression(), &section)?;
        let mut attrs = h.attributes();
        if new_horizon.is_some() {
            attrs |= DELETE_HORIZON_MASK;
        }
        write_batch(
            out,
            h,
            attrs,
            base_ts,
            max_ts,
            kept.len() as i32,
            &compressed,
        );
        Ok(true)
    }
}

const SINK_CHUNK: usize = 4 << 20;

/// A cleaned file being written: batches accumulate in `buf` and go to the file in chunks.
struct Sink<'a> {
    path: &'a Path,
    file: Option<File>,
    buf: Vec<u8>,
    written: u64,
}

impl Sink<'_> {
    fn flush(&mut self) -> io::Result<()> {
        if self.file.is_none() {
            self.file = Some(File::create(self.path)?);
        }
        let f = self.file.as_mut().expect("created");
        f.write_all(&self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes the rest and fsyncs (the caller removes the file on error: ENOSPC must not
    /// leave a partial file holding space).
    fn finish(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.as_mut().expect("created").sync_all()
    }
}

/// Reads the first dirty offset (None if missing or unreadable: the whole log is dirty).
/// Finishes a group swap a crash interrupted: the `<base>.log.swap` file (complete: it was
/// fsynced before being renamed to that name) replaces every segment whose base lies in
/// [base, its end offset).
pub(crate) fn complete_swap(dir: &Path, base: i64) -> io::Result<()> {
    let swap = dir.join(format!("{}{}", file_name(base, ""), SWAP_SUFFIX));
    let data = fs::read(&swap)?;
    let end = BatchIter::headers(&data)
        .map_while(Result::ok)
        .last()
        .map_or(base, |(h, ..)| h.next_offset());
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(b) = name
            .to_str()
            .and_then(|n| crate::segment::parse_base(n, crate::segment::LOG_SUFFIX))
        else {
            continue;
        };
        if b > base && b < end {
            for suffix in [
                crate::segment::LOG_SUFFIX,
                crate::segment::INDEX_SUFFIX,
                crate::segment::TIME_INDEX_SUFFIX,
            ] {
                match fs::remove_file(dir.join(file_name(b, suffix))) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
    }
    fs::rename(&swap, dir.join(file_name(base, crate::segment::LOG_SUFFIX)))?;
    crate::checkpoint::sync_dir(dir)
}

pub(crate) fn read_checkpoint(dir: &Path) -> Option<i64> {
    let text = fs::read_to_string(dir.join(CLEANER_CHECKPOINT_FILE)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "kmirror-cleaner-checkpoint 1" {
        return None;
    }
    lines.next()?.strip_prefix("first_dirty ")?.parse().ok()
}

pub(crate) fn write_checkpoint(dir: &Path, first_dirty: i64) -> io::Result<()> {
    write_atomic(
        dir,
        CLEANER_CHECKPOINT_FILE,
        format!("kmirror-cleaner-checkpoint 1\nfirst_dirty {first_dirty}\n").as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::Bytes;
    use kmirror_types::{LeaderEpoch, Offset, ProducerId};
    use proptest::prelude::*;

    use super::*;
    use crate::batch::{build_batch, BatchSpec, Compression, TRANSACTIONAL_ATTRIBUTES};
    use crate::{CompactionConfig, ControlKind, Log, LogConfig};

    const DAY: i64 = 86_400_000;

    fn config() -> LogConfig {
        LogConfig {
            segment_ms: None,
            retention_ms: None,
            index_interval_bytes: 128,
            compaction: Some(CompactionConfig {
                min_cleanable_dirty_ratio: 0.0,
                delete_retention_ms: DAY as u64,
                ..CompactionConfig::default()
            }),
            ..LogConfig::default()
        }
    }

    /// A producer batch of keyed records (None value = tombstone), optionally compressed.
    fn keyed(
        recs: &[(String, Option<String>)],
        codec: Compression,
        ts: i64,
        pid: (i64, i16, i32),
        attributes: i16,
    ) -> Bytes {
        let kv: Vec<batch::KeyValue<'_>> = recs
            .iter()
            .map(|(k, v)| (Some(k.as_bytes()), v.as_ref().map(|v| v.as_bytes())))
            .collect();
        let plain = build_batch(
            &BatchSpec {
                base_offset: 0,
                partition_leader_epoch: 0,
                attributes,
                base_timestamp: ts,
                producer_id: pid.0,
                producer_epoch: pid.1,
                base_sequence: pid.2,
            },
            &kv,
        );
        if codec == Compression::None {
            return Bytes::from(plain);
        }
        let h = BatchHeader::parse(&plain).unwrap();
        let section = batch::compress_records(codec, &plain[HEADER_SIZE..]).unwrap();
        let code = match codec {
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            _ => 4,
        };
        let mut out = Vec::new();
        write_batch(
            &mut out,
            &h,
            attributes | code,
            ts,
            ts,
            h.records_count(),
            &section,
        );
        Bytes::from(out)
    }

    type Row = (i64, Option<Vec<u8>>, Option<Vec<u8>>, i64);

    /// Every record of the log (offset, key, value, timestamp), read as a consumer would.
    fn dump(log: &Log) -> Vec<Row> {
        let mut rows = Vec::new();
        let end = log.log_end_offset();
        let mut at = log.log_start_offset();
        while at < end {
            let r = log.read(at, 1 << 20, end).unwrap();
            if r.records.is_empty() {
                break;
            }
            for b in BatchIter::validating(&r.records) {
                let (h, s, e) = b.unwrap();
                let bytes = &r.records[s..e];
                at = Offset(h.next_offset());
                if h.is_control() || h.records_count() == 0 {
                    continue;
                }
                let raw = batch::decompress_records(bytes, 1 << 26).unwrap();
                let base_ts = h.base_timestamp();
                for rec in parse_records(&raw).unwrap() {
                    let off = h.base_offset() + rec.offset_delta;
                    let value = rec.has_value.then(|| {
                        // Value: after the key in `after_ts`; decode via the log's own helper.
                        let mut p = read_varint(rec.after_ts).unwrap().1;
                        let (kl, n) = read_varint(&rec.after_ts[p..]).unwrap();
                        p += n + kl.max(0) as usize;
                        let (vl, n) = read_varint(&rec.after_ts[p..]).unwrap();
                        rec.after_ts[p + n..p + n + vl as usize].to_vec()
                    });
                    rows.push((
                        off,
                        rec.key.map(<[u8]>::to_vec),
                        value,
                        base_ts + rec.ts_delta,
                    ));
                }
            }
        }
        rows
    }

    /// Kafka's outcome for records below `end` (all cleaned once, horizon not passed): the
    /// latest record of each key, tombstones included; records from `end` on untouched.
    /// `horizon_passed`: tombstones below it were cleaned before and are past their horizon.
    fn expected(all: &[Row], end: i64, horizon_passed: i64) -> Vec<Row> {
        let mut latest: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for r in all.iter().filter(|r| r.0 < end) {
            latest.insert(r.1.clone().unwrap(), r.0);
        }
        all.iter()
            .filter(|r| {
                r.0 >= end
                    || (latest[r.1.as_ref().unwrap()] == r.0
                        && (r.2.is_some() || r.0 >= horizon_passed))
            })
            .cloned()
            .collect()
    }

    fn codec(i: u8) -> Compression {
        [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ][i as usize % 5]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Cleaning keeps every offset it keeps, the latest record per key (tombstones until
        /// their horizon), everything in the active segment, and survives a reopen.
        #[test]
        fn cleaning_keeps_the_latest_value_per_key_at_its_offset(
            batches in prop::collection::vec(
                (prop::collection::vec((0u8..12, prop::option::weighted(0.8, 0u16..1000)), 1..6),
                 0u8..5, any::<bool>()),
                4..30),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), config()).unwrap();
            let now = 1_000_000;
            for (i, (recs, c, roll)) in batches.iter().enumerate() {
                let recs: Vec<_> = recs
                    .iter()
                    .map(|(k, v)| (format!("k{k}"), v.map(|v| format!("v{v}-{i}"))))
                    .collect();
                log.append_leader(keyed(&recs, codec(*c), now + i as i64, (-1, -1, -1), 0),
                    LeaderEpoch(0), now).unwrap();
                if *roll {
                    log.roll().unwrap();
                }
            }
            log.set_high_watermark(log.log_end_offset());
            let before = dump(&log);
            let end = log.segments.keys().next_back().copied().unwrap();
            log.clean(now).unwrap();
            let after = dump(&log);
            prop_assert_eq!(&after, &expected(&before, end, 0));
            // Past the delete horizon a second pass removes the tombstones.
            log.roll().unwrap();
            let end2 = log.segments.keys().next_back().copied().unwrap();
            log.set_high_watermark(log.log_end_offset());
            // Nothing new is dirty: force a pass by resetting the checkpoint.
            log.first_dirty = 0;
            log.clean(now + DAY + 1).unwrap();
            prop_assert_eq!(dump(&log), expected(&before, end2, end));
            let after2 = dump(&log);
            let leo = log.log_end_offset();
            log.close().unwrap();
            let log = Log::open(dir.path(), config()).unwrap();
            prop_assert_eq!(log.log_end_offset(), leo);
            prop_assert_eq!(dump(&log), after2);
        }
    }

    #[test]
    fn a_reader_holding_old_bytes_still_reads_them_after_a_swap() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        for i in 0..50 {
            let recs = vec![(format!("k{}", i % 3), Some(format!("v{i}")))];
            log.append_leader(
                keyed(&recs, Compression::None, 1000 + i, (-1, -1, -1), 0),
                LeaderEpoch(0),
                1000,
            )
            .unwrap();
        }
        log.roll().unwrap();
        log.append_leader(
            keyed(
                &[("k0".into(), Some("x".into()))],
                Compression::None,
                2000,
                (-1, -1, -1),
                0,
            ),
            LeaderEpoch(0),
            2000,
        )
        .unwrap();
        log.set_high_watermark(log.log_end_offset());
        let held = log.read(Offset(0), 1 << 20, Offset(50)).unwrap().records;
        let copy = held.to_vec();
        let stats = log.clean(3000).unwrap().unwrap();
        assert_eq!(stats.segments_rewritten, 1);
        assert_eq!(&held[..], &copy[..], "old slice unchanged after the swap");
        let rows = dump(&log);
        // k1 (47..) and k2 (48..) latest of the first segment, k0's latest there is 48? -> 49
        let offsets: Vec<i64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(offsets, vec![47, 48, 49, 50]);
        assert!(log.size_bytes() < copy.len() as u64);
    }

    fn txn_batch(pid: i64, seq: i32, recs: &[(&str, &str)]) -> Bytes {
        let recs: Vec<_> = recs
            .iter()
            .map(|(k, v)| (k.to_string(), Some(v.to_string())))
            .collect();
        keyed(
            &recs,
            Compression::None,
            5000,
            (pid, 0, seq),
            TRANSACTIONAL_ATTRIBUTES,
        )
    }

    #[test]
    fn aborted_data_goes_and_markers_go_once_their_data_is_gone_and_the_horizon_passed() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        let now = 10_000;
        // pid 7 aborts (a, b), pid 8 commits (c), pid 7 then commits (a) in a new txn.
        log.append_leader(
            txn_batch(7, 0, &[("a", "aborted"), ("b", "aborted")]),
            LeaderEpoch(0),
            now,
        )
        .unwrap();
        log.append_leader(txn_batch(8, 0, &[("c", "committed")]), LeaderEpoch(0), now)
            .unwrap();
        log.append_control(ControlKind::Abort, ProducerId(7), 0, 0, LeaderEpoch(0), now)
            .unwrap();
        log.append_control(
            ControlKind::Commit,
            ProducerId(8),
            0,
            0,
            LeaderEpoch(0),
            now,
        )
        .unwrap();
        log.append_leader(txn_batch(7, 2, &[("a", "second")]), LeaderEpoch(0), now)
            .unwrap();
        log.append_control(
            ControlKind::Commit,
            ProducerId(7),
            0,
            0,
            LeaderEpoch(0),
            now,
        )
        .unwrap();
        // Non-transactional updates so the transactional batches are not the producers' last.
        log.append_leader(
            keyed(
                &[("c".into(), Some("plain".into()))],
                Compression::None,
                now,
                (9, 0, 0),
                0,
            ),
            LeaderEpoch(0),
            now,
        )
        .unwrap();
        log.append_leader(
            keyed(
                &[("z".into(), Some("end".into()))],
                Compression::None,
                now,
                (-1, -1, -1),
                0,
            ),
            LeaderEpoch(0),
            now,
        )
        .unwrap();
        log.roll().unwrap();
        log.append_leader(
            keyed(
                &[("y".into(), Some("active".into()))],
                Compression::None,
                now,
                (-1, -1, -1),
                0,
            ),
            LeaderEpoch(0),
            now,
        )
        .unwrap();
        log.set_high_watermark(log.log_end_offset());
        // Offsets: 0-1 aborted, 2 c, 3 abort marker, 4 commit marker(8), 5 a, 6 commit(7),
        // 7 c plain, 8 z, 9 y (active).
        let controls = |log: &Log| -> Vec<i64> {
            let r = log.read(Offset(0), 1 << 20, log.log_end_offset()).unwrap();
            BatchIter::headers(&r.records)
                .map(Result::unwrap)
                .filter(|(h, ..)| h.is_control() && h.records_count() > 0)
                .map(|(h, ..)| h.base_offset())
                .collect()
        };
        log.clean(now).unwrap();
        let kv = |log: &Log| -> Vec<(i64, String)> {
            dump(log)
                .into_iter()
                .map(|r| (r.0, String::from_utf8(r.2.unwrap()).unwrap()))
                .collect()
        };
        // pid 7's aborted batch is its... not last: its last data is offset 5. Aborted data
        // gone; superseded c (2) gone; markers stay while their txns' batches were seen.
        assert_eq!(
            kv(&log),
            vec![
                (5, "second".into()),
                (7, "plain".into()),
                (8, "end".into()),
                (9, "active".into())
            ]
        );
        assert_eq!(controls(&log), vec![3, 4, 6]);
        // Second pass: no data of pid 8's txn left and no aborted data left: those markers get
        // a horizon; pid 7's commit still has its data (offset 5).
        log.first_dirty = 0;
        log.clean(now + 1).unwrap();
        assert_eq!(controls(&log), vec![3, 4, 6]);
        log.first_dirty = 0;
        log.clean(now + DAY + 2).unwrap();
        // The abort marker goes. pid 8's commit marker stays, as in Kafka: pid 8's last data
        // batch (offset 2) is kept empty to preserve its sequence state, and a batch of the
        // transaction still in the log keeps its marker.
        assert_eq!(controls(&log), vec![4, 6]);
        assert_eq!(
            kv(&log),
            vec![
                (5, "second".into()),
                (7, "plain".into()),
                (8, "end".into()),
                (9, "active".into())
            ]
        );
        // The producer state rebuilt from the cleaned log keeps pid 7's and 8's epochs.
        log.close().unwrap();
        let log = Log::open(dir.path(), config()).unwrap();
        assert_eq!(log.producer_state(ProducerId(7)).unwrap().producer_epoch, 0);
        assert!(log.producer_state(ProducerId(9)).is_some());
        assert_eq!(log.log_end_offset(), Offset(10));
    }

    #[test]
    fn a_compacted_log_refuses_keyless_records_of_any_codec() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        for c in 0..5 {
            let plain = build_batch(
                &BatchSpec {
                    base_offset: 0,
                    partition_leader_epoch: 0,
                    attributes: 0,
                    base_timestamp: 1,
                    producer_id: -1,
                    producer_epoch: -1,
                    base_sequence: -1,
                },
                &[(Some(b"k"), Some(b"v")), (None, Some(b"v"))],
            );
            let b = if c == 0 {
                Bytes::from(plain)
            } else {
                let h = BatchHeader::parse(&plain).unwrap();
                let section = batch::compress_records(codec(c), &plain[HEADER_SIZE..]).unwrap();
                let mut out = Vec::new();
                write_batch(&mut out, &h, c as i16, 1, 1, 2, &section);
                Bytes::from(out)
            };
            let e = log.append_leader(b, LeaderEpoch(0), 1).unwrap_err();
            // Only the keyless record (index 1) is named (KIP-467).
            assert!(
                matches!(&e, LogError::KeylessRecords { keyless, bad_timestamps }
                    if keyless == &[1] && bad_timestamps.is_empty()),
                "{e}"
            );
        }
        assert_eq!(log.log_end_offset(), Offset(0));
        let keyed_ok = keyed(
            &[("k".into(), Some("v".into()))],
            Compression::Zstd,
            1,
            (-1, -1, -1),
            0,
        );
        log.append_leader(keyed_ok, LeaderEpoch(0), 1).unwrap();
    }

    fn many_segments(dir: &Path) -> Log {
        let mut log = Log::open(dir, config()).unwrap();
        for i in 0..40 {
            let recs = vec![(format!("k{}", i % 4), Some(format!("v{i}")))];
            log.append_leader(
                keyed(&recs, Compression::None, 1000 + i, (-1, -1, -1), 0),
                LeaderEpoch(0),
                1000,
            )
            .unwrap();
            if i % 5 == 4 {
                log.roll().unwrap();
            }
        }
        log.append_leader(
            keyed(
                &[("k9".into(), Some("tail".into()))],
                Compression::None,
                2000,
                (-1, -1, -1),
                0,
            ),
            LeaderEpoch(0),
            2000,
        )
        .unwrap();
        log.set_high_watermark(log.log_end_offset());
        log
    }

    #[test]
    fn small_cleaned_segments_are_grouped_into_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = many_segments(dir.path());
        assert_eq!(log.segment_count(), 9);
        let before = dump(&log);
        log.clean(3000).unwrap().unwrap();
        assert_eq!(
            log.segment_count(),
            2,
            "8 cleaned segments grouped into 1, + active"
        );
        let after = dump(&log);
        assert_eq!(after, expected(&before, 40, 0));
        log.close().unwrap();
        let log = Log::open(dir.path(), config()).unwrap();
        assert_eq!((log.segment_count(), dump(&log)), (2, after));
    }

    /// A crash after the cleaned file became `<base>.log.swap` but before the group's other
    /// segments were deleted: open finishes the swap.
    #[test]
    fn open_finishes_a_group_swap_interrupted_by_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let log = many_segments(dir.path());
        let before = dump(&log);
        let cleaned = log.cleaning_job(3000).unwrap().run().unwrap();
        assert_eq!(cleaned.replaced.len(), 1);
        let r = &cleaned.replaced[0];
        let swap = dir
            .path()
            .join(format!("{}{}", file_name(r.base, ""), SWAP_SUFFIX));
        fs::rename(&r.path, &swap).unwrap();
        drop(log); // crash: the old segments are all still there
        let log = Log::open(dir.path(), config()).unwrap();
        assert!(!swap.exists());
        assert_eq!(log.segment_count(), 2);
        assert_eq!(dump(&log), expected(&before, 40, 0));
        assert_eq!(log.log_end_offset(), Offset(41));
    }

    /// A segment left holding only an empty batch is not answered alone when a later
    /// segment has records (librdkafka fails on answers without any record): the read joins
    /// it to the next segment's batches, so a mirror of this log copies the empty batch
    /// too. It is served alone when nothing follows below the bound.
    #[test]
    fn reads_join_a_slice_of_only_empty_batches_to_the_next_segments_batches() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(
            dir.path(),
            LogConfig {
                // One segment per group: the emptied segment stays on its own.
                segment_bytes: 100,
                ..config()
            },
        )
        .unwrap();
        let put = |log: &mut Log, k: &str, v: &str| {
            log.append_leader(
                keyed(
                    &[(k.into(), Some(v.into()))],
                    Compression::None,
                    1000,
                    (-1, -1, -1),
                    0,
                ),
                LeaderEpoch(0),
                1000,
            )
            .unwrap();
            log.roll().unwrap();
        };
        put(&mut log, "a", "1"); // 0: superseded by 2, its segment becomes one empty batch
        put(&mut log, "b", "1"); // 1
        put(&mut log, "a", "2"); // 2
        log.set_high_watermark(log.log_end_offset());
        log.clean(2000).unwrap().unwrap();
        let r = log.read(Offset(0), 1 << 20, Offset(3)).unwrap();
        let h = BatchHeader::parse(&r.records).unwrap();
        assert_eq!((r.first_offset, h.records_count()), (Offset(0), 0));
        let next = BatchHeader::parse(&r.records[h.total_size()..]).unwrap();
        assert_eq!((next.base_offset(), next.records_count()), (1, 1));
        // Reading from the record after it starts there, as before.
        let r = log.read(Offset(1), 1 << 20, Offset(3)).unwrap();
        let h = BatchHeader::parse(&r.records).unwrap();
        assert_eq!((r.first_offset, h.records_count()), (Offset(1), 1));
        // Bound below the next segment: the empty batch itself is the answer.
        let r = log.read(Offset(0), 1 << 20, Offset(1)).unwrap();
        let h = BatchHeader::parse(&r.records).unwrap();
        assert_eq!((r.first_offset, h.records_count()), (Offset(0), 0));
    }

    /// Throughput of one pass (run by hand: `cargo test --profile ci -p kmirror-log --lib
    /// cleaner_throughput -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn cleaner_throughput() {
        for codec in [Compression::None, Compression::Zstd] {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(
                dir.path(),
                LogConfig {
                    segment_bytes: 16 << 20,
                    ..config()
                },
            )
            .unwrap();
            let value = "v".repeat(100);
            for b in 0..4000 {
                let recs: Vec<_> = (0..100)
                    .map(|i| {
                        (
                            format!("key-{}", (b * 100 + i) % 20_000),
                            Some(value.clone()),
                        )
                    })
                    .collect();
                log.append_leader(
                    keyed(&recs, codec, 1000, (-1, -1, -1), 0),
                    LeaderEpoch(0),
                    1000,
                )
                .unwrap();
            }
            log.roll().unwrap();
            log.set_high_watermark(log.log_end_offset());
            let size = log.size_bytes();
            let t = std::time::Instant::now();
            let stats = log.clean(2000).unwrap().unwrap();
            let secs = t.elapsed().as_secs_f64();
            eprintln!(
                "{codec:?}: 400000 records, {:.1} MiB -> {:.1} MiB in {secs:.2} s ({:.0} MiB/s read), {} keys",
                size as f64 / 1048576.0,
                log.size_bytes() as f64 / 1048576.0,
                stats.bytes_read as f64 / 1048576.0 / secs,
                stats.keys
            );
        }
    }
}
