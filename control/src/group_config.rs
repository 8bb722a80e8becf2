//! Group configs (Kafka 4.1's config resource type GROUP, 32): the per-group overrides
//! `kafka-configs --entity-type groups` sets, their defaults, and Kafka's validation
//! (`GroupConfig`, `GroupConfigManager.validate`, `ControllerConfigurationValidator`), with
//! Kafka's messages. The values live in the cluster metadata
//! ([`crate::metadata::ClusterMetadata::group_configs`]); what uses them reads them through
//! [`GroupOverrides`].
//!
//! Runtime-free; validation looks only at the group's complete set of keys after a change,
//! as Kafka's controller does.

use std::collections::BTreeMap;

/// How a key's value is typed (DescribeConfigs' ConfigType: INT 3, STRING 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int { at_least: i32 },
    OffsetReset,
    Isolation,
}

impl Kind {
    /// DescribeConfigs' config type code.
    pub fn config_type(self) -> i8 {
        match self {
            Kind::Int { .. } => 3,
            Kind::OffsetReset | Kind::Isolation => 2,
        }
    }
}

pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
pub const SHARE_SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
pub const SHARE_HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";
pub const STREAMS_SESSION_TIMEOUT_MS: &str = "streams.session.timeout.ms";
pub const STREAMS_HEARTBEAT_INTERVAL_MS: &str = "streams.heartbeat.interval.ms";
pub const STREAMS_NUM_STANDBY_REPLICAS: &str = "streams.num.standby.replicas";

/// Kafka's group config keys in its definition order (the order it parses them in, so the
/// first bad value named is Kafka's), with their types.
pub const KEYS: [(&str, Kind); 10] = [
    (CONSUMER_SESSION_TIMEOUT_MS, Kind::Int { at_least: 1 }),
    (CONSUMER_HEARTBEAT_INTERVAL_MS, Kind::Int { at_least: 1 }),
    (SHARE_SESSION_TIMEOUT_MS, Kind::Int { at_least: 1 }),
    (SHARE_HEARTBEAT_INTERVAL_MS, Kind::Int { at_least: 1 }),
    (SHARE_RECORD_LOCK_DURATION_MS, Kind::Int { at_least: 1000 }),
    (SHARE_AUTO_OFFSET_RESET, Kind::OffsetReset),
    (SHARE_ISOLATION_LEVEL, Kind::Isolation),
    (STREAMS_SESSION_TIMEOUT_MS, Kind::Int { at_least: 1 }),
    (STREAMS_HEARTBEAT_INTERVAL_MS, Kind::Int { at_least: 1 }),
    (STREAMS_NUM_STANDBY_REPLICAS, Kind::Int { at_least: 0 }),
];

/// A bound on a key's value and the broker config Kafka names for it.
type Bound = (i32, &'static str);

/// The broker-level settings group configs default to and are bounded by (Kafka's
/// `group.consumer.*`, `group.share.*`, `group.streams.*` broker configs; kmirror sets only
/// the consumer session timeout and heartbeat interval, the rest are Kafka's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerGroupSettings {
    pub consumer_session_timeout_ms: i32,
    pub consumer_heartbeat_interval_ms: i32,
}

impl Default for BrokerGroupSettings {
    fn default() -> Self {
        BrokerGroupSettings {
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
        }
    }
}

impl BrokerGroupSettings {
    /// A key's default: the broker's value (Kafka's `extractGroupConfigMap`) or the static one.
    pub fn default_of(&self, key: &str) -> Option<String> {
        Some(match key {
            CONSUMER_SESSION_TIMEOUT_MS => self.consumer_session_timeout_ms.to_string(),
            CONSUMER_HEARTBEAT_INTERVAL_MS => self.consumer_heartbeat_interval_ms.to_string(),
            SHARE_SESSION_TIMEOUT_MS | STREAMS_SESSION_TIMEOUT_MS => "45000".into(),
            SHARE_HEARTBEAT_INTERVAL_MS | STREAMS_HEARTBEAT_INTERVAL_MS => "5000".into(),
            SHARE_RECORD_LOCK_DURATION_MS => "30000".into(),
            SHARE_AUTO_OFFSET_RESET => "latest".into(),
            SHARE_ISOLATION_LEVEL => "read_uncommitted".into(),
            STREAMS_NUM_STANDBY_REPLICAS => "0".into(),
            _ => return None,
        })
    }

