//! ListOffsets, OffsetForLeaderEpoch and DeleteRecords.

use kafka_protocol::messages::delete_records_response::*;
use kafka_protocol::messages::list_offsets_response::*;
use kafka_protocol::messages::offset_for_leader_epoch_response::*;
use kafka_protocol::messages::{
    DeleteRecordsRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest,
};
use kafka_protocol::ResponseError as E;
use kmirror_engine::{EngineError, Partition, Pending};
use kmirror_types::{LeaderEpoch, Offset, TopicPartition};

use crate::authz::{table, Access};
use crate::broker::Ctx;
use crate::errors;

/// Kafka's special ListOffsets timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

/// Kafka's localLogWithEpochOrThrow: the epoch first, then whether this node leads.
fn epoch_check(p: &Partition, current_leader_epoch: i32) -> Result<(), i16> {
    let cur = p.leader_epoch.get();
    if current_leader_epoch >= 0 && current_leader_epoch < cur {
        return Err(E::FencedLeaderEpoch.code());
    }
    if current_leader_epoch > cur {
        return Err(E::UnknownLeaderEpoch.code());
    }
    p.check_leader().map_err(|e| errors::engine_error_code(&e))
}

/// A submitted per-partition job whose closure answers a value or a Kafka code.
type Submitted<T> = Result<Pending<Result<Result<T, i16>, EngineError>>, EngineError>;

/// Collects a job result, flattening engine errors into a Kafka code.
async fn settle<T>(p: Submitted<T>) -> Result<T, i16> {
    let r = match p {
        Ok(p) => p.wait().await.and_then(|r| r),
        Err(e) => Err(e),
    };
    match r {
        Ok(inner) => inner,
        Err(e) => Err(errors::engine_error_code(&e)),
    }
}

