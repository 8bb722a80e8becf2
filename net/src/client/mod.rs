//! kmirror's Kafka client: one stack ([`Connection`]) for every connection a node or the CLI
//! opens to a Kafka listener. The async users run on the cores (mirror fetchers, fetch
//! sessions, metadata sync, the replica fetchers, inter-broker requests: glommio); the
//! blocking ones on plain threads (admin CLI, demo, dry runs, tests: std::net). TLS, framing ([`codec`]), ApiVersions, SASL, version
//! choice and correlation ids are written once, generic over a [`Transport`]; the transports
//! only open a TCP stream, bound an exchange in time and sleep. [`BlockingConnection`] drives
//! the same async code to completion on the calling thread (its transport never returns
//! `Pending`, so no executor or waker is involved). Must not depend on the broker: it is a
//! client (the engine, the server and the coordinators stay out of it).
//!
//! One connection = one broker, requests sent one at a time (a fetcher keeps one request in
//! flight per source broker; the CLI is sequential), so responses are matched to requests by
//! correlation id without a pending map. On connect the client runs ApiVersions and then picks,
//! per request, the highest version both sides support, optionally capped by the caller.
//! Standard APIs use kafka-protocol's message types; the mirror crate sends the KIP-1279
//! mirror APIs, whose codec it owns, through [`Connection::exchange_frame`].
//!
//! Security ([`security::ClientSecurity`]): TLS (futures-rustls over either
//! transport) wraps the TCP stream before ApiVersions; SASL runs after it (SaslHandshake v1,
//! then SaslAuthenticate rounds from the sans-io exchange). A broker-set session lifetime
//! (KIP-368) is remembered: [`Connection::session_expiring`] tells the owner to replace the
//! connection before the broker would close it.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures_lite::future::block_on;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, RequestHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, Request, StrBytes};

use rustls::pki_types::ServerName;

pub mod security;

use self::security::{reauth_after, ClientSecurity, SaslExchange};
use crate::keys;

/// Largest response frame accepted (a Fetch response is bounded by fetch.max.bytes).
pub const MAX_FRAME: usize = 256 * 1024 * 1024;

/// Client-side failures.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connection to {addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("request to {addr} timed out")]
    Timeout { addr: String },
    #[error("encode/decode failed: {0}")]
    Codec(String),
    #[error("broker {addr} does not support {api} (key {key}) in a usable version")]
    UnsupportedApi {
        addr: String,
        api: &'static str,
        key: i16,
    },
    #[error("response correlation id {got} does not match request {expected}")]
    CorrelationMismatch { expected: i32, got: i32 },
    #[error("response frame of {0} bytes exceeds the limit")]
    FrameTooLarge(usize),
    #[error("{api} failed: {} ({}){}", keys::error::name(code.code()), code.code(), message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        api: &'static str,
        code: kmirror_types::ErrorCode,
        message: Option<String>,
    },
    /// The connection's security settings cannot be used (bad server name, token file gone).
    #[error("security settings for {addr}: {reason}")]
    Security { addr: String, reason: String },
}

impl ClientError {
    /// Errors after which the connection must be dropped and re-established.
    pub fn is_connection_fatal(&self) -> bool {
        matches!(
            self,
            ClientError::Io { .. }
                | ClientError::Timeout { .. }
                | ClientError::CorrelationMismatch { .. }
                | ClientError::FrameTooLarge(_)
                | ClientError::Codec(_)
        )
    }

    /// Authentication (SASL) or authorization failures: retrying the same request with the
    /// same credentials will not help; an operator must change something.
    pub fn is_auth_failure(&self) -> bool {
        use keys::error as e;
        match self {
            ClientError::Kafka { code, .. } => matches!(
                code.code(),
                e::SASL_AUTHENTICATION_FAILED
                    | e::UNSUPPORTED_SASL_MECHANISM
                    | e::ILLEGAL_SASL_STATE
                    | e::TOPIC_AUTHORIZATION_FAILED
                    | e::GROUP_AUTHORIZATION_FAILED
                    | e::CLUSTER_AUTHORIZATION_FAILED
            ),
            ClientError::Security { .. } => true,
            // A TLS handshake failure (untrusted certificate, client certificate refused).
            ClientError::Io { source, .. } => source
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
            _ => false,
        }
    }
}

/// Supported version ranges of a broker, from ApiVersions.
#[derive(Debug, Clone, Default)]
pub struct BrokerVersions {
    pub apis: BTreeMap<i16, (i16, i16)>,
    /// Finalized feature levels (e.g. `mirror.version`).
    pub features: BTreeMap<String, i16>,
}

impl BrokerVersions {
    pub fn from_response(r: &ApiVersionsResponse) -> Self {
        BrokerVersions {
            apis: r
                .api_keys
                .iter()
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect(),
            features: r
                .finalized_features
                .iter()
                .map(|f| (f.name.to_string(), f.max_version_level))
                .collect(),
        }
    }

