//! The server side of each SASL mechanism — PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802 /
//! 7677) and OAUTHBEARER (RFC 7628) — run by rsasl's server sessions. This module owns the
//! rsasl configuration: the callback answering from the credential store and deciding each
//! exchange (the user, a token's expiry), the per-connection [`Exchange`], and the mapping of
//! rsasl's outcomes to the messages Kafka sends with SASL_AUTHENTICATION_FAILED.
//!
//! Credentials come from the [`ScramRegistry`] snapshot (a lock-free load); SCRAM and
//! OAUTHBEARER steps do not block. PLAIN costs one PBKDF2 derivation per attempt (the store
//! never holds the password): its one-step session runs on the blocking thread pool
//! ([`Server::plain`]). Tokens are checked against a JWKS file with `jsonwebtoken`.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation as JwtValidation};
use kmirror_control::scram::{ScramMechanism, ScramRegistry};
use rsasl::callback::{Context, Request, SessionCallback, SessionData};
use rsasl::mechanisms::oauthbearer::properties::OAuthBearerValidate;
use rsasl::mechanisms::scram::properties::ScramStoredPassword;
use rsasl::prelude::{
    Mechanism as RsaslMechanism, Mechname, Registry, SASLConfig, SASLServer, Session, SessionError,
    State, Validation,
};
use rsasl::property::{AuthId, AuthzId, OAuthBearerToken, Password};
use rsasl::validate::{Validate, ValidationError};

/// A mechanism this broker can enable (`sasl_mechanisms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
    OAuthBearer,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// Parses a mechanism name as Kafka spells it (case-sensitive there; we accept any case).
    pub fn parse(s: &str) -> Option<Mechanism> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("PLAIN") {
            Some(Mechanism::Plain)
        } else if s.eq_ignore_ascii_case("OAUTHBEARER") {
            Some(Mechanism::OAuthBearer)
        } else {
            ScramMechanism::from_name(s).map(Mechanism::Scram)
        }
    }

    /// Malformed input: the message Kafka's server for this mechanism would give.
    fn malformed(self, why: impl std::fmt::Display) -> AuthFailure {
        AuthFailure(match self {
            Mechanism::Plain => format!("Invalid SASL/PLAIN response: {why}"),
            Mechanism::Scram(_) => format!("Invalid {} message: {why}", self.name()),
            Mechanism::OAuthBearer => format!("OAUTHBEARER: {why}"),
        })
    }
}

/// The message Kafka sends for any credential failure (it does not say which part was wrong).
pub fn invalid_credentials(m: Mechanism) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        m.name()
    )
}

const DIFFERENT_AUTHZID: &str =
    "Authentication failed: Client requested an authorization id that is different from username";

/// One step's outcome.
#[derive(Debug)]
pub enum Step {
    /// Send these bytes and wait for the client's next message.
    Challenge(Vec<u8>),
    /// Authenticated as `user`; send `response` (possibly empty). `expires_at_ms`: the
    /// credential's own expiry (a token's `exp`), in Unix ms.
    Done {
        user: String,
        response: Vec<u8>,
        expires_at_ms: Option<i64>,
    },
}

/// A failed exchange: the message goes to the client with SASL_AUTHENTICATION_FAILED. Also
/// what the callback hands rsasl to abort an exchange with that message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthFailure(pub String);

/// What the callback decides for a successful exchange (rsasl's validation value).
#[derive(Debug)]
pub struct Authenticated {
    user: String,
    expires_at_ms: Option<i64>,
}

/// rsasl's validation type of a broker session: [`Authenticated`].
pub struct KafkaAuth;
impl Validation for KafkaAuth {
    type Value = Authenticated;
}

/// The rsasl server configuration shared by every connection.
#[derive(Clone)]
pub struct Server {
    config: Arc<SASLConfig>,
}

