//! Which APIs and versions kmirror serves, and the ApiVersions answer (with KIP-511's
//! fallback: a client asking with a version we do not know gets a v0 answer carrying
//! UNSUPPORTED_VERSION and our list, so it can retry with a version we share).

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Message, StrBytes, VersionRange};

macro_rules! served {
    ($($key:ident => $req:ty),* $(,)?) => {
        /// Every API the broker answers, with the versions of kafka-protocol's schemas.
        pub(crate) const SERVED: &[(ApiKey, VersionRange)] = &[$((ApiKey::$key, <$req as Message>::VERSIONS)),*];
    };
}

served! {
    Produce => ProduceRequest,
    Fetch => FetchRequest,
    ListOffsets => ListOffsetsRequest,
    Metadata => MetadataRequest,
    OffsetCommit => OffsetCommitRequest,
    OffsetFetch => OffsetFetchRequest,
    FindCoordinator => FindCoordinatorRequest,
    JoinGroup => JoinGroupRequest,
    Heartbeat => HeartbeatRequest,
    LeaveGroup => LeaveGroupRequest,
    SyncGroup => SyncGroupRequest,
    DescribeGroups => DescribeGroupsRequest,
    ListGroups => ListGroupsRequest,
    ApiVersions => ApiVersionsRequest,
    CreateTopics => CreateTopicsRequest,
    DeleteTopics => DeleteTopicsRequest,
    DeleteRecords => DeleteRecordsRequest,
    InitProducerId => InitProducerIdRequest,
    OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
    AddPartitionsToTxn => AddPartitionsToTxnRequest,
    AddOffsetsToTxn => AddOffsetsToTxnRequest,
    EndTxn => EndTxnRequest,
    TxnOffsetCommit => TxnOffsetCommitRequest,
    DescribeConfigs => DescribeConfigsRequest,
    AlterConfigs => AlterConfigsRequest,
    CreatePartitions => CreatePartitionsRequest,
    DeleteGroups => DeleteGroupsRequest,
    OffsetDelete => OffsetDeleteRequest,
    IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
    DescribeCluster => DescribeClusterRequest,
    CreateAcls => CreateAclsRequest,
    DescribeAcls => DescribeAclsRequest,
    DeleteAcls => DeleteAclsRequest,
    SaslHandshake => SaslHandshakeRequest,
    SaslAuthenticate => SaslAuthenticateRequest,
    DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
    AlterUserScramCredentials => AlterUserScramCredentialsRequest,
    DescribeClientQuotas => DescribeClientQuotasRequest,
    ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest,
    ConsumerGroupDescribe => ConsumerGroupDescribeRequest,
    ShareGroupHeartbeat => ShareGroupHeartbeatRequest,
    ShareGroupDescribe => ShareGroupDescribeRequest,
    ShareFetch => ShareFetchRequest,
    ShareAcknowledge => ShareAcknowledgeRequest,
    InitializeShareGroupState => InitializeShareGroupStateRequest,
    ReadShareGroupState => ReadShareGroupStateRequest,
    WriteShareGroupState => WriteShareGroupStateRequest,
    DeleteShareGroupState => DeleteShareGroupStateRequest,
    ReadShareGroupStateSummary => ReadShareGroupStateSummaryRequest,
    DescribeShareGroupOffsets => DescribeShareGroupOffsetsRequest,
    AlterShareGroupOffsets => AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsets => DeleteShareGroupOffsetsRequest,
    AlterClientQuotas => AlterClientQuotasRequest,
    DescribeTopicPartitions => DescribeTopicPartitionsRequest,
    DescribeLogDirs => DescribeLogDirsRequest,
    AlterReplicaLogDirs => AlterReplicaLogDirsRequest,
    ListConfigResources => ListConfigResourcesRequest,
    DescribeProducers => DescribeProducersRequest,
    DescribeTransactions => DescribeTransactionsRequest,
    ListTransactions => ListTransactionsRequest,
    ElectLeaders => ElectLeadersRequest,
    AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
    ListPartitionReassignments => ListPartitionReassignmentsRequest,
    UpdateFeatures => UpdateFeaturesRequest,
    WriteTxnMarkers => WriteTxnMarkersRequest,
    DescribeQuorum => DescribeQuorumRequest,
    UnregisterBroker => UnregisterBrokerRequest,
    AddRaftVoter => AddRaftVoterRequest,
    RemoveRaftVoter => RemoveRaftVoterRequest,
}

