//! Authorization of Kafka requests: which resource and operation each API needs (the
//! [`table`], one place to review against Kafka's `KafkaApis`), and the per-request
//! [`Access`] handlers ask.
//!
//! Decisions come from `kmirror_control::authz` over the ACL snapshot the [`AclRegistry`]
//! publishes: reading it is one atomic load, no lock, so engine cores never wait on an ACL
//! change (which fsyncs on a blocking thread).
//!
//! Group and transaction APIs are checked here, before the request reaches the coordinator
//! thread ([`before_group_api`], [`after_group_api`]); the data and admin handlers call [`Access`] for each item.

use std::sync::Arc;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use kmirror_control::authz::{op, resource, AclSnapshot, Authorizer, AuthzConfig, Requester};

use crate::acl::{AclRegistry, SharedAcls};
use crate::errors;
use crate::session::Session;

/// What one API needs on one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub resource_type: i8,
    pub operation: i8,
}

const fn need(resource_type: i8, operation: i8) -> Need {
    Need {
        resource_type,
        operation,
    }
}

/// The per-API table (Kafka's `KafkaApis` authorize calls).
pub mod table {
    use super::{need, op::*, resource::*, Need};

    // Data path.
    pub const PRODUCE: Need = need(TOPIC, WRITE);
    /// Produce with transactional records, and every transactional coordinator API.
    pub const TXN_WRITE: Need = need(TRANSACTIONAL_ID, WRITE);
    pub const FETCH: Need = need(TOPIC, READ);
    pub const LIST_OFFSETS: Need = need(TOPIC, DESCRIBE);
    pub const OFFSET_FOR_LEADER_EPOCH: Need = need(TOPIC, DESCRIBE);
    pub const DELETE_RECORDS: Need = need(TOPIC, DELETE);
    pub const METADATA: Need = need(TOPIC, DESCRIBE);
    /// Metadata auto-creation and CreateTopics: on the cluster, or else on the topic.
    pub const CREATE_CLUSTER: Need = need(CLUSTER, CREATE);
    pub const CREATE_TOPIC: Need = need(TOPIC, CREATE);
    pub const DELETE_TOPICS: Need = need(TOPIC, DELETE);
    pub const CREATE_PARTITIONS: Need = need(TOPIC, ALTER);
    pub const DESCRIBE_CONFIGS_TOPIC: Need = need(TOPIC, DESCRIBE_CONFIGS);
    pub const DESCRIBE_CONFIGS_CLUSTER: Need = need(CLUSTER, DESCRIBE_CONFIGS);
    pub const DESCRIBE_CONFIGS_GROUP: Need = need(GROUP, DESCRIBE_CONFIGS);
    pub const ALTER_CONFIGS_TOPIC: Need = need(TOPIC, ALTER_CONFIGS);
    pub const ALTER_CONFIGS_CLUSTER: Need = need(CLUSTER, ALTER_CONFIGS);
    pub const ALTER_CONFIGS_GROUP: Need = need(GROUP, ALTER_CONFIGS);
    // ACLs and SCRAM credentials.
    pub const CREATE_ACLS: Need = need(CLUSTER, ALTER);
    pub const DELETE_ACLS: Need = need(CLUSTER, ALTER);
    pub const DESCRIBE_ACLS: Need = need(CLUSTER, DESCRIBE);
    pub const ALTER_SCRAM: Need = need(CLUSTER, ALTER);
    pub const DESCRIBE_SCRAM: Need = need(CLUSTER, DESCRIBE);
    pub const DESCRIBE_CLIENT_QUOTAS: Need = need(CLUSTER, DESCRIBE_CONFIGS);
    pub const ALTER_CLIENT_QUOTAS: Need = need(CLUSTER, ALTER_CONFIGS);
    /// ListGroups lists every group with this; without it, the groups it may describe.
    pub const DESCRIBE_CLUSTER: Need = need(CLUSTER, DESCRIBE);
    /// DescribeTopicPartitions (as Metadata).
    pub const DESCRIBE_TOPIC_PARTITIONS: Need = need(TOPIC, DESCRIBE);
    pub const DESCRIBE_LOG_DIRS: Need = need(CLUSTER, DESCRIBE);
    pub const ALTER_LOG_DIRS: Need = need(CLUSTER, ALTER);
    pub const DESCRIBE_PRODUCERS: Need = need(TOPIC, READ);
    /// DescribeTransactions per id; ListTransactions lists only the ids allowed this.
    pub const DESCRIBE_TXN: Need = need(TRANSACTIONAL_ID, DESCRIBE);
    pub const ELECT_LEADERS: Need = need(CLUSTER, ALTER);
    /// AddRaftVoter / RemoveRaftVoter (Kafka's ControllerApis: ALTER on CLUSTER).
    pub const ALTER_VOTERS: Need = need(CLUSTER, ALTER);
    pub const ALTER_PARTITION_REASSIGNMENTS: Need = need(CLUSTER, ALTER);
    pub const DESCRIBE_PARTITION_REASSIGNMENTS: Need = need(CLUSTER, DESCRIBE);
    pub const ALTER_FEATURES: Need = need(CLUSTER, ALTER);
    // Groups.
    pub const FIND_GROUP_COORDINATOR: Need = need(GROUP, DESCRIBE);
    pub const FIND_TXN_COORDINATOR: Need = need(TRANSACTIONAL_ID, DESCRIBE);
    /// FindCoordinator key type MIRROR (2, KIP-1279): the mirror APIs are cluster-level.
    pub const FIND_MIRROR_COORDINATOR: Need = need(CLUSTER, DESCRIBE);
    /// JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, AddOffsetsToTxn,
    /// TxnOffsetCommit.
    pub const GROUP_READ: Need = need(GROUP, READ);
    pub const OFFSET_COMMIT_TOPIC: Need = need(TOPIC, READ);
    pub const OFFSET_FETCH_GROUP: Need = need(GROUP, DESCRIBE);
    pub const OFFSET_FETCH_TOPIC: Need = need(TOPIC, DESCRIBE);
    pub const DESCRIBE_GROUPS: Need = need(GROUP, DESCRIBE);
    pub const DELETE_GROUPS: Need = need(GROUP, DELETE);
    pub const OFFSET_DELETE_GROUP: Need = need(GROUP, DELETE);
    pub const OFFSET_DELETE_TOPIC: Need = need(TOPIC, READ);
    /// InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or WRITE
    /// on any topic (KIP-679).
    pub const IDEMPOTENT_WRITE_CLUSTER: Need = need(CLUSTER, IDEMPOTENT_WRITE);
    pub const ADD_PARTITIONS_TO_TXN_TOPIC: Need = need(TOPIC, WRITE);
    /// AddPartitionsToTxn v4+ is sent by brokers.
    pub const TXN_CLUSTER_ACTION: Need = need(CLUSTER, CLUSTER_ACTION);
    /// A follower's Fetch (replica id >= 0) needs this and nothing per topic; without it
    /// every partition answers TOPIC_AUTHORIZATION_FAILED (as Kafka). OffsetForLeaderEpoch
    /// passes with it for every topic, otherwise with topic DESCRIBE.
    pub const REPLICA_CLUSTER_ACTION: Need = need(CLUSTER, CLUSTER_ACTION);
    pub const TXN_OFFSET_COMMIT_TOPIC: Need = need(TOPIC, READ);
    /// The share coordinator's state RPCs (83-87) are sent by brokers.
    pub const SHARE_STATE_CLUSTER_ACTION: Need = need(CLUSTER, CLUSTER_ACTION);
    /// ShareFetch and ShareAcknowledge: READ on the group and on each topic.
    pub const SHARE_FETCH_TOPIC: Need = need(TOPIC, READ);
    // Mirror APIs (seed 000's ACL and error tables): the admin APIs (create, add, remove,
    // pause, resume, delete) need ALTER on the cluster and answer MIRROR_AUTHORIZATION_FAILED;
    // LastMirroredEpochs and DescribeMirrors (a failback's source queries) need READ on the
    // cluster; ListMirrors DESCRIBE; the broker-to-broker state RPCs CLUSTER_ACTION; those
    // answer CLUSTER_AUTHORIZATION_FAILED.
    pub const MIRROR_ALTER: Need = need(CLUSTER, ALTER);
    pub const MIRROR_READ: Need = need(CLUSTER, READ);
    pub const MIRROR_LIST: Need = need(CLUSTER, DESCRIBE);
    pub const MIRROR_STATE: Need = need(CLUSTER, CLUSTER_ACTION);
}

