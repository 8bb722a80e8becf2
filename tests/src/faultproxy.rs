//! A TCP fault proxy on a loopback port, for network faults between a mirror's source and
//! destination (issue 8, item 10). Plain std threads; faults switch at runtime.
//!
//! What each fault emulates (TCP hides packets from user space, so faults act on the chunks
//! that one `read` returns, up to 64 KiB):
//! - latency: every chunk is held for `latency` after it was read, then forwarded. Chunks are
//!   queued, not serialized behind each other's sleeps, so throughput is not capped by it
//!   (as with netem delay); a bounded queue keeps TCP flow control to the sender.
//! - loss: bytes cannot vanish inside a TCP stream; a lost segment shows up as a stall while
//!   the sender retransmits. With probability `loss` a chunk gets an extra retransmission-like
//!   delay of `max(200 ms, 3 × latency)` (Linux's minimum RTO is 200 ms), and, since TCP
//!   delivers in order, everything behind it in that direction waits too.
//! - down: new connections are accepted and closed at once (the client sees the connection
//!   end before any answer) and every proxied connection is cut.
//! - blackhole: new connections are accepted and never answered; proxied connections stop
//!   forwarding (bytes stay queued, as on a partitioned link) until the mode changes.
//! - resets: every `reset_every`, every proxied connection is cut.
//!
//! "Cut" is shutdown(2) of both sockets: each peer sees EOF or a broken pipe at once. (A RST
//! needs SO_LINGER 0, which std does not offer without `unsafe`.)

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rand::Rng;

/// What happens to connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Forward (with latency / loss if set).
    #[default]
    Pass,
    /// Refuse new connections (accept and close) and cut existing ones.
    Down,
    /// Accept but forward nothing, in either direction.
    Blackhole,
}

/// The faults in force; switch them with [`FaultProxy::set`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    pub mode: Mode,
    /// Added one-way delay per chunk.
    pub latency: Duration,
    /// Probability (0..=1) that a chunk is "lost" and delayed like a retransmission.
    pub loss: f64,
    /// Cut every proxied connection this often.
    pub reset_every: Option<Duration>,
}

/// Counters since the proxy started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted from clients.
    pub accepted: u64,
    /// Connections forwarded to the target.
    pub proxied: u64,
    /// Connections closed at once (down, or the target refused).
    pub refused: u64,
    /// Connections held without answer (blackhole).
    pub blackholed: u64,
    /// Proxied connections cut by `down` or a reset.
    pub cut: u64,
    /// Reset rounds done.
    pub resets: u64,
    /// Chunks given a loss (retransmission) delay.
    pub lost_chunks: u64,
    /// Bytes client → target.
    pub bytes_up: u64,
    /// Bytes target → client.
    pub bytes_down: u64,
    /// Proxied connections open now.
    pub live: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    proxied: AtomicU64,
    refused: AtomicU64,
    blackholed: AtomicU64,
    cut: AtomicU64,
    resets: AtomicU64,
    lost_chunks: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

struct Shared {
    target: Mutex<Option<String>>,
    faults: Mutex<Faults>,
    /// Both sockets of every open proxied (or held) connection, to cut them.
    conns: Mutex<HashMap<u64, Vec<TcpStream>>>,
    next_id: AtomicU64,
    stop: AtomicBool,
    n: Counters,
}

impl Shared {
    fn faults(&self) -> Faults {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn register(&self, socks: Vec<TcpStream>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, socks);
        id
    }

    /// Closes connection `id` (both sockets) if still open; returns whether it was.
    fn close(&self, id: u64) -> bool {
        let socks = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        match socks {
            Some(socks) => {
                for s in socks {
                    let _ = s.shutdown(Shutdown::Both);
                }
                true
            }
            None => false,
        }
    }

    fn cut_all(&self) -> u64 {
        let ids: Vec<u64> = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        let n = ids.into_iter().filter(|id| self.close(*id)).count() as u64;
        self.n.cut.fetch_add(n, Ordering::Relaxed);
        n
    }
}

/// A running proxy; dropping it stops accepting and cuts every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("faults", &self.faults())
            .field("stats", &self.stats())
            .finish()
    }
}

