//! How a node of a cluster reaches its peers' Kafka listeners (Kafka's
//! `inter.broker.listener.name` and the broker's own client credentials for it).
//!
//! Owns: [`InterBroker`], the listener peers are reached on and the [`Dialer`] that opens a
//! connection to it. Every node-to-node Kafka-protocol request goes through it: the replica
//! fetcher (its address; the `mirror` crate connects with the same credentials), transaction
//! markers (WriteTxnMarkers), DescribeQuorum and mirror requests forwarded to the leader.
//!
//! A peer's address is the endpoint of that name it registered with the quorum (every
//! broker registers all its listeners). kmirror names a listener by its protocol, as
//! Kafka does when `listener.security.protocol.map` is not set, so the name is one of
//! PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL. The dialer with TLS and SASL lives in the
//! `mirror` crate (its client); this crate only has the plaintext one, used when no other is
//! given (tests, one-node brokers).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kmirror_control::metadata::ClusterMetadata;

/// Opens connections to peers' inter-broker listener and runs one exchange on them.
pub trait Dialer: Send + Sync + std::fmt::Debug + 'static {
    /// Sends one request frame (header and body, without the size prefix) to `addr` and
    /// returns the response frame (without its size prefix). Blocking: call it from a plain
    /// thread, never an engine core. The connection is authenticated as the listener needs.
    fn exchange(&self, addr: &str, frame: &[u8], timeout: Duration) -> Result<Bytes, String>;
}

/// A PLAINTEXT connection with no authentication (the default inter-broker listener).
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainDialer;

/// Largest response frame read.
const MAX_RESPONSE: usize = 100 << 20;

impl Dialer for PlainDialer {
    fn exchange(&self, addr: &str, frame: &[u8], timeout: Duration) -> Result<Bytes, String> {
        let err = |e: std::io::Error| e.to_string();
        let sa = addr
            .to_socket_addrs()
            .map_err(err)?
            .next()
            .ok_or_else(|| format!("{addr} resolves to nothing"))?;
        let mut s = TcpStream::connect_timeout(&sa, timeout).map_err(err)?;
        s.set_read_timeout(Some(timeout)).map_err(err)?;
        s.set_write_timeout(Some(timeout)).map_err(err)?;
        let len = u32::try_from(frame.len()).map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(frame.len() + 4);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(frame);
        s.write_all(&out).map_err(err)?;
        let mut len = [0u8; 4];
        s.read_exact(&mut len).map_err(err)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_RESPONSE {
            return Err(format!("response frame of {len} bytes"));
        }
        let mut buf = vec![0u8; len];
        s.read_exact(&mut buf).map_err(err)?;
        Ok(Bytes::from(buf))
    }
}

/// The inter-broker listener of this node's peers and how to connect to it.
#[derive(Clone)]
pub struct InterBroker {
    listener: String,
    /// Named by the operator: a peer without that listener is not reached another way
    /// (falling back to its first listener could send the request in the clear).
    explicit: bool,
    dialer: Arc<dyn Dialer>,
}

impl std::fmt::Debug for InterBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterBroker")
            .field("listener", &self.listener)
            .field("explicit", &self.explicit)
            .finish_non_exhaustive()
    }
}

impl InterBroker {
    /// `listener`: the name set by the operator, or `None` for this node's first listener
    /// (`first`), reached in the clear unless `dialer` says otherwise.
    pub fn new(listener: Option<&str>, first: &str, dialer: Arc<dyn Dialer>) -> InterBroker {
        InterBroker {
            listener: listener.unwrap_or(first).to_string(),
            explicit: listener.is_some(),
            dialer,
        }
    }

    /// The first listener, in the clear (a one-node broker; the default).
    pub fn plain(first: &str) -> InterBroker {
        InterBroker::new(None, first, Arc::new(PlainDialer))
    }

    /// The listener's name.
    pub fn listener(&self) -> &str {
        &self.listener
    }

    /// `HOST:PORT` of broker `id`'s inter-broker listener, as it registered it.
    pub fn peer_addr(&self, meta: &ClusterMetadata, id: i32) -> Option<String> {
        let b = meta.brokers.get(&id)?;
        let named = b.endpoints.iter().find(|e| e.name == self.listener);
        let e = if self.explicit {
            named?
        } else {
            named.or_else(|| b.endpoints.first())?
        };
        Some(if e.host.contains(':') {
            format!("[{}]:{}", e.host, e.port)
        } else {
            format!("{}:{}", e.host, e.port)
        })
    }

    /// See [`Dialer::exchange`].
    pub fn exchange(&self, addr: &str, frame: &[u8], timeout: Duration) -> Result<Bytes, String> {
        self.dialer.exchange(addr, frame, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_control::metadata::{BrokerEndpoint, BrokerRegistration};

    fn meta() -> ClusterMetadata {
        let mut m = ClusterMetadata {
            cluster_id: String::new(),
            version: 0,
            topics: Default::default(),
            internal_topics: Default::default(),
            brokers: Default::default(),
        };
        let ep = |name: &str, port| BrokerEndpoint {
            name: name.into(),
            host: "10.0.0.2".into(),
            port,
            security_protocol: 0,
        };
        m.brokers.insert(
            2,
            BrokerRegistration {
                id: 2,
                incarnation: uuid::Uuid::nil(),
                endpoints: vec![ep("PLAINTEXT", 9092), ep("SASL_SSL", 9093)],
                rack: None,
                fenced: false,
            },
        );
        m
    }

    #[test]
    fn the_named_listener_is_used_and_never_replaced_by_another() {
        let m = meta();
        let named = InterBroker::new(Some("SASL_SSL"), "PLAINTEXT", Arc::new(PlainDialer));
        assert_eq!(named.peer_addr(&m, 2).as_deref(), Some("10.0.0.2:9093"));
        let missing = InterBroker::new(Some("SSL"), "PLAINTEXT", Arc::new(PlainDialer));
        assert_eq!(missing.peer_addr(&m, 2), None);
        assert_eq!(missing.peer_addr(&m, 3), None);
        // The default: this node's first listener's name, else the peer's first listener.
        let default = InterBroker::plain("SSL");
        assert_eq!(default.peer_addr(&m, 2).as_deref(), Some("10.0.0.2:9092"));
        assert_eq!(
            InterBroker::plain("SASL_SSL").peer_addr(&m, 2).as_deref(),
            Some("10.0.0.2:9093")
        );
    }
}