/// The cluster resource's only name.
pub const CLUSTER_NAME: &str = kmirror_control::acl::codes::CLUSTER_NAME;

/// The broker's authorizer: settings plus the published ACLs.
#[derive(Debug)]
pub struct Authz {
    authorizer: Authorizer,
    acls: Option<SharedAcls>,
}

impl Authz {
    /// `acls` is the registry of the broker's data directory.
    pub fn new(config: AuthzConfig, acls: SharedAcls) -> Authz {
        Authz {
            authorizer: Authorizer::new(config),
            acls: Some(acls),
        }
    }

    /// Everything allowed (no authorizer configured).
    pub fn disabled() -> Authz {
        Authz {
            authorizer: Authorizer::default(),
            acls: None,
        }
    }

    pub fn enabled(&self) -> bool {
        self.authorizer.config.enabled
    }

    pub fn registry(&self) -> Option<&Arc<AclRegistry>> {
        self.acls.as_ref()
    }

    /// The access of one request: the session's principal against the current snapshot.
    pub fn access(&self, session: &Session) -> Access<'_> {
        match (&self.acls, self.enabled()) {
            (Some(r), true) => Access {
                authorizer: &self.authorizer,
                snapshot: r.snapshot(),
                principal: session.principal.to_string(),
                host: session.host(),
            },
            // Everything is allowed: nothing to load or format on the hot path.
            _ => Access {
                authorizer: &self.authorizer,
                snapshot: Arc::new(AclSnapshot::default()),
                principal: String::new(),
                host: String::new(),
            },
        }
    }
}

