//! Mirror lag benchmark (issue 10, item 6): records of 1 KiB are produced at a fixed rate into
//! an Apache Kafka 4.1.1 source, and each record's lag is the time it became visible on the
//! destination (its high watermark passed it) minus its CreateTime, on one clock. kmirror
//! (its own destination) and MirrorMaker 2 (connect-mirror 4.1.1 into a second Kafka) copy
//! the same load in alternating order over several rounds; each (round, copier) gets a fresh,
//! empty source topic so neither starts behind.
//!
//! The producer writes one batch at a time round-robin over the partitions and knows every
//! record's offset before sending it (it is the only writer), so the probe, which polls the
//! destination's end offsets with one ListOffsets request for all partitions every ~2 ms,
//! can give each newly visible record its lag. Resolution: one probe round (a few ms).
//! MM2 writes a fresh target topic in source order, so its target offsets are the source's.
//!
//! A second probe consumes from the destination (issue 21 item 3): one multi-partition Fetch
//! at a time with a 5 ms max wait, as a consumer tuned for latency would; each record's lag
//! is the time its batch arrived minus its CreateTime (the batch's base timestamp, which
//! the producer sets on the same clock). It shows what a consumer of the mirror sees; the
//! end-offset probe shows when the records became visible.
//!
//! The floor: each round also runs both probes on the source topic itself, with no copier
//! (the producer, the source's append and visibility, the probes and the machine), and
//! prints what kmirror's p50 and p99 add to it.
//!
//! `cargo run --release -p kmirror-benches --bin e2e_lag -- [RATES_MB=10,50] [ROUNDS=3]
//! [PARTITIONS=32] [SECONDS=20]` (scripts/bench-lag.sh builds kmirror and passes KMIRROR_BIN).

mod common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_tests::proc;
use kmirror_tests::{records, KmirrorNode, WireClient};

const RECORD: usize = 1024;
/// One produce per tick, to the next partition.
const TICK: Duration = Duration::from_millis(5);
const WARMUP: Duration = Duration::from_secs(5);

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// Records produced and not yet seen on the destination, per partition:
/// (first offset, count, CreateTime ms, counted in the window).
type Outstanding = Arc<Mutex<Vec<VecDeque<(i64, i64, i64, bool)>>>>;

