//! The per-core Kafka listener and connection loop.
//!
//! Every core binds every listener's address with SO_REUSEPORT (glommio sets it), so the
//! kernel spreads connections over cores. The connection loop is one generic function over
//! the stream: plain TCP or rustls over TCP (SSL and SASL_SSL listeners). A connection is served one request at a time, in order,
//! like Kafka does (it mutes a channel until the response is sent); requests needing
//! partitions owned by other cores hop there through the engine's router.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_lite::io::BufReader;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use futures_rustls::server::TlsStream;
use futures_rustls::TlsAcceptor;
use glommio::net::{TcpListener, TcpStream};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::broker::Ctx;
use crate::fetch_encode::Frames;
use crate::frame::{header_prefix, read_frame, FrameError};
use crate::sasl::{ConnAuth, Gate};
use crate::session::{Principal, SecurityProtocol, Session};
use crate::{authz, handlers, versions};

/// How long shutdown waits for connections to finish their in-flight request.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `addr` on this core; returns the listener and its bound address.
pub fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(addr)?;
    let a = l.local_addr()?;
    Ok((l, a))
}

/// What a core's listener needs to serve a connection: its name, protocol and, for SSL and
/// SASL_SSL, the TLS acceptor.
#[derive(Clone)]
pub struct ListenerCtx {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub tls: Option<TlsAcceptor>,
}

impl ListenerCtx {
    /// A PLAINTEXT listener.
    pub fn plaintext() -> ListenerCtx {
        ListenerCtx {
            name: SecurityProtocol::Plaintext.name().into(),
            protocol: SecurityProtocol::Plaintext,
            tls: None,
        }
    }
}

/// How often an acceptor at its connection limit looks for a free slot.
const SLOT_POLL: Duration = Duration::from_millis(20);

/// Kafka's acceptor steps for a connection just accepted from `ip` on `listener`: the broker
/// and listener creation rates (the listener waits out the delay), the IP's own
/// `connection_creation_rate` (closed unread after the throttle time: the client sees the
/// connection drop and backs off), a free slot under `max.connections` (the listener waits
/// for one), then `max.connections.per.ip` (closed at once). Kafka checks the IP's rate
/// after the slot wait; here a connection over its IP's rate is closed even while the
/// listener is full. The stream and its counted slot, or `None` when it was turned away or
/// the node stops.
async fn admit(
    ctx: &Ctx,
    listener: &str,
    ip: std::net::IpAddr,
    stream: TcpStream,
) -> Option<(crate::conn_limits::ConnSlot, TcpStream)> {
    use crate::conn_limits::Admission;
    let limits = ctx.conn_limits();
    let delay = limits.creation_delay_ms(&ctx.meta(), listener, kmirror_engine::now_ms());
    if delay > 0 && !pause(ctx, Duration::from_millis(delay)).await {
        return None;
    }
    let mut ip_checked = false;
    loop {
        let meta = ctx.meta();
        if !ip_checked {
            ip_checked = true;
            let t = ctx.quotas().connection_throttle_ms(ip);
            if t > 0 {
                limits.uncount_creation(listener, kmirror_engine::now_ms());
                ctx.metrics().connections_throttled.fetch_add(1, Relaxed);
                tracing::debug!(
                    ?ip,
                    throttle_ms = t,
                    "connection over the IP's connection_creation_rate"
                );
                glommio::spawn_local(async move {
                    glommio::timer::sleep(Duration::from_millis(t)).await;
                    drop(stream);
                })
                .detach();
                return None;
            }
        }
        match limits.open(&meta, listener, ip) {
            (Admission::Open, Some(slot)) => return Some((slot, stream)),
            (Admission::TooManyFromIp(max), _) => {
                ctx.metrics().connections_refused.fetch_add(1, Relaxed);
                tracing::info!(
                    ?ip,
                    max,
                    "connection refused: the address already has its max.connections.per.ip"
                );
                return None;
            }
            _ => {
                // At max.connections: this core stops accepting until a connection closes.
                if !pause(ctx, SLOT_POLL).await {
                    return None;
                }
            }
        }
    }
}

/// Sleeps `d` unless the node stops first (`false` then).
async fn pause(ctx: &Ctx, d: Duration) -> bool {
    futures_lite::future::or(
        async {
            glommio::timer::sleep(d).await;
            true
        },
        async {
            ctx.core.stop.stopped().await;
            false
        },
    )
    .await
}

