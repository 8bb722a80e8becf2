//! The durable client quota store (DescribeClientQuotas / AlterClientQuotas) with Apache
//! Kafka's entity validation, filter semantics (EXACT / DEFAULT / SPECIFIED, strict) and the
//! precedence by which a connection's (user, client-id) picks its quota.
//!
//! An entity is Kafka's `ClientQuotaEntity`: a map from entity type (`user`, `client-id`,
//! `ip`) to a name, `None` being `<default>`. The whole set lives in
//! `<data_dir>/client_quotas.json`, rewritten atomically on every change (temp file, fsync,
//! rename, fsync directory): a change is reported only once durable, and a crash leaves the old
//! or the new set. Runtime-agnostic: enforcement (byte-rate windows, throttling) lives in the
//! broker (`net`), which reads [`QuotaStore::resolve`] through a published snapshot.
//!
//! In a cluster the set is replicated on the Raft log (`quorum`, `ClusterCommand::Quota`): the
//! proposer validates (including the host-name lookup of an `ip` entity, which is not a pure
//! function) and every node applies the alterations to an in-memory store
//! ([`QuotaStore::in_memory`]) that repeats only the pure checks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Kafka's entity types and quota keys.
pub mod keys {
    pub const USER: &str = "user";
    pub const CLIENT_ID: &str = "client-id";
    pub const IP: &str = "ip";
    pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
    pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
    pub const REQUEST_PERCENTAGE: &str = "request_percentage";
    pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
    pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";
    /// DescribeClientQuotas match types.
    pub const MATCH_EXACT: i8 = 0;
    pub const MATCH_DEFAULT: i8 = 1;
    pub const MATCH_SPECIFIED: i8 = 2;
}

const FILE: &str = "client_quotas.json";

/// Entity type -> name (`None` = `<default>`).
pub type Entity = BTreeMap<String, Option<String>>;
/// Quota key -> value.
pub type Values = BTreeMap<String, f64>;

#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// Malformed entity, key, value or filter (Kafka answers INVALID_REQUEST).
    #[error("{0}")]
    Invalid(String),
    /// A filter names an entity type Kafka does not know (UNSUPPORTED_VERSION).
    #[error("{0}")]
    Unsupported(String),
    #[error("client quota store i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("client quota store {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

// Per-alteration results travel in the quorum's `Outcome` (Clone, PartialEq); an i/o error
// is compared and copied by kind and message.
impl Clone for QuotaError {
    fn clone(&self) -> Self {
        match self {
            QuotaError::Invalid(m) => QuotaError::Invalid(m.clone()),
            QuotaError::Unsupported(m) => QuotaError::Unsupported(m.clone()),
            QuotaError::Io(e) => QuotaError::Io(std::io::Error::new(e.kind(), e.to_string())),
            QuotaError::Corrupt { path, reason } => QuotaError::Corrupt {
                path: path.clone(),
                reason: reason.clone(),
            },
        }
    }
}

impl PartialEq for QuotaError {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
    }
}

/// One entity's changes: `(key, Some(value))` sets, `(key, None)` removes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Alteration {
    /// As sent: (entity type, name); duplicates are refused.
    pub entity: Vec<(String, Option<String>)>,
    pub ops: Vec<(String, Option<f64>)>,
}

/// One DescribeClientQuotas filter component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterComponent {
    pub entity_type: String,
    pub match_type: i8,
    pub name: Option<String>,
}

#[derive(Clone, Copy)]
enum Kind {
    Long,
    Double,
}

fn key_kind(entity: &Entity, key: &str) -> Option<Kind> {
    if entity.contains_key(keys::IP) {
        return (key == keys::CONNECTION_CREATION_RATE).then_some(Kind::Long);
    }
    match key {
        keys::PRODUCER_BYTE_RATE | keys::CONSUMER_BYTE_RATE => Some(Kind::Long),
        keys::REQUEST_PERCENTAGE | keys::CONTROLLER_MUTATION_RATE => Some(Kind::Double),
        _ => None,
    }
}

