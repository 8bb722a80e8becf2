//! Security of the Kafka client connections ([`crate::client`]): Kafka client properties
//! (`security.protocol`, `ssl.*`, `sasl.*`) checked and turned once into a [`ClientSecurity`]
//! (a rustls client config and SASL credentials), and the SASL exchange as a small sans-io
//! state machine ([`SaslExchange`]) that [`crate::client::Connection`] drives (once, for both
//! transports) over SaslHandshake v1 + SaslAuthenticate (KIP-152).
//!
//! Each mirror builds its own [`ClientSecurity`] from its own settings, so two mirrors never
//! share credentials or TLS state (seed 003: per-mirror connection isolation).
//!
//! Keys follow Kafka's client names. TLS: `ssl.truststore.location` (PEM CA certificates; the
//! webpki roots when unset), `ssl.truststore.certificates` (inline PEM), `ssl.keystore.location`
//! (PEM: key and chain in one file, Kafka's PEM keystore), `ssl.keystore.certificate.chain` +
//! `ssl.keystore.key` (inline PEM), `ssl.endpoint.identification.algorithm` (`https`, the
//! default, checks the host name; empty skips only that check). SASL: `sasl.mechanism`
//! (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER), `sasl.username` / `sasl.password`
//! or `sasl.jaas.config` (Scram/Plain LoginModule with `username="…" password="…"`), and for
//! OAUTHBEARER `sasl.oauthbearer.token`, `sasl.oauthbearer.token.file`, or
//! `sasl.oauthbearer.token.endpoint.url=file:///…` (a file holding the token, re-read on every
//! connect so an external refresher can rotate it). Encrypted private keys are not supported.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::client::ClientError;

/// Property keys (Kafka's client names, plus `sasl.username`/`sasl.password`/
/// `sasl.oauthbearer.token[.file]` for convenience).
pub mod keys {
    pub const SECURITY_PROTOCOL: &str = "security.protocol";
    pub const TRUSTSTORE_TYPE: &str = "ssl.truststore.type";
    pub const TRUSTSTORE_LOCATION: &str = "ssl.truststore.location";
    pub const TRUSTSTORE_CERTIFICATES: &str = "ssl.truststore.certificates";
    pub const KEYSTORE_TYPE: &str = "ssl.keystore.type";
    pub const KEYSTORE_LOCATION: &str = "ssl.keystore.location";
    pub const KEYSTORE_CERTIFICATE_CHAIN: &str = "ssl.keystore.certificate.chain";
    pub const KEYSTORE_KEY: &str = "ssl.keystore.key";
    pub const KEYSTORE_PASSWORD: &str = "ssl.keystore.password";
    pub const KEY_PASSWORD: &str = "ssl.key.password";
    pub const TRUSTSTORE_PASSWORD: &str = "ssl.truststore.password";
    pub const ENDPOINT_IDENTIFICATION: &str = "ssl.endpoint.identification.algorithm";
    pub const SASL_MECHANISM: &str = "sasl.mechanism";
    pub const SASL_JAAS_CONFIG: &str = "sasl.jaas.config";
    pub const SASL_USERNAME: &str = "sasl.username";
    pub const SASL_PASSWORD: &str = "sasl.password";
    pub const OAUTH_TOKEN: &str = "sasl.oauthbearer.token";
    pub const OAUTH_TOKEN_FILE: &str = "sasl.oauthbearer.token.file";
    pub const OAUTH_TOKEN_ENDPOINT: &str = "sasl.oauthbearer.token.endpoint.url";

    /// Keys whose values are secrets: never shown (describe prints `[hidden]`).
    pub const SECRET: &[&str] = &[
        SASL_PASSWORD,
        SASL_JAAS_CONFIG,
        OAUTH_TOKEN,
        KEY_PASSWORD,
        KEYSTORE_PASSWORD,
        TRUSTSTORE_PASSWORD,
        KEYSTORE_KEY,
    ];
}

/// Whether a setting's value is a secret (passwords, JAAS config, tokens, inline keys).
pub fn is_secret_key(key: &str) -> bool {
    keys::SECRET.contains(&key) || key.ends_with(".password") || key.ends_with(".jaas.config")
}