/// How long a client may take to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections until the stop token fires, then waits (bounded) for in-flight
/// requests to complete. Each connection gets a [`Session`] of the listener's protocol; on
/// a TLS listener the handshake comes first.
pub async fn serve(ctx: Rc<Ctx>, listener: TcpListener, lctx: ListenerCtx) {
    let open = Rc::new(Cell::new(0usize));
    let lctx = Rc::new(lctx);
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            ctx.core.stop.stopped().await;
            None
        })
        .await;
        let stream = match accepted {
            None => break,
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(peer_ip) = stream.peer_addr().ok().map(|p| p.ip()) else {
            continue;
        };
        let Some(slot) = admit(&ctx, &lctx.name, peer_ip, stream).await else {
            continue;
        };
        let (slot, stream) = slot;
        let ctx = ctx.clone();
        let lctx = lctx.clone();
        let open2 = open.clone();
        open.set(open.get() + 1);
        let m = &ctx.metrics();
        m.connections_accepted.fetch_add(1, Relaxed);
        m.connections_active.fetch_add(1, Relaxed);
        glommio::spawn_local(async move {
            let _slot = slot;
            let peer = stream.peer_addr().ok();
            let _ = stream.set_nodelay(true);
            let serve = async {
                match &lctx.tls {
                    None => {
                        let session =
                            Session::new(&lctx.name, lctx.protocol, Principal::anonymous(), peer);
                        connection(ctx.clone(), stream, session).await
                    }
                    Some(acceptor) => match tls_handshake(&ctx, acceptor, stream).await {
                        Ok((tls, principal)) => {
                            let session = Session::new(&lctx.name, lctx.protocol, principal, peer);
                            tracing::debug!(?peer, listener = %lctx.name, principal = %session.principal, "TLS connection");
                            connection(ctx.clone(), tls, session).await
                        }
                        Err(e) => Err(e),
                    },
                }
            };
            // A bug in one request's handling must cost that connection only: unwinding out
            // of this task would end the core's executor and every connection and partition
            // on it. (Per-core state touched by the handler is behind RefCells whose guards
            // unwind, and partition state is changed on the owning core's own tasks.)
            let r = match futures_lite::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(serve))
                .await
            {
                Ok(r) => r,
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    ctx.metrics().protocol_errors.fetch_add(1, Relaxed);
                    tracing::error!(?peer, panic = %what, "closing connection: its request handling panicked");
                    Ok(())
                }
            };
            let m = &ctx.metrics();
            m.connections_active.fetch_sub(1, Relaxed);
            match r {
                Err(ConnError::Protocol(e)) => {
                    m.protocol_errors.fetch_add(1, Relaxed);
                    tracing::info!(?peer, error = %e, "closing connection: protocol violation");
                }
                Err(ConnError::Frame(e @ FrameError::BadLength { .. })) => {
                    m.protocol_errors.fetch_add(1, Relaxed);
                    tracing::info!(?peer, error = %e, "closing connection: bad frame");
                }
                Err(ConnError::Tls(e)) => {
                    tracing::info!(?peer, listener = %lctx.name, error = %e, "closing connection: TLS handshake failed");
                }
                Err(e) => tracing::debug!(?peer, error = %e, "connection closed"),
                Ok(()) => {}
            }
            open2.set(open2.get() - 1);
        })
        .detach();
    }
    drop(listener);
    let start = std::time::Instant::now();
    while open.get() > 0 && start.elapsed() < DRAIN_TIMEOUT {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
}

/// The server side of the TLS handshake (bounded in time), then the client's principal:
/// `User:<subject DN>` for a verified client certificate, `User:ANONYMOUS` without one.
async fn tls_handshake(
    ctx: &Ctx,
    acceptor: &TlsAcceptor,
    stream: TcpStream,
) -> Result<(TlsStream<TcpStream>, Principal), ConnError> {
    let done = futures_lite::future::or(
        async { Some(acceptor.accept(stream).await) },
        futures_lite::future::or(
            async {
                ctx.core.stop.stopped().await;
                None
            },
            async {
                glommio::timer::sleep(TLS_HANDSHAKE_TIMEOUT).await;
                Some(Err(std::io::ErrorKind::TimedOut.into()))
            },
        ),
    )
    .await;
    let tls = match done {
        None => return Err(ConnError::Io(std::io::ErrorKind::ConnectionAborted.into())),
        Some(Ok(tls)) => tls,
        Some(Err(e)) => return Err(ConnError::Tls(e.to_string())),
    };
    let principal = match tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
        None => Principal::anonymous(),
        Some(cert) => Principal::user(
            crate::tls::principal_name(cert.as_ref()).map_err(|e| ConnError::Tls(e.to_string()))?,
        ),
    };
    Ok((tls, principal))
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("authentication: {0}")]
    Auth(String),
}

/// A connection's byte stream: plain TCP or TLS over TCP.
trait Transport: AsyncRead + AsyncWrite + Unpin {
    /// Whether small response chunks are gathered before writing. Under TLS each write
    /// becomes at least one record and a syscall, and every byte is copied (encrypted)
    /// anyway; on plain TCP large chunks (Fetch's record data) go to the socket as they are.
    const GATHER: bool;
    /// The socket, when file regions may be sent to it with sendfile(2) (plain TCP only:
    /// TLS must encrypt every byte in user space).
    fn sendfile_socket(&self) -> Option<std::os::fd::RawFd>;
}

impl Transport for TcpStream {
    const GATHER: bool = false;
    fn sendfile_socket(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.as_raw_fd())
    }
}

/// Whether Fetch sends record bytes to this peer with sendfile(2) rather than copying them out
/// of the mapping: to peers across a network, not to loopback ones.
///
/// Why not loopback: there sendfile only moves the copy to the receiver, and costs more than
/// the copy it saves. Measured on the consume benchmark (docs/BENCHMARKS.md): with sendfile,
/// ConsumerPerformance on the same host read 0.82–0.96× as fast and the broker spent
/// 1.28–1.6× the CPU per GB (a 1 MiB sendfile took ~300 µs, strace). With a NIC, sendfile
/// spares the broker the copy, which is why Kafka uses it.
/// `KMIRROR_SENDFILE=0` (never) or `=1` (always, loopback too: tests and benchmarks of the
/// sendfile path) overrides the choice.
pub(crate) fn sendfile_for(peer: Option<std::net::SocketAddr>) -> bool {
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = *FORCED.get_or_init(|| match std::env::var("KMIRROR_SENDFILE").as_deref() {
        Ok("0") | Ok("false") => Some(false),
        Ok("1") | Ok("true") => Some(true),
        _ => None,
    });
    forced.unwrap_or_else(|| peer.is_some_and(|p| !p.ip().is_loopback()))
}

