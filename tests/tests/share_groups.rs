//! KIP-932 share groups (Kafka 4.1) as a user meets them with Kafka 4.1.1's own tools and on
//! the wire: the one scenario of [`scenario`] runs on Apache Kafka 4.1.1 and on kmirror, and
//! the lines it records (error codes, tool exit codes and output, which values a share
//! consumer reads) must be the same.
//!
//! The scenario: a topic of 3 partitions with 300 keyed records `v0`..`v299`; before
//! `share.version` is enabled, a ShareGroupHeartbeat and a ShareGroupDescribe on the wire,
//! what ApiVersions advertises and a `kafka-console-share-consumer` (which fails);
//! `kafka-features upgrade --feature share.version=1` and `describe`;
//! `kafka-configs --entity-type groups` setting `share.auto.offset.reset=earliest`
//! for group `sg`; `kafka-console-share-consumer` reading all 300 exactly once; what
//! `kafka-share-groups` lists and describes; a second group `sg-latest` without the config,
//! which starts at the end of the log and reads nothing; ShareGroupDescribe of `sg`, an unknown
//! group and the empty name once `sg` is empty again; a raw member of `sg-drop` (its own
//! heartbeats and ShareFetch) that acquires all 300 records and drops its connection without
//! acknowledging any, after which a console share consumer still reads all 300 (nothing lost);
//! `kafka-share-groups --delete-offsets` of `sg`, after which `sg` reads all 300 again; a
//! group with `share.isolation.level=read_committed` on a topic holding an aborted and a
//! committed transaction (librdkafka's transactional producer) reads only the committed one;
//! the second client, librdkafka's ShareConsumer (`tests/python/share_consume.py`), reading
//! all 300 exactly once in a fresh group (`KMIRROR_SHARE_RDKAFKA_DEBUG=cgrp,fetch` prints its
//! debug log; on Kafka only a member whose id Kafka 4.1.1 can parse, see below); a raw member that releases one partition's records, rejects another's and
//! accepts the third's, after which the next consumer reads exactly the released ones; and
//! Kafka's VerifiableShareConsumer, two members acknowledging every record once between them,
//! then a member SIGKILLed right after it consumed, whose records the next member gets
//! unless the killed one had acknowledged them; `kafka-share-groups --delete` of a group,
//! after which its share state is gone (ReadShareGroupStateSummary); and a raw member that
//! acquires all 300 records and dies (no leave, no acknowledgement), whose records the next
//! member acquires again, with delivery count 2, once the dead one's session and locks expired
//! (the one step whose timing does not decide whether it tests anything: a killed
//! VerifiableShareConsumer has often acknowledged all it consumed).
//!
//! Running one half only (each takes a minute or two):
//! - `KMIRROR_SHARE_KAFKA_ONLY=1`: only Apache Kafka, its lines printed and compared with
//!   [`KAFKA_4_1_1`] (the answers recorded from Kafka 4.1.1, which kmirror must give);
//! - `KMIRROR_SHARE_KMIRROR_ONLY=1`: only kmirror, compared with [`KAFKA_4_1_1`].
//!
//! Without either, both run and kmirror's lines are compared with Kafka's of the same run.
//! `cargo test --profile ci -p kmirror-tests --test share_groups -- --nocapture`.
//!
//! Kafka 4.1.1's answers that may surprise (all in [`KAFKA_4_1_1`]):
//! - the share APIs (76-79, 90-92) are advertised in ApiVersions before `share.version` is
//!   finalized; ShareGroupHeartbeat and ShareGroupDescribe then answer UNSUPPORTED_VERSION
//!   (35) without a message; `share.version` is listed as finalized only once it is 1;
//! - the tools exit 0 even when they fail: `kafka-console-share-consumer` on a timeout
//!   (`TimeoutException: null`, or UNSUPPORTED_VERSION before the feature is on),
//!   `kafka-share-groups --describe` of an unknown group;
//! - after `sg` read and acknowledged all 300 records (one batch per partition), its persisted
//!   start offset is still 0 on every partition (DescribeShareGroupOffsets and
//!   `--describe --offsets`): Kafka writes the share-group state with the start offset from
//!   before the acknowledgement, and nothing is written after it; `sg-latest`, which never
//!   read a record, has start offset -1 (`-` in the tool);
//! - the console share consumer leaves the group when it exits: the group is Empty at once;
//! - ShareFetch parses the member id as URL-safe base64: librdkafka's ids are standard base64,
//!   and one holding '+' or '/' (about every second one) gets UNKNOWN_SERVER_ERROR on every
//!   ShareFetch and reads nothing. The librdkafka step skips such members on Kafka only;
//!   kmirror serves any member id, as later Kafka versions do;
//! - ShareGroupDescribe answers the groups in an order of its own (sorted here); the empty
//!   name is INVALID_GROUP_ID (24), an unknown one GROUP_ID_NOT_FOUND (69, "Group nope not
//!   found.").

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    ApiVersionsRequest, ShareGroupDescribeRequest, ShareGroupHeartbeatRequest,
};
use kmirror_tests::helpers::{group_id, str_bytes, topic_name};
use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::{proc, python, records, KafkaCluster, KmirrorNode, WireClient};

/// The share group APIs: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge,
/// and the admin ones: DescribeShareGroupOffsets, AlterShareGroupOffsets,
/// DeleteShareGroupOffsets.
const SHARE_API_KEYS: [i16; 7] = [76, 77, 78, 79, 90, 91, 92];
const TOPIC: &str = "sg-t";
const RECORDS: usize = 300;

use kmirror_tests::share::{self, coordinator, run_tool, FEATURE_COMMAND, SHARE_GROUP_COMMAND};

