//! One segment: a `<base>.log` data file with its sparse offset and time indexes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{BatchHeader, BatchIter};
use crate::checkpoint::sync_dir;
use crate::mmap::map_file;

pub(crate) const LOG_SUFFIX: &str = ".log";
pub(crate) const INDEX_SUFFIX: &str = ".index";
pub(crate) const TIME_INDEX_SUFFIX: &str = ".timeindex";

pub(crate) fn file_name(base: i64, suffix: &str) -> String {
    format!("{base:020}{suffix}")
}

/// Parses `<20 digits>.log`.
pub(crate) fn parse_base(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// What the segment remembers of a batch it stores.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tracked {
    pub(crate) base: i64,
    pub(crate) next: i64,
    pub(crate) max_ts: i64,
    pub(crate) size: usize,
}

impl Tracked {
    pub(crate) fn of(h: &BatchHeader<'_>) -> Tracked {
        Tracked {
            base: h.base_offset(),
            next: h.next_offset(),
            max_ts: h.max_timestamp(),
            size: h.total_size(),
        }
    }
}

pub(crate) struct Segment {
    pub(crate) base: i64,
    dir: PathBuf,
    /// Shared with the [`crate::FileRegion`]s of reads (sendfile keeps using the inode a
    /// read saw, as the mapping does).
    file: Arc<File>,
    /// Whole mapping (possibly longer than the file); only `..size` is ever sliced.
    map: Bytes,
    pub(crate) size: usize,
    /// Offset after the last batch (== base while empty).
    pub(crate) next_offset: i64,
    /// (offset - base, position) of some batch starts, increasing.
    pub(crate) index: Vec<(u32, u32)>,
    /// (max timestamp of all batches before the batch at offset-base, offset - base).
    pub(crate) time_index: Vec<(i64, u32)>,
    bytes_since_index: usize,
    /// Largest batch max timestamp and the base offset of that batch.
    pub(crate) max_ts: i64,
    pub(crate) max_ts_offset: i64,
    /// Max timestamp of the first batch: segment.ms rolls compare batch timestamps with it,
    /// as Kafka does.
    pub(crate) first_batch_ts: Option<i64>,
    pub(crate) dirty: bool,
}

impl Segment {
    fn path(&self, suffix: &str) -> PathBuf {
        self.dir.join(file_name(self.base, suffix))
    }

    fn open_file(path: &Path, create: bool) -> io::Result<Arc<File>> {
        OpenOptions::new()
            .read(true)
            .append(true)
            .create(create)
            .open(path)
            .map(Arc::new)
    }

    /// Creates a new empty segment (fsyncing the directory so the file survives a crash).
    pub(crate) fn create(dir: &Path, base: i64, cap: usize) -> io::Result<Segment> {
        let path = dir.join(file_name(base, LOG_SUFFIX));
        // A leftover file of that name holds nothing valid (it is past the log end): replace
        // it. Never truncate in place: ext4 would then force writeback on close.
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let file = Self::open_file(&path, true)?;
        sync_dir(dir)?;
        let map = map_file(&file, cap)?;
        Ok(Segment::new(dir, base, file, map))
    }

    fn new(dir: &Path, base: i64, file: Arc<File>, map: Bytes) -> Segment {
        Segment {
            base,
            dir: dir.to_path_buf(),
            file,
            map,
            size: 0,
            next_offset: base,
            index: Vec::new(),
            time_index: Vec::new(),
            bytes_since_index: 0,
            max_ts: -1,
            max_ts_offset: base,
            first_batch_ts: None,
            dirty: false,
        }
    }

    /// Opens an existing file for recovery; `size` stays 0 until [`Segment::track`] is fed the
    /// batches found valid. Returns the segment and the file's length.
    pub(crate) fn open_existing(dir: &Path, base: i64) -> io::Result<(Segment, usize)> {
        let file = Self::open_file(&dir.join(file_name(base, LOG_SUFFIX)), false)?;
        let len = file.metadata()?.len() as usize;
        let map = map_file(&file, len)?;
        Ok((Segment::new(dir, base, file, map), len))
    }

