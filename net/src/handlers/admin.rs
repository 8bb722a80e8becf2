//! Topic administration and DescribeCluster. A single broker: replication factor 1 only,
//! replica assignments must name this node.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_response::*;
use kafka_protocol::messages::create_topics_response::*;
use kafka_protocol::messages::delete_topics_response::*;
use kafka_protocol::messages::describe_cluster_response::*;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest,
    TopicName,
};
use kafka_protocol::ResponseError as E;
use kmirror_control::metadata::topic_config;
use uuid::Uuid;

use super::{broker, s, topic_name, NO_AUTHORIZED_OPS};
use crate::authz::{table, Access, CLUSTER_NAME};
use crate::broker::{propose_err, Ctx, ItemError};
use crate::errors;
use kmirror_control::metadata::TopicMeta;
use kmirror_control::quorum::MetadataCommand;

pub(crate) async fn create_topics(
    ctx: &Ctx,
    access: &Access<'_>,
    quota: &crate::quota::Mutation<'_>,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    // CREATE on the cluster covers every topic; otherwise CREATE on each topic.
    let cluster_create = access.allows_cluster(table::CREATE_CLUSTER);
    let mut results = Vec::with_capacity(req.topics.len());
    // A name given twice is refused, once, and created neither time (Kafka's controller).
    let mut seen = std::collections::HashMap::new();
    for t in &req.topics {
        *seen.entry(t.name.to_string()).or_insert(0) += 1;
    }
    let duplicates: BTreeMap<String, usize> = seen.into_iter().filter(|(_, n)| *n > 1).collect();
    for name in duplicates.keys() {
        results.push(
            CreatableTopicResult::default()
                .with_name(topic_name(name))
                .with_error_code(E::InvalidRequest.code())
                .with_error_message(Some(s("Duplicate topic name.")))
                .with_num_partitions(-1)
                .with_replication_factor(-1),
        );
    }
    for t in req.topics {
        let name = t.name.to_string();
        if duplicates.contains_key(&name) {
            continue;
        }
        let r: Result<_, ItemError> = async {
            if !cluster_create {
                access
                    .check(table::CREATE_TOPIC, &name)
                    .map_err(|c| (c, "Authorization failed.".to_string()))?;
            }
            quota.admit()?;
            let mut partitions = t.num_partitions;
            if !t.assignments.is_empty() {
                if partitions != -1 || t.replication_factor != -1 {
                    return Err((
                        E::InvalidRequest.code(),
                        "give either assignments or partitions/replication factor".into(),
                    ));
                }
                partitions = t.assignments.len() as i32;
            }
            if partitions == -1 {
                partitions = ctx.config().default_partitions;
            }
            let mut configs = BTreeMap::new();
            for c in t.configs {
                if let Some(v) = c.value {
                    configs.insert(c.name.to_string(), v.to_string());
                }
            }
            if !t.assignments.is_empty() {
                let lists: Vec<Vec<i32>> = t
                    .assignments
                    .iter()
                    .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                    .collect();
                return ctx
                    .create_topic_assigned(name.clone(), lists, configs, req.validate_only)
                    .await;
            }
            ctx.create_topic(
                name.clone(),
                partitions,
                t.replication_factor,
                configs,
                None,
                req.validate_only,
            )
            .await
        }
        .await;
        results.push(match r {
            // Configs are returned only to a principal that may describe them.
            Ok(meta) if !access.allows(table::DESCRIBE_CONFIGS_TOPIC, &name) => {
                CreatableTopicResult::default()
                    .with_name(topic_name(&name))
                    .with_error_message(None)
                    .with_topic_id(meta.id)
                    .with_num_partitions(meta.partition_count())
                    .with_replication_factor(replication_factor(&meta))
                    .with_topic_config_error_code(errors::authorization_failed(
                        kmirror_control::authz::resource::TOPIC,
                    ))
            }
            Ok(meta) => {
                let configs = topic_config::KNOWN
                    .iter()
                    .map(|(k, ..)| {
                        CreatableTopicConfigs::default()
                            .with_name(s(k))
                            .with_value(meta.config_value(k).map(|v| s(&v)))
                            .with_config_source(if meta.configs.contains_key(*k) { 1 } else { 5 })
                    })
                    .collect();
                CreatableTopicResult::default()
                    .with_name(topic_name(&name))
                    .with_error_message(None)
                    .with_topic_id(meta.id)
                    .with_num_partitions(meta.partition_count())
                    .with_replication_factor(replication_factor(&meta))
                    .with_configs(Some(configs))
            }
            Err((code, msg)) => CreatableTopicResult::default()
                .with_name(topic_name(&name))
                .with_error_code(code)
                .with_error_message((!msg.is_empty()).then(|| s(&msg)))
                .with_num_partitions(-1)
                .with_replication_factor(-1),
        });
        if let (Some(done), false) = (results.last(), req.validate_only) {
            if done.error_code == 0 {
                quota.record(done.num_partitions);
            }
        }
    }
    CreateTopicsResponse::default()
        .with_throttle_time_ms(quota.throttle_ms())
        .with_topics(results)
}

