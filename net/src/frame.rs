//! Kafka request framing: a 4-byte big-endian length, then the request. The length is
//! checked against `socket.request.max.bytes` before any buffer is allocated, so a hostile
//! length (negative, 2^31-1, or "GET " read as an integer) costs nothing.

use bytes::Bytes;
use futures_lite::{AsyncRead, AsyncReadExt};

/// Largest buffer reserved up front for a frame (typical produce requests fit).
const INITIAL_CHUNK: usize = 1 << 20;

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
    // Memory follows the bytes that actually arrive: a peer announcing 100 MiB and sending
    // nothing costs at most the first chunk, not the announced size.
    let len = len as usize;
    let mut buf = Vec::with_capacity(len.min(INITIAL_CHUNK));
    (&mut *r).take(len as u64).read_to_end(&mut buf).await?;
    if buf.len() != len {
        return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(Bytes::from(buf))
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
}