/// Produces `batch`; a partition just created may not have its leader ready yet (errors 5, 6):
/// retried for up to 30 s. Returns the base offset.
fn send_batch(c: &mut WireClient, topic: &str, partition: i32, batch: bytes::Bytes) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, base) = c
            .produce_raw(topic, partition, batch.clone(), 1)
            .expect("produce");
        if code == 0 {
            return base;
        }
        assert!(
            matches!(code, 5 | 6) && Instant::now() < deadline,
            "produce to the source: error {code}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The load of one run.
#[derive(Clone, Copy)]
struct Load {
    mb_per_s: f64,
    /// Measured time, after the warm-up.
    seconds: Duration,
    /// Records with a CreateTime at or after this (the warm-up's end) are the measured ones.
    measure_from_ms: i64,
}

/// Writes `load` in 1 KiB records for the warm-up plus its measured time. Returns how many
/// records it wrote.
fn produce(
    source: &str,
    topic: &str,
    partitions: i32,
    load: &Load,
    outstanding: &Outstanding,
    next: &mut [i64],
) -> u64 {
    let Load {
        mb_per_s,
        seconds,
        measure_from_ms,
    } = *load;
    let per_batch = ((mb_per_s * 1e6 * TICK.as_secs_f64()) / RECORD as f64).round() as usize;
    let per_batch = per_batch.max(1);
    let value = vec![b'l'; RECORD];
    let values: Vec<&[u8]> = (0..per_batch).map(|_| value.as_slice()).collect();
    let mut conns: Vec<WireClient> = (0..partitions)
        .map(|p| WireClient::connect_leader(source, topic, p).expect("source leader"))
        .collect();
    let t0 = Instant::now();
    let mut written = 0u64;
    let mut tick = 0u64;
    while t0.elapsed() < WARMUP + seconds {
        let due = t0 + TICK * tick as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let p = (tick % partitions as u64) as usize;
        tick += 1;
        let ts = now_ms();
        // The same cut as the consumer probe's (by CreateTime), so both count one set.
        let measured = ts >= measure_from_ms;
        // Registered before the send: the copier may show it before our ack arrives.
        outstanding.lock().expect("outstanding")[p].push_back((
            next[p],
            per_batch as i64,
            ts,
            measured,
        ));
        let base = send_batch(&mut conns[p], topic, p as i32, records::batch(&values, ts));
        assert_eq!(base, next[p], "we are the only writer");
        next[p] += per_batch as i64;
        written += per_batch as u64;
    }
    written
}

/// Polls `dest`'s end offsets of `topic` until `stop`; each newly visible record's lag goes to
/// `hist` if it was produced in the measured window.
fn probe(
    dest: &str,
    topic: &str,
    partitions: i32,
    outstanding: &Outstanding,
    stop: &AtomicBool,
    hist: &mut Histogram<u64>,
) {
    let mut c = WireClient::connect(dest).expect("connect destination");
    let req = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(
                (0..partitions)
                    .map(|p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_timestamp(-1)
                    })
                    .collect(),
            )]);
    while !stop.load(Ordering::Relaxed) {
        let Ok(resp) = c.send_at(req.clone(), 4) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let seen = now_ms();
        let mut out = outstanding.lock().expect("outstanding");
        for t in &resp.topics {
            for p in &t.partitions {
                let q = &mut out[p.partition_index as usize];
                while let Some(&(first, count, ts, measured)) = q.front() {
                    if first >= p.offset {
                        break;
                    }
                    let visible = (p.offset - first).min(count);
                    if measured {
                        hist.record_n((seen - ts).max(0) as u64, visible as u64)
                            .expect("record");
                    }
                    if visible == count {
                        q.pop_front();
                    } else {
                        q[0] = (first + visible, count - visible, ts, measured);
                        break;
                    }
                }
            }
        }
        drop(out);
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Max wait of the consumer probe's Fetch.
const CONSUMER_WAIT_MS: i32 = 5;

/// Consumes every partition of `topic` on `dest` from `from` (one Fetch of all partitions at
/// a time) until `stop` is set and a Fetch brings nothing more; each record whose CreateTime
/// is at or after `measure_from_ms` goes to `hist` with lag = arrival - CreateTime.
fn consume_probe(
    dest: &str,
    topic: &str,
    from: &[i64],
    measure_from_ms: i64,
    stop: &AtomicBool,
    hist: &mut Histogram<u64>,
) {
    let mut c = WireClient::connect(dest).expect("connect destination");
    let topic_id = c.partition_info(topic, 0).expect("topic id").topic_id;
    let mut offsets = from.to_vec();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(CONSUMER_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(50 << 20)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_topic_id(topic_id)
                .with_partitions(
                    offsets
                        .iter()
                        .enumerate()
                        .map(|(p, &o)| {
                            FetchPartition::default()
                                .with_partition(p as i32)
                                .with_current_leader_epoch(-1)
                                .with_fetch_offset(o)
                                .with_partition_max_bytes(1 << 20)
                        })
                        .collect(),
                )]);
        let Ok(resp) = c.send_at(req, 13) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let arrived = now_ms();
        let mut got = 0usize;
        for t in &resp.responses {
            for p in &t.partitions {
                let Some(records) = p.records.as_ref() else {
                    continue;
                };
                let mut pos = 0usize;
                // Whole batches: base offset (0), length (8), last offset delta (23),
                // base timestamp (27; the records' timestamp deltas are 0).
                while let Some(b) = records.get(pos..).filter(|b| b.len() >= 61) {
                    let len = i32::from_be_bytes(b[8..12].try_into().expect("4")) as usize;
                    if b.len() < 12 + len {
                        break;
                    }
                    let base = i64::from_be_bytes(b[0..8].try_into().expect("8"));
                    let delta = i32::from_be_bytes(b[23..27].try_into().expect("4"));
                    let ts = i64::from_be_bytes(b[27..35].try_into().expect("8"));
                    let next = base + i64::from(delta) + 1;
                    let o = &mut offsets[p.partition_index as usize];
                    if next > *o {
                        let n = next - base.max(*o);
                        if ts >= measure_from_ms {
                            hist.record_n((arrived - ts).max(0) as u64, n as u64)
                                .expect("record");
                        }
                        *o = next;
                        got += 1;
                    }
                    pos += 12 + len;
                }
            }
        }
        if stopping && got == 0 {
            return;
        }
    }
}

