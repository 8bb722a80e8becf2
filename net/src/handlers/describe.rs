//! Read-only admin APIs a Kafka 4 AdminClient and the Kafka tools use: DescribeTopicPartitions
//! (kafka-topics --describe), DescribeLogDirs (kafka-log-dirs), DescribeProducers
//! (kafka-transactions describe-producers) and ElectLeaders (kafka-leader-election).
//!
//! They answer from the metadata snapshot and, for per-partition state, from the owning core
//! (through the router); the disk's free space is read on the blocking pool, never on a core.
//! Authorization follows Kafka's `KafkaApis` ([`table`]). kmirror is a single node: it
//! leads every partition, so an election is never needed.

use std::collections::BTreeMap;
use std::path::Path;

use kafka_protocol::messages::describe_log_dirs_response::*;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError as E;
use kmirror_control::metadata::TopicMeta;
use kmirror_types::TopicPartition;
use uuid::Uuid;

use super::{broker, s, topic_name, NO_AUTHORIZED_OPS};
use crate::authz::{table, Access};
use crate::broker::Ctx;
use crate::errors;

/// Kafka's `max.request.partition.size.limit` default: the most partitions one
/// DescribeTopicPartitions answer carries, whatever the client asks.
const MAX_PARTITIONS_PER_RESPONSE: i32 = 2000;

/// DescribeTopicPartitions (KIP-966): the named topics (or all the principal may describe)
/// in name order, at most `response_partition_limit` partitions, continuing from `cursor`;
/// `next_cursor` says where the next page starts. Unauthorized named topics are answered
/// TOPIC_AUTHORIZATION_FAILED without saying whether they exist; unknown ones
/// UNKNOWN_TOPIC_OR_PARTITION.
pub(crate) fn describe_topic_partitions(
    ctx: &Ctx,
    access: &Access<'_>,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let meta = ctx.meta();
    let all = req.topics.is_empty();
    let cursor_topic = req
        .cursor
        .as_ref()
        .map(|c| c.topic_name.to_string())
        .unwrap_or_default();
    let mut names: Vec<String> = if all {
        meta.described_topics().map(|t| t.name.clone()).collect()
    } else {
        req.topics.iter().map(|t| t.name.to_string()).collect()
    };
    names.retain(|n| *n >= cursor_topic);
    names.sort();
    names.dedup();
    let mut resp = DescribeTopicPartitionsResponse::default();
    if !all && req.cursor.is_some() && !names.contains(&cursor_topic) {
        // Kafka refuses a cursor outside the topic list (InvalidRequestException).
        resp.topics = names
            .iter()
            .map(|n| error_topic(n, E::InvalidRequest.code()))
            .collect();
        return resp;
    }
    let mut denied = Vec::new();
    names.retain(|n| {
        let ok = access.allows(table::DESCRIBE_TOPIC_PARTITIONS, n);
        if !ok && !all {
            denied.push(error_topic(n, E::TopicAuthorizationFailed.code()));
        }
        ok
    });
    let mut first_partition = match &req.cursor {
        Some(c) if access.allows(table::DESCRIBE_TOPIC_PARTITIONS, &cursor_topic) => {
            c.partition_index.max(0)
        }
        _ => 0,
    };
    let mut remaining = req
        .response_partition_limit
        .min(MAX_PARTITIONS_PER_RESPONSE);
    for name in names {
        if remaining <= 0 {
            resp.next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(&name))
                    .with_partition_index(0),
            );
            break;
        }
        let Some(t) = meta.described(&name) else {
            if !all {
                // Kafka fills in the authorized operations of an unknown (but describable)
                // topic too.
                resp.topics.push(
                    error_topic(&name, E::UnknownTopicOrPartition.code())
                        .with_topic_authorized_operations(
                            access.authorized_operations(
                                kmirror_control::authz::resource::TOPIC,
                                &name,
                            ),
                        ),
                );
            }
            first_partition = 0;
            continue;
        };
        let count = t.partition_count();
        let end = count.min(first_partition.saturating_add(remaining));
        let partitions = partitions_of(ctx, t, first_partition, end);
        remaining -= end - first_partition.min(end);
        resp.topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(&t.name)))
                .with_topic_id(t.id)
                .with_is_internal(t.internal)
                .with_partitions(partitions)
                .with_topic_authorized_operations(
                    access.authorized_operations(kmirror_control::authz::resource::TOPIC, &t.name),
                ),
        );
        if end < count {
            resp.next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(&t.name))
                    .with_partition_index(end),
            );
            break;
        }
        first_partition = 0;
    }
    resp.topics.extend(denied);
    resp
}

