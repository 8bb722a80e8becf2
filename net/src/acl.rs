//! CreateAcls / DescribeAcls / DeleteAcls over the ACLs the metadata quorum holds.
//!
//! One [`AclRegistry`] per broker, shared by every core and the mirror control thread (the
//! ACL sync). Changes are proposed to the quorum ([`Cluster::propose`]); the Raft driver
//! publishes every applied set into the registry as an immutable [`AclSnapshot`] that
//! DescribeAcls and the authorizer read without a lock.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_control::acl::{validate_binding, AclBinding, AclError, AclFilter};
use kmirror_control::authz::AclSnapshot;
use kmirror_control::quorum::{AclCommand, ClusterCommand, Outcome};

use crate::cluster::Cluster;
use crate::errors;

/// The applied ACL set, as the quorum last published it.
#[derive(Debug)]
pub struct AclRegistry {
    snapshot: ArcSwap<AclSnapshot>,
    all: ArcSwap<Vec<AclBinding>>,
    /// The mirror that wrote each synced binding (the rest are local).
    owners: ArcSwap<BTreeMap<AclBinding, String>>,
}

impl AclRegistry {
    /// No ACLs until the driver's first publication.
    pub fn empty() -> AclRegistry {
        AclRegistry {
            snapshot: ArcSwap::from_pointee(AclSnapshot::new(std::iter::empty())),
            all: ArcSwap::from_pointee(Vec::new()),
            owners: ArcSwap::from_pointee(BTreeMap::new()),
        }
    }

    /// The ACLs as of the last completed change (lock-free).
    pub fn snapshot(&self) -> Arc<AclSnapshot> {
        self.snapshot.load_full()
    }

    /// Every binding as of the last completed change (lock-free).
    pub fn all(&self) -> Arc<Vec<AclBinding>> {
        self.all.load_full()
    }

    /// Publishes the applied ACL set (called by the Raft driver).
    pub fn publish(&self, all: Vec<AclBinding>) {
        self.snapshot
            .store(Arc::new(AclSnapshot::new(all.iter().cloned())));
        self.all.store(Arc::new(all));
    }

    /// The owning mirror of each mirror-written binding (lock-free).
    pub fn owners(&self) -> Arc<BTreeMap<AclBinding, String>> {
        self.owners.load_full()
    }

    /// Publishes the applied owners (called by the Raft driver).
    pub fn publish_owners(&self, owners: BTreeMap<AclBinding, String>) {
        self.owners.store(Arc::new(owners));
    }
}

pub type SharedAcls = Arc<AclRegistry>;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn err_parts(e: &AclError) -> (i16, Option<StrBytes>) {
    (errors::acl_error_code(e), Some(s(&e.to_string())))
}