/// A topic's replication factor (1 for a one-node topic).
fn replication_factor(t: &TopicMeta) -> i16 {
    t.assignments.first().map_or(1, |a| a.replicas.len() as i16)
}

pub(crate) async fn delete_topics(
    ctx: &Ctx,
    access: &Access<'_>,
    quota: &crate::quota::Mutation<'_>,
    version: i16,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    // v6 names topics by name or ID; older versions by name only.
    let mut wanted: Vec<(Option<String>, Uuid)> = Vec::new();
    if version >= 6 {
        for t in req.topics {
            wanted.push((t.name.map(|n| n.to_string()), t.topic_id));
        }
    } else {
        for n in req.topic_names {
            wanted.push((Some(n.to_string()), Uuid::nil()));
        }
    }
    let mut results = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let resolved = match &name {
            Some(n) => Some(n.clone()),
            None => ctx.meta().topic_by_id(id).map(|t| t.name.clone()),
        };
        let Some(n) = resolved else {
            results.push(
                DeletableTopicResult::default()
                    .with_topic_id(id)
                    .with_error_code(E::UnknownTopicId.code())
                    .with_error_message(Some(s("unknown topic id"))),
            );
            continue;
        };
        if let Err(code) = access.check(table::DELETE_TOPICS, &n) {
            results.push(
                DeletableTopicResult::default()
                    .with_name(name.map(|n| topic_name(&n)))
                    .with_topic_id(id)
                    .with_error_code(code)
                    .with_error_message(Some(s("Authorization failed."))),
            );
            continue;
        }
        if let Err((code, _)) = quota.admit() {
            results.push(
                DeletableTopicResult::default()
                    .with_name(Some(topic_name(&n)))
                    .with_topic_id(id)
                    .with_error_code(code)
                    .with_error_message(None),
            );
            continue;
        }
        results.push(match ctx.delete_topic(n.clone()).await {
            Ok(t) => {
                quota.record(t.partition_count());
                DeletableTopicResult::default()
                    .with_name(Some(topic_name(&n)))
                    .with_topic_id(t.id)
            }
            Err((code, msg)) => DeletableTopicResult::default()
                .with_name(Some(topic_name(&n)))
                .with_topic_id(id)
                .with_error_code(code)
                .with_error_message(Some(s(&msg))),
        });
    }
    DeleteTopicsResponse::default()
        .with_throttle_time_ms(quota.throttle_ms())
        .with_responses(results)
}

