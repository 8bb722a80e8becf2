//! The mirror fetcher and the client against a real Apache Kafka 4.1.1 source, into the real
//! kmirror log. Checks the data-path promises that do not need the broker: same offsets,
//! byte-identical batches (CRC included), destination epoch >= source epoch, and the
//! "source log start moved past our end" path.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::{DeleteRecordsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_log::{LeaderEpoch, Log, LogConfig, LogError, Offset};
use kmirror_mirror::client::{build, BlockingConnection};
use kmirror_mirror::{
    fetcher_client_id, EpochEnd, FetchEvent, FetchObserver, FetcherConfig, KafkaSource, LocalError,
    LocalPartition, PartitionFetcher, Step,
};
use kmirror_tests::records::{batch, split_batches};
use kmirror_tests::{KafkaCluster, WireClient};
use kmirror_types::TopicPartition;

/// The real log plus the partition leader epoch the broker would keep next to it.
struct LogLocal {
    log: Log,
    epoch: i32,
}

impl LocalPartition for LogLocal {
    async fn log_start_offset(&self) -> Result<Offset, LocalError> {
        Ok(self.log.log_start_offset())
    }
    async fn log_end_offset(&self) -> Result<Offset, LocalError> {
        Ok(self.log.log_end_offset())
    }
    async fn leader_epoch(&self) -> Result<LeaderEpoch, LocalError> {
        Ok(LeaderEpoch(self.epoch))
    }
    async fn bump_leader_epoch_to(&mut self, epoch: LeaderEpoch) -> Result<(), LocalError> {
        self.epoch = epoch.get();
        Ok(())
    }
    async fn append_mirror(&mut self, batches: Bytes) -> Result<Offset, LocalError> {
        let info = self.log.append_mirror(batches).map_err(|e| match e {
            LogError::Corrupt { .. } => LocalError::Corrupt(e.to_string()),
            other => LocalError::Other(other.to_string()),
        })?;
        let end = self.log.log_end_offset();
        self.log.set_high_watermark(end);
        Ok(info.last_offset)
    }
    async fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LocalError> {
        self.log
            .truncate_fully_and_start_at(offset)
            .map_err(|e| LocalError::Other(e.to_string()))
    }
    async fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<EpochEnd> {
        self.log
            .end_offset_for_epoch(epoch)
            .map(|(epoch, end_offset)| EpochEnd { epoch, end_offset })
    }
    async fn truncate_to(&mut self, offset: Offset) -> Result<(), LocalError> {
        self.log
            .truncate_to(offset)
            .map_err(|e| LocalError::Other(e.to_string()))
    }
}

#[derive(Default)]
struct Events(Vec<FetchEvent>);
impl FetchObserver for Events {
    fn on_event(&mut self, _tp: &TopicPartition, e: FetchEvent) {
        self.0.push(e);
    }
}

/// Every batch of the local log from its start, as stored.
fn local_batches(log: &Log) -> Vec<(i64, Bytes)> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let r = log
            .read(at, 1 << 20, log.log_end_offset())
            .expect("read local log");
        let bs = split_batches(&r.records);
        assert!(!bs.is_empty(), "local read at {at} returned nothing");
        for b in &bs {
            out.push((b.base_offset, b.bytes.clone()));
        }
        at = Offset(bs.last().unwrap().last_offset + 1);
    }
    out
}

/// Every batch of the source partition from its log start.
fn source_batches(c: &mut WireClient, topic: &str) -> Vec<(i64, Bytes)> {
    let (start, end) = c.log_bounds(topic, 0).expect("bounds");
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let p = c.fetch_raw(topic, 0, at, 1 << 20, true).expect("fetch");
        let bs = split_batches(&p.records.unwrap_or_default());
        for b in &bs {
            assert!(b.crc_ok());
            out.push((b.base_offset, b.bytes.clone()));
        }
        at = bs.last().expect("progress").last_offset + 1;
    }
    out
}

