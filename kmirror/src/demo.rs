//! `kmirror demo`: a self-contained run on loopback. Two embedded kmirror nodes (one plays
//! the source cluster) on free ports with temporary data directories: a topic is created and
//! filled on the source, a mirror is created on the destination, the topic is added, live
//! DescribeMirrors progress is shown until the lag is 0 (while more data arrives), a produce to
//! the mirror topic is refused, then the topic is failed over and written to at a higher
//! leader epoch. Everything is removed on exit.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{CreateTopicsRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror::node::{RunningBroker, ServerConfig};
use kmirror_engine::EngineConfig;
use kmirror_log::batch::{build_batch, BatchSpec};
use kmirror_mirror::api::DescribeMirrorsRequest;
use kmirror_mirror::client::{BlockingConnection, BlockingMirrorCalls};
use kmirror_mirror::{MirrorBroker, MirrorSettings};
use kmirror_types::LeaderEpoch;

use crate::mirror_cli::{describe_rows, format_table};

type DemoResult<T> = Result<T, Box<dyn std::error::Error>>;

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 3;
const MIRROR: &str = "dr";
const TIMEOUT: Duration = Duration::from_secs(10);

struct Node {
    broker: Option<RunningBroker>,
    mirror: Arc<MirrorBroker>,
}

impl Node {
    fn start(dir: &Path, node_id: i32) -> DemoResult<Node> {
        let mirror = MirrorBroker::open(dir, MirrorSettings::default())?;
        let broker = kmirror::node::start(
            ServerConfig {
                listeners: vec![
                    kmirror_net::ListenerSpec::plaintext("127.0.0.1:0").expect("listener")
                ],
                tls: Default::default(),
                node_id,
                data_dir: dir.to_path_buf(),
                max_request_bytes: 100 << 20,
                auto_create_topics: false,
                default_partitions: 1,
                engine: EngineConfig {
                    cores: 1,
                    pin: false,
                    ..EngineConfig::default()
                },
                authz: Default::default(),
                sasl: Default::default(),
                groups: Default::default(),
            },
            Some(mirror.clone()),
        )?;
        Ok(Node {
            broker: Some(broker),
            mirror,
        })
    }

    fn addr(&self) -> String {
        self.broker
            .as_ref()
            .map(|b| b.addr().to_string())
            .unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.mirror.shutdown();
        if let Some(b) = self.broker.take() {
            b.stop();
        }
    }
}

/// Removes the demo's data directory however the demo ends.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn step(n: u32, text: &str) {
    println!("\n== {n}. {text}");
}

