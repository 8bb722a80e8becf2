//! Authorization decisions over a snapshot of the stored ACLs, with Apache Kafka's
//! `StandardAuthorizer` semantics. Pure: no I/O, no locks; the broker publishes an immutable
//! [`AclSnapshot`] after every ACL change and evaluates requests against it.
//!
//! The rules (Kafka's):
//! - a super user is allowed everything;
//! - an ACL applies to a resource when its pattern matches the name: LITERAL equal, LITERAL
//!   `*` (any name), or PREFIXED with a prefix of the name; to a principal when it names the
//!   principal or `User:*`; to a host when it names the peer's IP or `*`;
//! - operations: an ACL for ALL covers every operation; an ALLOW for READ, WRITE, DELETE or
//!   ALTER also allows DESCRIBE, and an ALLOW for ALTER_CONFIGS also allows DESCRIBE_CONFIGS
//!   (implications hold for ALLOW only: a DENY of READ does not deny DESCRIBE);
//! - any applicable DENY wins over every ALLOW;
//! - when no ACL at all (any principal, any operation) exists for the resource, the answer is
//!   `allow_everyone_if_no_acl_found` (default false); otherwise it is DENY unless an ALLOW
//!   applies.

use std::collections::HashMap;

use crate::acl::codes;
use crate::mirror::AclBinding;

/// Kafka's `ResourceType` codes.
pub mod resource {
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

/// Kafka's `AclOperation` codes (also the bit positions of "authorized operations" sets).
pub mod op {
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
    pub const TWO_PHASE_COMMIT: i8 = 15;
}

/// The operations Kafka reports in "authorized operations" bit sets for a resource type
/// (`AclEntry.supportedOperations`).
pub fn supported_operations(resource_type: i8) -> &'static [i8] {
    use op::*;
    match resource_type {
        resource::TOPIC => &[
            READ,
            WRITE,
            CREATE,
            DESCRIBE,
            DELETE,
            ALTER,
            DESCRIBE_CONFIGS,
            ALTER_CONFIGS,
        ],
        resource::GROUP => &[READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS],
        resource::CLUSTER => &[
            CREATE,
            CLUSTER_ACTION,
            DESCRIBE_CONFIGS,
            ALTER_CONFIGS,
            IDEMPOTENT_WRITE,
            ALTER,
            DESCRIBE,
        ],
        resource::TRANSACTIONAL_ID => &[DESCRIBE, WRITE, TWO_PHASE_COMMIT],
        resource::DELEGATION_TOKEN => &[DESCRIBE],
        resource::USER => &[CREATE_TOKENS, DESCRIBE_TOKENS],
        _ => &[],
    }
}

/// Broker settings of the authorizer (`authorizer`, `super_users`,
/// `allow_everyone_if_no_acl_found`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthzConfig {
    /// Off: every request is allowed (no authorizer configured, as in Kafka).
    pub enabled: bool,
    /// `Type:name` principals that bypass ACLs.
    pub super_users: Vec<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthzConfig {
    /// Parses Kafka's `super.users` form: principals separated by semicolons.
    pub fn parse_super_users(s: &str) -> Result<Vec<String>, BadSuperUser> {
        s.split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once(':') {
                Some((t, n)) if !t.is_empty() && !n.is_empty() => Ok(p.to_string()),
                _ => Err(BadSuperUser(p.to_string())),
            })
            .collect()
    }
}

/// A `super.users` entry that is not a `Type:name` principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("super user \"{0}\" is not of the form Type:name")]
pub struct BadSuperUser(pub String);

/// An immutable view of every ACL, indexed by resource type.
#[derive(Debug, Default, Clone)]
pub struct AclSnapshot {
    by_type: HashMap<i8, Vec<AclBinding>>,
}

impl AclSnapshot {
    pub fn new(acls: impl IntoIterator<Item = AclBinding>) -> AclSnapshot {
        let mut by_type: HashMap<i8, Vec<AclBinding>> = HashMap::new();
        for b in acls {
            by_type.entry(b.resource_type).or_default().push(b);
        }
        AclSnapshot { by_type }
    }

