//! The protocol conformance matrix (issue 8, hole 8): for every API key and version a broker
//! advertises, a minimal but meaningful request built with kafka-protocol at that version gets
//! a response frame that decodes at that version, whole, with the request's correlation id and
//! the error codes a client expects. Run on kmirror, and on Apache Kafka 4.1 to validate the
//! expectations themselves.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, Request, StrBytes};

use crate::helpers::{group_id as gid, str_bytes as s, topic_name as tn};
use crate::{records, WireClient};

/// One (api, version) cell: `Ok(note)` or `Err(what went wrong)`.
#[derive(Debug, Clone)]
pub struct Cell {
    /// API key.
    pub key: i16,
    /// Version sent.
    pub version: i16,
    /// Outcome.
    pub result: Result<(), String>,
}

/// The matrix of one broker.
#[derive(Debug, Clone, Default)]
pub struct Matrix {
    /// Everything the broker advertised in ApiVersions: key -> (min, max).
    pub advertised: BTreeMap<i16, (i16, i16)>,
    /// Every tested cell.
    pub cells: Vec<Cell>,
    /// Advertised (key, version) pairs kafka-protocol cannot build (a failure on kmirror:
    /// it advertises only what it can parse).
    pub unbuildable: Vec<(i16, i16)>,
}

impl Matrix {
    /// Failed cells as readable lines.
    pub fn failures(&self) -> Vec<String> {
        self.cells
            .iter()
            .filter_map(|c| {
                c.result
                    .as_ref()
                    .err()
                    .map(|e| format!("{} v{}: {e}", name(c.key), c.version))
            })
            .collect()
    }
}

/// The API name of a standard key.
pub fn name(key: i16) -> String {
    ApiKey::try_from(key)
        .map(|k| format!("{k:?}"))
        .unwrap_or_else(|_| format!("api{key}"))
}

/// The APIs the matrix knows how to exercise (every API kmirror serves from kafka-protocol).
pub const KEYS: &[ApiKey] = &[
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::Metadata,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::SyncGroup,
    ApiKey::DescribeGroups,
    ApiKey::ListGroups,
    ApiKey::ApiVersions,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::DeleteRecords,
    ApiKey::InitProducerId,
    ApiKey::OffsetForLeaderEpoch,
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::DescribeConfigs,
    ApiKey::AlterConfigs,
    ApiKey::CreatePartitions,
    ApiKey::DeleteGroups,
    ApiKey::OffsetDelete,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::DescribeCluster,
    ApiKey::CreateAcls,
    ApiKey::DescribeAcls,
    ApiKey::DeleteAcls,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
    ApiKey::DescribeClientQuotas,
    ApiKey::AlterClientQuotas,
    ApiKey::DescribeUserScramCredentials,
    ApiKey::AlterUserScramCredentials,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
    ApiKey::DescribeTopicPartitions,
    ApiKey::DescribeLogDirs,
    ApiKey::DescribeProducers,
    ApiKey::DescribeTransactions,
    ApiKey::ListTransactions,
    ApiKey::ElectLeaders,
    ApiKey::AlterPartitionReassignments,
    ApiKey::ListPartitionReassignments,
    ApiKey::UpdateFeatures,
    ApiKey::DescribeQuorum,
    ApiKey::AddRaftVoter,
    ApiKey::RemoveRaftVoter,
    ApiKey::UnregisterBroker,
    ApiKey::WriteTxnMarkers,
    ApiKey::AlterReplicaLogDirs,
    ApiKey::ListConfigResources,
    ApiKey::ShareGroupHeartbeat,
    ApiKey::ShareGroupDescribe,
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
    ApiKey::InitializeShareGroupState,
    ApiKey::ReadShareGroupState,
    ApiKey::WriteShareGroupState,
    ApiKey::DeleteShareGroupState,
    ApiKey::ReadShareGroupStateSummary,
    ApiKey::DescribeShareGroupOffsets,
    ApiKey::AlterShareGroupOffsets,
    ApiKey::DeleteShareGroupOffsets,
];

/// The fixed topic every read cell looks at: three one-record batches at `TS0`, `TS0+1000`,
/// `TS0+2000`, so offsets and timestamps are known exactly.
const TOPIC: &str = "conf";
const TS0: i64 = 1_700_000_000_000;
/// Where Produce cells write (keeps `TOPIC` fixed).
const PRODUCE_TOPIC: &str = "conf-produce";
/// Where the config-altering cells write.
const ALTER_TOPIC: &str = "conf-alter";

type R<T> = Result<T, String>;

fn code(what: &str, c: i16) -> R<()> {
    if c == 0 {
        Ok(())
    } else {
        Err(format!("{what}: error code {c}"))
    }
}

fn check(cond: bool, what: impl FnOnce() -> String) -> R<()> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

/// A connection that sends at an exact version and checks the whole response frame; it
/// reconnects after a failure (a broker closes the connection on what it cannot answer).
struct Conn {
    addr: String,
    stream: TcpStream,
    correlation: i32,
    node_id: i32,
    topic_id: uuid::Uuid,
    leader_epoch: i32,
    /// Highest version of each key both sides support, for setup steps.
    max: BTreeMap<i16, i16>,
}

impl Conn {
    fn connect(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_nodelay(true).ok();
        stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
        Conn {
            addr: addr.to_string(),
            stream,
            correlation: 1000,
            node_id: -1,
            topic_id: uuid::Uuid::nil(),
            leader_epoch: -1,
            max: BTreeMap::new(),
        }
    }

    fn reconnect(&mut self) {
        let fresh = Conn::connect(&self.addr);
        self.stream = fresh.stream;
    }

    /// Sends `req` at `version`; the response must decode at `version`, consume the whole
    /// frame and carry our correlation id.
    fn send<Q: Request>(&mut self, req: &Q, version: i16) -> R<Q::Response> {
        let r = self.try_send(req, version);
        if r.is_err() {
            self.reconnect();
        }
        r
    }

    fn try_send<Q: Request>(&mut self, req: &Q, version: i16) -> R<Q::Response> {
        use std::io::{Read, Write};
        self.correlation += 1;
        let correlation = self.correlation;
        let header = RequestHeader::default()
            .with_request_api_key(Q::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation)
            .with_client_id(Some(s("kmirror-conformance")));
        let mut body = BytesMut::new();
        body.put_i32(0);
        header
            .encode(&mut body, Q::header_version(version))
            .map_err(|e| format!("encode request header: {e}"))?;
        req.encode(&mut body, version)
            .map_err(|e| format!("encode request (test bug): {e}"))?;
        let len = (body.len() - 4) as i32;
        body[..4].copy_from_slice(&len.to_be_bytes());
        self.stream
            .write_all(&body)
            .map_err(|e| format!("write: {e}"))?;
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .map_err(|e| format!("no response (connection closed?): {e}"))?;
        let len = i32::from_be_bytes(len);
        if !(0..=64 << 20).contains(&len) {
            return Err(format!("response frame length {len}"));
        }
        let mut buf = vec![0u8; len as usize];
        self.stream
            .read_exact(&mut buf)
            .map_err(|e| format!("truncated response: {e}"))?;
        let mut frame = Bytes::from(buf);
        let rh = ResponseHeader::decode(
            &mut frame,
            <Q::Response as HeaderVersion>::header_version(version),
        )
        .map_err(|e| format!("response header: {e}"))?;
        if rh.correlation_id != correlation {
            return Err(format!(
                "correlation id {} != {correlation}",
                rh.correlation_id
            ));
        }
        let resp = Q::Response::decode(&mut frame, version)
            .map_err(|e| format!("response does not decode at v{version}: {e}"))?;
        if frame.has_remaining() {
            return Err(format!(
                "{} bytes left after decoding the response at v{version}",
                frame.remaining()
            ));
        }
        Ok(resp)
    }

    /// Highest common version of `Q`, for setup steps.
    fn top<Q: Request>(&self) -> i16 {
        *self.max.get(&Q::KEY).unwrap_or(&Q::VERSIONS.max)
    }
}

/// Runs the matrix against the broker at `addr`.
pub fn run(addr: &str) -> Matrix {
    let mut m = Matrix::default();
    let mut c = Conn::connect(addr);
    let av = c
        .send(
            &ApiVersionsRequest::default()
                .with_client_software_name(s("kmirror-conformance"))
                .with_client_software_version(s("1")),
            3,
        )
        .expect("ApiVersions v3");
    assert_eq!(av.error_code, 0, "ApiVersions error");
    for k in &av.api_keys {
        m.advertised
            .insert(k.api_key, (k.min_version, k.max_version));
    }
    for k in KEYS {
        let (min, max) = ranges(*k);
        if let Some((bmin, bmax)) = m.advertised.get(&(*k as i16)) {
            c.max.insert(*k as i16, (*bmax).min(max));
            for v in *bmin..=*bmax {
                if *k == ApiKey::Produce && v < min {
                    // Kafka 4 advertises Produce v0-v2 but refuses them (KAFKA-18659).
                    let result = old_produce_refused(addr, v);
                    m.cells.push(Cell {
                        key: *k as i16,
                        version: v,
                        result,
                    });
                } else if v < min || v > max {
                    m.unbuildable.push((*k as i16, v));
                }
            }
        }
    }
    setup(&mut c);
    for k in KEYS {
        let Some(&(bmin, bmax)) = m.advertised.get(&(*k as i16)) else {
            continue;
        };
        let (min, max) = ranges(*k);
        for v in bmin.max(min)..=bmax.min(max) {
            let result = cell(&mut c, *k, v);
            m.cells.push(Cell {
                key: *k as i16,
                version: v,
                result,
            });
        }
    }
    m
}

