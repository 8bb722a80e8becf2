//! Upgrading a one-node data dir: a node started without `--quorum` by commit d07dd8c kept
//! its control plane in local files (cluster metadata and topic configs, ACLs, SCRAM
//! credentials, client quotas and dynamic broker configs, mirror state, and the group and
//! transaction coordinators' logs `__consumer_offsets-0` / `__transaction_state-0`) beside the
//! partition logs. Later versions run such a node as a one-voter Raft quorum and convert the
//! old data dir once, on first start. This test proves that conversion loses nothing.
//!
//! `tests/fixtures/datadir-d07dd8c.tar.gz` is such a data dir, written through real clients by
//! `tests/fixtures/make-datadir-d07dd8c.sh` with the d07dd8c binary; its manifest
//! (`datadir-d07dd8c.manifest.json`) is what that broker answered just before it stopped. The
//! test unpacks it, starts the binary under test (`KMIRROR_BIN`, or this workspace's build) on
//! it with the same flags, and checks from outside, with Kafka's Java tools and clients,
//! librdkafka (confluent-kafka) and the raw wire client, that it finds exactly that:
//! - the cluster id, every topic's id, partition count and non-default configs; log start and
//!   end offsets; every stored batch byte for byte (SHA-256 over the Fetch payload, control
//!   batches and producer ids included), and a leader epoch no lower than any batch's;
//! - every record at its offset with its key, value, headers and timestamp (Java
//!   KafkaConsumer and librdkafka), and which of them read_committed hides (the aborted
//!   transaction);
//! - each group's committed offsets and metadata, type and state (kafka-consumer-groups and
//!   librdkafka's AdminClient), the transactional id's producer id, epoch and state
//!   (kafka-transactions);
//! - the ACL bindings (kafka-acls --list, librdkafka) and that they are enforced; the SCRAM
//!   credentials (a right password authenticates, a wrong one gets SASL_AUTHENTICATION_FAILED);
//!   the client quotas and the dynamic broker default (kafka-configs --describe);
//! - the mirror, listed and described with its settings, `src-live` still MIRRORING and
//!   read-only (READ_ONLY_TOPIC), `src-failed` STOPPED and writable. Its source is gone (the
//!   fixture script stopped it after the destination), which the mirror must survive.
//!
//! Then it restarts the node and checks most of it again: the conversion must happen once and
//! the converted state must be durable. Offsets of expired groups would vanish after 7 days,
//! hence `--offsets-retention-minutes` in both the fixture's and the test's flags; every topic
//! has `retention.ms=-1` for the same reason.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use kmirror_tests::java::{self, tools};
use kmirror_tests::sasl::{self, AuthOutcome};
use kmirror_tests::{deps, mirror, oracle, proc, python, records, KmirrorNode, WireClient};

/// The flags the fixture's node ran with (make-datadir-d07dd8c.sh `DST_FLAGS`), besides its
/// PLAINTEXT and SASL_PLAINTEXT listeners. PLAINTEXT is User:ANONYMOUS, a super user: the
/// admin of the tools below.
const SERVE_FLAGS: &[&str] = &[
    "--sasl-mechanisms",
    "SCRAM-SHA-512,SCRAM-SHA-256",
    "--authorizer",
    "true",
    "--super-users",
    "User:ANONYMOUS",
    "--offsets-retention-minutes",
    "52560000",
    "--cores",
    "2",
];

const READ_ONLY_TOPIC: i16 = 134;
const SASL_AUTHENTICATION_FAILED: i16 = 58;

fn fixture(name: &str) -> PathBuf {
    deps::workspace_root().join("tests/fixtures").join(name)
}

