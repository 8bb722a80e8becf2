//! Mirror definitions: name rules, settings with defaults, topic filters and the
//! `mirror.topic.properties.exclude` config filter (default list from seed 003).

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::MirrorError;

/// Setting keys a mirror understands (CreateMirror configs). Unknown keys are kept and passed
/// to the source connection (security settings and the like).
pub mod settings {
    /// Source cluster bootstrap servers (required).
    pub const BOOTSTRAP_SERVERS: &str = "bootstrap.servers";
    /// Metadata sync loop interval (topics, partitions, configs, groups, ACLs).
    pub const METADATA_SYNC_INTERVAL_MS: &str = "mirror.metadata.sync.interval.ms";
    /// The KIP's later name of the same setting; when both are set, the sync name wins.
    pub const METADATA_REFRESH_INTERVAL_MS: &str = "mirror.metadata.refresh.interval.ms";
    /// Consumer-group offset sync interval.
    pub const GROUP_SYNC_INTERVAL_MS: &str = "mirror.group.sync.interval.ms";
    /// Topic-config exclusion regexes, comma separated (seed 003).
    pub const TOPIC_PROPERTIES_EXCLUDE: &str = "mirror.topic.properties.exclude";
    /// Topic include regexes, comma separated (AddTopicsToMirror patterns are appended).
    pub const TOPICS_INCLUDE: &str = "mirror.topics.include";
    /// Topic exclude regexes, comma separated; exclude wins over include.
    pub const TOPICS_EXCLUDE: &str = "mirror.topics.exclude";
    /// Consumer-group include / exclude regexes for offset sync.
    pub const GROUPS_INCLUDE: &str = "mirror.groups.include";
    pub const GROUPS_EXCLUDE: &str = "mirror.groups.exclude";
    /// ACL sync on/off.
    pub const ACL_SYNC_ENABLE: &str = "mirror.acl.sync.enable";
    /// Client quota sync on/off.
    pub const QUOTA_SYNC_ENABLE: &str = "mirror.quota.sync.enable";
    /// `owned` (default: the sync writes only what it created) or `exact` (the seed's: the
    /// destination's ACLs / quotas made equal to the source's).
    pub const ACL_SYNC_MODE: &str = "mirror.acl.sync.mode";
    pub const QUOTA_SYNC_MODE: &str = "mirror.quota.sync.mode";
    /// Fetch sizing for mirror fetchers.
    pub const FETCH_MAX_BYTES: &str = "mirror.fetch.max.bytes";
    pub const FETCH_PARTITION_MAX_BYTES: &str = "mirror.fetch.partition.max.bytes";
    pub const FETCH_MAX_WAIT_MS: &str = "mirror.fetch.max.wait.ms";
    /// Backoff bounds after a fetch error or a FAILED partition.
    pub const RETRY_BACKOFF_MS: &str = "mirror.retry.backoff.ms";
    pub const RETRY_BACKOFF_MAX_MS: &str = "mirror.retry.backoff.max.ms";
    /// This mirror's byte-rate ceiling (bytes/s over all its partitions on this node; 0 or
    /// unset = none). Applies under the broker-wide `mirror_byte_rate` ceiling.
    pub const THROTTLED_RATE: &str = "mirror.throttled.rate";
    /// Topic regexes (comma separated, full match) whose partitions are high priority: their
    /// bytes count against the ceilings, but they never wait for them.
    pub const PRIORITY_TOPICS: &str = "mirror.priority.topics";
    /// Core placement policy of the mirror's partitions on this broker: `spread`, `hash` or
    /// `topic` (a topic's partitions together); unset = the broker's `partition_assignment`.
    pub const CORE_ASSIGNMENT: &str = "mirror.core.assignment";
    /// Explicit pins, comma separated: `topic:core` (the whole topic) or
    /// `topic:partition:core`. `:` cannot occur in a topic name, so neither form is ambiguous
    /// (`topic-partition` would be: topic names may end in `-<digits>`).
    pub const CORE_PINS: &str = "mirror.core.pins";
    /// Opt-in automatic failover: once every round with the source has failed for this
    /// long, the mirror fails over as `remove --all` would (0 or unset: never).
    pub const AUTO_FAILOVER_MS: &str = "mirror.auto.failover.ms";
}

/// Policies `mirror.core.assignment` accepts.
pub const CORE_POLICIES: [&str; 3] = ["spread", "hash", "topic"];