    /// Highest version in `ours ∩ theirs ∩ [min_needed, cap]`.
    pub fn pick(&self, key: i16, ours: (i16, i16), min_needed: i16, cap: i16) -> Option<i16> {
        let (tmin, tmax) = *self.apis.get(&key)?;
        let lo = ours.0.max(tmin).max(min_needed);
        let hi = ours.1.min(tmax).min(cap);
        (lo <= hi).then_some(hi)
    }

    /// Whether the broker accepts the mirror APIs (advertises CreateMirror and, when the
    /// feature is advertised, at a level > 0).
    pub fn supports_mirroring(&self) -> bool {
        self.apis.contains_key(&keys::api::CREATE_MIRROR)
            && self
                .features
                .get(keys::feature::MIRROR_VERSION)
                .is_none_or(|l| *l > keys::feature::DISABLED)
    }
}

/// Frame encoding/decoding shared by the async and blocking connections.
pub mod codec {
    use super::*;

    /// Size-prefixed request frame for a standard API.
    pub fn encode_request<R: Request>(
        req: &R,
        version: i16,
        correlation_id: i32,
        client_id: &str,
    ) -> Result<Bytes, ClientError> {
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header
            .encode(&mut buf, R::header_version(version))
            .map_err(|e| ClientError::Codec(e.to_string()))?;
        req.encode(&mut buf, version)
            .map_err(|e| ClientError::Codec(format!("{}: {e}", std::any::type_name::<R>())))?;
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        Ok(buf.freeze())
    }

    /// Decode a response frame (without its size prefix) for a standard API.
    pub fn decode_response<R: Request>(
        mut frame: Bytes,
        version: i16,
        correlation_id: i32,
    ) -> Result<R::Response, ClientError> {
        let hv = <R::Response as HeaderVersion>::header_version(version);
        let header = kafka_protocol::messages::ResponseHeader::decode(&mut frame, hv)
            .map_err(|e| ClientError::Codec(e.to_string()))?;
        if header.correlation_id != correlation_id {
            return Err(ClientError::CorrelationMismatch {
                expected: correlation_id,
                got: header.correlation_id,
            });
        }
        <R::Response as Decodable>::decode(&mut frame, version)
            .map_err(|e| ClientError::Codec(format!("{}: {e}", std::any::type_name::<R>())))
    }

    /// The ApiVersions request we send first (v3: flexible, with client software name).
    pub fn api_versions_request() -> (ApiVersionsRequest, i16) {
        (
            ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("kmirror"))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION"))),
            3,
        )
    }

    /// Parse the 4-byte frame length.
    pub fn frame_len(prefix: [u8; 4]) -> Result<usize, ClientError> {
        let n = i32::from_be_bytes(prefix);
        if n < 0 || n as usize > MAX_FRAME {
            return Err(ClientError::FrameTooLarge(n as usize));
        }
        Ok(n as usize)
    }
}

fn versions_of<R: Message>() -> (i16, i16) {
    (R::VERSIONS.min, R::VERSIONS.max)
}

fn api_name<R>() -> &'static str {
    let full = std::any::type_name::<R>();
    full.rsplit("::").next().unwrap_or(full)
}

/// An I/O failure during an exchange: a missed deadline (or socket timeout) is a
/// [`ClientError::Timeout`], anything else [`ClientError::Io`]. The only place the two are told
/// apart, for both transports.
fn exchange_error(addr: &str, source: io::Error) -> ClientError {
    match source.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ClientError::Timeout {
            addr: addr.to_owned(),
        },
        _ => ClientError::Io {
            addr: addr.to_owned(),
            source,
        },
    }
}

/// The TLS settings of one connection: client config and server name.
type TlsTarget = (Arc<rustls::ClientConfig>, ServerName<'static>);

/// What a [`Connection`] needs from its runtime: a TCP stream, optionally secured with TLS, a
/// deadline and a sleep. Implemented by glommio's TCP stream (fetchers, sessions, metadata
/// sync) and std's (CLI, demo, dry runs, tests); everything above the byte stream (framing,
/// ApiVersions, SASL, version choice, correlation ids) is [`Connection`]'s, written once.
///
/// TLS is the transport's because the two runtimes need different drivers for the same
/// rustls session: futures-rustls reads until the socket reports "would block", which a
/// blocking socket only does at its timeout (a TLS 1.3 handshake would stall there), so the
/// blocking transport uses rustls' own blocking stream.
#[allow(async_fn_in_trait)]
pub trait Transport: Sized {
    /// The (possibly TLS) byte stream requests are written to.
    type Io: AsyncRead + AsyncWrite + Unpin;
    /// Opens a TCP connection (no delay) within `timeout`.
    async fn open(addr: std::net::SocketAddr, timeout: Duration) -> io::Result<Self>;
    /// The stream as is, or after a TLS handshake (within `timeout`).
    async fn secure(self, tls: Option<TlsTarget>, timeout: Duration) -> io::Result<Self::Io>;
    /// Runs `f` within `deadline`; a missed deadline is an `io::ErrorKind::TimedOut` error.
    async fn within<T>(deadline: Duration, f: impl Future<Output = io::Result<T>>)
        -> io::Result<T>;
    /// Waits `d` (a blocking transport blocks the thread).
    async fn sleep(d: Duration);
}

/// The async stream: glommio TCP, or TLS (futures-rustls) over it.
pub enum GlommioIo {
    Plain(glommio::net::TcpStream),
    Tls(Box<futures_rustls::client::TlsStream<glommio::net::TcpStream>>),
}

impl AsyncRead for GlommioIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            GlommioIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            GlommioIo::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for GlommioIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            GlommioIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            GlommioIo::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            GlommioIo::Plain(s) => Pin::new(s).poll_flush(cx),
            GlommioIo::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            GlommioIo::Plain(s) => Pin::new(s).poll_close(cx),
            GlommioIo::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}

