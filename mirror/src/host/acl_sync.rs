//! ACL sync: the destination's ACLs (those `mirror.acl.principals.exclude` leaves to the
//! sync) made equal to the source's, planned by `kmirror_control::mirror::plan_acl_sync`.
//! A source without an authorizer sends no list, and nothing here runs.
//!
//! The broker is reached through [`AclStore`] only, so the round is tested without one.

use kmirror_control::acl::{AclBinding, AclFilter};
use kmirror_control::mirror::MirrorDefinition;
use kmirror_control::quorum::AclCommand;

/// The destination's ACLs as the sync sees them.
pub(super) trait AclStore {
    /// The ACLs in force (the published set the authorizer reads).
    fn bindings(&self) -> Vec<AclBinding>;
    /// Creates `bindings` (already validated) through the cluster's one mutation path.
    fn create(&self, bindings: Vec<AclBinding>) -> Result<(), String>;
    /// Deletes what each filter matches, through the same path.
    fn delete(&self, filters: Vec<AclFilter>) -> Result<(), String>;
}

/// What one round changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct AclSyncDone {
    pub created: usize,
    pub deleted: usize,
}

/// One ACL sync round of mirror `def` against the source's `source` bindings.
pub(super) fn sync_acls(
    def: &MirrorDefinition,
    source: &[AclBinding],
    store: &impl AclStore,
) -> Result<AclSyncDone, String> {
    let plan = kmirror_control::mirror::plan_acl_sync(def, source, &store.bindings())
        .map_err(|e| e.to_string())?;
    // A source binding this broker would refuse stops the round before anything is written.
    for b in &plan.create {
        kmirror_control::acl::validate_binding(b).map_err(|e| e.to_string())?;
    }
    if !plan.create.is_empty() {
        store.create(plan.create.clone())?;
    }
    if !plan.delete.is_empty() {
        // One exact filter per binding to remove.
        store.delete(plan.delete.iter().map(exact_filter).collect())?;
    }
    let done = AclSyncDone {
        created: plan.create.len(),
        deleted: plan.delete.len(),
    };
    if done != AclSyncDone::default() {
        tracing::info!(mirror = %def.name, created = done.created, deleted = done.deleted, "ACLs synced from the source");
    }
    Ok(done)
}

/// The filter that matches `b` and nothing else.
fn exact_filter(b: &AclBinding) -> AclFilter {
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

impl AclStore for super::BrokerHost {
    fn bindings(&self) -> Vec<AclBinding> {
        self.broker.acls().as_ref().clone()
    }

    fn create(&self, bindings: Vec<AclBinding>) -> Result<(), String> {
        self.propose_acls(AclCommand::Create { bindings })
    }

    fn delete(&self, filters: Vec<AclFilter>) -> Result<(), String> {
        self.propose_acls(AclCommand::Delete { filters })
    }
}

impl super::BrokerHost {
    /// An ACL change through the quorum, as CreateAcls / DeleteAcls make it.
    fn propose_acls(&self, cmd: AclCommand) -> Result<(), String> {
        self.broker
            .propose(kmirror_control::quorum::ClusterCommand::Acl(cmd))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    /// ACLs in memory, applied as the cluster applies the commands.
    #[derive(Default)]
    struct MemAcls(RefCell<Vec<AclBinding>>);

    impl AclStore for MemAcls {
        fn bindings(&self) -> Vec<AclBinding> {
            self.0.borrow().clone()
        }
        fn create(&self, bindings: Vec<AclBinding>) -> Result<(), String> {
            self.0.borrow_mut().extend(bindings);
            Ok(())
        }
        fn delete(&self, filters: Vec<AclFilter>) -> Result<(), String> {
            self.0
                .borrow_mut()
                .retain(|b| !filters.iter().any(|f| f.matches(b)));
            Ok(())
        }
    }

    fn def(extra: &[(&str, &str)]) -> MirrorDefinition {
        let mut s = BTreeMap::from([("bootstrap.servers".to_owned(), "src:9092".to_owned())]);
        for (k, v) in extra {
            s.insert(k.to_string(), v.to_string());
        }
        MirrorDefinition::new("dr", s).unwrap()
    }

    /// ALLOW `principal` READ on topic `topic` (literal) from any host.
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

    #[test]
    fn acl_sync_creates_the_missing_and_deletes_the_extra_but_not_excluded_principals() {
        let store = MemAcls::default();
        store.0.borrow_mut().extend([
            read("User:gone", "orders"),
            read("User:admin", "ops"),
            read("User:alice", "orders"),
        ]);
        let def = def(&[("mirror.acl.principals.exclude", "User:admin")]);
        let source = [read("User:alice", "orders"), read("User:bob", "payments")];
        let done = sync_acls(&def, &source, &store).unwrap();
        assert_eq!(
            done,
            AclSyncDone {
                created: 1,
                deleted: 1
            }
        );
        let mut now = store.bindings();
        now.sort_by(|a, b| a.principal.cmp(&b.principal));
        assert_eq!(
            now,
            vec![
                read("User:admin", "ops"),
                read("User:alice", "orders"),
                read("User:bob", "payments"),
            ]
        );
        // A second round finds nothing to do.
        assert_eq!(
            sync_acls(&def, &source, &store).unwrap(),
            AclSyncDone::default()
        );
    }

    #[test]
    fn acl_sync_writes_nothing_when_a_source_binding_is_invalid() {
        let store = MemAcls::default();
        store.0.borrow_mut().push(read("User:old", "orders"));
        let mut bad = read("User:bob", "payments");
        bad.operation = 0; // UNKNOWN: Kafka refuses such a binding
        let source = [read("User:alice", "orders"), bad];
        assert!(sync_acls(&def(&[]), &source, &store).is_err());
        assert_eq!(store.bindings(), vec![read("User:old", "orders")]);
    }
}
