//! Mirror scale benchmark (issue 10, item 7): TOPICS × PARTITIONS partitions (default 500 ×
//! 10 = 5,000) on one Apache Kafka 4.1.1 source node, each with a small backlog, mirrored by
//! kmirror (its own destination) and by MirrorMaker 2 (connect-mirror 4.1.1 into a second
//! Kafka), one after the other. For each: time until every partition has caught up, the
//! copier's TCP connections to the source, CPU used while idle (everything caught up) as a
//! share of one core, and RSS. kmirror is also checked log-equal on a sample of partitions.
//!
//! `cargo run --release -p kmirror-benches --bin e2e_scale -- [TOPICS=500] [PARTITIONS=10]
//! [RECORDS=20] [IDLE_SECONDS=30]` (scripts/bench-scale.sh builds kmirror, passes KMIRROR_BIN).

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_tests::proc;
use kmirror_tests::{records, KmirrorNode, WireClient};

struct Row {
    who: String,
    catch_up_s: f64,
    connections: usize,
    idle_cpu_pct: f64,
    rss_mib: f64,
    peak_rss_mib: f64,
    note: String,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// Sum of the end offsets of every `prefix-N` topic on `addr` (one ListOffsets per topic);
/// None while any is missing.
fn total_end(
    addr: &str,
    topic_of: &dyn Fn(usize) -> String,
    topics: usize,
    parts: i32,
) -> Option<i64> {
    let mut c = WireClient::connect(addr).ok()?;
    let mut sum = 0;
    for t in 0..topics {
        let name = topic_of(t);
        let req = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(
                    (0..parts)
                        .map(|p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_timestamp(-1)
                        })
                        .collect(),
                )]);
        let resp = c.send_at(req, 4).ok()?;
        for tr in &resp.topics {
            for p in &tr.partitions {
                if p.error_code != 0 {
                    return None;
                }
                sum += p.offset;
            }
        }
    }
    Some(sum)
}

fn wait_total(
    addr: &str,
    topic_of: &dyn Fn(usize) -> String,
    topics: usize,
    parts: i32,
    want: i64,
    t0: Instant,
) -> f64 {
    common::wait_caught_up(
        t0,
        want,
        Duration::from_secs(3600),
        Duration::from_millis(500),
        || total_end(addr, topic_of, topics, parts),
        || true,
    )
    .0
}

/// Established TCP connections of `pid` to `port` on loopback.
fn connections_to(pid: u32, port: u16) -> usize {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let s = l.to_string_lossy().into_owned();
                    s.strip_prefix("socket:[")
                        .and_then(|r| r.strip_suffix(']'))
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    // Java's sockets are IPv6 ones even to 127.0.0.1: read both tables.
    let tcp = ["tcp", "tcp6"]
        .iter()
        .map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let want = format!("{port:04X}");
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9
                && f[3] == "01"
                && f[2].rsplit(':').next() == Some(want.as_str())
                && inodes.contains(f[9])
        })
        .count()
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Each thread's ("name/tid", CPU ticks) of `pid` (names repeat: the tid keeps them apart).
fn thread_ticks(pid: u32) -> Vec<(String, u64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let name = format!(
            "{}/{}",
            &stat[stat.find('(')? + 1..stat.rfind(')')?],
            e.file_name().to_string_lossy()
        );
        let f: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
        Some((
            name,
            f[11].parse::<u64>().ok()? + f[12].parse::<u64>().ok()?,
        ))
    })
    .collect()
}

