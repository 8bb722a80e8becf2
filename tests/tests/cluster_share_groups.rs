//! Share groups (KIP-932) on a three-node kmirror cluster: the group coordinator, the share
//! coordinators (`__share_group_state`, 50 partitions spread over the nodes) and the data
//! partitions' leaders are on different nodes, so the share state is initialized, read and
//! written across nodes (InitializeShareGroupState from the group coordinator, Read/Write
//! from the partition leaders).
//!
//! A Kafka 4.1.1 `kafka-console-share-consumer` reads 600 records (librdkafka's producer,
//! 6 partitions, replication factor 2) exactly once; DescribeShareGroupOffsets answers every
//! partition's start offset; then 600 more records, and a new console share consumer of the
//! same group reads exactly those: what the first one acknowledged is not delivered again
//! (its partitions' state was dropped by their leaders when its session ended and read back
//! from the share coordinators). Last, 600 more records while a member reads them and the
//! leader of partition 0 is killed: every one of them is still delivered (at least once: the
//! records the dead leader had handed out unacknowledged are delivered again by the new one).
//! Between rounds 2 and 3 a second group reads everything and is deleted with
//! `kafka-share-groups --delete`: its share state is gone from every share coordinator.

use std::collections::BTreeSet;
use std::time::Duration;

use kmirror_tests::cluster::{run_seq_producer, ClusterOpts, KmirrorCluster};
use kmirror_tests::helpers::group_id;
use kmirror_tests::{java, proc, python, share, WireClient};

const T: Duration = Duration::from_secs(120);
const TOPIC: &str = "share-events";
const GROUP: &str = "sg3";
const PARTITIONS: usize = 6;
const ROUND: u64 = 600;

fn tool(class: &str, boot: &str, args: &[&str]) -> proc::Ran {
    let ran = proc::run(
        java::tool(class)
            .args(["--bootstrap-server", boot])
            .args(args),
        T,
    );
    assert!(
        ran.status.success(),
        "{class} {args:?}: {}\n{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 30)
    );
    ran
}

/// Produces `ROUND` records with librdkafka; the (partition, offset) of each.
fn produce(boot: &str) -> BTreeSet<(i32, i64)> {
    produce_n(boot, ROUND)
}

/// Produces `n` records with librdkafka; the (partition, offset) of each.
fn produce_n(boot: &str, n: u64) -> BTreeSet<(i32, i64)> {
    let (acks, acked, errors, errs) = run_seq_producer(
        python::script("seq_producer.py").args([
            boot,
            TOPIC,
            &PARTITIONS.to_string(),
            &n.to_string(),
        ]),
        "seq_producer.py",
        T,
    );
    assert_eq!((acked, errors), (n, 0), "{errs:?}");
    acks.iter().map(|(p, _, o)| (*p, *o)).collect()
}

/// `Partition:<p>\tOffset:<o>\t<value>` lines as (partition, offset).
fn parse_records<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<(i32, i64)> {
    lines
        .filter_map(|l| {
            let mut f = l.split('\t');
            let p = f.next()?.strip_prefix("Partition:")?.parse().ok()?;
            let o = f.next()?.strip_prefix("Offset:")?.parse().ok()?;
            Some((p, o))
        })
        .collect()
}

/// A console share consumer of `GROUP` reading `n` records: the (partition, offset) of each
/// record it printed.
fn consume(boot: &str, n: u64) -> Vec<(i32, i64)> {
    consume_group(boot, GROUP, n)
}

/// [`consume`] for `group`.
fn consume_group(boot: &str, group: &str, n: u64) -> Vec<(i32, i64)> {
    let ran = proc::run(
        java::tool("org.apache.kafka.tools.consumer.ConsoleShareConsumer")
            .args(["--bootstrap-server", boot])
            .args(["--topic", TOPIC, "--group", group])
            .args(["--max-messages", &n.to_string(), "--timeout-ms", "60000"])
            .args(["--property", "print.partition=true"])
            .args(["--property", "print.offset=true"]),
        Duration::from_secs(180),
    );
    let values = parse_records(ran.stdout.lines());
    if values.len() as u64 != n {
        eprintln!(
            "console share consumer read {} of {n}:\n{}",
            values.len(),
            proc::last_lines(&ran.stderr, 40)
        );
    }
    values
}