/// A mirror's core placement (`mirror.core.assignment`, `mirror.core.pins`), parsed. Which
/// core numbers exist is the broker's business (checked where the core count is known).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CorePlacement {
    pub policy: Option<String>,
    pub topics: BTreeMap<String, usize>,
    pub partitions: BTreeMap<(String, i32), usize>,
}

impl CorePlacement {
    pub fn parse(policy: Option<&str>, pins: Option<&str>) -> Result<Self, MirrorError> {
        let mut out = CorePlacement::default();
        if let Some(p) = policy.map(str::trim).filter(|p| !p.is_empty()) {
            if !CORE_POLICIES.contains(&p) {
                return Err(MirrorError::InvalidSetting {
                    key: settings::CORE_ASSIGNMENT.to_owned(),
                    reason: format!("'{p}' is not one of {}", CORE_POLICIES.join(", ")),
                });
            }
            out.policy = Some(p.to_owned());
        }
        let bad = |item: &str, why: &str| MirrorError::InvalidSetting {
            key: settings::CORE_PINS.to_owned(),
            reason: format!(
                "'{item}': {why} (expected topic:core or topic:partition:core, comma separated)"
            ),
        };
        for item in split_list(pins.unwrap_or("")) {
            let parts: Vec<&str> = item.split(':').map(str::trim).collect();
            let core = |s: &str| {
                s.parse::<usize>()
                    .map_err(|_| bad(&item, &format!("core '{s}' is not a non-negative integer")))
            };
            let topic = |s: &str| {
                if s.is_empty() {
                    Err(bad(&item, "empty topic name"))
                } else {
                    Ok(s.to_owned())
                }
            };
            match parts.as_slice() {
                [t, c] => {
                    out.topics.insert(topic(t)?, core(c)?);
                }
                [t, p, c] => {
                    let p = p
                        .parse::<i32>()
                        .ok()
                        .filter(|p| *p >= 0)
                        .ok_or_else(|| bad(&item, &format!("partition '{p}' is not valid")))?;
                    out.partitions.insert((topic(t)?, p), core(c)?);
                }
                _ => return Err(bad(&item, "unknown format")),
            }
        }
        Ok(out)
    }

    /// The highest core any pin names.
    pub fn max_core(&self) -> Option<usize> {
        self.topics
            .values()
            .chain(self.partitions.values())
            .copied()
            .max()
    }

    pub fn is_empty(&self) -> bool {
        *self == CorePlacement::default()
    }

    /// `topic`'s share: (its pin, its partitions' pins).
    pub fn for_topic(&self, topic: &str) -> (Option<usize>, BTreeMap<i32, usize>) {
        let parts = self
            .partitions
            .iter()
            .filter(|((t, _), _)| t == topic)
            .map(|((_, p), c)| (*p, *c))
            .collect();
        (self.topics.get(topic).copied(), parts)
    }
}

/// Seed 003's default `mirror.topic.properties.exclude` list (regexes, full match).
pub const DEFAULT_TOPIC_PROPERTIES_EXCLUDE: [&str; 9] = [
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "mirror.name",
];

/// Longest accepted mirror name (Kafka's topic-name limit).
pub const MAX_MIRROR_NAME_LEN: usize = 249;

