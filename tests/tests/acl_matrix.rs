//! Authorization matrix (issue 9 item 4): for each Kafka API, a principal without and then with
//! the ACLs Kafka requires, on Apache Kafka 4.1.1 (StandardAuthorizer, SASL/PLAIN principals)
//! and on kmirror (`--authorizer true`). Every row's outcome (error codes, visibility,
//! authorized-operation bits) on kmirror must equal Kafka's: the expectation is Kafka's own.
//!
//! Principals, the same on both brokers: `User:alice` (tested) and the super user
//! `User:admin`, each over SASL/PLAIN on a SASL_PLAINTEXT listener.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::*;
use kmirror_tests::helpers::{group_id as gid, str_bytes as s, topic_name as tn};
use kmirror_tests::kafka::{AdminAuth, KafkaOptions, KafkaSecurity, SaslUser, SecureProtocol};
use kmirror_tests::{records, sasl, KafkaCluster, KmirrorNode, WireClient};

// Kafka's enum codes.
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const TXN: i8 = 5;
const LITERAL: i8 = 3;
const ALLOW: i8 = 3;
const ALL: i8 = 2;
const READ: i8 = 3;
const WRITE: i8 = 4;
const CREATE: i8 = 5;
const DELETE: i8 = 6;
const ALTER: i8 = 7;
const DESCRIBE: i8 = 8;
const DESCRIBE_CONFIGS: i8 = 10;
const ALTER_CONFIGS: i8 = 11;
const IDEMPOTENT_WRITE: i8 = 12;
const CLUSTER_ACTION: i8 = 9;

fn xid(v: &str) -> TransactionalId {
    TransactionalId(s(v))
}

fn resource_name(rt: i8, name: &str) -> String {
    if rt == CLUSTER {
        "kafka-cluster".into()
    } else {
        name.into()
    }
}

/// One broker under test: an admin connection, the tested principal's connection, and how
/// ACLs name that principal.
struct Target {
    label: &'static str,
    admin: WireClient,
    client: WireClient,
    principal: String,
    host: String,
    node_id: i32,
    /// The broker's log, shown when something goes wrong.
    log: std::path::PathBuf,
}

impl Target {
    fn creation(&self, rt: i8, name: &str, op: i8) -> create_acls_request::AclCreation {
        create_acls_request::AclCreation::default()
            .with_resource_type(rt)
            .with_resource_name(s(&resource_name(rt, name)))
            .with_resource_pattern_type(LITERAL)
            .with_principal(s(&self.principal))
            .with_host(s(&self.host))
            .with_operation(op)
            .with_permission_type(ALLOW)
    }

    fn client_acls(&mut self) -> usize {
        let r = self
            .admin
            .send(
                DescribeAclsRequest::default()
                    .with_resource_type_filter(1)
                    .with_resource_name_filter(None)
                    .with_pattern_type_filter(1)
                    .with_principal_filter(Some(s(&self.principal)))
                    .with_host_filter(Some(s(&self.host)))
                    .with_operation(1)
                    .with_permission_type(1),
            )
            .expect("DescribeAcls");
        assert_eq!(r.error_code, 0, "{}: admin DescribeAcls", self.label);
        r.resources.iter().map(|x| x.acls.len()).sum()
    }

    /// Replaces the tested principal's ACLs with `grants` and waits until the broker's
    /// authorizer lists exactly those.
    fn set_grants(&mut self, grants: &[(i8, &str, i8)]) {
        let del = DeleteAclsRequest::default().with_filters(vec![
            delete_acls_request::DeleteAclsFilter::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(Some(s(&self.principal)))
                .with_host_filter(Some(s(&self.host)))
                .with_operation(1)
                .with_permission_type(1),
        ]);
        let r = self.admin.send(del).expect("DeleteAcls");
        assert_eq!(
            r.filter_results[0].error_code, 0,
            "{}: DeleteAcls",
            self.label
        );
        if !grants.is_empty() {
            let creations = grants
                .iter()
                .map(|(rt, n, op)| self.creation(*rt, n, *op))
                .collect();
            let r = self
                .admin
                .send(CreateAclsRequest::default().with_creations(creations))
                .expect("CreateAcls");
            assert_eq!(
                r.results.len(),
                grants.len(),
                "{}: CreateAcls {r:?}",
                self.label
            );
            for x in &r.results {
                assert_eq!(x.error_code, 0, "{}: CreateAcls {:?}", self.label, x);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n = self.client_acls();
            if n == grants.len() {
                break;
            }
            if Instant::now() >= deadline {
                let all = self.admin.send(
                    DescribeAclsRequest::default()
                        .with_resource_type_filter(1)
                        .with_resource_name_filter(None)
                        .with_pattern_type_filter(1)
                        .with_principal_filter(None)
                        .with_host_filter(None)
                        .with_operation(1)
                        .with_permission_type(1),
                );
                panic!(
                    "{}: all ACLs: {all:?}\n{}",
                    self.label,
                    kmirror_tests::proc::tail(&self.log, 60)
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: {n} ACLs visible for {}@{}, {} granted",
                self.label,
                self.principal,
                self.host,
                grants.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // Kafka's DescribeAcls and authorizer read the same image; a short pause covers any
        // other broker-side cache.
        std::thread::sleep(Duration::from_millis(100));
    }

    fn topic_id(&mut self, topic: &str) -> uuid::Uuid {
        self.admin
            .partition_info(topic, 0)
            .expect("admin metadata")
            .topic_id
    }
}

/// The tested APIs: name, the ACLs that grant them, and the outcome as text.
type Run = fn(&mut Target) -> String;
struct Row {
    name: &'static str,
    grants: &'static [(i8, &'static str, i8)],
    run: Run,
}

fn metadata_named(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            MetadataRequest::default()
                .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
                )
                .with_name(Some(tn("t")))]))
                .with_include_topic_authorized_operations(true),
        )
        .expect("Metadata");
    format!(
        "code={} ops={}",
        r.topics[0].error_code, r.topics[0].topic_authorized_operations
    )
}

