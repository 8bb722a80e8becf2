//! Issue 23, the findings of Kafka 4.1 clients: each scenario runs on Apache Kafka 4.1.1 and
//! on kmirror over the wire, and the outcomes a client acts on (error codes, what exists
//! afterwards, which topics a member is assigned) must be the same: CreateTopics naming a
//! topic twice, Metadata auto-creation (also right after DeleteTopics), a KIP-848 regex
//! matching `__consumer_offsets` (librdkafka), ListConfigResources, AlterReplicaLogDirs, and
//! which dynamic broker configs (Incremental)AlterConfigs takes, at which level, the
//! `controller_mutation_rate` quota, an IP's `connection_creation_rate`, the broker's
//! connection limits (`max.connections.per.ip`, `max.connections`), and group configs
//! (`kafka-configs --entity-type groups` and librdkafka's AdminClient).

use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreateTopicsRequest, DeleteTopicsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_tests::kafka::KafkaOptions;
use kmirror_tests::proc::LineChild;
use kmirror_tests::{java, proc, python, KafkaCluster, KmirrorNode, WireClient};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn exists(boot: &str, topic: &str) -> bool {
    let mut c = WireClient::connect(boot).expect("connect");
    let md = c.metadata(Some(&[topic])).expect("metadata");
    md.topics[0].error_code == 0
}

