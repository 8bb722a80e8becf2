//! The only module with `unsafe`: read-only shared mappings of segment files, exposed as
//! `Bytes` so reads are zero-copy slices that keep the mapping alive.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use bytes::Bytes;
use memmap2::{Mmap, MmapOptions};

struct MapOwner(Mmap);

impl AsRef<[u8]> for MapOwner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Maps `len` bytes of `file` read-only and shared. `len` may exceed the current file size:
/// the log appends with write(2) and the page cache makes new bytes visible through the
/// mapping, so one mapping serves a growing segment.
pub(crate) fn map_file(file: &File, len: usize) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: memmap2 requires that the mapped file is not modified in a way that breaks the
    // references we hand out. The log owns its segment files exclusively and upholds:
    // (1) bytes below a segment's logical size are never rewritten in place — appends only
    //     extend the file, and truncation while the log is open writes the kept prefix into a
    //     fresh inode and renames it over the old one (old mappings keep the old inode);
    // (2) ftruncate only cuts bytes that were never handed out: during open-time recovery
    //     (before any read), to undo a failed partial append past the logical size, or to
    //     undo an append whose flush failed before it returned (its bytes were tracked but
    //     never sliced: appends and reads of a log run on its one owning thread);
    // (3) callers only slice below the logical size, so pages past end-of-file (which would
    //     raise SIGBUS) are never touched.
    // Modification by other processes is outside the log's contract, as with any data file.
    let map = unsafe { MmapOptions::new().len(len).map(file)? };
    Ok(Bytes::from_owner(MapOwner(map)))
}
