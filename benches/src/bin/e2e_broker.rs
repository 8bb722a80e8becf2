//! Broker benchmark (issue 3, item 7): the stock kafka-tools ProducerPerformance and
//! ConsumerPerformance against Apache Kafka 4.1.1 and against kmirror, one after the other in
//! one run, same topic layout, 1 KiB records, acks=all. Prints a markdown table.
//!
//! `cargo run --release -p kmirror-benches --bin e2e_broker -- [RECORDS] [PARTITIONS]`
//! (scripts/bench-broker.sh builds kmirror first and passes KMIRROR_BIN).
//!
//! `… --bin e2e_broker -- --tls [RECORDS] [PARTITIONS] [ROUNDS]`: the same tools over SSL
//! (server-authenticated TLS, PEM files from a throwaway CA) against both brokers, each with
//! a PLAINTEXT and an SSL listener, alternating Kafka and kmirror for ROUNDS rounds (both
//! running, one loaded at a time); each round also reads the topic over PLAINTEXT to price
//! TLS on the fetch path. Prints per-round rows and the median kmirror/Kafka ratios with
//! their spread.
//!
//! `… --bin e2e_broker -- --cluster 3 [RECORDS] [PARTITIONS] [ROUNDS]` (issue 12):
//! ProducerPerformance acks=all into RF=3 topics (`min.insync.replicas=2`) on three Apache
//! Kafka nodes and on three kmirror nodes, all on this machine, alternating which cluster is
//! loaded first each round. Prints per-round rows (MB/s, p50/p99, CPU of all nodes per GB)
//! and the median kmirror/Kafka ratios with their spread; a round counts only once every
//! node's data directory holds the topic's payload (it really was replicated).
//! `KMIRROR_BENCH_KAFKA_ONLY=1`: the Kafka side alone.
//!
//! `… --bin e2e_broker -- --consume [RECORDS] [PARTITIONS] [ROUNDS]`: the consume side alone.
//! Kafka, kmirror, and a second kmirror with `KMIRROR_SENDFILE=1` (sendfile to the loopback
//! consumer, which by default gets copies) all run; each gets the same topic once, then ROUNDS rounds
//! of ConsumerPerformance read it, the order rotating each round. Prints MB/s, fetch MB/s and
//! broker CPU s/GB per round, and the median ratios with their spread.
//! `KMIRROR_BENCH_ALT="--pin-cores false"` replaces the sendfile side
//! with a kmirror started with those environment variables and `serve` arguments; `KMIRROR_BENCH_METRICS=1` prints the consumer's
//! fetch metrics (sizes, latencies, records per request) after each read.

mod common;

use std::time::Duration;

use kmirror_tests::cluster::{ClusterOpts, KmirrorCluster};
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
    produce_with(boot, topic, records, &[])
}

/// ProducerPerformance with extra producer properties (`key=value`).
fn produce_with(boot: &str, topic: &str, records: u64, props: &[String]) -> String {
    let mut all = vec!["acks=all"];
    all.extend(props.iter().map(String::as_str));
    let ran = common::producer_performance(boot, topic, records, &all, Duration::from_secs(900));
    ran.stdout
        .lines()
        .rev()
        .find(|l| l.contains("records sent") && l.contains("99th"))
        .unwrap_or_else(|| panic!("no ProducerPerformance summary:\n{}", ran.stdout))
        .to_string()
}

/// ConsumerPerformance CSV row: (MB.sec, fetch.MB.sec) after checking every record was read.
fn consume(boot: &str, topic: &str, records: u64) -> (f64, f64) {
    consume_with(boot, topic, records, None)
}

