//! ACLs on kmirror through Apache Kafka's own `kafka-acls` tool (AclCommand 4.1.1): create,
//! describe (with Kafka's filters), delete, and durability across a restart; then ACL sync
//! from a real Kafka source (StandardAuthorizer): in exact mode created source ACLs appear on
//! kmirror within a sync interval and deleted ones disappear; in the default owned mode two
//! Kafka sources and a local admin share one kmirror (ACLs, client quotas, group offsets) and
//! each keeps its own entries.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kmirror_tests::helpers::{acls_tool, commit_offset, fetch_offset, produce_batches};
use kmirror_tests::kafka::{KafkaCluster, KafkaOptions};
use kmirror_tests::kmirror::KmirrorNode;
use kmirror_tests::mirror;
use kmirror_tests::wire::WireClient;

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
fn exact_acl_sync_makes_kmirrors_acls_the_kafka_sources_and_removes_what_it_lacks() {
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

    // The seed's exact mode: kmirror's ACL set made equal to the source's (the default,
    // owned, is in `two_kafka_sources_and_a_local_admin_keep_their_own_acls_quotas_and_groups`).
    mirror::create(
        &dst,
        "M",
        &src,
        &[
            ("mirror.metadata.sync.interval.ms", "300"),
            ("mirror.acl.sync.mode", "exact"),
        ],
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

// ---- owned sync: a hub with two Kafka sources and a local admin ----

/// (resource type, name, pattern type, principal, host, operation, permission) as Kafka's
/// protocol codes; TOPIC 2, LITERAL 3, READ 3, ALLOW 3.
type WireAcl = (i8, String, i8, String, String, i8, i8);

fn read_acl(principal: &str, topic: &str) -> WireAcl {
    (2, topic.into(), 3, principal.into(), "*".into(), 3, 3)
}

fn create_acls(boot: &str, acls: &[WireAcl]) {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::CreateAclsRequest;
    use kmirror_tests::helpers::str_bytes;
    let req = CreateAclsRequest::default().with_creations(
        acls.iter()
            .map(|(rt, name, pt, principal, host, op, perm)| {
                AclCreation::default()
                    .with_resource_type(*rt)
                    .with_resource_name(str_bytes(name))
                    .with_resource_pattern_type(*pt)
                    .with_principal(str_bytes(principal))
                    .with_host(str_bytes(host))
                    .with_operation(*op)
                    .with_permission_type(*perm)
            })
            .collect(),
    );
    let r = WireClient::connect(boot)
        .unwrap()
        .send(req)
        .expect("CreateAcls");
    for res in r.results {
        assert_eq!(
            res.error_code, 0,
            "CreateAcls on {boot}: {:?}",
            res.error_message
        );
    }
}

fn delete_acls(boot: &str, acls: &[WireAcl]) {
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use kafka_protocol::messages::DeleteAclsRequest;
    use kmirror_tests::helpers::str_bytes;
    let req = DeleteAclsRequest::default().with_filters(
        acls.iter()
            .map(|(rt, name, pt, principal, host, op, perm)| {
                DeleteAclsFilter::default()
                    .with_resource_type_filter(*rt)
                    .with_resource_name_filter(Some(str_bytes(name)))
                    .with_pattern_type_filter(*pt)
                    .with_principal_filter(Some(str_bytes(principal)))
                    .with_host_filter(Some(str_bytes(host)))
                    .with_operation(*op)
                    .with_permission_type(*perm)
            })
            .collect(),
    );
    let r = WireClient::connect(boot)
        .unwrap()
        .send(req)
        .expect("DeleteAcls");
    for res in r.filter_results {
        assert_eq!(res.error_code, 0, "DeleteAcls on {boot}");
    }
}

/// Every ACL of `boot` (DescribeAcls with an any-filter).
fn wire_acls(boot: &str) -> BTreeSet<WireAcl> {
    use kafka_protocol::messages::DescribeAclsRequest;
    // Nullable filters default to "" in kafka-protocol, not null.
    let req = DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1);
    let r = WireClient::connect(boot)
        .unwrap()
        .send(req)
        .expect("DescribeAcls");
    assert_eq!(r.error_code, 0, "DescribeAcls on {boot}");
    r.resources
        .iter()
        .flat_map(|res| {
            res.acls.iter().map(move |a| {
                (
                    res.resource_type,
                    res.resource_name.to_string(),
                    res.pattern_type,
                    a.principal.to_string(),
                    a.host.to_string(),
                    a.operation,
                    a.permission_type,
                )
            })
        })
        .collect()
}

/// Sets (Some) or removes (None) `key` of user `user`'s client quota.
fn set_user_quota(boot: &str, user: &str, key: &str, value: Option<f64>) {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::AlterClientQuotasRequest;
    use kmirror_tests::helpers::str_bytes;
    let req = AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(str_bytes("user"))
            .with_entity_name(Some(str_bytes(user)))])
        .with_ops(vec![OpData::default()
            .with_key(str_bytes(key))
            .with_value(value.unwrap_or(0.0))
            .with_remove(value.is_none())])]);
    let r = WireClient::connect(boot)
        .unwrap()
        .send(req)
        .expect("AlterClientQuotas");
    assert_eq!(r.entries[0].error_code, 0, "AlterClientQuotas on {boot}");
}