impl FaultProxy {
    /// Listens on a free loopback port with no target yet (connections are closed until
    /// [`FaultProxy::set_target`]): a broker can be configured to advertise this address
    /// before it starts.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fault proxy");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            target: Mutex::new(None),
            faults: Mutex::new(Faults::default()),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            n: Counters::default(),
        });
        let s = shared.clone();
        thread::Builder::new()
            .name("faultproxy-accept".into())
            .spawn(move || accept_loop(listener, s))
            .expect("spawn proxy accept thread");
        let s = shared.clone();
        thread::Builder::new()
            .name("faultproxy-reset".into())
            .spawn(move || reset_loop(s))
            .expect("spawn proxy reset thread");
        FaultProxy { addr, shared }
    }

    /// A proxy to `target` (`host:port`).
    pub fn to(target: &str) -> Self {
        let p = Self::start();
        p.set_target(target);
        p
    }

    /// `127.0.0.1:PORT` the proxy listens on.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Where new connections go.
    pub fn set_target(&self, target: &str) {
        *self.shared.target.lock().unwrap_or_else(|p| p.into_inner()) = Some(target.to_owned());
    }

    /// Switches faults. Going `Down` cuts every open connection at once; connections
    /// accepted during a blackhole are closed when it ends (they were never forwarded), while
    /// proxied connections it stalled resume with their queued bytes.
    pub fn set(&self, faults: Faults) {
        let before = {
            let mut f = self.shared.faults.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *f, faults.clone())
        };
        if faults.mode == Mode::Down && before.mode != Mode::Down {
            self.shared.cut_all();
        }
    }

    pub fn faults(&self) -> Faults {
        self.shared.faults()
    }

    /// Back to plain forwarding.
    pub fn pass(&self) {
        self.set(Faults::default());
    }

    /// Cuts every open connection now; returns how many.
    pub fn cut_all(&self) -> u64 {
        self.shared.cut_all()
    }

    pub fn stats(&self) -> ProxyStats {
        let n = &self.shared.n;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProxyStats {
            accepted: g(&n.accepted),
            proxied: g(&n.proxied),
            refused: g(&n.refused),
            blackholed: g(&n.blackholed),
            cut: g(&n.cut),
            resets: g(&n.resets),
            lost_chunks: g(&n.lost_chunks),
            bytes_up: g(&n.bytes_up),
            bytes_down: g(&n.bytes_down),
            live: self
                .shared
                .conns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len() as u64,
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        self.shared.cut_all();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        shared.n.accepted.fetch_add(1, Ordering::Relaxed);
        let _ = client.set_nodelay(true);
        match shared.faults().mode {
            Mode::Down => {
                shared.n.refused.fetch_add(1, Ordering::Relaxed);
                let _ = client.shutdown(Shutdown::Both);
            }
            Mode::Blackhole => {
                shared.n.blackholed.fetch_add(1, Ordering::Relaxed);
                hold(client, &shared);
            }
            Mode::Pass => {
                let target = shared
                    .target
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                let upstream = target
                    .as_deref()
                    .and_then(|t| t.parse::<SocketAddr>().ok())
                    .and_then(|t| TcpStream::connect_timeout(&t, Duration::from_secs(2)).ok());
                match upstream {
                    Some(up) => {
                        shared.n.proxied.fetch_add(1, Ordering::Relaxed);
                        let _ = up.set_nodelay(true);
                        forward(client, up, &shared);
                    }
                    None => {
                        // The target is down: the client sees its connection end, as with
                        // a refused connect.
                        shared.n.refused.fetch_add(1, Ordering::Relaxed);
                        let _ = client.shutdown(Shutdown::Both);
                    }
                }
            }
        }
    }
}