impl Transport for TlsStream<TcpStream> {
    const GATHER: bool = true;
    fn sendfile_socket(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// When sendfile finds the socket buffer full, this many bytes go through the runtime's
/// ordinary (copying) write, which waits until the socket takes data again.
const SENDFILE_PARK_BYTES: usize = 4 << 10;

/// Writes `bytes`, which are the same bytes as `file`, with sendfile(2): no copy out of the
/// page cache. Falls back to copying writes if sendfile is refused (e.g. a file system
/// without it).
async fn send_region<S: Transport>(
    w: &mut S,
    socket: std::os::fd::RawFd,
    bytes: &Bytes,
    file: &kmirror_log::FileRegion,
) -> std::io::Result<()> {
    let mut sent = 0usize;
    while sent < bytes.len() {
        match file.send_nonblocking(socket, sent, bytes.len() - sent) {
            Ok(0) => break,
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let n = (bytes.len() - sent).min(SENDFILE_PARK_BYTES);
                w.write_all(&bytes[sent..sent + n]).await?;
                sent += n;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPIPE) | Some(libc::ECONNRESET) | Some(libc::ENOTCONN)
                ) =>
            {
                return Err(e)
            }
            Err(_) => break,
        }
    }
    if sent < bytes.len() {
        w.write_all(&bytes[sent..]).await?;
    }
    Ok(())
}

/// Under TLS, chunks are gathered into writes of about this size (the largest TLS record).
const TLS_GATHER_BYTES: usize = 16 << 10;

async fn write_response<S: Transport>(
    w: &mut S,
    frames: &Frames,
    sendfile: bool,
) -> std::io::Result<()> {
    let chunks = &frames.chunks;
    if !S::GATHER {
        let socket = w.sendfile_socket().filter(|_| sendfile);
        let mut files = frames.files.iter().peekable();
        for (i, c) in chunks.iter().enumerate() {
            match (socket, files.next_if(|(at, _)| *at == i)) {
                (Some(fd), Some((_, file))) => send_region(w, fd, c, file).await?,
                _ => w.write_all(c).await?,
            }
        }
        return Ok(());
    }
    let mut buf: Vec<u8> = Vec::new();
    for c in chunks {
        if !buf.is_empty() && buf.len() + c.len() > TLS_GATHER_BYTES {
            w.write_all(&buf).await?;
            buf.clear();
        }
        if c.len() >= TLS_GATHER_BYTES {
            w.write_all(c).await?;
        } else {
            buf.extend_from_slice(c);
        }
    }
    if !buf.is_empty() {
        w.write_all(&buf).await?;
    }
    // What the TLS session still holds goes out now.
    w.flush().await
}

async fn connection<S: Transport>(
    ctx: Rc<Ctx>,
    stream: S,
    session: Session,
) -> Result<(), ConnError> {
    let id = session.id;
    let r = serve_connection(ctx.clone(), stream, session).await;
    // Kafka releases a member's acquired records when its connection drops.
    crate::share_fetch::connection_closed(&ctx, id).await;
    r
}

async fn serve_connection<S: Transport>(
    ctx: Rc<Ctx>,
    stream: S,
    mut session: Session,
) -> Result<(), ConnError> {
    let max = ctx.config().max_request_bytes;
    // Small per-connection buffer: large frames are read straight into their own buffer.
    let mut reader = BufReader::with_capacity(16 << 10, stream);
    let mut auth = ConnAuth::new(&session);
    let sendfile = sendfile_for(session.peer);
    loop {
        let frame =
            futures_lite::future::or(async { Some(read_frame(&mut reader, max).await) }, async {
                ctx.core.stop.stopped().await;
                None
            })
            .await;
        let frame = match frame {
            None => return Ok(()),
            Some(Err(FrameError::Closed)) => return Ok(()),
            Some(r) => r?,
        };
        ctx.metrics()
            .bytes_in
            .fetch_add(frame.len() as u64 + 4, Relaxed);
        // SASL first: before authentication only the handshake is served.
        let mut throttle_ms = 0;
        let (chunks, close) = match auth.gate(&ctx, &mut session, &frame).await {
            Gate::Serve => (
                handle_frame(&ctx, &session, frame, &mut throttle_ms).await?,
                false,
            ),
            Gate::Reply(b) => (Some(Frames::one(b)), false),
            Gate::ReplyThenClose(b) => (Some(Frames::one(b)), true),
            Gate::Close(reason) => return Err(ConnError::Auth(reason)),
        };
        if let Some(chunks) = chunks {
            write_response(reader.get_mut(), &chunks, sendfile).await?;
            let n = chunks.len();
            ctx.metrics().bytes_out.fetch_add(n as u64, Relaxed);
        }
        if throttle_ms > 0 {
            // KIP-219: the response went out with throttle_time_ms; the channel stays muted
            // (nothing more is read from it) for that long.
            crate::quota::mute(&ctx, throttle_ms).await;
        }
        if close {
            let _ = reader.get_mut().flush().await;
            return Err(ConnError::Auth("SASL authentication failed".into()));
        }
        if ctx.core.stop.is_stopped() {
            return Ok(());
        }
    }
}

