//! The server side of each SASL mechanism: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802 /
//! 7677, with Kafka's extension attributes) and OAUTHBEARER (RFC 7628, a JWT checked against a
//! JWKS file). Sans-io: each exchange takes the client's bytes and answers a challenge, a
//! success with the authenticated user, or a failure.
//!
//! Credentials come from the [`ScramRegistry`] snapshot (a lock-free load); nothing here
//! blocks. PLAIN costs one PBKDF2 derivation per attempt (the store never holds the password).

use std::collections::HashMap;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use kmirror_control::scram::{ScramMechanism, ScramRegistry};
use rand::distributions::Alphanumeric;
use rand::Rng;

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
}

/// The message Kafka sends for any credential failure (it does not say which part was wrong).
pub fn invalid_credentials(m: Mechanism) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        m.name()
    )
}

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

/// A failed exchange: the message goes to the client with SASL_AUTHENTICATION_FAILED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFailure(pub String);

/// A per-connection exchange in progress.
pub enum Exchange {
    Plain,
    Scram(ScramExchange),
    OAuthBearer,
}

impl Exchange {
    pub fn start(m: Mechanism) -> Exchange {
        match m {
            Mechanism::Plain => Exchange::Plain,
            Mechanism::Scram(s) => Exchange::Scram(ScramExchange {
                mech: s,
                state: ScramState::Initial,
            }),
            Mechanism::OAuthBearer => Exchange::OAuthBearer,
        }
    }

    pub fn step(
        &mut self,
        input: &[u8],
        scram: &ScramRegistry,
        oauth: Option<&OAuthValidator>,
        now_ms: i64,
    ) -> Result<Step, AuthFailure> {
        match self {
            Exchange::Plain => plain(input, scram),
            Exchange::Scram(s) => s.step(input, scram),
            Exchange::OAuthBearer => match oauth {
                Some(v) => v.step(input, now_ms),
                None => Err(AuthFailure("OAUTHBEARER is not configured".into())),
            },
        }
    }
}

/// PLAIN: `authzid NUL user NUL password`, checked against the SCRAM-SHA-512 credential, else
/// the SCRAM-SHA-256 one.
fn plain(input: &[u8], scram: &ScramRegistry) -> Result<Step, AuthFailure> {
    let fail = || AuthFailure(invalid_credentials(Mechanism::Plain));
    let text = std::str::from_utf8(input).map_err(|_| fail())?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthFailure(
            "Invalid SASL/PLAIN response: expected 3 tokens".into(),
        ));
    };
    if user.is_empty() {
        return Err(AuthFailure(
            "Authentication failed: username not specified".into(),
        ));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(AuthFailure(
            "Authentication failed: Client requested an authorization id that is different from username"
                .into(),
        ));
    }
    let ok = [ScramMechanism::Sha512, ScramMechanism::Sha256]
        .into_iter()
        .find_map(|m| scram.lookup(user, m).map(|c| (m, c)))
        .is_some_and(|(m, c)| c.matches_password(m, password));
    if !ok {
        return Err(fail());
    }
    Ok(Step::Done {
        user: user.to_string(),
        response: Vec::new(),
        expires_at_ms: None,
    })
}

pub struct ScramExchange {
    mech: ScramMechanism,
    state: ScramState,
}

