//! The Kafka client of the mirror paths: the node's one client stack
//! ([`kmirror_net::client`], re-exported here) plus the KIP-1279 mirror APIs, whose codec
//! this crate owns ([`crate::api`]). A mirror request is framed here and sent as a raw frame
//! on the same connection, after the same ApiVersions, TLS and SASL.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::future::block_on;

pub use kmirror_net::client::*;

use crate::api::{self as mirror_api, MirrorRequest, Wire};

/// Request frame for a mirror API (version 0, header v2), without the size prefix.
pub fn encode_mirror_request<R: MirrorRequest>(
    req: &R,
    correlation_id: i32,
    client_id: &str,
) -> Bytes {
    let mut buf = BytesMut::new();
    mirror_api::write_request_header_v2(&mut buf, R::KEY, 0, correlation_id, Some(client_id));
    req.write(&mut buf);
    buf.freeze()
}

/// Decode a mirror API response frame (header v1, without its size prefix).
pub fn decode_mirror_response<R: MirrorRequest>(
    mut frame: Bytes,
    correlation_id: i32,
) -> Result<R::Response, ClientError> {
    let got = mirror_api::read_response_header_v1(&mut frame)
        .map_err(|e| ClientError::Codec(e.to_string()))?;
    if got != correlation_id {
        return Err(ClientError::CorrelationMismatch {
            expected: correlation_id,
            got,
        });
    }
    <R::Response as Wire>::read(&mut frame)
        .map_err(|e| ClientError::Codec(format!("{}: {e}", R::NAME)))
}

/// Sends a mirror API request on `c` (the broker must advertise the key).
pub async fn send_mirror<T: Transport, R: MirrorRequest>(
    c: &mut Connection<T>,
    req: &R,
) -> Result<R::Response, ClientError> {
    if !c.versions().apis.contains_key(&R::KEY) {
        return Err(ClientError::UnsupportedApi {
            addr: c.addr().to_owned(),
            api: R::NAME,
            key: R::KEY,
        });
    }
    let corr = c.take_correlation();
    let frame = encode_mirror_request(req, corr, c.client_id());
    let resp = c.exchange_frame(&frame, Duration::ZERO).await?;
    decode_mirror_response::<R>(resp, corr)
}

/// The mirror APIs on a [`BlockingConnection`] (the CLI, the demo).
pub trait BlockingMirrorCalls {
    /// Send a mirror API request (the broker must advertise the key).
    fn send_mirror<R: MirrorRequest>(&mut self, req: &R) -> Result<R::Response, ClientError>;
}

impl BlockingMirrorCalls for BlockingConnection {
    fn send_mirror<R: MirrorRequest>(&mut self, req: &R) -> Result<R::Response, ClientError> {
        block_on(send_mirror(self.get_mut(), req))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Buf;

    use super::*;
    use crate::keys;

    #[test]
    fn mirror_request_frame_carries_key_and_body() {
        let req = mirror_api::DeleteMirrorRequest {
            mirror_name: "dr".into(),
            ..Default::default()
        };
        let mut frame = encode_mirror_request(&req, 3, "cli");
        let h = mirror_api::read_request_header_v2(&mut frame).unwrap();
        assert_eq!((h.api_key, h.correlation_id), (keys::api::DELETE_MIRROR, 3));
        let body = mirror_api::DeleteMirrorRequest::read(&mut frame).unwrap();
        assert_eq!(body, req);
        assert_eq!(frame.remaining(), 0);
    }
}