impl Transport for glommio::net::TcpStream {
    type Io = GlommioIo;

    async fn open(addr: std::net::SocketAddr, timeout: Duration) -> io::Result<Self> {
        let s = glommio::net::TcpStream::connect_timeout(addr, timeout).await?;
        s.set_nodelay(true)?;
        Ok(s)
    }

    async fn secure(self, tls: Option<TlsTarget>, timeout: Duration) -> io::Result<GlommioIo> {
        let Some((config, name)) = tls else {
            return Ok(GlommioIo::Plain(self));
        };
        let connect = futures_rustls::TlsConnector::from(config).connect(name, self);
        let s = Self::within(timeout, connect).await?;
        Ok(GlommioIo::Tls(Box::new(s)))
    }

    async fn within<T>(
        deadline: Duration,
        f: impl Future<Output = io::Result<T>>,
    ) -> io::Result<T> {
        let f = async { f.await.map_err(glommio::GlommioError::<()>::IoError) };
        match glommio::timer::timeout(deadline, f).await {
            Ok(v) => Ok(v),
            Err(glommio::GlommioError::TimedOut(_)) => Err(io::ErrorKind::TimedOut.into()),
            Err(e) => Err(e.into()),
        }
    }

    async fn sleep(d: Duration) {
        glommio::timer::sleep(d).await
    }
}

/// The blocking stream: std TCP, or TLS (rustls' blocking stream) over it, as an always-ready
/// async stream. Every poll blocks the thread until the socket answers or its read/write
/// timeout (the connection timeout) runs out. Driven by `futures_lite::future::block_on`
/// ([`BlockingConnection`]), never on an executor that runs other tasks.
pub enum BlockingIo {
    Plain(std::net::TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>>),
}

impl BlockingIo {
    /// Runs a blocking operation as a poll that is always ready. A socket timeout shows up as
    /// `WouldBlock`, which async readers may take for "not ready yet": report it as `TimedOut`.
    /// `Interrupted` is retried, as std's `read_exact` would.
    fn ready<T>(mut op: impl FnMut() -> io::Result<T>) -> Poll<io::Result<T>> {
        loop {
            return Poll::Ready(match op() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    Err(io::Error::new(io::ErrorKind::TimedOut, e))
                }
                r => r,
            });
        }
    }

    fn stream(&mut self) -> &mut dyn ReadWrite {
        match self {
            BlockingIo::Plain(s) => s,
            BlockingIo::Tls(s) => &mut **s,
        }
    }
}

trait ReadWrite: io::Read + io::Write {}
impl<S: io::Read + io::Write> ReadWrite for S {}

impl AsyncRead for BlockingIo {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let s = self.get_mut().stream();
        Self::ready(|| s.read(buf))
    }
}

impl AsyncWrite for BlockingIo {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let s = self.get_mut().stream();
        Self::ready(|| s.write(buf))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let s = self.get_mut().stream();
        Self::ready(|| s.flush())
    }
    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let sock = match self.get_mut() {
            BlockingIo::Plain(s) => &*s,
            BlockingIo::Tls(s) => s.get_ref(),
        };
        Self::ready(|| sock.shutdown(std::net::Shutdown::Write))
    }
}

impl Transport for std::net::TcpStream {
    type Io = BlockingIo;

    async fn open(addr: std::net::SocketAddr, timeout: Duration) -> io::Result<Self> {
        let s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        s.set_nodelay(true)?;
        Ok(s)
    }

    /// The handshake runs here (not on the first request) so that its failures surface at
    /// connect, as on the async transport; the socket timeouts bound it.
    async fn secure(
        mut self,
        tls: Option<TlsTarget>,
        _timeout: Duration,
    ) -> io::Result<BlockingIo> {
        let Some((config, name)) = tls else {
            return Ok(BlockingIo::Plain(self));
        };
        let mut conn = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
        while conn.is_handshaking() {
            if let Poll::Ready(Err(e)) = BlockingIo::ready(|| conn.complete_io(&mut self)) {
                return Err(e);
            }
        }
        Ok(BlockingIo::Tls(Box::new(rustls::StreamOwned::new(
            conn, self,
        ))))
    }

