//! Raft messages between controllers over TCP.
//!
//! Frames are `[u32 BE length][protobuf eraftpb::Message]`. Each peer has one sender thread
//! with a bounded queue and its own connection, reconnecting with backoff; a full queue, a
//! failed connection or a failed write drops messages, which Raft tolerates (it retransmits
//! from its own state). The listener hands every received message to `deliver`; messages are
//! never acknowledged at this layer.
//!
//! Each connection starts with a hello frame naming the sender's node id and directory id
//! (Kafka's `ReplicaKey`, carried in every KRaft request); the listener passes that
//! directory id along with each message from that id, so the driver can refuse a voter whose
//! data dir was re-formatted (see `driver.rs`).
//!
//! Security: without [`ControllerTls`] the listener is plaintext and unauthenticated (it
//! belongs on a private network, as Kafka's PLAINTEXT controller listener). With it (Kafka's
//! controller listener with protocol SSL and `ssl.client.auth=required`), both directions use
//! mutual TLS: a peer must present a certificate signed by the configured CA, and a
//! plaintext peer or one with an unknown certificate is refused at the handshake and logged.

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

/// How long an accepted connection may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Mutual TLS of the controller listener: this node's certificate for both directions and
/// the CA its peers' certificates must be signed by. Cheap to clone.
#[derive(Clone)]
pub struct ControllerTls {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ControllerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControllerTls")
    }
}

impl ControllerTls {
    /// From PEM files: this node's certificate chain and PKCS#8 key, and the peers' CA.
    pub fn from_files(
        cert: &std::path::Path,
        key: &std::path::Path,
        ca: &std::path::Path,
    ) -> Result<ControllerTls, String> {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        };
        let certs = |p: &std::path::Path| -> Result<Vec<CertificateDer<'static>>, String> {
            let pem = read(p)?;
            let c: Vec<_> = rustls_pemfile::certs(&mut &pem[..])
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{}: {e}", p.display()))?;
            if c.is_empty() {
                return Err(format!("{}: no PEM certificate", p.display()));
            }
            Ok(c)
        };
        let chain = certs(cert)?;
        let key_pem = read(key)?;
        let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &key_pem[..])
            .map_err(|e| format!("{}: {e}", key.display()))?
            .ok_or_else(|| format!("{}: no PEM private key", key.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for c in certs(ca)? {
            roots
                .add(c)
                .map_err(|e| format!("{}: unusable CA certificate: {e}", ca.display()))?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.clone(),
            provider.clone(),
        )
        .build()
        .map_err(|e| e.to_string())?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| format!("controller certificate: {e}"))?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("controller certificate: {e}"))?;
        Ok(ControllerTls {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}

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
        tls: Option<ControllerTls>,
        deliver: impl Fn(Message, Option<Arc<str>>) + Send + Sync + 'static,
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
                .spawn(move || accept_loop(listener, stop, blocked, tls, deliver))?
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

type Deliver = Arc<dyn Fn(Message, Option<Arc<str>>) + Send + Sync>;

/// Marks the hello frame: a `MsgUnreachable` (local-only in raft-rs, never sent between
/// nodes) whose context is this prefix and the sender's directory id.
const HELLO_TAG: &[u8] = b"kmirror-hello:";

/// The first frame of every connection: who sends, with which directory id.
pub(crate) fn hello(from: u64, directory_id: &str) -> Message {
    let mut m = Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgUnreachable);
    m.from = from;
    let mut ctx = HELLO_TAG.to_vec();
    ctx.extend_from_slice(directory_id.as_bytes());
    m.context = ctx.into();
    m
}

fn parse_hello(m: &Message) -> Option<(u64, Arc<str>)> {
    if m.get_msg_type() != raft::eraftpb::MessageType::MsgUnreachable {
        return None;
    }
    let dir = m.get_context().strip_prefix(HELLO_TAG)?;
    Some((m.from, Arc::from(std::str::from_utf8(dir).ok()?)))
}

