//! Mirror catch-up benchmark (issue 4 item 10, issue 10 step 8): a backlog of 1 KiB records on
//! an Apache Kafka 4.1.1 source, copied to the end by three copiers, in rotating order over a
//! warm-up round (discarded) and ROUNDS measured rounds, all on the same backlog and machine:
//!
//! - kmirror (`kmirror mirror create` + `add`; a fresh node each round, its own target);
//! - MirrorMaker 2 (connect-mirror 4.1.1, dedicated mode, into a fresh single-node Kafka each
//!   round: MM2 needs a target cluster), its source consumer tuned to kmirror's fetch sizes and
//!   its producer to large batches ([`MM2_TUNING`]);
//! - Kafka's own follower replication as a reference: the source cluster has a second,
//!   broker-only node; the round adds a replica of every backlog partition on it
//!   (AlterPartitionReassignments to [1, 2]) and ends when broker 2 is in every partition's
//!   ISR (its log end reached the leader's); the replica is then removed again. The follower's
//!   replica fetchers are sized like kmirror's fetchers ([`FOLLOWER_TUNING`]).
//!
//! Per run: wall time until the copy has every record, time from the first copied data, CPU
//! seconds (utime+stime from /proc) and peak RSS (VmHWM). Prints markdown tables: per round,
//! medians with min–max, and kmirror's throughput over MM2's and over the follower's per round.
//!
//! `cargo run --release -p kmirror-benches --bin e2e_mirror -- [GB=2] [PARTITIONS=8] [TASKS=4]
//! [ROUNDS=3]` (scripts/bench-mirror.sh builds kmirror first and passes KMIRROR_BIN).

mod common;

