//! Mirror byte-rate ceilings enforced as totals: one [`RateCeiling`] for the whole broker and
//! one per mirror, shared by every fetcher on every core, so the setting bounds the sum of
//! their traffic rather than each fetcher's.
//!
//! A ceiling is a lock-free GCRA (virtual scheduling) over two atomics: each fetched response
//! is debited after it arrives (its size is only known then), pushing the ceiling's theoretical
//! arrival time forward by `bytes / rate`; the fetcher then waits until that time is within
//! the burst allowance before it fetches that partition again. High-priority partitions
//! ([`MirrorThrottle::priority`]) are debited too but never wait, so the bulk ones absorb the
//! whole delay and the total still holds while priority traffic stays under the ceiling.
//!
//! Invariants: no lock and no allocation per charge (one CAS loop per ceiling); a rate of 0
//! is unlimited; changing a rate takes effect at the next charge and forgives earlier debt.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How much traffic may arrive at once above the steady rate, as time at that rate.
const BURST_US: i64 = 100_000;

/// A shared byte-rate ceiling (bytes/s; 0 = unlimited).
#[derive(Debug, Default)]
pub struct RateCeiling {
    rate: AtomicU64,
    /// Theoretical arrival time of the next byte, in µs of [`now_us`]'s clock.
    tat_us: AtomicI64,
}

impl RateCeiling {
    pub fn new(bytes_per_sec: u64) -> Self {
        RateCeiling {
            rate: AtomicU64::new(bytes_per_sec),
            tat_us: AtomicI64::new(0),
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// A new rate for every fetcher sharing this ceiling; debt owed at the old rate is dropped
    /// so a raised ceiling is felt at once.
    pub fn set_rate(&self, bytes_per_sec: u64) {
        if self.rate.swap(bytes_per_sec, Ordering::Relaxed) != bytes_per_sec {
            self.tat_us.store(0, Ordering::Relaxed);
        }
    }

    /// Debit `bytes` that arrived at `now_us`; returns how long the caller should wait before
    /// fetching again so the total stays under the rate.
    pub fn charge(&self, bytes: usize, now_us: i64) -> Duration {
        let rate = self.rate();
        if rate == 0 || bytes == 0 {
            return Duration::ZERO;
        }
        let cost = (bytes as u128 * 1_000_000 / rate as u128).min(i64::MAX as u128) as i64;
        let mut old = self.tat_us.load(Ordering::Relaxed);
        loop {
            let new = old.max(now_us).saturating_add(cost);
            match self
                .tat_us
                .compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    let wait = new - now_us - BURST_US;
                    return Duration::from_micros(wait.max(0) as u64);
                }
                Err(seen) => old = seen,
            }
        }
    }
}

/// What one partition's fetcher charges: the broker-wide ceiling and its mirror's.
#[derive(Debug, Clone)]
pub struct MirrorThrottle {
    pub broker: Arc<RateCeiling>,
    pub mirror: Arc<RateCeiling>,
    /// High priority: debited, never delayed.
    pub priority: bool,
    /// Whether the broker-wide ceiling applies to this partition: the topic's
    /// `mirror.replication.throttled.replicas` names it (or `*`, or is unset). Changed in
    /// place when the topic config changes.
    pub broker_throttled: Arc<AtomicBool>,
}

/// The topic config selecting which mirror partitions the broker-wide ceiling throttles.
pub(crate) const THROTTLED_REPLICAS: &str = kmirror_control::mirror::THROTTLED_REPLICAS_CONFIG;

/// Whether `THROTTLED_REPLICAS = value` throttles `partition` led by `node`. Unset means
/// every partition (kmirror's broker ceiling has always bounded all mirror traffic; Kafka's
/// follower throttle, whose config this mirrors, defaults to none); an empty value, none.
pub(crate) fn broker_throttles(value: Option<&str>, partition: i32, node: i32) -> bool {
    let Some(v) = value.map(str::trim) else {
        return true;
    };
    v == "*"
        || v.split(',').any(|item| {
            item.trim().split_once(':').is_some_and(|(p, b)| {
                p.trim().parse() == Ok(partition) && b.trim().parse() == Ok(node)
            })
        })
}