/// One request's view: principal, host and the ACLs as of its arrival.
pub struct Access<'a> {
    authorizer: &'a Authorizer,
    snapshot: Arc<AclSnapshot>,
    principal: String,
    host: String,
}

impl Access<'_> {
    fn who(&self) -> Requester<'_> {
        Requester {
            principal: &self.principal,
            host: &self.host,
        }
    }

    pub fn allows(&self, need: Need, name: &str) -> bool {
        self.authorizer.authorize(
            &self.snapshot,
            &self.who(),
            need.resource_type,
            name,
            need.operation,
        )
    }

    pub fn allows_cluster(&self, need: Need) -> bool {
        self.allows(need, CLUSTER_NAME)
    }

    /// `Err(code)`: the resource type's authorization-failed code.
    pub fn check(&self, need: Need, name: &str) -> Result<(), i16> {
        if self.allows(need, name) {
            Ok(())
        } else {
            Err(errors::authorization_failed(need.resource_type))
        }
    }

    pub fn check_cluster(&self, need: Need) -> Result<(), i16> {
        self.check(need, CLUSTER_NAME)
    }

    /// Whether `operation` is allowed on at least one resource of the type.
    pub fn allows_any(&self, resource_type: i8, operation: i8) -> bool {
        self.authorizer
            .authorize_any(&self.snapshot, &self.who(), resource_type, operation)
    }

    /// Kafka's "authorized operations" bit set for the resource.
    pub fn authorized_operations(&self, resource_type: i8, name: &str) -> i32 {
        self.authorizer
            .authorized_operations(&self.snapshot, &self.who(), resource_type, name)
    }

    /// Idempotent producers (InitProducerId without a transactional id).
    pub fn allows_idempotent_write(&self) -> bool {
        self.allows_cluster(table::IDEMPOTENT_WRITE_CLUSTER)
            || self.allows_any(resource::TOPIC, op::WRITE)
    }
}

