//! SASL from the client side, for raw-wire tests: SaslHandshake + SaslAuthenticate with
//! PLAIN, SCRAM-SHA-256/512 (written from RFC 5802, independent of kmirror's server code) and
//! OAUTHBEARER; SCRAM credential upserts as an admin client computes them; and signed JWTs
//! with the JWKS file that validates them (ES256 keys made with rcgen).

use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use base64::Engine as _;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sha2::{Digest, Sha256, Sha512};

use crate::wire::{Result, WireClient};

/// Kafka's SCRAM mechanism codes.
pub const SCRAM_SHA_256: i8 = 1;
pub const SCRAM_SHA_512: i8 = 2;

fn hmac(mech: &str, key: &[u8], data: &[u8]) -> Vec<u8> {
    if mech == "SCRAM-SHA-256" {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
        m.update(data);
        m.finalize().into_bytes().to_vec()
    } else {
        let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("any key length");
        m.update(data);
        m.finalize().into_bytes().to_vec()
    }
}

fn hash(mech: &str, data: &[u8]) -> Vec<u8> {
    if mech == "SCRAM-SHA-256" {
        Sha256::digest(data).to_vec()
    } else {
        Sha512::digest(data).to_vec()
    }
}

/// Hi(password, salt, iterations).
pub fn salted_password(mech: &str, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    if mech == "SCRAM-SHA-256" {
        pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password.as_bytes(), salt, iterations).to_vec()
    } else {
        pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password.as_bytes(), salt, iterations).to_vec()
    }
}

/// An upsertion as `kafka-configs --add-config 'SCRAM-SHA-512=[password=…]'` builds it.
pub fn upsertion(
    user: &str,
    mech: i8,
    password: &str,
    iterations: i32,
) -> ScramCredentialUpsertion {
    let name = if mech == SCRAM_SHA_256 {
        "SCRAM-SHA-256"
    } else {
        "SCRAM-SHA-512"
    };
    let salt: Vec<u8> = (0..32).map(|_| rand::random::<u8>()).collect();
    ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_string(user.into()))
        .with_mechanism(mech)
        .with_iterations(iterations)
        .with_salted_password(Bytes::from(salted_password(
            name,
            password,
            &salt,
            iterations.max(1) as u32,
        )))
        .with_salt(Bytes::from(salt))
}

pub fn deletion(user: &str, mech: i8) -> ScramCredentialDeletion {
    ScramCredentialDeletion::default()
        .with_name(StrBytes::from_string(user.into()))
        .with_mechanism(mech)
}

/// How an authentication attempt ended, as the wire showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthOutcome {
    /// Authenticated; the session lifetime the broker gave (ms, 0 = none).
    Ok { session_lifetime_ms: i64 },
    /// SaslHandshake refused: its error code and the mechanisms the broker listed.
    Handshake { code: i16, mechanisms: Vec<String> },
    /// SaslAuthenticate refused: its error code and message.
    Authenticate { code: i16, message: String },
}

/// SaslHandshake v1 for `mechanism`.
pub fn handshake(c: &mut WireClient, mechanism: &str) -> Result<SaslHandshakeResponse> {
    c.send_at(
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into())),
        1,
    )
}

fn authenticate(c: &mut WireClient, bytes: Vec<u8>) -> Result<SaslAuthenticateResponse> {
    c.send_at(
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes)),
        2,
    )
}

fn refused(r: &SaslAuthenticateResponse) -> AuthOutcome {
    AuthOutcome::Authenticate {
        code: r.error_code,
        message: r
            .error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    }
}

fn start(c: &mut WireClient, mechanism: &str) -> Result<Option<AuthOutcome>> {
    let h = handshake(c, mechanism)?;
    if h.error_code != 0 {
        return Ok(Some(AuthOutcome::Handshake {
            code: h.error_code,
            mechanisms: h.mechanisms.iter().map(|m| m.to_string()).collect(),
        }));
    }
    Ok(None)
}