/// Every user quota of `boot`: user -> key -> value.
fn user_quotas(boot: &str) -> BTreeMap<String, BTreeMap<String, f64>> {
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
    use kafka_protocol::messages::DescribeClientQuotasRequest;
    use kmirror_tests::helpers::str_bytes;
    let req =
        DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(str_bytes("user"))
            .with_match_type(2)
            .with_match(None)]);
    let r = WireClient::connect(boot)
        .unwrap()
        .send(req)
        .expect("DescribeClientQuotas");
    assert_eq!(r.error_code, 0, "DescribeClientQuotas on {boot}");
    r.entries
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let user = e
                .entity
                .iter()
                .find(|d| d.entity_type.as_str() == "user")
                .and_then(|d| d.entity_name.as_ref())
                .map(|n| n.to_string())
                .unwrap_or_default();
            let values = e
                .values
                .iter()
                .map(|v| (v.key.to_string(), v.value))
                .collect();
            (user, values)
        })
        .collect()
}

fn quotas_of(entries: &[(&str, f64)]) -> BTreeMap<String, BTreeMap<String, f64>> {
    entries
        .iter()
        .map(|(u, v)| {
            (
                u.to_string(),
                BTreeMap::from([("producer_byte_rate".to_owned(), *v)]),
            )
        })
        .collect()
}

/// What the hub holds of ACLs, quotas and the two groups' offsets.
type HubState = (
    BTreeSet<WireAcl>,
    BTreeMap<String, BTreeMap<String, f64>>,
    (i64, i64),
);

fn hub_state(dst: &str) -> HubState {
    (
        wire_acls(dst),
        user_quotas(dst),
        (
            fetch_offset(dst, "ga", "a-orders"),
            fetch_offset(dst, "gb", "b-orders"),
        ),
    )
}