/// Decodes, dispatches and encodes one request. `Ok(None)`: no response (acks=0).
/// `Err`: the connection must be closed (malformed or unsupported request).
async fn handle_frame(
    ctx: &Ctx,
    session: &Session,
    frame: Bytes,
    throttle_ms: &mut u64,
) -> Result<Option<Frames>, ConnError> {
    let p = header_prefix(&frame);
    if !session.may_serve(p.api_key) {
        // A SASL listener before authentication: only the SASL exchange (Kafka closes the
        // connection too).
        return Err(ConnError::Protocol(format!(
            "api key {} on listener {} before SASL authentication",
            p.api_key, session.listener
        )));
    }
    // Until the node has caught up, requests wait. ApiVersions and the SASL exchange need no
    // metadata, and the quorum APIs read the raft state, not the metadata (Kafka's
    // controllers answer them without a broker registration; a voter whose log was wiped
    // cannot register until it is removed and added back, which these APIs do).
    if !matches!(
        ApiKey::try_from(p.api_key),
        Ok(ApiKey::ApiVersions
            | ApiKey::SaslHandshake
            | ApiKey::SaslAuthenticate
            | ApiKey::DescribeQuorum
            | ApiKey::AddRaftVoter
            | ApiKey::RemoveRaftVoter)
    ) {
        ctx.wait_ready().await;
    }
    let Ok(api_key) = ApiKey::try_from(p.api_key) else {
        if let Some(ext) = ctx.extension().as_ref().filter(|e| e.handles(p.api_key)) {
            let resp = ext.handle(session, p.api_key, frame).await;
            return Ok(resp.map(|r| {
                let mut out = BytesMut::with_capacity(4 + r.len());
                out.put_i32(r.len() as i32);
                out.put_slice(&r);
                Frames::one(out.freeze())
            }));
        }
        return Err(ConnError::Protocol(format!(
            "unknown api key {}",
            p.api_key
        )));
    };
    let Some(range) = versions::served_range(api_key) else {
        return Err(ConnError::Protocol(format!(
            "api {api_key:?} is not served"
        )));
    };
    if p.api_version < range.min || p.api_version > range.max {
        if api_key == ApiKey::ApiVersions {
            // KIP-511: answer in v0 with our versions so the client can pick one.
            let resp = versions::api_versions_response(
                kafka_protocol::ResponseError::UnsupportedVersion.code(),
                &extension_versions(ctx),
            );
            return encode_response(
                ApiKey::ApiVersions,
                0,
                p.correlation_id,
                &ResponseKind::ApiVersions(resp),
            )
            .map(|b| Some(Frames::one(b)));
        }
        return Err(ConnError::Protocol(format!(
            "{api_key:?} v{} unsupported (we serve {}..{})",
            p.api_version, range.min, range.max
        )));
    }
    ctx.metrics().count_request(api_key);
    let frame_len = frame.len() as u64 + 4;
    // The request quota charges the core's working time on the request: decoding, the
    // handler's polls (not its waits) and encoding the response.
    let decode_start = std::time::Instant::now();
    let (header, mut req) =
        decode_request(api_key, p.api_version, frame).map_err(ConnError::Protocol)?;
    let quota = crate::quota::Charge::new(ctx, session, &header);
    if let RequestKind::Fetch(f) = &mut req {
        quota.cap_fetch(f);
    }
    let mut files = Vec::new();
    let busy = Cell::new(decode_start.elapsed().as_nanos() as u64);
    let resp = crate::quota::timed(
        &busy,
        dispatch(ctx, session, api_key, &header, req, &mut files),
    )
    .await?;
    let request_throttle = quota.request(busy.get());
    let encode_start = std::time::Instant::now();
    let out = match resp {
        None => {
            *throttle_ms = request_throttle;
            if api_key == ApiKey::Produce {
                *throttle_ms = quota.produce(frame_len, None).max(request_throttle);
            }
            Ok(None)
        }
        Some(ResponseKind::Produce(mut r)) => {
            r.throttle_time_ms = r.throttle_time_ms.max(request_throttle as i32);
            *throttle_ms = quota.produce(frame_len, Some(&mut r)).max(request_throttle);
            encode_response(
                api_key,
                p.api_version,
                p.correlation_id,
                &ResponseKind::Produce(r),
            )
            .map(|b| Some(Frames::one(b)))
        }
        // Fetch: record bytes are spliced in (and sent from their files), not copied.
        Some(ResponseKind::Fetch(mut f)) => {
            let enc = |f: &kafka_protocol::messages::FetchResponse, files| {
                crate::fetch_encode::encode_fetch_response(
                    f,
                    p.api_version,
                    p.correlation_id,
                    files,
                )
                .map_err(|e| ConnError::Protocol(format!("encode Fetch: {e}")))
            };
            let frames = enc(&f, &files)?;
            *throttle_ms = quota.fetch(frames.len() as u64, &mut f, request_throttle);
            if *throttle_ms > 0 {
                // Throttled: the answer went empty, so no file region applies.
                enc(&f, &[]).map(Some)
            } else {
                Ok(Some(frames))
            }
        }
        Some(mut resp) => {
            let own = crate::quota::mutation_throttle(&resp);
            crate::quota::set_throttle(&mut resp, request_throttle);
            *throttle_ms = request_throttle.max(own);
            encode_response(api_key, p.api_version, p.correlation_id, &resp)
                .map(|b| Some(Frames::one(b)))
        }
    };
    // Kafka records the network thread's share without throttling this response.
    quota.request(encode_start.elapsed().as_nanos() as u64);
    out
}