/// What Apache Kafka 4.1.1 answers (recorded with `KMIRROR_SHARE_KAFKA_ONLY=1`).
const KAFKA_4_1_1: &[&str] = &[
    "create sg-t: 0",
    "ApiVersions before share.version: key 76 Some((1, 1))",
    "ApiVersions before share.version: key 77 Some((1, 1))",
    "ApiVersions before share.version: key 78 Some((1, 1))",
    "ApiVersions before share.version: key 79 Some((1, 1))",
    "ApiVersions before share.version: key 90 Some((0, 0))",
    "ApiVersions before share.version: key 91 Some((0, 0))",
    "ApiVersions before share.version: key 92 Some((0, 0))",
    "ApiVersions before share.version: share.version supported [\"0..1\"] finalized []",
    "ShareGroupHeartbeat v1 sg-off: error 35 None",
    "ShareGroupDescribe v1 \"sg-off\": error 35 None state \"\" assignor \"\" members 0",
    "kafka-console-share-consumer --group sg-off --max-messages 1: exit Some(0)",
    "  0 values, 0 distinct",
    "  values []",
    "  ! org.apache.kafka.common.errors.UnsupportedVersionException: The cluster does not support the share group protocol. To use share groups, the cluster must have the share group protocol enabled.",
    "  ! Processed a total of 0 messages",
    "kafka-features upgrade --feature share.version=1: exit Some(0)",
    "  share.version was upgraded to 1.",
    "kafka-features describe: exit Some(0)",
    "  Feature: share.version SupportedMinVersion: 0 SupportedMaxVersion: 1 FinalizedVersionLevel: 1",
    "ApiVersions after share.version=1: key 76 Some((1, 1))",
    "ApiVersions after share.version=1: key 77 Some((1, 1))",
    "ApiVersions after share.version=1: key 78 Some((1, 1))",
    "ApiVersions after share.version=1: key 79 Some((1, 1))",
    "ApiVersions after share.version=1: key 90 Some((0, 0))",
    "ApiVersions after share.version=1: key 91 Some((0, 0))",
    "ApiVersions after share.version=1: key 92 Some((0, 0))",
    "ApiVersions after share.version=1: share.version supported [\"0..1\"] finalized [\"1..1\"]",
    "kafka-configs --entity-type groups --entity-name sg --alter --add-config share.auto.offset.reset=earliest: exit Some(0)",
    "  Completed updating config for group sg.",
    "kafka-console-share-consumer --group sg --max-messages 300: exit Some(0)",
    "  300 values, 300 distinct",
    "  exactly v0..v299: true",
    "  ! Processed a total of 300 messages",
    "sg Empty within 60 s: true",
    "kafka-share-groups --list: exit Some(0)",
    "  sg",
    "kafka-share-groups --list --state: exit Some(0)",
    "  GROUP STATE",
    "  sg Empty",
    "kafka-share-groups --describe --group sg: exit Some(0)",
    "  GROUP TOPIC PARTITION START-OFFSET",
    "  sg sg-t 0 0",
    "  sg sg-t 1 0",
    "  sg sg-t 2 0",
    "kafka-share-groups --describe --group sg --offsets: exit Some(0)",
    "  GROUP TOPIC PARTITION START-OFFSET",
    "  sg sg-t 0 0",
    "  sg sg-t 1 0",
    "  sg sg-t 2 0",
    "kafka-share-groups --describe --group sg --offsets --verbose: exit Some(0)",
    "  GROUP TOPIC PARTITION LEADER-EPOCH START-OFFSET",
    "  sg sg-t 0 0 0",
    "  sg sg-t 1 0 0",
    "  sg sg-t 2 0 0",
    "kafka-share-groups --describe --group sg --members: exit Some(0)",
    "  ! Share group 'sg' has no active members.",
    "kafka-share-groups --describe --group sg --state: exit Some(0)",
    "  GROUP COORDINATOR (ID) STATE #MEMBERS",
    "  sg <broker> Empty 0",
    "  ! Share group 'sg' has no active members.",
    "kafka-share-groups --describe --group nope: exit Some(0)",
    "  Error: Executing share group command failed due to org.apache.kafka.common.errors.GroupIdNotFoundException: Group nope not found.",
    "  ! java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.GroupIdNotFoundException: Group nope not found.",
    "DescribeShareGroupOffsets v0 sg: error 0 None",
    "  sg-t-0: error 0 start 0 epoch 0",
    "  sg-t-1: error 0 start 0 epoch 0",
    "  sg-t-2: error 0 start 0 epoch 0",
    "kafka-console-share-consumer --group sg-latest --max-messages 1: exit Some(0)",
    "  0 values, 0 distinct",
    "  values []",
    "  ! org.apache.kafka.common.errors.TimeoutException: null",
    "  ! Processed a total of 0 messages",
    "sg-latest Empty within 60 s: true",
    "kafka-share-groups --list --state: exit Some(0)",
    "  GROUP STATE",
    "  sg Empty",
    "  sg-latest Empty",
    "kafka-share-groups --describe --group sg-latest --offsets: exit Some(0)",
    "  GROUP TOPIC PARTITION START-OFFSET",
    "  sg-latest sg-t 0 -",
    "  sg-latest sg-t 1 -",
    "  sg-latest sg-t 2 -",
    "DescribeShareGroupOffsets v0 sg-latest: error 0 None",
    "  sg-t-0: error 0 start -1 epoch 0",
    "  sg-t-1: error 0 start -1 epoch 0",
    "  sg-t-2: error 0 start -1 epoch 0",
    "sg Empty within 60 s: true",
    "ShareGroupDescribe v1 \"\": error 24 None state \"\" assignor \"\" members 0",
    "ShareGroupDescribe v1 \"nope\": error 69 Some(\"Group nope not found.\") state \"\" assignor \"\" members 0",
    "ShareGroupDescribe v1 \"sg\": error 0 None state \"Empty\" assignor \"simple\" members 0",
    "kafka-configs --entity-type groups --entity-name sg-drop --alter --add-config share.auto.offset.reset=earliest: exit Some(0)",
    "  Completed updating config for group sg-drop.",
    "raw member of sg-drop: acquired 300 records, delivery counts {1}",
    "raw member of sg-drop leaves: Ok(0)",
    "kafka-console-share-consumer --group sg-drop --max-messages 300: exit Some(0)",
    "  300 values, 300 distinct",
    "  exactly v0..v299: true",
    "  ! Processed a total of 300 messages",
    "sg-drop Empty within 60 s: true",
    "kafka-share-groups --delete-offsets --group sg --topic sg-t: exit Some(0)",
    "  TOPIC STATUS",
    "  sg-t Successful",
    "kafka-share-groups --delete-offsets --group sg --topic no-such-topic: exit Some(0)",
    "  TOPIC STATUS",
    "  no-such-topic Error: This server does not host this topic-partition.",
    "DescribeShareGroupOffsets v0 sg: error 0 None",
    "kafka-console-share-consumer --group sg --max-messages 300: exit Some(0)",
    "  300 values, 300 distinct",
    "  exactly v0..v299: true",
    "  ! Processed a total of 300 messages",
    "sg Empty within 60 s: true",
    "create sg-txn: 0",
    "txn_producer.py aborted: ABORTED",
    "txn_producer.py committed: COMMITTED",
    "kafka-configs sg-rc read_committed: exit Some(0)",
    "  Completed updating config for group sg-rc.",
    "kafka-console-share-consumer --group sg-rc (read_committed): exit Some(0)",
    "  values [\"committed:0\", \"committed:1\", \"committed:2\", \"committed:3\", \"committed:4\", \"committed:5\", \"committed:6\", \"committed:7\", \"committed:8\", \"committed:9\"]",
    "  ! Processed a total of 10 messages",
    "kafka-configs --entity-type groups --entity-name sg-py --alter --add-config share.auto.offset.reset=earliest: exit Some(0)",
    "  Completed updating config for group sg-py.",
    "share_consume.py --group sg-py: exit Some(0), 300 records",
    "  every record once: true",
    "sg-py Empty within 60 s: true",
    "kafka-configs --entity-type groups --entity-name sg-ack --alter --add-config share.auto.offset.reset=earliest: exit Some(0)",
    "  Completed updating config for group sg-ack.",
    "raw member of sg-ack: acquired 300 records",
    "ShareAcknowledge v1 release/reject/accept: error 0 partitions [(0, 0), (1, 0), (2, 0)]",
    "raw member of sg-ack leaves: Ok(0)",
    "the next consumer of sg-ack: 100 values, exactly the released partition 0's: true",
    "kafka-console-share-consumer --group sg-ack --max-messages 1: exit Some(0)",
    "  0 values, 0 distinct",
    "  values []",
    "  ! org.apache.kafka.common.errors.TimeoutException: null",
    "  ! Processed a total of 0 messages",
    "sg-ack Empty within 60 s: true",
    "ReadShareGroupStateSummary v0 sg-ack before the group is deleted",
    "  sg-t-0: error 0 state epoch > 0: true start >= 0",
    "  sg-t-1: error 0 state epoch > 0: true start >= 0",
    "  sg-t-2: error 0 state epoch > 0: true start >= 0",
    "kafka-share-groups --delete --group sg-ack: exit Some(0)",
    "  Deletion of requested share groups ('sg-ack') was successful.",
    "ReadShareGroupStateSummary v0 sg-ack after",
    "  sg-t-0: error 0 state epoch > 0: false start -1",
    "  sg-t-1: error 0 state epoch > 0: false start -1",
    "  sg-t-2: error 0 state epoch > 0: false start -1",
    "VerifiableShareConsumer x2 sg-v2: 300 acknowledged, 300 distinct, every record: true",
    "VerifiableShareConsumer killed in sg-vk after consuming: consumed some: true",
    "  the next member: read each once: true, none the killed one acknowledged: true, every record delivered to one of them: true",
    "kafka-configs --entity-type groups --entity-name sg-dead --alter --add-config share.auto.offset.reset=earliest: exit Some(0)",
    "  Completed updating config for group sg-dead.",
    "raw member of sg-dead dies holding 300 acquired records, delivery counts {1}",
    "  the next member acquires 300 records, delivery counts {1}, the same ones: true",
    "  the next member leaves: Ok(0)",
];

