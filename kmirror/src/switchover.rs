//! `kmirror mirror switchover` (planned, zero loss) and `reverse` (failback after an
//! unplanned failover), run against the destination.
//!
//! Each is a sequence of idempotent steps whose progress is read back from the two clusters
//! rather than kept by the CLI, so a rerun after a crash of the CLI or of either cluster at
//! any step resumes where things stand:
//!
//! 1. fence (switchover, kmirror source): the topics' `mirror.write.fence` on the source, so
//!    producers get NOT_ENOUGH_REPLICAS (retriable) and nothing more is written there;
//! 2. fail over on the destination with the broker's sync check (`remove --all
//!    --wait-for-sync`): every partition stops at or past the source's last stable offset;
//! 3. the source follows: a mirror on the source whose source is the destination, the topics
//!    added to it (a switchover refuses if that would truncate anything: the proof that the
//!    source holds nothing the destination lacks);
//! 4. lift the fence (the topics are now read-only mirror topics on the old source).
//!
//! For an Apache Kafka source (no mirror APIs) the fence is the operator's: `--quiet-ms`
//! checks that the source's end offsets do not move for that long, step 2 runs, and the
//! source's end offsets are read again afterwards: the command claims zero loss only when
//! they still equal where the destination stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::{Duration, Instant};

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::IncrementalAlterConfigsRequest;
use kafka_protocol::protocol::StrBytes;
use kmirror_control::mirror::WRITE_FENCE_CONFIG;
use kmirror_mirror::api::RemoveTopicsFromMirrorRequest;
use kmirror_mirror::client::build;
use kmirror_mirror::client::security::ClientSecurity;
use kmirror_mirror::client::{BlockingConnection, BlockingMirrorCalls};
use kmirror_net::keys::error as code;
use kmirror_types::TopicPartition;

use crate::mirror_cli::{
    add_topics_request, check, check_topics, create, describe_rows, fetch_describe, mirror_source,
    print_plan, CliResult, DescribeRow,
};

/// Environment variable naming a step after which the command stops with an error, as a
/// crash there would (tests: `fenced`, `failed-over`, `reverse-created`, `reverse-added`).
pub(crate) const FAILPOINT_ENV: &str = "KMIRROR_SWITCHOVER_FAILPOINT";

/// What `switchover` and `reverse` share.
pub(crate) struct Follow<'a> {
    /// The mirror on the destination.
    pub name: &'a str,
    /// The destination as the source's brokers reach it (the reverse mirror's source).
    pub reverse_source: &'a str,
    /// The reverse mirror's name on the old source.
    pub reverse_name: &'a str,
    /// The reverse mirror's settings (its connection to the destination: security, ...).
    pub reverse_settings: BTreeMap<String, String>,
    /// The CLI's own connection settings for the destination (dry-run reads) and the source.
    pub security: &'a ClientSecurity,
    pub source_security: &'a ClientSecurity,
    /// Bounds each wait (sync, STOPPED, MIRRORING).
    pub wait: Duration,
    pub timeout: Duration,
}

/// `switchover NAME --all [--quiet-ms MS]`.
pub(crate) fn switchover(
    dest: &mut BlockingConnection,
    out: &mut impl Write,
    f: &Follow<'_>,
    quiet_ms: Option<u64>,
) -> CliResult<()> {
    let source = crate::mirror_cli::source_of(dest, f.name)?;
    let rows = describe_rows(&fetch_describe(dest, Some(f.name))?);
    let live: BTreeSet<String> = rows
        .iter()
        .filter(|r| r.state != "STOPPED")
        .map(|r| r.topic.clone())
        .collect();
    let mut src = connect_source(&source, f)?;
    if !src.versions().supports_mirroring() {
        let quiet = quiet_ms.ok_or_else(|| {
            format!(
                "{source} does not offer the mirror APIs (Apache Kafka?): kmirror cannot fence \
                 its producers; stop them, then pass --quiet-ms MS (the source's end offsets \
                 must not move for that long)"
            )
        })?;
        return kafka_switchover(dest, out, f, &source, &rows, quiet);
    }
    // Progress, read back: topics still mirroring, topics this switchover fenced on the
    // source, topics the reverse mirror already follows.
    let followed = reverse_topics(&mut src, f)?;
    let fenced = fenced_topics(&mut src, f.name)?;
    let topics: BTreeSet<String> = live
        .iter()
        .chain(&fenced)
        .chain(&followed)
        .cloned()
        .collect();
    if topics.is_empty() {
        return Err(format!(
            "mirror '{}' has no topic to switch over (none mirroring, none fenced on {source})",
            f.name
        )
        .into());
    }
    let list = join(&topics);
    writeln!(
        out,
        "switchover '{}': {list} from {source} to {}",
        f.name, f.reverse_source
    )?;

    // 1. Fence the source's producers (not the topics already following: they are
    //    read-only mirror topics there).
    let to_fence: Vec<String> = topics.difference(&followed).cloned().collect();
    if !to_fence.is_empty() {
        set_fence(&mut src, &to_fence, Some(f.name))?;
        writeln!(
            out,
            "fenced: produce to {} on {source} answers NOT_ENOUGH_REPLICAS (retriable)",
            to_fence.join(", ")
        )?;
    }
    failpoint("fenced")?;

    // 2. Fail over on the destination once it holds everything the source committed.
    if !live.is_empty() {
        fail_over_synced(dest, out, f, &live)?;
    }
    wait_states(dest, f.name, &topics, &["STOPPED"], f.wait, "failed over")?;
    failpoint("failed-over")?;

    // 3. The source follows the destination; nothing may be truncated.
    follow(&mut src, out, f, &topics, true, false)?;

    // 4. Lift the fence once every partition follows (read-only as a mirror topic).
    wait_states(
        &mut src,
        f.reverse_name,
        &topics,
        &["MIRRORING"],
        f.wait,
        "following",
    )?;
    set_fence(&mut src, &topics.iter().cloned().collect::<Vec<_>>(), None)?;
    writeln!(
        out,
        "done: {} is the primary for {list}; {source} follows it as mirror '{}' (read-only \
         there), nothing truncated",
        f.reverse_source, f.reverse_name
    )?;
    Ok(())
}