pub(crate) async fn create_partitions(
    ctx: &Ctx,
    access: &Access<'_>,
    quota: &crate::quota::Mutation<'_>,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.to_string();
        let r: Result<(), ItemError> = async {
            access
                .check(table::CREATE_PARTITIONS, &name)
                .map_err(|c| (c, "Authorization failed.".to_string()))?;
            quota.admit()?;
            let (n, total, vo) = (name.clone(), t.count, req.validate_only);
            let before = ctx
                .meta()
                .topics
                .get(&name)
                .map(|t| t.partition_count())
                .unwrap_or(0);
            // As Kafka: an explicit assignment names exactly the partitions being added.
            if let Some(a) = &t.assignments {
                if total > before && a.len() as i32 != total - before {
                    return Err((
                        E::InvalidReplicaAssignment.code(),
                        format!(
                            "{} assignments given for {} new partitions",
                            a.len(),
                            total - before
                        ),
                    ));
                }
            }
            let cluster = &ctx.cluster();
            let snapshot = ctx.meta();
            let assignments = match snapshot.topics.get(&n) {
                Some(topic) if total > before => match &t.assignments {
                    Some(a) => a
                        .iter()
                        .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                        .collect(),
                    None => {
                        let rf = topic
                            .assignments
                            .first()
                            .map_or(1, |a| a.replicas.len() as i16);
                        kmirror_control::quorum::controller::propose_placement(
                            &snapshot,
                            before,
                            total - before,
                            rf,
                            rf,
                        )
                        .map_err(|e| (errors::metadata_error_code(&e), e.to_string()))?
                    }
                },
                _ => Vec::new(),
            };
            let cmd = MetadataCommand::CreatePartitions {
                name: n,
                total,
                assignments,
            };
            if vo {
                cluster
                    .validate(&cmd)
                    .map_err(|e| (errors::metadata_error_code(&e), e.to_string()))?;
                return Ok(());
            }
            let meta = cluster.propose_topic(cmd).await.map_err(propose_err)?;
            ctx.create_partitions_on_cores(&meta, before).await?;
            quota.record(total - before);
            Ok(())
        }
        .await;
        let mut res = CreatePartitionsTopicResult::default().with_name(TopicName(s(&name)));
        if let Err((code, msg)) = r {
            res = res
                .with_error_code(code)
                .with_error_message((!msg.is_empty()).then(|| s(&msg)));
        }
        results.push(res);
    }
    CreatePartitionsResponse::default()
        .with_throttle_time_ms(quota.throttle_ms())
        .with_results(results)
}

/// The broker is described at the endpoint of the listener `session` came in through.
pub(crate) fn describe_cluster(
    ctx: &Ctx,
    session: &crate::session::Session,
    access: &Access<'_>,
    _version: i16,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let meta = ctx.meta();
    let cluster = &ctx.cluster();
    let listed = cluster.listed_brokers(&meta, &session.listener);
    let controller = cluster.listed_controller_id(&listed);
    let brokers = listed
        .into_iter()
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(broker(b.id))
                .with_host(s(&b.host))
                .with_port(b.port)
                .with_rack(b.rack.map(|r| s(&r)))
        })
        .collect();
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(s(&meta.cluster_id))
        .with_controller_id(broker(controller))
        .with_endpoint_type(req.endpoint_type)
        .with_brokers(brokers)
        .with_cluster_authorized_operations(cluster_operations(
            access,
            req.include_cluster_authorized_operations,
        ));
    // Endpoint type 2 asks for controllers; we are our own controller.
    if req.endpoint_type != 1 && req.endpoint_type != 2 {
        resp = resp
            .with_error_code(E::UnsupportedEndpointType.code())
            .with_error_message(Some(s("unknown endpoint type")));
    }
    resp
}

/// The cluster's authorized operations, as Kafka reports them in DescribeCluster and
/// Metadata: the sentinel when not asked, 0 without DESCRIBE on the cluster.
pub(crate) fn cluster_operations(access: &Access<'_>, asked: bool) -> i32 {
    if !asked {
        NO_AUTHORIZED_OPS
    } else if access.allows_cluster(table::DESCRIBE_CLUSTER) {
        access.authorized_operations(kmirror_control::authz::resource::CLUSTER, CLUSTER_NAME)
    } else {
        0
    }
}

