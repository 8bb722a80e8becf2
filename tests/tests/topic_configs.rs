//! Topic configs as Apache Kafka 4.1 has them (issue 11 step 6). Every check runs against
//! Kafka 4.1.1 and kmirror with one expectation:
//! - DescribeConfigs of a fresh topic lists the same keys with the same defaults and types;
//! - every topic config set to a non-default valid value is accepted by CreateTopics,
//!   IncrementalAlterConfigs and AlterConfigs (validate_only and real), and bad values get the
//!   same error code;
//! - compression.type re-compresses produced batches into the topic's codec, and Java and
//!   librdkafka consumers read the same records (key, value, headers, offsets) as on Kafka;
//! - message.timestamp.type=LogAppendTime: the Produce response's log_append_time_ms, the
//!   stored batch and what Java and librdkafka see.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::*;
use kmirror_tests::helpers::{now_ms, str_bytes as s};
use kmirror_tests::java::{self, tools};
use kmirror_tests::records::{self, split_batches};
use kmirror_tests::{mirror, proc, python, BrokerUnderTest, KafkaCluster, KmirrorNode, WireClient};

/// (name, broker bootstrap) of both brokers under test.
fn brokers() -> (KafkaCluster, KmirrorNode) {
    (KafkaCluster::single(), KmirrorNode::start())
}

/// Every topic config Kafka 4.1 lists, set to a valid non-default value (remote.storage.enable
/// has none on a broker without tiered storage: `true` is refused by both).
const NON_DEFAULT: &[(&str, &str)] = &[
    ("cleanup.policy", "compact,delete"),
    ("compression.gzip.level", "5"),
    ("compression.lz4.level", "12"),
    ("compression.type", "zstd"),
    ("compression.zstd.level", "10"),
    ("delete.retention.ms", "1000"),
    ("file.delete.delay.ms", "1000"),
    ("flush.messages", "1000"),
    ("flush.ms", "1000"),
    ("follower.replication.throttled.replicas", "*"),
    ("index.interval.bytes", "8192"),
    ("leader.replication.throttled.replicas", "0:1"),
    ("local.retention.bytes", "-1"),
    ("local.retention.ms", "100000"),
    ("max.compaction.lag.ms", "1000000"),
    ("max.message.bytes", "2000000"),
    ("message.timestamp.after.max.ms", "1000000"),
    ("message.timestamp.before.max.ms", "1000000"),
    ("message.timestamp.type", "LogAppendTime"),
    ("min.cleanable.dirty.ratio", "0.3"),
    ("min.compaction.lag.ms", "10"),
    ("min.insync.replicas", "2"),
    ("preallocate", "true"),
    ("remote.log.copy.disable", "true"),
    ("remote.log.delete.on.disable", "true"),
    ("remote.storage.enable", "false"),
    ("retention.bytes", "100000000"),
    ("retention.ms", "1000000"),
    ("segment.bytes", "2097152"),
    ("segment.index.bytes", "1048576"),
    ("segment.jitter.ms", "10"),
    ("segment.ms", "1000000"),
    ("unclean.leader.election.enable", "true"),
];

/// Values Kafka 4.1.1 refuses (INVALID_CONFIG), including keys it removed.
const BAD: &[(&str, &str)] = &[
    ("compression.type", "foo"),
    ("compression.type", "LZ4"),
    ("compression.zstd.level", "99"),
    ("compression.gzip.level", "0"),
    ("compression.lz4.level", "18"),
    ("message.timestamp.type", "Foo"),
    ("remote.storage.enable", "true"),
    ("message.format.version", "3.0"),
    ("message.downconversion.enable", "true"),
    ("message.timestamp.difference.max.ms", "1000"),
    ("unknown.key", "1"),
    ("cleanup.policy", "bogus"),
    ("preallocate", "yes"),
    ("retention.ms", "-2"),
    ("segment.bytes", "3000000000"),
    ("min.insync.replicas", "0"),
    ("local.retention.ms", "-3"),
    ("min.cleanable.dirty.ratio", "1.5"),
    ("follower.replication.throttled.replicas", "foo"),
    ("flush.messages", "0"),
];

