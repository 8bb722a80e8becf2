//! `connection_creation_rate`: an IP's new connections per second (Kafka's
//! `ConnectionQuotas.recordIpConnectionMaybeThrottle`).
//!
//! Every accepted connection from an IP that has a rate (its own `ip` entity, else the
//! `<default>` ip entity) is recorded in that IP's [`RateSensor`]. If the recording puts the
//! observed rate over the quota, it is taken back and the connection is refused: the acceptor
//! closes it, unread, after the throttle time (at most one quota window, 1 s), as Kafka's
//! acceptor does (its `DelayedCloseSocket`). Connections from an IP without a rate are not
//! recorded at all.
//!
//! The sensor reproduces Kafka's `SampledStat` + `Rate` rather than the broker's aligned
//! per-second budgets ([`crate::quota::Budget`]): a sample starts at the first event after the
//! previous one completed, so a burst right after a quota is set is measured against exactly
//! ten windows, and the connection that tips it over is the same one as on Kafka. Accepting is
//! not a hot path: one mutex over the IPs' sensors, shared by all cores (SO_REUSEPORT spreads
//! one client's connections over them).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Kafka's `quota.window.num`.
const SAMPLES: usize = 11;
/// Kafka's `quota.window.size.seconds`, in ms.
const WINDOW_MS: i64 = 1000;
/// Kafka bounds a connection throttle by one quota window.
const MAX_THROTTLE_MS: i64 = WINDOW_MS;
/// The smallest map worth sweeping of idle sensors.
const SWEEP_MIN: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: i64,
    value: f64,
}

/// Kafka's `Rate` over a `SampledStat` of [`SAMPLES`] windows of [`WINDOW_MS`].
#[derive(Debug, Default)]
pub(crate) struct RateSensor {
    samples: Vec<Sample>,
    current: usize,
}

impl RateSensor {
    /// Adds `value` (1 for a connection, -1 to take one back) at `now_ms`.
    fn record(&mut self, value: f64, now_ms: i64) {
        if self.samples.is_empty() {
            self.samples.push(Sample {
                start_ms: now_ms,
                value: 0.0,
            });
        }
        if now_ms - self.samples[self.current].start_ms >= WINDOW_MS {
            self.current = (self.current + 1) % SAMPLES;
            let fresh = Sample {
                start_ms: now_ms,
                value: 0.0,
            };
            if self.current >= self.samples.len() {
                self.samples.push(fresh);
            } else {
                self.samples[self.current] = fresh;
            }
        }
        self.samples[self.current].value += value;
    }

    /// Samples older than the whole window count from `now_ms` again, empty.
    fn purge(&mut self, now_ms: i64) {
        for s in &mut self.samples {
            if now_ms - s.start_ms >= SAMPLES as i64 * WINDOW_MS {
                *s = Sample {
                    start_ms: now_ms,
                    value: 0.0,
                };
            }
        }
    }

    /// The time the rate is measured over: since the oldest live sample started, but at least
    /// `SAMPLES - 1` full windows.
    fn window_ms(&mut self, now_ms: i64) -> i64 {
        self.purge(now_ms);
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let elapsed = now_ms - oldest;
        let full = elapsed / WINDOW_MS;
        let min_full = SAMPLES as i64 - 1;
        if full < min_full {
            elapsed + (min_full - full) * WINDOW_MS
        } else {
            elapsed
        }
    }

    /// Events per second.
    fn rate(&mut self, now_ms: i64) -> f64 {
        let window = self.window_ms(now_ms);
        let sum: f64 = self.samples.iter().map(|s| s.value).sum();
        sum * 1000.0 / window as f64
    }

    /// Records one event; over `quota`, takes it back and returns the throttle time
    /// (`(rate - quota) / quota x window`, rounded, at most one window), else 0.
    pub(crate) fn record_or_throttle(&mut self, quota: f64, now_ms: i64) -> u64 {
        let throttle = self.record_and_throttle(quota, now_ms);
        if throttle > 0 {
            self.unrecord(now_ms);
        }
        throttle
    }

    /// Records one event and returns the throttle time over `quota` as
    /// [`Self::record_or_throttle`], but the event stays recorded: Kafka's broker-wide and
    /// listener sensors delay the connection rather than refuse it.
    pub(crate) fn record_and_throttle(&mut self, quota: f64, now_ms: i64) -> u64 {
        self.record(1.0, now_ms);
        let rate = self.rate(now_ms);
        if rate <= quota {
            return 0;
        }
        let window = self.window_ms(now_ms) as f64;
        let throttle = ((rate - quota) / quota * window).round() as i64;
        throttle.clamp(1, MAX_THROTTLE_MS) as u64
    }