/// A bad security setting: the key and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct SecurityConfigError {
    pub key: String,
    pub reason: String,
}

fn bad(key: &str, reason: impl Into<String>) -> SecurityConfigError {
    SecurityConfigError {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// Kafka's `security.protocol`: the same values as a listener's.
pub use crate::session::SecurityProtocol;

/// SASL mechanisms the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    OAuthBearer,
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

/// Where an OAUTHBEARER token comes from.
#[derive(Clone, PartialEq, Eq)]
enum TokenSource {
    Static(String),
    /// Re-read on every connect (an external refresher may replace it).
    File(PathBuf),
}

#[derive(Clone, PartialEq, Eq)]
enum Credentials {
    UserPassword { username: String, password: String },
    Token(TokenSource),
}

#[derive(Clone)]
struct SaslSettings {
    mechanism: SaslMechanism,
    credentials: Credentials,
}

#[derive(Clone)]
struct TlsSettings {
    config: Arc<rustls::ClientConfig>,
}

/// A connection's security, built once from Kafka client properties. Cheap to clone (the TLS
/// config is shared); `Debug` never shows secrets.
#[derive(Clone)]
pub struct ClientSecurity {
    protocol: SecurityProtocol,
    tls: Option<TlsSettings>,
    sasl: Option<SaslSettings>,
}

impl fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSecurity")
            .field("protocol", &self.protocol)
            .field(
                "sasl_mechanism",
                &self.sasl.as_ref().map(|s| s.mechanism.name()),
            )
            .finish_non_exhaustive()
    }
}

impl Default for ClientSecurity {
    fn default() -> Self {
        ClientSecurity::plaintext()
    }
}

impl ClientSecurity {
    /// No TLS, no SASL.
    pub fn plaintext() -> Self {
        ClientSecurity {
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: None,
        }
    }

    pub fn protocol(&self) -> SecurityProtocol {
        self.protocol
    }

    /// Parses and checks the properties: an unknown protocol, a SASL mechanism without its
    /// credentials, an unreadable or empty PEM file are errors here, not at the first connect.
    /// Keys that are not security keys are ignored.
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<Self, SecurityConfigError> {
        let get = |k: &str| props.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let protocol = match get(keys::SECURITY_PROTOCOL) {
            None => SecurityProtocol::Plaintext,
            Some(p) => p.parse::<SecurityProtocol>().map_err(|_| {
                bad(
                    keys::SECURITY_PROTOCOL,
                    format!("unknown protocol '{p}' (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"),
                )
            })?,
        };
        let tls = if protocol.uses_tls() {
            Some(tls_settings(props)?)
        } else {
            None
        };
        let sasl = if protocol.uses_sasl() {
            Some(sasl_settings(props)?)
        } else {
            None
        };
        Ok(ClientSecurity {
            protocol,
            tls,
            sasl,
        })
    }

    /// The TLS config and server name for a connection to `addr` (`host:port`), when TLS is on.
    pub(crate) fn tls_for(
        &self,
        addr: &str,
    ) -> Result<Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>, ClientError> {
        let Some(tls) = &self.tls else {
            return Ok(None);
        };
        let host = host_of(addr);
        let name = ServerName::try_from(host.to_owned()).map_err(|e| ClientError::Security {
            addr: addr.to_owned(),
            reason: format!("'{host}' is not a valid TLS server name: {e}"),
        })?;
        Ok(Some((tls.config.clone(), name)))
    }

    /// A fresh SASL exchange for one connection, when SASL is on.
    pub(crate) fn sasl_exchange(&self, addr: &str) -> Result<Option<SaslExchange>, ClientError> {
        match &self.sasl {
            None => Ok(None),
            Some(s) => SaslExchange::new(s)
                .map(Some)
                .map_err(|reason| ClientError::Security {
                    addr: addr.to_owned(),
                    reason,
                }),
        }
    }
}

/// The host part of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn read_file(key: &str, path: &str) -> Result<Vec<u8>, SecurityConfigError> {
    std::fs::read(path).map_err(|e| bad(key, format!("cannot read '{path}': {e}")))
}

