//! DescribeQuorum (API 55): the metadata quorum as `kafka-metadata-quorum describe --status /
//! --replication` shows it, from the Raft driver's `QuorumStatus`: voters, observers (nodes
//! that joined and are not voters: raft learners), their directory ids and controller
//! endpoints. AddRaftVoter (80) and RemoveRaftVoter (81): KIP-853's voter changes, answered
//! by any node (Kafka's brokers forward them to the active controller; here the change is
//! checked on the applied state and raft forwards the proposal to its leader).
//!
//! Only the Raft leader knows every voter's progress, so a node that is not the leader
//! forwards the request once to the leader's inter-broker listener (with its TLS and SASL;
//! Kafka's brokers forward it to the active controller too), with async I/O on the core that
//! received it. A node that knows a leader it cannot reach through its inter-broker listener
//! (in 5 s) answers NOT_LEADER_OR_FOLLOWER, never its own stale view; a node that knows no
//! leader answers what it knows (leader -1). A forwarded request is always answered locally. A one-node broker answers as a one-node KRaft broker
//! does: itself, the only voter, leads.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::describe_quorum_response::*;
use kafka_protocol::messages::{
    AddRaftVoterRequest, AddRaftVoterResponse, DescribeQuorumRequest, DescribeQuorumResponse,
    RemoveRaftVoterRequest, RemoveRaftVoterResponse, UnregisterBrokerRequest,
    UnregisterBrokerResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use super::{broker, s, topic_name};
use crate::authz::{table, Access};
use crate::broker::Ctx;

/// The metadata log's topic partition, `__cluster_metadata-0`.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// The client id a forwarded request carries (never forwarded again).
const FORWARDED: &str = "kmirror-quorum-forward";
/// The name of the controller listener (Kafka's usual `controller.listener.names`).
const CONTROLLER_LISTENER: &str = "CONTROLLER";
/// Bounds on how long a voter change may wait (the request's TimeoutMs within them).
const MIN_VOTER_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_VOTER_TIMEOUT: Duration = Duration::from_secs(60);

/// A directory id as Kafka writes it (URL-safe base64 of the 16 bytes) as a protocol uuid.
fn kafka_uuid(text: &str) -> Option<uuid::Uuid> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()?;
    Some(uuid::Uuid::from_bytes(bytes.try_into().ok()?))
}

/// The protocol uuid as Kafka's text.
fn kafka_uuid_text(u: &uuid::Uuid) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(u.as_bytes())
}

/// What AddRaftVoter / RemoveRaftVoter check before the change (Kafka's
/// `KafkaRaftClient` order: authorization, a quorum that can change, the cluster id, a
/// voter key with a directory id).
fn voter_request_checks(
    ctx: &Ctx,
    access: &Access<'_>,
    cluster_id: Option<&str>,
    voter_id: i32,
    directory_id: &uuid::Uuid,
) -> Result<kmirror_cluster::DriverHandle, (i16, String)> {
    if !access.allows_cluster(table::ALTER_VOTERS) {
        return Err((E::ClusterAuthorizationFailed.code(), String::new()));
    }
    let driver = ctx.cluster().driver().clone();
    let meta = ctx.meta();
    if let Some(id) = cluster_id.filter(|id| *id != meta.cluster_id) {
        return Err((
            E::InconsistentClusterId.code(),
            format!(
                "The given id \"{id}\" doesn't match the cluster id \"{}\"",
                meta.cluster_id
            ),
        ));
    }
    if voter_id < 0 || directory_id.is_nil() {
        return Err((
            E::InvalidRequest.code(),
            "The request didn't include a valid voter (id and directory id)".into(),
        ));
    }
    Ok(driver)
}

/// Runs a voter change through the controller thread (its answer awaited on a channel).
async fn change_voters(
    driver: kmirror_cluster::DriverHandle,
    change: kmirror_cluster::VoterChange,
    timeout: Duration,
) -> (i16, String) {
    match driver.change_voters_async(change, timeout).await {
        Ok(_) => (0, String::new()),
        Err(e) => {
            let f = crate::cluster::ProposeFailure::from(e);
            let code = match &f {
                // The change was not proposed in time: Kafka's answer to a leaderless
                // quorum is a timeout the admin client retries.
                crate::cluster::ProposeFailure::NoLeader { .. } => E::RequestTimedOut.code(),
                f => crate::errors::propose_failure_code(f),
            };
            (code, f.to_string())
        }
    }
}