/// Metadata v8-v10 carry the cluster's authorized operations.
fn metadata_cluster_ops(t: &mut Target) -> String {
    let r = t
        .client
        .send_at(
            MetadataRequest::default()
                .with_topics(Some(Vec::new()))
                .with_include_cluster_authorized_operations(true),
            10,
        )
        .expect("Metadata v10");
    format!("ops={}", r.cluster_authorized_operations)
}

fn metadata_all(t: &mut Target) -> String {
    let r = t
        .client
        .send(MetadataRequest::default().with_topics(None))
        .expect("Metadata");
    let listed = r
        .topics
        .iter()
        .any(|x| x.name.as_ref().is_some_and(|n| n.as_str() == "t"));
    format!("listed={listed}")
}

fn produce(t: &mut Target) -> String {
    let id = t.topic_id("t");
    let r = t
        .client
        .send(
            ProduceRequest::default()
                .with_acks(1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![produce_request::TopicProduceData::default()
                    .with_name(tn("t"))
                    .with_topic_id(id)
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(records::batch(&[b"v"], 1_700_000_000_000))),
                    ])]),
        )
        .expect("Produce");
    format!("code={}", r.responses[0].partition_responses[0].error_code)
}

fn fetch(t: &mut Target) -> String {
    fetch_as(t, -1)
}

/// A Fetch as broker 2's replica fetcher would send it (replica id, v15+ in ReplicaState).
fn fetch_as_follower(t: &mut Target) -> String {
    fetch_as(t, 2)
}

fn fetch_as(t: &mut Target, replica: i32) -> String {
    let id = t.topic_id("t");
    let version = t
        .client
        .version_of::<FetchRequest>()
        .expect("Fetch version");
    let req = if version >= 15 {
        FetchRequest::default().with_replica_state(
            fetch_request::ReplicaState::default()
                .with_replica_id(BrokerId(replica))
                .with_replica_epoch(-1),
        )
    } else {
        FetchRequest::default().with_replica_id(BrokerId(replica))
    };
    let r = t
        .client
        .send_at(
            req.with_max_wait_ms(0)
                .with_min_bytes(0)
                .with_max_bytes(1 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![fetch_request::FetchTopic::default()
                    .with_topic(tn("t"))
                    .with_topic_id(id)
                    .with_partitions(vec![fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_current_leader_epoch(-1)
                        .with_partition_max_bytes(1 << 20)])]),
            version,
        )
        .expect("Fetch");
    format!(
        "code={} top={}",
        r.responses[0].partitions[0].error_code, r.error_code
    )
}

fn list_offsets(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                    .with_name(tn("t"))
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(-1),
                    ])]),
        )
        .expect("ListOffsets");
    format!("code={}", r.topics[0].partitions[0].error_code)
}

fn offset_for_leader_epoch(t: &mut Target) -> String {
    use offset_for_leader_epoch_request::*;
    let r = t
        .client
        .send(
            OffsetForLeaderEpochRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![OffsetForLeaderTopic::default()
                    .with_topic(tn("t"))
                    .with_partitions(vec![OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(-1)
                        .with_leader_epoch(0)])]),
        )
        .expect("OffsetForLeaderEpoch");
    format!("code={}", r.topics[0].partitions[0].error_code)
}

fn delete_records(t: &mut Target) -> String {
    use delete_records_request::*;
    let r = t
        .client
        .send(
            DeleteRecordsRequest::default()
                .with_timeout_ms(10_000)
                .with_topics(vec![DeleteRecordsTopic::default()
                    .with_name(tn("t"))
                    .with_partitions(vec![DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(0)])]),
        )
        .expect("DeleteRecords");
    format!("code={}", r.topics[0].partitions[0].error_code)
}

fn create_topic_named(t: &mut Target, name: &str) -> String {
    let r = t
        .client
        .send(
            CreateTopicsRequest::default()
                .with_timeout_ms(10_000)
                .with_topics(vec![create_topics_request::CreatableTopic::default()
                    .with_name(tn(name))
                    .with_num_partitions(1)
                    .with_replication_factor(1)]),
        )
        .expect("CreateTopics");
    format!(
        "code={} config_code={}",
        r.topics[0].error_code, r.topics[0].topic_config_error_code
    )
}

fn create_topics(t: &mut Target) -> String {
    create_topic_named(t, "new1")
}

fn create_topics_cluster(t: &mut Target) -> String {
    create_topic_named(t, "new2")
}

fn delete_topics(t: &mut Target) -> String {
    let r =
        t.client
            .send(
                DeleteTopicsRequest::default()
                    .with_timeout_ms(10_000)
                    .with_topic_names(vec![tn("del")])
                    .with_topics(vec![delete_topics_request::DeleteTopicState::default()
                        .with_name(Some(tn("del")))]),
            )
            .expect("DeleteTopics");
    format!("code={}", r.responses[0].error_code)
}

