//! One module per API family. Handlers turn decoded requests into responses; failures go
//! through [`crate::errors`] so each condition always maps to the same Kafka code.

pub(crate) mod admin;
pub(crate) mod configs;
pub(crate) mod describe;
pub(crate) mod fetch;
pub(crate) mod metadata;
pub(crate) mod offset_commit;
pub(crate) mod offsets;
pub(crate) mod produce;
pub(crate) mod quorum;
pub(crate) mod transactions;
pub(crate) mod txn;

use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;

pub(crate) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub(crate) fn topic_name(v: &str) -> TopicName {
    TopicName(s(v))
}

pub(crate) fn broker(id: i32) -> BrokerId {
    BrokerId(id)
}

/// Kafka's "authorized operations not requested" sentinel.
pub(crate) const NO_AUTHORIZED_OPS: i32 = i32::MIN;
