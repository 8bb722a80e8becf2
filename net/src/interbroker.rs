//! How a node of a cluster reaches its peers' Kafka listeners (Kafka's
//! `inter.broker.listener.name` and the broker's own client credentials for it).
//!
//! Owns: [`InterBroker`], the listener peers are reached on and the client security
//! (TLS, SASL) to reach it with. Every node-to-node Kafka-protocol request goes through it:
//! the replica fetchers (a long-lived connection each, [`InterBroker::connect`]),
//! transaction markers (WriteTxnMarkers), DescribeQuorum and mirror requests forwarded to the
//! leader ([`InterBroker::exchange`], a connection per exchange), and the share-group state
//! RPCs on a connection kept per engine core and peer ([`InterBroker::request_kept`]). All
//! of them use the one client stack, [`crate::client`].
//!
//! A peer's address is the endpoint of that name it registered with the quorum (every
//! broker registers all its listeners). kmirror names a listener by its protocol, as
//! Kafka does when `listener.security.protocol.map` is not set, so the name is one of
//! PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.

use std::time::Duration;

use bytes::Bytes;
use kmirror_control::metadata::ClusterMetadata;

use crate::client::security::ClientSecurity;
use crate::client::{AsyncConnection, ClientError};

/// Connecting (TCP, TLS, ApiVersions, SASL) is bounded by this, or by the caller's whole
/// bound when that is shorter.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

