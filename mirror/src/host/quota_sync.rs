//! Client quota sync: the destination's client quotas (of the entities
//! `mirror.quota.entities.exclude` leaves to the sync) made equal to the source's, planned by
//! `kmirror_control::mirror::plan_quota_sync`. Every change goes through the quorum, as
//! AlterClientQuotas does, so every node enforces it.
//!
//! The broker is reached through [`ClientQuotas`] only, so the round is tested without one.

use std::collections::BTreeMap;

use kmirror_control::mirror::MirrorDefinition;
use kmirror_control::quota::{Alteration, Entity, Values};

/// The destination's client quotas as the sync sees them.
pub(super) trait ClientQuotas {
    /// The quotas in force.
    fn quotas(&self) -> BTreeMap<Entity, Values>;
    /// Applies the alterations, as AlterClientQuotas would.
    fn alter(&self, plan: &[Alteration]) -> Result<(), String>;
}

/// One quota sync round of mirror `def`; the number of entities it changed.
pub(super) fn sync_quotas(
    def: &MirrorDefinition,
    source: &BTreeMap<Entity, Values>,
    store: &impl ClientQuotas,
) -> Result<usize, String> {
    let plan = kmirror_control::mirror::plan_quota_sync(def, source, &store.quotas())
        .map_err(|e| e.to_string())?;
    if plan.is_empty() {
        return Ok(0);
    }
    store.alter(&plan)?;
    tracing::info!(mirror = %def.name, entities = plan.len(), "client quotas synced from the source");
    Ok(plan.len())
}

impl ClientQuotas for super::BrokerHost {
    fn quotas(&self) -> BTreeMap<Entity, Values> {
        self.broker.quotas().as_ref().clone()
    }

    fn alter(&self, plan: &[Alteration]) -> Result<(), String> {
        for r in self.broker.alter_quotas(plan) {
            r.map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Quotas in memory, altered as AlterClientQuotas alters them.
    #[derive(Default)]
    struct MemQuotas(RefCell<BTreeMap<Entity, Values>>);

    impl ClientQuotas for MemQuotas {
        fn quotas(&self) -> BTreeMap<Entity, Values> {
            self.0.borrow().clone()
        }
        fn alter(&self, plan: &[Alteration]) -> Result<(), String> {
            let mut q = self.0.borrow_mut();
            for a in plan {
                let e: Entity = a.entity.iter().cloned().collect();
                let v = q.entry(e.clone()).or_default();
                for (k, val) in &a.ops {
                    match val {
                        Some(x) => v.insert(k.clone(), *x),
                        None => v.remove(k),
                    };
                }
                if v.is_empty() {
                    q.remove(&e);
                }
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

    #[test]
    fn quota_sync_makes_the_selected_entities_equal_to_the_source() {
        let store = MemQuotas::default();
        store.0.borrow_mut().extend([
            (user("alice"), rate("producer_byte_rate", 1.0)),
            (user("gone"), rate("consumer_byte_rate", 5.0)),
            (user("ops"), rate("request_percentage", 50.0)),
        ]);
        let mut s = BTreeMap::from([("bootstrap.servers".to_owned(), "src:9092".to_owned())]);
        s.insert("mirror.quota.entities.exclude".into(), "ops".into());
        let def = MirrorDefinition::new("dr", s).unwrap();
        let source = BTreeMap::from([
            (user("alice"), rate("producer_byte_rate", 2048.0)),
            (user("bob"), rate("consumer_byte_rate", 4096.0)),
        ]);
        assert_eq!(sync_quotas(&def, &source, &store).unwrap(), 3);
        let mut want = source.clone();
        want.insert(user("ops"), rate("request_percentage", 50.0));
        assert_eq!(store.quotas(), want);
        assert_eq!(sync_quotas(&def, &source, &store).unwrap(), 0);
    }
}
