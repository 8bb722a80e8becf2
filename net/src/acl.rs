//! CreateAcls / DescribeAcls / DeleteAcls over the broker's durable [`AclStore`].
//!
//! One store per data directory, shared by every core and the mirror control thread (the
//! ACL sync), behind a mutex: ACL changes are rare admin operations, so serializing them
//! (including their fsync) is simpler than routing them through a control thread.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

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
use kmirror_control::acl::{AclBinding, AclError, AclFilter, AclStore};

use crate::errors;

pub type SharedAcls = Arc<Mutex<AclStore>>;

/// The ACL store of the broker whose data directory is `dir` (opened on first use).
pub fn store_for(dir: &Path) -> Result<SharedAcls, AclError> {
    static STORES: OnceLock<Mutex<HashMap<PathBuf, SharedAcls>>> = OnceLock::new();
    let mut map = STORES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(s) = map.get(dir) {
        return Ok(s.clone());
    }
    let s = Arc::new(Mutex::new(AclStore::open(dir)?));
    map.insert(dir.to_path_buf(), s.clone());
    Ok(s)
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn err_parts(e: &AclError) -> (i16, Option<StrBytes>) {
    (errors::acl_error_code(e), Some(s(&e.to_string())))
}

pub fn create_acls(dir: &Path, req: CreateAclsRequest) -> CreateAclsResponse {
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
    let results: Vec<Result<(), AclError>> = match store_for(dir) {
        Ok(st) => st
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .create(&bindings),
        Err(e) => {
            let m = e.to_string();
            bindings
                .iter()
                .map(|_| Err(AclError::Io(std::io::Error::other(m.clone()))))
                .collect()
        }
    };
    let results = results
        .iter()
        .map(|r| match r {
            Ok(()) => AclCreationResult::default(),
            Err(e) => {
                let (c, m) = err_parts(e);
                AclCreationResult::default()
                    .with_error_code(c)
                    .with_error_message(m)
            }
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

pub fn describe_acls(dir: &Path, req: DescribeAclsRequest) -> DescribeAclsResponse {
    let f = filter(
        req.resource_type_filter,
        &req.resource_name_filter,
        req.pattern_type_filter,
        &req.principal_filter,
        &req.host_filter,
        req.operation,
        req.permission_type,
    );
    let found =
        store_for(dir).and_then(|st| st.lock().unwrap_or_else(|p| p.into_inner()).describe(&f));
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

pub fn delete_acls(dir: &Path, req: DeleteAclsRequest) -> DeleteAclsResponse {
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
    let results = match store_for(dir) {
        Ok(st) => st
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .delete(&filters),
        Err(e) => {
            let m = e.to_string();
            filters
                .iter()
                .map(|_| Err(AclError::Io(std::io::Error::other(m.clone()))))
                .collect()
        }
    };
    let filter_results = results
        .into_iter()
        .map(|r| match r {
            Err(e) => {
                let (c, m) = err_parts(&e);
                DeleteAclsFilterResult::default()
                    .with_error_code(c)
                    .with_error_message(m)
            }
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