/// One copier's run at each rate: produce, both probes; per rate the end-offset probe's and
/// the consumer probe's histograms.
fn measure(
    source: &str,
    src_topic: &str,
    dest: &str,
    dest_topic: &str,
    partitions: i32,
    rates: &[f64],
    seconds: Duration,
) -> Vec<(Histogram<u64>, Histogram<u64>)> {
    // Partition 0 holds the start record of [`wait_flowing`].
    let mut next = vec![0i64; partitions as usize];
    next[0] = 1;
    rates
        .iter()
        .map(|&rate| {
            let outstanding: Outstanding =
                Arc::new(Mutex::new(vec![VecDeque::new(); partitions as usize]));
            let stop = AtomicBool::new(false);
            let stop_consumer = AtomicBool::new(false);
            let from = next.clone();
            let measure_from_ms = now_ms() + WARMUP.as_millis() as i64;
            let hists = std::thread::scope(|s| {
                let probe_thread = s.spawn(|| {
                    let mut h = Histogram::<u64>::new_with_bounds(1, 600_000, 3).expect("hist");
                    probe(dest, dest_topic, partitions, &outstanding, &stop, &mut h);
                    h
                });
                let consumer_thread = s.spawn(|| {
                    let mut h = Histogram::<u64>::new_with_bounds(1, 600_000, 3).expect("hist");
                    consume_probe(
                        dest,
                        dest_topic,
                        &from,
                        measure_from_ms,
                        &stop_consumer,
                        &mut h,
                    );
                    h
                });
                let t0 = Instant::now();
                let load = Load {
                    mb_per_s: rate,
                    seconds,
                    measure_from_ms,
                };
                let written = produce(
                    source,
                    src_topic,
                    partitions,
                    &load,
                    &outstanding,
                    &mut next,
                );
                eprintln!(
                    "  {rate} MB/s asked, {:.1} MB/s produced",
                    written as f64 * RECORD as f64 / 1e6 / t0.elapsed().as_secs_f64()
                );
                // Let the tail arrive (or give up after 60 s: the histogram still counts it).
                let deadline = Instant::now() + Duration::from_secs(60);
                while Instant::now() < deadline
                    && outstanding
                        .lock()
                        .expect("outstanding")
                        .iter()
                        .any(|q| !q.is_empty())
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                stop.store(true, Ordering::Relaxed);
                stop_consumer.store(true, Ordering::Relaxed);
                (
                    probe_thread.join().expect("probe"),
                    consumer_thread.join().expect("consumer probe"),
                )
            });
            let left: usize = outstanding
                .lock()
                .expect("outstanding")
                .iter()
                .map(|q| q.len())
                .sum();
            assert_eq!(left, 0, "batches never became visible on the destination");
            hists
        })
        .collect()
}

/// Waits until `dest` shows the records the source has (the copier is running).
fn wait_flowing(source: &str, topic: &str, dest: &str, dest_topic: &str) {
    let mut c = WireClient::connect_leader(source, topic, 0).expect("source");
    send_batch(&mut c, topic, 0, records::batch(&[b"start"], now_ms()));
    proc::wait_for(Duration::from_secs(180), "the copier to deliver", || {
        let mut d = WireClient::connect(dest).ok()?;
        let (_, end) = d.log_bounds(dest_topic, 0).ok()?;
        (end >= 1).then_some(())
    });
}

