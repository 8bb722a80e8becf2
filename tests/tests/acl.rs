//! ACLs on kmirror through Apache Kafka's own `kafka-acls` tool (AclCommand 4.1.1): create,
//! describe (with Kafka's filters), delete, and durability across a restart; then ACL sync
//! from a real Kafka source (StandardAuthorizer): created source ACLs appear on kmirror within
//! a sync interval, and deleted ones disappear.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kmirror_tests::helpers::acls_tool;
use kmirror_tests::kafka::{KafkaCluster, KafkaOptions};
use kmirror_tests::kmirror::KmirrorNode;
use kmirror_tests::mirror;

/// (resource type, name, pattern type, principal, host, operation, permission), as the tool
/// prints them.
type Acl = (String, String, String, String, String, String, String);

/// Parses `kafka-acls --list` output:
/// "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:"
/// followed by "(principal=User:a, host=*, operation=READ, permissionType=ALLOW)" lines.
fn parse_list(out: &str) -> BTreeSet<Acl> {
    fn field<'a>(s: &'a str, key: &str) -> &'a str {
        let start = s.find(&format!("{key}=")).expect(key) + key.len() + 1;
        let rest = &s[start..];
        let end = rest.find([',', ')']).unwrap_or(rest.len());
        &rest[..end]
    }
    let mut set = BTreeSet::new();
    let mut resource: Option<(String, String, String)> = None;
    for line in out.lines() {
        if line.contains("ResourcePattern(") {
            resource = Some((
                field(line, "resourceType").to_owned(),
                field(line, "name").to_owned(),
                field(line, "patternType").to_owned(),
            ));
        } else if line.trim_start().starts_with("(principal=") {
            let (rt, name, pt) = resource.clone().expect("entry before its resource");
            set.insert((
                rt,
                name,
                pt,
                field(line, "principal").to_owned(),
                field(line, "host").to_owned(),
                field(line, "operation").to_owned(),
                field(line, "permissionType").to_owned(),
            ));
        }
    }
    set
}

fn list(boot: &str, extra: &[&str]) -> BTreeSet<Acl> {
    let mut args = vec!["--list"];
    args.extend_from_slice(extra);
    parse_list(&acls_tool(boot, &args))
}

fn acl(rt: &str, name: &str, pt: &str, principal: &str, op: &str, perm: &str) -> Acl {
    (
        rt.into(),
        name.into(),
        pt.into(),
        principal.into(),
        "*".into(),
        op.into(),
        perm.into(),
    )
}

