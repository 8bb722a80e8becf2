//! SASL authentication of connections on SASL_PLAINTEXT / SASL_SSL listeners (KIP-43, KIP-152
//! framing, KIP-368 re-authentication), and the SCRAM credential APIs (`credentials`).
//!
//! Each connection holds a [`ConnAuth`]; the connection loop asks it about every frame before
//! anything else ([`ConnAuth::gate`]). On a SASL listener, until authentication succeeds only
//! ApiVersions, SaslHandshake and SaslAuthenticate are served: any other request closes the
//! connection unanswered (as Kafka does). A failed authentication is answered with
//! SASL_AUTHENTICATION_FAILED and the connection is closed. SaslHandshake v0 switches the
//! connection to the legacy framing (raw SASL tokens, no Kafka header) for the exchange.
//!
//! A successful authentication may carry a session lifetime: the smaller of
//! `connections_max_reauth_ms` and the credential's expiry (a token's `exp`). SaslAuthenticate
//! v1+ tells the client, which re-authenticates in time (SaslHandshake + SaslAuthenticate on
//! the same connection, the same principal); a request arriving after the session expired
//! closes the connection.
//!
//! Failures are counted in the broker metrics and logged at most once per peer IP per minute
//! per core, so a password-guessing client cannot flood the log.

pub mod credentials;
pub mod mechanisms;

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use kmirror_control::scram::{ScramError, ScramMechanism, ScramRegistry};

use mechanisms::{Exchange, OAuthValidator, Server, Step};
pub use mechanisms::{Mechanism, OAuthSettings};

use crate::broker::Ctx;
use crate::errors;
use crate::frame::header_prefix;
use crate::session::{Principal, Session};

/// Errors setting SASL up.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SaslError {
    #[error("SCRAM credentials: {0}")]
    Scram(#[from] ScramError),
    #[error("SASL configuration: {0}")]
    Config(String),
    #[error("unknown SASL mechanism \"{0}\" (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)")]
    UnknownMechanism(String),
}

/// The broker's SASL settings.
#[derive(Debug, Clone)]
pub struct SaslConfig {
    /// Enabled mechanisms, in the order SaslHandshake lists them.
    pub mechanisms: Vec<Mechanism>,
    pub oauth: OAuthSettings,
    /// `connections.max.reauth.ms`: 0 = sessions do not expire (unless their token does).
    pub reauth_ms: i64,
}

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig {
            mechanisms: vec![
                Mechanism::Scram(ScramMechanism::Sha512),
                Mechanism::Scram(ScramMechanism::Sha256),
            ],
            oauth: OAuthSettings::default(),
            reauth_ms: 0,
        }
    }
}

impl SaslConfig {
    /// Parses `sasl_mechanisms` ("SCRAM-SHA-512,PLAIN").
    pub fn parse_mechanisms(s: &str) -> Result<Vec<Mechanism>, SaslError> {
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let m = Mechanism::parse(name)
                .ok_or_else(|| SaslError::UnknownMechanism(name.to_owned()))?;
            if !out.contains(&m) {
                out.push(m);
            }
        }
        Ok(out)
    }
}

/// SASL state shared by all cores: settings, the credential store, the token validator.
pub struct Sasl {
    pub config: SaslConfig,
    pub scram: Arc<ScramRegistry>,
    /// rsasl's server configuration (its callback reads `scram` and the token validator).
    server: Server,
}

impl Sasl {
    /// An empty credential registry (the Raft driver publishes the quorum's credentials into
    /// it) and the JWKS if OAUTHBEARER is enabled.
    pub fn open(config: SaslConfig) -> Result<Sasl, SaslError> {
        let scram = Arc::new(ScramRegistry::empty());
        let oauth = if config.mechanisms.contains(&Mechanism::OAuthBearer) {
            let Some(jwks) = &config.oauth.jwks_file else {
                return Err(SaslError::Config(
                    "OAUTHBEARER needs sasl_oauthbearer_jwks_file".into(),
                ));
            };
            Some(OAuthValidator::load(jwks, &config.oauth)?)
        } else {
            None
        };
        let server = Server::new(scram.clone(), oauth)?;
        Ok(Sasl {
            config,
            scram,
            server,
        })
    }

