//! Issue 8, hole 8: clients on older protocol versions. Debian's `kcat` (librdkafka 2.0.2,
//! seen with `-d protocol`: ListOffsets v2, Produce v7, Fetch v11, Metadata v4; and the
//! librdkafka compression quirk that needs Produce v0-v2 advertised) and Apache Kafka's Java
//! client 2.1.1 (the oldest Kafka 4 serves, so at most Produce v7, Fetch v10, ListOffsets v4,
//! OffsetCommit v6) produce, consume, use groups and query offsets on kmirror, with records
//! and offsets asserted exactly. Each scenario also runs on Apache Kafka 4.1.1 to validate it.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use kmirror_tests::clients::Client;
use kmirror_tests::proc::{self, Ran};
use kmirror_tests::records::{self, layout};
use kmirror_tests::{deps, KafkaCluster, KmirrorNode, WireClient};

const TS0: i64 = 1_700_000_000_000;

fn kcat(args: &[&str]) -> Command {
    let mut c = Command::new(deps::kcat());
    c.args(args);
    c
}

fn run_kcat(args: &[&str]) -> Ran {
    proc::run_ok(&mut kcat(args), Duration::from_secs(90))
}

/// `P O VALUE` lines.
fn lines(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// The offset kcat -Q prints for one `topic:partition:timestamp` ("topic [p] offset N").
fn query_offset(bootstrap: &str, topic: &str, partition: i32, ts: i64) -> i64 {
    let spec = format!("{topic}:{partition}:{ts}");
    let ran = run_kcat(&["-Q", "-b", bootstrap, "-t", &spec]);
    let line = ran
        .stdout
        .lines()
        .find(|l| l.contains("offset"))
        .unwrap_or_else(|| {
            panic!(
                "kcat -Q {spec} printed no offset:\n{}\n{}",
                ran.stdout, ran.stderr
            )
        });
    line.rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("kcat -Q {spec}: cannot parse {line:?}"))
}

/// kcat's codecs, one partition each, with the RecordBatch compression attribute they store.
const CODECS: [(&str, i16); 5] = [
    ("none", 0),
    ("gzip", 1),
    ("snappy", 2),
    ("lz4", 3),
    ("zstd", 4),
];

