//! Transaction markers across a cluster: the coordinator writes each commit/abort marker on
//! the leader of its partition, as Kafka's coordinator sends WriteTxnMarkers to partition
//! leaders.
//!
//! Owns: the WriteTxnMarkers (key 27) handler a partition leader serves, and
//! [`RoutingMarkerSink`], the coordinator's [`MarkerSink`] in cluster mode: markers of
//! partitions this node leads go to its engine ([`EngineMarkerSink`]), the others to their
//! leader's broker in one WriteTxnMarkers request each. A job is one task on an engine core
//! (the core owning its first partition), its requests async on that core; the coordinator
//! thread only queues it. A failure (no leader, NOT_LEADER_OR_FOLLOWER, a dead node, 10 s
//! without an answer) fails the job, which the coordinator retries every second with fresh
//! metadata.
//!
//! The request goes to the leader's inter-broker listener ([`InterBroker`], Kafka's
//! `inter.broker.listener.name`) with the TLS and SASL that listener needs; the leader
//! checks CLUSTER_ACTION on the cluster, so the coordinator's principal needs it (a super
//! user, as Kafka's brokers are).

use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_log::ControlKind;
use kmirror_types::TopicPartition;

use crate::broker::{Ctx, EngineMarkerSink};
use crate::cluster::{Cluster, Role};
use crate::groups::{MarkerSink, MarkersDone, TxnMarker};
use crate::interbroker::InterBroker;

