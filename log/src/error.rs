use kmirror_types::{Offset, ProducerId};

/// Errors of the log layer. The broker maps them to Kafka error codes (named per variant).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// CRC / magic / length / count mismatch -> CORRUPT_MESSAGE.
    #[error("corrupt batch (offset hint {offset_hint:?}): {reason}")]
    Corrupt {
        offset_hint: Option<Offset>,
        reason: String,
    },
    /// -> INVALID_RECORD.
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Records whose CreateTime lies outside message.timestamp.before/after.max.ms ->
    /// INVALID_TIMESTAMP, with (index in the batch, message) of each (KIP-467 record errors).
    #[error("One or more records have been rejected due to invalid timestamp")]
    InvalidTimestamp { records: Vec<(i32, String)> },
    /// Keyless records to a compacted topic (index in the batch of each), and the other
    /// records whose timestamp is out of range -> INVALID_RECORD, or INVALID_TIMESTAMP when
    /// `bad_timestamps` is not empty (Kafka's LogValidator); the broker names the topic
    /// partition in each record's KIP-467 message.
    #[error("{} record(s) without key to a compacted topic", keyless.len())]
    KeylessRecords {
        keyless: Vec<i32>,
        bad_timestamps: Vec<(i32, String)>,
    },
    /// -> MESSAGE_TOO_LARGE.
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    RecordTooLarge { size: usize, max: u32 },
    /// Mirror batch below the log end offset.
    #[error("mirror batch base offset {base} below log end offset {log_end}")]
    NonMonotonicMirrorOffset { base: Offset, log_end: Offset },
    /// -> OFFSET_OUT_OF_RANGE.
    #[error("offset {requested} out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        requested: Offset,
        log_start: Offset,
        log_end: Offset,
    },
    /// -> DUPLICATE_SEQUENCE_NUMBER (only for retries older than the last 5 batches' window).
    #[error("duplicate sequence {sequence} for producer {producer_id}")]
    DuplicateSequence {
        producer_id: ProducerId,
        sequence: i32,
    },
    /// -> OUT_OF_ORDER_SEQUENCE_NUMBER.
    #[error(
        "out of order sequence for producer {producer_id}: got {sequence}, last {last_sequence}"
    )]
    OutOfOrderSequence {
        producer_id: ProducerId,
        sequence: i32,
        last_sequence: i32,
    },
    /// -> INVALID_PRODUCER_EPOCH (a newer epoch of this producer id exists).
    #[error("producer {producer_id} epoch {epoch} is older than current {current}")]
    InvalidProducerEpoch {
        producer_id: ProducerId,
        epoch: i16,
        current: i16,
    },
    /// -> INVALID_TXN_STATE (non-transactional write while a transaction is open, ...).
    #[error("invalid transaction state for producer {producer_id}: {reason}")]
    InvalidTxnState {
        producer_id: ProducerId,
        reason: String,
    },
    /// -> TRANSACTION_COORDINATOR_FENCED.
    #[error(
        "coordinator epoch {coordinator_epoch} older than {current} for producer {producer_id}"
    )]
    TransactionCoordinatorFenced {
        producer_id: ProducerId,
        coordinator_epoch: i32,
        current: i32,
    },
    /// -> KAFKA_STORAGE_ERROR.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl LogError {
    pub(crate) fn corrupt(offset_hint: Option<i64>, e: impl std::fmt::Display) -> Self {
        LogError::Corrupt {
            offset_hint: offset_hint.map(Offset),
            reason: e.to_string(),
        }
    }
}