fn create(c: &mut WireClient, topic: &str, configs: &[(&str, &str)], validate_only: bool) -> i16 {
    use create_topics_request::{CreatableTopic, CreatableTopicConfig};
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )])
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only);
    let r = c.send(req).expect("CreateTopics");
    r.topics[0].error_code
}

fn incremental_alter(
    c: &mut WireClient,
    topic: &str,
    configs: &[(&str, &str)],
    validate_only: bool,
) -> i16 {
    use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let req = IncrementalAlterConfigsRequest::default()
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(s(k))
                            .with_config_operation(0)
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )])
        .with_validate_only(validate_only);
    c.send(req).expect("IncrementalAlterConfigs").responses[0].error_code
}

fn legacy_alter(
    c: &mut WireClient,
    topic: &str,
    configs: &[(&str, &str)],
    validate_only: bool,
) -> i16 {
    use alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let req = AlterConfigsRequest::default()
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )])
        .with_validate_only(validate_only);
    c.send(req).expect("AlterConfigs").responses[0].error_code
}

/// name -> (value, config type) of every config of a topic.
fn describe(c: &mut WireClient, topic: &str) -> BTreeMap<String, (Option<String>, i8)> {
    use describe_configs_request::DescribeConfigsResource;
    let req = DescribeConfigsRequest::default()
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configuration_keys(None)])
        .with_include_synonyms(true)
        .with_include_documentation(true);
    // Kafka may answer CreateTopics before the topic reaches its broker's metadata cache.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let r = loop {
        let r = c.send(req.clone()).expect("DescribeConfigs");
        if r.results[0].error_code == 0 || std::time::Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let res = &r.results[0];
    assert_eq!(
        res.error_code, 0,
        "describe {topic}: {:?}",
        res.error_message
    );
    res.configs
        .iter()
        .map(|e| {
            (
                e.name.to_string(),
                (e.value.as_ref().map(|v| v.to_string()), e.config_type),
            )
        })
        .collect()
}