use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::{AlterPartitionReassignmentsRequest, BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_tests::java::tools;
use kmirror_tests::{KmirrorNode, WireClient};

const TOPIC: &str = "backlog";
const POLL: Duration = Duration::from_millis(100);
const TIMEOUT: Duration = Duration::from_secs(3600);

/// MirrorMaker 2's client settings beyond its defaults. Consumer: kmirror's mirror fetch
/// defaults (`mirror.fetch.max.bytes` 50 MiB, `mirror.fetch.partition.max.bytes` 10 MiB,
/// `mirror.fetch.max.wait.ms` 500, min bytes 1), polls of up to 10,000 records (10 MiB of
/// 1 KiB records: one partition's full fetch), the OS's socket buffer sizes (kmirror sets
/// none). Producer: 512 KiB batches lingering up to 20 ms, 4 MiB requests, 128 MiB buffer,
/// 5 requests in flight instead of Connect's 1 (idempotent, so still in order).
const MM2_TUNING: &[(&str, &str)] = &[
    ("source.consumer.fetch.max.bytes", "52428800"),
    ("source.consumer.max.partition.fetch.bytes", "10485760"),
    ("source.consumer.fetch.min.bytes", "1"),
    ("source.consumer.fetch.max.wait.ms", "500"),
    ("source.consumer.max.poll.records", "10000"),
    ("source.consumer.receive.buffer.bytes", "-1"),
    ("target.producer.linger.ms", "20"),
    ("target.producer.batch.size", "524288"),
    ("target.producer.max.request.size", "4194304"),
    ("target.producer.buffer.memory", "134217728"),
    ("target.producer.send.buffer.bytes", "-1"),
    ("target.producer.enable.idempotence", "true"),
    ("target.producer.max.in.flight.requests.per.connection", "5"),
];

/// Broker 2's replica fetcher settings: two fetchers (kmirror runs one per core, 2 here) with
/// kmirror's fetch sizes and the OS's socket buffer size; old logs deleted after 1 s so the
/// removed replica's files go between rounds.
const FOLLOWER_TUNING: &[(&str, &str)] = &[
    ("num.replica.fetchers", "2"),
    ("replica.fetch.max.bytes", "10485760"),
    ("replica.fetch.response.max.bytes", "52428800"),
    ("replica.fetch.wait.max.ms", "500"),
    ("replica.fetch.min.bytes", "1"),
    ("replica.socket.receive.buffer.bytes", "-1"),
    ("file.delete.delay.ms", "1000"),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Copier {
    Kmirror,
    Mm2,
    Follower,
}

impl Copier {
    fn name(self) -> &'static str {
        match self {
            Copier::Kmirror => "kmirror",
            Copier::Mm2 => "MirrorMaker 2",
            Copier::Follower => "Kafka follower",
        }
    }
}

/// [`common::wait_caught_up`] with [`POLL`] and [`TIMEOUT`]; the time after the first data is
/// at least one poll (a copy that finishes within one poll has no finer figure).
fn wait(
    t0: Instant,
    want: i64,
    end: impl FnMut() -> Option<i64>,
    alive: impl FnMut() -> bool,
) -> (f64, f64) {
    let (secs, from_first) = common::wait_caught_up(t0, want, TIMEOUT, POLL, end, alive);
    (secs, from_first.max(POLL.as_secs_f64()))
}

/// One copier's numbers in one round.
struct Run {
    copier: Copier,
    round: usize,
    secs: f64,
    secs_from_first: f64,
    cpu_s: f64,
    /// MM2 plus the target broker it needs.
    cpu_with_target_s: Option<f64>,
    /// None for the follower: broker 2 is one long-running JVM across rounds.
    rss_mib: Option<f64>,
    load: String,
}

fn fill_backlog(boot: &str, records: u64) -> f64 {
    let t0 = Instant::now();
    let ran = common::run_tool(
        tools::PRODUCER_PERFORMANCE,
        &[
            "--topic",
            TOPIC,
            "--num-records",
            &records.to_string(),
            "--record-size",
            "1024",
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={boot}"),
            "acks=1",
            "batch.size=524288",
            "linger.ms=20",
            "buffer.memory=134217728",
            "max.request.size=4194304",
        ],
        Duration::from_secs(1800),
    );
    eprintln!(
        "backlog: {}",
        ran.stdout
            .lines()
            .rev()
            .find(|l| l.contains("records sent"))
            .unwrap_or("?")
    );
    t0.elapsed().as_secs_f64()
}

fn mm2(round: usize, source: &str, records: u64, partitions: i32, tasks: u32) -> Run {
    let mut target = common::Kafka::start("1g", &[]);
    let props = common::mm2_properties(source, &target.bootstrap(), TOPIC, tasks, MM2_TUNING);
    let target_cpu0 = common::cpu_seconds(target.pid());
    let load = common::load_avg();
    eprintln!("round {round}: MirrorMaker 2, tasks.max={tasks} (load {load})");
    let t0 = Instant::now();
    let mut mm2 = common::Mm2::spawn(&props);
    let pid = mm2.pid();
    let tboot = target.bootstrap();
    let remote = format!("source.{TOPIC}");
    let (secs, secs_from_first) = wait(
        t0,
        records as i64,
        || common::total_end_offset(&tboot, &remote, partitions),
        || mm2.alive(),
    );
    let cpu_s = common::cpu_seconds(pid);
    let target_cpu = common::cpu_seconds(target.pid()) - target_cpu0;
    let rss_mib = common::peak_rss_mib(pid);
    if round == 0 {
        // The effective client settings, as MM2 logged them (one block per client).
        let log = std::fs::read_to_string(mm2.log()).unwrap_or_default();
        // One line per client: "ConsumerConfig client.id=…: key = value, …".
        let mut seen: Vec<String> = Vec::new();
        let mut block: Option<(String, Vec<String>)> = None;
        for l in log.lines() {
            let in_block = l.starts_with('\t');
            if !in_block {
                if let Some((head, kv)) = block.take() {
                    seen.push(format!("{head}: {}", kv.join(", ")));
                }
                if let Some(i) = l.find(" values:") {
                    let kind = l[..i].rsplit(' ').next().unwrap_or("");
                    if matches!(kind, "ConsumerConfig" | "ProducerConfig") {
                        block = Some((kind.to_string(), Vec::new()));
                    }
                }
            } else if let Some((head, kv)) = block.as_mut() {
                let l = l.trim();
                if let Some(id) = l.strip_prefix("client.id = ") {
                    head.push_str(&format!(" client.id={id}"));
                } else if MM2_TUNING.iter().any(|(k, _)| {
                    k.split_once("er.").map(|(_, k)| k) == Some(l.split(" = ").next().unwrap_or(""))
                }) {
                    kv.push(l.to_string());
                }
            }
        }
        seen.retain(|l| l.contains("replication-consumer") || l.contains("connector-producer"));
        seen.sort_unstable();
        seen.dedup();
        eprintln!("  MM2's clients as logged: {seen:#?}");
    }
    mm2.stop();
    target.stop();
    Run {
        copier: Copier::Mm2,
        round,
        secs,
        secs_from_first,
        cpu_s,
        cpu_with_target_s: Some(cpu_s + target_cpu),
        rss_mib: Some(rss_mib),
        load,
    }
}

fn kmirror(round: usize, source: &str, records: u64, partitions: i32) -> Result<Run, String> {
    let mut node = KmirrorNode::start();
    let addr = node.addr();
    let pid = node.pid();
    let cpu0 = common::cpu_seconds(pid);
    let load = common::load_avg();
    eprintln!("round {round}: kmirror (load {load})");
    let t0 = Instant::now();
    common::kmirror_mirror(&addr, "bench", source, &["--topics", TOPIC])?;
    let (secs, secs_from_first) = wait(
        t0,
        records as i64,
        || common::total_end_offset(&addr, TOPIC, partitions),
        || node.alive(),
    );
    let cpu_s = common::cpu_seconds(pid) - cpu0;
    let rss_mib = common::peak_rss_mib(pid);
    // End offsets alone could be met without the bytes: SPEC's log-equal oracle, after the
    // measurement (it reads everything back from both sides).
    let mut src = WireClient::connect(source).map_err(|e| e.to_string())?;
    for p in 0..partitions {
        let (_, end) = src.log_bounds(TOPIC, p).map_err(|e| e.to_string())?;
        kmirror_tests::log_equal(source, &addr, TOPIC, p, end)
            .map_err(|e| format!("kmirror caught up but is not log-equal: {e}"))?;
    }
    eprintln!("  kmirror: log-equal with the source on all {partitions} partitions");
    node.stop();
    Ok(Run {
        copier: Copier::Kmirror,
        round,
        secs,
        secs_from_first,
        cpu_s,
        cpu_with_target_s: None,
        rss_mib: Some(rss_mib),
        load,
    })
}

/// Asks the cluster at `addr` to move every partition of [`TOPIC`] to `replicas`.
fn reassign(addr: &str, partitions: i32, replicas: &[i32]) {
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_allow_replication_factor_change(true)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(
                (0..partitions)
                    .map(|p| {
                        ReassignablePartition::default()
                            .with_partition_index(p)
                            .with_replicas(Some(replicas.iter().map(|&b| BrokerId(b)).collect()))
                    })
                    .collect(),
            )]);
    let resp = WireClient::connect(addr)
        .expect("connect")
        .send(req)
        .expect("AlterPartitionReassignments");
    assert_eq!(resp.error_code, 0, "AlterPartitionReassignments: {resp:?}");
    for t in &resp.responses {
        for p in &t.partitions {
            assert_eq!(
                p.error_code, 0,
                "reassign {TOPIC}-{}: {p:?}",
                p.partition_index
            );
        }
    }
}