/// A tool's run as lines: its exit code, its stdout (whitespace collapsed, empty lines
/// dropped, the coordinator's address and id replaced) and what it told the user on stderr.
fn tool_lines(what: &str, boot: &str, ran: &proc::Ran) -> Vec<String> {
    let mut out = vec![format!("{what}: exit {:?}", ran.status.code())];
    out.extend(
        ran.stdout
            .lines()
            .map(|l| normalize(l, boot))
            .filter(|l| !l.is_empty())
            .map(|l| format!("  {l}")),
    );
    out.extend(stderr_lines(&ran.stderr, boot));
    out
}

/// The lines of a tool's stderr meant for the user: not its log lines (`[12:00:00.000] WARN
/// …`) and not stack traces (frames, `Caused by:`), each prefixed with `!`.
fn stderr_lines(stderr: &str, boot: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| {
            !(l.starts_with('[')
                || l.starts_with(char::is_whitespace)
                || l.starts_with("Caused by:")
                || l.trim().is_empty())
        })
        .map(|l| format!("  ! {}", normalize(l, boot)))
        .collect()
}

/// Whitespace collapsed; a `host:port` of the broker becomes `<broker>` and a node id in
/// parentheses after it (`(1)`) is dropped: kmirror and Kafka differ there legitimately.
fn normalize(line: &str, boot: &str) -> String {
    let mut tokens = Vec::new();
    let mut after_broker = false;
    for t in line.split_whitespace() {
        let is_id = t.len() > 2
            && t.starts_with('(')
            && t.ends_with(')')
            && t[1..t.len() - 1].bytes().all(|b| b.is_ascii_digit());
        if after_broker && is_id {
            after_broker = false;
            continue;
        }
        after_broker = false;
        if !boot.is_empty() && boot.split(',').any(|b| b == t) {
            tokens.push("<broker>");
            after_broker = true;
        } else {
            tokens.push(t);
        }
    }
    tokens.join(" ")
}

/// ApiVersions: the share APIs' version ranges and `share.version` as supported and
/// finalized (v4: v3 leaves out features whose minimum version is 0).
fn api_versions(boot: &str, when: &str) -> Vec<String> {
    let mut c = WireClient::connect(boot).expect("connect");
    let mut out: Vec<String> = SHARE_API_KEYS
        .iter()
        .map(|k| format!("ApiVersions {when}: key {k} {:?}", c.version_range(*k)))
        .collect();
    let r = match c.send_at(
        ApiVersionsRequest::default()
            .with_client_software_name(str_bytes("kmirror-tests"))
            .with_client_software_version(str_bytes("0")),
        4,
    ) {
        Ok(r) => r,
        Err(e) => {
            out.push(format!("ApiVersions v4 {when}: {}", wire_error(&e)));
            return out;
        }
    };
    let supported: Vec<String> = r
        .supported_features
        .iter()
        .filter(|f| f.name.as_str() == "share.version")
        .map(|f| format!("{}..{}", f.min_version, f.max_version))
        .collect();
    let finalized: Vec<String> = r
        .finalized_features
        .iter()
        .filter(|f| f.name.as_str() == "share.version")
        .map(|f| format!("{}..{}", f.min_version_level, f.max_version_level))
        .collect();
    out.push(format!(
        "ApiVersions {when}: share.version supported {supported:?} finalized {finalized:?}"
    ));
    out
}

/// `share.version`'s finalized level in ApiVersions (0 when not listed).
fn finalized_share_version(boot: &str) -> i16 {
    WireClient::connect(boot)
        .and_then(|mut c| c.send_at(ApiVersionsRequest::default(), 4))
        .ok()
        .and_then(|r| {
            r.finalized_features
                .iter()
                .find(|f| f.name.as_str() == "share.version")
                .map(|f| f.max_version_level)
        })
        .unwrap_or(0)
}

