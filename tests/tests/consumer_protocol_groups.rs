//! Issue 11 step 2: KIP-848 consumer groups with real clients (Java `group.protocol=consumer`
//! and librdkafka in one group), next to a classic group. The same scenario on Apache Kafka
//! 4.1.1 validates the scenario itself.

use kmirror_tests::clients;
use kmirror_tests::{KafkaCluster, KmirrorNode};

const RECORDS: u64 = 60_000;

#[test]
fn java_and_librdkafka_share_a_consumer_protocol_group_exactly_once_on_kmirror() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut node = KmirrorNode::start();
    clients::consumer_protocol_group_handover(&mut node, RECORDS);
}

#[test]
fn consumer_protocol_scenario_holds_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut kafka = KafkaCluster::single();
    clients::consumer_protocol_group_handover(&mut kafka, RECORDS);
}
