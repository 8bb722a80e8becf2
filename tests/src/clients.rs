//! The real-client scenarios of issue 3, written once and run with each client family
//! (Java kafka-clients, librdkafka) against any [`BrokerUnderTest`] (kmirror, or Apache Kafka
//! to validate the scenario itself).

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::java::{self, tools};
use crate::proc::{self, LineChild};
use crate::{python, BrokerUnderTest, WireClient};

/// Which client library drives a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// Apache Kafka's Java clients and tools (idempotence on, as the Java default).
    Java,
    /// librdkafka through confluent-kafka (idempotence on explicitly).
    Librdkafka,
}

impl Client {
    pub(crate) fn producer(
        self,
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        records: u64,
        props: &[&str],
    ) -> Command {
        let mut c = match self {
            Client::Java => java::program("SeqProducer"),
            Client::Librdkafka => python::script("seq_producer.py"),
        };
        c.args([
            bootstrap,
            topic,
            &partitions.to_string(),
            &records.to_string(),
        ])
        .args(props);
        c
    }

    pub(crate) fn consumer(
        self,
        bootstrap: &str,
        group: &str,
        topic: &str,
        stop: &str,
        rate: u32,
    ) -> Command {
        let mut c = match self {
            Client::Java => java::program("GroupConsumer"),
            Client::Librdkafka => python::script("group_consumer.py"),
        };
        c.args([bootstrap, group, topic, stop, &rate.to_string()]);
        c
    }

    /// Creates `topic` with this client's admin tooling (TopicCommand / AdminClient).
    pub fn create_topic(self, bootstrap: &str, topic: &str, partitions: i32) {
        let parts = partitions.to_string();
        match self {
            Client::Java => {
                java::run_tool(
                    tools::TOPIC_COMMAND,
                    &[
                        "--bootstrap-server",
                        bootstrap,
                        "--create",
                        "--topic",
                        topic,
                        "--partitions",
                        &parts,
                        "--replication-factor",
                        "1",
                    ],
                    Duration::from_secs(60),
                );
            }
            Client::Librdkafka => {
                proc::run_ok(
                    python::script("create_topic.py").args([bootstrap, topic, &parts]),
                    Duration::from_secs(60),
                );
            }
        }
    }

    /// The group's committed offset per partition, read with this client's tooling
    /// (ConsumerGroupCommand --describe / librdkafka `committed`).
    pub fn committed(
        self,
        bootstrap: &str,
        group: &str,
        topic: &str,
        partitions: i32,
    ) -> BTreeMap<i32, i64> {
        let mut out = BTreeMap::new();
        match self {
            Client::Java => {
                let ran = java::run_tool(
                    tools::CONSUMER_GROUP_COMMAND,
                    &[
                        "--bootstrap-server",
                        bootstrap,
                        "--describe",
                        "--group",
                        group,
                    ],
                    Duration::from_secs(90),
                );
                // Columns: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
                for line in ran.stdout.lines() {
                    let cols: Vec<&str> = line.split_whitespace().collect();
                    if cols.len() >= 4 && cols[0] == group && cols[1] == topic {
                        let p: i32 = cols[2].parse().expect("partition column");
                        let off: i64 = cols[3].parse().unwrap_or(-1);
                        out.insert(p, off);
                    }
                }
            }
            Client::Librdkafka => {
                let ran = proc::run_ok(
                    python::script("committed.py").args([
                        bootstrap,
                        group,
                        topic,
                        &partitions.to_string(),
                    ]),
                    Duration::from_secs(90),
                );
                for line in ran.stdout.lines() {
                    let cols: Vec<&str> = line.split_whitespace().collect();
                    if cols.len() == 3 && cols[0] == "C" {
                        out.insert(
                            cols[1].parse().expect("partition"),
                            cols[2].parse().expect("offset"),
                        );
                    }
                }
            }
        }
        out
    }
}

/// One acknowledged or consumed record: partition, per-partition sequence, offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Seq {
    /// Partition.
    pub partition: i32,
    /// Producer's per-partition sequence number (from the value).
    pub seq: i64,
    /// Offset assigned by the broker.
    pub offset: i64,
}