/// kafka-protocol's version range of a request.
pub fn ranges(k: ApiKey) -> (i16, i16) {
    let r = match k {
        ApiKey::Produce => ProduceRequest::VERSIONS,
        ApiKey::Fetch => FetchRequest::VERSIONS,
        ApiKey::ListOffsets => ListOffsetsRequest::VERSIONS,
        ApiKey::Metadata => MetadataRequest::VERSIONS,
        ApiKey::OffsetCommit => OffsetCommitRequest::VERSIONS,
        ApiKey::OffsetFetch => OffsetFetchRequest::VERSIONS,
        ApiKey::FindCoordinator => FindCoordinatorRequest::VERSIONS,
        ApiKey::JoinGroup => JoinGroupRequest::VERSIONS,
        ApiKey::Heartbeat => HeartbeatRequest::VERSIONS,
        ApiKey::LeaveGroup => LeaveGroupRequest::VERSIONS,
        ApiKey::SyncGroup => SyncGroupRequest::VERSIONS,
        ApiKey::DescribeGroups => DescribeGroupsRequest::VERSIONS,
        ApiKey::ListGroups => ListGroupsRequest::VERSIONS,
        ApiKey::ApiVersions => ApiVersionsRequest::VERSIONS,
        ApiKey::CreateTopics => CreateTopicsRequest::VERSIONS,
        ApiKey::DeleteTopics => DeleteTopicsRequest::VERSIONS,
        ApiKey::DeleteRecords => DeleteRecordsRequest::VERSIONS,
        ApiKey::InitProducerId => InitProducerIdRequest::VERSIONS,
        ApiKey::OffsetForLeaderEpoch => OffsetForLeaderEpochRequest::VERSIONS,
        ApiKey::AddPartitionsToTxn => AddPartitionsToTxnRequest::VERSIONS,
        ApiKey::AddOffsetsToTxn => AddOffsetsToTxnRequest::VERSIONS,
        ApiKey::EndTxn => EndTxnRequest::VERSIONS,
        ApiKey::TxnOffsetCommit => TxnOffsetCommitRequest::VERSIONS,
        ApiKey::DescribeConfigs => DescribeConfigsRequest::VERSIONS,
        ApiKey::AlterConfigs => AlterConfigsRequest::VERSIONS,
        ApiKey::CreatePartitions => CreatePartitionsRequest::VERSIONS,
        ApiKey::DeleteGroups => DeleteGroupsRequest::VERSIONS,
        ApiKey::OffsetDelete => OffsetDeleteRequest::VERSIONS,
        ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::VERSIONS,
        ApiKey::DescribeCluster => DescribeClusterRequest::VERSIONS,
        ApiKey::DescribeQuorum => DescribeQuorumRequest::VERSIONS,
        ApiKey::WriteTxnMarkers => WriteTxnMarkersRequest::VERSIONS,
        ApiKey::CreateAcls => CreateAclsRequest::VERSIONS,
        ApiKey::DescribeAcls => DescribeAclsRequest::VERSIONS,
        ApiKey::DeleteAcls => DeleteAclsRequest::VERSIONS,
        ApiKey::SaslHandshake => SaslHandshakeRequest::VERSIONS,
        ApiKey::SaslAuthenticate => SaslAuthenticateRequest::VERSIONS,
        ApiKey::DescribeClientQuotas => DescribeClientQuotasRequest::VERSIONS,
        ApiKey::AlterClientQuotas => AlterClientQuotasRequest::VERSIONS,
        ApiKey::DescribeUserScramCredentials => DescribeUserScramCredentialsRequest::VERSIONS,
        ApiKey::AlterUserScramCredentials => AlterUserScramCredentialsRequest::VERSIONS,
        ApiKey::ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest::VERSIONS,
        ApiKey::ConsumerGroupDescribe => ConsumerGroupDescribeRequest::VERSIONS,
        ApiKey::DescribeTopicPartitions => DescribeTopicPartitionsRequest::VERSIONS,
        ApiKey::DescribeLogDirs => DescribeLogDirsRequest::VERSIONS,
        ApiKey::AlterReplicaLogDirs => AlterReplicaLogDirsRequest::VERSIONS,
        ApiKey::ListConfigResources => ListConfigResourcesRequest::VERSIONS,
        ApiKey::DescribeProducers => DescribeProducersRequest::VERSIONS,
        ApiKey::DescribeTransactions => DescribeTransactionsRequest::VERSIONS,
        ApiKey::ListTransactions => ListTransactionsRequest::VERSIONS,
        ApiKey::ElectLeaders => ElectLeadersRequest::VERSIONS,
        ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsRequest::VERSIONS,
        ApiKey::ListPartitionReassignments => ListPartitionReassignmentsRequest::VERSIONS,
        ApiKey::UpdateFeatures => UpdateFeaturesRequest::VERSIONS,
        ApiKey::AddRaftVoter => AddRaftVoterRequest::VERSIONS,
        ApiKey::RemoveRaftVoter => RemoveRaftVoterRequest::VERSIONS,
        ApiKey::UnregisterBroker => UnregisterBrokerRequest::VERSIONS,
        ApiKey::ShareGroupHeartbeat => ShareGroupHeartbeatRequest::VERSIONS,
        ApiKey::ShareGroupDescribe => ShareGroupDescribeRequest::VERSIONS,
        ApiKey::ShareFetch => ShareFetchRequest::VERSIONS,
        ApiKey::ShareAcknowledge => ShareAcknowledgeRequest::VERSIONS,
        ApiKey::InitializeShareGroupState => InitializeShareGroupStateRequest::VERSIONS,
        ApiKey::ReadShareGroupState => ReadShareGroupStateRequest::VERSIONS,
        ApiKey::WriteShareGroupState => WriteShareGroupStateRequest::VERSIONS,
        ApiKey::DeleteShareGroupState => DeleteShareGroupStateRequest::VERSIONS,
        ApiKey::ReadShareGroupStateSummary => ReadShareGroupStateSummaryRequest::VERSIONS,
        ApiKey::DescribeShareGroupOffsets => DescribeShareGroupOffsetsRequest::VERSIONS,
        ApiKey::AlterShareGroupOffsets => AlterShareGroupOffsetsRequest::VERSIONS,
        ApiKey::DeleteShareGroupOffsets => DeleteShareGroupOffsetsRequest::VERSIONS,
        other => panic!("no builder for {other:?}"),
    };
    (r.min, r.max)
}

/// Creates the fixed topics and records with the plain wire client.
fn setup(c: &mut Conn) {
    let mut w = WireClient::connect(&c.addr).expect("wire client");
    for t in [TOPIC, PRODUCE_TOPIC, ALTER_TOPIC] {
        assert_eq!(
            w.create_topic(t, 1, 1, &[]).expect("create"),
            0,
            "create {t}"
        );
    }
    for i in 0..3i64 {
        let (e, base) = w
            .produce_raw(
                TOPIC,
                0,
                records::batch(&[format!("r{i}").as_bytes()], TS0 + 1000 * i),
                -1,
            )
            .expect("produce");
        assert_eq!((e, base), (0, i), "setup produce {i}");
    }
    let info = w.partition_info(TOPIC, 0).expect("partition info");
    c.topic_id = info.topic_id;
    c.leader_epoch = info.leader_epoch;
    c.node_id = info.leader_id;
    // As a client does before group and transaction calls (Kafka creates its internal
    // topics on the first FindCoordinator).
    for key_type in [0i8, 1] {
        let v = c.top::<FindCoordinatorRequest>();
        let req = FindCoordinatorRequest::default()
            .with_key_type(key_type)
            .with_coordinator_keys(vec![s("setup")]);
        retry_coordinator(|| {
            let r = c.send(&req, v)?;
            Ok((
                r.coordinators.first().map(|k| k.error_code).unwrap_or(-100),
                (),
            ))
        })
        .unwrap_or_else(|e| panic!("FindCoordinator key type {key_type}: {e}"));
    }
}