fn create_partitions(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            CreatePartitionsRequest::default()
                .with_timeout_ms(10_000)
                .with_topics(vec![
                    create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(tn("t2"))
                        .with_count(2)
                        .with_assignments(None),
                ]),
        )
        .expect("CreatePartitions");
    format!("code={}", r.results[0].error_code)
}

fn describe_configs(t: &mut Target, rt: i8, name: String) -> String {
    let r = t
        .client
        .send(DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(rt)
                    .with_resource_name(s(&name))
                    .with_configuration_keys(None),
            ]))
        .expect("DescribeConfigs");
    format!("code={}", r.results[0].error_code)
}

fn describe_configs_topic(t: &mut Target) -> String {
    describe_configs(t, 2, "t".into())
}

fn describe_configs_broker(t: &mut Target) -> String {
    let id = t.node_id.to_string();
    describe_configs(t, 4, id)
}

fn incremental_alter_configs(t: &mut Target) -> String {
    use incremental_alter_configs_request::*;
    let r = t
        .client
        .send(
            IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))
                    .with_configs(vec![AlterableConfig::default()
                        .with_name(s("retention.ms"))
                        .with_config_operation(0)
                        .with_value(Some(s("3600000")))]),
            ]),
        )
        .expect("IncrementalAlterConfigs");
    format!("code={}", r.responses[0].error_code)
}

fn alter_configs(t: &mut Target) -> String {
    use alter_configs_request::*;
    let r = t
        .client
        .send(
            AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("t"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("7200000")))])]),
        )
        .expect("AlterConfigs");
    format!("code={}", r.responses[0].error_code)
}

fn create_acls(t: &mut Target) -> String {
    let c = create_acls_request::AclCreation::default()
        .with_resource_type(TOPIC)
        .with_resource_name(s("x"))
        .with_resource_pattern_type(LITERAL)
        .with_principal(s("User:nobody"))
        .with_host(s("*"))
        .with_operation(READ)
        .with_permission_type(ALLOW);
    let r = t
        .client
        .send(CreateAclsRequest::default().with_creations(vec![c]))
        .expect("CreateAcls");
    format!("code={}", r.results[0].error_code)
}

fn describe_acls(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            DescribeAclsRequest::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(Some(s("User:nobody")))
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1),
        )
        .expect("DescribeAcls");
    format!("code={}", r.error_code)
}

fn alter_partition_reassignments(t: &mut Target) -> String {
    use alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
    // A cancel: allowed, NO_REASSIGNMENT_IN_PROGRESS (85) on one node.
    let r = t
        .client
        .send(
            AlterPartitionReassignmentsRequest::default().with_topics(vec![
                ReassignableTopic::default()
                    .with_name(tn("t"))
                    .with_partitions(vec![ReassignablePartition::default()
                        .with_partition_index(0)
                        .with_replicas(None)]),
            ]),
        )
        .expect("AlterPartitionReassignments");
    let p: Vec<i16> = r
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect();
    format!("code={} partitions={p:?}", r.error_code)
}

fn list_partition_reassignments(t: &mut Target) -> String {
    let r = t
        .client
        .send(ListPartitionReassignmentsRequest::default().with_topics(None))
        .expect("ListPartitionReassignments");
    format!("code={} topics={}", r.error_code, r.topics.len())
}

fn delete_acls(t: &mut Target) -> String {
    let r = t
        .client
        .send(DeleteAclsRequest::default().with_filters(vec![
            delete_acls_request::DeleteAclsFilter::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(Some(s("User:nobody")))
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1),
        ]))
        .expect("DeleteAcls");
    format!("code={}", r.filter_results[0].error_code)
}

fn describe_cluster(t: &mut Target) -> String {
    let r = t
        .client
        .send(DescribeClusterRequest::default().with_include_cluster_authorized_operations(true))
        .expect("DescribeCluster");
    format!(
        "code={} ops={}",
        r.error_code, r.cluster_authorized_operations
    )
}

fn find_coordinator(t: &mut Target, key_type: i8, key: &str) -> String {
    let r = t
        .client
        .send(
            FindCoordinatorRequest::default()
                .with_key_type(key_type)
                .with_coordinator_keys(vec![s(key)]),
        )
        .expect("FindCoordinator");
    let code = r
        .coordinators
        .first()
        .map_or(r.error_code, |c| c.error_code);
    format!("code={code}")
}

fn find_group_coordinator(t: &mut Target) -> String {
    find_coordinator(t, 0, "g")
}

fn find_txn_coordinator(t: &mut Target) -> String {
    find_coordinator(t, 1, "x1")
}

fn join_group(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            JoinGroupRequest::default()
                .with_group_id(gid("g2"))
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(10_000)
                .with_member_id(s(""))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
                )
                .with_name(s("range"))
                .with_metadata(Bytes::new())]),
        )
        .expect("JoinGroup");
    format!("code={}", r.error_code)
}

fn heartbeat(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            HeartbeatRequest::default()
                .with_group_id(gid("g"))
                .with_generation_id(1)
                .with_member_id(s("m")),
        )
        .expect("Heartbeat");
    format!("code={}", r.error_code)
}

