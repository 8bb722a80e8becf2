//! The broker over a real socket: framing defences, ApiVersions fallback, produce/fetch
//! outcomes, and metadata durability. Requests are built with kafka-protocol like a client.

use kmirror_control::quorum::MetadataCommand;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kmirror::node::{RunningBroker, ServerConfig};
use kmirror_engine::EngineConfig;
use kmirror_log::batch::{build_batch, BatchSpec};

fn start(dir: &std::path::Path) -> RunningBroker {
    kmirror::node::start(
        ServerConfig {
            listeners: vec![kmirror_net::ListenerSpec::plaintext("127.0.0.1:0").expect("listener")],
            tls: Default::default(),
            node_id: 1,
            data_dir: dir.to_path_buf(),
            max_request_bytes: 1 << 20,
            auto_create_topics: true,
            default_partitions: 1,
            engine: EngineConfig {
                cores: 2,
                pin: false,
                ..EngineConfig::default()
            },
            authz: Default::default(),
            sasl: Default::default(),
            groups: Default::default(),
        },
        None,
    )
    .expect("broker starts")
}

fn connect(b: &RunningBroker) -> TcpStream {
    let s = TcpStream::connect(b.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn send<T: Encodable>(s: &mut TcpStream, key: ApiKey, version: i16, corr: i32, body: &T) {
    let mut buf = BytesMut::new();
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(corr)
        .with_client_id(Some(StrBytes::from_static_str("wire-test")));
    header
        .encode(&mut buf, key.request_header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    let mut frame = (buf.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&buf);
    s.write_all(&frame).unwrap();
}

fn recv<T: Decodable>(
    s: &mut TcpStream,
    key: ApiKey,
    version: i16,
    header_version: Option<i16>,
) -> (i32, T) {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    let mut b = Bytes::from(body);
    let hv = header_version.unwrap_or_else(|| key.response_header_version(version));
    let h = ResponseHeader::decode(&mut b, hv).unwrap();
    let r = T::decode(&mut b, version).unwrap();
    (h.correlation_id, r)
}

fn call<Req: Encodable, Resp: Decodable>(
    s: &mut TcpStream,
    key: ApiKey,
    version: i16,
    req: &Req,
) -> Resp {
    send(s, key, version, 42, req);
    let (corr, r) = recv(s, key, version, None);
    assert_eq!(corr, 42);
    r
}

/// True when the peer closes the connection (EOF or reset) within the timeout.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

fn api_versions_ok(b: &RunningBroker) {
    let mut s = connect(b);
    let r: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    assert_eq!(r.error_code, 0);
}

fn create_topic(s: &mut TcpStream, name: &str, partitions: i32) -> CreateTopicsResponse {
    let req = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.into())))
            .with_num_partitions(partitions)
            .with_replication_factor(1),
    ]);
    call(s, ApiKey::CreateTopics, 7, &req)
}

fn batch(n: usize) -> Vec<u8> {
    let spec = BatchSpec {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        base_timestamp: 1_700_000_000_000,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };
    let recs: Vec<kmirror_log::batch::KeyValue<'_>> =
        (0..n).map(|_| (None, Some(&b"value"[..]))).collect();
    build_batch(&spec, &recs)
}

fn produce(
    s: &mut TcpStream,
    topic: &str,
    records: Vec<u8>,
) -> produce_response::PartitionProduceResponse {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(Bytes::from(records))),
            ])]);
    let r: ProduceResponse = call(s, ApiKey::Produce, 9, &req);
    r.responses[0].partition_responses[0].clone()
}

fn latest_offset(s: &mut TcpStream, topic: &str) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(-1),
            ])]);
    let r: ListOffsetsResponse = call(s, ApiKey::ListOffsets, 7, &req);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

#[test]
fn api_versions_with_an_unknown_version_answers_v0_unsupported_version_with_our_list() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path());
    let mut s = connect(&b);
    // A future ApiVersions version: the body must not even be parsed.
    let mut frame = BytesMut::new();
    frame.put_i16(ApiKey::ApiVersions as i16);
    frame.put_i16(99);
    frame.put_i32(7);
    frame.put_slice(&[0, 0, 0xff, 0xff, 0x13]);
    let mut out = (frame.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&frame);
    s.write_all(&out).unwrap();
    let (corr, r): (i32, ApiVersionsResponse) = recv(&mut s, ApiKey::ApiVersions, 0, Some(0));
    assert_eq!(corr, 7);
    assert_eq!(r.error_code, 35);
    let produce = r
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Produce as i16)
        .unwrap();
    assert!(produce.max_version >= 9);
    b.stop();
}

