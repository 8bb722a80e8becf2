//! Issue 11: `offsets.retention.minutes` (KIP-211). Apache Kafka 4.1.1 and kmirror both run
//! with offsets.retention.minutes=1 (the minimum) and offsets.retention.check.interval.ms=1000.
//! A classic group (the Java console consumer) reads and commits, then leaves (Empty); a
//! standalone librdkafka commit goes to another group. Right after, both groups are listed and
//! their offsets fetched; about a minute later, on both brokers, OffsetFetch answers no offset
//! (librdkafka's -1001) and ListGroups no longer lists the groups. kmirror must not expire them
//! earlier than a minute either.

use std::time::{Duration, Instant};

use kafka_protocol::messages::ListGroupsRequest;
use kmirror_tests::helpers::{committed_p0, now_ms};
use kmirror_tests::java::{self, tools};
use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::{proc, python, KafkaCluster, KmirrorNode, WireClient};

const TOPIC: &str = "ret";

fn groups(boot: &str) -> Vec<String> {
    let mut c = WireClient::connect(boot).expect("connect");
    let mut g: Vec<String> = c
        .send(ListGroupsRequest::default())
        .expect("ListGroups")
        .groups
        .iter()
        .map(|g| g.group_id.to_string())
        .collect();
    g.sort();
    g
}

/// Creates the topic, commits through a classic group that then leaves and through a
/// standalone commit; returns when both are visible, with the time the classic group became
/// empty (its consumer exited).
fn commit_both(boot: &str) -> Instant {
    let mut c = WireClient::connect(boot).expect("connect");
    assert_eq!(c.create_topic(TOPIC, 1, 1, &[]).expect("create"), 0);
    let now = now_ms();
    let vals: Vec<Vec<u8>> = (0..5).map(|i| format!("v{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = vals.iter().map(Vec::as_slice).collect();
    let batch = kmirror_tests::records::batch(&refs, now);
    // Right after CreateTopics a Kafka broker can list itself as the leader in Metadata
    // before its replica manager has the partition (NOT_LEADER_OR_FOLLOWER, 6): retriable,
    // and a producer retries it, so this does too.
    let deadline = Instant::now() + Duration::from_secs(15);
    let code = loop {
        let code = c
            .produce_raw(TOPIC, 0, batch.clone(), -1)
            .expect("produce")
            .0;
        if code != 6 || Instant::now() > deadline {
            break code;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(code, 0);
    java::run_tool(
        tools::CONSOLE_CONSUMER,
        &[
            "--bootstrap-server",
            boot,
            "--topic",
            TOPIC,
            "--group",
            "classic-g",
            "--from-beginning",
            "--max-messages",
            "5",
            "--timeout-ms",
            "30000",
        ],
        Duration::from_secs(90),
    );
    let emptied = Instant::now();
    let ran = proc::run_ok(
        python::script("commit_offset.py").args([boot, "alone-g", TOPIC, "0", "3"]),
        Duration::from_secs(60),
    );
    assert!(ran.stdout.contains("OK"), "{}", ran.stdout);
    assert_eq!(committed_p0(boot, "classic-g", TOPIC), 5);
    assert_eq!(committed_p0(boot, "alone-g", TOPIC), 3);
    assert_eq!(groups(boot), ["alone-g", "classic-g"]);
    emptied
}

fn expired(boot: &str) -> bool {
    groups(boot).is_empty()
        && committed_p0(boot, "classic-g", TOPIC) == -1001
        && committed_p0(boot, "alone-g", TOPIC) == -1001
}

#[test]
fn committed_offsets_of_empty_groups_expire_after_offsets_retention_minutes() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::start_with(KafkaOptions {
        props: vec![
            ("offsets.retention.minutes".into(), "1".into()),
            ("offsets.retention.check.interval.ms".into(), "1000".into()),
        ],
        ..KafkaOptions::default()
    });
    let node = KmirrorNode::builder()
        .args(&[
            "--offsets-retention-minutes",
            "1",
            "--offsets-retention-check-interval-ms",
            "1000",
        ])
        .start();
    let (kb, mb) = (kafka.bootstrap(), node.addr());
    let k0 = commit_both(&kb);
    let m0 = commit_both(&mb);
    let (mut k_done, mut m_done) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(110);
    while (k_done.is_none() || m_done.is_none()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(3));
        if k_done.is_none() && expired(&kb) {
            k_done = Some(k0.elapsed());
        }
        if m_done.is_none() {
            if expired(&mb) {
                m_done = Some(m0.elapsed());
            } else if committed_p0(&mb, "classic-g", TOPIC) == -1001 {
                // The classic group's offsets went first: not before a minute of being empty.
                let after = m0.elapsed();
                assert!(
                    after >= Duration::from_secs(58),
                    "kmirror expired too early: {after:?}"
                );
            }
        }
    }
    eprintln!("expired after: kafka {k_done:?}, kmirror {m_done:?}");
    let k = k_done.expect("Kafka expires the offsets and groups");
    let m = m_done.expect("kmirror expires the offsets and groups as Kafka does");
    assert!(k >= Duration::from_secs(58), "Kafka too early? {k:?}");
    assert!(
        m >= Duration::from_secs(58),
        "kmirror expired too early: {m:?}"
    );
}