/// Decodes the request header and body of a frame (without its length prefix) whose API key
/// is `api_key` at `api_version`: the step between the served-version check and dispatch. It
/// needs no broker, so the request-decoder fuzz target drives it directly. `Err` says why the
/// connection must be closed.
pub fn decode_request(
    api_key: ApiKey,
    api_version: i16,
    frame: Bytes,
) -> Result<(RequestHeader, RequestKind), String> {
    let mut body = frame;
    let header = RequestHeader::decode(&mut body, api_key.request_header_version(api_version))
        .map_err(|e| format!("bad {api_key:?} header: {e:#}"))?;
    let req = RequestKind::decode(api_key, &mut body, api_version)
        .map_err(|e| format!("bad {api_key:?} v{api_version} body: {e:#}"))?;
    Ok((header, req))
}

fn extension_versions(ctx: &Ctx) -> Vec<(i16, i16, i16)> {
    ctx.extension()
        .as_ref()
        .map(|e| e.versions())
        .unwrap_or_default()
}

pub(crate) fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    resp: &ResponseKind,
) -> Result<Bytes, ConnError> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, api_key.response_header_version(version))
        .map_err(|e| ConnError::Protocol(format!("encode header: {e}")))?;
    resp.encode(&mut buf, version)
        .map_err(|e| ConnError::Protocol(format!("encode {api_key:?} v{version}: {e}")))?;
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