    fn enabled_names(&self) -> Vec<StrBytes> {
        self.config
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect()
    }
}

enum Stage {
    /// Nothing yet (or, after a success, between re-authentications).
    Idle,
    /// SaslHandshake accepted; SaslAuthenticate frames (or raw tokens: `legacy`) follow.
    Exchanging {
        mechanism: Mechanism,
        exchange: Exchange,
        legacy: bool,
    },
}

/// What the connection loop does with a frame.
#[derive(Debug)]
pub enum Gate {
    /// Serve it as usual.
    Serve,
    /// Send this (length-prefixed) frame and carry on.
    Reply(Bytes),
    /// Send this frame, then close the connection.
    ReplyThenClose(Bytes),
    /// Close the connection without an answer.
    Close(String),
}

/// One connection's authentication state.
pub struct ConnAuth {
    sasl_listener: bool,
    stage: Stage,
    /// The authenticated user and mechanism, once authenticated.
    authenticated: Option<(String, Mechanism)>,
    /// When the session expires (None: never).
    expires_at: Option<Instant>,
}

impl ConnAuth {
    pub fn new(session: &Session) -> ConnAuth {
        ConnAuth {
            sasl_listener: session.protocol.uses_sasl(),
            stage: Stage::Idle,
            authenticated: None,
            expires_at: None,
        }
    }

    /// Decides what happens to `frame` (without its length prefix); handles the SASL requests
    /// themselves and updates the session's principal on success.
    pub async fn gate(&mut self, ctx: &Ctx, session: &mut Session, frame: &Bytes) -> Gate {
        let sasl = &ctx.sasl();
        if let Stage::Exchanging { legacy: true, .. } = self.stage {
            return self.legacy_token(ctx, session, frame).await;
        }
        if frame.len() < 8 {
            // Too short for a header: the normal path closes it as malformed.
            return Gate::Serve;
        }
        let p = header_prefix(frame);
        let key = ApiKey::try_from(p.api_key).ok();
        let now = Instant::now();
        let sasl_request = matches!(
            key,
            Some(ApiKey::SaslHandshake) | Some(ApiKey::SaslAuthenticate)
        );
        if let (true, Some(k)) = (sasl_request, key) {
            ctx.metrics().count_request(k);
        }
        if self.expires_at.is_some_and(|t| now >= t) && !sasl_request {
            return Gate::Close("the SASL session expired without re-authentication".into());
        }
        match key {
            Some(ApiKey::SaslHandshake) => self.handshake(ctx, sasl, frame),
            Some(ApiKey::SaslAuthenticate) => self.authenticate(ctx, session, frame).await,
            Some(ApiKey::ApiVersions) if !matches!(self.stage, Stage::Exchanging { .. }) => {
                Gate::Serve
            }
            _ if !self.sasl_listener => Gate::Serve,
            _ if self.authenticated.is_some() && matches!(self.stage, Stage::Idle) => Gate::Serve,
            _ => Gate::Close(format!(
                "api key {} before SASL authentication completed",
                p.api_key
            )),
        }
    }

    fn handshake(&mut self, ctx: &Ctx, sasl: &Sasl, frame: &Bytes) -> Gate {
        let Some((header, RequestKind::SaslHandshake(req))) = decode(ApiKey::SaslHandshake, frame)
        else {
            return Gate::Close("malformed SaslHandshake".into());
        };
        let v = header.request_api_version;
        let answer = |code: i16, names: Vec<StrBytes>| {
            encode(
                ApiKey::SaslHandshake,
                v,
                header.correlation_id,
                &ResponseKind::SaslHandshake(
                    SaslHandshakeResponse::default()
                        .with_error_code(code)
                        .with_mechanisms(names),
                ),
            )
        };
        if !self.sasl_listener {
            // Kafka answers ILLEGAL_SASL_STATE on listeners without SASL.
            return reply(answer(errors::code(E::IllegalSaslState), Vec::new()));
        }
        if matches!(self.stage, Stage::Exchanging { .. }) {
            return reply_close(answer(errors::code(E::IllegalSaslState), Vec::new()));
        }
        let wanted = req.mechanism.as_str();
        let Some(m) = sasl
            .config
            .mechanisms
            .iter()
            .copied()
            .find(|m| m.name() == wanted)
        else {
            ctx.metrics()
                .sasl_authentication_failures
                .fetch_add(1, Relaxed);
            return reply_close(answer(
                errors::code(E::UnsupportedSaslMechanism),
                sasl.enabled_names(),
            ));
        };
        if let Some((_, prev)) = &self.authenticated {
            if *prev != m {
                // KIP-368: a re-authentication keeps the mechanism.
                return reply_close(answer(
                    errors::code(E::IllegalSaslState),
                    sasl.enabled_names(),
                ));
            }
        }
        self.stage = Stage::Exchanging {
            mechanism: m,
            exchange: Exchange::start(&sasl.server, m),
            legacy: v == 0,
        };
        reply(answer(errors::NONE, sasl.enabled_names()))
    }

