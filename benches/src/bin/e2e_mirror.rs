//! Mirror catch-up benchmark (issue 4, item 10): a backlog of 1 KiB records on an Apache Kafka
//! 4.1.1 source, copied to the end by MirrorMaker 2 (connect-mirror 4.1.1, dedicated mode, into
//! a second single-node Kafka: MM2 needs a target cluster) and by kmirror (`kmirror mirror
//! create` + `add`, the node is its own target), one after the other, same source, data and
//! machine. Measures wall time until the target's end offsets reach the source's, CPU seconds
//! (utime+stime from /proc) per GB and peak RSS (VmHWM). Prints a markdown table.
//!
//! `cargo run --release -p kmirror-benches --bin e2e_mirror -- [GB=2] [PARTITIONS=8] [TASKS=4]`
//! (scripts/bench-mirror.sh builds kmirror first and passes KMIRROR_BIN).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kmirror_tests::java::tools;
use kmirror_tests::proc::{self, ChildGuard};
use kmirror_tests::KmirrorNode;

const TOPIC: &str = "backlog";

/// One copier's numbers.
struct Row {
    who: String,
    secs: f64,
    secs_from_first: f64,
    cpu_s: f64,
    cpu_with_target_s: Option<f64>,
    rss_mib: f64,
    load: String,
}

