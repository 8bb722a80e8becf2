//! OffsetCommit for partitions that do not exist (unknown topic, or a partition index beyond
//! the topic's count): Kafka 4 answers UNKNOWN_TOPIC_OR_PARTITION for each (after
//! authorization, so a refused principal learns nothing) and commits the rest. They are taken
//! out here before the request reaches the coordinator, and their answers merged into its
//! response (one entry per topic, as Kafka answers).

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::ResponseError as E;

use crate::broker::Ctx;

/// Splits the unknown topics off an (authorized) OffsetCommit. Other requests pass through.
pub(crate) fn split_unknown(
    ctx: &Ctx,
    req: RequestKind,
) -> (RequestKind, Vec<OffsetCommitResponseTopic>) {
    let RequestKind::OffsetCommit(mut r) = req else {
        return (req, Vec::new());
    };
    let meta = ctx.meta();
    let mut refused = Vec::new();
    for t in std::mem::take(&mut r.topics) {
        let count = meta
            .topics
            .get(t.name.as_str())
            .map(|m| m.partition_count());
        let exists = |p: i32| count.is_some_and(|n| p >= 0 && p < n);
        let missing: Vec<OffsetCommitResponsePartition> = t
            .partitions
            .iter()
            .filter(|p| !exists(p.partition_index))
            .map(|p| {
                OffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(E::UnknownTopicOrPartition.code())
            })
            .collect();
        if !missing.is_empty() {
            refused.push(
                OffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(missing),
            );
        }
        let mut t = t;
        t.partitions.retain(|p| exists(p.partition_index));
        if !t.partitions.is_empty() {
            r.topics.push(t);
        }
    }
    (RequestKind::OffsetCommit(r), refused)
}

/// Whether nothing is left to commit (the coordinator need not be asked).
pub(crate) fn is_empty_commit(req: &RequestKind) -> bool {
    matches!(req, RequestKind::OffsetCommit(r) if r.topics.is_empty())
}

/// Adds the unknown topics' answers to the coordinator's response.
pub(crate) fn merge(resp: ResponseKind, refused: Vec<OffsetCommitResponseTopic>) -> ResponseKind {
    match resp {
        ResponseKind::OffsetCommit(mut c) if !refused.is_empty() => {
            for t in refused {
                match c.topics.iter_mut().find(|x| x.name == t.name) {
                    Some(x) => x.partitions.extend(t.partitions),
                    None => c.topics.push(t),
                }
            }
            ResponseKind::OffsetCommit(c)
        }
        other => other,
    }
}
