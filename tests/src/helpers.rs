//! Small helpers that several test files share, one copy instead of one per file: the clock,
//! protocol strings, addresses, tool runs and process start-up that no runner module owns.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::{GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;

/// Milliseconds since the Unix epoch: a record timestamp of "now".
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// A protocol string (`StrBytes`) from `v`.
pub fn str_bytes(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A protocol topic name from `v`.
pub fn topic_name(v: &str) -> TopicName {
    TopicName(str_bytes(v))
}

/// A protocol group id from `v`.
pub fn group_id(v: &str) -> GroupId {
    GroupId(str_bytes(v))
}

/// The port of a `host:port` address.
pub fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .expect("port")
        .parse()
        .expect("port")
}

/// `kafka-acls --bootstrap-server boot ARGS…` (90 s); its stdout. Panics unless it exits 0.
pub fn acls_tool(boot: &str, args: &[&str]) -> String {
    let mut all = vec!["--bootstrap-server", boot];
    all.extend_from_slice(args);
    crate::java::run_tool(
        crate::java::tools::ACL_COMMAND,
        &all,
        Duration::from_secs(90),
    )
    .stdout
}

/// Every record of `topic` (`partitions` partitions) read back with librdkafka
/// (`record_dump.py`, 180 s) through `addr`: (partition, offset) -> value. Panics unless the
/// dump finished.
pub fn read_back(addr: &str, topic: &str, partitions: i32) -> BTreeMap<(i32, i64), String> {
    let ran = crate::proc::run(
        crate::python::script("record_dump.py").args([addr, topic, &partitions.to_string()]),
        Duration::from_secs(180),
    );
    let mut stored = BTreeMap::new();
    for l in ran.stdout.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let ["R", p, o, _key, value] = f.as_slice() {
            stored.insert((p.parse().unwrap(), o.parse().unwrap()), value.to_string());
        }
    }
    assert!(
        ran.stdout.contains("DONE"),
        "read back: {}\n{}",
        crate::proc::last_lines(&ran.stdout, 10),
        crate::proc::last_lines(&ran.stderr, 10)
    );
    stored
}

/// The committed offset of `group` on partition 0 of `topic` (negative: none), read with
/// librdkafka (`committed.py`, 60 s).
pub fn committed_p0(boot: &str, group: &str, topic: &str) -> i64 {
    let ran = crate::proc::run_ok(
        crate::python::script("committed.py").args([boot, group, topic, "1"]),
        Duration::from_secs(60),
    );
    ran.stdout
        .lines()
        .find_map(|l| l.strip_prefix("C 0 "))
        .and_then(|o| o.trim().parse().ok())
        .unwrap_or_else(|| panic!("committed.py: {}", ran.stdout))
}

/// Starts a Kafka cluster and a kmirror node side by side (each takes seconds), with `kafka`
/// and `kmirror` on two threads.
pub fn start_kafka_and_kmirror(
    kafka: impl FnOnce() -> crate::KafkaCluster + Send,
    kmirror: impl FnOnce() -> crate::KmirrorNode + Send,
) -> (crate::KafkaCluster, crate::KmirrorNode) {
    std::thread::scope(|s| {
        let k = s.spawn(kafka);
        let m = s.spawn(kmirror);
        (k.join().expect("kafka"), m.join().expect("kmirror"))
    })
}

/// Commits as a client does: FindCoordinator first (which creates `__consumer_offsets` on
/// first use, as on Kafka), then OffsetCommit, asked again while the coordinator loads.
pub fn commit_offset(boot: &str, group: &str, topic: &str, offset: i64) {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        FindCoordinatorRequest, GroupId, OffsetCommitRequest, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut c = crate::wire::WireClient::connect(boot).unwrap();
        let find = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group.into()))
            .with_key_type(0);
        c.send_at(find, 3).expect("FindCoordinator");
        let r = c.send_at(req.clone(), 8).expect("OffsetCommit");
        let code = r.topics[0].partitions[0].error_code;
        if code == 0 {
            return;
        }
        // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: retriable.
        assert!(
            matches!(code, 14..=16) && std::time::Instant::now() < deadline,
            "OffsetCommit: {code}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The committed offset of `group` on partition 0 of `topic` (OffsetFetch v7; -1: none).
pub fn fetch_offset(boot: &str, group: &str, topic: &str) -> i64 {
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest};
    use kafka_protocol::protocol::StrBytes;
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_topics(None);
    let r = crate::wire::WireClient::connect(boot)
        .unwrap()
        .send_at(req, 7)
        .expect("OffsetFetch");
    r.topics
        .iter()
        .filter(|t| t.name.as_str() == topic)
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == 0)
        .map_or(-1, |p| p.committed_offset)
}

/// Produces `n` batches of two records (`{tag}-{i}-a`, `-b`) to partition 0 of `topic`.
pub fn produce_batches(boot: &str, topic: &str, n: usize, tag: &str) {
    let mut c = crate::wire::WireClient::connect(boot).expect("connect");
    for i in 0..n {
        let v1 = format!("{tag}-{i}-a");
        let v2 = format!("{tag}-{i}-b");
        let b = crate::records::batch(&[v1.as_bytes(), v2.as_bytes()], 1_700_000_000_000);
        let (code, _) = c.produce_raw(topic, 0, b, -1).expect("produce");
        assert_eq!(code, 0, "produce to {boot} {topic}");
    }
}
