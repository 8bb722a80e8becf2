//! Client quota sync: the source's client quotas (of the entities
//! `mirror.quota.entities.exclude` leaves to the sync) written to the destination, planned by
//! `kmirror_control::mirror::plan_quota_sync`. In the default `owned` mode the round writes
//! entities that have no quota yet and those this mirror wrote, and removes only its own;
//! `exact` mode makes the destination's quotas equal to the source's. Every change goes
//! through the quorum, as AlterClientQuotas does, so every node enforces it; the quorum
//! enforces the ownership when it applies it.
//!
//! The broker is reached through [`ClientQuotas`] only, so the round is tested without one.

use std::collections::BTreeMap;

use kmirror_control::mirror::{MirrorDefinition, MirrorWriter, SyncClash, SyncOwners};
use kmirror_control::quota::{Alteration, Entity, Values};

/// The destination's client quotas as the sync sees them.
pub(super) trait ClientQuotas {
    /// The quotas in force.
    fn quotas(&self) -> BTreeMap<Entity, Values>;
    /// The mirror that wrote each synced entity.
    fn owners(&self) -> BTreeMap<Entity, String>;
    /// Applies the alterations as `writer`, as AlterClientQuotas would.
    fn alter(&self, plan: &[Alteration], writer: MirrorWriter) -> Result<(), String>;
}

/// What one round changed, and what it left to another owner.
#[derive(Debug, Default, PartialEq)]
pub(super) struct QuotaSyncDone {
    pub changed: usize,
    pub clashes: Vec<SyncClash>,
}

/// One quota sync round of mirror `def`.
pub(super) fn sync_quotas(
    def: &MirrorDefinition,
    source: &BTreeMap<Entity, Values>,
    store: &impl ClientQuotas,
) -> Result<QuotaSyncDone, String> {
    let owners = SyncOwners {
        quotas: store.owners(),
        ..SyncOwners::default()
    };
    let plan = kmirror_control::mirror::plan_quota_sync(def, source, &store.quotas(), &owners)
        .map_err(|e| e.to_string())?;
    super::report_clashes(&def.name, "client quota entities", &plan.clashes);
    let done = QuotaSyncDone {
        changed: plan.alterations.len(),
        clashes: plan.clashes,
    };
    if plan.alterations.is_empty() {
        return Ok(done);
    }
    store.alter(
        &plan.alterations,
        kmirror_control::mirror::quota_sync_writer(def),
    )?;
    tracing::info!(mirror = %def.name, entities = done.changed, "client quotas synced from the source");
    Ok(done)
}

impl ClientQuotas for super::BrokerHost {
    fn quotas(&self) -> BTreeMap<Entity, Values> {
        self.broker.quotas().as_ref().clone()
    }

    fn owners(&self) -> BTreeMap<Entity, String> {
        self.broker.quota_owners().as_ref().clone()
    }