/// The kcat scenario: produce with every codec, consume from the beginning, from an offset
/// and from the end, consume in a group and commit, and query offsets by time, end and
/// beginning.
fn kcat_scenario(bootstrap: &str) {
    let mut w = WireClient::connect(bootstrap).expect("connect");
    let parts = CODECS.len() as i32;
    assert_eq!(w.create_topic("kc", parts, 1, &[]).expect("create"), 0);
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("in.txt");
    let f = file.to_str().expect("utf-8 path");
    // Compressible values: librdkafka sends a batch uncompressed when compressing would not
    // shrink it, which tiny values split over several batches (a loaded machine) can do.
    let values = |p: i32| -> Vec<String> {
        (0..10)
            .map(|i| format!("{p}-m{i}-{}", "x".repeat(200)))
            .collect()
    };
    for (p, (codec, attr)) in CODECS.iter().enumerate() {
        let p = p as i32;
        std::fs::write(&file, values(p).join("\n") + "\n").expect("write input");
        run_kcat(&[
            "-P",
            "-b",
            bootstrap,
            "-t",
            "kc",
            "-p",
            &p.to_string(),
            "-z",
            codec,
            "-l",
            f,
        ]);
        // librdkafka < 2.8 compresses only if Produce v0-v2 are advertised (KAFKA-18659):
        // the stored batches must really carry the codec.
        let data = w.fetch_raw("kc", p, 0, 1 << 20, false).expect("fetch");
        let payload = data.records.clone().unwrap_or_default();
        let batches = records::split_batches(&payload);
        assert!(!batches.is_empty(), "no batches in kc-{p}");
        for b in &batches {
            let attrs =
                i16::from_be_bytes([b.bytes[layout::ATTRIBUTES], b.bytes[layout::ATTRIBUTES + 1]]);
            assert_eq!(
                attrs & 7,
                *attr,
                "kc-{p} batch at {} is not {codec} (attributes {attrs:#x})",
                b.base_offset
            );
        }
    }

    // Consume each partition from the beginning: exactly what was produced, at offsets 0..9.
    for p in 0..parts {
        let ran = run_kcat(&[
            "-C",
            "-b",
            bootstrap,
            "-t",
            "kc",
            "-p",
            &p.to_string(),
            "-o",
            "beginning",
            "-e",
            "-f",
            "%p %o %s\n",
        ]);
        let want: Vec<String> = values(p)
            .iter()
            .enumerate()
            .map(|(o, v)| format!("{p} {o} {v}"))
            .collect();
        assert_eq!(lines(&ran.stdout), want, "kcat -C kc-{p}\n{}", ran.stderr);
    }
    // From an absolute offset, and the last 2 (relative to the end: ListOffsets latest).
    let ran = run_kcat(&[
        "-C", "-b", bootstrap, "-t", "kc", "-p", "0", "-o", "7", "-e", "-f", "%o %s\n",
    ]);
    let tail = |p: i32, from: usize| -> Vec<String> {
        values(p)
            .into_iter()
            .enumerate()
            .skip(from)
            .map(|(o, v)| format!("{o} {v}"))
            .collect()
    };
    assert_eq!(lines(&ran.stdout), tail(0, 7));
    let ran = run_kcat(&[
        "-C", "-b", bootstrap, "-t", "kc", "-p", "1", "-o", "-2", "-e", "-f", "%o %s\n",
    ]);
    assert_eq!(lines(&ran.stdout), tail(1, 8));

    // A balanced consumer group: every record once, then the committed offsets are the ends.
    let total = (10 * parts).to_string();
    let ran = run_kcat(&[
        "-b",
        bootstrap,
        "-G",
        "kc-group",
        "-X",
        "auto.offset.reset=earliest",
        "-c",
        &total,
        "-f",
        "%p %o %s\n",
        "kc",
    ]);
    let mut got = lines(&ran.stdout);
    got.sort();
    let mut want: Vec<String> = (0..parts)
        .flat_map(|p| {
            values(p)
                .into_iter()
                .enumerate()
                .map(move |(o, v)| format!("{p} {o} {v}"))
        })
        .collect();
    want.sort();
    assert_eq!(got, want, "kcat -G\n{}", ran.stderr);
    let committed = Client::Librdkafka.committed(bootstrap, "kc-group", "kc", parts);
    assert_eq!(
        committed,
        (0..parts).map(|p| (p, 10)).collect::<BTreeMap<_, _>>(),
        "kcat -G commits"
    );

    // Offsets by time on a partition whose timestamps are known exactly.
    assert_eq!(w.create_topic("kq", 1, 1, &[]).expect("create"), 0);
    for i in 0..3i64 {
        let (e, base) = w
            .produce_raw("kq", 0, records::batch(&[b"q"], TS0 + 1000 * i), -1)
            .expect("produce");
        assert_eq!((e, base), (0, i));
    }
    assert_eq!(query_offset(bootstrap, "kq", 0, TS0 - 1), 0);
    assert_eq!(query_offset(bootstrap, "kq", 0, TS0 + 500), 1);
    assert_eq!(query_offset(bootstrap, "kq", 0, TS0 + 2000), 2);
    assert_eq!(query_offset(bootstrap, "kq", 0, -1), 3, "end");
    assert_eq!(query_offset(bootstrap, "kq", 0, -2), 0, "beginning");
    // kcat starting at a timestamp (s@): ListOffsets by time, then Fetch.
    let from = format!("s@{}", TS0 + 1000);
    let ran = run_kcat(&[
        "-C", "-b", bootstrap, "-t", "kq", "-p", "0", "-o", &from, "-e", "-f", "%o %T\n",
    ]);
    assert_eq!(
        lines(&ran.stdout),
        [format!("1 {}", TS0 + 1000), format!("2 {}", TS0 + 2000)]
    );
}