    /// (min, max) a key's value must lie in, with the broker config Kafka names in its
    /// message. Kafka's defaults, widened to take the broker's own value (Kafka refuses to
    /// start with a session timeout outside its bounds, so they always hold it).
    fn bounds(&self, key: &str) -> Option<(Bound, Bound)> {
        let widen = |(lo, hi): (i32, i32), own: i32| (lo.min(own), hi.max(own));
        let (lo, hi, lo_name, hi_name) = match key {
            CONSUMER_SESSION_TIMEOUT_MS => {
                let (lo, hi) = widen((45_000, 60_000), self.consumer_session_timeout_ms);
                (
                    lo,
                    hi,
                    "group.consumer.min.session.timeout.ms",
                    "group.consumer.max.session.timeout.ms",
                )
            }
            CONSUMER_HEARTBEAT_INTERVAL_MS => {
                let (lo, hi) = widen((5_000, 15_000), self.consumer_heartbeat_interval_ms);
                (
                    lo,
                    hi,
                    "group.consumer.min.heartbeat.interval.ms",
                    "group.consumer.max.heartbeat.interval.ms",
                )
            }
            SHARE_HEARTBEAT_INTERVAL_MS => (
                5_000,
                15_000,
                "group.share.min.heartbeat.interval.ms",
                "group.share.max.heartbeat.interval.ms",
            ),
            SHARE_SESSION_TIMEOUT_MS => (
                45_000,
                60_000,
                "group.share.min.session.timeout.ms",
                "group.share.max.session.timeout.ms",
            ),
            SHARE_RECORD_LOCK_DURATION_MS => (
                15_000,
                60_000,
                "group.share.min.record.lock.duration.ms",
                "group.share.max.record.lock.duration.ms",
            ),
            STREAMS_HEARTBEAT_INTERVAL_MS => (
                5_000,
                15_000,
                "group.streams.min.heartbeat.interval.ms",
                "group.streams.max.heartbeat.interval.ms",
            ),
            STREAMS_SESSION_TIMEOUT_MS => (
                45_000,
                60_000,
                "group.streams.min.session.timeout.ms",
                "group.streams.max.session.timeout.ms",
            ),
            STREAMS_NUM_STANDBY_REPLICAS => (i32::MIN, 2, "", "group.streams.max.standby.replicas"),
            _ => return None,
        };
        Some(((lo, lo_name), (hi, hi_name)))
    }

