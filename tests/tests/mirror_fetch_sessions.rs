//! Issue 10 step 2 against a real Apache Kafka 4.1.1 source: mirror fetchers are shared per
//! (core, source broker, mirror) and use KIP-227 incremental fetch sessions.
//!
//! - 200 partitions on 2 cores use a handful of source connections (not one per partition),
//!   are log-equal, and when caught up cost only a few Fetch requests per second.
//! - A session the source evicts (FETCH_SESSION_ID_NOT_FOUND on the next incremental fetch),
//!   a source without session slots (sessionless full fetches) and a source restart mid-stream
//!   lose nothing and duplicate nothing: log-equal at the end.
//! - A bulk backlog sharing a session with a live partition does not hold the live one back.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{BrokerId, FetchRequest};
use kmirror_tests::helpers::{now_ms, port_of, start_kafka_and_kmirror};
use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::mirror::{self, FAST};
use kmirror_tests::records;
use kmirror_tests::{proc, KafkaCluster, KmirrorNode, WireClient};

/// Established TCP connections of process `pid` to `port` (any address), from its socket
/// inodes in /proc/<pid>/fd and the kernel's tables in /proc/<pid>/net/tcp{,6}.
fn connections_to(pid: u32, port: u16) -> usize {
    let mut inodes = HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .flatten()
    {
        if let Ok(t) = std::fs::read_link(fd.path()) {
            let t = t.to_string_lossy().to_string();
            if let Some(n) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                inodes.insert(n.to_owned());
            }
        }
    }
    let mut n = 0;
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                continue;
            }
            let remote_port = f[2]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            // State 01 = ESTABLISHED.
            if f[3] == "01" && remote_port == Some(port) && inodes.contains(f[9]) {
                n += 1;
            }
        }
    }
    n
}

/// Data segments kmirror (`pid`) has sent on its connections to `port` (`ss -tinp`): with
/// small requests, one segment per request.
fn segments_sent(pid: u32, port: u16) -> u64 {
    let ran = proc::run(
        std::process::Command::new("ss").args([
            "-tinpH",
            "state",
            "established",
            "dport",
            &format!("= :{port}"),
        ]),
        Duration::from_secs(10),
    );
    let mut total = 0;
    let mut ours = false;
    for line in ran.stdout.lines() {
        if line.contains("users:(") {
            ours = line.contains(&format!("pid={pid},"));
            continue;
        }
        if ours {
            if let Some(v) = line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("data_segs_out:"))
            {
                total += v.parse::<u64>().unwrap_or(0);
            }
        }
    }
    total
}