impl Server {
    pub fn new(
        scram: Arc<ScramRegistry>,
        oauth: Option<OAuthValidator>,
    ) -> Result<Server, super::SaslError> {
        // An explicit registry: features enabled elsewhere on the shared rsasl crate must not
        // add mechanisms (or their -PLUS variants, which change SCRAM's GS2 handling) here.
        static MECHANISMS: &[RsaslMechanism] = &[
            rsasl::mechanisms::scram::SCRAM_SHA512,
            rsasl::mechanisms::scram::SCRAM_SHA256,
            rsasl::mechanisms::plain::PLAIN,
            rsasl::mechanisms::oauthbearer::OAUTHBEARER,
        ];
        let config = SASLConfig::builder()
            .with_registry(Registry::with_mechanisms(MECHANISMS))
            .with_callback(Callback {
                scram,
                oauth: oauth.map(Arc::new),
            })
            .map_err(|e| super::SaslError::Config(format!("SASL server: {e}")))?;
        Ok(Server { config })
    }

    fn session(&self, m: Mechanism) -> Result<Session<KafkaAuth>, AuthFailure> {
        let name = Mechname::parse(m.name().as_bytes()).map_err(|e| m.malformed(e))?;
        SASLServer::<KafkaAuth>::new(self.config.clone())
            .start_suggested(name)
            .map_err(|e| AuthFailure(format!("{}: {e}", m.name())))
    }

    /// A whole PLAIN exchange (one message). Derives a key: run it off the engine cores.
    pub fn plain(&self, input: &[u8]) -> Result<Step, AuthFailure> {
        let mut session = self.session(Mechanism::Plain)?;
        run(&mut session, Mechanism::Plain, input)
    }
}

/// A per-connection exchange in progress.
pub enum Exchange {
    /// PLAIN has a single message; its session lives on the blocking pool ([`Server::plain`]).
    Plain(Server),
    Session {
        mechanism: Mechanism,
        session: Box<Session<KafkaAuth>>,
        /// Messages received so far (SCRAM's shape check differs for the first).
        received: u8,
    },
    Failed(AuthFailure),
}

impl Exchange {
    pub fn start(server: &Server, m: Mechanism) -> Exchange {
        match m {
            Mechanism::Plain => Exchange::Plain(server.clone()),
            _ => match server.session(m) {
                Ok(session) => Exchange::Session {
                    mechanism: m,
                    session: Box::new(session),
                    received: 0,
                },
                Err(e) => Exchange::Failed(e),
            },
        }
    }

    /// One client message. PLAIN derives a key here: the broker calls [`Server::plain`] on
    /// the blocking pool instead.
    pub fn step(&mut self, input: &[u8]) -> Result<Step, AuthFailure> {
        match self {
            Exchange::Plain(server) => server.plain(input),
            Exchange::Session {
                mechanism,
                session,
                received,
            } => {
                *received = received.saturating_add(1);
                if let Mechanism::Scram(_) = mechanism {
                    check_scram_shape(*mechanism, input, *received == 1)?;
                }
                run(session, *mechanism, input)
            }
            Exchange::Failed(e) => Err(e.clone()),
        }
    }
}

/// Feeds one message to rsasl and reads the outcome.
fn run(session: &mut Session<KafkaAuth>, m: Mechanism, input: &[u8]) -> Result<Step, AuthFailure> {
    let mut out = Vec::new();
    // Input is the peer's: a panic in a parser must fail this exchange, not the core.
    let state = std::panic::catch_unwind(AssertUnwindSafe(|| session.step(Some(input), &mut out)))
        .map_err(|_| m.malformed("unparseable message"))?
        .map_err(|e| failure(m, e))?;
    if matches!(state, State::Running) {
        return Ok(Step::Challenge(out));
    }
    match session.validation() {
        Some(a) => Ok(Step::Done {
            user: a.user,
            response: out,
            expires_at_ms: a.expires_at_ms,
        }),
        // Finished without a validation: SCRAM's server-final error (`e=invalid-proof`, …),
        // which Kafka reports as a failure rather than sending.
        None => Err(match out.strip_prefix(b"e=") {
            Some(b"invalid-proof") | Some(b"unknown-user") | None => {
                AuthFailure(invalid_credentials(m))
            }
            Some(e) => m.malformed(String::from_utf8_lossy(e)),
        }),
    }
}

