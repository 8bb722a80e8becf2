//! Mirror fetchers running on the engine's cores (one task per partition, on the partition's
//! owning core) through [`EngineLocalPartition`], from a real Apache Kafka source: the
//! per-core data path the broker will use. Checks log-equal per partition and that the
//! engine keeps refusing client writes to the mirrored partitions.

use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kmirror_engine::{Catalog, Engine, EngineConfig, EngineError, PartitionSpec};
use kmirror_log::{LeaderEpoch, LogConfig, Offset};
use kmirror_mirror::{
    fetcher_client_id, mirror_partition, EngineLocalPartition, FetchEvent, FetchObserver,
    FetcherConfig, KafkaSource, PartitionFetcher,
};
use kmirror_tests::records::{batch, split_batches};
use kmirror_tests::{KafkaCluster, WireClient};
use kmirror_types::TopicPartition;

struct Fixed {
    dir: PathBuf,
    partitions: Vec<TopicPartition>,
}

impl Catalog for Fixed {
    fn partition_spec(&self, tp: &TopicPartition) -> Option<PartitionSpec> {
        self.partitions.contains(tp).then(|| PartitionSpec {
            replicated: false,
            dir: self.dir.join(tp.to_string()),
            config: LogConfig::default(),
            leader_epoch: LeaderEpoch(0),
            topic_id: 7,
            mirror: Some("dr".into()),
            write_fence: None,
        })
    }
    fn all_partitions(&self) -> Vec<TopicPartition> {
        self.partitions.clone()
    }
}

/// Forwards progress to the test thread; stops the fetcher when told to.
struct Forward {
    tx: mpsc::Sender<(TopicPartition, i64)>,
    shutdown: Arc<AtomicBool>,
    stop: Rc<Cell<bool>>,
}

impl FetchObserver for Forward {
    fn on_event(&mut self, tp: &TopicPartition, e: FetchEvent) {
        if let FetchEvent::Progress(st) = &e {
            let _ = self.tx.send((tp.clone(), st.destination_log_end_offset));
        }
        if let FetchEvent::Failed { reason } = &e {
            panic!("{tp} failed: {reason}");
        }
        if self.shutdown.load(Ordering::Relaxed) {
            self.stop.set(true);
        }
    }
}

fn source_batches(c: &mut WireClient, topic: &str, p: i32) -> Vec<(i64, Bytes)> {
    let (start, end) = c.log_bounds(topic, p).expect("bounds");
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let r = c.fetch_raw(topic, p, at, 1 << 20, true).expect("fetch");
        let bs = split_batches(&r.records.unwrap_or_default());
        for b in &bs {
            out.push((b.base_offset, b.bytes.clone()));
        }
        at = bs.last().expect("progress").last_offset + 1;
    }
    out
}

#[test]
fn fetchers_on_owning_cores_mirror_kafka_partitions_log_equal() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let boot = kafka.bootstrap();
    kafka.create_topic("orders", 2, &[]);
    let mut ends = Vec::new();
    for p in 0..2 {
        let mut wire = WireClient::connect_leader(&boot, "orders", p).unwrap();
        for i in 0..30 {
            let v = format!("p{p}-{i}").into_bytes();
            let (c, _) = wire
                .produce_raw(
                    "orders",
                    p,
                    batch(&[v.as_slice(), b"x"], 1_700_000_000_000),
                    -1,
                )
                .unwrap();
            assert_eq!(c, 0);
        }
        ends.push(wire.log_bounds("orders", p).unwrap().1);
    }

    let dir = tempfile::tempdir().unwrap();
    let tps: Vec<TopicPartition> = (0..2).map(|p| TopicPartition::new("orders", p)).collect();
    let catalog = Arc::new(Fixed {
        dir: dir.path().to_path_buf(),
        partitions: tps.clone(),
    });
    let engine = Engine::start(
        EngineConfig {
            cores: 2,
            pin: false,
            ..EngineConfig::default()
        },
        catalog,
        |ctx| async move { ctx.stop.stopped().await },
    )
    .unwrap();
    let router = engine.router().clone();
    let (tx, rx) = mpsc::channel();
    let shutdown = Arc::new(AtomicBool::new(false));
    for tp in &tps {
        let (router2, tp2, tx, shutdown, boot) = (
            router.clone(),
            tp.clone(),
            tx.clone(),
            shutdown.clone(),
            boot.clone(),
        );
        router
            .spawn_on_blocking(router.owner(tp), move || async move {
                let mut source = KafkaSource::new(
                    &boot,
                    fetcher_client_id(1, tp2.partition as u32, "dr"),
                    Duration::from_secs(10),
                );
                let mut local = EngineLocalPartition::new(router2, tp2.clone());
                let stop = Rc::new(Cell::new(false));
                let mut obs = Forward {
                    tx,
                    shutdown,
                    stop: stop.clone(),
                };
                let fetcher = PartitionFetcher::new(
                    tp2,
                    uuid::Uuid::nil(),
                    FetcherConfig {
                        max_wait_ms: 50,
                        ..Default::default()
                    },
                );
                mirror_partition(
                    &mut source,
                    &mut local,
                    &mut obs,
                    &stop,
                    "dr",
                    fetcher,
                    None,
                    false,
                )
                .await;
            })
            .unwrap();
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut reached = [false, false];
    while !reached.iter().all(|r| *r) {
        let left = deadline.saturating_duration_since(Instant::now());
        let (tp, end) = rx.recv_timeout(left).expect("progress before the deadline");
        let p = tp.partition as usize;
        reached[p] |= end >= ends[p];
    }

    let mut wire = WireClient::connect(&boot).unwrap();
    for tp in &tps {
        let want = source_batches(&mut wire, "orders", tp.partition);
        let tp2 = tp.clone();
        let got: Vec<(i64, Bytes)> = router
            .run_on_blocking(router.owner(tp), move |shard| {
                let p = shard.partition(&tp2).unwrap();
                let end = p.log.log_end_offset();
                let r = p.log.read(p.log.log_start_offset(), 64 << 20, end).unwrap();
                split_batches(&r.records)
                    .into_iter()
                    .map(|b| (b.base_offset, b.bytes))
                    .collect()
            })
            .unwrap();
        assert_eq!(got, want, "{tp}: log-equal with the source");
        // Mirrored partitions stay read-only for clients.
        let tp3 = tp.clone();
        let end = ends[tp.partition as usize];
        let refused = router
            .run_on_blocking(router.owner(tp), move |shard| {
                let p = shard.partition(&tp3).unwrap();
                matches!(
                    p.append_leader(batch(&[b"client"], 1), 1),
                    Err(EngineError::ReadOnly { .. })
                ) && p.log.log_end_offset() == Offset(end)
            })
            .unwrap();
        assert!(refused, "{tp}: a client write got in");
    }
    shutdown.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    engine.stop();
}

