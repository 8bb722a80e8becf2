//! Issue 10 step 5: the Prometheus endpoint tells the truth about mirroring. Against a real
//! Apache Kafka 4.1.1 source and `kmirror serve --metrics`: after mirroring N records of a
//! 3-partition topic, the records and bytes counters of each partition equal what its log
//! holds (read back over Fetch), lag in offsets and in ms reach 0, the state gauge shows
//! MIRRORING and then PAUSED after `mirror pause`, the lag of a paused partition follows the
//! source, and every metric the Grafana dashboard queries is exposed.

use std::time::{Duration, Instant};

use kmirror_tests::helpers::{now_ms, start_kafka_and_kmirror};
use kmirror_tests::metrics::{dashboard_metric_names, scrape, Scrape};
use kmirror_tests::mirror::FAST;
use kmirror_tests::{mirror, proc, records, KafkaCluster, KmirrorNode, WireClient};

const TOPIC: &str = "metered";
const PARTITIONS: i32 = 3;

/// Produces batches of different sizes to every partition; returns records per partition.
fn produce(src: &str, round: usize) -> Vec<u64> {
    let mut counts = vec![0u64; PARTITIONS as usize];
    for p in 0..PARTITIONS {
        for b in 0..(3 + p as usize) {
            let n = 1 + (b * 7 + p as usize * 3 + round) % 20;
            let vals: Vec<Vec<u8>> = (0..n)
                .map(|i| format!("r{round}-p{p}-b{b}-{i}-{}", "x".repeat(i * 13)).into_bytes())
                .collect();
            let refs: Vec<&[u8]> = vals.iter().map(Vec::as_slice).collect();
            // A just-created topic may not have its leader yet (NOT_LEADER_OR_FOLLOWER):
            // retry until the leader takes it.
            proc::wait_for(Duration::from_secs(30), "produce to the source", || {
                let mut c = WireClient::connect_leader(src, TOPIC, p).ok()?;
                let (code, _) = c
                    .produce_raw(TOPIC, p, records::batch(&refs, now_ms()), -1)
                    .ok()?;
                if code != 0 {
                    std::thread::sleep(Duration::from_millis(200));
                }
                (code == 0).then_some(())
            });
            counts[p as usize] += n as u64;
        }
    }
    counts
}

/// (records, bytes) of one partition's log on `boot`, read back batch by batch.
fn log_contents(boot: &str, p: i32) -> (u64, u64) {
    let mut c = WireClient::connect_leader(boot, TOPIC, p).expect("connect");
    let (start, end) = c.log_bounds(TOPIC, p).expect("bounds");
    let (mut offset, mut recs, mut bytes) = (start, 0u64, 0u64);
    while offset < end {
        let data = c
            .fetch_raw(TOPIC, p, offset, 4 << 20, false)
            .expect("fetch");
        assert_eq!(data.error_code, 0, "fetch {TOPIC}-{p} at {offset}");
        let batches = records::split_batches(&data.records.unwrap_or_default());
        assert!(!batches.is_empty(), "no batch at {offset} below end {end}");
        for b in batches {
            recs += u64::from(u32::from_be_bytes(b.bytes[57..61].try_into().unwrap()));
            bytes += b.bytes.len() as u64;
            offset = b.last_offset + 1;
        }
    }
    (recs, bytes)
}