/// Kafka's checks on an entity to alter: known types, each once, no empty name, and one of
/// user, client-id, user+client-id or ip alone.
pub fn validate_entity(raw: &[(String, Option<String>)]) -> Result<Entity, QuotaError> {
    validate_entity_with(raw, true)
}

/// [`validate_entity`]; without `resolve_hosts` an ip entity's host name is not looked up
/// (the replicated apply: the proposer looked it up, and a lookup can differ between nodes).
fn validate_entity_with(
    raw: &[(String, Option<String>)],
    resolve_hosts: bool,
) -> Result<Entity, QuotaError> {
    let inv = |m: String| Err(QuotaError::Invalid(m));
    if raw.is_empty() {
        return inv("Invalid empty client quota entity".into());
    }
    let mut e = Entity::new();
    for (t, n) in raw {
        if e.contains_key(t) {
            return inv(format!(
                "Invalid empty client quota entity, duplicate entity entry {t}"
            ));
        }
        if t != keys::USER && t != keys::CLIENT_ID && t != keys::IP {
            return inv(format!("Unhandled client quota entity type: {t}"));
        }
        if n.as_deref() == Some("") {
            return inv(format!("Empty {t} not supported"));
        }
        e.insert(t.clone(), n.clone());
    }
    if e.contains_key(keys::IP) {
        if e.len() > 1 {
            return inv("Invalid empty client quota entity".into());
        }
        if let Some(Some(ip)) = e.get(keys::IP).filter(|_| resolve_hosts) {
            if ip.parse::<std::net::IpAddr>().is_err() {
                use std::net::ToSocketAddrs;
                if (ip.as_str(), 0).to_socket_addrs().is_err() {
                    return inv(format!("{ip} is not a valid IP or resolvable host."));
                }
            }
        }
    }
    Ok(e)
}

fn validate_value(entity: &Entity, key: &str, v: f64) -> Result<(), QuotaError> {
    match key_kind(entity, key) {
        None => Err(QuotaError::Invalid(format!(
            "Invalid configuration key {key}"
        ))),
        Some(Kind::Double) => Ok(()),
        Some(Kind::Long) => {
            let eps = 1e-6;
            if ((v + eps).trunc() - v).abs() > eps {
                Err(QuotaError::Invalid(format!(
                    "Configuration {key} must be a Long value"
                )))
            } else {
                Ok(())
            }
        }
    }
}

/// Kafka's filter validation: non-empty known types, each once, EXACT with a name, DEFAULT
/// and SPECIFIED without, and no ip next to user or client-id.
pub fn validate_filter(components: &[FilterComponent]) -> Result<(), QuotaError> {
    let inv = |m: String| Err(QuotaError::Invalid(m));
    let mut seen = BTreeSet::new();
    for c in components {
        if c.entity_type.is_empty() {
            return inv("Invalid empty entity type.".into());
        }
        if !seen.insert(c.entity_type.as_str()) {
            return inv(format!(
                "Entity type {} cannot appear more than once in the filter.",
                c.entity_type
            ));
        }
        if ![keys::USER, keys::CLIENT_ID, keys::IP].contains(&c.entity_type.as_str()) {
            return Err(QuotaError::Unsupported(format!(
                "Unsupported entity type {}",
                c.entity_type
            )));
        }
        match (c.match_type, &c.name) {
            (keys::MATCH_EXACT, None) => {
                return inv(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                )
            }
            (keys::MATCH_DEFAULT, Some(_)) => {
                return inv(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                        .into(),
                )
            }
            (keys::MATCH_SPECIFIED, Some(_)) => {
                return inv(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                )
            }
            (keys::MATCH_EXACT..=keys::MATCH_SPECIFIED, _) => {}
            (m, _) => return inv(format!("Unknown match type {m}")),
        }
    }
    if seen.contains(keys::IP) && (seen.contains(keys::USER) || seen.contains(keys::CLIENT_ID)) {
        return inv(
            "Invalid entity filter component combination. IP filter component should \
                    not be used with user or clientId filter component."
                .into(),
        );
    }
    Ok(())
}