fn message(text: String) -> Option<StrBytes> {
    (!text.is_empty()).then(|| StrBytes::from_string(text))
}

/// AddRaftVoter (80): makes an observer that caught up a voter. `Listeners` must name the
/// controller endpoint (Kafka: INVALID_REQUEST without one for the controller listener);
/// the address the quorum uses is the one the node joined with.
pub(crate) async fn add_raft_voter(
    ctx: &Ctx,
    access: &Access<'_>,
    req: AddRaftVoterRequest,
) -> AddRaftVoterResponse {
    let answer = |(code, text): (i16, String)| {
        AddRaftVoterResponse::default()
            .with_error_code(code)
            .with_error_message(message(text))
    };
    let driver = match voter_request_checks(
        ctx,
        access,
        req.cluster_id.as_deref(),
        req.voter_id,
        &req.voter_directory_id,
    ) {
        Ok(d) => d,
        Err(e) => return answer(e),
    };
    let controller = req
        .listeners
        .iter()
        .any(|l| l.name.eq_ignore_ascii_case(CONTROLLER_LISTENER))
        || req.listeners.len() == 1;
    if !controller {
        return answer((
            E::InvalidRequest.code(),
            format!(
                "Add voter request didn't include the endpoint for the default listener \
                 {CONTROLLER_LISTENER}"
            ),
        ));
    }
    let timeout = Duration::from_millis(req.timeout_ms.max(0) as u64)
        .clamp(MIN_VOTER_TIMEOUT, MAX_VOTER_TIMEOUT);
    let change = kmirror_cluster::VoterChange::Add {
        id: req.voter_id as u64,
        directory_id: kafka_uuid_text(&req.voter_directory_id),
    };
    answer(change_voters(driver, change, timeout).await)
}

/// RemoveRaftVoter (81): the voter with this id and directory id leaves the voter set and
/// keeps following the log as an observer (a combined node stays a broker). Removing the
/// leader works: it steps down once the change applied and the others elect.
pub(crate) async fn remove_raft_voter(
    ctx: &Ctx,
    access: &Access<'_>,
    req: RemoveRaftVoterRequest,
) -> RemoveRaftVoterResponse {
    let answer = |(code, text): (i16, String)| {
        RemoveRaftVoterResponse::default()
            .with_error_code(code)
            .with_error_message(message(text))
    };
    let driver = match voter_request_checks(
        ctx,
        access,
        req.cluster_id.as_deref(),
        req.voter_id,
        &req.voter_directory_id,
    ) {
        Ok(d) => d,
        Err(e) => return answer(e),
    };
    let change = kmirror_cluster::VoterChange::Remove {
        id: req.voter_id as u64,
        directory_id: kafka_uuid_text(&req.voter_directory_id),
    };
    answer(change_voters(driver, change, Duration::from_secs(30)).await)
}

pub(crate) async fn describe_quorum(
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
    let status = ctx.cluster().quorum_status();
    let leader = status.leader.filter(|l| *l != status.node_id);
    if let Some(l) = leader.filter(|_| client_id != Some(FORWARDED)) {
        if let Some(addr) = leader_addr(ctx, l) {
            let ib = &ctx.config().inter_broker;
            if let Ok(resp) = forward(ib, &addr, version, &req).await {
                return resp;
            }
        }
        // A leader is known and did not answer through this node (or this node does not
        // know where it listens: a node whose data dir was wiped and is not admitted yet).
        // Its own view would be stale, so it says so as a Kafka controller that is not the
        // leader does; the Admin client retries, on another node too.
        return not_leader(&req);
    }
    local(ctx, version, &req)
}

/// NOT_LEADER_OR_FOLLOWER for every partition asked (retriable for the Admin client).
fn not_leader(req: &DescribeQuorumRequest) -> DescribeQuorumResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            TopicData::default()
                .with_topic_name(topic_name(t.topic_name.as_str()))
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(E::NotLeaderOrFollower.code())
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeQuorumResponse::default().with_topics(topics)
}

