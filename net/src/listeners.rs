//! Listeners as Kafka configures them: `listeners=PLAINTEXT://127.0.0.1:9092,SSL://:9093`.
//!
//! Each listener is `PROTOCOL://HOST:PORT`; its name is its security protocol's name (Kafka's
//! default when `listener.security.protocol.map` is not set), so a protocol appears at most
//! once. An empty host binds every interface and advertises `localhost`; port 0 picks a free
//! port at startup (the same one on every core). The host given is also the host advertised
//! to clients that came in through that listener (Metadata, FindCoordinator,
//! DescribeCluster).

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;

use crate::session::{ParseError, SecurityProtocol};
use crate::tls::TlsFiles;

/// One configured listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// The listener's name: its protocol's name.
    pub name: String,
    pub protocol: SecurityProtocol,
    /// As written, without IPv6 brackets; empty = all interfaces.
    pub host: String,
    /// 0 = pick a free port at startup.
    pub port: u16,
}

impl ListenerSpec {
    /// A PLAINTEXT listener on `HOST:PORT` (the `listen` shorthand).
    pub fn plaintext(host_port: &str) -> Result<ListenerSpec, ParseError> {
        format!("PLAINTEXT://{host_port}").parse()
    }

    /// `HOST:PORT` as a socket address string (brackets around an IPv6 host).
    pub fn host_port(&self) -> String {
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        if host.contains(':') {
            format!("[{host}]:{}", self.port)
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// The host clients are told to connect to: a wildcard host advertises `localhost`.
    pub fn advertised_host(&self) -> String {
        match self.host.as_str() {
            "" | "0.0.0.0" | "::" => "localhost".into(),
            h => h.into(),
        }
    }

    /// The address to bind; with port 0 a free port is picked now (every core must bind the
    /// same one).
    pub fn resolve(&self) -> std::io::Result<SocketAddr> {
        let mut addr = self
            .host_port()
            .to_socket_addrs()?
            .next()
            .ok_or(std::io::ErrorKind::AddrNotAvailable)?;
        if addr.port() == 0 {
            let probe = std::net::TcpListener::bind(addr)?;
            addr.set_port(probe.local_addr()?.port());
        }
        Ok(addr)
    }
}

impl fmt::Display for ListenerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(f, "{}://{}:{}", self.name, host, self.port)
    }
}

impl FromStr for ListenerSpec {
    type Err = ParseError;

    /// Parses one `PROTOCOL://HOST:PORT`.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let s = s.trim();
        let bad = |m: String| ParseError::Listener(m);
        let (proto, rest) = s.split_once("://").ok_or_else(|| {
            bad(format!(
                "listener \"{s}\" is not of the form PROTOCOL://HOST:PORT"
            ))
        })?;
        let protocol: SecurityProtocol = proto
            .parse()
            .map_err(|e| bad(format!("listener \"{s}\": {e}")))?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| {
            bad(format!(
                "listener \"{s}\" has no port (PROTOCOL://HOST:PORT)"
            ))
        })?;
        let host = match host.strip_prefix('[') {
            Some(h) => h
                .strip_suffix(']')
                .ok_or_else(|| bad(format!("listener \"{s}\": unbalanced '[' in the host")))?,
            None if host.contains(':') => {
                return Err(bad(format!(
                    "listener \"{s}\": an IPv6 host must be in brackets ([::1])"
                )))
            }
            None => host,
        };
        if host.contains('/') || host.contains(char::is_whitespace) {
            return Err(bad(format!("listener \"{s}\": bad host \"{host}\"")));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| bad(format!("listener \"{s}\": bad port \"{port}\" (0..65535)")))?;
        Ok(ListenerSpec {
            name: protocol.name().to_string(),
            protocol,
            host: host.to_string(),
            port,
        })
    }
}

/// Parses a comma-separated listener list (Kafka's `listeners`). Names (= protocols) must be
/// distinct, and so must fixed ports on the same host; the list must not be empty.
pub fn parse_listeners(s: &str) -> Result<Vec<ListenerSpec>, ParseError> {
    let mut out: Vec<ListenerSpec> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let l: ListenerSpec = item.parse()?;
        if out.iter().any(|o| o.name == l.name) {
            return Err(ParseError::Listener(format!(
                "listener name {} appears twice in \"{s}\" (one listener per protocol)",
                l.name
            )));
        }
        if l.port != 0 && out.iter().any(|o| o.port == l.port && o.host == l.host) {
            return Err(ParseError::Listener(format!(
                "listeners {} and {item} use the same address",
                out.iter().find(|o| o.port == l.port).expect("found")
            )));
        }
        out.push(l);
    }
    if out.is_empty() {
        return Err(ParseError::Listener(
            "no listener given (e.g. PLAINTEXT://127.0.0.1:9092)".into(),
        ));
    }
    Ok(out)
}

/// A listener once bound: what clients that came in through it are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub protocol: SecurityProtocol,
    /// The advertised host.
    pub host: String,
    pub port: i32,
    /// The bound address.
    pub addr: SocketAddr,
}