/// Kafka's filter match: every component's type is in the entity (with the exact or default
/// name when asked); strict also wants no other type in it. Strict with no component matches
/// nothing.
pub fn filter_matches(components: &[FilterComponent], strict: bool, e: &Entity) -> bool {
    if components.is_empty() {
        return !strict;
    }
    let each = components.iter().all(|c| match e.get(&c.entity_type) {
        None => false,
        Some(name) => match c.match_type {
            keys::MATCH_EXACT => name.as_deref() == c.name.as_deref(),
            keys::MATCH_DEFAULT => name.is_none(),
            _ => true,
        },
    });
    each && (!strict || e.len() == components.len())
}

/// Whose budget a resolved quota is: the user and client-id of the entity that matched, with
/// `<default>` replaced by the connection's own name, and `None` for a level the entity does
/// not have (Kafka's quota metric tags). Connections with equal keys share one budget.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BudgetKey {
    pub user: Option<String>,
    pub client_id: Option<String>,
}

/// One entity's quotas as a row (the file's and the Raft snapshot's form: JSON maps cannot
/// have an entity as key).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QuotaRow {
    entity: Vec<(String, Option<String>)>,
    values: Values,
}

/// The rows of a quota set.
pub fn to_rows(quotas: &BTreeMap<Entity, Values>) -> Vec<QuotaRow> {
    quotas
        .iter()
        .map(|(e, v)| QuotaRow {
            entity: e.iter().map(|(t, n)| (t.clone(), n.clone())).collect(),
            values: v.clone(),
        })
        .collect()
}

/// The quota set of `rows`.
pub fn from_rows(rows: Vec<QuotaRow>) -> BTreeMap<Entity, Values> {
    rows.into_iter()
        .map(|s| (s.entity.into_iter().collect(), s.values))
        .collect()
}

/// The client quotas of this broker, persisted in `<dir>/client_quotas.json`, or the
/// replicated cluster's in-memory copy.
#[derive(Debug)]
pub struct QuotaStore {
    /// `None` for the in-memory copy (the Raft log is the durable one).
    path: Option<PathBuf>,
    quotas: BTreeMap<Entity, Values>,
}

impl QuotaStore {
    /// Opens (or starts empty) the store in `dir`.
    pub fn open(dir: &Path) -> Result<QuotaStore, QuotaError> {
        fs::create_dir_all(dir)?;
        let path = dir.join(FILE);
        let quotas = match fs::read(&path) {
            Ok(bytes) => {
                let rows: Vec<QuotaRow> =
                    serde_json::from_slice(&bytes).map_err(|e| QuotaError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                from_rows(rows)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e.into()),
        };
        Ok(QuotaStore {
            path: Some(path),
            quotas,
        })
    }

    /// A store never written to disk (the Raft state machine's copy).
    pub fn in_memory(quotas: BTreeMap<Entity, Values>) -> QuotaStore {
        QuotaStore { path: None, quotas }
    }

    /// Every entity with at least one quota.
    pub fn all(&self) -> BTreeMap<Entity, Values> {
        self.quotas.clone()
    }

    /// The entities matching the filter, with their quotas.
    pub fn describe(
        &self,
        components: &[FilterComponent],
        strict: bool,
    ) -> Result<Vec<(Entity, Values)>, QuotaError> {
        validate_filter(components)?;
        Ok(self
            .quotas
            .iter()
            .filter(|(e, _)| filter_matches(components, strict, e))
            .map(|(e, v)| (e.clone(), v.clone()))
            .collect())
    }

    /// Applies the valid alterations (all of an entity's changes or none of them) unless
    /// `validate_only`, and persists once. One result per input, in order; an entity named
    /// twice in one request is refused both times, as Kafka does.
    pub fn alter(
        &mut self,
        alts: &[Alteration],
        validate_only: bool,
    ) -> Vec<Result<(), QuotaError>> {
        let mut counts: BTreeMap<Vec<(String, Option<String>)>, usize> = BTreeMap::new();
        for a in alts {
            let mut k = a.entity.clone();
            k.sort();
            *counts.entry(k).or_default() += 1;
        }
        let before = self.quotas.clone();
        let mut out = Vec::with_capacity(alts.len());
        for a in alts {
            let mut k = a.entity.clone();
            k.sort();
            let r = if counts[&k] > 1 {
                Err(QuotaError::Invalid(format!(
                    "Ignoring duplicate entity {:?}",
                    a.entity
                )))
            } else {
                self.alter_one(a, validate_only)
            };
            out.push(r);
        }
        if self.quotas != before {
            if let Err(e) = self.persist() {
                self.quotas = before;
                let msg = e.to_string();
                for r in out.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(QuotaError::Io(std::io::Error::other(msg.clone())));
                }
            }
        }
        out
    }

