//! Issue 8: kmirror now walks every produced record (decompressing gzip/snappy/lz4/zstd) before
//! appending. Real clients' batches, every codec, with record headers, must still be accepted
//! unchanged: the Java producer (ProducerPerformance) and librdkafka (confluent-kafka) each
//! produce with every codec, and every record is there afterwards.

use std::time::Duration;

use kmirror_tests::helpers::now_ms;
use kmirror_tests::java::{self, tools};
use kmirror_tests::{
    proc, python, records, BrokerUnderTest, KafkaCluster, KmirrorNode, WireClient,
};

const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

#[test]
fn real_clients_batches_of_every_codec_pass_record_validation() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let node = KmirrorNode::start();
    let boot = node.bootstrap();
    let mut c = WireClient::connect(&boot).expect("connect");
    for codec in CODECS {
        let topic = format!("java-{codec}");
        assert_eq!(c.create_topic(&topic, 1, 1, &[]).expect("create"), 0);
        let bs = format!("bootstrap.servers={boot}");
        let ct = format!("compression.type={codec}");
        let ran = java::run_tool(
            tools::PRODUCER_PERFORMANCE,
            &[
                "--topic",
                &topic,
                "--num-records",
                "20000",
                "--record-size",
                "200",
                "--throughput",
                "-1",
                "--producer-props",
                &bs,
                "acks=all",
                "linger.ms=10",
                "batch.size=65536",
                &ct,
            ],
            Duration::from_secs(180),
        );
        let summary = ran
            .stdout
            .lines()
            .rev()
            .find(|l| l.contains("records sent"))
            .unwrap_or_else(|| panic!("no ProducerPerformance summary:\n{}", ran.stdout));
        assert!(
            summary.starts_with("20000 records sent"),
            "{codec}: {summary}"
        );
        assert_eq!(
            c.log_bounds(&topic, 0).expect("bounds"),
            (0, 20_000),
            "java {codec}"
        );

        // librdkafka, idempotent, keyed, two headers with the same key on every record.
        let topic = format!("rdkafka-{codec}");
        assert_eq!(c.create_topic(&topic, 1, 1, &[]).expect("create"), 0);
        let ran = proc::run_ok(
            python::script("keyed_producer.py").args([
                boot.as_str(),
                &topic,
                "1",
                "2",
                "3000",
                "40",
                "0",
                &ct,
            ]),
            Duration::from_secs(120),
        );
        assert!(
            ran.stdout.contains("DONE"),
            "librdkafka {codec}: {}",
            ran.stdout
        );
        assert_eq!(
            c.log_bounds(&topic, 0).expect("bounds"),
            (0, 6_000),
            "rdkafka {codec}"
        );
    }
}

/// Produce of a zstd batch at `version` to partition 0 of `topic`: the partition's error.
fn produce_at(c: &mut WireClient, topic: &str, batch: bytes::Bytes, version: i16) -> i16 {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch))])]);
    let resp = c.send_at(req, version).expect("produce");
    resp.responses[0].partition_responses[0].error_code
}

/// Fetch of partition 0 of `topic` from offset 0 at `version`: (error, has records).
fn fetch_at(c: &mut WireClient, topic: &str, version: i16) -> (i16, bool) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let resp = c.send_at(req, version).expect("fetch");
    let p = &resp.responses[0].partitions[0];
    (
        p.error_code,
        p.records.as_ref().is_some_and(|r| !r.is_empty()),
    )
}

/// KIP-110's rules, as one broker answers them: zstd batches need Produce v7. Fetch below v10
/// of a zstd topic is served as it is: Kafka 4 (no down-conversion left) dropped the
/// UNSUPPORTED_COMPRESSION_TYPE answer Kafka 2.1-3.x gave it.
fn zstd_version_rules(boot: &str) -> Vec<(&'static str, i16, bool)> {
    let mut c = WireClient::connect(boot).expect("connect");
    assert_eq!(c.create_topic("plain-t", 1, 1, &[]).expect("create"), 0);
    assert_eq!(
        c.create_topic("zstd-t", 1, 1, &[("compression.type", "zstd")])
            .expect("create"),
        0
    );
    // Kafka applies a create a moment after answering it.
    std::thread::sleep(Duration::from_secs(2));
    let now = now_ms();
    let plain = records::batch(&[b"a", b"b"], now);
    let zstd = bytes::Bytes::from(
        kmirror_log::batch::recompress_client_batch(
            &plain,
            kmirror_log::batch::Compression::Zstd,
            None,
            None,
            1 << 20,
        )
        .expect("zstd batch"),
    );
    let mut seen = Vec::new();
    let mut p = |what, code| seen.push((what, code, false));
    p(
        "produce v3 zstd batch",
        produce_at(&mut c, "plain-t", zstd.clone(), 3),
    );
    p(
        "produce v6 zstd batch",
        produce_at(&mut c, "plain-t", zstd.clone(), 6),
    );
    p(
        "produce v7 zstd batch",
        produce_at(&mut c, "plain-t", zstd, 7),
    );
    p(
        "produce v3 plain batch to zstd topic",
        produce_at(&mut c, "zstd-t", plain, 3),
    );
    for (what, topic, v) in [
        ("fetch v4 zstd topic", "zstd-t", 4),
        ("fetch v9 zstd topic", "zstd-t", 9),
        ("fetch v10 zstd topic", "zstd-t", 10),
        ("fetch v9 plain topic (zstd batch)", "plain-t", 9),
    ] {
        let (code, data) = fetch_at(&mut c, topic, v);
        seen.push((what, code, data));
    }
    eprintln!("{boot}: {seen:?}");
    seen
}

