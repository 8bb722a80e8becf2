//! The durable ACL store (CreateAcls / DescribeAcls / DeleteAcls), with Apache Kafka's
//! binding validation and filter semantics (ANY / MATCH).
//!
//! The whole set lives in `<data_dir>/acls.json`, rewritten atomically on every change (temp
//! file, fsync, rename, fsync directory): a change is reported only once it is durable, and a
//! crash leaves either the old or the new set. Enforcement is not done here (it arrives with
//! authentication); this is the store the mirror's ACL sync and admin tools read and write.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

pub use crate::mirror::AclBinding;

/// Kafka's enum codes (`ResourceType`, `PatternType`, `AclOperation`, `AclPermissionType`).
pub mod codes {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const RESOURCE_CLUSTER: i8 = 4;
    /// Highest known resource type (USER).
    pub const RESOURCE_MAX: i8 = 7;
    pub const PATTERN_MATCH: i8 = 2;
    pub const PATTERN_LITERAL: i8 = 3;
    pub const PATTERN_PREFIXED: i8 = 4;
    /// Highest known operation (TWO_PHASE_COMMIT).
    pub const OPERATION_MAX: i8 = 15;
    pub const PERMISSION_DENY: i8 = 2;
    pub const PERMISSION_ALLOW: i8 = 3;
    /// A literal resource name that matches every name.
    pub const WILDCARD: &str = "*";
    pub const CLUSTER_NAME: &str = "kafka-cluster";
}

const FILE: &str = "acls.json";

#[derive(Debug, thiserror::Error)]
pub enum AclError {
    /// The binding or filter is malformed (Kafka answers INVALID_REQUEST).
    #[error("invalid ACL: {0}")]
    Invalid(String),
    #[error("ACL store i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("ACL store {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

/// A DescribeAcls / DeleteAcls filter. `None` strings match anything.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission_type: i8,
}

impl AclFilter {
    /// Matches every binding.
    pub fn any() -> Self {
        AclFilter {
            resource_type: codes::ANY,
            resource_name: None,
            pattern_type: codes::ANY,
            principal: None,
            host: None,
            operation: codes::ANY,
            permission_type: codes::ANY,
        }
    }

    /// Kafka refuses filters carrying UNKNOWN (or out-of-range) codes.
    pub fn validate(&self) -> Result<(), AclError> {
        let bad = |what: &str, v: i8| Err(AclError::Invalid(format!("unknown {what} code {v}")));
        if !(codes::ANY..=codes::RESOURCE_MAX).contains(&self.resource_type) {
            return bad("resource type", self.resource_type);
        }
        if !(codes::ANY..=codes::PATTERN_PREFIXED).contains(&self.pattern_type) {
            return bad("pattern type", self.pattern_type);
        }
        if !(codes::ANY..=codes::OPERATION_MAX).contains(&self.operation) {
            return bad("operation", self.operation);
        }
        if !(codes::ANY..=codes::PERMISSION_ALLOW).contains(&self.permission_type) {
            return bad("permission type", self.permission_type);
        }
        Ok(())
    }

    /// Kafka's `AclBindingFilter.matches`: resource pattern filter (with MATCH expanding to
    /// the literal name, the literal wildcard and every prefix of the name) and entry filter.
    pub fn matches(&self, b: &AclBinding) -> bool {
        self.matches_resource(b) && self.matches_entry(b)
    }

    fn matches_resource(&self, b: &AclBinding) -> bool {
        if self.resource_type != codes::ANY && self.resource_type != b.resource_type {
            return false;
        }
        if self.pattern_type != codes::ANY
            && self.pattern_type != codes::PATTERN_MATCH
            && self.pattern_type != b.pattern_type
        {
            return false;
        }
        let Some(name) = &self.resource_name else {
            return true;
        };
        if self.pattern_type == codes::ANY || self.pattern_type == b.pattern_type {
            return *name == b.resource_name;
        }
        // MATCH: which stored patterns apply to the literal resource `name`.
        match b.pattern_type {
            codes::PATTERN_LITERAL => {
                *name == b.resource_name || b.resource_name == codes::WILDCARD
            }
            codes::PATTERN_PREFIXED => name.starts_with(&b.resource_name),
            _ => false,
        }
    }