/// Run fetch rounds on a glommio executor until the local log reaches `target_end`.
fn mirror_until(
    bootstrap: &str,
    fetcher: &mut PartitionFetcher,
    local: &mut LogLocal,
    events: &mut Events,
    target_end: i64,
) {
    let bootstrap = bootstrap.to_owned();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .expect("executor")
        .run(async {
            let mut source = KafkaSource::new(
                &bootstrap,
                fetcher_client_id(1, 0, "it"),
                Duration::from_secs(10),
            );
            let deadline = Instant::now() + Duration::from_secs(60);
            while local.log.log_end_offset().0 < target_end {
                assert!(
                    Instant::now() < deadline,
                    "mirroring stalled at {}: {:?}",
                    local.log.log_end_offset().0,
                    events.0.last()
                );
                if let Step::Backoff(d) = fetcher.step(&mut source, local, events).await {
                    glommio::timer::sleep(d).await;
                }
            }
        });
}

fn config() -> FetcherConfig {
    FetcherConfig {
        max_wait_ms: 100,
        partition_max_bytes: 4096, // several rounds, partial trailing batches on the way
        ..Default::default()
    }
}

#[test]
fn fetcher_mirrors_kafka_batches_at_same_offsets_byte_identical_and_follows_log_start() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let boot = kafka.bootstrap();
    kafka.create_topic("orders", 1, &[]);
    let mut wire = WireClient::connect_leader(&boot, "orders", 0).expect("leader");
    for i in 0..40u32 {
        let values: Vec<Vec<u8>> = (0..(1 + i % 7))
            .map(|j| format!("value-{i}-{j}-{}", "x".repeat((i * 13 % 200) as usize)).into_bytes())
            .collect();
        let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        let (code, _) = wire
            .produce_raw(
                "orders",
                0,
                batch(&refs, 1_700_000_000_000 + i64::from(i)),
                -1,
            )
            .expect("produce");
        assert_eq!(code, 0);
    }
    let (_, end) = wire.log_bounds("orders", 0).unwrap();
    let source_epoch = wire.partition_info("orders", 0).unwrap().leader_epoch;

    // The admin client speaks to Kafka too (ApiVersions negotiation, Metadata).
    let mut admin = BlockingConnection::connect(&boot, "kmirror-it", Duration::from_secs(10))
        .expect("blocking client");
    let md = admin
        .send(&build::metadata(Some(&["orders".to_owned()])))
        .unwrap();
    assert_eq!(md.topics[0].partitions.len(), 1);
    assert!(
        !admin.versions().supports_mirroring(),
        "Kafka 4.1 has no mirror APIs"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut local = LogLocal {
        log: Log::open(dir.path(), LogConfig::default()).unwrap(),
        epoch: 0,
    };
    let tp = TopicPartition::new("orders", 0);
    let mut fetcher = PartitionFetcher::new(tp, uuid::Uuid::nil(), config());
    let mut events = Events::default();
    mirror_until(&boot, &mut fetcher, &mut local, &mut events, end);

    assert_eq!(local.log.log_end_offset().0, end);
    assert_eq!(
        local_batches(&local.log),
        source_batches(&mut wire, "orders"),
        "every batch byte-identical at the same offset"
    );
    assert!(
        local.epoch >= source_epoch,
        "destination epoch below the source's"
    );
    assert_eq!(
        local.log.latest_epoch(),
        Some(LeaderEpoch(source_epoch)),
        "batches keep the source's partition leader epoch"
    );
    assert!(!events
        .0
        .iter()
        .any(|e| matches!(e, FetchEvent::Failed { .. })));

    // Source retention moves the log start past our end: we truncate fully, report the gap
    // and continue from the source's log start.
    for i in 0..10u32 {
        let v = format!("later-{i}").into_bytes();
        wire.produce_raw("orders", 0, batch(&[v.as_slice()], 1_700_000_100_000), -1)
            .unwrap();
    }
    let (_, end2) = wire.log_bounds("orders", 0).unwrap();
    let cut = end + 5;
    let dr = admin
        .send(
            &DeleteRecordsRequest::default()
                .with_timeout_ms(10_000)
                .with_topics(vec![DeleteRecordsTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("orders")))
                    .with_partitions(vec![DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(cut)])]),
        )
        .expect("DeleteRecords");
    assert_eq!(dr.topics[0].partitions[0].error_code, 0);
    mirror_until(&boot, &mut fetcher, &mut local, &mut events, end2);
    assert!(events.0.contains(&FetchEvent::SourceLogStartMoved {
        lost_from: Offset(end),
        lost_to: Offset(cut)
    }));
    assert_eq!(local.log.log_end_offset().0, end2);
    let src = source_batches(&mut wire, "orders");
    let dst = local_batches(&local.log);
    assert_eq!(dst, src, "log-equal after the source log start moved");
}