fn consumer_group_heartbeat(t: &mut Target, group: &str) -> String {
    let member = uuid::Uuid::new_v4().simple().to_string();
    let r = t
        .client
        .send(
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(gid(group))
                .with_member_id(s(&member))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![tn("t")]))
                .with_topic_partitions(Some(Vec::new())),
        )
        .expect("ConsumerGroupHeartbeat");
    format!("code={} epoch={}", r.error_code, r.member_epoch)
}

fn consumer_group_heartbeat_cg1(t: &mut Target) -> String {
    consumer_group_heartbeat(t, "cg1")
}

fn consumer_group_heartbeat_cg2(t: &mut Target) -> String {
    consumer_group_heartbeat(t, "cg2")
}

fn consumer_group_describe(t: &mut Target) -> String {
    let r = t
        .client
        .send(ConsumerGroupDescribeRequest::default().with_group_ids(vec![gid("cg2")]))
        .expect("ConsumerGroupDescribe");
    let g = &r.groups[0];
    format!(
        "code={} state={} members={}",
        g.error_code,
        g.group_state,
        g.members.len()
    )
}

fn sync_group(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            SyncGroupRequest::default()
                .with_group_id(gid("g"))
                .with_generation_id(1)
                .with_member_id(s("m"))
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range"))),
        )
        .expect("SyncGroup");
    format!("code={}", r.error_code)
}

fn leave_group(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            LeaveGroupRequest::default()
                .with_group_id(gid("g"))
                .with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(s("m"))
                ]),
        )
        .expect("LeaveGroup");
    format!(
        "code={} member={:?}",
        r.error_code,
        r.members.first().map(|m| m.error_code)
    )
}

fn commit(c: &mut WireClient, group: &str) -> String {
    use offset_commit_request::*;
    let r = c
        .send(
            OffsetCommitRequest::default()
                .with_group_id(gid(group))
                .with_generation_id_or_member_epoch(-1)
                .with_member_id(s(""))
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(tn("t"))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(0)
                        .with_committed_leader_epoch(-1)])]),
        )
        .expect("OffsetCommit");
    format!("code={}", r.topics[0].partitions[0].error_code)
}

fn offset_commit(t: &mut Target) -> String {
    commit(&mut t.client, "g")
}

fn offset_fetch(t: &mut Target, topics: bool) -> String {
    use offset_fetch_request::*;
    let named = topics.then(|| {
        vec![OffsetFetchRequestTopics::default()
            .with_name(tn("t"))
            .with_partition_indexes(vec![0])]
    });
    let r = t
        .client
        .send(
            OffsetFetchRequest::default()
                .with_topics(Some(Vec::new()))
                .with_groups(vec![OffsetFetchRequestGroup::default()
                    .with_group_id(gid("g"))
                    .with_topics(named)]),
        )
        .expect("OffsetFetch");
    let g = &r.groups[0];
    let parts: Vec<(String, i16)> = g
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.to_string(), p.error_code))
        })
        .collect();
    format!("group={} partitions={parts:?}", g.error_code)
}

fn offset_fetch_named(t: &mut Target) -> String {
    offset_fetch(t, true)
}

fn offset_fetch_all(t: &mut Target) -> String {
    offset_fetch(t, false)
}

fn describe_groups(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            DescribeGroupsRequest::default()
                .with_groups(vec![gid("g")])
                .with_include_authorized_operations(true),
        )
        .expect("DescribeGroups");
    let g = &r.groups[0];
    format!(
        "code={} state={} ops={}",
        g.error_code, g.group_state, g.authorized_operations
    )
}

fn list_groups(t: &mut Target) -> String {
    let r = t
        .client
        .send(ListGroupsRequest::default())
        .expect("ListGroups");
    let listed = r.groups.iter().any(|g| g.group_id.as_str() == "g");
    format!("code={} listed={listed}", r.error_code)
}

fn delete_groups(t: &mut Target) -> String {
    let r = t
        .client
        .send(DeleteGroupsRequest::default().with_groups_names(vec![gid("g3")]))
        .expect("DeleteGroups");
    format!("code={}", r.results[0].error_code)
}

fn offset_delete(t: &mut Target) -> String {
    use offset_delete_request::*;
    let r = t
        .client
        .send(
            OffsetDeleteRequest::default()
                .with_group_id(gid("g4"))
                .with_topics(vec![OffsetDeleteRequestTopic::default()
                    .with_name(tn("t"))
                    .with_partitions(vec![
                        OffsetDeleteRequestPartition::default().with_partition_index(0)
                    ])]),
        )
        .expect("OffsetDelete");
    format!(
        "code={} partition={:?}",
        r.error_code,
        r.topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.error_code)
    )
}

fn init_pid(t: &mut Target, txn: Option<&str>) -> String {
    let r = t
        .client
        .send(
            InitProducerIdRequest::default()
                .with_transactional_id(txn.map(xid))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .expect("InitProducerId");
    format!("code={}", r.error_code)
}

fn init_pid_idempotent(t: &mut Target) -> String {
    init_pid(t, None)
}

fn init_pid_txn(t: &mut Target) -> String {
    init_pid(t, Some("x1"))
}

fn add_partitions_to_txn(t: &mut Target) -> String {
    use add_partitions_to_txn_request::*;
    let r = t
        .client
        .send_at(
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(xid("x2"))
                .with_v3_and_below_producer_id(ProducerId(4242))
                .with_v3_and_below_producer_epoch(0)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(tn("t"))
                    .with_partitions(vec![0])]),
            3,
        )
        .expect("AddPartitionsToTxn");
    format!(
        "code={}",
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    )
}