/// [`produce`] retried while a new topic's leadership settles.
fn produce_retrying(c: &mut WireClient, topic: &str, partition: i32, tag: &str) {
    let mut last = String::new();
    for _ in 0..50 {
        match produce(c, topic, partition, tag) {
            Ok(()) => return,
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("produce to {topic}-{partition}: {last}");
}

fn produce(c: &mut WireClient, topic: &str, partition: i32, tag: &str) -> Result<(), String> {
    let values: Vec<Vec<u8>> = (0..5)
        .map(|i| format!("{topic}-{partition}-{tag}-{i}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    match c.produce_raw(topic, partition, records::batch(&refs, now_ms()), -1) {
        Ok((0, _)) => Ok(()),
        Ok((code, _)) => Err(format!("produce error {code}")),
        Err(e) => Err(e.to_string()),
    }
}

/// 40 topics x 5 partitions on `--cores 2`: every partition log-equal, and kmirror holds at
/// most cores x source brokers x mirrors fetch connections plus one admin connection per core
/// (plus the mirror's metadata sync) to the source, instead of one or more per partition.
/// Caught up, it sends a few Fetch requests per second in all, not a few per partition.
#[test]
fn two_hundred_partitions_share_a_few_source_connections_and_are_log_equal() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder().args(&["--cores", "2"]).start()
    });
    let src = kafka.bootstrap();
    let dst = node.addr();
    let topics: Vec<String> = (0..40).map(|i| format!("t{i:02}")).collect();
    let mut c = WireClient::connect(&src).expect("connect to Kafka");
    for t in &topics {
        kafka.create_topic(t, 5, &[]);
        for p in 0..5 {
            for round in 0..3 {
                produce_retrying(&mut c, t, p, &format!("r{round}"));
            }
        }
    }
    mirror::create(&dst, "dr", &src, FAST);
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    mirror::add_topics(&dst, "dr", &names);
    let started = Instant::now();
    for t in &topics {
        mirror::assert_mirrored(&src, &dst, t, 5, Duration::from_secs(180));
    }
    eprintln!("200 partitions caught up in {:?}", started.elapsed());

    let port = port_of(&src);
    let conns = connections_to(node.pid(), port);
    let (cores, brokers, mirrors) = (2, 1, 1);
    // + one admin connection per core, + one for the mirror's metadata/offset sync.
    let bound = cores * brokers * mirrors + cores + 1;
    eprintln!("kmirror connections to the source: {conns} (bound {bound})");
    assert!(
        conns <= bound,
        "{conns} connections to the source for 200 partitions (bound {bound})"
    );

    // Caught up and idle: a few long-polling Fetches per second per connection.
    std::thread::sleep(Duration::from_secs(3));
    let before = segments_sent(node.pid(), port);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let sent = segments_sent(node.pid(), port) - before;
    let per_s = sent as f64 / t0.elapsed().as_secs_f64();
    eprintln!("idle: {sent} requests to the source in 10 s ({per_s:.1}/s)");
    assert!(
        per_s < 30.0,
        "idle request rate {per_s:.1}/s for 200 partitions"
    );

    // Still mirroring: new records in every partition arrive.
    for t in &topics {
        for p in 0..5 {
            produce_retrying(&mut c, t, p, "late");
        }
    }
    for t in &topics {
        mirror::assert_mirrored(&src, &dst, t, 5, Duration::from_secs(120));
    }
}

/// Closes fetch session `id` on the source (KIP-227: that id with epoch -1), as a broker that
/// lost or evicted it would: its owner's next incremental fetch gets FETCH_SESSION_ID_NOT_FOUND.
fn close_session(src: &str, id: i32) {
    let mut c = WireClient::connect(src).expect("connect");
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_id(id)
        .with_session_epoch(-1);
    let resp = c.send(req).expect("Fetch");
    assert_eq!(resp.error_code, 0, "closing session {id}");
}

/// The id of the last "mirror fetch session opened" in kmirror's log.
fn last_session_id(node: &KmirrorNode) -> Option<i32> {
    let log = strip_ansi(&std::fs::read_to_string(node.log_path()).unwrap_or_default());
    log.lines()
        .rev()
        .find(|l| l.contains("mirror fetch session opened"))
        .and_then(|l| l.split("session=").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The log without terminal colour sequences (ESC [ ... m).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn log_count(node: &KmirrorNode, needle: &str) -> usize {
    std::fs::read_to_string(node.log_path())
        .unwrap_or_default()
        .matches(needle)
        .count()
}

/// Mid-stream, kmirror's fetch session disappears from the source (closed, as an eviction
/// would), so its next incremental fetch gets FETCH_SESSION_ID_NOT_FOUND and it falls back to
/// a full fetch; then the source is restarted (sessions and connections gone). Producing all
/// along, the end is log-equal: nothing lost, nothing duplicated.
#[test]
fn lost_session_and_source_restart_lose_and_duplicate_nothing() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let maddr = format!("127.0.0.1:{}", proc::free_port());
    let (mut kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder()
            .args(&["--cores", "1", "--metrics", &maddr])
            .start()
    });
    let src = kafka.bootstrap();
    let dst = node.addr();
    let topics = ["s0", "s1", "s2", "s3"];
    for t in topics {
        kafka.create_topic(t, 5, &[]);
    }
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &topics);
    let producer = Producer::start(&src, topics.to_vec());
    for t in topics {
        mirror::wait_caught_up(&src, &dst, t, 5, false, Duration::from_secs(120));
    }

    let sid = proc::wait_for(Duration::from_secs(30), "a fetch session", || {
        last_session_id(&node)
    });
    let before = log_count(&node, "FETCH_SESSION_ID_NOT_FOUND");
    close_session(&src, sid);
    proc::wait_for(
        Duration::from_secs(30),
        "a session reset in kmirror's log",
        || (log_count(&node, "FETCH_SESSION_ID_NOT_FOUND") > before).then_some(()),
    );
    proc::wait_for(Duration::from_secs(30), "a new fetch session", || {
        last_session_id(&node).filter(|id| *id != sid)
    });
    let evictions = kmirror_tests::metrics::scrape(&maddr)
        .value(
            "kmirror_mirror_fetch_session_resets_total",
            &[("mirror", "dr")],
        )
        .unwrap_or(0.0);
    assert_eq!(
        evictions, 1.0,
        "the eviction is counted once in the metrics"
    );
    std::thread::sleep(Duration::from_secs(2));

    // Restart the source mid-stream.
    let id = kafka.node_ids()[0];
    kafka.stop_node(id);
    std::thread::sleep(Duration::from_secs(2));
    kafka.start_node(id);
    std::thread::sleep(Duration::from_secs(5));

    let produced = producer.stop();
    eprintln!("produced {produced} batches");
    assert!(produced > 100, "the producer kept producing ({produced})");
    for t in topics {
        mirror::assert_mirrored(&src, &dst, t, 5, Duration::from_secs(120));
    }
    let rows = mirror::describe(&dst, Some("dr"));
    assert!(
        rows.iter().all(|r| r.state == "MIRRORING"),
        "every partition MIRRORING: {rows:?}"
    );
}

