//! Dynamic broker configs as Apache Kafka 4.1 takes them through (Incremental)AlterConfigs:
//! which keys may change at runtime, at which level (one broker, or the cluster-wide
//! default), and Kafka's refusals word for word. The facts come from Kafka's own
//! `KafkaConfig` / `DynamicBrokerConfig` (`broker_config_table`, generated); the values are
//! kept in the replicated metadata ([`crate::metadata::ClusterMetadata::broker_configs`]).
//!
//! Kafka's checks, in its order: a known key that is not dynamic is refused ("Cannot update
//! these configs dynamically"); an SSL key without a `listener.name.<l>.` prefix is refused;
//! values are parsed by the key's type and checked against its range; at the cluster-wide
//! default, a per-broker key (or a listener-prefixed one) is refused. A key Kafka does not
//! know is accepted and stored, as Kafka does. Deletions are always accepted.

use crate::broker_config_table::KEYS;

/// How Kafka lets a broker config change at runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only in the broker's static configuration.
    ReadOnly,
    /// Per broker only (not at the cluster-wide default).
    PerBroker,
    /// Per broker or at the cluster-wide default.
    ClusterWide,
    /// Only with a `listener.name.<listener>.` prefix (the reconfigurable SSL keys).
    ListenerOnly,
}

/// Kafka's config types (ConfigDef.Type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Boolean,
    String,
    Int,
    Short,
    Long,
    Double,
    List,
    Class,
    Password,
}

impl Type {
    /// DescribeConfigs' `config_type` code.
    pub fn code(self) -> i8 {
        match self {
            Type::Boolean => 1,
            Type::String => 2,
            Type::Int => 3,
            Type::Short => 4,
            Type::Long => 5,
            Type::Double => 6,
            Type::List => 7,
            Type::Class => 8,
            Type::Password => 9,
        }
    }
}

/// A generated table row: name, mode, type, range min, range max.
pub(crate) type KeyRow = (
    &'static str,
    Mode,
    Type,
    Option<&'static str>,
    Option<&'static str>,
);

/// A key Kafka knows: its mode, type and numeric range.
#[derive(Debug, Clone, Copy)]
pub struct KnownKey {
    pub mode: Mode,
    pub ty: Type,
    min: Option<&'static str>,
    max: Option<&'static str>,
}

/// The Kafka version the table was generated from.
pub fn kafka_version() -> &'static str {
    crate::broker_config_table::KAFKA_VERSION
}

/// What Kafka knows of `key` (a `listener.name.<l>.` prefix is looked through).
pub fn lookup(key: &str) -> Option<KnownKey> {
    let base = listener_base(key).unwrap_or(key);
    KEYS.binary_search_by(|(k, ..)| (*k).cmp(base))
        .ok()
        .map(|i| {
            let (_, mode, ty, min, max) = KEYS[i];
            KnownKey { mode, ty, min, max }
        })
}

/// `listener.name.<listener>.<base>` → `base`.
fn listener_base(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("listener.name.")?;
    let (_, base) = rest.split_once('.')?;
    Some(base)
}

/// Listener configs Kafka lets be set at the cluster-wide default even with a prefix.
const CLUSTER_LEVEL_LISTENER_CONFIGS: [&str; 3] = [
    "max.connections",
    "max.connection.creation.rate",
    "num.network.threads",
];

/// Kafka's rendering of a Scala `Set` of names (`Set(a, b)`).
fn set(names: &[&str], kind: &str) -> String {
    format!("{kind}({})", names.join(", "))
}

/// Validates the keys a change sets (`sets`: key, value) for one broker (`per_broker`) or
/// the cluster-wide default, as Kafka's `DynamicBrokerConfig.validateConfigs` does; the
/// error is Kafka's message (answered with INVALID_REQUEST).
pub fn validate(sets: &[(&str, &str)], per_broker: bool) -> Result<(), String> {
    let read_only: Vec<&str> = sets
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| {
            listener_base(k).is_none() && lookup(k).is_some_and(|x| x.mode == Mode::ReadOnly)
        })
        .collect();
    if !read_only.is_empty() {
        return Err(format!(
            "Cannot update these configs dynamically: {}",
            set(&read_only, "Set")
        ));
    }
    let unprefixed: Vec<&str> = sets
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| {
            listener_base(k).is_none() && lookup(k).is_some_and(|x| x.mode == Mode::ListenerOnly)
        })
        .collect();
    if !unprefixed.is_empty() {
        return Err(format!(
            "These security configs can be dynamically updated only per-listener using the \
             listener prefix: {}",
            set(&unprefixed, "HashSet")
        ));
    }
    for (k, v) in sets {
        if let Some(known) = lookup(k) {
            check_value(k, v, known)?;
        }
    }
    if !per_broker {
        let per_broker_only: Vec<&str> = sets
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| match listener_base(k) {
                Some(base) => !CLUSTER_LEVEL_LISTENER_CONFIGS.contains(&base),
                None => lookup(k).is_some_and(|x| x.mode == Mode::PerBroker),
            })
            .collect();
        if !per_broker_only.is_empty() {
            return Err(format!(
                "Cannot update these configs at default cluster level, broker id must be \
                 specified: {}",
                set(&per_broker_only, "Set")
            ));
        }
    }
    Ok(())
}