fn add_offsets_to_txn(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            AddOffsetsToTxnRequest::default()
                .with_transactional_id(xid("x2"))
                .with_producer_id(ProducerId(4242))
                .with_producer_epoch(0)
                .with_group_id(gid("g")),
        )
        .expect("AddOffsetsToTxn");
    format!("code={}", r.error_code)
}

fn end_txn(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            EndTxnRequest::default()
                .with_transactional_id(xid("x2"))
                .with_producer_id(ProducerId(4242))
                .with_producer_epoch(0)
                .with_committed(true),
        )
        .expect("EndTxn");
    format!("code={}", r.error_code)
}

fn txn_offset_commit(t: &mut Target) -> String {
    use txn_offset_commit_request::*;
    let r = t
        .client
        .send(
            TxnOffsetCommitRequest::default()
                .with_transactional_id(xid("x2"))
                .with_group_id(gid("g"))
                .with_producer_id(ProducerId(4242))
                .with_producer_epoch(0)
                .with_generation_id(-1)
                .with_member_id(s(""))
                .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                    .with_name(tn("t"))
                    .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(0)
                        .with_committed_leader_epoch(-1)])]),
        )
        .expect("TxnOffsetCommit");
    format!("code={}", r.topics[0].partitions[0].error_code)
}

fn metadata_auto_create(t: &mut Target, topic: &str) -> String {
    let r = t
        .client
        .send(
            MetadataRequest::default()
                .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
                )
                .with_name(Some(tn(topic)))]))
                .with_allow_auto_topic_creation(true),
        )
        .expect("Metadata");
    let code = r.topics[0].error_code;
    if code == 29 {
        return format!("code={code}");
    }
    // Kafka creates the topic asynchronously (answering LEADER_NOT_AVAILABLE or
    // UNKNOWN_TOPIC_OR_PARTITION meanwhile); kmirror before answering. What counts is
    // whether the topic comes to exist.
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if t.admin.partition_info(topic, 0).is_ok() {
            return "created".into();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    format!("code={code}, not created")
}

fn metadata_auto_create_1(t: &mut Target) -> String {
    metadata_auto_create(t, "auto1")
}

fn metadata_auto_create_2(t: &mut Target) -> String {
    metadata_auto_create(t, "auto2")
}

fn metadata_auto_create_3(t: &mut Target) -> String {
    metadata_auto_create(t, "auto3")
}

fn alter_scram(t: &mut Target) -> String {
    let r = t
        .client
        .send(
            AlterUserScramCredentialsRequest::default().with_deletions(vec![
                alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                    .with_name(s("nobody"))
                    .with_mechanism(2),
            ]),
        )
        .expect("AlterUserScramCredentials");
    format!("code={}", r.results[0].error_code)
}

fn describe_client_quotas(t: &mut Target) -> String {
    let r = t
        .client
        .send(DescribeClientQuotasRequest::default())
        .expect("DescribeClientQuotas");
    format!("code={}", r.error_code)
}

fn alter_client_quotas(t: &mut Target) -> String {
    use alter_client_quotas_request::{EntityData, EntryData, OpData};
    let r = t
        .client
        .send(
            AlterClientQuotasRequest::default()
                .with_validate_only(true)
                .with_entries(vec![EntryData::default()
                    .with_entity(vec![EntityData::default()
                        .with_entity_type(s("client-id"))
                        .with_entity_name(Some(s("c")))])
                    .with_ops(vec![OpData::default()
                        .with_key(s("producer_byte_rate"))
                        .with_value(1024.0)])]),
        )
        .expect("AlterClientQuotas");
    format!("code={}", r.entries[0].error_code)
}