    fn alter_one(&mut self, a: &Alteration, validate_only: bool) -> Result<(), QuotaError> {
        let entity = validate_entity_with(&a.entity, self.path.is_some())?;
        let mut seen = BTreeSet::new();
        for (k, v) in &a.ops {
            if !seen.insert(k.as_str()) {
                return Err(QuotaError::Invalid(format!(
                    "Duplicate quota key {k} not updating quota for this entity"
                )));
            }
            if let Some(v) = v {
                validate_value(&entity, k, *v)?;
            }
        }
        if validate_only {
            return Ok(());
        }
        let values = self.quotas.entry(entity.clone()).or_default();
        for (k, v) in &a.ops {
            match v {
                Some(v) => {
                    values.insert(k.clone(), *v);
                }
                None => {
                    values.remove(k);
                }
            }
        }
        if values.is_empty() {
            self.quotas.remove(&entity);
        }
        Ok(())
    }

    /// The quota `key` for a connection of `user` (Kafka's sanitized principal name,
    /// `ANONYMOUS` when unauthenticated) and `client_id`, by Kafka's precedence:
    /// user+client, user+default client, user, default user+client, default user+default
    /// client, default user, client, default client. `None` when no level sets it.
    pub fn resolve(&self, user: &str, client_id: &str, key: &str) -> Option<(BudgetKey, f64)> {
        resolve_in(&self.quotas, user, client_id, key)
    }

    fn persist(&self) -> Result<(), QuotaError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let bytes =
            serde_json::to_vec_pretty(&to_rows(&self.quotas)).map_err(std::io::Error::other)?;
        crate::replace_file::replace_durably(path, &bytes)?;
        Ok(())
    }
}