/// ConsumerPerformance with a consumer properties file.
fn consume_with(
    boot: &str,
    topic: &str,
    records: u64,
    config: Option<&std::path::Path>,
) -> (f64, f64) {
    let n = records.to_string();
    let cfg = config.map(|c| c.display().to_string());
    let mut args = vec![
        "--bootstrap-server",
        boot,
        "--topic",
        topic,
        "--messages",
        &n,
        "--timeout",
        "60000",
    ];
    if let Some(c) = &cfg {
        args.extend(["--consumer.config", c.as_str()]);
    }
    // KMIRROR_BENCH_METRICS=1: the consumer's own fetch metrics (sizes, latencies, records per
    // request), to see why one broker feeds the same consumer faster than the other.
    let metrics = std::env::var_os("KMIRROR_BENCH_METRICS").is_some();
    if metrics {
        args.push("--print-metrics");
    }
    let ran = common::run_tool(tools::CONSUMER_PERFORMANCE, &args, Duration::from_secs(900));
    if metrics {
        for l in ran.stdout.lines().filter(|l| {
            (l.starts_with("consumer-fetch-manager-metrics:")
                || l.starts_with("consumer-node-metrics:request-latency")
                || l.starts_with("consumer-node-metrics:incoming-byte-rate"))
                && !l.contains("topic=")
        }) {
            eprintln!("  {l}");
        }
    }
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

/// One broker's numbers in one TLS round.
struct TlsRow {
    round: usize,
    broker: &'static str,
    produce_mb_s: f64,
    p99_ms: f64,
    fetch_tls_mb_s: f64,
    fetch_plain_mb_s: f64,
    /// Broker CPU seconds per GB fetched, over TLS and over PLAINTEXT.
    cpu_s_gb_tls: f64,
    cpu_s_gb_plain: f64,
    load: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn spread(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.2}–{hi:.2}")
}

/// One TLS round on one broker: produce over SSL, read over SSL, read over PLAINTEXT.
#[allow(clippy::too_many_arguments)]
fn tls_round(
    round: usize,
    broker: &'static str,
    plain: &str,
    ssl: &str,
    pid: u32,
    producer_ssl: &[String],
    consumer_ssl: &std::path::Path,
    records: u64,
    partitions: i32,
) -> TlsRow {
    let topic = format!("tls-{round}");
    common::create_topic(plain, &topic, partitions, &[]);
    let load = common::load_avg();
    eprintln!("[{broker} round {round}] produce {records} over SSL (load {load})");
    let summary = produce_with(ssl, &topic, records, producer_ssl);
    let gb = records as f64 * 1024.0 / 1e9;
    let cpu0 = common::cpu_seconds(pid);
    let (_, fetch_tls) = consume_with(ssl, &topic, records, Some(consumer_ssl));
    let cpu1 = common::cpu_seconds(pid);
    let (_, fetch_plain) = consume(plain, &topic, records);
    let cpu2 = common::cpu_seconds(pid);
    eprintln!("[{broker} round {round}] {summary}; fetch TLS {fetch_tls} MB/s, PLAINTEXT {fetch_plain} MB/s");
    TlsRow {
        round,
        broker,
        produce_mb_s: before(&summary, "MB/sec"),
        p99_ms: before(&summary, "ms 99th"),
        fetch_tls_mb_s: fetch_tls,
        fetch_plain_mb_s: fetch_plain,
        cpu_s_gb_tls: (cpu1 - cpu0) / gb,
        cpu_s_gb_plain: (cpu2 - cpu1) / gb,
        load,
    }
}

fn main_tls(records: u64, partitions: i32, rounds: usize) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let pki = kmirror_tests::pki::TestPki::new();
    let server = pki.server("bench-broker");
    let ca = pki.ca_pem.clone();
    let producer_ssl = vec![
        "security.protocol=SSL".to_string(),
        "ssl.truststore.type=PEM".into(),
        format!("ssl.truststore.location={}", ca.display()),
    ];
    let consumer_ssl = pki.dir().join("consumer-ssl.properties");
    std::fs::write(&consumer_ssl, producer_ssl.join("\n") + "\n").expect("consumer config");
    let bin = common::kmirror_bin();
    eprintln!("kmirror binary: {}", bin.display());
    let mut kafka = common::Kafka::start_ssl("1g", &[], Some((&server.keystore, &ca)));
    let (cert, key) = (
        server.cert.display().to_string(),
        server.key.display().to_string(),
    );
    let mut node = KmirrorNode::builder()
        .listeners(&["PLAINTEXT", "SSL"])
        .args(&["--tls-cert", &cert, "--tls-key", &key])
        .start();
    let (kp, ks) = (kafka.bootstrap(), kafka.ssl_bootstrap());
    let (mp, ms) = (node.listener_addr("PLAINTEXT"), node.listener_addr("SSL"));
    // Warm-up of both, untimed.
    for (plain, ssl) in [(&kp, &ks), (&mp, &ms)] {
        common::create_topic(plain, "warmup", partitions, &[]);
        produce_with(ssl, "warmup", records / 5, &producer_ssl);
        consume_with(ssl, "warmup", records / 5, Some(&consumer_ssl));
    }
    let mut rows = Vec::new();
    for round in 1..=rounds {
        // Alternate which broker goes first.
        let order: [bool; 2] = if round % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        };
        for is_kafka in order {
            rows.push(if is_kafka {
                tls_round(
                    round,
                    "Apache Kafka 4.1.1",
                    &kp,
                    &ks,
                    kafka.pid(),
                    &producer_ssl,
                    &consumer_ssl,
                    records,
                    partitions,
                )
            } else {
                tls_round(
                    round,
                    "kmirror",
                    &mp,
                    &ms,
                    node.pid(),
                    &producer_ssl,
                    &consumer_ssl,
                    records,
                    partitions,
                )
            });
        }
    }
    let rss = (
        common::peak_rss_mib(kafka.pid()),
        common::peak_rss_mib(node.pid()),
    );
    kafka.stop();
    node.stop();

    println!(
        "\n{records} records x 1024 B, {partitions} partitions, acks=all, --throughput -1, \
         SSL (TLS 1.3, server auth), {rounds} rounds, {cores} cores\n"
    );
    println!(
        "| round | broker | produce MB/s (SSL) | p99 ms | fetch MB/s SSL | fetch MB/s PLAINTEXT | \
         broker CPU s/GB fetched SSL | PLAINTEXT | load avg |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1} | {:.0} | {:.1} | {:.1} | {:.2} | {:.2} | {} |",
            r.round,
            r.broker,
            r.produce_mb_s,
            r.p99_ms,
            r.fetch_tls_mb_s,
            r.fetch_plain_mb_s,
            r.cpu_s_gb_tls,
            r.cpu_s_gb_plain,
            r.load
        );
    }
    let pairs: Vec<(&TlsRow, &TlsRow)> = (1..=rounds)
        .map(|round| {
            let of = |b: &str| {
                rows.iter()
                    .find(|r| r.round == round && r.broker.starts_with(b))
                    .expect("row")
            };
            (of("Apache"), of("kmirror"))
        })
        .collect();
    let ratio =
        |f: fn(&TlsRow) -> f64| -> Vec<f64> { pairs.iter().map(|(k, m)| f(m) / f(k)).collect() };
    let produce = ratio(|r| r.produce_mb_s);
    let fetch = ratio(|r| r.fetch_tls_mb_s);
    let p99 = ratio(|r| r.p99_ms);
    println!(
        "\nkmirror / Kafka over SSL, median of {rounds} rounds (min–max): produce {:.2}x ({}), \
         fetch {:.2}x ({}), p99 produce latency {:.2}x ({})",
        median(produce.clone()),
        spread(&produce),
        median(fetch.clone()),
        spread(&fetch),
        median(p99.clone()),
        spread(&p99)
    );
    for b in ["Apache", "kmirror"] {
        let mine: Vec<&TlsRow> = rows.iter().filter(|r| r.broker.starts_with(b)).collect();
        let cost: Vec<f64> = mine
            .iter()
            .map(|r| r.fetch_tls_mb_s / r.fetch_plain_mb_s)
            .collect();
        let cpu: Vec<f64> = mine
            .iter()
            .map(|r| r.cpu_s_gb_tls / r.cpu_s_gb_plain)
            .collect();
        println!(
            "{}: fetch over SSL / PLAINTEXT {:.2}x ({}), broker CPU per GB fetched SSL / PLAINTEXT {:.2}x ({})",
            mine[0].broker,
            median(cost.clone()),
            spread(&cost),
            median(cpu.clone()),
            spread(&cpu)
        );
    }
    println!(
        "peak RSS MiB: Apache Kafka {:.0}, kmirror {:.0}",
        rss.0, rss.1
    );
}

