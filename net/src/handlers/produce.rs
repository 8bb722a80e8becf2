//! Produce: batches are validated and appended by the owning core's log (CRC, sizes,
//! idempotent sequence checks). The log re-compresses a batch only when the topic's
//! compression.type names another codec, and stamps it on a LogAppendTime topic (whose append
//! time the response carries in log_append_time_ms); otherwise the bytes are stored as sent.

use kafka_protocol::messages::produce_response::*;
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::ResponseError as E;
use kmirror_engine::{now_ms, AckState, EngineError, Pending};
use kmirror_log::AppendInfo;
use kmirror_types::{LeaderEpoch, NodeId, TopicPartition};

use super::{broker, s, topic_name};
use crate::authz::{table, Access};
use crate::broker::Ctx;
use crate::errors;
use kafka_protocol::protocol::StrBytes;

/// An append on the owning core: the append's result, the log start offset, and what an
/// `acks=all` produce still waits for.
type AppendOutcome = Result<(Result<AppendInfo, EngineError>, i64, Ack), EngineError>;

/// The replication part of a produce answer (issue 12).
enum Ack {
    /// acks=0/1, a single replica, or the high watermark already covers the batch.
    Now,
    /// acks=all: answered once the high watermark passes the batch end (or the ISR shrank
    /// below min.insync.replicas, or leadership moved), or REQUEST_TIMED_OUT at the timeout.
    Wait(flume::Receiver<AckState>),
}

enum Slot {
    Done(PartitionProduceResponse),
    Waiting(i32, Pending<AppendOutcome>),
}

fn failed(index: i32, code: i16, msg: Option<String>) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code)
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
        .with_error_message(msg.map(|m| s(&m)))
}

/// The records at fault of a record-validation refusal, with Kafka's messages, in batch
/// order; the partition's error message as Kafka words it. None for other errors.
fn record_faults(
    e: &EngineError,
    topic: &str,
    partition: i32,
) -> Option<(Vec<(i32, String)>, String)> {
    match e {
        EngineError::Log(kmirror_log::LogError::InvalidTimestamp { records }) => Some((
            records.clone(),
            "One or more records have been rejected due to invalid timestamp".into(),
        )),
        EngineError::Log(kmirror_log::LogError::KeylessRecords {
            keyless,
            bad_timestamps,
        }) => {
            let mut all: Vec<(i32, String)> = keyless
                .iter()
                .map(|i| {
                    (
                        *i,
                        format!(
                            "Compacted topic cannot accept message without key in topic partition {}-{}",
                            topic, partition
                        ),
                    )
                })
                .chain(bad_timestamps.iter().cloned())
                .collect();
            all.sort_by_key(|(i, _)| *i);
            let message = if bad_timestamps.is_empty() {
                // Kafka's LogValidator.processRecordErrors, RecordError's toString included.
                let shown: Vec<String> = all
                    .iter()
                    .take(3)
                    .map(|(i, m)| format!("RecordError(batchIndex={i}, message='{m}')"))
                    .collect();
                format!(
                    "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
                    all.len(),
                    shown.join(", ")
                )
            } else {
                "One or more records have been rejected due to invalid timestamp".into()
            };
            Some((all, message))
        }
        _ => None,
    }
}

/// A refused partition; for a record-validation refusal at Produce v8+, KIP-467's record
/// errors naming the records at fault and the log start offset, as Kafka answers.
fn refused(
    index: i32,
    e: &EngineError,
    version: i16,
    log_start: i64,
    topic: &str,
) -> PartitionProduceResponse {
    let code = errors::engine_error_code(e);
    let Some((records, message)) = record_faults(e, topic, index) else {
        return failed(index, code, Some(e.to_string()));
    };
    if version < 8 {
        return failed(index, code, Some(message));
    }
    failed(index, code, Some(message))
        .with_log_start_offset(log_start)
        .with_record_errors(
            records
                .iter()
                .map(|(i, m)| {
                    BatchIndexAndErrorMessage::default()
                        .with_batch_index(*i)
                        .with_batch_index_error_message(Some(s(m)))
                })
                .collect(),
        )
}

/// Whether the first batch of a record set is a v2 batch compressed with zstd (Kafka looks
/// at the first batch only).
fn first_batch_is_zstd(records: &[u8]) -> bool {
    use kmirror_log::batch::{BatchHeader, Compression, MAGIC_POS};
    BatchHeader::parse(records)
        .is_ok_and(|h| records[MAGIC_POS] == 2 && matches!(h.compression(), Compression::Zstd))
}

/// `min.insync.replicas` of the topic (Kafka's default 1).
pub(crate) fn min_insync_replicas(t: &kmirror_control::metadata::TopicMeta) -> usize {
    t.config_value("min.insync.replicas")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
}