/// DescribeShareGroupOffsets v0 of `GROUP` (all its initialized partitions) at its
/// coordinator: (partition, error, start offset) sorted.
fn start_offsets(boot: &str) -> Vec<(i32, i16, i64)> {
    use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
    use kafka_protocol::messages::{DescribeShareGroupOffsetsRequest, FindCoordinatorRequest};
    let first = boot.split(',').next().unwrap();
    let coord = proc::wait_for(T, "the group's coordinator", || {
        let r = WireClient::connect(first)
            .ok()?
            .send(
                FindCoordinatorRequest::default()
                    .with_key_type(0)
                    .with_coordinator_keys(vec![kmirror_tests::helpers::str_bytes(GROUP)]),
            )
            .ok()?;
        let k = r.coordinators.first()?;
        (k.error_code == 0).then(|| format!("{}:{}", k.host.as_str(), k.port))
    });
    let r = WireClient::connect(&coord)
        .and_then(|mut c| {
            c.send_at(
                DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                    DescribeShareGroupOffsetsRequestGroup::default()
                        .with_group_id(group_id(GROUP))
                        .with_topics(None),
                ]),
                0,
            )
        })
        .expect("DescribeShareGroupOffsets");
    let mut out: Vec<(i32, i16, i64)> = r
        .groups
        .iter()
        .flat_map(|g| g.topics.iter())
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.error_code, p.start_offset))
        .collect();
    out.sort();
    out
}

/// ReadShareGroupStateSummary v0 of `group` on every partition of the topic, each answered
/// by the node that leads its `__share_group_state` partition (the others answer
/// NOT_COORDINATOR): (partition, state epoch, start offset) sorted; None while a partition
/// has no answer.
fn state_summaries(boot: &str, group: &str) -> Option<Vec<(i32, i32, i64)>> {
    use kafka_protocol::messages::read_share_group_state_summary_request as rq;
    use kafka_protocol::messages::ReadShareGroupStateSummaryRequest;
    let first = boot.split(',').next().unwrap();
    let topic = kmirror_tests::mirror::topic_id(first, TOPIC);
    let mut out = Vec::new();
    for p in 0..PARTITIONS as i32 {
        let req = ReadShareGroupStateSummaryRequest::default()
            .with_group_id(kmirror_tests::helpers::str_bytes(group))
            .with_topics(vec![rq::ReadStateSummaryData::default()
                .with_topic_id(topic)
                .with_partitions(vec![rq::PartitionData::default()
                    .with_partition(p)
                    .with_leader_epoch(-1)])]);
        let answer = boot.split(',').find_map(|addr| {
            let r = WireClient::connect(addr)
                .ok()?
                .send_at(req.clone(), 0)
                .ok()?;
            let a = r.results.first()?.partitions.first()?.clone();
            (a.error_code == 0).then_some((p, a.state_epoch, a.start_offset))
        })?;
        out.push(answer);
    }
    Some(out)
}