    fn matches_entry(&self, b: &AclBinding) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == codes::ANY || self.operation == b.operation)
            && (self.permission_type == codes::ANY || self.permission_type == b.permission_type)
    }
}

/// Kafka's checks on a binding to create: concrete codes, LITERAL or PREFIXED, a non-empty
/// name (`kafka-cluster` for the cluster resource), a `Type:name` principal.
pub fn validate_binding(b: &AclBinding) -> Result<(), AclError> {
    let inv = |m: String| Err(AclError::Invalid(m));
    if !(2..=codes::RESOURCE_MAX).contains(&b.resource_type) {
        return inv(format!(
            "resource type {} cannot be stored",
            b.resource_type
        ));
    }
    if b.pattern_type != codes::PATTERN_LITERAL && b.pattern_type != codes::PATTERN_PREFIXED {
        return inv(format!(
            "pattern type {} is neither LITERAL nor PREFIXED",
            b.pattern_type
        ));
    }
    if !(2..=codes::OPERATION_MAX).contains(&b.operation) {
        return inv(format!("operation {} cannot be stored", b.operation));
    }
    if b.permission_type != codes::PERMISSION_ALLOW && b.permission_type != codes::PERMISSION_DENY {
        return inv(format!(
            "permission type {} is neither ALLOW nor DENY",
            b.permission_type
        ));
    }
    if b.resource_name.is_empty() {
        return inv("resource name is empty".into());
    }
    if b.resource_type == codes::RESOURCE_CLUSTER && b.resource_name != codes::CLUSTER_NAME {
        return inv(format!(
            "the cluster resource is named {}, not {:?}",
            codes::CLUSTER_NAME,
            b.resource_name
        ));
    }
    match b.principal.split_once(':') {
        Some((t, n)) if !t.is_empty() && !n.is_empty() => {}
        _ => return inv(format!("principal {:?} is not Type:name", b.principal)),
    }
    if b.host.is_empty() {
        return inv("host is empty (use * for every host)".into());
    }
    Ok(())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    resource_type: i8,
    resource_name: String,
    pattern_type: i8,
    principal: String,
    host: String,
    operation: i8,
    permission_type: i8,
}

/// The set of ACL bindings of this broker, persisted in `<dir>/acls.json`.
#[derive(Debug)]
pub struct AclStore {
    /// `None` for the replicated cluster's in-memory copy (its Raft log is the durable one).
    path: Option<PathBuf>,
    acls: BTreeSet<AclBinding>,
}