/// Asserts `topic`'s configs include `want`, retrying for a while: Kafka applies a
/// change to its broker's config cache after answering the request.
fn assert_described(c: &mut WireClient, topic: &str, want: &[(&str, &str)], what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = describe(c, topic);
        let wrong: Vec<_> = want
            .iter()
            .filter(|(k, v)| got.get(*k).and_then(|(x, _)| x.as_deref()) != Some(*v))
            .map(|(k, v)| format!("{k}: want {v}, got {:?}", got.get(*k)))
            .collect();
        if wrong.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {wrong:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn topic_configs_are_listed_accepted_and_refused_as_kafka_does() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = brokers();
    let mut k = WireClient::connect(&kafka.bootstrap()).expect("kafka");
    let mut m = WireClient::connect(&node.bootstrap()).expect("kmirror");
    let both = [("Kafka", &mut k), ("kmirror", &mut m)];
    let mut described = Vec::new();
    let mut outcomes: Vec<Vec<String>> = Vec::new();
    for (name, c) in both {
        let mut out = Vec::new();
        assert_eq!(create(c, "fresh", &[], false), 0, "{name}");
        described.push(describe(c, "fresh"));
        for vo in [true, false] {
            out.push(format!(
                "create all non-default vo={vo}: {}",
                create(c, "all", NON_DEFAULT, vo)
            ));
        }
        assert_described(c, "all", NON_DEFAULT, &format!("{name}: as created"));
        for (i, (key, value)) in BAD.iter().enumerate() {
            let kv = [(*key, *value)];
            for vo in [true, false] {
                out.push(format!(
                    "create {key}={value} vo={vo}: {}",
                    create(c, &format!("bad{i}"), &kv, vo)
                ));
                out.push(format!(
                    "incremental {key}={value} vo={vo}: {}",
                    incremental_alter(c, "fresh", &kv, vo)
                ));
                out.push(format!(
                    "legacy {key}={value} vo={vo}: {}",
                    legacy_alter(c, "fresh", &kv, vo)
                ));
            }
        }
        for (key, value) in NON_DEFAULT {
            for vo in [true, false] {
                out.push(format!(
                    "incremental {key}={value} vo={vo}: {}",
                    incremental_alter(c, "fresh", &[(*key, *value)], vo)
                ));
            }
        }
        for vo in [true, false] {
            out.push(format!(
                "legacy all non-default vo={vo}: {}",
                legacy_alter(c, "fresh", NON_DEFAULT, vo)
            ));
        }
        assert_described(c, "fresh", NON_DEFAULT, &format!("{name}: as altered"));
        outcomes.push(out);
    }
    // The same keys, defaults and types (no deliberate difference).
    assert_eq!(
        described[0].keys().collect::<Vec<_>>(),
        described[1].keys().collect::<Vec<_>>(),
        "DescribeConfigs key sets"
    );
    assert_eq!(described[0], described[1], "defaults and config types");
    assert_eq!(described[0].len(), 33, "Kafka 4.1 lists 33 topic configs");
    // The same outcome for every request; none of the good ones refused, all bad ones refused.
    assert_eq!(outcomes[0], outcomes[1]);
    for line in &outcomes[0] {
        let bad = BAD
            .iter()
            .any(|(k, v)| line.contains(&format!(" {k}={v} ")));
        let want = if bad { ": 40" } else { ": 0" };
        assert!(line.ends_with(want), "{line}");
    }
}

/// A record as a consumer saw it: (offset, key, value, headers, timestamp).
type Rec = (i64, String, String, String, i64);

fn java_dump(boot: &str, topic: &str) -> Vec<(Rec, String)> {
    let ran = proc::run_ok(
        java::program("RecordDump").args([boot, topic, "read_uncommitted", "timestamps"]),
        Duration::from_secs(120),
    );
    ran.stdout
        .lines()
        .filter(|l| l.starts_with("R "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let headers = f[5].trim_end_matches(',').to_string();
            (
                (
                    f[2].parse().expect("offset"),
                    f[3].to_string(),
                    f[4].to_string(),
                    headers,
                    f[7].parse().expect("timestamp"),
                ),
                f[6].to_string(),
            )
        })
        .collect()
}

fn rdkafka_dump(boot: &str, topic: &str) -> Vec<(Rec, String)> {
    let ran = proc::run_ok(
        python::script("topic_records.py").args(["dump", boot, topic]),
        Duration::from_secs(120),
    );
    assert!(ran.stdout.contains("DONE"), "{}", ran.stdout);
    ran.stdout
        .lines()
        .filter(|l| l.starts_with("R "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                (
                    f[1].parse().expect("offset"),
                    f[2].to_string(),
                    f[3].to_string(),
                    f[4].to_string(),
                    f[6].parse().expect("timestamp"),
                ),
                f[5].to_string(),
            )
        })
        .collect()
}

/// (codec bits, LogAppendTime bit, max timestamp) of every stored batch, with CRCs checked.
fn stored_batches(c: &mut WireClient, topic: &str) -> Vec<(i16, bool, i64)> {
    let (_, end) = c.log_bounds(topic, 0).expect("bounds");
    let mut at = 0;
    let mut out = Vec::new();
    while at < end {
        let p = c.fetch_raw(topic, 0, at, 4 << 20, false).expect("fetch");
        assert_eq!(p.error_code, 0, "fetch {topic}");
        let data = p.records.expect("records");
        let batches = split_batches(&data);
        assert!(!batches.is_empty(), "{topic}: no batch at {at}");
        for b in batches {
            assert!(b.crc_ok(), "{topic}: CRC of the batch at {}", b.base_offset);
            let attrs = i16::from_be_bytes([b.bytes[21], b.bytes[22]]);
            let max_ts = kmirror_tests::wire::be_i64(&b.bytes, 35);
            out.push((attrs & 7, attrs & 8 != 0, max_ts));
            at = b.last_offset + 1;
        }
    }
    out
}

