//! ACL sync: the source's ACLs (those `mirror.acl.principals.exclude` leaves to the sync)
//! written to the destination, planned by `kmirror_control::mirror::plan_acl_sync`. In the
//! default `owned` mode the round creates bindings the destination lacks and deletes only
//! those this mirror created, so local ACLs and other mirrors' survive; `exact` mode makes
//! the destination's set equal to the source's. The quorum enforces the ownership when it
//! applies the change (see `kmirror_control::mirror::owners`). A source without an
//! authorizer sends no list, and nothing here runs.
//!
//! The broker is reached through [`AclStore`] only, so the round is tested without one.

use std::collections::BTreeMap;

use kmirror_control::acl::{AclBinding, AclFilter};
use kmirror_control::mirror::owners::exact_filter;
use kmirror_control::mirror::{MirrorDefinition, MirrorWriter, SyncClash, SyncOwners};
use kmirror_control::quorum::AclCommand;

/// The destination's ACLs as the sync sees them.
pub(super) trait AclStore {
    /// The ACLs in force (the published set the authorizer reads).
    fn bindings(&self) -> Vec<AclBinding>;
    /// The mirror that wrote each synced binding.
    fn owners(&self) -> BTreeMap<AclBinding, String>;
    /// Creates `bindings` (already validated) through the cluster's one mutation path.
    fn create(&self, bindings: Vec<AclBinding>, writer: MirrorWriter) -> Result<(), String>;
    /// Deletes what each filter matches (of what `writer` may delete), through the same path.
    fn delete(&self, filters: Vec<AclFilter>, writer: MirrorWriter) -> Result<(), String>;
}

/// What one round changed, and what it left to another owner.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct AclSyncDone {
    pub created: usize,
    pub deleted: usize,
    pub clashes: Vec<SyncClash>,
}

/// One ACL sync round of mirror `def` against the source's `source` bindings.
pub(super) fn sync_acls(
    def: &MirrorDefinition,
    source: &[AclBinding],
    store: &impl AclStore,
) -> Result<AclSyncDone, String> {
    let owners = SyncOwners {
        acls: store.owners(),
        ..SyncOwners::default()
    };
    let plan = kmirror_control::mirror::plan_acl_sync(def, source, &store.bindings(), &owners)
        .map_err(|e| e.to_string())?;
    // A source binding this broker would refuse stops the round before anything is written.
    for b in &plan.create {
        kmirror_control::acl::validate_binding(b).map_err(|e| e.to_string())?;
    }
    let writer = kmirror_control::mirror::acl_sync_writer(def);
    if !plan.create.is_empty() {
        store.create(plan.create.clone(), writer.clone())?;
    }
    if !plan.delete.is_empty() {
        // One exact filter per binding to remove.
        store.delete(plan.delete.iter().map(exact_filter).collect(), writer)?;
    }
    let done = AclSyncDone {
        created: plan.create.len(),
        deleted: plan.delete.len(),
        clashes: plan.clashes,
    };
    if done.created + done.deleted > 0 {
        tracing::info!(mirror = %def.name, created = done.created, deleted = done.deleted, "ACLs synced from the source");
    }
    super::report_clashes(&def.name, "ACL bindings", &done.clashes);
    Ok(done)
}

impl AclStore for super::BrokerHost {
    fn bindings(&self) -> Vec<AclBinding> {
        self.broker.acls().as_ref().clone()
    }

    fn owners(&self) -> BTreeMap<AclBinding, String> {
        self.broker.acl_owners().as_ref().clone()
    }

    fn create(&self, bindings: Vec<AclBinding>, writer: MirrorWriter) -> Result<(), String> {
        self.propose_acls(AclCommand::Create {
            bindings,
            writer: Some(writer),
        })
    }