/// One broker's numbers in one consume round.
struct ConsumeRow {
    round: usize,
    broker: &'static str,
    consume_mb_s: f64,
    fetch_mb_s: f64,
    cpu_s_gb: f64,
    load: String,
}

fn main_consume(records: u64, partitions: i32, rounds: usize) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let bin = common::kmirror_bin();
    eprintln!("kmirror binary: {}", bin.display());
    let mut kafka = common::Kafka::start("1g", &[]);
    let mut node = KmirrorNode::start();
    // The third side: sendfile forced on (loopback peers get copies by default), or other
    // `serve` arguments to compare
    // (KMIRROR_BENCH_ALT="--pin-cores false").
    let alt = std::env::var("KMIRROR_BENCH_ALT").unwrap_or_default();
    // Words of the form NAME=VALUE are environment variables, the rest `serve` arguments.
    let (alt_env, alt_args): (Vec<&str>, Vec<&str>) =
        alt.split_whitespace().partition(|w| w.contains('='));
    let alt_env: Vec<(&str, &str)> = alt_env.iter().filter_map(|w| w.split_once('=')).collect();
    let (mut copying, alt_name): (KmirrorNode, &'static str) = if alt.trim().is_empty() {
        (
            KmirrorNode::builder()
                .env(&[("KMIRROR_SENDFILE", "1")])
                .start(),
            "kmirror, sendfile forced",
        )
    } else {
        (
            KmirrorNode::builder().args(&alt_args).env(&alt_env).start(),
            Box::leak(format!("kmirror {alt}").into_boxed_str()),
        )
    };
    let sides: [(&'static str, String, u32); 3] = [
        ("Apache Kafka 4.1.1", kafka.bootstrap(), kafka.pid()),
        ("kmirror", node.addr(), node.pid()),
        (alt_name, copying.addr(), copying.pid()),
    ];
    for (name, boot, _) in &sides {
        common::create_topic(boot, "bench", partitions, &[]);
        eprintln!("[{name}] produce {records} records");
        produce(boot, "bench", records);
        // Warm-up read (page cache, JIT of the broker).
        consume(boot, "bench", records);
    }
    let gb = records as f64 * 1024.0 / 1e9;
    let mut rows = Vec::new();
    for round in 1..=rounds {
        for k in 0..sides.len() {
            let (name, boot, pid) = &sides[(k + round - 1) % sides.len()];
            let load = common::load_avg();
            let cpu0 = common::cpu_seconds(*pid);
            let (consume_mb_s, fetch_mb_s) = consume(boot, "bench", records);
            let cpu1 = common::cpu_seconds(*pid);
            eprintln!("[{name} round {round}] {consume_mb_s} MB/s, fetch {fetch_mb_s} MB/s");
            rows.push(ConsumeRow {
                round,
                broker: name,
                consume_mb_s,
                fetch_mb_s,
                cpu_s_gb: (cpu1 - cpu0) / gb,
                load,
            });
        }
    }
    kafka.stop();
    node.stop();
    copying.stop();
    println!(
        "\n{records} records x 1024 B, {partitions} partitions, ConsumerPerformance, \
         {rounds} rounds (order rotating), {cores} cores\n"
    );
    println!("| round | broker | consume MB/s | fetch MB/s | broker CPU s/GB | load avg |");
    println!("|---:|---|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.2} | {} |",
            r.round, r.broker, r.consume_mb_s, r.fetch_mb_s, r.cpu_s_gb, r.load
        );
    }
    let of = |round: usize, b: &str| -> &ConsumeRow {
        rows.iter()
            .find(|r| r.round == round && r.broker == b)
            .expect("row")
    };
    for (a, b) in [
        ("kmirror", "Apache Kafka 4.1.1"),
        (alt_name, "Apache Kafka 4.1.1"),
        ("kmirror", alt_name),
    ] {
        let ratio = |f: fn(&ConsumeRow) -> f64| -> Vec<f64> {
            (1..=rounds).map(|r| f(of(r, a)) / f(of(r, b))).collect()
        };
        let (c, f, cpu) = (
            ratio(|r| r.consume_mb_s),
            ratio(|r| r.fetch_mb_s),
            ratio(|r| r.cpu_s_gb),
        );
        println!(
            "{a} / {b}, median of {rounds} rounds (min–max): consume MB/s {:.2}x ({}), \
             fetch MB/s {:.2}x ({}), broker CPU per GB {:.2}x ({})",
            median(c.clone()),
            spread(&c),
            median(f.clone()),
            spread(&f),
            median(cpu.clone()),
            spread(&cpu)
        );
    }
}