fn wait_exists(boot: &str, topic: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if exists(boot, topic) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// CreateTopics naming one topic twice (and another once): per name, the error code and
/// message; then whether each exists.
fn duplicate_create(boot: &str) -> Vec<String> {
    let mut c = WireClient::connect(boot).expect("connect");
    let topic = |n: &str| {
        CreatableTopic::default()
            .with_name(name(n))
            .with_num_partitions(1)
            .with_replication_factor(1)
    };
    let resp = c
        .send(
            CreateTopicsRequest::default()
                .with_topics(vec![topic("twice"), topic("once"), topic("twice")])
                .with_timeout_ms(30_000),
        )
        .expect("CreateTopics");
    let mut out: Vec<String> = resp
        .topics
        .iter()
        .map(|t| {
            format!(
                "{} {} {:?}",
                t.name.0,
                t.error_code,
                t.error_message.as_ref().map(|m| m.to_string())
            )
        })
        .collect();
    out.sort();
    wait_exists(boot, "once");
    out.push(format!("twice exists: {}", exists(boot, "twice")));
    out.push(format!("once exists: {}", exists(boot, "once")));
    out
}

/// Metadata with auto-creation allowed: the first answer for a new name and for a name just
/// deleted, then whether each exists shortly after.
fn metadata_auto_create(boot: &str) -> Vec<String> {
    let mut c = WireClient::connect(boot).expect("connect");
    let auto = |c: &mut WireClient, topic: &str| {
        let md = c
            .send(
                MetadataRequest::default()
                    .with_topics(Some(vec![
                        MetadataRequestTopic::default().with_name(Some(name(topic)))
                    ]))
                    .with_allow_auto_topic_creation(true),
            )
            .expect("metadata");
        let t = &md.topics[0];
        format!(
            "{topic}: code {} partitions {}",
            t.error_code,
            t.partitions.len()
        )
    };
    let mut out = vec![auto(&mut c, "fresh")];
    out.push(format!("fresh created: {}", wait_exists(boot, "fresh")));

    assert_eq!(c.create_topic("gone", 1, 1, &[]).expect("create"), 0);
    let del = c
        .send(
            DeleteTopicsRequest::default()
                .with_topics(vec![
                    DeleteTopicState::default().with_name(Some(name("gone")))
                ])
                .with_topic_names(vec![name("gone")])
                .with_timeout_ms(30_000),
        )
        .expect("DeleteTopics");
    out.push(format!("delete: {}", del.responses[0].error_code));
    out.push(auto(&mut c, "gone"));
    out.push(format!("gone created again: {}", wait_exists(boot, "gone")));
    out
}

/// A KIP-848 member (librdkafka, group.protocol=consumer) whose regex matches
/// `__consumer_offsets`: the topics it is assigned (the broker resolves the regex).
fn consumer_protocol_regex_on_internal_topic(boot: &str) -> Vec<String> {
    let mut c = WireClient::connect(boot).expect("connect");
    assert_eq!(c.create_topic("data-r", 1, 1, &[]).expect("create"), 0);
    // A committed offset: the offsets topic exists from here on (on Kafka too).
    kmirror_tests::helpers::commit_offset(boot, "warm", "data-r", 0);
    let ran = proc::run_ok(
        python::script("regex_consumer.py").args([
            boot,
            "kip848-regex",
            "^__consumer_off.*",
            "1",
            "group.protocol=consumer",
        ]),
        Duration::from_secs(120),
    );
    ran.stdout
        .lines()
        .filter(|l| l.starts_with("A ") || l.starts_with("X "))
        .map(|l| format!("regex member: {l}"))
        .collect()
}

/// ListConfigResources at each type (and an unknown one), AlterReplicaLogDirs into the
/// broker's directory and elsewhere: codes and (type, name) lists.
fn config_resources_and_log_dirs(boot: &str) -> Vec<String> {
    use kafka_protocol::messages::alter_replica_log_dirs_request::{
        AlterReplicaLogDir, AlterReplicaLogDirTopic,
    };
    use kafka_protocol::messages::{
        AlterReplicaLogDirsRequest, DescribeLogDirsRequest, ListConfigResourcesRequest,
    };
    let mut c = WireClient::connect(boot).expect("connect");
    let mut out = Vec::new();
    for (v, types) in [
        (0, vec![]),
        (1, vec![]),
        (1, vec![2i8]),
        (1, vec![4]),
        (1, vec![8]),
        (1, vec![16]),
        (1, vec![32]),
        (1, vec![99]),
    ] {
        let r = c
            .send_at(
                ListConfigResourcesRequest::default().with_resource_types(types.clone()),
                v,
            )
            .expect("ListConfigResources");
        let mut names: Vec<String> = r
            .config_resources
            .iter()
            .map(|x| format!("{}:{}", x.resource_type, x.resource_name))
            .collect();
        names.sort();
        out.push(format!(
            "ListConfigResources v{v} {types:?}: {} {names:?}",
            r.error_code
        ));
    }
    let dir = c
        .send(DescribeLogDirsRequest::default().with_topics(None))
        .expect("DescribeLogDirs")
        .results[0]
        .log_dir
        .clone();
    for (what, path) in [
        ("its dir", dir),
        ("elsewhere", StrBytes::from_static_str("/no/such")),
    ] {
        let r = c
            .send(AlterReplicaLogDirsRequest::default().with_dirs(vec![
                AlterReplicaLogDir::default().with_path(path).with_topics(vec![
                    AlterReplicaLogDirTopic::default()
                        .with_name(name("data-r"))
                        .with_partitions(vec![0, 7]),
                    AlterReplicaLogDirTopic::default()
                        .with_name(name("nope"))
                        .with_partitions(vec![0]),
                ]),
            ]))
            .expect("AlterReplicaLogDirs");
        let mut codes: Vec<String> = r
            .results
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    format!("{}-{}={}", t.topic_name.0, p.partition_index, p.error_code)
                })
            })
            .collect();
        codes.sort();
        out.push(format!("AlterReplicaLogDirs {what}: {codes:?}"));
    }
    out
}

