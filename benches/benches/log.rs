//! Log micro-benchmarks: mirror-path append and read, each beside a plain write(2)/read(2)
//! loop moving the same bytes through the page cache (no fsync on either side).
//!
//! Run: `cargo bench -p kmirror-benches --bench log`

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use kmirror_log::batch::BatchIter;
use kmirror_log::{Log, Offset};

/// Bytes moved per measured iteration.
const RUN_BYTES: usize = 32 << 20;
/// Batches of 1 KiB records, `batch_bytes` each (approximately), with consecutive offsets,
/// totalling RUN_BYTES.
fn make_batches(batch_bytes: usize) -> Vec<Bytes> {
    kmirror_benches::record_batches(batch_bytes, RUN_BYTES, 3)
}

fn total_len(batches: &[Bytes]) -> u64 {
    batches.iter().map(|b| b.len() as u64).sum()
}

fn bench_append(c: &mut Criterion) {
    let mut g = c.benchmark_group("log_append");
    g.sample_size(40);
    g.warm_up_time(Duration::from_secs(3));
    g.measurement_time(Duration::from_secs(10));
    for (label, batch_bytes) in [("16KiB", 16 << 10), ("1MiB", 1 << 20)] {
        let batches = make_batches(batch_bytes);
        // The first batch is written before the clock starts on both sides: in the log it
        // opens leader epoch 3, whose checkpoint is fsynced (rare in steady state).
        g.throughput(Throughput::Bytes(total_len(&batches[1..])));
        g.bench_with_input(
            BenchmarkId::new("write2_loop", label),
            &batches,
            |b, batches| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let dir = tempfile::tempdir().unwrap();
                        let mut f = OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(dir.path().join("plain.log"))
                            .unwrap();
                        let t = Instant::now();
                        for batch in batches {
                            f.write_all(batch).unwrap();
                        }
                        spent += t.elapsed();
                    }
                    spent
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("log_mirror_append", label),
            &batches,
            |b, batches| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let dir = tempfile::tempdir().unwrap();
                        let mut log =
                            Log::open(dir.path(), kmirror_benches::bench_log_config()).unwrap();
                        let t = Instant::now();
                        for batch in batches {
                            log.append_mirror(batch.clone()).unwrap();
                        }
                        spent += t.elapsed();
                    }
                    spent
                })
            },
        );
    }
    g.finish();
}

fn bench_read(c: &mut Criterion) {
    let mut g = c.benchmark_group("log_read");
    g.sample_size(40);
    g.warm_up_time(Duration::from_secs(3));
    g.measurement_time(Duration::from_secs(10));
    for (label, batch_bytes) in [("16KiB", 16 << 10), ("1MiB", 1 << 20)] {
        let batches = make_batches(batch_bytes);
        let total = total_len(&batches);
        let dir = tempfile::tempdir().unwrap();
        let mut log =
            Log::open(&dir.path().join("log"), kmirror_benches::bench_log_config()).unwrap();
        let mut plain = File::create(dir.path().join("plain.log")).unwrap();
        for batch in &batches {
            log.append_mirror(batch.clone()).unwrap();
            plain.write_all(batch).unwrap();
        }
        let end = log.log_end_offset();
        log.set_high_watermark(end);
        let plain = File::open(dir.path().join("plain.log")).unwrap();
        let fetch = 1 << 20; // max bytes per read, like a Fetch partition_max_bytes
        g.throughput(Throughput::Bytes(total));
        g.bench_function(BenchmarkId::new("read2_loop", label), |b| {
            let mut buf = vec![0u8; fetch];
            b.iter(|| {
                let mut pos = 0u64;
                while pos < total {
                    let n = plain.read_at(&mut buf, pos).unwrap();
                    pos += n as u64;
                }
                pos
            })
        });
        // What the broker does: zero-copy slices handed to the socket layer; the next fetch
        // offset comes from walking the returned batch headers.
        g.bench_function(BenchmarkId::new("log_read_zero_copy", label), |b| {
            b.iter(|| {
                let mut from = Offset(0);
                let mut moved = 0usize;
                while from < end {
                    let r = log.read(from, fetch, end).unwrap();
                    let last = BatchIter::headers(&r.records)
                        .map_while(Result::ok)
                        .last()
                        .expect("at least one batch");
                    from = Offset(last.0.next_offset());
                    moved += r.records.len();
                }
                moved
            })
        });
        // Same, plus copying every byte into a user buffer (what read(2) itself does).
        g.bench_function(BenchmarkId::new("log_read_copy", label), |b| {
            let mut buf = vec![0u8; 2 * fetch];
            b.iter(|| {
                let mut from = Offset(0);
                let mut moved = 0usize;
                while from < end {
                    let r = log.read(from, fetch, end).unwrap();
                    buf[..r.records.len()].copy_from_slice(&r.records);
                    let last = BatchIter::headers(&r.records)
                        .map_while(Result::ok)
                        .last()
                        .expect("at least one batch");
                    from = Offset(last.0.next_offset());
                    moved += r.records.len();
                }
                moved
            })
        });
    }
    g.finish();
}

/// Paired A/B on a shared, noisy machine: alternate plain and log runs of the same bytes and
/// report the median of the per-pair ratios (plain time / log time), which cancels most of
/// the background load that shifts whole criterion groups.
fn paired_append_ratios() {
    for (label, batch_bytes) in [("16KiB", 16 << 10), ("1MiB", 1 << 20)] {
        let batches = make_batches(batch_bytes);
        let mut ratios = Vec::new();
        for _ in 0..25 {
            let dir = tempfile::tempdir().unwrap();
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.path().join("plain.log"))
                .unwrap();
            f.write_all(&batches[0]).unwrap();
            let t = Instant::now();
            for batch in &batches[1..] {
                f.write_all(batch).unwrap();
            }
            let plain = t.elapsed();
            let mut log =
                Log::open(&dir.path().join("log"), kmirror_benches::bench_log_config()).unwrap();
            log.append_mirror(batches[0].clone()).unwrap();
            let t = Instant::now();
            for batch in &batches[1..] {
                log.append_mirror(batch.clone()).unwrap();
            }
            let logged = t.elapsed();
            ratios.push(plain.as_secs_f64() / logged.as_secs_f64());
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "paired append ratio (write(2) time / log mirror append time), {label} batches: \
             median {:.2} (quartiles {:.2} .. {:.2}, 25 pairs)",
            ratios[12], ratios[6], ratios[18]
        );
    }
}

criterion_group!(benches, bench_append, bench_read);

fn main() {
    benches();
    paired_append_ratios();
    Criterion::default().configure_from_args().final_summary();
}