/// A source with no incremental fetch session slots answers every fetch sessionless (session
/// id 0): kmirror keeps sending full fetches and mirrors everything.
#[test]
fn a_source_without_session_slots_is_mirrored_with_full_fetches() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(
        || {
            KafkaCluster::start_with(KafkaOptions {
                props: vec![(
                    "max.incremental.fetch.session.cache.slots".into(),
                    "0".into(),
                )],
                ..KafkaOptions::default()
            })
        },
        || KmirrorNode::builder().args(&["--cores", "2"]).start(),
    );
    let src = kafka.bootstrap();
    let dst = node.addr();
    let topics = ["n0", "n1"];
    for t in topics {
        kafka.create_topic(t, 5, &[]);
    }
    mirror::create(&dst, "dr", &src, FAST);
    mirror::add_topics(&dst, "dr", &topics);
    let producer = Producer::start(&src, topics.to_vec());
    std::thread::sleep(Duration::from_secs(5));
    let produced = producer.stop();
    assert!(produced > 100, "the producer kept producing ({produced})");
    for t in topics {
        mirror::assert_mirrored(&src, &dst, t, 5, Duration::from_secs(120));
    }
    assert_eq!(
        log_count(&node, "mirror fetch session opened"),
        0,
        "Kafka with no slots gave a session"
    );
}

/// Produces small batches round-robin over 5 partitions of each topic in the background,
/// reconnecting after errors (a restarted source), with current timestamps.
struct Producer {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<u64>,
}

