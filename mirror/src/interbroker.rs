//! The inter-broker client of a cluster node: connections to peers' inter-broker listener
//! (`kmirror_net::interbroker`) made with this crate's client, so TLS and SASL are written
//! once for mirror sources and peers alike.

use std::time::Duration;

use bytes::Bytes;

use crate::client::BlockingConnection;
use crate::client_security::ClientSecurity;

/// The inter-broker dialer of a cluster node: a [`BlockingConnection`] per exchange to the
/// peer's inter-broker listener, with TLS and SASL as `security` says (the broker's own
/// client credentials, Kafka's `sasl.mechanism.inter.broker.protocol` and listener-scoped
/// JAAS). The replica fetcher connects with the same [`ClientSecurity`].
#[derive(Debug, Clone)]
pub struct InterBrokerDialer {
    pub security: ClientSecurity,
    pub client_id: String,
}

impl kmirror_net::interbroker::Dialer for InterBrokerDialer {
    fn exchange(&self, addr: &str, frame: &[u8], timeout: Duration) -> Result<Bytes, String> {
        // Connecting (TLS, ApiVersions, SASL) is bounded by a short timeout; the exchange
        // itself by the caller's.
        let connect = timeout.min(Duration::from_secs(10));
        let mut c =
            BlockingConnection::connect_secured(addr, &self.client_id, connect, &self.security)
                .map_err(|e| e.to_string())?;
        c.exchange_frame(frame, timeout.saturating_sub(connect))
            .map_err(|e| e.to_string())
    }
}