/// ElectLeaders in a cluster: each partition's preferred election is proposed to the quorum
/// (`ElectPreferredLeader`; apply answers ELECTION_NOT_NEEDED when the preferred replica
/// leads and PREFERRED_LEADER_NOT_AVAILABLE when it is fenced or out of the ISR, as Kafka's
/// controller). Unclean elections stay off: with a leader, ELECTION_NOT_NEEDED; without one,
/// ELIGIBLE_LEADERS_NOT_AVAILABLE. For all partitions (null) only those not led by their
/// preferred replica are elected and listed. Needs ALTER on the cluster.
pub(crate) async fn elect_leaders_replicated(
    ctx: &Ctx,
    access: &Access<'_>,
    version: i16,
    req: kafka_protocol::messages::ElectLeadersRequest,
) -> kafka_protocol::messages::ElectLeadersResponse {
    use kafka_protocol::messages::elect_leaders_response::{
        PartitionResult, ReplicaElectionResult,
    };
    let mut resp = kafka_protocol::messages::ElectLeadersResponse::default();
    if let Err(code) = access.check_cluster(table::ELECT_LEADERS) {
        if version >= 1 {
            resp.error_code = code;
        }
        // Every named partition carries the refusal (as the one-node answer does).
        for t in req.topic_partitions.unwrap_or_default() {
            let results = t
                .partitions
                .iter()
                .map(|p| {
                    PartitionResult::default()
                        .with_partition_id(*p)
                        .with_error_code(code)
                })
                .collect();
            resp.replica_election_results.push(
                ReplicaElectionResult::default()
                    .with_topic(t.topic)
                    .with_partition_result(results),
            );
        }
        return resp;
    }
    let meta = ctx.meta();
    let wanted: Vec<(String, Vec<i32>)> = match req.topic_partitions {
        Some(list) => list
            .into_iter()
            .map(|t| (t.topic.to_string(), t.partitions))
            .collect(),
        None => meta
            .topics
            .values()
            .map(|t| {
                let ps = t
                    .assignments
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| a.replicas.first() != Some(&a.leader))
                    .map(|(i, _)| i as i32)
                    .collect();
                (t.name.clone(), ps)
            })
            .collect(),
    };
    for (topic, partitions) in wanted {
        let mut results = Vec::with_capacity(partitions.len());
        for p in partitions {
            let t = meta.topics.get(&topic);
            let r: Result<(), (i16, String)> = match t.and_then(|t| t.assignment(p, ctx.node_id()))
            {
                // Kafka's controller words (`ReplicationControlManager.electLeader`).
                None if t.is_none() => Err((
                    E::UnknownTopicOrPartition.code(),
                    format!("No such topic as {topic}"),
                )),
                None => Err((
                    E::UnknownTopicOrPartition.code(),
                    format!("No such partition as {topic}-{p}"),
                )),
                Some(a) if req.election_type == 1 => Err(if a.leader >= 0 {
                    (
                        E::ElectionNotNeeded.code(),
                        errors::ELECTION_NOT_NEEDED_MESSAGE.to_string(),
                    )
                } else {
                    (
                        E::EligibleLeadersNotAvailable.code(),
                        "unclean leader election is disabled".to_string(),
                    )
                }),
                Some(_) => ctx
                    .cluster()
                    .propose(kmirror_control::quorum::ClusterCommand::Metadata(
                        MetadataCommand::ElectPreferredLeader {
                            name: topic.clone(),
                            partition: p,
                        },
                    ))
                    .await
                    .map(|_| ())
                    .map_err(propose_err),
            };
            let mut pr = PartitionResult::default().with_partition_id(p);
            if let Err((code, msg)) = r {
                let msg = if code == E::ElectionNotNeeded.code() {
                    errors::ELECTION_NOT_NEEDED_MESSAGE.to_string()
                } else {
                    msg
                };
                pr = pr.with_error_code(code).with_error_message(Some(s(&msg)));
            }
            results.push(pr);
        }
        resp.replica_election_results.push(
            ReplicaElectionResult::default()
                .with_topic(topic_name(&topic))
                .with_partition_result(results),
        );
    }
    resp
}

/// Kafka's message for CLUSTER_AUTHORIZATION_FAILED.
const CLUSTER_AUTH_FAILED: &str = "Cluster authorization failed.";