/// `reverse NAME [--dry-run]`: the old source follows the destination for every topic
/// `NAME` failed over (the divergent tail the source wrote after the failover is truncated;
/// the dry run names it).
pub(crate) fn reverse(
    dest: &mut BlockingConnection,
    out: &mut impl Write,
    f: &Follow<'_>,
    dry_run: bool,
) -> CliResult<()> {
    let source = crate::mirror_cli::source_of(dest, f.name)?;
    let rows = describe_rows(&fetch_describe(dest, Some(f.name))?);
    let stopped: BTreeSet<String> = rows
        .iter()
        .filter(|r| r.state == "STOPPED")
        .map(|r| r.topic.clone())
        .collect();
    let mut src = connect_source(&source, f)?;
    if !src.versions().supports_mirroring() {
        return Err(format!(
            "{source} does not offer the mirror APIs (Apache Kafka?): it cannot follow \
             {}; mirror back with MirrorMaker 2 or a kmirror in its place",
            f.reverse_source
        )
        .into());
    }
    let topics: BTreeSet<String> = stopped
        .iter()
        .chain(&reverse_topics(&mut src, f)?)
        .cloned()
        .collect();
    if topics.is_empty() {
        return Err(format!("mirror '{}' has no failed-over topic to reverse", f.name).into());
    }
    follow(&mut src, out, f, &topics, false, dry_run)?;
    if !dry_run {
        writeln!(
            out,
            "done: {source} follows {} for {} as mirror '{}'",
            f.reverse_source,
            join(&topics),
            f.reverse_name
        )?;
    }
    Ok(())
}

fn failpoint(step: &str) -> CliResult<()> {
    if std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == step) {
        return Err(
            format!("failpoint {step}: stopped after this step (run again to resume)").into(),
        );
    }
    Ok(())
}

