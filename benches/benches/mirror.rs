//! Mirror-path micro-benchmark (issue 21 item 2): what a mirror does with a Fetch response
//! above the log, as a number.
//!
//! - `fetch_response_to_log`: a recorded Fetch response (v16, [`PARTITIONS`] partitions of
//!   one topic, [`PER_PARTITION`] bytes of batches each) is decoded as the fetch-session loop
//!   decodes it (kafka-protocol over the frame's `Bytes`, records as slices), each partition
//!   becomes a `FetchOutcome` and goes through its own `PartitionFetcher::step` (the batch
//!   walk, the epoch check, the append, the status) into a `Log` per partition;
//! - `log_append_mirror_only`: the same bytes (each partition's records, sliced from the same
//!   recorded frame before the clock starts), per partition in one call, through
//!   `Log::append_mirror`.
//!
//! Source batches of 1 KiB, 16 KiB and 512 KiB (1 KiB records). Throughput is in decimal
//! GB/s; batches/s is that times 1e9 over the batch size (each case prints its batch count).
//! The partition's owning core is the bench thread: the engine's `with_partition` hop (inline
//! on the owning core) and the socket read are not in it. After the criterion runs, paired
//! rounds (the two sides alternating which goes first) print the median ratio of the two
//! times with its quartiles: the overhead above the log.
//!
//! Run: `cargo bench -p kmirror-benches --bench mirror`

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::FetchResponse;
use kafka_protocol::protocol::{Decodable, Encodable};
use kmirror_log::Log;
use kmirror_mirror::{
    EpochEnd, FetchEvent, FetchObserver, FetchOutcome, FetcherConfig, LocalError, LocalPartition,
    PartitionAnswer, PartitionFetcher, Source, SourceError, SourceLeader, Step,
};
use kmirror_types::{LeaderEpoch, Offset, TopicPartition};
use uuid::Uuid;

const PARTITIONS: i32 = 8;
/// Bytes of batches per partition in the recorded response (32 MiB in all).
const PER_PARTITION: usize = 4 << 20;
const FETCH_VERSION: i16 = 16;
const EPOCH: i32 = 3;
const TOPIC: &str = "bench";
const TOPIC_ID: Uuid = Uuid::from_u128(0x006b_6d69_7272_6f72);

/// Batches of 1 KiB records, about `batch_bytes` each, from offset 0, PER_PARTITION in all,
/// as one buffer (a partition's records in a Fetch response), and how many.
fn partition_batches(batch_bytes: usize) -> (Bytes, usize) {
    let batches = kmirror_benches::record_batches(batch_bytes, PER_PARTITION, EPOCH);
    (batches.concat().into(), batches.len())
}

/// The recorded response frame body (no header): every partition holds `batches`.
fn recorded_response(topic_id: Uuid, batches: &Bytes) -> Bytes {
    let end = {
        let mut last = 0i64;
        for (h, _, _) in kmirror_log::batch::BatchIter::headers(batches).map_while(Result::ok) {
            last = h.next_offset();
        }
        last
    };
    let resp = FetchResponse::default()
        .with_session_id(7)
        .with_responses(vec![FetchableTopicResponse::default()
            .with_topic_id(topic_id)
            .with_partitions(
                (0..PARTITIONS)
                    .map(|p| {
                        PartitionData::default()
                            .with_partition_index(p)
                            .with_high_watermark(end)
                            .with_last_stable_offset(end)
                            .with_log_start_offset(0)
                            .with_records(Some(batches.clone()))
                    })
                    .collect(),
            )]);
    let mut buf = BytesMut::new();
    resp.encode(&mut buf, FETCH_VERSION).expect("encode");
    buf.freeze()
}

/// The destination partition: a `Log` on this thread (the owning core).
struct LocalLog {
    log: Log,
    epoch: LeaderEpoch,
}