fn manifest() -> Value {
    let path = fixture("datadir-d07dd8c.manifest.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

fn i(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The topics of the manifest: name to (partitions, log ends).
fn topics(m: &Value) -> BTreeMap<String, (i32, Vec<i64>)> {
    m["topics"]
        .as_object()
        .expect("topics")
        .iter()
        .map(|(t, v)| {
            let ends = v["end"].as_array().expect("end").iter().map(i).collect();
            (t.clone(), (i(&v["partitions"]) as i32, ends))
        })
        .collect()
}

/// Runs an inline librdkafka (confluent-kafka) program with `args`; stdout.
fn py(program: &str, args: &[&str]) -> String {
    let ran = proc::run_ok(
        Command::new(deps::python())
            .arg("-c")
            .arg(program)
            .args(args),
        Duration::from_secs(120),
    );
    ran.stdout
}

/// Reads every partition of every topic from the beginning to its end with librdkafka, in
/// both isolation levels. Prints "U <record JSON>" per record (read_uncommitted) and
/// "C <topic> <partition> <offset>" per record read_committed returns.
const PY_READ_ALL: &str = r#"
import json, sys, time
from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
boot, specs = sys.argv[1], [a.rsplit(":", 1) for a in sys.argv[2:]]
text = lambda b: None if b is None else b.decode()
for iso, tag in (("read_uncommitted", "U"), ("read_committed", "C")):
    c = Consumer({"bootstrap.servers": boot, "group.id": "upgrade-check", "enable.auto.commit": False,
                  "isolation.level": iso, "enable.partition.eof": True})
    tps = [TopicPartition(t, p, OFFSET_BEGINNING) for t, n in specs for p in range(int(n))]
    c.assign(tps)
    eof, deadline = set(), time.time() + 60
    while len(eof) < len(tps):
        if time.time() > deadline:
            sys.exit(f"{iso}: no end of partition from {set((t.topic, t.partition) for t in tps) - eof}")
        for m in c.consume(1000, 0.5):
            if m.error():
                if m.error().code() == -191:
                    eof.add((m.topic(), m.partition()))
                    continue
                sys.exit(f"{iso}: {m.error()}")
            if tag == "C":
                print("C", m.topic(), m.partition(), m.offset())
                continue
            tt, ts = m.timestamp()
            print("U", json.dumps({"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                  "key": text(m.key()), "value": text(m.value()),
                  "headers": [[k, text(v)] for k, v in (m.headers() or [])],
                  "timestamp_type": {1: "CreateTime", 2: "LogAppendTime"}[tt], "timestamp": ts}))
    c.close()
"#;

/// Groups (type, state, committed offsets with metadata), ACL bindings and SCRAM credentials
/// as librdkafka's AdminClient describes them, as one JSON object.
const PY_ADMIN: &str = r#"
import json, sys
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import (AdminClient, AclBindingFilter, ResourceType, ResourcePatternType,
                                   AclOperation, AclPermissionType)
boot, groups = sys.argv[1], sys.argv[2].split(",")
a = AdminClient({"bootstrap.servers": boot})
out = {"groups": {}, "acls": [], "scram": {}}
listed = {g.group_id: g for g in a.list_consumer_groups(request_timeout=30).result().valid}
for g in groups:
    if g not in listed:
        continue
    offs = {}
    for _, f in a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)]).items():
        for tp in f.result().topic_partitions:
            if tp.offset >= 0:
                offs.setdefault(tp.topic, {})[str(tp.partition)] = [tp.offset, tp.metadata or ""]
    out["groups"][g] = {"type": str(listed[g].type).split(".")[-1],
                        "state": str(listed[g].state).split(".")[-1], "offsets": offs}
for b in a.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                          AclOperation.ANY, AclPermissionType.ANY)).result():
    out["acls"].append(["CLUSTER" if b.restype.name == "BROKER" else b.restype.name, b.name,
                        b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
                        b.permission_type.name])
out["acls"].sort()
res = a.describe_user_scram_credentials(sys.argv[3].split(","))
res = {u: f.result() for u, f in res.items()} if isinstance(res, dict) else res.result()
for u, d in res.items():
    out["scram"][u] = [[x.mechanism.name.replace("_", "-"), x.iterations] for x in d.scram_credential_infos]
print(json.dumps(out))
"#;

/// Produces one record to TOPIC PARTITION; prints "OK <offset>" or "ERR <code> <name>".
const PY_PRODUCE: &str = r#"
import sys
from confluent_kafka import Producer
boot, topic, part = sys.argv[1], sys.argv[2], int(sys.argv[3])
got = []
p = Producer({"bootstrap.servers": boot, "message.timeout.ms": 10000, "enable.idempotence": True})
p.produce(topic, key=b"after-upgrade", value=sys.argv[4].encode(), partition=part,
          on_delivery=lambda e, m: got.append(f"ERR {e.code()} {e.name()}" if e else f"OK {m.offset()}"))
p.flush(20)
print(got[0] if got else "TIMEOUT")
"#;

