//! Broker-wide counters for the Prometheus endpoint. Relaxed atomics: each increment is a
//! single uncontended-in-practice add, off any lock.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use kafka_protocol::messages::ApiKey;

use crate::versions::SERVED;

/// Counters shared by all cores.
pub struct NetMetrics {
    requests: Vec<AtomicU64>,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub connections_accepted: AtomicU64,
    pub connections_active: AtomicI64,
    /// Connections closed because of a malformed frame, unknown key or unsupported version.
    pub protocol_errors: AtomicU64,
    /// SASL exchanges that failed (wrong credentials, unsupported mechanism, bad token).
    pub sasl_authentication_failures: AtomicU64,
    /// SASL exchanges that succeeded (first authentications and re-authentications).
    pub sasl_authentications: AtomicU64,
}

impl Default for NetMetrics {
    fn default() -> Self {
        NetMetrics {
            requests: SERVED.iter().map(|_| AtomicU64::new(0)).collect(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            connections_accepted: AtomicU64::new(0),
            connections_active: AtomicI64::new(0),
            protocol_errors: AtomicU64::new(0),
            sasl_authentication_failures: AtomicU64::new(0),
            sasl_authentications: AtomicU64::new(0),
        }
    }
}

impl NetMetrics {
    pub fn count_request(&self, key: ApiKey) {
        if let Some(i) = SERVED.iter().position(|(k, _)| *k == key) {
            self.requests[i].fetch_add(1, Relaxed);
        }
    }

    /// Prometheus text exposition of these counters.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# HELP kmirror_requests_total Kafka requests handled, by API."
        );
        let _ = writeln!(s, "# TYPE kmirror_requests_total counter");
        for (i, (k, _)) in SERVED.iter().enumerate() {
            let _ = writeln!(
                s,
                "kmirror_requests_total{{api=\"{k:?}\"}} {}",
                self.requests[i].load(Relaxed)
            );
        }
        let mut one = |name: &str, kind: &str, help: &str, v: i64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        one(
            "kmirror_network_bytes_in_total",
            "counter",
            "Request bytes received.",
            self.bytes_in.load(Relaxed) as i64,
        );
        one(
            "kmirror_network_bytes_out_total",
            "counter",
            "Response bytes sent.",
            self.bytes_out.load(Relaxed) as i64,
        );
        one(
            "kmirror_connections_accepted_total",
            "counter",
            "Client connections accepted.",
            self.connections_accepted.load(Relaxed) as i64,
        );
        one(
            "kmirror_connections_active",
            "gauge",
            "Client connections open now.",
            self.connections_active.load(Relaxed),
        );
        one(
            "kmirror_protocol_errors_total",
            "counter",
            "Connections closed for malformed or unsupported requests.",
            self.protocol_errors.load(Relaxed) as i64,
        );
        one(
            "kmirror_sasl_authentication_failures_total",
            "counter",
            "Failed SASL authentications.",
            self.sasl_authentication_failures.load(Relaxed) as i64,
        );
        one(
            "kmirror_sasl_authentications_total",
            "counter",
            "Successful SASL authentications and re-authentications.",
            self.sasl_authentications.load(Relaxed) as i64,
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_show_up_in_the_exposition() {
        let m = NetMetrics::default();
        m.count_request(ApiKey::Produce);
        m.count_request(ApiKey::Produce);
        m.bytes_in.fetch_add(10, Relaxed);
        let text = m.render();
        assert!(
            text.contains("kmirror_requests_total{api=\"Produce\"} 2"),
            "{text}"
        );
        assert!(text.contains("kmirror_network_bytes_in_total 10"));
    }
}