/// One ShareGroupHeartbeat v1 joining `group` (a new member, epoch 0): error code and message.
fn heartbeat(boot: &str, group: &str) -> String {
    let addr = coordinator(boot, group);
    let req = ShareGroupHeartbeatRequest::default()
        .with_group_id(group_id(group))
        .with_member_id(str_bytes(&uuid::Uuid::new_v4().to_string()))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![topic_name(TOPIC)]));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = WireClient::connect(&addr)
            .and_then(|mut c| c.send_at(req.clone(), 1))
            .map_err(|e| wire_error(&e));
        match r {
            // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
            Ok(r) if matches!(r.error_code, 14..=16) && Instant::now() < deadline => {}
            Ok(r) => {
                return format!(
                    "ShareGroupHeartbeat v1 {group}: error {} {:?}",
                    r.error_code,
                    r.error_message.as_ref().map(|m| m.to_string())
                )
            }
            Err(e) => return format!("ShareGroupHeartbeat v1 {group}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A wire failure without addresses (they differ between the brokers).
fn wire_error(e: &kmirror_tests::wire::WireError) -> String {
    match e {
        kmirror_tests::wire::WireError::Io { source, .. } => {
            format!("io error {:?}", source.kind())
        }
        other => other.to_string(),
    }
}

/// ShareGroupDescribe v1 of `groups` at `group`'s coordinator: the raw response, or the wire
/// failure.
fn share_describe(
    boot: &str,
    groups: &[&str],
) -> Result<kafka_protocol::messages::ShareGroupDescribeResponse, String> {
    let addr = coordinator(boot, groups[0]);
    let req = ShareGroupDescribeRequest::default()
        .with_group_ids(groups.iter().map(|g| group_id(g)).collect())
        .with_include_authorized_operations(false);
    WireClient::connect(&addr)
        .and_then(|mut c| c.send_at(req, 1))
        .map_err(|e| wire_error(&e))
}

/// Per group of a ShareGroupDescribe: error code and message, state, assignor, member count.
fn describe_lines(boot: &str, groups: &[&str]) -> Vec<String> {
    // Kafka answers in an order of its own (not the request's): sorted by group id here.
    match share_describe(boot, groups) {
        Ok(mut r) => {
            r.groups
                .sort_by(|a, b| a.group_id.as_str().cmp(b.group_id.as_str()));
            r.groups
                .iter()
                .map(|g| {
                    format!(
                    "ShareGroupDescribe v1 {:?}: error {} {:?} state {:?} assignor {:?} members {}",
                    g.group_id.as_str(),
                    g.error_code,
                    g.error_message.as_ref().map(|m| m.to_string()),
                    g.group_state.as_str(),
                    g.assignor_name.as_str(),
                    g.members.len()
                )
                })
                .collect()
        }
        Err(e) => vec![format!("ShareGroupDescribe v1 {groups:?}: {e}")],
    }
}

/// DescribeShareGroupOffsets v0 of every partition of `group` (what `kafka-share-groups
/// --describe --offsets` asks): per partition its error code, start offset and leader epoch.
fn offsets_lines(boot: &str, group: &str) -> Vec<String> {
    use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
    use kafka_protocol::messages::DescribeShareGroupOffsetsRequest;
    let addr = coordinator(boot, group);
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(group_id(group))
            .with_topics(None),
    ]);
    let r = match WireClient::connect(&addr).and_then(|mut c| c.send_at(req, 0)) {
        Ok(r) => r,
        Err(e) => {
            return vec![format!(
                "DescribeShareGroupOffsets v0 {group}: {}",
                wire_error(&e)
            )]
        }
    };
    let mut out = Vec::new();
    for g in &r.groups {
        out.push(format!(
            "DescribeShareGroupOffsets v0 {}: error {} {:?}",
            g.group_id.as_str(),
            g.error_code,
            g.error_message.as_ref().map(|m| m.to_string())
        ));
        let mut parts: Vec<String> = g
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    format!(
                        "  {}-{}: error {} start {} epoch {}",
                        t.topic_name.as_str(),
                        p.partition_index,
                        p.error_code,
                        p.start_offset,
                        p.leader_epoch
                    )
                })
            })
            .collect();
        parts.sort();
        out.extend(parts);
    }
    out
}

/// Polls ShareGroupDescribe of `group` until it is Empty with no members (60 s).
fn wait_empty(boot: &str, group: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let started = Instant::now();
    loop {
        let last = share_describe(boot, &[group]);
        let empty = last.as_ref().is_ok_and(|r| {
            r.groups.first().is_some_and(|g| {
                g.error_code == 0 && g.group_state.as_str() == "Empty" && g.members.is_empty()
            })
        });
        if empty {
            return format!("{group} Empty within 60 s: true");
        }
        if Instant::now() > deadline {
            eprintln!("{group} not Empty after {:?}: {last:?}", started.elapsed());
            return format!("{group} Empty within 60 s: false");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// 300 records, key `k<i>` and value `v<i>`, record i to partition i % 3 (one batch per
/// partition).
fn produce(boot: &str) {
    let mut c = WireClient::connect(boot).expect("connect");
    for p in 0..3 {
        let kvs: Vec<(String, String)> = (0..RECORDS)
            .filter(|i| i % 3 == p)
            .map(|i| (format!("k{i}"), format!("v{i}")))
            .collect();
        let refs: Vec<(Option<&[u8]>, &[u8])> = kvs
            .iter()
            .map(|(k, v)| (Some(k.as_bytes()), v.as_bytes()))
            .collect();
        let batch = records::keyed_batch(&refs, kmirror_tests::helpers::now_ms());
        let (code, _) = c.produce_raw(TOPIC, p as i32, batch, -1).expect("produce");
        assert_eq!(code, 0, "produce to {TOPIC}-{p}");
    }
}

/// `kafka-console-share-consumer` on `group`: exit code, what it printed (counted and checked
/// against v0..v299 when it expects them all) and its summary and exception lines.
fn console_share_consumer(boot: &str, group: &str, max: usize, timeout_ms: u32) -> Vec<String> {
    let ran = share::console_run(boot, TOPIC, group, max, timeout_ms);
    let values: Vec<&str> = ran.stdout.lines().filter(|l| !l.is_empty()).collect();
    let distinct: BTreeSet<&str> = values.iter().copied().collect();
    let expected: BTreeSet<String> = (0..RECORDS).map(|i| format!("v{i}")).collect();
    let what = format!("kafka-console-share-consumer --group {group} --max-messages {max}");
    let mut out = vec![
        format!("{what}: exit {:?}", ran.status.code()),
        format!("  {} values, {} distinct", values.len(), distinct.len()),
    ];
    if max == RECORDS {
        out.push(format!(
            "  exactly v0..v{}: {}",
            RECORDS - 1,
            distinct.len() == expected.len()
                && expected.iter().all(|v| distinct.contains(v.as_str()))
        ));
    } else {
        out.push(format!("  values {values:?}"));
    }
    out.extend(stderr_lines(&ran.stderr, boot));
    if values.len() != max {
        eprintln!("{what}: stderr:\n{}", proc::last_lines(&ran.stderr, 30));
    }
    out
}

fn share_groups_tool(boot: &str, args: &[&str]) -> Vec<String> {
    let ran = run_tool(SHARE_GROUP_COMMAND, boot, args, Duration::from_secs(90));
    tool_lines(
        &format!("kafka-share-groups {}", args.join(" ")),
        boot,
        &ran,
    )
}

/// A topic with an aborted transaction of 10 records (`aborted:<i>`) and then a committed one
/// (`committed:<i>`); a group with `share.isolation.level=read_committed` reads it.
fn read_committed_lines(boot: &str) -> Vec<String> {
    const TXN_TOPIC: &str = "sg-txn";
    let mut out = Vec::new();
    let mut c = WireClient::connect(boot).expect("connect");
    out.push(format!(
        "create {TXN_TOPIC}: {}",
        c.create_topic(TXN_TOPIC, 1, 1, &[]).expect("CreateTopics")
    ));
    for (prefix, abort) in [("aborted", true), ("committed", false)] {
        let ran = proc::run(
            python::script("txn_producer.py").args([
                boot,
                TXN_TOPIC,
                "1",
                "10",
                &format!("txnproducer.prefix={prefix}"),
                &format!("txnproducer.abort={abort}"),
            ]),
            Duration::from_secs(120),
        );
        out.push(format!(
            "txn_producer.py {prefix}: {}",
            ran.stdout.lines().collect::<Vec<_>>().join(" ")
        ));
    }
    let ran = share::alter_group_configs(
        boot,
        "sg-rc",
        "share.auto.offset.reset=earliest,share.isolation.level=read_committed",
    );
    out.extend(tool_lines("kafka-configs sg-rc read_committed", boot, &ran));
    let ran = share::console_run(boot, TXN_TOPIC, "sg-rc", 10, 30_000);
    let mut values: Vec<&str> = ran.stdout.lines().filter(|l| !l.is_empty()).collect();
    values.sort_unstable();
    out.push(format!(
        "kafka-console-share-consumer --group sg-rc (read_committed): exit {:?}",
        ran.status.code()
    ));
    out.push(format!("  values {values:?}"));
    out.extend(stderr_lines(&ran.stderr, boot));
    out
}

/// Which broker a scenario runs on: the one difference it allows for is Kafka 4.1.1's
/// ShareFetch failing members whose id is not URL-safe base64 (see
/// [`librdkafka_share_consumer`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Broker {
    Kafka,
    Kmirror,
}

/// librdkafka's ShareConsumer (confluent-kafka) on `group`: how many records one member read
/// and whether they are exactly v0..v299, each once.
///
/// librdkafka picks its own member id in standard base64, so about every second member's id
/// holds a '+' or '/'. Kafka 4.1.1 fails every ShareFetch of such a member with
/// UNKNOWN_SERVER_ERROR ("Illegal base64 character 2b" in its log) and the member reads
/// nothing; librdkafka then spins on the error. On Kafka the script therefore gives up such a
/// member before it fetches (exit 3, `SKIP`) and another one is started; on kmirror every
/// member counts, whatever its id.
fn librdkafka_share_consumer(boot: &str, group: &str, broker: Broker) -> Vec<String> {
    const SKIPPED: Option<i32> = Some(3);
    let mut skipped = Vec::new();
    let ran = loop {
        let mut args = vec![
            boot.to_owned(),
            TOPIC.to_owned(),
            group.to_owned(),
            RECORDS.to_string(),
            "45".to_owned(),
        ];
        if broker == Broker::Kafka {
            args.push("--urlsafe-member-id".to_owned());
        }
        if let Ok(d) = std::env::var("KMIRROR_SHARE_RDKAFKA_DEBUG") {
            args.push(format!("debug={d}"));
        }
        let ran = proc::run(
            python::script("share_consume.py").args(&args),
            Duration::from_secs(120),
        );
        if std::env::var("KMIRROR_SHARE_RDKAFKA_DEBUG").is_ok() {
            eprintln!("share_consume.py stderr:\n{}", ran.stderr);
        }
        let member = ran
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("MEMBER "))
            .unwrap_or("?")
            .to_owned();
        if ran.status.code() == SKIPPED && skipped.len() < 20 {
            skipped.push(member);
            continue;
        }
        eprintln!(
            "share_consume.py --group {group} on {boot}: member {member} (after {} skipped: {skipped:?}): {}",
            skipped.len(),
            ran.stdout.lines().last().unwrap_or("")
        );
        break ran;
    };
    let errors = ran
        .stdout
        .lines()
        .filter(|l| l.starts_with("ERR "))
        .map(|l| format!("  {l}"));
    let mut values: Vec<&str> = ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("R "))
        .filter_map(|l| l.splitn(3, ' ').nth(2))
        .collect();
    values.sort_unstable();
    let mut want: Vec<String> = (0..RECORDS).map(|i| format!("v{i}")).collect();
    want.sort_unstable();
    let mut out = vec![format!(
        "share_consume.py --group {group}: exit {:?}, {} records",
        ran.status.code(),
        values.len()
    )];
    out.push(format!("  every record once: {}", values == want));
    out.extend(errors);
    out
}

