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

use std::future::Future;
use std::net::ToSocketAddrs;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use kmirror_control::metadata::ClusterMetadata;

/// A dialer's exchange in flight: it holds the core's socket, so it stays on that core.
pub type Exchange<'a> = Pin<Box<dyn Future<Output = Result<Bytes, String>> + 'a>>;

/// Opens connections to peers' inter-broker listener and runs one exchange on them.
pub trait Dialer: Send + Sync + std::fmt::Debug + 'static {
    /// Sends one request frame (header and body, without the size prefix) to `addr` and
    /// returns the response frame (without its size prefix), all within `timeout`. Async on
    /// the calling engine core (glommio sockets: poll it on a core, never a plain thread).
    /// The connection is authenticated as the listener needs.
    fn exchange<'a>(&'a self, addr: &'a str, frame: Bytes, timeout: Duration) -> Exchange<'a>;
}

/// A PLAINTEXT connection with no authentication (the default inter-broker listener).
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainDialer;

/// Largest response frame read.
const MAX_RESPONSE: usize = 100 << 20;

impl Dialer for PlainDialer {
    fn exchange<'a>(&'a self, addr: &'a str, frame: Bytes, timeout: Duration) -> Exchange<'a> {
        Box::pin(async move {
            let sa = addr
                .to_socket_addrs()
                .map_err(|e| e.to_string())?
                .next()
                .ok_or_else(|| format!("{addr} resolves to nothing"))?;
            let len = u32::try_from(frame.len()).map_err(|e| e.to_string())?;
            let mut out = BytesMut::with_capacity(frame.len() + 4);
            out.put_u32(len);
            out.extend_from_slice(&frame);
            let exchange = async move {
                let mut s = glommio::net::TcpStream::connect_timeout(sa, timeout).await?;
                s.set_nodelay(true)?;
                s.write_all(&out).await?;
                let mut len = [0u8; 4];
                s.read_exact(&mut len).await?;
                let len = u32::from_be_bytes(len) as usize;
                if len > MAX_RESPONSE {
                    return Err(glommio::GlommioError::IoError(std::io::Error::other(
                        format!("response frame of {len} bytes"),
                    )));
                }
                let mut buf = vec![0u8; len];
                s.read_exact(&mut buf).await?;
                Ok(Bytes::from(buf))
            };
            // One deadline for connect, request and response, as the socket timeouts of a
            // blocking client bounded each step.
            glommio::timer::timeout(timeout, exchange)
                .await
                .map_err(|e| match e {
                    glommio::GlommioError::TimedOut(_) => format!("{addr}: timed out"),
                    e => format!("{addr}: {e}"),
                })
        })
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

    /// See [`Dialer::exchange`] (on an engine core).
    pub async fn exchange(
        &self,
        addr: &str,
        frame: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, String> {
        self.dialer.exchange(addr, frame, timeout).await
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

    /// A peer that reads one frame and answers it with `answer` (None: stays silent).
    fn peer(answer: Option<&'static [u8]>) -> String {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut len = [0u8; 4];
            s.read_exact(&mut len).unwrap();
            let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
            s.read_exact(&mut frame).unwrap();
            assert_eq!(frame, b"ping");
            match answer {
                Some(a) => {
                    s.write_all(&(a.len() as u32).to_be_bytes()).unwrap();
                    s.write_all(a).unwrap();
                }
                None => std::thread::sleep(Duration::from_secs(3)),
            }
        });
        addr
    }

    fn exchange_on_a_core(addr: String, timeout: Duration) -> Result<Bytes, String> {
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                PlainDialer
                    .exchange(&addr, Bytes::from_static(b"ping"), timeout)
                    .await
            })
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn the_plain_dialer_returns_the_peers_answer_frame() {
        let addr = peer(Some(b"pong"));
        let got = exchange_on_a_core(addr, Duration::from_secs(5)).unwrap();
        assert_eq!(&got[..], b"pong");
    }

    #[test]
    fn a_silent_peer_is_a_timeout_within_the_callers_bound() {
        let addr = peer(None);
        let started = std::time::Instant::now();
        let err = exchange_on_a_core(addr, Duration::from_millis(300)).unwrap_err();
        assert!(err.contains("timed out"), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
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
