//! Issue 8: kmirror now walks every produced record (decompressing gzip/snappy/lz4/zstd) before
//! appending. Real clients' batches, every codec, with record headers, must still be accepted
//! unchanged: the Java producer (ProducerPerformance) and librdkafka (confluent-kafka) each
//! produce with every codec, and every record is there afterwards.

use std::time::Duration;

use kmirror_tests::java::{self, tools};
use kmirror_tests::{proc, python, BrokerUnderTest, KmirrorNode, WireClient};

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