#[test]
fn debian_kcat_produces_consumes_joins_groups_and_queries_offsets_on_kmirror() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let node = KmirrorNode::start();
    kcat_scenario(&node.addr());
}

#[test]
fn debian_kcat_scenario_holds_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    kcat_scenario(&kafka.bootstrap());
}

/// OldClient.java compiled against kafka-clients 2.1.1 (once per process).
fn old_client() -> Command {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let cp = deps::old_client_classpath();
    let dir = DIR.get_or_init(|| {
        let out = deps::target_dir()
            .join("kmirror-tests-old-client")
            .join(std::process::id().to_string());
        std::fs::create_dir_all(&out).expect("javac output dir");
        let src = deps::workspace_root().join("tests/java/old-client/src/OldClient.java");
        proc::run_ok(
            Command::new(deps::javac())
                .args(["-nowarn", "-d"])
                .arg(&out)
                .arg("-cp")
                .arg(cp)
                .arg(src),
            Duration::from_secs(180),
        );
        out
    });
    let mut c = Command::new(deps::java());
    c.arg("-Xmx256m")
        .arg("-XX:+UseSerialGC")
        .arg("-cp")
        .arg(format!("{}:{cp}", dir.display()))
        .arg("OldClient");
    c
}

/// The 2.1.1 Java client: idempotent lz4 produce of 20 records over 2 partitions, group
/// consume from the beginning, commit; every record exactly once, committed = log end.
fn old_java_scenario(bootstrap: &str) {
    let mut w = WireClient::connect(bootstrap).expect("connect");
    assert_eq!(w.create_topic("old", 2, 1, &[]).expect("create"), 0);
    let ran = proc::run_ok(
        old_client().args([bootstrap, "old", "old-group", "20"]),
        Duration::from_secs(180),
    );
    let mut recs: Vec<String> = ran
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("rec "))
        .map(str::to_string)
        .collect();
    recs.sort();
    // Record i went to partition i % 2, so partition p holds v_p, v_{p+2}, ... at 0, 1, ...
    let mut want: Vec<String> = (0..20)
        .map(|i| format!("{} {} v{i}", i % 2, i / 2))
        .collect();
    want.sort();
    assert_eq!(
        recs, want,
        "records read by the 2.1.1 client\n{}",
        ran.stderr
    );
    // Sorted: the client lists partitions in no fixed order.
    let mut committed: Vec<&str> = ran
        .stdout
        .lines()
        .filter(|l| l.starts_with("committed "))
        .collect();
    committed.sort();
    assert_eq!(
        committed,
        ["committed 0 10", "committed 1 10"],
        "{}",
        ran.stdout
    );
    let mut bounds: Vec<&str> = ran
        .stdout
        .lines()
        .filter(|l| l.starts_with("bounds "))
        .collect();
    bounds.sort();
    assert_eq!(bounds, ["bounds 0 0 10", "bounds 1 0 10"], "{}", ran.stdout);
    // The same committed offsets seen by a current client, and the same log ends over the wire.
    assert_eq!(
        Client::Librdkafka.committed(bootstrap, "old-group", "old", 2),
        BTreeMap::from([(0, 10), (1, 10)])
    );
    for p in 0..2 {
        assert_eq!(w.log_bounds("old", p).expect("bounds"), (0, 10));
    }
}

#[test]
fn java_client_2_1_produces_consumes_and_commits_on_kmirror() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let node = KmirrorNode::start();
    old_java_scenario(&node.addr());
}

#[test]
fn java_client_2_1_scenario_holds_on_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    old_java_scenario(&kafka.bootstrap());
}