    /// Kafka's check of a group's complete set of keys after a change (unknown names, then
    /// each value's type and validator, then the bounds and the session/heartbeat pairs);
    /// the message is Kafka's, for INVALID_CONFIG.
    pub fn validate(&self, configs: &BTreeMap<String, String>) -> Result<(), String> {
        if let Some(k) = configs
            .keys()
            .find(|k| !KEYS.iter().any(|(known, _)| known == k))
        {
            return Err(format!("Unknown group config name: {k}"));
        }
        let mut ints: BTreeMap<&str, i32> = BTreeMap::new();
        for (key, kind) in KEYS {
            let own = configs.get(key);
            let Some(v) = own.cloned().or_else(|| self.default_of(key)) else {
                continue;
            };
            let invalid = |why: &str| format!("Invalid value {v} for configuration {key}: {why}");
            match kind {
                Kind::Int { at_least } => {
                    let n: i32 = v
                        .trim()
                        .parse()
                        .map_err(|_| invalid("Not a number of type INT"))?;
                    if n < at_least {
                        return Err(invalid(&format!("Value must be at least {at_least}")));
                    }
                    ints.insert(key, n);
                }
                Kind::OffsetReset => {
                    if ShareOffsetReset::parse(&v).is_none() {
                        return Err(invalid(&format!(
                            "Invalid value `{v}` for configuration {key}. The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
                        )));
                    }
                }
                Kind::Isolation => {
                    if v != "read_committed" && v != "read_uncommitted" {
                        return Err(invalid(
                            "String must be one of: read_committed, read_uncommitted",
                        ));
                    }
                }
            }
        }
        // Kafka's order: consumer, share, lock, streams bounds, then the pairs.
        for key in [
            CONSUMER_HEARTBEAT_INTERVAL_MS,
            CONSUMER_SESSION_TIMEOUT_MS,
            SHARE_HEARTBEAT_INTERVAL_MS,
            SHARE_SESSION_TIMEOUT_MS,
            SHARE_RECORD_LOCK_DURATION_MS,
            STREAMS_HEARTBEAT_INTERVAL_MS,
            STREAMS_SESSION_TIMEOUT_MS,
            STREAMS_NUM_STANDBY_REPLICAS,
        ] {
            let (Some(&n), Some(((lo, lo_name), (hi, hi_name)))) =
                (ints.get(key), self.bounds(key))
            else {
                continue;
            };
            if n < lo {
                return Err(format!("{key} must be greater than or equal to {lo_name}"));
            }
            if n > hi {
                return Err(format!("{key} must be less than or equal to {hi_name}"));
            }
        }
        for (session, heartbeat) in [
            (CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
            (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS),
            (STREAMS_SESSION_TIMEOUT_MS, STREAMS_HEARTBEAT_INTERVAL_MS),
        ] {
            if let (Some(s), Some(h)) = (ints.get(session), ints.get(heartbeat)) {
                if s <= h {
                    return Err(format!("{session} must be greater than {heartbeat}"));
                }
            }
        }
        Ok(())
    }
}

/// A group's stored keys, for the code that applies them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupOverrides<'a> {
    configs: Option<&'a BTreeMap<String, String>>,
}

impl<'a> GroupOverrides<'a> {
    pub fn new(configs: Option<&'a BTreeMap<String, String>>) -> Self {
        GroupOverrides { configs }
    }

    /// An integer key the group sets (validated when it was set).
    pub fn int(&self, key: &str) -> Option<i32> {
        self.configs?.get(key)?.trim().parse().ok()
    }
}

/// `share.auto.offset.reset`: where a share group starts on a partition it has no state for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareOffsetReset {
    Earliest,
    Latest,
    /// The first record at or after now minus this many milliseconds.
    ByDuration(i64),
}

impl ShareOffsetReset {
    /// Kafka's `ShareGroupAutoOffsetResetStrategy.fromString`: exactly `earliest`, `latest`
    /// or `by_duration:` and a non-negative ISO-8601 duration (Java's `Duration.parse`).
    pub fn parse(v: &str) -> Option<ShareOffsetReset> {
        match v {
            "earliest" => Some(ShareOffsetReset::Earliest),
            "latest" => Some(ShareOffsetReset::Latest),
            _ => {
                let ms = iso_duration_ms(v.strip_prefix("by_duration:")?)?;
                (ms >= 0).then_some(ShareOffsetReset::ByDuration(ms))
            }
        }
    }
}

