//! Failover steps the control thread drives: unfinished failovers retried, and the
//! BumpLeaderEpochs requests partition leaders send to the seat.

use super::topic_sync::Topics;
use super::*;

impl Control {
    /// Failovers left unfinished (a fetcher that did not stop, a host error) are retried
    /// until STOPPED; the partition stays read-only meanwhile.
    pub(super) fn retry_failovers(&mut self) {
        if Instant::now() < self.failover_retry_at {
            return;
        }
        self.failover_retry_at = Instant::now() + FAILOVER_RETRY;
        let stopping: Vec<TopicPartition> = self
            .service
            .coordinator()
            .store()
            .partitions()
            .filter(|(_, e)| e.state == PartitionState::Stopping)
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in stopping {
            let (svc, host) = (&mut self.service, &mut self.host);
            match svc.coordinator_mut().run_failover(&tp, host) {
                Ok(()) => tracing::info!(%tp, "failover completed on retry"),
                Err(e) => tracing::debug!(%tp, error = %e, "failover still waiting"),
            }
        }
    }

    /// BumpLeaderEpochs (inter-broker, seeds: a partition leader asks the controller to raise
    /// the destination epoch to at least the source's): each partition's epoch is proposed
    /// to the quorum as `BumpLeaderEpoch { at_least }`, so every replica follows it.
    pub(super) fn bump_leader_epochs(&mut self, frame: Bytes) -> Option<Bytes> {
        bump_leader_epochs(&self.host, frame)
    }
}

/// Answers a BumpLeaderEpochs frame: each partition's epoch is proposed as
/// `BumpLeaderEpoch { at_least }`; an unknown topic id or partition is answered by code.
pub(super) fn bump_leader_epochs(store: &impl Topics, frame: Bytes) -> Option<Bytes> {
    use crate::api::{
        decode_body, encode_body, read_request_header_v2, write_response_header_v1,
        BumpLeaderEpochsRequest, BumpLeaderEpochsResponse, PartitionError, TopicPartitionErrors,
    };
    let mut body = frame;
    let header = read_request_header_v2(&mut body).ok()?;
    let resp = match decode_body::<BumpLeaderEpochsRequest>("BumpLeaderEpochs", 0, body) {
        Err(e) => crate::api::error_response_body(
            api::BUMP_LEADER_EPOCHS,
            keys::error::INVALID_REQUEST,
            Some(&e.to_string()),
        )?,
        Ok(r) => {
            let meta = store.metadata();
            let mut topics = Vec::new();
            for t in r.topics {
                let found = meta.topics.values().find(|m| m.id == t.topic_id);
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let error_code = match found {
                            None => keys::error::UNKNOWN_TOPIC_ID,
                            Some(m) if p.partition_index < 0
                                || p.partition_index >= m.partition_count() =>
                            {
                                keys::error::UNKNOWN_TOPIC_OR_PARTITION
                            }
                            Some(m) => match store.propose(
                                MetadataCommand::BumpLeaderEpoch {
                                    name: m.name.clone(),
                                    partition: p.partition_index,
                                    at_least: p.min_leader_epoch,
                                },
                            ) {
                                Ok(_) => keys::error::NONE,
                                Err(e) => {
                                    tracing::warn!(topic = %m.name, partition = p.partition_index, error = %e, "BumpLeaderEpochs");
                                    keys::error::UNKNOWN_SERVER_ERROR
                                }
                            },
                        };
                        PartitionError {
                            partition_index: p.partition_index,
                            error_code,
                            ..Default::default()
                        }
                    })
                    .collect();
                topics.push(TopicPartitionErrors {
                    topic_name: found.map(|m| m.name.clone()).unwrap_or_default(),
                    partitions,
                    ..Default::default()
                });
            }
            encode_body(&BumpLeaderEpochsResponse {
                topics,
                ..Default::default()
            })
        }
    };
    let mut out = bytes::BytesMut::with_capacity(resp.len() + 8);
    write_response_header_v1(&mut out, header.correlation_id);
    out.extend_from_slice(&resp);
    Some(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::super::topic_sync::mem::{topic, MemTopics};
    use super::*;
    use crate::api::{
        decode_body, encode_body, read_response_header_v1, write_request_header_v2,
        BumpEpochPartition, BumpEpochTopic, BumpLeaderEpochsRequest, BumpLeaderEpochsResponse,
    };

    fn ask(topics: &MemTopics, req: &BumpLeaderEpochsRequest) -> BumpLeaderEpochsResponse {
        let mut frame = bytes::BytesMut::new();
        write_request_header_v2(&mut frame, api::BUMP_LEADER_EPOCHS, 0, 9, Some("node-2"));
        frame.extend_from_slice(&encode_body(req));
        let mut out = bump_leader_epochs(topics, frame.freeze()).expect("an answer");
        assert_eq!(read_response_header_v1(&mut out).unwrap(), 9);
        decode_body("BumpLeaderEpochs", 0, out).unwrap()
    }

    fn part(partition_index: i32, min_leader_epoch: i32) -> BumpEpochPartition {
        BumpEpochPartition {
            partition_index,
            min_leader_epoch,
            ..Default::default()
        }
    }

    #[test]
    fn bump_leader_epochs_raises_known_partitions_and_names_the_unknown_ones() {
        let mut orders = topic("orders", 7, 2);
        orders.leader_epochs = vec![4, 9];
        let topics = MemTopics::new(vec![orders]);
        let req = BumpLeaderEpochsRequest {
            topics: vec![
                BumpEpochTopic {
                    topic_id: uuid::Uuid::from_bytes([7; 16]),
                    // Raised to 6; already above 3; no partition 5.
                    partitions: vec![part(0, 6), part(1, 3), part(5, 1)],
                    ..Default::default()
                },
                BumpEpochTopic {
                    topic_id: uuid::Uuid::from_bytes([8; 16]),
                    partitions: vec![part(0, 1)],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let r = ask(&topics, &req);
        let codes: Vec<(String, Vec<i16>)> = r
            .topics
            .iter()
            .map(|t| {
                let codes = t.partitions.iter().map(|p| p.error_code).collect();
                (t.topic_name.clone(), codes)
            })
            .collect();
        assert_eq!(
            codes,
            vec![
                (
                    "orders".to_owned(),
                    vec![
                        keys::error::NONE,
                        keys::error::NONE,
                        keys::error::UNKNOWN_TOPIC_OR_PARTITION
                    ]
                ),
                (String::new(), vec![keys::error::UNKNOWN_TOPIC_ID]),
            ]
        );
        assert_eq!(
            topics.meta.borrow().topics["orders"].leader_epochs,
            vec![6, 9]
        );
    }
}