/// Dynamic broker configs: validate-only IncrementalAlterConfigs and AlterConfigs of one key
/// at a time, on broker 1 and at the cluster default: Kafka's code and message for each.
/// (Keys whose check depends on the running broker, such as thread counts, listeners and
/// min.insync.replicas under ELR, are left out.)
fn dynamic_broker_configs(boot: &str) -> Vec<String> {
    use kafka_protocol::messages::alter_configs_request as legacy;
    use kafka_protocol::messages::incremental_alter_configs_request as inc;
    use kafka_protocol::messages::{AlterConfigsRequest, IncrementalAlterConfigsRequest};
    let mut c = WireClient::connect(boot).expect("connect");
    let keys = [
        ("broker.id", "7"),
        ("log.dirs", "/tmp/x"),
        ("auto.create.topics.enable", "true"),
        ("num.partitions", "3"),
        ("sasl.kerberos.min.time.before.relogin", "60001"),
        ("log.retention.ms", "100000"),
        ("log.retention.ms", "soon"),
        ("message.max.bytes", "100000"),
        ("foo.bar", "x"),
        ("ssl.keystore.location", "/tmp/ks"),
        ("listener.name.plaintext.ssl.keystore.location", "/tmp/ks"),
        ("max.connections", "100000"),
        ("log.segment.bytes", "100000"),
        ("compression.type", "gzip"),
        ("unclean.leader.election.enable", "true"),
    ];
    let text = |v: &str| StrBytes::from_string(v.to_owned());
    let mut out = Vec::new();
    for entity in ["1", ""] {
        for (k, v) in keys {
            let r = c
                .send(
                    IncrementalAlterConfigsRequest::default()
                        .with_validate_only(true)
                        .with_resources(vec![inc::AlterConfigsResource::default()
                            .with_resource_type(4)
                            .with_resource_name(text(entity))
                            .with_configs(vec![inc::AlterableConfig::default()
                                .with_name(text(k))
                                .with_config_operation(0)
                                .with_value(Some(text(v)))])]),
                )
                .expect("IncrementalAlterConfigs");
            let r = &r.responses[0];
            out.push(format!(
                "incremental {entity:?} {k}={v}: {} {:?}",
                r.error_code,
                r.error_message.as_ref().map(|m| m.to_string())
            ));
            if entity == "1" {
                let r = c
                    .send(
                        AlterConfigsRequest::default()
                            .with_validate_only(true)
                            .with_resources(vec![legacy::AlterConfigsResource::default()
                                .with_resource_type(4)
                                .with_resource_name(text(entity))
                                .with_configs(vec![legacy::AlterableConfig::default()
                                    .with_name(text(k))
                                    .with_value(Some(text(v)))])]),
                    )
                    .expect("AlterConfigs");
                let r = &r.responses[0];
                out.push(format!(
                    "legacy {entity:?} {k}={v}: {} {:?}",
                    r.error_code,
                    r.error_message.as_ref().map(|m| m.to_string())
                ));
            }
        }
    }
    out
}