std::thread_local! {
    /// [`InterBroker::request_kept`]'s connections on this engine core, by (peer address,
    /// client id): at most one per peer, taken out while in use.
    static KEPT: std::cell::RefCell<std::collections::HashMap<(String, String), AsyncConnection>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The inter-broker listener of this node's peers and how to connect to it.
#[derive(Debug, Clone)]
pub struct InterBroker {
    listener: String,
    /// Named by the operator: a peer without that listener is not reached another way
    /// (falling back to its first listener could send the request in the clear).
    explicit: bool,
    /// The broker's own client settings for that listener (Kafka's
    /// `sasl.mechanism.inter.broker.protocol` and listener-scoped JAAS); its Debug hides
    /// secrets.
    security: ClientSecurity,
    client_id: String,
}

impl InterBroker {
    /// `listener`: the name set by the operator, or `None` for this node's first listener
    /// (`first`), reached with `security`; `node_id` names this node's connections.
    pub fn new(
        listener: Option<&str>,
        first: &str,
        security: ClientSecurity,
        node_id: i32,
    ) -> InterBroker {
        InterBroker {
            listener: listener.unwrap_or(first).to_string(),
            explicit: listener.is_some(),
            security,
            client_id: format!("kmirror-{node_id}-inter-broker"),
        }
    }

    /// The first listener, in the clear (a one-node broker; the default).
    pub fn plain(first: &str) -> InterBroker {
        InterBroker::new(None, first, ClientSecurity::plaintext(), -1)
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

    /// A connection to `addr` (a peer's inter-broker listener) with this node's TLS and SASL
    /// settings, named `client_id`. Async on the calling engine core.
    pub async fn connect(
        &self,
        addr: &str,
        client_id: &str,
    ) -> Result<AsyncConnection, ClientError> {
        AsyncConnection::connect_secured(addr, client_id, CONNECT_TIMEOUT, &self.security).await
    }

    /// A connection to `addr` made within `timeout` (at most [`CONNECT_TIMEOUT`]), and the
    /// extra wait its one exchange gets on top of the connection's own timeout so that the
    /// exchange ends within what is left of `timeout`.
    async fn connect_within(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<(AsyncConnection, Duration), ClientError> {
        let connect = timeout.min(CONNECT_TIMEOUT);
        let started = std::time::Instant::now();
        let c = AsyncConnection::connect_secured(addr, &self.client_id, connect, &self.security)
            .await?;
        let left = timeout.saturating_sub(started.elapsed());
        Ok((c, left.saturating_sub(connect)))
    }

    /// Sends `req` at exactly `version` to `addr` on a new connection and decodes the answer,
    /// all within `timeout` (a peer that does not serve that version answers
    /// [`ClientError::UnsupportedApi`]).
    pub async fn request<R: kafka_protocol::protocol::Request>(
        &self,
        addr: &str,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response, ClientError> {
        Ok(self.request_on_new(addr, req, version, timeout).await?.1)
    }

    /// [`Self::request`], and the connection it was sent on.
    async fn request_on_new<R: kafka_protocol::protocol::Request>(
        &self,
        addr: &str,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<(AsyncConnection, R::Response), ClientError> {
        let (mut c, extra) = self.connect_within(addr, timeout).await?;
        let (_, resp) = c.send_with(req, version, version, extra).await?;
        Ok((c, resp))
    }

    /// [`Self::request`] on a connection kept open per engine core and peer, for requests
    /// a node sends its peers often (the share-group state RPCs: one per acknowledgement
    /// that changes a partition's state). A kept connection that fails (the peer restarted,
    /// or closed it while idle) is dropped and the request sent once more on a new one, so
    /// use it only for requests that may be applied twice (the share state RPCs overwrite
    /// state).
    pub async fn request_kept<R: kafka_protocol::protocol::Request>(
        &self,
        addr: &str,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response, ClientError> {
        let key = (addr.to_owned(), self.client_id.clone());
        let kept = KEPT.with(|k| k.borrow_mut().remove(&key));
        let started = std::time::Instant::now();
        if let Some(mut c) = kept.filter(|c| !c.session_expiring()) {
            if let Ok((_, resp)) = c.send_with(req, version, version, Duration::ZERO).await {
                KEPT.with(|k| k.borrow_mut().insert(key, c));
                return Ok(resp);
            }
        }
        let left = timeout.saturating_sub(started.elapsed());
        let (c, resp) = self.request_on_new(addr, req, version, left).await?;
        KEPT.with(|k| k.borrow_mut().insert(key, c));
        Ok(resp)
    }

    /// Sends one request frame (header and body, without the size prefix) to `addr` on a new
    /// connection and returns the response frame (without its size prefix), all within
    /// `timeout`. The correlation id is the frame's own, so a forwarded request's answer
    /// passes back as is. Async on the calling engine core (glommio sockets: poll it on a
    /// core, never a plain thread).
    pub async fn exchange(
        &self,
        addr: &str,
        frame: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, ClientError> {
        let (mut c, extra) = self.connect_within(addr, timeout).await?;
        c.exchange_frame(&frame, extra).await
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
            broker_configs: Default::default(),
            group_configs: Default::default(),
            features: Default::default(),
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

    /// A peer that answers ApiVersions (as every Kafka listener does first), then reads one
    /// frame and answers it with `answer` (None: stays silent from the start).
    fn peer(answer: Option<&'static [u8]>) -> String {
        use bytes::{Buf, BytesMut};
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        use kafka_protocol::messages::{ApiVersionsResponse, RequestHeader, ResponseHeader};
        use kafka_protocol::protocol::{Decodable, Encodable};
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let Some(answer) = answer else {
                std::thread::sleep(Duration::from_secs(3));
                return;
            };
            let read_frame = |s: &mut std::net::TcpStream| {
                let mut len = [0u8; 4];
                s.read_exact(&mut len).unwrap();
                let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
                s.read_exact(&mut frame).unwrap();
                frame
            };
            let mut req = Bytes::from(read_frame(&mut s));
            let h = RequestHeader::decode(&mut req, 2).unwrap();
            assert_eq!(h.request_api_key, 18, "ApiVersions first");
            let mut out = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(h.correlation_id)
                .encode(&mut out, 0)
                .unwrap();
            ApiVersionsResponse::default()
                .with_api_keys(vec![ApiVersion::default()
                    .with_api_key(18)
                    .with_max_version(3)])
                .encode(&mut out, h.request_api_version)
                .unwrap();
            s.write_all(&(out.len() as u32).to_be_bytes()).unwrap();
            s.write_all(&out).unwrap();
            let ping = read_frame(&mut s);
            assert_eq!(ping, b"ping");
            s.write_all(&(answer.len() as u32).to_be_bytes()).unwrap();
            s.write_all(answer).unwrap();
            let _ = req.remaining();
        });
        addr
    }

    fn exchange_on_a_core(addr: String, timeout: Duration) -> Result<Bytes, ClientError> {
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                InterBroker::plain("PLAINTEXT")
                    .exchange(&addr, Bytes::from_static(b"ping"), timeout)
                    .await
            })
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn an_exchange_returns_the_peers_answer_frame() {
        let addr = peer(Some(b"pong"));
        let got = exchange_on_a_core(addr, Duration::from_secs(5)).unwrap();
        assert_eq!(&got[..], b"pong");
    }

    #[test]
    fn a_silent_peer_is_a_timeout_within_the_callers_bound() {
        let addr = peer(None);
        let started = std::time::Instant::now();
        let err = exchange_on_a_core(addr, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, ClientError::Timeout { .. }), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn the_named_listener_is_used_and_never_replaced_by_another() {
        let m = meta();
        let named = InterBroker::new(
            Some("SASL_SSL"),
            "PLAINTEXT",
            ClientSecurity::plaintext(),
            1,
        );
        assert_eq!(named.peer_addr(&m, 2).as_deref(), Some("10.0.0.2:9093"));
        let missing = InterBroker::new(Some("SSL"), "PLAINTEXT", ClientSecurity::plaintext(), 1);
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
