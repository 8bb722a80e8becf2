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
//! `KMIRROR_BENCH_ALT_BIN=<another kmirror>` adds that build as a fourth copier (a
//! before/after in the same rounds; `KMIRROR_BENCH_COPIERS=kmirror,alt` for those two alone).
//!
//! `… --bin e2e_mirror -- --cluster N [GB=1] [PARTITIONS=6] [TASKS=4] [ROUNDS=3]` (issue 12
//! step 6): the same backlog on a one-node Kafka 4.1.1 source, copied into a fresh N-node
//! destination each round, the two copiers alternating which goes first, round 0 a warm-up:
//! - N kmirror nodes (`serve --quorum`, one core each, `--default-replication-factor` min(N, 3),
//!   so mirror topics get RF 3), the mirror created through node 1;
//! - MirrorMaker 2 into N Kafka 4.1.1 nodes (KRaft combined mode, `min.insync.replicas=2`
//!   (1 if N = 1)),
//!   its target topics and internal topics at RF min(N, 3), its producer with acks=all.
//!
//! A round ends when, on every partition of the destination topic, the leader's high
//! watermark (ListOffsets latest, read_uncommitted, asked of the leader) equals the source's
//! log end and the ISR is every replica: each record is on every replica and committed.
//! For kmirror, each node's segment files must then hold at least the source's bytes of the
//! topic (batches are stored verbatim), so a leader HW that ran ahead of its followers fails.
//! Reported: wall time, CPU seconds of the whole copy (all kmirror nodes; MM2 alone and MM2
//! plus its target nodes), peak RSS summed over the processes. If the destination makes no
//! progress (high watermarks and ISR sizes unchanged) for `KMIRROR_BENCH_STALL_S` seconds
//! (default 60; four times that before the first committed record), the round ends as a failure that prints every partition's leader, HW and ISR
//! (the run goes on with the next round); a copier process that dies does the same.

mod common;

use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::{AlterPartitionReassignmentsRequest, BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
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
    /// kmirror built from other sources (`KMIRROR_BENCH_ALT_BIN`), for a before/after in
    /// one run: on a noisy machine two builds compare only within the same rounds.
    KmirrorAlt,
}

impl Copier {
    fn name(self) -> &'static str {
        match self {
            Copier::Kmirror => "kmirror",
            Copier::Mm2 => "MirrorMaker 2",
            Copier::Follower => "Kafka follower",
            Copier::KmirrorAlt => "kmirror (alt binary)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Copier::Kmirror => "kmirror",
            Copier::Mm2 => "mm2",
            Copier::Follower => "follower",
            Copier::KmirrorAlt => "alt",
        }
    }
}

/// `KMIRROR_BENCH_ALT_BIN`: a second kmirror binary, run as one more copier (its own CLI
/// creates its mirror).
fn alt_bin() -> Option<std::path::PathBuf> {
    std::env::var_os("KMIRROR_BENCH_ALT_BIN").map(std::path::PathBuf::from)
}

/// The copiers to run: all three (four with `KMIRROR_BENCH_ALT_BIN`), or those
/// `KMIRROR_BENCH_COPIERS` names (comma-separated `kmirror`, `mm2`, `follower`, `alt`; e.g.
/// `kmirror,follower` while profiling, `kmirror,alt` for a before/after).
fn copiers() -> Vec<Copier> {
    let mut all = vec![Copier::Kmirror, Copier::Mm2, Copier::Follower];
    if alt_bin().is_some() {
        all.push(Copier::KmirrorAlt);
    }
    match std::env::var("KMIRROR_BENCH_COPIERS") {
        Ok(list) => all
            .into_iter()
            .filter(|c| list.split(',').any(|x| x.trim() == c.short()))
            .collect(),
        Err(_) => all,
    }
}