/// Group configs (config resource type 32, Kafka 4.1): `kafka-configs --entity-type groups`
/// sets, describes (the group's own keys, then all with their defaults) and deletes them, and
/// refuses what Kafka refuses with its message; the wire shows the empty name's answers and
/// that a KIP-848 member of the group is told the group's heartbeat interval.
fn group_configs(boot: &str) -> Vec<String> {
    use kafka_protocol::messages::alter_configs_request as legacy;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::incremental_alter_configs_request as inc;
    use kafka_protocol::messages::{
        AlterConfigsRequest, ConsumerGroupHeartbeatRequest, DescribeConfigsRequest,
        FindCoordinatorRequest, IncrementalAlterConfigsRequest,
    };
    let configs = |args: &[&str]| -> Vec<String> {
        let ran = proc::run(
            java::tool("kafka.admin.ConfigCommand")
                .args(["--bootstrap-server", boot, "--entity-type", "groups"])
                .args(args),
            Duration::from_secs(60),
        );
        let mut lines = vec![format!(
            "kafka-configs {}: exit {:?}",
            args.join(" "),
            ran.status.code()
        )];
        // The tool's answer: stdout, and the first line of an error (not its stack trace).
        lines.extend(ran.stdout.lines().map(|l| format!("  {}", l.trim_end())));
        lines.extend(
            ran.stderr
                .lines()
                .filter(|l| l.contains("Exception: "))
                .take(1)
                .map(|l| format!("  ! {}", l.trim_end())),
        );
        lines
    };
    let mut out = Vec::new();
    for kv in [
        "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000",
        "share.record.lock.duration.ms=20000,share.auto.offset.reset=earliest",
        "foo.bar=1",
        "consumer.session.timeout.ms=1000",
        "consumer.session.timeout.ms=abc",
        "consumer.heartbeat.interval.ms=16000",
        "share.session.timeout.ms=45000,share.heartbeat.interval.ms=45000",
        "share.record.lock.duration.ms=500",
        "share.record.lock.duration.ms=10000",
        "share.auto.offset.reset=sometime",
        "share.auto.offset.reset=by_duration:PT1H",
        "share.isolation.level=read_committed",
        "share.isolation.level=serializable",
        "streams.num.standby.replicas=3",
    ] {
        out.extend(configs(&[
            "--alter",
            "--entity-name",
            "cfg-g",
            "--add-config",
            kv,
        ]));
    }
    out.extend(configs(&["--describe", "--entity-name", "cfg-g"]));
    out.extend(configs(&["--describe", "--all", "--entity-name", "cfg-g"]));
    out.extend(configs(&["--describe", "--entity-name", "no-configs"]));

    // A KIP-848 member is told the group's heartbeat interval.
    let mut c = WireClient::connect(boot).expect("connect");
    let text = |v: &str| StrBytes::from_string(v.to_owned());
    let hb = |c: &mut WireClient, group: &str| {
        // The coordinator first (Kafka creates `__consumer_offsets` on the first ask).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = c
                .send(
                    FindCoordinatorRequest::default()
                        .with_key_type(0)
                        .with_coordinator_keys(vec![text(group)]),
                )
                .expect("FindCoordinator");
            if r.coordinators.first().is_some_and(|k| k.error_code == 0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no coordinator for {group}: {r:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let r = c
            .send(
                ConsumerGroupHeartbeatRequest::default()
                    .with_group_id(kafka_protocol::messages::GroupId(text(group)))
                    .with_member_id(text(&uuid::Uuid::new_v4().to_string()))
                    .with_member_epoch(0)
                    .with_rebalance_timeout_ms(30_000)
                    .with_subscribed_topic_names(Some(vec![name("cfg-topic")]))
                    .with_topic_partitions(Some(vec![])),
            )
            .expect("ConsumerGroupHeartbeat");
        format!(
            "heartbeat in {group}: error {} interval {}",
            r.error_code, r.heartbeat_interval_ms
        )
    };
    out.push(hb(&mut c, "cfg-g"));
    out.push(hb(&mut c, "no-configs"));
    out.extend(configs(&[
        "--alter",
        "--entity-name",
        "cfg-g",
        "--delete-config",
        "consumer.heartbeat.interval.ms,share.auto.offset.reset",
    ]));
    out.extend(configs(&["--describe", "--entity-name", "cfg-g"]));
    out.push(hb(&mut c, "cfg-g"));

    // librdkafka's AdminClient on another group.
    let ran = proc::run_ok(
        python::script("group_config.py").args([boot, "cfg-rd"]),
        Duration::from_secs(120),
    );
    out.extend(ran.stdout.lines().map(|l| format!("librdkafka {l}")));

    // The empty name, on the wire (the tool refuses it itself).
    let r = c
        .send(
            IncrementalAlterConfigsRequest::default().with_resources(vec![
                inc::AlterConfigsResource::default()
                    .with_resource_type(32)
                    .with_resource_name(text(""))
                    .with_configs(vec![inc::AlterableConfig::default()
                        .with_name(text("consumer.session.timeout.ms"))
                        .with_config_operation(0)
                        .with_value(Some(text("50000")))]),
            ]),
        )
        .expect("IncrementalAlterConfigs");
    let r = &r.responses[0];
    out.push(format!(
        "alter group \"\": {} {:?}",
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string())
    ));
    for op in [2i8, 3] {
        let r = c
            .send(
                IncrementalAlterConfigsRequest::default().with_resources(vec![
                    inc::AlterConfigsResource::default()
                        .with_resource_type(32)
                        .with_resource_name(text("cfg-g"))
                        .with_configs(vec![inc::AlterableConfig::default()
                            .with_name(text("share.isolation.level"))
                            .with_config_operation(op)
                            .with_value(Some(text("read_committed")))]),
                ]),
            )
            .expect("IncrementalAlterConfigs");
        let r = &r.responses[0];
        out.push(format!(
            "op {op} on a group config: {} {:?}",
            r.error_code,
            r.error_message.as_ref().map(|m| m.to_string())
        ));
    }
    // Legacy AlterConfigs replaces the group's keys.
    let r = c
        .send(AlterConfigsRequest::default().with_resources(vec![
                legacy::AlterConfigsResource::default()
                    .with_resource_type(32)
                    .with_resource_name(text("cfg-g"))
                    .with_configs(vec![legacy::AlterableConfig::default()
                        .with_name(text("share.session.timeout.ms"))
                        .with_value(Some(text("50000")))]),
            ]))
        .expect("AlterConfigs");
    let r = &r.responses[0];
    out.push(format!(
        "legacy alter of group cfg-g: {} {:?}",
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string())
    ));
    out.extend(configs(&["--describe", "--entity-name", "cfg-g"]));
    let r = c
        .send(DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(32)
                    .with_resource_name(text("")),
            ]))
        .expect("DescribeConfigs");
    let r = &r.results[0];
    out.push(format!(
        "describe group \"\": {} {:?} {} entries",
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
        r.configs.len()
    ));
    out
}