/// Cluster id, topic ids, partition counts and leader epochs from Metadata (raw wire).
fn check_metadata(boot: &str, m: &Value) {
    let names: Vec<String> = topics(m).keys().cloned().collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let md = WireClient::connect(boot)
        .and_then(|mut c| c.metadata(Some(&refs)))
        .expect("Metadata");
    assert_eq!(
        md.cluster_id.as_ref().map(|c| c.to_string()).as_deref(),
        Some(s(&m["cluster_id"])),
        "cluster id"
    );
    for (name, t) in m["topics"].as_object().expect("topics") {
        let got = md
            .topics
            .iter()
            .find(|x| x.name.as_ref().map(|n| n.0.as_str()) == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{name} not in Metadata"));
        assert_eq!(got.error_code, 0, "Metadata {name}");
        let id = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(s(&t["topic_id"]))
            .expect("topic id is base64");
        assert_eq!(
            got.topic_id.as_bytes().as_slice(),
            id.as_slice(),
            "{name}: topic id"
        );
        assert_eq!(
            got.partitions.len() as i64,
            i(&t["partitions"]),
            "{name}: partitions"
        );
        for p in &got.partitions {
            let want = i(&t["batches"][p.partition_index as usize]["max_leader_epoch"]);
            assert!(
                p.leader_epoch as i64 >= want,
                "{name}-{}: leader epoch {} below the epoch {want} its log already holds",
                p.partition_index,
                p.leader_epoch
            );
        }
    }
}

/// Every committed offset of the manifest's groups is a record in `__consumer_offsets` within
/// 30 s of the start, with no FindCoordinator or group request sent: the node converts the
/// old described-only topic and its coordinators move the old state into the partitions
/// they lead.
fn check_offsets_topic_holds_the_commits(boot: &str, m: &Value) {
    let commits: i64 = m["groups"]
        .as_object()
        .expect("groups")
        .values()
        .flat_map(|g| g["offsets"].as_object().expect("offsets").values())
        .map(|t| t.as_object().expect("partitions").len() as i64)
        .sum();
    assert!(commits > 0, "the fixture has no committed offsets");
    let until = Instant::now() + Duration::from_secs(30);
    let mut held = 0;
    while Instant::now() < until {
        let mut c = WireClient::connect(boot).expect("connect");
        let md = c.metadata(Some(&["__consumer_offsets"])).expect("Metadata");
        let parts = md
            .topics
            .first()
            .filter(|t| t.error_code == 0)
            .map_or(0, |t| t.partitions.len() as i32);
        held = (0..parts)
            .filter_map(|p| c.list_offset("__consumer_offsets", p, -1).ok())
            .sum::<i64>();
        if held >= commits {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("__consumer_offsets holds {held} records, fewer than the {commits} commits of the old data dir");
}

/// Log start and end of every partition (`appended` more records at the end than the
/// manifest says), and every batch up to the manifest's end byte for byte.
fn check_logs(boot: &str, m: &Value, appended: &BTreeMap<(String, i32), i64>) {
    for (name, t) in m["topics"].as_object().expect("topics") {
        for p in 0..i(&t["partitions"]) as i32 {
            let start = i(&t["log_start"][p as usize]);
            let end = i(&t["end"][p as usize]);
            let extra = appended.get(&(name.clone(), p)).copied().unwrap_or(0);
            let bounds = WireClient::connect_leader(boot, name, p)
                .and_then(|mut c| c.log_bounds(name, p))
                .unwrap_or_else(|e| panic!("bounds of {name}-{p}: {e}"));
            assert_eq!(bounds, (start, end + extra), "{name}-{p}: (log start, end)");
            let (log_start, batches) = oracle::read_batches(boot, name, p, end)
                .unwrap_or_else(|e| panic!("read {name}-{p}: {e}"));
            assert_eq!(log_start, start, "{name}-{p}: log start");
            let mut h = Sha256::new();
            for b in &batches {
                h.update(&b.bytes);
            }
            let controls = batches
                .iter()
                .filter(|b| b.bytes.len() > 22 && b.bytes[22] & 0x20 != 0)
                .count();
            let want = &t["batches"][p as usize];
            assert_eq!(
                (batches.len() as i64, controls as i64),
                (i(&want["count"]), i(&want["control_batches"])),
                "{name}-{p}: (batches, control batches)"
            );
            let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(
                hex,
                s(&want["sha256"]),
                "{name}-{p}: the stored batches changed"
            );
        }
    }
}

/// The manifest's records below its end offsets, keyed by (topic, partition, offset).
fn manifest_records(m: &Value) -> BTreeMap<(String, i64, i64), Value> {
    m["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            (
                (
                    s(&r["topic"]).to_string(),
                    i(&r["partition"]),
                    i(&r["offset"]),
                ),
                r.clone(),
            )
        })
        .collect()
}

/// Every record read with librdkafka, in both isolation levels, equals the manifest's (records
/// after the manifest's end offsets are returned apart).
fn check_records_librdkafka(boot: &str, m: &Value) -> Vec<Value> {
    let specs: Vec<String> = topics(m)
        .iter()
        .map(|(t, (n, _))| format!("{t}:{n}"))
        .collect();
    let mut args = vec![boot];
    args.extend(specs.iter().map(String::as_str));
    let out = py(PY_READ_ALL, &args);
    let ends = topics(m);
    let below = |t: &str, p: i64, o: i64| o < ends[t].1[p as usize];
    let committed: BTreeSet<(String, i64, i64)> = out
        .lines()
        .filter_map(|l| l.strip_prefix("C "))
        .map(|l| {
            let c: Vec<&str> = l.split(' ').collect();
            (
                c[0].to_string(),
                c[1].parse().unwrap(),
                c[2].parse().unwrap(),
            )
        })
        .collect();
    let mut got = BTreeMap::new();
    let mut later = Vec::new();
    for l in out.lines().filter_map(|l| l.strip_prefix("U ")) {
        let mut r: Value = serde_json::from_str(l).expect("record JSON");
        let key = (
            s(&r["topic"]).to_string(),
            i(&r["partition"]),
            i(&r["offset"]),
        );
        r["read_committed"] = json!(committed.contains(&key));
        if below(&key.0, key.1, key.2) {
            got.insert(key, r);
        } else {
            later.push(r);
        }
    }
    let want = manifest_records(m);
    for (k, w) in &want {
        assert_eq!(got.get(k), Some(w), "librdkafka: record {k:?}");
    }
    assert_eq!(got.len(), want.len(), "librdkafka: records read");
    later
}

/// RecordDump's text of a byte string: "-" for null, spaces as underscores.
fn dump_text(v: &Value) -> String {
    match v.as_str() {
        None => "-".into(),
        Some(t) => t.replace(' ', "_"),
    }
}

/// Every record of `topic` read by a Java KafkaConsumer (tests/java/src/RecordDump.java)
/// equals the manifest's, line for line.
fn check_records_java(boot: &str, m: &Value, topic: &str) {
    let want: Vec<String> = manifest_records(m)
        .into_iter()
        .filter(|((t, _, _), _)| t == topic)
        .map(|(_, r)| {
            let headers = r["headers"].as_array().expect("headers");
            let hk = if headers.is_empty() {
                "-".to_string()
            } else {
                headers
                    .iter()
                    .map(|h| format!("{}={},", s(&h[0]), dump_text(&h[1])))
                    .collect()
            };
            format!(
                "R {} {} {} {} {hk} {} {}",
                i(&r["partition"]),
                i(&r["offset"]),
                dump_text(&r["key"]),
                dump_text(&r["value"]),
                s(&r["timestamp_type"]),
                i(&r["timestamp"])
            )
        })
        .collect();
    let ran = proc::run_ok(
        java::program("RecordDump").args([boot, topic, "read_uncommitted", "timestamps"]),
        Duration::from_secs(120),
    );
    assert!(ran.stdout.lines().any(|l| l == "END"), "{}", ran.stderr);
    let mut got: Vec<String> = ran
        .stdout
        .lines()
        .filter(|l| l.starts_with("R "))
        .map(str::to_string)
        .collect();
    let key = |l: &String| -> (i64, i64) {
        let mut c = l.split(' ').skip(1).map(|x| x.parse::<i64>().unwrap_or(-1));
        (c.next().unwrap_or(-1), c.next().unwrap_or(-1))
    };
    got.sort_by_key(key);
    assert_eq!(got, want, "Java KafkaConsumer: records of {topic}");
}

/// What librdkafka's AdminClient says of groups, ACLs and SCRAM users equals the manifest.
fn check_admin_librdkafka(boot: &str, m: &Value) {
    let groups: Vec<&String> = m["groups"].as_object().expect("groups").keys().collect();
    let groups = groups
        .iter()
        .map(|g| g.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let users = m["scram"].as_object().expect("scram").keys().cloned();
    let users = users.collect::<Vec<_>>().join(",");
    let out = py(PY_ADMIN, &[boot, &groups, &users]);
    let got: Value = serde_json::from_str(out.trim()).expect("admin JSON");
    assert_eq!(got["groups"], m["groups"], "librdkafka: groups");
    assert_eq!(got["acls"], m["acls"], "librdkafka: ACL bindings");
    assert_eq!(got["scram"], m["scram"], "librdkafka: SCRAM credentials");
}

/// kafka-consumer-groups --describe --all-groups: every committed offset of the manifest.
fn check_groups_java(boot: &str, m: &Value) {
    let ran = java::run_tool(
        tools::CONSUMER_GROUP_COMMAND,
        &["--bootstrap-server", boot, "--describe", "--all-groups"],
        Duration::from_secs(90),
    );
    let groups = m["groups"].as_object().expect("groups");
    let mut got: BTreeMap<(String, String, String), i64> = BTreeMap::new();
    // GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG …
    for line in ran.stdout.lines() {
        let c: Vec<&str> = line.split_whitespace().collect();
        if c.len() >= 4 && groups.contains_key(c[0]) {
            if let Ok(off) = c[3].parse::<i64>() {
                got.insert((c[0].into(), c[1].into(), c[2].into()), off);
            }
        }
    }
    let mut want = BTreeMap::new();
    for (g, v) in groups {
        for (t, parts) in v["offsets"].as_object().expect("offsets") {
            for (p, o) in parts.as_object().expect("partitions") {
                want.insert((g.clone(), t.clone(), p.clone()), i(&o[0]));
            }
        }
    }
    assert_eq!(got, want, "kafka-consumer-groups:\n{}", ran.stdout);
}

/// kafka-transactions describe: the transactional id's producer id, epoch, state.
fn check_transactions_java(boot: &str, m: &Value) {
    for (id, want) in m["transactions"].as_object().expect("transactions") {
        let ran = java::run_tool(
            "org.apache.kafka.tools.TransactionsCommand",
            &[
                "--bootstrap-server",
                boot,
                "describe",
                "--transactional-id",
                id,
            ],
            Duration::from_secs(90),
        );
        let lines: Vec<&str> = ran
            .stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(
            lines.len(),
            2,
            "kafka-transactions describe:\n{}",
            ran.stdout
        );
        let row: BTreeMap<&str, &str> = lines[0]
            .split('\t')
            .zip(lines[1].split('\t'))
            .map(|(h, v)| (h.trim(), v.trim()))
            .collect();
        for (k, v) in want.as_object().expect("fields") {
            assert_eq!(row.get(k.as_str()).copied(), Some(s(v)), "{id}: {k}");
        }
    }
}

/// (resource type, name, pattern type, principal, host, operation, permission) per binding
/// of `kafka-acls --list`.
fn check_acls_java(boot: &str, m: &Value) {
    fn field<'a>(l: &'a str, key: &str) -> &'a str {
        let start = l.find(&format!("{key}=")).expect(key) + key.len() + 1;
        let rest = &l[start..];
        &rest[..rest.find([',', ')']).unwrap_or(rest.len())]
    }
    let out = java::run_tool(
        "org.apache.kafka.tools.AclCommand",
        &["--bootstrap-server", boot, "--list"],
        Duration::from_secs(90),
    )
    .stdout;
    let mut got = BTreeSet::new();
    let mut resource: Option<[String; 3]> = None;
    for l in out.lines() {
        if l.contains("ResourcePattern(") {
            resource =
                Some(["resourceType", "name", "patternType"].map(|k| field(l, k).to_string()));
        } else if l.trim_start().starts_with("(principal=") {
            let r = resource.clone().expect("binding before its resource");
            let mut b: Vec<String> = r.to_vec();
            for k in ["principal", "host", "operation", "permissionType"] {
                b.push(field(l, k).to_string());
            }
            got.insert(b);
        }
    }
    let want: BTreeSet<Vec<String>> = m["acls"]
        .as_array()
        .expect("acls")
        .iter()
        .map(|b| {
            b.as_array()
                .unwrap()
                .iter()
                .map(|x| s(x).to_string())
                .collect()
        })
        .collect();
    assert_eq!(got, want, "kafka-acls --list:\n{out}");
}