#[test]
fn source_snapshot_reports_ids_partitions_set_configs_and_committed_group_offsets() {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest};

    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let boot = kafka.bootstrap();
    kafka.create_topic("orders", 3, &[("retention.ms", "123456")]);
    kafka.create_topic("other", 1, &[]);
    let mut wire = WireClient::connect(&boot).unwrap();
    let orders_id = wire.partition_info("orders", 0).unwrap().topic_id;

    // Commit an offset for a member-less ("simple") group, retrying while the offsets topic
    // is being created.
    let mut admin = BlockingConnection::connect(&boot, "kmirror-it", Duration::from_secs(10))
        .expect("blocking client");
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("app")))
        .with_generation_id_or_member_epoch(-1)
        .with_retention_time_ms(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(1)
                .with_committed_offset(7)
                .with_committed_leader_epoch(-1)])]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // FindCoordinator makes Kafka create __consumer_offsets and load the group.
        let _ = admin.send_built(0, i16::MAX, |v| build::find_group_coordinator("app", v));
        let (_, r) = admin.send_with(&commit, 2, 9).expect("OffsetCommit");
        let c = r.topics[0].partitions[0].error_code;
        if c == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "OffsetCommit kept failing with {c}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    let (cluster_id, topics, groups) =
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .make()
            .unwrap()
            .run(async {
                let mut s =
                    KafkaSource::new(&boot, "kmirror-it-sync".into(), Duration::from_secs(10));
                let (cid, topics) = s.topics_snapshot(|t| t.starts_with("ord")).await.unwrap();
                let groups = s.group_offsets(|_| true).await.unwrap();
                (cid, topics, groups)
            });
    assert!(!cluster_id.is_empty());
    assert_eq!(topics.len(), 1, "{topics:?}");
    assert_eq!(topics[0].name, "orders");
    assert_eq!(topics[0].topic_id, orders_id);
    assert_eq!(topics[0].partitions, 3);
    assert_eq!(
        topics[0].configs.get("retention.ms").map(String::as_str),
        Some("123456")
    );
    assert!(
        !topics[0].configs.contains_key("segment.bytes"),
        "defaults are not synced"
    );
    assert_eq!(
        groups
            .get("app")
            .and_then(|g| g.get(&TopicPartition::new("orders", 1))),
        Some(&7)
    );
}

