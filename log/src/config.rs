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
    /// cleanup.policy includes `compact`: Some(settings), and [`crate::Log::cleaning_job`]
    /// offers work. None: the log is never cleaned (retention alone applies).
    pub compaction: Option<CompactionConfig>,
    /// message.timestamp.before.max.ms / message.timestamp.after.max.ms: how far a producer's
    /// CreateTime record may lie in the past / future of the broker's clock (Kafka 4 defaults:
    /// unbounded / one hour).
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
    /// compression.type: None for `producer` (batches are stored in the producer's codec);
    /// Some: a produced batch in another codec is re-compressed into this one (never a
    /// mirrored batch: the mirror path stores bytes as the source wrote them).
    pub compression: Option<TopicCodec>,
    /// message.timestamp.type=LogAppendTime: produced batches are stamped with the append
    /// time (timestamp-type bit, maxTimestamp) and the Produce response carries it.
    pub log_append_time: bool,
}

/// A topic's compression.type codec with its compression.*.level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicCodec {
    pub codec: crate::batch::Compression,
    /// None: the codec's default.
    pub level: Option<i32>,
}

/// The compaction settings of a `cleanup.policy=compact` (or `compact,delete`) topic, with
/// Kafka's meaning and defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionConfig {
    /// min.cleanable.dirty.ratio (0.5): clean once dirty bytes / cleanable bytes reach this.
    pub min_cleanable_dirty_ratio: f64,
    /// min.compaction.lag.ms (0): a segment holding a record newer than this is not cleaned.
    pub min_compaction_lag_ms: u64,
    /// max.compaction.lag.ms (Long.MAX): a dirty segment whose first batch is older than this
    /// is cleaned whatever the dirty ratio.
    pub max_compaction_lag_ms: u64,
    /// delete.retention.ms (1 day): how long tombstones and transaction markers are kept
    /// after the cleaning pass that first saw them (KIP-534's batch delete horizon).
    pub delete_retention_ms: u64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX as u64,
            delete_retention_ms: 24 * 3600 * 1000,
        }
    }
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
            compaction: None,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: 3_600_000,
            compression: None,
            log_append_time: false,
        }
    }
}