/// Checks a group or transaction coordinator API before it is forwarded to the coordinator.
/// `Ok((req, patch))`: forward `req` (unauthorized items removed) and hand the answer to
/// [`after_group_api`] with `patch`; `Err(resp)`: answer `resp` without forwarding.
// One answer per request, moved once: boxing it would buy nothing.
#[allow(clippy::result_large_err)]
pub fn before_group_api(
    access: &Access<'_>,
    version: i16,
    req: RequestKind,
) -> Result<(RequestKind, Patch), ResponseKind> {
    use crate::groups::error_response;
    let topic_denied = errors::authorization_failed(resource::TOPIC);
    let deny = |req: RequestKind, code: i16| Err(error_response(&req, version, code));
    macro_rules! require {
        ($need:expr, $name:expr, $req:expr) => {
            if let Err(c) = access.check($need, $name) {
                return deny($req, c);
            }
        };
    }
    let patch = match req {
        RequestKind::JoinGroup(ref r) => {
            require!(table::GROUP_READ, &r.group_id, req);
            Patch::None
        }
        RequestKind::SyncGroup(ref r) => {
            require!(table::GROUP_READ, &r.group_id, req);
            Patch::None
        }
        RequestKind::Heartbeat(ref r) => {
            require!(table::GROUP_READ, &r.group_id, req);
            Patch::None
        }
        RequestKind::LeaveGroup(ref r) => {
            require!(table::GROUP_READ, &r.group_id, req);
            Patch::None
        }
        RequestKind::OffsetCommit(ref r) => {
            require!(table::GROUP_READ, &r.group_id, req);
            let RequestKind::OffsetCommit(mut r) = req else {
                unreachable!()
            };
            let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
                .into_iter()
                .partition(|t| access.allows(table::OFFSET_COMMIT_TOPIC, &t.name));
            let mut refused = r.clone();
            refused.topics = denied;
            r.topics = ok;
            let ResponseKind::OffsetCommit(refused) =
                error_response(&RequestKind::OffsetCommit(refused), version, topic_denied)
            else {
                unreachable!()
            };
            let patch = Patch::OffsetCommit(refused.topics);
            if r.topics.is_empty() {
                return Err(patch.apply(access, ResponseKind::OffsetCommit(Default::default())));
            }
            return Ok((RequestKind::OffsetCommit(r), patch));
        }
        RequestKind::TxnOffsetCommit(ref r) => {
            require!(table::TXN_WRITE, &r.transactional_id, req);
            require!(table::GROUP_READ, &r.group_id, req);
            let RequestKind::TxnOffsetCommit(mut r) = req else {
                unreachable!()
            };
            let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
                .into_iter()
                .partition(|t| access.allows(table::TXN_OFFSET_COMMIT_TOPIC, &t.name));
            let mut refused = r.clone();
            refused.topics = denied;
            r.topics = ok;
            let ResponseKind::TxnOffsetCommit(refused) = error_response(
                &RequestKind::TxnOffsetCommit(refused),
                version,
                topic_denied,
            ) else {
                unreachable!()
            };
            let patch = Patch::TxnOffsetCommit(refused.topics);
            if r.topics.is_empty() {
                return Err(patch.apply(access, ResponseKind::TxnOffsetCommit(Default::default())));
            }
            return Ok((RequestKind::TxnOffsetCommit(r), patch));
        }
        RequestKind::OffsetFetch(ref r) if version < 8 => {
            require!(table::OFFSET_FETCH_GROUP, &r.group_id, req);
            Patch::OffsetFetch {
                all_topics: vec![r.topics.is_none()],
                denied_groups: Vec::new(),
            }
        }
        RequestKind::OffsetFetch(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.groups)
                .into_iter()
                .partition(|g| access.allows(table::OFFSET_FETCH_GROUP, &g.group_id));
            r.groups = ok;
            let patch = Patch::OffsetFetch {
                all_topics: r.groups.iter().map(|g| g.topics.is_none()).collect(),
                denied_groups: denied.into_iter().map(|g| g.group_id).collect(),
            };
            if r.groups.is_empty() {
                return Err(patch.apply(access, ResponseKind::OffsetFetch(Default::default())));
            }
            return Ok((RequestKind::OffsetFetch(r), patch));
        }
        RequestKind::DescribeGroups(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.groups)
                .into_iter()
                .partition(|g| access.allows(table::DESCRIBE_GROUPS, g));
            r.groups = ok;
            let patch = Patch::DescribeGroups {
                denied,
                with_ops: r.include_authorized_operations,
            };
            if r.groups.is_empty() {
                return Err(patch.apply(access, ResponseKind::DescribeGroups(Default::default())));
            }
            return Ok((RequestKind::DescribeGroups(r), patch));
        }
        RequestKind::DeleteGroups(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.groups_names)
                .into_iter()
                .partition(|g| access.allows(table::DELETE_GROUPS, g));
            r.groups_names = ok;
            let patch = Patch::DeleteGroups(denied);
            if r.groups_names.is_empty() {
                return Err(patch.apply(access, ResponseKind::DeleteGroups(Default::default())));
            }
            return Ok((RequestKind::DeleteGroups(r), patch));
        }
        RequestKind::ConsumerGroupHeartbeat(ref r) => {
            require!(table::GROUP_READ, &r.group_id, req);
            // Kafka: every subscribed topic name needs DESCRIBE.
            let denied = r
                .subscribed_topic_names
                .iter()
                .flatten()
                .any(|t| !access.allows(table::METADATA, t));
            if denied {
                return deny(req, topic_denied);
            }
            Patch::None
        }
        RequestKind::ShareGroupHeartbeat(ref r) => {
            require!(table::GROUP_READ, &r.group_id, req);
            let denied = r
                .subscribed_topic_names
                .iter()
                .flatten()
                .any(|t| !access.allows(table::METADATA, t));
            if denied {
                return deny(req, topic_denied);
            }
            Patch::None
        }
        RequestKind::ShareGroupDescribe(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.group_ids)
                .into_iter()
                .partition(|g| access.allows(table::DESCRIBE_GROUPS, g));
            r.group_ids = ok;
            let patch = Patch::ShareGroupDescribe(denied);
            if r.group_ids.is_empty() {
                return Err(
                    patch.apply(access, ResponseKind::ShareGroupDescribe(Default::default()))
                );
            }
            return Ok((RequestKind::ShareGroupDescribe(r), patch));
        }
        RequestKind::ConsumerGroupDescribe(mut r) => {
            let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.group_ids)
                .into_iter()
                .partition(|g| access.allows(table::DESCRIBE_GROUPS, g));
            r.group_ids = ok;
            let patch = Patch::ConsumerGroupDescribe(denied);
            if r.group_ids.is_empty() {
                return Err(patch.apply(
                    access,
                    ResponseKind::ConsumerGroupDescribe(Default::default()),
                ));
            }
            return Ok((RequestKind::ConsumerGroupDescribe(r), patch));
        }
        RequestKind::ListGroups(_) => Patch::ListGroups,
        RequestKind::FindCoordinator(mut r) => {
            let need = match r.key_type {
                1 => table::FIND_TXN_COORDINATOR,
                2 => table::FIND_MIRROR_COORDINATOR,
                _ => table::FIND_GROUP_COORDINATOR,
            };
            // A mirror key names a mirror; what is checked is the cluster.
            let resource = |k: &str| -> String {
                if r.key_type == 2 {
                    CLUSTER_NAME.to_owned()
                } else {
                    k.to_owned()
                }
            };
            if version < 4 {
                let key = resource(&r.key);
                require!(need, &key, RequestKind::FindCoordinator(r));
                return Ok((RequestKind::FindCoordinator(r), Patch::None));
            }
            let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.coordinator_keys)
                .into_iter()
                .partition(|k| access.allows(need, &resource(k)));
            r.coordinator_keys = ok;
            let mut refused = r.clone();
            refused.coordinator_keys = denied;
            let ResponseKind::FindCoordinator(refused) = error_response(
                &RequestKind::FindCoordinator(refused),
                version,
                errors::authorization_failed(need.resource_type),
            ) else {
                unreachable!()
            };
            let patch = Patch::FindCoordinator(refused.coordinators);
            if r.coordinator_keys.is_empty() {
                return Err(patch.apply(access, ResponseKind::FindCoordinator(Default::default())));
            }
            return Ok((RequestKind::FindCoordinator(r), patch));
        }
        RequestKind::OffsetDelete(ref r) => {
            require!(table::OFFSET_DELETE_GROUP, &r.group_id, req);
            let RequestKind::OffsetDelete(mut r) = req else {
                unreachable!()
            };
            let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
                .into_iter()
                .partition(|t| access.allows(table::OFFSET_DELETE_TOPIC, &t.name));
            r.topics = ok;
            let patch = Patch::OffsetDelete(denied);
            if r.topics.is_empty() {
                return Err(patch.apply(access, ResponseKind::OffsetDelete(Default::default())));
            }
            return Ok((RequestKind::OffsetDelete(r), patch));
        }
        RequestKind::InitProducerId(ref r) => {
            match &r.transactional_id {
                Some(t) => require!(table::TXN_WRITE, t, req),
                None => {
                    if !access.allows_idempotent_write() {
                        return deny(req, errors::authorization_failed(resource::CLUSTER));
                    }
                }
            }
            Patch::None
        }
        RequestKind::AddOffsetsToTxn(ref r) => {
            require!(table::TXN_WRITE, &r.transactional_id, req);
            require!(table::GROUP_READ, &r.group_id, req);
            Patch::None
        }
        RequestKind::EndTxn(ref r) => {
            require!(table::TXN_WRITE, &r.transactional_id, req);
            Patch::None
        }
        _ => Patch::None,
    };
    Ok((req, patch))
}