fn mm2(
    source: &str,
    topic: &str,
    partitions: i32,
    rates: &[f64],
    secs: Duration,
) -> Vec<(Histogram<u64>, Histogram<u64>)> {
    let mut target = common::Kafka::start("1g", &[]);
    // MM2's defaults except what a single-node target needs; tasks.max = partitions / 8.
    let props = common::mm2_properties(
        source,
        &target.bootstrap(),
        topic,
        (partitions / 8).max(1) as u32,
        &[],
    );
    let mut mm2 = common::Mm2::spawn(&props);
    let tboot = target.bootstrap();
    let remote = format!("source.{topic}");
    wait_flowing(source, topic, &tboot, &remote);
    let hists = measure(source, topic, &tboot, &remote, partitions, rates, secs);
    mm2.stop();
    target.stop();
    hists
}

fn kmirror(
    source: &str,
    topic: &str,
    partitions: i32,
    rates: &[f64],
    secs: Duration,
) -> Vec<(Histogram<u64>, Histogram<u64>)> {
    let mut node = KmirrorNode::start();
    let addr = node.addr();
    common::kmirror_mirror(&addr, "lag", source, &["--topics", topic]).expect("kmirror mirror");
    wait_flowing(source, topic, &addr, topic);
    let hists = measure(source, topic, &addr, topic, partitions, rates, secs);
    node.stop();
    hists
}

/// The floor (issue 21 item 3): the same probes on the source topic itself, no copier. What
/// they measure there (the producer's send, the source's append and visibility, the probes'
/// own polling and the machine's scheduling) is in every copier's lag too; a copier's own
/// share is its lag above this.
fn source_itself(
    source: &str,
    topic: &str,
    partitions: i32,
    rates: &[f64],
    secs: Duration,
) -> Vec<(Histogram<u64>, Histogram<u64>)> {
    wait_flowing(source, topic, source, topic);
    measure(source, topic, source, topic, partitions, rates, secs)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rates: Vec<f64> = args
        .next()
        .unwrap_or_else(|| "10,50".into())
        .split(',')
        .map(|r| r.parse().expect("RATES_MB"))
        .collect();
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
    let partitions: i32 = args.next().map_or(32, |a| a.parse().expect("PARTITIONS"));
    let secs = Duration::from_secs(args.next().map_or(20, |a| a.parse().expect("SECONDS")));
    eprintln!("kmirror binary: {}", common::kmirror_bin().display());
    let source = common::Kafka::start("1g", &[]);
    let boot = source.bootstrap();

    // results[copier][rate] = per round, (end-offset probe, consumer probe) histograms.
    let mut results: Results = vec![vec![Vec::new(); rates.len()]; COPIERS.len()];
    for round in 0..rounds {
        let mut order = [0usize, 1, 2];
        order.rotate_left(round % 3);
        for who in order {
            let topic = format!("lag-{round}-{who}");
            common::create_topic(&boot, &topic, partitions, &[]);
            eprintln!(
                "round {round}: {} (load {})",
                COPIERS[who],
                common::load_avg()
            );
            let hists = match who {
                0 => kmirror(&boot, &topic, partitions, &rates, secs),
                1 => mm2(&boot, &topic, partitions, &rates, secs),
                _ => source_itself(&boot, &topic, partitions, &rates, secs),
            };
            for (i, h) in hists.into_iter().enumerate() {
                results[who][i].push(h);
            }
        }
    }

    println!(
        "\nLag = destination-visible time - CreateTime (end-offset probe) and arrival at a \
         consumer of the destination - CreateTime (consumer probe, Fetch max wait \
         {CONSUMER_WAIT_MS} ms), 1 KiB records, {partitions} partitions, {} s measured per run \
         after {} s warm-up, {rounds} rounds in alternating order\n",
        secs.as_secs(),
        WARMUP.as_secs()
    );
    println!(
        "| rate | copier | round | records | p50 ms | p99 ms | p99.9 ms | max ms | consumer \
         records | consumer p50 ms | consumer p99 ms | consumer p99.9 ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, rate) in rates.iter().enumerate() {
        for (who, name) in COPIERS.iter().enumerate() {
            for (round, (h, c)) in results[who][i].iter().enumerate() {
                println!(
                    "| {rate} MB/s | {name} | {round} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    h.len(),
                    h.value_at_quantile(0.5),
                    h.value_at_quantile(0.99),
                    h.value_at_quantile(0.999),
                    h.max(),
                    c.len(),
                    c.value_at_quantile(0.5),
                    c.value_at_quantile(0.99),
                    c.value_at_quantile(0.999),
                );
            }
        }
        lag_chart(*rate, &results, i);
        for (probe, pick) in [("end-offset probe", 0usize), ("consumer probe", 1)] {
            let p99 = |x: &(Histogram<u64>, Histogram<u64>)| {
                [&x.0, &x.1][pick].value_at_quantile(0.99) as f64
            };
            let mut ratios: Vec<f64> = results[0][i]
                .iter()
                .zip(&results[1][i])
                .map(|(k, m)| p99(k) / p99(m).max(1.0))
                .collect();
            ratios.sort_by(f64::total_cmp);
            if !ratios.is_empty() {
                println!(
                    "\n{rate} MB/s, {probe}: kmirror p99 / MM2 p99, median {:.3}x (min {:.3}, max {:.3})",
                    ratios[ratios.len() / 2],
                    ratios[0],
                    ratios[ratios.len() - 1]
                );
            }
            // What kmirror adds to the floor, per round (same round, same machine state).
            let at = |x: &(Histogram<u64>, Histogram<u64>), q: f64| {
                [&x.0, &x.1][pick].value_at_quantile(q) as f64
            };
            for (q, label) in [(0.5, "p50"), (0.99, "p99")] {
                let added: Vec<f64> = results[0][i]
                    .iter()
                    .zip(&results[2][i])
                    .map(|(k, f)| at(k, q) - at(f, q))
                    .collect();
                if let Some((m, lo, hi)) = common::median_spread(&added) {
                    println!(
                        "{rate} MB/s, {probe}: kmirror {label} - the source's own {label}, \
                         median {m:.0} ms (min {lo:.0}, max {hi:.0})"
                    );
                }
            }
        }
        println!();
    }
}