#[test]
fn hostile_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path());
    let mut unknown_key = BytesMut::new();
    unknown_key.put_i32(12);
    unknown_key.put_i16(9999);
    unknown_key.put_i16(0);
    unknown_key.put_i32(1);
    unknown_key.put_i32(0);
    let mut bad_version = BytesMut::new();
    bad_version.put_i32(12);
    bad_version.put_i16(ApiKey::Produce as i16);
    bad_version.put_i16(1);
    bad_version.put_i32(1);
    bad_version.put_i32(0);
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("length -1", (-1i32).to_be_bytes().to_vec()),
        ("length 0", 0i32.to_be_bytes().to_vec()),
        ("length 2^31-1", i32::MAX.to_be_bytes().to_vec()),
        ("over the limit", ((1 << 20) + 1i32).to_be_bytes().to_vec()),
        ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("unknown api key", unknown_key.to_vec()),
        ("unsupported version", bad_version.to_vec()),
        ("garbage body", {
            let mut f = BytesMut::new();
            f.put_i32(20);
            f.put_i16(ApiKey::Metadata as i16);
            f.put_i16(12);
            f.put_i32(1);
            f.put_slice(&[0xff; 12]);
            f.to_vec()
        }),
    ];
    let mut idle = connect(&b); // a well-behaved client connected throughout
    for (what, bytes) in inputs {
        let mut s = connect(&b);
        s.write_all(&bytes).unwrap();
        assert!(
            closed_by_peer(&mut s),
            "{what}: connection should be closed"
        );
        api_versions_ok(&b);
    }
    // Truncated frame: announced 100 bytes, sent 10, then hung up; the node stays up.
    {
        let mut s = connect(&b);
        let mut f = 100i32.to_be_bytes().to_vec();
        f.extend_from_slice(&[0; 10]);
        s.write_all(&f).unwrap();
    }
    api_versions_ok(&b);
    let r: ApiVersionsResponse = call(
        &mut idle,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    assert_eq!(r.error_code, 0);
    b.stop();
}

#[test]
fn a_batch_with_a_broken_crc_is_corrupt_message_and_nothing_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path());
    let mut s = connect(&b);
    assert_eq!(create_topic(&mut s, "crc", 1).topics[0].error_code, 0);
    let ok = produce(&mut s, "crc", batch(3));
    assert_eq!((ok.error_code, ok.base_offset), (0, 0));
    let mut bad = batch(2);
    let last = bad.len() - 1;
    bad[last] ^= 0x55; // payload byte covered by the CRC
    let r = produce(&mut s, "crc", bad);
    assert_eq!(r.error_code, 2, "CORRUPT_MESSAGE");
    assert_eq!(latest_offset(&mut s, "crc"), 3);
    let next = produce(&mut s, "crc", batch(1));
    assert_eq!(next.base_offset, 3);
    b.stop();
}

#[test]
fn fetch_long_poll_returns_when_data_arrives_and_waits_max_wait_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path());
    let mut s = connect(&b);
    let created = create_topic(&mut s, "lp", 1);
    let id = created.topics[0].topic_id;
    let fetch_req = |offset: i64, wait: i32| {
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(wait)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![fetch_request::FetchTopic::default()
                .with_topic_id(id)
                .with_partitions(vec![fetch_request::FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(offset)
                    .with_current_leader_epoch(-1)
                    .with_partition_max_bytes(1 << 20)])])
    };
    // Nothing to read: the broker holds the request for max_wait_ms.
    let t = Instant::now();
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 13, &fetch_req(0, 400));
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(350), "{waited:?}");
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    assert!(r.responses[0].partitions[0]
        .records
        .as_ref()
        .unwrap()
        .is_empty());
    // A produce from another connection wakes the waiting fetch well before max_wait.
    let addr = b.addr();
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let mut p = TcpStream::connect(addr).unwrap();
        produce(&mut p, "lp", batch(2))
    });
    let t = Instant::now();
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 13, &fetch_req(0, 10_000));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(producer.join().unwrap().error_code, 0);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.high_watermark, 2);
    let records = p.records.as_ref().unwrap();
    let h = kmirror_log::batch::BatchHeader::parse(records).unwrap();
    assert_eq!((h.base_offset(), h.records_count()), (0, 2));
    // Out of range offsets are reported, not served.
    let r: FetchResponse = call(&mut s, ApiKey::Fetch, 13, &fetch_req(99, 0));
    assert_eq!(r.responses[0].partitions[0].error_code, 1);
    b.stop();
}