#[test]
fn re_added_stopped_topic_truncates_only_its_own_writes_then_mirrors_log_equal() {
    use kmirror_mirror::{prepare_partition, LmeOrigin};

    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let boot = kafka.bootstrap();
    kafka.create_topic("orders", 1, &[]);
    let mut wire = WireClient::connect_leader(&boot, "orders", 0).expect("leader");
    let produce = |wire: &mut WireClient, tag: &str, n: u32| {
        for i in 0..n {
            let v = format!("{tag}-{i}").into_bytes();
            let (c, _) = wire
                .produce_raw("orders", 0, batch(&[v.as_slice()], 1_700_000_000_000), -1)
                .unwrap();
            assert_eq!(c, 0);
        }
    };
    produce(&mut wire, "a", 20);
    let (_, end) = wire.log_bounds("orders", 0).unwrap();
    let source_epoch = wire.partition_info("orders", 0).unwrap().leader_epoch;

    let dir = tempfile::tempdir().unwrap();
    let mut local = LogLocal {
        log: Log::open(dir.path(), LogConfig::default()).unwrap(),
        epoch: 0,
    };
    let tp = TopicPartition::new("orders", 0);
    let mut fetcher = PartitionFetcher::new(tp.clone(), uuid::Uuid::nil(), config());
    let mut events = Events::default();
    mirror_until(&boot, &mut fetcher, &mut local, &mut events, end);

    // Failover: our own writes at a higher epoch; meanwhile the source keeps writing.
    let lme = local.epoch;
    assert!(lme >= source_epoch);
    for i in 0..5 {
        let v = format!("local-{i}").into_bytes();
        local
            .log
            .append_leader(batch(&[v.as_slice()], 1), LeaderEpoch(lme + 1), 1)
            .unwrap();
    }
    produce(&mut wire, "b", 8);
    let (_, end2) = wire.log_bounds("orders", 0).unwrap();
    assert_eq!(local.log.log_end_offset().0, end + 5);

    // Re-add to the mirror: PREPARING uses our LME against the source's epoch end offsets.
    let plan = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .make()
        .unwrap()
        .run(async {
            let mut source = KafkaSource::new(&boot, "kmirror-it".into(), Duration::from_secs(10));
            prepare_partition(&mut source, &mut local, "dr", &tp, Some(LeaderEpoch(lme)))
                .await
                .expect("prepare")
        });
    assert_eq!(plan.origin, LmeOrigin::Local);
    assert_eq!(
        (plan.local_end_offset, plan.truncate_to),
        (Offset(end + 5), Offset(end))
    );
    assert_eq!(local.log.log_end_offset().0, end);

    let mut fetcher = PartitionFetcher::new(tp, uuid::Uuid::nil(), config());
    mirror_until(&boot, &mut fetcher, &mut local, &mut events, end2);
    assert_eq!(
        local_batches(&local.log),
        source_batches(&mut wire, "orders")
    );
}

/// Catch-up throughput of one partition fetcher from Kafka into the real log (manual:
/// `cargo test --release -p kmirror-net --test mirror_fetch_from_kafka -- --ignored --nocapture`).
#[test]
#[ignore]
fn measure_single_partition_catch_up_throughput() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let boot = kafka.bootstrap();
    kafka.create_topic("bulk", 1, &[]);
    let mut wire = WireClient::connect_leader(&boot, "bulk", 0).expect("leader");
    let value = vec![b'x'; 1000];
    let values: Vec<&[u8]> = (0..1000).map(|_| value.as_slice()).collect();
    let one = batch(&values, 1_700_000_000_000);
    let total_batches = 256;
    for _ in 0..total_batches {
        let (c, _) = wire.produce_raw("bulk", 0, one.clone(), 1).unwrap();
        assert_eq!(c, 0);
    }
    let (_, end) = wire.log_bounds("bulk", 0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut local = LogLocal {
        log: Log::open(dir.path(), LogConfig::default()).unwrap(),
        epoch: 0,
    };
    let mut fetcher = PartitionFetcher::new(
        TopicPartition::new("bulk", 0),
        uuid::Uuid::nil(),
        FetcherConfig::default(),
    );
    let mut events = Events::default();
    let t0 = Instant::now();
    mirror_until(&boot, &mut fetcher, &mut local, &mut events, end);
    let secs = t0.elapsed().as_secs_f64();
    let mb = (one.len() * total_batches) as f64 / 1e6;
    eprintln!("mirrored {mb:.0} MB in {secs:.2} s: {:.0} MB/s", mb / secs);
}
