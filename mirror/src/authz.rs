//! Authorization of the mirror wire APIs: the broker's per-API table
//! ([`kmirror_net::authz::table`]) says which cluster permission each one needs; this module
//! answers a refused call with the API's own error response, which only the mirror codec can
//! write.
//!
//! Must not: decide permissions itself (the broker's `Access` does).

use kmirror_net::authz::{table, Access};

/// A mirror API the principal may not call: the whole error response frame (header
/// included, as the extension answers). None: authorized (or not a mirror API).
pub(crate) fn refuse_mirror_api(
    access: &Access<'_>,
    api_key: i16,
    frame: &bytes::Bytes,
) -> Option<bytes::Bytes> {
    use crate::api::{error_response_body, read_request_header_v2, write_response_header_v1};
    use crate::keys::{api, error};
    let (need, code) = match api_key {
        api::CREATE_MIRROR
        | api::ADD_TOPICS_TO_MIRROR
        | api::REMOVE_TOPICS_FROM_MIRROR
        | api::PAUSE_MIRROR_TOPICS
        | api::RESUME_MIRROR_TOPICS
        | api::DELETE_MIRROR => (table::MIRROR_ALTER, error::MIRROR_AUTHORIZATION_FAILED),
        api::LAST_MIRRORED_EPOCHS | api::DESCRIBE_MIRRORS => {
            (table::MIRROR_READ, error::CLUSTER_AUTHORIZATION_FAILED)
        }
        api::LIST_MIRRORS => (table::MIRROR_LIST, error::CLUSTER_AUTHORIZATION_FAILED),
        api::READ_MIRROR_STATES | api::WRITE_MIRROR_STATES | api::BUMP_LEADER_EPOCHS => {
            (table::MIRROR_STATE, error::CLUSTER_AUTHORIZATION_FAILED)
        }
        _ => return None,
    };
    if access.allows_cluster(need) {
        return None;
    }
    let mut body = frame.clone();
    let header = read_request_header_v2(&mut body).ok()?;
    let resp = error_response_body(api_key, code, Some(error::default_message(code)))?;
    let mut out = bytes::BytesMut::with_capacity(resp.len() + 8);
    write_response_header_v1(&mut out, header.correlation_id);
    out.extend_from_slice(&resp);
    Some(out.freeze())
}

/// DescribeMirrors' AuthorizedOperations for the requesting principal: a bit per ACL
/// operation code (as Kafka encodes authorized operations) among those a mirror is checked
/// against: READ (describe a mirror, LastMirroredEpochs), ALTER (create, add, remove, pause,
/// resume, delete) and DESCRIBE (list), each on the cluster.
pub(crate) fn mirror_operations(access: &Access<'_>) -> i32 {
    [table::MIRROR_READ, table::MIRROR_ALTER, table::MIRROR_LIST]
        .into_iter()
        .filter(|n| access.allows_cluster(*n))
        .fold(0, |bits, n| bits | (1 << n.operation))
}

/// A DescribeMirrors response frame with each mirror's AuthorizedOperations set to `ops`,
/// when the request frame asked for them (IncludeAuthorizedOperations); else unchanged.
pub(crate) fn with_authorized_operations(
    request: &bytes::Bytes,
    response: bytes::Bytes,
    ops: i32,
) -> bytes::Bytes {
    use crate::api::{
        decode_body, encode_body, read_request_header_v2, write_response_header_v1,
        DescribeMirrorsRequest, DescribeMirrorsResponse,
    };
    let patched = || -> Option<bytes::Bytes> {
        let mut body = request.clone();
        let header = read_request_header_v2(&mut body).ok()?;
        let req: DescribeMirrorsRequest = decode_body("DescribeMirrors", 0, body).ok()?;
        if !req.include_authorized_operations {
            return None;
        }
        let mut resp = response.clone();
        let _correlation = crate::api::read_response_header_v1(&mut resp).ok()?;
        let mut r: DescribeMirrorsResponse =
            decode_body("DescribeMirrors response", 0, resp).ok()?;
        for m in r.mirrors.iter_mut().filter(|m| m.error_code == 0) {
            m.authorized_operations = ops;
        }
        let body = encode_body(&r);
        let mut out = bytes::BytesMut::with_capacity(body.len() + 8);
        write_response_header_v1(&mut out, header.correlation_id);
        out.extend_from_slice(&body);
        Some(out.freeze())
    };
    patched().unwrap_or(response)
}
