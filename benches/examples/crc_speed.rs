//! Quick check of CRC32C throughput on this machine (context for the log append ratios).
fn main() {
    let data: Vec<u8> = (0..64 << 20).map(|i: usize| (i % 251) as u8).collect();
    let mut best = f64::MAX;
    let mut acc = 0u32;
    for _ in 0..20 {
        let t = std::time::Instant::now();
        for chunk in data.chunks(16 << 10) {
            acc ^= crc32c::crc32c(chunk);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "crc32c 16KiB chunks: {:.2} GiB/s (acc {acc})",
        64.0 / 1024.0 / best
    );
}
