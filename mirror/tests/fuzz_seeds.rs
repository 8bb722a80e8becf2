//! Writes the seed corpora of the request_decode and mirror_api fuzz targets into
//! `$KMIRROR_FUZZ_SEEDS` (normally fuzz/corpus):
//! `KMIRROR_FUZZ_SEEDS=$PWD/fuzz/corpus cargo test -p kmirror-mirror --test fuzz_seeds -- --ignored`

use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, Message, Request, StrBytes};
use kmirror_mirror::api::{self as m, MirrorRequest};
use kmirror_mirror::client::codec::encode_request;

fn root() -> PathBuf {
    PathBuf::from(std::env::var("KMIRROR_FUZZ_SEEDS").expect("KMIRROR_FUZZ_SEEDS"))
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = root().join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn keys() -> Vec<ApiKey> {
    (0..20_000i16)
        .filter_map(|k| ApiKey::try_from(k).ok())
        .collect()
}

/// Mode 0 (a size-prefixed frame as the server reads it) and mode 1 (key index, version
/// index, body) seeds for one request at its max version.
fn request<R: Request + Encodable>(name: &str, req: R) {
    let v = R::VERSIONS.max;
    let frame = encode_request(&req, v, 7, "fuzz-seed").unwrap();
    write(
        "request_decode",
        &format!("{name}-frame"),
        &[&[0u8][..], &frame].concat(),
    );
    let key = ApiKey::try_from(R::KEY).unwrap();
    let idx = keys().iter().position(|k| *k == key).unwrap() as u8;
    for version in [R::VERSIONS.min, v] {
        let mut body = BytesMut::new();
        if req.encode(&mut body, version).is_ok() {
            let vi = (version - R::VERSIONS.min) as u8;
            write(
                "request_decode",
                &format!("{name}-v{version}-body"),
                &[&[1u8, idx, vi][..], &body].concat(),
            );
        }
    }
}

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

fn one_batch() -> Bytes {
    kmirror_tests::records::batch(&[b"seed-value"], 1_700_000_000_000)
}

#[test]
#[ignore = "writes the fuzz seed corpora; run by hand"]
fn write_request_decode_seeds() {
    request(
        "produce",
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(1000)
            .with_topic_data(vec![produce_request::TopicProduceData::default()
                .with_name(TopicName(s("t")))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(one_batch())),
                ])]),
    );
    request(
        "fetch",
        FetchRequest::default()
            .with_max_wait_ms(100)
            .with_max_bytes(1 << 20)
            .with_topics(vec![fetch_request::FetchTopic::default()
                .with_topic(TopicName(s("t")))
                .with_partitions(vec![fetch_request::FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(5)
                    .with_partition_max_bytes(1 << 20)])]),
    );
    request(
        "list-offsets",
        ListOffsetsRequest::default().with_topics(vec![
            list_offsets_request::ListOffsetsTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(1_000)]),
        ]),
    );
    request(
        "metadata",
        MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(TopicName(s("t")))),
        ])),
    );
    request(
        "api-versions",
        ApiVersionsRequest::default()
            .with_client_software_name(s("seed"))
            .with_client_software_version(s("1")),
    );
    request(
        "create-topics",
        CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(TopicName(s("t")))
                .with_num_partitions(3)
                .with_replication_factor(1)
                .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("1000")))]),
        ]),
    );
    request(
        "offset-commit",
        OffsetCommitRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_committed_offset(9),
                    ]),
            ]),
    );
    request(
        "join-group",
        JoinGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_session_timeout_ms(10_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
            )
            .with_name(s("range"))
            .with_metadata(Bytes::from_static(b"\0\x01\0\0\0\x01\0\x01t"))]),
    );
    request(
        "find-coordinator",
        FindCoordinatorRequest::default().with_coordinator_keys(vec![s("g")]),
    );
    request(
        "init-producer-id",
        InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s("tx"))))
            .with_transaction_timeout_ms(60_000),
    );
    request(
        "offset-for-leader-epoch",
        OffsetForLeaderEpochRequest::default().with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(TopicName(s("t")))
                .with_partitions(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_leader_epoch(3),
                ]),
        ]),
    );
    request(
        "describe-configs",
        DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("t")),
        ]),
    );
    // Response bodies the mirror fetcher decodes (mode 1, decoded as responses too).
    let fetch = FetchResponse::default().with_responses(vec![
        fetch_response::FetchableTopicResponse::default()
            .with_topic(TopicName(s("t")))
            .with_partitions(vec![fetch_response::PartitionData::default()
                .with_high_watermark(1)
                .with_records(Some(one_batch()))]),
    ]);
    let idx = keys().iter().position(|k| *k == ApiKey::Fetch).unwrap() as u8;
    for v in [4i16, FetchResponse::VERSIONS.max] {
        let mut body = BytesMut::new();
        fetch.encode(&mut body, v).unwrap();
        let vi = (v - FetchRequest::VERSIONS.min) as u8;
        write(
            "request_decode",
            &format!("fetch-response-v{v}"),
            &[&[1u8, idx, vi][..], &body].concat(),
        );
    }
}

fn mirror<R: MirrorRequest + Default>(sel: u8)
where
    R::Response: Default,
{
    write(
        "mirror_api",
        &format!("{}-request", R::NAME),
        &[&[sel][..], &m::encode_body(&R::default())].concat(),
    );
    write(
        "mirror_api",
        &format!("{}-response", R::NAME),
        &[&[sel | 0x80][..], &m::encode_body(&R::Response::default())].concat(),
    );
}

#[test]
#[ignore = "writes the fuzz seed corpora; run by hand"]
fn write_mirror_api_seeds() {
    mirror::<m::CreateMirrorRequest>(0);
    mirror::<m::AddTopicsToMirrorRequest>(1);
    mirror::<m::RemoveTopicsFromMirrorRequest>(2);
    mirror::<m::LastMirroredEpochsRequest>(3);
    mirror::<m::ListMirrorsRequest>(4);
    mirror::<m::DescribeMirrorsRequest>(5);
    mirror::<m::ReadMirrorStatesRequest>(6);
    mirror::<m::PauseMirrorTopicsRequest>(7);
    mirror::<m::ResumeMirrorTopicsRequest>(8);
    mirror::<m::DeleteMirrorRequest>(9);
    mirror::<m::BumpLeaderEpochsRequest>(10);
    // A populated request with nested arrays and tagged fields.
    let req = m::CreateMirrorRequest {
        mirror_name: "dr".into(),
        configs: vec![m::MirrorConfig {
            name: "bootstrap.servers".into(),
            value: Some("127.0.0.1:9092".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    write(
        "mirror_api",
        "CreateMirror-populated",
        &[&[0u8][..], &m::encode_body(&req)].concat(),
    );
    let mut h = BytesMut::new();
    m::write_request_header_v2(&mut h, 1000, 0, 42, Some("kmirror"));
    write(
        "mirror_api",
        "request-header-v2",
        &[&[11u8][..], &h].concat(),
    );
    let mut h = BytesMut::new();
    m::write_response_header_v1(&mut h, 42);
    write(
        "mirror_api",
        "response-header-v1",
        &[&[12u8][..], &h].concat(),
    );
    write(
        "mirror_api",
        "error-response",
        &[
            &[13u8][..],
            &1000i16.to_be_bytes(),
            &35i16.to_be_bytes(),
            b"nope",
        ]
        .concat(),
    );
}