async fn dispatch(
    ctx: &Ctx,
    session: &Session,
    api_key: ApiKey,
    header: &RequestHeader,
    req: RequestKind,
    fetch_files: &mut Vec<Option<kmirror_log::FileRegion>>,
) -> Result<Option<ResponseKind>, ConnError> {
    let v = header.request_api_version;
    if let Some(id) = kmirror_control::mirror::failpoint::armed_arg("panic-on-client-id") {
        if header.client_id.as_deref() == Some(id) {
            panic!("failpoint panic-on-client-id:{id}");
        }
    }
    let access = ctx.authz().access(session);
    let access = &access;
    let resp = match req {
        RequestKind::ApiVersions(_) => {
            let mut resp = versions::api_versions_response(0, &extension_versions(ctx));
            crate::features::advertise(ctx, v, &mut resp);
            ResponseKind::ApiVersions(resp)
        }
        RequestKind::UpdateFeatures(r) => {
            ResponseKind::UpdateFeatures(crate::features::update_features(ctx, access, v, r).await)
        }
        RequestKind::Metadata(r) => {
            ResponseKind::Metadata(handlers::metadata::metadata(ctx, session, access, v, r).await)
        }
        RequestKind::Produce(r) => match handlers::produce::produce(ctx, access, v, r).await {
            Some(r) => ResponseKind::Produce(r),
            None => return Ok(None),
        },
        RequestKind::Fetch(r) => {
            let (resp, files) = handlers::fetch::fetch(ctx, access, v, r).await;
            *fetch_files = files;
            ResponseKind::Fetch(resp)
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(handlers::offsets::list_offsets(ctx, access, v, r).await)
        }
        RequestKind::OffsetForLeaderEpoch(r) => ResponseKind::OffsetForLeaderEpoch(
            handlers::offsets::offset_for_leader_epoch(ctx, access, v, r).await,
        ),
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(handlers::offsets::delete_records(ctx, access, v, r).await)
        }
        RequestKind::CreateTopics(r) => {
            let quota = crate::quota::Mutation::new(ctx, session, header, v >= 6);
            ResponseKind::CreateTopics(handlers::admin::create_topics(ctx, access, &quota, r).await)
        }
        RequestKind::DeleteTopics(r) => {
            let quota = crate::quota::Mutation::new(ctx, session, header, v >= 5);
            ResponseKind::DeleteTopics(
                handlers::admin::delete_topics(ctx, access, &quota, v, r).await,
            )
        }
        RequestKind::CreatePartitions(r) => {
            let quota = crate::quota::Mutation::new(ctx, session, header, v >= 3);
            ResponseKind::CreatePartitions(
                handlers::admin::create_partitions(ctx, access, &quota, r).await,
            )
        }
        RequestKind::DescribeCluster(r) => ResponseKind::DescribeCluster(
            handlers::admin::describe_cluster(ctx, session, access, v, r),
        ),
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(handlers::configs::describe_configs(ctx, access, v, r))
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(handlers::configs::alter_configs(ctx, access, v, r).await)
        }
        RequestKind::CreateAcls(r) => {
            ResponseKind::CreateAcls(match acl_access(ctx, access, authz::table::CREATE_ACLS) {
                Ok(()) => crate::acl::create_acls(ctx.cluster(), r).await,
                Err(code) => crate::acl::create_acls_refused(&r, code),
            })
        }
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(match acl_access(ctx, access, authz::table::DESCRIBE_ACLS) {
                Ok(()) => crate::acl::describe_acls(ctx.acls(), r),
                Err(code) => crate::acl::describe_acls_refused(code),
            })
        }
        RequestKind::DeleteAcls(r) => {
            ResponseKind::DeleteAcls(match acl_access(ctx, access, authz::table::DELETE_ACLS) {
                Ok(()) => crate::acl::delete_acls(ctx.cluster(), r).await,
                Err(code) => crate::acl::delete_acls_refused(&r, code),
            })
        }
        RequestKind::DescribeClientQuotas(r) => ResponseKind::DescribeClientQuotas(
            match access.check_cluster(authz::table::DESCRIBE_CLIENT_QUOTAS) {
                Ok(()) => crate::quota::describe_client_quotas(ctx.quotas(), r),
                Err(code) => authz::describe_client_quotas_refused(code),
            },
        ),
        RequestKind::AlterClientQuotas(r) => ResponseKind::AlterClientQuotas(
            match access.check_cluster(authz::table::ALTER_CLIENT_QUOTAS) {
                Ok(()) => crate::quota::alter_client_quotas(ctx.cluster(), ctx.quotas(), r).await,
                Err(code) => crate::quota::alter_client_quotas_refused(&r, code),
            },
        ),
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            match access.check_cluster(authz::table::DESCRIBE_SCRAM) {
                Ok(()) => crate::sasl::credentials::describe(ctx, r),
                Err(code) => authz::describe_scram_refused(code),
            },
        ),
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            match access.check_cluster(authz::table::ALTER_SCRAM) {
                Ok(()) => crate::sasl::credentials::alter(ctx, r).await,
                Err(code) => authz::alter_scram_refused(&r, code),
            },
        ),
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            handlers::configs::incremental_alter_configs(ctx, access, v, r).await,
        ),
        RequestKind::AddPartitionsToTxn(r) => {
            if let Some(resp) = handlers::txn::refuse_unauthorized(access, v, &r) {
                return Ok(Some(resp));
            }
            let (refused, rest) = handlers::txn::refuse_mirror_partitions(&ctx.meta(), v, r);
            let forwarded = match rest {
                Some(r) => Some(
                    group_request(ctx, api_key, header, RequestKind::AddPartitionsToTxn(r)).await?,
                ),
                None => None,
            };
            match (refused, forwarded) {
                (Some(mut a), Some(ResponseKind::AddPartitionsToTxn(b))) => {
                    a.results_by_transaction.extend(b.results_by_transaction);
                    a.error_code = b.error_code;
                    ResponseKind::AddPartitionsToTxn(a)
                }
                (Some(a), _) => ResponseKind::AddPartitionsToTxn(a),
                (None, Some(b)) => b,
                (None, None) => unreachable!("the request is refused or forwarded"),
            }
        }
        req @ (RequestKind::ShareGroupHeartbeat(_)
        | RequestKind::ShareGroupDescribe(_)
        | RequestKind::DescribeShareGroupOffsets(_)
        | RequestKind::AlterShareGroupOffsets(_)
        | RequestKind::DeleteShareGroupOffsets(_))
            if !crate::features::share_groups_enabled(&ctx.meta()) =>
        {
            // Kafka 4.1: UNSUPPORTED_VERSION, no message, until share.version is finalized.
            crate::groups::share_refused(&req, kmirror_control::group::codes::UNSUPPORTED_VERSION)
        }
        RequestKind::DescribeShareGroupOffsets(r) => ResponseKind::DescribeShareGroupOffsets(
            crate::share_fetch::describe_offsets(ctx, access, api_key, header, r).await,
        ),
        RequestKind::AlterShareGroupOffsets(r) => ResponseKind::AlterShareGroupOffsets(
            crate::share_fetch::alter_offsets(ctx, access, api_key, header, r).await,
        ),
        RequestKind::DeleteShareGroupOffsets(r) => ResponseKind::DeleteShareGroupOffsets(
            crate::share_fetch::delete_offsets(ctx, access, api_key, header, r).await,
        ),
        RequestKind::ShareFetch(r) => ResponseKind::ShareFetch(
            crate::share_fetch::share_fetch(ctx, access, session.id, r).await,
        ),
        RequestKind::ShareAcknowledge(r) => ResponseKind::ShareAcknowledge(
            crate::share_fetch::share_acknowledge(ctx, access, session.id, r).await,
        ),
        req @ (RequestKind::InitializeShareGroupState(_)
        | RequestKind::ReadShareGroupState(_)
        | RequestKind::WriteShareGroupState(_)
        | RequestKind::DeleteShareGroupState(_)
        | RequestKind::ReadShareGroupStateSummary(_)) => {
            match access.check_cluster(authz::table::SHARE_STATE_CLUSTER_ACTION) {
                Err(code) => crate::groups::share_refused(&req, code),
                Ok(()) => group_request(ctx, api_key, header, req).await?,
            }
        }
        req @ (RequestKind::ConsumerGroupHeartbeat(_)
        | RequestKind::ConsumerGroupDescribe(_)
        | RequestKind::ShareGroupHeartbeat(_)
        | RequestKind::ShareGroupDescribe(_)) => {
            if matches!(req, RequestKind::ShareGroupHeartbeat(_)) {
                // Kafka creates the share coordinator's topic when the first share group
                // starts (its persister's FindCoordinator).
                let topic = kmirror_control::metadata::SHARE_STATE_TOPIC;
                if let Err((code, msg)) = ctx.ensure_internal_topic(topic).await {
                    tracing::warn!(topic, code, %msg, "cannot record the internal topic");
                }
            }
            match authz::before_group_api(access, v, req) {
                Err(refused) => refused,
                Ok((req, patch)) => {
                    let Some(groups) = ctx.groups() else {
                        return Err(ConnError::Protocol(format!(
                            "{api_key:?}: no group coordinator"
                        )));
                    };
                    let meta = ctx.meta();
                    let topics = crate::groups::topic_view(&meta);
                    let configs = crate::groups::group_configs_view(&meta);
                    let resp = groups
                        .handle_with_topics(api_key, v, header, req, Some(topics), Some(configs))
                        .await;
                    authz::after_group_api(access, patch, resp)
                }
            }
        }
        RequestKind::DescribeTopicPartitions(r) => ResponseKind::DescribeTopicPartitions(
            handlers::describe::describe_topic_partitions(ctx, access, r),
        ),
        RequestKind::DescribeLogDirs(r) => ResponseKind::DescribeLogDirs(
            handlers::describe::describe_log_dirs(ctx, access, v, r).await,
        ),
        RequestKind::AlterReplicaLogDirs(r) => ResponseKind::AlterReplicaLogDirs(
            handlers::describe::alter_replica_log_dirs(ctx, access, r).await,
        ),
        RequestKind::ListConfigResources(r) => ResponseKind::ListConfigResources(
            handlers::configs::list_config_resources(ctx, access, v, r),
        ),
        RequestKind::DescribeProducers(r) => ResponseKind::DescribeProducers(
            handlers::describe::describe_producers(ctx, access, r).await,
        ),
        RequestKind::WriteTxnMarkers(r) => ResponseKind::WriteTxnMarkers(
            crate::txn_markers::write_txn_markers(ctx, access, r).await,
        ),
        RequestKind::DescribeQuorum(r) => ResponseKind::DescribeQuorum(
            handlers::quorum::describe_quorum(ctx, access, header.client_id.as_deref(), v, r).await,
        ),
        RequestKind::UnregisterBroker(r) => ResponseKind::UnregisterBroker(
            handlers::quorum::unregister_broker(ctx, access, r).await,
        ),
        RequestKind::AddRaftVoter(r) => {
            ResponseKind::AddRaftVoter(handlers::quorum::add_raft_voter(ctx, access, r).await)
        }
        RequestKind::RemoveRaftVoter(r) => {
            ResponseKind::RemoveRaftVoter(handlers::quorum::remove_raft_voter(ctx, access, r).await)
        }
        RequestKind::ElectLeaders(r) => ResponseKind::ElectLeaders(
            handlers::admin::elect_leaders_replicated(ctx, access, v, r).await,
        ),
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            handlers::admin::alter_partition_reassignments(ctx, access, r).await,
        ),
        RequestKind::ListPartitionReassignments(r) => ResponseKind::ListPartitionReassignments(
            handlers::admin::list_partition_reassignments(ctx, access, r),
        ),
        RequestKind::DescribeTransactions(mut r) => {
            // DESCRIBE on each id; the refused ones are answered here, in request order.
            let ids = std::mem::take(&mut r.transactional_ids);
            let (allowed, denied): (Vec<_>, Vec<_>) = ids
                .into_iter()
                .partition(|id| access.allows(authz::table::DESCRIBE_TXN, id));
            r.transactional_ids = allowed;
            let mut resp =
                match group_request(ctx, api_key, header, RequestKind::DescribeTransactions(r))
                    .await?
                {
                    ResponseKind::DescribeTransactions(d) => d,
                    _ => unreachable!("checked by group_request"),
                };
            let code = crate::errors::authorization_failed(
                kmirror_control::authz::resource::TRANSACTIONAL_ID,
            );
            resp.transaction_states.extend(denied.into_iter().map(|id| {
                kafka_protocol::messages::describe_transactions_response::TransactionState::default(
                )
                .with_error_code(code)
                .with_transactional_id(id)
            }));
            ResponseKind::DescribeTransactions(resp)
        }
        RequestKind::ListTransactions(r) => {
            // Only the ids the principal may describe are listed.
            match group_request(ctx, api_key, header, RequestKind::ListTransactions(r)).await? {
                ResponseKind::ListTransactions(mut l) => {
                    l.transaction_states
                        .retain(|t| access.allows(authz::table::DESCRIBE_TXN, &t.transactional_id));
                    ResponseKind::ListTransactions(l)
                }
                _ => unreachable!("checked by group_request"),
            }
        }
        req if versions::is_group_api(api_key) => match authz::before_group_api(access, v, req) {
            Err(refused) => refused,
            Ok((req, patch)) => {
                let (req, unknown) = handlers::offset_commit::split_unknown(ctx, req);
                let resp = if handlers::offset_commit::is_empty_commit(&req) && !unknown.is_empty()
                {
                    ResponseKind::OffsetCommit(Default::default())
                } else {
                    group_request(ctx, api_key, header, req).await?
                };
                let resp = handlers::offset_commit::merge(resp, unknown);
                authz::after_group_api(access, patch, advertise_coordinator(ctx, session, resp))
            }
        },
        _ => return Err(ConnError::Protocol(format!("{api_key:?} is not handled"))),
    };
    Ok(Some(resp))
}