fn wait_for_hub(dst: &str, want: &HubState, within: Duration) -> HubState {
    let end = Instant::now() + within;
    loop {
        let got = hub_state(dst);
        if &got == want || Instant::now() > end {
            return got;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Two Apache Kafka sources (each with an authorizer, ACLs, client quotas and a consumer
/// group) mirrored into one kmirror that also has a local admin's ACL and quota. In the
/// default owned mode every entry stays where it belongs through many sync rounds; a binding
/// both sources have belongs to the first mirror that wrote it (the other reports the clash
/// in `describe` and the metric); a source's deletion removes only that mirror's entries.
#[test]
fn two_kafka_sources_and_a_local_admin_keep_their_own_acls_quotas_and_groups() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let authorized = || KafkaOptions {
        props: [
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            ),
            ("super.users", "User:ANONYMOUS"),
            ("allow.everyone.if.no.acl.found", "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..KafkaOptions::default()
    };
    let maddr = format!("127.0.0.1:{}", kmirror_tests::proc::free_port());
    let (ka, kb, node) = std::thread::scope(|s| {
        let a = s.spawn(|| KafkaCluster::start_with(authorized()));
        let b = s.spawn(|| KafkaCluster::start_with(authorized()));
        let node = KmirrorNode::builder()
            .args(&[
                "--cores",
                "1",
                "--authorizer",
                "true",
                "--super-users",
                "User:ANONYMOUS",
                "--metrics",
                &maddr,
            ])
            .start();
        (a.join().unwrap(), b.join().unwrap(), node)
    });
    let (sa, sb, dst) = (ka.bootstrap(), kb.bootstrap(), node.addr());

    // The local admin's entries on kmirror.
    let local_acl = read_acl("User:local", "ops");
    create_acls(&dst, std::slice::from_ref(&local_acl));
    set_user_quota(&dst, "ops", "producer_byte_rate", Some(100.0));

    // Source A: alice's ACL and quota, a binding B has too, and a quota for ops that would
    // change the local one. Source B: bob's, and the shared binding.
    let shared = read_acl("User:shared", "common");
    create_acls(&sa, &[read_acl("User:alice", "a-orders"), shared.clone()]);
    set_user_quota(&sa, "alice", "producer_byte_rate", Some(1000.0));
    set_user_quota(&sa, "ops", "producer_byte_rate", Some(999.0));
    create_acls(&sb, &[read_acl("User:bob", "b-orders"), shared.clone()]);
    set_user_quota(&sb, "bob", "producer_byte_rate", Some(2000.0));
    // A consumer group on each source, on a topic its mirror copies.
    ka.create_topic("a-orders", 1, &[]);
    kb.create_topic("b-orders", 1, &[]);
    produce_batches(&sa, "a-orders", 10, "a");
    produce_batches(&sb, "b-orders", 10, "b");
    commit_offset(&sa, "ga", "a-orders", 7);
    commit_offset(&sb, "gb", "b-orders", 4);

    let fast = [
        ("mirror.metadata.sync.interval.ms", "300"),
        ("mirror.group.sync.interval.ms", "300"),
    ];
    mirror::create(&dst, "A", &sa, &fast);
    mirror::add_topics(&dst, "A", &["a-orders"]);
    // A writes the shared binding first; B starts once it is there.
    let log_tail = || {
        let log = std::fs::read_to_string(node.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|l| !l.contains("DEBUG")).collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    let end = Instant::now() + Duration::from_secs(30);
    while !wire_acls(&dst).contains(&shared) {
        assert!(
            Instant::now() < end,
            "mirror A's ACLs never came: {:?}\nkmirror log:\n{}",
            wire_acls(&dst),
            log_tail()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    mirror::create(&dst, "B", &sb, &fast);
    mirror::add_topics(&dst, "B", &["b-orders"]);

    let want: HubState = (
        [
            local_acl.clone(),
            read_acl("User:alice", "a-orders"),
            read_acl("User:bob", "b-orders"),
            shared.clone(),
        ]
        .into_iter()
        .collect(),
        quotas_of(&[("ops", 100.0), ("alice", 1000.0), ("bob", 2000.0)]),
        (7, 4),
    );
    let got = wait_for_hub(&dst, &want, Duration::from_secs(60));
    assert_eq!(
        got,
        want,
        "the hub holds each source's entries and the local ones\nkmirror log:\n{}",
        log_tail()
    );
    // Many more rounds (300 ms each): nothing moves.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(hub_state(&dst), want, "entries moved between sync rounds");

    // The clashes are shown: B's shared binding is A's, A's ops quota is the local admin's.
    let described = mirror::cli_ok(&dst, &["describe", "B"]).stdout;
    assert!(
        described.contains("User:shared") && described.contains("kept by mirror A"),
        "{described}"
    );
    let described = mirror::cli_ok(&dst, &["describe", "A"]).stdout;
    assert!(
        described.contains("ops") && described.contains("kept by a local admin"),
        "{described}"
    );
    let m = kmirror_tests::metrics::scrape(&maddr);
    assert_eq!(
        m.value(
            "kmirror_mirror_sync_clashes",
            &[("mirror", "B"), ("kind", "acls")]
        ),
        Some(1.0)
    );

    // Source A drops alice's ACL and quota and the shared binding: A's entries go; the local
    // ones and B's stay, and B, whose source still has the shared binding, writes it again.
    delete_acls(&sa, &[read_acl("User:alice", "a-orders"), shared.clone()]);
    set_user_quota(&sa, "alice", "producer_byte_rate", None);
    let want: HubState = (
        [local_acl, read_acl("User:bob", "b-orders"), shared]
            .into_iter()
            .collect(),
        quotas_of(&[("ops", 100.0), ("bob", 2000.0)]),
        (7, 4),
    );
    let got = wait_for_hub(&dst, &want, Duration::from_secs(60));
    assert_eq!(
        got,
        want,
        "only mirror A's own entries are removed\nkmirror log:\n{}",
        log_tail()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(hub_state(&dst), want, "entries moved between sync rounds");
}
