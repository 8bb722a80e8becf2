//! Who is on the other end of a connection, and through which listener they came.
//!
//! A [`Session`] is created per connection by the listener that accepted it and handed to
//! every request handler; authorization decisions read its [`Principal`]. A PLAINTEXT
//! listener's principal is `User:ANONYMOUS`, as in Kafka.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// Kafka's `security.protocol` values, for listeners and for client connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a security protocol, principal or listener does not parse (config files, command
/// lines, ACL principals): the message names the value and the form expected.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unknown security protocol \"{0}\" (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)")]
    UnknownProtocol(String),
    #[error("principal \"{0}\" is not of the form Type:name")]
    Principal(String),
    /// A listener (`PROTOCOL://HOST:PORT`) or listener list that is malformed.
    #[error("{0}")]
    Listener(String),
}

impl FromStr for SecurityProtocol {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            other => Err(ParseError::UnknownProtocol(other.to_owned())),
        }
    }
}

/// A Kafka principal, `Type:name` (`User:alice`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub kind: String,
    pub name: String,
}

impl Principal {
    pub fn user(name: impl Into<String>) -> Self {
        Principal {
            kind: "User".into(),
            name: name.into(),
        }
    }

    /// The principal of an unauthenticated (PLAINTEXT or plain SSL without a client cert)
    /// connection.
    pub fn anonymous() -> Self {
        Principal::user("ANONYMOUS")
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.name)
    }
}

impl FromStr for Principal {
    type Err = ParseError;
    /// Parses `Type:name`; the name may itself contain ':'.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.split_once(':') {
            Some((k, n)) if !k.is_empty() => Ok(Principal {
                kind: k.to_string(),
                name: n.to_string(),
            }),
            _ => Err(ParseError::Principal(s.to_owned())),
        }
    }
}

/// One connection's security context.
#[derive(Debug, Clone)]
pub struct Session {
    /// The listener's name (its security protocol's name, as Kafka names default listeners).
    pub listener: String,
    pub protocol: SecurityProtocol,
    pub principal: Principal,
    pub peer: Option<SocketAddr>,
    /// False on a SASL listener until the SASL exchange succeeds; see
    /// [`Session::authenticated`].
    pub authenticated: bool,
    /// This connection's id, unique in the process (share sessions remember which
    /// connection last used them).
    pub id: u64,
}

static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Session {
    /// A PLAINTEXT connection: `User:ANONYMOUS`.
    pub fn plaintext(peer: Option<SocketAddr>) -> Self {
        Session::new(
            SecurityProtocol::Plaintext.name(),
            SecurityProtocol::Plaintext,
            Principal::anonymous(),
            peer,
        )
    }

    /// A connection accepted by listener `listener` of protocol `protocol`, whose transport
    /// (TLS, if any) has identified `principal` (`User:ANONYMOUS` when nothing did). A SASL
    /// listener's session starts unauthenticated.
    pub fn new(
        listener: &str,
        protocol: SecurityProtocol,
        principal: Principal,
        peer: Option<SocketAddr>,
    ) -> Self {
        Session {
            listener: listener.to_string(),
            protocol,
            principal,
            peer,
            authenticated: !protocol.uses_sasl(),
            id: NEXT_CONNECTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Whether requests beyond the SASL exchange may be served. Always true on PLAINTEXT and
    /// SSL listeners; on SASL listeners false until the SASL handshake authenticates the
    /// client (which sets [`Session::authenticated`] and the principal). While it is false
    /// the connection loop serves only ApiVersions, SaslHandshake and SaslAuthenticate and
    /// closes the connection on anything else, as Kafka does.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether a request with `api_key` may be served on this connection now (the
    /// pre-authentication gate of SASL listeners).
    pub fn may_serve(&self, api_key: i16) -> bool {
        // ApiVersions (18), SaslHandshake (17) and SaslAuthenticate (36).
        self.authenticated || matches!(api_key, 17 | 18 | 36)
    }

    /// The peer's host as ACLs match it (`*` matches any).
    pub fn host(&self) -> String {
        self.peer
            .map(|p| p.ip().to_string())
            .unwrap_or_else(|| "*".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_and_principals_round_trip_through_their_names() {
        for p in [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ] {
            assert_eq!(p.name().parse::<SecurityProtocol>().unwrap(), p);
        }
        assert!("TLS".parse::<SecurityProtocol>().is_err());
        let p: Principal = "User:CN=a,O=b:c".parse().unwrap();
        assert_eq!(p.kind, "User");
        assert_eq!(p.name, "CN=a,O=b:c");
        assert_eq!(p.to_string(), "User:CN=a,O=b:c");
        assert!("alice".parse::<Principal>().is_err());
        assert_eq!(Principal::anonymous().to_string(), "User:ANONYMOUS");
    }

    #[test]
    fn sasl_sessions_serve_only_the_sasl_exchange_until_authenticated() {
        let ssl = Session::new("SSL", SecurityProtocol::Ssl, Principal::anonymous(), None);
        assert!(ssl.authenticated() && ssl.may_serve(0));
        for p in [SecurityProtocol::SaslPlaintext, SecurityProtocol::SaslSsl] {
            let mut s = Session::new(p.name(), p, Principal::anonymous(), None);
            assert!(!s.authenticated());
            assert!(s.may_serve(18) && s.may_serve(17) && s.may_serve(36));
            assert!(!s.may_serve(0) && !s.may_serve(3));
            s.authenticated = true;
            assert!(s.may_serve(0));
        }
    }
}
