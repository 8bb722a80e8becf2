//! Splits the mirror-append cost into its parts (plain write, write + CRC, full log append).
use std::fs::OpenOptions;
use std::io::Write;
use std::time::Instant;

use bytes::Bytes;
use kmirror_log::batch::{build_batch, BatchSpec, KeyValue};
use kmirror_log::{FlushPolicy, Log, LogConfig};

fn main() {
    let batch_bytes: usize = std::env::args()
        .nth(1)
        .map_or(1 << 20, |a| a.parse().unwrap());
    let per = (batch_bytes / 1024).max(1);
    let value = vec![7u8; 1024];
    let recs: Vec<KeyValue<'_>> = (0..per).map(|_| (None, Some(&value[..]))).collect();
    let mut batches = Vec::new();
    let mut total = 0;
    let mut base = 0i64;
    while total < 64 << 20 {
        let spec = BatchSpec {
            base_offset: base,
            partition_leader_epoch: 1,
            attributes: 0,
            base_timestamp: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        };
        let b = Bytes::from(build_batch(&spec, &recs));
        total += b.len();
        base += per as i64;
        batches.push(b);
    }
    let cfg = LogConfig {
        segment_ms: None,
        retention_ms: None,
        flush: FlushPolicy::Os,
        ..LogConfig::default()
    };
    // `append_probe <batch bytes> log|plain`: only that path, 20 rounds (for perf).
    if let Some(mode) = std::env::args().nth(2) {
        let mut spent = std::time::Duration::ZERO;
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            if mode == "log" {
                let mut log = Log::open(&dir.path().join("log"), cfg.clone()).unwrap();
                log.append_mirror(batches[0].clone()).unwrap(); // epoch checkpoint, untimed
                let t = Instant::now();
                for b in &batches[1..] {
                    log.append_mirror(b.clone()).unwrap();
                }
                spent += t.elapsed();
            } else {
                if mode == "plainsync" {
                    // the same fsync traffic Log::open and the first append do, untimed
                    for name in ["x", "y", "z"] {
                        let mut c = std::fs::File::create(dir.path().join(name)).unwrap();
                        c.write_all(b"checkpoint").unwrap();
                        c.sync_all().unwrap();
                        std::fs::File::open(dir.path()).unwrap().sync_all().unwrap();
                    }
                }
                let mut f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.path().join("a"))
                    .unwrap();
                f.write_all(&batches[0]).unwrap();
                let t = Instant::now();
                for b in &batches[1..] {
                    f.write_all(b).unwrap();
                }
                spent += t.elapsed();
            }
        }
        println!("{mode}: {:?} per 64 MiB", spent / 20);
        return;
    }
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("a"))
            .unwrap();
        let t = Instant::now();
        for b in &batches {
            f.write_all(b).unwrap();
        }
        let plain = t.elapsed();
        let mut g = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("b"))
            .unwrap();
        let t = Instant::now();
        let mut acc = 0;
        for b in &batches {
            acc ^= crc32c::crc32c(&b[21..]);
            g.write_all(b).unwrap();
        }
        let crc = t.elapsed();
        let mut g2 = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("c"))
            .unwrap();
        let t = Instant::now();
        for b in &batches {
            for c in b.chunks(128 << 10) {
                acc ^= crc32c::crc32c(c);
                g2.write_all(c).unwrap();
            }
        }
        let chunked = t.elapsed();
        let mut log = Log::open(&dir.path().join("log"), cfg.clone()).unwrap();
        log.append_mirror(batches[0].clone()).unwrap(); // epoch checkpoint, untimed
        let t = Instant::now();
        for b in &batches[1..] {
            log.append_mirror(b.clone()).unwrap();
        }
        let lg = t.elapsed();
        println!(
            "round {round}: plain {plain:?} crc+write {crc:?} chunked crc+write {chunked:?} log {lg:?} ({acc})"
        );
    }
}