/// Adds: alice may read topic `orders` (literal) and group `billing`; bob may write every
/// topic prefixed `ord`; mallory is denied describing the cluster.
fn add_sample_acls(boot: &str) -> BTreeSet<Acl> {
    acls_tool(
        boot,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "orders",
            "--group",
            "billing",
        ],
    );
    acls_tool(
        boot,
        &[
            "--add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Write",
            "--topic",
            "ord",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    acls_tool(
        boot,
        &[
            "--add",
            "--deny-principal",
            "User:mallory",
            "--operation",
            "Describe",
            "--cluster",
        ],
    );
    [
        acl("TOPIC", "orders", "LITERAL", "User:alice", "READ", "ALLOW"),
        acl("GROUP", "billing", "LITERAL", "User:alice", "READ", "ALLOW"),
        acl("TOPIC", "ord", "PREFIXED", "User:bob", "WRITE", "ALLOW"),
        acl(
            "CLUSTER",
            "kafka-cluster",
            "LITERAL",
            "User:mallory",
            "DESCRIBE",
            "DENY",
        ),
    ]
    .into_iter()
    .collect()
}

#[test]
fn acls_created_with_kafka_acls_are_listed_filtered_deleted_and_survive_restart() {
    let mut node = KmirrorNode::builder()
        .args(&[
            "--cores",
            "2",
            "--authorizer",
            "true",
            "--super-users",
            "User:ANONYMOUS",
        ])
        .start();
    let boot = node.addr();
    assert!(list(&boot, &[]).is_empty(), "a new broker has no ACLs");

    let want = add_sample_acls(&boot);
    assert_eq!(list(&boot, &[]), want);

    // Filters: by principal, and MATCH (every pattern that applies to topic "orders").
    let alice: BTreeSet<Acl> = want
        .iter()
        .filter(|a| a.3 == "User:alice")
        .cloned()
        .collect();
    assert_eq!(list(&boot, &["--principal", "User:alice"]), alice);
    let applies_to_orders: BTreeSet<Acl> =
        want.iter().filter(|a| a.0 == "TOPIC").cloned().collect();
    assert_eq!(
        list(
            &boot,
            &["--topic", "orders", "--resource-pattern-type", "match"]
        ),
        applies_to_orders
    );

    // Restart: everything is still there.
    assert!(node.stop(), "clean shutdown");
    node.start_again();
    assert_eq!(list(&boot, &[]), want, "ACLs after restart");

    // Delete bob's prefixed ACL only.
    acls_tool(
        &boot,
        &[
            "--remove",
            "--force",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Write",
            "--topic",
            "ord",
            "--resource-pattern-type",
            "prefixed",
        ],
    );
    let mut left = want.clone();
    left.retain(|a| a.3 != "User:bob");
    assert_eq!(list(&boot, &[]), left);

    // The deletion is durable too, even across SIGKILL.
    node.kill_now();
    node.start_again();
    assert_eq!(list(&boot, &[]), left, "ACLs after SIGKILL and restart");
}

fn wait_for_acls(boot: &str, want: &BTreeSet<Acl>, within: Duration) -> BTreeSet<Acl> {
    let start = Instant::now();
    loop {
        let got = list(boot, &[]);
        if &got == want || start.elapsed() > within {
            return got;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn acls_on_the_kafka_source_are_synced_to_kmirror_and_removed_when_deleted_there() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let props = [
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("super.users", "User:ANONYMOUS"),
        ("allow.everyone.if.no.acl.found", "true"),
    ];
    let kafka = KafkaCluster::start_with(KafkaOptions {
        props: props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..KafkaOptions::default()
    });
    let node = KmirrorNode::builder()
        .args(&[
            "--cores",
            "1",
            "--authorizer",
            "true",
            "--super-users",
            "User:ANONYMOUS",
        ])
        .start();
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("orders", 1, &[]);

    let want = add_sample_acls(&src);
    assert_eq!(list(&src, &[]), want, "source holds the ACLs");

    mirror::create(
        &dst,
        "M",
        &src,
        &[("mirror.metadata.sync.interval.ms", "300")],
    );
    mirror::add_topics(&dst, "M", &["orders"]);

    // Within a few sync intervals (the tool itself takes a JVM start per poll).
    let got = wait_for_acls(&dst, &want, Duration::from_secs(30));
    if got != want {
        let log = std::fs::read_to_string(node.log_path()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().filter(|l| !l.contains("DEBUG")).collect();
        panic!(
            "source ACLs did not reach kmirror: got {got:?}\nkmirror log:\n{}",
            tail.join("\n")
        );
    }

    // Delete alice's ACLs on the source: they disappear on kmirror, the rest stays.
    acls_tool(
        &src,
        &[
            "--remove",
            "--force",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "orders",
            "--group",
            "billing",
        ],
    );
    let mut left = want.clone();
    left.retain(|a| a.3 != "User:alice");
    assert_eq!(list(&src, &[]), left);
    let got = wait_for_acls(&dst, &left, Duration::from_secs(30));
    assert_eq!(
        got, left,
        "ACLs deleted on the source are deleted on kmirror"
    );

    // An ACL added only on kmirror is extra: the next round removes it.
    acls_tool(
        &dst,
        &[
            "--add",
            "--allow-principal",
            "User:local",
            "--operation",
            "Read",
            "--topic",
            "orders",
        ],
    );
    let got = wait_for_acls(&dst, &left, Duration::from_secs(30));
    assert_eq!(got, left, "an ACL the source lacks is removed by the sync");
}
