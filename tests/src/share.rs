//! Share groups (KIP-932) from a test's side, on Apache Kafka and on kmirror alike: Kafka's
//! own tools (`kafka-features`, `kafka-configs`, the console share consumer) and the raw
//! DescribeShareGroupOffsets a user's admin client sends.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::{DescribeShareGroupOffsetsRequest, FindCoordinatorRequest};

use crate::helpers::{group_id, str_bytes};
use crate::{java, proc, WireClient};

pub const CONSOLE_SHARE_CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleShareConsumer";
pub const SHARE_GROUP_COMMAND: &str = "org.apache.kafka.tools.consumer.group.ShareGroupCommand";
pub const FEATURE_COMMAND: &str = "org.apache.kafka.tools.FeatureCommand";
pub const CONFIG_COMMAND: &str = "kafka.admin.ConfigCommand";

/// Runs Kafka tool `class` against `boot` with `args`.
pub fn run_tool(class: &str, boot: &str, args: &[&str], timeout: Duration) -> proc::Ran {
    proc::run(
        java::tool(class)
            .args(["--bootstrap-server", boot])
            .args(args),
        timeout,
    )
}

/// `kafka-features upgrade --feature share.version=1`, which must succeed.
pub fn enable(boot: &str) {
    let ran = run_tool(
        FEATURE_COMMAND,
        boot,
        &["upgrade", "--feature", "share.version=1"],
        Duration::from_secs(90),
    );
    assert!(
        ran.status.success(),
        "share.version=1 on {boot}:\n{}{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 20)
    );
}

/// `kafka-configs --entity-type groups --entity-name GROUP --alter --add-config CONFIGS`.
pub fn alter_group_configs(boot: &str, group: &str, configs: &str) -> proc::Ran {
    run_tool(
        CONFIG_COMMAND,
        boot,
        &[
            "--entity-type",
            "groups",
            "--entity-name",
            group,
            "--alter",
            "--add-config",
            configs,
        ],
        Duration::from_secs(90),
    )
}

/// [`alter_group_configs`], which must succeed.
pub fn set_group_configs(boot: &str, group: &str, configs: &str) {
    let ran = alter_group_configs(boot, group, configs);
    assert!(
        ran.status.success(),
        "group configs of {group} on {boot}:\n{}{}",
        ran.stdout,
        proc::last_lines(&ran.stderr, 20)
    );
}

/// `kafka-console-share-consumer --topic TOPIC --group GROUP --max-messages MAX
/// --timeout-ms TIMEOUT_MS`, run to its end.
pub fn console_run(boot: &str, topic: &str, group: &str, max: usize, timeout_ms: u32) -> proc::Ran {
    run_tool(
        CONSOLE_SHARE_CONSUMER,
        boot,
        &[
            "--topic",
            topic,
            "--group",
            group,
            "--max-messages",
            &max.to_string(),
            "--timeout-ms",
            &timeout_ms.to_string(),
        ],
        Duration::from_secs(180),
    )
}

/// [`console_run`]: the values it printed, in order.
pub fn console_consume(
    boot: &str,
    topic: &str,
    group: &str,
    max: usize,
    timeout_ms: u32,
) -> Vec<String> {
    let ran = console_run(boot, topic, group, max, timeout_ms);
    let values: Vec<String> = ran
        .stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if values.len() != max {
        eprintln!(
            "console share consumer of {group} on {boot}: {} of {max}; stderr:\n{}",
            values.len(),
            proc::last_lines(&ran.stderr, 30)
        );
    }
    values
}

/// The broker's coordinator for `group` (FindCoordinator key type 0), asked again while it
/// is not available yet (Kafka creates `__consumer_offsets` on the first ask).
pub fn coordinator(boot: &str, group: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let last = WireClient::connect(boot)
            .and_then(|mut c| {
                c.send(
                    FindCoordinatorRequest::default()
                        .with_key_type(0)
                        .with_coordinator_keys(vec![str_bytes(group)]),
                )
            })
            .map(|r| {
                r.coordinators.first().map_or((-1, String::new()), |k| {
                    (k.error_code, format!("{}:{}", k.host.as_str(), k.port))
                })
            });
        match last {
            Ok((0, addr)) => return addr,
            other => assert!(
                Instant::now() < deadline,
                "no coordinator for {group} within 60 s: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// DescribeShareGroupOffsets v0 of every partition of `group`: (topic, partition) -> start
/// offset; an error names the group's or a partition's error code.
pub fn start_offsets(boot: &str, group: &str) -> Result<BTreeMap<(String, i32), i64>, String> {
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(group_id(group))
            .with_topics(None),
    ]);
    let r = WireClient::connect(&coordinator(boot, group))
        .and_then(|mut c| c.send_at(req, 0))
        .map_err(|e| e.to_string())?;
    let g = r.groups.first().ok_or("no group in the answer")?;
    if g.error_code != 0 {
        return Err(format!("group error {}", g.error_code));
    }
    let mut out = BTreeMap::new();
    for t in &g.topics {
        for p in &t.partitions {
            if p.error_code != 0 {
                return Err(format!(
                    "{}-{}: error {}",
                    t.topic_name.as_str(),
                    p.partition_index,
                    p.error_code
                ));
            }
            out.insert(
                (t.topic_name.to_string(), p.partition_index),
                p.start_offset,
            );
        }
    }
    Ok(out)
}