    /// The socket timeouts bound each read and write; there is no deadline for the whole
    /// exchange (blocking callers never wait on the broker on purpose, e.g. a long Fetch).
    async fn within<T>(
        _deadline: Duration,
        f: impl Future<Output = io::Result<T>>,
    ) -> io::Result<T> {
        f.await
    }

    async fn sleep(d: Duration) {
        std::thread::sleep(d)
    }
}

/// One connection to one broker over transport `T`: TLS, ApiVersions, SASL, then requests at
/// negotiated versions, one at a time. Lives on one thread/executor.
pub struct Connection<T: Transport> {
    addr: String,
    stream: T::Io,
    next_correlation: i32,
    client_id: String,
    versions: BrokerVersions,
    timeout: Duration,
    reauth_at: Option<Instant>,
}

/// The async connection (glommio), for the users on the cores.
pub type AsyncConnection = Connection<glommio::net::TcpStream>;

impl<T: Transport> Connection<T> {
    /// Connect (PLAINTEXT) and negotiate versions.
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        Self::connect_secured(addr, client_id, timeout, &ClientSecurity::plaintext()).await
    }

    /// Connect with TLS and/or SASL as `security` says, then negotiate versions.
    pub async fn connect_secured(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<Self, ClientError> {
        use std::net::ToSocketAddrs;
        let io_err = |source| ClientError::Io {
            addr: addr.to_owned(),
            source,
        };
        let sa = addr
            .to_socket_addrs()
            .map_err(io_err)?
            .next()
            .ok_or_else(|| {
                io_err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "address did not resolve",
                ))
            })?;
        let tcp = T::open(sa, timeout).await.map_err(io_err)?;
        let stream = tcp
            .secure(security.tls_for(addr)?, timeout)
            .await
            .map_err(|e| exchange_error(addr, e))?;
        let mut c = Connection {
            addr: addr.to_owned(),
            stream,
            next_correlation: 1,
            client_id: client_id.to_owned(),
            versions: BrokerVersions::default(),
            timeout,
            reauth_at: None,
        };
        let (req, v) = codec::api_versions_request();
        // Not negotiated yet: ApiVersions goes at the version we chose.
        let resp = c.exchange(&req, v, Duration::ZERO).await?;
        if resp.error_code != 0 {
            return Err(ClientError::Kafka {
                api: "ApiVersions",
                code: resp.error_code.into(),
                message: None,
            });
        }
        c.versions = BrokerVersions::from_response(&resp);
        if let Some(mut ex) = security.sasl_exchange(addr)? {
            c.authenticate(&mut ex).await?;
        }
        Ok(c)
    }

    async fn authenticate(&mut self, ex: &mut SaslExchange) -> Result<(), ClientError> {
        let (_, hs) = self
            .send_with::<SaslHandshakeRequest>(&ex.handshake_request(), 1, 1, Duration::ZERO)
            .await?;
        ex.check_handshake(&hs)?;
        let mut req = ex.first()?;
        loop {
            let (_, resp) = self
                .send_with::<SaslAuthenticateRequest>(&req, 0, i16::MAX, Duration::ZERO)
                .await?;
            match ex.on_response(&resp)? {
                Some(next) => req = next,
                None => {
                    self.reauth_at =
                        reauth_after(resp.session_lifetime_ms).map(|d| Instant::now() + d);
                    return Ok(());
                }
            }
        }
    }

    /// Whether the broker's SASL session lifetime (KIP-368) is about to run out: the owner
    /// should replace this connection before its next request.
    pub fn session_expiring(&self) -> bool {
        self.reauth_at.is_some_and(|t| Instant::now() >= t)
    }

    pub fn versions(&self) -> &BrokerVersions {
        &self.versions
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The client id this connection sends in its request headers.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// Takes the next correlation id, for a request framed elsewhere (the mirror APIs) and
    /// sent with [`Self::exchange_frame`].
    pub fn take_correlation(&mut self) -> i32 {
        let c = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1);
        c
    }

    /// One request/response exchange with a deadline for the whole exchange. `extra`
    /// extends it (a Fetch legitimately waits `max_wait_ms` on the broker).
    async fn roundtrip(&mut self, frame: Bytes, extra: Duration) -> Result<Bytes, ClientError> {
        let stream = &mut self.stream;
        let fut = async move {
            stream.write_all(&frame).await?;
            // TLS buffers records until flushed.
            stream.flush().await?;
            let mut len = [0u8; 4];
            stream.read_exact(&mut len).await?;
            let n = match codec::frame_len(len) {
                Ok(n) => n,
                Err(e) => return Ok(Err(e)),
            };
            // Memory follows the bytes that arrive, not the announced length; the buffer
            // is reused once the response's last slice is dropped.
            Ok(Ok(crate::frame::read_body(stream, n).await?))
        };
        T::within(self.timeout + extra, fut)
            .await
            .map_err(|e| exchange_error(&self.addr, e))?
    }

    /// Send `req` at version `v` and decode the answer.
    async fn exchange<R: Request>(
        &mut self,
        req: &R,
        v: i16,
        extra_wait: Duration,
    ) -> Result<R::Response, ClientError> {
        let corr = self.take_correlation();
        let frame = codec::encode_request(req, v, corr, &self.client_id)?;
        let resp = self.roundtrip(frame, extra_wait).await?;
        codec::decode_response::<R>(resp, v, corr)
    }

    /// The best common version of `R` within `[min_needed, cap]`.
    fn pick<R: Request>(&self, min_needed: i16, cap: i16) -> Result<i16, ClientError> {
        self.versions
            .pick(R::KEY, versions_of::<R>(), min_needed, cap)
            .ok_or_else(|| ClientError::UnsupportedApi {
                addr: self.addr.clone(),
                api: api_name::<R>(),
                key: R::KEY,
            })
    }

    /// Send a standard request at the best common version within `[min_needed, cap]`;
    /// `extra_wait` extends the deadline (Fetch's max wait).
    pub async fn send_with<R: Request>(
        &mut self,
        req: &R,
        min_needed: i16,
        cap: i16,
        extra_wait: Duration,
    ) -> Result<(i16, R::Response), ClientError> {
        let v = self.pick::<R>(min_needed, cap)?;
        Ok((v, self.exchange(req, v, extra_wait).await?))
    }

    /// Like [`Self::send_with`], but the request is built for the negotiated version
    /// (kafka-protocol refuses fields a version does not have).
    pub async fn send_built<R: Request>(
        &mut self,
        min_needed: i16,
        cap: i16,
        extra_wait: Duration,
        build: impl FnOnce(i16) -> R,
    ) -> Result<(i16, R::Response), ClientError> {
        let v = self.pick::<R>(min_needed, cap)?;
        Ok((v, self.exchange(&build(v), v, extra_wait).await?))
    }

    /// Send a standard request at the best common version.
    pub async fn send<R: Request>(&mut self, req: &R) -> Result<R::Response, ClientError> {
        Ok(self
            .send_with(req, i16::MIN, i16::MAX, Duration::ZERO)
            .await?
            .1)
    }

    /// Sends a request frame built elsewhere (header and body, no size prefix: a request
    /// forwarded as is) and returns the response frame without its size prefix. The
    /// correlation id is the frame's own and is not checked.
    pub async fn exchange_frame(
        &mut self,
        frame: &[u8],
        extra: Duration,
    ) -> Result<Bytes, ClientError> {
        let mut out = BytesMut::with_capacity(frame.len() + 4);
        out.put_u32(frame.len() as u32);
        out.extend_from_slice(frame);
        self.roundtrip(out.freeze(), extra).await
    }
}