impl LocalPartition for LocalLog {
    async fn log_start_offset(&self) -> Result<Offset, LocalError> {
        Ok(self.log.log_start_offset())
    }
    async fn log_end_offset(&self) -> Result<Offset, LocalError> {
        Ok(self.log.log_end_offset())
    }
    async fn leader_epoch(&self) -> Result<LeaderEpoch, LocalError> {
        Ok(self.epoch)
    }
    async fn bump_leader_epoch_to(&mut self, epoch: LeaderEpoch) -> Result<(), LocalError> {
        self.epoch = epoch;
        Ok(())
    }
    async fn append_mirror(&mut self, batches: Bytes) -> Result<Offset, LocalError> {
        let info = self.log.append_mirror(batches)?;
        self.log
            .set_high_watermark(Offset(info.last_offset.get() + 1));
        Ok(info.last_offset)
    }
    async fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LocalError> {
        Ok(self.log.truncate_fully_and_start_at(offset)?)
    }
    async fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<EpochEnd> {
        self.log
            .end_offset_for_epoch(epoch)
            .map(|(epoch, end_offset)| EpochEnd { epoch, end_offset })
    }
    async fn truncate_to(&mut self, offset: Offset) -> Result<(), LocalError> {
        Ok(self.log.truncate_to(offset)?)
    }
}

/// A source that answers each fetch with the outcome placed in it (the recorded response's
/// partition); it is never asked anything else on this path.
struct Recorded {
    leader: SourceLeader,
    next: Option<FetchOutcome>,
}

impl Source for Recorded {
    async fn leader(&mut self, _: &str, _: i32) -> Result<SourceLeader, SourceError> {
        Ok(self.leader.clone())
    }
    async fn fetch(
        &mut self,
        _: &SourceLeader,
        _: &kmirror_mirror::client::build::FetchPart,
        _: &FetcherConfig,
    ) -> Result<FetchOutcome, SourceError> {
        self.next
            .take()
            .ok_or_else(|| SourceError::Other("no recorded answer".into()))
    }
    async fn list_offset(
        &mut self,
        _: &SourceLeader,
        _: &str,
        _: i32,
        _: LeaderEpoch,
        _: i64,
    ) -> Result<PartitionAnswer<Offset>, SourceError> {
        Err(SourceError::Other("not on the catch-up path".into()))
    }
    async fn last_mirrored_epoch(
        &mut self,
        _: &str,
        _: &str,
        _: i32,
    ) -> Result<Option<LeaderEpoch>, SourceError> {
        Ok(None)
    }
    async fn end_offset_for_epoch(
        &mut self,
        _: &SourceLeader,
        _: &str,
        _: i32,
        _: LeaderEpoch,
        _: LeaderEpoch,
    ) -> Result<PartitionAnswer<Option<EpochEnd>>, SourceError> {
        Ok(Ok(None))
    }
    async fn sleep(&mut self, _: Duration) {}
    fn now_ms(&self) -> i64 {
        1_700_000_000_000
    }
}

struct Quiet;

impl FetchObserver for Quiet {
    fn on_event(&mut self, _: &TopicPartition, _: FetchEvent) {}
}

/// Fresh logs (and fetchers) for one measured pass; the directory lives as long as they do.
struct Destination {
    _dir: tempfile::TempDir,
    parts: Vec<(PartitionFetcher, LocalLog)>,
    source: Recorded,
}

fn destination(topic_id: Uuid) -> Destination {
    let dir = tempfile::tempdir().expect("temp dir");
    let parts = (0..PARTITIONS)
        .map(|p| {
            let tp = TopicPartition {
                topic: TOPIC.into(),
                partition: p,
            };
            let log = Log::open(
                &dir.path().join(p.to_string()),
                kmirror_benches::bench_log_config(),
            )
            .expect("open log");
            (
                PartitionFetcher::new(tp, topic_id, FetcherConfig::default()),
                LocalLog {
                    log,
                    epoch: LeaderEpoch(0),
                },
            )
        })
        .collect();
    Destination {
        _dir: dir,
        parts,
        source: Recorded {
            leader: SourceLeader {
                broker_id: 1,
                addr: "recorded:9092".into(),
                leader_epoch: LeaderEpoch(EPOCH),
                topic_id,
            },
            next: None,
        },
    }
}