/// Produces 50 librdkafka records, then 50 Java ConsoleProducer records, both lz4, each with a
/// key and two headers.
fn produce_lz4(boot: &str, topic: &str) {
    produce_with(boot, topic, "lz4")
}

/// [`produce_lz4`] with another producer codec.
fn produce_with(boot: &str, topic: &str, codec: &str) {
    let compression = format!("compression.type={codec}");
    let ran = proc::run_ok(
        python::script("topic_records.py").args(["produce", boot, topic, "50", &compression]),
        Duration::from_secs(120),
    );
    assert!(ran.stdout.contains("DONE"), "{}", ran.stdout);
    let input: String = (0..50)
        .map(|i| format!("h:j{i},h:y\tjk{i}\tjv{i}-{}\n", "x".repeat(60)))
        .collect();
    let mut cmd = java::tool(tools::CONSOLE_PRODUCER);
    cmd.args([
        "--bootstrap-server",
        boot,
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "parse.headers=true",
        // ConsoleProducer's own option (its default, none, overrides a producer property).
        "--compression-codec",
        codec,
        "--producer-property",
        "linger.ms=50",
    ]);
    proc::run_with_stdin_ok(&mut cmd, input.as_bytes(), Duration::from_secs(120));
}

#[test]
fn compression_type_recompresses_and_clients_read_the_same_records() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = brokers();
    // (topic, compression.type, producers' codec, stored codec bits)
    let topics = [
        ("c-zstd", "zstd", "lz4", 4),
        ("c-gzip", "gzip", "lz4", 1),
        ("c-snappy", "snappy", "lz4", 2),
        ("c-lz4", "lz4", "gzip", 3),
        ("c-uncompressed", "uncompressed", "lz4", 0),
        ("c-producer", "producer", "lz4", 3),
    ];
    let mut seen: Vec<Vec<Vec<Rec>>> = Vec::new();
    for boot in [kafka.bootstrap(), node.bootstrap()] {
        let mut c = WireClient::connect(&boot).expect("connect");
        let mut per_topic = Vec::new();
        for (topic, codec, producers, bits) in topics {
            assert_eq!(
                c.create_topic(topic, 1, 1, &[("compression.type", codec)])
                    .expect("create"),
                0
            );
            produce_with(&boot, topic, producers);
            let stored = stored_batches(&mut c, topic);
            assert!(
                stored.iter().all(|(b, ..)| *b == bits),
                "{boot} {topic}: stored codecs {stored:?}, want {bits}"
            );
            let j = java_dump(&boot, topic);
            let r = rdkafka_dump(&boot, topic);
            assert_eq!(j.len(), 100, "{boot} {topic}: Java read {}", j.len());
            assert!(j.iter().all(|(_, t)| t == "CreateTime"), "{topic}");
            assert!(r.iter().all(|(_, t)| t == "1"), "{topic}");
            let j: Vec<Rec> = j.into_iter().map(|(r, _)| r).collect();
            let r: Vec<Rec> = r.into_iter().map(|(r, _)| r).collect();
            assert_eq!(
                j, r,
                "{boot} {topic}: Java and librdkafka read the same records"
            );
            per_topic.push(j);
        }
        seen.push(per_topic);
    }
    // Kafka and kmirror: the same records at the same offsets (timestamps are the producers').
    let strip = |v: &Vec<Rec>| -> Vec<(i64, String, String, String)> {
        v.iter()
            .map(|(o, k, val, h, _)| (*o, k.clone(), val.clone(), h.clone()))
            .collect()
    };
    for (i, (topic, ..)) in topics.iter().enumerate() {
        assert_eq!(strip(&seen[0][i]), strip(&seen[1][i]), "{topic}");
        assert_eq!(seen[0][i][0].1, "k0", "{topic}");
        assert_eq!(seen[0][i][0].3, "h=0,h=x", "{topic}");
        assert_eq!(seen[0][i][50].1, "jk0", "{topic}");
        assert_eq!(seen[0][i][50].3, "h=j0,h=y", "{topic}");
    }
}