fn cell(c: &mut Conn, k: ApiKey, v: i16) -> R<()> {
    match k {
        ApiKey::Produce => produce(c, v),
        ApiKey::Fetch => fetch(c, v),
        ApiKey::ListOffsets => list_offsets(c, v),
        ApiKey::Metadata => metadata(c, v),
        ApiKey::OffsetCommit => offset_commit(c, v),
        ApiKey::OffsetFetch => offset_fetch(c, v),
        ApiKey::FindCoordinator => find_coordinator(c, v).map(|_| ()),
        ApiKey::JoinGroup => join_group(c, v),
        ApiKey::Heartbeat => heartbeat(c, v),
        ApiKey::LeaveGroup => leave_group(c, v),
        ApiKey::SyncGroup => sync_group(c, v),
        ApiKey::DescribeGroups => describe_groups(c, v),
        ApiKey::ListGroups => list_groups(c, v),
        ApiKey::ApiVersions => api_versions(c, v),
        ApiKey::CreateTopics => create_topics(c, v),
        ApiKey::DeleteTopics => delete_topics(c, v),
        ApiKey::DeleteRecords => delete_records(c, v),
        ApiKey::InitProducerId => init_producer_id(c, v),
        ApiKey::OffsetForLeaderEpoch => offset_for_leader_epoch(c, v),
        ApiKey::AddPartitionsToTxn => add_partitions_to_txn(c, v),
        ApiKey::AddOffsetsToTxn => add_offsets_to_txn(c, v),
        ApiKey::EndTxn => end_txn(c, v),
        ApiKey::TxnOffsetCommit => txn_offset_commit(c, v),
        ApiKey::DescribeConfigs => describe_configs(c, v),
        ApiKey::AlterConfigs => alter_configs(c, v),
        ApiKey::CreatePartitions => create_partitions(c, v),
        ApiKey::DeleteGroups => delete_groups(c, v),
        ApiKey::OffsetDelete => offset_delete(c, v),
        ApiKey::IncrementalAlterConfigs => incremental_alter_configs(c, v),
        ApiKey::DescribeCluster => describe_cluster(c, v),
        ApiKey::DescribeQuorum => describe_quorum(c, v),
        ApiKey::WriteTxnMarkers => write_txn_markers(c, v),
        ApiKey::CreateAcls => create_acls(c, v),
        ApiKey::DescribeAcls => describe_acls(c, v),
        ApiKey::DeleteAcls => delete_acls(c, v),
        ApiKey::SaslHandshake => sasl_handshake(c, v),
        ApiKey::SaslAuthenticate => sasl_authenticate(c, v),
        ApiKey::DescribeClientQuotas => describe_client_quotas(c, v),
        ApiKey::AlterClientQuotas => alter_client_quotas(c, v),
        ApiKey::DescribeUserScramCredentials => describe_scram(c, v),
        ApiKey::AlterUserScramCredentials => alter_scram(c, v),
        ApiKey::ConsumerGroupHeartbeat => {
            consumer_group_heartbeat(c, v, &format!("g-cgh-{v}")).map(|_| ())
        }
        ApiKey::ConsumerGroupDescribe => consumer_group_describe(c, v),
        ApiKey::DescribeTopicPartitions => describe_topic_partitions(c, v),
        ApiKey::DescribeLogDirs => describe_log_dirs(c, v),
        ApiKey::AlterReplicaLogDirs => alter_replica_log_dirs(c, v),
        ApiKey::ListConfigResources => list_config_resources(c, v),
        ApiKey::DescribeProducers => describe_producers(c, v),
        ApiKey::DescribeTransactions => describe_transactions(c, v),
        ApiKey::ListTransactions => list_transactions(c, v),
        ApiKey::ElectLeaders => elect_leaders(c, v),
        ApiKey::AlterPartitionReassignments => alter_partition_reassignments(c, v),
        ApiKey::ListPartitionReassignments => list_partition_reassignments(c, v),
        ApiKey::UpdateFeatures => update_features(c, v),
        ApiKey::AddRaftVoter => add_raft_voter(c, v),
        ApiKey::RemoveRaftVoter => remove_raft_voter(c, v),
        ApiKey::UnregisterBroker => unregister_broker(c, v),
        k @ (ApiKey::ShareGroupHeartbeat
        | ApiKey::ShareGroupDescribe
        | ApiKey::ShareFetch
        | ApiKey::ShareAcknowledge
        | ApiKey::DescribeShareGroupOffsets
        | ApiKey::AlterShareGroupOffsets
        | ApiKey::DeleteShareGroupOffsets) => share_api_disabled(c, k, v),
        k @ (ApiKey::InitializeShareGroupState
        | ApiKey::ReadShareGroupState
        | ApiKey::WriteShareGroupState
        | ApiKey::DeleteShareGroupState
        | ApiKey::ReadShareGroupStateSummary) => share_state_rpc(c, k, v),
        other => Err(format!("no builder for {other:?}")),
    }
}

// ---- data path ----

fn produce_to(c: &mut Conn, v: i16, topic: &str, value: &[u8], ts: i64) -> R<i64> {
    use kafka_protocol::messages::produce_request::*;
    let topic_id = if v >= 13 {
        topic_id_of(c, topic)?
    } else {
        uuid::Uuid::nil()
    };
    let td = TopicProduceData::default().with_partition_data(vec![PartitionProduceData::default()
        .with_index(0)
        .with_records(Some(records::batch(&[value], ts)))]);
    let td = if v >= 13 {
        td.with_topic_id(topic_id)
    } else {
        td.with_name(tn(topic))
    };
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![td]);
    let resp = c.send(&req, v)?;
    let t = resp.responses.first().ok_or("no topic in response")?;
    let p = t.partition_responses.first().ok_or("no partition")?;
    code("partition", p.error_code)?;
    check(p.index == 0, || format!("partition index {}", p.index))?;
    check(p.base_offset >= 0, || {
        format!("base offset {}", p.base_offset)
    })?;
    Ok(p.base_offset)
}

fn topic_id_of(c: &mut Conn, topic: &str) -> R<uuid::Uuid> {
    let v = c.top::<MetadataRequest>();
    let req = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
        )
        .with_name(Some(tn(topic)))]))
        .with_allow_auto_topic_creation(false);
    let md = c.send(&req, v)?;
    md.topics
        .first()
        .map(|t| t.topic_id)
        .ok_or_else(|| "no topic id".to_string())
}

fn produce(c: &mut Conn, v: i16) -> R<()> {
    let first = produce_to(c, v, PRODUCE_TOPIC, b"a", TS0)?;
    let second = produce_to(c, v, PRODUCE_TOPIC, b"b", TS0)?;
    check(second == first + 1, || {
        format!("base offsets {first} then {second}, not consecutive")
    })?;
    // A partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION (3), still encodable.
    use kafka_protocol::messages::produce_request::*;
    let td = TopicProduceData::default().with_partition_data(vec![PartitionProduceData::default()
        .with_index(9)
        .with_records(Some(records::batch(&[b"x"], TS0)))]);
    let td = if v >= 13 {
        td.with_topic_id(topic_id_of(c, PRODUCE_TOPIC)?)
    } else {
        td.with_name(tn(PRODUCE_TOPIC))
    };
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![td]);
    let resp = c.send(&req, v)?;
    let e = resp
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .map(|p| p.error_code)
        .unwrap_or(-100);
    check(e == 3, || format!("partition 9 answered {e}, want 3"))
}

fn fetch(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::fetch_request::*;
    let ft = FetchTopic::default().with_partitions(vec![FetchPartition::default()
        .with_partition(0)
        .with_current_leader_epoch(-1)
        .with_fetch_offset(0)
        .with_log_start_offset(-1)
        .with_partition_max_bytes(1 << 20)]);
    let ft = if v >= 13 {
        ft.with_topic_id(c.topic_id)
    } else {
        ft.with_topic(tn(TOPIC))
    };
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![ft]);
    let resp = c.send(&req, v)?;
    code("top level", resp.error_code)?;
    let p = resp
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition in response")?;
    code("partition", p.error_code)?;
    check(p.high_watermark == 3, || {
        format!("high watermark {} != 3", p.high_watermark)
    })?;
    let recs = p.records.clone().unwrap_or_default();
    let values = records::decode_values(&recs)?;
    let got: Vec<(i64, Vec<u8>)> = values
        .into_iter()
        .map(|(o, v)| (o, v.map(|b| b.to_vec()).unwrap_or_default()))
        .collect();
    let want: Vec<(i64, Vec<u8>)> = (0..3).map(|i| (i, format!("r{i}").into_bytes())).collect();
    check(got == want, || format!("records {got:?} != {want:?}"))?;
    // Past the end: OFFSET_OUT_OF_RANGE (1), still encodable.
    let mut req = req;
    req.topics[0].partitions[0].fetch_offset = 100;
    let resp = c.send(&req, v)?;
    let e = resp
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| p.error_code)
        .unwrap_or(-100);
    check(e == 1, || format!("fetch at 100 answered {e}, want 1"))
}

fn list_offsets(c: &mut Conn, v: i16) -> R<()> {
    // (spec, expected offset, expected timestamp or None when -1 is fine either way)
    let mut specs = vec![
        (-2i64, 0i64, None),
        (-1, 3, None),
        (TS0 + 500, 1, Some(TS0 + 1000)),
        (TS0 + 5000, -1, Some(-1)),
    ];
    if v >= 7 {
        specs.push((-3, 2, Some(TS0 + 2000)));
    }
    // read_committed (v2+): no transactions here, so the last stable offset is the end.
    let committed = if v >= 2 { vec![0i8, 1] } else { vec![0] };
    let specs: Vec<_> = committed
        .iter()
        .flat_map(|iso| specs.iter().map(move |s| (*iso, *s)))
        .collect();
    for (isolation, (ts, want_off, want_ts)) in specs {
        use kafka_protocol::messages::list_offsets_request::*;
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(isolation)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(tn(TOPIC))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(ts)])]);
        let resp = c.send(&req, v)?;
        let p = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or("no partition in response")?;
        code(&format!("timestamp {ts}"), p.error_code)?;
        check(p.offset == want_off, || {
            format!("timestamp {ts}: offset {} != {want_off}", p.offset)
        })?;
        if let Some(t) = want_ts {
            check(p.timestamp == t, || {
                format!("timestamp {ts}: timestamp {} != {t}", p.timestamp)
            })?;
        }
        if v >= 4 && want_off >= 0 {
            check(p.leader_epoch == c.leader_epoch, || {
                format!("timestamp {ts}: leader epoch {}", p.leader_epoch)
            })?;
        }
    }
    // A partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION (3), still encodable.
    use kafka_protocol::messages::list_offsets_request::*;
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(tn(TOPIC))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(9)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)])]);
    let resp = c.send(&req, v)?;
    let e = resp
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| p.error_code)
        .unwrap_or(-100);
    check(e == 3, || format!("partition 9 answered {e}, want 3"))
}

fn metadata(c: &mut Conn, v: i16) -> R<()> {
    // AllowAutoTopicCreation exists from v4 on (before, the broker's setting decides).
    let req = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
        )
        .with_name(Some(tn(TOPIC)))]))
        .with_allow_auto_topic_creation(v < 4);
    let md = c.send(&req, v)?;
    check(md.brokers.len() == 1, || {
        format!("{} brokers", md.brokers.len())
    })?;
    check(md.topics.len() == 1, || {
        format!("{} topics", md.topics.len())
    })?;
    let t = &md.topics[0];
    code("topic", t.error_code)?;
    check(t.name.as_ref().map(|n| n.0.as_str()) == Some(TOPIC), || {
        format!("name {:?}", t.name)
    })?;
    check(t.partitions.len() == 1, || {
        format!("{} partitions", t.partitions.len())
    })?;
    let p = &t.partitions[0];
    code("partition", p.error_code)?;
    check(p.leader_id.0 == md.brokers[0].node_id.0, || {
        format!("leader {}", p.leader_id.0)
    })?;
    if v >= 10 {
        check(t.topic_id == c.topic_id && !t.topic_id.is_nil(), || {
            format!("topic id {}", t.topic_id)
        })?;
    }
    if v >= 2 {
        check(md.cluster_id.is_some(), || "no cluster id".into())?;
    }
    if v >= 4 {
        // An unknown topic, auto-creation off: UNKNOWN_TOPIC_OR_PARTITION (3).
        let req = MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
            )
            .with_name(Some(tn("conf-missing")))]))
            .with_allow_auto_topic_creation(false);
        let md = c.send(&req, v)?;
        let e = md.topics.first().map(|t| t.error_code).unwrap_or(-100);
        check(e == 3, || format!("unknown topic answered {e}, want 3"))?;
    }
    Ok(())
}

