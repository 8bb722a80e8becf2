//! Kafka request framing: a 4-byte big-endian length, then the request. The length is
//! checked against `socket.request.max.bytes` before any buffer is allocated, so a hostile
//! length (negative, 2^31-1, or "GET " read as an integer) costs nothing.
//!
//! Frame bodies (requests here, responses in [`crate::client`]) are read into buffers
//! reused per thread ([`read_body`]): a fresh buffer per frame cost more CPU than the bytes
//! themselves on the mirror path (the allocator zeroes it, the kernel faults in and clears
//! each new page, growth copies it; 40% of a catch-up profile). The frame's [`Bytes`] owns
//! its buffer and hands it back when the last slice of it (a record batch appended on some
//! core) is dropped, on whatever thread that is.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_lite::{AsyncRead, AsyncReadExt};

/// Largest buffer reserved up front for a frame (typical produce requests fit); a frame
/// grows its buffer as its bytes arrive, doubling.
const INITIAL_CHUNK: usize = 1 << 20;
/// Buffers a thread keeps for reuse, and their total capacity at most.
const POOL_BUFFERS: usize = 8;
const POOL_BYTES: usize = 128 << 20;
/// Frames below this size get a buffer of their own (malloc reuses small blocks, and a
/// request's strings may live on in a group or session as slices of its frame).
const POOL_MIN: usize = 64 << 10;
/// A kept buffer serves a frame at most this many times smaller than itself.
const POOL_SLACK: usize = 4;

/// The smallest valid request: api key, api version and correlation id.
pub const MIN_REQUEST_BYTES: i32 = 8;

/// Why a connection stops reading.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("frame length {len} outside [{MIN_REQUEST_BYTES}, {max}] (socket.request.max.bytes)")]
    BadLength { len: i64, max: usize },
    #[error("connection i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one request frame (without its length prefix).
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> Result<Bytes, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut len[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Err(FrameError::Closed)
            } else {
                Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()))
            };
        }
        got += n;
    }
    let len = i32::from_be_bytes(len);
    if len < MIN_REQUEST_BYTES || len as i64 > max as i64 {
        return Err(FrameError::BadLength {
            len: len as i64,
            max,
        });
    }
    Ok(read_body(r, len as usize).await?)
}

/// Buffers kept for reuse (by the thread that made the pool; returned from any thread).
#[derive(Default)]
struct Pool {
    /// Guarded by a lock taken once per frame, uncontended but for a buffer returned by
    /// another core at that moment.
    free: Mutex<Vec<Vec<u8>>>,
}

impl Pool {
    /// The smallest kept buffer that holds `len` without being more than [`POOL_SLACK`]
    /// times larger, else the largest smaller one (grown as bytes arrive), else a new one.
    /// (A small frame in a huge buffer would pin all of it while any slice of the frame
    /// lives.)
    fn take(&self, len: usize) -> Vec<u8> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let fit = free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= len && b.len() <= len.saturating_mul(POOL_SLACK))
            .min_by_key(|(_, b)| b.len())
            .or_else(|| {
                free.iter()
                    .enumerate()
                    .filter(|(_, b)| b.len() < len)
                    .max_by_key(|(_, b)| b.len())
            })
            .map(|(i, _)| i);
        fit.map(|i| free.swap_remove(i)).unwrap_or_default()
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let kept: usize = free.iter().map(Vec::capacity).sum();
        if free.len() < POOL_BUFFERS && kept + buf.capacity() <= POOL_BYTES {
            free.push(buf);
        }
    }
}

thread_local! {
    static POOL: Arc<Pool> = Arc::new(Pool::default());
}

/// A frame's bytes in a pooled buffer: `buf[..len]`, the rest left from earlier frames.
struct Pooled {
    buf: Vec<u8>,
    len: usize,
    home: Arc<Pool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.home.give_back(std::mem::take(&mut self.buf));
    }
}

/// Reads exactly `len` bytes (a frame body whose length prefix was read and checked) into a
/// buffer of this thread's pool. Memory follows the bytes that actually arrive: a peer
/// announcing 100 MiB and sending nothing costs at most the first chunk (or a kept buffer),
/// not the announced size. A kept buffer's bytes are already initialized, so only growth
/// past what the thread's frames needed before is zeroed.
pub async fn read_body<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> std::io::Result<Bytes> {
    if len < POOL_MIN {
        let mut buf = vec![0u8; len];
        r.read_exact(&mut buf).await?;
        return Ok(Bytes::from(buf));
    }
    let home = POOL.with(Arc::clone);
    let mut buf = home.take(len);
    let mut filled = 0;
    while filled < len {
        let target = len.min((2 * filled).max(INITIAL_CHUNK));
        if buf.len() < target {
            buf.resize(target, 0);
        }
        r.read_exact(&mut buf[filled..target]).await?;
        filled = target;
    }
    Ok(Bytes::from_owner(Pooled { buf, len, home }))
}