impl MirrorThrottle {
    /// Debit `bytes` on both ceilings; the wait before this partition's next fetch (zero for
    /// a priority partition).
    pub fn charge(&self, bytes: usize, now_us: i64) -> Duration {
        let a = if self.broker_throttled.load(Ordering::Relaxed) {
            self.broker.charge(bytes, now_us)
        } else {
            Duration::ZERO
        };
        let b = self.mirror.charge(bytes, now_us);
        if self.priority {
            Duration::ZERO
        } else {
            a.max(b)
        }
    }
}

/// The broker-wide ceiling as a dynamic broker config, at Kafka's two levels: this broker
/// (`kafka-configs --entity-type brokers --entity-name <id>`) and the cluster-wide default
/// (`--entity-default`). The broker's value wins over the default, the default over the
/// static `mirror_byte_rate`. Both are kept in `<data_dir>/mirror-dynamic.properties` so they
/// outlive a restart, as Kafka's dynamic broker configs do.
pub(crate) const BROKER_THROTTLED_RATE: &str = "mirror.replication.throttled.rate";

const DYNAMIC_FILE: &str = "mirror-dynamic.properties";
/// The file's key for the cluster-wide default level (the broker level uses the plain name).
const DEFAULT_PREFIX: &str = "cluster-default.";

/// Which level of a dynamic broker config a change addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RateLevel {
    Broker,
    ClusterDefault,
}

/// Where the ceiling in force comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RateSource {
    Broker,
    ClusterDefault,
    /// `mirror_byte_rate` from the config file (or flag); 0 is "not set".
    Static,
}

/// The broker-wide ceiling and where its dynamic values live.
#[derive(Debug)]
pub(crate) struct BrokerRate {
    ceiling: Arc<RateCeiling>,
    static_rate: u64,
    /// Read lock-free by DescribeConfigs on the engine cores.
    levels: arc_swap::ArcSwap<Levels>,
    /// Serializes changes (held across the fsync, on blocking threads only) so two changes
    /// persist in the order they apply.
    writer: std::sync::Mutex<()>,
    path: std::path::PathBuf,
}

#[derive(Debug, Clone, Copy, Default)]
struct Levels {
    broker: Option<u64>,
    default: Option<u64>,
}

impl Levels {
    fn effective(&self, static_rate: u64) -> (u64, RateSource) {
        match (self.broker, self.default) {
            (Some(v), _) => (v, RateSource::Broker),
            (None, Some(v)) => (v, RateSource::ClusterDefault),
            (None, None) => (static_rate, RateSource::Static),
        }
    }
}

impl BrokerRate {
    /// Applies the persisted dynamic values if there are any, else `static_rate`.
    pub(crate) fn open(
        data_dir: &std::path::Path,
        static_rate: u64,
        ceiling: Arc<RateCeiling>,
    ) -> Self {
        let path = data_dir.join(DYNAMIC_FILE);
        let mut levels = Levels::default();
        for l in std::fs::read_to_string(&path).unwrap_or_default().lines() {
            let Some((k, v)) = l.split_once('=') else {
                continue;
            };
            let Ok(v) = v.trim().parse::<u64>() else {
                continue;
            };
            match k.trim().strip_prefix(DEFAULT_PREFIX) {
                Some(BROKER_THROTTLED_RATE) => levels.default = Some(v),
                None if k.trim() == BROKER_THROTTLED_RATE => levels.broker = Some(v),
                _ => {}
            }
        }
        let (rate, source) = levels.effective(static_rate);
        if source != RateSource::Static {
            tracing::info!(
                bytes_per_sec = rate,
                ?source,
                "mirror byte-rate ceiling from its dynamic config"
            );
        }
        ceiling.set_rate(rate);
        BrokerRate {
            ceiling,
            static_rate,
            levels: arc_swap::ArcSwap::from_pointee(levels),
            writer: std::sync::Mutex::new(()),
            path,
        }
    }

    /// (rate in force, where it comes from).
    pub(crate) fn describe(&self) -> (u64, RateSource) {
        self.levels.load().effective(self.static_rate)
    }