/// Authenticates with SCRAM-SHA-256 or SCRAM-SHA-512 (and checks the server's signature).
pub fn scram(c: &mut WireClient, mech: &str, user: &str, password: &str) -> Result<AuthOutcome> {
    if let Some(o) = start(c, mech)? {
        return Ok(o);
    }
    let nonce: String = (0..24)
        .map(|_| (b'a' + rand::random::<u8>() % 26) as char)
        .collect();
    let first_bare = format!(
        "n={},r={nonce}",
        user.replace('=', "=3D").replace(',', "=2C")
    );
    let r = authenticate(c, format!("n,,{first_bare}").into_bytes())?;
    if r.error_code != 0 {
        return Ok(refused(&r));
    }
    let server_first = String::from_utf8_lossy(&r.auth_bytes).to_string();
    let attr = |k: &str| {
        server_first
            .split(',')
            .find_map(|a| a.strip_prefix(k))
            .unwrap_or_default()
            .to_string()
    };
    let (full_nonce, salt, iterations) = (attr("r="), attr("s="), attr("i="));
    assert!(full_nonce.starts_with(&nonce), "server nonce {full_nonce}");
    let salted = salted_password(
        mech,
        password,
        &B64.decode(salt).expect("salt is base64"),
        iterations.parse().expect("iterations"),
    );
    let client_key = hmac(mech, &salted, b"Client Key");
    let stored_key = hash(mech, &client_key);
    let without_proof = format!("c=biws,r={full_nonce}");
    let auth_message = format!("{first_bare},{server_first},{without_proof}");
    let sig = hmac(mech, &stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
    let r = authenticate(
        c,
        format!("{without_proof},p={}", B64.encode(proof)).into_bytes(),
    )?;
    if r.error_code != 0 {
        return Ok(refused(&r));
    }
    let server_key = hmac(mech, &salted, b"Server Key");
    let want = format!(
        "v={}",
        B64.encode(hmac(mech, &server_key, auth_message.as_bytes()))
    );
    assert_eq!(
        String::from_utf8_lossy(&r.auth_bytes),
        want,
        "server signature"
    );
    Ok(AuthOutcome::Ok {
        session_lifetime_ms: r.session_lifetime_ms,
    })
}

/// Authenticates with PLAIN.
pub fn plain(c: &mut WireClient, user: &str, password: &str) -> Result<AuthOutcome> {
    if let Some(o) = start(c, "PLAIN")? {
        return Ok(o);
    }
    let r = authenticate(c, format!("\0{user}\0{password}").into_bytes())?;
    if r.error_code != 0 {
        return Ok(refused(&r));
    }
    Ok(AuthOutcome::Ok {
        session_lifetime_ms: r.session_lifetime_ms,
    })
}

/// Authenticates with OAUTHBEARER and a bearer token.
pub fn oauthbearer(c: &mut WireClient, token: &str) -> Result<AuthOutcome> {
    if let Some(o) = start(c, "OAUTHBEARER")? {
        return Ok(o);
    }
    let r = authenticate(
        c,
        format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes(),
    )?;
    if r.error_code != 0 {
        return Ok(refused(&r));
    }
    Ok(AuthOutcome::Ok {
        session_lifetime_ms: r.session_lifetime_ms,
    })
}

/// An ES256 signing key with its JWKS (public part).
pub struct JwtKey {
    key: rcgen::KeyPair,
    pub kid: String,
}

impl JwtKey {
    pub fn new(kid: &str) -> JwtKey {
        JwtKey {
            key: rcgen::KeyPair::generate().expect("P-256 key"),
            kid: kid.into(),
        }
    }

    /// `{"keys":[…]}` with this key's public half.
    pub fn jwks(&self) -> String {
        let raw = self.key.public_key_raw();
        assert_eq!(raw.len(), 65, "uncompressed P-256 point");
        serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
            "x": B64URL.encode(&raw[1..33]), "y": B64URL.encode(&raw[33..65]),
        }]})
        .to_string()
    }

    /// A compact JWS of `claims`, signed by this key.
    pub fn sign(&self, claims: &serde_json::Value) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        let key = jsonwebtoken::EncodingKey::from_ec_pem(self.key.serialize_pem().as_bytes())
            .expect("PKCS#8 P-256 key");
        jsonwebtoken::encode(&header, claims, &key).expect("sign JWT")
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// `kmirror scram add` into a stopped node's data dir (the offline bootstrap, Kafka's
/// `kafka-storage format --add-scram`); asserts the tool says it added the credential.
pub fn scram_add(data_dir: &std::path::Path, user: &str, mechanism: &str, password: &str) {
    let dir = tempfile::tempdir().unwrap();
    let pw_file = dir.path().join("pw");
    std::fs::write(&pw_file, format!("{password}\n")).unwrap();
    let ran = crate::proc::run_ok(
        std::process::Command::new(crate::deps::kmirror_bin())
            .args(["scram", "add", "--data-dir"])
            .arg(data_dir)
            .args(["--user", user, "--mechanism", mechanism, "--password-file"])
            .arg(&pw_file),
        std::time::Duration::from_secs(30),
    );
    assert!(ran.stdout.contains("added"), "{}", ran.stdout);
}
