//! Broker-wide counters for the Prometheus endpoint. Relaxed atomics: each increment is a
//! single uncontended-in-practice add, off any lock. Exposed through `prometheus-client`
//! collectors that read the atomics at scrape time (the endpoint itself is the binary's).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use kafka_protocol::messages::ApiKey;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::broker::Broker;
use crate::versions::SERVED;

/// Counters shared by all cores.
#[derive(Debug)]
pub struct NetMetrics {
    requests: Vec<AtomicU64>,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub connections_accepted: AtomicU64,
    pub connections_active: AtomicI64,
    /// Connections closed unread because their IP exceeded its `connection_creation_rate`.
    pub connections_throttled: AtomicU64,
    /// Connections closed at once: their IP held its `max.connections.per.ip`.
    pub connections_refused: AtomicU64,
    /// Connections closed because of a malformed frame, unknown key or unsupported version.
    pub protocol_errors: AtomicU64,
    /// SASL exchanges that failed (wrong credentials, unsupported mechanism, bad token).
    pub sasl_authentication_failures: AtomicU64,
    /// SASL exchanges that succeeded (first authentications and re-authentications).
    pub sasl_authentications: AtomicU64,
    /// Produce / Fetch requests over their client quota, and the throttle time they got.
    pub quota_throttled_produce: AtomicU64,
    pub quota_throttled_fetch: AtomicU64,
    pub quota_produce_throttle_ms: AtomicU64,
    pub quota_fetch_throttle_ms: AtomicU64,
}

impl Default for NetMetrics {
    fn default() -> Self {
        NetMetrics {
            requests: SERVED.iter().map(|_| AtomicU64::new(0)).collect(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            connections_accepted: AtomicU64::new(0),
            connections_active: AtomicI64::new(0),
            connections_throttled: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            sasl_authentication_failures: AtomicU64::new(0),
            sasl_authentications: AtomicU64::new(0),
            quota_throttled_produce: AtomicU64::new(0),
            quota_throttled_fetch: AtomicU64::new(0),
            quota_produce_throttle_ms: AtomicU64::new(0),
            quota_fetch_throttle_ms: AtomicU64::new(0),
        }
    }
}

impl NetMetrics {
    pub fn count_request(&self, key: ApiKey) {
        if let Some(i) = SERVED.iter().position(|(k, _)| *k == key) {
            self.requests[i].fetch_add(1, Relaxed);
        }
    }

    /// Encode these counters (names listed in docs/METRICS.md; the encoder appends `_total`
    /// to counters).
    pub fn encode(&self, e: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut m = e.encode_descriptor(
            "kmirror_requests",
            "Kafka requests handled, by API.",
            None,
            MetricType::Counter,
        )?;
        for (i, (k, _)) in SERVED.iter().enumerate() {
            let labels = [("api", format!("{k:?}"))];
            ConstCounter::new(self.requests[i].load(Relaxed)).encode(m.encode_family(&labels)?)?;
        }
        let counters = [
            (
                "kmirror_network_bytes_in",
                "Request bytes received.",
                &self.bytes_in,
            ),
            (
                "kmirror_network_bytes_out",
                "Response bytes sent.",
                &self.bytes_out,
            ),
            (
                "kmirror_connections_accepted",
                "Client connections accepted.",
                &self.connections_accepted,
            ),
            (
                "kmirror_connections_throttled",
                "Connections closed unread: their IP was over its connection_creation_rate.",
                &self.connections_throttled,
            ),
            (
                "kmirror_connections_refused",
                "Connections closed at once: their IP held its max.connections.per.ip.",
                &self.connections_refused,
            ),
            (
                "kmirror_protocol_errors",
                "Connections closed for malformed or unsupported requests.",
                &self.protocol_errors,
            ),
            (
                "kmirror_sasl_authentication_failures",
                "Failed SASL authentications.",
                &self.sasl_authentication_failures,
            ),
            (
                "kmirror_sasl_authentications",
                "Successful SASL authentications and re-authentications.",
                &self.sasl_authentications,
            ),
            (
                "kmirror_quota_throttled_produce_requests",
                "Produce requests over their client's producer_byte_rate (throttled).",
                &self.quota_throttled_produce,
            ),
            (
                "kmirror_quota_throttled_fetch_requests",
                "Fetch requests over their client's consumer_byte_rate (answered empty, throttled).",
                &self.quota_throttled_fetch,
            ),
            (
                "kmirror_quota_produce_throttle_ms",
                "Throttle time given to Produce requests by client quotas, in ms.",
                &self.quota_produce_throttle_ms,
            ),
            (
                "kmirror_quota_fetch_throttle_ms",
                "Throttle time given to Fetch requests by client quotas, in ms.",
                &self.quota_fetch_throttle_ms,
            ),
        ];
        for (name, help, v) in counters {
            let c = ConstCounter::new(v.load(Relaxed));
            c.encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)?;
        }
        let g = ConstGauge::new(self.connections_active.load(Relaxed));
        g.encode(e.encode_descriptor(
            "kmirror_connections_active",
            "Client connections open now.",
            None,
            MetricType::Gauge,
        )?)
    }
}

/// The broker families: `kmirror_up`, cores, topic and partition counts, and
/// [`NetMetrics`], computed at each scrape.
pub struct BrokerCollector {
    pub broker: Arc<Broker>,
    pub cores: usize,
}

impl std::fmt::Debug for BrokerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerCollector")
            .field("cores", &self.cores)
            .finish_non_exhaustive()
    }
}

impl Collector for BrokerCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let meta = self.broker.cluster.snapshot();
        let partitions: i64 = meta
            .topics
            .values()
            .map(|t| t.partition_count() as i64)
            .sum();
        let mirrored: i64 = meta
            .topics
            .values()
            .filter(|t| t.mirror.is_some())
            .map(|t| t.partition_count() as i64)
            .sum();
        let gauges = [
            ("kmirror_up", "1 while the broker runs.", 1),
            ("kmirror_cores", "Executor cores.", self.cores as i64),
            ("kmirror_topics", "Topics.", meta.topics.len() as i64),
            ("kmirror_partitions", "Partitions.", partitions),
            (
                "kmirror_mirrored_partitions",
                "Partitions of mirror topics.",
                mirrored,
            ),
        ];
        for (name, help, v) in gauges {
            ConstGauge::new(v).encode(e.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?)?;
        }
        self.broker.metrics.encode(&mut e)
    }
}

/// Text exposition (OpenMetrics) of everything in `registry`.
pub fn render(registry: &Registry) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail; an encoder error would be a bug in a collector.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut s, registry) {
        tracing::warn!(error = %e, "metrics encoding failed");
    }
    s
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
        #[derive(Debug)]
        struct C(NetMetrics);
        impl Collector for C {
            fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
                self.0.encode(&mut e)
            }
        }
        let mut reg = Registry::default();
        reg.register_collector(Box::new(C(m)));
        let text = render(&reg);
        assert!(
            text.contains("kmirror_requests_total{api=\"Produce\"} 2"),
            "{text}"
        );
        assert!(text.contains("kmirror_network_bytes_in_total 10"));
    }
}