/// Completes a coordinator answer: refused items appended, listings filtered, authorized
/// operations filled in.
pub fn after_group_api(access: &Access<'_>, patch: Patch, resp: ResponseKind) -> ResponseKind {
    patch.apply(access, resp)
}

/// What [`before_group_api`] took out of a request, to put back into the answer.
pub enum Patch {
    None,
    OffsetCommit(Vec<kafka_protocol::messages::offset_commit_response::OffsetCommitResponseTopic>),
    TxnOffsetCommit(
        Vec<kafka_protocol::messages::txn_offset_commit_response::TxnOffsetCommitResponseTopic>,
    ),
    /// Per forwarded group (in order), whether it asked for all topics; the refused groups.
    OffsetFetch {
        all_topics: Vec<bool>,
        denied_groups: Vec<kafka_protocol::messages::GroupId>,
    },
    DescribeGroups {
        denied: Vec<kafka_protocol::messages::GroupId>,
        with_ops: bool,
    },
    DeleteGroups(Vec<kafka_protocol::messages::GroupId>),
    ConsumerGroupDescribe(Vec<kafka_protocol::messages::GroupId>),
    ShareGroupDescribe(Vec<kafka_protocol::messages::GroupId>),
    ListGroups,
    FindCoordinator(Vec<kafka_protocol::messages::find_coordinator_response::Coordinator>),
    OffsetDelete(Vec<kafka_protocol::messages::offset_delete_request::OffsetDeleteRequestTopic>),
}

