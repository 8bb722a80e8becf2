//! The broker's connection limits, as Kafka's `ConnectionQuotas` applies its dynamic broker
//! configs (per node, then the cluster-wide default, then Kafka's default of "unlimited"):
//!
//! - `max.connections.per.ip` and `max.connections.per.ip.overrides` (`host:count,...`): a
//!   connection from an IP already holding its maximum is closed at once, unread.
//! - `max.connections` and `listener.name.<l>.max.connections`: at the limit the listener
//!   stops accepting (the connection just accepted waits, unread, for a slot; later ones wait
//!   in the kernel's backlog). An inter-broker listener, when there are several listeners, is
//!   not held to the broker-wide limit.
//! - `max.connection.creation.rate` and `listener.name.<l>.max.connection.creation.rate`: a
//!   connection over the rate is accepted late (the listener waits the throttle time), not
//!   refused.
//!
//! An IP's own `connection_creation_rate` quota is [`crate::conn_quota`]'s. Every core accepts
//! on its own socket (SO_REUSEPORT), so the counts are shared: one mutex, taken once per
//! accepted and per closed connection, never on the request path. The limits are resolved
//! again only when the metadata version changes.

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};

use kmirror_control::metadata::ClusterMetadata;

use crate::conn_quota::{canonical, RateSensor};

/// Kafka's default of every limit here (`Int.MaxValue`: none).
const UNLIMITED: i64 = i32::MAX as i64;

/// The limits in force, resolved from one metadata version.
#[derive(Debug, Clone, PartialEq)]
struct Limits {
    per_ip_default: i64,
    per_ip: HashMap<IpAddr, i64>,
    broker_max: i64,
    broker_rate: i64,
    /// Per listener (upper case, as listeners are named): (max connections, creation rate).
    listeners: HashMap<String, (i64, i64)>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_ip_default: UNLIMITED,
            per_ip: HashMap::new(),
            broker_max: UNLIMITED,
            broker_rate: UNLIMITED,
            listeners: HashMap::new(),
        }
    }
}

impl Limits {
    /// The limits of node `node` in `meta`'s dynamic broker configs; `listeners` are this
    /// node's listener names.
    fn resolve(meta: &ClusterMetadata, node: i32, listeners: &[String]) -> Limits {
        let own = meta.broker_configs.get(&node.to_string());
        let default = meta.broker_configs.get("");
        let get = |key: &str| -> Option<&str> {
            own.and_then(|m| m.get(key))
                .or_else(|| default.and_then(|m| m.get(key)))
                .map(|v| v.trim())
        };
        let int = |key: &str| -> Option<i64> { get(key).and_then(|v| v.parse().ok()) };
        let listeners = listeners
            .iter()
            .map(|l| {
                let prefix = format!("listener.name.{}.", l.to_ascii_lowercase());
                let max = int(&format!("{prefix}max.connections")).unwrap_or(UNLIMITED);
                let rate =
                    int(&format!("{prefix}max.connection.creation.rate")).unwrap_or(UNLIMITED);
                (l.to_ascii_uppercase(), (max, rate))
            })
            .collect();
        Limits {
            per_ip_default: int("max.connections.per.ip").unwrap_or(UNLIMITED),
            per_ip: get("max.connections.per.ip.overrides")
                .map(parse_overrides)
                .unwrap_or_default(),
            broker_max: int("max.connections").unwrap_or(UNLIMITED),
            broker_rate: int("max.connection.creation.rate").unwrap_or(UNLIMITED),
            listeners,
        }
    }

    fn listener(&self, listener: &str) -> (i64, i64) {
        self.listeners
            .get(listener)
            .copied()
            .unwrap_or((UNLIMITED, UNLIMITED))
    }

    fn per_ip(&self, ip: IpAddr) -> i64 {
        self.per_ip.get(&ip).copied().unwrap_or(self.per_ip_default)
    }
}