/// `kafka-configs` sets `share.auto.offset.reset=earliest` on `group`.
fn set_earliest(boot: &str, group: &str) -> Vec<String> {
    let ran = share::alter_group_configs(boot, group, "share.auto.offset.reset=earliest");
    tool_lines(
        &format!(
            "kafka-configs --entity-type groups --entity-name {group} --alter --add-config share.auto.offset.reset=earliest"
        ),
        boot,
        &ran,
    )
}

/// A raw member of `group` (its own ShareGroupHeartbeat and ShareFetch v1) acquires every
/// record of the topic, leaves the group and closes its fetch connection without
/// acknowledging any: how many it acquired, with which delivery counts.
/// A raw member acquires all 300 records and dies: its connections close with no leave and
/// no acknowledgement, so the group still counts it until its session times out (45 s) and
/// its records stay locked until their acquisition lock expires (30 s). The next member is
/// assigned the partitions once the dead one is fenced and acquires the same 300 records, as
/// their second delivery.
fn dies_holding_locks(boot: &str, group: &str) -> Vec<String> {
    let mut dead = RawMember::join(boot, group);
    let held = dead.acquire_all();
    drop(dead);
    let started = Instant::now();
    let mut next = RawMember::join_within(boot, group, Duration::from_secs(120));
    let again = next.acquire_all();
    eprintln!(
        "{group}: the next member acquired the dead one's records after {:?}",
        started.elapsed()
    );
    let left = next.leave();
    let summary = |runs: &[((uuid::Uuid, i32), i64, i64, i16)]| {
        let offsets: BTreeSet<(i32, i64)> = runs
            .iter()
            .flat_map(|&((_, p), first, last, _)| (first..=last).map(move |o| (p, o)))
            .collect();
        let counts: BTreeSet<i16> = runs.iter().map(|r| r.3).collect();
        (offsets, counts)
    };
    let (held_offsets, held_counts) = summary(&held);
    let (again_offsets, again_counts) = summary(&again);
    vec![
        format!(
            "raw member of {group} dies holding {} acquired records, delivery counts {held_counts:?}",
            held_offsets.len()
        ),
        format!(
            "  the next member acquires {} records, delivery counts {again_counts:?}, the same ones: {}",
            again_offsets.len(),
            again_offsets == held_offsets
        ),
        format!("  the next member leaves: {left:?}"),
    ]
}

fn acquire_and_drop(boot: &str, group: &str) -> Vec<String> {
    let mut m = RawMember::join(boot, group);
    let runs = m.acquire_all();
    let acquired: i64 = runs.iter().map(|r| r.2 - r.1 + 1).sum();
    let counts: BTreeSet<i16> = runs.iter().map(|r| r.3).collect();
    // A clean leave, then the connection drops with the records still acquired.
    let left = m.leave();
    vec![
        format!("raw member of {group}: acquired {acquired} records, delivery counts {counts:?}"),
        format!("raw member of {group} leaves: {left:?}"),
    ]
}