/// kafka-configs --describe of quotas, SCRAM users and the broker default, line for line.
fn check_configs_java(boot: &str, m: &Value, which: &[&str]) {
    for what in which {
        let entity: Vec<&str> = match *what {
            "clients" => vec!["--entity-type", "clients"],
            "users" => vec!["--entity-type", "users"],
            "user alice" => vec!["--entity-type", "users", "--entity-name", "alice"],
            "user bob" => vec!["--entity-type", "users", "--entity-name", "bob"],
            "user alice client c2" => vec![
                "--entity-type",
                "users",
                "--entity-name",
                "alice",
                "--entity-type",
                "clients",
                "--entity-name",
                "c2",
            ],
            "brokers default" => vec!["--entity-type", "brokers", "--entity-default"],
            other => panic!("unknown describe {other}"),
        };
        let mut args = vec!["--bootstrap-server", boot, "--describe"];
        args.extend(entity);
        let out =
            java::run_tool("kafka.admin.ConfigCommand", &args, Duration::from_secs(90)).stdout;
        let mut got: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
        got.sort_unstable();
        let want: Vec<&str> = m["kafka_configs_describe"][*what]
            .as_array()
            .unwrap_or_else(|| panic!("manifest lacks kafka-configs {what}"))
            .iter()
            .map(s)
            .collect();
        assert_eq!(got, want, "kafka-configs --describe {what}");
    }
}