/// `host:count,host:count`: a host is an IP or a name (resolved now, as Kafka's
/// `InetAddress.getByName`; a name that does not resolve limits nothing).
fn parse_overrides(v: &str) -> HashMap<IpAddr, i64> {
    let mut out = HashMap::new();
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((host, count)) = entry.rsplit_once(':') else {
            continue;
        };
        let Ok(count) = count.trim().parse::<i64>() else {
            continue;
        };
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => (host, 0)
                .to_socket_addrs()
                .map(|a| a.map(|a| a.ip()).collect())
                .unwrap_or_default(),
        };
        for ip in ips {
            out.insert(canonical(ip), count);
        }
    }
    out
}

#[derive(Debug, Default)]
struct State {
    /// The metadata version the limits were resolved from.
    resolved: Option<u64>,
    limits: Limits,
    per_ip: HashMap<IpAddr, i64>,
    per_listener: HashMap<String, i64>,
    total: i64,
    broker_rate: RateSensor,
    listener_rates: HashMap<String, RateSensor>,
}

/// What the acceptor does with a connection it just accepted.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Counted: serve it; the guard gives the slot back when dropped.
    Open,
    /// No slot on the listener or the broker: wait, then ask again.
    NoSlot,
    /// Its IP holds its maximum (the limit given): close it now.
    TooManyFromIp(i64),
}

/// The node's connection counts and limits, shared by every core's acceptor.
#[derive(Debug)]
pub struct ConnLimits {
    node: i32,
    listeners: Vec<String>,
    /// The inter-broker listener (Kafka's protected listener when there are several).
    inter_broker: Option<String>,
    state: Mutex<State>,
}

/// A counted connection: dropping it frees the slot.
#[derive(Debug)]
pub struct ConnSlot {
    limits: Arc<ConnLimits>,
    listener: String,
    ip: IpAddr,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.limits.close(&self.listener, self.ip);
    }
}

impl ConnLimits {
    /// Limits of node `node` with listeners `listeners` (`inter_broker` among them, if any).
    pub fn new(node: i32, listeners: Vec<String>, inter_broker: Option<String>) -> ConnLimits {
        ConnLimits {
            node,
            listeners: listeners.iter().map(|l| l.to_ascii_uppercase()).collect(),
            inter_broker: inter_broker.map(|l| l.to_ascii_uppercase()),
            state: Mutex::new(State::default()),
        }
    }