fn labels(p: i32) -> [(&'static str, String); 3] {
    [
        ("mirror", "dr".to_owned()),
        ("topic", TOPIC.to_owned()),
        ("partition", p.to_string()),
    ]
}

fn value(s: &Scrape, name: &str, p: i32, extra: &[(&str, &str)]) -> Option<f64> {
    let l = labels(p);
    let mut all: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.extend_from_slice(extra);
    s.value(name, &all)
}

/// Scrapes until `ok` holds for the scrape; panics with the last scrape after `timeout`.
fn wait_scrape(addr: &str, what: &str, timeout: Duration, ok: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + timeout;
    loop {
        let s = scrape(addr);
        if ok(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not seen within {timeout:?}; last scrape:\n{}",
            s.text
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn state_is(s: &Scrape, p: i32, state: &str) -> bool {
    value(s, "kmirror_mirror_partition_state", p, &[("state", state)]) == Some(1.0)
}

/// Prints the node's log tail when the test fails (the scrape answers come from it).
struct Tail(std::path::PathBuf);
impl Drop for Tail {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kmirror log tail:\n{}", proc::tail(&self.0, 40));
        }
    }
}

#[test]
fn metrics_count_mirrored_records_and_bytes_exactly_and_follow_lag_and_state() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let maddr = format!("127.0.0.1:{}", proc::free_port());
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder().args(&["--metrics", &maddr]).start()
    });
    let (src, dst) = (kafka.bootstrap(), node.addr());
    let log = node.log_path();
    let _tail = Tail(log);
    kafka.create_topic(TOPIC, PARTITIONS, &[]);
    let produced = produce(&src, 0);
    let n: u64 = produced.iter().sum();
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &[TOPIC]);
    let ends = mirror::wait_caught_up(
        &src,
        &dst,
        TOPIC,
        PARTITIONS,
        false,
        Duration::from_secs(90),
    );
    mirror::assert_log_equal(&src, &dst, TOPIC, &ends);

    // Counters equal the log, lag is 0 in offsets and ms, every partition MIRRORING.
    let logs: Vec<(u64, u64)> = (0..PARTITIONS).map(|p| log_contents(&dst, p)).collect();
    let s = wait_scrape(
        &maddr,
        "caught up, counters equal the log",
        Duration::from_secs(30),
        |s| {
            (0..PARTITIONS).all(|p| {
                value(s, "kmirror_mirror_partition_records_total", p, &[])
                    == Some(logs[p as usize].0 as f64)
                    && value(s, "kmirror_mirror_partition_lag_offsets", p, &[]) == Some(0.0)
                    && value(s, "kmirror_mirror_partition_lag_ms", p, &[]) == Some(0.0)
            })
        },
    );
    let mut total = 0.0;
    for p in 0..PARTITIONS {
        let (recs, bytes) = logs[p as usize];
        assert_eq!(
            recs, produced[p as usize],
            "records in the mirrored log of partition {p}"
        );
        let m = |name| value(&s, name, p, &[]).unwrap_or_else(|| panic!("{name} p{p}\n{}", s.text));
        assert_eq!(
            m("kmirror_mirror_partition_bytes_total"),
            bytes as f64,
            "bytes p{p}"
        );
        assert_eq!(
            m("kmirror_mirror_partition_records_total"),
            recs as f64,
            "records p{p}"
        );
        assert_eq!(
            m("kmirror_mirror_partition_log_end_offset"),
            ends[p as usize] as f64
        );
        assert_eq!(
            m("kmirror_mirror_partition_source_end_offset"),
            ends[p as usize] as f64
        );
        assert!(state_is(&s, p, "MIRRORING"), "p{p} MIRRORING:\n{}", s.text);
        assert!(!state_is(&s, p, "PAUSED"));
        assert_eq!(
            value(
                &s,
                "kmirror_mirror_partition_fetch_errors_total",
                p,
                &[("kind", "local")]
            ),
            Some(0.0)
        );
        total += m("kmirror_mirror_partition_records_total");
    }
    assert_eq!(total, n as f64, "records total over the partitions");
    assert_eq!(
        s.value("kmirror_mirrored_partitions", &[]),
        Some(PARTITIONS as f64)
    );
    assert_eq!(s.value("kmirror_up", &[]), Some(1.0));
    assert_eq!(
        s.value(
            "kmirror_mirror_sync_errors_total",
            &[("mirror", "dr"), ("kind", "topic_metadata")]
        ),
        Some(0.0)
    );

    // Every metric the dashboard queries is exposed.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/grafana/kmirror-dashboard.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("dashboard JSON"))
            .expect("dashboard is JSON");
    let names = dashboard_metric_names(&dash);
    assert!(names.len() >= 10, "dashboard queries {names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !s.has(n)).collect();
    assert!(
        missing.is_empty(),
        "dashboard metrics not exposed: {missing:?}\n{}",
        s.text
    );

    // Pause: the state gauge follows, and the lag follows the source while no fetcher runs.
    mirror::cli_ok(&dst, &["pause", "dr", "--topics", TOPIC]);
    wait_scrape(
        &maddr,
        "every partition PAUSED",
        Duration::from_secs(30),
        |s| (0..PARTITIONS).all(|p| state_is(s, p, "PAUSED") && !state_is(s, p, "MIRRORING")),
    );
    let more = produce(&src, 1);
    let s = wait_scrape(
        &maddr,
        "paused lag follows the source",
        Duration::from_secs(30),
        |s| {
            (0..PARTITIONS).all(|p| {
                value(s, "kmirror_mirror_partition_lag_offsets", p, &[])
                    == Some(more[p as usize] as f64)
            })
        },
    );
    for p in 0..PARTITIONS {
        let ms = value(&s, "kmirror_mirror_partition_lag_ms", p, &[]).expect("lag_ms while paused");
        assert!(ms > 0.0, "p{p}: lag_ms {ms} while records wait unmirrored");
        // Nothing was appended while paused.
        assert_eq!(
            value(&s, "kmirror_mirror_partition_records_total", p, &[]),
            Some(logs[p as usize].0 as f64)
        );
    }

    // Resume: the new records are counted exactly too.
    mirror::cli_ok(&dst, &["resume", "dr", "--topics", TOPIC]);
    let ends = mirror::wait_caught_up(
        &src,
        &dst,
        TOPIC,
        PARTITIONS,
        false,
        Duration::from_secs(90),
    );
    mirror::assert_log_equal(&src, &dst, TOPIC, &ends);
    let logs: Vec<(u64, u64)> = (0..PARTITIONS).map(|p| log_contents(&dst, p)).collect();
    wait_scrape(
        &maddr,
        "after resume, counters equal the log",
        Duration::from_secs(30),
        |s| {
            (0..PARTITIONS).all(|p| {
                state_is(s, p, "MIRRORING")
                    && value(s, "kmirror_mirror_partition_records_total", p, &[])
                        == Some(logs[p as usize].0 as f64)
                    && value(s, "kmirror_mirror_partition_bytes_total", p, &[])
                        == Some(logs[p as usize].1 as f64)
                    && value(s, "kmirror_mirror_partition_lag_offsets", p, &[]) == Some(0.0)
            })
        },
    );
    assert_eq!(
        logs.iter().map(|l| l.0).sum::<u64>(),
        n + more.iter().sum::<u64>()
    );
}