/// ReadShareGroupStateSummary v0 of `group`'s state on each of the topic's 3 partitions, at
/// the one broker (its share coordinator): whether there is state (a start offset), or the
/// error and what is answered when there is none.
fn state_summary_lines(boot: &str, group: &str, when: &str) -> Vec<String> {
    use kafka_protocol::messages::read_share_group_state_summary_request as rq;
    use kafka_protocol::messages::ReadShareGroupStateSummaryRequest;
    let topic = kmirror_tests::mirror::topic_id(boot, TOPIC);
    let req = ReadShareGroupStateSummaryRequest::default()
        .with_group_id(str_bytes(group))
        .with_topics(vec![rq::ReadStateSummaryData::default()
            .with_topic_id(topic)
            .with_partitions(
                (0..3)
                    .map(|p| {
                        rq::PartitionData::default()
                            .with_partition(p)
                            .with_leader_epoch(-1)
                    })
                    .collect(),
            )]);
    let r = match WireClient::connect(boot).and_then(|mut c| c.send_at(req, 0)) {
        Ok(r) => r,
        Err(e) => {
            return vec![format!(
                "ReadShareGroupStateSummary {group} {when}: {}",
                wire_error(&e)
            )]
        }
    };
    let mut parts: Vec<String> = r
        .results
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| {
            format!(
                "  {TOPIC}-{}: error {} state epoch > 0: {} start {}",
                p.partition,
                p.error_code,
                p.state_epoch > 0,
                if p.start_offset >= 0 {
                    ">= 0".to_owned()
                } else {
                    p.start_offset.to_string()
                }
            )
        })
        .collect();
    parts.sort();
    let mut out = vec![format!("ReadShareGroupStateSummary v0 {group} {when}")];
    out.extend(parts);
    out
}

/// A raw member of `group` acquires all 300 records, then answers each partition's batch with
/// its own acknowledgement type over ShareAcknowledge v1: partition 0 RELEASE (2), 1 REJECT
/// (3), 2 ACCEPT (1), and leaves. The next consumer reads the released records again (delivery
/// count 2) and never the rejected or accepted ones.
fn acknowledge_types(boot: &str, group: &str) -> Vec<String> {
    use kafka_protocol::messages::share_acknowledge_request::{
        AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch,
    };
    use kafka_protocol::messages::ShareAcknowledgeRequest;
    let mut out = Vec::new();
    let mut m = RawMember::join(boot, group);
    let acquired = m.acquire_all();
    out.push(format!(
        "raw member of {group}: acquired {} records",
        acquired.iter().map(|a| a.2 - a.1 + 1).sum::<i64>()
    ));
    let kind = |p: i32| match p {
        0 => 2i8,
        1 => 3,
        _ => 1,
    };
    let mut by_topic: BTreeMap<uuid::Uuid, Vec<AcknowledgePartition>> = BTreeMap::new();
    for (t, p, first, last) in acquired.iter().map(|a| (a.0 .0, a.0 .1, a.1, a.2)) {
        by_topic.entry(t).or_default().push(
            AcknowledgePartition::default()
                .with_partition_index(p)
                .with_acknowledgement_batches(vec![AcknowledgementBatch::default()
                    .with_first_offset(first)
                    .with_last_offset(last)
                    .with_acknowledge_types(vec![kind(p)])]),
        );
    }
    let r = m
        .fetch
        .send_at(
            ShareAcknowledgeRequest::default()
                .with_group_id(Some(group_id(group)))
                .with_member_id(Some(str_bytes(&m.member)))
                .with_share_session_epoch(m.session_epoch)
                .with_topics(
                    by_topic
                        .into_iter()
                        .map(|(t, ps)| {
                            AcknowledgeTopic::default()
                                .with_topic_id(t)
                                .with_partitions(ps)
                        })
                        .collect(),
                ),
            1,
        )
        .expect("ShareAcknowledge");
    let mut codes: Vec<(i32, i16)> = r
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.error_code))
        })
        .collect();
    codes.sort_unstable();
    out.push(format!(
        "ShareAcknowledge v1 release/reject/accept: error {} partitions {codes:?}",
        r.error_code
    ));
    out.push(format!("raw member of {group} leaves: {:?}", m.leave()));
    let ran = share::console_run(boot, TOPIC, group, 100, 30_000);
    let got: BTreeSet<&str> = ran.stdout.lines().filter(|l| !l.is_empty()).collect();
    let released: BTreeSet<String> = (0..RECORDS)
        .filter(|i| i % 3 == 0)
        .map(|i| format!("v{i}"))
        .collect();
    out.push(format!(
        "the next consumer of {group}: {} values, exactly the released partition 0's: {}",
        got.len(),
        got.len() == released.len() && released.iter().all(|v| got.contains(v.as_str()))
    ));
    out.extend(console_share_consumer(boot, group, 1, 5_000));
    out
}

/// Kafka's VerifiableShareConsumer (sync acknowledgements, `--offset-reset-strategy
/// earliest`) on `group`: the (partition, offset)s it printed as consumed and as
/// successfully acknowledged.
struct Verifiable {
    child: proc::LineChild,
}

impl Verifiable {
    fn start(boot: &str, group: &str, max: i64) -> Self {
        let child = proc::LineChild::spawn(
            kmirror_tests::java::tool("org.apache.kafka.tools.VerifiableShareConsumer").args([
                "--bootstrap-server",
                boot,
                "--topic",
                TOPIC,
                "--group-id",
                group,
                "--max-messages",
                &max.to_string(),
                "--acknowledgement-mode",
                "sync",
                "--offset-reset-strategy",
                "earliest",
            ]),
        );
        Verifiable { child }
    }

    /// (partition, offset) of every record in the events named `event` (acknowledgements
    /// only when successful), with repeats.
    fn offsets(lines: &[String], event: &str) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        for l in lines {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
                continue;
            };
            if v["name"] != event || v.get("success").is_some_and(|s| s != true) {
                continue;
            }
            for p in v["partitions"].as_array().into_iter().flatten() {
                let part = p["partition"].as_i64().unwrap_or(-1);
                for o in p["offsets"].as_array().into_iter().flatten() {
                    out.push((part, o.as_i64().unwrap_or(-1)));
                }
            }
        }
        out
    }

    fn consumed(&self) -> Vec<(i64, i64)> {
        Self::offsets(&self.child.lines(), "records_consumed")
    }

    fn acknowledged(&self) -> Vec<(i64, i64)> {
        Self::offsets(&self.child.lines(), "offsets_acknowledged")
    }
}

/// Every (partition, offset) of the topic.
fn all_offsets() -> BTreeSet<(i64, i64)> {
    (0..3)
        .flat_map(|p| (0..(RECORDS / 3) as i64).map(move |o| (p, o)))
        .collect()
}