fn accept_loop(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    blocked: Blocked,
    tls: Option<ControllerTls>,
    deliver: Deliver,
) {
    let mut readers: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let (stop, blocked, deliver) = (stop.clone(), blocked.clone(), deliver.clone());
                let tls = tls.clone();
                let spawned = thread::Builder::new()
                    .name("ctrl-read".into())
                    .spawn(move || read_loop(stream, peer, stop, blocked, tls, deliver));
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
    mut stream: TcpStream,
    peer: SocketAddr,
    stop: Arc<AtomicBool>,
    blocked: Blocked,
    tls: Option<ControllerTls>,
    deliver: Deliver,
) {
    // Blocking reads with a timeout so a stopped listener ends its readers.
    if stream.set_nonblocking(false).is_err() || stream.set_read_timeout(Some(POLL)).is_err() {
        return;
    }
    let reader: Box<dyn Read + Send> = match tls {
        None => Box::new(TimeoutReader {
            stream,
            stop: stop.clone(),
        }),
        Some(tls) => match accept_tls(&mut stream, &tls, &stop) {
            Ok(conn) => Box::new(rustls::StreamOwned::new(
                conn,
                TimeoutReader {
                    stream,
                    stop: stop.clone(),
                },
            )),
            Err(e) => {
                if !stop.load(Ordering::SeqCst) {
                    tracing::warn!(%peer, error = %e, "controller connection refused: TLS handshake failed");
                }
                return;
            }
        },
    };
    let mut r = io::BufReader::new(reader);
    // The sender's (id, directory id) from its hello; an empty id is "not stated".
    let mut sender: Option<(u64, Arc<str>)> = None;
    // The stop flag is checked between frames too: a busy peer never lets a read time out.
    while !stop.load(Ordering::SeqCst) {
        match read_frame(&mut r) {
            Ok(Some(m)) => {
                if let Some(h) = parse_hello(&m) {
                    sender = Some(h).filter(|(_, d)| !d.is_empty());
                    continue;
                }
                if !blocked.contains(m.from) {
                    let dir = sender
                        .as_ref()
                        .filter(|(id, _)| *id == m.from)
                        .map(|(_, d)| d.clone());
                    deliver(m, dir);
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

/// The server side of the TLS handshake, bounded by [`HANDSHAKE_TIMEOUT`]: a peer without a
/// certificate signed by the CA, or one speaking plaintext, fails here.
fn accept_tls(
    stream: &mut TcpStream,
    tls: &ControllerTls,
    stop: &AtomicBool,
) -> io::Result<rustls::ServerConnection> {
    let mut conn = rustls::ServerConnection::new(tls.server.clone()).map_err(io::Error::other)?;
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    while conn.is_handshaking() {
        match conn.complete_io(stream) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::SeqCst) || std::time::Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "handshake timed out",
                    ));
                }
            }
            Err(e) => {
                // Send the alert (e.g. certificate required) before closing.
                let _ = conn.write_tls(stream);
                return Err(e);
            }
        }
    }
    Ok(conn)
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