    /// The cluster-wide default's dynamic value, if set.
    pub(crate) fn cluster_default(&self) -> Option<u64> {
        self.levels.load().default
    }

    /// A config value as given to AlterConfigs (`None` = delete).
    pub(crate) fn parse(value: Option<&str>) -> Result<Option<u64>, String> {
        value
            .map(|v| {
                v.trim().parse::<u64>().map_err(|_| {
                    format!("{BROKER_THROTTLED_RATE} must be a non-negative integer (bytes/s), got '{v}'")
                })
            })
            .transpose()
    }

    /// Persists (write, fsync, rename) then applies `value` at `level`; `None` removes that
    /// level's value. Blocking: call it off the engine cores.
    pub(crate) fn set_blocking(
        &self,
        level: RateLevel,
        value: Option<u64>,
    ) -> Result<(), kmirror_net::broker::ExtensionError> {
        let io = |source: std::io::Error| kmirror_net::broker::ExtensionError::Persist {
            what: self.path.display().to_string(),
            source,
        };
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = **self.levels.load();
        match level {
            RateLevel::Broker => next.broker = value,
            RateLevel::ClusterDefault => next.default = value,
        }
        let mut text = String::new();
        if let Some(v) = next.broker {
            text.push_str(&format!("{BROKER_THROTTLED_RATE}={v}\n"));
        }
        if let Some(v) = next.default {
            text.push_str(&format!("{DEFAULT_PREFIX}{BROKER_THROTTLED_RATE}={v}\n"));
        }
        if text.is_empty() {
            match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
                _ => {}
            }
        } else {
            use std::io::Write;
            let tmp = self.path.with_extension("tmp");
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(text.as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
            std::fs::rename(&tmp, &self.path).map_err(io)?;
        }
        self.levels.store(Arc::new(next));
        let (rate, source) = next.effective(self.static_rate);
        self.ceiling.set_rate(rate);
        tracing::info!(
            bytes_per_sec = rate,
            ?source,
            "mirror byte-rate ceiling changed"
        );
        Ok(())
    }
}