/// The blocking connection (std::net), for the admin CLI, the demo, dry runs and tests: a
/// [`Connection`] over std TCP ([`BlockingIo`]), each call driven to completion on the calling thread.
pub struct BlockingConnection(Connection<std::net::TcpStream>);

impl BlockingConnection {
    /// Connect (PLAINTEXT) and negotiate versions.
    pub fn connect(addr: &str, client_id: &str, timeout: Duration) -> Result<Self, ClientError> {
        Self::connect_secured(addr, client_id, timeout, &ClientSecurity::plaintext())
    }

    /// Connect with TLS and/or SASL as `security` says, then negotiate versions.
    pub fn connect_secured(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<Self, ClientError> {
        block_on(Connection::connect_secured(
            addr, client_id, timeout, security,
        ))
        .map(BlockingConnection)
    }

    /// The connection itself, for code written once against [`Connection`].
    pub fn get_mut(&mut self) -> &mut Connection<std::net::TcpStream> {
        &mut self.0
    }

    /// See [`Connection::session_expiring`].
    pub fn session_expiring(&self) -> bool {
        self.0.session_expiring()
    }

    pub fn versions(&self) -> &BrokerVersions {
        self.0.versions()
    }

    pub fn addr(&self) -> &str {
        self.0.addr()
    }

    /// Send a standard request at the best common version within `[min_needed, cap]`.
    pub fn send_with<R: Request>(
        &mut self,
        req: &R,
        min_needed: i16,
        cap: i16,
    ) -> Result<(i16, R::Response), ClientError> {
        block_on(self.0.send_with(req, min_needed, cap, Duration::ZERO))
    }

    /// Send a standard request at the best common version.
    pub fn send<R: Request>(&mut self, req: &R) -> Result<R::Response, ClientError> {
        block_on(self.0.send(req))
    }

    /// See [`Connection::send_built`].
    pub fn send_built<R: Request>(
        &mut self,
        min_needed: i16,
        cap: i16,
        build: impl FnOnce(i16) -> R,
    ) -> Result<(i16, R::Response), ClientError> {
        block_on(self.0.send_built(min_needed, cap, Duration::ZERO, build))
    }
}

/// Request builders for the APIs the mirror and replica paths use (versions are picked at send time; the
/// builders set every field any of those versions needs).
pub mod build {
    use kafka_protocol::messages::{
        describe_configs_request::DescribeConfigsResource,
        fetch_request::{FetchPartition, FetchTopic},
        list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic},
        metadata_request::MetadataRequestTopic,
        offset_fetch_request::OffsetFetchRequestGroup,
        offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic},
        BrokerId, DescribeConfigsRequest, FetchRequest, FindCoordinatorRequest, GroupId,
        ListGroupsRequest, ListOffsetsRequest, MetadataRequest, OffsetFetchRequest,
        OffsetForLeaderEpochRequest, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    use kmirror_types::{LeaderEpoch, Offset};
    use uuid::Uuid;

