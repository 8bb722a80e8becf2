//! The only module with `unsafe`: read-only shared mappings of segment files, exposed as
//! `Bytes` so reads are zero-copy slices that keep the mapping alive; sendfile(2) of segment
//! bytes to a socket (the copy-free way to serve them, as Kafka's FileRecords.writeTo); and
//! [`ReservingAllocator`], the process allocator, which serves very large requests with
//! lazily backed anonymous mappings.
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
    //     fresh inode and renames it over the old one, as the cleaner does with a cleaned
    //     segment (old mappings keep the old inode);
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

/// sendfile(2) of `len` bytes at `position` of `file` to `socket`, never blocking: the
/// socket is switched to O_NONBLOCK for the call and back (the async runtime drives it with
/// MSG_DONTWAIT sends and io_uring, which expect a blocking descriptor).
pub(crate) fn sendfile_nonblocking(
    socket: std::os::fd::RawFd,
    file: &File,
    position: u64,
    len: usize,
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl and sendfile only read the integers and the offset passed; a bad
    // descriptor is an EBADF error, not undefined behaviour. `offset` outlives the call.
    unsafe {
        let flags = libc::fcntl(socket, libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::fcntl(socket, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut offset = position as libc::off_t;
        let n = libc::sendfile(socket, file.as_raw_fd(), &mut offset, len);
        let err = io::Error::last_os_error();
        libc::fcntl(socket, libc::F_SETFL, flags);
        if n < 0 {
            Err(err)
        } else {
            Ok(n as usize)
        }
    }
}

/// Requests at least this large are served by [`ReservingAllocator`] from anonymous mappings.
pub(crate) const RESERVE_THRESHOLD: usize = 64 << 20;

/// The process allocator: the system allocator, except that requests of
/// `RESERVE_THRESHOLD` (64 MiB) bytes or more are anonymous mappings made with `MAP_NORESERVE`.
///
/// Why: a decoder that sizes a buffer from a count read off the wire (kafka-protocol's array
/// and bytes decoders do) turns an 8-byte request claiming 2^31 elements into a request for
/// tens of gigabytes. The system allocator refuses it and Rust aborts the whole process. A
/// `MAP_NORESERVE` mapping only reserves address space: pages exist once touched, and such a
/// decoder fails on the first missing element, so the reservation is returned untouched. Our
/// own decoders never size from wire counts (they cap by the bytes in hand); this guards the
/// code we do not own. Allocation failure of memory really used still aborts, as it should.
pub struct ReservingAllocator;

fn reserved(size: usize, align: usize) -> bool {
    // Mappings are page aligned; anything stricter goes to the system allocator.
    size >= RESERVE_THRESHOLD && align <= 4096
}

fn map_anonymous(size: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping aliases nothing; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

// SAFETY: every method keeps GlobalAlloc's contract: a pointer is freed by the same kind of
// allocation that made it (decided by the layout's size and alignment, which the caller must
// pass unchanged), mappings are page aligned (so any alignment up to 4096 holds) and
// zero-filled (so they satisfy alloc_zeroed), and nothing here unwinds.
unsafe impl std::alloc::GlobalAlloc for ReservingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if reserved(layout.size(), layout.align()) {
            return map_anonymous(layout.size());
        }
        // SAFETY: forwarded with the caller's guarantees (non-zero size layout).
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        if reserved(layout.size(), layout.align()) {
            return map_anonymous(layout.size());
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        if reserved(layout.size(), layout.align()) {
            // SAFETY: `ptr` came from `map_anonymous(layout.size())` (same size and align rule).
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
            return;
        }
        // SAFETY: `ptr` came from the system allocator with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let (old_r, new_r) = (
            reserved(layout.size(), layout.align()),
            reserved(new_size, layout.align()),
        );
        if !old_r && !new_r {
            // SAFETY: forwarded with the caller's guarantees.
            return unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        }
        if old_r && new_r {
            // SAFETY: `ptr` is a mapping of `layout.size()` bytes; mremap moves or resizes it
            // without copying pages and keeps its contents.
            let p =
                unsafe { libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE) };
            return if p == libc::MAP_FAILED {
                std::ptr::null_mut()
            } else {
                p.cast()
            };
        }
        // Crossing the threshold: new block, copy what both hold, free the old one.
        // SAFETY: align is unchanged and valid; new_size is non-zero (GlobalAlloc contract).
        let new_layout =
            unsafe { std::alloc::Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid layout, as above.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for min(old, new) bytes and do not overlap; the
            // old block is freed with the layout that made it.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod reserving_tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout};

    #[test]
    fn a_huge_unused_reservation_succeeds_and_small_ones_use_the_system_allocator() {
        let a = ReservingAllocator;
        // 64 GiB: more than this machine has; only address space is reserved.
        let big = Layout::from_size_align(64 << 30, 8).unwrap();
        // SAFETY (test): the layout is non-zero; the block is freed with the same layout.
        unsafe {
            let p = a.alloc(big);
            assert!(!p.is_null(), "reservation refused");
            *p = 7; // touching one page is fine
            let q = a.realloc(p, big, 128 << 30);
            assert!(!q.is_null());
            assert_eq!(*q, 7, "mremap keeps contents");
            a.dealloc(q, Layout::from_size_align(128 << 30, 8).unwrap());
            let small = Layout::from_size_align(100, 8).unwrap();
            let s = a.alloc_zeroed(small);
            assert_eq!(*s.add(99), 0);
            let grown = a.realloc(s, small, RESERVE_THRESHOLD + 4096);
            assert_eq!(*grown.add(99), 0, "contents kept across the threshold");
            a.dealloc(
                grown,
                Layout::from_size_align(RESERVE_THRESHOLD + 4096, 8).unwrap(),
            );
        }
    }
}
