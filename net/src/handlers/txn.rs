//! Transaction requests checked before they reach the coordinator: a mirror partition must
//! never join a transaction (its COMMIT/ABORT marker would take an offset that belongs to the
//! source), so AddPartitionsToTxn naming one is refused with READ_ONLY_TOPIC here, and the
//! other partitions of that transaction get OPERATION_NOT_ATTEMPTED, as Kafka answers a
//! partly invalid AddPartitionsToTxn.

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
use kafka_protocol::ResponseError as E;
use kmirror_control::metadata::ClusterMetadata;

use crate::errors;

fn is_mirror(meta: &ClusterMetadata, t: &AddPartitionsToTxnTopic) -> bool {
    meta.topics
        .get(t.name.0.as_str())
        .is_some_and(|m| m.mirror.is_some())
}

fn touches_mirror(meta: &ClusterMetadata, topics: &[AddPartitionsToTxnTopic]) -> bool {
    topics.iter().any(|t| is_mirror(meta, t))
}

/// One result per named partition, in request order, with `code_of(topic, partition)`.
pub(crate) fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    mut code_of: impl FnMut(&AddPartitionsToTxnTopic, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(code_of(t, *p))
                        })
                        .collect(),
                )
        })
        .collect()
}

fn refusal(
    meta: &ClusterMetadata,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<AddPartitionsToTxnTopicResult> {
    let read_only = crate::keys::error::READ_ONLY_TOPIC;
    let not_attempted = errors::code(E::OperationNotAttempted);
    topic_results(topics, |t, _| {
        if is_mirror(meta, t) {
            read_only
        } else {
            not_attempted
        }
    })
}

/// Splits a request: the answer for transactions naming a mirror partition (refused whole),
/// and the request left for the coordinator (None when nothing is left to forward).
pub fn refuse_mirror_partitions(
    meta: &ClusterMetadata,
    version: i16,
    mut req: AddPartitionsToTxnRequest,
) -> (
    Option<AddPartitionsToTxnResponse>,
    Option<AddPartitionsToTxnRequest>,
) {
    if version <= 3 {
        if !touches_mirror(meta, &req.v3_and_below_topics) {
            return (None, Some(req));
        }
        let resp = AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(refusal(meta, &req.v3_and_below_topics));
        return (Some(resp), None);
    }
    let (refused, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut req.transactions)
        .into_iter()
        .partition(|t| touches_mirror(meta, &t.topics));
    if refused.is_empty() {
        req.transactions = kept;
        return (None, Some(req));
    }
    let results = refused
        .iter()
        .map(|t| {
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(refusal(meta, &t.topics))
        })
        .collect();
    let resp = AddPartitionsToTxnResponse::default().with_results_by_transaction(results);
    if kept.is_empty() {
        return (Some(resp), None);
    }
    req.transactions = kept;
    (Some(resp), Some(req))
}
