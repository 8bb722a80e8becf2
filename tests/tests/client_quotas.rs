//! Issue 11, step 3: client quotas. `kafka-configs` sets, describes and deletes quotas for
//! users, client-ids, user+client-id and the `<default>` entities against kmirror and against
//! Apache Kafka 4.1.1 with the same outcomes; and byte-rate enforcement: a producer (and a
//! consumer) whose client-id has a 100 KB/s quota is held near it and sees throttle time, on
//! kmirror as on Kafka, while another client-id is not slowed.

use std::time::{Duration, Instant};

use kmirror_tests::helpers::str_bytes as sb;
use kmirror_tests::java::{self, tools};
use kmirror_tests::{mirror, proc, python, KafkaCluster, KmirrorNode};

const CONFIGS: &str = "kafka.admin.ConfigCommand";

fn configs(boot: &str, args: &[&str]) -> proc::Ran {
    let mut cmd = java::tool(CONFIGS);
    cmd.args(["--bootstrap-server", boot]).args(args);
    proc::run(&mut cmd, Duration::from_secs(90))
}

/// What an operator sees of one step: success, or the exception named, plus the sorted
/// non-empty output lines.
fn outcome(ran: &proc::Ran) -> String {
    if !ran.status.success() {
        // The innermost exception named (kafka-configs wraps the broker's in an
        // ExecutionException), or how the tool refused the arguments itself.
        let names: Vec<&str> = ran
            .stderr
            .lines()
            .chain(ran.stdout.lines())
            .flat_map(str::split_whitespace)
            .filter(|w| w.contains("Exception") && !w.contains("ExecutionException"))
            .map(|w| w.trim_end_matches(':').rsplit('.').next().unwrap_or(w))
            .collect();
        return match names.first() {
            Some(n) => format!("error {n}"),
            None => "error refused by the tool".into(),
        };
    }
    let mut lines: Vec<&str> = ran
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines.join("\n")
}

fn walk(boot: &str) -> Vec<(String, String)> {
    let steps: Vec<(&str, Vec<&str>)> = vec![
        (
            "alter user alice",
            vec![
                "--alter",
                "--add-config",
                "producer_byte_rate=1024,consumer_byte_rate=2048",
                "--entity-type",
                "users",
                "--entity-name",
                "alice",
            ],
        ),
        (
            "alter client c1",
            vec![
                "--alter",
                "--add-config",
                "producer_byte_rate=4096",
                "--entity-type",
                "clients",
                "--entity-name",
                "c1",
            ],
        ),
        (
            "alter alice+c1",
            vec![
                "--alter",
                "--add-config",
                "request_percentage=12.5,controller_mutation_rate=3",
                "--entity-type",
                "users",
                "--entity-name",
                "alice",
                "--entity-type",
                "clients",
                "--entity-name",
                "c1",
            ],
        ),
        (
            "alter default user",
            vec![
                "--alter",
                "--add-config",
                "consumer_byte_rate=1000",
                "--entity-type",
                "users",
                "--entity-default",
            ],
        ),
        (
            "alter default client",
            vec![
                "--alter",
                "--add-config",
                "producer_byte_rate=777",
                "--entity-type",
                "clients",
                "--entity-default",
            ],
        ),
        (
            "alter bad key",
            vec![
                "--alter",
                "--add-config",
                "bogus_rate=5",
                "--entity-type",
                "clients",
                "--entity-name",
                "c2",
            ],
        ),
        (
            "alter fractional byte rate",
            vec![
                "--alter",
                "--add-config",
                "producer_byte_rate=10.5",
                "--entity-type",
                "clients",
                "--entity-name",
                "c2",
            ],
        ),
        (
            "describe users",
            vec!["--describe", "--entity-type", "users"],
        ),
        (
            "describe clients",
            vec!["--describe", "--entity-type", "clients"],
        ),
        (
            "describe alice",
            vec![
                "--describe",
                "--entity-type",
                "users",
                "--entity-name",
                "alice",
            ],
        ),
        (
            "describe default user",
            vec!["--describe", "--entity-type", "users", "--entity-default"],
        ),
        (
            "describe alice+c1",
            vec![
                "--describe",
                "--entity-type",
                "users",
                "--entity-name",
                "alice",
                "--entity-type",
                "clients",
                "--entity-name",
                "c1",
            ],
        ),
        (
            "describe users+clients",
            vec![
                "--describe",
                "--entity-type",
                "users",
                "--entity-type",
                "clients",
            ],
        ),
        (
            "delete alice producer",
            vec![
                "--alter",
                "--delete-config",
                "producer_byte_rate",
                "--entity-type",
                "users",
                "--entity-name",
                "alice",
            ],
        ),
        (
            "delete c1 producer",
            vec![
                "--alter",
                "--delete-config",
                "producer_byte_rate",
                "--entity-type",
                "clients",
                "--entity-name",
                "c1",
            ],
        ),
        (
            "describe users after delete",
            vec!["--describe", "--entity-type", "users"],
        ),
        (
            "describe clients after delete",
            vec!["--describe", "--entity-type", "clients"],
        ),
    ];
    steps
        .into_iter()
        .map(|(name, args)| (name.to_owned(), outcome(&configs(boot, &args))))
        .collect()
}