/// APIs handled by the group / transaction coordinator (`groups.rs`).
pub(crate) fn is_group_api(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::OffsetCommit
            | ApiKey::OffsetFetch
            | ApiKey::FindCoordinator
            | ApiKey::JoinGroup
            | ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::SyncGroup
            | ApiKey::DescribeGroups
            | ApiKey::ListGroups
            | ApiKey::InitProducerId
            | ApiKey::AddPartitionsToTxn
            | ApiKey::AddOffsetsToTxn
            | ApiKey::EndTxn
            | ApiKey::TxnOffsetCommit
            | ApiKey::DeleteGroups
            | ApiKey::OffsetDelete
            | ApiKey::ConsumerGroupHeartbeat
            | ApiKey::ConsumerGroupDescribe
            | ApiKey::ShareGroupHeartbeat
            | ApiKey::ShareGroupDescribe
            | ApiKey::InitializeShareGroupState
            | ApiKey::ReadShareGroupState
            | ApiKey::WriteShareGroupState
            | ApiKey::DeleteShareGroupState
            | ApiKey::ReadShareGroupStateSummary
            | ApiKey::DescribeShareGroupOffsets
            | ApiKey::AlterShareGroupOffsets
            | ApiKey::DeleteShareGroupOffsets
            | ApiKey::DescribeTransactions
            | ApiKey::ListTransactions
    )
}

pub(crate) fn served_range(key: ApiKey) -> Option<VersionRange> {
    SERVED.iter().find(|(k, _)| *k == key).map(|(_, r)| *r)
}

/// Produce is advertised from v0 although v0-v2 are refused (the connection closes, as
/// `served_range` says): librdkafka before 2.8 disables gzip, snappy and lz4 unless Produce
/// v0-v2 are listed (librdkafka#4956), so Kafka 4 advertises them too (KAFKA-18659).
fn advertised_min(key: ApiKey, min: i16) -> i16 {
    if key == ApiKey::Produce {
        0
    } else {
        min
    }
}