/// Our callback's [`AuthFailure`] comes back as is; rsasl's own errors are malformed input.
fn failure(m: Mechanism, e: SessionError) -> AuthFailure {
    let ours = match &e {
        SessionError::Boxed(b) => b.downcast_ref::<AuthFailure>(),
        SessionError::ValidationError(ValidationError::Boxed(b)) => b.downcast_ref::<AuthFailure>(),
        _ => None,
    };
    match (ours, &e) {
        (Some(f), _) => f.clone(),
        (None, SessionError::MechanismError(why)) => m.malformed(why),
        (None, _) => m.malformed(e),
    }
}

/// rsasl 2.3's SCRAM parser slices attributes without checking their length (it panics on
/// `n,,n` or a trailing comma): only messages of the form `[gs2-header] key=value,…` reach
/// it. It also ignores client-first extensions, so Kafka's delegation-token one
/// (`tokenauth=true`) is refused here, as a broker without delegation tokens does.
fn check_scram_shape(m: Mechanism, input: &[u8], first: bool) -> Result<(), AuthFailure> {
    let text = std::str::from_utf8(input).map_err(|_| m.malformed("not UTF-8"))?;
    let attrs = if first {
        let mut it = text.splitn(3, ',');
        let (Some(_), Some(authz), Some(bare)) = (it.next(), it.next(), it.next()) else {
            return Err(m.malformed("no GS2 header"));
        };
        if !authz.is_empty() && !authz.starts_with("a=") {
            return Err(m.malformed("invalid authorization id"));
        }
        bare
    } else {
        text
    };
    for attr in attrs.split(',') {
        if attr.find('=').is_none_or(|i| i == 0) {
            return Err(m.malformed("malformed attribute"));
        }
        if first && attr == "tokenauth=true" {
            return Err(AuthFailure(
                "Delegation token authentication is not supported".into(),
            ));
        }
    }
    Ok(())
}

