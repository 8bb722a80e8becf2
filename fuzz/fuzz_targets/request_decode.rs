//! Target 4: everything a request goes through before it needs a running broker: the frame
//! reader (length checks), the fixed header prefix, the API key, the request header and body
//! decode (`kmirror_net::server::decode_request`, i.e. kafka-protocol's RequestKind::decode)
//! for every API key and version kafka-protocol knows, re-encoding what decoded, and the
//! response decoders the mirror fetcher runs on a source cluster's answers.
//! Invariants: nothing panics or aborts (no allocation from a wire count).
#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kmirror_net::frame::{header_prefix, read_frame, MIN_REQUEST_BYTES};
use kmirror_net::server::decode_request;
use libfuzzer_sys::fuzz_target;

/// As in the kmirror binary: a count read off the wire reserves address space, not memory
/// (kafka-protocol sizes vectors from such counts).
#[global_allocator]
static ALLOCATOR: kmirror_log::ReservingAllocator = kmirror_log::ReservingAllocator;

/// socket.request.max.bytes for the fuzzer: 1 MiB.
const MAX_FRAME: usize = 1 << 20;

fn known_keys() -> &'static [ApiKey] {
    static KEYS: std::sync::OnceLock<Vec<ApiKey>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        (0..20_000i16)
            .filter_map(|k| ApiKey::try_from(k).ok())
            .collect()
    })
}

fn reencode_request(key: ApiKey, version: i16, req: &RequestKind) {
    let mut out = bytes::BytesMut::new();
    if req.encode(&mut out, version).is_ok() {
        // What we encoded decodes again.
        let _ = RequestKind::decode(key, &mut out.freeze(), version);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        // As the server reads it: length prefix, frame, prefix, key, served-or-not decode.
        let mut r = futures_lite::io::Cursor::new(rest);
        let Ok(frame) = futures_lite::future::block_on(read_frame(&mut r, MAX_FRAME)) else {
            return;
        };
        assert!(frame.len() >= MIN_REQUEST_BYTES as usize && frame.len() <= MAX_FRAME);
        let p = header_prefix(&frame);
        let Ok(key) = ApiKey::try_from(p.api_key) else {
            // Extension (mirror) keys parse their own header v2.
            let mut b = frame.clone();
            let _ = kmirror_mirror::api::read_request_header_v2(&mut b);
            return;
        };
        let range = key.valid_versions();
        if p.api_version < range.min || p.api_version > range.max {
            return;
        }
        if let Ok((_, req)) = decode_request(key, p.api_version, frame) {
            reencode_request(key, p.api_version, &req);
        }
    } else {
        // Key and version chosen by the input, body decoded as a request and as a response.
        if rest.len() < 3 {
            return;
        }
        let keys = known_keys();
        let key = keys[rest[0] as usize % keys.len()];
        let range = key.valid_versions();
        let span = (range.max - range.min + 1) as usize;
        let version = range.min + (rest[1] as usize % span) as i16;
        let body = Bytes::copy_from_slice(&rest[2..]);
        if let Ok(req) = RequestKind::decode(key, &mut body.clone(), version) {
            reencode_request(key, version, &req);
        }
        if let Ok(resp) = ResponseKind::decode(key, &mut body.clone(), version) {
            let mut out = bytes::BytesMut::new();
            let _ = resp.encode(&mut out, version);
        }
    }
});