/// Polls `end()` until it reaches `want`; returns (seconds since `t0`, seconds since the first
/// record arrived). Panics after `timeout` or if `alive()` turns false.
fn wait_caught_up(
    t0: Instant,
    want: i64,
    timeout: Duration,
    mut end: impl FnMut() -> Option<i64>,
    mut alive: impl FnMut() -> bool,
) -> (f64, f64) {
    let mut first: Option<Instant> = None;
    let mut last_print = Instant::now();
    loop {
        let now_end = end().unwrap_or(0);
        if now_end > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        if now_end >= want {
            let done = Instant::now();
            return (
                (done - t0).as_secs_f64(),
                (done - first.unwrap_or(t0)).as_secs_f64(),
            );
        }
        assert!(
            alive(),
            "copier exited before catching up ({now_end}/{want})"
        );
        assert!(
            t0.elapsed() < timeout,
            "not caught up after {timeout:?}: {now_end}/{want}"
        );
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  {now_end}/{want} records after {:.0} s",
                t0.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
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

fn mm2(source: &str, records: u64, partitions: i32, tasks: u32) -> Row {
    let mut target = common::Kafka::start("1g", &[]);
    let dir = tempfile::tempdir().expect("temp dir");
    let props = format!(
        "clusters = source, target\n\
         source.bootstrap.servers = {source}\n\
         target.bootstrap.servers = {target}\n\
         source->target.enabled = true\n\
         source->target.topics = {TOPIC}\n\
         target->source.enabled = false\n\
         tasks.max = {tasks}\n\
         replication.factor = 1\n\
         checkpoints.topic.replication.factor = 1\n\
         heartbeats.topic.replication.factor = 1\n\
         offset-syncs.topic.replication.factor = 1\n\
         offset.storage.replication.factor = 1\n\
         status.storage.replication.factor = 1\n\
         config.storage.replication.factor = 1\n\
         emit.heartbeats.enabled = false\n\
         emit.checkpoints.enabled = false\n\
         sync.group.offsets.enabled = false\n\
         sync.topic.acls.enabled = false\n\
         target.producer.linger.ms = 20\n\
         target.producer.batch.size = 524288\n\
         target.producer.max.request.size = 4194304\n",
        target = target.bootstrap()
    );
    let path = dir.path().join("mm2.properties");
    std::fs::write(&path, &props).expect("write mm2.properties");
    let log = std::fs::File::create(dir.path().join("mm2.log")).expect("mm2 log");
    let target_cpu0 = common::cpu_seconds(target.pid());
    let load = common::load_avg();
    eprintln!("MirrorMaker 2: tasks.max={tasks} (load {load})");
    let t0 = Instant::now();
    // connect-mirror-maker.sh's heap: -Xms256M -Xmx2G.
    let mut cmd = common::java_heap("256m", "2g", tools::MIRROR_MAKER);
    let child = cmd
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup"))
        .stderr(log)
        .spawn()
        .expect("spawn MirrorMaker");
    let mut child = ChildGuard(child);
    let pid = child.0.id();
    let tboot = target.bootstrap();
    let remote = format!("source.{TOPIC}");
    let (secs, secs_from_first) = wait_caught_up(
        t0,
        records as i64,
        Duration::from_secs(3600),
        || common::total_end_offset(&tboot, &remote, partitions),
        || matches!(child.0.try_wait(), Ok(None)),
    );
    let cpu_s = common::cpu_seconds(pid);
    let target_cpu = common::cpu_seconds(target.pid()) - target_cpu0;
    let rss_mib = common::peak_rss_mib(pid);
    proc::terminate(&mut child.0, Duration::from_secs(30));
    target.stop();
    Row {
        who: format!("MirrorMaker 2 (tasks.max={tasks}) -> 2nd Kafka"),
        secs,
        secs_from_first,
        cpu_s,
        cpu_with_target_s: Some(cpu_s + target_cpu),
        rss_mib,
        load,
    }
}

/// `kmirror mirror --bootstrap ADDR ARGS…`; Err(one-line error) unless it exits 0.
fn kmirror_cli(addr: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(common::kmirror_bin())
        .args(["mirror", "--bootstrap", addr])
        .args(args)
        .output()
        .expect("run kmirror mirror");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "kmirror mirror {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn kmirror(source: &str, records: u64, partitions: i32) -> Result<Row, String> {
    let mut node = KmirrorNode::start();
    let addr = node.addr();
    let pid = node.pid();
    let cpu0 = common::cpu_seconds(pid);
    let load = common::load_avg();
    eprintln!("kmirror (load {load})");
    let t0 = Instant::now();
    kmirror_cli(&addr, &["create", "bench", "--source", source])?;
    kmirror_cli(&addr, &["add", "bench", "--topics", TOPIC])?;
    let (secs, secs_from_first) = wait_caught_up(
        t0,
        records as i64,
        Duration::from_secs(3600),
        || common::total_end_offset(&addr, TOPIC, partitions),
        || node.alive(),
    );
    let cpu_s = common::cpu_seconds(pid) - cpu0;
    let rss_mib = common::peak_rss_mib(pid);
    // End offsets alone could be met without the bytes: SPEC's log-equal oracle, after the
    // measurement (it reads everything back from both sides).
    let mut src = kmirror_tests::WireClient::connect(source).map_err(|e| e.to_string())?;
    for p in 0..partitions {
        let (_, end) = src.log_bounds(TOPIC, p).map_err(|e| e.to_string())?;
        kmirror_tests::log_equal(source, &addr, TOPIC, p, end)
            .map_err(|e| format!("kmirror caught up but is not log-equal: {e}"))?;
    }
    eprintln!("kmirror: log-equal with the source on all {partitions} partitions");
    node.stop();
    Ok(Row {
        who: "kmirror (its own target)".into(),
        secs,
        secs_from_first,
        cpu_s,
        cpu_with_target_s: None,
        rss_mib,
        load,
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let gb: f64 = args.next().map_or(2.0, |a| a.parse().expect("GB"));
    let partitions: i32 = args.next().map_or(8, |a| a.parse().expect("PARTITIONS"));
    let tasks: u32 = args.next().map_or(4, |a| a.parse().expect("TASKS"));
    let records = (gb * 1e9 / 1024.0).ceil() as u64;
    let payload_gb = records as f64 * 1024.0 / 1e9;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!("kmirror binary: {}", common::kmirror_bin().display());

    let source = common::Kafka::start("1g", &[]);
    let boot = source.bootstrap();
    common::create_topic(&boot, TOPIC, partitions, &[]);
    let fill_s = fill_backlog(&boot, records);
    let end = common::total_end_offset(&boot, TOPIC, partitions).expect("source end offsets");
    assert_eq!(end, records as i64, "source backlog end offsets");
    eprintln!("backlog of {payload_gb:.2} GB filled in {fill_s:.0} s");

    let mut rows = vec![mm2(&boot, records, partitions, tasks)];
    let kmirror_error = match kmirror(&boot, records, partitions) {
        Ok(row) => {
            rows.push(row);
            None
        }
        Err(e) => Some(e),
    };

    println!(
        "\nBacklog: {records} records x 1024 B = {payload_gb:.2} GB payload, {partitions} \
         partitions, one Apache Kafka 4.1.1 source node; {cores} cores\n"
    );
    println!(
        "| copier | wall s (from start) | MB/s | MB/s after first record | CPU s | CPU s/GB | \
         CPU s/GB incl. target broker | peak RSS MiB | load avg |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {:.0} | {} |",
            r.who,
            r.secs,
            payload_gb * 1e3 / r.secs,
            payload_gb * 1e3 / r.secs_from_first,
            r.cpu_s,
            r.cpu_s / payload_gb,
            r.cpu_with_target_s
                .map_or("(same)".to_string(), |c| format!("{:.1}", c / payload_gb)),
            r.rss_mib,
            r.load
        );
    }
    if rows.len() == 2 {
        let (m, k) = (&rows[0], &rows[1]);
        println!(
            "\nkmirror / MM2: throughput {:.2}x, CPU per GB {:.2}x (vs MM2 + its target broker \
             {:.2}x), peak RSS {:.2}x",
            m.secs / k.secs,
            k.cpu_s / m.cpu_s,
            k.cpu_s / m.cpu_with_target_s.unwrap_or(m.cpu_s),
            k.rss_mib / m.rss_mib
        );
    }
    if let Some(e) = kmirror_error {
        println!("\nkmirror side NOT measured: {e}");
        std::process::exit(2);
    }
}