/// AlterPartitionReassignments (kafka-reassign-partitions --execute / --cancel), as Kafka's
/// controller: per partition, a target replica list starts (or replaces) a reassignment, a
/// null one cancels the running reassignment. In a cluster each partition's change is one
/// `ReassignPartition` proposal, checked by apply (UNKNOWN_TOPIC_OR_PARTITION,
/// INVALID_REPLICA_ASSIGNMENT for an empty list, a repeated or an unregistered broker,
/// INVALID_REPLICATION_FACTOR when v1 forbids a change of replication factor,
/// NO_REASSIGNMENT_IN_PROGRESS on a cancel with nothing to cancel). A one-node broker answers
/// with the same checks against itself as the only broker. Needs ALTER on the cluster.
pub(crate) async fn alter_partition_reassignments(
    ctx: &Ctx,
    access: &Access<'_>,
    req: kafka_protocol::messages::AlterPartitionReassignmentsRequest,
) -> kafka_protocol::messages::AlterPartitionReassignmentsResponse {
    use kafka_protocol::messages::alter_partition_reassignments_response::{
        ReassignablePartitionResponse, ReassignableTopicResponse,
    };
    let mut resp = kafka_protocol::messages::AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(req.allow_replication_factor_change);
    let refused = access
        .check_cluster(table::ALTER_PARTITION_REASSIGNMENTS)
        .err();
    if let Some(code) = refused {
        // Kafka's error response: the code at the top and on every partition.
        resp.error_code = code;
        resp.error_message = Some(s(CLUSTER_AUTH_FAILED));
    }
    for t in req.topics {
        let name = t.name.to_string();
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let target: Option<Vec<i32>> = p.replicas.map(|r| r.into_iter().map(|b| b.0).collect());
            let r: Result<(), ItemError> = match refused {
                Some(code) => Err((code, CLUSTER_AUTH_FAILED.into())),
                None => ctx
                    .cluster()
                    .propose(kmirror_control::quorum::ClusterCommand::Metadata(
                        MetadataCommand::ReassignPartition {
                            name: name.clone(),
                            partition: p.partition_index,
                            replicas: target,
                            allow_replication_factor_change: req.allow_replication_factor_change,
                        },
                    ))
                    .await
                    .map(|_| ())
                    .map_err(propose_err),
            };
            let mut pr =
                ReassignablePartitionResponse::default().with_partition_index(p.partition_index);
            if let Err((code, msg)) = r {
                pr = pr.with_error_code(code).with_error_message(Some(s(&msg)));
            }
            partitions.push(pr);
        }
        resp.responses.push(
            ReassignableTopicResponse::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions),
        );
    }
    resp
}

/// ListPartitionReassignments (kafka-reassign-partitions --verify / --list): the partitions
/// with adding or removing replicas, with their full replica set, from this node's published
/// metadata. All of them for a null topic list; otherwise the named partitions that are
/// reassigning (unknown topics and partitions are left out, as Kafka does). Needs DESCRIBE on
/// the cluster.
pub(crate) fn list_partition_reassignments(
    ctx: &Ctx,
    access: &Access<'_>,
    req: kafka_protocol::messages::ListPartitionReassignmentsRequest,
) -> kafka_protocol::messages::ListPartitionReassignmentsResponse {
    use kafka_protocol::messages::list_partition_reassignments_response::{
        OngoingPartitionReassignment, OngoingTopicReassignment,
    };
    let mut resp = kafka_protocol::messages::ListPartitionReassignmentsResponse::default();
    if let Err(code) = access.check_cluster(table::DESCRIBE_PARTITION_REASSIGNMENTS) {
        resp.error_code = code;
        resp.error_message = Some(s(CLUSTER_AUTH_FAILED));
        return resp;
    }
    let meta = ctx.meta();
    let wanted: Vec<(&TopicMeta, Vec<i32>)> = match req.topics {
        None => meta
            .topics
            .values()
            .map(|t| (t, (0..t.assignments.len() as i32).collect()))
            .collect(),
        Some(list) => list
            .into_iter()
            .filter_map(|t| {
                meta.topics
                    .get(t.name.as_str())
                    .map(|m| (m, t.partition_indexes))
            })
            .collect(),
    };
    let ids = |v: &[i32]| v.iter().map(|b| broker(*b)).collect::<Vec<_>>();
    for (t, partitions) in wanted {
        let ongoing: Vec<OngoingPartitionReassignment> = partitions
            .into_iter()
            .filter_map(|p| {
                let a = t.assignments.get(usize::try_from(p).ok()?)?;
                a.reassigning().then(|| {
                    OngoingPartitionReassignment::default()
                        .with_partition_index(p)
                        .with_replicas(ids(&a.replicas))
                        .with_adding_replicas(ids(&a.adding))
                        .with_removing_replicas(ids(&a.removing))
                })
            })
            .collect();
        if !ongoing.is_empty() {
            resp.topics.push(
                OngoingTopicReassignment::default()
                    .with_name(topic_name(&t.name))
                    .with_partitions(ongoing),
            );
        }
    }
    resp
}