// ---- groups ----

fn commit(c: &mut Conn, v: i16, group: &str, offset: i64) -> R<()> {
    use kafka_protocol::messages::offset_commit_request::*;
    let req = OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(s(""))
        .with_retention_time_ms(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(tn(TOPIC))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(s("m")))])]);
    let resp = retry_coordinator(|| {
        c.send(&req, v).map(|r| {
            let e = r
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .map(|p| p.error_code)
                .unwrap_or(-100);
            (e, r)
        })
    })?;
    let p = resp
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition in response")?;
    code("partition", p.error_code)
}

/// Retries a group/transaction call while the coordinator is loading or not yet there
/// (codes 14, 15), as a client does right after the offsets topic is created.
fn retry_coordinator<T>(mut f: impl FnMut() -> R<(i16, T)>) -> R<T> {
    for _ in 0..300 {
        let (e, r) = f()?;
        if e == 14 || e == 15 || e == 16 {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        return Ok(r);
    }
    Err("coordinator never became available".into())
}

fn offset_commit(c: &mut Conn, v: i16) -> R<()> {
    commit(c, v, &format!("g-oc-{v}"), 2)?;
    let got = committed(c, c.top::<OffsetFetchRequest>(), &format!("g-oc-{v}"))?;
    check(got == 2, || format!("committed {got} != 2"))
}

fn committed(c: &mut Conn, v: i16, group: &str) -> R<i64> {
    use kafka_protocol::messages::offset_fetch_request::*;
    let req = if v >= 8 {
        OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(gid(group))
            .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                .with_name(tn(TOPIC))
                .with_partition_indexes(vec![0])]))])
    } else {
        OffsetFetchRequest::default()
            .with_group_id(gid(group))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(tn(TOPIC))
                .with_partition_indexes(vec![0])]))
    };
    let resp = c.send(&req, v)?;
    if v >= 8 {
        let g = resp.groups.first().ok_or("no group in response")?;
        code("group", g.error_code)?;
        let p = g
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or("no partition in response")?;
        code("partition", p.error_code)?;
        Ok(p.committed_offset)
    } else {
        if v >= 2 {
            code("top level", resp.error_code)?;
        }
        let p = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or("no partition in response")?;
        code("partition", p.error_code)?;
        Ok(p.committed_offset)
    }
}

fn offset_fetch(c: &mut Conn, v: i16) -> R<()> {
    let group = format!("g-of-{v}");
    commit(c, c.top::<OffsetCommitRequest>(), &group, 1)?;
    let got = committed(c, v, &group)?;
    check(got == 1, || format!("committed {got} != 1"))
}

fn find_coordinator(c: &mut Conn, v: i16) -> R<i32> {
    let req = if v >= 4 {
        FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![s("g-fc")])
    } else {
        FindCoordinatorRequest::default().with_key(s("g-fc"))
    };
    let (node, port) = retry_coordinator(|| {
        let r = c.send(&req, v)?;
        Ok(if v >= 4 {
            match r.coordinators.first() {
                Some(k) => (k.error_code, (k.node_id.0, k.port)),
                None => (-100, (-1, -1)),
            }
        } else {
            (r.error_code, (r.node_id.0, r.port))
        })
    })?;
    check(node == c.node_id && port > 0, || {
        format!("coordinator {node}:{port}, want node {}", c.node_id)
    })?;
    Ok(node)
}

/// ConsumerProtocolSubscription v0 for `TOPIC`: a real consumer's metadata.
fn subscription() -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(1);
    b.put_i16(TOPIC.len() as i16);
    b.put_slice(TOPIC.as_bytes());
    b.put_i32(-1);
    b.freeze()
}

/// Joins `group` at `v` as its only member; returns (member id, generation).
fn join(c: &mut Conn, v: i16, group: &str) -> R<(StrBytes, i32)> {
    use kafka_protocol::messages::join_group_request::*;
    let mut member = s("");
    for _ in 0..3 {
        let req = JoinGroupRequest::default()
            .with_group_id(gid(group))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(if v >= 1 { 10_000 } else { -1 })
            .with_member_id(member.clone())
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(subscription())]);
        let r = retry_coordinator(|| c.send(&req, v).map(|r| (r.error_code, r)))?;
        if r.error_code == 79 && v >= 4 && member.is_empty() {
            // MEMBER_ID_REQUIRED: rejoin with the id the coordinator gave (KIP-394).
            member = r.member_id.clone();
            continue;
        }
        code("JoinGroup", r.error_code)?;
        check(r.leader == r.member_id && !r.member_id.is_empty(), || {
            format!("leader {:?}, member {:?}", r.leader, r.member_id)
        })?;
        check(r.members.len() == 1, || {
            format!("{} members", r.members.len())
        })?;
        if v >= 7 {
            check(r.protocol_name.as_deref() == Some("range"), || {
                format!("protocol {:?}", r.protocol_name)
            })?;
        }
        return Ok((r.member_id, r.generation_id));
    }
    Err("JoinGroup kept asking for a member id".into())
}

fn sync(c: &mut Conn, v: i16, group: &str, member: &StrBytes, generation: i32) -> R<()> {
    use kafka_protocol::messages::sync_group_request::*;
    let assignment = Bytes::from_static(
        b"\x00\x00\x00\x00\x00\x01\x00\x04conf\x00\x00\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff",
    );
    let mut req = SyncGroupRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(member.clone())
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(member.clone())
            .with_assignment(assignment.clone())]);
    if v >= 5 {
        req = req
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")));
    }
    let r = retry_coordinator(|| c.send(&req, v).map(|r| (r.error_code, r)))?;
    code("SyncGroup", r.error_code)?;
    check(r.assignment == assignment, || {
        format!("assignment {:?}", r.assignment)
    })
}

fn join_group(c: &mut Conn, v: i16) -> R<()> {
    let group = format!("g-jg-{v}");
    join(c, v, &group).map(|_| ())
}

fn sync_group(c: &mut Conn, v: i16) -> R<()> {
    let group = format!("g-sg-{v}");
    let (m, g) = join(c, c.top::<JoinGroupRequest>(), &group)?;
    sync(c, v, &group, &m, g)
}

fn joined(c: &mut Conn, group: &str) -> R<(StrBytes, i32)> {
    let (m, g) = join(c, c.top::<JoinGroupRequest>(), group)?;
    sync(c, c.top::<SyncGroupRequest>(), group, &m, g)?;
    Ok((m, g))
}

fn heartbeat(c: &mut Conn, v: i16) -> R<()> {
    let group = format!("g-hb-{v}");
    let (m, g) = joined(c, &group)?;
    let req = HeartbeatRequest::default()
        .with_group_id(gid(&group))
        .with_generation_id(g)
        .with_member_id(m);
    code("Heartbeat", c.send(&req, v)?.error_code)
}

fn leave_group(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::leave_group_request::*;
    let group = format!("g-lg-{v}");
    let (m, _) = joined(c, &group)?;
    let req = if v >= 3 {
        LeaveGroupRequest::default()
            .with_group_id(gid(&group))
            .with_members(vec![MemberIdentity::default().with_member_id(m)])
    } else {
        LeaveGroupRequest::default()
            .with_group_id(gid(&group))
            .with_member_id(m)
    };
    let r = c.send(&req, v)?;
    code("LeaveGroup", r.error_code)?;
    if v >= 3 {
        check(r.members.len() == 1, || {
            format!("{} members", r.members.len())
        })?;
        code("member", r.members[0].error_code)?;
    }
    // The group is empty now.
    let state = group_state(c, c.top::<DescribeGroupsRequest>(), &group)?;
    check(state.0 == "Empty", || {
        format!("state {} after leaving", state.0)
    })
}

/// (state, member count) of `group`.
fn group_state(c: &mut Conn, v: i16, group: &str) -> R<(String, usize)> {
    let req = DescribeGroupsRequest::default().with_groups(vec![gid(group)]);
    let r = c.send(&req, v)?;
    let g = r.groups.first().ok_or("no group in response")?;
    code("group", g.error_code)?;
    Ok((g.group_state.to_string(), g.members.len()))
}

fn describe_groups(c: &mut Conn, v: i16) -> R<()> {
    let group = format!("g-dg-{v}");
    joined(c, &group)?;
    let (state, members) = group_state(c, v, &group)?;
    check(state == "Stable" && members == 1, || {
        format!("state {state}, {members} members")
    })
}

fn list_groups(c: &mut Conn, v: i16) -> R<()> {
    let group = format!("g-lsg-{v}");
    joined(c, &group)?;
    let r = c.send(&ListGroupsRequest::default(), v)?;
    code("ListGroups", r.error_code)?;
    check(
        r.groups.iter().any(|g| g.group_id.0.as_str() == group),
        || format!("{group} not listed"),
    )
}

/// A new member joins a new consumer-protocol group (KIP-848): the member's epoch and id.
fn consumer_group_heartbeat(c: &mut Conn, v: i16, group: &str) -> R<(String, i32)> {
    // v1 (KIP-1082): the client generates its member id; v0: the broker does.
    let member = if v >= 1 {
        uuid::Uuid::new_v4().to_string()
    } else {
        String::new()
    };
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_member_id(s(&member))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![tn(TOPIC)]))
        .with_topic_partitions(Some(Vec::new()));
    let r = c.send(&req, v)?;
    code("ConsumerGroupHeartbeat", r.error_code)?;
    let id = r.member_id.map(|m| m.to_string()).unwrap_or_default();
    check(r.member_epoch >= 1 && !id.is_empty(), || {
        format!("epoch {} member {id:?}", r.member_epoch)
    })?;
    check(r.heartbeat_interval_ms > 0, || {
        "no heartbeat interval".into()
    })?;
    Ok((id, r.member_epoch))
}