/// A running multi-node cluster as the `--cluster` benchmark sees it.
struct ClusterSide {
    name: &'static str,
    boot: String,
    pids: Vec<u32>,
    /// Each node's data directory, to check that every replica holds the data.
    data_dirs: Vec<std::path::PathBuf>,
}

/// Waits until every node stores at least the produced payload of `topic` (RF 3 on 3 nodes:
/// every node is a replica of every partition): the numbers are only worth printing if the
/// cluster really replicated. Returns each node's bytes.
fn check_replicated(side: &ClusterSide, topic: &str, payload: u64) -> Vec<u64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let bytes: Vec<u64> = side
            .data_dirs
            .iter()
            .map(|d| common::segment_bytes(d, topic))
            .collect();
        if bytes.iter().all(|b| *b >= payload) {
            return bytes;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: {topic} not on every replica after 60 s: node bytes {bytes:?}, payload {payload}",
            side.name
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

impl ClusterSide {
    fn cpu_seconds(&self) -> f64 {
        self.pids.iter().map(|p| common::cpu_seconds(*p)).sum()
    }
    fn peak_rss_mib(&self) -> f64 {
        self.pids.iter().map(|p| common::peak_rss_mib(*p)).sum()
    }
}

/// One cluster's numbers in one `--cluster` round.
struct ClusterRow {
    round: usize,
    broker: &'static str,
    produce_mb_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU seconds of all the cluster's nodes per GB produced (each GB is stored 3 times).
    cpu_s_gb: f64,
    load: String,
}

fn cluster_round(side: &ClusterSide, round: usize, records: u64, partitions: i32) -> ClusterRow {
    let topic = format!("rf3-{round}");
    common::create_topic_rf(
        &side.boot,
        &topic,
        partitions,
        3,
        &[("min.insync.replicas", "2")],
    );
    let load = common::load_avg();
    eprintln!(
        "[{} round {round}] produce {records} records, RF 3 (load {load})",
        side.name
    );
    let cpu0 = side.cpu_seconds();
    let summary = produce(&side.boot, &topic, records);
    let cpu1 = side.cpu_seconds();
    eprintln!("[{} round {round}] {summary}", side.name);
    let stored = check_replicated(side, &topic, records * 1024);
    eprintln!(
        "[{} round {round}] segment bytes per node: {stored:?}",
        side.name
    );
    ClusterRow {
        round,
        broker: side.name,
        produce_mb_s: before(&summary, "MB/sec"),
        p50_ms: before(&summary, "ms 50th"),
        p99_ms: before(&summary, "ms 99th"),
        cpu_s_gb: (cpu1 - cpu0) / (records as f64 * 1024.0 / 1e9),
        load,
    }
}

/// `--cluster N`: ProducerPerformance, acks=all, into RF=3 topics (`min.insync.replicas=2`)
/// on N Apache Kafka nodes and on N kmirror nodes on this machine (both clusters running,
/// one loaded at a time, the order alternating each round). `KMIRROR_BENCH_KAFKA_ONLY=1`
/// runs the Kafka side alone.
fn main_cluster(n: usize, records: u64, partitions: i32, rounds: usize) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kafka_only = std::env::var_os("KMIRROR_BENCH_KAFKA_ONLY").is_some();
    let mut kafka = common::Kafka::start_cluster(n, "1g", &[("min.insync.replicas", "2")]);
    let mut sides = vec![ClusterSide {
        name: "Apache Kafka 4.1.1",
        boot: kafka
            .iter()
            .map(common::Kafka::bootstrap)
            .collect::<Vec<_>>()
            .join(","),
        pids: kafka.iter().map(common::Kafka::pid).collect(),
        data_dirs: kafka.iter().map(common::Kafka::data_dir).collect(),
    }];
    let kmirror = (!kafka_only).then(|| start_kmirror_cluster(n));
    if let Some(k) = &kmirror {
        sides.push(ClusterSide {
            name: "kmirror",
            boot: k.bootstrap(),
            pids: (1..=n).map(|i| k.node(i).pid()).collect(),
            data_dirs: (1..=n).map(|i| k.node(i).data_dir()).collect(),
        });
    }
    // Warm-up as long as a round: with 1/5 of it, the Kafka JVMs' CPU per GB still fell by
    // half from round 1 to round 3 (JIT).
    for side in &sides {
        common::create_topic_rf(&side.boot, "warmup", partitions, 3, &[]);
        eprintln!("[{}] warm-up: {records} records", side.name);
        produce(&side.boot, "warmup", records);
    }
    let mut rows = Vec::new();
    for round in 1..=rounds {
        for k in 0..sides.len() {
            let side = &sides[(k + round - 1) % sides.len()];
            rows.push(cluster_round(side, round, records, partitions));
        }
    }
    let rss: Vec<f64> = sides.iter().map(ClusterSide::peak_rss_mib).collect();
    common::Kafka::stop_all(&mut kafka);
    drop(kmirror);
    println!(
        "\n{records} records x 1024 B, {partitions} partitions, RF 3, min.insync.replicas=2, \
         acks=all, --throughput -1, {n} nodes per cluster on one machine, {rounds} rounds \
         (order alternating), {cores} cores\n"
    );
    println!("| round | cluster | produce MB/s | p50 ms | p99 ms | cluster CPU s/GB | load avg |");
    println!("|---:|---|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1} | {:.0} | {:.0} | {:.2} | {} |",
            r.round, r.broker, r.produce_mb_s, r.p50_ms, r.p99_ms, r.cpu_s_gb, r.load
        );
    }
    for (side, rss) in sides.iter().zip(&rss) {
        let mine: Vec<&ClusterRow> = rows.iter().filter(|r| r.broker == side.name).collect();
        let mb: Vec<f64> = mine.iter().map(|r| r.produce_mb_s).collect();
        println!(
            "{}: produce median {:.1} MB/s ({}), peak RSS of all nodes {rss:.0} MiB",
            side.name,
            median(mb.clone()),
            spread(&mb)
        );
    }
    if sides.len() == 2 {
        let of = |round: usize, b: &str| -> &ClusterRow {
            rows.iter()
                .find(|r| r.round == round && r.broker == b)
                .expect("row")
        };
        let ratio = |f: fn(&ClusterRow) -> f64| -> Vec<f64> {
            (1..=rounds)
                .map(|r| f(of(r, sides[1].name)) / f(of(r, sides[0].name)))
                .collect()
        };
        let (mb, p99, cpu) = (
            ratio(|r| r.produce_mb_s),
            ratio(|r| r.p99_ms),
            ratio(|r| r.cpu_s_gb),
        );
        println!(
            "\nkmirror / Kafka, {n} nodes, RF 3, median of {rounds} rounds (min–max): produce \
             {:.2}x ({}), p99 latency {:.2}x ({}), cluster CPU per GB {:.2}x ({})",
            median(mb.clone()),
            spread(&mb),
            median(p99.clone()),
            spread(&p99),
            median(cpu.clone()),
            spread(&cpu)
        );
    }
}