fn error_topic(name: &str, code: i16) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic::default()
        .with_error_code(code)
        .with_name(Some(topic_name(name)))
        .with_topic_id(Uuid::nil())
        .with_topic_authorized_operations(NO_AUTHORIZED_OPS)
}

fn partitions_of(
    ctx: &Ctx,
    t: &TopicMeta,
    from: i32,
    to: i32,
) -> Vec<DescribeTopicPartitionsResponsePartition> {
    let meta = ctx.meta();
    (from.max(0)..to)
        .map(|i| {
            let p = super::metadata::PartitionView::of(&meta, t, i, ctx.node_id());
            DescribeTopicPartitionsResponsePartition::default()
                .with_error_code(p.error_code)
                .with_partition_index(i)
                .with_leader_id(broker(p.leader))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(p.replicas.iter().copied().map(broker).collect())
                .with_isr_nodes(p.isr.iter().copied().map(broker).collect())
                .with_offline_replicas(p.offline.iter().copied().map(broker).collect())
                .with_eligible_leader_replicas(Some(Vec::new()))
                .with_last_known_elr(Some(Vec::new()))
        })
        .collect()
}

/// DescribeLogDirs: the one data directory, with the size of each (requested, existing)
/// partition and the disk's total and usable bytes. Without DESCRIBE on the cluster, Kafka
/// answers CLUSTER_AUTHORIZATION_FAILED (v3+) and no directories.
pub(crate) async fn describe_log_dirs(
    ctx: &Ctx,
    access: &Access<'_>,
    version: i16,
    req: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let mut resp = DescribeLogDirsResponse::default();
    if let Err(code) = access.check_cluster(table::DESCRIBE_LOG_DIRS) {
        if version >= 3 {
            resp.error_code = code;
        }
        return resp;
    }
    let meta = ctx.meta();
    let wanted: Vec<TopicPartition> = match req.topics {
        None => meta
            .topics
            .values()
            .flat_map(|t| (0..t.partition_count()).map(|p| TopicPartition::new(t.name.clone(), p)))
            .collect(),
        Some(list) => list
            .iter()
            .filter_map(|t| meta.topics.get(t.topic.as_str()).map(|m| (t, m)))
            .flat_map(|(t, m)| {
                t.partitions
                    .iter()
                    .filter(|p| **p >= 0 && **p < m.partition_count())
                    .map(|p| TopicPartition::new(m.name.clone(), *p))
                    .collect::<Vec<_>>()
            })
            .collect(),
    };
    let mut pending = Vec::new();
    for tp in wanted {
        let p = ctx
            .router()
            .submit_partition(tp.clone(), |part| part.log.size_bytes())
            .await;
        pending.push((tp, p));
    }
    let mut by_topic: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for (tp, p) in pending {
        let size = match p {
            Ok(p) => p.wait().await.and_then(|r| r),
            Err(e) => Err(e),
        };
        // A partition that could not be opened is not in the directory.
        if let Ok(size) = size {
            by_topic.entry(tp.topic.to_string()).or_default().push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_partition_size(size as i64)
                    // The only replica is the leader: nothing to catch up.
                    .with_offset_lag(0),
            );
        }
    }
    let log_dir = log_dir(ctx).await;
    let abs = std::path::PathBuf::from(&log_dir);
    let space = glommio::executor()
        .spawn_blocking(move || disk_space(&abs))
        .await;
    let (total, usable) = space.unwrap_or((-1, -1));
    let mut result = DescribeLogDirsResult::default()
        .with_log_dir(s(&log_dir))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    DescribeLogDirsTopic::default()
                        .with_name(topic_name(&t))
                        .with_partitions(ps)
                })
                .collect(),
        );
    if version >= 4 {
        result = result.with_total_bytes(total).with_usable_bytes(usable);
    }
    resp.results = vec![result];
    resp
}

/// (total, usable) bytes of the filesystem holding `dir`.
fn disk_space(dir: &Path) -> Option<(i64, i64)> {
    let st = rustix::fs::statvfs(dir).ok()?;
    let unit = st.f_frsize as i64;
    Some((st.f_blocks as i64 * unit, st.f_bavail as i64 * unit))
}

