//! Authorization seen by real clients (issue 9 item 4): ACLs added and removed with Apache
//! Kafka's own `kafka-acls` (AclCommand 4.1.1, a Java AdminClient) take effect on kmirror, and
//! librdkafka (confluent-kafka) reports TOPIC_AUTHORIZATION_FAILED for a denied topic and
//! GROUP_AUTHORIZATION_FAILED for a denied group.
//!
//! kmirror runs with `--authorizer true --allow-everyone-if-no-acl-found true`: resources no
//! ACL mentions stay open (so the plaintext tools may administer the broker), and a DENY for
//! `User:ANONYMOUS` closes exactly the resources it names.

use std::time::Duration;

use kmirror_tests::helpers::acls_tool;
use kmirror_tests::{proc, python, KmirrorNode, WireClient};

fn probe(args: &[&str]) -> String {
    let ran = proc::run(
        python::script("authz_probe.py").args(args),
        Duration::from_secs(60),
    );
    assert!(ran.status.success(), "authz_probe {args:?}: {}", ran.stderr);
    ran.stdout.trim().to_string()
}

/// One core, the authorizer on, and what no ACL matches allowed (Kafka's
/// `allow.everyone.if.no.acl.found=true`): only the ACLs a test adds deny anything.
fn authorizer_allowing_unmatched() -> KmirrorNode {
    KmirrorNode::builder()
        .args(&[
            "--cores",
            "1",
            "--authorizer",
            "true",
            "--allow-everyone-if-no-acl-found",
            "true",
        ])
        .start()
}

#[test]
fn given_deny_acls_added_with_kafka_acls_when_librdkafka_uses_them_should_see_authorization_errors()
{
    let _g = kmirror_tests::heavy_test_lock();
    let node = authorizer_allowing_unmatched();
    let boot = node.addr();
    let mut admin = WireClient::connect(&boot).expect("connect");
    for t in ["open", "secret"] {
        assert_eq!(admin.create_topic(t, 1, 1, &[]).expect("CreateTopics"), 0);
    }
    assert_eq!(
        probe(&[&boot, "produce", "secret"]),
        "OK",
        "no ACL yet: open"
    );

    acls_tool(
        &boot,
        &[
            "--add",
            "--deny-principal",
            "User:ANONYMOUS",
            "--operation",
            "Write",
            "--operation",
            "Read",
            "--topic",
            "secret",
        ],
    );
    acls_tool(
        &boot,
        &[
            "--add",
            "--deny-principal",
            "User:ANONYMOUS",
            "--operation",
            "Read",
            "--group",
            "blocked",
        ],
    );
    let listed = acls_tool(&boot, &["--list"]);
    assert!(
        listed.contains("name=secret")
            && listed.contains("name=blocked")
            && listed.contains("permissionType=DENY"),
        "{listed}"
    );

    assert_eq!(
        probe(&[&boot, "produce", "secret"]),
        "ERR TOPIC_AUTHORIZATION_FAILED"
    );
    assert_eq!(probe(&[&boot, "produce", "open"]), "OK");
    assert_eq!(
        probe(&[&boot, "consume", "open", "blocked"]),
        "ERR GROUP_AUTHORIZATION_FAILED"
    );
    assert_eq!(probe(&[&boot, "consume", "open", "allowed"]), "OK");

    // Removing the DENY takes effect at once.
    acls_tool(
        &boot,
        &[
            "--remove",
            "--force",
            "--deny-principal",
            "User:ANONYMOUS",
            "--operation",
            "Write",
            "--operation",
            "Read",
            "--topic",
            "secret",
        ],
    );
    assert_eq!(probe(&[&boot, "produce", "secret"]), "OK");
    assert_eq!(probe(&[&boot, "consume", "secret", "allowed-again"]), "OK");
}

/// The mirror APIs (seed 000's tables): without ALTER on the cluster the admin APIs answer
/// MIRROR_AUTHORIZATION_FAILED, without DESCRIBE ListMirrors answers
/// CLUSTER_AUTHORIZATION_FAILED; the `kmirror mirror` CLI reports them in one line.
#[test]
fn given_cluster_alter_denied_when_the_mirror_cli_creates_a_mirror_should_fail_with_mirror_authorization_failed(
) {
    use kmirror_tests::mirror;
    let _g = kmirror_tests::heavy_test_lock();
    let node = authorizer_allowing_unmatched();
    let boot = node.addr();
    mirror::cli_ok(&boot, &["list"]);
    acls_tool(
        &boot,
        &[
            "--add",
            "--deny-principal",
            "User:ANONYMOUS",
            "--operation",
            "Alter",
            "--operation",
            "Describe",
            "--cluster",
        ],
    );
    let ran = mirror::cli(&boot, &["create", "m1", "--source", "127.0.0.1:1"]);
    assert!(
        !ran.status.success(),
        "create must be refused: {}",
        ran.stdout
    );
    assert!(
        ran.stderr.contains("MIRROR_AUTHORIZATION_FAILED"),
        "{}",
        ran.stderr
    );
    let ran = mirror::cli(&boot, &["list"]);
    assert!(
        !ran.status.success(),
        "list must be refused: {}",
        ran.stdout
    );
    assert!(
        ran.stderr.contains("CLUSTER_AUTHORIZATION_FAILED"),
        "{}",
        ran.stderr
    );
}