/// CPU share of one core `pid` uses over `secs`; the busiest threads go to stderr.
fn idle_cpu_pct(pid: u32, secs: u64) -> f64 {
    let c0 = common::cpu_seconds(pid);
    let t0 = thread_ticks(pid);
    std::thread::sleep(Duration::from_secs(secs));
    let mut busy: Vec<(u64, String)> = thread_ticks(pid)
        .into_iter()
        .map(|(name, t)| {
            let before = t0.iter().find(|(n, _)| *n == name).map_or(0, |(_, b)| *b);
            (t.saturating_sub(before), name)
        })
        .collect();
    busy.sort_unstable_by(|a, b| b.cmp(a));
    eprintln!(
        "  busiest threads while idle (ticks): {:?}",
        &busy[..busy.len().min(5)]
    );
    (common::cpu_seconds(pid) - c0) / secs as f64 * 100.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let topics: usize = args.next().map_or(500, |a| a.parse().expect("TOPICS"));
    let parts: i32 = args.next().map_or(10, |a| a.parse().expect("PARTITIONS"));
    let per: usize = args.next().map_or(20, |a| a.parse().expect("RECORDS"));
    let idle: u64 = args.next().map_or(30, |a| a.parse().expect("IDLE_SECONDS"));
    let total_parts = topics * parts as usize;
    eprintln!("kmirror binary: {}", common::kmirror_bin().display());

    let source = common::Kafka::start("2g", &[]);
    let boot = source.bootstrap();
    let port: u16 = boot
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let topic_of = |t: usize| format!("scale-{t:04}");
    let t0 = Instant::now();
    {
        let mut c = WireClient::connect(&boot).expect("source");
        for t in 0..topics {
            let code = c
                .create_topic(&topic_of(t), parts, 1, &[])
                .expect("CreateTopics");
            assert_eq!(code, 0, "create {}", topic_of(t));
        }
    }
    let value = vec![b's'; 1024];
    let values: Vec<&[u8]> = (0..per).map(|_| value.as_slice()).collect();
    let mut c = WireClient::connect(&boot).expect("source");
    for t in 0..topics {
        for p in 0..parts {
            let name = topic_of(t);
            let (code, _) = proc::wait_for(Duration::from_secs(60), "a partition leader", || {
                c.produce_raw(&name, p, records::batch(&values, now_ms()), 1)
                    .ok()
                    .filter(|(code, _)| *code == 0)
            });
            assert_eq!(code, 0);
        }
    }
    let want = (total_parts * per) as i64;
    eprintln!(
        "source: {topics} topics x {parts} partitions, {per} records each, filled in {:.0} s",
        t0.elapsed().as_secs_f64()
    );

    let mut rows = Vec::new();

    // kmirror.
    {
        let mut node = KmirrorNode::start();
        let addr = node.addr();
        let pid = node.pid();
        eprintln!("kmirror (load {})", common::load_avg());
        let t0 = Instant::now();
        common::kmirror_mirror(&addr, "scale", &boot, &["--topic-regex", "scale-.*"])
            .expect("kmirror mirror");
        let catch_up_s = wait_total(&addr, &topic_of, topics, parts, want, t0);
        std::thread::sleep(Duration::from_secs(5));
        let connections = connections_to(pid, port);
        let idle_cpu_pct = idle_cpu_pct(pid, idle);
        let (rss, peak) = (rss_mib(pid), common::peak_rss_mib(pid));
        let mut unequal = 0;
        for t in (0..topics).step_by((topics / 50).max(1)) {
            for p in 0..parts {
                if kmirror_tests::log_equal(&boot, &addr, &topic_of(t), p, per as i64).is_err() {
                    unequal += 1;
                }
            }
        }
        assert_eq!(unequal, 0, "kmirror caught up but is not log-equal");
        node.stop();
        rows.push(Row {
            who: "kmirror".into(),
            catch_up_s,
            connections,
            idle_cpu_pct,
            rss_mib: rss,
            peak_rss_mib: peak,
            note: "log-equal on the sampled partitions".into(),
        });
    }

    // MirrorMaker 2 (SKIP_MM2=1 measures kmirror alone).
    if std::env::var_os("SKIP_MM2").is_none() {
        let mut target = common::Kafka::start("2g", &[]);
        let props = common::mm2_properties(&boot, &target.bootstrap(), "scale-.*", 4, &[]);
        eprintln!("MirrorMaker 2 (load {})", common::load_avg());
        let t0 = Instant::now();
        let mut mm2 = common::Mm2::spawn(&props);
        let pid = mm2.pid();
        let tboot = target.bootstrap();
        let remote = |t: usize| format!("source.scale-{t:04}");
        let catch_up_s = wait_total(&tboot, &remote, topics, parts, want, t0);
        std::thread::sleep(Duration::from_secs(5));
        let connections = connections_to(pid, port);
        let tpid = target.pid();
        let t_cpu0 = common::cpu_seconds(tpid);
        let idle_cpu_pct = idle_cpu_pct(pid, idle);
        let target_idle = (common::cpu_seconds(tpid) - t_cpu0) / idle as f64 * 100.0;
        let (rss, peak) = (rss_mib(pid), common::peak_rss_mib(pid));
        mm2.stop();
        target.stop();
        rows.push(Row {
            who: "MirrorMaker 2 (tasks.max=4) -> 2nd Kafka".into(),
            catch_up_s,
            connections,
            idle_cpu_pct,
            rss_mib: rss,
            peak_rss_mib: peak,
            note: format!("its target broker: {target_idle:.1}% of a core while idle"),
        });
    }

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "\n{total_parts} partitions ({topics} topics x {parts}), {per} records of 1 KiB each, one \
         Apache Kafka 4.1.1 source node; {cores} cores; idle measured over {idle} s\n"
    );
    println!(
        "| copier | catch-up s | connections to the source | idle CPU % of one core | RSS MiB | \
         peak RSS MiB | note |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {:.1} | {} | {:.1} | {:.0} | {:.0} | {} |",
            r.who, r.catch_up_s, r.connections, r.idle_cpu_pct, r.rss_mib, r.peak_rss_mib, r.note
        );
    }
}