fn consumer_group_describe(c: &mut Conn, v: i16) -> R<()> {
    let hv = c.top::<ConsumerGroupHeartbeatRequest>();
    let group = format!("g-cgd-{v}");
    let (member, _) = consumer_group_heartbeat(c, hv, &group)?;
    let req = ConsumerGroupDescribeRequest::default().with_group_ids(vec![gid(&group)]);
    let r = c.send(&req, v)?;
    let g = r.groups.first().ok_or("no group described")?;
    code("ConsumerGroupDescribe", g.error_code)?;
    check(
        g.members.len() == 1 && g.members[0].member_id.as_str() == member,
        || {
            format!(
                "members {:?}",
                g.members
                    .iter()
                    .map(|m| m.member_id.to_string())
                    .collect::<Vec<_>>()
            )
        },
    )
}

/// A share-group API on a broker where `share.version` is not finalized (the matrix never
/// enables it): UNSUPPORTED_VERSION (35), as Kafka 4.1 answers until it is.
fn share_api_disabled(c: &mut Conn, k: ApiKey, v: i16) -> R<()> {
    const UNSUPPORTED_VERSION: i16 = 35;
    let member = || Some(s(&uuid::Uuid::new_v4().to_string()));
    let group = format!("g-share-{v}");
    let got = match k {
        ApiKey::ShareGroupHeartbeat => {
            let req = ShareGroupHeartbeatRequest::default()
                .with_group_id(gid(&group))
                .with_member_id(s(&uuid::Uuid::new_v4().to_string()))
                .with_member_epoch(0)
                .with_subscribed_topic_names(Some(vec![tn(TOPIC)]));
            c.send(&req, v)?.error_code
        }
        ApiKey::ShareGroupDescribe => {
            let req = ShareGroupDescribeRequest::default().with_group_ids(vec![gid(&group)]);
            let r = c.send(&req, v)?;
            r.groups.first().ok_or("no group described")?.error_code
        }
        ApiKey::ShareFetch => {
            use share_fetch_request::{FetchPartition, FetchTopic};
            let req = ShareFetchRequest::default()
                .with_group_id(Some(gid(&group)))
                .with_member_id(member())
                .with_max_wait_ms(10)
                .with_max_records(10)
                .with_batch_size(10)
                .with_topics(vec![FetchTopic::default()
                    .with_topic_id(c.topic_id)
                    .with_partitions(vec![FetchPartition::default()])]);
            c.send(&req, v)?.error_code
        }
        ApiKey::ShareAcknowledge => {
            let req = ShareAcknowledgeRequest::default()
                .with_group_id(Some(gid(&group)))
                .with_member_id(member())
                .with_share_session_epoch(1);
            c.send(&req, v)?.error_code
        }
        ApiKey::DescribeShareGroupOffsets => {
            use describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
            let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                DescribeShareGroupOffsetsRequestGroup::default().with_group_id(gid(&group)),
            ]);
            let r = c.send(&req, v)?;
            r.groups.first().ok_or("no group described")?.error_code
        }
        ApiKey::AlterShareGroupOffsets => {
            let req = AlterShareGroupOffsetsRequest::default().with_group_id(gid(&group));
            c.send(&req, v)?.error_code
        }
        ApiKey::DeleteShareGroupOffsets => {
            let req = DeleteShareGroupOffsetsRequest::default().with_group_id(gid(&group));
            c.send(&req, v)?.error_code
        }
        other => return Err(format!("{other:?} is not a share-group API")),
    };
    check(got == UNSUPPORTED_VERSION, || {
        format!("error {got}, expected UNSUPPORTED_VERSION (35) while share.version is 0")
    })
}

/// A share coordinator state RPC (sent by brokers) for a key no share coordinator has (no
/// share group ever ran): each partition answers a coordinator error, and the frame decodes.
fn share_state_rpc(c: &mut Conn, k: ApiKey, v: i16) -> R<()> {
    // NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE: `__share_group_state` has no leader for it.
    const COORDINATOR_ERRORS: [i16; 2] = [16, 15];
    let group = s(&format!("g-state-{v}"));
    let t = c.topic_id;
    let codes: Vec<i16> = match k {
        ApiKey::InitializeShareGroupState => {
            use initialize_share_group_state_request::*;
            let req = InitializeShareGroupStateRequest::default()
                .with_group_id(group)
                .with_topics(vec![InitializeStateData::default()
                    .with_topic_id(t)
                    .with_partitions(vec![
                        PartitionData::default().with_start_offset(-1)
                    ])]);
            let r = c.send(&req, v)?;
            r.results
                .iter()
                .flat_map(|x| x.partitions.iter().map(|p| p.error_code))
                .collect()
        }
        ApiKey::ReadShareGroupState => {
            use read_share_group_state_request::*;
            let req = ReadShareGroupStateRequest::default()
                .with_group_id(group)
                .with_topics(vec![ReadStateData::default()
                    .with_topic_id(t)
                    .with_partitions(vec![PartitionData::default()])]);
            let r = c.send(&req, v)?;
            r.results
                .iter()
                .flat_map(|x| x.partitions.iter().map(|p| p.error_code))
                .collect()
        }
        ApiKey::WriteShareGroupState => {
            use write_share_group_state_request::*;
            let req = WriteShareGroupStateRequest::default()
                .with_group_id(group)
                .with_topics(vec![WriteStateData::default()
                    .with_topic_id(t)
                    .with_partitions(vec![
                        PartitionData::default().with_start_offset(-1)
                    ])]);
            let r = c.send(&req, v)?;
            r.results
                .iter()
                .flat_map(|x| x.partitions.iter().map(|p| p.error_code))
                .collect()
        }
        ApiKey::DeleteShareGroupState => {
            use delete_share_group_state_request::*;
            let req = DeleteShareGroupStateRequest::default()
                .with_group_id(group)
                .with_topics(vec![DeleteStateData::default()
                    .with_topic_id(t)
                    .with_partitions(vec![PartitionData::default()])]);
            let r = c.send(&req, v)?;
            r.results
                .iter()
                .flat_map(|x| x.partitions.iter().map(|p| p.error_code))
                .collect()
        }
        ApiKey::ReadShareGroupStateSummary => {
            use read_share_group_state_summary_request::*;
            let req = ReadShareGroupStateSummaryRequest::default()
                .with_group_id(group)
                .with_topics(vec![ReadStateSummaryData::default()
                    .with_topic_id(t)
                    .with_partitions(vec![PartitionData::default()])]);
            let r = c.send(&req, v)?;
            r.results
                .iter()
                .flat_map(|x| x.partitions.iter().map(|p| p.error_code))
                .collect()
        }
        other => return Err(format!("{other:?} is not a share state RPC")),
    };
    check(
        codes.len() == 1 && COORDINATOR_ERRORS.contains(&codes[0]),
        || format!("partition errors {codes:?}, expected one of {COORDINATOR_ERRORS:?}"),
    )
}

fn api_versions(c: &mut Conn, v: i16) -> R<()> {
    let req = ApiVersionsRequest::default()
        .with_client_software_name(s("kmirror-conformance"))
        .with_client_software_version(s("1"));
    let r = c.send(&req, v)?;
    code("ApiVersions", r.error_code)?;
    check(
        r.api_keys
            .iter()
            .any(|k| k.api_key == 18 && k.min_version == 0 && k.max_version >= 3),
        || "ApiVersions missing from its own answer".into(),
    )
}

// ---- admin ----

fn create(c: &mut Conn, name: &str, partitions: i32) -> R<()> {
    use kafka_protocol::messages::create_topics_request::*;
    let v = c.top::<CreateTopicsRequest>();
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(tn(name))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(30_000);
    let r = c.send(&req, v)?;
    code(
        "CreateTopics",
        r.topics.first().map(|t| t.error_code).unwrap_or(-100),
    )?;
    wait_partitions(c, name, partitions)
}

fn wait_partitions(c: &mut Conn, name: &str, partitions: i32) -> R<()> {
    let v = c.top::<MetadataRequest>();
    for _ in 0..300 {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
            )
            .with_name(Some(tn(name)))]))
            .with_allow_auto_topic_creation(false);
        let md = c.send(&req, v)?;
        if md
            .topics
            .first()
            .is_some_and(|t| t.error_code == 0 && t.partitions.len() == partitions as usize)
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "{name} never had {partitions} partitions in Metadata"
    ))
}

fn create_topics(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::create_topics_request::*;
    let name = format!("ct-{v}");
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(tn(&name))
            .with_num_partitions(2)
            .with_replication_factor(1)])
        .with_timeout_ms(30_000);
    let r = c.send(&req, v)?;
    let t = r.topics.first().ok_or("no topic in response")?;
    code("topic", t.error_code)?;
    if v >= 5 {
        check(t.num_partitions == 2, || {
            format!("{} partitions", t.num_partitions)
        })?;
    }
    wait_partitions(c, &name, 2)?;
    // A second create of the same name: TOPIC_ALREADY_EXISTS (36).
    let r = c.send(&req, v)?;
    let e = r.topics.first().map(|t| t.error_code).unwrap_or(-100);
    check(e == 36, || format!("re-create answered {e}, want 36"))
}

fn delete_topics(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::delete_topics_request::*;
    let name = format!("dt-{v}");
    create(c, &name, 1)?;
    let req = if v >= 6 {
        DeleteTopicsRequest::default()
            .with_topics(vec![DeleteTopicState::default().with_name(Some(tn(&name)))])
    } else {
        DeleteTopicsRequest::default().with_topic_names(vec![tn(&name)])
    }
    .with_timeout_ms(30_000);
    let r = c.send(&req, v)?;
    let t = r.responses.first().ok_or("no topic in response")?;
    code("topic", t.error_code)?;
    // Deleting again: UNKNOWN_TOPIC_OR_PARTITION (3).
    let r = c.send(&req, v)?;
    let e = r.responses.first().map(|t| t.error_code).unwrap_or(-100);
    check(e == 3, || format!("second delete answered {e}, want 3"))
}