/// `saslname` unescaping (RFC 5802 §5.1): `=2C` is ',' and `=3D` is '='.
fn unescape_name(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// Answers rsasl's questions from the credential store and the JWKS, and decides each
/// exchange in `validate`.
struct Callback {
    scram: Arc<ScramRegistry>,
    oauth: Option<Arc<OAuthValidator>>,
}

fn mechanism_of(session_data: &SessionData) -> Option<Mechanism> {
    Mechanism::parse(session_data.mechanism().mechanism.as_str())
}

/// The SCRAM user (rsasl hands over the escaped `saslname`), refusing an authzid that is
/// not the user, as Kafka does.
fn scram_user(m: Mechanism, context: &Context<'_>) -> Result<String, AuthFailure> {
    let raw = context
        .get_ref::<AuthId>()
        .ok_or_else(|| m.malformed("missing user name or nonce"))?;
    let user = unescape_name(raw).ok_or_else(|| m.malformed("invalid user name"))?;
    if context.get_ref::<AuthzId>().is_some_and(|a| a != user) {
        return Err(AuthFailure(DIFFERENT_AUTHZID.into()));
    }
    Ok(user)
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Callback {
    fn decide(&self, m: Mechanism, context: &Context<'_>) -> Result<Authenticated, AuthFailure> {
        match m {
            // rsasl checked the proof against the stored key.
            Mechanism::Scram(_) => Ok(Authenticated {
                user: scram_user(m, context)?,
                expires_at_ms: None,
            }),
            // Checked against the SCRAM-SHA-512 credential, else the SCRAM-SHA-256 one.
            Mechanism::Plain => {
                let user = context
                    .get_ref::<AuthId>()
                    .ok_or_else(|| m.malformed("expected 3 tokens"))?;
                if context
                    .get_ref::<AuthzId>()
                    .is_some_and(|a| !a.is_empty() && a != user)
                {
                    return Err(AuthFailure(DIFFERENT_AUTHZID.into()));
                }
                let password = context
                    .get_ref::<Password>()
                    .and_then(|p| std::str::from_utf8(p).ok());
                let ok = password.is_some_and(|pw| {
                    [ScramMechanism::Sha512, ScramMechanism::Sha256]
                        .into_iter()
                        .find_map(|s| self.scram.lookup(user, s).map(|c| (s, c)))
                        .is_some_and(|(s, c)| c.matches_password(s, pw))
                });
                if !ok {
                    return Err(AuthFailure(invalid_credentials(m)));
                }
                Ok(Authenticated {
                    user: user.to_string(),
                    expires_at_ms: None,
                })
            }
            Mechanism::OAuthBearer => {
                let Some(v) = &self.oauth else {
                    return Err(AuthFailure("OAUTHBEARER is not configured".into()));
                };
                let auth = context
                    .get_ref::<OAuthBearerToken>()
                    .ok_or_else(|| m.malformed("no bearer token"))?;
                v.check(auth, unix_ms())
            }
        }
    }
}

impl SessionCallback for Callback {
    fn callback(
        &self,
        session_data: &SessionData,
        context: &Context<'_>,
        request: &mut Request<'_>,
    ) -> Result<(), SessionError> {
        let abort = |f: AuthFailure| SessionError::Boxed(Box::new(f));
        if request.is::<ScramStoredPassword<'static>>() {
            let Some(m @ Mechanism::Scram(s)) = mechanism_of(session_data) else {
                return Ok(());
            };
            let user = scram_user(m, context).map_err(abort)?;
            // Kafka fails an unknown user at once (rsasl would answer a made-up salt).
            let Some(c) = self.scram.lookup(&user, s) else {
                return Err(abort(AuthFailure(invalid_credentials(m))));
            };
            let iterations = u32::try_from(c.iterations).unwrap_or(0);
            request.satisfy::<ScramStoredPassword<'static>>(&ScramStoredPassword::new(
                iterations,
                &c.salt,
                &c.stored_key,
                &c.server_key,
            ))?;
        } else if request.is::<OAuthBearerValidate>() {
            // The message parsed; the token is judged in `validate`, which also yields the
            // principal and expiry. A bad token fails the exchange at once there (58, then
            // close) rather than through RFC 7628's error-then-%x01 round trip.
            request.satisfy::<OAuthBearerValidate>(&Ok(()))?;
        }
        Ok(())
    }

    fn validate(
        &self,
        session_data: &SessionData,
        context: &Context<'_>,
        validate: &mut Validate<'_>,
    ) -> Result<(), ValidationError> {
        let Some(m) = mechanism_of(session_data) else {
            return Err(ValidationError::MissingRequiredProperty);
        };
        let outcome = self
            .decide(m, context)
            .map_err(|f| ValidationError::Boxed(Box::new(f)))?;
        validate.finalize::<KafkaAuth>(outcome);
        Ok(())
    }
}

/// OAUTHBEARER settings (`sasl_oauthbearer_*`).
#[derive(Debug, Clone, Default)]
pub struct OAuthSettings {
    pub jwks_file: Option<std::path::PathBuf>,
    pub expected_issuer: Option<String>,
    pub expected_audience: Option<String>,
}

/// Validates bearer tokens: signature by a key of the JWKS file (by `kid`, else any key),
/// `exp` (30 s clock skew, Kafka's default), issuer and audience when configured; the
/// principal is the `sub` claim (Kafka's default `sasl.oauthbearer.sub.claim.name`).
pub struct OAuthValidator {
    keys: Vec<(Option<String>, Option<Algorithm>, DecodingKey)>,
    issuer: Option<String>,
    audience: Option<String>,
}