#[test]
fn log_append_time_topics_stamp_batches_and_clients_see_the_append_time() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = brokers();
    for boot in [kafka.bootstrap(), node.bootstrap()] {
        let mut c = WireClient::connect(&boot).expect("connect");
        assert_eq!(
            c.create_topic("lat", 1, 1, &[("message.timestamp.type", "LogAppendTime")])
                .expect("create"),
            0
        );
        assert_eq!(c.create_topic("ct", 1, 1, &[]).expect("create"), 0);
        let ts = now_ms() - 60_000;
        let ct = c
            .produce_response("ct", 0, records::batch(&[b"a", b"b"], ts))
            .expect("produce");
        assert_eq!(
            (ct.error_code, ct.log_append_time_ms),
            (0, -1),
            "{boot}: CreateTime"
        );
        let before = now_ms();
        let lat = c
            .produce_response("lat", 0, records::batch(&[b"a", b"b", b"c"], ts))
            .expect("produce");
        let after = now_ms();
        assert_eq!(lat.error_code, 0, "{boot}");
        let t0 = lat.log_append_time_ms;
        assert!(
            (before..=after).contains(&t0),
            "{boot}: {before} <= {t0} <= {after}"
        );
        // librdkafka takes each record's timestamp from the Produce response.
        let before = now_ms();
        let ran = proc::run_ok(
            python::script("topic_records.py").args(["produce", &boot, "lat", "20"]),
            Duration::from_secs(120),
        );
        let after = now_ms();
        let delivered: BTreeMap<i64, i64> = ran
            .stdout
            .lines()
            .filter(|l| l.starts_with("D "))
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                assert_eq!(f[2], "2", "{boot}: librdkafka timestamp type in {l}");
                (f[1].parse().unwrap(), f[3].parse().unwrap())
            })
            .collect();
        assert_eq!(delivered.len(), 20, "{boot}");
        assert!(
            delivered.values().all(|t| (before..=after).contains(t)),
            "{boot}: {before}..{after} {delivered:?}"
        );
        // Stored: every batch stamped, its max timestamp the append time.
        let stored = stored_batches(&mut c, "lat");
        assert!(stored.iter().all(|(_, lat, _)| *lat), "{boot}: {stored:?}");
        assert_eq!(stored[0].2, t0, "{boot}");
        let ct_stored = stored_batches(&mut c, "ct");
        assert_eq!(ct_stored, vec![(0, false, ts)], "{boot}");
        // Consumers: LogAppendTime, each record's timestamp its batch's append time.
        let want = |o: i64| if o < 3 { t0 } else { delivered[&o] };
        let j = java_dump(&boot, "lat");
        assert_eq!(j.len(), 23, "{boot}");
        for ((o, _, _, _, t), ty) in &j {
            assert_eq!(
                (ty.as_str(), *t),
                ("LogAppendTime", want(*o)),
                "{boot} Java {o}"
            );
        }
        let r = rdkafka_dump(&boot, "lat");
        assert_eq!(r.len(), 23, "{boot}");
        for ((o, _, _, _, t), ty) in &r {
            assert_eq!((ty.as_str(), *t), ("2", want(*o)), "{boot} librdkafka {o}");
        }
        let j = java_dump(&boot, "ct");
        assert!(
            j.iter()
                .all(|((_, _, _, _, t), ty)| ty == "CreateTime" && *t == ts),
            "{boot}: {j:?}"
        );
        // Altered later (IncrementalAlterConfigs): the next produce follows the new configs.
        assert_eq!(
            incremental_alter(
                &mut c,
                "ct",
                &[
                    ("message.timestamp.type", "LogAppendTime"),
                    ("compression.type", "gzip")
                ],
                false
            ),
            0,
            "{boot}"
        );
        // Kafka applies the change to its log a moment after answering: a produce may still
        // see the old configs there (kmirror applies it before answering).
        let mut tries = 0;
        let (t1, before, after) = loop {
            tries += 1;
            let before = now_ms();
            let altered = c
                .produce_response("ct", 0, records::batch(&[b"d"], ts))
                .expect("produce");
            let after = now_ms();
            assert_eq!(altered.error_code, 0, "{boot}");
            if altered.log_append_time_ms != -1 || tries == 50 {
                break (altered.log_append_time_ms, before, after);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if boot == node.bootstrap() {
            assert_eq!(tries, 1, "kmirror: the alter applies before it is answered");
        }
        assert!(
            (before..=after).contains(&t1),
            "{boot}: {before} <= {t1} <= {after}"
        );
        let stored = stored_batches(&mut c, "ct");
        assert_eq!(stored[0], (0, false, ts), "{boot}");
        assert_eq!(stored.last(), Some(&(1, true, t1)), "{boot}");
    }
}