/// The fixed start of every request header (all header versions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

pub fn header_prefix(frame: &[u8]) -> HeaderPrefix {
    HeaderPrefix {
        api_key: i16::from_be_bytes([frame[0], frame[1]]),
        api_version: i16::from_be_bytes([frame[2], frame[3]]),
        correlation_id: i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8], max: usize) -> Result<Bytes, FrameError> {
        let mut r = futures_lite::io::Cursor::new(bytes.to_vec());
        futures_lite::future::block_on(read_frame(&mut r, max))
    }

    #[test]
    fn hostile_lengths_are_refused_before_allocation() {
        for len in [-1i32, 0, 7, i32::MAX, 101 << 20] {
            let e = read(&len.to_be_bytes(), 100 << 20).unwrap_err();
            assert!(matches!(e, FrameError::BadLength { .. }), "{len}: {e}");
        }
        // "GET / HTTP/1.1" read as a length is ~1.1 GB.
        assert!(matches!(
            read(b"GET / HTTP/1.1\r\n\r\n", 100 << 20),
            Err(FrameError::BadLength { .. })
        ));
    }

    #[test]
    fn a_truncated_frame_is_an_error_and_a_whole_one_is_returned() {
        let mut f = 12i32.to_be_bytes().to_vec();
        f.extend_from_slice(&[0, 18, 0, 3, 0, 0, 0, 7]);
        assert!(read(&f, 1024).is_err());
        f.extend_from_slice(&[0, 0, 0, 0]);
        let got = read(&f, 1024).unwrap();
        assert_eq!(got.len(), 12);
        let h = header_prefix(&got);
        assert_eq!((h.api_key, h.api_version, h.correlation_id), (18, 3, 7));
        assert!(matches!(read(&[], 1024), Err(FrameError::Closed)));
    }

    fn body(bytes: &[u8]) -> Bytes {
        let mut r = futures_lite::io::Cursor::new(bytes.to_vec());
        futures_lite::future::block_on(read_body(&mut r, bytes.len())).unwrap()
    }

    #[test]
    fn a_frame_buffer_is_reused_once_its_last_slice_is_dropped_and_holds_only_its_bytes() {
        // Larger than the first chunk, so the read grows the buffer as bytes arrive.
        let big: Vec<u8> = (0..3 * INITIAL_CHUNK + 5)
            .map(|i| (i % 251) as u8)
            .collect();
        let first = body(&big);
        assert_eq!(&first[..], &big[..]);
        let slice = first.slice(10..20);
        let at = first.as_ptr();
        drop(first);
        // Still held by a slice: a second frame gets another buffer.
        let small = body(b"abc");
        assert_eq!(&small[..], b"abc");
        assert_ne!(small.as_ptr(), at);
        drop(small);
        assert_eq!(&slice[..], &big[10..20]);
        drop(slice);
        // Back in the pool. A small frame, or one far smaller than the kept buffer, gets
        // a buffer of its own (it must not pin the big one while a slice of it lives).
        let small = body(&vec![3u8; POOL_MIN - 1]);
        assert_ne!(small.as_ptr(), at);
        let fifth = body(&vec![5u8; (3 * INITIAL_CHUNK + 5) / 5]);
        assert_ne!(fifth.as_ptr(), at);
        // A frame that fits within the slack reuses it, and sees only its own bytes, not
        // the rest left from the big frame.
        let other: Vec<u8> = vec![7u8; 2 * INITIAL_CHUNK];
        let again = body(&other);
        assert_eq!(again.as_ptr(), at);
        assert_eq!(&again[..], &other[..]);
        // A short read is an error, not a frame padded from the old buffer.
        drop(again);
        for len in [11, 2 * INITIAL_CHUNK] {
            let mut r = futures_lite::io::Cursor::new(vec![1u8; len - 1]);
            assert!(futures_lite::future::block_on(read_body(&mut r, len)).is_err());
        }
    }
}