enum ScramState {
    Initial,
    SentFirst {
        user: String,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
        gs2_header: String,
        client_first_bare: String,
        server_first: String,
        nonce: String,
    },
    Finished,
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

impl ScramExchange {
    fn step(&mut self, input: &[u8], scram: &ScramRegistry) -> Result<Step, AuthFailure> {
        let mech = Mechanism::Scram(self.mech);
        let bad = |why: &str| AuthFailure(format!("Invalid {} message: {why}", mech.name()));
        let text = std::str::from_utf8(input).map_err(|_| bad("not UTF-8"))?;
        match std::mem::replace(&mut self.state, ScramState::Finished) {
            ScramState::Initial => {
                // gs2-header = ("n" | "y" | "p=…") "," [ "a=" authzid ] ","
                let mut it = text.splitn(3, ',');
                let (Some(cb), Some(authz), Some(bare)) = (it.next(), it.next(), it.next()) else {
                    return Err(bad("no GS2 header"));
                };
                if cb != "n" && cb != "y" {
                    return Err(bad("channel binding is not supported"));
                }
                let mut user = None;
                let mut nonce = None;
                for attr in bare.split(',') {
                    if let Some(v) = attr.strip_prefix("n=") {
                        user = unescape_name(v);
                    } else if let Some(v) = attr.strip_prefix("r=") {
                        nonce = Some(v.to_string());
                    } else if attr == "tokenauth=true" {
                        return Err(AuthFailure(
                            "Delegation token authentication is not supported".into(),
                        ));
                    }
                    // Other extensions (key=value) are ignored, as Kafka does.
                }
                let (Some(user), Some(nonce)) = (user, nonce) else {
                    return Err(bad("missing user name or nonce"));
                };
                if !authz.is_empty() && authz.strip_prefix("a=") != Some(user.as_str()) {
                    return Err(AuthFailure(
                        "Authentication failed: Client requested an authorization id that is different from username"
                            .into(),
                    ));
                }
                let Some(cred) = scram.lookup(&user, self.mech) else {
                    return Err(AuthFailure(invalid_credentials(mech)));
                };
                let server_nonce: String = rand::thread_rng()
                    .sample_iter(&Alphanumeric)
                    .take(32)
                    .map(char::from)
                    .collect();
                let nonce = format!("{nonce}{server_nonce}");
                let server_first = format!(
                    "r={nonce},s={},i={}",
                    B64.encode(&cred.salt),
                    cred.iterations
                );
                self.state = ScramState::SentFirst {
                    user,
                    stored_key: cred.stored_key,
                    server_key: cred.server_key,
                    gs2_header: format!("{cb},{authz},"),
                    client_first_bare: bare.to_string(),
                    server_first: server_first.clone(),
                    nonce,
                };
                Ok(Step::Challenge(server_first.into_bytes()))
            }
            ScramState::SentFirst {
                user,
                stored_key,
                server_key,
                gs2_header,
                client_first_bare,
                server_first,
                nonce,
            } => {
                let Some((without_proof, proof)) = text.rsplit_once(",p=") else {
                    return Err(bad("no proof"));
                };
                let mut channel = None;
                let mut got_nonce = None;
                for attr in without_proof.split(',') {
                    if let Some(v) = attr.strip_prefix("c=") {
                        channel = Some(v);
                    } else if let Some(v) = attr.strip_prefix("r=") {
                        got_nonce = Some(v);
                    }
                }
                if channel != Some(B64.encode(gs2_header.as_bytes()).as_str()) {
                    return Err(bad("channel binding does not match the GS2 header"));
                }
                if got_nonce != Some(nonce.as_str()) {
                    return Err(bad("nonce mismatch"));
                }
                let proof = B64.decode(proof).map_err(|_| bad("proof is not base64"))?;
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let signature = self.mech.hmac(&stored_key, auth_message.as_bytes());
                if proof.len() != signature.len() {
                    return Err(AuthFailure(invalid_credentials(mech)));
                }
                let client_key: Vec<u8> =
                    proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
                use subtle::ConstantTimeEq;
                if !bool::from(self.mech.hash(&client_key).ct_eq(&stored_key)) {
                    return Err(AuthFailure(invalid_credentials(mech)));
                }
                let server_sig = self.mech.hmac(&server_key, auth_message.as_bytes());
                Ok(Step::Done {
                    user,
                    response: format!("v={}", B64.encode(server_sig)).into_bytes(),
                    expires_at_ms: None,
                })
            }
            ScramState::Finished => Err(bad("the exchange is already complete")),
        }
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
    pub fn load(jwks: &Path, settings: &OAuthSettings) -> Result<OAuthValidator, String> {
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

    fn step(&self, input: &[u8], now_ms: i64) -> Result<Step, AuthFailure> {
        let bad = |why: String| AuthFailure(format!("OAUTHBEARER: {why}"));
        let text = std::str::from_utf8(input).map_err(|_| bad("not UTF-8".into()))?;
        // gs2-header %x01 *(key=value %x01) %x01
        let mut parts = text.split('\u{1}');
        let gs2 = parts.next().unwrap_or_default();
        if !gs2.starts_with("n,") && !gs2.starts_with("y,") {
            return Err(bad("invalid GS2 header".into()));
        }
        let kv: HashMap<&str, &str> = parts.filter_map(|p| p.split_once('=')).collect();
        let Some(token) = kv.get("auth").and_then(|a| {
            a.strip_prefix("Bearer ")
                .or_else(|| a.strip_prefix("bearer "))
        }) else {
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
        let mut validation = Validation::new(header.alg);
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
                    return Ok(Step::Done {
                        user: sub.to_string(),
                        response: Vec::new(),
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
    use kmirror_control::scram::ScramChange;

    fn registry(dir: &Path) -> ScramRegistry {
        let reg = ScramRegistry::open(dir).unwrap();
        let salt = b"salt-salt-salt".to_vec();
        let r = reg.alter(&[ScramChange::Upsert {
            user: "alice".into(),
            mechanism: 2,
            iterations: 4096,
            salted_password: ScramMechanism::Sha512.salted_password(b"secret", &salt, 4096),
            salt,
        }]);
        assert!(r[0].1.is_ok());
        reg
    }

    /// A client side of SCRAM written from the RFC, to drive the server.
    fn client(
        mech: ScramMechanism,
        user: &str,
        pw: &str,
        ex: &mut Exchange,
        reg: &ScramRegistry,
    ) -> Result<Step, AuthFailure> {
        let first_bare = format!("n={user},r=clientnonce");
        let Step::Challenge(sf) = ex.step(format!("n,,{first_bare}").as_bytes(), reg, None, 0)?
        else {
            panic!("expected a challenge");
        };
        let sf = String::from_utf8(sf).unwrap();
        let attrs: HashMap<&str, &str> = sf.split(',').filter_map(|a| a.split_once('=')).collect();
        let salt = B64.decode(attrs["s"]).unwrap();
        let it: u32 = attrs["i"].parse().unwrap();
        let salted = mech.salted_password(pw.as_bytes(), &salt, it);
        let ck = mech.hmac(&salted, b"Client Key");
        let sk = mech.hash(&ck);
        let wp = format!("c=biws,r={}", attrs["r"]);
        let am = format!("{first_bare},{sf},{wp}");
        let sig = mech.hmac(&sk, am.as_bytes());
        let proof: Vec<u8> = ck.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let out = ex.step(
            format!("{wp},p={}", B64.encode(proof)).as_bytes(),
            reg,
            None,
            0,
        )?;
        if let Step::Done { response, .. } = &out {
            let server_key = mech.hmac(&salted, b"Server Key");
            let want = format!("v={}", B64.encode(mech.hmac(&server_key, am.as_bytes())));
            assert_eq!(String::from_utf8_lossy(response), want);
        }
        Ok(out)
    }

    #[test]
    fn scram_accepts_the_right_password_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path());
        let m = ScramMechanism::Sha512;
        let mut ex = Exchange::start(Mechanism::Scram(m));
        match client(m, "alice", "secret", &mut ex, &reg).unwrap() {
            Step::Done { user, .. } => assert_eq!(user, "alice"),
            s => panic!("{s:?}"),
        }
        let mut ex = Exchange::start(Mechanism::Scram(m));
        let e = client(m, "alice", "wrong", &mut ex, &reg).unwrap_err();
        assert_eq!(e.0, invalid_credentials(Mechanism::Scram(m)));
        let mut ex = Exchange::start(Mechanism::Scram(m));
        assert!(client(m, "mallory", "secret", &mut ex, &reg).is_err());
        // No SCRAM-SHA-256 credential for alice.
        let m2 = ScramMechanism::Sha256;
        let mut ex = Exchange::start(Mechanism::Scram(m2));
        assert!(client(m2, "alice", "secret", &mut ex, &reg).is_err());
    }

    #[test]
    fn plain_checks_the_password_against_the_scram_credential() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path());
        let mut ex = Exchange::start(Mechanism::Plain);
        assert!(matches!(
            ex.step(b"\0alice\0secret", &reg, None, 0),
            Ok(Step::Done { .. })
        ));
        assert!(ex.step(b"\0alice\0nope", &reg, None, 0).is_err());
        assert!(ex.step(b"bob\0alice\0secret", &reg, None, 0).is_err());
        assert!(ex.step(b"alice\0secret", &reg, None, 0).is_err());
    }

    #[test]
    fn saslnames_unescape() {
        assert_eq!(unescape_name("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
        assert_eq!(unescape_name("bad=2"), None);
    }
}