/// The reader side never writes after the handshake; rustls' stream needs `Write`.
impl Write for TimeoutReader {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// Outgoing connections, one sender thread per peer.
pub struct Senders {
    local_id: u64,
    /// This node's directory id, sent in each connection's hello.
    directory_id: String,
    peers: Mutex<HashMap<u64, Peer>>,
    blocked: Blocked,
    tls: Option<ControllerTls>,
}

struct Peer {
    tx: SyncSender<Message>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Senders {
    pub(crate) fn new(
        local_id: u64,
        directory_id: String,
        blocked: Blocked,
        tls: Option<ControllerTls>,
    ) -> Senders {
        Senders {
            local_id,
            directory_id,
            peers: Mutex::new(HashMap::new()),
            blocked,
            tls,
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
            let (stop, addr, tls) = (stop.clone(), addr.to_string(), self.tls.clone());
            let first = encode_frame(&hello(self.local_id, &self.directory_id));
            thread::Builder::new()
                .name(format!("ctrl-send-{id}"))
                .spawn(move || send_loop(id, addr, tls, first, rx, stop))
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

fn send_loop(
    id: u64,
    addr: String,
    tls: Option<ControllerTls>,
    hello: Vec<u8>,
    rx: Receiver<Message>,
    stop: Arc<AtomicBool>,
) {
    let mut conn: Option<Box<dyn Write + Send>> = None;
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
            match connect(&addr, tls.as_ref()).and_then(|mut s| {
                s.write_all(&hello)?;
                Ok(s)
            }) {
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
        if let Err(e) = s.write_all(&encode_frame(&msg)).and_then(|()| s.flush()) {
            tracing::debug!(peer = id, %addr, error = %e, "raft peer connection lost");
            conn = None;
            retry_at = std::time::Instant::now() + backoff;
        }
    }
}

fn connect(addr: &str, tls: Option<&ControllerTls>) -> io::Result<Box<dyn Write + Send>> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, Duration::from_millis(500)) {
            Ok(mut s) => {
                s.set_nodelay(true)?;
                s.set_write_timeout(Some(Duration::from_secs(2)))?;
                let Some(tls) = tls else {
                    return Ok(Box::new(s));
                };
                // The peer's certificate must name the host of its voter address.
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                let mut c = rustls::ClientConnection::new(tls.client.clone(), name)
                    .map_err(io::Error::other)?;
                s.set_read_timeout(Some(Duration::from_secs(2)))?;
                while c.is_handshaking() {
                    c.complete_io(&mut s)?;
                }
                return Ok(Box::new(rustls::StreamOwned::new(c, s)));
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

    /// A CA and a loopback certificate signed by it, as PEM files in `dir`.
    fn pki(dir: &std::path::Path, name: &str) -> (PathBuf3, ControllerTls) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} CA"));
        let ca = p.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let files = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}-key.pem")),
            dir.join(format!("{name}-ca.pem")),
        );
        std::fs::write(&files.0, format!("{}{}", cert.pem(), ca.pem())).unwrap();
        std::fs::write(&files.1, key.serialize_pem()).unwrap();
        std::fs::write(&files.2, ca.pem()).unwrap();
        let tls = ControllerTls::from_files(&files.0, &files.1, &files.2).unwrap();
        (files, tls)
    }

    type PathBuf3 = (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf);

    fn msg(from: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = from;
        m.to = 1;
        m
    }

    #[test]
    fn a_tls_listener_takes_only_peers_with_a_certificate_of_its_ca() {
        let dir = tempfile::tempdir().unwrap();
        let (_, good) = pki(dir.path(), "cluster");
        let (_, other) = pki(dir.path(), "other");
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let l = Listener::bind(
            "127.0.0.1:0",
            Blocked::default(),
            Some(good.clone()),
            move |m, dir| {
                let _ = tx.lock().unwrap().send((m.from, dir));
            },
        )
        .unwrap();
        let addr = l.local_addr().to_string();
        let send = |from: u64, tls: Option<ControllerTls>| {
            let s = Senders::new(from, format!("dir-{from}"), Blocked::default(), tls);
            s.add_peer(1, &addr);
            for _ in 0..20 {
                s.send(msg(from));
                thread::sleep(Duration::from_millis(50));
            }
        };
        // A plaintext peer and a peer whose certificate another CA signed: nothing arrives.
        send(2, None);
        send(3, Some(other));
        // Raw bytes in the clear (a frame as a plaintext peer sends it) are refused too.
        let mut raw = TcpStream::connect(&addr).unwrap();
        raw.write_all(&encode_frame(&msg(4))).unwrap();
        // A peer with a certificate of the CA gets through.
        send(5, Some(good));
        // It gets through with the directory id of its hello.
        let got: HashSet<(u64, Option<Arc<str>>)> = rx.try_iter().collect();
        assert_eq!(got, HashSet::from([(5, Some(Arc::from("dir-5")))]));
        // The listener closed the plaintext connection.
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 64];
        let n = raw.read(&mut buf).unwrap_or(0);
        assert!(
            n == 0 || buf[0] == 0x15,
            "expected a close or a TLS alert, got {:?}",
            &buf[..n]
        );
    }

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
