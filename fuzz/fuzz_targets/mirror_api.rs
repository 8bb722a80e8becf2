//! Target 5: the mirror API codecs in mirror/src/api.rs (requests and responses of all
//! eleven mirror APIs, request header v2, response header v1). The first byte picks the
//! decoder. Invariants: nothing panics or aborts; whatever decodes re-encodes and decodes to
//! an equal value.
#![no_main]

use bytes::Bytes;
use kmirror_mirror::api::{self as m, MirrorRequest, Wire};
use libfuzzer_sys::fuzz_target;

fn round_trip<T: Wire + PartialEq + std::fmt::Debug>(data: &[u8]) {
    let Ok(v) = m::decode_body::<T>("fuzz", 0, Bytes::copy_from_slice(data)) else {
        return;
    };
    let again = m::decode_body::<T>("fuzz", 0, m::encode_body(&v).freeze())
        .expect("an encoded value decodes");
    assert_eq!(v, again, "decode(encode(v)) != v");
}

fn pair<R>(data: &[u8], response: bool)
where
    R: MirrorRequest + PartialEq + std::fmt::Debug,
    R::Response: PartialEq + std::fmt::Debug,
{
    if response {
        round_trip::<R::Response>(data)
    } else {
        round_trip::<R>(data)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let resp = sel & 0x80 != 0;
    match sel & 0x7f {
        0 => pair::<m::CreateMirrorRequest>(rest, resp),
        1 => pair::<m::AddTopicsToMirrorRequest>(rest, resp),
        2 => pair::<m::RemoveTopicsFromMirrorRequest>(rest, resp),
        3 => pair::<m::LastMirroredEpochsRequest>(rest, resp),
        4 => pair::<m::ListMirrorsRequest>(rest, resp),
        5 => pair::<m::DescribeMirrorsRequest>(rest, resp),
        6 => pair::<m::ReadMirrorStatesRequest>(rest, resp),
        7 => pair::<m::PauseMirrorTopicsRequest>(rest, resp),
        8 => pair::<m::ResumeMirrorTopicsRequest>(rest, resp),
        9 => pair::<m::DeleteMirrorRequest>(rest, resp),
        10 => pair::<m::BumpLeaderEpochsRequest>(rest, resp),
        11 => {
            let mut b = Bytes::copy_from_slice(rest);
            if let Ok(h) = m::read_request_header_v2(&mut b) {
                let mut w = bytes::BytesMut::new();
                m::write_request_header_v2(
                    &mut w,
                    h.api_key,
                    h.api_version,
                    h.correlation_id,
                    h.client_id.as_deref(),
                );
                let again = m::read_request_header_v2(&mut w.freeze()).expect("re-decodes");
                assert_eq!(h, again);
            }
        }
        12 => {
            let mut b = Bytes::copy_from_slice(rest);
            let _ = m::read_response_header_v1(&mut b);
        }
        13 => {
            if rest.len() >= 4 {
                let key = i16::from_be_bytes([rest[0], rest[1]]);
                let code = i16::from_be_bytes([rest[2], rest[3]]);
                let msg = std::str::from_utf8(&rest[4..]).ok();
                let _ = m::error_response_body(key, code, msg);
            }
        }
        _ => {}
    }
});