/// Two VerifiableShareConsumer members of one group read the topic together: every record is
/// acknowledged, none twice. Then in a second group a member is SIGKILLed as soon as it has
/// consumed records (holding their locks unless it already acknowledged them), and the next
/// member gets, once each, every record the killed one was not given, and none it
/// acknowledged.
fn verifiable_members(boot: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (a, b) = (
        Verifiable::start(boot, "sg-v2", -1),
        Verifiable::start(boot, "sg-v2", -1),
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        let acked: BTreeSet<_> = a
            .acknowledged()
            .into_iter()
            .chain(b.acknowledged())
            .collect();
        if acked.len() >= RECORDS {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Some more time for a duplicate to show.
    std::thread::sleep(Duration::from_secs(2));
    let acked: Vec<_> = a
        .acknowledged()
        .into_iter()
        .chain(b.acknowledged())
        .collect();
    let distinct: BTreeSet<_> = acked.iter().copied().collect();
    out.push(format!(
        "VerifiableShareConsumer x2 sg-v2: {} acknowledged, {} distinct, every record: {}",
        acked.len(),
        distinct.len(),
        distinct == all_offsets()
    ));
    drop((a, b));

    let killed = Verifiable::start(boot, "sg-vk", -1);
    let deadline = Instant::now() + Duration::from_secs(90);
    while killed.consumed().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    proc::signal(killed.child.pid(), "KILL");
    std::thread::sleep(Duration::from_millis(500));
    let (held, acked_by_killed): (BTreeSet<_>, BTreeSet<_>) = (
        killed.consumed().into_iter().collect(),
        killed.acknowledged().into_iter().collect(),
    );
    drop(killed);
    // The next member reads until every record went to one of the two (the killed one may
    // have acknowledged more than it printed), then a little longer for a duplicate to show.
    // It counts as done once it has been quiet for 5 s (a redelivery needs it to join and
    // fetch first).
    let next = Verifiable::start(boot, "sg-vk", -1);
    let all = all_offsets();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut last_count, mut quiet_since) = (0, Instant::now());
    while Instant::now() < deadline {
        let got = next.consumed();
        if got.len() != last_count {
            (last_count, quiet_since) = (got.len(), Instant::now());
        }
        let seen: BTreeSet<_> = got.into_iter().chain(held.iter().copied()).collect();
        if seen.is_superset(&all) && quiet_since.elapsed() > Duration::from_secs(5) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let got = next.consumed();
    drop(next);
    eprintln!(
        "sg-vk: the killed member consumed {} and acknowledged {}; the next one consumed {}",
        held.len(),
        acked_by_killed.len(),
        got.len()
    );
    let got_set: BTreeSet<_> = got.iter().copied().collect();
    out.push(format!(
        "VerifiableShareConsumer killed in sg-vk after consuming: consumed some: {}",
        !held.is_empty()
    ));
    out.push(format!(
        "  the next member: read each once: {}, none the killed one acknowledged: {}, \
         every record delivered to one of them: {}",
        got.len() == got_set.len(),
        got_set.is_disjoint(&acked_by_killed),
        got_set.union(&held).copied().collect::<BTreeSet<_>>() == all
    ));
    out
}

/// A member of a share group as a client drives it on the wire: heartbeats on the
/// coordinator, ShareFetch (one share session) on the partitions' leader.
struct RawMember {
    group: String,
    member: String,
    hb: WireClient,
    fetch: WireClient,
    assigned: Vec<(uuid::Uuid, Vec<i32>)>,
    session_epoch: i32,
}

impl RawMember {
    /// Heartbeats until the member is assigned the topic's 3 partitions (the first ones come
    /// once their share state is initialized).
    fn join(boot: &str, group: &str) -> Self {
        Self::join_within(boot, group, Duration::from_secs(60))
    }

    /// [`RawMember::join`], waiting up to `wait` for the 3 partitions.
    fn join_within(boot: &str, group: &str, wait: Duration) -> Self {
        let coord = coordinator(boot, group);
        let member = kafka_uuid(uuid::Uuid::new_v4());
        let mut hb = WireClient::connect(&coord).expect("connect");
        let deadline = Instant::now() + wait;
        let mut epoch = 0;
        let assigned = loop {
            let r = hb
                .send_at(
                    ShareGroupHeartbeatRequest::default()
                        .with_group_id(group_id(group))
                        .with_member_id(str_bytes(&member))
                        .with_member_epoch(epoch)
                        .with_subscribed_topic_names((epoch == 0).then(|| vec![topic_name(TOPIC)])),
                    1,
                )
                .expect("ShareGroupHeartbeat");
            assert_eq!(r.error_code, 0, "ShareGroupHeartbeat: {r:?}");
            epoch = r.member_epoch;
            let parts: Vec<(uuid::Uuid, Vec<i32>)> = r
                .assignment
                .map(|a| {
                    a.topic_partitions
                        .into_iter()
                        .map(|t| (t.topic_id, t.partitions))
                        .collect()
                })
                .unwrap_or_default();
            if parts.iter().map(|(_, p)| p.len()).sum::<usize>() == 3 {
                break parts;
            }
            assert!(
                Instant::now() < deadline,
                "{group}: not assigned within {wait:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        };
        RawMember {
            group: group.to_owned(),
            member,
            hb,
            fetch: WireClient::connect(boot).expect("connect"),
            assigned,
            session_epoch: 0,
        }
    }

    /// ShareFetch v1 until all the topic's records are acquired (60 s at most): each acquired
    /// run as ((topic id, partition), first, last, delivery count).
    fn acquire_all(&mut self) -> Vec<((uuid::Uuid, i32), i64, i64, i16)> {
        use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
        use kafka_protocol::messages::ShareFetchRequest;
        let topics: Vec<FetchTopic> = self
            .assigned
            .iter()
            .map(|(t, ps)| {
                FetchTopic::default().with_topic_id(*t).with_partitions(
                    ps.iter()
                        .map(|p| FetchPartition::default().with_partition_index(*p))
                        .collect(),
                )
            })
            .collect();
        let mut runs = Vec::new();
        let mut acquired = 0i64;
        let deadline = Instant::now() + Duration::from_secs(60);
        while acquired < RECORDS as i64 && Instant::now() < deadline {
            let r = self
                .fetch
                .send_at(
                    ShareFetchRequest::default()
                        .with_group_id(Some(group_id(&self.group)))
                        .with_member_id(Some(str_bytes(&self.member)))
                        .with_share_session_epoch(self.session_epoch)
                        .with_max_wait_ms(2000)
                        .with_min_bytes(1)
                        .with_max_bytes(1 << 20)
                        .with_max_records(500)
                        .with_batch_size(500)
                        .with_topics(if self.session_epoch == 0 {
                            topics.clone()
                        } else {
                            Vec::new()
                        }),
                    1,
                )
                .expect("ShareFetch");
            assert_eq!(r.error_code, 0, "ShareFetch: {r:?}");
            self.session_epoch += 1;
            for t in &r.responses {
                for p in &t.partitions {
                    assert_eq!(p.error_code, 0, "ShareFetch partition: {p:?}");
                    for a in &p.acquired_records {
                        acquired += a.last_offset - a.first_offset + 1;
                        runs.push((
                            (t.topic_id, p.partition_index),
                            a.first_offset,
                            a.last_offset,
                            a.delivery_count,
                        ));
                    }
                }
            }
        }
        runs
    }

    /// A clean leave (heartbeat at epoch -1); the fetch connection closes with the member.
    fn leave(self) -> Result<i16, String> {
        let RawMember {
            mut hb,
            group,
            member,
            ..
        } = self;
        hb.send_at(
            ShareGroupHeartbeatRequest::default()
                .with_group_id(group_id(&group))
                .with_member_id(str_bytes(&member))
                .with_member_epoch(-1),
            1,
        )
        .map(|r| r.error_code)
        .map_err(|e| e.to_string())
    }
}

/// A Uuid in Kafka's string form (URL-safe base64 without padding), as clients send member
/// ids.
fn kafka_uuid(u: uuid::Uuid) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(u.as_bytes())
}

/// The whole scenario on the broker at `boot`; its lines are what a user sees.
fn scenario(boot: &str, broker: Broker) -> Vec<String> {
    let started = Instant::now();
    let mut out = Vec::new();

    // 1. The topic and its records.
    let mut c = WireClient::connect(boot).expect("connect");
    out.push(format!(
        "create {TOPIC}: {}",
        c.create_topic(TOPIC, 3, 1, &[]).expect("CreateTopics")
    ));
    produce(boot);

    // 2. Before the feature is enabled: the wire, and a share consumer.
    out.extend(api_versions(boot, "before share.version"));
    out.push(heartbeat(boot, "sg-off"));
    out.extend(describe_lines(boot, &["sg-off"]));
    out.extend(console_share_consumer(boot, "sg-off", 1, 15_000));

    // 3. kafka-features.
    let ran = run_tool(
        FEATURE_COMMAND,
        boot,
        &["upgrade", "--feature", "share.version=1"],
        Duration::from_secs(90),
    );
    out.extend(tool_lines(
        "kafka-features upgrade --feature share.version=1",
        boot,
        &ran,
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    while finalized_share_version(boot) != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let ran = run_tool(
        FEATURE_COMMAND,
        boot,
        &["describe"],
        Duration::from_secs(90),
    );
    out.push(format!(
        "kafka-features describe: exit {:?}",
        ran.status.code()
    ));
    out.extend(
        ran.stdout
            .lines()
            .filter(|l| l.starts_with("Feature: share.version"))
            .map(|l| {
                let kept: Vec<&str> = l
                    .split('\t')
                    .map(str::trim)
                    .filter(|f| !f.starts_with("Epoch:"))
                    .collect();
                format!("  {}", kept.join(" "))
            }),
    );
    out.extend(api_versions(boot, "after share.version=1"));

    // 4. The group starts at the earliest offset.
    out.extend(set_earliest(boot, "sg"));

    // 5. Every record, once.
    out.extend(console_share_consumer(boot, "sg", RECORDS, 60_000));
    out.push(wait_empty(boot, "sg"));

    // 6. kafka-share-groups.
    for args in [
        &["--list"][..],
        &["--list", "--state"],
        &["--describe", "--group", "sg"],
        &["--describe", "--group", "sg", "--offsets"],
        &["--describe", "--group", "sg", "--offsets", "--verbose"],
        &["--describe", "--group", "sg", "--members"],
        &["--describe", "--group", "sg", "--state"],
        &["--describe", "--group", "nope"],
    ] {
        out.extend(share_groups_tool(boot, args));
    }
    out.extend(offsets_lines(boot, "sg"));

    // 7. A group without the config starts at the end of the log.
    out.extend(console_share_consumer(boot, "sg-latest", 1, 15_000));
    out.push(wait_empty(boot, "sg-latest"));
    for args in [
        &["--list", "--state"][..],
        &["--describe", "--group", "sg-latest", "--offsets"],
    ] {
        out.extend(share_groups_tool(boot, args));
    }
    out.extend(offsets_lines(boot, "sg-latest"));

    // 8. ShareGroupDescribe once the members are gone.
    out.push(wait_empty(boot, "sg"));
    out.extend(describe_lines(boot, &["sg", "nope", ""]));

    // 9. A member that acquires every record and drops its connection without acknowledging
    // any: the records go to the next member, none lost.
    out.extend(set_earliest(boot, "sg-drop"));
    out.extend(acquire_and_drop(boot, "sg-drop"));
    out.extend(console_share_consumer(boot, "sg-drop", RECORDS, 60_000));
    out.push(wait_empty(boot, "sg-drop"));

    // 10. Deleting an Empty group's offsets: it starts over from the earliest record.
    out.extend(share_groups_tool(
        boot,
        &["--delete-offsets", "--group", "sg", "--topic", TOPIC],
    ));
    out.extend(share_groups_tool(
        boot,
        &[
            "--delete-offsets",
            "--group",
            "sg",
            "--topic",
            "no-such-topic",
        ],
    ));
    out.extend(offsets_lines(boot, "sg"));
    out.extend(console_share_consumer(boot, "sg", RECORDS, 60_000));
    out.push(wait_empty(boot, "sg"));

    // 11. read_committed: an aborted transaction's records are never delivered.
    out.extend(read_committed_lines(boot));

    // 12. The second client: librdkafka's ShareConsumer reads every record once.
    out.extend(set_earliest(boot, "sg-py"));
    out.extend(librdkafka_share_consumer(boot, "sg-py", broker));
    out.push(wait_empty(boot, "sg-py"));

    // 13. Acknowledgement types: released records come back, rejected and accepted never.
    out.extend(set_earliest(boot, "sg-ack"));
    out.extend(acknowledge_types(boot, "sg-ack"));
    out.push(wait_empty(boot, "sg-ack"));

    // 14. DeleteGroups of a share group deletes its share state too.
    out.extend(state_summary_lines(
        boot,
        "sg-ack",
        "before the group is deleted",
    ));
    out.extend(share_groups_tool(boot, &["--delete", "--group", "sg-ack"]));
    out.extend(state_summary_lines(boot, "sg-ack", "after"));

    // 15. Kafka's VerifiableShareConsumer: two members together, then a member killed
    // after consuming (its unacknowledged records go to the next member).
    out.extend(verifiable_members(boot));

    // 16. A member that dies holding acquired records: they are delivered again once its
    // session and their locks expire.
    out.extend(set_earliest(boot, "sg-dead"));
    out.extend(dies_holding_locks(boot, "sg-dead"));
    eprintln!("scenario on {boot} took {:?}", started.elapsed());
    out
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn on_kafka() -> Vec<String> {
    let kafka = KafkaCluster::start_with(KafkaOptions::default());
    scenario(&kafka.bootstrap(), Broker::Kafka)
}

fn on_kmirror() -> Vec<String> {
    let node = KmirrorNode::start();
    scenario(&node.addr(), Broker::Kmirror)
}

#[test]
fn share_groups_with_kafka_tools_answer_as_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let recorded: Vec<String> = KAFKA_4_1_1.iter().map(|l| l.to_string()).collect();
    if env_flag("KMIRROR_SHARE_KAFKA_ONLY") {
        let on_kafka = on_kafka();
        eprintln!("Kafka:\n{}", on_kafka.join("\n"));
        assert_eq!(
            on_kafka, recorded,
            "Kafka 4.1.1 no longer answers as recorded"
        );
        return;
    }
    let expected = if env_flag("KMIRROR_SHARE_KMIRROR_ONLY") {
        recorded
    } else {
        on_kafka()
    };
    let on_kmirror = on_kmirror();
    eprintln!(
        "Kafka:\n{}\nkmirror:\n{}",
        expected.join("\n"),
        on_kmirror.join("\n")
    );
    assert_eq!(on_kmirror, expected);
}