impl OAuthValidator {
    pub fn load(jwks: &Path, settings: &OAuthSettings) -> Result<OAuthValidator, super::SaslError> {
        Self::load_keys(jwks, settings).map_err(super::SaslError::Config)
    }

    fn load_keys(jwks: &Path, settings: &OAuthSettings) -> Result<OAuthValidator, String> {
        let text = std::fs::read_to_string(jwks)
            .map_err(|e| format!("cannot read JWKS {}: {e}", jwks.display()))?;
        let set: JwkSet = serde_json::from_str(&text)
            .map_err(|e| format!("JWKS {} is invalid: {e}", jwks.display()))?;
        let mut keys = Vec::new();
        for k in &set.keys {
            let dk = DecodingKey::from_jwk(k)
                .map_err(|e| format!("JWKS {}: unusable key: {e}", jwks.display()))?;
            let alg = k
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<Algorithm>().ok());
            keys.push((k.common.key_id.clone(), alg, dk));
        }
        if keys.is_empty() {
            return Err(format!("JWKS {} has no keys", jwks.display()));
        }
        Ok(OAuthValidator {
            keys,
            issuer: settings.expected_issuer.clone(),
            audience: settings.expected_audience.clone(),
        })
    }

    /// Checks the `auth` value of an OAUTHBEARER message (`Bearer <JWT>`).
    fn check(&self, auth: &str, now_ms: i64) -> Result<Authenticated, AuthFailure> {
        let bad = |why: String| AuthFailure(format!("OAUTHBEARER: {why}"));
        let Some(token) = auth
            .strip_prefix("Bearer ")
            .or_else(|| auth.strip_prefix("bearer "))
        else {
            return Err(bad("no bearer token".into()));
        };
        let header = jsonwebtoken::decode_header(token.trim())
            .map_err(|e| bad(format!("invalid token: {e}")))?;
        if matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        ) {
            return Err(bad("symmetric token algorithms are not accepted".into()));
        }
        let candidates = self.keys.iter().filter(|(kid, alg, _)| {
            (header.kid.is_none() || kid.is_none() || *kid == header.kid)
                && alg.is_none_or(|a| a == header.alg)
        });
        let mut validation = JwtValidation::new(header.alg);
        validation.leeway = 30;
        validation.set_required_spec_claims(&["exp", "sub"]);
        match &self.issuer {
            Some(i) => validation.set_issuer(&[i]),
            None => validation.iss = None,
        }
        match &self.audience {
            Some(a) => validation.set_audience(&[a]),
            None => validation.validate_aud = false,
        }
        let mut last = "no key of the JWKS matches the token".to_string();
        for (_, _, key) in candidates {
            match jsonwebtoken::decode::<serde_json::Value>(token.trim(), key, &validation) {
                Ok(data) => {
                    let claims = data.claims;
                    let Some(sub) = claims.get("sub").and_then(|s| s.as_str()) else {
                        return Err(bad("the token has no sub claim".into()));
                    };
                    let exp_ms = claims
                        .get("exp")
                        .and_then(|e| e.as_f64())
                        .map(|e| (e * 1000.0) as i64);
                    if exp_ms.is_some_and(|e| e + 30_000 <= now_ms) {
                        return Err(bad("the token expired".into()));
                    }
                    return Ok(Authenticated {
                        user: sub.to_string(),
                        expires_at_ms: exp_ms,
                    });
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(bad(format!("invalid token: {last}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine as _;
    use kmirror_control::scram::ScramChange;
    use std::collections::HashMap;

    fn server(dir: &Path) -> Server {
        server_with(
            dir,
            b"salt-salt-salt",
            "alice",
            "secret",
            ScramMechanism::Sha512,
            4096,
        )
    }

    fn server_with(
        dir: &Path,
        salt: &[u8],
        user: &str,
        pw: &str,
        m: ScramMechanism,
        iterations: i32,
    ) -> Server {
        let reg = ScramRegistry::open(dir).unwrap();
        let r = reg.alter(&[ScramChange::Upsert {
            user: user.into(),
            mechanism: m.code(),
            iterations,
            salted_password: m.salted_password(pw.as_bytes(), salt, iterations as u32),
            salt: salt.to_vec(),
        }]);
        assert!(r[0].1.is_ok());
        Server::new(Arc::new(reg), None).unwrap()
    }

    /// A client side of SCRAM written from the RFC, to drive the server.
    fn client_nonce(
        mech: ScramMechanism,
        user: &str,
        pw: &str,
        nonce: &str,
        ex: &mut Exchange,
    ) -> Result<Step, AuthFailure> {
        let first_bare = format!("n={user},r={nonce}");
        let Step::Challenge(sf) = ex.step(format!("n,,{first_bare}").as_bytes())? else {
            panic!("expected a challenge");
        };
        let sf = String::from_utf8(sf).unwrap();
        let attrs: HashMap<&str, &str> = sf.split(',').filter_map(|a| a.split_once('=')).collect();
        assert!(attrs["r"].starts_with(nonce), "{sf}");
        let salt = B64.decode(attrs["s"]).unwrap();
        let it: u32 = attrs["i"].parse().unwrap();
        let salted = mech.salted_password(pw.as_bytes(), &salt, it);
        let ck = mech.hmac(&salted, b"Client Key");
        let sk = mech.hash(&ck);
        let wp = format!("c=biws,r={}", attrs["r"]);
        let am = format!("{first_bare},{sf},{wp}");
        let sig = mech.hmac(&sk, am.as_bytes());
        let proof: Vec<u8> = ck.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let out = ex.step(format!("{wp},p={}", B64.encode(proof)).as_bytes())?;
        if let Step::Done { response, .. } = &out {
            let server_key = mech.hmac(&salted, b"Server Key");
            let want = format!("v={}", B64.encode(mech.hmac(&server_key, am.as_bytes())));
            assert_eq!(String::from_utf8_lossy(response), want);
        }
        Ok(out)
    }

    fn client(
        mech: ScramMechanism,
        user: &str,
        pw: &str,
        ex: &mut Exchange,
    ) -> Result<Step, AuthFailure> {
        client_nonce(mech, user, pw, "clientnonce", ex)
    }

    #[test]
    fn scram_accepts_the_right_password_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let srv = server(dir.path());
        let m = ScramMechanism::Sha512;
        let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
        match client(m, "alice", "secret", &mut ex).unwrap() {
            Step::Done { user, .. } => assert_eq!(user, "alice"),
            s => panic!("{s:?}"),
        }
        let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
        let e = client(m, "alice", "wrong", &mut ex).unwrap_err();
        assert_eq!(e.0, invalid_credentials(Mechanism::Scram(m)));
        // An unknown user fails at the first message, as Kafka's server does.
        let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
        let e = ex.step(b"n,,n=mallory,r=abc").unwrap_err();
        assert_eq!(e.0, invalid_credentials(Mechanism::Scram(m)));
        // No SCRAM-SHA-256 credential for alice.
        let m2 = ScramMechanism::Sha256;
        let mut ex = Exchange::start(&srv, Mechanism::Scram(m2));
        assert!(client(m2, "alice", "secret", &mut ex).is_err());
        // An authzid other than the user.
        let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
        let e = ex.step(b"n,a=bob,n=alice,r=abc").unwrap_err();
        assert_eq!(e.0, DIFFERENT_AUTHZID);
        let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
        assert!(matches!(
            ex.step(b"n,a=alice,n=alice,r=abc"),
            Ok(Step::Challenge(_))
        ));
    }

    /// RFC 7677's SCRAM-SHA-256 example (user "user", password "pencil", its salt and client
    /// nonce) through the rsasl server; the server nonce is random, so the proof is the RFC's
    /// computation over this exchange.
    #[test]
    fn scram_sha_256_follows_the_rfc_7677_example() {
        let dir = tempfile::tempdir().unwrap();
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let m = ScramMechanism::Sha256;
        let srv = server_with(dir.path(), &salt, "user", "pencil", m, 4096);
        let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
        let Step::Challenge(sf) = ex.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap() else {
            panic!("expected a challenge");
        };
        let sf = String::from_utf8(sf).unwrap();
        assert!(sf.starts_with("r=rOprNGfwEbeRWgbNEkqO"), "{sf}");
        assert!(sf.ends_with(",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"), "{sf}");
        let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
        match client_nonce(m, "user", "pencil", "rOprNGfwEbeRWgbNEkqO", &mut ex).unwrap() {
            Step::Done { user, .. } => assert_eq!(user, "user"),
            s => panic!("{s:?}"),
        }
        let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
        assert!(client_nonce(m, "user", "pencil2", "rOprNGfwEbeRWgbNEkqO", &mut ex).is_err());
    }

    #[test]
    fn malformed_scram_messages_fail_without_panicking() {
        let dir = tempfile::tempdir().unwrap();
        let srv = server(dir.path());
        let m = ScramMechanism::Sha512;
        for first in [
            &b""[..],
            b"n",
            b"n,",
            b"n,,",
            b"n,,n",
            b"n,a,n=alice,r=x",
            b"n,,n=alice",
            b"n,,n=alice,r",
            b"n,,n=alice,r=x,",
            b"x,,n=alice,r=x",
            b"p=tls-unique,,n=alice,r=x",
            b"n,,n=alice,r=x,tokenauth=true",
            b"n,,n=al=ice,r=x",
            b"\xff\xfe",
        ] {
            let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
            assert!(
                ex.step(first).is_err(),
                "{:?}",
                String::from_utf8_lossy(first)
            );
        }
        for last in [
            &b""[..],
            b"c",
            b"c=biws",
            b"c=biws,r",
            b"c=biws,r=x,p=AAAA,",
            b"c=biws,r=x,p",
            b"c=biws,r=x,p=!!",
            b"c=eSws,r=x,p=AAAA",
        ] {
            let mut ex = Exchange::start(&srv, Mechanism::Scram(m));
            assert!(matches!(
                ex.step(b"n,,n=alice,r=abc"),
                Ok(Step::Challenge(_))
            ));
            assert!(
                ex.step(last).is_err(),
                "{:?}",
                String::from_utf8_lossy(last)
            );
        }
    }

    #[test]
    fn plain_checks_the_password_against_the_scram_credential() {
        let dir = tempfile::tempdir().unwrap();
        let srv = server(dir.path());
        let mut ex = Exchange::start(&srv, Mechanism::Plain);
        assert!(matches!(
            ex.step(b"\0alice\0secret"),
            Ok(Step::Done { ref user, .. }) if user == "alice"
        ));
        assert!(matches!(
            ex.step(b"alice\0alice\0secret"),
            Ok(Step::Done { .. })
        ));
        assert_eq!(
            ex.step(b"\0alice\0nope").unwrap_err().0,
            invalid_credentials(Mechanism::Plain)
        );
        assert_eq!(
            ex.step(b"bob\0alice\0secret").unwrap_err().0,
            DIFFERENT_AUTHZID
        );
        assert!(ex.step(b"alice\0secret").is_err());
        assert!(ex.step(b"\0\0secret").is_err());
        assert!(ex.step(b"\0mallory\0secret").is_err());
    }

    #[test]
    fn saslnames_unescape() {
        assert_eq!(unescape_name("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
        assert_eq!(unescape_name("bad=2"), None);
    }
}