    /// `isolation_level` value for read_committed.
    pub const READ_COMMITTED: i8 = 1;
    /// ListOffsets timestamps.
    pub const EARLIEST: i64 = -2;
    pub const LATEST: i64 = -1;

    fn topic_name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_owned()))
    }

    /// Metadata for some topics (None = all topics).
    pub fn metadata(topics: Option<&[String]>) -> MetadataRequest {
        MetadataRequest::default()
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
                    .collect()
            }))
            .with_allow_auto_topic_creation(false)
    }

    /// One partition of a consumer Fetch.
    #[derive(Debug, Clone)]
    pub struct FetchPart {
        pub topic: String,
        pub topic_id: Uuid,
        pub partition: i32,
        pub fetch_offset: Offset,
        /// Source leader epoch we know ([`LeaderEpoch::UNKNOWN`] until learned).
        pub current_leader_epoch: LeaderEpoch,
        pub partition_max_bytes: i32,
    }

    /// A consumer Fetch (replica id -1, read_committed, no fetch session, last-fetched-epoch
    /// divergence checks off). Topic ids are sent (v13+) and names too (< v13).
    pub fn consumer_fetch(
        parts: &[FetchPart],
        max_wait_ms: i32,
        min_bytes: i32,
        max_bytes: i32,
        rack: &str,
    ) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for p in parts {
            let fp = FetchPartition::default()
                .with_partition(p.partition)
                .with_current_leader_epoch(p.current_leader_epoch.get())
                .with_fetch_offset(p.fetch_offset.get())
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(p.partition_max_bytes);
            match topics.iter_mut().find(|t| t.topic_id == p.topic_id) {
                Some(t) => t.partitions.push(fp),
                None => topics.push(
                    FetchTopic::default()
                        .with_topic(topic_name(&p.topic))
                        .with_topic_id(p.topic_id)
                        .with_partitions(vec![fp]),
                ),
            }
        }
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(min_bytes)
            .with_max_bytes(max_bytes)
            .with_isolation_level(READ_COMMITTED)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(topics)
            .with_rack_id(StrBytes::from_string(rack.to_owned()))
    }

    /// ListOffsets for one partition at `timestamp` (EARLIEST / LATEST / a time).
    pub fn list_offsets(
        topic: &str,
        partition: i32,
        timestamp: i64,
        current_leader_epoch: LeaderEpoch,
        read_committed: bool,
    ) -> ListOffsetsRequest {
        ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(if read_committed { READ_COMMITTED } else { 0 })
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(current_leader_epoch.get())
                    .with_timestamp(timestamp)])])
    }

    /// OffsetsForLeaderEpoch as a consumer (replica id -1): end offset of `leader_epoch`.
    pub fn offsets_for_leader_epoch(
        topic: &str,
        partition: i32,
        current_leader_epoch: LeaderEpoch,
        leader_epoch: LeaderEpoch,
    ) -> OffsetForLeaderEpochRequest {
        OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![OffsetForLeaderTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![OffsetForLeaderPartition::default()
                    .with_partition(partition)
                    .with_current_leader_epoch(current_leader_epoch.get())
                    .with_leader_epoch(leader_epoch.get())])])
    }

    /// DescribeConfigs of topics (resource type 2 = topic), all keys.
    pub fn describe_topic_configs(topics: &[String]) -> DescribeConfigsRequest {
        DescribeConfigsRequest::default().with_resources(
            topics
                .iter()
                .map(|t| {
                    DescribeConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_string(t.clone()))
                        .with_configuration_keys(None)
                })
                .collect(),
        )
    }

    /// ListGroups (all states and types).
    pub fn list_groups() -> ListGroupsRequest {
        ListGroupsRequest::default()
    }

    /// ListGroups of share groups only (the types filter needs v5).
    pub fn list_share_groups() -> ListGroupsRequest {
        ListGroupsRequest::default().with_types_filter(vec![StrBytes::from_static_str("share")])
    }

    /// DescribeShareGroupOffsets of one share group's every initialized partition.
    pub fn describe_share_group_offsets(
        group: &str,
    ) -> kafka_protocol::messages::DescribeShareGroupOffsetsRequest {
        use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
        kafka_protocol::messages::DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
                .with_topics(None),
        ])
    }

    /// OffsetFetch of all partitions of one group, in the layout of `version` (a single group
    /// before v8, the groups array from v8).
    pub fn offset_fetch(group: &str, version: i16) -> OffsetFetchRequest {
        let gid = GroupId(StrBytes::from_string(group.to_owned()));
        let req = OffsetFetchRequest::default().with_require_stable(version >= 7);
        if version >= 8 {
            req.with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(gid)
                .with_topics(None)])
        } else {
            req.with_group_id(gid).with_topics(None)
        }
    }

    /// FindCoordinator of a consumer group, in the layout of `version` (one key before v4, a
    /// key list from v4).
    pub fn find_group_coordinator(group: &str, version: i16) -> FindCoordinatorRequest {
        let key = StrBytes::from_string(group.to_owned());
        if version >= 4 {
            FindCoordinatorRequest::default().with_coordinator_keys(vec![key])
        } else {
            FindCoordinatorRequest::default().with_key(key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    use kmirror_types::{LeaderEpoch, Offset};

    /// A one-shot TLS peer on loopback (rustls server, certificate from rcgen) that answers
    /// the client's ApiVersions and then waits for the client to hang up; returns its
    /// address and the CA file the client must trust.
    fn tls_peer() -> (String, tempfile::NamedTempFile) {
        use std::io::{Read, Write};
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let mut ca = tempfile::NamedTempFile::new().unwrap();
        ca.write_all(ck.cert.pem().as_bytes()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.key_pair.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (sock, _) = listener.accept().unwrap();
            let conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, sock);
            let mut len = [0u8; 4];
            tls.read_exact(&mut len).unwrap();
            let mut req = vec![0u8; i32::from_be_bytes(len) as usize];
            tls.read_exact(&mut req).unwrap();
            let mut req = Bytes::from(req);
            let hdr = RequestHeader::decode(&mut req, 2).unwrap();
            assert_eq!(hdr.request_api_key, 18, "ApiVersions comes first");
            let resp = ApiVersionsResponse::default().with_api_keys(vec![
                kafka_protocol::messages::api_versions_response::ApiVersion::default()
                    .with_api_key(18)
                    .with_min_version(0)
                    .with_max_version(3),
            ]);
            let mut b = BytesMut::new();
            b.put_i32(0);
            kafka_protocol::messages::ResponseHeader::default()
                .with_correlation_id(hdr.correlation_id)
                .encode(&mut b, 0)
                .unwrap();
            resp.encode(&mut b, 3).unwrap();
            let n = (b.len() - 4) as i32;
            b[..4].copy_from_slice(&n.to_be_bytes());
            tls.write_all(&b).unwrap();
            tls.flush().unwrap();
            let _ = tls.read(&mut [0u8; 16]);
        });
        (addr, ca)
    }

    fn tls_security(ca: &tempfile::NamedTempFile) -> ClientSecurity {
        let props = [
            ("security.protocol", "SSL".to_string()),
            ("ssl.truststore.location", ca.path().display().to_string()),
            // The peer's certificate names localhost; we dial 127.0.0.1.
            ("ssl.endpoint.identification.algorithm", String::new()),
        ];
        ClientSecurity::from_properties(
            &props
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn blocking_transport_completes_a_tls_handshake_and_api_versions() {
        let (addr, ca) = tls_peer();
        let started = Instant::now();
        let c = BlockingConnection::connect_secured(
            &addr,
            "t",
            Duration::from_secs(5),
            &tls_security(&ca),
        )
        .expect("TLS connect");
        assert_eq!(c.versions().apis.get(&18), Some(&(0, 3)));
        // A handshake that stalls until the socket timeout would still succeed, but late.
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn async_transport_completes_a_tls_handshake_and_api_versions() {
        let (addr, ca) = tls_peer();
        let versions = glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let c = AsyncConnection::connect_secured(
                    &addr,
                    "t",
                    Duration::from_secs(5),
                    &tls_security(&ca),
                )
                .await
                .expect("TLS connect");
                c.versions().clone()
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(versions.apis.get(&18), Some(&(0, 3)));
    }

    #[test]
    fn a_silent_broker_is_a_timeout_not_a_hang() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let _keep = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let r = BlockingConnection::connect(&addr, "t", Duration::from_millis(300));
        assert!(
            matches!(r, Err(ClientError::Timeout { .. })),
            "{:?}",
            r.err()
        );
    }

    #[test]
    fn version_pick_takes_the_highest_common_version_within_bounds() {
        let mut v = BrokerVersions::default();
        v.apis.insert(1, (4, 17));
        assert_eq!(v.pick(1, (4, 18), i16::MIN, i16::MAX), Some(17));
        assert_eq!(v.pick(1, (4, 18), 13, 15), Some(15));
        assert_eq!(v.pick(1, (4, 12), 13, i16::MAX), None, "topic ids need v13");
        assert_eq!(
            v.pick(2, (0, 10), i16::MIN, i16::MAX),
            None,
            "not advertised"
        );
    }

    #[test]
    fn mirror_support_follows_the_feature_level() {
        let mut v = BrokerVersions::default();
        assert!(!v.supports_mirroring());
        v.apis.insert(keys::api::CREATE_MIRROR, (0, 0));
        assert!(v.supports_mirroring());
        v.features.insert("mirror.version".into(), 0);
        assert!(!v.supports_mirroring());
    }

    #[test]
    fn standard_request_frame_decodes_as_the_broker_would() {
        let req = build::metadata(Some(&["orders".to_string()]));
        let frame = codec::encode_request(&req, 12, 7, "kmirror-test").unwrap();
        let mut b = frame.clone();
        let len = b.get_i32() as usize;
        assert_eq!(len, b.remaining());
        let hdr = RequestHeader::decode(&mut b, MetadataRequest::header_version(12)).unwrap();
        assert_eq!((hdr.request_api_key, hdr.correlation_id), (3, 7));
        let back = MetadataRequest::decode(&mut b, 12).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn response_with_wrong_correlation_id_is_rejected() {
        let resp = MetadataResponse::default();
        let mut b = BytesMut::new();
        kafka_protocol::messages::ResponseHeader::default()
            .with_correlation_id(9)
            .encode(&mut b, MetadataResponse::header_version(12))
            .unwrap();
        resp.encode(&mut b, 12).unwrap();
        let frame = b.freeze();
        assert!(codec::decode_response::<MetadataRequest>(frame.clone(), 12, 9).is_ok());
        assert!(matches!(
            codec::decode_response::<MetadataRequest>(frame, 12, 10),
            Err(ClientError::CorrelationMismatch { .. })
        ));
    }

    #[test]
    fn builders_encode_at_every_version_the_mirror_paths_may_negotiate() {
        use kafka_protocol::messages::{
            FetchRequest, FindCoordinatorRequest, ListOffsetsRequest, OffsetFetchRequest,
            OffsetForLeaderEpochRequest,
        };
        fn enc<R: Request>(r: &R, v: i16) {
            codec::encode_request(r, v, 1, "t")
                .unwrap_or_else(|e| panic!("{} v{v}: {e}", std::any::type_name::<R>()));
        }
        for v in 1..=9 {
            enc::<OffsetFetchRequest>(&build::offset_fetch("g", v), v);
        }
        for v in 0..=6 {
            enc::<FindCoordinatorRequest>(&build::find_group_coordinator("g", v), v);
        }
        for v in 10..=13 {
            enc(&build::metadata(Some(&["t".to_string()])), v);
        }
        for v in 4..=10 {
            enc::<ListOffsetsRequest>(
                &build::list_offsets("t", 0, build::EARLIEST, LeaderEpoch(3), true),
                v,
            );
        }
        for v in 3..=4 {
            enc::<OffsetForLeaderEpochRequest>(
                &build::offsets_for_leader_epoch("t", 0, LeaderEpoch(3), LeaderEpoch(2)),
                v,
            );
        }
        let part = build::FetchPart {
            topic: "t".into(),
            topic_id: uuid::Uuid::from_bytes([1; 16]),
            partition: 0,
            fetch_offset: Offset(0),
            current_leader_epoch: LeaderEpoch::UNKNOWN,
            partition_max_bytes: 1024,
        };
        for v in 13..=18 {
            enc::<FetchRequest>(
                &build::consumer_fetch(std::slice::from_ref(&part), 500, 1, 1 << 20, ""),
                v,
            );
        }
    }

    #[test]
    fn consumer_fetch_uses_replica_minus_one_and_read_committed() {
        let id = uuid::Uuid::from_bytes([5; 16]);
        let parts = [0, 1].map(|p| build::FetchPart {
            topic: "orders".into(),
            topic_id: id,
            partition: p,
            fetch_offset: Offset(10),
            current_leader_epoch: LeaderEpoch::UNKNOWN,
            partition_max_bytes: 1 << 20,
        });
        let f = build::consumer_fetch(&parts, 500, 1, 50 << 20, "");
        assert_eq!(f.replica_id.0, -1);
        assert_eq!(f.isolation_level, 1);
        assert_eq!(f.topics.len(), 1, "partitions of one topic are grouped");
        assert_eq!(f.topics[0].partitions.len(), 2);
        assert!(f.topics[0]
            .partitions
            .iter()
            .all(|p| p.last_fetched_epoch == -1));
    }
}