fn delete_records(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::delete_records_request::*;
    let name = format!("dr-{v}");
    create(c, &name, 1)?;
    let pv = c.top::<ProduceRequest>();
    for i in 0..3 {
        produce_to(c, pv, &name, format!("d{i}").as_bytes(), TS0)?;
    }
    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(tn(&name))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(2)])]);
    let r = c.send(&req, v)?;
    let p = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition in response")?;
    code("partition", p.error_code)?;
    check(p.low_watermark == 2, || {
        format!("low watermark {}", p.low_watermark)
    })
}

fn init_producer_id(c: &mut Conn, v: i16) -> R<()> {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r = retry_coordinator(|| c.send(&req, v).map(|r| (r.error_code, r)))?;
    code("InitProducerId", r.error_code)?;
    check(r.producer_id.0 >= 0 && r.producer_epoch >= 0, || {
        format!("producer {} epoch {}", r.producer_id.0, r.producer_epoch)
    })
}

fn offset_for_leader_epoch(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::offset_for_leader_epoch_request::*;
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(tn(TOPIC))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(c.leader_epoch)
                .with_leader_epoch(c.leader_epoch)])]);
    let r = c.send(&req, v)?;
    let p = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition in response")?;
    code("partition", p.error_code)?;
    check(
        p.leader_epoch == c.leader_epoch && p.end_offset == 3,
        || format!("epoch {} end offset {}", p.leader_epoch, p.end_offset),
    )
}

// ---- transactions ----

/// A transactional producer id for `txn`: (producer id, epoch).
fn init_txn(c: &mut Conn, txn: &str) -> R<(i64, i16)> {
    let v = c.top::<InitProducerIdRequest>();
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s(txn))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r = retry_coordinator(|| c.send(&req, v).map(|r| (r.error_code, r)))?;
    code("InitProducerId", r.error_code)?;
    Ok((r.producer_id.0, r.producer_epoch))
}

fn add_partition(c: &mut Conn, v: i16, txn: &str, pid: i64, epoch: i16) -> R<()> {
    use kafka_protocol::messages::add_partitions_to_txn_request::*;
    let topics = vec![AddPartitionsToTxnTopic::default()
        .with_name(tn(TOPIC))
        .with_partitions(vec![0])];
    let req = if v >= 4 {
        AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(s(txn)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_topics(topics),
        ])
    } else {
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(txn)))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(topics)
    };
    let r = retry_coordinator(|| {
        c.send(&req, v).map(|r| {
            let e = if v >= 4 {
                r.results_by_transaction
                    .first()
                    .and_then(|t| t.topic_results.first())
                    .and_then(|t| t.results_by_partition.first())
                    .map(|p| p.partition_error_code)
            } else {
                r.results_by_topic_v3_and_below
                    .first()
                    .and_then(|t| t.results_by_partition.first())
                    .map(|p| p.partition_error_code)
            };
            (e.unwrap_or(-100), r)
        })
    })?;
    if v >= 4 {
        code("top level", r.error_code)?;
        let p = r
            .results_by_transaction
            .first()
            .and_then(|t| t.topic_results.first())
            .and_then(|t| t.results_by_partition.first())
            .ok_or("no partition in response")?;
        code("partition", p.partition_error_code)
    } else {
        let p = r
            .results_by_topic_v3_and_below
            .first()
            .and_then(|t| t.results_by_partition.first())
            .ok_or("no partition in response")?;
        code("partition", p.partition_error_code)
    }
}

fn end(c: &mut Conn, v: i16, txn: &str, pid: i64, epoch: i16, commit: bool) -> R<()> {
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s(txn)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r = retry_coordinator(|| c.send(&req, v).map(|r| (r.error_code, r)))?;
    code("EndTxn", r.error_code)
}

fn add_partitions_to_txn(c: &mut Conn, v: i16) -> R<()> {
    let txn = format!("tx-apt-{v}");
    let (pid, epoch) = init_txn(c, &txn)?;
    add_partition(c, v, &txn, pid, epoch)?;
    end(c, c.top::<EndTxnRequest>(), &txn, pid, epoch, false)
}

fn add_offsets(c: &mut Conn, v: i16, txn: &str, pid: i64, epoch: i16, group: &str) -> R<()> {
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(s(txn)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_group_id(gid(group));
    let r = retry_coordinator(|| c.send(&req, v).map(|r| (r.error_code, r)))?;
    code("AddOffsetsToTxn", r.error_code)
}

fn add_offsets_to_txn(c: &mut Conn, v: i16) -> R<()> {
    let txn = format!("tx-aot-{v}");
    let (pid, epoch) = init_txn(c, &txn)?;
    add_offsets(c, v, &txn, pid, epoch, &format!("g-aot-{v}"))?;
    end(c, c.top::<EndTxnRequest>(), &txn, pid, epoch, false)
}

fn end_txn(c: &mut Conn, v: i16) -> R<()> {
    let txn = format!("tx-end-{v}");
    let (pid, epoch) = init_txn(c, &txn)?;
    add_partition(
        c,
        c.top::<AddPartitionsToTxnRequest>().min(3),
        &txn,
        pid,
        epoch,
    )?;
    end(c, v, &txn, pid, epoch, true)
}

fn txn_offset_commit(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::txn_offset_commit_request::*;
    let txn = format!("tx-toc-{v}");
    let group = format!("g-toc-{v}");
    let (pid, epoch) = init_txn(c, &txn)?;
    add_offsets(
        c,
        c.top::<AddOffsetsToTxnRequest>(),
        &txn,
        pid,
        epoch,
        &group,
    )?;
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s(&txn)))
        .with_group_id(gid(&group))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_member_id(s(""))
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(tn(TOPIC))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(1)
                .with_committed_leader_epoch(-1)])]);
    let r = retry_coordinator(|| {
        c.send(&req, v).map(|r| {
            let e = r
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .map(|p| p.error_code)
                .unwrap_or(-100);
            (e, r)
        })
    })?;
    let p = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition in response")?;
    code("partition", p.error_code)?;
    end(c, c.top::<EndTxnRequest>(), &txn, pid, epoch, true)?;
    // Kafka materializes the offset when the commit marker reaches the offsets topic, which
    // may be just after EndTxn answers.
    let mut got = -1;
    for _ in 0..200 {
        got = committed(c, c.top::<OffsetFetchRequest>(), &group)?;
        if got == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    check(got == 1, || format!("committed after commit {got} != 1"))
}

// ---- configs ----

fn describe_configs(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::describe_configs_request::*;
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(TOPIC))
            .with_configuration_keys(Some(vec![s("cleanup.policy"), s("retention.ms")]))]);
    let r = c.send(&req, v)?;
    let res = r.results.first().ok_or("no resource in response")?;
    code("resource", res.error_code)?;
    let cp = res
        .configs
        .iter()
        .find(|c| c.name.as_str() == "cleanup.policy")
        .ok_or("no cleanup.policy")?;
    check(cp.value.as_deref() == Some("delete"), || {
        format!("cleanup.policy {:?}", cp.value)
    })?;
    check(
        res.configs
            .iter()
            .any(|c| c.name.as_str() == "retention.ms"),
        || "no retention.ms".into(),
    )
}

fn config_value(c: &mut Conn, key: &str) -> R<Option<String>> {
    use kafka_protocol::messages::describe_configs_request::*;
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(ALTER_TOPIC))
            .with_configuration_keys(Some(vec![s(key)]))]);
    let r = c.send(&req, c.top::<DescribeConfigsRequest>())?;
    let res = r.results.first().ok_or("no resource in response")?;
    code("resource", res.error_code)?;
    Ok(res
        .configs
        .iter()
        .find(|c| c.name.as_str() == key)
        .and_then(|c| c.value.as_ref().map(|v| v.to_string())))
}

fn alter_configs(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::alter_configs_request::*;
    let value = format!("{}", 3_600_000 + i64::from(v));
    let req = AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(s(ALTER_TOPIC))
        .with_configs(vec![AlterableConfig::default()
            .with_name(s("retention.ms"))
            .with_value(Some(s(&value)))])]);
    let r = c.send(&req, v)?;
    let res = r.responses.first().ok_or("no resource in response")?;
    code("resource", res.error_code)?;
    wait_config(c, "retention.ms", &value)
}

fn wait_config(c: &mut Conn, key: &str, want: &str) -> R<()> {
    for _ in 0..200 {
        if config_value(c, key)?.as_deref() == Some(want) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{key} never became {want}"))
}

fn incremental_alter_configs(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::incremental_alter_configs_request::*;
    let value = format!("{}", 7_200_000 + i64::from(v));
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(ALTER_TOPIC))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("retention.ms"))
                .with_config_operation(0)
                .with_value(Some(s(&value)))]),
    ]);
    let r = c.send(&req, v)?;
    let res = r.responses.first().ok_or("no resource in response")?;
    code("resource", res.error_code)?;
    wait_config(c, "retention.ms", &value)
}

fn create_partitions(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::create_partitions_request::*;
    let name = format!("cp-{v}");
    create(c, &name, 1)?;
    let req = CreatePartitionsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(tn(&name))
            .with_count(3)
            .with_assignments(None)]);
    let r = c.send(&req, v)?;
    let t = r.results.first().ok_or("no topic in response")?;
    code("topic", t.error_code)?;
    wait_partitions(c, &name, 3)
}

fn delete_groups(c: &mut Conn, v: i16) -> R<()> {
    let group = format!("g-dlg-{v}");
    commit(c, c.top::<OffsetCommitRequest>(), &group, 1)?;
    let req = DeleteGroupsRequest::default().with_groups_names(vec![gid(&group)]);
    let r = c.send(&req, v)?;
    let g = r.results.first().ok_or("no group in response")?;
    code("group", g.error_code)?;
    // Deleting again: GROUP_ID_NOT_FOUND (69).
    let r = c.send(&req, v)?;
    let e = r.results.first().map(|g| g.error_code).unwrap_or(-100);
    check(e == 69, || format!("second delete answered {e}, want 69"))
}