pub(crate) fn parse_acks(lines: &[String]) -> (Vec<Seq>, usize) {
    let mut acks = Vec::new();
    let mut errors = 0;
    for l in lines {
        let cols: Vec<&str> = l.split_whitespace().collect();
        match cols.as_slice() {
            ["ACK", p, s, o] => acks.push(Seq {
                partition: p.parse().expect("ack partition"),
                seq: s.parse().expect("ack seq"),
                // librdkafka acks a retried batch the broker already had
                // (DUPLICATE_SEQUENCE_NUMBER) without its offset: Python prints None.
                offset: if *o == "None" {
                    -1
                } else {
                    o.parse().expect("ack offset")
                },
            }),
            ["ERR", ..] => errors += 1,
            _ => {}
        }
    }
    (acks, errors)
}

/// Parses a consumer's "R <partition> <offset> <p>:<seq>" lines.
pub(crate) fn parse_consumed(lines: &[String]) -> Vec<Seq> {
    lines
        .iter()
        .filter_map(|l| {
            let rest = l.strip_prefix("R ")?;
            let cols: Vec<&str> = rest.split_whitespace().collect();
            let (vp, vs) = cols.get(2)?.split_once(':')?;
            let partition: i32 = cols[0].parse().ok()?;
            assert_eq!(
                vp.parse::<i32>().ok(),
                Some(partition),
                "record from partition {partition} carries value of partition {vp}: {l}"
            );
            Some(Seq {
                partition,
                offset: cols[1].parse().ok()?,
                seq: vs.parse().ok()?,
            })
        })
        .collect()
}

/// "<partition>:<seq>" of a value in SeqFormat layout (the whole value if it is not ours).
fn seq_key(v: &[u8]) -> &[u8] {
    let Some(i) = v.iter().position(|b| *b == b':') else {
        return v;
    };
    match v[i + 1..].iter().position(|b| *b == b':') {
        Some(j) => &v[..i + 1 + j],
        None => v,
    }
}

fn expected_per_partition(records: u64, partitions: i32) -> Vec<i64> {
    (0..partitions)
        .map(|p| {
            let p = p as u64;
            (records / partitions as u64 + u64::from(p < records % partitions as u64)) as i64
        })
        .collect()
}