#[test]
fn topics_ids_configs_and_records_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let id;
    {
        let b = start(dir.path());
        let mut s = connect(&b);
        id = create_topic(&mut s, "durable", 2).topics[0].topic_id;
        produce(&mut s, "durable", batch(5));
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("durable"))
                .with_configs(vec![
                    incremental_alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_static_str("123456"))),
                ]),
        ]);
        let r: IncrementalAlterConfigsResponse =
            call(&mut s, ApiKey::IncrementalAlterConfigs, 1, &req);
        assert_eq!(r.responses[0].error_code, 0);
        // Unsupported values are refused with a reason.
        let bad = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("durable"))
                .with_configs(vec![
                    incremental_alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("cleanup.policy"))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_static_str("compact,bogus"))),
                ]),
        ]);
        let r: IncrementalAlterConfigsResponse =
            call(&mut s, ApiKey::IncrementalAlterConfigs, 1, &bad);
        assert_eq!(r.responses[0].error_code, 40);
        assert!(r.responses[0]
            .error_message
            .as_ref()
            .unwrap()
            .contains("bogus"));
        b.stop();
    }
    let b = start(dir.path());
    let mut s = connect(&b);
    let md: MetadataResponse = call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    );
    let t = md
        .topics
        .iter()
        .find(|t| t.name.as_deref().map(|n| n.as_str()) == Some("durable"))
        .unwrap();
    assert_eq!(t.topic_id, id);
    assert_eq!(t.partitions.len(), 2);
    assert_eq!(latest_offset(&mut s, "durable"), 5);
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("durable")),
    ]);
    let r: DescribeConfigsResponse = call(&mut s, ApiKey::DescribeConfigs, 4, &req);
    let rm = r.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "retention.ms")
        .unwrap();
    assert_eq!(rm.value.as_deref(), Some("123456"));
    assert_eq!(rm.config_source, 1);
    b.stop();
}

#[test]
fn deleted_topic_recreated_with_the_same_name_starts_empty_with_a_new_id() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path());
    let mut s = connect(&b);
    let id1 = create_topic(&mut s, "again", 1).topics[0].topic_id;
    produce(&mut s, "again", batch(4));
    let req = DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(StrBytes::from_static_str("again"))]);
    let r: DeleteTopicsResponse = call(&mut s, ApiKey::DeleteTopics, 5, &req);
    assert_eq!(r.responses[0].error_code, 0);
    let id2 = create_topic(&mut s, "again", 1).topics[0].topic_id;
    assert_ne!(id1, id2);
    assert_eq!(latest_offset(&mut s, "again"), 0);
    b.stop();
}

#[test]
fn create_partitions_with_an_assignment_list_of_the_wrong_length_is_invalid_replica_assignment() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path());
    let mut s = connect(&b);
    create_topic(&mut s, "grow", 1);
    let grow = |assignments| {
        CreatePartitionsRequest::default().with_topics(vec![
            create_partitions_request::CreatePartitionsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("grow")))
                .with_count(3)
                .with_assignments(assignments),
        ])
    };
    // Kafka: 39 when the list does not name each new partition (here: an empty list).
    let r: CreatePartitionsResponse =
        call(&mut s, ApiKey::CreatePartitions, 3, &grow(Some(vec![])));
    assert_eq!(r.results[0].error_code, 39);
    let r: CreatePartitionsResponse = call(&mut s, ApiKey::CreatePartitions, 3, &grow(None));
    assert_eq!(r.results[0].error_code, 0);
    b.stop();
}

fn batch_at(n: usize, ts: i64) -> Vec<u8> {
    let spec = BatchSpec {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        base_timestamp: ts,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };
    let recs: Vec<kmirror_log::batch::KeyValue<'_>> =
        (0..n).map(|_| (None, Some(&b"v"[..]))).collect();
    build_batch(&spec, &recs)
}

fn list_offset(s: &mut TcpStream, topic: &str, ts: i64) -> (i16, i64, i64) {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(ts),
            ])]);
    let r: ListOffsetsResponse = call(s, ApiKey::ListOffsets, 8, &req);
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset, p.timestamp)
}

#[test]
fn list_offsets_by_position_and_time_and_delete_records_move_the_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path());
    let mut s = connect(&b);
    create_topic(&mut s, "lo", 1);
    produce(&mut s, "lo", batch_at(2, 1_000)); // offsets 0-1
    produce(&mut s, "lo", batch_at(3, 5_000)); // offsets 2-4
    produce(&mut s, "lo", batch_at(1, 3_000)); // offset 5
    assert_eq!(list_offset(&mut s, "lo", -2).1, 0);
    assert_eq!(list_offset(&mut s, "lo", -1).1, 6);
    assert_eq!(
        list_offset(&mut s, "lo", 4_000).1,
        2,
        "first record at or after ts"
    );
    let (_, off, ts) = list_offset(&mut s, "lo", -3);
    assert_eq!((off, ts), (2, 5_000), "max timestamp");
    assert_eq!(list_offset(&mut s, "lo", 9_000).1, -1, "nothing that late");

    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(1000)
        .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("lo")))
            .with_partitions(vec![
                delete_records_request::DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(2),
            ])]);
    let r: DeleteRecordsResponse = call(&mut s, ApiKey::DeleteRecords, 2, &req);
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, 2));
    assert_eq!(list_offset(&mut s, "lo", -2).1, 2);

    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("lo")))
                .with_partitions(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(0)
                        .with_leader_epoch(0),
                ]),
        ]);
    let r: OffsetForLeaderEpochResponse = call(&mut s, ApiKey::OffsetForLeaderEpoch, 4, &req);
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.leader_epoch, p.end_offset), (0, 0, 6));
    // A client claiming a newer epoch than ours is told so.
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("lo")))
                .with_partitions(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(5)
                        .with_leader_epoch(0),
                ]),
        ]);
    let r: OffsetForLeaderEpochResponse = call(&mut s, ApiKey::OffsetForLeaderEpoch, 4, &req);
    assert_eq!(r.topics[0].partitions[0].error_code, 75);
    b.stop();
}

