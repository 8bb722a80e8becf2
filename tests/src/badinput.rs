//! Issue 3, "bad input from a raw socket": each case misbehaves on its own connection while a
//! well-behaved client keeps producing and fetching on another. After every case the broker
//! must still be up, its RSS must not have jumped, and the bystander must not have failed.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::helpers::now_ms;
use crate::{records, BrokerUnderTest, WireClient};

/// RSS growth (KiB) that counts as a jump: far below any payload a bad frame announces
/// (≥ 100 MiB), far above allocator noise.
pub const RSS_JUMP_KIB: u64 = 64 * 1024;

/// Kafka's default `socket.request.max.bytes` (100 MiB); one more is over the limit.
pub const DEFAULT_MAX_REQUEST: i32 = 100 * 1024 * 1024;

/// A client that produces a batch and fetches it back every few ms until stopped.
pub struct Bystander {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Bystander {
    /// Starts on `topic` partition 0 of `addr`.
    pub fn start(addr: &str, topic: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let (addr, topic) = (addr.to_string(), topic.to_string());
        let (s, o, f) = (stop.clone(), ok.clone(), failures.clone());
        let thread = std::thread::spawn(move || {
            let mut c = match WireClient::connect(&addr) {
                Ok(c) => c,
                Err(e) => {
                    f.lock().expect("lock").push(format!("connect: {e}"));
                    return;
                }
            };
            let mut i = 0u64;
            while !s.load(Ordering::Relaxed) {
                i += 1;
                let value = format!("bystander-{i}");
                let batch = records::batch(&[value.as_bytes()], now_ms());
                let step = c
                    .produce_raw(&topic, 0, batch, -1)
                    .map_err(|e| format!("produce #{i}: {e}"))
                    .and_then(|(code, off)| {
                        if code != 0 {
                            return Err(format!("produce #{i}: error code {code}"));
                        }
                        let p = c
                            .fetch_raw(&topic, 0, off, 1 << 20, false)
                            .map_err(|e| format!("fetch #{i}: {e}"))?;
                        let found = records::decode_values(&p.records.unwrap_or_default())?
                            .into_iter()
                            .any(|(o, v)| o == off && v.as_deref() == Some(value.as_bytes()));
                        if found {
                            Ok(())
                        } else {
                            Err(format!("fetch #{i}: record at {off} not read back"))
                        }
                    });
                match step {
                    Ok(()) => {
                        o.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        f.lock().expect("lock").push(e);
                        // Reconnect so one failure does not hide the rest.
                        if let Ok(n) = WireClient::connect(&addr) {
                            c = n;
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Bystander {
            stop,
            ok,
            failures,
            thread: Some(thread),
        }
    }

    /// Successful round trips so far.
    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Failures so far.
    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().expect("lock").clone()
    }

    /// Stops and returns (round trips, failures).
    pub fn finish(mut self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("bystander thread");
        }
        (self.ok(), self.failures())
    }
}

/// Whether the peer closed `s` within `within` (reads until EOF or reset; data it sends is
/// drained and ignored).
pub fn closed_by_peer(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    s.set_read_timeout(Some(Duration::from_millis(200))).ok();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

fn raw(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect for a bad request");
    s.set_write_timeout(Some(Duration::from_secs(5))).ok();
    s
}

/// A request frame with a valid header for `api_key`/`version` and `body` after it.
pub fn frame(
    api_key: i16,
    version: i16,
    correlation: i32,
    header_version: i16,
    body: &[u8],
) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("bad-input")));
    let mut b = BytesMut::new();
    header
        .encode(&mut b, header_version)
        .expect("encode header");
    b.put_slice(body);
    let mut out = Vec::with_capacity(b.len() + 4);
    out.put_i32(b.len() as i32);
    out.extend_from_slice(&b);
    out
}

/// Sends a frame length prefix `len` (and, for huge lengths, streams `junk` bytes after it
/// until the peer stops reading); the broker must close the connection.
pub fn bad_length(addr: &str, len: i32, junk: usize) -> Result<(), String> {
    let mut s = raw(addr);
    s.write_all(&len.to_be_bytes())
        .map_err(|e| format!("write length: {e}"))?;
    let chunk = vec![0x41u8; 64 * 1024];
    let mut sent = 0;
    while sent < junk {
        // A broker that allocated `len` bytes would keep reading; one that closed makes this
        // fail, and one that simply stops reading makes it time out: both are fine here.
        if s.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    if closed_by_peer(&mut s, Duration::from_secs(10)) {
        Ok(())
    } else {
        Err(format!(
            "frame length {len}: connection still open after 10 s"
        ))
    }
}

/// "GET / HTTP/1.1": its first four bytes read as a ~1.1 GB frame length.
pub fn http_get(addr: &str) -> Result<(), String> {
    let mut s = raw(addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    if closed_by_peer(&mut s, Duration::from_secs(10)) {
        Ok(())
    } else {
        Err("HTTP request: connection still open after 10 s".into())
    }
}

/// An API key no Kafka version defines: the broker closes the connection or answers with
/// the same correlation id; either way it must not hang the connection forever.
pub fn unknown_api_key(addr: &str) -> Result<(), String> {
    let mut s = raw(addr);
    s.write_all(&frame(32_000, 0, 77, 1, &[0u8; 8]))
        .map_err(|e| format!("write: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut len = [0u8; 4];
    match s.read_exact(&mut len) {
        Err(_) => Ok(()), // closed: fine
        Ok(()) => {
            let mut body = vec![0u8; i32::from_be_bytes(len).clamp(0, 1 << 20) as usize];
            s.read_exact(&mut body)
                .map_err(|e| format!("read response: {e}"))?;
            let corr = i32::from_be_bytes(body[..4].try_into().map_err(|_| "short response")?);
            if corr == 77 {
                Ok(())
            } else {
                Err(format!(
                    "unknown API key answered with correlation id {corr}"
                ))
            }
        }
    }
}

/// ApiVersions at a version from the future: KIP-511 says the broker answers
/// UNSUPPORTED_VERSION (35) in a v0 response that still lists its API versions.
pub fn unsupported_api_versions(addr: &str) -> Result<(), String> {
    let mut s = raw(addr);
    // A v3+ body would be flexible; the broker must not even try to parse it.
    s.write_all(&frame(18, 127, 5, 1, &[0u8; 4]))
        .map_err(|e| format!("write: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .map_err(|e| format!("no ApiVersions answer: {e}"))?;
    let mut body = vec![0u8; i32::from_be_bytes(len).clamp(0, 1 << 20) as usize];
    s.read_exact(&mut body).map_err(|e| format!("read: {e}"))?;
    let mut b = bytes::Bytes::from(body);
    let corr = bytes::Buf::get_i32(&mut b);
    if corr != 5 {
        return Err(format!("correlation id {corr} != 5"));
    }
    let resp = ApiVersionsResponse::decode(&mut b, 0).map_err(|e| format!("decode v0: {e:#}"))?;
    if resp.error_code != 35 {
        return Err(format!(
            "error code {} instead of UNSUPPORTED_VERSION (35)",
            resp.error_code
        ));
    }
    if !resp.api_keys.iter().any(|k| k.api_key == 18) {
        return Err("UNSUPPORTED_VERSION answer does not list ApiVersions itself".into());
    }
    Ok(())
}

/// Metadata at version 127: refused (closed, or answered with the same correlation id).
pub fn unsupported_metadata_version(addr: &str) -> Result<(), String> {
    let mut s = raw(addr);
    s.write_all(&frame(3, 127, 9, 2, &[0u8; 8]))
        .map_err(|e| format!("write: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut len = [0u8; 4];
    match s.read_exact(&mut len) {
        Err(_) => Ok(()),
        Ok(()) => {
            let mut body = vec![0u8; i32::from_be_bytes(len).clamp(0, 1 << 20) as usize];
            s.read_exact(&mut body).map_err(|e| format!("read: {e}"))?;
            let corr = i32::from_be_bytes(body[..4].try_into().map_err(|_| "short")?);
            (corr == 9)
                .then_some(())
                .ok_or(format!("answered with correlation id {corr}"))
        }
    }
}

/// A frame that announces 1000 bytes and delivers 20, then half-closes: the broker must
/// neither crash nor wait forever on other connections.
pub fn truncated_frame(addr: &str) -> Result<(), String> {
    let mut s = raw(addr);
    let full = frame(3, 12, 11, 2, &[0u8; 996]);
    s.write_all(&full[..24])
        .map_err(|e| format!("write: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    s.shutdown(Shutdown::Write).ok();
    if closed_by_peer(&mut s, Duration::from_secs(10)) {
        Ok(())
    } else {
        Err("truncated frame then EOF: connection still open after 10 s".into())
    }
}

/// A produce batch whose CRC does not match: CORRUPT_MESSAGE (2), log end offset unchanged,
/// and the bytes are not served.
pub fn broken_crc(addr: &str, topic: &str) -> Result<(), String> {
    let mut c = WireClient::connect(addr).map_err(|e| e.to_string())?;
    let before = c.log_bounds(topic, 0).map_err(|e| e.to_string())?;
    let good = records::batch(&[b"must-not-be-stored"], now_ms());
    let bad = records::with_broken_crc(&good);
    let (code, _) = c
        .produce_raw(topic, 0, bad, -1)
        .map_err(|e| e.to_string())?;
    if code != 2 {
        return Err(format!(
            "broken CRC answered error code {code}, not CORRUPT_MESSAGE (2)"
        ));
    }
    let after = c.log_bounds(topic, 0).map_err(|e| e.to_string())?;
    if after != before {
        return Err(format!("log bounds moved from {before:?} to {after:?}"));
    }
    // The same connection keeps working for a good batch.
    let (code, off) = c
        .produce_raw(topic, 0, good, -1)
        .map_err(|e| e.to_string())?;
    if code != 0 || off != before.1 {
        return Err(format!(
            "good batch after the bad one: code {code}, offset {off}, expected offset {}",
            before.1
        ));
    }
    Ok(())
}

/// Kafka's INVALID_RECORD: LogValidator's answer to records that disagree with their header.
pub const INVALID_RECORD: i16 = 87;

/// Issue 8 hole 2: one record claiming 2^31-1 records (lastOffsetDelta agreeing, CRC valid).
/// The broker must answer INVALID_RECORD (87) without appending, and a ListOffsets by
/// timestamp on the partition must still answer (kmirror used to size a vector from the count
/// there and abort).
pub fn lying_record_count(addr: &str, topic: &str) -> Result<(), String> {
    let mut c = WireClient::connect(addr).map_err(|e| e.to_string())?;
    let before = c.log_bounds(topic, 0).map_err(|e| e.to_string())?;
    let good = records::batch(&[b"claims-2^31-1-records"], now_ms());
    let bad = records::with_claimed_count(&good, i32::MAX);
    let (code, _) = c
        .produce_raw(topic, 0, bad, -1)
        .map_err(|e| e.to_string())?;
    if code != INVALID_RECORD {
        return Err(format!(
            "one record claiming 2^31-1 answered error code {code}, not INVALID_RECORD (87)"
        ));
    }
    let after = c.log_bounds(topic, 0).map_err(|e| e.to_string())?;
    if after != before {
        return Err(format!("log bounds moved from {before:?} to {after:?}"));
    }
    // ListOffsets by timestamp (the path that aborted) answers on a fresh connection too.
    for ts in [0, now_ms() - 3_600_000] {
        let off = c
            .list_offset(topic, 0, ts)
            .map_err(|e| format!("ListOffsets by timestamp {ts}: {e}"))?;
        if off != before.0 {
            return Err(format!(
                "ListOffsets by timestamp {ts} answered {off}, expected {}",
                before.0
            ));
        }
    }
    Ok(())
}

/// A Produce request (flexible version) whose topic array claims 2^32-2 entries in a 30-byte
/// frame. kafka-protocol sized a Vec from that count before reading an element and aborted;
/// the broker must refuse it (close or answer) and stay up.
pub fn huge_array_count(addr: &str, produce_version: i16) -> Result<(), String> {
    let mut s = raw(addr);
    let mut body = vec![0u8]; // transactional_id: compact nullable string, null
    body.extend_from_slice(&(-1i16).to_be_bytes()); // acks
    body.extend_from_slice(&30_000i32.to_be_bytes()); // timeout_ms
    body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // topic_data: 2^32-1 => 2^32-2
    s.write_all(&frame(0, produce_version, 13, 2, &body))
        .map_err(|e| format!("write: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut len = [0u8; 4];
    match s.read_exact(&mut len) {
        Err(_) => Ok(()), // closed: what Kafka does with an unparsable request
        Ok(()) => {
            let mut body = vec![0u8; i32::from_be_bytes(len).clamp(0, 1 << 20) as usize];
            s.read_exact(&mut body).map_err(|e| format!("read: {e}"))?;
            let corr = i32::from_be_bytes(body[..4].try_into().map_err(|_| "short")?);
            (corr == 13)
                .then_some(())
                .ok_or(format!("answered with correlation id {corr}"))
        }
    }
}

/// One bad-input case: `Err` says what the broker did wrong.
type Case<'a> = Box<dyn Fn() -> Result<(), String> + 'a>;

/// Runs every case against `broker`, checking liveness, RSS and the bystander after each.
/// `check_rss` is off for JVM brokers, whose heap grows lazily by design.
pub fn run_all(broker: &mut dyn BrokerUnderTest, check_rss: bool) {
    let addr = broker.bootstrap();
    let mut admin = WireClient::connect(&addr).expect("connect");
    assert_eq!(
        admin.create_topic("bystander", 1, 1, &[]).expect("create"),
        0
    );
    assert_eq!(admin.create_topic("crc", 1, 1, &[]).expect("create"), 0);
    let seed = records::batch(&[b"seed"], now_ms());
    assert_eq!(admin.produce_raw("crc", 0, seed, -1).expect("produce").0, 0);
    let by = Bystander::start(&addr, "bystander");
    crate::proc::wait_for(Duration::from_secs(30), "bystander round trips", || {
        (by.ok() >= 5).then_some(())
    });
    let baseline = broker.rss_kib();
    // A flexible (compact-array) Produce version both brokers serve.
    let flexible_produce = admin
        .version_range(0)
        .map(|(_, max)| max.min(11))
        .filter(|v| *v >= 9)
        .expect("broker serves a flexible Produce version");
    let over = DEFAULT_MAX_REQUEST + 1;
    let cases: Vec<(&str, Case<'_>)> = vec![
        ("frame length -1", Box::new(|| bad_length(&addr, -1, 0))),
        ("frame length 0", Box::new(|| bad_length(&addr, 0, 0))),
        (
            "frame length 2^31-1 then 32 MiB",
            Box::new(|| bad_length(&addr, i32::MAX, 32 << 20)),
        ),
        (
            "frame length over the limit then 32 MiB",
            Box::new(|| bad_length(&addr, over, 32 << 20)),
        ),
        ("GET / HTTP/1.1", Box::new(|| http_get(&addr))),
        ("unknown API key", Box::new(|| unknown_api_key(&addr))),
        (
            "ApiVersions v127",
            Box::new(|| unsupported_api_versions(&addr)),
        ),
        (
            "Metadata v127",
            Box::new(|| unsupported_metadata_version(&addr)),
        ),
        ("truncated frame", Box::new(|| truncated_frame(&addr))),
        (
            "produce with broken CRC",
            Box::new(|| broken_crc(&addr, "crc")),
        ),
        (
            "produce one record claiming 2^31-1 records",
            Box::new(|| lying_record_count(&addr, "crc")),
        ),
        (
            "produce whose topic array claims 2^32-2 entries",
            Box::new(|| huge_array_count(&addr, flexible_produce)),
        ),
    ];
    let mut failures = Vec::new();
    for (name, case) in &cases {
        let before_ok = by.ok();
        if let Err(e) = case() {
            failures.push(format!("{name}: {e}"));
        }
        assert!(broker.is_alive(), "broker died on: {name}");
        let mut fresh = WireClient::connect(&addr)
            .unwrap_or_else(|e| panic!("no new connection after {name}: {e}"));
        fresh
            .metadata(None)
            .unwrap_or_else(|e| panic!("Metadata fails after {name}: {e}"));
        if check_rss {
            let rss = broker.rss_kib();
            assert!(
                rss < baseline + RSS_JUMP_KIB,
                "RSS jumped from {baseline} KiB to {rss} KiB after {name}"
            );
        }
        crate::proc::wait_for(Duration::from_secs(10), "bystander progress", || {
            (by.ok() > before_ok).then_some(())
        });
    }
    let (ok, by_failures) = by.finish();
    assert!(
        by_failures.is_empty(),
        "bystander failed ({ok} ok): {by_failures:?}"
    );
    assert!(
        failures.is_empty(),
        "bad-input cases failed:\n{}",
        failures.join("\n")
    );
}