#[test]
fn kafka_configs_sets_describes_and_deletes_client_quotas_like_kafka() {
    let kafka = KafkaCluster::single();
    let want = walk(&kafka.bootstrap());
    drop(kafka);
    let node = KmirrorNode::start();
    let got = walk(&node.addr());
    for ((step, w), (_, g)) in want.iter().zip(&got) {
        eprintln!("== {step}\n Kafka:   {w:?}\n kmirror: {g:?}");
    }
    assert!(
        want.iter()
            .any(|(s, o)| s == "describe alice" && o.contains("consumer_byte_rate=2048")),
        "Kafka's walk did not set alice's quota: {want:?}"
    );
    assert_eq!(
        got, want,
        "kmirror's kafka-configs outcomes differ from Kafka's"
    );
    // Durable: the quotas survive a restart.
    let mut node = node;
    node.stop();
    node.start_again();
    let after = outcome(&configs(
        &node.addr(),
        &[
            "--describe",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
        ],
    ));
    let before = &want
        .iter()
        .find(|(s, _)| s == "describe users after delete")
        .expect("step")
        .1;
    assert!(
        before.contains(&after) && after.contains("consumer_byte_rate=2048.0"),
        "after restart: {after:?} (before: {before:?})"
    );
}

/// Runs ProducerPerformance as `client_id` writing `records` of 1000 bytes as fast as it
/// can; (seconds taken, the client's produce-throttle-time-avg).
fn produce(boot: &str, topic: &str, client_id: &str, records: u32) -> (f64, f64) {
    let start = Instant::now();
    let ran = java::run_tool(
        tools::PRODUCER_PERFORMANCE,
        &[
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            "1000",
            "--throughput",
            "-1",
            "--print-metrics",
            "--producer-props",
            &format!("bootstrap.servers={boot}"),
            &format!("client.id={client_id}"),
            "acks=1",
            "linger.ms=5",
        ],
        Duration::from_secs(240),
    );
    let secs = start.elapsed().as_secs_f64();
    (secs, metric(&ran.stdout, "produce-throttle-time-avg"))
}