    /// The state, its limits resolved again if `meta` is another version.
    fn lock(&self, meta: &ClusterMetadata) -> std::sync::MutexGuard<'_, State> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.resolved != Some(meta.version) {
            s.limits = Limits::resolve(meta, self.node, &self.listeners);
            s.resolved = Some(meta.version);
        }
        s
    }

    fn protected(&self, listener: &str) -> bool {
        self.inter_broker.as_deref() == Some(listener) && self.listeners.len() > 1
    }

    /// Records a new connection on `listener` against the broker-wide and listener creation
    /// rates; how long the acceptor waits before going on with it (0: at once). The
    /// connection stays recorded (Kafka delays it, it does not refuse it).
    pub fn creation_delay_ms(&self, meta: &ClusterMetadata, listener: &str, now_ms: i64) -> u64 {
        let listener = listener.to_ascii_uppercase();
        let mut s = self.lock(meta);
        let s = &mut *s;
        let mut delay = 0;
        if !self.protected(&listener) && s.limits.broker_rate < UNLIMITED {
            let rate = s.limits.broker_rate as f64;
            delay = s.broker_rate.record_and_throttle(rate, now_ms);
        }
        let (_, rate) = s.limits.listener(&listener);
        if rate < UNLIMITED {
            let sensor = s.listener_rates.entry(listener).or_default();
            delay = delay.max(sensor.record_and_throttle(rate as f64, now_ms));
        }
        delay
    }

    /// Takes back the creation recorded for a connection its IP's own rate refused (Kafka
    /// does not count it against the broker and listener rates).
    pub fn uncount_creation(&self, listener: &str, now_ms: i64) {
        let listener = listener.to_ascii_uppercase();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let s = &mut *s;
        if !self.protected(&listener) && s.limits.broker_rate < UNLIMITED {
            s.broker_rate.unrecord(now_ms);
        }
        if let Some(sensor) = s.listener_rates.get_mut(&listener) {
            sensor.unrecord(now_ms);
        }
    }

    /// Counts a connection from `ip` on `listener` if a slot is free and its IP is under
    /// its maximum.
    pub fn open(
        self: &Arc<Self>,
        meta: &ClusterMetadata,
        listener: &str,
        ip: IpAddr,
    ) -> (Admission, Option<ConnSlot>) {
        let listener = listener.to_ascii_uppercase();
        let ip = canonical(ip);
        let mut s = self.lock(meta);
        let (listener_max, _) = s.limits.listener(&listener);
        let on_listener = s.per_listener.get(&listener).copied().unwrap_or(0);
        let slot = on_listener < listener_max
            && (self.protected(&listener) || s.total < s.limits.broker_max);
        if !slot {
            return (Admission::NoSlot, None);
        }
        let max = s.limits.per_ip(ip);
        if s.per_ip.get(&ip).copied().unwrap_or(0) >= max {
            return (Admission::TooManyFromIp(max), None);
        }
        *s.per_ip.entry(ip).or_default() += 1;
        *s.per_listener.entry(listener.clone()).or_default() += 1;
        s.total += 1;
        let slot = ConnSlot {
            limits: Arc::clone(self),
            listener,
            ip,
        };
        (Admission::Open, Some(slot))
    }

    fn close(&self, listener: &str, ip: IpAddr) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = s.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n <= 0 {
                s.per_ip.remove(&ip);
            }
        }
        if let Some(n) = s.per_listener.get_mut(listener) {
            *n = (*n - 1).max(0);
        }
        s.total = (s.total - 1).max(0);
    }

    /// Open connections (all listeners).
    pub fn open_connections(&self) -> i64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(default: &[(&str, &str)], node1: &[(&str, &str)]) -> ClusterMetadata {
        meta_v(1, default, node1)
    }

    fn meta_v(version: u64, default: &[(&str, &str)], node1: &[(&str, &str)]) -> ClusterMetadata {
        let mut m = ClusterMetadata {
            cluster_id: "c".into(),
            version,
            topics: Default::default(),
            internal_topics: Default::default(),
            brokers: Default::default(),
            broker_configs: Default::default(),
            group_configs: Default::default(),
            features: Default::default(),
        };
        let to_map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        m.broker_configs.insert(String::new(), to_map(default));
        m.broker_configs.insert("1".into(), to_map(node1));
        m
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_ip_at_its_maximum_is_refused_and_an_override_wins() {
        let m = meta(
            &[
                ("max.connections.per.ip", "2"),
                (
                    "max.connections.per.ip.overrides",
                    "10.0.0.9:3, 127.0.0.2:0",
                ),
            ],
            &[],
        );
        let l = Arc::new(ConnLimits::new(1, vec!["PLAINTEXT".into()], None));
        let a = ip("10.0.0.1");
        let mut held = Vec::new();
        for _ in 0..2 {
            let (adm, slot) = l.open(&m, "PLAINTEXT", a);
            assert_eq!(adm, Admission::Open);
            held.push(slot.unwrap());
        }
        assert_eq!(l.open(&m, "PLAINTEXT", a).0, Admission::TooManyFromIp(2));
        // IPv4 on a dual-stack socket is the same IP.
        assert_eq!(
            l.open(&m, "PLAINTEXT", ip("::ffff:10.0.0.1")).0,
            Admission::TooManyFromIp(2)
        );
        held.pop();
        let (adm, slot) = l.open(&m, "PLAINTEXT", a);
        assert_eq!(adm, Admission::Open);
        held.push(slot.unwrap());
        let b = ip("10.0.0.9");
        for _ in 0..3 {
            let (adm, slot) = l.open(&m, "PLAINTEXT", b);
            assert_eq!(adm, Admission::Open);
            held.push(slot.unwrap());
        }
        assert_eq!(l.open(&m, "PLAINTEXT", b).0, Admission::TooManyFromIp(3));
        assert_eq!(
            l.open(&m, "PLAINTEXT", ip("127.0.0.2")).0,
            Admission::TooManyFromIp(0)
        );
        assert_eq!(l.open_connections(), 5);
        drop(held);
        assert_eq!(l.open_connections(), 0);
    }

    #[test]
    fn the_node_value_wins_over_the_default_and_a_new_version_is_read_again() {
        let l = Arc::new(ConnLimits::new(1, vec!["PLAINTEXT".into()], None));
        let m = meta(&[("max.connections", "5")], &[("max.connections", "1")]);
        let (adm, s1) = l.open(&m, "PLAINTEXT", ip("10.0.0.1"));
        assert_eq!(adm, Admission::Open);
        assert_eq!(l.open(&m, "PLAINTEXT", ip("10.0.0.2")).0, Admission::NoSlot);
        // Same version: not resolved again.
        let m2 = meta(&[("max.connections", "5")], &[]);
        assert_eq!(
            l.open(&m2, "PLAINTEXT", ip("10.0.0.2")).0,
            Admission::NoSlot
        );
        let m2 = meta_v(2, &[("max.connections", "5")], &[]);
        let (adm, s2) = l.open(&m2, "PLAINTEXT", ip("10.0.0.2"));
        assert_eq!(adm, Admission::Open);
        drop((s1, s2));
    }

    #[test]
    fn a_listener_limit_holds_its_listener_and_the_inter_broker_listener_passes_the_broker_limit() {
        let names = vec!["CLIENT".to_string(), "INTERNAL".to_string()];
        let l = Arc::new(ConnLimits::new(1, names, Some("internal".into())));
        let m = meta(
            &[("max.connections", "1")],
            &[("listener.name.client.max.connections", "1")],
        );
        let (adm, _c) = l.open(&m, "CLIENT", ip("10.0.0.1"));
        assert_eq!(adm, Admission::Open);
        assert_eq!(l.open(&m, "CLIENT", ip("10.0.0.2")).0, Admission::NoSlot);
        let (adm, _i) = l.open(&m, "INTERNAL", ip("10.0.0.3"));
        assert_eq!(
            adm,
            Admission::Open,
            "the inter-broker listener is protected"
        );
    }

    #[test]
    fn creations_over_the_broker_rate_are_delayed_and_stay_counted() {
        let l = Arc::new(ConnLimits::new(1, vec!["PLAINTEXT".into()], None));
        let m = meta(&[("max.connection.creation.rate", "2")], &[]);
        let t0 = 1_000_000;
        for i in 0..20 {
            assert_eq!(l.creation_delay_ms(&m, "PLAINTEXT", t0 + i), 0);
        }
        let d1 = l.creation_delay_ms(&m, "PLAINTEXT", t0 + 20);
        let d2 = l.creation_delay_ms(&m, "PLAINTEXT", t0 + 20);
        assert!(d1 > 0 && d2 > d1, "kept recorded: {d1} then {d2}");
        l.uncount_creation("PLAINTEXT", t0 + 20);
        assert_eq!(l.creation_delay_ms(&m, "PLAINTEXT", t0 + 20), d2);
        // No rate configured: nothing recorded, no delay.
        let l = Arc::new(ConnLimits::new(1, vec!["PLAINTEXT".into()], None));
        let none = meta(&[], &[]);
        for i in 0..100 {
            assert_eq!(l.creation_delay_ms(&none, "PLAINTEXT", t0 + i), 0);
        }
    }
}