/// The mirror path: decode the response, step each partition's fetcher on its answer.
fn mirror_pass(d: &mut Destination, frame: &Bytes) {
    let mut buf = frame.clone();
    let resp = FetchResponse::decode(&mut buf, FETCH_VERSION).expect("decode");
    let mut observer = Quiet;
    for t in &resp.responses {
        for p in &t.partitions {
            let (fetcher, local) = &mut d.parts[p.partition_index as usize];
            d.source.next = Some(FetchOutcome::from_wire(p));
            let step =
                futures_lite::future::block_on(fetcher.step(&mut d.source, local, &mut observer));
            assert!(matches!(step, Step::Appended { .. }), "{step:?}");
        }
    }
}

/// Each partition's records as slices of the recorded frame (decoded before the clock
/// starts), so the log-only side reads the very bytes the mirror path reads: the same
/// 32 MiB, not one partition's 4 MiB eight times from the cache.
fn frame_records(frame: &Bytes) -> Vec<Bytes> {
    let resp = FetchResponse::decode(&mut frame.clone(), FETCH_VERSION).expect("decode");
    resp.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.clone().expect("records"))
        .collect()
}

/// The log alone: each partition's batches in one append.
fn log_pass(d: &mut Destination, records: &[Bytes]) {
    for ((_, local), batches) in d.parts.iter_mut().zip(records) {
        local.log.append_mirror(batches.clone()).expect("append");
    }
}

const CASES: [(&str, usize); 3] = [
    ("1KiB", 1 << 10),
    ("16KiB", 16 << 10),
    ("512KiB", 512 << 10),
];

fn bench_mirror_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("mirror_path");
    g.sample_size(20);
    g.warm_up_time(Duration::from_secs(3));
    g.measurement_time(Duration::from_secs(10));
    for (label, batch_bytes) in CASES {
        let (batches, n) = partition_batches(batch_bytes);
        let frame = recorded_response(TOPIC_ID, &batches);
        let records = frame_records(&frame);
        println!(
            "{label} batches: {} per iteration ({PARTITIONS} partitions x {n}), {} bytes",
            n * PARTITIONS as usize,
            batches.len() * PARTITIONS as usize
        );
        g.throughput(Throughput::BytesDecimal(
            (batches.len() * PARTITIONS as usize) as u64,
        ));
        g.bench_function(BenchmarkId::new("fetch_response_to_log", label), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let mut d = destination(TOPIC_ID);
                    let t = Instant::now();
                    mirror_pass(&mut d, &frame);
                    spent += t.elapsed();
                }
                spent
            })
        });
        g.bench_function(BenchmarkId::new("log_append_mirror_only", label), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let mut d = destination(TOPIC_ID);
                    let t = Instant::now();
                    log_pass(&mut d, &records);
                    spent += t.elapsed();
                }
                spent
            })
        });
    }
    g.finish();
}

/// Paired rounds: mirror path time over log-only time, alternating which side goes first.
fn paired_ratios() {
    for (label, batch_bytes) in CASES {
        let (batches, _) = partition_batches(batch_bytes);
        let frame = recorded_response(TOPIC_ID, &batches);
        let records = frame_records(&frame);
        let mut ratios = Vec::new();
        for round in 0..26 {
            let timed = |mirror: bool| {
                let mut d = destination(TOPIC_ID);
                let t = Instant::now();
                if mirror {
                    mirror_pass(&mut d, &frame);
                } else {
                    log_pass(&mut d, &records);
                }
                t.elapsed().as_secs_f64()
            };
            let (m, l) = if round % 2 == 0 {
                let m = timed(true);
                (m, timed(false))
            } else {
                let l = timed(false);
                (timed(true), l)
            };
            // Round 0 warms the page cache and allocator.
            if round > 0 {
                ratios.push(m / l);
            }
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "paired ratio (mirror path time / log append time), {label} batches: median {:.2} \
             (quartiles {:.2} .. {:.2}, 25 pairs)",
            ratios[12], ratios[6], ratios[18]
        );
    }
}

criterion_group!(benches, bench_mirror_path);

fn main() {
    benches();
    paired_ratios();
    Criterion::default().configure_from_args().final_summary();
}