#[test]
fn metadata_answers_by_topic_id_and_reports_unknown_ones() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path());
    let mut s = connect(&b);
    let id = create_topic(&mut s, "byid", 3).topics[0].topic_id;
    let req = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default()
            .with_name(None)
            .with_topic_id(id),
        metadata_request::MetadataRequestTopic::default()
            .with_name(None)
            .with_topic_id(uuid::Uuid::from_u128(7)),
    ]));
    let r: MetadataResponse = call(&mut s, ApiKey::Metadata, 12, &req);
    assert_eq!(
        r.topics[0]
            .name
            .as_deref()
            .map(|n| n.to_string())
            .as_deref(),
        Some("byid")
    );
    assert_eq!(r.topics[0].partitions.len(), 3);
    assert_eq!(r.topics[1].error_code, 100, "UNKNOWN_TOPIC_ID");
    assert_eq!(r.brokers[0].port, b.addr().port() as i32);
    // Auto-creation is off when the client says so.
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
        )
        .with_name(Some(TopicName(StrBytes::from_static_str("nope"))))]));
    let r: MetadataResponse = call(&mut s, ApiKey::Metadata, 12, &req);
    assert_eq!(r.topics[0].error_code, 3);
    b.stop();
}

#[test]
fn a_mirror_topic_refuses_client_writes_with_read_only_topic_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path());
    let mut s = connect(&b);
    create_topic(&mut s, "mirrored", 1);
    produce(&mut s, "mirrored", batch(2));
    // What the mirror control plane does when a topic joins a mirror.
    let cluster = b.broker().cluster.clone();
    for cmd in [
        MetadataCommand::SyncSourceConfigs {
            name: "mirrored".into(),
            set: [
                ("mirror.name".to_string(), "m1".to_string()),
                ("source.only.key".to_string(), "x".to_string()),
            ]
            .into(),
            delete: Vec::new(),
        },
        MetadataCommand::SetMirror {
            name: "mirrored".into(),
            mirror: Some("m1".into()),
        },
    ] {
        cluster.propose_topic_blocking(cmd).unwrap();
    }
    let t = cluster.snapshot().topics["mirrored"].clone();
    futures_lite::future::block_on(cluster.refresh_partitions(b.router(), &t)).unwrap();

    let r = produce(&mut s, "mirrored", batch(1));
    assert_eq!(r.error_code, kmirror_net::keys::error::READ_ONLY_TOPIC);
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("mirrored")),
    ]);
    let r: DescribeConfigsResponse = call(&mut s, ApiKey::DescribeConfigs, 4, &req);
    let names: Vec<String> = r.results[0]
        .configs
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    assert!(names.iter().any(|n| n == "source.only.key"), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "mirror.name"),
        "mirror.name is hidden"
    );
    assert_eq!(latest_offset(&mut s, "mirrored"), 2);

    let req = DeleteRecordsRequest::default().with_topics(vec![
        delete_records_request::DeleteRecordsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("mirrored")))
            .with_partitions(vec![
                delete_records_request::DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(1),
            ]),
    ]);
    let r: DeleteRecordsResponse = call(&mut s, ApiKey::DeleteRecords, 2, &req);
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        kmirror_net::keys::error::READ_ONLY_TOPIC
    );

    let req = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("mirrored")))
            .with_count(3)
            .with_assignments(None),
    ]);
    let r: CreatePartitionsResponse = call(&mut s, ApiKey::CreatePartitions, 3, &req);
    assert_eq!(
        r.results[0].error_code,
        kmirror_net::keys::error::READ_ONLY_TOPIC
    );

    // After failover (mirror cleared) the topic is writable again.
    let t = cluster
        .propose_topic_blocking(MetadataCommand::SetMirror {
            name: "mirrored".into(),
            mirror: None,
        })
        .unwrap();
    futures_lite::future::block_on(cluster.refresh_partitions(b.router(), &t)).unwrap();
    assert_eq!(produce(&mut s, "mirrored", batch(1)).base_offset, 2);
    b.stop();
}