/// Milliseconds of an ISO-8601 duration in Java's `Duration.parse` form
/// (`[-+]PnDTnHnMn.nS`, case-insensitive, each part optional but at least one present).
fn iso_duration_ms(s: &str) -> Option<i64> {
    let s = s.to_ascii_uppercase();
    let (sign, rest) = match s.as_bytes().first()? {
        b'-' => (-1i128, &s[1..]),
        b'+' => (1, &s[1..]),
        _ => (1, &s[..]),
    };
    let rest = rest.strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => {
            if t.is_empty() {
                return None;
            }
            (d, Some(t))
        }
        None => (rest, None),
    };
    let mut total_ms: i128 = 0;
    let mut parts = 0;
    // A signed integer followed by `unit`, or nothing.
    fn take(s: &str, unit: char) -> Option<(Option<&str>, &str)> {
        match s.find(unit) {
            Some(i) => Some((Some(&s[..i]), &s[i + 1..])),
            None => Some((None, s)),
        }
    }
    fn int(n: &str) -> Option<i128> {
        let digits = n.strip_prefix(['-', '+']).unwrap_or(n);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok()
    }
    let (d, left) = take(days, 'D')?;
    if !left.is_empty() {
        return None;
    }
    if let Some(d) = d {
        total_ms += int(d)? * 86_400_000;
        parts += 1;
    }
    if let Some(t) = time {
        let (h, t) = take(t, 'H')?;
        let (m, t) = take(t, 'M')?;
        let (sec, t) = take(t, 'S')?;
        if !t.is_empty() {
            return None;
        }
        if let Some(h) = h {
            total_ms += int(h)? * 3_600_000;
            parts += 1;
        }
        if let Some(m) = m {
            total_ms += int(m)? * 60_000;
            parts += 1;
        }
        if let Some(sec) = sec {
            let (whole, frac) = match sec.split_once(['.', ',']) {
                Some((w, f)) => (w, f),
                None => (sec, ""),
            };
            if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let w = int(whole)?;
            let frac_ms: i128 = format!("{frac:0<3}")[..3].parse().unwrap_or(0);
            let frac_ms = if whole.starts_with('-') {
                -frac_ms
            } else {
                frac_ms
            };
            total_ms += w * 1000 + frac_ms;
            parts += 1;
        }
    }
    if parts == 0 {
        return None;
    }
    i64::try_from(sign * total_ms).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn kafka_messages_for_what_kafka_refuses() {
        let b = BrokerGroupSettings::default();
        let err = |kv: &[(&str, &str)]| b.validate(&set(kv)).err();
        assert_eq!(err(&[("consumer.session.timeout.ms", "50000")]), None);
        assert_eq!(
            err(&[("foo.bar", "1")]).as_deref(),
            Some("Unknown group config name: foo.bar")
        );
        assert_eq!(
            err(&[("consumer.session.timeout.ms", "1000")]).as_deref(),
            Some("consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms")
        );
        assert_eq!(
            err(&[("consumer.session.timeout.ms", "abc")]).as_deref(),
            Some("Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT")
        );
        assert_eq!(
            err(&[("share.record.lock.duration.ms", "500")]).as_deref(),
            Some("Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000")
        );
        assert_eq!(
            err(&[("share.record.lock.duration.ms", "10000")]).as_deref(),
            Some("share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms")
        );
        assert_eq!(
            err(&[("share.isolation.level", "serializable")]).as_deref(),
            Some("Invalid value serializable for configuration share.isolation.level: String must be one of: read_committed, read_uncommitted")
        );
        assert_eq!(
            err(&[("streams.num.standby.replicas", "3")]).as_deref(),
            Some("streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas")
        );
        // Both within bounds, but the session must outlast the heartbeat.
        let wide = BrokerGroupSettings {
            consumer_session_timeout_ms: 10_000,
            consumer_heartbeat_interval_ms: 5_000,
        };
        assert_eq!(
            wide.validate(&set(&[("consumer.heartbeat.interval.ms", "10000")]))
                .err()
                .as_deref(),
            Some("consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
        );
    }

    #[test]
    fn share_auto_offset_reset_takes_kafkas_forms() {
        use ShareOffsetReset::*;
        assert_eq!(ShareOffsetReset::parse("earliest"), Some(Earliest));
        assert_eq!(ShareOffsetReset::parse("latest"), Some(Latest));
        assert_eq!(ShareOffsetReset::parse("none"), None);
        assert_eq!(ShareOffsetReset::parse("LATEST"), None);
        assert_eq!(ShareOffsetReset::parse("by_duration"), None);
        assert_eq!(
            ShareOffsetReset::parse("by_duration:PT1H"),
            Some(ByDuration(3_600_000))
        );
        assert_eq!(
            ShareOffsetReset::parse("by_duration:P1DT2M3.5S"),
            Some(ByDuration(86_400_000 + 120_000 + 3_500))
        );
        assert_eq!(
            ShareOffsetReset::parse("by_duration:pt10m"),
            Some(ByDuration(600_000))
        );
        assert_eq!(ShareOffsetReset::parse("by_duration:-PT1H"), None);
        assert_eq!(ShareOffsetReset::parse("by_duration:P"), None);
        assert_eq!(ShareOffsetReset::parse("by_duration:PT"), None);
        assert_eq!(ShareOffsetReset::parse("by_duration:1H"), None);
        assert_eq!(ShareOffsetReset::parse("by_duration:PT1X"), None);
    }
}