fn pem_certs(key: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, SecurityConfigError> {
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<_, _>>()
        .map_err(|e| bad(key, format!("invalid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad(key, "no PEM certificate found"));
    }
    Ok(certs)
}

fn pem_key(key: &str, pem: &[u8]) -> Result<PrivateKeyDer<'static>, SecurityConfigError> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("ENCRYPTED PRIVATE KEY") {
        return Err(bad(
            key,
            "encrypted private keys are not supported; give an unencrypted PKCS#8 key",
        ));
    }
    rustls_pemfile::private_key(&mut &pem[..])
        .map_err(|e| bad(key, format!("invalid PEM: {e}")))?
        .ok_or_else(|| bad(key, "no PEM private key found"))
}

fn check_pem_type(props: &BTreeMap<String, String>, key: &str) -> Result<(), SecurityConfigError> {
    match props.get(key).map(|v| v.trim()) {
        None | Some("") => Ok(()),
        Some(t) if t.eq_ignore_ascii_case("PEM") => Ok(()),
        Some(t) => Err(bad(
            key,
            format!("'{t}' is not supported; only PEM stores are"),
        )),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_settings(props: &BTreeMap<String, String>) -> Result<TlsSettings, SecurityConfigError> {
    let get = |k: &str| props.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    check_pem_type(props, keys::TRUSTSTORE_TYPE)?;
    check_pem_type(props, keys::KEYSTORE_TYPE)?;
    let mut roots = RootCertStore::empty();
    let ca = match (
        get(keys::TRUSTSTORE_LOCATION),
        get(keys::TRUSTSTORE_CERTIFICATES),
    ) {
        (Some(path), _) => Some((
            keys::TRUSTSTORE_LOCATION,
            read_file(keys::TRUSTSTORE_LOCATION, path)?,
        )),
        (None, Some(inline)) => Some((keys::TRUSTSTORE_CERTIFICATES, inline.as_bytes().to_vec())),
        (None, None) => None,
    };
    match ca {
        Some((key, pem)) => {
            for c in pem_certs(key, &pem)? {
                roots
                    .add(c)
                    .map_err(|e| bad(key, format!("unusable CA certificate: {e}")))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let identity = match (
        get(keys::KEYSTORE_LOCATION),
        get(keys::KEYSTORE_CERTIFICATE_CHAIN),
        get(keys::KEYSTORE_KEY),
    ) {
        (Some(path), _, _) => {
            let pem = read_file(keys::KEYSTORE_LOCATION, path)?;
            Some((
                pem_certs(keys::KEYSTORE_LOCATION, &pem)?,
                pem_key(keys::KEYSTORE_LOCATION, &pem)?,
            ))
        }
        (None, Some(chain), Some(key)) => Some((
            pem_certs(keys::KEYSTORE_CERTIFICATE_CHAIN, chain.as_bytes())?,
            pem_key(keys::KEYSTORE_KEY, key.as_bytes())?,
        )),
        (None, Some(_), None) => {
            return Err(bad(
                keys::KEYSTORE_KEY,
                "required with ssl.keystore.certificate.chain",
            ))
        }
        (None, None, Some(_)) => {
            return Err(bad(
                keys::KEYSTORE_CERTIFICATE_CHAIN,
                "required with ssl.keystore.key",
            ))
        }
        (None, None, None) => None,
    };
    let check_hostname = match props.get(keys::ENDPOINT_IDENTIFICATION).map(|v| v.trim()) {
        None => true,
        Some(v) if v.eq_ignore_ascii_case("https") => true,
        Some("") => false,
        Some(v) => {
            return Err(bad(
                keys::ENDPOINT_IDENTIFICATION,
                format!("'{v}' is not supported (https, or empty to skip the host name check)"),
            ))
        }
    };
    let provider = provider();
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| bad(keys::TRUSTSTORE_LOCATION, e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = if check_hostname {
        webpki
    } else {
        Arc::new(NoHostnameCheck(webpki))
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(keys::SECURITY_PROTOCOL, e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
            bad(
                keys::KEYSTORE_LOCATION,
                format!("unusable key/certificate: {e}"),
            )
        })?,
        None => builder.with_no_client_auth(),
    };
    Ok(TlsSettings {
        config: Arc::new(config),
    })
}

/// The chain is verified against the trust roots as usual; only a host name mismatch is
/// accepted (`ssl.endpoint.identification.algorithm=`, as in Kafka).
#[derive(Debug)]
struct NoHostnameCheck(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for NoHostnameCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn sasl_settings(props: &BTreeMap<String, String>) -> Result<SaslSettings, SecurityConfigError> {
    let get = |k: &str| props.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let mechanism = match get(keys::SASL_MECHANISM) {
        None => {
            return Err(bad(
                keys::SASL_MECHANISM,
                "required with SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER; \
                 Kafka's default GSSAPI is not supported)",
            ))
        }
        Some(m) => match m.to_ascii_uppercase().as_str() {
            "PLAIN" => SaslMechanism::Plain,
            "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
            "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
            "OAUTHBEARER" => SaslMechanism::OAuthBearer,
            other => {
                return Err(bad(
                    keys::SASL_MECHANISM,
                    format!(
                    "'{other}' is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)"
                ),
                ))
            }
        },
    };
    let jaas = match get(keys::SASL_JAAS_CONFIG) {
        Some(j) => parse_jaas(j).map_err(|r| bad(keys::SASL_JAAS_CONFIG, r.to_string()))?,
        None => BTreeMap::new(),
    };
    let credentials = if mechanism == SaslMechanism::OAuthBearer {
        let token = if let Some(t) = get(keys::OAUTH_TOKEN) {
            TokenSource::Static(t.to_owned())
        } else if let Some(f) = get(keys::OAUTH_TOKEN_FILE) {
            TokenSource::File(PathBuf::from(f))
        } else if let Some(url) = get(keys::OAUTH_TOKEN_ENDPOINT) {
            let Some(path) = url.strip_prefix("file://") else {
                return Err(bad(
                    keys::OAUTH_TOKEN_ENDPOINT,
                    "only file:// token endpoints are supported",
                ));
            };
            TokenSource::File(PathBuf::from(path))
        } else {
            return Err(bad(
                keys::OAUTH_TOKEN,
                "OAUTHBEARER needs sasl.oauthbearer.token, sasl.oauthbearer.token.file or a \
                 file:// sasl.oauthbearer.token.endpoint.url",
            ));
        };
        if let TokenSource::File(p) = &token {
            read_token(p).map_err(|r| bad(keys::OAUTH_TOKEN_FILE, r))?;
        }
        Credentials::Token(token)
    } else {
        let username = get(keys::SASL_USERNAME)
            .map(str::to_owned)
            .or_else(|| jaas.get("username").cloned())
            .ok_or_else(|| {
                bad(
                    keys::SASL_USERNAME,
                    "a SASL user name is required (sasl.username or username=\"…\" in sasl.jaas.config)",
                )
            })?;
        let password = props
            .get(keys::SASL_PASSWORD)
            .filter(|v| !v.is_empty())
            .cloned()
            .or_else(|| jaas.get("password").cloned())
            .ok_or_else(|| {
                bad(
                    keys::SASL_PASSWORD,
                    "a SASL password is required (sasl.password or password=\"…\" in sasl.jaas.config)",
                )
            })?;
        Credentials::UserPassword { username, password }
    };
    Ok(SaslSettings {
        mechanism,
        credentials,
    })
}

fn read_token(path: &std::path::Path) -> Result<String, String> {
    let t = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read token file '{}': {e}", path.display()))?;
    let t = t.trim();
    if t.is_empty() {
        return Err(format!("token file '{}' is empty", path.display()));
    }
    Ok(t.to_owned())
}

/// A Java properties file's entries (`key=value`, `key: value` or `key value`; `#`/`!`
/// comments; a trailing backslash continues the line; `\\`, `\n`, `\t`, `\=`, `\:`
/// escapes). Later keys win, as in `java.util.Properties`.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(first) = lines.next() {
        let mut line = first.trim_start().to_owned();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        // A line ending in an odd number of backslashes continues on the next.
        while line.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1 {
            line.pop();
            match lines.next() {
                Some(next) => line.push_str(next.trim_start()),
                None => break,
            }
        }
        let mut key = String::new();
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        key.push(unescape(n));
                    }
                }
                '=' | ':' => break,
                c if c.is_whitespace() => {
                    // `key value`, or `key = value`.
                    while chars.peek().is_some_and(|c| c.is_whitespace()) {
                        chars.next();
                    }
                    if matches!(chars.peek(), Some('=') | Some(':')) {
                        chars.next();
                    }
                    break;
                }
                c => key.push(c),
            }
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            if c == '\\' {
                if let Some(n) = chars.next() {
                    value.push(unescape(n));
                }
            } else {
                value.push(c);
            }
        }
        out.insert(key, value);
    }
    out
}

fn unescape(c: char) -> char {
    match c {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        'f' => '\u{c}',
        other => other,
    }
}

/// What is wrong with a `sasl.jaas.config` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JaasError {
    #[error("expected '<LoginModule class> required key=\"value\" …;'")]
    NoLoginModule,
    #[error("option '{0}' has no '=value'")]
    NoValue(String),
    #[error("unterminated quote in option '{0}'")]
    UnterminatedQuote(String),
}