/// Microseconds on a monotonic clock shared by every core.
pub(crate) fn now_us() -> i64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    // Offset by one second so the first charges never see a negative arrival time.
    START.get_or_init(Instant::now).elapsed().as_micros() as i64 + 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_replicas_name_partitions_of_this_broker_or_all() {
        assert!(broker_throttles(None, 3, 1), "unset: every partition");
        assert!(broker_throttles(Some(" * "), 3, 1));
        assert!(!broker_throttles(Some(""), 3, 1), "empty: none");
        assert!(broker_throttles(Some("0:2, 3:1"), 3, 1));
        assert!(
            !broker_throttles(Some("0:2,3:2"), 3, 1),
            "another broker's replica"
        );
        assert!(!broker_throttles(Some("30:1"), 3, 1));
    }

    /// Fetchers on several threads each take 64 KiB chunks as fast as the ceiling lets them
    /// (virtual time: each waits exactly what it is told): the total over the run is the rate.
    #[test]
    fn concurrent_fetchers_share_one_total() {
        let ceiling = Arc::new(RateCeiling::new(1_000_000));
        let chunk = 64 * 1024;
        // Simulated fetchers: each keeps its own virtual clock and charges at it.
        let mut clocks = [1_000_000i64; 8];
        let mut bytes = 0usize;
        let end = 1_000_000 + 10_000_000; // 10 s
        loop {
            let (i, now) = clocks
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|(_, t)| *t)
                .unwrap();
            if now >= end {
                break;
            }
            bytes += chunk;
            let wait = ceiling.charge(chunk, now);
            clocks[i] = now + wait.as_micros() as i64 + 1;
        }
        let rate = bytes as f64 / 10.0;
        // One burst allowance plus one in-flight chunk per fetcher above the steady rate.
        assert!(
            (1_000_000.0..1_000_000.0 * 1.1).contains(&rate),
            "8 fetchers together took {rate} B/s under a 1 MB/s ceiling"
        );
    }

    #[test]
    fn priority_partitions_are_debited_but_never_wait() {
        let broker = Arc::new(RateCeiling::new(1000));
        let mirror = Arc::new(RateCeiling::new(0));
        let hi = MirrorThrottle {
            broker: broker.clone(),
            mirror: mirror.clone(),
            priority: true,
            broker_throttled: Arc::new(AtomicBool::new(true)),
        };
        let bulk = MirrorThrottle {
            priority: false,
            ..hi.clone()
        };
        let t = 10_000_000;
        assert_eq!(hi.charge(5000, t), Duration::ZERO);
        // The bulk partition pays for what the priority one took: 5 s + its own 1 s.
        assert_eq!(
            bulk.charge(1000, t),
            Duration::from_micros(6_000_000 - BURST_US as u64)
        );
    }

    #[test]
    fn the_stricter_of_broker_and_mirror_ceilings_wins_and_zero_is_unlimited() {
        let t = MirrorThrottle {
            broker: Arc::new(RateCeiling::new(0)),
            mirror: Arc::new(RateCeiling::new(2000)),
            priority: false,
            broker_throttled: Arc::new(AtomicBool::new(true)),
        };
        assert_eq!(
            t.charge(4000, 5_000_000),
            Duration::from_micros(2_000_000 - BURST_US as u64)
        );
        t.broker.set_rate(1000);
        assert_eq!(
            t.charge(4000, 5_000_000),
            Duration::from_micros(4_000_000 - BURST_US as u64)
        );
        // Not among the topic's throttled replicas: only the mirror's ceiling binds.
        t.broker_throttled.store(false, Ordering::Relaxed);
        let broker_debt = t.broker.tat_us.load(Ordering::Relaxed);
        assert_eq!(
            t.charge(2000, 9_000_000),
            Duration::from_micros(1_000_000 - BURST_US as u64)
        );
        assert_eq!(
            t.broker.tat_us.load(Ordering::Relaxed),
            broker_debt,
            "broker not charged"
        );
    }

    #[test]
    fn dynamic_broker_rates_outlive_a_restart_the_broker_level_wins_and_deletes_fall_back() {
        use RateLevel::{Broker, ClusterDefault};
        let dir = tempfile::tempdir().unwrap();
        let c = Arc::new(RateCeiling::new(0));
        let r = BrokerRate::open(dir.path(), 500, c.clone());
        assert_eq!(r.describe(), (500, RateSource::Static));
        r.set_blocking(ClusterDefault, Some(3000)).unwrap();
        assert_eq!(
            (c.rate(), r.describe()),
            (3000, (3000, RateSource::ClusterDefault))
        );
        r.set_blocking(Broker, Some(7000)).unwrap();
        assert_eq!((c.rate(), r.describe()), (7000, (7000, RateSource::Broker)));
        let c2 = Arc::new(RateCeiling::new(0));
        let r2 = BrokerRate::open(dir.path(), 500, c2.clone());
        assert_eq!(
            (c2.rate(), r2.describe()),
            (7000, (7000, RateSource::Broker))
        );
        assert_eq!(r2.cluster_default(), Some(3000));
        r2.set_blocking(Broker, None).unwrap();
        assert_eq!(
            (c2.rate(), r2.describe()),
            (3000, (3000, RateSource::ClusterDefault))
        );
        r2.set_blocking(ClusterDefault, None).unwrap();
        assert_eq!(r2.describe(), (500, RateSource::Static));
        assert_eq!(
            BrokerRate::open(dir.path(), 500, c2).describe(),
            (500, RateSource::Static)
        );
        assert!(BrokerRate::parse(Some("-1")).is_err());
        assert_eq!(BrokerRate::parse(Some(" 42 ")), Ok(Some(42)));
    }

    #[test]
    fn raising_the_rate_forgives_old_debt() {
        let c = RateCeiling::new(100);
        assert!(c.charge(1_000_000, 1_000_000) > Duration::from_secs(1000));
        c.set_rate(1_000_000_000);
        assert_eq!(c.charge(1000, 1_000_000), Duration::ZERO);
    }
}