/// Blackhole: read and discard until the client gives up or the mode changes.
fn hold(client: TcpStream, shared: &Arc<Shared>) {
    let Ok(reg) = client.try_clone() else { return };
    let id = shared.register(vec![reg]);
    let shared = shared.clone();
    let _ = thread::Builder::new()
        .name("faultproxy-hold".into())
        .spawn(move || {
            let mut client = client;
            let _ = client.set_read_timeout(Some(Duration::from_millis(100)));
            let mut buf = [0u8; 16 << 10];
            loop {
                if shared.stop.load(Ordering::Relaxed) || shared.faults().mode != Mode::Blackhole {
                    break;
                }
                match client.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            shared.close(id);
        });
}

fn forward(client: TcpStream, up: TcpStream, shared: &Arc<Shared>) {
    let (Ok(c2), Ok(u2), Ok(c3), Ok(u3)) = (
        client.try_clone(),
        up.try_clone(),
        client.try_clone(),
        up.try_clone(),
    ) else {
        return;
    };
    let id = shared.register(vec![c3, u3]);
    pipe(client, u2, id, true, shared.clone());
    pipe(up, c2, id, false, shared.clone());
}

/// One direction: a reader thread stamps each chunk with when it may leave; a writer thread
/// sends it then. Either side ending closes the whole connection.
fn pipe(mut from: TcpStream, mut to: TcpStream, id: u64, upward: bool, shared: Arc<Shared>) {
    // 64 chunks of up to 64 KiB in flight per direction; a full queue stops the reader, so
    // the sender feels backpressure as on a real link.
    let (tx, rx) = mpsc::sync_channel::<(Instant, Vec<u8>)>(64);
    let rs = shared.clone();
    let _ = thread::Builder::new()
        .name("faultproxy-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let mut last_due = Instant::now();
            let mut rng = rand::thread_rng();
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let f = rs.faults();
                let mut due = Instant::now() + f.latency;
                if f.loss > 0.0 && rng.gen_bool(f.loss.min(1.0)) {
                    rs.n.lost_chunks.fetch_add(1, Ordering::Relaxed);
                    due += (f.latency * 3).max(Duration::from_millis(200));
                }
                // In order, as TCP delivers: a stalled chunk holds back the ones after it.
                due = due.max(last_due);
                last_due = due;
                if tx.send((due, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
            rs.close(id);
        });
    let _ = thread::Builder::new()
        .name("faultproxy-write".into())
        .spawn(move || {
            let counter = if upward {
                &shared.n.bytes_up
            } else {
                &shared.n.bytes_down
            };
            'chunks: while let Ok((due, chunk)) = rx.recv() {
                loop {
                    if shared.stop.load(Ordering::Relaxed) {
                        break 'chunks;
                    }
                    let now = Instant::now();
                    let held = shared.faults().mode == Mode::Blackhole;
                    if !held && now >= due {
                        break;
                    }
                    let wait = if held {
                        Duration::from_millis(20)
                    } else {
                        (due - now).min(Duration::from_millis(20))
                    };
                    thread::sleep(wait);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
                counter.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
            shared.close(id);
        });
}

fn reset_loop(shared: Arc<Shared>) {
    let mut last = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(50));
        match shared.faults().reset_every {
            Some(every) if last.elapsed() >= every => {
                shared.cut_all();
                shared.n.resets.fetch_add(1, Ordering::Relaxed);
                last = Instant::now();
            }
            Some(_) => {}
            None => last = Instant::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback; returns its address.
    fn echo() -> String {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                thread::spawn(move || {
                    let mut r = s.try_clone().expect("clone");
                    let _ = std::io::copy(&mut r, &mut s);
                });
            }
        });
        addr
    }

    fn roundtrip(c: &mut TcpStream, msg: &[u8]) -> std::io::Result<Duration> {
        let t = Instant::now();
        c.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        c.read_exact(&mut got)?;
        assert_eq!(got, msg);
        Ok(t.elapsed())
    }

    #[test]
    fn faults_switch_at_runtime() {
        let p = FaultProxy::to(&echo());
        let mut c = TcpStream::connect(p.addr()).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(5))).ok();
        assert!(roundtrip(&mut c, b"hello").expect("pass") < Duration::from_millis(100));

        // Latency applies each way.
        p.set(Faults {
            latency: Duration::from_millis(100),
            ..Faults::default()
        });
        let rtt = roundtrip(&mut c, b"slow").expect("latency");
        assert!(rtt >= Duration::from_millis(200), "rtt {rtt:?}");

        // Loss 1.0: every chunk stalls at least the minimum RTO.
        p.set(Faults {
            loss: 1.0,
            ..Faults::default()
        });
        let rtt = roundtrip(&mut c, b"lossy").expect("loss");
        assert!(rtt >= Duration::from_millis(400), "rtt {rtt:?}");
        assert!(p.stats().lost_chunks >= 2);

        // Blackhole: nothing comes back; then pass again delivers what was held.
        p.set(Faults {
            mode: Mode::Blackhole,
            ..Faults::default()
        });
        c.set_read_timeout(Some(Duration::from_millis(300))).ok();
        c.write_all(b"held").expect("write");
        let mut b = [0u8; 4];
        assert!(c.read_exact(&mut b).is_err(), "blackhole answered");
        p.pass();
        c.set_read_timeout(Some(Duration::from_secs(5))).ok();
        c.read_exact(&mut b)
            .expect("held bytes after the blackhole");
        assert_eq!(&b, b"held");

        // Down cuts the connection and closes new ones.
        p.set(Faults {
            mode: Mode::Down,
            ..Faults::default()
        });
        assert!(roundtrip(&mut c, b"x").is_err());
        let mut d = TcpStream::connect(p.addr()).expect("accepted then closed");
        d.set_read_timeout(Some(Duration::from_secs(5))).ok();
        assert!(roundtrip(&mut d, b"x").is_err());

        // Resets every 200 ms cut a live connection.
        p.set(Faults {
            reset_every: Some(Duration::from_millis(200)),
            ..Faults::default()
        });
        let mut e = TcpStream::connect(p.addr()).expect("connect");
        e.set_read_timeout(Some(Duration::from_secs(5))).ok();
        roundtrip(&mut e, b"ok").expect("before the reset");
        thread::sleep(Duration::from_millis(500));
        assert!(roundtrip(&mut e, b"gone").is_err());
        let s = p.stats();
        assert!(s.resets >= 1 && s.cut >= 2 && s.refused >= 1, "{s:?}");
    }
}