/// Options of a one-entry JAAS configuration:
/// `some.LoginModule required key="value" key2=value2;`.
pub fn parse_jaas(s: &str) -> Result<BTreeMap<String, String>, JaasError> {
    let mut chars = s.trim().chars().peekable();
    let mut word = || -> String {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut w = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || c == ';' {
                break;
            }
            w.push(c);
            chars.next();
        }
        w
    };
    let module = word();
    let flag = word();
    if module.is_empty()
        || !["required", "requisite", "sufficient", "optional"].contains(&flag.as_str())
    {
        return Err(JaasError::NoLoginModule);
    }
    let rest: String = chars.collect();
    let mut out = BTreeMap::new();
    let mut it = rest.chars().peekable();
    loop {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        match it.peek() {
            None | Some(';') => break,
            _ => {}
        }
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            it.next();
        }
        if it.next() != Some('=') || key.is_empty() {
            return Err(JaasError::NoValue(key));
        }
        let mut value = String::new();
        if it.peek() == Some(&'"') {
            it.next();
            let mut closed = false;
            while let Some(c) = it.next() {
                match c {
                    '\\' => {
                        if let Some(n) = it.next() {
                            value.push(n);
                        }
                    }
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                return Err(JaasError::UnterminatedQuote(key));
            }
        } else {
            while let Some(&c) = it.peek() {
                if c.is_whitespace() || c == ';' {
                    break;
                }
                value.push(c);
                it.next();
            }
        }
        out.insert(key, value);
    }
    Ok(out)
}