pub(crate) async fn list_offsets(
    ctx: &Ctx,
    access: &Access<'_>,
    version: i16,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let denied: Vec<Option<i16>> = req
        .topics
        .iter()
        .map(|t| access.check(table::LIST_OFFSETS, &t.name).err())
        .collect();
    // LeaderEpoch exists from v4 on; kafka-protocol refuses to encode a v1-v3 answer that
    // carries one, so older clients (librdkafka 2.0 asks v1-v3) would lose the connection.
    let epoch_in = |e: i32| if version >= 4 { e } else { -1 };
    let read_committed = req.isolation_level == 1;
    let meta = ctx.meta();
    let mut pending = Vec::new();
    for t in req
        .topics
        .iter()
        .zip(&denied)
        .filter(|(_, d)| d.is_none())
        .map(|(t, _)| t)
    {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
            let (ts, cle) = (p.timestamp, p.current_leader_epoch);
            if ctx.not_leader(&meta, &tp.topic, tp.partition).is_some() {
                pending.push(Err(Err(E::NotLeaderOrFollower.code())));
                continue;
            }
            pending.push(Ok(ctx
                .router()
                .submit_partition(tp, move |part| -> Result<(i64, i64, i32), i16> {
                    epoch_check(part, cle)?;
                    let log = &part.log;
                    let epoch = part.leader_epoch.get();
                    let upper = if read_committed {
                        log.last_stable_offset()
                    } else {
                        log.high_watermark()
                    };
                    Ok(match ts {
                        EARLIEST | EARLIEST_LOCAL => (-1, log.log_start_offset().get(), epoch),
                        LATEST | LATEST_TIERED => (-1, upper.get(), epoch),
                        MAX_TIMESTAMP => match log.max_timestamp_offset() {
                            Some((o, t)) if o < upper => (t, o.get(), epoch),
                            _ => (-1, -1, -1),
                        },
                        ts if ts >= 0 => match log.offset_for_timestamp(ts) {
                            Some((o, t)) if o < upper => (t, o.get(), epoch),
                            _ => (-1, -1, -1),
                        },
                        _ => return Err(E::InvalidRequest.code()),
                    })
                })
                .await));
        }
    }
    let mut pending = pending.into_iter();
    let mut topics = Vec::with_capacity(req.topics.len());
    for (t, denied) in req.topics.into_iter().zip(denied) {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let r = match denied {
                Some(code) => Err(code),
                None => match pending.next().expect("one per partition") {
                    Ok(p) => settle(p).await,
                    Err(internal) => internal,
                },
            };
            parts.push(match r {
                Ok((ts, off, ep)) => ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_timestamp(ts)
                    .with_offset(off)
                    .with_leader_epoch(epoch_in(ep)),
                Err(code) => ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code)
                    .with_timestamp(-1)
                    .with_offset(-1)
                    .with_leader_epoch(-1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(parts),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

pub(crate) async fn offset_for_leader_epoch(
    ctx: &Ctx,
    access: &Access<'_>,
    _version: i16,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    // Followers hold CLUSTER_ACTION; consumers (KIP-320) need DESCRIBE on the topic.
    let cluster = access.check_cluster(table::REPLICA_CLUSTER_ACTION).is_ok();
    let denied: Vec<Option<i16>> = req
        .topics
        .iter()
        .map(|t| {
            (!cluster)
                .then(|| access.check(table::OFFSET_FOR_LEADER_EPOCH, &t.topic).err())
                .flatten()
        })
        .collect();
    let meta = ctx.meta();
    let mut pending = Vec::new();
    for t in req
        .topics
        .iter()
        .zip(&denied)
        .filter(|(_, d)| d.is_none())
        .map(|(t, _)| t)
    {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.topic.to_string(), p.partition);
            let (cle, want) = (p.current_leader_epoch, p.leader_epoch);
            // Only the leader answers (a follower's OffsetsForLeaderEpoch to the leader is
            // served here too: it is the leader's log that is asked).
            if ctx.not_leader(&meta, &tp.topic, tp.partition).is_some() {
                pending.push(Err(EngineError::NotOwner(tp)));
                continue;
            }
            pending.push(
                ctx.router()
                    .submit_partition(tp, move |part| -> Result<(i32, i64), i16> {
                        epoch_check(part, cle)?;
                        let log = &part.log;
                        if want == part.leader_epoch.get() {
                            // The current epoch ends at the log end (Kafka semantics).
                            return Ok((want, log.log_end_offset().get()));
                        }
                        Ok(match log.end_offset_for_epoch(LeaderEpoch(want)) {
                            Some((e, o)) => (e.get(), o.get()),
                            None => (-1, -1),
                        })
                    })
                    .await,
            );
        }
    }
    let mut pending = pending.into_iter();
    let mut topics = Vec::with_capacity(req.topics.len());
    for (t, denied) in req.topics.into_iter().zip(denied) {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let r = match denied {
                Some(code) => Err(code),
                None => settle(pending.next().expect("one per partition")).await,
            };
            parts.push(match r {
                Ok((e, o)) => EpochEndOffset::default()
                    .with_partition(p.partition)
                    .with_leader_epoch(e)
                    .with_end_offset(o),
                Err(code) => EpochEndOffset::default()
                    .with_partition(p.partition)
                    .with_error_code(code)
                    .with_leader_epoch(-1)
                    .with_end_offset(-1),
            });
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(parts),
        );
    }
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

pub(crate) async fn delete_records(
    ctx: &Ctx,
    access: &Access<'_>,
    _version: i16,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let denied: Vec<Option<i16>> = req
        .topics
        .iter()
        .map(|t| access.check(table::DELETE_RECORDS, &t.name).err())
        .collect();
    let meta = ctx.meta();
    let mut pending = Vec::new();
    for t in req
        .topics
        .iter()
        .zip(&denied)
        .filter(|(_, d)| d.is_none())
        .map(|(t, _)| t)
    {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.to_string(), p.partition_index);
            let offset = p.offset;
            if ctx.not_leader(&meta, &tp.topic, tp.partition).is_some() {
                // NOT_LEADER_OR_FOLLOWER: only the leader deletes records.
                pending.push(Err(EngineError::NotOwner(tp)));
                continue;
            }
            pending.push(
                ctx.router()
                    .submit_partition(tp, move |part| -> Result<i64, i16> {
                        if part.mirror.is_some() {
                            return Err(crate::keys::error::READ_ONLY_TOPIC);
                        }
                        let hw = part.log.high_watermark().get();
                        let target = if offset == -1 { hw } else { offset };
                        if target < 0 || target > hw {
                            return Err(E::OffsetOutOfRange.code());
                        }
                        part.log
                            .delete_records_before(Offset(target))
                            .map(|o| o.get())
                            .map_err(|e| errors::log_error_code(&e))
                    })
                    .await,
            );
        }
    }
    let mut pending = pending.into_iter();
    let mut topics = Vec::with_capacity(req.topics.len());
    for (t, denied) in req.topics.into_iter().zip(denied) {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let r = match denied {
                Some(code) => Err(code),
                None => settle(pending.next().expect("one per partition")).await,
            };
            parts.push(match r {
                Ok(low) => DeleteRecordsPartitionResult::default()
                    .with_partition_index(p.partition_index)
                    .with_low_watermark(low),
                Err(code) => DeleteRecordsPartitionResult::default()
                    .with_partition_index(p.partition_index)
                    .with_low_watermark(-1)
                    .with_error_code(code),
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(parts),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}