    fn of_type(&self, resource_type: i8) -> &[AclBinding] {
        self.by_type
            .get(&resource_type)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// Who asks: `Type:name` principal and the peer's IP address as text.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub principal: &'a str,
    pub host: &'a str,
}

fn pattern_matches(b: &AclBinding, name: &str) -> bool {
    match b.pattern_type {
        codes::PATTERN_LITERAL => b.resource_name == name || b.resource_name == codes::WILDCARD,
        codes::PATTERN_PREFIXED => name.starts_with(b.resource_name.as_str()),
        _ => false,
    }
}

fn principal_matches(b: &AclBinding, who: &Requester<'_>) -> bool {
    b.principal == who.principal || b.principal == "User:*"
}

fn host_matches(b: &AclBinding, who: &Requester<'_>) -> bool {
    b.host == codes::WILDCARD || b.host == who.host
}

/// Whether `b` (principal and host already matched) grants or denies `operation`.
fn operation_matches(b: &AclBinding, operation: i8) -> bool {
    if b.operation == op::ALL || b.operation == operation {
        return true;
    }
    if b.permission_type != codes::PERMISSION_ALLOW {
        return false;
    }
    match operation {
        op::DESCRIBE => matches!(b.operation, op::READ | op::WRITE | op::DELETE | op::ALTER),
        op::DESCRIBE_CONFIGS => b.operation == op::ALTER_CONFIGS,
        _ => false,
    }
}

/// The authorizer: configuration plus the decision functions.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    pub config: AuthzConfig,
}

impl Authorizer {
    pub fn new(config: AuthzConfig) -> Authorizer {
        Authorizer { config }
    }

    pub fn is_super_user(&self, principal: &str) -> bool {
        self.config.super_users.iter().any(|s| s == principal)
    }

    /// Whether `who` may perform `operation` on the resource `(resource_type, name)`.
    pub fn authorize(
        &self,
        acls: &AclSnapshot,
        who: &Requester<'_>,
        resource_type: i8,
        name: &str,
        operation: i8,
    ) -> bool {
        if !self.config.enabled || self.is_super_user(who.principal) {
            return true;
        }
        let mut resource_has_acls = false;
        let mut allowed = false;
        for b in acls
            .of_type(resource_type)
            .iter()
            .filter(|b| pattern_matches(b, name))
        {
            resource_has_acls = true;
            if !principal_matches(b, who)
                || !host_matches(b, who)
                || !operation_matches(b, operation)
            {
                continue;
            }
            if b.permission_type == codes::PERMISSION_DENY {
                return false;
            }
            allowed = true;
        }
        allowed || (!resource_has_acls && self.config.allow_everyone_if_no_acl_found)
    }

    /// Kafka's `authorizeByResourceType`: whether `who` may perform `operation` on at least one
    /// resource of the type (used for idempotent producers: WRITE on any topic). An ALLOW
    /// counts unless a DENY for the same operation covers it: a LITERAL `*` deny covers all,
    /// a literal deny covers the same literal name, a prefixed deny covers every pattern it
    /// is a prefix of.
    pub fn authorize_any(
        &self,
        acls: &AclSnapshot,
        who: &Requester<'_>,
        resource_type: i8,
        operation: i8,
    ) -> bool {
        if !self.config.enabled || self.is_super_user(who.principal) {
            return true;
        }
        let applies = |b: &&AclBinding| {
            principal_matches(b, who)
                && host_matches(b, who)
                && (b.operation == op::ALL || b.operation == operation)
        };
        let of_type = acls.of_type(resource_type);
        let denies: Vec<&AclBinding> = of_type
            .iter()
            .filter(applies)
            .filter(|b| b.permission_type == codes::PERMISSION_DENY)
            .collect();
        if denies
            .iter()
            .any(|d| d.pattern_type == codes::PATTERN_LITERAL && d.resource_name == codes::WILDCARD)
        {
            return false;
        }
        let denied = |a: &AclBinding| {
            denies.iter().any(|d| match d.pattern_type {
                codes::PATTERN_LITERAL => {
                    a.pattern_type == codes::PATTERN_LITERAL && a.resource_name == d.resource_name
                }
                codes::PATTERN_PREFIXED => a.resource_name.starts_with(d.resource_name.as_str()),
                _ => false,
            })
        };
        let allowed = of_type
            .iter()
            .filter(applies)
            .filter(|b| b.permission_type == codes::PERMISSION_ALLOW)
            .any(|a| !denied(a));
        allowed || (of_type.is_empty() && self.config.allow_everyone_if_no_acl_found)
    }

