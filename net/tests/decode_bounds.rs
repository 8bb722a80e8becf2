//! Issue 8, "one small request takes the broker down": kafka-protocol 0.18.0 sizes
//! `Vec::with_capacity` (and byte buffers) from array counts and lengths read off the wire, so
//! a few bytes claiming billions of elements made the broker ask for tens of gigabytes and
//! abort. kmirror's process allocator ([`kmirror_log::ReservingAllocator`], installed here as
//! in the binary) serves such requests with address space only, and the decoder fails at the
//! first missing element. Without the allocator this test aborts its own process.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind};
use kmirror_net::server::decode_request;

#[global_allocator]
static ALLOCATOR: kmirror_log::ReservingAllocator = kmirror_log::ReservingAllocator;

/// Every API key kafka-protocol knows, with its version range.
fn all_keys() -> Vec<(ApiKey, i16, i16)> {
    (0..i16::MAX)
        .take(20_000)
        .filter_map(|k| ApiKey::try_from(k).ok())
        .map(|k| {
            let r = k.valid_versions();
            (k, r.min, r.max)
        })
        .collect()
}

/// Bodies whose first field(s) are counts or lengths as large as the encodings allow.
fn hostile_bodies() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for fill in [0x7fu8, 0xff, 0x3c] {
        // Classic INT32 counts (0x7fffffff, -1 as null, 0x3c3c3c3c) and INT16 lengths.
        out.push(vec![fill; 16]);
        // Compact (unsigned varint) counts: 2^32-1 and similar, after a few small fields.
        for lead in 0..8 {
            let mut b = vec![0u8; lead];
            b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
            b.extend_from_slice(&[fill; 4]);
            out.push(b);
        }
    }
    // The 8-byte Metadata v0 request from kafka-protocol-rs PR #152 (54 million topics).
    out.push(vec![0x03, 0x3c, 0x0c, 0x00, 0xb6]);
    out
}

#[test]
fn huge_counts_in_any_request_are_refused_without_allocating_from_them() {
    let keys = all_keys();
    assert!(keys.len() > 50, "kafka-protocol knows {} keys", keys.len());
    let mut decoded = 0;
    for (key, min, max) in keys {
        for v in min..=max {
            for body in hostile_bodies() {
                // Header v0 (key, version, correlation, client id null) + hostile body; the
                // decoder reads whichever header version the key/version uses.
                let mut frame = Vec::new();
                frame.extend_from_slice(&(key as i16).to_be_bytes());
                frame.extend_from_slice(&v.to_be_bytes());
                frame.extend_from_slice(&7i32.to_be_bytes());
                frame.extend_from_slice(&(-1i16).to_be_bytes());
                frame.push(0); // empty tagged fields (flexible headers)
                frame.extend_from_slice(&body);
                if decode_request(key, v, Bytes::from(frame.clone())).is_ok() {
                    decoded += 1;
                }
                // And the body alone at every version.
                let _ = RequestKind::decode(key, &mut Bytes::from(body), v);
            }
        }
    }
    // Some tiny bodies are legitimately complete requests; the point is that none aborted.
    assert!(decoded < 100_000);
}

#[test]
fn a_produce_claiming_2_pow_32_topics_is_a_decode_error() {
    let mut frame = Vec::new();
    frame.extend_from_slice(&0i16.to_be_bytes()); // Produce
    frame.extend_from_slice(&9i16.to_be_bytes());
    frame.extend_from_slice(&13i32.to_be_bytes());
    frame.extend_from_slice(&(-1i16).to_be_bytes());
    frame.push(0);
    frame.push(0); // transactional id: null
    frame.extend_from_slice(&(-1i16).to_be_bytes());
    frame.extend_from_slice(&30_000i32.to_be_bytes());
    frame.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    // A decode error, not an abort: the 2^32-2 element reservation costs address space only.
    let e = decode_request(ApiKey::Produce, 9, Bytes::from(frame)).unwrap_err();
    assert!(e.contains("Produce"), "{e}");
}