impl AclStore {
    /// Opens (or starts empty) the store in `dir`.
    pub fn open(dir: &Path) -> Result<AclStore, AclError> {
        fs::create_dir_all(dir)?;
        let path = dir.join(FILE);
        let acls = match fs::read(&path) {
            Ok(bytes) => {
                let rows: Vec<Stored> =
                    serde_json::from_slice(&bytes).map_err(|e| AclError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                rows.into_iter()
                    .map(|s| AclBinding {
                        resource_type: s.resource_type,
                        resource_name: s.resource_name,
                        pattern_type: s.pattern_type,
                        principal: s.principal,
                        host: s.host,
                        operation: s.operation,
                        permission_type: s.permission_type,
                    })
                    .collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(e.into()),
        };
        Ok(AclStore {
            path: Some(path),
            acls,
        })
    }

    /// A store never written to disk (the Raft state machine's copy); it validates and
    /// matches exactly as the durable one.
    pub fn in_memory(acls: impl IntoIterator<Item = AclBinding>) -> AclStore {
        AclStore {
            path: None,
            acls: acls.into_iter().collect(),
        }
    }

    pub fn all(&self) -> Vec<AclBinding> {
        self.acls.iter().cloned().collect()
    }

    /// Bindings matching `filter`, in a stable order.
    pub fn describe(&self, filter: &AclFilter) -> Result<Vec<AclBinding>, AclError> {
        filter.validate()?;
        Ok(self
            .acls
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect())
    }

    /// Adds the valid bindings (an existing one is a success, as in Kafka) and persists once.
    /// One result per input, in order.
    pub fn create(&mut self, bindings: &[AclBinding]) -> Vec<Result<(), AclError>> {
        let mut out: Vec<Result<(), AclError>> = bindings.iter().map(validate_binding).collect();
        let before = self.acls.clone();
        for (b, r) in bindings.iter().zip(&out) {
            if r.is_ok() {
                self.acls.insert(b.clone());
            }
        }
        if self.acls != before {
            if let Err(e) = self.persist() {
                self.acls = before;
                let msg = e.to_string();
                for r in out.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(AclError::Io(std::io::Error::other(msg.clone())));
                }
            }
        }
        out
    }

    /// Removes every binding matching each filter; per filter, the bindings it removed (a
    /// binding matched by two filters is reported under the first). Persists once.
    pub fn delete(&mut self, filters: &[AclFilter]) -> Vec<Result<Vec<AclBinding>, AclError>> {
        let before = self.acls.clone();
        let mut out = Vec::with_capacity(filters.len());
        for f in filters {
            if let Err(e) = f.validate() {
                out.push(Err(e));
                continue;
            }
            let gone: Vec<AclBinding> =
                self.acls.iter().filter(|b| f.matches(b)).cloned().collect();
            for b in &gone {
                self.acls.remove(b);
            }
            out.push(Ok(gone));
        }
        if self.acls != before {
            if let Err(e) = self.persist() {
                self.acls = before;
                let msg = e.to_string();
                for r in out.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(AclError::Io(std::io::Error::other(msg.clone())));
                }
            }
        }
        out
    }