    /// The "authorized operations" bit set Kafka returns for a resource: bit `op` set for
    /// every supported operation `who` may perform.
    pub fn authorized_operations(
        &self,
        acls: &AclSnapshot,
        who: &Requester<'_>,
        resource_type: i8,
        name: &str,
    ) -> i32 {
        supported_operations(resource_type)
            .iter()
            .filter(|o| self.authorize(acls, who, resource_type, name, **o))
            .fold(0i32, |bits, o| bits | (1 << *o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(rt: i8, name: &str, pt: i8, principal: &str, operation: i8, perm: i8) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: "*".into(),
            operation,
            permission_type: perm,
        }
    }
    const LIT: i8 = codes::PATTERN_LITERAL;
    const PRE: i8 = codes::PATTERN_PREFIXED;
    const ALLOW: i8 = codes::PERMISSION_ALLOW;
    const DENY: i8 = codes::PERMISSION_DENY;
    const T: i8 = resource::TOPIC;

    fn on(super_users: &[&str], allow_if_none: bool) -> Authorizer {
        Authorizer::new(AuthzConfig {
            enabled: true,
            super_users: super_users.iter().map(|s| s.to_string()).collect(),
            allow_everyone_if_no_acl_found: allow_if_none,
        })
    }

    const ALICE: Requester<'static> = Requester {
        principal: "User:alice",
        host: "10.0.0.1",
    };
    const BOB: Requester<'static> = Requester {
        principal: "User:bob",
        host: "10.0.0.2",
    };

    #[test]
    fn allow_read_implies_describe_but_not_write_and_deny_read_does_not_deny_describe() {
        let a = on(&[], false);
        let s = AclSnapshot::new([acl(T, "orders", LIT, "User:alice", op::READ, ALLOW)]);
        assert!(a.authorize(&s, &ALICE, T, "orders", op::READ));
        assert!(a.authorize(&s, &ALICE, T, "orders", op::DESCRIBE));
        assert!(!a.authorize(&s, &ALICE, T, "orders", op::WRITE));
        for implying in [op::WRITE, op::DELETE, op::ALTER] {
            let s = AclSnapshot::new([acl(T, "orders", LIT, "User:alice", implying, ALLOW)]);
            assert!(a.authorize(&s, &ALICE, T, "orders", op::DESCRIBE));
        }
        let s = AclSnapshot::new([acl(T, "o", LIT, "User:alice", op::ALTER_CONFIGS, ALLOW)]);
        assert!(a.authorize(&s, &ALICE, T, "o", op::DESCRIBE_CONFIGS));
        assert!(!a.authorize(&s, &ALICE, T, "o", op::DESCRIBE));
        let s = AclSnapshot::new([
            acl(T, "o", LIT, "User:alice", op::ALL, ALLOW),
            acl(T, "o", LIT, "User:alice", op::READ, DENY),
        ]);
        assert!(!a.authorize(&s, &ALICE, T, "o", op::READ));
        assert!(a.authorize(&s, &ALICE, T, "o", op::DESCRIBE));
        assert!(a.authorize(&s, &ALICE, T, "o", op::IDEMPOTENT_WRITE));
    }

    #[test]
    fn deny_wins_over_allow_whatever_the_pattern() {
        let a = on(&[], true);
        let s = AclSnapshot::new([
            acl(T, "*", LIT, "User:*", op::ALL, ALLOW),
            acl(T, "secret-", PRE, "User:alice", op::READ, DENY),
        ]);
        assert!(!a.authorize(&s, &ALICE, T, "secret-1", op::READ));
        assert!(a.authorize(&s, &ALICE, T, "secret-1", op::WRITE));
        assert!(a.authorize(&s, &BOB, T, "secret-1", op::READ));
        assert!(a.authorize(&s, &ALICE, T, "public", op::READ));
        let s = AclSnapshot::new([
            acl(T, "o", LIT, "User:alice", op::READ, ALLOW),
            acl(T, "o", LIT, "User:*", op::ALL, DENY),
        ]);
        assert!(!a.authorize(&s, &ALICE, T, "o", op::READ));
        assert!(!a.authorize(&s, &ALICE, T, "o", op::DESCRIBE));
    }

    #[test]
    fn literal_prefixed_and_wildcard_patterns_match_as_in_kafka() {
        let a = on(&[], false);
        let s = AclSnapshot::new([
            acl(T, "ord", LIT, "User:alice", op::READ, ALLOW),
            acl(T, "pay", PRE, "User:alice", op::WRITE, ALLOW),
            acl(resource::GROUP, "*", LIT, "User:alice", op::READ, ALLOW),
        ]);
        assert!(a.authorize(&s, &ALICE, T, "ord", op::READ));
        assert!(!a.authorize(&s, &ALICE, T, "orders", op::READ));
        assert!(a.authorize(&s, &ALICE, T, "payments", op::WRITE));
        assert!(a.authorize(&s, &ALICE, T, "pay", op::WRITE));
        assert!(!a.authorize(&s, &ALICE, T, "pa", op::WRITE));
        assert!(a.authorize(&s, &ALICE, resource::GROUP, "anything", op::READ));
        // A topic ACL never applies to a group of the same name.
        assert!(!a.authorize(&s, &ALICE, resource::GROUP, "x", op::DELETE));
        assert!(!a.authorize(&s, &ALICE, resource::TRANSACTIONAL_ID, "ord", op::READ));
    }

    #[test]
    fn host_and_principal_wildcards() {
        let a = on(&[], false);
        let mut b = acl(T, "t", LIT, "User:*", op::READ, ALLOW);
        b.host = "10.0.0.1".into();
        let s = AclSnapshot::new([b]);
        assert!(a.authorize(&s, &ALICE, T, "t", op::READ));
        assert!(!a.authorize(&s, &BOB, T, "t", op::READ));
        // Only User:* is a principal wildcard.
        let s = AclSnapshot::new([acl(T, "t", LIT, "Group:*", op::READ, ALLOW)]);
        assert!(!a.authorize(&s, &ALICE, T, "t", op::READ));
    }

    #[test]
    fn super_users_bypass_acls_and_disabled_allows_everything() {
        let a = on(&["User:admin", "User:bob"], false);
        let s = AclSnapshot::new([acl(T, "t", LIT, "User:*", op::ALL, DENY)]);
        assert!(a.authorize(&s, &BOB, T, "t", op::WRITE));
        assert!(!a.authorize(&s, &ALICE, T, "t", op::WRITE));
        let off = Authorizer::default();
        assert!(off.authorize(&s, &ALICE, T, "t", op::WRITE));
        assert_eq!(
            AuthzConfig::parse_super_users("User:admin; User:CN=x,O=y ;").unwrap(),
            vec!["User:admin".to_string(), "User:CN=x,O=y".to_string()]
        );
        assert!(AuthzConfig::parse_super_users("admin").is_err());
    }

    #[test]
    fn no_acl_found_applies_only_when_the_resource_has_no_acl_at_all() {
        let s = AclSnapshot::new([acl(T, "t", LIT, "User:bob", op::READ, ALLOW)]);
        for allow_if_none in [false, true] {
            let a = on(&[], allow_if_none);
            // "t" has an ACL (for bob): alice is denied either way.
            assert!(!a.authorize(&s, &ALICE, T, "t", op::READ));
            assert_eq!(a.authorize(&s, &ALICE, T, "other", op::READ), allow_if_none);
            assert_eq!(
                a.authorize(
                    &AclSnapshot::default(),
                    &ALICE,
                    resource::CLUSTER,
                    "kafka-cluster",
                    op::ALTER
                ),
                allow_if_none
            );
        }
    }

    #[test]
    fn write_on_any_topic_is_found_unless_denied_over_it() {
        let a = on(&[], false);
        let s = AclSnapshot::new([acl(T, "logs-", PRE, "User:alice", op::WRITE, ALLOW)]);
        assert!(a.authorize_any(&s, &ALICE, T, op::WRITE));
        assert!(!a.authorize_any(&s, &BOB, T, op::WRITE));
        let s = AclSnapshot::new([
            acl(T, "logs-", PRE, "User:alice", op::WRITE, ALLOW),
            acl(T, "logs", PRE, "User:alice", op::WRITE, DENY),
        ]);
        assert!(!a.authorize_any(&s, &ALICE, T, op::WRITE));
        let s = AclSnapshot::new([
            acl(T, "a", LIT, "User:alice", op::WRITE, ALLOW),
            acl(T, "*", LIT, "User:*", op::WRITE, DENY),
        ]);
        assert!(!a.authorize_any(&s, &ALICE, T, op::WRITE));
    }

    #[test]
    fn authorized_operation_bits_follow_the_supported_operations() {
        let a = on(&[], false);
        let s = AclSnapshot::new([acl(T, "t", LIT, "User:alice", op::READ, ALLOW)]);
        assert_eq!(
            a.authorized_operations(&s, &ALICE, T, "t"),
            (1 << op::READ) | (1 << op::DESCRIBE)
        );
        let all = AclSnapshot::new([acl(T, "t", LIT, "User:alice", op::ALL, ALLOW)]);
        assert_eq!(
            a.authorized_operations(&all, &ALICE, T, "t"),
            0b1101_1111_1000
        );
    }
}
