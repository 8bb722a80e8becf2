//! Helpers for the mirroring tests (issues 4 and 5): the `kmirror mirror …` CLI of SPEC's
//! contract, `describe --json` rows, waiting for a mirror to catch up, the log-equal check over
//! every partition, and a few source-side admin calls (DeleteRecords, CreatePartitions,
//! IncrementalAlterConfigs, DescribeConfigs, read_committed end offsets) over the wire.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::deps;
use crate::oracle::{log_equal, LogEqualReport};
use crate::proc::{self, Ran};
use crate::wire::WireClient;

/// Quick metadata sync and retry backoffs for `create --set`, so tests do not wait for the
/// defaults.
pub const FAST: &[(&str, &str)] = &[
    ("mirror.metadata.sync.interval.ms", "1000"),
    ("mirror.retry.backoff.ms", "100"),
    ("mirror.retry.backoff.max.ms", "1000"),
];

/// `kmirror mirror --bootstrap DST ARGS…`, run to completion (30 s budget).
pub fn cli(dst: &str, args: &[&str]) -> Ran {
    proc::run(
        Command::new(deps::kmirror_bin())
            .args(["mirror", "--bootstrap", dst])
            .args(args),
        Duration::from_secs(60),
    )
}

/// [`cli`] that must succeed; panics with its output otherwise.
pub fn cli_ok(dst: &str, args: &[&str]) -> Ran {
    let ran = cli(dst, args);
    assert!(
        ran.status.success(),
        "kmirror mirror {args:?} failed ({}):\n{}{}",
        ran.status,
        ran.stdout,
        ran.stderr
    );
    ran
}

/// `create NAME --source SRC --set k=v…`.
pub fn create(dst: &str, name: &str, src: &str, sets: &[(&str, &str)]) {
    let mut args: Vec<String> = vec!["create".into(), name.into(), "--source".into(), src.into()];
    for (k, v) in sets {
        args.push("--set".into());
        args.push(format!("{k}={v}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cli_ok(dst, &args);
}

/// `add NAME --topics T1,T2`.
pub fn add_topics(dst: &str, name: &str, topics: &[&str]) {
    cli_ok(dst, &["add", name, "--topics", &topics.join(",")]);
}

/// `remove NAME --topics T1,T2` (failover).
pub fn remove_topics(dst: &str, name: &str, topics: &[&str]) -> Ran {
    cli(dst, &["remove", name, "--topics", &topics.join(",")])
}

/// One partition of `describe --json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRow {
    /// Mirror name.
    pub mirror: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// State name (PREPARING, MIRRORING, PAUSED, STOPPING, STOPPED, FAILED…).
    pub state: String,
    /// Source end offset as last seen.
    pub source_offset: i64,
    /// Destination end offset.
    pub destination_offset: i64,
    /// Lag in offsets.
    pub lag: i64,
    /// Lag in milliseconds.
    pub lag_ms: i64,
    /// The whole JSON object (extension fields such as failure_reason).
    pub raw: serde_json::Value,
}

impl PartitionRow {
    /// `failure_reason` of the row, "" when there is none.
    pub fn reason(&self) -> String {
        self.raw
            .get("failure_reason")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string()
    }
}

/// End offsets of every partition of `topic` on `boot`; panics naming the broker on failure.
pub fn end_offsets(boot: &str, topic: &str, parts: i32) -> Vec<i64> {
    bounds(boot, topic, parts)
        .unwrap_or_else(|e| panic!("bounds of {topic} on {boot}: {e}"))
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

/// Waits until `describe NAME` lists exactly `parts` partitions, all MIRRORING at lag 0.
pub fn wait_mirroring_at_lag_zero(dst: &str, name: &str, parts: i32, timeout: Duration) {
    crate::proc::wait_for(
        timeout,
        "describe: every partition MIRRORING at lag 0",
        || {
            let rows = describe(dst, Some(name));
            (rows.len() == parts as usize
                && rows.iter().all(|r| r.state == "MIRRORING" && r.lag == 0))
            .then_some(())
        },
    );
}

/// `describe [NAME] --json`, parsed. Panics if the command fails or prints no JSON array.
pub fn describe(dst: &str, name: Option<&str>) -> Vec<PartitionRow> {
    let mut args = vec!["describe"];
    if let Some(n) = name {
        args.push(n);
    }
    args.push("--json");
    let ran = cli_ok(dst, &args);
    let line = ran
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with('['))
        .unwrap_or_else(|| panic!("describe --json printed no array:\n{}", ran.stdout));
    let v: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("describe --json output is not JSON ({e}): {line}"));
    let arr = v.as_array().expect("describe --json is an array");
    arr.iter()
        .map(|o| {
            let s = |k: &str| {
                o.get(k)
                    .and_then(|x| x.as_str())
                    .unwrap_or_else(|| panic!("describe row without string {k}: {o}"))
                    .to_string()
            };
            let i = |k: &str| {
                o.get(k)
                    .and_then(|x| x.as_i64())
                    .unwrap_or_else(|| panic!("describe row without number {k}: {o}"))
            };
            PartitionRow {
                mirror: s("mirror"),
                topic: s("topic"),
                partition: i("partition") as i32,
                state: s("state"),
                source_offset: i("source_offset"),
                destination_offset: i("destination_offset"),
                lag: i("lag"),
                lag_ms: i("lag_ms"),
                raw: o.clone(),
            }
        })
        .collect()
}

/// Log start and end (high watermark) of every partition of `topic` on `boot`.
pub fn bounds(boot: &str, topic: &str, partitions: i32) -> Result<Vec<(i64, i64)>, String> {
    (0..partitions)
        .map(|p| {
            let mut c = WireClient::connect_leader(boot, topic, p).map_err(|e| e.to_string())?;
            c.log_bounds(topic, p).map_err(|e| e.to_string())
        })
        .collect()
}

/// The last stable offset of one partition (ListOffsets latest, read_committed).
pub fn lso(boot: &str, topic: &str, partition: i32) -> i64 {
    let mut c = WireClient::connect_leader(boot, topic, partition)
        .unwrap_or_else(|e| panic!("connect {boot} {topic}-{partition}: {e}"));
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(1)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)])]);
    let resp = c.send(req).expect("ListOffsets read_committed");
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "ListOffsets LSO {topic}-{partition}");
    p.offset
}