/// CreateMirror's name rules (seed 003): non-empty, at most 249 characters of
/// `[a-zA-Z0-9._-]`, not `.`/`..`, and not ending with `.removed` (that suffix marks a topic
/// being failed over in `mirror.name`).
pub fn validate_mirror_name(name: &str) -> Result<(), MirrorError> {
    let bad = |why: &str| {
        Err(MirrorError::InvalidMirrorName {
            name: name.to_owned(),
            reason: why.to_owned(),
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_MIRROR_NAME_LEN {
        return bad("longer than 249 characters");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are reserved");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    if name.ends_with(".removed") {
        return bad("must not end with '.removed'");
    }
    Ok(())
}

/// Split a comma-separated list, dropping blanks.
pub fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_owned)
        .collect()
}

fn compile_full(patterns: &[String]) -> Result<Vec<Regex>, MirrorError> {
    patterns
        .iter()
        .map(|p| {
            Regex::new(&format!("^(?:{p})$")).map_err(|e| MirrorError::InvalidRegex {
                pattern: p.clone(),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The `mirror.topic.properties.exclude` filter: which source topic configs are not synced.
#[derive(Debug, Clone)]
pub struct ConfigExclude {
    patterns: Vec<Regex>,
}

impl ConfigExclude {
    /// From regexes (each must match the whole key). `mirror.name` is always excluded, even
    /// when an operator's list forgets it: syncing it would make the source's own mirror name
    /// leak into ours. So are the destination's own keys (`LOCAL_TOPIC_CONFIGS`): the
    /// switchover's write fence, copied, would fence the destination about to take the
    /// writes.
    pub fn new(patterns: &[String]) -> Result<Self, MirrorError> {
        let mut patterns = compile_full(patterns)?;
        let always = std::iter::once(super::MIRROR_NAME_CONFIG)
            .chain(super::LOCAL_TOPIC_CONFIGS)
            .map(regex::escape)
            .collect::<Vec<_>>();
        patterns.extend(compile_full(&always)?);
        Ok(ConfigExclude { patterns })
    }

    /// From the setting's comma-separated value, or the seed default when unset.
    pub fn from_setting(value: Option<&str>) -> Result<Self, MirrorError> {
        match value {
            Some(v) => Self::new(&split_list(v)),
            None => Self::new(
                &DEFAULT_TOPIC_PROPERTIES_EXCLUDE
                    .iter()
                    .map(|s| regex::escape(s))
                    .collect::<Vec<_>>(),
            ),
        }
    }

    pub fn is_excluded(&self, key: &str) -> bool {
        self.patterns.iter().any(|r| r.is_match(key))
    }

    /// Source configs minus the excluded keys.
    pub fn filter<'a, I>(&self, configs: I) -> BTreeMap<String, String>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        configs
            .into_iter()
            .filter(|(k, _)| !self.is_excluded(k))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

/// Which source topics a mirror wants: explicit names, include regexes, exclude regexes.
/// Exclude wins. Internal topics (`__` prefix) only by explicit name.
#[derive(Debug, Clone)]
pub struct TopicFilter {
    names: Vec<String>,
    include: Vec<Regex>,
    exclude: Vec<Regex>,
}

impl TopicFilter {
    pub fn new(
        names: &[String],
        include: &[String],
        exclude: &[String],
    ) -> Result<Self, MirrorError> {
        Ok(TopicFilter {
            names: names.to_vec(),
            include: compile_full(include)?,
            exclude: compile_full(exclude)?,
        })
    }

    /// Whether an include pattern matches `topic`, internal (`__`) names included: which
    /// topics a mirror already holds a pattern names (RemoveTopicsFromMirror).
    pub fn matches_any_name(&self, topic: &str) -> bool {
        !self.exclude.iter().any(|r| r.is_match(topic))
            && (self.names.iter().any(|n| n == topic)
                || self.include.iter().any(|r| r.is_match(topic)))
    }

    pub fn matches(&self, topic: &str) -> bool {
        if self.exclude.iter().any(|r| r.is_match(topic)) {
            return false;
        }
        if self.names.iter().any(|n| n == topic) {
            return true;
        }
        !topic.starts_with("__") && self.include.iter().any(|r| r.is_match(topic))
    }
}

/// A mirror: a named link to a source cluster, its settings and its topic selection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorDefinition {
    pub name: String,
    /// All settings as given to CreateMirror (including `bootstrap.servers`).
    pub settings: BTreeMap<String, String>,
    /// Topics added by name.
    pub topics: Vec<String>,
    /// Include regexes added by AddTopicsToMirror (plus `mirror.topics.include`).
    pub include_patterns: Vec<String>,
    /// Exclude regexes (plus `mirror.topics.exclude`).
    pub exclude_patterns: Vec<String>,
    /// Source cluster id once resolved (empty until then).
    #[serde(default)]
    pub source_cluster_id: String,
    /// Where a topic's mirror log starts (`add --start`), by topic name or by the include
    /// pattern that brought it in: a ListOffsets timestamp (-1 latest, or epoch ms); absent
    /// means the source's log start (earliest).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub start_positions: BTreeMap<String, i64>,
}

/// ListOffsets' "earliest" timestamp: a mirror's default start.
pub const START_EARLIEST: i64 = -2;
/// ListOffsets' "latest" timestamp.
pub const START_LATEST: i64 = -1;

impl MirrorDefinition {
    /// Validate name, required settings and every regex.
    pub fn new(name: &str, settings: BTreeMap<String, String>) -> Result<Self, MirrorError> {
        validate_mirror_name(name)?;
        match settings.get(settings::BOOTSTRAP_SERVERS) {
            Some(b) if !b.trim().is_empty() => {}
            _ => {
                return Err(MirrorError::InvalidSetting {
                    key: settings::BOOTSTRAP_SERVERS.to_owned(),
                    reason: "the source bootstrap servers are required".to_owned(),
                })
            }
        }
        let def = MirrorDefinition {
            name: name.to_owned(),
            include_patterns: settings
                .get(settings::TOPICS_INCLUDE)
                .map(|s| split_list(s))
                .unwrap_or_default(),
            exclude_patterns: settings
                .get(settings::TOPICS_EXCLUDE)
                .map(|s| split_list(s))
                .unwrap_or_default(),
            settings,
            topics: Vec::new(),
            source_cluster_id: String::new(),
            start_positions: BTreeMap::new(),
        };
        def.topic_filter()?;
        def.config_exclude()?;
        def.priority_topics()?;
        def.core_placement()?;
        def.acl_sync_mode()?;
        def.quota_sync_mode()?;
        for key in [
            settings::METADATA_SYNC_INTERVAL_MS,
            settings::METADATA_REFRESH_INTERVAL_MS,
            settings::GROUP_SYNC_INTERVAL_MS,
            settings::FETCH_MAX_BYTES,
            settings::FETCH_PARTITION_MAX_BYTES,
            settings::FETCH_MAX_WAIT_MS,
            settings::RETRY_BACKOFF_MS,
            settings::RETRY_BACKOFF_MAX_MS,
            settings::THROTTLED_RATE,
            settings::AUTO_FAILOVER_MS,
        ] {
            def.get_u64(key, 0)?;
        }
        Ok(def)
    }

    /// `mirror.priority.topics` compiled (full-match regexes); empty when unset.
    pub fn priority_topics(&self) -> Result<Vec<Regex>, MirrorError> {
        compile_full(
            &self
                .settings
                .get(settings::PRIORITY_TOPICS)
                .map(|s| split_list(s))
                .unwrap_or_default(),
        )
    }

    /// Whether `topic`'s partitions are high priority for the throttle.
    pub fn is_priority_topic(&self, topic: &str) -> bool {
        self.priority_topics()
            .map(|p| p.iter().any(|r| r.is_match(topic)))
            .unwrap_or(false)
    }

    /// Where `topic`'s mirror log starts: its own `--start`, else that of the first include
    /// pattern with one that matches it, else [`START_EARLIEST`].
    pub fn start_timestamp(&self, topic: &str) -> i64 {
        if let Some(ts) = self.start_positions.get(topic) {
            return *ts;
        }
        self.include_patterns
            .iter()
            .filter_map(|p| Some((p, self.start_positions.get(p)?)))
            .find(|(p, _)| {
                compile_full(std::slice::from_ref(*p))
                    .is_ok_and(|r| r.iter().any(|r| r.is_match(topic)))
            })
            .map_or(START_EARLIEST, |(_, ts)| *ts)
    }

    /// `mirror.acl.sync.mode` (default `owned`).
    pub fn acl_sync_mode(&self) -> Result<super::sync::SyncMode, MirrorError> {
        self.sync_mode(settings::ACL_SYNC_MODE)
    }

    /// `mirror.quota.sync.mode` (default `owned`).
    pub fn quota_sync_mode(&self) -> Result<super::sync::SyncMode, MirrorError> {
        self.sync_mode(settings::QUOTA_SYNC_MODE)
    }

    fn sync_mode(&self, key: &str) -> Result<super::sync::SyncMode, MirrorError> {
        use super::sync::SyncMode;
        match self
            .settings
            .get(key)
            .map(|v| v.trim().to_ascii_lowercase())
        {
            None => Ok(SyncMode::Owned),
            Some(v) if v == "owned" => Ok(SyncMode::Owned),
            Some(v) if v == "exact" => Ok(SyncMode::Exact),
            Some(v) => Err(MirrorError::InvalidSetting {
                key: key.to_owned(),
                reason: format!("'{v}' is not one of owned, exact"),
            }),
        }
    }

    /// `mirror.core.assignment` / `mirror.core.pins` parsed (validated at creation).
    pub fn core_placement(&self) -> Result<CorePlacement, MirrorError> {
        CorePlacement::parse(
            self.settings
                .get(settings::CORE_ASSIGNMENT)
                .map(String::as_str),
            self.settings.get(settings::CORE_PINS).map(String::as_str),
        )
    }

    pub fn source_bootstrap(&self) -> &str {
        self.settings
            .get(settings::BOOTSTRAP_SERVERS)
            .map(String::as_str)
            .unwrap_or("")
    }

    fn get_u64(&self, key: &str, default: u64) -> Result<u64, MirrorError> {
        match self.settings.get(key) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| MirrorError::InvalidSetting {
                key: key.to_owned(),
                reason: format!("'{v}' is not a non-negative integer"),
            }),
        }
    }

    /// Setting as a number with its default (values were validated at creation).
    pub fn setting_u64(&self, key: &str, default: u64) -> u64 {
        self.get_u64(key, default).unwrap_or(default)
    }

    pub fn metadata_sync_interval_ms(&self) -> u64 {
        let refresh = self.setting_u64(settings::METADATA_REFRESH_INTERVAL_MS, 30_000);
        self.setting_u64(settings::METADATA_SYNC_INTERVAL_MS, refresh)
    }

    pub fn topic_filter(&self) -> Result<TopicFilter, MirrorError> {
        TopicFilter::new(&self.topics, &self.include_patterns, &self.exclude_patterns)
    }

    pub fn config_exclude(&self) -> Result<ConfigExclude, MirrorError> {
        ConfigExclude::from_setting(
            self.settings
                .get(settings::TOPIC_PROPERTIES_EXCLUDE)
                .map(String::as_str),
        )
    }

    /// Settings to pass to the source connection: everything not `mirror.`-prefixed.
    /// What a running fetcher was started with: the source connection settings plus the
    /// fetch, retry, priority and core placement settings. A change restarts the mirror's
    /// fetchers (they resume at the local log end; partitions whose core changes move while
    /// their fetcher is stopped); `mirror.throttled.rate` applies without one.
    pub fn fetcher_settings(&self) -> BTreeMap<String, String> {
        let mut out = self.client_settings();
        out.extend(
            self.settings
                .iter()
                .filter(|(k, _)| {
                    k.starts_with("mirror.fetch.")
                        || k.starts_with("mirror.retry.")
                        || k.starts_with("mirror.core.")
                        || *k == settings::PRIORITY_TOPICS
                })
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        out
    }

    pub fn client_settings(&self) -> BTreeMap<String, String> {
        self.settings
            .iter()
            .filter(|(k, _)| !k.starts_with("mirror."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn a_topics_start_is_its_own_then_its_patterns_then_earliest() {
        let mut d = MirrorDefinition::new(
            "dr",
            BTreeMap::from([("bootstrap.servers".to_owned(), "h:1".to_owned())]),
        )
        .unwrap();
        d.include_patterns = s(&["pay.*", "ord.*"]);
        d.start_positions.insert("ord.*".into(), START_LATEST);
        d.start_positions.insert("orders".into(), 1_700_000_000_000);
        assert_eq!(d.start_timestamp("orders"), 1_700_000_000_000);
        assert_eq!(d.start_timestamp("ordinal"), START_LATEST);
        assert_eq!(d.start_timestamp("payments"), START_EARLIEST);
        assert_eq!(d.start_timestamp("other"), START_EARLIEST);
    }

    #[test]
    fn default_exclude_list_drops_seed_keys_and_keeps_the_rest() {
        let ex = ConfigExclude::from_setting(None).unwrap();
        for k in DEFAULT_TOPIC_PROPERTIES_EXCLUDE {
            assert!(ex.is_excluded(k), "{k}");
        }
        for k in [
            "cleanup.policy",
            "retention.ms",
            "compression.type",
            "segment.bytes",
        ] {
            assert!(!ex.is_excluded(k), "{k}");
        }
        // Dots are literal in the default list, not wildcards.
        assert!(!ex.is_excluded("min-insync-replicas"));
        // Full match, not substring.
        assert!(!ex.is_excluded("x.min.insync.replicas"));
    }

    #[test]
    fn operator_exclude_regexes_match_whole_keys() {
        let ex = ConfigExclude::from_setting(Some(".*throttled.*")).unwrap();
        assert!(ex.is_excluded("leader.replication.throttled.replicas"));
        assert!(!ex.is_excluded("min.insync.replicas"));
        assert!(
            ex.is_excluded("mirror.name"),
            "mirror.name is always excluded"
        );
        for key in super::super::LOCAL_TOPIC_CONFIGS {
            assert!(ex.is_excluded(key), "{key} belongs to the destination");
        }
        let ex2 =
            ConfigExclude::from_setting(Some("min.insync.replicas,unclean.leader.election.enable"))
                .unwrap();
        let kept = ex2.filter([
            ("min.insync.replicas", "2"),
            ("unclean.leader.election.enable", "true"),
            ("retention.ms", "1000"),
        ]);
        assert_eq!(kept.keys().collect::<Vec<_>>(), vec!["retention.ms"]);
    }

    #[test]
    fn bad_exclude_regex_is_rejected() {
        assert!(matches!(
            ConfigExclude::from_setting(Some("(unclosed")),
            Err(MirrorError::InvalidRegex { .. })
        ));
    }

    #[test]
    fn mirror_names_follow_the_seed_rules() {
        for ok in ["dr", "east-to-west", "a.b_c-1"] {
            validate_mirror_name(ok).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            "has space",
            "x/y",
            "dr.removed",
            &"a".repeat(250),
        ] {
            assert!(validate_mirror_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn topic_filter_exclude_wins_and_internal_topics_need_a_name() {
        let f =
            TopicFilter::new(&s(&["__special"]), &s(&["pay.*", ".*"]), &s(&["pay-tmp"])).unwrap();
        assert!(f.matches("payments"));
        assert!(!f.matches("pay-tmp"));
        assert!(!f.matches("__consumer_offsets"));
        assert!(f.matches("__special"));
    }

    #[test]
    fn core_placement_parses_pins_and_rejects_bad_ones() {
        let p = CorePlacement::parse(Some("topic"), Some("orders:1, logs-2024:3:0,logs-2024:1"))
            .unwrap();
        assert_eq!(p.policy.as_deref(), Some("topic"));
        assert_eq!(p.topics.get("orders"), Some(&1));
        assert_eq!(p.topics.get("logs-2024"), Some(&1));
        assert_eq!(p.partitions.get(&("logs-2024".to_owned(), 3)), Some(&0));
        assert_eq!(p.max_core(), Some(1));
        assert_eq!(p.for_topic("logs-2024"), (Some(1), [(3, 0)].into()));
        for (policy, pins) in [
            (Some("round-robin"), None),
            (None, Some("orders")),
            (None, Some("orders:x")),
            (None, Some("orders:-1:0")),
            (None, Some(":1")),
            (None, Some("a:1:2:3")),
        ] {
            let e = CorePlacement::parse(policy, pins).unwrap_err().to_string();
            assert!(e.contains("mirror.core."), "{e}");
        }
        assert!(CorePlacement::parse(None, Some("")).unwrap().is_empty());
    }

    #[test]
    fn definition_requires_bootstrap_and_valid_numbers() {
        let mut st = BTreeMap::new();
        assert!(MirrorDefinition::new("dr", st.clone()).is_err());
        st.insert("bootstrap.servers".to_owned(), "127.0.0.1:9092".to_owned());
        st.insert(
            settings::METADATA_SYNC_INTERVAL_MS.to_owned(),
            "soon".to_owned(),
        );
        assert!(matches!(
            MirrorDefinition::new("dr", st.clone()),
            Err(MirrorError::InvalidSetting { .. })
        ));
        st.insert(
            settings::METADATA_SYNC_INTERVAL_MS.to_owned(),
            "5000".to_owned(),
        );
        st.insert("security.protocol".to_owned(), "PLAINTEXT".to_owned());
        let d = MirrorDefinition::new("dr", st).unwrap();
        assert_eq!(d.metadata_sync_interval_ms(), 5000);
        assert_eq!(d.source_bootstrap(), "127.0.0.1:9092");
        assert!(d.client_settings().contains_key("security.protocol"));
        assert!(!d
            .client_settings()
            .contains_key(settings::METADATA_SYNC_INTERVAL_MS));
        // The KIP's later name is an alias.
        let d = MirrorDefinition::new(
            "dr",
            BTreeMap::from([
                ("bootstrap.servers".to_owned(), "h:1".to_owned()),
                (
                    settings::METADATA_REFRESH_INTERVAL_MS.to_owned(),
                    "700".to_owned(),
                ),
            ]),
        )
        .unwrap();
        assert_eq!(d.metadata_sync_interval_ms(), 700);
    }
}