/// The WriteTxnMarkers version sent (v1: flexible, Kafka 2.8+).
const VERSION: i16 = 1;
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// WriteTxnMarkers on a partition leader: appends each marker's control batch to the
/// partitions this node leads; NOT_LEADER_OR_FOLLOWER for the others, as Kafka.
pub async fn write_txn_markers(
    ctx: &Ctx,
    access: &crate::authz::Access<'_>,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let refused = access
        .check_cluster(crate::authz::table::TXN_CLUSTER_ACTION)
        .err();
    let meta = ctx.cluster().snapshot();
    let mut markers = Vec::with_capacity(req.markers.len());
    for mut m in req.markers {
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in std::mem::take(&mut m.topics) {
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for p in t.partition_indexes {
                let tp = TopicPartition::new(t.name.0.to_string(), p);
                let code = match refused {
                    Some(code) => code,
                    None => match ctx.cluster().role(&meta, &tp) {
                        None => kafka_protocol::ResponseError::UnknownTopicOrPartition.code(),
                        // The group coordinator of that partition settles the producer's
                        // pending offsets (Kafka's coordinator replays the marker).
                        Some(Role::Leader { .. }) if tp.topic == crate::groups::OFFSETS_TOPIC => {
                            match ctx.groups() {
                                Some(g) => {
                                    g.group_markers(
                                        tp.partition,
                                        m.producer_id.0,
                                        m.transaction_result,
                                    )
                                    .await
                                }
                                None => kafka_protocol::ResponseError::NotLeaderOrFollower.code(),
                            }
                        }
                        Some(Role::Leader { .. }) => {
                            let kind = if m.transaction_result {
                                ControlKind::Commit
                            } else {
                                ControlKind::Abort
                            };
                            append(ctx, tp, kind, &m).await
                        }
                        Some(_) => kafka_protocol::ResponseError::NotLeaderOrFollower.code(),
                    },
                };
                partitions.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(p)
                        .with_error_code(code),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(t.name)
                    .with_partitions(partitions),
            );
        }
        markers.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}

async fn append(ctx: &Ctx, tp: TopicPartition, kind: ControlKind, m: &WritableTxnMarker) -> i16 {
    let (pid, epoch, coordinator_epoch) = (m.producer_id, m.producer_epoch, m.coordinator_epoch);
    let router = ctx.router();
    let pending = match router
        .submit_partition(tp, move |p| {
            p.append_control(
                kind,
                kmirror_types::ProducerId(pid.0),
                epoch,
                coordinator_epoch,
                kmirror_engine::now_ms(),
            )
        })
        .await
    {
        Ok(pending) => pending,
        Err(e) => return crate::errors::engine_error_code(&e),
    };
    match pending.wait().await {
        Ok(Ok(Ok(_))) => 0,
        Ok(Err(e)) | Ok(Ok(Err(e))) | Err(e) => crate::errors::engine_error_code(&e),
    }
}

/// The coordinator's marker sink in a cluster (see the module doc).
pub struct RoutingMarkerSink {
    local: EngineMarkerSink,
    cluster: Cluster,
    node_id: i32,
    inter_broker: InterBroker,
}

impl RoutingMarkerSink {
    pub fn new(
        local: EngineMarkerSink,
        cluster: Cluster,
        node_id: i32,
        inter_broker: InterBroker,
    ) -> RoutingMarkerSink {
        RoutingMarkerSink {
            local,
            cluster,
            node_id,
            inter_broker,
        }
    }
}

impl MarkerSink for RoutingMarkerSink {
    fn initialize_share_state(
        &self,
        group: String,
        parts: Vec<(uuid::Uuid, i32)>,
        state_epoch: i32,
        start_offset: i64,
        done: crate::groups::ShareInitDone,
    ) -> Result<(), String> {
        let (targets, unknown) = self.share_coordinators(&group, parts);
        let inter_broker = self.inter_broker.clone();
        let near = TopicPartition::new(kmirror_control::metadata::SHARE_STATE_TOPIC, 0);
        self.local.spawn_near(&near, move |_router| async move {
            let (mut ok, mut failed) = (Vec::new(), unknown);
            for (addr, ps) in targets {
                let (o, f) = send_share_initialize(
                    &inter_broker,
                    &addr,
                    &group,
                    &ps,
                    (state_epoch, start_offset),
                )
                .await;
                ok.extend(o);
                failed.extend(f);
            }
            done.report(ok, failed).await
        })
    }

    fn delete_share_state(
        &self,
        group: String,
        parts: Vec<(uuid::Uuid, i32)>,
    ) -> Result<(), String> {
        let (targets, unknown) = self.share_coordinators(&group, parts);
        if !unknown.is_empty() {
            tracing::debug!(%group, ?unknown, "share state not deleted: no coordinator");
        }
        let inter_broker = self.inter_broker.clone();
        let near = TopicPartition::new(kmirror_control::metadata::SHARE_STATE_TOPIC, 0);
        self.local.spawn_near(&near, move |_router| async move {
            for (addr, ps) in targets {
                if let Err(e) = send_share_delete(&inter_broker, &addr, &group, &ps).await {
                    tracing::warn!(%group, %addr, error = %e, "deleting share state failed");
                }
            }
        })
    }

    fn write_markers(&self, markers: Vec<TxnMarker>, done: MarkersDone) -> Result<(), String> {
        let Some(first) = markers.first().cloned() else {
            return Err("no markers".into());
        };
        let meta = self.cluster.snapshot();
        let mut local = Vec::new();
        let mut remote: std::collections::BTreeMap<i32, Vec<TxnMarker>> = Default::default();
        let mut unknown = Vec::new();
        for m in markers {
            let tp = TopicPartition::new(m.topic.clone(), m.partition);
            match self.cluster.role(&meta, &tp) {
                Some(Role::Leader { .. }) => local.push(m),
                Some(Role::Follower { leader, .. } | Role::NotReplica { leader, .. })
                    if leader >= 0 =>
                {
                    remote.entry(leader).or_default().push(m)
                }
                _ => unknown.push(tp),
            }
        }
        let mut targets = Vec::new();
        for (leader, ms) in remote {
            match self.inter_broker.peer_addr(&meta, leader) {
                Some(addr) => targets.push((addr, ms)),
                None => unknown.push(TopicPartition::new(ms[0].topic.clone(), ms[0].partition)),
            }
        }
        let inter_broker = self.inter_broker.clone();
        self.local.spawn(&first, move |router| async move {
            let result = async {
                if !unknown.is_empty() {
                    return Err(format!("no leader known for {unknown:?}"));
                }
                if !local.is_empty() {
                    EngineMarkerSink::write(&router, local).await?;
                }
                for (addr, ms) in targets {
                    send_markers(&inter_broker, &addr, &ms)
                        .await
                        .map_err(|e| format!("WriteTxnMarkers to {addr}: {e}"))?;
                }
                Ok(())
            };
            done.report(result.await).await
        })
    }
}

/// Share partitions (topic id, partition) by the address of their share coordinator.
type ByCoordinator = std::collections::BTreeMap<String, Vec<(uuid::Uuid, i32)>>;

impl RoutingMarkerSink {
    /// The leaders of the `__share_group_state` partitions of `parts`' keys (None: no
    /// leader, or no address for it).
    fn share_coordinators(
        &self,
        group: &str,
        parts: Vec<(uuid::Uuid, i32)>,
    ) -> (ByCoordinator, Vec<(uuid::Uuid, i32)>) {
        let meta = self.cluster.snapshot();
        let mut by_addr = ByCoordinator::new();
        let mut unknown = Vec::new();
        let topic = kmirror_control::metadata::SHARE_STATE_TOPIC;
        let n = meta.topics.get(topic).map_or(0, |t| t.partition_count());
        for (t, p) in parts {
            let addr = (n > 0)
                .then(|| kmirror_control::share::state_record::state_partition(group, t, p, n))
                .and_then(
                    |sp| match self.cluster.role(&meta, &TopicPartition::new(topic, sp)) {
                        Some(Role::Follower { leader, .. } | Role::NotReplica { leader, .. })
                            if leader >= 0 && leader != self.node_id =>
                        {
                            self.inter_broker.peer_addr(&meta, leader)
                        }
                        _ => None,
                    },
                );
            match addr {
                Some(a) => by_addr.entry(a).or_default().push((t, p)),
                None => unknown.push((t, p)),
            }
        }
        (by_addr, unknown)
    }
}

/// Share partitions grouped by topic id, as the state RPCs carry them.
fn by_topic(parts: &[(uuid::Uuid, i32)]) -> std::collections::BTreeMap<uuid::Uuid, Vec<i32>> {
    let mut m: std::collections::BTreeMap<uuid::Uuid, Vec<i32>> = Default::default();
    for (t, p) in parts {
        m.entry(*t).or_default().push(*p);
    }
    m
}

/// InitializeShareGroupState (v0) of `parts` of `group` at `addr`; the partitions it
/// initialized and those it did not.
async fn send_share_initialize(
    inter_broker: &InterBroker,
    addr: &str,
    group: &str,
    parts: &[(uuid::Uuid, i32)],
    (state_epoch, start_offset): (i32, i64),
) -> (Vec<(uuid::Uuid, i32)>, Vec<(uuid::Uuid, i32)>) {
    use kafka_protocol::messages::initialize_share_group_state_request as rq;
    use kafka_protocol::messages::InitializeShareGroupStateRequest;
    let req = InitializeShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(group.to_string()))
        .with_topics(
            by_topic(parts)
                .into_iter()
                .map(|(t, ps)| {
                    rq::InitializeStateData::default()
                        .with_topic_id(t)
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    rq::PartitionData::default()
                                        .with_partition(p)
                                        .with_state_epoch(state_epoch)
                                        .with_start_offset(start_offset)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    let Ok(resp) = inter_broker.request_kept(addr, &req, 0, IO_TIMEOUT).await else {
        return (Vec::new(), parts.to_vec());
    };
    let mut ok = Vec::new();
    for t in &resp.results {
        for p in &t.partitions {
            if p.error_code == 0 {
                ok.push((t.topic_id, p.partition));
            }
        }
    }
    let failed = parts.iter().filter(|k| !ok.contains(k)).copied().collect();
    (ok, failed)
}

/// DeleteShareGroupState (v0) of `parts` of `group` at `addr`; `Err` unless every partition
/// answered NONE.
async fn send_share_delete(
    inter_broker: &InterBroker,
    addr: &str,
    group: &str,
    parts: &[(uuid::Uuid, i32)],
) -> Result<(), String> {
    use kafka_protocol::messages::delete_share_group_state_request as rq;
    use kafka_protocol::messages::DeleteShareGroupStateRequest;
    let req = DeleteShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(group.to_string()))
        .with_topics(
            by_topic(parts)
                .into_iter()
                .map(|(t, ps)| {
                    rq::DeleteStateData::default()
                        .with_topic_id(t)
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| rq::PartitionData::default().with_partition(p))
                                .collect(),
                        )
                })
                .collect(),
        );
    let resp = inter_broker
        .request_kept(addr, &req, 0, IO_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let failed: Vec<(i32, i16)> = resp
        .results
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| p.error_code != 0)
        .map(|p| (p.partition, p.error_code))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("partitions refused: {failed:?}"))
    }
}