/// `controller_mutation_rate` = 1 partition/s for client-id "mut": CreateTopics of 5 and
/// then 20 partitions (the bucket holds 11 s worth and may go into debt), one more refused
/// while in debt, DeleteTopics refused too (on a fresh connection: the first is muted for
/// the throttle), and CreateTopics v5 (before THROTTLING_QUOTA_EXCEEDED) accepted but
/// throttled. Codes, messages, and throttle times as 0 / "> 10 s" / "> 0".
fn controller_mutation_quota(boot: &str) -> Vec<String> {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::{AlterClientQuotasRequest, CreateTopicsResponse};
    let text = |v: &str| StrBytes::from_string(v.to_owned());
    let mut admin = WireClient::connect(boot).expect("connect");
    let r = admin
        .send(
            AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
                .with_entity(vec![EntityData::default()
                    .with_entity_type(text("client-id"))
                    .with_entity_name(Some(text("mut")))])
                .with_ops(vec![OpData::default()
                    .with_key(text("controller_mutation_rate"))
                    .with_value(1.0)])]),
        )
        .expect("AlterClientQuotas");
    assert_eq!(r.entries[0].error_code, 0);
    // Kafka applies quotas asynchronously on the broker.
    std::thread::sleep(Duration::from_secs(2));
    let client = || {
        let mut c = WireClient::connect(boot).expect("connect");
        c.set_client_id("mut");
        c
    };
    let shown = |t: i32| match t {
        0 => "0",
        t if t > 10_000 => "> 10 s",
        _ => "> 0",
    };
    let create = |c: &mut WireClient, topic: &str, partitions: i32, v: Option<i16>| {
        let req = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(partitions)
                .with_replication_factor(1)])
            .with_timeout_ms(30_000);
        let r: CreateTopicsResponse = match v {
            Some(v) => c.send_at(req, v),
            None => c.send(req),
        }
        .expect("CreateTopics");
        format!(
            "create {topic} ({partitions}): {} {:?} throttle {}",
            r.topics[0].error_code,
            r.topics[0].error_message.as_ref().map(|m| m.to_string()),
            shown(r.throttle_time_ms)
        )
    };
    let mut c = client();
    let mut out = vec![
        create(&mut c, "mut-a", 5, None),
        create(&mut c, "mut-b", 20, None),
        create(&mut c, "mut-c", 1, None),
    ];
    let del = client()
        .send(
            DeleteTopicsRequest::default()
                .with_topics(vec![
                    DeleteTopicState::default().with_name(Some(name("mut-a")))
                ])
                .with_topic_names(vec![name("mut-a")])
                .with_timeout_ms(30_000),
        )
        .expect("DeleteTopics");
    out.push(format!(
        "delete mut-a: {} {:?} throttle {}",
        del.responses[0].error_code,
        del.responses[0]
            .error_message
            .as_ref()
            .map(|m| m.to_string()),
        shown(del.throttle_time_ms)
    ));
    out.push(create(&mut client(), "mut-old", 1, Some(5)));
    out
}