fn offset_delete(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::offset_delete_request::*;
    let group = format!("g-od-{v}");
    commit(c, c.top::<OffsetCommitRequest>(), &group, 1)?;
    let req = OffsetDeleteRequest::default()
        .with_group_id(gid(&group))
        .with_topics(vec![OffsetDeleteRequestTopic::default()
            .with_name(tn(TOPIC))
            .with_partitions(vec![
                OffsetDeleteRequestPartition::default().with_partition_index(0)
            ])]);
    let r = c.send(&req, v)?;
    code("OffsetDelete", r.error_code)?;
    let p = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition in response")?;
    code("partition", p.error_code)?;
    let got = committed(c, c.top::<OffsetFetchRequest>(), &group)?;
    check(got == -1, || format!("committed {got} after OffsetDelete"))
}

fn describe_cluster(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(&DescribeClusterRequest::default(), v)?;
    code("DescribeCluster", r.error_code)?;
    check(
        r.brokers.len() == 1 && r.brokers[0].broker_id.0 == c.node_id,
        || format!("brokers {:?}", r.brokers),
    )?;
    check(!r.cluster_id.is_empty(), || "empty cluster id".into())
}

/// A marker for a partition this broker does not host: answered per partition with
/// UNKNOWN_TOPIC_OR_PARTITION, and no log is touched (the inter-broker API a transaction
/// coordinator sends to partition leaders).
fn write_txn_markers(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::write_txn_markers_request::*;
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(7))
        .with_producer_epoch(0)
        .with_transaction_result(false)
        .with_coordinator_epoch(0)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(tn("conf-no-such-topic"))
            .with_partition_indexes(vec![0])])]);
    let r = c.send(&req, v)?;
    let p = r
        .markers
        .first()
        .and_then(|m| m.topics.first())
        .and_then(|t| t.partitions.first())
        .ok_or("no partition result")?;
    check(p.error_code == 3, || {
        format!("WriteTxnMarkers partition: error code {}", p.error_code)
    })
}

/// The metadata quorum of a one-node cluster: this node, the only voter, leads.
fn describe_quorum(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::describe_quorum_request::*;
    let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(tn("__cluster_metadata"))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    let r = c.send(&req, v)?;
    code("DescribeQuorum", r.error_code)?;
    let p = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition")?;
    code("DescribeQuorum partition", p.error_code)?;
    check(p.leader_id.0 == c.node_id, || {
        format!("leader {:?}", p.leader_id)
    })?;
    check(
        p.current_voters.len() == 1 && p.current_voters[0].replica_id.0 == c.node_id,
        || format!("voters {:?}", p.current_voters),
    )
}

// ---- ACLs ----

fn acl(topic: &str) -> create_acls_request::AclCreation {
    create_acls_request::AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(s(topic))
        .with_resource_pattern_type(3)
        .with_principal(s("User:alice"))
        .with_host(s("*"))
        .with_operation(3)
        .with_permission_type(3)
}

fn create_acl(c: &mut Conn, v: i16, topic: &str) -> R<()> {
    let r = c.send(
        &CreateAclsRequest::default().with_creations(vec![acl(topic)]),
        v,
    )?;
    let res = r.results.first().ok_or("no result in response")?;
    code("CreateAcls", res.error_code)
}

fn describe_filter(topic: &str) -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(2)
        .with_resource_name_filter(Some(s(topic)))
        .with_pattern_type_filter(3)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1)
}

fn acl_count(c: &mut Conn, v: i16, topic: &str) -> R<usize> {
    let r = c.send(&describe_filter(topic), v)?;
    code("DescribeAcls", r.error_code)?;
    Ok(r.resources.iter().map(|r| r.acls.len()).sum())
}

fn create_acls(c: &mut Conn, v: i16) -> R<()> {
    let topic = format!("acl-c-{v}");
    create_acl(c, v, &topic)?;
    let n = wait_acls(c, &topic, 1)?;
    check(n == 1, || format!("{n} ACLs after create"))
}

fn wait_acls(c: &mut Conn, topic: &str, want: usize) -> R<usize> {
    let v = c.top::<DescribeAclsRequest>();
    let mut n = 0;
    for _ in 0..200 {
        n = acl_count(c, v, topic)?;
        if n == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(n)
}

fn describe_acls(c: &mut Conn, v: i16) -> R<()> {
    let topic = format!("acl-d-{v}");
    create_acl(c, c.top::<CreateAclsRequest>(), &topic)?;
    wait_acls(c, &topic, 1)?;
    let n = acl_count(c, v, &topic)?;
    check(n == 1, || format!("{n} ACLs described"))
}

fn delete_acls(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::delete_acls_request::*;
    let topic = format!("acl-x-{v}");
    create_acl(c, c.top::<CreateAclsRequest>(), &topic)?;
    wait_acls(c, &topic, 1)?;
    let req = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
        .with_resource_type_filter(2)
        .with_resource_name_filter(Some(s(&topic)))
        .with_pattern_type_filter(3)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1)]);
    let r = c.send(&req, v)?;
    let f = r.filter_results.first().ok_or("no filter result")?;
    code("filter", f.error_code)?;
    check(f.matching_acls.len() == 1, || {
        format!("{} matching ACLs", f.matching_acls.len())
    })?;
    let n = wait_acls(c, &topic, 0)?;
    check(n == 0, || format!("{n} ACLs left after delete"))
}

/// Only the ApiVersions answer of the broker at `addr`: key -> (min, max).
pub fn run_api_versions(addr: &str) -> BTreeMap<i16, (i16, i16)> {
    let mut c = Conn::connect(addr);
    let av = c
        .send(
            &ApiVersionsRequest::default()
                .with_client_software_name(s("kmirror-conformance"))
                .with_client_software_version(s("1")),
            3,
        )
        .expect("ApiVersions v3");
    av.api_keys
        .iter()
        .map(|k| (k.api_key, (k.min_version, k.max_version)))
        .collect()
}

/// Produce v0-v2: Kafka 4 still advertises them, because librdkafka before 2.8 turns off
/// gzip/snappy/lz4 unless Produce v0..v2 appear in ApiVersions (KAFKA-18659), but it refuses
/// a request at those versions by closing the connection. kafka-protocol has no v0-v2 schema,
/// so the (v0-v2 identical) request is written by hand. Expect: no response, the connection
/// closed, and the broker still serving a new connection.
fn old_produce_refused(addr: &str, v: i16) -> R<()> {
    use std::io::{Read, Write};
    let mut body = BytesMut::new();
    body.put_i32(0);
    body.put_i16(0); // Produce
    body.put_i16(v);
    body.put_i32(77);
    body.put_i16(4);
    body.put_slice(b"conf"); // client id
    body.put_i16(-1); // acks
    body.put_i32(30_000);
    body.put_i32(1);
    body.put_i16(PRODUCE_TOPIC.len() as i16);
    body.put_slice(PRODUCE_TOPIC.as_bytes());
    body.put_i32(1);
    body.put_i32(0);
    let batch = records::batch(&[b"old"], TS0);
    body.put_i32(batch.len() as i32);
    body.put_slice(&batch);
    let len = (body.len() - 4) as i32;
    body[..4].copy_from_slice(&len.to_be_bytes());
    let mut st = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    st.set_read_timeout(Some(Duration::from_secs(15))).ok();
    st.write_all(&body).map_err(|e| format!("write: {e}"))?;
    let mut buf = [0u8; 64];
    match st.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(n) => {
            return Err(format!(
                "answered {n} bytes instead of closing the connection"
            ))
        }
        Err(e) => return Err(format!("connection neither answered nor closed: {e}")),
    }
    let mut c = Conn::connect(addr);
    let r = c.send(&ApiVersionsRequest::default(), 0)?;
    code("ApiVersions after the refused Produce", r.error_code)
}

// ---- SASL and credentials (the matrix runs on a PLAINTEXT listener) ----

/// ILLEGAL_SASL_STATE: the SASL APIs on a connection that is not in a SASL exchange.
const ILLEGAL_SASL_STATE: i16 = 34;
const INVALID_REQUEST: i16 = 42;

fn sasl_handshake(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(
        &SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-512")),
        v,
    )?;
    check(r.error_code == ILLEGAL_SASL_STATE, || {
        format!("SaslHandshake on PLAINTEXT answered {}", r.error_code)
    })
}

fn sasl_authenticate(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"n,,n=u,r=x")),
        v,
    )?;
    check(r.error_code == ILLEGAL_SASL_STATE, || {
        format!("SaslAuthenticate on PLAINTEXT answered {}", r.error_code)
    })
}

fn describe_client_quotas(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(&DescribeClientQuotasRequest::default(), v)?;
    code("DescribeClientQuotas", r.error_code)?;
    let n = r.entries.as_ref().map(|e| e.len()).unwrap_or(0);
    check(n == 0, || {
        format!("{n} quota entries on a broker without quotas")
    })
}

/// Validate-only (the broker keeps no quota): a valid entry passes, an unknown key is
/// INVALID_REQUEST.
fn alter_client_quotas(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    let entry = |key: &str| {
        EntryData::default()
            .with_entity(vec![EntityData::default()
                .with_entity_type(s("client-id"))
                .with_entity_name(Some(s("conf-client")))])
            .with_ops(vec![OpData::default().with_key(s(key)).with_value(1024.0)])
    };
    let req = AlterClientQuotasRequest::default()
        .with_validate_only(true)
        .with_entries(vec![entry("producer_byte_rate")]);
    let r = c.send(&req, v)?;
    check(r.entries.len() == 1, || {
        format!("{} entries for one", r.entries.len())
    })?;
    code("AlterClientQuotas", r.entries[0].error_code)?;
    let req = AlterClientQuotasRequest::default()
        .with_validate_only(true)
        .with_entries(vec![entry("bogus_rate")]);
    let r = c.send(&req, v)?;
    let got = r.entries.first().map(|e| e.error_code);
    check(got == Some(INVALID_REQUEST), || {
        format!("an unknown quota key answered {got:?}")
    })
}

