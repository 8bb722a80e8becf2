//! Broker benchmark (issue 3, item 7): the stock kafka-tools ProducerPerformance and
//! ConsumerPerformance against Apache Kafka 4.1.1 and against kmirror, one after the other in
//! one run, same topic layout, 1 KiB records, acks=all. Prints a markdown table.
//!
//! `cargo run --release -p kmirror-benches --bin e2e_broker -- [RECORDS] [PARTITIONS]`
//! (scripts/bench-broker.sh builds kmirror first and passes KMIRROR_BIN).

mod common;

use std::time::Duration;

use kmirror_tests::java::tools;
use kmirror_tests::KmirrorNode;

/// One broker's numbers.
struct Row {
    broker: &'static str,
    produce_mb_s: f64,
    records_s: f64,
    avg_ms: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    consume_mb_s: f64,
    fetch_mb_s: f64,
    rss_mib: f64,
    load: String,
}

/// The number right before `marker` in ProducerPerformance's summary line.
fn before(summary: &str, marker: &str) -> f64 {
    let head = &summary[..summary
        .find(marker)
        .unwrap_or_else(|| panic!("no '{marker}' in: {summary}"))];
    head.split([' ', '(', ','])
        .rfind(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no number before '{marker}' in: {summary}"))
}

fn produce(boot: &str, topic: &str, records: u64) -> String {
    let ran = common::run_tool(
        tools::PRODUCER_PERFORMANCE,
        &[
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            "1024",
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={boot}"),
            "acks=all",
        ],
        Duration::from_secs(900),
    );
    ran.stdout
        .lines()
        .rev()
        .find(|l| l.contains("records sent") && l.contains("99th"))
        .unwrap_or_else(|| panic!("no ProducerPerformance summary:\n{}", ran.stdout))
        .to_string()
}

/// ConsumerPerformance CSV row: (MB.sec, fetch.MB.sec) after checking every record was read.
fn consume(boot: &str, topic: &str, records: u64) -> (f64, f64) {
    let ran = common::run_tool(
        tools::CONSUMER_PERFORMANCE,
        &[
            "--bootstrap-server",
            boot,
            "--topic",
            topic,
            "--messages",
            &records.to_string(),
            "--timeout",
            "60000",
        ],
        Duration::from_secs(900),
    );
    let row = ran
        .stdout
        .lines()
        .rev()
        .find(|l| l.split(',').count() >= 9 && !l.starts_with("start.time"))
        .unwrap_or_else(|| panic!("no ConsumerPerformance row:\n{}", ran.stdout));
    let f: Vec<&str> = row.split(',').map(str::trim).collect();
    let n: u64 = f[4].parse().expect("nMsg");
    assert!(
        n >= records,
        "ConsumerPerformance read {n} of {records}: {row}"
    );
    (
        f[3].parse().expect("MB.sec"),
        f[8].parse().expect("fetch.MB.sec"),
    )
}

fn bench(broker: &'static str, boot: &str, pid: u32, records: u64, partitions: i32) -> Row {
    common::create_topic(boot, "warmup", partitions, &[]);
    common::create_topic(boot, "bench", partitions, &[]);
    eprintln!("[{broker}] warm-up: {} records", records / 5);
    produce(boot, "warmup", records / 5);
    consume(boot, "warmup", records / 5);
    let load = common::load_avg();
    eprintln!("[{broker}] produce {records} records (load {load})");
    let summary = produce(boot, "bench", records);
    eprintln!("[{broker}] {summary}");
    let (consume_mb_s, fetch_mb_s) = consume(boot, "bench", records);
    Row {
        broker,
        produce_mb_s: before(&summary, "MB/sec"),
        records_s: before(&summary, "records/sec"),
        avg_ms: before(&summary, "ms avg latency"),
        p50_ms: before(&summary, "ms 50th"),
        p99_ms: before(&summary, "ms 99th"),
        p999_ms: before(&summary, "ms 99.9th"),
        consume_mb_s,
        fetch_mb_s,
        rss_mib: common::peak_rss_mib(pid),
        load,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let records: u64 = args.next().map_or(500_000, |a| a.parse().expect("RECORDS"));
    let partitions: i32 = args.next().map_or(6, |a| a.parse().expect("PARTITIONS"));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let bin = common::kmirror_bin();
    eprintln!("kmirror binary: {}", bin.display());

    let mut rows = Vec::new();
    {
        let mut kafka = common::Kafka::start("1g", &[]);
        rows.push(bench(
            "Apache Kafka 4.1.1",
            &kafka.bootstrap(),
            kafka.pid(),
            records,
            partitions,
        ));
        kafka.stop();
    }
    {
        let mut node = KmirrorNode::start();
        rows.push(bench(
            "kmirror",
            &node.addr(),
            node.pid(),
            records,
            partitions,
        ));
        node.stop();
    }

    println!(
        "\n{records} records x 1024 B, {partitions} partitions, acks=all, --throughput -1, \
         {cores} cores\n"
    );
    println!(
        "| broker | produce MB/s | records/s | avg ms | p50 ms | p99 ms | p99.9 ms | \
         consume MB/s | fetch MB/s | broker peak RSS MiB | load avg |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} | {} |",
            r.broker,
            r.produce_mb_s,
            r.records_s,
            r.avg_ms,
            r.p50_ms,
            r.p99_ms,
            r.p999_ms,
            r.consume_mb_s,
            r.fetch_mb_s,
            r.rss_mib,
            r.load
        );
    }
    let (k, m) = (&rows[0], &rows[1]);
    println!(
        "\nkmirror / Kafka: produce {:.2}x, consume {:.2}x, p99 produce latency {:.2}x",
        m.produce_mb_s / k.produce_mb_s,
        m.consume_mb_s / k.consume_mb_s,
        m.p99_ms / k.p99_ms
    );
}