/// ApiVersions v0 (header v1, no client id) on `s`: "answered" (the whole response read),
/// "silent" (nothing within 3 s) or "closed".
fn ask(s: &mut std::net::TcpStream) -> &'static str {
    use std::io::{Read, Write};
    let mut req = Vec::new();
    req.extend_from_slice(&18i16.to_be_bytes());
    req.extend_from_slice(&0i16.to_be_bytes());
    req.extend_from_slice(&7i32.to_be_bytes());
    req.extend_from_slice(&(-1i16).to_be_bytes());
    let mut frame = (req.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&req);
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    if s.write_all(&frame).is_err() {
        return "closed";
    }
    let mut head = [0u8; 8];
    match s.read_exact(&mut head) {
        Ok(()) if head[4..8] != 7i32.to_be_bytes() => "answered with a wrong correlation id",
        Ok(()) => {
            let len = i32::from_be_bytes(head[..4].try_into().unwrap()).max(4) as usize;
            let mut rest = vec![0u8; len - 4];
            let _ = s.read_exact(&mut rest);
            "answered"
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            "silent"
        }
        Err(_) => "closed",
    }
}

/// `connection_creation_rate` = 2/s for this client's IP: 30 connections opened at once,
/// then each asks ApiVersions: how many are answered and how many are closed unanswered (the
/// throttle is at most one window, so within 3 s); after the quota is removed, a new
/// connection is answered again.
fn connection_creation_rate_quota(boot: &str) -> Vec<String> {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::AlterClientQuotasRequest;
    use std::net::TcpStream;
    let text = |v: &str| StrBytes::from_string(v.to_owned());
    // The IP the broker sees this client as.
    let ip = TcpStream::connect(boot)
        .and_then(|s| s.local_addr())
        .expect("connect")
        .ip()
        .to_string();
    let mut admin = WireClient::connect(boot).expect("connect");
    let quota = |admin: &mut WireClient, remove: bool| {
        let r = admin
            .send(
                AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
                    .with_entity(vec![EntityData::default()
                        .with_entity_type(text("ip"))
                        .with_entity_name(Some(text(&ip)))])
                    .with_ops(vec![OpData::default()
                        .with_key(text("connection_creation_rate"))
                        .with_value(2.0)
                        .with_remove(remove)])]),
            )
            .expect("AlterClientQuotas");
        assert_eq!(
            r.entries[0].error_code, 0,
            "{:?}",
            r.entries[0].error_message
        );
        // Kafka applies quotas asynchronously on the broker.
        std::thread::sleep(Duration::from_secs(2));
    };
    quota(&mut admin, false);
    let burst: Vec<TcpStream> = (0..30)
        .map(|_| TcpStream::connect(boot).expect("connect"))
        .collect();
    let mut tally = std::collections::BTreeMap::<&str, usize>::new();
    for s in burst {
        *tally.entry(ask(&mut { s })).or_default() += 1;
    }
    let mut out = vec![format!("30 connections at 2/s: {tally:?}")];
    quota(&mut admin, true);
    out.push(format!(
        "after the quota is removed: {}",
        ask(&mut TcpStream::connect(boot).expect("connect"))
    ));
    out
}

