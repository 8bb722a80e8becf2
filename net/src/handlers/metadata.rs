//! Metadata: brokers (just us), cluster id, topics with IDs, partitions led by us.

use kafka_protocol::messages::metadata_response::*;
use kafka_protocol::messages::MetadataRequest;
use kafka_protocol::ResponseError as E;
use kmirror_control::metadata::TopicMeta;
use uuid::Uuid;

use super::{broker, s, topic_name, NO_AUTHORIZED_OPS};
use crate::authz::{table, Access};
use crate::broker::Ctx;
use crate::session::Session;

/// Brokers are advertised at the endpoint of the listener `session` came in through.
pub(crate) async fn metadata(
    ctx: &Ctx,
    session: &Session,
    access: &Access<'_>,
    version: i16,
    req: MetadataRequest,
) -> MetadataResponse {
    // v0: an empty list means all topics; v1+: null means all, empty means none.
    let wanted = match req.topics {
        None => None,
        Some(t) if t.is_empty() && version == 0 => None,
        Some(t) => Some(t),
    };
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    let mut topics = Vec::new();
    match wanted {
        None => {
            let meta = ctx.meta();
            // Topics the principal may not describe are left out of the listing.
            for t in meta
                .described_topics()
                .filter(|t| access.allows(table::METADATA, &t.name))
            {
                topics.push(topic_entry(
                    ctx,
                    access,
                    t,
                    req.include_topic_authorized_operations,
                ));
            }
        }
        Some(list) => {
            for want in list {
                // By ID when the name is null (or empty with an ID given, leniently).
                let name = want
                    .name
                    .filter(|n| !n.is_empty() || want.topic_id.is_nil());
                match name {
                    Some(name) => match authorized(ctx, access, name.as_str(), allow_create) {
                        Err(code) => topics.push(
                            MetadataResponseTopic::default()
                                .with_error_code(code)
                                .with_name(Some(name))
                                .with_topic_authorized_operations(NO_AUTHORIZED_OPS),
                        ),
                        Ok(allow_create) => {
                            let existed = ctx.meta().described(name.as_str()).is_some();
                            match ctx.topic_or_create(name.as_str(), allow_create).await {
                                // Auto-created by this request: Kafka's answer is that it
                                // does not exist yet (its creation is asynchronous there);
                                // clients ask again and find it.
                                Ok(t) if !existed && !t.internal => topics.push(
                                    MetadataResponseTopic::default()
                                        .with_error_code(E::UnknownTopicOrPartition.code())
                                        .with_name(Some(name))
                                        .with_topic_authorized_operations(NO_AUTHORIZED_OPS),
                                ),
                                Ok(t) => topics.push(topic_entry(
                                    ctx,
                                    access,
                                    &t,
                                    req.include_topic_authorized_operations,
                                )),
                                Err((code, _)) => topics.push(
                                    MetadataResponseTopic::default()
                                        .with_error_code(code)
                                        .with_name(Some(name))
                                        .with_topic_authorized_operations(NO_AUTHORIZED_OPS),
                                ),
                            }
                        }
                    },
                    None => {
                        let meta = ctx.meta();
                        match meta
                            .described_by_id(want.topic_id)
                            .filter(|t| access.allows(table::METADATA, &t.name))
                        {
                            Some(t) => topics.push(topic_entry(
                                ctx,
                                access,
                                t,
                                req.include_topic_authorized_operations,
                            )),
                            None => topics.push(
                                MetadataResponseTopic::default()
                                    .with_error_code(E::UnknownTopicId.code())
                                    .with_topic_id(want.topic_id)
                                    .with_topic_authorized_operations(NO_AUTHORIZED_OPS),
                            ),
                        }
                    }
                }
            }
        }
    }
    let meta = ctx.meta();
    let cluster = &ctx.cluster();
    // The unfenced registered brokers, each at this listener.
    let listed = cluster.listed_brokers(&meta, &session.listener);
    let controller = cluster.listed_controller_id(&listed);
    let brokers = listed
        .into_iter()
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(broker(b.id))
                .with_host(s(&b.host))
                .with_port(b.port)
                .with_rack(b.rack.map(|r| s(&r)))
        })
        .collect();
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(s(&meta.cluster_id)))
        .with_controller_id(broker(controller))
        .with_topics(topics)
        .with_cluster_authorized_operations(super::admin::cluster_operations(
            access,
            req.include_cluster_authorized_operations,
        ))
}

/// Whether a named topic may be described, and (when it does not exist) auto-created:
/// CREATE on the cluster or on the topic. `Ok(allow_create)`, or the refusal's code.
fn authorized(ctx: &Ctx, access: &Access<'_>, name: &str, allow_create: bool) -> Result<bool, i16> {
    access.check(table::METADATA, name)?;
    let exists = ctx.meta().described(name).is_some();
    if exists || !allow_create || !ctx.config().auto_create_topics {
        return Ok(allow_create);
    }
    if access.allows_cluster(table::CREATE_CLUSTER) {
        return Ok(true);
    }
    access.check(table::CREATE_TOPIC, name).map(|()| true)
}

fn topic_entry(
    ctx: &Ctx,
    access: &Access<'_>,
    t: &TopicMeta,
    with_ops: bool,
) -> MetadataResponseTopic {
    let meta = ctx.meta();
    let partitions = (0..t.partition_count())
        .map(|i| {
            let p = PartitionView::of(&meta, t, i, ctx.node_id());
            MetadataResponsePartition::default()
                .with_error_code(p.error_code)
                .with_partition_index(i)
                .with_leader_id(broker(p.leader))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(p.replicas.iter().copied().map(broker).collect())
                .with_isr_nodes(p.isr.iter().copied().map(broker).collect())
                .with_offline_replicas(p.offline.iter().copied().map(broker).collect())
        })
        .collect();
    let ops = if with_ops {
        access.authorized_operations(kmirror_control::authz::resource::TOPIC, &t.name)
    } else {
        NO_AUTHORIZED_OPS
    };
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&t.name)))
        .with_topic_id(if t.id.is_nil() { Uuid::nil() } else { t.id })
        .with_is_internal(t.internal)
        .with_partitions(partitions)
        .with_topic_authorized_operations(ops)
}

/// One partition as Metadata and DescribeTopicPartitions describe it: from its assignment
/// in a cluster, this node alone on a one-node broker.
pub(crate) struct PartitionView {
    pub error_code: i16,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Replicas on brokers that are fenced or not registered (Kafka's offline replicas).
    pub offline: Vec<i32>,
}

impl PartitionView {
    pub(crate) fn of(
        meta: &kmirror_control::metadata::ClusterMetadata,
        t: &TopicMeta,
        p: i32,
        local: i32,
    ) -> PartitionView {
        let a = t
            .assignment(p, local)
            .unwrap_or_else(|| kmirror_control::metadata::PartitionAssignment::local(local));
        let replicated = !t.assignments.is_empty();
        let offline = if replicated {
            a.replicas
                .iter()
                .copied()
                .filter(|r| meta.brokers.get(r).is_none_or(|b| b.fenced))
                .collect()
        } else {
            Vec::new()
        };
        PartitionView {
            // As Kafka: a partition without a live leader is LEADER_NOT_AVAILABLE.
            error_code: if a.leader < 0 {
                E::LeaderNotAvailable.code()
            } else {
                0
            },
            leader: a.leader,
            leader_epoch: t.leader_epochs.get(p as usize).copied().unwrap_or(0),
            replicas: a.replicas,
            isr: a.isr,
            offline,
        }
    }
}