/// Waits until every partition of `topic` on `dst` has the same end offset as on `src` (the
/// source's LSO when `committed_only`, else its high watermark), re-reading the source each
/// round. Returns the source end offsets it matched. Panics with both sides and `describe`
/// after `timeout`.
pub fn wait_caught_up(
    src: &str,
    dst: &str,
    topic: &str,
    partitions: i32,
    committed_only: bool,
    timeout: Duration,
) -> Vec<i64> {
    let deadline = Instant::now() + timeout;
    loop {
        let s: Result<Vec<i64>, String> = if committed_only {
            Ok((0..partitions).map(|p| lso(src, topic, p)).collect())
        } else {
            bounds(src, topic, partitions).map(|b| b.into_iter().map(|(_, e)| e).collect())
        };
        let d = bounds(dst, topic, partitions);
        let last = match (s, d) {
            (Ok(s), Ok(d)) => {
                if s.iter().zip(d.iter()).all(|(a, (_, b))| a == b) {
                    return s;
                }
                format!("source ends {s:?}, destination (start, end) {d:?}")
            }
            (s, d) => format!("source {s:?}, destination {d:?}"),
        };
        if Instant::now() > deadline {
            let rows = cli(dst, &["describe", "--json"]);
            panic!(
                "{topic}: destination did not catch up within {timeout:?}: {last}\ndescribe: {}{}",
                rows.stdout, rows.stderr
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// log-equal(upto[p]) for every partition; panics with the first difference.
pub fn assert_log_equal(src: &str, dst: &str, topic: &str, upto: &[i64]) -> Vec<LogEqualReport> {
    upto.iter()
        .enumerate()
        .map(|(p, u)| {
            log_equal(src, dst, topic, p as i32, *u)
                .unwrap_or_else(|e| panic!("log-equal({u}) {topic}-{p}: {e}"))
        })
        .collect()
}

/// Waits for catch-up (high watermark) and asserts log-equal on every partition.
pub fn assert_mirrored(
    src: &str,
    dst: &str,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Vec<LogEqualReport> {
    let ends = wait_caught_up(src, dst, topic, partitions, false, timeout);
    assert_log_equal(src, dst, topic, &ends)
}

/// DeleteRecords on `boot` up to `offset` for one partition; returns the error code and the
/// new low watermark.
pub fn delete_records(boot: &str, topic: &str, partition: i32, offset: i64) -> (i16, i64) {
    let mut c = WireClient::connect_leader(boot, topic, partition).expect("connect leader");
    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(partition)
                .with_offset(offset)])]);
    let resp = c.send(req).expect("DeleteRecords");
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.low_watermark)
}

/// CreatePartitions on `boot`: grow `topic` to `count`; returns the error code.
pub fn create_partitions(boot: &str, topic: &str, count: i32) -> i16 {
    let mut c = WireClient::connect(boot.split(',').next().expect("addr")).expect("connect");
    let req = CreatePartitionsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_count(count)
            .with_assignments(None)]);
    let resp = c.send(req).expect("CreatePartitions");
    resp.results[0].error_code
}