/// The broker's connection limits as dynamic cluster-wide configs, each seen by raw
/// connections (is ApiVersions answered, left unanswered or the connection closed) and by a
/// real client (librdkafka's and the Java AdminClient's metadata call, ok or failed):
/// `max.connections.per.ip=3` with this IP holding three, then with them closed; then
/// `max.connections=2` with two held (a third waits unanswered until one closes); then
/// `max.connection.creation.rate=2` and a burst of 24 (20 fit in its first ten windows).
fn connection_limits(boot: &str) -> Vec<String> {
    use kafka_protocol::messages::incremental_alter_configs_request as inc;
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    use std::io::Read;
    use std::net::TcpStream;
    let text = |v: &str| StrBytes::from_string(v.to_owned());
    let set = |key: &str, value: Option<&str>| {
        let mut admin = WireClient::connect(boot).expect("connect");
        let r = admin
            .send(
                IncrementalAlterConfigsRequest::default().with_resources(vec![
                    inc::AlterConfigsResource::default()
                        .with_resource_type(4)
                        .with_resource_name(text(""))
                        .with_configs(vec![inc::AlterableConfig::default()
                            .with_name(text(key))
                            .with_config_operation(if value.is_some() { 0 } else { 1 })
                            .with_value(value.map(text))]),
                ]),
            )
            .expect("IncrementalAlterConfigs");
        assert_eq!(r.responses[0].error_code, 0, "{:?}", r.responses[0]);
        drop(admin);
        // Kafka applies dynamic broker configs asynchronously.
        std::thread::sleep(Duration::from_secs(2));
    };
    let connect = || TcpStream::connect(boot).expect("connect");
    let librdkafka = || {
        let ran = proc::run(
            python::script("metadata_probe.py").args([boot, "5"]),
            Duration::from_secs(30),
        );
        if ran.status.success() {
            "ok"
        } else {
            "failed"
        }
    };
    let java = || {
        let dir = tempfile::tempdir().expect("temp dir");
        let props = dir.path().join("admin.properties");
        std::fs::write(
            &props,
            "request.timeout.ms=3000\ndefault.api.timeout.ms=6000\nreconnect.backoff.max.ms=500\n",
        )
        .expect("admin config");
        let ran = proc::run(
            java::tool(java::tools::TOPIC_COMMAND).args([
                "--bootstrap-server",
                boot,
                "--list",
                "--command-config",
                &props.display().to_string(),
            ]),
            Duration::from_secs(60),
        );
        if ran.status.success() {
            "ok"
        } else {
            "failed"
        }
    };
    let mut out = Vec::new();
    set("max.connections.per.ip", Some("3"));
    let mut held: Vec<TcpStream> = (0..3).map(|_| connect()).collect();
    let answers: Vec<&str> = held.iter_mut().map(&ask).collect();
    out.push(format!("per-ip 3, three held: {answers:?}"));
    out.push(format!("per-ip 3, a fourth: {}", ask(&mut connect())));
    out.push(format!("per-ip 3, librdkafka while full: {}", librdkafka()));
    out.push(format!("per-ip 3, Java while full: {}", java()));
    held.clear();
    std::thread::sleep(Duration::from_millis(500));
    out.push(format!("per-ip 3, librdkafka after: {}", librdkafka()));
    out.push(format!("per-ip 3, Java after: {}", java()));
    set("max.connections.per.ip", None);
    set("max.connections", Some("2"));
    let mut held: Vec<TcpStream> = (0..2).map(|_| connect()).collect();
    let answers: Vec<&str> = held.iter_mut().map(&ask).collect();
    out.push(format!("max 2, two held: {answers:?}"));
    let mut third = connect();
    out.push(format!("max 2, a third: {}", ask(&mut third)));
    held.pop();
    // Its request was read once a slot freed: the answer arrives now.
    let mut head = [0u8; 4];
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    out.push(format!(
        "max 2, the third once one closed: {}",
        if third.read_exact(&mut head).is_ok() {
            "answered"
        } else {
            "never answered"
        }
    ));
    drop((held, third));
    // Removed over a connection of its own, once the others closed.
    std::thread::sleep(Duration::from_millis(500));
    set("max.connections", None);
    // The broker-wide creation rate delays connections (the listener stops accepting for
    // the throttle time), it does not refuse them: every one is answered, the burst late.
    set("max.connection.creation.rate", Some("2"));
    let started = Instant::now();
    let mut tally = std::collections::BTreeMap::<&str, usize>::new();
    for mut s in (0..24).map(|_| connect()).collect::<Vec<_>>() {
        *tally.entry(ask(&mut s)).or_default() += 1;
    }
    out.push(format!(
        "creation rate 2/s, 24 at once: {tally:?}, delayed over 1 s: {}",
        started.elapsed() > Duration::from_secs(1)
    ));
    std::thread::sleep(Duration::from_secs(1));
    set("max.connection.creation.rate", None);
    out
}