    /// Takes one recorded event back.
    pub(crate) fn unrecord(&mut self, now_ms: i64) {
        self.record(-1.0, now_ms);
    }

    fn idle(&mut self, now_ms: i64) -> bool {
        self.purge(now_ms);
        self.samples.iter().all(|s| s.value <= 0.0)
    }
}

/// The IPs' rates as applied, resolved once per published quota set.
#[derive(Debug, Default, Clone)]
pub(crate) struct IpRates {
    pub(crate) per_ip: HashMap<IpAddr, f64>,
    pub(crate) default: Option<f64>,
}

impl IpRates {
    /// The rate of `ip`: its own, else the default; `None` when unlimited.
    pub(crate) fn of(&self, ip: IpAddr) -> Option<f64> {
        self.per_ip
            .get(&canonical(ip))
            .copied()
            .or(self.default)
            .filter(|r| *r > 0.0)
    }
}

/// IPv4 peers on a dual-stack socket show as `::ffff:a.b.c.d`; quotas name them as IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Every IP's sensor, swept of idle ones as the map grows (Kafka expires an IP's sensor after
/// an hour without connections).
#[derive(Debug, Default)]
pub(crate) struct IpSensors {
    map: Mutex<(HashMap<IpAddr, RateSensor>, usize)>,
}

impl IpSensors {
    /// Records a connection from `ip` under `quota` per second; the throttle time (0 =
    /// accept).
    pub(crate) fn record(&self, ip: IpAddr, quota: f64, now_ms: i64) -> u64 {
        let mut g = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let (map, sweep_at) = &mut *g;
        let ip = canonical(ip);
        if !map.contains_key(&ip) && map.len() >= (*sweep_at).max(SWEEP_MIN) {
            map.retain(|_, s| !s.idle(now_ms));
            *sweep_at = map.len() * 2;
        }
        map.entry(ip).or_default().record_or_throttle(quota, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_measured_against_ten_windows_and_the_21st_at_2_per_second_is_refused() {
        let mut s = RateSensor::default();
        let t0 = 5_000_123;
        for i in 0..20 {
            assert_eq!(s.record_or_throttle(2.0, t0 + i), 0, "connection {i}");
        }
        // 21 over 10.02 s is 2.096/s: (0.096 / 2) x 10020 ms = 480 ms.
        let t = s.record_or_throttle(2.0, t0 + 20);
        assert_eq!(t, 480);
        // Taken back: the next one is measured against 21 again, not 22.
        assert_eq!(s.record_or_throttle(2.0, t0 + 20), 480);
        // The throttle never exceeds one window.
        let mut s = RateSensor::default();
        for i in 0..50 {
            s.record(1.0, t0 + i);
        }
        assert_eq!(s.record_or_throttle(2.0, t0 + 50), 1000);
    }

    #[test]
    fn the_rate_falls_as_windows_pass_and_expires_after_eleven() {
        let mut s = RateSensor::default();
        let t0 = 1_000;
        for _ in 0..20 {
            assert_eq!(s.record_or_throttle(2.0, t0), 0);
        }
        // 1.5 s later: 21 over 10.5 s is exactly 2/s, accepted.
        assert_eq!(s.record_or_throttle(2.0, t0 + 1_500), 0);
        // All samples older than 11 s are gone: a new burst of 20 fits again.
        let later = t0 + 12_000;
        for _ in 0..20 {
            assert_eq!(s.record_or_throttle(2.0, later), 0);
        }
        assert!(s.record_or_throttle(2.0, later) > 0);
        assert!(!s.idle(later));
        assert!(s.idle(later + 11_000));
    }

    #[test]
    fn an_ip_uses_its_own_rate_else_the_default_and_mapped_ipv4_is_ipv4() {
        let v4: IpAddr = "127.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.1".parse().unwrap();
        let mut rates = IpRates::default();
        assert_eq!(rates.of(v4), None);
        rates.per_ip.insert(v4, 3.0);
        assert_eq!(rates.of(mapped), Some(3.0));
        assert_eq!(rates.of(other), None);
        rates.default = Some(7.0);
        assert_eq!(rates.of(other), Some(7.0));
        assert_eq!(rates.of(v4), Some(3.0));
    }

    #[test]
    fn idle_sensors_are_swept_once_the_map_is_large() {
        let sensors = IpSensors::default();
        for i in 0..SWEEP_MIN as u32 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(i));
            assert_eq!(sensors.record(ip, 100.0, 0), 0);
        }
        let fresh = IpAddr::V4(std::net::Ipv4Addr::from(u32::MAX));
        assert_eq!(sensors.record(fresh, 100.0, 20_000), 0);
        assert_eq!(sensors.map.lock().unwrap().0.len(), 1);
    }
}