/// Runs ConsumerPerformance as `client_id` reading `records` from the start;
/// (seconds taken, the client's fetch-throttle-time-avg).
fn consume(boot: &str, topic: &str, client_id: &str, records: u32) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("c.properties");
    std::fs::write(
        &props,
        format!("client.id={client_id}\nauto.offset.reset=earliest\n"),
    )
    .unwrap();
    let start = Instant::now();
    let ran = java::run_tool(
        tools::CONSUMER_PERFORMANCE,
        &[
            "--bootstrap-server",
            boot,
            "--topic",
            topic,
            "--messages",
            &records.to_string(),
            "--group",
            &format!("g-{client_id}"),
            "--print-metrics",
            "--timeout",
            "120000",
            "--consumer.config",
            props.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    let secs = start.elapsed().as_secs_f64();
    (secs, metric(&ran.stdout, "fetch-throttle-time-avg"))
}

/// A metric of `--print-metrics` (`group:name:{tags} : value`), 0 when absent or NaN.
fn metric(out: &str, name: &str) -> f64 {
    out.lines()
        .filter(|l| l.contains(&format!(":{name}:")))
        .filter_map(|l| l.rsplit(':').next()?.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
}

const QUOTA: u32 = 100_000;
/// 2.5 MB: the first ~10 windows' worth passes at once (Kafka's rate counts at least 10 s),
/// the rest at the quota, so about 15 s.
const RECORDS: u32 = 2500;

fn set_client_quota(boot: &str, client: &str, key: &str) {
    let ran = configs(
        boot,
        &[
            "--alter",
            "--add-config",
            &format!("{key}={QUOTA}"),
            "--entity-type",
            "clients",
            "--entity-name",
            client,
        ],
    );
    assert!(ran.status.success(), "{}\n{}", ran.stdout, ran.stderr);
}

fn create_topic(boot: &str, topic: &str) {
    java::run_tool(
        tools::TOPIC_COMMAND,
        &[
            "--bootstrap-server",
            boot,
            "--create",
            "--topic",
            topic,
            "--partitions",
            "1",
        ],
        Duration::from_secs(90),
    );
}

/// librdkafka (`tests/python/quota_client.py`) producing or consuming `records` as
/// `client_id`: (seconds taken, throttle responses seen, largest throttle ms).
fn librdkafka(mode: &str, boot: &str, client_id: &str, records: u32) -> (f64, f64, f64) {
    librdkafka_sized(mode, boot, client_id, records, 16384)
}

/// [`librdkafka`] with the producer's `batch.size`.
fn librdkafka_sized(
    mode: &str,
    boot: &str,
    client_id: &str,
    records: u32,
    batch_size: u32,
) -> (f64, f64, f64) {
    let ran = proc::run_ok(
        python::script("quota_client.py").args([
            mode,
            boot,
            "quota-t",
            client_id,
            &records.to_string(),
            &batch_size.to_string(),
        ]),
        Duration::from_secs(240),
    );
    let field = |key: &str, i: usize| -> f64 {
        ran.stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().nth(i)?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {}", ran.stdout))
    };
    (
        field("SECONDS ", 0),
        field("THROTTLES ", 0),
        field("THROTTLES ", 1),
    )
}

/// Records librdkafka's quota-limited clients move: 1 MB passes in the first windows, the
/// other 0.8 MB at the quota (about 8 s).
const RDK_RECORDS: u32 = 1800;

/// The Java and librdkafka clients against one broker: ([slow produce s, its throttle, fast
/// produce s, slow consume s, its throttle, fast consume s], [librdkafka produce s, throttle
/// responses, consume s, throttle responses]). The four quota-limited clients run together:
/// each client id has its own quota, so each takes as long as it would alone. The unlimited
/// ones, the yardstick, run alone: the producer first (it writes what every consumer reads),
/// the consumer last.
fn enforcement(boot: &str) -> ([f64; 6], [f64; 4]) {
    create_topic(boot, "quota-t");
    for (client, key) in [
        ("slow-p", "producer_byte_rate"),
        ("slow-c", "consumer_byte_rate"),
        ("slow-p-rdk", "producer_byte_rate"),
        ("slow-c-rdk", "consumer_byte_rate"),
    ] {
        set_client_quota(boot, client, key);
    }
    // Quotas reach Kafka's brokers through metadata propagation: give it a moment.
    std::thread::sleep(Duration::from_secs(2));
    let (fast_p, _) = produce(boot, "quota-t", "fast-p", RECORDS);
    let ((slow_p, slow_p_thr), (slow_c, slow_c_thr), (p_s, p_n, p_max), (c_s, c_n, c_max)) =
        std::thread::scope(|s| {
            let sp = s.spawn(|| produce(boot, "quota-t", "slow-p", RECORDS));
            let sc = s.spawn(|| consume(boot, "quota-t", "slow-c", RECORDS));
            let rp = s.spawn(|| librdkafka("produce", boot, "slow-p-rdk", RDK_RECORDS));
            let rc = s.spawn(|| librdkafka("consume", boot, "slow-c-rdk", RDK_RECORDS));
            (
                sp.join().unwrap(),
                sc.join().unwrap(),
                rp.join().unwrap(),
                rc.join().unwrap(),
            )
        });
    let (fast_c, _) = consume(boot, "quota-t", "fast-c", RECORDS);
    eprintln!("{boot}: produce {slow_p:.1}s (throttle avg {slow_p_thr:.0} ms) vs {fast_p:.1}s; consume {slow_c:.1}s (throttle avg {slow_c_thr:.0} ms) vs {fast_c:.1}s");
    eprintln!("{boot}: librdkafka produce {p_s:.1}s ({p_n} throttles, max {p_max} ms), consume {c_s:.1}s ({c_n} throttles, max {c_max} ms)");
    (
        [slow_p, slow_p_thr, fast_p, slow_c, slow_c_thr, fast_c],
        [p_s, p_n, c_s, c_n],
    )
}

#[test]
fn produce_and_fetch_byte_rate_quotas_hold_a_client_id_near_its_quota_like_kafka() {
    // Timing-sensitive: not next to other heavy tests.
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let (want, want_rdk) = enforcement(&kafka.bootstrap());
    drop(kafka);
    let maddr = format!("127.0.0.1:{}", proc::free_port());
    let node = KmirrorNode::builder().args(&["--metrics", &maddr]).start();
    let (got, got_rdk) = enforcement(&node.addr());
    let m = kmirror_tests::metrics::scrape(&maddr);
    for name in [
        "kmirror_quota_throttled_produce_requests_total",
        "kmirror_quota_throttled_fetch_requests_total",
        "kmirror_quota_produce_throttle_ms_total",
        "kmirror_quota_fetch_throttle_ms_total",
    ] {
        let v = m.value(name, &[]).unwrap_or(0.0);
        assert!(v > 0.0, "{name} = {v} after throttled clients");
    }
    eprintln!(
        "[slow produce s, throttle avg ms, fast produce s, slow consume s, throttle avg ms, fast consume s]\n Kafka:   {want:?}\n kmirror: {got:?}"
    );
    let bytes = f64::from(RECORDS) * 1000.0;
    // The part over the 10-window burst goes at the quota.
    let at_quota_s = (bytes - 10.0 * f64::from(QUOTA)) / f64::from(QUOTA);
    for (who, r) in [("Kafka", &want), ("kmirror", &got)] {
        for (what, slow, thr, fast) in
            [("produce", r[0], r[1], r[2]), ("consume", r[3], r[4], r[5])]
        {
            assert!(
                slow >= at_quota_s * 0.7,
                "{who} {what}: the quota-limited client took {slow:.1}s, expected >= {:.1}s",
                at_quota_s * 0.7
            );
            assert!(thr > 0.0, "{who} {what}: the client saw no throttle time");
            assert!(
                fast < slow / 2.0,
                "{who} {what}: the unlimited client took {fast:.1}s vs {slow:.1}s"
            );
        }
    }
    eprintln!(
        "librdkafka [produce s, throttles, consume s, throttles]\n Kafka:   {want_rdk:?}\n kmirror: {got_rdk:?}"
    );
    let rdk_at_quota_s =
        (f64::from(RDK_RECORDS) * 1000.0 - 10.0 * f64::from(QUOTA)) / f64::from(QUOTA);
    for (who, r) in [("Kafka", &want_rdk), ("kmirror", &got_rdk)] {
        for (what, secs, throttles) in [("produce", r[0], r[1]), ("consume", r[2], r[3])] {
            assert!(
                secs >= rdk_at_quota_s * 0.7,
                "{who} librdkafka {what}: took {secs:.1}s, expected >= {:.1}s",
                rdk_at_quota_s * 0.7
            );
            assert!(
                throttles > 0.0,
                "{who} librdkafka {what}: no throttle_time_ms reported"
            );
        }
    }
    for (i, what) in [(0, "librdkafka produce"), (2, "librdkafka consume")] {
        let (g, w) = (got_rdk[i], want_rdk[i]);
        assert!(
            (g - w).abs() <= w * 0.3 + 2.0,
            "{what}: kmirror took {g:.1}s, Kafka {w:.1}s (more than 30% apart)"
        );
    }
    for (i, what) in [(0, "produce"), (3, "consume")] {
        let (g, w) = (got[i], want[i]);
        assert!(
            (g - w).abs() <= w * 0.3 + 2.0,
            "{what}: kmirror took {g:.1}s, Kafka {w:.1}s (more than 30% apart)"
        );
    }
}

/// `kafka-configs --describe` of users and clients, as sorted lines.
fn described(boot: &str) -> String {
    let mut all = Vec::new();
    for t in ["users", "clients"] {
        all.push(outcome(&configs(boot, &["--describe", "--entity-type", t])));
    }
    all.join("\n")
}

fn wait_for(boot: &str, want: &str, within: Duration) -> String {
    let end = Instant::now() + within;
    loop {
        let got = described(boot);
        if got == want || Instant::now() > end {
            return got;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn exact_quota_sync_mirrors_a_kafka_sources_client_quotas_and_removes_what_it_lacks() {
    let kafka = KafkaCluster::single();
    let node = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("orders", 1, &[]);
    let set = |args: &[&str]| {
        let ran = configs(&src, args);
        assert!(ran.status.success(), "{}\n{}", ran.stdout, ran.stderr);
    };
    set(&[
        "--alter",
        "--add-config",
        "producer_byte_rate=1024,consumer_byte_rate=2048",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
    ]);
    set(&[
        "--alter",
        "--add-config",
        "producer_byte_rate=777",
        "--entity-type",
        "clients",
        "--entity-default",
    ]);
    // A quota only kmirror has is not the source's: the sync removes it.
    let ran = configs(
        &dst,
        &[
            "--alter",
            "--add-config",
            "consumer_byte_rate=5",
            "--entity-type",
            "clients",
            "--entity-name",
            "local-only",
        ],
    );
    assert!(ran.status.success(), "{}\n{}", ran.stdout, ran.stderr);
    let want = described(&src);
    assert!(want.contains("alice"), "source quotas: {want}");

    // The seed's exact mode (the default, owned, leaves local quotas alone: see acl.rs
    // `two_kafka_sources_and_a_local_admin_keep_their_own_acls_quotas_and_groups`).
    mirror::create(
        &dst,
        "M",
        &src,
        &[
            ("mirror.metadata.sync.interval.ms", "300"),
            ("mirror.quota.sync.mode", "exact"),
        ],
    );
    mirror::add_topics(&dst, "M", &["orders"]);
    let got = wait_for(&dst, &want, Duration::from_secs(30));
    assert_eq!(got, want, "source client quotas did not reach kmirror");

    // Deleted on the source: deleted on kmirror.
    set(&[
        "--alter",
        "--delete-config",
        "producer_byte_rate,consumer_byte_rate",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
    ]);
    let want = described(&src);
    assert!(!want.contains("alice"), "{want}");
    let got = wait_for(&dst, &want, Duration::from_secs(30));
    assert_eq!(got, want, "quotas deleted on the source stay on kmirror");
}

type Ent<'a> = &'a [(&'a str, Option<&'a str>)];
/// (key, value, remove)
type Ops<'a> = &'a [(&'a str, f64, bool)];
/// (entity type, match type, match)
type Component<'a> = (&'a str, i8, Option<&'a str>);

fn alter_req(
    entries: &[(Ent<'_>, Ops<'_>)],
    validate_only: bool,
) -> kafka_protocol::messages::AlterClientQuotasRequest {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    kafka_protocol::messages::AlterClientQuotasRequest::default()
        .with_validate_only(validate_only)
        .with_entries(
            entries
                .iter()
                .map(|(e, ops)| {
                    EntryData::default()
                        .with_entity(
                            e.iter()
                                .map(|(t, n)| {
                                    EntityData::default()
                                        .with_entity_type(sb(t))
                                        .with_entity_name(n.map(sb))
                                })
                                .collect(),
                        )
                        .with_ops(
                            ops.iter()
                                .map(|(k, v, rm)| {
                                    OpData::default()
                                        .with_key(sb(k))
                                        .with_value(*v)
                                        .with_remove(*rm)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn describe_req(
    comps: &[Component<'_>],
    strict: bool,
) -> kafka_protocol::messages::DescribeClientQuotasRequest {
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
    kafka_protocol::messages::DescribeClientQuotasRequest::default()
        .with_strict(strict)
        .with_components(
            comps
                .iter()
                .map(|(t, m, n)| {
                    ComponentData::default()
                        .with_entity_type(sb(t))
                        .with_match_type(*m)
                        .with_match(n.map(sb))
                })
                .collect(),
        )
}

/// The AlterClientQuotas / DescribeClientQuotas requests of the walk, each answer as a
/// comparable line (error codes; entries sorted).
fn wire_walk(boot: &str) -> Vec<String> {
    const EXACT: i8 = 0;
    const DEFAULT: i8 = 1;
    const ANY: i8 = 2;
    let mut c = kmirror_tests::WireClient::connect(boot).expect("connect");
    let mut out = Vec::new();
    let mut alter = |c: &mut kmirror_tests::WireClient,
                     what: &str,
                     entries: &[(Ent<'_>, Ops<'_>)],
                     validate_only: bool| {
        let r = c
            .send(alter_req(entries, validate_only))
            .expect("AlterClientQuotas");
        let mut codes: Vec<String> = r
            .entries
            .iter()
            .map(|e| {
                let mut ent: Vec<String> = e
                    .entity
                    .iter()
                    .map(|d| format!("{}={:?}", d.entity_type, d.entity_name.as_deref()))
                    .collect();
                ent.sort();
                format!("{}:{}", ent.join("+"), e.error_code)
            })
            .collect();
        codes.sort();
        out.push(format!("alter {what}: {}", codes.join(", ")));
    };
    let (u, cl) = ("user", "client-id");
    alter(
        &mut c,
        "valid",
        &[
            (
                &[(u, Some("alice"))],
                &[("producer_byte_rate", 1000.0, false)],
            ),
            (&[(u, None)], &[("consumer_byte_rate", 2000.0, false)]),
            (
                &[(u, Some("alice")), (cl, Some("app"))],
                &[("request_percentage", 50.0, false)],
            ),
            (&[(cl, None)], &[("producer_byte_rate", 3000.0, false)]),
            (
                &[(cl, Some("app"))],
                &[("controller_mutation_rate", 1.5, false)],
            ),
        ],
        false,
    );
    alter(
        &mut c,
        "unknown key",
        &[(&[(u, Some("bob"))], &[("bogus", 1.0, false)])],
        false,
    );
    alter(
        &mut c,
        "fractional long",
        &[(&[(u, Some("bob"))], &[("consumer_byte_rate", 1.5, false)])],
        false,
    );
    alter(
        &mut c,
        "unknown entity type",
        &[(
            &[("group", Some("g"))],
            &[("producer_byte_rate", 1.0, false)],
        )],
        false,
    );
    alter(
        &mut c,
        "empty name",
        &[(&[(u, Some(""))], &[("producer_byte_rate", 1.0, false)])],
        false,
    );
    alter(
        &mut c,
        "validate only",
        &[(&[(u, Some("carol"))], &[("producer_byte_rate", 5.0, false)])],
        true,
    );
    alter(
        &mut c,
        "remove absent",
        &[(&[(u, Some("dave"))], &[("producer_byte_rate", 0.0, true)])],
        false,
    );
    let describes: Vec<(&str, Vec<Component<'_>>, bool)> = vec![
        ("all", vec![], false),
        ("all strict", vec![], true),
        ("user alice", vec![(u, EXACT, Some("alice"))], false),
        ("user alice strict", vec![(u, EXACT, Some("alice"))], true),
        ("default user", vec![(u, DEFAULT, None)], false),
        ("any user strict", vec![(u, ANY, None)], true),
        ("any client", vec![(cl, ANY, None)], false),
        (
            "alice + any client",
            vec![(u, EXACT, Some("alice")), (cl, ANY, None)],
            false,
        ),
        ("nobody", vec![(u, EXACT, Some("nobody"))], false),
        ("exact without name", vec![(u, EXACT, None)], false),
        ("default with name", vec![(u, DEFAULT, Some("x"))], false),
        ("unknown type", vec![("group", ANY, None)], false),
        (
            "duplicate type",
            vec![(u, ANY, None), (u, DEFAULT, None)],
            false,
        ),
        (
            "ip with user",
            vec![("ip", ANY, None), (u, ANY, None)],
            false,
        ),
        ("bad match type", vec![(u, 7, None)], false),
    ];
    for (what, comps, strict) in describes {
        let r = c
            .send(describe_req(&comps, strict))
            .expect("DescribeClientQuotas");
        let mut rows: Vec<String> = r
            .entries
            .iter()
            .flatten()
            .map(|e| {
                let mut ent: Vec<String> = e
                    .entity
                    .iter()
                    .map(|d| format!("{}={:?}", d.entity_type, d.entity_name.as_deref()))
                    .collect();
                ent.sort();
                let mut vals: Vec<String> = e
                    .values
                    .iter()
                    .map(|v| format!("{}={}", v.key, v.value))
                    .collect();
                vals.sort();
                format!("{} [{}]", ent.join("+"), vals.join(","))
            })
            .collect();
        rows.sort();
        out.push(format!(
            "describe {what}: code={} entries={:?} {}",
            r.error_code,
            r.entries.as_ref().map(|_| ()),
            rows.join("; ")
        ));
    }
    out
}

#[test]
fn alter_and_describe_client_quotas_answer_every_filter_and_error_like_kafka() {
    let kafka = KafkaCluster::single();
    let want = wire_walk(&kafka.bootstrap());
    drop(kafka);
    let node = KmirrorNode::start();
    let got = wire_walk(&node.addr());
    for (w, g) in want.iter().zip(&got) {
        eprintln!(" Kafka:   {w}\n kmirror: {g}");
    }
    assert!(
        want.iter()
            .any(|l| l.contains("user=Some(\"alice\") [producer_byte_rate=1000]")),
        "Kafka stored nothing? {want:?}"
    );
    assert_eq!(got, want, "kmirror's answers differ from Kafka's");
}

/// What one broker did to clients under a tiny `request_percentage` quota.
#[derive(Debug)]
struct RequestQuotaSeen {
    /// Metadata requests the limited client-id sent before its first throttled answer.
    until_throttled: usize,
    /// The largest `throttle_time_ms` it was answered with.
    max_throttle_ms: i32,
    /// A throttle time, and how long the answer to the next request then took (the channel
    /// is muted for that long, KIP-219).
    muted: (i32, Duration),
    /// The largest throttle time the unlimited client-id saw.
    other_max_throttle_ms: i32,
    /// librdkafka's throttle_cb under the same quota: (callbacks, largest ms).
    rdk: (f64, f64),
}

/// Sets `request_percentage=0.01` (100 µs of broker time per second) for `req-slow` and
/// 0.001 for `req-rdk`, then drives Metadata requests as `req-slow` and as `req-fast` over the
/// wire, and a librdkafka producer as `req-rdk` (3 MB in requests of up to 900 KB: enough work
/// for the tighter quota on either broker, and few requests to wait out on Kafka).
fn request_quota(boot: &str) -> RequestQuotaSeen {
    use kmirror_tests::wire::WireClient;
    create_topic(boot, "quota-t");
    for (client, pct) in [("req-slow", "0.01"), ("req-rdk", "0.001")] {
        let ran = configs(
            boot,
            &[
                "--alter",
                "--add-config",
                &format!("request_percentage={pct}"),
                "--entity-type",
                "clients",
                "--entity-name",
                client,
            ],
        );
        assert!(ran.status.success(), "{}\n{}", ran.stdout, ran.stderr);
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut slow = WireClient::connect(boot).expect("connect");
    slow.set_client_id("req-slow");
    let mut fast = WireClient::connect(boot).expect("connect");
    fast.set_client_id("req-fast");
    let (mut until_throttled, mut max_throttle_ms, mut other) = (None, 0, 0);
    let mut prev = 0;
    let mut muted = None;
    let end = Instant::now() + Duration::from_secs(30);
    for n in 1.. {
        if Instant::now() > end {
            break;
        }
        let sent = Instant::now();
        let t = slow.metadata(None).expect("metadata").throttle_time_ms;
        let took = sent.elapsed();
        if prev >= 100 {
            muted = Some((prev, took));
            break;
        }
        if t > 0 && until_throttled.is_none() {
            until_throttled = Some(n);
        }
        max_throttle_ms = max_throttle_ms.max(t);
        prev = t;
        let f = fast.metadata(None).expect("metadata").throttle_time_ms;
        other = other.max(f);
    }
    let (rdk_s, rdk_n, rdk_max) = librdkafka_sized("produce", boot, "req-rdk", 3000, 900_000);
    let seen = RequestQuotaSeen {
        until_throttled: until_throttled.unwrap_or(usize::MAX),
        max_throttle_ms,
        muted: muted.unwrap_or((prev, Duration::ZERO)),
        other_max_throttle_ms: other,
        rdk: (rdk_n, rdk_max),
    };
    eprintln!("{boot}: {seen:?} (librdkafka took {rdk_s:.1}s)");
    seen
}

#[test]
fn request_percentage_quota_throttles_a_client_ids_requests_and_mutes_its_channel_like_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let want = request_quota(&kafka.bootstrap());
    drop(kafka);
    let node = KmirrorNode::start();
    let got = request_quota(&node.addr());
    for (who, s) in [("Kafka", &want), ("kmirror", &got)] {
        assert!(
            s.until_throttled < usize::MAX,
            "{who}: the limited client-id was never throttled: {s:?}"
        );
        // Kafka bounds a request-quota throttle by one quota window (1 s).
        assert!(
            s.max_throttle_ms > 0 && s.max_throttle_ms <= 1000,
            "{who}: {s:?}"
        );
        let (t, took) = s.muted;
        assert!(
            t >= 100 && took.as_millis() as i32 >= t * 8 / 10 && took < Duration::from_secs(3),
            "{who}: the answer after a {t} ms throttle took {took:?} (channel not muted?)"
        );
        assert_eq!(
            s.other_max_throttle_ms, 0,
            "{who}: the unlimited client-id was throttled"
        );
        assert!(
            s.rdk.0 > 0.0 && s.rdk.1 <= 1000.0,
            "{who}: librdkafka's throttle_cb: {:?}",
            s.rdk
        );
    }
}