/// The ACL APIs answer SECURITY_DISABLED on a broker without an authorizer, as Kafka's do
/// (kafka-acls then says "No Authorizer is configured"); otherwise the principal needs the
/// API's operation on the cluster.
fn acl_access(ctx: &Ctx, access: &authz::Access<'_>, need: authz::Need) -> Result<(), i16> {
    if !ctx.authz().enabled() {
        return Err(crate::keys::error::SECURITY_DISABLED);
    }
    access.check_cluster(need)
}

/// The coordinator (this broker) is advertised at the endpoint of the listener the client
/// came in through: FindCoordinator's answer is in the coordinator's own (first listener's)
/// terms.
fn advertise_coordinator(ctx: &Ctx, session: &Session, resp: ResponseKind) -> ResponseKind {
    let cfg = &ctx.config();
    let (host, port) = cfg.advertised(&session.listener);
    if (host, port) == (cfg.host.as_str(), cfg.port) {
        return resp;
    }
    match resp {
        ResponseKind::FindCoordinator(mut f) => {
            let ours = |node: i32, code: i16| code == 0 && node == cfg.node_id;
            if f.coordinators.is_empty() && ours(f.node_id.0, f.error_code) {
                f.host = handlers::s(host);
                f.port = port;
            }
            for c in f.coordinators.iter_mut() {
                if ours(c.node_id.0, c.error_code) {
                    c.host = handlers::s(host);
                    c.port = port;
                }
            }
            ResponseKind::FindCoordinator(f)
        }
        other => other,
    }
}