pub(crate) fn run() -> DemoResult<()> {
    let root = TempDir(std::env::temp_dir().join(format!(
        "kmirror-demo-{}-{}",
        std::process::id(),
        kmirror_engine::now_ms()
    )));
    std::fs::create_dir_all(&root.0)?;

    step(1, "start two kmirror nodes on loopback");
    let source = Node::start(&root.0.join("source"), 1)?;
    let dest = Node::start(&root.0.join("destination"), 2)?;
    let (src, dst) = (source.addr(), dest.addr());
    println!("   source      {src}   (plays the primary cluster)");
    println!("   destination {dst}   (the disaster-recovery cluster)");

    step(
        2,
        &format!("create topic '{TOPIC}' ({PARTITIONS} partitions) on the source and produce"),
    );
    let mut sc = BlockingConnection::connect(&src, "kmirror-demo", TIMEOUT)?;
    create_topic(&mut sc, TOPIC, PARTITIONS)?;
    let first = produce(&mut sc, TOPIC, 0, 20_000)?;
    println!("   produced {first} records");

    step(3, "create the mirror on the destination and add the topic");
    let cli = |args: &[&str]| -> DemoResult<()> {
        let mut v = vec!["--bootstrap".to_owned(), dst.clone()];
        v.extend(args.iter().map(|s| s.to_string()));
        println!("   $ kmirror mirror {}", v.join(" "));
        crate::mirror_cli::run(v)
    };
    cli(&[
        "create",
        MIRROR,
        "--source",
        &src,
        "--set",
        "mirror.metadata.sync.interval.ms=1000",
    ])?;
    cli(&["add", MIRROR, "--topics", TOPIC])?;

    step(
        4,
        "mirror while the source keeps receiving data (live DescribeMirrors)",
    );
    let mut dc = BlockingConnection::connect(&dst, "kmirror-demo", TIMEOUT)?;
    let second = 20_000u64;
    let total = first + second;
    let producer = {
        let src = src.clone();
        std::thread::spawn(move || -> Result<u64, String> {
            let mut c = BlockingConnection::connect(&src, "kmirror-demo-producer", TIMEOUT)
                .map_err(|e| e.to_string())?;
            let mut sent = 0;
            while sent < second {
                sent += produce(&mut c, TOPIC, first + sent, 1_000).map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_millis(60));
            }
            Ok(sent)
        })
    };
    println!("   producing {second} more records in the background ({total} in all)");
    let started = Instant::now();
    let mut last_print = Instant::now() - Duration::from_secs(1);
    loop {
        let rows = describe_rows(&dc.send_mirror(&DescribeMirrorsRequest {
            mirror_names: vec![MIRROR.to_owned()],
            ..Default::default()
        })?);
        let mirrored: i64 = rows.iter().map(|r| r.destination_offset.max(0)).sum();
        let lag: i64 = rows.iter().map(|r| r.lag.max(0)).sum();
        let done = producer.is_finished()
            && rows.len() == PARTITIONS as usize
            && rows
                .iter()
                .all(|r| r.state == "MIRRORING" && r.lag == 0 && r.source_offset >= 0)
            && mirrored >= total as i64;
        if done || last_print.elapsed() >= Duration::from_millis(250) {
            last_print = Instant::now();
            let states: Vec<&str> = rows.iter().map(|r| r.state.as_str()).collect();
            println!(
                "   [{:>5} ms] mirrored {mirrored:>6} records, lag {lag:>6}  {}",
                started.elapsed().as_millis(),
                states.join(" ")
            );
        }
        if done {
            print_rows(&rows);
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            print_rows(&rows);
            return Err("mirroring did not catch up within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    producer
        .join()
        .map_err(|_| "producer thread panicked")?
        .map_err(|e| format!("producing: {e}"))?;
    let (se, de) = (end_offsets(&mut sc, TOPIC)?, end_offsets(&mut dc, TOPIC)?);
    println!("   end offsets: source {se:?}, destination {de:?}");
    if se != de {
        return Err("end offsets differ".into());
    }

    step(5, "the mirror topic is read-only on the destination");
    match produce(&mut dc, TOPIC, 0, 1) {
        Err(e) => println!("   produce refused: {e}"),
        Ok(_) => return Err("a produce to the mirror topic was accepted".into()),
    }

    step(6, "fail over: remove the topic from the mirror");
    let before = leader_epochs(&mut dc, TOPIC)?;
    cli(&["remove", MIRROR, "--topics", TOPIC])?;
    let after = leader_epochs(&mut dc, TOPIC)?;
    let rows = describe_rows(&dc.send_mirror(&DescribeMirrorsRequest {
        mirror_names: vec![MIRROR.to_owned()],
        ..Default::default()
    })?);
    print_rows(&rows);
    for (p, (b, a)) in before.iter().zip(&after).enumerate() {
        println!("   partition {p}: leader epoch {b} -> {a}");
        if a <= b {
            return Err(format!("partition {p}: leader epoch did not increase").into());
        }
    }

    step(7, "the destination topic is writable now");
    let n = produce(&mut dc, TOPIC, total, 1_000)?;
    println!("   produced {n} records to the destination at the new epoch");
    println!(
        "\nDemo complete: {total} records mirrored with identical offsets, failed over, writable."
    );
    std::io::stdout().flush()?;
    drop(dc);
    drop(sc);
    drop(dest);
    drop(source);
    Ok(())
}

fn print_rows(rows: &[crate::mirror_cli::DescribeRow]) {
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.topic.clone(),
                r.partition.to_string(),
                r.state.clone(),
                r.source_offset.to_string(),
                r.destination_offset.to_string(),
                r.lag.to_string(),
                r.lag_ms.to_string(),
            ]
        })
        .collect();
    let text = format_table(
        &[
            "TOPIC",
            "PARTITION",
            "STATE",
            "SOURCE",
            "DESTINATION",
            "LAG",
            "LAG_MS",
        ],
        &table,
    );
    for line in text.lines() {
        println!("   {line}");
    }
}