/// Mirror topics carry the source's compression.type but never re-compress: batches the
/// source stored in another codec (before the source's topic changed codec) arrive and stay
/// as the source wrote them (log-equal). After failover the topic is a normal one, and a
/// producer's batches are re-compressed into its codec as Kafka does.
#[test]
fn a_mirror_topic_is_never_recompressed_and_recompresses_after_failover() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = brokers();
    let src = kafka.bootstrap();
    let dst = node.addr();
    kafka.create_topic("zs", 1, &[]);
    produce_lz4(&src, "zs");
    mirror::create(
        &dst,
        "dr",
        &src,
        &[
            ("mirror.metadata.sync.interval.ms", "1000"),
            ("mirror.retry.backoff.ms", "100"),
        ],
    );
    mirror::add_topics(&dst, "dr", &["zs"]);
    mirror::wait_caught_up(&src, &dst, "zs", 1, false, Duration::from_secs(60));
    assert_eq!(
        mirror::set_topic_configs(&src, "zs", &[("compression.type", "zstd")]),
        0
    );
    proc::wait_for(Duration::from_secs(30), "compression.type synced", || {
        (mirror::topic_configs(&dst, "zs").get("compression.type")
            == Some(&Some("zstd".to_string())))
        .then_some(())
    });
    produce_lz4(&src, "zs");
    let ends = mirror::wait_caught_up(&src, &dst, "zs", 1, false, Duration::from_secs(60));
    mirror::assert_log_equal(&src, &dst, "zs", &ends);
    let mut k = WireClient::connect(&src).expect("kafka");
    let mut m = WireClient::connect(&dst).expect("kmirror");
    let source = stored_batches(&mut k, "zs");
    let mirrored = stored_batches(&mut m, "zs");
    assert_eq!(mirrored, source);
    let codecs: Vec<i16> = mirrored.iter().map(|b| b.0).collect();
    assert!(
        codecs.contains(&3) && codecs.contains(&4),
        "lz4 batches from before the change and zstd after: {codecs:?}"
    );
    // Failover: the topic takes produce, re-compressed into zstd like on the source.
    let ran = mirror::remove_topics(&dst, "dr", &["zs"]);
    assert!(
        ran.status.success(),
        "failover: {}{}",
        ran.stdout,
        ran.stderr
    );
    proc::wait_for(Duration::from_secs(60), "zs writable", || {
        let mut c = WireClient::connect(&dst).ok()?;
        let r = c
            .produce_response("zs", 0, records::batch(&[b"after"], now_ms()))
            .ok()?;
        (r.error_code == 0).then_some(())
    });
    let before = stored_batches(&mut m, "zs").len();
    produce_lz4(&dst, "zs");
    let after = stored_batches(&mut m, "zs");
    // Everything after failover (the probe's uncompressed batch included) is zstd.
    assert!(
        after[before - 1..].iter().all(|b| b.0 == 4),
        "after failover: {:?}",
        &after[before - 1..]
    );
    let j: Vec<Rec> = java_dump(&dst, "zs").into_iter().map(|(r, _)| r).collect();
    let r: Vec<Rec> = rdkafka_dump(&dst, "zs")
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(j.len(), 301, "200 mirrored, 1 probe, 100 after failover");
    assert_eq!(j, r, "Java and librdkafka read the same records");
}