    async fn authenticate(&mut self, ctx: &Ctx, session: &mut Session, frame: &Bytes) -> Gate {
        let Some((header, RequestKind::SaslAuthenticate(req))) =
            decode(ApiKey::SaslAuthenticate, frame)
        else {
            return Gate::Close("malformed SaslAuthenticate".into());
        };
        let v = header.request_api_version;
        let answer = |r: SaslAuthenticateResponse| {
            encode(
                ApiKey::SaslAuthenticate,
                v,
                header.correlation_id,
                &ResponseKind::SaslAuthenticate(r),
            )
        };
        let illegal = |msg: &str| {
            answer(
                SaslAuthenticateResponse::default()
                    .with_error_code(errors::code(E::IllegalSaslState))
                    .with_error_message(Some(StrBytes::from_string(msg.into()))),
            )
        };
        if !self.sasl_listener
            || (self.authenticated.is_some() && matches!(self.stage, Stage::Idle))
        {
            return reply(illegal(
                "SaslAuthenticate request received after successful authentication",
            ));
        }
        if !matches!(self.stage, Stage::Exchanging { .. }) {
            // Kafka closes without an answer here.
            return Gate::Close("SaslAuthenticate before SaslHandshake".into());
        }
        match self.step(ctx, session, &req.auth_bytes).await {
            Ok(Stepped::Challenge(bytes)) => reply(answer(
                SaslAuthenticateResponse::default().with_auth_bytes(bytes.into()),
            )),
            Ok(Stepped::Done {
                response,
                lifetime_ms,
            }) => {
                let mut r = SaslAuthenticateResponse::default().with_auth_bytes(response.into());
                if v >= 1 {
                    r = r.with_session_lifetime_ms(lifetime_ms);
                }
                reply(answer(r))
            }
            Err(msg) => reply_close(answer(
                SaslAuthenticateResponse::default()
                    .with_error_code(errors::code(E::SaslAuthenticationFailed))
                    .with_error_message(Some(StrBytes::from_string(msg))),
            )),
        }
    }

    /// After SaslHandshake v0 the exchange travels as raw size-prefixed tokens.
    async fn legacy_token(&mut self, ctx: &Ctx, session: &mut Session, frame: &Bytes) -> Gate {
        match self.step(ctx, session, frame).await {
            Ok(Stepped::Challenge(b)) | Ok(Stepped::Done { response: b, .. }) => {
                reply(raw_frame(&b))
            }
            Err(msg) => Gate::Close(msg),
        }
    }