fn create_topic(c: &mut BlockingConnection, topic: &str, partitions: i32) -> DemoResult<()> {
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(10_000);
    let (_, r) = c.send_with(&req, 2, 7)?;
    for t in &r.topics {
        if t.error_code != 0 {
            return Err(format!(
                "CreateTopics {topic}: error {} {}",
                t.error_code,
                t.error_message
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            )
            .into());
        }
    }
    Ok(())
}

/// Produces `count` records round-robin over the partitions in batches of 500 (acks=all).
/// Values carry a running number starting at `first_seq`.
fn produce(c: &mut BlockingConnection, topic: &str, first_seq: u64, count: u64) -> DemoResult<u64> {
    let mut sent = 0u64;
    let mut seq = first_seq;
    let mut partition = ((first_seq / 500) % PARTITIONS as u64) as i32;
    while sent < count {
        let n = (count - sent).min(500);
        let values: Vec<Vec<u8>> = (seq..seq + n)
            .map(|i| format!("order-{i:08} {{\"amount\": {}}}", i % 997).into_bytes())
            .collect();
        let keys: Vec<Vec<u8>> = (seq..seq + n)
            .map(|i| format!("customer-{}", i % 101).into_bytes())
            .collect();
        let records: Vec<_> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| (Some(k.as_slice()), Some(v.as_slice())))
            .collect();
        let batch = build_batch(
            &BatchSpec {
                base_offset: 0,
                partition_leader_epoch: -1,
                attributes: 0,
                base_timestamp: kmirror_engine::now_ms(),
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            },
            &records,
        );
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch.into()))])]);
        let (_, r) = c.send_with(&req, 3, 12)?;
        for t in &r.responses {
            for p in &t.partition_responses {
                if p.error_code != 0 {
                    return Err(format!(
                        "error {} ({}): {}",
                        p.error_code,
                        kmirror_net::keys::error::name(p.error_code),
                        p.error_message
                            .as_ref()
                            .map(|s| s.to_string())
                            .unwrap_or_default()
                    )
                    .into());
                }
            }
        }
        sent += n;
        seq += n;
        partition = (partition + 1) % PARTITIONS;
    }
    Ok(sent)
}

/// Log end offset of every partition of `topic`.
fn end_offsets(c: &mut BlockingConnection, topic: &str) -> DemoResult<Vec<i64>> {
    use kmirror_mirror::client::build;
    let mut out = Vec::new();
    for p in 0..PARTITIONS {
        let req = build::list_offsets(topic, p, build::LATEST, LeaderEpoch::UNKNOWN, false);
        let (_, r) = c.send_with(&req, 1, i16::MAX)?;
        let x = r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .next()
            .ok_or("empty ListOffsets response")?;
        if x.error_code != 0 {
            return Err(format!("ListOffsets {topic}-{p}: error {}", x.error_code).into());
        }
        out.push(x.offset);
    }
    Ok(out)
}

/// Leader epoch of every partition of `topic`, by partition index.
fn leader_epochs(c: &mut BlockingConnection, topic: &str) -> DemoResult<Vec<i32>> {
    let (_, md) = c.send_with(
        &kmirror_mirror::client::build::metadata(Some(&[topic.to_owned()])),
        7,
        12,
    )?;
    let mut by: BTreeMap<i32, i32> = BTreeMap::new();
    for t in &md.topics {
        for p in &t.partitions {
            by.insert(p.partition_index, p.leader_epoch);
        }
    }
    Ok(by.into_values().collect())
}