// ---- issue 11 admin APIs ----

fn describe_topic_partitions(c: &mut Conn, v: i16) -> R<()> {
    use describe_topic_partitions_request::TopicRequest;
    let r = c.send(
        &DescribeTopicPartitionsRequest::default()
            .with_topics(vec![TopicRequest::default().with_name(TopicName(s(TOPIC)))])
            .with_response_partition_limit(2000),
        v,
    )?;
    let t = r.topics.first().ok_or("no topic")?;
    code("DescribeTopicPartitions", t.error_code)?;
    check(t.partitions.len() == 1, || {
        format!("partitions {:?}", t.partitions)
    })
}

fn describe_log_dirs(c: &mut Conn, v: i16) -> R<()> {
    use describe_log_dirs_request::DescribableLogDirTopic;
    let r = c.send(
        &DescribeLogDirsRequest::default().with_topics(Some(vec![
            DescribableLogDirTopic::default()
                .with_topic(TopicName(s(TOPIC)))
                .with_partitions(vec![0]),
        ])),
        v,
    )?;
    code("DescribeLogDirs", r.error_code)?;
    let dir = r.results.first().ok_or("no log dir")?;
    code("DescribeLogDirs dir", dir.error_code)?;
    check(dir.topics.iter().any(|t| t.name.as_str() == TOPIC), || {
        format!("topics {:?}", dir.topics)
    })
}

/// Moving the fixed topic's replica into the directory it is in: done (NONE); another
/// path: LOG_DIR_NOT_FOUND.
fn alter_replica_log_dirs(c: &mut Conn, v: i16) -> R<()> {
    use alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
    let dirs = c.send(&DescribeLogDirsRequest::default().with_topics(None), 1)?;
    let dir = dirs.results.first().ok_or("no log dir")?.log_dir.clone();
    for (path, want) in [(dir, 0i16), (s("/no/such/dir"), 57)] {
        let r = c.send(
            &AlterReplicaLogDirsRequest::default().with_dirs(vec![AlterReplicaLogDir::default()
                .with_path(path.clone())
                .with_topics(vec![AlterReplicaLogDirTopic::default()
                    .with_name(tn(TOPIC))
                    .with_partitions(vec![0])])]),
            v,
        )?;
        let got = r
            .results
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.error_code)
            .ok_or("no partition result")?;
        check(got == want, || {
            format!("{path}: error {got}, expected {want}")
        })?;
    }
    Ok(())
}

/// v0 (client metrics only): none; v1 asking for topics lists the fixed topic.
fn list_config_resources(c: &mut Conn, v: i16) -> R<()> {
    let req = if v == 0 {
        ListConfigResourcesRequest::default()
    } else {
        ListConfigResourcesRequest::default().with_resource_types(vec![2])
    };
    let r = c.send(&req, v)?;
    code("ListConfigResources", r.error_code)?;
    let names: Vec<&str> = r
        .config_resources
        .iter()
        .map(|x| x.resource_name.as_str())
        .collect();
    if v == 0 {
        check(names.is_empty(), || {
            format!("client metrics resources {names:?}")
        })
    } else {
        check(names.contains(&TOPIC), || format!("topics {names:?}"))
    }
}

fn describe_producers(c: &mut Conn, v: i16) -> R<()> {
    use describe_producers_request::TopicRequest;
    let r = c.send(
        &DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partition_indexes(vec![0])]),
        v,
    )?;
    let p = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition")?;
    code("DescribeProducers", p.error_code)
}

fn describe_transactions(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s("conf-no-such-txn"))]),
        v,
    )?;
    let t = r.transaction_states.first().ok_or("no state")?;
    check(t.error_code == 105, || {
        format!(
            "error {} for an unknown transactional id (want 105)",
            t.error_code
        )
    })
}

fn list_transactions(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(
        &ListTransactionsRequest::default().with_duration_filter(-1),
        v,
    )?;
    code("ListTransactions", r.error_code)
}

/// A cancel on one node: nothing is being reassigned (NO_REASSIGNMENT_IN_PROGRESS).
fn alter_partition_reassignments(c: &mut Conn, v: i16) -> R<()> {
    use alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
    let r = c.send(
        &AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![ReassignableTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partitions(vec![ReassignablePartition::default()
                    .with_partition_index(0)
                    .with_replicas(None)])]),
        v,
    )?;
    code("AlterPartitionReassignments", r.error_code)?;
    let p = r
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition result")?;
    check(p.error_code == 85, || {
        format!("error {} (want NO_REASSIGNMENT_IN_PROGRESS)", p.error_code)
    })
}

fn list_partition_reassignments(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(
        &ListPartitionReassignmentsRequest::default().with_timeout_ms(30_000),
        v,
    )?;
    code("ListPartitionReassignments", r.error_code)?;
    check(r.topics.is_empty(), || format!("listed {:?}", r.topics))
}

fn elect_leaders(c: &mut Conn, v: i16) -> R<()> {
    use elect_leaders_request::TopicPartitions;
    let r = c.send(
        &ElectLeadersRequest::default()
            .with_topic_partitions(Some(vec![TopicPartitions::default()
                .with_topic(TopicName(s(TOPIC)))
                .with_partitions(vec![0])]))
            .with_timeout_ms(30_000),
        v,
    )?;
    code("ElectLeaders", r.error_code)?;
    let p = r
        .replica_election_results
        .first()
        .and_then(|t| t.partition_result.first())
        .ok_or("no partition result")?;
    check(p.error_code == 84, || {
        format!("error {} (want ELECTION_NOT_NEEDED)", p.error_code)
    })
}

fn update_features(c: &mut Conn, v: i16) -> R<()> {
    use update_features_request::FeatureUpdateKey;
    let r = c.send(
        &UpdateFeaturesRequest::default()
            .with_timeout_ms(30_000)
            .with_feature_updates(vec![FeatureUpdateKey::default()
                .with_feature(s("conf.no.such.feature"))
                .with_max_version_level(1)
                .with_upgrade_type(1)]),
        v,
    )?;
    let per_feature = r.results.first().map(|x| x.error_code);
    check(r.error_code == 95 || per_feature == Some(95), || {
        format!(
            "error {} / {per_feature:?} for an unknown feature (want INVALID_UPDATE_VERSION)",
            r.error_code
        )
    })
}

/// A node that is not an observer cannot be added, and one that is not a voter cannot be
/// removed: refused with an error either way, and the quorum is unchanged (a one-node broker
/// says its quorum is static; cluster_membership checks the exact codes of a cluster).
fn add_raft_voter(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(
        &AddRaftVoterRequest::default()
            .with_timeout_ms(5_000)
            .with_voter_id(9_999)
            .with_voter_directory_id(uuid::Uuid::from_u128(0x1234))
            .with_listeners(vec![add_raft_voter_request::Listener::default()
                .with_name(s("CONTROLLER"))
                .with_host(s("127.0.0.1"))
                .with_port(1)]),
        v,
    )?;
    check(r.error_code != 0, || "an unknown node was added".into())?;
    describe_quorum(c, 0)
}

fn remove_raft_voter(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(
        &RemoveRaftVoterRequest::default()
            .with_voter_id(9_999)
            .with_voter_directory_id(uuid::Uuid::from_u128(0x1234)),
        v,
    )?;
    check(r.error_code != 0, || "an unknown voter was removed".into())?;
    describe_quorum(c, 0)
}

/// A broker id nobody registered: refused (Kafka: BROKER_ID_NOT_REGISTERED; a one-node
/// kmirror has no registrations at all), and the broker still lists itself.
fn unregister_broker(c: &mut Conn, v: i16) -> R<()> {
    let r = c.send(
        &UnregisterBrokerRequest::default().with_broker_id(BrokerId(9_999)),
        v,
    )?;
    check(r.error_code != 0, || {
        "an unknown broker was unregistered".into()
    })?;
    describe_quorum(c, 0)
}

fn scram_user(v: i16) -> String {
    format!("conf-user-{v}")
}

fn alter_scram(c: &mut Conn, v: i16) -> R<()> {
    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
    let req = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
        ScramCredentialUpsertion::default()
            .with_name(s(&scram_user(v)))
            .with_mechanism(1) // SCRAM-SHA-256
            .with_iterations(4096)
            .with_salt(Bytes::from_static(b"conformance-salt"))
            .with_salted_password(Bytes::from(vec![7u8; 32])),
    ]);
    let r = c.send(&req, v)?;
    let res = r.results.first().ok_or("no result")?;
    code("AlterUserScramCredentials", res.error_code)?;
    // Kafka applies credentials through its metadata log: wait until the user is described.
    let user = scram_user(v);
    let v50 = c.top::<DescribeUserScramCredentialsRequest>();
    for _ in 0..100 {
        let d = c.send(&describe_scram_request(Some(&user)), v50)?;
        if d.results.first().is_some_and(|u| {
            u.error_code == 0 && u.credential_infos.iter().any(|i| i.mechanism == 1)
        }) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "{user} not described after AlterUserScramCredentials"
    ))
}

fn describe_scram_request(user: Option<&str>) -> DescribeUserScramCredentialsRequest {
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
    DescribeUserScramCredentialsRequest::default()
        .with_users(user.map(|u| vec![UserName::default().with_name(s(u))]))
}

fn describe_scram(c: &mut Conn, v: i16) -> R<()> {
    // RESOURCE_NOT_FOUND (91) for a user without credentials, as Kafka answers.
    let r = c.send(&describe_scram_request(Some("conf-nobody")), v)?;
    code("DescribeUserScramCredentials", r.error_code)?;
    let u = r.results.first().ok_or("no result")?;
    check(u.error_code == 91, || {
        format!("unknown user answered {}", u.error_code)
    })
}