/// While `KMIRROR_BENCH_PERF=DIR` is set, `perf record` samples the kmirror node of each
/// round into DIR/kmirror-round-N.data (stopped with SIGINT when the round ends).
fn perf_attach(pid: u32, round: usize) -> Option<std::process::Child> {
    let dir = std::env::var("KMIRROR_BENCH_PERF").ok()?;
    std::fs::create_dir_all(&dir).ok()?;
    std::process::Command::new("perf")
        .args([
            "record",
            "-q",
            "-F",
            "499",
            "-g",
            "-p",
            &pid.to_string(),
            "-o",
        ])
        .arg(format!("{dir}/kmirror-round-{round}.data"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| eprintln!("perf record: {e}"))
        .ok()
}

fn perf_detach(perf: Option<std::process::Child>) {
    if let Some(mut p) = perf {
        // SIGINT, so perf finishes writing its file.
        let _ = std::process::Command::new("kill")
            .args(["-INT", &p.id().to_string()])
            .status();
        let _ = p.wait();
    }
}

/// [`common::wait_caught_up`] with [`POLL`] and [`TIMEOUT`]; the time after the first data is
/// at least one poll (a copy that finishes within one poll has no finer figure).
fn wait(
    t0: Instant,
    want: i64,
    mut end: impl FnMut() -> Option<i64>,
    alive: impl FnMut() -> bool,
) -> (f64, f64, Vec<(f64, f64)>) {
    let mut trace = vec![(0.0, 0.0)];
    let traced = || {
        let v = end();
        if let Some(x) = v {
            trace.push((t0.elapsed().as_secs_f64(), x as f64 / want as f64));
        }
        v
    };
    let (secs, from_first) = common::wait_caught_up(t0, want, TIMEOUT, POLL, traced, alive);
    (secs, from_first.max(POLL.as_secs_f64()), trace)
}

/// MB/s over time from a progress trace (seconds, fraction of the backlog copied): the rate
/// over each `STEP`-long window, plotted at the window's end.
fn throughput_over_time(trace: &[(f64, f64)], payload_gb: f64) -> Vec<(f64, f64)> {
    const STEP: f64 = 0.5;
    let mut out = vec![(0.0, 0.0)];
    let mut from = (0.0, 0.0);
    for &(t, f) in trace {
        if t - from.0 >= STEP || f >= 1.0 {
            out.push((t, (f - from.1) * payload_gb * 1e3 / (t - from.0).max(1e-3)));
            from = (t, f);
        }
    }
    out
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
    /// (seconds since the start, fraction of the backlog copied), every poll.
    trace: Vec<(f64, f64)>,
}

/// Writes the backlog: large batches (512 KiB, linger 20 ms) by default; with
/// `KMIRROR_BENCH_BATCHES=small`, ProducerPerformance's defaults (linger 0, batch.size 16 KiB:
/// the small-batch case of issue 21 item 4, where per-batch costs dominate).
fn fill_backlog(boot: &str, records: u64) -> f64 {
    let t0 = Instant::now();
    let mut props = vec!["acks=1"];
    if std::env::var("KMIRROR_BENCH_BATCHES").as_deref() == Ok("small") {
        props.push("linger.ms=0");
    } else {
        props.extend([
            "batch.size=524288",
            "linger.ms=20",
            "buffer.memory=134217728",
            "max.request.size=4194304",
        ]);
    }
    let ran = common::producer_performance(boot, TOPIC, records, &props, Duration::from_secs(1800));
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
    let (secs, secs_from_first, trace) = wait(
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
        trace,
    }
}

fn kmirror(
    round: usize,
    source: &str,
    records: u64,
    partitions: i32,
    copier: Copier,
) -> Result<Run, String> {
    let bin = match copier {
        Copier::KmirrorAlt => alt_bin().expect("KMIRROR_BENCH_ALT_BIN"),
        _ => common::kmirror_bin().to_path_buf(),
    };
    let mut node = KmirrorNode::builder().binary(&bin).start();
    let addr = node.addr();
    let pid = node.pid();
    let cpu0 = common::cpu_seconds(pid);
    let load = common::load_avg();
    eprintln!("round {round}: {} (load {load})", copier.name());
    let perf = perf_attach(pid, round);
    let t0 = Instant::now();
    common::kmirror_mirror_of(&bin, &addr, "bench", source, &["--topics", TOPIC])?;
    let (secs, secs_from_first, trace) = wait(
        t0,
        records as i64,
        || common::total_end_offset(&addr, TOPIC, partitions),
        || node.alive(),
    );
    let cpu_s = common::cpu_seconds(pid) - cpu0;
    perf_detach(perf);
    let rss_mib = common::peak_rss_mib(pid);
    // End offsets alone could be met without the bytes: SPEC's log-equal oracle, after the
    // measurement (it reads everything back from both sides).
    let mut src = WireClient::connect(source).map_err(|e| e.to_string())?;
    for p in 0..partitions {
        let (_, end) = src.log_bounds(TOPIC, p).map_err(|e| e.to_string())?;
        kmirror_tests::log_equal(source, &addr, TOPIC, p, end)
            .map_err(|e| format!("kmirror caught up but is not log-equal: {e}"))?;
    }
    eprintln!(
        "  {}: log-equal with the source on all {partitions} partitions",
        copier.name()
    );
    node.stop();
    Ok(Run {
        copier,
        round,
        secs,
        secs_from_first,
        cpu_s,
        cpu_with_target_s: None,
        rss_mib: Some(rss_mib),
        load,
        trace,
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
    let source_bytes = common::segment_bytes(&leader.data_dir(), TOPIC).max(1);
    let t0 = Instant::now();
    reassign(&boot, partitions, &[1, 2]);
    let (secs, secs_from_first, trace) = wait(
        t0,
        records as i64,
        || {
            let state = replica_state(&boot)?;
            let in_sync = state.len() == partitions as usize
                && state
                    .iter()
                    .all(|(r, isr)| r.contains(&2) && isr.contains(&2));
            // Not in sync: progress by broker 2's bytes (at least 1 once it has data, the
            // start of "after first data"), short of the end until the ISR says so.
            let copied = follower_bytes(&data, partitions);
            Some(if in_sync {
                records as i64
            } else if copied == 0 {
                0
            } else {
                ((copied as f64 / source_bytes as f64 * records as f64) as i64)
                    .clamp(1, records as i64 - 1)
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
        trace,
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--cluster") {
        let mut args = std::env::args().skip(2);
        let n: usize = args.next().map_or(3, |a| a.parse().expect("NODES"));
        let gb: f64 = args.next().map_or(1.0, |a| a.parse().expect("GB"));
        let partitions: i32 = args.next().map_or(6, |a| a.parse().expect("PARTITIONS"));
        let tasks: u32 = args.next().map_or(4, |a| a.parse().expect("TASKS"));
        let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
        main_cluster(n, gb, partitions, tasks, rounds);
        return;
    }
    let mut args = std::env::args().skip(1);
    let gb: f64 = args.next().map_or(2.0, |a| a.parse().expect("GB"));
    let partitions: i32 = args.next().map_or(8, |a| a.parse().expect("PARTITIONS"));
    let tasks: u32 = args.next().map_or(4, |a| a.parse().expect("TASKS"));
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
    let records = (gb * 1e9 / 1024.0).ceil() as u64;
    let payload_gb = records as f64 * 1024.0 / 1e9;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!("kmirror binary: {}", common::kmirror_bin().display());
    if let Some(alt) = alt_bin() {
        eprintln!("alt kmirror binary: {}", alt.display());
    }

    // Broker 1 alone while the topic is created: every replica lands on it.
    let source = common::Kafka::start("1g", &[]);
    let boot = source.bootstrap();
    common::create_topic(&boot, TOPIC, partitions, &[]);
    let fill_s = fill_backlog(&boot, records);
    let end = common::total_end_offset(&boot, TOPIC, partitions).expect("source end offsets");
    assert_eq!(end, records as i64, "source backlog end offsets");
    eprintln!("backlog of {payload_gb:.2} GB filled in {fill_s:.0} s");
    let (batches, bytes) = common::segment_batches(&source.data_dir(), TOPIC);
    let batch_note = format!(
        "{batches} source batches, {:.1} KiB each on average",
        bytes as f64 / batches.max(1) as f64 / 1024.0
    );
    eprintln!("backlog: {batch_note}");
    let broker2 = common::Kafka::start_broker(&source, 2, "1g", FOLLOWER_TUNING);

    let order = copiers();
    let mut runs: Vec<Run> = Vec::new();
    let mut orders: Vec<String> = Vec::new();
    for round in 0..=rounds {
        let mut this = order.clone();
        this.rotate_left(round % order.len());
        orders.push(this.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "));
        for c in this {
            let run = match c {
                Copier::Kmirror | Copier::KmirrorAlt => {
                    kmirror(round, &boot, records, partitions, c)
                        .unwrap_or_else(|e| panic!("{} side failed: {e}", c.name()))
                }
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
         partitions, on broker 1 of a 2-broker Apache Kafka 4.1.1 cluster ({batch_note}); \
         {cores} cores; round 0 is the warm-up (discarded), rounds 1-{rounds} are measured\n"
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
    for &c in &order {
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
    charts(&runs, &order, rounds, payload_gb);
    println!();
    for other in order.iter().copied().filter(|c| *c != Copier::Kmirror) {
        println!(
            "kmirror / {} throughput, per round: median {} wall time from start, {} after \
             first data",
            other.name(),
            fmt(ratio(other, false), 2),
            fmt(ratio(other, true), 2),
        );
    }
    if order.contains(&Copier::KmirrorAlt) {
        let cpu: Vec<f64> = measured(Copier::Kmirror)
            .iter()
            .zip(measured(Copier::KmirrorAlt))
            .map(|(k, a)| k.cpu_s / a.cpu_s)
            .collect();
        println!(
            "kmirror CPU / alt binary's CPU for the same backlog, per round: median {}",
            fmt(cpu, 2)
        );
    }
}

/// The catch-up charts: MB/s over time per copier (every measured round, one color per
/// copier), and MB/s and CPU s/GB per copier and round.
fn charts(runs: &[Run], order: &[Copier], rounds: usize, payload_gb: f64) {
    use kmirror_benches::charts::{bars, lines, Series};
    let slot = |c: Copier| match c {
        Copier::Kmirror => 0,
        Copier::Mm2 => 1,
        Copier::Follower => 2,
        Copier::KmirrorAlt => 3,
    };
    let measured = || runs.iter().filter(|r| r.round > 0);
    let series: Vec<Series> = measured()
        .map(|r| Series {
            label: format!("{} (round {})", r.copier.name(), r.round),
            color: slot(r.copier),
            points: throughput_over_time(&r.trace, payload_gb),
        })
        .collect();
    lines(
        "mirror-catchup-over-time.svg",
        &format!("Catch-up of a {payload_gb:.1} GB backlog: MB/s over time (0.5 s windows)"),
        "seconds since the copy was started",
        "MB/s",
        &series,
    );
    let groups: Vec<String> = (1..=rounds).map(|r| format!("round {r}")).collect();
    let per_round = |c: Copier, f: &dyn Fn(&Run) -> f64| -> Vec<f64> {
        (1..=rounds)
            .map(|round| {
                measured()
                    .find(|r| r.copier == c && r.round == round)
                    .map_or(f64::NAN, f)
            })
            .collect()
    };
    let by = |f: &dyn Fn(&Run) -> f64| -> Vec<(String, usize, Vec<f64>)> {
        order
            .iter()
            .map(|&c| (c.name().to_string(), slot(c), per_round(c, f)))
            .collect()
    };
    bars(
        "mirror-catchup-mbps.svg",
        "Catch-up throughput per round (higher is better)",
        "MB/s",
        &groups,
        &by(&|r| payload_gb * 1e3 / r.secs),
    );
    bars(
        "mirror-catchup-cpu.svg",
        "CPU seconds per GB copied (lower is better; MM2 without its target broker)",
        "CPU s/GB",
        &groups,
        &by(&|r| r.cpu_s / payload_gb),
    );
}

/// How often `--cluster` asks the destination for HW and ISR (a Metadata and a ListOffsets
/// per leader each time).
const CLUSTER_POLL: Duration = Duration::from_millis(250);

/// One partition of a destination topic as its cluster reports it.
#[derive(Debug)]
struct PartState {
    leader_id: i32,
    leader: String,
    hw: i64,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

/// Per partition of `topic` on the cluster at `boot` (any node answers Metadata): leader,
/// the leader's high watermark, replicas and ISR. None while the topic or a leader is missing.
fn cluster_state(boot: &str, topic: &str, partitions: i32) -> Option<Vec<PartState>> {
    let md = boot
        .split(',')
        .find_map(|a| WireClient::connect(a).ok()?.metadata(Some(&[topic])).ok())?;
    let t = md.topics.first()?;
    if t.error_code != 0 || t.partitions.len() != partitions as usize {
        return None;
    }
    let mut leaders: std::collections::HashMap<String, WireClient> = Default::default();
    let mut out = Vec::new();
    for p in 0..partitions {
        let mp = t.partitions.iter().find(|x| x.partition_index == p)?;
        let b = md.brokers.iter().find(|b| b.node_id == mp.leader_id)?;
        let leader = format!("{}:{}", b.host.as_str(), b.port);
        if !leaders.contains_key(&leader) {
            leaders.insert(leader.clone(), WireClient::connect(&leader).ok()?);
        }
        let hw = leaders.get_mut(&leader)?.list_offset(topic, p, -1).ok()?;
        out.push(PartState {
            leader_id: mp.leader_id.0,
            leader,
            hw,
            replicas: mp.replica_nodes.iter().map(|b| b.0).collect(),
            isr: mp.isr_nodes.iter().map(|b| b.0).collect(),
        });
    }
    Some(out)
}

/// Waits until every partition of `topic` has `rf` replicas, all in the ISR, and a high
/// watermark of at least `ends[p]`. Returns (seconds since `t0`, seconds since the first
/// record was committed) or, after `stall` without progress, the partial state.
fn wait_replicated(
    t0: Instant,
    boot: &str,
    topic: &str,
    ends: &[i64],
    rf: usize,
    stall: Duration,
    mut alive: impl FnMut() -> bool,
) -> Result<(f64, f64), String> {
    let partitions = ends.len() as i32;
    let want: i64 = ends.iter().sum();
    let mut first: Option<Instant> = None;
    let (mut progress, mut moved) = ((-1, 0), Instant::now());
    let mut last_print = Instant::now();
    let describe = |s: &Option<Vec<PartState>>| match s {
        None => format!("{topic}: no metadata or no leader yet"),
        Some(s) => s
            .iter()
            .enumerate()
            .map(|(p, x)| {
                format!(
                    "{topic}-{p}: leader node {} ({}) HW {}/{} replicas {:?} ISR {:?}",
                    x.leader_id, x.leader, x.hw, ends[p], x.replicas, x.isr
                )
            })
            .collect::<Vec<_>>()
            .join("\n    "),
    };
    loop {
        let state = cluster_state(boot, topic, partitions);
        let committed: i64 = state
            .as_ref()
            .map_or(0, |s| s.iter().zip(ends).map(|(x, e)| x.hw.min(*e)).sum());
        let in_sync: usize = state
            .as_ref()
            .map_or(0, |s| s.iter().map(|x| x.isr.len()).sum());
        if committed > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        let done = state.as_ref().is_some_and(|s| {
            s.iter().zip(ends).all(|(x, e)| {
                x.hw >= *e && x.replicas.len() == rf && {
                    let (mut r, mut i) = (x.replicas.clone(), x.isr.clone());
                    r.sort_unstable();
                    i.sort_unstable();
                    r == i
                }
            })
        });
        if done {
            // A copy done within one poll of its first commit has no finer figure than a poll.
            let now = Instant::now();
            return Ok((
                (now - t0).as_secs_f64(),
                (now - first.unwrap_or(t0)).max(CLUSTER_POLL).as_secs_f64(),
            ));
        }
        if (committed, in_sync) != progress {
            (progress, moved) = ((committed, in_sync), Instant::now());
        }
        if !alive() {
            return Err(format!(
                "a copier process exited at {committed}/{want} committed:\n    {}",
                describe(&state)
            ));
        }
        // Before the first committed record the copier may still be starting (MM2's JVM and
        // Connect group under load took over 30 s): four times the stall limit.
        let limit = if committed > 0 { stall } else { stall * 4 };
        if moved.elapsed() > limit || t0.elapsed() > TIMEOUT {
            return Err(format!(
                "stalled: no progress for {:.0} s, {committed}/{want} committed after {:.0} s:\n    {}",
                moved.elapsed().as_secs_f64(),
                t0.elapsed().as_secs_f64(),
                describe(&state)
            ));
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  {committed}/{want} committed, {in_sync} ISR members, after {:.0} s",
                t0.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        std::thread::sleep(CLUSTER_POLL);
    }
}

/// One copier's numbers in one `--cluster` round (Err: what stopped it).
struct ClusterRun {
    copier: &'static str,
    round: usize,
    load: String,
    result: Result<ClusterNumbers, String>,
}

struct ClusterNumbers {
    secs: f64,
    secs_from_first: f64,
    /// The copier's own CPU (kmirror: all its nodes; MM2: the MM2 process).
    cpu_s: f64,
    /// MM2 plus its target nodes (None for kmirror: its nodes are the copier).
    cpu_with_target_s: Option<f64>,
    /// Summed over the copier's processes (MM2: MM2 plus its target nodes).
    rss_mib: f64,
}

fn stall_timeout() -> Duration {
    Duration::from_secs(
        std::env::var("KMIRROR_BENCH_STALL_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    )
}

/// `source_bytes`: the backlog's segment bytes on the source. kmirror stores the source's
/// batches verbatim, so once the HW covers everything each node must hold at least as many.
fn kmirror_cluster(
    round: usize,
    source: &str,
    source_bytes: u64,
    ends: &[i64],
    n: usize,
) -> ClusterRun {
    let rf = n.min(3);
    let mut c = kmirror_tests::cluster::KmirrorCluster::start(
        n,
        kmirror_tests::cluster::ClusterOpts {
            extra: vec![
                "--cores".into(),
                "1".into(),
                "--default-replication-factor".into(),
                rf.to_string(),
            ],
            ..Default::default()
        },
    );
    let boot = c.bootstrap();
    let pids: Vec<u32> = (1..=n).map(|i| c.node(i).pid()).collect();
    let cpu = |pids: &[u32]| -> f64 { pids.iter().map(|p| common::cpu_seconds(*p)).sum() };
    let cpu0 = cpu(&pids);
    let load = common::load_avg();
    eprintln!("round {round}: kmirror, {n} nodes (load {load})");
    let t0 = Instant::now();
    let result = common::kmirror_mirror(&c.node(1).addr(), "bench", source, &["--topics", TOPIC])
        .and_then(|()| {
            wait_replicated(t0, &boot, TOPIC, ends, rf, stall_timeout(), || {
                (1..=n).all(|i| c.node_mut(i).alive())
            })
        })
        .and_then(|(secs, secs_from_first)| {
            let cpu_s = cpu(&pids) - cpu0;
            let rss_mib = pids.iter().map(|p| common::peak_rss_mib(*p)).sum();
            // The HW is the leader's word; the files say whether the followers really have it.
            let held: Vec<u64> = (1..=n)
                .map(|i| common::segment_bytes(&c.node(i).data_dir(), TOPIC))
                .collect();
            if held.iter().any(|b| *b < source_bytes) {
                return Err(format!(
                    "HW and ISR cover the source's end, but the nodes hold {held:?} bytes of \
                     {source_bytes}"
                ));
            }
            // HW and ISR alone could be met without the bytes: log-equal on each leader.
            for (p, end) in ends.iter().enumerate() {
                let leader = WireClient::connect_leader(&boot, TOPIC, p as i32)
                    .map_err(|e| e.to_string())?;
                kmirror_tests::log_equal(source, leader.addr(), TOPIC, p as i32, *end)
                    .map_err(|e| format!("caught up but not log-equal: {e}"))?;
            }
            Ok(ClusterNumbers {
                secs,
                secs_from_first,
                cpu_s,
                cpu_with_target_s: None,
                rss_mib,
            })
        });
    if let Err(e) = &result {
        eprintln!("  kmirror round {round} failed: {e}\n{}", c.logs(20));
    }
    ClusterRun {
        copier: "kmirror",
        round,
        load,
        result,
    }
}

fn mm2_cluster(round: usize, source: &str, ends: &[i64], n: usize, tasks: u32) -> ClusterRun {
    let rf = n.min(3).to_string();
    // 2 of 3 as in the produce benchmark; 1 for a one-node check of the harness.
    let min_isr = (n.min(3) - 1).max(1).to_string();
    let mut target = common::Kafka::start_cluster(n, "1g", &[("min.insync.replicas", &min_isr)]);
    let tboot = target
        .iter()
        .map(common::Kafka::bootstrap)
        .collect::<Vec<_>>()
        .join(",");
    // Later lines win in a properties file: RF min(N, 3) for every topic on the target, acks=all.
    // Not offset-syncs: MM2 keeps that topic on the one-node source (at RF 3 its creation
    // fails and the task blocks on the offset-sync producer's metadata: the copy stalled).
    let mut tuning: Vec<(&str, &str)> = MM2_TUNING.to_vec();
    for k in [
        "replication.factor",
        "checkpoints.topic.replication.factor",
        "heartbeats.topic.replication.factor",
        "offset.storage.replication.factor",
        "status.storage.replication.factor",
        "config.storage.replication.factor",
    ] {
        tuning.push((k, &rf));
    }
    tuning.push(("target.producer.acks", "all"));
    let props = common::mm2_properties(source, &tboot, TOPIC, tasks, &tuning);
    let tpids: Vec<u32> = target.iter().map(common::Kafka::pid).collect();
    let cpu = |pids: &[u32]| -> f64 { pids.iter().map(|p| common::cpu_seconds(*p)).sum() };
    let tcpu0 = cpu(&tpids);
    let load = common::load_avg();
    eprintln!("round {round}: MirrorMaker 2 into {n} Kafka nodes, tasks.max={tasks} (load {load})");
    let t0 = Instant::now();
    let mut mm2 = common::Mm2::spawn(&props);
    let pid = mm2.pid();
    let result = wait_replicated(
        t0,
        &tboot,
        &format!("source.{TOPIC}"),
        ends,
        n.min(3),
        stall_timeout(),
        || mm2.alive(),
    )
    .map(|(secs, secs_from_first)| {
        let cpu_s = common::cpu_seconds(pid);
        ClusterNumbers {
            secs,
            secs_from_first,
            cpu_s,
            cpu_with_target_s: Some(cpu_s + cpu(&tpids) - tcpu0),
            rss_mib: common::peak_rss_mib(pid)
                + tpids.iter().map(|p| common::peak_rss_mib(*p)).sum::<f64>(),
        }
    });
    if let Err(e) = &result {
        let log = std::fs::read_to_string(mm2.log()).unwrap_or_default();
        let bad: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("WARN"))
            .collect();
        eprintln!(
            "  MM2 round {round} failed: {e}\n  MM2's last warnings:\n{}",
            bad[bad.len().saturating_sub(10)..].join("\n")
        );
    }
    mm2.stop();
    common::Kafka::stop_all(&mut target);
    ClusterRun {
        copier: "MirrorMaker 2",
        round,
        load,
        result,
    }
}

/// `--cluster N`: see the module comment.
fn main_cluster(n: usize, gb: f64, partitions: i32, tasks: u32, rounds: usize) {
    let records = (gb * 1e9 / 1024.0).ceil() as u64;
    let payload_gb = records as f64 * 1024.0 / 1e9;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!("kmirror binary: {}", common::kmirror_bin().display());
    let source = common::Kafka::start("1g", &[]);
    let boot = source.bootstrap();
    common::create_topic(&boot, TOPIC, partitions, &[]);
    let fill_s = fill_backlog(&boot, records);
    let mut src = WireClient::connect(&boot).expect("connect source");
    let ends: Vec<i64> = (0..partitions)
        .map(|p| src.log_bounds(TOPIC, p).expect("source end offset").1)
        .collect();
    assert_eq!(ends.iter().sum::<i64>(), records as i64, "source backlog");
    let source_bytes = common::segment_bytes(&source.data_dir(), TOPIC);
    eprintln!("backlog of {payload_gb:.2} GB filled in {fill_s:.0} s");

    let mut runs = Vec::new();
    for round in 0..=rounds {
        let kmirror_first = round % 2 == 0;
        for k in [kmirror_first, !kmirror_first] {
            let run = if k {
                kmirror_cluster(round, &boot, source_bytes, &ends, n)
            } else {
                mm2_cluster(round, &boot, &ends, n, tasks)
            };
            if let Ok(x) = &run.result {
                eprintln!(
                    "  {}: {:.1} s, {:.1} MB/s",
                    run.copier,
                    x.secs,
                    payload_gb * 1e3 / x.secs
                );
            }
            runs.push(run);
        }
    }

    println!(
        "\nBacklog: {records} records x 1024 B = {payload_gb:.2} GB payload, {partitions} \
         partitions, on a 1-node Apache Kafka 4.1.1 source; destination {n} nodes, RF {}, \
         a fresh one each round; {cores} cores; order alternating, round 0 is the warm-up \
         (discarded)\n",
        n.min(3)
    );
    println!(
        "| round | copier into {n} nodes | wall s | MB/s | MB/s after first commit | CPU s/GB | \
         CPU s/GB incl. MM2's target nodes | peak RSS MiB (sum) | load avg |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---|");
    for r in &runs {
        let warm = if r.round == 0 { " (warm-up)" } else { "" };
        match &r.result {
            Ok(x) => println!(
                "| {}{warm} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {} | {:.0} | {} |",
                r.round,
                r.copier,
                x.secs,
                payload_gb * 1e3 / x.secs,
                payload_gb * 1e3 / x.secs_from_first,
                x.cpu_s / payload_gb,
                x.cpu_with_target_s
                    .map_or("-".to_string(), |c| format!("{:.2}", c / payload_gb)),
                x.rss_mib,
                r.load
            ),
            Err(e) => println!(
                "| {}{warm} | {} | failed: {} | | | | | | {} |",
                r.round,
                r.copier,
                e.lines().next().unwrap_or("").trim_end_matches(':'),
                r.load
            ),
        }
    }
    let ok = |c: &str| -> Vec<&ClusterNumbers> {
        runs.iter()
            .filter(|r| r.copier == c && r.round > 0)
            .filter_map(|r| r.result.as_ref().ok())
            .collect()
    };
    let fmt = |v: Vec<f64>, prec: usize| {
        common::median_spread(&v).map_or("-".into(), |(m, lo, hi)| {
            format!("**{m:.prec$}** ({lo:.prec$}–{hi:.prec$})")
        })
    };
    println!(
        "\nMedians over the measured rounds that finished (min–max):\n\n| copier | rounds | MB/s | \
         CPU s/GB | CPU s/GB incl. target | peak RSS MiB |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for c in ["kmirror", "MirrorMaker 2"] {
        let rs = ok(c);
        println!(
            "| {c} | {}/{rounds} | {} | {} | {} | {} |",
            rs.len(),
            fmt(rs.iter().map(|x| payload_gb * 1e3 / x.secs).collect(), 1),
            fmt(rs.iter().map(|x| x.cpu_s / payload_gb).collect(), 2),
            fmt(
                rs.iter()
                    .map(|x| x.cpu_with_target_s.unwrap_or(x.cpu_s) / payload_gb)
                    .collect(),
                2
            ),
            fmt(rs.iter().map(|x| x.rss_mib).collect(), 0),
        );
    }
    let pairs: Vec<f64> = (1..=rounds)
        .filter_map(|round| {
            let of = |c: &str| {
                runs.iter()
                    .find(|r| r.round == round && r.copier == c)
                    .and_then(|r| r.result.as_ref().ok())
            };
            Some(of("MirrorMaker 2")?.secs / of("kmirror")?.secs)
        })
        .collect();
    println!(
        "\nkmirror / MM2 throughput per round (rounds where both finished): {}",
        fmt(pairs, 2)
    );
}