/// Builds the ApiVersions response. `extra` are (key, min, max) of APIs served by
/// extensions (the mirror APIs).
pub(crate) fn api_versions_response(
    error_code: i16,
    extra: &[(i16, i16, i16)],
) -> ApiVersionsResponse {
    let mut keys: Vec<ApiVersion> = SERVED
        .iter()
        .map(|(k, r)| {
            ApiVersion::default()
                .with_api_key(*k as i16)
                .with_min_version(advertised_min(*k, r.min))
                .with_max_version(r.max)
        })
        .collect();
    for (k, min, max) in extra {
        keys.push(
            ApiVersion::default()
                .with_api_key(*k)
                .with_min_version(*min)
                .with_max_version(*max),
        );
    }
    keys.sort_by_key(|k| k.api_key);
    let _ = StrBytes::from_static_str("");
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(keys)
        .with_finalized_features_epoch(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_versions_come_from_the_schemas() {
        let r = served_range(ApiKey::Produce).unwrap();
        assert_eq!(r, <ProduceRequest as Message>::VERSIONS);
        assert!(r.min <= 3 && r.max >= 9);
        let produce = api_versions_response(0, &[])
            .api_keys
            .into_iter()
            .find(|k| k.api_key == ApiKey::Produce as i16)
            .unwrap();
        assert_eq!((produce.min_version, produce.max_version), (0, r.max));
        assert!(served_range(ApiKey::Fetch).unwrap().max >= 12);
        let resp = api_versions_response(0, &[(94, 0, 0)]);
        assert!(resp.api_keys.iter().any(|k| k.api_key == 94));
        assert!(resp
            .api_keys
            .iter()
            .any(|k| k.api_key == ApiKey::ApiVersions as i16));
    }

    /// Every group/transaction API's error answer (sent when the coordinator is unavailable)
    /// encodes at every served version: kafka-protocol refuses a response that sets a field
    /// its version lacks, and the connection would be closed instead.
    #[test]
    fn coordinator_error_answers_encode_at_every_served_version() {
        use kafka_protocol::messages::{self as m, GroupId, RequestKind, TopicName};
        let name = || StrBytes::from_static_str("x");
        let req = |key: ApiKey, v: i16| -> RequestKind {
            match key {
                ApiKey::FindCoordinator => RequestKind::FindCoordinator(
                    FindCoordinatorRequest::default()
                        .with_key(if v < 4 { name() } else { StrBytes::default() })
                        .with_coordinator_keys(if v >= 4 { vec![name()] } else { vec![] }),
                ),
                ApiKey::DescribeGroups => RequestKind::DescribeGroups(
                    DescribeGroupsRequest::default().with_groups(vec![GroupId(name())]),
                ),
                ApiKey::ConsumerGroupDescribe => RequestKind::ConsumerGroupDescribe(
                    ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(name())]),
                ),
                ApiKey::DeleteGroups => RequestKind::DeleteGroups(
                    DeleteGroupsRequest::default().with_groups_names(vec![GroupId(name())]),
                ),
                ApiKey::OffsetCommit => {
                    use m::offset_commit_request::*;
                    RequestKind::OffsetCommit(OffsetCommitRequest::default().with_topics(vec![
                        OffsetCommitRequestTopic::default()
                            .with_name(TopicName(name()))
                            .with_partitions(vec![OffsetCommitRequestPartition::default()]),
                    ]))
                }
                ApiKey::TxnOffsetCommit => {
                    use m::txn_offset_commit_request::*;
                    RequestKind::TxnOffsetCommit(TxnOffsetCommitRequest::default().with_topics(
                        vec![TxnOffsetCommitRequestTopic::default()
                            .with_name(TopicName(name()))
                            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()])],
                    ))
                }
                ApiKey::OffsetFetch => {
                    use m::offset_fetch_request::*;
                    RequestKind::OffsetFetch(if v >= 8 {
                        OffsetFetchRequest::default().with_groups(vec![
                            OffsetFetchRequestGroup::default()
                                .with_group_id(GroupId(name()))
                                .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                                    .with_name(TopicName(name()))
                                    .with_partition_indexes(vec![0])])),
                        ])
                    } else {
                        OffsetFetchRequest::default().with_topics(Some(vec![
                            OffsetFetchRequestTopic::default()
                                .with_name(TopicName(name()))
                                .with_partition_indexes(vec![0]),
                        ]))
                    })
                }
                ApiKey::AddPartitionsToTxn => {
                    use m::add_partitions_to_txn_request::*;
                    let topics = vec![AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(name()))
                        .with_partitions(vec![0])];
                    RequestKind::AddPartitionsToTxn(if v >= 4 {
                        AddPartitionsToTxnRequest::default().with_transactions(vec![
                            AddPartitionsToTxnTransaction::default().with_topics(topics),
                        ])
                    } else {
                        AddPartitionsToTxnRequest::default().with_v3_and_below_topics(topics)
                    })
                }
                ApiKey::OffsetDelete => {
                    use m::offset_delete_request::*;
                    RequestKind::OffsetDelete(OffsetDeleteRequest::default().with_topics(vec![
                        OffsetDeleteRequestTopic::default()
                            .with_name(TopicName(name()))
                            .with_partitions(vec![OffsetDeleteRequestPartition::default()]),
                    ]))
                }
                ApiKey::JoinGroup => RequestKind::JoinGroup(Default::default()),
                ApiKey::Heartbeat => RequestKind::Heartbeat(Default::default()),
                ApiKey::LeaveGroup => RequestKind::LeaveGroup(Default::default()),
                ApiKey::SyncGroup => RequestKind::SyncGroup(Default::default()),
                ApiKey::ListGroups => RequestKind::ListGroups(Default::default()),
                ApiKey::InitProducerId => RequestKind::InitProducerId(Default::default()),
                ApiKey::AddOffsetsToTxn => RequestKind::AddOffsetsToTxn(Default::default()),
                ApiKey::EndTxn => RequestKind::EndTxn(Default::default()),
                ApiKey::ConsumerGroupHeartbeat => {
                    RequestKind::ConsumerGroupHeartbeat(Default::default())
                }
                ApiKey::DescribeTransactions => RequestKind::DescribeTransactions(
                    DescribeTransactionsRequest::default()
                        .with_transactional_ids(vec![TransactionalId(name())]),
                ),
                ApiKey::ListTransactions => RequestKind::ListTransactions(Default::default()),
                ApiKey::ShareGroupHeartbeat => RequestKind::ShareGroupHeartbeat(Default::default()),
                ApiKey::ShareGroupDescribe => RequestKind::ShareGroupDescribe(
                    ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(name())]),
                ),
                ApiKey::InitializeShareGroupState => {
                    use m::initialize_share_group_state_request::*;
                    RequestKind::InitializeShareGroupState(
                        InitializeShareGroupStateRequest::default()
                            .with_topics(vec![InitializeStateData::default()
                                .with_partitions(vec![PartitionData::default()])]),
                    )
                }
                ApiKey::ReadShareGroupState => {
                    use m::read_share_group_state_request::*;
                    RequestKind::ReadShareGroupState(
                        ReadShareGroupStateRequest::default()
                            .with_topics(vec![ReadStateData::default()
                                .with_partitions(vec![PartitionData::default()])]),
                    )
                }
                ApiKey::WriteShareGroupState => {
                    use m::write_share_group_state_request::*;
                    RequestKind::WriteShareGroupState(
                        WriteShareGroupStateRequest::default()
                            .with_topics(vec![WriteStateData::default()
                                .with_partitions(vec![PartitionData::default()])]),
                    )
                }
                ApiKey::DeleteShareGroupState => {
                    use m::delete_share_group_state_request::*;
                    RequestKind::DeleteShareGroupState(
                        DeleteShareGroupStateRequest::default()
                            .with_topics(vec![DeleteStateData::default()
                                .with_partitions(vec![PartitionData::default()])]),
                    )
                }
                ApiKey::ReadShareGroupStateSummary => {
                    use m::read_share_group_state_summary_request::*;
                    RequestKind::ReadShareGroupStateSummary(
                        ReadShareGroupStateSummaryRequest::default()
                            .with_topics(vec![ReadStateSummaryData::default()
                                .with_partitions(vec![PartitionData::default()])]),
                    )
                }
                ApiKey::DescribeShareGroupOffsets => {
                    use m::describe_share_group_offsets_request::*;
                    RequestKind::DescribeShareGroupOffsets(
                        DescribeShareGroupOffsetsRequest::default()
                            .with_groups(vec![DescribeShareGroupOffsetsRequestGroup::default()
                                .with_group_id(GroupId(name()))]),
                    )
                }
                ApiKey::AlterShareGroupOffsets => {
                    RequestKind::AlterShareGroupOffsets(Default::default())
                }
                ApiKey::DeleteShareGroupOffsets => {
                    RequestKind::DeleteShareGroupOffsets(Default::default())
                }
                other => panic!("{other:?} is not a group API"),
            }
        };
        let mut cells = 0;
        for (key, range) in SERVED.iter().filter(|(k, _)| is_group_api(*k)) {
            for v in range.min..=range.max {
                for code in [15, 16, 90] {
                    let resp = crate::groups::error_response(&req(*key, v), v, code);
                    let mut buf = bytes::BytesMut::new();
                    resp.encode(&mut buf, v)
                        .unwrap_or_else(|e| panic!("{key:?} v{v} error {code}: {e}"));
                    cells += 1;
                }
            }
        }
        assert!(cells > 200, "{cells}");
    }
}