async fn group_request(
    ctx: &Ctx,
    api_key: ApiKey,
    header: &RequestHeader,
    req: RequestKind,
) -> Result<ResponseKind, ConnError> {
    let v = header.request_api_version;
    let Some(groups) = ctx.groups() else {
        return Err(ConnError::Protocol(format!(
            "{api_key:?}: no group coordinator"
        )));
    };
    if let RequestKind::FindCoordinator(f) = &req {
        // Kafka creates its internal topic on the first lookup of a coordinator of its kind.
        let topic = match f.key_type {
            0 => Some("__consumer_offsets"),
            1 => Some("__transaction_state"),
            _ => None,
        };
        if let Some(topic) = topic {
            if let Err((code, msg)) = ctx.ensure_internal_topic(topic).await {
                tracing::warn!(topic, code, %msg, "cannot record the internal topic");
            }
        }
    }
    // Classic members of consumer groups are assigned by the coordinator, by topic name.
    let topics = matches!(
        req,
        RequestKind::JoinGroup(_) | RequestKind::SyncGroup(_) | RequestKind::LeaveGroup(_)
    )
    .then(|| crate::groups::topic_view(&ctx.meta()));
    let resp = groups
        .handle_with_topics(api_key, v, header, req, topics, None)
        .await;
    if !response_matches(api_key, &resp) {
        return Err(ConnError::Protocol(format!(
            "group coordinator answered {api_key:?} with another response type"
        )));
    }
    Ok(resp)
}

fn response_matches(api_key: ApiKey, resp: &ResponseKind) -> bool {
    use ResponseKind as R;
    matches!(
        (api_key, resp),
        (ApiKey::OffsetCommit, R::OffsetCommit(_))
            | (ApiKey::OffsetFetch, R::OffsetFetch(_))
            | (ApiKey::FindCoordinator, R::FindCoordinator(_))
            | (ApiKey::JoinGroup, R::JoinGroup(_))
            | (ApiKey::Heartbeat, R::Heartbeat(_))
            | (ApiKey::LeaveGroup, R::LeaveGroup(_))
            | (ApiKey::SyncGroup, R::SyncGroup(_))
            | (ApiKey::DescribeGroups, R::DescribeGroups(_))
            | (ApiKey::ListGroups, R::ListGroups(_))
            | (ApiKey::InitProducerId, R::InitProducerId(_))
            | (ApiKey::AddPartitionsToTxn, R::AddPartitionsToTxn(_))
            | (ApiKey::AddOffsetsToTxn, R::AddOffsetsToTxn(_))
            | (ApiKey::EndTxn, R::EndTxn(_))
            | (ApiKey::TxnOffsetCommit, R::TxnOffsetCommit(_))
            | (ApiKey::DeleteGroups, R::DeleteGroups(_))
            | (ApiKey::OffsetDelete, R::OffsetDelete(_))
            | (ApiKey::ConsumerGroupHeartbeat, R::ConsumerGroupHeartbeat(_))
            | (ApiKey::ConsumerGroupDescribe, R::ConsumerGroupDescribe(_))
            | (ApiKey::ShareGroupHeartbeat, R::ShareGroupHeartbeat(_))
            | (ApiKey::ShareGroupDescribe, R::ShareGroupDescribe(_))
            | (
                ApiKey::InitializeShareGroupState,
                R::InitializeShareGroupState(_)
            )
            | (ApiKey::ReadShareGroupState, R::ReadShareGroupState(_))
            | (ApiKey::WriteShareGroupState, R::WriteShareGroupState(_))
            | (ApiKey::DeleteShareGroupState, R::DeleteShareGroupState(_))
            | (
                ApiKey::ReadShareGroupStateSummary,
                R::ReadShareGroupStateSummary(_)
            )
            | (ApiKey::DescribeTransactions, R::DescribeTransactions(_))
            | (ApiKey::ListTransactions, R::ListTransactions(_))
    )
}