/// One SASL authentication on one connection (SaslHandshake v1, then SaslAuthenticate until
/// the mechanism is done). Sans-io: the connection sends what it is given.
pub(crate) struct SaslExchange {
    mechanism: SaslMechanism,
    inner: Inner,
    done: bool,
    /// The broker's error JSON after a failed OAUTHBEARER attempt (KIP-255).
    oauth_error: Option<String>,
}

enum Inner {
    Rsasl(Box<rsasl::prelude::Session>),
    /// One initial client response (OAUTHBEARER).
    OneShot(Option<Vec<u8>>),
}

impl SaslExchange {
    fn new(s: &SaslSettings) -> Result<Self, String> {
        use rsasl::prelude::{Mechname, SASLClient, SASLConfig};
        let inner = match &s.credentials {
            Credentials::UserPassword { username, password } => {
                let cfg = SASLConfig::with_credentials(None, username.clone(), password.clone())
                    .map_err(|e| format!("SASL setup: {e}"))?;
                let name = Mechname::parse(s.mechanism.name().as_bytes())
                    .map_err(|e| format!("SASL mechanism: {e}"))?;
                let session = SASLClient::new(cfg)
                    .start_suggested(&[name])
                    .map_err(|e| format!("SASL {}: {e}", s.mechanism.name()))?;
                Inner::Rsasl(Box::new(session))
            }
            Credentials::Token(src) => {
                let token = match src {
                    TokenSource::Static(t) => t.clone(),
                    TokenSource::File(p) => read_token(p)?,
                };
                // RFC 7628 initial client response: gs2 header, then auth=Bearer.
                Inner::OneShot(Some(
                    format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes(),
                ))
            }
        };
        Ok(SaslExchange {
            mechanism: s.mechanism,
            inner,
            done: false,
            oauth_error: None,
        })
    }

