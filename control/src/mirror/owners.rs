//! Who wrote each ACL binding and client quota entity: a local admin, or a mirror's sync.
//!
//! A mirror's ACL and quota sync (`mirror.acl.sync.mode` / `mirror.quota.sync.mode`, default
//! `owned`) creates, updates and deletes only what it wrote itself, so a local admin's
//! entries and another mirror's survive every round (the hub layout: several sources into
//! one destination). The ownership is replicated state beside the ACLs and quotas, and it is
//! enforced where the change is applied ([`apply_acl`], [`apply_quotas`]): a sync round
//! planned on stale data cannot delete or overwrite an entry someone else wrote in between.
//!
//! Rules, applied identically on every node:
//! - a local change (CreateAcls, DeleteAcls, AlterClientQuotas) makes what it touches local;
//! - a mirror in `owned` mode creates a binding or an entity only where none exists (it then
//!   owns it), changes and deletes only what it owns, and leaves the rest as it is (the first
//!   writer keeps an entry);
//! - a mirror in `exact` mode (the seed's sync: the destination's set made equal to the
//!   source's) changes whatever it is asked to and owns what it leaves in place.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::acl::{AclBinding, AclFilter, AclStore};
use crate::quota::{Alteration, Entity, QuotaError, QuotaStore};

/// A mirror's sync as the writer of a change (None in a command: a local admin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorWriter {
    pub mirror: String,
    /// `exact` mode: the change applies whoever wrote the entry before.
    #[serde(default)]
    pub exact: bool,
}

/// The owning mirror of each mirror-written ACL binding and quota entity; what is not listed
/// is local.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncOwners {
    pub acls: BTreeMap<AclBinding, String>,
    pub quotas: BTreeMap<Entity, String>,
}

/// The snapshot form (JSON maps need string keys).
#[derive(Serialize, Deserialize, Default)]
struct Rows {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    acls: Vec<(AclBinding, String)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    quotas: Vec<(Entity, String)>,
}

impl Serialize for SyncOwners {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Rows {
            acls: self
                .acls
                .iter()
                .map(|(b, m)| (b.clone(), m.clone()))
                .collect(),
            quotas: self
                .quotas
                .iter()
                .map(|(e, m)| (e.clone(), m.clone()))
                .collect(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for SyncOwners {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let rows = Rows::deserialize(d)?;
        Ok(SyncOwners {
            acls: rows.acls.into_iter().collect(),
            quotas: rows.quotas.into_iter().collect(),
        })
    }
}

impl SyncOwners {
    pub fn is_empty(&self) -> bool {
        self.acls.is_empty() && self.quotas.is_empty()
    }

    /// The owner of `b` (None: local, or no such binding).
    pub fn acl_owner(&self, b: &AclBinding) -> Option<&str> {
        self.acls.get(b).map(String::as_str)
    }