/// IncrementalAlterConfigs SET of topic configs on `boot`; returns the error code.
pub fn set_topic_configs(boot: &str, topic: &str, configs: &[(&str, &str)]) -> i16 {
    let mut c = WireClient::connect(boot.split(',').next().expect("addr")).expect("connect");
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_config_operation(0)
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            ),
    ]);
    let resp = c.send(req).expect("IncrementalAlterConfigs");
    resp.responses[0].error_code
}

/// DescribeConfigs of a topic on `boot`: every config name to value (None if the broker
/// hides it).
pub fn topic_configs(boot: &str, topic: &str) -> BTreeMap<String, Option<String>> {
    let mut c = WireClient::connect(boot.split(',').next().expect("addr")).expect("connect");
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(None)]);
    let resp = c.send(req).expect("DescribeConfigs");
    let r = &resp.results[0];
    assert_eq!(
        r.error_code, 0,
        "DescribeConfigs {topic}: {:?}",
        r.error_message
    );
    r.configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
        .collect()
}

/// Partition count of `topic` as Metadata reports it on `boot` (0 if unknown).
pub fn partition_count(boot: &str, topic: &str) -> usize {
    let mut c = WireClient::connect(boot.split(',').next().expect("addr")).expect("connect");
    let md = c.metadata(Some(&[topic])).expect("Metadata");
    md.topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic) && t.error_code == 0)
        .map(|t| t.partitions.len())
        .unwrap_or(0)
}

/// The topic id of `topic` on `boot`.
pub fn topic_id(boot: &str, topic: &str) -> uuid::Uuid {
    let mut c = WireClient::connect(boot.split(',').next().expect("addr")).expect("connect");
    c.partition_info(topic, 0).expect("partition info").topic_id
}

/// Output of tests/java/src/RecordDump.java: "R …" record lines and "D …" digest lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dump {
    /// `R <partition> <offset> <key> <value> <headers>` lines, in read order per partition.
    pub records: Vec<String>,
    /// `D <partition> <count> <first> <last> <hash>` lines.
    pub digests: Vec<String>,
}

/// Runs RecordDump (a plain Java KafkaConsumer) against `boot`.
pub fn java_dump(boot: &str, topic: &str, read_committed: bool, records: bool) -> Dump {
    let iso = if read_committed {
        "read_committed"
    } else {
        "read_uncommitted"
    };
    let mode = if records { "records" } else { "digest" };
    let ran = proc::run_ok(
        crate::java::program("RecordDump").args([boot, topic, iso, mode]),
        Duration::from_secs(240),
    );
    assert!(
        ran.stdout.lines().any(|l| l == "END"),
        "RecordDump did not finish:\n{}",
        ran.stderr
    );
    // Partitions are read concurrently: order records by (partition, offset) and digests by
    // partition so two brokers' dumps compare line by line.
    let key = |l: &String| -> (i64, i64) {
        let mut c = l.split(' ').skip(1).map(|x| x.parse::<i64>().unwrap_or(-1));
        (c.next().unwrap_or(-1), c.next().unwrap_or(-1))
    };
    let mut dump = Dump {
        records: ran
            .stdout
            .lines()
            .filter(|l| l.starts_with("R "))
            .map(str::to_string)
            .collect(),
        digests: ran
            .stdout
            .lines()
            .filter(|l| l.starts_with("D "))
            .map(str::to_string)
            .collect(),
    };
    dump.records.sort_by_key(key);
    dump.digests.sort_by_key(|l| key(l).0);
    dump
}

/// Offsets of every record of `topic`/`partition` read with Fetch (read_uncommitted), to
/// look at offset gaps.
pub fn record_offsets(boot: &str, topic: &str, partition: i32) -> Vec<i64> {
    crate::oracle::read_records(boot, topic, partition)
        .unwrap_or_else(|e| panic!("read {topic}-{partition}: {e}"))
        .into_iter()
        .map(|(o, _)| o)
        .collect()
}

/// FindCoordinator (v4) with key type MIRROR (2, KIP-1279) for `mirror`: (node, error).
pub fn find_mirror_coordinator(addr: &str, mirror: &str) -> (i32, i16) {
    let req = kafka_protocol::messages::FindCoordinatorRequest::default()
        .with_key_type(2)
        .with_coordinator_keys(vec![crate::helpers::str_bytes(mirror)]);
    let r = WireClient::connect(addr)
        .unwrap()
        .send_at(req, 4)
        .expect("FindCoordinator");
    let c = &r.coordinators[0];
    (c.node_id.0, c.error_code)
}