    pub(crate) fn handshake_request(&self) -> SaslHandshakeRequest {
        SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(self.mechanism.name()))
    }

    pub(crate) fn check_handshake(&self, r: &SaslHandshakeResponse) -> Result<(), ClientError> {
        if r.error_code != 0 {
            let offered: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(ClientError::Kafka {
                api: "SaslHandshake",
                code: r.error_code.into(),
                message: Some(format!(
                    "{} not enabled; the broker offers [{}]",
                    self.mechanism.name(),
                    offered.join(", ")
                )),
            });
        }
        Ok(())
    }

    /// The first SaslAuthenticate request.
    pub(crate) fn first(&mut self) -> Result<SaslAuthenticateRequest, ClientError> {
        let bytes = match &mut self.inner {
            Inner::Rsasl(session) => {
                let mut out = Vec::new();
                let state = session.step(None, &mut out).map_err(sasl_err)?;
                self.done = state.is_finished();
                out
            }
            Inner::OneShot(msg) => {
                self.done = true;
                msg.take().unwrap_or_default()
            }
        };
        Ok(auth_request(bytes))
    }

    /// The broker's answer to the last SaslAuthenticate: the next request, or None when the
    /// exchange is complete (authenticated).
    pub(crate) fn on_response(
        &mut self,
        r: &SaslAuthenticateResponse,
    ) -> Result<Option<SaslAuthenticateRequest>, ClientError> {
        if r.error_code != 0 {
            let mut message = r.error_message.as_ref().map(|m| m.to_string());
            if let Some(j) = &self.oauth_error {
                message = Some(format!("{} ({j})", message.unwrap_or_default()));
            }
            return Err(ClientError::Kafka {
                api: "SaslAuthenticate",
                code: r.error_code.into(),
                message,
            });
        }
        if self.mechanism == SaslMechanism::OAuthBearer && !r.auth_bytes.is_empty() {
            if self.oauth_error.is_some() {
                return Err(ClientError::Kafka {
                    api: "SaslAuthenticate",
                    code: crate::keys::error::SASL_AUTHENTICATION_FAILED.into(),
                    message: self.oauth_error.clone(),
                });
            }
            // A failure challenge (JSON): acknowledge with 0x01 so the broker ends it.
            self.oauth_error = Some(String::from_utf8_lossy(&r.auth_bytes).into_owned());
            return Ok(Some(auth_request(vec![1])));
        }
        if self.done {
            return Ok(None);
        }
        let Inner::Rsasl(session) = &mut self.inner else {
            return Ok(None);
        };
        let mut out = Vec::new();
        let state = session
            .step(Some(&r.auth_bytes), &mut out)
            .map_err(sasl_err)?;
        self.done = state.is_finished();
        if state.has_sent_message() {
            Ok(Some(auth_request(out)))
        } else {
            Ok(None)
        }
    }
}

fn auth_request(bytes: Vec<u8>) -> SaslAuthenticateRequest {
    SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes))
}

fn sasl_err(e: rsasl::prelude::SessionError) -> ClientError {
    ClientError::Kafka {
        api: "SaslAuthenticate",
        code: crate::keys::error::SASL_AUTHENTICATION_FAILED.into(),
        message: Some(format!("client side: {e}")),
    }
}