/// The leader broker's inter-broker listener.
fn leader_addr(ctx: &Ctx, leader: u64) -> Option<String> {
    let meta = ctx.meta();
    ctx.config()
        .inter_broker
        .peer_addr(&meta, i32::try_from(leader).ok()?)
}

async fn forward(
    ib: &crate::interbroker::InterBroker,
    addr: &str,
    version: i16,
    req: &DescribeQuorumRequest,
) -> Result<DescribeQuorumResponse, String> {
    ib.request(addr, req, version, Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// This node's answer: the leader's full view, or (a follower whose leader is unknown or
/// unreachable) what it knows, with unknown progress as -1.
fn local(ctx: &Ctx, version: i16, req: &DescribeQuorumRequest) -> DescribeQuorumResponse {
    let cluster = &ctx.cluster();
    let now = now_ms();
    let (leader, epoch, hw, (voters, observers), nodes) = {
        let st = cluster.quorum_status();
        let leader = st.leader.map_or(-1, |l| l as i32);
        let dir_of = |id: u64| {
            st.members
                .iter()
                .find(|m| m.id == id)
                .and_then(|m| kafka_uuid(&m.directory_id))
                .unwrap_or_default()
        };
        let replica = |id: &u64| {
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
            if version >= 2 {
                r = r.with_replica_directory_id(dir_of(*id));
            }
            r
        };
        let voters: Vec<ReplicaState> = st.voters.iter().map(replica).collect();
        let observers: Vec<ReplicaState> = st.learners.iter().map(replica).collect();
        let nodes = if version >= 2 {
            // Replicated addresses first; a founding voter that has not stated its own
            // yet is where the quorum string says.
            let mut addrs: Vec<(u64, String)> =
                st.members.iter().map(|m| (m.id, m.addr.clone())).collect();
            for v in cluster.voters() {
                if !addrs.iter().any(|(id, _)| *id == v.id) {
                    addrs.push((v.id, v.addr.clone()));
                }
            }
            addrs.sort();
            addrs
                .iter()
                .filter(|(id, _)| st.voters.contains(id) || st.learners.contains(id))
                .filter_map(|(id, addr)| {
                    let (host, port) = addr.rsplit_once(':')?;
                    Some(
                        Node::default()
                            .with_node_id(broker(*id as i32))
                            .with_listeners(vec![Listener::default()
                                .with_name(s(CONTROLLER_LISTENER))
                                .with_host(s(host.trim_start_matches('[').trim_end_matches(']')))
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
            (voters, observers),
            nodes,
        )
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
                        .with_observers(observers.clone())
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

/// UnregisterBroker (64, `kafka-cluster unregister`): the broker's registration goes (it
/// leaves every ISR, its leaderships move; Kafka's `ReplicationControlManager`), and a node
/// that is only an observer also leaves the quorum's configuration, so the leader stops
/// sending it the log. For a node that left for good: a running broker is not registered
/// again until it restarts. ALTER on CLUSTER, as Kafka's `ControllerApis`.
pub(crate) async fn unregister_broker(
    ctx: &Ctx,
    access: &Access<'_>,
    req: UnregisterBrokerRequest,
) -> UnregisterBrokerResponse {
    let answer = |code: i16, text: String| {
        UnregisterBrokerResponse::default()
            .with_error_code(code)
            .with_error_message(message(text))
    };
    if !access.allows_cluster(table::ALTER_VOTERS) {
        return answer(E::ClusterAuthorizationFailed.code(), String::new());
    }
    let cluster = &ctx.cluster();
    let driver = cluster.driver();
    let id = req.broker_id.0;
    let cmd = kmirror_control::quorum::ClusterCommand::Metadata(
        kmirror_control::quorum::MetadataCommand::UnregisterBroker { id },
    );
    if let Err(f) = cluster.propose(cmd).await {
        return answer(crate::errors::propose_failure_code(&f), f.to_string());
    }
    let observer = u64::try_from(id)
        .ok()
        .filter(|n| driver.status().learners.contains(n));
    if let Some(n) = observer {
        let change = kmirror_cluster::VoterChange::RemoveObserver { id: n };
        let (code, text) = change_voters(driver.clone(), change, Duration::from_secs(15)).await;
        if code != 0 {
            tracing::warn!(node = n, code, %text, "unregistered broker is still an observer");
        }
    }
    answer(0, String::new())
}