/// The kmirror side of `--cluster`: `n` nodes of `kmirror serve --quorum` on loopback
/// (the test harness's [`KmirrorCluster`], one core each as each Kafka JVM gets no pinning
/// either), returned once every node lists all `n` brokers.
fn start_kmirror_cluster(n: usize) -> KmirrorCluster {
    KmirrorCluster::start(n, ClusterOpts::default())
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--cluster") {
        let mut args = std::env::args().skip(2);
        let n: usize = args.next().map_or(3, |a| a.parse().expect("NODES"));
        let records: u64 = args.next().map_or(300_000, |a| a.parse().expect("RECORDS"));
        let partitions: i32 = args.next().map_or(6, |a| a.parse().expect("PARTITIONS"));
        let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
        main_cluster(n, records, partitions, rounds.max(1));
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("--consume") {
        let mut args = std::env::args().skip(2);
        let records: u64 = args.next().map_or(500_000, |a| a.parse().expect("RECORDS"));
        let partitions: i32 = args.next().map_or(6, |a| a.parse().expect("PARTITIONS"));
        let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
        main_consume(records, partitions, rounds.max(1));
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("--tls") {
        let mut args = std::env::args().skip(2);
        let records: u64 = args.next().map_or(100_000, |a| a.parse().expect("RECORDS"));
        let partitions: i32 = args.next().map_or(6, |a| a.parse().expect("PARTITIONS"));
        let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
        main_tls(records, partitions, rounds.max(1));
        return;
    }
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