    /// Runs one exchange step; on success records the principal and the session expiry, on
    /// failure counts and (rate-limited) logs it. `Err`: the message for the client.
    async fn step(
        &mut self,
        ctx: &Ctx,
        session: &mut Session,
        input: &[u8],
    ) -> Result<Stepped, String> {
        let Stage::Exchanging {
            mechanism,
            exchange,
            ..
        } = &mut self.stage
        else {
            return Err("no SASL exchange in progress".into());
        };
        let mechanism = *mechanism;
        let sasl = &ctx.sasl();
        let out = match exchange {
            // PLAIN derives the password's keys (PBKDF2, up to 16384 rounds): off the core.
            Exchange::Plain(server) => {
                let server = server.clone();
                let input = input.to_vec();
                glommio::executor()
                    .spawn_blocking(move || server.plain(&input))
                    .await
            }
            ex => ex.step(input),
        };
        let now_ms = unix_ms();
        let fail = |msg: String| {
            ctx.metrics()
                .sasl_authentication_failures
                .fetch_add(1, Relaxed);
            log_failure(session, mechanism, &msg);
            Err(msg)
        };
        match out {
            Ok(Step::Challenge(b)) => Ok(Stepped::Challenge(b)),
            Ok(Step::Done {
                user,
                response,
                expires_at_ms,
            }) => {
                if let Some((prev, _)) = &self.authenticated {
                    if *prev != user {
                        self.stage = Stage::Idle;
                        return fail(format!(
                            "Cannot change principals during re-authentication from User:{prev} to User:{user}"
                        ));
                    }
                }
                let reauth = sasl.config.reauth_ms;
                let lifetime_ms = match (reauth > 0, expires_at_ms) {
                    (false, None) => 0,
                    (true, None) => reauth,
                    (false, Some(e)) => (e - now_ms).max(0),
                    (true, Some(e)) => reauth.min(e - now_ms).max(0),
                };
                self.expires_at = (lifetime_ms > 0 || expires_at_ms.is_some())
                    .then(|| Instant::now() + Duration::from_millis(lifetime_ms as u64));
                ctx.metrics().sasl_authentications.fetch_add(1, Relaxed);
                tracing::debug!(peer = ?session.peer, user, mechanism = mechanism.name(), lifetime_ms, "authenticated");
                session.principal = Principal::user(user.clone());
                session.authenticated = true;
                self.authenticated = Some((user, mechanism));
                self.stage = Stage::Idle;
                Ok(Stepped::Done {
                    response,
                    lifetime_ms,
                })
            }
            Err(e) => {
                self.stage = Stage::Idle;
                fail(e.0)
            }
        }
    }
}

enum Stepped {
    Challenge(Vec<u8>),
    Done { response: Vec<u8>, lifetime_ms: i64 },
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One log line per peer IP per minute (per core): failures are counted, not echoed.
fn log_failure(session: &Session, mechanism: Mechanism, msg: &str) {
    const INTERVAL: Duration = Duration::from_secs(60);
    thread_local! {
        static LAST: RefCell<HashMap<Option<IpAddr>, (Instant, u64)>> = RefCell::new(HashMap::new());
    }
    let ip = session.peer.map(|p| p.ip());
    let now = Instant::now();
    let emit = LAST.with(|l| {
        let mut l = l.borrow_mut();
        if l.len() > 10_000 {
            l.retain(|_, (t, _)| now.duration_since(*t) < INTERVAL);
        }
        let e = l.entry(ip).or_insert((now - INTERVAL * 2, 0));
        if now.duration_since(e.0) >= INTERVAL {
            let suppressed = e.1;
            *e = (now, 0);
            Some(suppressed)
        } else {
            e.1 += 1;
            None
        }
    });
    if let Some(suppressed) = emit {
        tracing::warn!(
            peer = ?ip,
            listener = %session.listener,
            mechanism = mechanism.name(),
            suppressed_since_last = suppressed,
            error = msg,
            "SASL authentication failed"
        );
    }
}

fn decode(
    key: ApiKey,
    frame: &Bytes,
) -> Option<(kafka_protocol::messages::RequestHeader, RequestKind)> {
    let p = header_prefix(frame);
    let range = crate::versions::served_range(key)?;
    if p.api_version < range.min || p.api_version > range.max {
        return None;
    }
    crate::server::decode_request(key, p.api_version, frame.clone()).ok()
}

fn encode(key: ApiKey, version: i16, correlation_id: i32, resp: &ResponseKind) -> Option<Bytes> {
    crate::server::encode_response(key, version, correlation_id, resp).ok()
}

fn reply(b: Option<Bytes>) -> Gate {
    match b {
        Some(b) => Gate::Reply(b),
        None => Gate::Close("cannot encode a SASL response".into()),
    }
}

fn reply_close(b: Option<Bytes>) -> Gate {
    match b {
        Some(b) => Gate::ReplyThenClose(b),
        None => Gate::Close("cannot encode a SASL response".into()),
    }
}

fn raw_frame(b: &[u8]) -> Option<Bytes> {
    let mut out = BytesMut::with_capacity(4 + b.len());
    out.put_i32(b.len() as i32);
    out.put_slice(b);
    Some(out.freeze())
}