/// A listener that cannot be set up.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("listener {listener}: {reason}")]
    Tls {
        listener: String,
        reason: crate::tls::TlsError,
    },
}

/// Resolves every listener (picking the port of those with port 0) and builds the TLS
/// acceptors the listeners need: SSL's requires a client certificate when `tls_client_ca` is
/// set; SASL_SSL's never does, as in Kafka, where a broker-wide `ssl.client.auth` does not
/// apply to SASL_SSL listeners (the client authenticates with SASL there). A TLS listener
/// without a usable certificate and key is an error here, before anything starts.
pub fn resolve(
    specs: &[ListenerSpec],
    tls: &TlsFiles,
) -> Result<(Vec<Endpoint>, Acceptors), ListenerError> {
    let mut endpoints = Vec::new();
    let mut acceptors = Acceptors::default();
    for spec in specs {
        let slot = match spec.protocol {
            SecurityProtocol::Ssl => Some((&mut acceptors.ssl, tls.clone())),
            SecurityProtocol::SaslSsl => Some((
                &mut acceptors.sasl_ssl,
                TlsFiles {
                    client_ca: None,
                    ..tls.clone()
                },
            )),
            _ => None,
        };
        if let Some((slot, files)) = slot {
            if slot.is_none() {
                let cfg =
                    crate::tls::server_config(&files).map_err(|reason| ListenerError::Tls {
                        listener: spec.to_string(),
                        reason,
                    })?;
                *slot = Some(futures_rustls::TlsAcceptor::from(cfg));
            }
        }
        let addr = spec.resolve().map_err(|e| ListenerError::Bind {
            addr: spec.to_string(),
            source: e,
        })?;
        endpoints.push(Endpoint {
            name: spec.name.clone(),
            protocol: spec.protocol,
            host: spec.advertised_host(),
            port: addr.port() as i32,
            addr,
        });
    }
    Ok((endpoints, acceptors))
}

/// The TLS acceptor of each TLS protocol (None: no such listener).
#[derive(Default)]
pub struct Acceptors {
    ssl: Option<futures_rustls::TlsAcceptor>,
    sasl_ssl: Option<futures_rustls::TlsAcceptor>,
}

impl Acceptors {
    pub fn for_protocol(&self, p: SecurityProtocol) -> Option<futures_rustls::TlsAcceptor> {
        match p {
            SecurityProtocol::Ssl => self.ssl.clone(),
            SecurityProtocol::SaslSsl => self.sasl_ssl.clone(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_list_parses_into_specs() {
        let l = parse_listeners(
            "PLAINTEXT://127.0.0.1:9092, SSL://:9093,sasl_ssl://[::1]:0,SASL_PLAINTEXT://host.example:1",
        )
        .unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(
            l[0],
            ListenerSpec {
                name: "PLAINTEXT".into(),
                protocol: SecurityProtocol::Plaintext,
                host: "127.0.0.1".into(),
                port: 9092
            }
        );
        assert_eq!(
            (l[1].protocol, l[1].host.as_str(), l[1].port),
            (SecurityProtocol::Ssl, "", 9093)
        );
        assert_eq!(l[1].host_port(), "0.0.0.0:9093");
        assert_eq!(l[1].advertised_host(), "localhost");
        assert_eq!(
            (l[2].name.as_str(), l[2].host.as_str(), l[2].port),
            ("SASL_SSL", "::1", 0)
        );
        assert_eq!(l[2].host_port(), "[::1]:0");
        assert_eq!(l[2].to_string(), "SASL_SSL://[::1]:0");
        assert_eq!(l[3].protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(l[3].advertised_host(), "host.example");
        assert_eq!(
            ListenerSpec::plaintext("127.0.0.1:0").unwrap().to_string(),
            "PLAINTEXT://127.0.0.1:0"
        );
    }

    #[test]
    fn bad_listener_lists_are_refused_with_the_reason() {
        for (bad, why) in [
            ("", "no listener"),
            ("127.0.0.1:9092", "PROTOCOL://HOST:PORT"),
            ("TLS://127.0.0.1:9092", "unknown security protocol"),
            ("SSL://127.0.0.1", "no port"),
            ("SSL://127.0.0.1:99999", "bad port"),
            ("SSL://127.0.0.1:x", "bad port"),
            ("SSL://::1:9092", "brackets"),
            ("SSL://[::1:9092", "unbalanced"),
            ("SSL://a:1,SSL://b:2", "appears twice"),
            ("PLAINTEXT://a:1,SSL://a:1", "same address"),
        ] {
            let e = parse_listeners(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // Port 0 twice is fine: each picks its own.
        assert_eq!(
            parse_listeners("PLAINTEXT://a:0,SSL://a:0").unwrap().len(),
            2
        );
    }

    #[test]
    fn port_zero_resolves_to_a_free_port() {
        let l = ListenerSpec::plaintext("127.0.0.1:0").unwrap();
        let a = l.resolve().unwrap();
        assert_ne!(a.port(), 0);
        assert!(a.ip().is_loopback());
    }
}