    fn persist(&self) -> Result<(), AclError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let rows: Vec<Stored> = self
            .acls
            .iter()
            .map(|b| Stored {
                resource_type: b.resource_type,
                resource_name: b.resource_name.clone(),
                pattern_type: b.pattern_type,
                principal: b.principal.clone(),
                host: b.host.clone(),
                operation: b.operation,
                permission_type: b.permission_type,
            })
            .collect();
        let bytes = serde_json::to_vec_pretty(&rows).map_err(std::io::Error::other)?;
        crate::replace_file::replace_durably(path, &bytes)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(rt: i8, name: &str, pt: i8, principal: &str, op: i8) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission_type: codes::PERMISSION_ALLOW,
        }
    }

    const TOPIC: i8 = 2;
    const GROUP: i8 = 3;
    const READ: i8 = 3;
    const WRITE: i8 = 4;

    #[test]
    fn created_acls_survive_reopen_and_deletes_return_what_matched() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = AclStore::open(dir.path()).unwrap();
        let a = b(TOPIC, "orders", codes::PATTERN_LITERAL, "User:alice", READ);
        let p = b(TOPIC, "ord", codes::PATTERN_PREFIXED, "User:bob", WRITE);
        let g = b(GROUP, "g1", codes::PATTERN_LITERAL, "User:alice", READ);
        let r = s.create(&[a.clone(), p.clone(), g.clone(), a.clone()]);
        assert!(r.iter().all(|r| r.is_ok()));
        drop(s);
        let mut s = AclStore::open(dir.path()).unwrap();
        assert_eq!(s.all().len(), 3);
        let alice = AclFilter {
            principal: Some("User:alice".into()),
            ..AclFilter::any()
        };
        let topics = AclFilter {
            resource_type: TOPIC,
            ..AclFilter::any()
        };
        let gone = s.delete(&[alice, topics]);
        let mut first = gone[0].as_ref().unwrap().clone();
        first.sort();
        let mut want = vec![a, g];
        want.sort();
        assert_eq!(first, want);
        assert_eq!(gone[1].as_ref().unwrap(), &vec![p]);
        drop(s);
        assert!(AclStore::open(dir.path()).unwrap().all().is_empty());
    }

    #[test]
    fn match_filter_finds_literal_wildcard_and_prefixed_patterns_for_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = AclStore::open(dir.path()).unwrap();
        let lit = b(TOPIC, "orders", codes::PATTERN_LITERAL, "User:a", READ);
        let wild = b(TOPIC, "*", codes::PATTERN_LITERAL, "User:a", READ);
        let pre = b(TOPIC, "ord", codes::PATTERN_PREFIXED, "User:a", READ);
        let other = b(TOPIC, "payments", codes::PATTERN_LITERAL, "User:a", READ);
        s.create(&[lit.clone(), wild.clone(), pre.clone(), other]);
        let m = AclFilter {
            resource_type: TOPIC,
            resource_name: Some("orders".into()),
            pattern_type: codes::PATTERN_MATCH,
            ..AclFilter::any()
        };
        let got: BTreeSet<_> = s.describe(&m).unwrap().into_iter().collect();
        assert_eq!(got, [lit.clone(), wild, pre].into_iter().collect());
        // ANY with a name matches that exact name only, whatever the pattern type.
        let exact = AclFilter {
            resource_name: Some("orders".into()),
            ..AclFilter::any()
        };
        assert_eq!(s.describe(&exact).unwrap(), vec![lit]);
    }

    #[test]
    fn invalid_bindings_and_filters_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = AclStore::open(dir.path()).unwrap();
        let bad = [
            b(codes::ANY, "t", codes::PATTERN_LITERAL, "User:a", READ),
            b(TOPIC, "t", codes::PATTERN_MATCH, "User:a", READ),
            b(TOPIC, "t", codes::PATTERN_LITERAL, "alice", READ),
            b(TOPIC, "t", codes::PATTERN_LITERAL, "User:a", codes::ANY),
            b(TOPIC, "", codes::PATTERN_LITERAL, "User:a", READ),
            b(
                codes::RESOURCE_CLUSTER,
                "c",
                codes::PATTERN_LITERAL,
                "User:a",
                9,
            ),
        ];
        assert!(s
            .create(&bad)
            .iter()
            .all(|r| matches!(r, Err(AclError::Invalid(_)))));
        assert!(s.all().is_empty());
        let f = AclFilter {
            operation: codes::UNKNOWN,
            ..AclFilter::any()
        };
        assert!(s.describe(&f).is_err());
    }

    #[test]
    fn given_disk_full_when_persisting_should_fail_cleanly_and_leave_no_partial_temp_file() {
        // Needs root (CI runs as root): fails, never skips, where mounting is not allowed.
        let fs_dir = crate::append_file::Tmpfs::mount("64k")
            .unwrap_or_else(|e| panic!("mount a 64k tmpfs (run as root): {e}"));
        let dir = fs_dir.path().join("acls");
        let mut st = AclStore::open(&dir).unwrap();
        let filler = fs_dir.fill();
        let long = "t".repeat(200);
        let mut failed = 0;
        for i in 0..50 {
            let r = st.create(&[b(
                TOPIC,
                &format!("{long}-{i}"),
                codes::PATTERN_LITERAL,
                "User:alice",
                READ,
            )]);
            if r[0].is_err() {
                failed += 1;
            }
        }
        assert!(failed > 0, "the tmpfs never filled up");
        assert!(
            !dir.join("acls.json.tmp").exists(),
            "partial temp file left"
        );
        assert_eq!(AclStore::open(&dir).unwrap().all(), st.all());
        fs::remove_file(filler).unwrap();
        st.create(&[b(TOPIC, "after", codes::PATTERN_LITERAL, "User:bob", READ)])[0]
            .as_ref()
            .unwrap();
        assert_eq!(AclStore::open(&dir).unwrap().all(), st.all());
    }
}
