//! DescribeQuorum (API 55): the metadata quorum as `kafka-metadata-quorum describe --status /
//! --replication` shows it, from the Raft driver's `QuorumStatus`.
//!
//! Only the Raft leader knows every voter's progress, so a node that is not the leader
//! forwards the request once to the leader's inter-broker listener (with its TLS and SASL;
//! Kafka's brokers forward it to the active controller too), on a plain thread, never blocking the core. A forwarded
//! request is always answered locally. A one-node broker answers as a one-node KRaft broker
//! does: itself, the only voter, leads.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BytesMut};
use kafka_protocol::messages::describe_quorum_response::*;
use kafka_protocol::messages::{
    ApiKey, DescribeQuorumRequest, DescribeQuorumResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::ResponseError as E;

use super::{broker, s, topic_name};
use crate::authz::{table, Access};
use crate::broker::Ctx;

/// The metadata log's topic partition, `__cluster_metadata-0`.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// The client id a forwarded request carries (never forwarded again).
const FORWARDED: &str = "kmirror-quorum-forward";

pub async fn describe_quorum(
    ctx: &Ctx,
    access: &Access<'_>,
    client_id: Option<&str>,
    version: i16,
    req: DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    if !access.allows_cluster(table::DESCRIBE_CLUSTER) {
        return DescribeQuorumResponse::default()
            .with_error_code(E::ClusterAuthorizationFailed.code());
    }
    let cluster = &ctx.broker.cluster;
    if let Some(status) = cluster.quorum_status() {
        let me = status.node_id;
        if client_id != Some(FORWARDED) {
            if let Some(addr) = status
                .leader
                .filter(|l| *l != me)
                .and_then(|l| leader_addr(ctx, l))
            {
                let (tx, rx) = flume::bounded(1);
                let r = req.clone();
                let ib = ctx.broker.config.inter_broker.clone();
                let spawned = std::thread::Builder::new()
                    .name("kmirror-quorum-fwd".into())
                    .spawn(move || {
                        let _ = tx.send(forward(&ib, &addr, version, &r));
                    });
                if spawned.is_ok() {
                    if let Ok(Ok(resp)) = rx.recv_async().await {
                        return resp;
                    }
                }
            }
        }
    }
    local(ctx, version, &req)
}

/// The leader broker's inter-broker listener.
fn leader_addr(ctx: &Ctx, leader: u64) -> Option<String> {
    let meta = ctx.meta();
    ctx.broker
        .config
        .inter_broker
        .peer_addr(&meta, i32::try_from(leader).ok()?)
}

fn forward(
    ib: &crate::interbroker::InterBroker,
    addr: &str,
    version: i16,
    req: &DescribeQuorumRequest,
) -> Result<DescribeQuorumResponse, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::DescribeQuorum as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str(FORWARDED)));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, DescribeQuorumRequest::header_version(version))
        .map_err(|e| err(&e))?;
    req.encode(&mut buf, version).map_err(|e| err(&e))?;
    let mut body = ib.exchange(addr, &buf, Duration::from_secs(5))?;
    ResponseHeader::decode(&mut body, DescribeQuorumResponse::header_version(version))
        .map_err(|e| err(&e))?;
    let resp = DescribeQuorumResponse::decode(&mut body, version).map_err(|e| err(&e))?;
    if body.has_remaining() {
        return Err("trailing bytes".into());
    }
    Ok(resp)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// This node's answer: the leader's full view, or (a follower whose leader is unknown or
/// unreachable) what it knows, with unknown progress as -1.
fn local(ctx: &Ctx, version: i16, req: &DescribeQuorumRequest) -> DescribeQuorumResponse {
    let cluster = &ctx.broker.cluster;
    let now = now_ms();
    let node = ctx.node_id();
    let (leader, epoch, hw, voters, nodes) = match cluster.quorum_status() {
        None => {
            // One node: itself, the only voter, at the metadata's version.
            let v = ctx.meta().version as i64;
            let voter = ReplicaState::default()
                .with_replica_id(broker(node))
                .with_log_end_offset(v)
                .with_last_fetch_timestamp(if version >= 1 { now } else { -1 })
                .with_last_caught_up_timestamp(if version >= 1 { now } else { -1 });
            (node, 1, v, vec![voter], Vec::new())
        }
        Some(st) => {
            let leader = st.leader.map_or(-1, |l| l as i32);
            let voters = st
                .voters
                .iter()
                .map(|id| {
                    let leo = st
                        .progress
                        .iter()
                        .find(|(v, _)| v == id)
                        .map_or(-1, |(_, i)| *i as i64);
                    let heard = st
                        .last_heard_ms
                        .iter()
                        .find(|(v, _)| v == id)
                        .and_then(|(_, ms)| (*ms < u64::MAX).then(|| now - *ms as i64))
                        .unwrap_or(-1);
                    let caught_up = if leo >= 0 && leo >= st.commit_index as i64 {
                        heard
                    } else {
                        -1
                    };
                    let mut r = ReplicaState::default()
                        .with_replica_id(broker(*id as i32))
                        .with_log_end_offset(leo);
                    if version >= 1 {
                        r = r
                            .with_last_fetch_timestamp(heard)
                            .with_last_caught_up_timestamp(caught_up);
                    }
                    r
                })
                .collect();
            let nodes = if version >= 2 {
                cluster
                    .voters()
                    .iter()
                    .filter_map(|v| {
                        let (host, port) = v.addr.rsplit_once(':')?;
                        Some(
                            Node::default()
                                .with_node_id(broker(v.id as i32))
                                .with_listeners(vec![Listener::default()
                                    .with_name(s("CONTROLLER"))
                                    .with_host(s(host
                                        .trim_start_matches('[')
                                        .trim_end_matches(']')))
                                    .with_port(port.parse().ok()?)]),
                        )
                    })
                    .collect()
            } else {
                Vec::new()
            };
            (
                leader,
                st.term as i32,
                st.commit_index as i64,
                voters,
                nodes,
            )
        }
    };
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    if t.topic_name.as_str() != METADATA_TOPIC || p.partition_index != 0 {
                        return PartitionData::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(E::UnknownTopicOrPartition.code());
                    }
                    PartitionData::default()
                        .with_partition_index(0)
                        .with_leader_id(broker(leader))
                        .with_leader_epoch(epoch)
                        .with_high_watermark(hw)
                        .with_current_voters(voters.clone())
                })
                .collect();
            TopicData::default()
                .with_topic_name(topic_name(t.topic_name.as_str()))
                .with_partitions(partitions)
        })
        .collect();
    DescribeQuorumResponse::default()
        .with_topics(topics)
        .with_nodes(nodes)
}