    /// The owner of entity `e` (None: local, or no quota for it).
    pub fn quota_owner(&self, e: &Entity) -> Option<&str> {
        self.quotas.get(e).map(String::as_str)
    }
}

/// Applies an ACL creation by `writer` (None: a local admin) to `acls` and `owners`.
pub fn create_acls(
    acls: &mut AclStore,
    owners: &mut SyncOwners,
    bindings: &[AclBinding],
    writer: Option<&MirrorWriter>,
) {
    let Some(w) = writer else {
        // An in-memory store has no I/O to fail; invalid bindings are skipped.
        let _ = acls.create(bindings);
        for b in bindings {
            owners.acls.remove(b);
        }
        return;
    };
    let present: BTreeSet<AclBinding> = acls.all().into_iter().collect();
    let new: Vec<AclBinding> = bindings
        .iter()
        .filter(|b| !present.contains(*b))
        .cloned()
        .collect();
    let results = acls.create(&new);
    for (b, r) in new.into_iter().zip(results) {
        if r.is_ok() {
            owners.acls.insert(b, w.mirror.clone());
        }
    }
    if w.exact {
        // Exact mode owns what it asserted, whoever wrote it first.
        for b in bindings.iter().filter(|b| present.contains(*b)) {
            owners.acls.insert(b.clone(), w.mirror.clone());
        }
    }
}

/// Applies an ACL deletion by `writer`: per filter, the bindings removed. A mirror in owned
/// mode removes only the matching bindings it owns.
pub fn delete_acls(
    acls: &mut AclStore,
    owners: &mut SyncOwners,
    filters: &[AclFilter],
    writer: Option<&MirrorWriter>,
) -> Vec<Vec<AclBinding>> {
    let removed: Vec<Vec<AclBinding>> = match writer {
        Some(w) if !w.exact => {
            let all = acls.all();
            let mut out = Vec::with_capacity(filters.len());
            for f in filters {
                let mine: Vec<AclFilter> = all
                    .iter()
                    .filter(|b| f.matches(b) && owners.acl_owner(b) == Some(w.mirror.as_str()))
                    .map(exact_filter)
                    .collect();
                out.push(
                    acls.delete(&mine)
                        .into_iter()
                        .flat_map(|r| r.unwrap_or_default())
                        .collect(),
                );
            }
            out
        }
        _ => acls
            .delete(filters)
            .into_iter()
            .map(|r| r.unwrap_or_default())
            .collect(),
    };
    for b in removed.iter().flatten() {
        owners.acls.remove(b);
    }
    removed
}

/// The filter that matches `b` and nothing else.
pub fn exact_filter(b: &AclBinding) -> AclFilter {
    AclFilter {
        resource_type: b.resource_type,
        resource_name: Some(b.resource_name.clone()),
        pattern_type: b.pattern_type,
        principal: Some(b.principal.clone()),
        host: Some(b.host.clone()),
        operation: b.operation,
        permission_type: b.permission_type,
    }
}

/// Applies client quota alterations by `writer`, one result per alteration. A mirror in
/// owned mode alters an entity only when it has no quota yet or the mirror owns it; another's
/// entity is answered with an error and left as it is.
pub fn apply_quotas(
    quotas: &mut QuotaStore,
    owners: &mut SyncOwners,
    alts: &[Alteration],
    writer: Option<&MirrorWriter>,
) -> Vec<Result<(), QuotaError>> {
    let entity = |a: &Alteration| -> Entity { a.entity.iter().cloned().collect() };
    let mut results: Vec<Option<Result<(), QuotaError>>> = vec![None; alts.len()];
    if let Some(w) = writer.filter(|w| !w.exact) {
        let present = quotas.all();
        for (a, r) in alts.iter().zip(results.iter_mut()) {
            let e = entity(a);
            if present.contains_key(&e) && owners.quota_owner(&e) != Some(w.mirror.as_str()) {
                let by = owners.quota_owner(&e).unwrap_or("a local admin");
                *r = Some(Err(QuotaError::Invalid(format!(
                    "entity {e:?} is owned by {by}, not mirror {}",
                    w.mirror
                ))));
            }
        }
    }
    let send: Vec<Alteration> = alts
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_none())
        .map(|(a, _)| a.clone())
        .collect();
    let mut applied = quotas.alter(&send, false).into_iter();
    let after = quotas.all();
    for (a, r) in alts.iter().zip(results.iter_mut()) {
        if r.is_some() {
            continue;
        }
        let res = applied.next().unwrap_or(Ok(()));
        if res.is_ok() {
            let e = entity(a);
            match writer {
                Some(w) if after.contains_key(&e) => {
                    owners.quotas.insert(e, w.mirror.clone());
                }
                _ => {
                    owners.quotas.remove(&e);
                }
            }
        }
        *r = Some(res);
    }
    results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(principal: &str, topic: &str) -> AclBinding {
        AclBinding {
            resource_type: 2,
            resource_name: topic.into(),
            pattern_type: 3,
            principal: principal.into(),
            host: "*".into(),
            operation: 3,
            permission_type: 3,
        }
    }

    fn owned(m: &str) -> MirrorWriter {
        MirrorWriter {
            mirror: m.into(),
            exact: false,
        }
    }

    fn user(name: &str) -> Entity {
        Entity::from([("user".to_owned(), Some(name.to_owned()))])
    }