/// [`QuotaStore::resolve`] over a quota map (a published snapshot).
pub fn resolve_in(
    quotas: &BTreeMap<Entity, Values>,
    user: &str,
    client_id: &str,
    key: &str,
) -> Option<(BudgetKey, f64)> {
    // (user level, client level): Some(Some(name)) named, Some(None) default, None absent.
    type Level<'a> = Option<Option<&'a str>>;
    let levels: [(Level<'_>, Level<'_>); 8] = [
        (Some(Some(user)), Some(Some(client_id))),
        (Some(Some(user)), Some(None)),
        (Some(Some(user)), None),
        (Some(None), Some(Some(client_id))),
        (Some(None), Some(None)),
        (Some(None), None),
        (None, Some(Some(client_id))),
        (None, Some(None)),
    ];
    for (u, c) in levels {
        let mut e = Entity::new();
        if let Some(u) = u {
            e.insert(keys::USER.into(), u.map(str::to_owned));
        }
        if let Some(c) = c {
            e.insert(keys::CLIENT_ID.into(), c.map(str::to_owned));
        }
        if let Some(v) = quotas.get(&e).and_then(|vs| vs.get(key)) {
            let budget = BudgetKey {
                user: u.map(|_| user.to_owned()),
                client_id: c.map(|_| client_id.to_owned()),
            };
            return Some((budget, *v));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(kv: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        kv.iter()
            .map(|(t, n)| (t.to_string(), n.map(str::to_owned)))
            .collect()
    }

    fn set(e: &[(&str, Option<&str>)], k: &str, v: f64) -> Alteration {
        Alteration {
            entity: ent(e),
            ops: vec![(k.into(), Some(v))],
        }
    }

    fn comp(t: &str, m: i8, n: Option<&str>) -> FilterComponent {
        FilterComponent {
            entity_type: t.into(),
            match_type: m,
            name: n.map(str::to_owned),
        }
    }

    #[test]
    fn quotas_survive_reopen_and_removing_the_last_key_drops_the_entity() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = QuotaStore::open(dir.path()).unwrap();
        let r = s.alter(
            &[
                set(&[("user", Some("alice"))], keys::PRODUCER_BYTE_RATE, 1024.0),
                set(&[("client-id", None)], keys::CONSUMER_BYTE_RATE, 2048.0),
            ],
            false,
        );
        assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
        drop(s);
        let mut s = QuotaStore::open(dir.path()).unwrap();
        assert_eq!(s.all().len(), 2);
        let rm = Alteration {
            entity: ent(&[("user", Some("alice"))]),
            ops: vec![(keys::PRODUCER_BYTE_RATE.into(), None)],
        };
        assert!(s.alter(&[rm], false)[0].is_ok());
        drop(s);
        let s = QuotaStore::open(dir.path()).unwrap();
        assert_eq!(s.all().len(), 1);
    }

    #[test]
    fn invalid_keys_values_and_entities_are_refused_and_validate_only_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = QuotaStore::open(dir.path()).unwrap();
        let bad = [
            set(&[("user", Some("a"))], "bogus", 1.0),
            set(&[("user", Some("a"))], keys::PRODUCER_BYTE_RATE, 1.5),
            set(&[("group", Some("a"))], keys::PRODUCER_BYTE_RATE, 1.0),
            set(&[("user", Some(""))], keys::PRODUCER_BYTE_RATE, 1.0),
            set(&[], keys::PRODUCER_BYTE_RATE, 1.0),
            set(
                &[("user", Some("a")), ("ip", Some("1.2.3.4"))],
                keys::PRODUCER_BYTE_RATE,
                1.0,
            ),
        ];
        assert!(s
            .alter(&bad, false)
            .iter()
            .all(|r| matches!(r, Err(QuotaError::Invalid(_)))));
        let ok = set(&[("user", Some("a"))], keys::REQUEST_PERCENTAGE, 12.5);
        assert!(s.alter(std::slice::from_ref(&ok), true)[0].is_ok());
        assert!(s.all().is_empty());
        // The same entity twice in one request: both refused.
        let r = s.alter(&[ok.clone(), ok], false);
        assert!(r.iter().all(|r| r.is_err()));
        assert!(s.all().is_empty());
    }

    #[test]
    fn describe_filters_follow_kafkas_exact_default_specified_and_strict_semantics() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = QuotaStore::open(dir.path()).unwrap();
        let k = keys::PRODUCER_BYTE_RATE;
        s.alter(
            &[
                set(&[("user", Some("alice"))], k, 1.0),
                set(&[("user", None)], k, 2.0),
                set(
                    &[("user", Some("alice")), ("client-id", Some("c1"))],
                    k,
                    3.0,
                ),
                set(&[("client-id", Some("c1"))], k, 4.0),
            ],
            false,
        );
        let names = |f: &[FilterComponent], strict: bool| -> Vec<f64> {
            let mut v: Vec<f64> = s
                .describe(f, strict)
                .unwrap()
                .into_iter()
                .map(|(_, v)| v[k])
                .collect();
            v.sort_by(f64::total_cmp);
            v
        };
        assert_eq!(names(&[], false), vec![1.0, 2.0, 3.0, 4.0]);
        assert!(names(&[], true).is_empty());
        let alice = comp("user", keys::MATCH_EXACT, Some("alice"));
        assert_eq!(names(std::slice::from_ref(&alice), false), vec![1.0, 3.0]);
        assert_eq!(names(std::slice::from_ref(&alice), true), vec![1.0]);
        assert_eq!(
            names(&[comp("user", keys::MATCH_DEFAULT, None)], false),
            vec![2.0]
        );
        assert_eq!(
            names(&[comp("client-id", keys::MATCH_SPECIFIED, None)], false),
            vec![3.0, 4.0]
        );
        assert!(matches!(
            s.describe(&[comp("group", keys::MATCH_SPECIFIED, None)], false),
            Err(QuotaError::Unsupported(_))
        ));
        assert!(matches!(
            s.describe(&[comp("user", keys::MATCH_EXACT, None)], false),
            Err(QuotaError::Invalid(_))
        ));
    }

    #[test]
    fn resolution_follows_kafkas_precedence_and_names_the_budget_it_charges() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = QuotaStore::open(dir.path()).unwrap();
        let k = keys::PRODUCER_BYTE_RATE;
        s.alter(
            &[
                set(&[("client-id", None)], k, 8.0),
                set(&[("client-id", Some("c"))], k, 7.0),
            ],
            false,
        );
        let (b, v) = s.resolve("u", "c", k).unwrap();
        assert_eq!(v, 7.0);
        assert_eq!(
            b,
            BudgetKey {
                user: None,
                client_id: Some("c".into())
            }
        );
        assert_eq!(s.resolve("u", "other", k).unwrap().1, 8.0);
        s.alter(&[set(&[("user", None)], k, 6.0)], false);
        let (b, v) = s.resolve("u", "c", k).unwrap();
        assert_eq!((b.user.as_deref(), b.client_id, v), (Some("u"), None, 6.0));
        s.alter(
            &[set(&[("user", Some("u")), ("client-id", None)], k, 2.0)],
            false,
        );
        assert_eq!(s.resolve("u", "c", k).unwrap().1, 2.0);
        assert_eq!(s.resolve("v", "c", k).unwrap().1, 6.0);
        assert!(s.resolve("u", "c", keys::CONSUMER_BYTE_RATE).is_none());
    }

    #[test]
    fn given_disk_full_when_persisting_should_fail_cleanly_and_keep_the_durable_set() {
        // Needs root (CI runs as root): fails, never skips, where mounting is not allowed.
        let fs_dir = crate::append_file::Tmpfs::mount("64k")
            .unwrap_or_else(|e| panic!("mount a 64k tmpfs (run as root): {e}"));
        let dir = fs_dir.path().join("quotas");
        let mut st = QuotaStore::open(&dir).unwrap();
        let filler = fs_dir.fill();
        let long = "c".repeat(200);
        let mut failed = 0;
        for i in 0..50 {
            let name = format!("{long}-{i}");
            let r = st.alter(
                &[set(
                    &[("client-id", Some(&name))],
                    keys::PRODUCER_BYTE_RATE,
                    1.0,
                )],
                false,
            );
            if r[0].is_err() {
                failed += 1;
            }
        }
        assert!(failed > 0, "the tmpfs never filled up");
        assert!(
            !dir.join("client_quotas.json.tmp").exists(),
            "partial temp file left"
        );
        assert_eq!(QuotaStore::open(&dir).unwrap().all(), st.all());
        fs::remove_file(filler).unwrap();
        st.alter(
            &[set(
                &[("user", Some("after"))],
                keys::CONSUMER_BYTE_RATE,
                2.0,
            )],
            false,
        )[0]
        .as_ref()
        .unwrap();
        assert_eq!(QuotaStore::open(&dir).unwrap().all(), st.all());
    }
}