fn scenarios(boot: &str) -> Vec<String> {
    let mut out = duplicate_create(boot);
    out.extend(metadata_auto_create(boot));
    out.extend(consumer_protocol_regex_on_internal_topic(boot));
    out.extend(config_resources_and_log_dirs(boot));
    out.extend(dynamic_broker_configs(boot));
    out.extend(group_configs(boot));
    // Before the mutation quota's scenario: the connections it throttles stay muted (and
    // counted, on both brokers) for over ten seconds after the client closed them.
    out.extend(connection_limits(boot));
    out.extend(controller_mutation_quota(boot));
    out.extend(connection_creation_rate_quota(boot));
    out
}

#[test]
fn admin_and_group_findings_of_kafka_4_1_clients_answer_as_apache_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::start_with(KafkaOptions {
        props: vec![("auto.create.topics.enable".into(), "true".into())],
        ..Default::default()
    });
    let on_kafka = scenarios(&kafka.bootstrap());
    drop(kafka);
    let node = KmirrorNode::start();
    let on_kmirror = scenarios(&node.addr());
    eprintln!(
        "Kafka:\n{}\nkmirror:\n{}",
        on_kafka.join("\n"),
        on_kmirror.join("\n")
    );
    assert_eq!(on_kmirror, on_kafka);
}

/// librdkafka's CreateTopics and a produce, sent through one node the moment its listener
/// opens: on a three-node cluster still forming (the other two start after the client asked)
/// and on a node restarted into a running cluster, both succeed, as on Apache Kafka (whose
/// listeners open once the broker has caught up; its cluster is asked the same right after
/// it starts).
///
/// The forming cluster's topic has one replica: while brokers are still registering, a
/// replication factor above the registered count is INVALID_REPLICATION_FACTOR on Kafka
/// too. What must not happen is the finding of issue 23: Metadata naming as controller a
/// node whose broker is not registered yet, so librdkafka waits "for controller" until it
/// times out. The restarted node's topic takes the default of three replicas.
#[test]
fn clients_asking_the_moment_a_listener_opens_succeed_on_a_forming_and_a_restarted_cluster() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let early = |boot: &str, topic: &str, rf: &str| -> LineChild {
        LineChild::spawn(python::script("early_client.py").args([boot, topic, "100", rf]))
    };
    let judge = |client: LineChild, what: &str| {
        let (status, lines) = client.wait(Duration::from_secs(150));
        eprintln!("{what}: {lines:?}");
        assert!(
            status.success() && lines.iter().any(|l| l.starts_with("ACKED 100")),
            "{what}: {lines:?}"
        );
    };
    {
        let kafka = KafkaCluster::start_with(KafkaOptions {
            nodes: 3,
            ..Default::default()
        });
        judge(
            early(&kafka.addr_of(1), "early", "1"),
            "Apache Kafka, just started",
        );
    }

    let cports: Vec<u16> = (0..3).map(|_| proc::free_port()).collect();
    let quorum = cports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let start = |i: usize| {
        let id = (i + 1).to_string();
        let controller = format!("127.0.0.1:{}", cports[i]);
        KmirrorNode::builder()
            .args(&[
                "--node-id",
                &id,
                "--controller-listen",
                &controller,
                "--quorum",
                &quorum,
                "--default-replication-factor",
                "3",
            ])
            .start()
    };
    let first = start(0);
    let client = early(&first.addr(), "early", "1");
    // The rest of the cluster comes up while the client is already asking.
    let (_second, mut third) = std::thread::scope(|s| {
        let a = s.spawn(|| start(1));
        let b = s.spawn(|| start(2));
        (a.join().expect("node 2"), b.join().expect("node 3"))
    });
    judge(client, "kmirror, cluster forming");

    third.kill_now();
    third.start_again();
    judge(
        early(&third.addr(), "early-again", "-1"),
        "kmirror, node restarted",
    );
    drop(first);
}