/// One WriteTxnMarkers request (async, on the task's core); `Err` unless every partition
/// answered NONE.
async fn send_markers(
    inter_broker: &InterBroker,
    addr: &str,
    markers: &[TxnMarker],
) -> Result<(), String> {
    let mut by_txn: std::collections::BTreeMap<(i64, i16, i32, bool), Vec<&TxnMarker>> =
        Default::default();
    for m in markers {
        by_txn
            .entry((
                m.producer_id,
                m.producer_epoch,
                m.coordinator_epoch,
                m.commit,
            ))
            .or_default()
            .push(m);
    }
    let req = WriteTxnMarkersRequest::default().with_markers(
        by_txn
            .into_iter()
            .map(|((pid, epoch, coordinator_epoch, commit), ms)| {
                let mut topics: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
                for m in ms {
                    topics.entry(&m.topic).or_default().push(m.partition);
                }
                WritableTxnMarker::default()
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_coordinator_epoch(coordinator_epoch)
                    .with_transaction_result(commit)
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(t, ps)| {
                                WritableTxnMarkerTopic::default()
                                    .with_name(TopicName(StrBytes::from_string(t.to_string())))
                                    .with_partition_indexes(ps)
                            })
                            .collect(),
                    )
            })
            .collect(),
    );
    let resp = inter_broker
        .request(addr, &req, VERSION, IO_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    for m in &resp.markers {
        for t in &m.topics {
            for p in &t.partitions {
                if p.error_code != 0 {
                    return Err(format!(
                        "{}-{}: error {}",
                        t.name.0, p.partition_index, p.error_code
                    ));
                }
            }
        }
    }
    Ok(())
}

impl std::fmt::Debug for RoutingMarkerSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutingMarkerSink")
            .field("node_id", &self.node_id)
            .finish()
    }
}