fn join<'a>(topics: impl IntoIterator<Item = &'a String>) -> String {
    topics
        .into_iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CLI's connection to the mirror's source (first reachable address).
fn connect_source(source: &str, f: &Follow<'_>) -> CliResult<BlockingConnection> {
    let mut last = String::from("no address given");
    for addr in source.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        match BlockingConnection::connect_secured(addr, "kmirror-cli", f.timeout, f.source_security)
        {
            Ok(c) => return Ok(c),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("cannot reach the source {source}: {last}").into())
}

/// The topics the reverse mirror already has on the source (empty when it does not exist).
fn reverse_topics(src: &mut BlockingConnection, f: &Follow<'_>) -> CliResult<BTreeSet<String>> {
    if mirror_source(src, f.reverse_name)?.is_none() {
        return Ok(BTreeSet::new());
    }
    Ok(describe_rows(&fetch_describe(src, Some(f.reverse_name))?)
        .into_iter()
        .map(|r| r.topic)
        .collect())
}

/// Topics on the source whose write fence names this switchover.
fn fenced_topics(src: &mut BlockingConnection, name: &str) -> CliResult<BTreeSet<String>> {
    let md = src.send(&build::metadata(None))?;
    let all: Vec<String> = md
        .topics
        .iter()
        .filter(|t| t.error_code == code::NONE && !t.is_internal)
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect();
    if all.is_empty() {
        return Ok(BTreeSet::new());
    }
    let resp = src.send(&build::describe_topic_configs(&all))?;
    Ok(resp
        .results
        .iter()
        .filter(|r| r.error_code == code::NONE)
        .filter(|r| {
            r.configs
                .iter()
                .any(|c| c.name.as_str() == WRITE_FENCE_CONFIG && c.value.as_deref() == Some(name))
        })
        .map(|r| r.resource_name.to_string())
        .collect())
}

/// Sets (`Some(name)`) or lifts (`None`) the write fence on `topics` of the source.
fn set_fence(
    src: &mut BlockingConnection,
    topics: &[String],
    fence: Option<&str>,
) -> CliResult<()> {
    const TOPIC: i8 = 2;
    const SET: i8 = 0;
    const DELETE: i8 = 1;
    let req = IncrementalAlterConfigsRequest::default().with_resources(
        topics
            .iter()
            .map(|t| {
                AlterConfigsResource::default()
                    .with_resource_type(TOPIC)
                    .with_resource_name(StrBytes::from_string(t.clone()))
                    .with_configs(vec![AlterableConfig::default()
                        .with_name(StrBytes::from_static_str(WRITE_FENCE_CONFIG))
                        .with_config_operation(if fence.is_some() { SET } else { DELETE })
                        .with_value(fence.map(|v| StrBytes::from_string(v.to_owned())))])
            })
            .collect(),
    );
    let resp = src.send(&req)?;
    for r in &resp.responses {
        check(
            &format!("IncrementalAlterConfigs({})", r.resource_name.as_str()),
            r.error_code,
            r.error_message.as_deref(),
        )?;
    }
    Ok(())
}

/// RemoveTopicsFromMirror of every topic of the mirror (`--all`: nothing joins afterwards),
/// answered once the broker has mirrored what the source had committed.
fn fail_over_synced(
    dest: &mut BlockingConnection,
    out: &mut impl Write,
    f: &Follow<'_>,
    live: &BTreeSet<String>,
) -> CliResult<BTreeMap<TopicPartition, i64>> {
    let resp = dest.send_mirror(&RemoveTopicsFromMirrorRequest {
        mirror_name: f.name.to_owned(),
        state_validation_offset: -1,
        patterns: vec![".*".to_owned()],
        wait_for_sync_ms: i64::try_from(f.wait.as_millis()).unwrap_or(i64::MAX),
        ..Default::default()
    })?;
    check_topics("RemoveTopicsFromMirror", &resp)?;
    let mut stopped = BTreeMap::new();
    for t in resp.topics.iter().filter(|t| live.contains(&t.name)) {
        let at: Vec<String> = t
            .stopped_at
            .iter()
            .map(|p| {
                stopped.insert(
                    TopicPartition::new(t.name.clone(), p.partition_index),
                    p.offset,
                );
                format!("{}@{}", p.partition_index, p.offset)
            })
            .collect();
        writeln!(out, "failed over: {} (log ends: {})", t.name, at.join(", "))?;
    }
    Ok(stopped)
}

/// Waits until every partition of `topics` in mirror `name` is in one of `states`.
fn wait_states(
    conn: &mut BlockingConnection,
    name: &str,
    topics: &BTreeSet<String>,
    states: &[&str],
    wait: Duration,
    what: &str,
) -> CliResult<()> {
    let deadline = Instant::now() + wait;
    loop {
        let rows = describe_rows(&fetch_describe(conn, Some(name))?);
        let ours: Vec<&DescribeRow> = rows.iter().filter(|r| topics.contains(&r.topic)).collect();
        let seen: BTreeSet<&String> = ours.iter().map(|r| &r.topic).collect();
        let behind: Vec<String> = ours
            .iter()
            .filter(|r| !states.contains(&r.state.as_str()))
            .map(|r| format!("{}-{} {}", r.topic, r.partition, r.state))
            .chain(
                topics
                    .iter()
                    .filter(|t| !seen.contains(t))
                    .map(|t| format!("{t} not in mirror '{name}'")),
            )
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "not {what} after {} ms on {}: {} (run again to resume)",
                wait.as_millis(),
                conn.addr(),
                behind.join(", ")
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The old source follows the destination for `topics`: the reverse mirror created if
/// missing, then the topics it does not have yet added. `zero_loss` refuses any truncation
/// (a switchover); `dry_run` prints the plan and changes nothing.
fn follow(
    src: &mut BlockingConnection,
    out: &mut impl Write,
    f: &Follow<'_>,
    topics: &BTreeSet<String>,
    zero_loss: bool,
    dry_run: bool,
) -> CliResult<()> {
    match mirror_source(src, f.reverse_name)? {
        Some(source) if source != f.reverse_source => {
            return Err(format!(
                "mirror '{}' already exists on {} with source {source} (not {}): pass \
                 --reverse-name",
                f.reverse_name,
                src.addr(),
                f.reverse_source
            )
            .into())
        }
        Some(_) => {}
        None if dry_run => {}
        None => {
            create(
                src,
                out,
                f.reverse_name,
                f.reverse_source,
                f.reverse_settings.clone(),
            )?;
        }
    }
    failpoint("reverse-created")?;
    let have = reverse_topics(src, f)?;
    let to_add: Vec<String> = topics.difference(&have).cloned().collect();
    if !to_add.is_empty() {
        let plan = kmirror_mirror::dry_run_plan(
            src,
            f.reverse_source,
            f.security,
            f.reverse_name,
            &to_add,
            f.timeout,
        )
        .map_err(|e| format!("planning the reverse: {e}"))?;
        let lossy: Vec<String> = plan
            .iter()
            .filter(|r| r.plan.truncated() > 0)
            .map(|r| {
                format!(
                    "{}-{}: {} records from {}",
                    r.topic,
                    r.partition,
                    r.plan.truncated(),
                    r.plan.truncate_to.get()
                )
            })
            .collect();
        if dry_run {
            return print_plan(out, &plan, false);
        }
        if zero_loss && !lossy.is_empty() {
            return Err(format!(
                "the old source holds records the new primary lacks ({}); nothing was \
                 truncated: inspect them, then `reverse` accepts the truncation",
                lossy.join("; ")
            )
            .into());
        }
        let resp = src.send_mirror(&add_topics_request(f.reverse_name, &to_add, -2))?;
        check_topics("AddTopicsToMirror", &resp)?;
        let truncated: i64 = plan.iter().map(|r| r.plan.truncated()).sum();
        writeln!(
            out,
            "following: {} on {} (mirror '{}'; {truncated} records truncated{})",
            to_add.join(", "),
            src.addr(),
            f.reverse_name,
            if lossy.is_empty() {
                String::new()
            } else {
                format!(": {}", lossy.join("; "))
            }
        )?;
    } else if dry_run {
        writeln!(out, "(dry run: every topic already follows; nothing to do)")?;
        return Ok(());
    }
    failpoint("reverse-added")?;
    Ok(())
}

/// The switchover from an Apache Kafka source: quiet check, synced failover, and the claim
/// only what the offsets prove.
fn kafka_switchover(
    dest: &mut BlockingConnection,
    out: &mut impl Write,
    f: &Follow<'_>,
    source: &str,
    rows: &[DescribeRow],
    quiet_ms: u64,
) -> CliResult<()> {
    let parts: Vec<TopicPartition> = rows
        .iter()
        .filter(|r| r.state != "STOPPED")
        .map(|r| TopicPartition::new(r.topic.clone(), r.partition))
        .collect();
    if parts.is_empty() {
        return Err(format!("mirror '{}' has no topic still mirroring", f.name).into());
    }
    let read = || {
        kmirror_mirror::verify::last_stable_offsets(source, f.source_security, &parts, f.timeout)
            .map(|v| v.into_iter().collect::<BTreeMap<_, _>>())
            .map_err(|e| format!("reading the source's end offsets: {e}"))
    };
    let before = read()?;
    std::thread::sleep(Duration::from_millis(quiet_ms));
    let after = read()?;
    let moved: Vec<String> = after
        .iter()
        .filter(|(tp, o)| before.get(*tp) != Some(*o))
        .map(|(tp, o)| format!("{tp} {} -> {o}", before.get(tp).copied().unwrap_or(-1)))
        .collect();
    if !moved.is_empty() {
        return Err(format!(
            "the source is still being written ({}); stop its producers first; nothing failed over",
            moved.join(", ")
        )
        .into());
    }
    writeln!(
        out,
        "quiet: {source}'s end offsets did not move for {quiet_ms} ms ({} partitions)",
        parts.len()
    )?;
    let live: BTreeSet<String> = parts.iter().map(|tp| tp.topic.clone()).collect();
    let stopped = fail_over_synced(dest, out, f, &live)?;
    let topics = live.clone();
    wait_states(dest, f.name, &topics, &["STOPPED"], f.wait, "failed over")?;
    let end = read()?;
    let short: Vec<String> = end
        .iter()
        .filter(|(tp, o)| stopped.get(*tp).is_none_or(|s| s < *o) || after.get(*tp) != Some(*o))
        .map(|(tp, o)| {
            format!(
                "{tp}: source at {o}, failed over at {}",
                stopped.get(tp).copied().unwrap_or(-1)
            )
        })
        .collect();
    if !short.is_empty() {
        return Err(format!(
            "failed over, but not provably without loss: the source moved after the quiet \
             check ({}); those records are only on {source}",
            short.join("; ")
        )
        .into());
    }
    writeln!(
        out,
        "done: {} holds every record {source} had committed (its end offsets unchanged from \
         the quiet check to after the failover); {source} is Apache Kafka and does not follow: \
         keep its producers stopped",
        f.reverse_source
    )?;
    Ok(())
}