    fn alter(&self, plan: &[Alteration], writer: MirrorWriter) -> Result<(), String> {
        for r in self.broker.alter_quotas(plan, writer) {
            r.map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_control::quota::QuotaStore;
    use std::cell::RefCell;

    /// Quotas and their owners in memory, applied as the quorum applies them.
    struct MemQuotas(RefCell<(QuotaStore, SyncOwners)>);

    impl MemQuotas {
        /// A store holding `local` (written by a local admin).
        fn with(local: BTreeMap<Entity, Values>) -> MemQuotas {
            MemQuotas(RefCell::new((
                QuotaStore::in_memory(local),
                SyncOwners::default(),
            )))
        }
    }

    impl ClientQuotas for MemQuotas {
        fn quotas(&self) -> BTreeMap<Entity, Values> {
            self.0.borrow().0.all()
        }
        fn owners(&self) -> BTreeMap<Entity, String> {
            self.0.borrow().1.quotas.clone()
        }
        fn alter(&self, plan: &[Alteration], writer: MirrorWriter) -> Result<(), String> {
            let (q, owners) = &mut *self.0.borrow_mut();
            for r in kmirror_control::mirror::owners::apply_quotas(q, owners, plan, Some(&writer)) {
                r.map_err(|e| e.to_string())?;
            }
            Ok(())
        }
    }

    fn user(name: &str) -> Entity {
        Entity::from([("user".to_owned(), Some(name.to_owned()))])
    }

    fn rate(k: &str, v: f64) -> Values {
        Values::from([(k.to_owned(), v)])
    }

    fn def_named(name: &str, extra: &[(&str, &str)]) -> MirrorDefinition {
        let mut s = BTreeMap::from([("bootstrap.servers".to_owned(), "src:9092".to_owned())]);
        for (k, v) in extra {
            s.insert(k.to_string(), v.to_string());
        }
        MirrorDefinition::new(name, s).unwrap()
    }

    #[test]
    fn exact_quota_sync_makes_the_selected_entities_equal_to_the_source() {
        let store = MemQuotas::with(BTreeMap::from([
            (user("alice"), rate("producer_byte_rate", 1.0)),
            (user("gone"), rate("consumer_byte_rate", 5.0)),
            (user("ops"), rate("request_percentage", 50.0)),
        ]));
        let def = def_named(
            "dr",
            &[
                ("mirror.quota.entities.exclude", "ops"),
                ("mirror.quota.sync.mode", "exact"),
            ],
        );
        let source = BTreeMap::from([
            (user("alice"), rate("producer_byte_rate", 2048.0)),
            (user("bob"), rate("consumer_byte_rate", 4096.0)),
        ]);
        assert_eq!(sync_quotas(&def, &source, &store).unwrap().changed, 3);
        let mut want = source.clone();
        want.insert(user("ops"), rate("request_percentage", 50.0));
        assert_eq!(store.quotas(), want);
        assert_eq!(sync_quotas(&def, &source, &store).unwrap().changed, 0);
    }

    #[test]
    fn two_owned_mirrors_and_a_local_admin_keep_their_own_quotas() {
        let store = MemQuotas::with(BTreeMap::from([(
            user("ops"),
            rate("request_percentage", 50.0),
        )]));
        let (a, b) = (def_named("a", &[]), def_named("b", &[]));
        let src_a = BTreeMap::from([
            (user("alice"), rate("producer_byte_rate", 10.0)),
            (user("ops"), rate("request_percentage", 99.0)),
        ]);
        let src_b = BTreeMap::from([
            (user("bob"), rate("producer_byte_rate", 20.0)),
            (user("alice"), rate("producer_byte_rate", 30.0)),
        ]);
        for round in 0..5 {
            let da = sync_quotas(&a, &src_a, &store).unwrap();
            let db = sync_quotas(&b, &src_b, &store).unwrap();
            if round > 0 {
                assert_eq!((da.changed, db.changed), (0, 0));
            }
            // a would change the local ops entity; b would change a's alice.
            assert_eq!(da.clashes.len(), 1, "{:?}", da.clashes);
            assert_eq!(da.clashes[0].owner, None);
            assert_eq!(db.clashes.len(), 1, "{:?}", db.clashes);
            assert_eq!(db.clashes[0].owner.as_deref(), Some("a"));
        }
        let want = BTreeMap::from([
            (user("alice"), rate("producer_byte_rate", 10.0)),
            (user("bob"), rate("producer_byte_rate", 20.0)),
            (user("ops"), rate("request_percentage", 50.0)),
        ]);
        assert_eq!(store.quotas(), want);
        // b's source drops bob: b removes it; a's and the local entity stay.
        let done = sync_quotas(&b, &BTreeMap::new(), &store).unwrap();
        assert_eq!(done.changed, 1);
        assert_eq!(store.quotas().len(), 2);
        assert!(!store.quotas().contains_key(&user("bob")));
    }
}
