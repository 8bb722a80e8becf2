//! Issue 3, "bad input from a raw socket": malformed frames, HTTP, unknown APIs and versions,
//! truncation and a broken CRC leave kmirror up, its memory flat and other clients unaffected.
//! The Kafka run validates the expectations themselves against Apache Kafka 4.1.1.

use kmirror_tests::{badinput, KafkaCluster, KmirrorNode};

#[test]
fn kmirror_survives_bad_frames_and_refuses_a_broken_crc_without_appending() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut node = KmirrorNode::start();
    badinput::run_all(&mut node, true);
}

#[test]
fn apache_kafka_meets_the_same_bad_input_expectations() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut kafka = KafkaCluster::single();
    badinput::run_all(&mut kafka, false);
}