#[test]
fn share_groups_on_three_nodes_deliver_each_record_once_across_share_coordinators() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut cluster = KmirrorCluster::start(3, ClusterOpts::default());
    cluster.dump_logs_on_panic(80, |c| {
        let boot = c.bootstrap();
        tool(
            "org.apache.kafka.tools.FeatureCommand",
            &boot,
            &["upgrade", "--feature", "share.version=1"],
        );
        let mut w = WireClient::connect(boot.split(',').next().unwrap()).expect("connect");
        assert_eq!(w.create_topic(TOPIC, PARTITIONS as i32, 2, &[]).unwrap(), 0);
        share::set_group_configs(&boot, GROUP, "share.auto.offset.reset=earliest");

        // Round 1: every record once.
        let first = produce(&boot);
        let read = consume(&boot, ROUND);
        let distinct: BTreeSet<(i32, i64)> = read.iter().copied().collect();
        assert_eq!(read.len(), distinct.len(), "a record was delivered twice");
        assert_eq!(
            distinct, first,
            "round 1 read other records than were produced"
        );

        // Every partition's share state was written on its share coordinator.
        let offsets = proc::wait_for(T, "the start offsets of all 6 partitions", || {
            let o = start_offsets(&boot);
            (o.len() == PARTITIONS && o.iter().all(|(_, e, s)| *e == 0 && *s >= 0)).then_some(o)
        });
        eprintln!("start offsets after round 1: {offsets:?}");

        // Round 2: a new member reads the new records only.
        let second = produce(&boot);
        let read = consume(&boot, ROUND);
        let distinct: BTreeSet<(i32, i64)> = read.iter().copied().collect();
        assert_eq!(read.len(), distinct.len(), "a record was delivered twice");
        assert!(
            distinct.is_disjoint(&first),
            "round 2 read records round 1 had acknowledged"
        );
        assert_eq!(
            distinct, second,
            "round 2 read other records than were produced"
        );

        // Deleting a group deletes its share state on every share coordinator, the other
        // nodes' too.
        share::set_group_configs(&boot, "sg3-del", "share.auto.offset.reset=earliest");
        let read = consume_group(&boot, "sg3-del", 2 * ROUND);
        assert_eq!(
            read.len(),
            2 * ROUND as usize,
            "sg3-del read rounds 1 and 2"
        );
        let before = proc::wait_for(T, "sg3-del's state on all 6 partitions", || {
            state_summaries(&boot, "sg3-del")
                .filter(|s| s.iter().all(|(_, e, o)| *e > 0 && *o >= 0))
        });
        eprintln!("sg3-del's share state before deletion: {before:?}");
        tool(
            "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
            &boot,
            &["--delete", "--group", "sg3-del"],
        );
        proc::wait_for(
            T,
            "sg3-del's state gone from every share coordinator",
            || {
                state_summaries(&boot, "sg3-del")
                    .filter(|s| s.iter().all(|(_, e, o)| *e == 0 && *o == -1))
            },
        );

        // Round 3: a member reads 300 records, the leader of partition 0 dies, 300 more
        // come (to the new leaders); the member reads them all.
        let third_a = produce_n(&boot, ROUND / 2);
        let victim = w
            .partition_info(TOPIC, 0)
            .expect("partition info")
            .leader_id;
        let mut member = proc::LineChild::spawn(
            java::tool("org.apache.kafka.tools.consumer.ConsoleShareConsumer")
                .args(["--bootstrap-server", &boot])
                .args(["--topic", TOPIC, "--group", GROUP])
                .args(["--timeout-ms", "60000"])
                .args(["--property", "print.partition=true"])
                .args(["--property", "print.offset=true"]),
        );
        let seen = |m: &proc::LineChild| -> BTreeSet<(i32, i64)> {
            parse_records(m.lines().iter().map(String::as_str))
                .into_iter()
                .collect()
        };
        proc::wait_for(T, "the member's first 300 records", || {
            seen(&member).is_superset(&third_a).then_some(())
        });
        eprintln!("killing node {victim}, the leader of {TOPIC}-0");
        c.kill(victim as usize);
        let third_b = produce_n(&boot, ROUND / 2);
        let third: BTreeSet<(i32, i64)> = third_a.union(&third_b).copied().collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        while member.exited().is_none() && std::time::Instant::now() < deadline {
            if seen(&member).is_superset(&third) {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let lines = member.lines();
        let read = parse_records(lines.iter().map(String::as_str));
        let distinct: BTreeSet<(i32, i64)> = read.iter().copied().collect();
        let missing: Vec<&(i32, i64)> = third.difference(&distinct).collect();
        eprintln!(
            "round 3: {} records read, {} distinct, {} of {ROUND} missing",
            read.len(),
            distinct.len(),
            missing.len()
        );
        if !missing.is_empty() {
            eprintln!("member's log:\n{}", member.stderr_tail(60));
        }
        assert!(
            missing.is_empty(),
            "records lost when the leader died: {missing:?}"
        );
        assert!(
            distinct.is_disjoint(&first) && distinct.is_disjoint(&second),
            "round 3 read records acknowledged before"
        );
    });
}