#[test]
fn fetcher_manager_starts_stops_and_resumes_partitions_and_reports_live_lag() {
    use kmirror_mirror::MirrorLiveStatus;
    use kmirror_mirror::{FetchTask, FetcherManager};

    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let boot = kafka.bootstrap();
    kafka.create_topic("orders", 2, &[]);
    let mut wire: Vec<WireClient> = (0..2)
        .map(|p| WireClient::connect_leader(&boot, "orders", p).unwrap())
        .collect();
    let produce = |w: &mut WireClient, p: i32, n: usize| {
        for i in 0..n {
            let v = format!("p{p}-{i}").into_bytes();
            let (c, _) = w
                .produce_raw("orders", p, batch(&[v.as_slice()], 1_700_000_000_000), -1)
                .unwrap();
            assert_eq!(c, 0);
        }
        w.log_bounds("orders", p).unwrap().1
    };
    let ends: Vec<i64> = (0..2)
        .map(|p| produce(&mut wire[p], p as i32, 20))
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let tps: Vec<TopicPartition> = (0..2).map(|p| TopicPartition::new("orders", p)).collect();
    let engine = Engine::start(
        EngineConfig {
            cores: 2,
            pin: false,
            ..EngineConfig::default()
        },
        Arc::new(Fixed {
            dir: dir.path().to_path_buf(),
            partitions: tps.clone(),
        }),
        |ctx| async move { ctx.stop.stopped().await },
    )
    .unwrap();
    let (tx, rx) = flume::unbounded();
    let mgr = FetcherManager::new(
        engine.router().clone(),
        1,
        FetcherConfig {
            max_wait_ms: 50,
            ..Default::default()
        },
        tx,
    );
    let task = |tp: &TopicPartition, skip_prepare| FetchTask {
        mirror: "dr".into(),
        source_bootstrap: boot.clone(),
        tp: tp.clone(),
        topic_id: uuid::Uuid::nil(),
        local_lme: None,
        skip_prepare,
        retry_backoff_ms: None,
        retry_backoff_max_ms: None,
        throttled_rate: 0,
        priority: false,
        broker_throttled: true,
        fetch_max_bytes: None,
        fetch_partition_max_bytes: None,
        fetch_max_wait_ms: None,
        security: Ok(Default::default()),
        start_timestamp: -2,
    };
    for tp in &tps {
        mgr.start(task(tp, false)).unwrap();
        mgr.start(task(tp, false)).unwrap(); // idempotent
    }
    let wait_dest = |want: &[i64]| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let done = tps.iter().all(|tp| {
                mgr.live(tp, 0).is_some_and(|l| {
                    l.destination_offset == want[tp.partition as usize] && l.lag == 0
                })
            });
            if done {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not caught up: {:?}",
                tps.iter().map(|t| mgr.status(t)).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_dest(&ends);
    let prepared = rx
        .try_iter()
        .filter(|(_, e)| matches!(e, FetchEvent::Prepared(_)))
        .count();
    assert_eq!(prepared, 2, "one PREPARING per partition");

    // Stop partition 0: it no longer follows the source, and its lag shows it.
    assert!(mgr.stop_and_wait(&tps[0], Duration::from_secs(5)));
    assert!(!mgr.is_running(&tps[0]));
    let ends2: Vec<i64> = (0..2).map(|p| produce(&mut wire[p], p as i32, 5)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let l0 = mgr.live(&tps[0], 0).unwrap();
    assert_eq!(
        l0.destination_offset, ends[0],
        "stopped partition did not move"
    );
    let l1 = mgr.live(&tps[1], 0).unwrap();
    assert_eq!(
        l1.destination_offset, ends2[1],
        "the other partition kept mirroring"
    );

    // Resume after a restart-like stop: from the local log end, no preparation.
    mgr.start(task(&tps[0], true)).unwrap();
    wait_dest(&ends2);
    mgr.stop_all(Duration::from_secs(5));
    engine.stop();
}