/// Topic configs set on each topic (DescribeConfigs over the wire): the manifest's are there.
fn check_topic_configs(boot: &str, m: &Value) {
    for (name, t) in m["topics"].as_object().expect("topics") {
        let got = mirror::topic_configs(boot, name);
        for (k, v) in t["configs"].as_object().expect("configs") {
            assert_eq!(
                got.get(k).cloned().flatten().as_deref(),
                Some(s(v)),
                "{name}: config {k}"
            );
        }
    }
}

/// SCRAM on the SASL listener (raw wire, our RFC 5802 client): every user with its password,
/// and SASL_AUTHENTICATION_FAILED for a wrong password and for a mechanism the user lacks.
fn check_scram(sasl_addr: &str, m: &Value) {
    for (user, creds) in m["scram"].as_object().expect("scram") {
        let pw = s(&m["scram_passwords"][user]);
        for c in creds.as_array().expect("credentials") {
            let mech = s(&c[0]);
            let mut conn = WireClient::connect(sasl_addr).expect("connect SASL listener");
            let ok = sasl::scram(&mut conn, mech, user, pw).expect("SCRAM exchange");
            assert!(
                matches!(ok, AuthOutcome::Ok { .. }),
                "{user} {mech} with its password: {ok:?}"
            );
            conn.metadata(Some(&["orders"]))
                .expect("Metadata on the authenticated connection");
            let mut conn = WireClient::connect(sasl_addr).expect("connect SASL listener");
            let bad = sasl::scram(&mut conn, mech, user, "not-the-password").expect("SCRAM");
            assert!(
                matches!(bad, AuthOutcome::Authenticate { code, .. } if code == SASL_AUTHENTICATION_FAILED),
                "{user} {mech} with a wrong password: {bad:?}"
            );
        }
    }
    // alice has SCRAM-SHA-512 only.
    let mut conn = WireClient::connect(sasl_addr).expect("connect SASL listener");
    let other = sasl::scram(&mut conn, "SCRAM-SHA-256", "alice", "alice-secret").expect("SCRAM");
    assert!(
        matches!(other, AuthOutcome::Authenticate { code, .. } if code == SASL_AUTHENTICATION_FAILED),
        "alice with SCRAM-SHA-256, which she has no credential for: {other:?}"
    );
}