#[test]
fn zstd_batches_need_produce_v7_and_old_fetches_of_zstd_topics_are_served_like_kafka() {
    let kafka = KafkaCluster::single();
    let want = zstd_version_rules(&kafka.bootstrap());
    drop(kafka);
    let node = KmirrorNode::start();
    let got = zstd_version_rules(&node.bootstrap());
    assert_eq!(got, want);
    // UNSUPPORTED_COMPRESSION_TYPE (76) for zstd below Produce v7; every fetch has data.
    let codes: Vec<i16> = want.iter().map(|w| w.1).collect();
    assert_eq!(codes, [76, 76, 0, 0, 0, 0, 0, 0], "{want:?}");
    assert!(want[4..].iter().all(|w| w.2), "{want:?}");
}

/// What a broker answers to keyless records in a batch to a compacted topic: (partition
/// error code, error message, KIP-467 record errors as (index, message)), and each
/// librdkafka message's delivery outcome (index, error code).
type KeylessOutcome = ((i16, Option<String>, Vec<(i32, String)>), Vec<(i32, i32)>);

fn keyless_scenario(boot: &str) -> KeylessOutcome {
    let mut c = WireClient::connect(boot).expect("connect");
    for t in ["compacted-raw", "compacted-rdk"] {
        assert_eq!(
            c.create_topic(t, 1, 1, &[("cleanup.policy", "compact")])
                .expect("create"),
            0
        );
    }
    let now = now_ms();
    let batch = kmirror_tests::records::keyed_batch(
        &[
            (Some(b"a"), b"0"),
            (None, b"1"),
            (Some(b"b"), b"2"),
            (None, b"3"),
            (None, b"4"),
            (None, b"5"),
        ],
        now,
    );
    let p = c
        .produce_response("compacted-raw", 0, batch)
        .expect("produce");
    let raw = (
        p.error_code,
        p.error_message.map(|m| m.to_string()),
        p.record_errors
            .iter()
            .map(|r| {
                (
                    r.batch_index,
                    r.batch_index_error_message
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                )
            })
            .collect(),
    );
    let ran = proc::run_ok(
        python::script("keyless_batch.py").args([boot, "compacted-rdk", "10"]),
        Duration::from_secs(90),
    );
    assert!(ran.stdout.contains("DONE"), "{}", ran.stdout);
    let rdk = ran
        .stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 3 && f[0] == "M").then(|| (f[1].parse().unwrap(), f[2].parse().unwrap()))
        })
        .collect();
    assert_eq!(c.log_bounds("compacted-raw", 0).expect("bounds"), (0, 0));
    (raw, rdk)
}

/// Issue 11: a batch to a cleanup.policy=compact topic holding keyless records is refused
/// with INVALID_RECORD and KIP-467 record errors naming only the keyless records (Kafka's
/// LogValidator), so librdkafka fails those with INVALID_RECORD and the others of the batch
/// with its "invalid record in the same batch" error. Same answer from Apache Kafka 4.1.1 and
/// kmirror, raw and through librdkafka (its suite test 0011).
#[test]
fn keyless_records_to_a_compacted_topic_get_kafkas_record_errors() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let expected = {
        let kafka = kmirror_tests::KafkaCluster::single();
        keyless_scenario(&kafka.bootstrap())
    };
    eprintln!("Apache Kafka answered: {expected:#?}");
    let ((code, _, records), rdk) = &expected;
    assert_eq!(*code, 87, "INVALID_RECORD");
    let indexes: Vec<i32> = records.iter().map(|r| r.0).collect();
    assert_eq!(indexes, [1, 3, 4, 5], "only the keyless records");
    assert_eq!(
        rdk.iter().filter(|(_, e)| *e == 87).count(),
        5,
        "librdkafka fails the keyless ones with INVALID_RECORD: {rdk:?}"
    );
    let node = KmirrorNode::start();
    let got = keyless_scenario(&node.bootstrap());
    assert_eq!(
        got, expected,
        "kmirror (left) differs from Apache Kafka (right)"
    );
}