/// A value parsed by the key's type and checked against its range (ConfigDef's messages).
fn check_value(key: &str, value: &str, known: KnownKey) -> Result<(), String> {
    let v = value.trim();
    let invalid = |why: String| format!("Invalid value {v} for configuration {key}: {why}");
    let number = |ty: &str, lo: f64, hi: f64| -> Result<f64, String> {
        let parsed = if ty == "DOUBLE" {
            v.parse::<f64>().ok()
        } else {
            v.parse::<i64>().ok().map(|n| n as f64)
        };
        parsed
            .filter(|n| *n >= lo && *n <= hi)
            .ok_or_else(|| invalid(format!("Not a number of type {ty}")))
    };
    let n = match known.ty {
        Type::Int => number("INT", i32::MIN as f64, i32::MAX as f64)?,
        Type::Short => number("SHORT", i16::MIN as f64, i16::MAX as f64)?,
        Type::Long => number("LONG", i64::MIN as f64, i64::MAX as f64)?,
        Type::Double => number("DOUBLE", f64::MIN, f64::MAX)?,
        Type::Boolean => {
            return if v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false") {
                Ok(())
            } else {
                Err(invalid("Expected value to be either true or false".into()))
            };
        }
        _ => return Ok(()),
    };
    fn bound(b: Option<&'static str>) -> Option<(&'static str, f64)> {
        b.and_then(|b| b.parse::<f64>().ok().map(|x| (b, x)))
    }
    if let Some((shown, min)) = bound(known.min) {
        if n < min {
            return Err(invalid(format!("Value must be at least {shown}")));
        }
    }
    if let Some((shown, max)) = bound(known.max) {
        if n > max {
            return Err(invalid(format!("Value must be no more than {shown}")));
        }
    }
    Ok(())
}

/// Applies one change to an entity's stored configs: `replace` (legacy AlterConfigs) starts
/// from nothing; a `None` value deletes the key.
pub fn apply(
    stored: &mut std::collections::BTreeMap<String, String>,
    changes: &[(String, Option<String>)],
    replace: bool,
) {
    if replace {
        stored.clear();
    }
    for (k, v) in changes {
        match v {
            Some(v) => {
                stored.insert(k.clone(), v.clone());
            }
            None => {
                stored.remove(k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_knows_kafkas_keys() {
        assert!(
            KEYS.windows(2).all(|w| w[0].0 < w[1].0),
            "binary search needs order"
        );
        assert_eq!(lookup("broker.id").map(|k| k.mode), Some(Mode::ReadOnly));
        assert_eq!(
            lookup("log.retention.ms").map(|k| k.mode),
            Some(Mode::ClusterWide)
        );
        assert_eq!(
            lookup("listener.name.plaintext.ssl.keystore.location").map(|k| k.mode),
            Some(Mode::ListenerOnly)
        );
        assert!(lookup("foo.bar").is_none());
    }

    #[test]
    fn kafkas_refusals_word_for_word() {
        let v = |k: &str, val: &str, per_broker| validate(&[(k, val)], per_broker);
        assert_eq!(
            v("broker.id", "7", true).unwrap_err(),
            "Cannot update these configs dynamically: Set(broker.id)"
        );
        assert_eq!(
            v("ssl.keystore.location", "/x", true).unwrap_err(),
            "These security configs can be dynamically updated only per-listener using the \
             listener prefix: HashSet(ssl.keystore.location)"
        );
        assert!(v("listener.name.plaintext.ssl.keystore.location", "/x", true).is_ok());
        assert_eq!(
            v("log.segment.bytes", "100000", true).unwrap_err(),
            "Invalid value 100000 for configuration log.segment.bytes: Value must be at least \
             1048576"
        );
        assert_eq!(
            v("log.retention.ms", "soon", true).unwrap_err(),
            "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"
        );
        assert_eq!(
            v("sasl.kerberos.min.time.before.relogin", "60000", false).unwrap_err(),
            "Cannot update these configs at default cluster level, broker id must be \
             specified: Set(sasl.kerberos.min.time.before.relogin)"
        );
        assert!(v("sasl.kerberos.min.time.before.relogin", "60000", true).is_ok());
        assert!(
            v("foo.bar", "x", false).is_ok(),
            "Kafka stores keys it does not know"
        );
        assert!(v("listener.name.plaintext.max.connections", "10", false).is_ok());
    }

    #[test]
    fn legacy_replace_starts_from_nothing_and_none_deletes() {
        let mut m = std::collections::BTreeMap::from([("a".to_string(), "1".to_string())]);
        apply(&mut m, &[("b".into(), Some("2".into()))], false);
        assert_eq!(m.len(), 2);
        apply(&mut m, &[("b".into(), None)], false);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a"]);
        apply(&mut m, &[("c".into(), Some("3".into()))], true);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["c"]);
    }
}
