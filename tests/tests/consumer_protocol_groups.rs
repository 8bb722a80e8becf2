//! Issue 11 step 2: KIP-848 consumer groups with real clients (Java `group.protocol=consumer`
//! and librdkafka in one group), next to a classic group. The same scenario on Apache Kafka
//! 4.1.1 validates the scenario itself. Also Kafka 4.1's online migration between a classic
//! group and the consumer protocol (issue 23).

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

/// Issue 23: Kafka 4.1's online migration; a KIP-848 member joins a classic group and leaves it.
#[test]
fn a_classic_group_upgrades_and_downgrades_online_with_real_clients_on_kmirror() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut node = KmirrorNode::start();
    clients::classic_and_consumer_members_share_a_group(&mut node, RECORDS);
}

#[test]
fn the_group_migration_scenario_holds_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut kafka = KafkaCluster::single();
    clients::classic_and_consumer_members_share_a_group(&mut kafka, RECORDS);
}

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kmirror_tests::helpers::str_bytes as sb;
use kmirror_tests::{BrokerUnderTest, WireClient};

fn join_req(group: &str, member: &str, topic: &str) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_id(sb(member))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(sb(topic))]))
        .with_topic_partitions(Some(Vec::<TopicPartitions>::new()))
}

fn beat(group: &str, member: &str, epoch: i32) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_id(sb(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(-1)
}

/// Wire-level answers of the KIP-848 APIs (error codes, states), one line per observation.
fn wire_observations(broker: &dyn BrokerUnderTest) -> Vec<String> {
    let boot = broker.bootstrap();
    let addr = boot.split(',').next().expect("addr");
    let mut c = WireClient::connect(addr).expect("connect");
    assert_eq!(c.create_topic("wire-t", 4, 1, &[]).expect("create"), 0);
    let g = "wire-g";
    let m1 = uuid::Uuid::new_v4().simple().to_string();
    let mut out = Vec::new();
    // Kafka answers COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR until __consumer_offsets is
    // up: wait for a coordinator first.
    let started = std::time::Instant::now();
    loop {
        let r = c
            .send(
                FindCoordinatorRequest::default()
                    .with_key_type(0)
                    .with_coordinator_keys(vec![sb(g)]),
            )
            .expect("find coordinator");
        if r.coordinators.first().map(|k| k.error_code) == Some(0) {
            break;
        }
        assert!(started.elapsed().as_secs() < 60, "no coordinator: {r:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let r = loop {
        let r = c.send(join_req(g, &m1, "wire-t")).expect("join");
        if ![14, 15, 16].contains(&r.error_code) || started.elapsed().as_secs() > 60 {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let epoch = r.member_epoch;
    let topic_id = r
        .assignment
        .as_ref()
        .and_then(|a| a.topic_partitions.first())
        .map(|t| t.topic_id)
        .unwrap_or_default();
    let assigned: usize = r
        .assignment
        .as_ref()
        .map(|a| a.topic_partitions.iter().map(|t| t.partitions.len()).sum())
        .unwrap_or(0);
    out.push(format!("join error={} assigned={assigned}", r.error_code));
    out.push(format!("join epoch positive={}", epoch > 0));
    let r = c.send(beat(g, &m1, epoch + 1)).expect("beat");
    out.push(format!("future epoch error={}", r.error_code));
    let r = c.send(beat(g, "nobody", epoch)).expect("beat");
    out.push(format!("unknown member error={}", r.error_code));
    let r = c.send(beat("wire-none", "nobody", 3)).expect("beat");
    out.push(format!("unknown group error={}", r.error_code));
    let r = c
        .send(join_req(g, "m-bad", "wire-t").with_server_assignor(Some(sb("nope"))))
        .expect("beat");
    out.push(format!("unknown assignor error={}", r.error_code));
    let commit = |epoch: i32| {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(sb(g)))
            .with_member_id(sb(&m1))
            .with_generation_id_or_member_epoch(epoch)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(sb("wire-t")))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(0)])])
    };
    let r = c.send(commit(epoch - 1)).expect("commit");
    out.push(format!(
        "stale commit error={}",
        r.topics[0].partitions[0].error_code
    ));
    let r = c.send(commit(epoch)).expect("commit");
    out.push(format!(
        "current commit error={}",
        r.topics[0].partitions[0].error_code
    ));
    // Static members: a second join with a live instance id is refused.
    let inst = |m: &str| join_req(g, m, "wire-t").with_instance_id(Some(sb("inst-1")));
    let s1 = uuid::Uuid::new_v4().simple().to_string();
    let r = c.send(inst(&s1)).expect("static join");
    out.push(format!("static join error={}", r.error_code));
    let s2 = uuid::Uuid::new_v4().simple().to_string();
    let r = c.send(inst(&s2)).expect("static join");
    out.push(format!("second static join error={}", r.error_code));
    // m1 reconciles with the new member: it must first revoke, then its epoch moves on.
    let tp = |ps: Vec<i32>| {
        Some(vec![TopicPartitions::default()
            .with_topic_id(topic_id)
            .with_partitions(ps)])
    };
    let r = c
        .send(beat(g, &m1, epoch).with_topic_partitions(tp(vec![0, 1, 2, 3])))
        .expect("beat");
    let kept: Vec<i32> = r
        .assignment
        .as_ref()
        .map(|a| {
            a.topic_partitions
                .iter()
                .flat_map(|t| t.partitions.clone())
                .collect()
        })
        .unwrap_or_default();
    out.push(format!(
        "revoking error={} epoch unchanged={} kept={}",
        r.error_code,
        r.member_epoch == epoch,
        kept.len()
    ));
    let r = c
        .send(beat(g, &m1, epoch).with_topic_partitions(tp(kept)))
        .expect("beat");
    out.push(format!(
        "revoked error={} epoch bumped={}",
        r.error_code,
        r.member_epoch > epoch
    ));
    let new_epoch = r.member_epoch;
    let r = c.send(commit(epoch)).expect("commit");
    out.push(format!(
        "commit with the previous epoch error={}",
        r.topics[0].partitions[0].error_code
    ));
    let r = c.send(commit(new_epoch)).expect("commit");
    out.push(format!(
        "commit with the new epoch error={}",
        r.topics[0].partitions[0].error_code
    ));
    let fetch = |member: Option<&str>, epoch: i32| {
        OffsetFetchRequest::default().with_groups(vec![
            offset_fetch_request::OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(sb(g)))
                .with_member_id(member.map(sb))
                .with_member_epoch(epoch)
                .with_topics(None),
        ])
    };
    for (label, member, e) in [
        ("member at its epoch", Some(m1.as_str()), new_epoch),
        ("member at its previous epoch", Some(m1.as_str()), epoch),
        ("unknown member", Some("nobody"), new_epoch),
        ("admin", None, -1),
    ] {
        let r = c.send(fetch(member, e)).expect("fetch");
        let committed: Vec<i64> = r.groups[0]
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.committed_offset))
            .collect();
        out.push(format!(
            "offset fetch {label} error={} committed={committed:?}",
            r.groups[0].error_code
        ));
    }
    let r = c
        .send(
            ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(sb(g)), GroupId(sb("wire-none"))]),
        )
        .expect("describe");
    let mut groups = r.groups.clone();
    groups.sort_by(|a, b| a.group_id.0.cmp(&b.group_id.0));
    for d in &groups {
        out.push(format!(
            "cg describe {} error={} members={} assignor={}",
            &*d.group_id.0,
            d.error_code,
            d.members.len(),
            &*d.assignor_name
        ));
    }
    let r = c
        .send(DescribeGroupsRequest::default().with_groups(vec![GroupId(sb(g))]))
        .expect("describe groups");
    let d = &r.groups[0];
    out.push(format!(
        "classic describe of consumer group error={} state={} protocol_type={}",
        d.error_code, &*d.group_state, &*d.protocol_type
    ));
    let r = c
        .send(ListGroupsRequest::default().with_types_filter(vec![sb("consumer")]))
        .expect("list");
    let mut listed: Vec<String> = r
        .groups
        .iter()
        .map(|l| {
            format!(
                "listed {} type={} protocol_type={}",
                &*l.group_id.0, &*l.group_type, &*l.protocol_type
            )
        })
        .collect();
    listed.sort();
    out.extend(listed);
    let r = c
        .send(ListGroupsRequest::default().with_types_filter(vec![sb("classic")]))
        .expect("list");
    out.push(format!(
        "classic list has it={}",
        r.groups.iter().any(|l| &*l.group_id.0 == g)
    ));
    let r = c.send(beat(g, &m1, -1)).expect("leave");
    out.push(format!(
        "leave error={} epoch={}",
        r.error_code, r.member_epoch
    ));
    let r = c.send(beat(g, &m1, epoch)).expect("beat after leave");
    out.push(format!("after leave error={}", r.error_code));
    out
}