/// The ISR committed for partition `p` where this node leads it, as the metadata this node
/// published holds it: an `acks=all` produce is decided by it even when the replication task
/// has not applied it to the partition yet (see `Partition::sync_committed_isr`).
pub(crate) fn committed_isr(
    t: &kmirror_control::metadata::TopicMeta,
    p: i32,
    node: i32,
) -> Option<(LeaderEpoch, std::collections::BTreeSet<NodeId>, i32)> {
    let a = t.assignments.get(usize::try_from(p).ok()?)?;
    if a.leader != node || a.replicas.len() < 2 {
        return None;
    }
    let epoch = LeaderEpoch(*t.leader_epochs.get(p as usize)?);
    let isr = a.isr.iter().map(|r| NodeId(*r)).collect();
    Some((epoch, isr, a.partition_epoch))
}

/// Waits (without blocking the core) until an `acks=all` append is decided or `deadline`.
async fn replicated(ack: Ack, deadline: std::time::Instant) -> AckState {
    let Ack::Wait(rx) = ack else {
        return AckState::Done;
    };
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    futures_lite::future::or(
        async { rx.recv_async().await.unwrap_or(AckState::NotLeader) },
        async {
            glommio::timer::sleep(left).await;
            AckState::Waiting
        },
    )
    .await
}