/// Per partition of [`TOPIC`]: (replicas, ISR) as the cluster's Metadata says.
fn replica_state(addr: &str) -> Option<Vec<(Vec<i32>, Vec<i32>)>> {
    let md = WireClient::connect(addr)
        .ok()?
        .metadata(Some(&[TOPIC]))
        .ok()?;
    let t = md.topics.first()?;
    Some(
        t.partitions
            .iter()
            .map(|p| {
                (
                    p.replica_nodes.iter().map(|b| b.0).collect(),
                    p.isr_nodes.iter().map(|b| b.0).collect(),
                )
            })
            .collect(),
    )
}

/// Bytes in broker 2's logs of [`TOPIC`] (the live partition directories only).
fn follower_bytes(data: &std::path::Path, partitions: i32) -> u64 {
    (0..partitions)
        .filter_map(|p| std::fs::read_dir(data.join(format!("{TOPIC}-{p}"))).ok())
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            (e.path().extension()? == "log").then(|| e.metadata().ok().map(|m| m.len()))?
        })
        .sum()
}

fn follower(
    round: usize,
    leader: &common::Kafka,
    follower: &common::Kafka,
    records: u64,
    partitions: i32,
) -> Run {
    let boot = leader.bootstrap();
    let data = follower.data_dir();
    let cpu0 = common::cpu_seconds(follower.pid());
    let load = common::load_avg();
    eprintln!("round {round}: Kafka follower on broker 2 (load {load})");
    let t0 = Instant::now();
    reassign(&boot, partitions, &[1, 2]);
    let (secs, secs_from_first) = wait(
        t0,
        records as i64,
        || {
            let state = replica_state(&boot)?;
            let in_sync = state.len() == partitions as usize
                && state
                    .iter()
                    .all(|(r, isr)| r.contains(&2) && isr.contains(&2));
            // Not in sync: 1 once broker 2 has data (the start of "after first data").
            Some(if in_sync {
                records as i64
            } else {
                i64::from(follower_bytes(&data, partitions) > 0)
            })
        },
        || true,
    );
    let cpu_s = common::cpu_seconds(follower.pid()) - cpu0;
    // Back to one replica for the next round; broker 2 deletes its copy.
    reassign(&boot, partitions, &[1]);
    kmirror_tests::proc::wait_for(Duration::from_secs(120), "replica removal", || {
        let state = replica_state(&boot)?;
        (state.iter().all(|(r, _)| r == &[1]) && follower_bytes(&data, partitions) == 0)
            .then_some(())
    });
    Run {
        copier: Copier::Follower,
        round,
        secs,
        secs_from_first,
        cpu_s,
        cpu_with_target_s: None,
        rss_mib: None,
        load,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let gb: f64 = args.next().map_or(2.0, |a| a.parse().expect("GB"));
    let partitions: i32 = args.next().map_or(8, |a| a.parse().expect("PARTITIONS"));
    let tasks: u32 = args.next().map_or(4, |a| a.parse().expect("TASKS"));
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
    let records = (gb * 1e9 / 1024.0).ceil() as u64;
    let payload_gb = records as f64 * 1024.0 / 1e9;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!("kmirror binary: {}", common::kmirror_bin().display());

    // Broker 1 alone while the topic is created: every replica lands on it.
    let source = common::Kafka::start("1g", &[]);
    let boot = source.bootstrap();
    common::create_topic(&boot, TOPIC, partitions, &[]);
    let fill_s = fill_backlog(&boot, records);
    let end = common::total_end_offset(&boot, TOPIC, partitions).expect("source end offsets");
    assert_eq!(end, records as i64, "source backlog end offsets");
    eprintln!("backlog of {payload_gb:.2} GB filled in {fill_s:.0} s");
    let broker2 = common::Kafka::start_broker(&source, 2, "1g", FOLLOWER_TUNING);

    let order = [Copier::Kmirror, Copier::Mm2, Copier::Follower];
    let mut runs: Vec<Run> = Vec::new();
    let mut orders: Vec<String> = Vec::new();
    for round in 0..=rounds {
        let mut this = order;
        this.rotate_left(round % order.len());
        orders.push(this.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "));
        for c in this {
            let run = match c {
                Copier::Kmirror => kmirror(round, &boot, records, partitions)
                    .unwrap_or_else(|e| panic!("kmirror side failed: {e}")),
                Copier::Mm2 => mm2(round, &boot, records, partitions, tasks),
                Copier::Follower => follower(round, &source, &broker2, records, partitions),
            };
            eprintln!(
                "  {}: {:.1} s, {:.1} MB/s",
                c.name(),
                run.secs,
                payload_gb * 1e3 / run.secs
            );
            runs.push(run);
        }
    }

    println!(
        "\nBacklog: {records} records x 1024 B = {payload_gb:.2} GB payload, {partitions} \
         partitions, on broker 1 of a 2-broker Apache Kafka 4.1.1 cluster; {cores} cores; \
         round 0 is the warm-up (discarded), rounds 1-{rounds} are measured\n"
    );
    for (round, o) in orders.iter().enumerate() {
        println!("round {round} order: {o}");
    }
    println!(
        "\n| round | copier | wall s | MB/s | records/s | MB/s after first data | CPU s | \
         CPU s/GB | CPU s/GB incl. MM2's target broker | peak RSS MiB | load avg |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &runs {
        println!(
            "| {}{} | {} | {:.1} | {:.1} | {:.0} | {:.1} | {:.1} | {:.2} | {} | {} | {} |",
            r.round,
            if r.round == 0 { " (warm-up)" } else { "" },
            r.copier.name(),
            r.secs,
            payload_gb * 1e3 / r.secs,
            records as f64 / r.secs,
            payload_gb * 1e3 / r.secs_from_first,
            r.cpu_s,
            r.cpu_s / payload_gb,
            r.cpu_with_target_s
                .map_or("-".to_string(), |c| format!("{:.2}", c / payload_gb)),
            r.rss_mib.map_or("-".to_string(), |m| format!("{m:.0}")),
            r.load
        );
    }
    let measured = |c: Copier| -> Vec<&Run> {
        runs.iter()
            .filter(|r| r.copier == c && r.round > 0)
            .collect()
    };
    let fmt = |v: Vec<f64>, prec: usize| {
        common::median_spread(&v).map_or("-".into(), |(m, lo, hi)| {
            format!("**{m:.prec$}** ({lo:.prec$}–{hi:.prec$})")
        })
    };
    println!(
        "\nMedians over rounds 1-{rounds} (min–max):\n\n| copier | MB/s | records/s | MB/s after \
         first data | CPU s/GB |"
    );
    println!("|---|---:|---:|---:|---:|");
    for c in order {
        let rs = measured(c);
        println!(
            "| {} | {} | {} | {} | {} |",
            c.name(),
            fmt(rs.iter().map(|r| payload_gb * 1e3 / r.secs).collect(), 1),
            fmt(rs.iter().map(|r| records as f64 / r.secs).collect(), 0),
            fmt(
                rs.iter()
                    .map(|r| payload_gb * 1e3 / r.secs_from_first)
                    .collect(),
                1
            ),
            fmt(rs.iter().map(|r| r.cpu_s / payload_gb).collect(), 2),
        );
    }
    // Ratios within a round: the copiers in one round saw the same machine state (roughly).
    let ratio = |other: Copier, after_first: bool| -> Vec<f64> {
        measured(Copier::Kmirror)
            .iter()
            .zip(measured(other))
            .map(|(k, o)| {
                if after_first {
                    o.secs_from_first / k.secs_from_first
                } else {
                    o.secs / k.secs
                }
            })
            .collect()
    };
    println!();
    for other in [Copier::Mm2, Copier::Follower] {
        println!(
            "kmirror / {} throughput, per round: median {} wall time from start, {} after \
             first data",
            other.name(),
            fmt(ratio(other, false), 2),
            fmt(ratio(other, true), 2),
        );
    }
}
