//! Issue 3, "tests with real clients": Java kafka-clients/tools and librdkafka against kmirror.
//! Each scenario also runs against Apache Kafka 4.1.1 through the same harness, which proves
//! the scenario itself is right (a test that fails on Kafka is a broken test, not a finding).

use kmirror_tests::clients::{self, Client, RestartDedup};
use kmirror_tests::{KafkaCluster, KmirrorNode};

const RECORDS: u64 = 200_000;
const CRASH_RECORDS: u64 = 300_000;

#[test]
fn java_group_reads_200k_records_exactly_once_across_a_rebalance_and_offsets_survive_restart_on_kmirror(
) {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut node = KmirrorNode::start();
    clients::exactly_once_across_rebalance_and_restart(Client::Java, &mut node, RECORDS);
}

#[test]
fn librdkafka_group_reads_200k_records_exactly_once_across_a_rebalance_and_offsets_survive_restart_on_kmirror(
) {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut node = KmirrorNode::start();
    clients::exactly_once_across_rebalance_and_restart(Client::Librdkafka, &mut node, RECORDS);
}

#[test]
fn java_acked_records_survive_sigkill_of_kmirror_during_produce() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut node = KmirrorNode::start();
    clients::acked_records_survive_sigkill(
        Client::Java,
        &mut node,
        CRASH_RECORDS,
        RestartDedup::LastFiveBatches,
    );
}

#[test]
fn librdkafka_acked_records_survive_sigkill_of_kmirror_during_produce() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut node = KmirrorNode::start();
    clients::acked_records_survive_sigkill(
        Client::Librdkafka,
        &mut node,
        CRASH_RECORDS,
        RestartDedup::LastFiveBatches,
    );
}

// The same scenarios on Apache Kafka: they validate the scenarios, not kmirror.

#[test]
fn java_scenario_holds_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut kafka = KafkaCluster::single();
    clients::exactly_once_across_rebalance_and_restart(Client::Java, &mut kafka, RECORDS);
}

#[test]
fn librdkafka_scenario_holds_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut kafka = KafkaCluster::single();
    clients::exactly_once_across_rebalance_and_restart(Client::Librdkafka, &mut kafka, RECORDS);
}

#[test]
fn java_sigkill_scenario_holds_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut kafka = KafkaCluster::single();
    clients::acked_records_survive_sigkill(
        Client::Java,
        &mut kafka,
        CRASH_RECORDS,
        RestartDedup::LastBatchOnly,
    );
}

#[test]
fn librdkafka_sigkill_scenario_holds_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut kafka = KafkaCluster::single();
    clients::acked_records_survive_sigkill(
        Client::Librdkafka,
        &mut kafka,
        CRASH_RECORDS,
        RestartDedup::LastBatchOnly,
    );
}

#[test]
fn java_tools_write_and_read_back_50k_records_on_kmirror() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let node = KmirrorNode::start();
    clients::java_tools_round_trip(&node, 50_000);
}

#[test]
fn java_tools_scenario_holds_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    clients::java_tools_round_trip(&kafka, 50_000);
}