impl Patch {
    fn apply(self, access: &Access<'_>, resp: ResponseKind) -> ResponseKind {
        use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
        use kafka_protocol::messages::describe_groups_response::DescribedGroup;
        use kafka_protocol::messages::offset_delete_response::{
            OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
        };
        use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
        let group_denied = errors::authorization_failed(resource::GROUP);
        let topic_denied = errors::authorization_failed(resource::TOPIC);
        match (self, resp) {
            (Patch::OffsetCommit(mut t), ResponseKind::OffsetCommit(mut r)) => {
                r.topics.append(&mut t);
                ResponseKind::OffsetCommit(r)
            }
            (Patch::TxnOffsetCommit(mut t), ResponseKind::TxnOffsetCommit(mut r)) => {
                r.topics.append(&mut t);
                ResponseKind::TxnOffsetCommit(r)
            }
            (
                Patch::OffsetFetch {
                    all_topics,
                    denied_groups,
                },
                ResponseKind::OffsetFetch(mut r),
            ) => {
                // Named topics the principal may not describe answer TOPIC_AUTHORIZATION_FAILED;
                // from an all-topics fetch they are left out.
                if let Some(all) = all_topics.first().filter(|_| r.groups.is_empty()) {
                    if *all {
                        r.topics
                            .retain(|t| access.allows(table::OFFSET_FETCH_TOPIC, &t.name));
                    } else {
                        for t in r.topics.iter_mut() {
                            if !access.allows(table::OFFSET_FETCH_TOPIC, &t.name) {
                                for p in t.partitions.iter_mut() {
                                    p.committed_offset = -1;
                                    p.committed_leader_epoch = -1;
                                    p.metadata = None;
                                    p.error_code = topic_denied;
                                }
                            }
                        }
                    }
                }
                for (g, all) in r.groups.iter_mut().zip(all_topics.iter()) {
                    if *all {
                        g.topics
                            .retain(|t| access.allows(table::OFFSET_FETCH_TOPIC, &t.name));
                    } else {
                        for t in g.topics.iter_mut() {
                            if !access.allows(table::OFFSET_FETCH_TOPIC, &t.name) {
                                for p in t.partitions.iter_mut() {
                                    p.committed_offset = -1;
                                    p.committed_leader_epoch = -1;
                                    p.metadata = None;
                                    p.error_code = topic_denied;
                                }
                            }
                        }
                    }
                }
                r.groups.extend(denied_groups.into_iter().map(|g| {
                    OffsetFetchResponseGroup::default()
                        .with_group_id(g)
                        .with_error_code(group_denied)
                }));
                ResponseKind::OffsetFetch(r)
            }
            (Patch::DescribeGroups { denied, with_ops }, ResponseKind::DescribeGroups(mut r)) => {
                if with_ops {
                    for g in r.groups.iter_mut() {
                        g.authorized_operations =
                            access.authorized_operations(resource::GROUP, &g.group_id);
                    }
                }
                r.groups.extend(denied.into_iter().map(|g| {
                    DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(group_denied)
                        .with_authorized_operations(crate::handlers::NO_AUTHORIZED_OPS)
                }));
                ResponseKind::DescribeGroups(r)
            }
            (Patch::DeleteGroups(denied), ResponseKind::DeleteGroups(mut r)) => {
                r.results.extend(denied.into_iter().map(|g| {
                    DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(group_denied)
                }));
                ResponseKind::DeleteGroups(r)
            }
            (Patch::ConsumerGroupDescribe(denied), ResponseKind::ConsumerGroupDescribe(mut r)) => {
                // Kafka: a group using a topic the client may not describe is not shown.
                for g in r.groups.iter_mut().filter(|g| g.error_code == 0) {
                    let hidden = g.members.iter().any(|m| {
                        m.subscribed_topic_names
                            .iter()
                            .map(|t| &t.0)
                            .chain(
                                m.assignment
                                    .topic_partitions
                                    .iter()
                                    .chain(m.target_assignment.topic_partitions.iter())
                                    .map(|tp| &tp.topic_name.0),
                            )
                            .any(|t| !access.allows(table::METADATA, t))
                    });
                    if hidden {
                        *g = kafka_protocol::messages::consumer_group_describe_response::DescribedGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(topic_denied)
                            .with_error_message(Some(kafka_protocol::protocol::StrBytes::from_static_str(
                                "The described group uses topics that the client is not authorized to describe.",
                            )))
                            .with_authorized_operations(crate::handlers::NO_AUTHORIZED_OPS);
                    }
                }
                r.groups.extend(denied.into_iter().map(|g| {
                    kafka_protocol::messages::consumer_group_describe_response::DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(group_denied)
                        .with_authorized_operations(crate::handlers::NO_AUTHORIZED_OPS)
                }));
                ResponseKind::ConsumerGroupDescribe(r)
            }
            (Patch::ShareGroupDescribe(denied), ResponseKind::ShareGroupDescribe(mut r)) => {
                r.groups.extend(denied.into_iter().map(|g| {
                    kafka_protocol::messages::share_group_describe_response::DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(group_denied)
                        .with_authorized_operations(crate::handlers::NO_AUTHORIZED_OPS)
                }));
                ResponseKind::ShareGroupDescribe(r)
            }
            (Patch::ListGroups, ResponseKind::ListGroups(mut r)) => {
                if !access.allows_cluster(table::DESCRIBE_CLUSTER) {
                    r.groups
                        .retain(|g| access.allows(table::DESCRIBE_GROUPS, &g.group_id));
                }
                ResponseKind::ListGroups(r)
            }
            (Patch::FindCoordinator(mut c), ResponseKind::FindCoordinator(mut r)) => {
                r.coordinators.append(&mut c);
                ResponseKind::FindCoordinator(r)
            }
            (Patch::OffsetDelete(denied), ResponseKind::OffsetDelete(mut r)) => {
                r.topics.extend(denied.into_iter().map(|t| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(topic_denied)
                                })
                                .collect(),
                        )
                }));
                ResponseKind::OffsetDelete(r)
            }
            (_, resp) => resp,
        }
    }
}