impl Producer {
    fn start(src: &str, topics: Vec<&'static str>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, src) = (stop.clone(), src.to_owned());
        let handle = std::thread::spawn(move || {
            let mut n = 0u64;
            let mut ok = 0u64;
            let mut c: Option<WireClient> = None;
            while !stop2.load(Ordering::Relaxed) {
                let Some(conn) = c.as_mut() else {
                    c = WireClient::connect(&src).ok();
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                let t = topics[(n % topics.len() as u64) as usize];
                let p = ((n / topics.len() as u64) % 5) as i32;
                match produce(conn, t, p, &format!("n{n}")) {
                    Ok(()) => ok += 1,
                    Err(_) => c = None,
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            ok
        });
        Producer { stop, handle }
    }

    /// Stops and returns how many batches were acknowledged.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("producer")
    }
}

/// Fairness inside one fetch session: on `--cores 1` a bulk backlog on 8 partitions and one
/// live partition share a single session, and each response is capped at 16 KiB, so the
/// backlog alone could fill every response for seconds. The live partition, written every
/// 20 ms, still keeps a small lag for the whole catch-up (the request order rotates and the
/// source moves partitions that returned data to the back), and everything is log-equal.
#[test]
fn a_bulk_backlog_does_not_hold_back_a_live_partition_in_the_same_session() {
    const BULK: i32 = 8;
    const BATCHES: usize = 200;
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder().args(&["--cores", "1"]).start()
    });
    let src = kafka.bootstrap();
    let dst = node.addr();
    kafka.create_topic("bulk", BULK, &[]);
    kafka.create_topic("live", 1, &[]);
    // 8 × 200 batches of 10 records × 1 KiB: about 16 MB, a thousand capped responses.
    let value = vec![b'b'; 1024];
    let values: Vec<&[u8]> = (0..10).map(|_| value.as_slice()).collect();
    for p in 0..BULK {
        let mut c = WireClient::connect_leader(&src, "bulk", p).expect("connect");
        for _ in 0..BATCHES {
            let (code, _) = c
                .produce_raw("bulk", p, records::batch(&values, now_ms()), -1)
                .expect("produce the backlog");
            assert_eq!(code, 0, "produce the backlog");
        }
    }
    let backlog = (BATCHES * 10) as i64 * BULK as i64;
    let mut sets = FAST.to_vec();
    sets.extend([
        ("mirror.fetch.max.bytes", "16384"),
        ("mirror.fetch.partition.max.bytes", "16384"),
        ("mirror.fetch.max.wait.ms", "100"),
    ]);
    mirror::create(&dst, "dr", &src, &sets);
    let stop = AtomicBool::new(false);
    let (worst, samples) = std::thread::scope(|s| {
        let live_src = src.clone();
        let stop_ref = &stop;
        s.spawn(move || {
            let mut c = WireClient::connect_leader(&live_src, "live", 0).expect("connect");
            let v = vec![b'l'; 100];
            while !stop_ref.load(Ordering::Relaxed) {
                let (code, _) = c
                    .produce_raw("live", 0, records::batch(&[&v], now_ms()), -1)
                    .expect("produce live");
                assert_eq!(code, 0);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        // The live topic first, so its fetcher is in the session before the backlog arrives.
        mirror::add_topics(&dst, "dr", &["live"]);
        mirror::wait_caught_up(&src, &dst, "live", 1, false, Duration::from_secs(60));
        mirror::add_topics(&dst, "dr", &["bulk"]);
        proc::wait_for(
            Duration::from_secs(60),
            "the backlog to start copying",
            || {
                (mirror::partition_count(&dst, "bulk") == BULK as usize
                    && mirror::end_offsets(&dst, "bulk", BULK).iter().sum::<i64>() > 0)
                    .then_some(())
            },
        );
        // Sample the live partition's lag (in records) until the backlog is copied.
        let (mut worst, mut samples) = (0i64, 0usize);
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let copied: i64 = mirror::end_offsets(&dst, "bulk", BULK).iter().sum();
            if copied >= backlog {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "backlog not copied in 180 s ({copied}/{backlog})"
            );
            let s_end = mirror::end_offsets(&src, "live", 1)[0];
            let d_end = mirror::end_offsets(&dst, "live", 1)[0];
            worst = worst.max(s_end - d_end);
            samples += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        (worst, samples)
    });
    eprintln!(
        "live partition's worst lag during the catch-up: {worst} records over {samples} samples"
    );
    assert!(
        samples >= 5,
        "the backlog copied too fast to observe ({samples} samples)"
    );
    // A record every 20 ms: 25 records is half a second. Held behind the whole backlog it
    // would fall behind by the length of the catch-up.
    assert!(
        worst <= 25,
        "the live partition fell {worst} records behind during the catch-up"
    );
    mirror::assert_mirrored(&src, &dst, "live", 1, Duration::from_secs(60));
    mirror::assert_mirrored(&src, &dst, "bulk", BULK, Duration::from_secs(60));
}