const COPIERS: [&str; 3] = ["kmirror", "MirrorMaker 2", "source itself (no copy)"];

/// `results[copier][rate][round]` = (end-offset probe, consumer probe) histograms.
type Results = Vec<Vec<Vec<(Histogram<u64>, Histogram<u64>)>>>;

/// The lag CDF at one rate: a line per copier, probe and round (kmirror, MM2 and the
/// source's own floor in their colors; the consumer probe in a lighter shade).
fn lag_chart(rate: f64, results: &Results, i: usize) {
    use kmirror_benches::charts::{cdf, Series};
    let mut series = Vec::new();
    for (who, name) in COPIERS.iter().enumerate() {
        for (round, hs) in results[who][i].iter().enumerate() {
            for (probe, h) in [("visible", &hs.0), ("consumed", &hs.1)] {
                if h.is_empty() {
                    continue;
                }
                // Dense near the tail, where the copiers differ.
                let qs = (0..=100)
                    .map(|k| f64::from(k) / 100.0)
                    .chain((1..=9).map(|k| 0.99 + f64::from(k) / 1000.0))
                    .chain([0.9995, 1.0]);
                let mut points: Vec<(f64, f64)> =
                    qs.map(|q| (h.value_at_quantile(q) as f64, q)).collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
                series.push(Series {
                    label: format!("{name}, {probe} (round {round})"),
                    color: if probe == "visible" { who } else { who + 3 },
                    points,
                });
            }
        }
    }
    cdf(
        &format!("mirror-lag-cdf-{rate}mbps.svg"),
        &format!("Mirror lag at {rate} MB/s: share of records visible / consumed within x ms"),
        "lag ms after CreateTime, log scale",
        &series,
    );
}