/// librdkafka as alice over SCRAM-SHA-512: her ACLs still decide (Read on orders and group
/// billing: a consume works; no Write: a produce is refused).
fn check_acls_enforced(sasl_addr: &str) {
    let alice = [
        "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanisms=SCRAM-SHA-512",
        "sasl.username=alice",
        "sasl.password=alice-secret",
    ];
    let probe = |args: &[&str]| {
        let ran = proc::run_ok(
            python::script("authz_probe.py")
                .args(args)
                .args(alice)
                .arg("enable.auto.commit=false"),
            Duration::from_secs(60),
        );
        ran.stdout.trim().to_string()
    };
    assert_eq!(
        probe(&[sasl_addr, "consume", "orders", "billing"]),
        "OK",
        "alice consuming orders in group billing"
    );
    assert_eq!(
        probe(&[sasl_addr, "produce", "orders"]),
        "ERR TOPIC_AUTHORIZATION_FAILED",
        "alice producing to orders"
    );
}

/// `kmirror mirror list` / `describe`: the mirror, its source, its settings and each
/// partition's state (offsets against the source are unknown with the source gone). With its
/// source gone, a mirrored partition is reported FAILED some 20 s after its fetcher starts
/// (d07dd8c: 22 s), and FAILED is kept across restarts; `fresh`: the node started moments
/// ago, the state must be the manifest's; else FAILED because of the source is accepted too.
fn check_mirror(boot: &str, m: &Value, fresh: bool) {
    let list = mirror::cli_ok(boot, &["list", "--json"]).stdout;
    let line = list
        .lines()
        .find(|l| l.starts_with('['))
        .expect("list --json");
    let got: Value = serde_json::from_str(line).expect("list JSON");
    let pick = |v: &Value| -> Vec<Value> {
        v.as_array()
            .expect("mirrors")
            .iter()
            .map(|x| json!([x["mirror"], x["source_bootstrap"], x["topic_count"]]))
            .collect()
    };
    assert_eq!(pick(&got), pick(&m["mirror_list"]), "mirror list");
    let rows = |rows: Vec<(String, String, i64, String, i64)>| -> BTreeSet<_> {
        rows.into_iter().collect()
    };
    let source = s(&m["mirror_source"]);
    let got = rows(
        mirror::describe(boot, Some("m1"))
            .into_iter()
            .map(|r| {
                let lme = r.raw["last_mirrored_epoch"].as_i64().unwrap_or(-2);
                let state = if !fresh && r.state == "FAILED" && r.reason().contains(source) {
                    "MIRRORING".to_string()
                } else {
                    r.state.clone()
                };
                (r.mirror, r.topic, r.partition as i64, state, lme)
            })
            .collect(),
    );
    let want = rows(
        m["mirror_describe"]
            .as_array()
            .expect("mirror_describe")
            .iter()
            .map(|r| {
                (
                    s(&r["mirror"]).to_string(),
                    s(&r["topic"]).to_string(),
                    i(&r["partition"]),
                    s(&r["state"]).to_string(),
                    i(&r["last_mirrored_epoch"]),
                )
            })
            .collect(),
    );
    assert_eq!(
        got, want,
        "mirror describe: (mirror, topic, partition, state, last mirrored epoch)"
    );
    let table = mirror::cli_ok(boot, &["describe", "m1"]).stdout;
    let settings: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("Settings of mirror"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let want: Vec<&str> = m["mirror_settings"]
        .as_array()
        .expect("mirror_settings")
        .iter()
        .map(s)
        .collect();
    assert_eq!(settings, want, "mirror settings in describe:\n{table}");
}

/// The mirrored topic refuses produces (raw wire and librdkafka) and keeps its end offsets.
fn check_read_only(boot: &str, m: &Value) {
    let ends = &topics(m)["src-live"].1;
    let mut c = WireClient::connect_leader(boot, "src-live", 0).expect("connect");
    let (code, _) = c
        .produce_raw("src-live", 0, records::batch(&[b"no"], 1), -1)
        .expect("Produce");
    assert_eq!(
        code, READ_ONLY_TOPIC,
        "raw produce to the mirror topic src-live"
    );
    let out = py(PY_PRODUCE, &[boot, "src-live", "1", "refused"]);
    assert!(
        out.trim().starts_with(&format!("ERR {READ_ONLY_TOPIC} ")),
        "librdkafka produce to the mirror topic src-live: {out}"
    );
    assert_eq!(
        &mirror::end_offsets(boot, "src-live", 2),
        ends,
        "src-live ends"
    );
}

type Job<'a> = Box<dyn FnOnce() + Send + 'a>;

/// Runs `jobs` on two threads, in order (the last first); a job's panic fails the test.
fn two_at_a_time(jobs: Vec<Job<'_>>) {
    let queue = std::sync::Mutex::new(jobs);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let job = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                match job {
                    Some(job) => job(),
                    None => break,
                }
            });
        }
    });
}

