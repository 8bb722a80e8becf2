/// When appended data is fsynced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlushPolicy {
    /// fsync after every append (the append returns once data is durable).
    EveryAppend,
    /// fsync once `messages` records were appended or `ms` passed since the last flush
    /// (checked on append; 0 disables a bound).
    Interval { messages: u64, ms: u64 },
    /// Leave it to the OS; data is fsynced only on roll, flush() and close().
    Os,
}

/// Per-partition log configuration (Kafka topic config names in the field docs).
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// segment.bytes: roll when the active segment would exceed this (default 1 GiB).
    pub segment_bytes: u64,
    /// segment.ms: roll when the active segment's first batch is older than this (default 7 days).
    pub segment_ms: Option<u64>,
    /// retention.bytes: None = unlimited.
    pub retention_bytes: Option<u64>,
    /// retention.ms: None = unlimited (default 7 days).
    pub retention_ms: Option<u64>,
    /// index.interval.bytes: bytes between sparse index entries (default 4096).
    pub index_interval_bytes: u32,
    /// max.message.bytes: largest batch accepted (default 1 MiB + 12 bytes, like Kafka).
    pub max_message_bytes: u32,
    pub flush: FlushPolicy,
    /// message.timestamp.before.max.ms / message.timestamp.after.max.ms: how far a producer's
    /// CreateTime record may lie in the past / future of the broker's clock (Kafka 4 defaults:
    /// unbounded / one hour).
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
}

const WEEK_MS: u64 = 7 * 24 * 3600 * 1000;

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: Some(WEEK_MS),
            retention_bytes: None,
            retention_ms: Some(WEEK_MS),
            index_interval_bytes: 4096,
            max_message_bytes: 1024 * 1024 + 12,
            flush: FlushPolicy::Os,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: 3_600_000,
        }
    }
}