/// DescribeClientQuotas refused (no DESCRIBE_CONFIGS on the cluster).
pub fn describe_client_quotas_refused(
    code: i16,
) -> kafka_protocol::messages::DescribeClientQuotasResponse {
    kafka_protocol::messages::DescribeClientQuotasResponse::default()
        .with_error_code(code)
        .with_entries(None)
}

/// DescribeUserScramCredentials refused (no DESCRIBE on the cluster).
pub fn describe_scram_refused(
    code: i16,
) -> kafka_protocol::messages::DescribeUserScramCredentialsResponse {
    kafka_protocol::messages::DescribeUserScramCredentialsResponse::default().with_error_code(code)
}

/// AlterUserScramCredentials refused (no ALTER on the cluster): each named user once.
pub fn alter_scram_refused(
    req: &kafka_protocol::messages::AlterUserScramCredentialsRequest,
    code: i16,
) -> kafka_protocol::messages::AlterUserScramCredentialsResponse {
    use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
    let mut users: Vec<&kafka_protocol::protocol::StrBytes> = req
        .deletions
        .iter()
        .map(|d| &d.name)
        .chain(req.upsertions.iter().map(|u| &u.name))
        .collect();
    users.sort();
    users.dedup();
    kafka_protocol::messages::AlterUserScramCredentialsResponse::default().with_results(
        users
            .into_iter()
            .map(|u| {
                AlterUserScramCredentialsResult::default()
                    .with_user(u.clone())
                    .with_error_code(code)
            })
            .collect(),
    )
}