/// When to re-authenticate: before the broker's session lifetime (KIP-368) runs out, at 85%
/// of it as Kafka's client does at the earliest. None when the broker set no lifetime.
pub(crate) fn reauth_after(session_lifetime_ms: i64) -> Option<Duration> {
    (session_lifetime_ms > 0).then(|| Duration::from_millis(session_lifetime_ms as u64 * 85 / 100))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn jaas_options_are_parsed_with_quotes_and_escapes() {
        let o = parse_jaas(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="p\"w;d";"#,
        )
        .unwrap();
        assert_eq!(o["username"], "mirror");
        assert_eq!(o["password"], "p\"w;d");
        let o = parse_jaas("org.apache.kafka.common.security.plain.PlainLoginModule required username=u password=p;").unwrap();
        assert_eq!((o["username"].as_str(), o["password"].as_str()), ("u", "p"));
        assert!(parse_jaas("username=\"x\"").is_err());
        assert!(parse_jaas("M required username=\"x").is_err());
    }

    #[test]
    fn bad_settings_are_rejected_with_their_key() {
        let e =
            ClientSecurity::from_properties(&props(&[("security.protocol", "TLS")])).unwrap_err();
        assert_eq!(e.key, "security.protocol");
        let e = ClientSecurity::from_properties(&props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "m"),
        ]))
        .unwrap_err();
        assert_eq!(e.key, "sasl.password");
        let e = ClientSecurity::from_properties(&props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "GSSAPI"),
        ]))
        .unwrap_err();
        assert_eq!(e.key, "sasl.mechanism");
        let e = ClientSecurity::from_properties(&props(&[
            ("security.protocol", "SSL"),
            ("ssl.truststore.location", "/nonexistent/ca.pem"),
        ]))
        .unwrap_err();
        assert_eq!(e.key, "ssl.truststore.location");
        assert!(e.reason.contains("cannot read"), "{e}");
        let e = ClientSecurity::from_properties(&props(&[
            ("security.protocol", "SSL"),
            ("ssl.truststore.type", "JKS"),
        ]))
        .unwrap_err();
        assert_eq!(e.key, "ssl.truststore.type");
    }

    #[test]
    fn jaas_credentials_and_convenience_keys_both_work() {
        let s = ClientSecurity::from_properties(&props(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="m" password="s";"#,
            ),
        ]))
        .unwrap();
        assert_eq!(s.protocol(), SecurityProtocol::SaslPlaintext);
        assert!(!format!("{s:?}").contains('s') || !format!("{s:?}").contains("\"s\""));
        let s = ClientSecurity::from_properties(&props(&[
            ("security.protocol", "SSL"),
            ("ssl.endpoint.identification.algorithm", ""),
        ]))
        .unwrap();
        assert!(s.tls_for("127.0.0.1:9093").unwrap().is_some());
    }

    #[test]
    fn scram_exchange_produces_a_client_first_message() {
        let s = ClientSecurity::from_properties(&props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "mirror"),
            ("sasl.password", "secret"),
        ]))
        .unwrap();
        let mut ex = s.sasl_exchange("h:1").unwrap().unwrap();
        assert_eq!(ex.handshake_request().mechanism.as_str(), "SCRAM-SHA-512");
        let first = ex.first().unwrap();
        let text = String::from_utf8(first.auth_bytes.to_vec()).unwrap();
        assert!(text.starts_with("n,,n=mirror,r="), "{text}");
    }

    #[test]
    fn java_properties_are_parsed_like_java_does() {
        let p = parse_properties(
            "# comment\n! also\n\nsecurity.protocol=SASL_SSL\n  sasl.mechanism : SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n    username=\"m\" password=\"a=b\";\n\
             path C:\\\\dir\nempty=\n",
        );
        assert_eq!(p["security.protocol"], "SASL_SSL");
        assert_eq!(p["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(
            p["sasl.jaas.config"],
            "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"m\" password=\"a=b\";"
        );
        assert_eq!(p["path"], "C:\\dir");
        assert_eq!(p["empty"], "");
        assert_eq!(p.len(), 5);
    }

    #[test]
    fn secret_keys_are_recognised() {
        for k in [
            "sasl.password",
            "sasl.jaas.config",
            "ssl.key.password",
            "sasl.oauthbearer.token",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        assert!(!is_secret_key("sasl.username"));
        assert!(!is_secret_key("bootstrap.servers"));
    }
}
