//! The inter-broker client of a cluster node: connections to peers' inter-broker listener
//! (`kmirror_net::interbroker`) made with this crate's client, so TLS and SASL are written
//! once for mirror sources and peers alike.

use std::time::Duration;

use bytes::Bytes;
use kmirror_net::interbroker::Exchange;

use crate::client::AsyncConnection;
use crate::client::security::ClientSecurity;

/// The inter-broker dialer of a cluster node: an [`AsyncConnection`] per exchange to the
/// peer's inter-broker listener, on the calling core, with TLS and SASL as `security` says
/// (the broker's own client credentials, Kafka's `sasl.mechanism.inter.broker.protocol` and
/// listener-scoped JAAS). The replica fetcher connects with the same [`ClientSecurity`].
#[derive(Debug, Clone)]
pub struct InterBrokerDialer {
    pub security: ClientSecurity,
    pub client_id: String,
}

impl kmirror_net::interbroker::Dialer for InterBrokerDialer {
    fn exchange<'a>(&'a self, addr: &'a str, frame: Bytes, timeout: Duration) -> Exchange<'a> {
        Box::pin(async move {
            // Connecting (TLS, ApiVersions, SASL) is bounded by a short timeout; the exchange
            // by the rest of the caller's.
            let connect = timeout.min(Duration::from_secs(10));
            let mut c =
                AsyncConnection::connect_secured(addr, &self.client_id, connect, &self.security)
                    .await
                    .map_err(|e| e.to_string())?;
            c.exchange_frame(&frame, timeout.saturating_sub(connect))
                .await
                .map_err(|e| e.to_string())
        })
    }
}