/// Issue 3: `records` over `partitions`, acks=all, consumed back by a group of two members
/// (the second joins midway, forcing a rebalance): every record exactly once, in order per
/// partition; then the group's committed offsets survive a broker restart.
pub fn exactly_once_across_rebalance_and_restart(
    client: Client,
    broker: &mut dyn BrokerUnderTest,
    records: u64,
) {
    let partitions = 6;
    let topic = "seq";
    let group = "seq-readers";
    let boot = broker.bootstrap();
    client.create_topic(&boot, topic, partitions);

    // Produce; with idempotence and one producer, offsets within a partition equal sequences.
    let ran = proc::run_ok(
        &mut client.producer(&boot, topic, partitions, records, &[]),
        Duration::from_secs(300),
    );
    let lines: Vec<String> = ran.stdout.lines().map(str::to_string).collect();
    let (acks, errors) = parse_acks(&lines);
    assert_eq!(
        errors,
        0,
        "producer errors:\n{}",
        proc::last_lines(&ran.stdout, 5)
    );
    assert_eq!(acks.len() as u64, records, "acknowledged records");
    for a in &acks {
        assert_eq!(
            a.offset, a.seq,
            "partition {} sequence {} was acknowledged at offset {}",
            a.partition, a.seq, a.offset
        );
    }
    let expected = expected_per_partition(records, partitions);

    // Consume with one member, then let a second join midway.
    let dir = tempfile::tempdir().expect("temp dir");
    let stop = dir.path().join("stop");
    let stop_s = stop.display().to_string();
    let rate = (records / 12).max(1000) as u32; // ~12 s alone, so the join lands midway
    let first = LineChild::spawn(&mut client.consumer(&boot, group, topic, &stop_s, rate));
    let started = Instant::now();
    proc::wait_for(
        Duration::from_secs(120),
        "first member to consume 20%",
        || (first.count("R ") as u64 >= records / 5).then_some(()),
    );
    let at_join = first.count("R ");
    let second = LineChild::spawn(&mut client.consumer(&boot, group, topic, &stop_s, rate));
    let deadline = started + Duration::from_secs(240);
    loop {
        let total = (first.count("R ") + second.count("R ")) as u64;
        if total >= records {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "consumed only {total} of {records} records in 240 s\nfirst stderr:\n{}\nsecond stderr:\n{}",
            first.stderr_tail(20),
            second.stderr_tail(20)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Give duplicates (if any) a moment to show up before stopping.
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(&stop, b"stop").expect("stop file");
    let (s1, l1) = first.wait(Duration::from_secs(60));
    let (s2, l2) = second.wait(Duration::from_secs(60));
    assert!(s1.success() && s2.success(), "consumers exited {s1} / {s2}");
    assert!(
        (at_join as u64) < records,
        "the first member had consumed everything before the second joined"
    );
    let c1 = parse_consumed(&l1);
    let c2 = parse_consumed(&l2);
    assert!(
        !c2.is_empty(),
        "the second member never got a partition: no rebalance happened"
    );
    let revoked_after_records = l1
        .iter()
        .skip_while(|l| !l.starts_with("R "))
        .any(|l| l.starts_with("REVOKED"));
    assert!(
        revoked_after_records,
        "the first member never gave up partitions midway"
    );

    // Exactly once, in order per partition, and each record where it was acknowledged.
    assert_each_record_once_in_order(
        &[("first member", &c1), ("second member", &c2)],
        &expected,
        records,
    );

    // Committed offsets: at the end of each partition, before and after a restart.
    let want: BTreeMap<i32, i64> = expected
        .iter()
        .enumerate()
        .map(|(p, n)| (p as i32, *n))
        .collect();
    assert_eq!(
        client.committed(&boot, group, topic, partitions),
        want,
        "committed offsets"
    );
    broker.restart();
    let boot = broker.bootstrap();
    assert_eq!(
        client.committed(&boot, group, topic, partitions),
        want,
        "committed offsets after restart"
    );
    let mut c = WireClient::connect(boot.split(',').next().expect("addr")).expect("connect");
    for (p, n) in want {
        assert_eq!(
            c.log_bounds(topic, p).expect("bounds"),
            (0, n),
            "partition {p} after restart"
        );
    }
}

/// How much of an idempotent producer's history a broker keeps across an unclean restart,
/// which decides whether a retry across a SIGKILL can be written twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartDedup {
    /// kmirror rebuilds each producer's last 5 batches from the log: no retry is written twice.
    LastFiveBatches,
    /// Apache Kafka 4.1 reloads producer state from the snapshot it takes after recovery, which
    /// holds one batch per producer (`ProducerStateManager.readSnapshot`). A retry of an older
    /// batch written before the kill then gets OUT_OF_ORDER_SEQUENCE_NUMBER, the Java producer
    /// bumps its epoch and resends its unacknowledged batches, and those written before the kill
    /// are stored twice: one contiguous run of sequences per partition, two copies each.
    LastBatchOnly,
}

/// Issue 3: SIGKILL the broker while a producer (acks=all) is mid-stream, start it again:
/// every record the producer saw acknowledged is in the log at its acknowledged offset.
pub fn acked_records_survive_sigkill(
    client: Client,
    broker: &mut dyn BrokerUnderTest,
    records: u64,
    dedup: RestartDedup,
) {
    let partitions = 6;
    let topic = "crash";
    let boot = broker.bootstrap();
    let mut admin = WireClient::connect(boot.split(',').next().expect("addr")).expect("connect");
    assert_eq!(
        admin
            .create_topic(topic, partitions, 1, &[])
            .expect("CreateTopics"),
        0
    );
    drop(admin);
    let props: &[&str] = match client {
        // The delivery timeout outlasts any restart: a batch that expires after being sent
        // makes the idempotent producer bump its epoch and resend what may already be
        // written, which Kafka itself then stores twice (seen when a loaded machine took
        // Kafka over 30 s to restart).
        Client::Java => &[
            "delivery.timeout.ms=120000",
            "request.timeout.ms=5000",
            "max.block.ms=120000",
            "retry.backoff.ms=100",
            "reconnect.backoff.max.ms=500",
        ],
        Client::Librdkafka => &[
            "message.timeout.ms=120000",
            "request.timeout.ms=5000",
            "retry.backoff.ms=100",
            "reconnect.backoff.max.ms=500",
        ],
    };
    let mut producer =
        LineChild::spawn(&mut client.producer(&boot, topic, partitions, records, props));
    proc::wait_for(
        Duration::from_secs(120),
        "10% of records acknowledged",
        || (producer.count("ACK ") as u64 >= records / 10).then_some(()),
    );
    assert!(
        producer.exited().is_none(),
        "the producer finished before the kill: make the run longer"
    );
    broker.kill();
    let acked_at_kill = producer.count("ACK ");
    std::thread::sleep(Duration::from_millis(500));
    broker.start_again();
    let (_, lines) = producer.wait(Duration::from_secs(180));
    let (acks, errors) = parse_acks(&lines);
    assert!(acks.len() >= acked_at_kill, "acks went backwards");

    let boot = broker.bootstrap();
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    let mut duplicated = Vec::new();
    let mut kafka_resent = 0;
    for p in 0..partitions {
        let log: HashMap<i64, Option<bytes::Bytes>> = crate::oracle::read_records(&boot, topic, p)
            .unwrap_or_else(|e| panic!("read back partition {p}: {e}"))
            .into_iter()
            .collect();
        // Both clients produce idempotently: a retry across the restart must not write twice.
        let mut copies: HashMap<&[u8], Vec<i64>> = HashMap::new();
        for (off, v) in &log {
            if let Some(v) = v {
                copies.entry(seq_key(v)).or_default().push(*off);
            }
        }
        let mut twice: Vec<(&[u8], Vec<i64>)> = copies
            .into_iter()
            .filter(|(_, offs)| offs.len() > 1)
            .collect();
        twice.sort();
        if dedup == RestartDedup::LastBatchOnly && !twice.is_empty() {
            let seqs: Vec<i64> = twice
                .iter()
                .map(|(k, _)| {
                    let k = String::from_utf8_lossy(k);
                    k.rsplit(':')
                        .next()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(-1)
                })
                .collect();
            let mut sorted = seqs.clone();
            sorted.sort_unstable();
            let contiguous = sorted.windows(2).all(|w| w[1] == w[0] + 1);
            let two_copies = twice.iter().all(|(_, offs)| offs.len() == 2);
            assert!(
                contiguous && two_copies,
                "partition {p}: duplicates beyond one resent run of batches: sequences {sorted:?}"
            );
            kafka_resent += twice.len();
        } else {
            duplicated.extend(
                twice
                    .into_iter()
                    .map(|(k, offs)| format!("{} at {offs:?}", String::from_utf8_lossy(k))),
            );
        }
        for a in acks.iter().filter(|a| a.partition == p) {
            match log.get(&a.offset) {
                None => missing.push(*a),
                Some(v) => {
                    let want = format!("{}:{}:", a.partition, a.seq);
                    let ok = v.as_ref().is_some_and(|v| v.starts_with(want.as_bytes()));
                    if !ok {
                        wrong.push(*a);
                    }
                }
            }
        }
    }
    assert!(
        missing.is_empty() && wrong.is_empty(),
        "{} acknowledged records lost (e.g. {:?}), {} overwritten (e.g. {:?}); {} acked, {} errors, {} acked before the kill",
        missing.len(),
        missing.first(),
        wrong.len(),
        wrong.first(),
        acks.len(),
        errors,
        acked_at_kill
    );
    assert!(
        duplicated.is_empty(),
        "{} records written more than once by an idempotent producer, e.g. {:?}; {} acked, {} errors, {} acked before the kill",
        duplicated.len(),
        duplicated.first(),
        acks.len(),
        errors,
        acked_at_kill
    );
    eprintln!(
        "{client:?}: {} acknowledged ({} before SIGKILL), {errors} failed, all present after restart; {kafka_resent} records stored twice by a resend after the restart",
        acks.len(),
        acked_at_kill
    );
}

/// The stock Java tools against a broker: TopicCommand creates, ProducerPerformance writes
/// `records` 1 KiB records with acks=all, ConsoleConsumer and ConsumerPerformance read every
/// one of them back.
pub fn java_tools_round_trip(broker: &dyn BrokerUnderTest, records: u64) {
    let boot = broker.bootstrap();
    let topic = "perf";
    let n = records.to_string();
    Client::Java.create_topic(&boot, topic, 3);
    let args = java::producer_performance_args(&boot, topic, records, 1024, &["acks=all"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let produced = java::run_tool(tools::PRODUCER_PERFORMANCE, &args, Duration::from_secs(180));
    let summary = produced
        .stdout
        .lines()
        .rev()
        .find(|l| l.contains("records sent"))
        .unwrap_or_else(|| panic!("no ProducerPerformance summary:\n{}", produced.stdout));
    assert!(
        summary.starts_with(&format!("{records} records sent")),
        "ProducerPerformance: {summary}"
    );
    let console = java::run_tool(
        tools::CONSOLE_CONSUMER,
        &[
            "--bootstrap-server",
            &boot,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            &n,
            "--timeout-ms",
            "30000",
        ],
        Duration::from_secs(180),
    );
    let lines = console.stdout.lines().filter(|l| l.len() == 1024).count() as u64;
    assert_eq!(lines, records, "ConsoleConsumer read {lines} 1 KiB records");
    let perf = java::run_tool(
        tools::CONSUMER_PERFORMANCE,
        &[
            "--bootstrap-server",
            &boot,
            "--topic",
            topic,
            "--messages",
            &n,
            "--timeout",
            "30000",
        ],
        Duration::from_secs(180),
    );
    // CSV: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ...
    let row = perf
        .stdout
        .lines()
        .rev()
        .find(|l| l.split(',').count() >= 5 && !l.starts_with("start.time"))
        .unwrap_or_else(|| panic!("no ConsumerPerformance row:\n{}", perf.stdout));
    let consumed: u64 = row
        .split(',')
        .nth(4)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert_eq!(consumed, records, "ConsumerPerformance: {row}");
}

/// Every produced record was consumed exactly once across `parts`, each at the offset it was
/// produced at, each member reading every partition in offset order: no duplicates, none of
/// partition p's `expected[p]` sequences missing, `records` distinct records in all.
fn assert_each_record_once_in_order(parts: &[(&str, &Vec<Seq>)], expected: &[i64], records: u64) {
    let mut seen: HashMap<(i32, i64), u32> = HashMap::new();
    for (name, consumed) in parts {
        let mut last: HashMap<i32, i64> = HashMap::new();
        for r in consumed.iter() {
            assert_eq!(
                r.offset, r.seq,
                "{name}: {r:?} is not at its produced offset"
            );
            if let Some(prev) = last.insert(r.partition, r.offset) {
                assert!(
                    r.offset > prev,
                    "{name} read partition {} out of order: {} after {prev}",
                    r.partition,
                    r.offset
                );
            }
            *seen.entry((r.partition, r.seq)).or_default() += 1;
        }
    }
    let dupes: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(
        dupes.is_empty(),
        "records delivered more than once, e.g. {dupes:?}"
    );
    for (p, n) in expected.iter().enumerate() {
        let missing: Vec<i64> = (0..*n)
            .filter(|s| !seen.contains_key(&(p as i32, *s)))
            .take(5)
            .collect();
        assert!(
            missing.is_empty(),
            "partition {p} never delivered sequences {missing:?}…"
        );
    }
    assert_eq!(seen.len() as u64, records, "distinct records consumed");
}

/// `kafka-consumer-groups --describe --members` lists one member of `group`, holding all
/// `partitions`.
fn assert_one_member_holds_all(boot: &str, group: &str, partitions: i32) {
    // A rebalance may still be completing (describe shows no assignment until the group is
    // Stable): ask again for a while.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let members = java::run_tool(
            tools::CONSUMER_GROUP_COMMAND,
            &[
                "--bootstrap-server",
                boot,
                "--describe",
                "--group",
                group,
                "--members",
            ],
            Duration::from_secs(90),
        );
        let member_rows: Vec<Vec<&str>> = members
            .stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|c| c.first() == Some(&group))
            .collect();
        let holds_all =
            member_rows.len() == 1 && member_rows[0].contains(&partitions.to_string().as_str());
        if holds_all {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "one member should hold all {partitions} partitions:\n{}",
            members.stdout
        );
        eprintln!(
            "waiting for one member of {group} to hold every partition:\n{}",
            members.stdout
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The group type `kafka-consumer-groups --list --type` shows for `group` ("consumer" or
/// "classic"), lower-cased; empty when the group is not listed.
fn listed_group_type(boot: &str, group: &str) -> String {
    let listed = java::run_tool(
        tools::CONSUMER_GROUP_COMMAND,
        &["--bootstrap-server", boot, "--list", "--type"],
        Duration::from_secs(90),
    );
    listed
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(group))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|t| t.to_ascii_lowercase())
        .unwrap_or_default()
}

/// The Java member leaves (its stop file) and exits cleanly, the producer acknowledged all
/// `records` without errors, and the records the Java member read plus those the librdkafka
/// member reads reach `records` within 300 s of `started`. Returns the Java member's lines.
fn java_leaves_and_librdkafka_drains(
    mut java: LineChild,
    stop_java: &str,
    producer: LineChild,
    rdk: &LineChild,
    records: u64,
    started: Instant,
) -> Vec<String> {
    std::fs::write(stop_java, b"stop").expect("stop file");
    proc::wait_for(Duration::from_secs(60), "the Java member to leave", || {
        java.exited().map(|_| ())
    });
    let java_err = java.stderr_tail(30);
    let (sj, lj) = java.wait(Duration::from_secs(60));
    assert!(sj.success(), "Java member exited {sj}:\n{java_err}");
    let (sp, lp) = producer.wait(Duration::from_secs(300));
    assert!(sp.success(), "producer exited {sp}");
    let (acks, errors) = parse_acks(&lp);
    assert_eq!(errors, 0, "producer errors");
    assert_eq!(acks.len() as u64, records, "acknowledged records");
    let deadline = started + Duration::from_secs(300);
    loop {
        let total = (parse_consumed(&lj).len() + rdk.count("R ")) as u64;
        if total >= records {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "consumed only {total} of {records} records\nlibrdkafka stderr:\n{}",
            rdk.stderr_tail(20)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    lj
}

/// Kafka 4.1's online group migration with real clients: a classic librdkafka member reads a
/// group alone; a Java KIP-848 member joins it (the broker upgrades the group to the consumer
/// protocol and splits the partitions between the two); the Java member leaves (the broker
/// downgrades the group to classic and the librdkafka member takes every partition). Every
/// record is read exactly once, in order, and the group's committed offsets reach the end.
pub fn classic_and_consumer_members_share_a_group(broker: &mut dyn BrokerUnderTest, records: u64) {
    let partitions = 6;
    let topic = "mix-seq";
    let group = "mix-readers";
    let boot = broker.bootstrap();
    Client::Java.create_topic(&boot, topic, partitions);
    let dir = tempfile::tempdir().expect("temp dir");
    let stop_java = dir.path().join("stop-java").display().to_string();
    let stop_rdk = dir.path().join("stop-rdk").display().to_string();
    let rate = (records / 20).max(1000) as u32;
    let mut rdk = LineChild::spawn(
        Client::Librdkafka
            .consumer(&boot, group, topic, &stop_rdk, rate)
            .arg("debug=cgrp"),
    );
    let producer =
        LineChild::spawn(&mut Client::Java.producer(&boot, topic, partitions, records, &[]));
    let started = Instant::now();
    proc::wait_for(
        Duration::from_secs(120),
        "the classic librdkafka member to consume 20%",
        || (rdk.count("R ") as u64 >= records / 5).then_some(()),
    );
    assert_eq!(
        listed_group_type(&boot, group),
        "classic",
        "before the upgrade"
    );
    let assigned_at_spawn = rdk.count("ASSIGNED");
    let java = LineChild::spawn(
        Client::Java
            .consumer(&boot, group, topic, &stop_java, rate)
            .arg("group.protocol=consumer"),
    );
    proc::wait_for(
        Duration::from_secs(120),
        "the KIP-848 Java member to join the classic group and consume",
        || (java.count("R ") > 0).then_some(()),
    );
    // The split is what matters, not whether records are left for the classic member when
    // its rebalance ends (on a loaded machine the Java member can join late in the run): it
    // must be given partitions again after giving them up to the joining member.
    proc::wait_for_or(
        Duration::from_secs(120),
        "the librdkafka member to be given partitions next to the Java member",
        || {
            let lines = rdk.lines();
            let assigned: Vec<&String> =
                lines.iter().filter(|l| l.starts_with("ASSIGNED")).collect();
            let rejoined = assigned.len() > assigned_at_spawn
                && assigned[assigned_at_spawn..]
                    .iter()
                    .any(|l| !l["ASSIGNED".len()..].trim().is_empty());
            rejoined.then_some(())
        },
        || format!("librdkafka stderr:\n{}", rdk.stderr_tail(40)),
    );
    assert_eq!(
        listed_group_type(&boot, group),
        "consumer",
        "after the upgrade"
    );
    let lj = java_leaves_and_librdkafka_drains(java, &stop_java, producer, &rdk, records, started);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        listed_group_type(&boot, group),
        "classic",
        "after the downgrade"
    );
    assert_one_member_holds_all(&boot, group, partitions);
    std::fs::write(&stop_rdk, b"stop").expect("stop file");
    proc::wait_for(
        Duration::from_secs(60),
        "the librdkafka member to leave",
        || rdk.exited().map(|_| ()),
    );
    let rdk_err = rdk.stderr_tail(30);
    let (sr, lr) = rdk.wait(Duration::from_secs(60));
    assert!(sr.success(), "librdkafka member exited {sr}:\n{rdk_err}");
    let cj = parse_consumed(&lj);
    let cr = parse_consumed(&lr);
    assert!(!cj.is_empty(), "the Java member got no partitions");
    assert!(
        lr.iter()
            .skip_while(|l| !l.starts_with("R "))
            .any(|l| l.starts_with("REVOKED")),
        "the librdkafka member never gave up partitions to the joining member"
    );
    assert_each_record_once_in_order(
        &[("java", &cj), ("librdkafka", &cr)],
        &expected_per_partition(records, partitions),
        records,
    );
    let want: BTreeMap<i32, i64> = expected_per_partition(records, partitions)
        .into_iter()
        .enumerate()
        .map(|(p, n)| (p as i32, n))
        .collect();
    assert_eq!(
        Client::Java.committed(&boot, group, topic, partitions),
        want,
        "committed offsets of the migrated group"
    );
}

/// Issue 11 step 2 (KIP-848): a consumer-protocol group (`group.protocol=consumer`) with a
/// Java member and a librdkafka member reads `records` sequence-numbered records while they are
/// produced. The librdkafka member joins midway, then the Java member leaves: every record is
/// consumed exactly once, in order per partition, both members got partitions, and
/// kafka-consumer-groups describes the group (members, then committed offsets at the end). A
/// classic group reading the same topic next to it still works. After a broker restart the
/// offsets are there, members rejoin, and the empty classic group upgrades to a consumer group.
pub fn consumer_protocol_group_handover(broker: &mut dyn BrokerUnderTest, records: u64) {
    let partitions = 6;
    let topic = "cg-seq";
    let group = "cg-readers";
    let boot = broker.bootstrap();
    Client::Java.create_topic(&boot, topic, partitions);
    let dir = tempfile::tempdir().expect("temp dir");
    let stop_java = dir.path().join("stop-java").display().to_string();
    let stop_rdk = dir.path().join("stop-rdk").display().to_string();
    let rate = (records / 20).max(1000) as u32;
    let kip848 = "group.protocol=consumer";
    let java = LineChild::spawn(
        Client::Java
            .consumer(&boot, group, topic, &stop_java, rate)
            .arg(kip848),
    );
    let producer =
        LineChild::spawn(&mut Client::Java.producer(&boot, topic, partitions, records, &[]));
    let started = Instant::now();
    proc::wait_for(
        Duration::from_secs(120),
        "the Java member to consume 20%",
        || (java.count("R ") as u64 >= records / 5).then_some(()),
    );
    let rdk = LineChild::spawn(
        Client::Librdkafka
            .consumer(&boot, group, topic, &stop_rdk, rate)
            .arg(kip848),
    );
    proc::wait_for(
        Duration::from_secs(120),
        "the librdkafka member to get partitions and consume",
        || (rdk.count("R ") > 0).then_some(()),
    );
    let java_at_leave = java.count("R ");
    let lj = java_leaves_and_librdkafka_drains(java, &stop_java, producer, &rdk, records, started);
    std::thread::sleep(Duration::from_secs(2));
    assert_one_member_holds_all(&boot, group, partitions);
    std::fs::write(&stop_rdk, b"stop").expect("stop file");
    let (sr, lr) = rdk.wait(Duration::from_secs(60));
    assert!(sr.success(), "librdkafka member exited {sr}");
    let cj = parse_consumed(&lj);
    let cr = parse_consumed(&lr);
    assert!(
        (java_at_leave as u64) < records,
        "Java consumed everything alone"
    );
    assert!(
        !cj.is_empty() && !cr.is_empty(),
        "both members got partitions"
    );
    assert!(
        lj.iter()
            .skip_while(|l| !l.starts_with("R "))
            .any(|l| l.starts_with("REVOKED")),
        "the Java member never gave up partitions to the joining member"
    );
    assert_each_record_once_in_order(
        &[("java", &cj), ("librdkafka", &cr)],
        &expected_per_partition(records, partitions),
        records,
    );
    let want: BTreeMap<i32, i64> = expected_per_partition(records, partitions)
        .into_iter()
        .enumerate()
        .map(|(p, n)| (p as i32, n))
        .collect();
    assert_eq!(
        Client::Java.committed(&boot, group, topic, partitions),
        want,
        "committed offsets of the consumer group (kafka-consumer-groups --describe)"
    );

    // A classic group next to it.
    let classic = "classic-readers";
    let stop_classic = dir.path().join("stop-classic").display().to_string();
    let c = LineChild::spawn(&mut Client::Java.consumer(&boot, classic, topic, &stop_classic, 0));
    proc::wait_for(
        Duration::from_secs(120),
        "the classic group to read all",
        || (c.count("R ") as u64 >= records).then_some(()),
    );
    std::fs::write(&stop_classic, b"stop").expect("stop file");
    let (sc, lc) = c.wait(Duration::from_secs(60));
    assert!(sc.success(), "classic member exited {sc}");
    assert_eq!(
        parse_consumed(&lc).len() as u64,
        records,
        "classic group records"
    );
    assert_eq!(
        Client::Java.committed(&boot, classic, topic, partitions),
        want,
        "committed offsets of the classic group"
    );
    // Both groups survive a restart. Then KIP-848 members rejoin the consumer group and
    // upgrade the now empty classic group: they get every partition and resume at the
    // committed offsets (nothing left to read).
    broker.restart();
    let boot = broker.bootstrap();
    for g in [group, classic] {
        assert_eq!(
            Client::Java.committed(&boot, g, topic, partitions),
            want,
            "committed offsets of {g} after restart"
        );
    }
    for g in [group, classic] {
        let stop = dir
            .path()
            .join(format!("stop-again-{g}"))
            .display()
            .to_string();
        let mut m = LineChild::spawn(Client::Java.consumer(&boot, g, topic, &stop, 0).arg(kip848));
        let all = format!(
            "ASSIGNED {}",
            (0..partitions)
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        proc::wait_for(
            Duration::from_secs(90),
            "a KIP-848 member to get every partition",
            || m.lines().contains(&all).then_some(()),
        );
        std::thread::sleep(Duration::from_secs(3));
        std::fs::write(&stop, b"stop").expect("stop file");
        proc::wait_for(Duration::from_secs(60), "the member to leave", || {
            m.exited().map(|_| ())
        });
        let err = m.stderr_tail(20);
        let (st, lines) = m.wait(Duration::from_secs(10));
        assert!(st.success(), "member of {g} exited {st}:\n{err}");
        assert_eq!(
            parse_consumed(&lines).len(),
            0,
            "{g}: a member rejoining after the restart re-read committed records"
        );
    }
    let listed = java::run_tool(
        tools::CONSUMER_GROUP_COMMAND,
        &["--bootstrap-server", &boot, "--list", "--type"],
        Duration::from_secs(90),
    );
    let type_of = |g: &str| {
        listed
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(g))
            .map(|l| l.to_ascii_lowercase())
            .unwrap_or_default()
    };
    assert!(
        type_of(group).contains("consumer") && type_of(classic).contains("consumer"),
        "kafka-consumer-groups --list --type:\n{}",
        listed.stdout
    );
}