fn expected_observations() -> Vec<String> {
    [
        "join error=0 assigned=4",
        "join epoch positive=true",
        "future epoch error=110",
        "unknown member error=25",
        "unknown group error=69",
        "unknown assignor error=112",
        "stale commit error=113",
        "current commit error=0",
        "static join error=0",
        "second static join error=111",
        "revoking error=0 epoch unchanged=true kept=2",
        "revoked error=0 epoch bumped=true",
        "commit with the previous epoch error=113",
        "commit with the new epoch error=0",
        "offset fetch member at its epoch error=0 committed=[0]",
        "offset fetch member at its previous epoch error=113 committed=[]",
        "offset fetch unknown member error=25 committed=[]",
        "offset fetch admin error=0 committed=[0]",
        "cg describe wire-g error=0 members=2 assignor=uniform",
        "cg describe wire-none error=69 members=0 assignor=",
        "classic describe of consumer group error=69 state=Dead protocol_type=",
        "listed wire-g type=consumer protocol_type=consumer",
        "classic list has it=false",
        "leave error=0 epoch=-1",
        "after leave error=25",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn kip848_wire_answers_on_kmirror() {
    let node = KmirrorNode::start();
    assert_eq!(wire_observations(&node), expected_observations());
}

#[test]
fn kip848_wire_answers_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    assert_eq!(wire_observations(&kafka), expected_observations());
}