    /// The whole mapping (for the recovery scan).
    pub(crate) fn mapped(&self) -> Bytes {
        self.map.clone()
    }

    /// Valid bytes.
    pub(crate) fn data(&self) -> &[u8] {
        &self.map[..self.size]
    }

    /// Zero-copy slice of valid bytes.
    pub(crate) fn slice(&self, start: usize, end: usize) -> Bytes {
        debug_assert!(end <= self.size);
        self.map.slice(start..end)
    }

    /// Where valid bytes from `start` live in the file (the mapping starts at position 0).
    pub(crate) fn region(&self, start: usize) -> crate::FileRegion {
        crate::FileRegion {
            file: self.file.clone(),
            position: start as u64,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Makes sure the mapping covers `needed` bytes (remaps; old slices keep the old mapping).
    pub(crate) fn ensure_capacity(&mut self, needed: usize) -> io::Result<()> {
        if needed > self.map.len() {
            let cap = needed.max(self.map.len().saturating_mul(2)).max(1 << 20);
            self.map = map_file(&self.file, cap)?;
        }
        Ok(())
    }

    /// Shrinks the mapping to the valid size (segments that are no longer written).
    pub(crate) fn seal(&mut self) -> io::Result<()> {
        if self.map.len() != self.size {
            self.map = map_file(&self.file, self.size)?;
        }
        Ok(())
    }

    /// Records a batch now stored at `pos` (index entries, timestamps, end offset).
    pub(crate) fn track(&mut self, b: &Tracked, pos: usize, interval: u32) {
        let rel = (b.base - self.base) as u32;
        if pos == 0 {
            self.first_batch_ts = Some(b.max_ts);
        }
        if self.bytes_since_index >= interval as usize {
            self.index.push((rel, pos as u32));
            if self.max_ts >= 0 && self.time_index.last().is_none_or(|&(t, _)| self.max_ts > t) {
                self.time_index.push((self.max_ts, rel));
            }
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += b.size;
        if b.max_ts > self.max_ts {
            self.max_ts = b.max_ts;
            self.max_ts_offset = b.base;
        }
        self.next_offset = b.next;
        self.size = pos + b.size;
    }

    /// Appends already-validated batches and indexes them from `batches` (their offsets as
    /// stored), without touching the freshly written pages through the mapping.
    pub(crate) fn append(
        &mut self,
        bufs: &[IoSlice<'_>],
        total: usize,
        batches: &[Tracked],
        interval: u32,
    ) -> io::Result<()> {
        self.write(bufs, total)?;
        for b in batches {
            self.track(b, self.size, interval);
        }
        Ok(())
    }

    /// Appends `data` (whole batches whose frames were checked) while verifying each batch's
    /// CRC32C in the same pass: CRC and write(2) go chunk by chunk, so every byte is read from
    /// memory once while still in cache. `crcs[i]` = (start, end, stored CRC) of batch i.
    /// If a CRC mismatches, the file is cut back to its previous size (nothing of this append
    /// was tracked or handed out) and `Ok(Err(i))` names the bad batch.
    pub(crate) fn append_verifying(
        &mut self,
        data: &[u8],
        crcs: &[(usize, usize, u32)],
        batches: &[Tracked],
        interval: u32,
    ) -> io::Result<Result<(), usize>> {
        const CHUNK: usize = 256 << 10; // fits L2 with room to spare
        self.ensure_capacity(self.size + data.len())?;
        self.dirty = true;
        let mut written = 0;
        let mut bi = 0;
        let mut crc = 0u32;
        while written < data.len() {
            let end = (written + CHUNK).min(data.len());
            let mut p = written;
            while p < end {
                let (start, bend, stored) = crcs[bi];
                let stop = end.min(bend);
                let from = p.max(start + crate::batch::ATTRIBUTES_POS);
                if from < stop {
                    crc = crc32c::crc32c_append(crc, &data[from..stop]);
                }
                if stop == bend {
                    if crc != stored {
                        self.file.set_len(self.size as u64)?;
                        return Ok(Err(bi));
                    }
                    crc = 0;
                    bi += 1;
                }
                p = stop;
            }
            if let Err(e) = (&*self.file).write_all(&data[written..end]) {
                let _ = self.file.set_len(self.size as u64);
                return Err(e);
            }
            written = end;
        }
        for b in batches {
            self.track(b, self.size, interval);
        }
        Ok(Ok(()))
    }

    /// Writes `bufs` at the end of the file (all or nothing, best effort on failure).
    fn write(&mut self, bufs: &[IoSlice<'_>], total: usize) -> io::Result<()> {
        self.ensure_capacity(self.size + total)?;
        let res = write_all_vectored(&self.file, bufs, total);
        if res.is_err() {
            // Cut a partial write so no torn batch lingers past the logical end.
            let _ = self.file.set_len(self.size as u64);
        }
        self.dirty = true;
        res
    }

    pub(crate) fn sync(&mut self) -> io::Result<()> {
        if self.dirty {
            self.file.sync_data()?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Position of the batch to start scanning from for `offset` (floor in the sparse index).
    pub(crate) fn lookup(&self, offset: i64) -> usize {
        if offset <= self.base {
            return 0;
        }
        let rel = (offset - self.base).min(u32::MAX as i64) as u32;
        let i = self.index.partition_point(|&(r, _)| r <= rel);
        if i == 0 {
            0
        } else {
            self.index[i - 1].1 as usize
        }
    }

    /// Position of the first batch that may have max timestamp >= `ts`.
    pub(crate) fn lookup_time(&self, ts: i64) -> usize {
        let i = self.time_index.partition_point(|&(t, _)| t < ts);
        if i == 0 {
            0
        } else {
            self.lookup(self.base + self.time_index[i - 1].1 as i64)
        }
    }

    /// Start position of the first batch whose last offset is >= `offset`, if any.
    pub(crate) fn find(&self, offset: i64) -> Option<(usize, BatchHeader<'_>)> {
        let start = self.lookup(offset);
        let data = self.data();
        let mut it = BatchIter::headers(&data[start..]);
        while let Some(Ok((h, s, _))) = it.next() {
            if h.last_offset() >= offset {
                return Some((start + s, h));
            }
        }
        None
    }

    fn encode_index(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.index.len() * 8);
        for (r, p) in &self.index {
            out.extend_from_slice(&r.to_be_bytes());
            out.extend_from_slice(&p.to_be_bytes());
        }
        out
    }

    fn encode_time_index(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.time_index.len() * 12);
        for (t, r) in &self.time_index {
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(&r.to_be_bytes());
        }
        out
    }

    /// Writes both index files (whole-file rewrite; they are small and rebuilt if damaged).
    pub(crate) fn write_indexes(&self) -> io::Result<()> {
        for (suffix, bytes) in [
            (INDEX_SUFFIX, self.encode_index()),
            (TIME_INDEX_SUFFIX, self.encode_time_index()),
        ] {
            let tmp = self.path(&format!("{suffix}.tmp"));
            let res = File::create(&tmp)
                .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_data()))
                .and_then(|()| fs::rename(&tmp, self.path(suffix)));
            if let Err(e) = res {
                // A partial temp file would hold on to space a full disk needs back.
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Compares the index files with the indexes rebuilt from the data; rewrites them when
    /// missing or different. Returns true if a rewrite happened.
    pub(crate) fn verify_indexes(&self) -> io::Result<bool> {
        let ok = fs::read(self.path(INDEX_SUFFIX)).ok() == Some(self.encode_index())
            && fs::read(self.path(TIME_INDEX_SUFFIX)).ok() == Some(self.encode_time_index());
        if !ok {
            self.write_indexes()?;
        }
        Ok(!ok)
    }

    /// Cuts the data at `pos` (a batch boundary) while the log is open: the kept prefix is
    /// copied into a fresh file renamed over this one, so slices already handed out (which map
    /// the old inode) stay valid and unchanged.
    pub(crate) fn truncate_rewrite(&mut self, pos: usize, interval: u32) -> io::Result<()> {
        let tmp = self.path(".log.truncating");
        let copied = File::create(&tmp)
            .and_then(|mut out| {
                out.write_all(&self.map[..pos])
                    .and_then(|()| out.sync_all())
            })
            .and_then(|()| fs::rename(&tmp, self.path(LOG_SUFFIX)));
        if let Err(e) = copied {
            // ENOSPC: the old file is untouched; don't keep a partial copy holding space.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        sync_dir(&self.dir)?;
        self.file = Self::open_file(&self.path(LOG_SUFFIX), false)?;
        let cap = self.map.len().max(pos);
        let old_map = std::mem::replace(&mut self.map, map_file(&self.file, cap)?);
        drop(old_map);
        self.rebuild(pos, interval);
        self.dirty = false;
        Ok(())
    }

    /// Replaces this (sealed) segment's data with the cleaner's fsynced file at `cleaned`:
    /// renamed over the `.log` file, so slices already handed out keep the old inode and stay
    /// valid and unchanged; then remapped, re-indexed and the index files rewritten.
    pub(crate) fn swap_in(&mut self, cleaned: &Path, interval: u32) -> io::Result<()> {
        fs::rename(cleaned, self.path(LOG_SUFFIX))?;
        sync_dir(&self.dir)?;
        self.file = Self::open_file(&self.path(LOG_SUFFIX), false)?;
        let len = self.file.metadata()?.len() as usize;
        self.map = map_file(&self.file, len)?;
        self.rebuild(len, interval);
        self.dirty = false;
        self.write_indexes()
    }

    /// Recomputes index and timestamps from the first `size` bytes.
    pub(crate) fn rebuild(&mut self, size: usize, interval: u32) {
        let map = self.map.clone();
        self.size = 0;
        self.index.clear();
        self.time_index.clear();
        self.bytes_since_index = 0;
        self.max_ts = -1;
        self.max_ts_offset = self.base;
        self.next_offset = self.base;
        self.first_batch_ts = None;
        for (h, s, _) in BatchIter::headers(&map[..size]).map_while(Result::ok) {
            self.track(&Tracked::of(&h), s, interval);
        }
    }

    /// Cuts the data back to `size` (a batch boundary) in place. Only for bytes of an append
    /// that failed before returning: none of them was ever sliced (see `mmap::map_file`).
    pub(crate) fn cut_unserved_tail(&mut self, size: usize, interval: u32) -> io::Result<()> {
        self.rebuild(size, interval);
        self.file.set_len(size as u64)
    }

    /// Cuts the file itself (open-time recovery only, before any slice exists).
    pub(crate) fn truncate_file(&mut self, size: usize) -> io::Result<()> {
        self.file.set_len(size as u64)?;
        self.file.sync_all()
    }

    pub(crate) fn delete(self) -> io::Result<()> {
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            match fs::remove_file(self.path(suffix)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// write_vectored until everything is written (std's write_all_vectored is unstable).
fn write_all_vectored(mut file: &File, bufs: &[IoSlice<'_>], total: usize) -> io::Result<()> {
    if bufs.len() == 1 {
        return file.write_all(&bufs[0]);
    }
    let mut written = 0usize;
    let mut first = 0usize; // first buffer not fully written
    let mut skip = 0usize; // bytes of bufs[first] already written
    while written < total {
        let n = if skip == 0 {
            let end = (first + 1024).min(bufs.len());
            file.write_vectored(&bufs[first..end])
        } else {
            file.write(&bufs[first][skip..])
        };
        let n = match n {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        written += n;
        let mut left = n;
        while left > 0 {
            let avail = bufs[first].len() - skip;
            if left >= avail {
                left -= avail;
                first += 1;
                skip = 0;
            } else {
                skip += left;
                left = 0;
            }
        }
        while first < bufs.len() && bufs[first].is_empty() {
            first += 1;
        }
    }
    Ok(())
}
