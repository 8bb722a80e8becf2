//! Small shared types used by every layer of kmirror.
//!
//! Owns: the newtypes for offsets, leader epochs, producer ids and Kafka error codes, and
//! the topic-partition key. Depends on nothing else in the workspace and on no
//! runtime, so every crate can use it.
//!
//! Invariants worth naming: an [`Offset`] is a Kafka log offset (non-negative
//! once assigned; `-1` appears only on the wire and is kept out of this type);
//! a [`LeaderEpoch`] is the partition leader epoch stamped in a batch header.
//! Mixing the two up silently corrupts failover and failback, hence the types.

use std::fmt;

/// A Kafka log offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub i64);

impl Offset {
    pub const ZERO: Offset = Offset(0);

    pub fn get(self) -> i64 {
        self.0
    }

    pub fn next(self) -> Offset {
        Offset(self.0 + 1)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A partition leader epoch, as stamped in a RecordBatch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LeaderEpoch(pub i32);

impl LeaderEpoch {
    /// "No epoch known" on the wire (a request's current leader epoch, -1): the broker then
    /// skips its epoch check.
    pub const UNKNOWN: LeaderEpoch = LeaderEpoch(-1);

    pub fn get(self) -> i32 {
        self.0
    }
}

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An idempotent / transactional producer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ProducerId(pub i64);

impl ProducerId {
    /// The "no producer" id used by non-idempotent batches.
    pub const NONE: ProducerId = ProducerId(-1);
}

impl fmt::Display for ProducerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A broker (node) id, as in Kafka's `node.id`: replica lists, leaders and ISRs name these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub i32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A Kafka error code (Kafka's `Errors.java` numbers) as it crosses a seam between layers:
/// the one type for "the source answered this code" or "answer the client this code".
/// 0 is no error ([`ErrorCode::NONE`]). The numbers are named in one table
/// (`kmirror_net::keys::error`), so this type accepts any `i16`: a source may answer codes
/// newer than ours, and they must pass through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ErrorCode(i16);

impl ErrorCode {
    /// No error.
    pub const NONE: ErrorCode = ErrorCode(0);

    pub const fn new(code: i16) -> ErrorCode {
        ErrorCode(code)
    }

    /// The number on the wire.
    pub const fn code(self) -> i16 {
        self.0
    }

    pub const fn is_none(self) -> bool {
        self.0 == 0
    }

    /// `Ok(())` for no error, else the code as an error: a per-partition answer becomes a
    /// `Result` at the seam instead of a code to remember to check.
    pub fn ok(self) -> Result<(), ErrorCode> {
        if self.is_none() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl From<i16> for ErrorCode {
    fn from(code: i16) -> ErrorCode {
        ErrorCode(code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A topic name and partition index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_partition_displays_like_kafka_directory_names() {
        assert_eq!(TopicPartition::new("orders", 3).to_string(), "orders-3");
    }

    #[test]
    fn only_error_code_zero_is_success() {
        assert_eq!(ErrorCode::NONE.ok(), Ok(()));
        assert_eq!(ErrorCode::new(6).ok(), Err(ErrorCode::new(6)));
        assert_eq!(ErrorCode::from(-1).code(), -1);
    }

    #[test]
    fn offsets_order_numerically() {
        assert!(Offset(9) < Offset(10));
        assert_eq!(Offset(4).next(), Offset(5));
    }
}