/// DescribeProducers: the producers each partition's log remembers (id, epoch, last
/// sequence and timestamp, coordinator epoch, open transaction's first offset). READ on the
/// topic, else TOPIC_AUTHORIZATION_FAILED; UNKNOWN_TOPIC_OR_PARTITION for a partition that
/// does not exist.
pub(crate) async fn describe_producers(
    ctx: &Ctx,
    access: &Access<'_>,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let meta = ctx.meta();
    let mut topics = Vec::new();
    for t in req.topics {
        let denied = access.check(table::DESCRIBE_PRODUCERS, &t.name).err();
        let count = meta
            .topics
            .get(t.name.as_str())
            .map(|m| m.partition_count());
        let mut pending = Vec::new();
        for p in t.partition_indexes {
            let refused = match (denied, count) {
                (Some(code), _) => Some((code, None)),
                (None, Some(n)) if p >= 0 && p < n => None,
                // Kafka's answer for a partition outside its metadata carries the error's
                // default message; one of a known topic comes from the replica manager bare.
                (None, Some(_)) => Some((E::UnknownTopicOrPartition.code(), None)),
                (None, None) => Some((
                    E::UnknownTopicOrPartition.code(),
                    Some(errors::UNKNOWN_TOPIC_OR_PARTITION_MESSAGE),
                )),
            };
            let job = match refused {
                Some(refusal) => Err(refusal),
                None => Ok(ctx
                    .router()
                    .submit_partition(TopicPartition::new(t.name.to_string(), p), |part| {
                        part.log.producers()
                    })
                    .await),
            };
            pending.push((p, job));
        }
        let mut partitions = Vec::new();
        for (p, job) in pending {
            let out = PartitionResponse::default().with_partition_index(p);
            let got = match job {
                Err(refusal) => Err(refusal),
                Ok(Err(e)) => Err((errors::engine_error_code(&e), None)),
                Ok(Ok(pending)) => match pending.wait().await.and_then(|r| r) {
                    Ok(v) => Ok(v),
                    Err(e) => Err((errors::engine_error_code(&e), None)),
                },
            };
            partitions.push(match got {
                Err((code, msg)) => out.with_error_code(code).with_error_message(msg.map(s)),
                Ok(producers) => out.with_active_producers(
                    producers
                        .into_iter()
                        .map(|(pid, e)| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(pid.0))
                                .with_producer_epoch(e.producer_epoch as i32)
                                .with_last_sequence(e.last_sequence)
                                .with_last_timestamp(e.last_timestamp)
                                .with_coordinator_epoch(e.coordinator_epoch)
                                .with_current_txn_start_offset(
                                    e.current_txn_first_offset.map_or(-1, |o| o.0),
                                )
                        })
                        .collect(),
                ),
            });
        }
        topics.push(
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    DescribeProducersResponse::default().with_topics(topics)
}

/// The node's one log directory, absolute (as DescribeLogDirs names it).
async fn log_dir(ctx: &Ctx) -> String {
    let dir = ctx.config().data_dir.clone();
    glommio::executor()
        .spawn_blocking(move || {
            std::fs::canonicalize(&dir)
                .unwrap_or(dir)
                .display()
                .to_string()
        })
        .await
}

/// AlterReplicaLogDirs: kmirror keeps every replica in its one data directory, so moving a
/// replica there is done already (NONE), any other path is LOG_DIR_NOT_FOUND, and a
/// partition this node does not host is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers with a
/// single log dir.
pub(crate) async fn alter_replica_log_dirs(
    ctx: &Ctx,
    access: &Access<'_>,
    req: AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    use alter_replica_log_dirs_response::{
        AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
    };
    let denied = access.check_cluster(table::ALTER_LOG_DIRS).err();
    let ours = log_dir(ctx).await;
    let meta = ctx.meta();
    let mut by_topic: BTreeMap<String, Vec<AlterReplicaLogDirPartitionResult>> = BTreeMap::new();
    for dir in &req.dirs {
        let here = std::path::Path::new(dir.path.as_str()) == Path::new(&ours);
        for t in &dir.topics {
            for p in &t.partitions {
                let hosted = meta.topics.get(t.name.as_str()).is_some_and(|m| {
                    *p >= 0 && *p < m.partition_count() && ctx.cluster().hosts(m, *p)
                });
                let code = match () {
                    _ if denied.is_some() => denied.unwrap_or_default(),
                    _ if !here => E::LogDirNotFound.code(),
                    _ if !hosted => E::UnknownTopicOrPartition.code(),
                    _ => 0,
                };
                by_topic.entry(t.name.to_string()).or_default().push(
                    AlterReplicaLogDirPartitionResult::default()
                        .with_partition_index(*p)
                        .with_error_code(code),
                );
            }
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                AlterReplicaLogDirTopicResult::default()
                    .with_topic_name(topic_name(&t))
                    .with_partitions(ps)
            })
            .collect(),
    )
}
