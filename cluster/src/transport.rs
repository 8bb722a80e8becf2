//! Raft messages between controllers over TCP.
//!
//! Frames are `[u32 BE length][protobuf eraftpb::Message]`. Each peer has one sender thread
//! with a bounded queue and its own connection, reconnecting with backoff; a full queue, a
//! failed connection or a failed write drops messages, which Raft tolerates (it retransmits
//! from its own state). The listener hands every received message to `deliver`; messages are
//! never acknowledged at this layer.
//!
//! There is no authentication or encryption yet: the controller listener belongs on a
//! private network (as Kafka's PLAINTEXT controller listener).

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use protobuf::Message as _;
use raft::eraftpb::Message;

/// Largest frame accepted (a metadata snapshot of many topics fits easily).
pub const MAX_FRAME: usize = 256 << 20;
/// Messages queued per peer before new ones are dropped.
pub const PEER_QUEUE: usize = 1024;
const POLL: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Encodes one frame.
pub fn encode_frame(msg: &Message) -> Vec<u8> {
    let body = msg.write_to_bytes().expect("raft messages encode");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Message>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the limit"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Message::parse_from_bytes(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

/// Shared switch of the test-only partition simulation: peers whose traffic is dropped both
/// ways.
#[derive(Debug, Clone, Default)]
pub(crate) struct Blocked(Arc<Mutex<HashSet<u64>>>);

impl Blocked {
    #[cfg(test)]
    pub(crate) fn set(&self, peer: u64, blocked: bool) {
        let mut b = self.0.lock().expect("blocked lock");
        if blocked {
            b.insert(peer);
        } else {
            b.remove(&peer);
        }
    }

    fn contains(&self, peer: u64) -> bool {
        self.0.lock().expect("blocked lock").contains(&peer)
    }
}

/// Accepts controller connections and delivers the messages read from them.
pub struct Listener {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Binds `addr` and starts accepting; `deliver` is called on reader threads.
    pub(crate) fn bind(
        addr: &str,
        blocked: Blocked,
        deliver: impl Fn(Message) + Send + Sync + 'static,
    ) -> io::Result<Listener> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let deliver = Arc::new(deliver);
        let thread = {
            let stop = stop.clone();
            thread::Builder::new()
                .name(format!("ctrl-listen-{}", local_addr.port()))
                .spawn(move || accept_loop(listener, stop, blocked, deliver))?
        };
        Ok(Listener {
            local_addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type Deliver = Arc<dyn Fn(Message) + Send + Sync>;

fn accept_loop(listener: TcpListener, stop: Arc<AtomicBool>, blocked: Blocked, deliver: Deliver) {
    let mut readers: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let (stop, blocked, deliver) = (stop.clone(), blocked.clone(), deliver.clone());
                let spawned = thread::Builder::new()
                    .name("ctrl-read".into())
                    .spawn(move || read_loop(stream, peer, stop, blocked, deliver));
                match spawned {
                    Ok(t) => readers.push(t),
                    Err(e) => tracing::warn!(error = %e, "cannot start a controller reader"),
                }
                readers.retain(|t| !t.is_finished());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(POLL / 5),
            Err(e) => {
                tracing::warn!(error = %e, "controller listener accept failed");
                thread::sleep(POLL);
            }
        }
    }
    for t in readers {
        let _ = t.join();
    }
}

fn read_loop(
    stream: TcpStream,
    peer: SocketAddr,
    stop: Arc<AtomicBool>,
    blocked: Blocked,
    deliver: Deliver,
) {
    // Blocking reads with a timeout so a stopped listener ends its readers.
    if stream.set_nonblocking(false).is_err() || stream.set_read_timeout(Some(POLL)).is_err() {
        return;
    }
    let mut r = io::BufReader::new(TimeoutReader {
        stream,
        stop: stop.clone(),
    });
    // The stop flag is checked between frames too: a busy peer never lets a read time out.
    while !stop.load(Ordering::SeqCst) {
        match read_frame(&mut r) {
            Ok(Some(m)) => {
                if !blocked.contains(m.from) {
                    deliver(m);
                }
            }
            Ok(None) => return,
            Err(e) => {
                if !stop.load(Ordering::SeqCst) {
                    tracing::debug!(%peer, error = %e, "controller connection closed");
                }
                return;
            }
        }
    }
}

/// Retries timed-out reads until the listener stops (a frame may arrive in pieces).
struct TimeoutReader {
    stream: TcpStream,
    stop: Arc<AtomicBool>,
}

impl Read for TimeoutReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.stream.read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if self.stop.load(Ordering::SeqCst) {
                        return Err(io::Error::new(io::ErrorKind::ConnectionAborted, "stopped"));
                    }
                }
                r => return r,
            }
        }
    }
}

