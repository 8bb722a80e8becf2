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
pub(crate) fn refuse_mirror_partitions(
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

/// AddPartitionsToTxn the principal may not make: WRITE on the transactional id (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere), WRITE on every topic (else
/// TOPIC_AUTHORIZATION_FAILED on those, OPERATION_NOT_ATTEMPTED on the rest); v4+ (broker to
/// broker) needs CLUSTER_ACTION on the cluster. None: authorized, go on.
pub(crate) fn refuse_unauthorized(
    access: &crate::authz::Access<'_>,
    version: i16,
    req: &AddPartitionsToTxnRequest,
) -> Option<kafka_protocol::messages::ResponseKind> {
    use crate::authz::table;
    use kafka_protocol::messages::ResponseKind;
    if version >= 4 {
        let code = access.check_cluster(table::TXN_CLUSTER_ACTION).err()?;
        return Some(ResponseKind::AddPartitionsToTxn(
            AddPartitionsToTxnResponse::default().with_error_code(code),
        ));
    }
    let topics = &req.v3_and_below_topics;
    let resp = |results| {
        Some(ResponseKind::AddPartitionsToTxn(
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results),
        ))
    };
    if let Err(code) = access.check(table::TXN_WRITE, &req.v3_and_below_transactional_id) {
        return resp(topic_results(topics, |_, _| code));
    }
    let denied = |t: &AddPartitionsToTxnTopic| {
        access
            .check(table::ADD_PARTITIONS_TO_TXN_TOPIC, &t.name)
            .err()
    };
    if !topics.iter().any(|t| denied(t).is_some()) {
        return None;
    }
    let not_attempted = errors::code(E::OperationNotAttempted);
    resp(topic_results(topics, |t, _| {
        denied(t).unwrap_or(not_attempted)
    }))
}