/// Returns None for acks=0 (the client expects no response).
pub(crate) async fn produce(
    ctx: &Ctx,
    access: &Access<'_>,
    version: i16,
    req: ProduceRequest,
) -> Option<ProduceResponse> {
    let acks = req.acks;
    let meta = ctx.meta();
    // A transactional producer needs WRITE on its transactional id, else every partition is
    // refused (Kafka's error response).
    let txn_denied = req
        .transactional_id
        .as_ref()
        .and_then(|t| access.check(table::TXN_WRITE, t).err());
    let mut topics = Vec::with_capacity(req.topic_data.len());
    let mut leaders = Vec::new();
    for td in req.topic_data {
        // An internal topic is answered below as described-but-not-writable.
        let topic = if version >= 13 {
            meta.topic_by_id(td.topic_id)
        } else {
            meta.topics.get(td.name.as_str())
        }
        .filter(|t| !t.internal);
        let mut slots = Vec::with_capacity(td.partition_data.len());
        // Authorized before existence, so a refused principal learns nothing of the topic.
        let denied = txn_denied.or_else(|| match (version >= 13, topic) {
            (true, None) => None,
            (true, Some(t)) => access.check(table::PRODUCE, &t.name).err(),
            (false, _) => access.check(table::PRODUCE, td.name.as_str()).err(),
        });
        for pd in td.partition_data {
            if let Some(code) = denied {
                slots.push(Slot::Done(failed(pd.index, code, None)));
                continue;
            }
            if !matches!(acks, -1..=1) {
                slots.push(Slot::Done(failed(
                    pd.index,
                    E::InvalidRequiredAcks.code(),
                    None,
                )));
                continue;
            }
            let Some(t) = topic else {
                let internal = if version >= 13 {
                    meta.described_by_id(td.topic_id)
                } else {
                    meta.described(td.name.as_str())
                };
                if let Some(i) = internal {
                    // Kafka's ReplicaManager: clients never append to an internal topic.
                    slots.push(Slot::Done(failed(
                        pd.index,
                        E::InvalidTopicException.code(),
                        Some(format!("Cannot append to internal topic {}", i.name)),
                    )));
                    continue;
                }
                let code = if version >= 13 {
                    E::UnknownTopicId.code()
                } else {
                    E::UnknownTopicOrPartition.code()
                };
                slots.push(Slot::Done(failed(pd.index, code, None)));
                continue;
            };
            if pd.index < 0 || pd.index >= t.partition_count() {
                slots.push(Slot::Done(failed(
                    pd.index,
                    E::UnknownTopicOrPartition.code(),
                    None,
                )));
                continue;
            }
            if let Some((leader, epoch)) = ctx.not_leader(&meta, &t.name, pd.index) {
                // Only the leader appends; KIP-951 (v10+) names the leader so the client
                // reroutes without a Metadata round trip.
                let mut r = failed(pd.index, E::NotLeaderOrFollower.code(), None);
                if version >= 10 {
                    leaders.push(leader);
                    r = r.with_current_leader(
                        LeaderIdAndEpoch::default()
                            .with_leader_id(broker(leader))
                            .with_leader_epoch(epoch),
                    );
                }
                slots.push(Slot::Done(r));
                continue;
            }
            let Some(records) = pd.records else {
                slots.push(Slot::Done(failed(
                    pd.index,
                    E::InvalidRecord.code(),
                    Some("no records".into()),
                )));
                continue;
            };
            if version < 7 && first_batch_is_zstd(&records) {
                // Kafka's ProduceRequest.validateRecords: zstd needs Produce v7 (KIP-110).
                slots.push(Slot::Done(failed(
                    pd.index,
                    E::UnsupportedCompressionType.code(),
                    None,
                )));
                continue;
            }
            let tp = TopicPartition::new(t.name.clone(), pd.index);
            let now = now_ms();
            let min_insync = if acks == -1 {
                min_insync_replicas(t)
            } else {
                0
            };
            let committed = if acks == -1 {
                committed_isr(t, pd.index, ctx.node_id())
            } else {
                None
            };
            match ctx
                .router()
                .submit_partition(tp, move |p| {
                    if kmirror_control::mirror::failpoint::armed_arg("panic-in-append")
                        == Some(p.tp.topic.as_str())
                    {
                        panic!("failpoint panic-in-append:{}", p.tp.topic);
                    }
                    let log_start = p.log.log_start_offset().get();
                    if acks == -1 {
                        if let Err(e) = p.check_leader() {
                            return (Err(e), log_start, Ack::Now);
                        }
                        if let Some((epoch, isr, partition_epoch)) = committed {
                            p.sync_committed_isr(epoch, isr, partition_epoch, now);
                        }
                        if !p.enough_replicas(min_insync) {
                            let e = EngineError::NotEnoughReplicas {
                                tp: p.tp.clone(),
                                min_insync,
                            };
                            return (Err(e), log_start, Ack::Now);
                        }
                    }
                    let r = p.append_leader(records, now);
                    let ack = match (&r, acks) {
                        (Ok(_), -1) => match p.wait_ack(p.log.log_end_offset(), min_insync) {
                            Ok(()) => Ack::Now,
                            Err(rx) => Ack::Wait(rx),
                        },
                        _ => Ack::Now,
                    };
                    (r, p.log.log_start_offset().get(), ack)
                })
                .await
            {
                Ok(pending) => slots.push(Slot::Waiting(pd.index, pending)),
                Err(e) => slots.push(Slot::Done(failed(
                    pd.index,
                    errors::engine_error_code(&e),
                    Some(e.to_string()),
                ))),
            }
        }
        topics.push((td.name, td.topic_id, slots));
    }
    // One deadline for every acks=all wait of the request (Kafka's DelayedProduce timeout).
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(req.timeout_ms.max(0) as u64);
    let mut responses = Vec::with_capacity(topics.len());
    for (name, id, slots) in topics {
        let mut parts = Vec::with_capacity(slots.len());
        for slot in slots {
            parts.push(match slot {
                Slot::Done(r) => r,
                Slot::Waiting(index, pending) => match pending.wait().await.and_then(|r| r) {
                    Ok((Ok(info), log_start, ack)) => match replicated(ack, deadline).await {
                        AckState::Done => PartitionProduceResponse::default()
                            .with_index(index)
                            .with_base_offset(info.first_offset.get())
                            .with_log_append_time_ms(info.log_append_time)
                            .with_log_start_offset(log_start),
                        other => failed(index, errors::ack_state_code(other), None),
                    },
                    Ok((Err(e), log_start, _)) => {
                        tracing::debug!(index, error = %e, "produce refused");
                        let topic = if version >= 13 {
                            meta.topic_by_id(id)
                                .map(|t| t.name.clone())
                                .unwrap_or_default()
                        } else {
                            name.to_string()
                        };
                        refused(index, &e, version, log_start, &topic)
                    }
                    Err(e) => {
                        tracing::debug!(index, error = %e, "produce refused");
                        failed(index, errors::engine_error_code(&e), Some(e.to_string()))
                    }
                },
            });
        }
        let name = if version >= 13 {
            meta.topic_by_id(id)
                .map(|t| topic_name(&t.name))
                .unwrap_or(name)
        } else {
            name
        };
        responses.push(
            TopicProduceResponse::default()
                .with_name(name)
                .with_topic_id(id)
                .with_partition_responses(parts),
        );
    }
    if acks == 0 {
        return None;
    }
    let endpoints = ctx
        .node_endpoints(&meta, leaders)
        .into_iter()
        .map(|b| {
            NodeEndpoint::default()
                .with_node_id(broker(b.id))
                .with_host(StrBytes::from_string(b.host))
                .with_port(b.port)
                .with_rack(b.rack.map(StrBytes::from_string))
        })
        .collect();
    Some(
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(endpoints),
    )
}