    fn set(e: &Entity, k: &str, v: Option<f64>) -> Alteration {
        Alteration {
            entity: e.iter().map(|(t, n)| (t.clone(), n.clone())).collect(),
            ops: vec![(k.to_owned(), v)],
        }
    }

    #[test]
    fn a_mirror_deletes_only_the_acls_it_created() {
        let mut acls = AclStore::in_memory([]);
        let mut owners = SyncOwners::default();
        create_acls(&mut acls, &mut owners, &[read("User:ops", "t")], None);
        create_acls(
            &mut acls,
            &mut owners,
            &[read("User:ops", "t"), read("User:a", "t")],
            Some(&owned("A")),
        );
        create_acls(
            &mut acls,
            &mut owners,
            &[read("User:a", "t")],
            Some(&owned("B")),
        );
        // The local binding stays local; A created User:a and keeps it against B.
        assert_eq!(owners.acl_owner(&read("User:ops", "t")), None);
        assert_eq!(owners.acl_owner(&read("User:a", "t")), Some("A"));
        // B deleting everything it matches removes nothing it does not own.
        let gone = delete_acls(
            &mut acls,
            &mut owners,
            &[AclFilter::any()],
            Some(&owned("B")),
        );
        assert_eq!(gone, vec![Vec::<AclBinding>::new()]);
        let gone = delete_acls(
            &mut acls,
            &mut owners,
            &[AclFilter::any()],
            Some(&owned("A")),
        );
        assert_eq!(gone, vec![vec![read("User:a", "t")]]);
        assert_eq!(acls.all(), vec![read("User:ops", "t")]);
        assert!(owners.is_empty());
    }

    #[test]
    fn a_local_change_takes_an_entry_over_and_exact_mode_takes_it_back() {
        let mut acls = AclStore::in_memory([]);
        let mut owners = SyncOwners::default();
        create_acls(
            &mut acls,
            &mut owners,
            &[read("User:a", "t")],
            Some(&owned("A")),
        );
        create_acls(&mut acls, &mut owners, &[read("User:a", "t")], None);
        assert_eq!(owners.acl_owner(&read("User:a", "t")), None);
        let exact = MirrorWriter {
            mirror: "A".into(),
            exact: true,
        };
        create_acls(&mut acls, &mut owners, &[read("User:a", "t")], Some(&exact));
        assert_eq!(owners.acl_owner(&read("User:a", "t")), Some("A"));
    }

    #[test]
    fn a_mirror_alters_only_the_quotas_it_owns() {
        let mut q = QuotaStore::in_memory(Default::default());
        let mut owners = SyncOwners::default();
        let local = apply_quotas(
            &mut q,
            &mut owners,
            &[set(&user("ops"), "producer_byte_rate", Some(1.0))],
            None,
        );
        assert!(local[0].is_ok());
        let r = apply_quotas(
            &mut q,
            &mut owners,
            &[
                set(&user("ops"), "producer_byte_rate", Some(9.0)),
                set(&user("bob"), "producer_byte_rate", Some(2.0)),
            ],
            Some(&owned("A")),
        );
        assert!(r[0].is_err() && r[1].is_ok(), "{r:?}");
        assert_eq!(q.all()[&user("ops")]["producer_byte_rate"], 1.0);
        assert_eq!(owners.quota_owner(&user("bob")), Some("A"));
        // Another mirror cannot change bob; A removing its last key removes the ownership.
        let r = apply_quotas(
            &mut q,
            &mut owners,
            &[set(&user("bob"), "producer_byte_rate", Some(5.0))],
            Some(&owned("B")),
        );
        assert!(r[0].is_err());
        let r = apply_quotas(
            &mut q,
            &mut owners,
            &[set(&user("bob"), "producer_byte_rate", None)],
            Some(&owned("A")),
        );
        assert!(r[0].is_ok());
        assert!(!q.all().contains_key(&user("bob")));
        assert!(owners.is_empty());
    }

    #[test]
    fn owners_survive_a_snapshot_round_trip() {
        let mut owners = SyncOwners::default();
        owners.acls.insert(read("User:a", "t"), "A".into());
        owners.quotas.insert(user("bob"), "B".into());
        let json = serde_json::to_vec(&owners).unwrap();
        let back: SyncOwners = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, owners);
    }
}
