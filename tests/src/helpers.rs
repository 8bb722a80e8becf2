//! Small helpers that several test files share, one copy instead of one per file: the clock,
//! protocol strings, addresses, tool runs and process start-up that no runner module owns.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::{GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;

/// Milliseconds since the Unix epoch: a record timestamp of "now".
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// A protocol string (`StrBytes`) from `v`.
pub fn str_bytes(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A protocol topic name from `v`.
pub fn topic_name(v: &str) -> TopicName {
    TopicName(str_bytes(v))
}

/// A protocol group id from `v`.
pub fn group_id(v: &str) -> GroupId {
    GroupId(str_bytes(v))
}

/// The port of a `host:port` address.
pub fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .expect("port")
        .parse()
        .expect("port")
}

/// `kafka-acls --bootstrap-server boot ARGS…` (90 s); its stdout. Panics unless it exits 0.
pub fn acls_tool(boot: &str, args: &[&str]) -> String {
    let mut all = vec!["--bootstrap-server", boot];
    all.extend_from_slice(args);
    crate::java::run_tool(
        crate::java::tools::ACL_COMMAND,
        &all,
        Duration::from_secs(90),
    )
    .stdout
}