/// Outgoing connections, one sender thread per peer.
pub struct Senders {
    local_id: u64,
    peers: Mutex<HashMap<u64, Peer>>,
    blocked: Blocked,
}

struct Peer {
    tx: SyncSender<Message>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Senders {
    pub(crate) fn new(local_id: u64, blocked: Blocked) -> Senders {
        Senders {
            local_id,
            peers: Mutex::new(HashMap::new()),
            blocked,
        }
    }

    /// Starts (or replaces) the sender to `id` at `addr`.
    pub fn add_peer(&self, id: u64, addr: &str) {
        if id == self.local_id {
            return;
        }
        let (tx, rx) = mpsc::sync_channel(PEER_QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, addr) = (stop.clone(), addr.to_string());
            thread::Builder::new()
                .name(format!("ctrl-send-{id}"))
                .spawn(move || send_loop(id, addr, rx, stop))
                .ok()
        };
        let old = self
            .peers
            .lock()
            .expect("peers lock")
            .insert(id, Peer { tx, stop, thread });
        if let Some(old) = old {
            old.shut_down();
        }
    }

    /// Queues `msg` for its peer; dropped if the peer is unknown, blocked or backed up.
    pub fn send(&self, msg: Message) {
        if self.blocked.contains(msg.to) {
            return;
        }
        let peers = self.peers.lock().expect("peers lock");
        let Some(p) = peers.get(&msg.to) else {
            tracing::debug!(to = msg.to, "no address for raft peer; message dropped");
            return;
        };
        match p.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(m)) => {
                tracing::debug!(to = m.to, "raft peer queue full; message dropped")
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

impl Drop for Senders {
    fn drop(&mut self) {
        let peers = std::mem::take(&mut *self.peers.lock().expect("peers lock"));
        for (_, p) in peers {
            p.shut_down();
        }
    }
}

impl Peer {
    fn shut_down(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn send_loop(id: u64, addr: String, rx: Receiver<Message>, stop: Arc<AtomicBool>) {
    let mut conn: Option<TcpStream> = None;
    let mut backoff = Duration::from_millis(50);
    let mut retry_at = std::time::Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let msg = match rx.recv_timeout(POLL) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if conn.is_none() {
            if std::time::Instant::now() < retry_at {
                continue; // dropped: the peer was unreachable a moment ago
            }
            match connect(&addr) {
                Ok(s) => {
                    backoff = Duration::from_millis(50);
                    conn = Some(s);
                }
                Err(e) => {
                    tracing::debug!(peer = id, %addr, error = %e, "cannot reach raft peer");
                    retry_at = std::time::Instant::now() + backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        let s = conn.as_mut().expect("connected");
        if let Err(e) = s.write_all(&encode_frame(&msg)) {
            tracing::debug!(peer = id, %addr, error = %e, "raft peer connection lost");
            conn = None;
            retry_at = std::time::Instant::now() + backoff;
        }
    }
}

fn connect(addr: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, Duration::from_millis(500)) {
            Ok(s) => {
                s.set_nodelay(true)?;
                s.set_write_timeout(Some(Duration::from_secs(2)))?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::{Entry, MessageType};

    #[test]
    fn frames_round_trip_and_oversized_ones_are_refused() {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.from = 1;
        m.to = 2;
        m.term = 7;
        m.mut_entries().push(Entry {
            index: 3,
            data: b"cmd".to_vec().into(),
            ..Default::default()
        });
        let mut bytes = encode_frame(&m);
        bytes.extend(encode_frame(&m));
        let mut r = &bytes[..];
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), m);
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), m);
        assert!(read_frame(&mut r).unwrap().is_none());
        let huge = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(read_frame(&mut &huge[..]).is_err());
    }
}
