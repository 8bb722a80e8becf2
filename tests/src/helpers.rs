//! Small helpers that several test files share: the clock, and the like.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: a record timestamp of "now".
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}