#[test]
fn a_one_node_data_dir_written_by_d07dd8c_opens_with_everything_intact() {
    let t0 = Instant::now();
    let m = manifest();
    // A node of the binary under test with its own listeners; its fresh data dir is then
    // replaced by the fixture's.
    let mut node = KmirrorNode::builder()
        .listeners(&["PLAINTEXT", "SASL_PLAINTEXT"])
        .args(SERVE_FLAGS)
        .start();
    assert!(node.stop(), "clean stop of the fresh node");
    let data = node.data_dir();
    std::fs::remove_dir_all(&data).expect("remove fresh data dir");
    std::fs::create_dir_all(&data).expect("data dir");
    proc::run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(fixture("datadir-d07dd8c.tar.gz"))
            .arg("-C")
            .arg(&data),
        Duration::from_secs(60),
    );
    node.start_again();
    let boot = node.addr();
    let sasl_addr = node.listener_addr("SASL_PLAINTEXT");
    eprintln!("upgraded node up after {:?}", t0.elapsed());
    // Before any client asks for a coordinator: the described-only internal topics of the
    // old version are real ones now, and the groups' commits have moved into
    // `__consumer_offsets`.
    check_offsets_topic_holds_the_commits(&boot, &m);

    check_mirror(&boot, &m, true);
    check_metadata(&boot, &m);
    check_logs(&boot, &m, &BTreeMap::new());
    check_topic_configs(&boot, &m);
    let later = check_records_librdkafka(&boot, &m);
    assert!(
        later.is_empty(),
        "records past the manifest's ends: {later:?}"
    );
    check_admin_librdkafka(&boot, &m);
    check_scram(&sasl_addr, &m);
    eprintln!("wire and librdkafka checks done after {:?}", t0.elapsed());
    // The Java checks, two JVMs at a time (each is mostly JVM start-up); the first record
    // dump compiles RecordDump while a tool runs.
    let (b, mm) = (boot.as_str(), &m);
    let names: Vec<String> = topics(&m).keys().cloned().collect();
    let mut tools: Vec<Job<'_>> = vec![
        Box::new(move || check_groups_java(b, mm)),
        Box::new(move || check_transactions_java(b, mm)),
        Box::new(move || check_acls_java(b, mm)),
        Box::new(move || check_configs_java(b, mm, &["clients", "users"])),
        Box::new(move || check_configs_java(b, mm, &["user alice", "user bob"])),
        Box::new(move || check_configs_java(b, mm, &["user alice client c2", "brokers default"])),
    ];
    let mut jobs: Vec<Job<'_>> = Vec::new();
    for t in &names {
        jobs.push(Box::new(move || check_records_java(b, mm, t)));
        jobs.extend(tools.pop());
    }
    jobs.extend(tools);
    jobs.reverse();
    two_at_a_time(jobs);
    eprintln!("Java checks done after {:?}", t0.elapsed());

    // The failed-over topic is writable: one record per partition lands at the old end.
    check_read_only(&boot, &m);
    let failed_ends = topics(&m)["src-failed"].1.clone();
    let mut c = WireClient::connect_leader(&boot, "src-failed", 0).expect("connect");
    let (code, base) = c
        .produce_raw(
            "src-failed",
            0,
            records::batch(&[b"after-upgrade-0"], 1),
            -1,
        )
        .expect("Produce");
    assert_eq!(
        (code, base),
        (0, failed_ends[0]),
        "raw produce to the failed-over topic src-failed"
    );
    let out = py(PY_PRODUCE, &[&boot, "src-failed", "1", "after-upgrade-1"]);
    assert_eq!(
        out.trim(),
        format!("OK {}", failed_ends[1]),
        "librdkafka produce to the failed-over topic src-failed"
    );
    let appended: BTreeMap<(String, i32), i64> = [
        (("src-failed".to_string(), 0), 1),
        (("src-failed".to_string(), 1), 1),
    ]
    .into();
    eprintln!("first start checked after {:?}", t0.elapsed());

    // Once more after a clean restart: converted once, durably.
    kmirror_tests::BrokerUnderTest::restart(&mut node);
    check_metadata(&boot, &m);
    check_logs(&boot, &m, &appended);
    let later = check_records_librdkafka(&boot, &m);
    let mut later: Vec<(i64, i64, Value)> = later
        .iter()
        .map(|r| (i(&r["partition"]), i(&r["offset"]), r["value"].clone()))
        .collect();
    later.sort_by_key(|(p, o, _)| (*p, *o));
    assert_eq!(
        later,
        vec![
            (0, failed_ends[0], json!("after-upgrade-0")),
            (1, failed_ends[1], json!("after-upgrade-1")),
        ],
        "records written after the upgrade"
    );
    check_admin_librdkafka(&boot, &m);
    check_scram(&sasl_addr, &m);
    check_mirror(&boot, &m, false);
    check_read_only(&boot, &m);
    check_configs_java(&boot, &m, &["clients", "user alice client c2"]);
    // Last: alice's consumer joins group billing and exits without leaving it.
    check_acls_enforced(&sasl_addr);
    eprintln!("restart checked; took {:?}", t0.elapsed());
    assert!(node.stop(), "clean stop at the end");
}