    fn delete(&self, filters: Vec<AclFilter>, writer: MirrorWriter) -> Result<(), String> {
        self.propose_acls(AclCommand::Delete {
            filters,
            writer: Some(writer),
        })
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

    /// ACLs and their owners in memory, applied as the quorum applies the commands.
    struct MemAcls(RefCell<(kmirror_control::acl::AclStore, SyncOwners)>);

    impl MemAcls {
        /// A store holding `local` (written by a local admin).
        fn with(local: &[AclBinding]) -> MemAcls {
            MemAcls(RefCell::new((
                kmirror_control::acl::AclStore::in_memory(local.iter().cloned()),
                SyncOwners::default(),
            )))
        }
    }

    impl AclStore for MemAcls {
        fn bindings(&self) -> Vec<AclBinding> {
            self.0.borrow().0.all()
        }
        fn owners(&self) -> BTreeMap<AclBinding, String> {
            self.0.borrow().1.acls.clone()
        }
        fn create(&self, bindings: Vec<AclBinding>, writer: MirrorWriter) -> Result<(), String> {
            let (acls, owners) = &mut *self.0.borrow_mut();
            kmirror_control::mirror::owners::create_acls(acls, owners, &bindings, Some(&writer));
            Ok(())
        }
        fn delete(&self, filters: Vec<AclFilter>, writer: MirrorWriter) -> Result<(), String> {
            let (acls, owners) = &mut *self.0.borrow_mut();
            kmirror_control::mirror::owners::delete_acls(acls, owners, &filters, Some(&writer));
            Ok(())
        }
    }

    fn def_named(name: &str, extra: &[(&str, &str)]) -> MirrorDefinition {
        let mut s = BTreeMap::from([("bootstrap.servers".to_owned(), "src:9092".to_owned())]);
        for (k, v) in extra {
            s.insert(k.to_string(), v.to_string());
        }
        MirrorDefinition::new(name, s).unwrap()
    }

    fn def(extra: &[(&str, &str)]) -> MirrorDefinition {
        def_named("dr", extra)
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

    fn sorted(mut v: Vec<AclBinding>) -> Vec<AclBinding> {
        v.sort_by(|a, b| a.principal.cmp(&b.principal));
        v
    }

    #[test]
    fn exact_acl_sync_creates_the_missing_and_deletes_the_extra_but_not_excluded_principals() {
        let store = MemAcls::with(&[
            read("User:gone", "orders"),
            read("User:admin", "ops"),
            read("User:alice", "orders"),
        ]);
        let def = def(&[
            ("mirror.acl.principals.exclude", "User:admin"),
            ("mirror.acl.sync.mode", "exact"),
        ]);
        let source = [read("User:alice", "orders"), read("User:bob", "payments")];
        let done = sync_acls(&def, &source, &store).unwrap();
        assert_eq!((done.created, done.deleted), (1, 1));
        assert_eq!(
            sorted(store.bindings()),
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
    fn two_owned_mirrors_and_a_local_admin_keep_their_own_acls() {
        let store = MemAcls::with(&[read("User:local", "ops")]);
        let (a, b) = (def_named("a", &[]), def_named("b", &[]));
        let src_a = [read("User:alice", "orders"), read("User:shared", "t")];
        let src_b = [read("User:bob", "payments"), read("User:shared", "t")];
        // Many rounds, interleaved: each creates its own once, then nothing changes.
        for round in 0..5 {
            let da = sync_acls(&a, &src_a, &store).unwrap();
            let db = sync_acls(&b, &src_b, &store).unwrap();
            if round > 0 {
                assert_eq!(
                    (da.created, da.deleted, db.created, db.deleted),
                    (0, 0, 0, 0)
                );
            }
            // The shared binding is a's (first writer); b reports the clash every round.
            assert!(da.clashes.is_empty(), "{:?}", da.clashes);
            assert_eq!(db.clashes.len(), 1);
            assert_eq!(db.clashes[0].owner.as_deref(), Some("a"));
        }
        assert_eq!(
            sorted(store.bindings()),
            vec![
                read("User:alice", "orders"),
                read("User:bob", "payments"),
                read("User:local", "ops"),
                read("User:shared", "t"),
            ]
        );
        // a's source drops everything: only a's bindings go; the local one and b's stay.
        let done = sync_acls(&a, &[], &store).unwrap();
        assert_eq!((done.created, done.deleted), (0, 2));
        assert_eq!(
            sorted(store.bindings()),
            vec![read("User:bob", "payments"), read("User:local", "ops")]
        );
        // b now writes the shared binding it still has on its source, and owns it.
        let done = sync_acls(&b, &src_b, &store).unwrap();
        assert_eq!((done.created, done.clashes.len()), (1, 0));
    }

    #[test]
    fn acl_sync_writes_nothing_when_a_source_binding_is_invalid() {
        let store = MemAcls::with(&[read("User:old", "orders")]);
        let mut bad = read("User:bob", "payments");
        bad.operation = 0; // UNKNOWN: Kafka refuses such a binding
        let source = [read("User:alice", "orders"), bad];
        assert!(sync_acls(&def(&[]), &source, &store).is_err());
        assert_eq!(store.bindings(), vec![read("User:old", "orders")]);
    }
}