/// CreateAcls through [`Cluster::propose`] (never on the engine core: the one-node store
/// fsyncs on the control-plane thread).
pub async fn create_acls(cluster: &Cluster, req: CreateAclsRequest) -> CreateAclsResponse {
    let bindings: Vec<AclBinding> = req
        .creations
        .iter()
        .map(|c| AclBinding {
            resource_type: c.resource_type,
            resource_name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission_type: c.permission_type,
        })
        .collect();
    // The proposer validates; the valid bindings go in one command (apply skips none).
    let mut results: Vec<Result<(), (i16, String)>> = bindings
        .iter()
        .map(|b| validate_binding(b).map_err(|e| (errors::acl_error_code(&e), e.to_string())))
        .collect();
    let valid: Vec<AclBinding> = bindings
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_ok())
        .map(|(b, _)| b.clone())
        .collect();
    if !valid.is_empty() {
        let cmd = ClusterCommand::Acl(AclCommand::Create {
            bindings: valid,
            writer: None,
        });
        if let Err(e) = cluster.propose(cmd).await {
            let failed = (errors::propose_failure_code(&e), e.to_string());
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(failed.clone());
            }
        }
    }
    let results = results
        .into_iter()
        .map(|r| match r {
            Ok(()) => AclCreationResult::default(),
            Err((c, m)) => AclCreationResult::default()
                .with_error_code(c)
                .with_error_message(Some(s(&m))),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

fn filter(
    resource_type: i8,
    name: &Option<StrBytes>,
    pattern_type: i8,
    principal: &Option<StrBytes>,
    host: &Option<StrBytes>,
    operation: i8,
    permission_type: i8,
) -> AclFilter {
    AclFilter {
        resource_type,
        resource_name: name.as_ref().map(|v| v.to_string()),
        pattern_type,
        principal: principal.as_ref().map(|v| v.to_string()),
        host: host.as_ref().map(|v| v.to_string()),
        operation,
        permission_type,
    }
}

pub fn describe_acls(acls: &AclRegistry, req: DescribeAclsRequest) -> DescribeAclsResponse {
    let f = filter(
        req.resource_type_filter,
        &req.resource_name_filter,
        req.pattern_type_filter,
        &req.principal_filter,
        &req.host_filter,
        req.operation,
        req.permission_type,
    );
    let found = f.validate().map(|()| {
        acls.all()
            .iter()
            .filter(|b| f.matches(b))
            .cloned()
            .collect::<Vec<_>>()
    });
    match found {
        Err(e) => {
            let (c, m) = err_parts(&e);
            DescribeAclsResponse::default()
                .with_error_code(c)
                .with_error_message(m)
        }
        Ok(found) => {
            // Grouped by resource pattern, as Kafka answers.
            let mut by: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
            for b in found {
                by.entry((b.resource_type, b.resource_name.clone(), b.pattern_type))
                    .or_default()
                    .push(
                        AclDescription::default()
                            .with_principal(s(&b.principal))
                            .with_host(s(&b.host))
                            .with_operation(b.operation)
                            .with_permission_type(b.permission_type),
                    );
            }
            let resources = by
                .into_iter()
                .map(|((rt, name, pt), acls)| {
                    DescribeAclsResource::default()
                        .with_resource_type(rt)
                        .with_resource_name(s(&name))
                        .with_pattern_type(pt)
                        .with_acls(acls)
                })
                .collect();
            DescribeAclsResponse::default().with_resources(resources)
        }
    }
}

/// DeleteAcls through [`Cluster::propose`].
pub async fn delete_acls(cluster: &Cluster, req: DeleteAclsRequest) -> DeleteAclsResponse {
    let filters: Vec<AclFilter> = req
        .filters
        .iter()
        .map(|f| {
            filter(
                f.resource_type_filter,
                &f.resource_name_filter,
                f.pattern_type_filter,
                &f.principal_filter,
                &f.host_filter,
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let mut results: Vec<Result<Vec<AclBinding>, (i16, String)>> = filters
        .iter()
        .map(|f| {
            f.validate()
                .map(|()| Vec::new())
                .map_err(|e| (errors::acl_error_code(&e), e.to_string()))
        })
        .collect();
    let valid: Vec<AclFilter> = filters
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_ok())
        .map(|(f, _)| f.clone())
        .collect();
    if !valid.is_empty() {
        let cmd = ClusterCommand::Acl(AclCommand::Delete {
            filters: valid,
            writer: None,
        });
        match cluster.propose(cmd).await {
            Ok(Outcome::Acls(gone)) => {
                let mut gone = gone.into_iter();
                for r in results.iter_mut().filter(|r| r.is_ok()) {
                    *r = Ok(gone.next().unwrap_or_default());
                }
            }
            Ok(other) => {
                let failed = (
                    errors::code(kafka_protocol::ResponseError::UnknownServerError),
                    format!("unexpected outcome {other:?}"),
                );
                for r in results.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(failed.clone());
                }
            }
            Err(e) => {
                let failed = (errors::propose_failure_code(&e), e.to_string());
                for r in results.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(failed.clone());
                }
            }
        }
    }
    let filter_results = results
        .into_iter()
        .map(|r| match r {
            Err((c, m)) => DeleteAclsFilterResult::default()
                .with_error_code(c)
                .with_error_message(Some(s(&m))),
            Ok(gone) => DeleteAclsFilterResult::default().with_matching_acls(
                gone.iter()
                    .map(|b| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(b.resource_type)
                            .with_resource_name(s(&b.resource_name))
                            .with_pattern_type(b.pattern_type)
                            .with_principal(s(&b.principal))
                            .with_host(s(&b.host))
                            .with_operation(b.operation)
                            .with_permission_type(b.permission_type)
                    })
                    .collect(),
            ),
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(filter_results)
}

/// CreateAcls refused as a whole (the principal may not alter the cluster).
pub fn create_acls_refused(req: &CreateAclsRequest, code: i16) -> CreateAclsResponse {
    CreateAclsResponse::default().with_results(
        req.creations
            .iter()
            .map(|_| AclCreationResult::default().with_error_code(code))
            .collect(),
    )
}

/// DescribeAcls refused (the principal may not describe the cluster).
pub fn describe_acls_refused(code: i16) -> DescribeAclsResponse {
    DescribeAclsResponse::default().with_error_code(code)
}

/// DeleteAcls refused as a whole (the principal may not alter the cluster).
pub fn delete_acls_refused(req: &DeleteAclsRequest, code: i16) -> DeleteAclsResponse {
    DeleteAclsResponse::default().with_filter_results(
        req.filters
            .iter()
            .map(|_| DeleteAclsFilterResult::default().with_error_code(code))
            .collect(),
    )
}