const ROWS: &[Row] = &[
    Row {
        name: "Metadata named (Describe topic)",
        grants: &[(TOPIC, "t", DESCRIBE)],
        run: metadata_named,
    },
    Row {
        name: "Metadata named, Read implies Describe",
        grants: &[(TOPIC, "t", READ)],
        run: metadata_named,
    },
    Row {
        name: "Metadata all topics (listing)",
        grants: &[(TOPIC, "t", DESCRIBE)],
        run: metadata_all,
    },
    Row {
        name: "Produce (Write topic)",
        grants: &[(TOPIC, "t", WRITE)],
        run: produce,
    },
    Row {
        name: "Fetch (Read topic)",
        grants: &[(TOPIC, "t", READ)],
        run: fetch,
    },
    Row {
        name: "Fetch from a follower (ClusterAction cluster)",
        grants: &[(CLUSTER, "", CLUSTER_ACTION)],
        run: fetch_as_follower,
    },
    Row {
        name: "Fetch from a follower, Read topic is not enough",
        grants: &[(TOPIC, "t", READ)],
        run: fetch_as_follower,
    },
    Row {
        name: "OffsetForLeaderEpoch (ClusterAction cluster)",
        grants: &[(CLUSTER, "", CLUSTER_ACTION)],
        run: offset_for_leader_epoch,
    },
    Row {
        name: "ListOffsets (Describe topic)",
        grants: &[(TOPIC, "t", DESCRIBE)],
        run: list_offsets,
    },
    Row {
        name: "OffsetForLeaderEpoch (Describe topic)",
        grants: &[(TOPIC, "t", DESCRIBE)],
        run: offset_for_leader_epoch,
    },
    Row {
        name: "DeleteRecords (Delete topic)",
        grants: &[(TOPIC, "t", DELETE)],
        run: delete_records,
    },
    Row {
        name: "CreateTopics (Create topic)",
        grants: &[(TOPIC, "new1", CREATE)],
        run: create_topics,
    },
    Row {
        name: "CreateTopics (Create cluster)",
        grants: &[(CLUSTER, "", CREATE)],
        run: create_topics_cluster,
    },
    Row {
        name: "DeleteTopics (Delete topic)",
        grants: &[(TOPIC, "del", DELETE)],
        run: delete_topics,
    },
    Row {
        name: "CreatePartitions (Alter topic)",
        grants: &[(TOPIC, "t2", ALTER)],
        run: create_partitions,
    },
    Row {
        name: "DescribeConfigs topic",
        grants: &[(TOPIC, "t", DESCRIBE_CONFIGS)],
        run: describe_configs_topic,
    },
    Row {
        name: "DescribeConfigs topic, AlterConfigs implies",
        grants: &[(TOPIC, "t", ALTER_CONFIGS)],
        run: describe_configs_topic,
    },
    Row {
        name: "DescribeConfigs broker (cluster)",
        grants: &[(CLUSTER, "", DESCRIBE_CONFIGS)],
        run: describe_configs_broker,
    },
    Row {
        name: "IncrementalAlterConfigs topic",
        grants: &[(TOPIC, "t", ALTER_CONFIGS)],
        run: incremental_alter_configs,
    },
    Row {
        name: "AlterConfigs topic",
        grants: &[(TOPIC, "t", ALTER_CONFIGS)],
        run: alter_configs,
    },
    Row {
        name: "CreateAcls (Alter cluster)",
        grants: &[(CLUSTER, "", ALTER)],
        run: create_acls,
    },
    Row {
        name: "DescribeAcls (Describe cluster)",
        grants: &[(CLUSTER, "", DESCRIBE)],
        run: describe_acls,
    },
    Row {
        name: "DeleteAcls (Alter cluster)",
        grants: &[(CLUSTER, "", ALTER)],
        run: delete_acls,
    },
    Row {
        name: "AlterPartitionReassignments (Alter cluster)",
        grants: &[(CLUSTER, "", ALTER)],
        run: alter_partition_reassignments,
    },
    Row {
        name: "ListPartitionReassignments (Describe cluster)",
        grants: &[(CLUSTER, "", DESCRIBE)],
        run: list_partition_reassignments,
    },
    Row {
        name: "DescribeCluster ops (Describe cluster)",
        grants: &[(CLUSTER, "", DESCRIBE)],
        run: describe_cluster,
    },
    Row {
        name: "DescribeCluster ops (All cluster)",
        grants: &[(CLUSTER, "", ALL)],
        run: describe_cluster,
    },
    Row {
        name: "FindCoordinator group",
        grants: &[(GROUP, "g", DESCRIBE)],
        run: find_group_coordinator,
    },
    Row {
        name: "FindCoordinator transaction",
        grants: &[(TXN, "x1", DESCRIBE)],
        run: find_txn_coordinator,
    },
    Row {
        name: "JoinGroup (Read group)",
        grants: &[(GROUP, "g2", READ)],
        run: join_group,
    },
    Row {
        name: "Heartbeat (Read group)",
        grants: &[(GROUP, "g", READ)],
        run: heartbeat,
    },
    Row {
        name: "ConsumerGroupHeartbeat (Read group only)",
        grants: &[(GROUP, "cg1", READ)],
        run: consumer_group_heartbeat_cg1,
    },
    Row {
        name: "ConsumerGroupHeartbeat (Read group, Describe topic)",
        grants: &[(GROUP, "cg2", READ), (TOPIC, "t", DESCRIBE)],
        run: consumer_group_heartbeat_cg2,
    },
    Row {
        name: "ConsumerGroupDescribe (Describe group)",
        grants: &[(GROUP, "cg2", DESCRIBE)],
        run: consumer_group_describe,
    },
    Row {
        name: "ConsumerGroupDescribe (Describe group and topic)",
        grants: &[(GROUP, "cg2", DESCRIBE), (TOPIC, "t", DESCRIBE)],
        run: consumer_group_describe,
    },
    Row {
        name: "SyncGroup (Read group)",
        grants: &[(GROUP, "g", READ)],
        run: sync_group,
    },
    Row {
        name: "LeaveGroup (Read group)",
        grants: &[(GROUP, "g", READ)],
        run: leave_group,
    },
    Row {
        name: "OffsetCommit, group only",
        grants: &[(GROUP, "g", READ)],
        run: offset_commit,
    },
    Row {
        name: "OffsetCommit (Read group + topic)",
        grants: &[(GROUP, "g", READ), (TOPIC, "t", READ)],
        run: offset_commit,
    },
    Row {
        name: "OffsetFetch named, group only",
        grants: &[(GROUP, "g", DESCRIBE)],
        run: offset_fetch_named,
    },
    Row {
        name: "OffsetFetch named (Describe group + topic)",
        grants: &[(GROUP, "g", DESCRIBE), (TOPIC, "t", DESCRIBE)],
        run: offset_fetch_named,
    },
    Row {
        name: "OffsetFetch all, group only",
        grants: &[(GROUP, "g", DESCRIBE)],
        run: offset_fetch_all,
    },
    Row {
        name: "OffsetFetch all (group + topic)",
        grants: &[(GROUP, "g", READ), (TOPIC, "t", READ)],
        run: offset_fetch_all,
    },
    Row {
        name: "DescribeGroups ops (Describe group)",
        grants: &[(GROUP, "g", DESCRIBE)],
        run: describe_groups,
    },
    Row {
        name: "DescribeGroups ops (Read group)",
        grants: &[(GROUP, "g", READ)],
        run: describe_groups,
    },
    Row {
        name: "ListGroups (Describe group)",
        grants: &[(GROUP, "g", DESCRIBE)],
        run: list_groups,
    },
    Row {
        name: "ListGroups (Describe cluster)",
        grants: &[(CLUSTER, "", DESCRIBE)],
        run: list_groups,
    },
    Row {
        name: "OffsetDelete, group only",
        grants: &[(GROUP, "g4", DELETE)],
        run: offset_delete,
    },
    Row {
        name: "OffsetDelete (Delete group + Read topic)",
        grants: &[(GROUP, "g4", DELETE), (TOPIC, "t", READ)],
        run: offset_delete,
    },
    Row {
        name: "DeleteGroups (Delete group)",
        grants: &[(GROUP, "g3", DELETE)],
        run: delete_groups,
    },
    Row {
        name: "InitProducerId idempotent (IdempotentWrite)",
        grants: &[(CLUSTER, "", IDEMPOTENT_WRITE)],
        run: init_pid_idempotent,
    },
    Row {
        name: "InitProducerId idempotent (Write any topic)",
        grants: &[(TOPIC, "t", WRITE)],
        run: init_pid_idempotent,
    },
    Row {
        name: "InitProducerId transactional (Write txn)",
        grants: &[(TXN, "x1", WRITE)],
        run: init_pid_txn,
    },
    Row {
        name: "AddPartitionsToTxn, txn only",
        grants: &[(TXN, "x2", WRITE)],
        run: add_partitions_to_txn,
    },
    Row {
        name: "AddPartitionsToTxn (Write txn + topic)",
        grants: &[(TXN, "x2", WRITE), (TOPIC, "t", WRITE)],
        run: add_partitions_to_txn,
    },
    Row {
        name: "AddOffsetsToTxn, txn only",
        grants: &[(TXN, "x2", WRITE)],
        run: add_offsets_to_txn,
    },
    Row {
        name: "AddOffsetsToTxn (Write txn + Read group)",
        grants: &[(TXN, "x2", WRITE), (GROUP, "g", READ)],
        run: add_offsets_to_txn,
    },
    Row {
        name: "EndTxn (Write txn)",
        grants: &[(TXN, "x2", WRITE)],
        run: end_txn,
    },
    Row {
        name: "TxnOffsetCommit, txn + group",
        grants: &[(TXN, "x2", WRITE), (GROUP, "g", READ)],
        run: txn_offset_commit,
    },
    Row {
        name: "TxnOffsetCommit (txn + group + topic)",
        grants: &[(TXN, "x2", WRITE), (GROUP, "g", READ), (TOPIC, "t", READ)],
        run: txn_offset_commit,
    },
    Row {
        name: "Metadata auto-create, Describe only",
        grants: &[(TOPIC, "auto1", DESCRIBE)],
        run: metadata_auto_create_1,
    },
    Row {
        name: "Metadata auto-create (Describe + Create topic)",
        grants: &[(TOPIC, "auto2", DESCRIBE), (TOPIC, "auto2", CREATE)],
        run: metadata_auto_create_2,
    },
    Row {
        name: "Metadata auto-create (Create cluster)",
        grants: &[(TOPIC, "auto3", DESCRIBE), (CLUSTER, "", CREATE)],
        run: metadata_auto_create_3,
    },
    Row {
        name: "AlterUserScramCredentials (Alter cluster)",
        grants: &[(CLUSTER, "", ALTER)],
        run: alter_scram,
    },
    Row {
        name: "DescribeClientQuotas (DescribeConfigs cluster)",
        grants: &[(CLUSTER, "", DESCRIBE_CONFIGS)],
        run: describe_client_quotas,
    },
    Row {
        name: "AlterClientQuotas (AlterConfigs cluster)",
        grants: &[(CLUSTER, "", ALTER_CONFIGS)],
        run: alter_client_quotas,
    },
    Row {
        name: "Metadata v10 cluster ops (Describe cluster)",
        grants: &[(CLUSTER, "", DESCRIBE)],
        run: metadata_cluster_ops,
    },
    Row {
        name: "Metadata v10 cluster ops (Alter cluster)",
        grants: &[(CLUSTER, "", ALTER)],
        run: metadata_cluster_ops,
    },
];
/// Topics t (with a record), t2, del; groups g, g3, g4 with a committed offset.
fn prepare(t: &mut Target) {
    for (name, n) in [("t", 1), ("t2", 1), ("del", 1)] {
        let code = t.admin.create_topic(name, n, 1, &[]).expect("CreateTopics");
        assert_eq!(code, 0, "{}: create {name}", t.label);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while t.admin.partition_info("t", 0).is_err() {
        assert!(
            Instant::now() < deadline,
            "{}: topic t has no leader",
            t.label
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _) = t
        .admin
        .produce_raw("t", 0, records::batch(&[b"a"], 1_700_000_000_000), -1)
        .expect("produce");
    assert_eq!(code, 0, "{}: admin produce", t.label);
    // Kafka creates its coordinator topics on the first FindCoordinator.
    for (key_type, key) in [(0i8, "g"), (1, "x1")] {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = t
                .admin
                .send(
                    FindCoordinatorRequest::default()
                        .with_key_type(key_type)
                        .with_coordinator_keys(vec![s(key)]),
                )
                .expect("FindCoordinator");
            let code = r
                .coordinators
                .first()
                .map_or(r.error_code, |c| c.error_code);
            if code == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: coordinator for {key}: {code}",
                t.label
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Kafka allocates producer ids in blocks from the controller: the first InitProducerId
    // may answer COORDINATOR_LOAD_IN_PROGRESS, which is not what the matrix compares.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = t
            .admin
            .send(
                InitProducerIdRequest::default()
                    .with_transactional_id(None)
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            )
            .expect("InitProducerId");
        if r.error_code == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: InitProducerId {}",
            t.label,
            r.error_code
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for g in ["g", "g3", "g4"] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = commit(&mut t.admin, g);
            if r == "code=0" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: admin commit {g}: {r}",
                t.label
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Outcomes per row: (without the grants, with them).
fn run_matrix(t: &mut Target) -> Vec<(String, String)> {
    prepare(t);
    let mut out = Vec::new();
    for row in ROWS {
        t.set_grants(&[]);
        let denied = (row.run)(t);
        t.set_grants(row.grants);
        let granted = (row.run)(t);
        println!(
            "{:>8} | {:<48} | {denied:<40} | {granted}",
            t.label, row.name
        );
        out.push((denied, granted));
    }
    t.set_grants(&[]);
    out
}

fn kafka_target() -> (KafkaCluster, Target) {
    let kafka = KafkaCluster::start_with(KafkaOptions {
        security: Some(KafkaSecurity {
            protocol: SecureProtocol::SaslPlaintext,
            sasl_mechanisms: vec!["PLAIN".into()],
            users: vec![SaslUser::new("alice", "alice-secret")],
            tls: None,
            authorizer: true,
            super_users: Vec::new(),
            admin: AdminAuth::Sasl {
                mechanism: "PLAIN".into(),
                user: SaslUser::new("admin", "admin-secret"),
            },
        }),
        props: vec![("auto.create.topics.enable".into(), "true".into())],
        ..KafkaOptions::default()
    });
    let boot = kafka.secure_bootstrap();
    let addr = boot.split(',').next().expect("a node").to_string();
    let target = Target {
        label: "kafka",
        admin: WireClient::connect_sasl_plain(&addr, "admin", "admin-secret").expect("admin"),
        client: WireClient::connect_sasl_plain(&addr, "alice", "alice-secret").expect("alice"),
        principal: "User:alice".into(),
        host: "*".into(),
        node_id: 1,
        log: kafka.log_of(1),
    };
    (kafka, target)
}

fn kmirror_target() -> (KmirrorNode, Target) {
    let mut node = KmirrorNode::builder()
        .listeners(&["SASL_PLAINTEXT"])
        .args(&[
            "--cores",
            "1",
            "--authorizer",
            "true",
            "--super-users",
            "User:admin",
            "--sasl-mechanisms",
            "PLAIN",
        ])
        .start();
    assert!(node.stop(), "kmirror stops cleanly");
    sasl::scram_add(&node.data_dir(), "admin", "SCRAM-SHA-512", "admin-secret");
    sasl::scram_add(&node.data_dir(), "alice", "SCRAM-SHA-512", "alice-secret");
    node.start_again();
    let addr = node.listener_addr("SASL_PLAINTEXT");
    let target = Target {
        label: "kmirror",
        admin: WireClient::connect_sasl_plain(&addr, "admin", "admin-secret").expect("admin"),
        client: WireClient::connect_sasl_plain(&addr, "alice", "alice-secret").expect("alice"),
        principal: "User:alice".into(),
        host: "*".into(),
        node_id: 1,
        log: node.log_path(),
    };
    (node, target)
}

/// Every API, refused and granted: kmirror answers exactly what Kafka answers.
#[test]
fn given_the_same_acls_when_each_api_is_called_should_answer_as_kafka() {
    let _g = kmirror_tests::heavy_test_lock();
    let (_kafka, mut kt) = kafka_target();
    let expected = run_matrix(&mut kt);
    drop(kt);
    drop(_kafka);
    let (_node, mut mt) = kmirror_target();
    let got = run_matrix(&mut mt);
    let mut mismatches = Vec::new();
    for ((row, want), have) in ROWS.iter().zip(&expected).zip(&got) {
        if want != have {
            mismatches.push(format!("{}: kafka {:?} kmirror {:?}", row.name, want, have));
        }
    }
    // The matrix must exercise refusals: most rows differ between refused and granted.
    let refused_differs = expected.iter().filter(|(d, g)| d != g).count();
    assert!(
        refused_differs >= ROWS.len() * 3 / 4,
        "too few rows where the ACL changes Kafka's answer ({refused_differs}/{})",
        ROWS.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} of {} rows differ from Kafka:\n{}",
        mismatches.len(),
        ROWS.len(),
        mismatches.join("\n")
    );
}
