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
