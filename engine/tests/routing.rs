//! Partition ownership across cores: jobs run on the owning core, state persists between
//! jobs, unknown partitions are reported, and stop flushes logs so a restart sees the data.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use kmirror_engine::{Catalog, Engine, EngineConfig, EngineError, PartitionSpec};
use kmirror_log::batch::{build_batch, BatchSpec};
use kmirror_log::LogConfig;
use kmirror_types::{LeaderEpoch, TopicPartition};

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
            leader_epoch: LeaderEpoch(3),
            topic_id: 7,
            mirror: None,
            write_fence: None,
        })
    }
    fn all_partitions(&self) -> Vec<TopicPartition> {
        self.partitions.clone()
    }
}

fn start(dir: &std::path::Path) -> Engine {
    let catalog = Arc::new(Fixed {
        dir: dir.to_path_buf(),
        partitions: (0..4).map(|p| TopicPartition::new("t", p)).collect(),
    });
    let cfg = EngineConfig {
        cores: 2,
        pin: false,
        ..EngineConfig::default()
    };
    Engine::start(cfg, catalog, |ctx| async move { ctx.stop.stopped().await }).unwrap()
}

fn records(n: usize) -> Bytes {
    let spec = BatchSpec {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        base_timestamp: 1,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    };
    let v = vec![(None, Some(&b"x"[..])); n];
    Bytes::from(build_batch(&spec, &v))
}

#[test]
fn jobs_run_on_the_owning_core_and_appends_survive_a_clean_stop() {
    let dir = tempfile::tempdir().unwrap();
    let engine = start(dir.path());
    let router = engine.router().clone();
    let mut cores_seen = std::collections::BTreeSet::new();
    for p in 0..4 {
        let tp = TopicPartition::new("t", p);
        let owner = router.owner(&tp);
        let tp2 = tp.clone();
        let (core, first) = router
            .run_on_blocking(owner, move |s| {
                let core = s.core();
                let part = s.partition(&tp2).unwrap();
                let a = part.append_leader(records(2), 0).unwrap();
                let b = part.append_leader(records(3), 0).unwrap();
                assert_eq!(b.first_offset.get(), a.last_offset.get() + 1);
                (core, a.first_offset.get())
            })
            .unwrap();
        assert_eq!(core, owner);
        assert_eq!(first, 0);
        cores_seen.insert(core);
    }
    // The spread assignment puts 4 partitions on both cores.
    assert_eq!(cores_seen.len(), 2);
    let missing = TopicPartition::new("nope", 0);
    let r = router.run_on_blocking(router.owner(&missing), move |s| {
        s.partition(&missing).map(|_| ())
    });
    assert!(matches!(r, Ok(Err(EngineError::UnknownPartition(_)))));
    engine.stop();

    let engine = start(dir.path());
    let router = engine.router().clone();
    for p in 0..4 {
        let tp = TopicPartition::new("t", p);
        let (leo, hw, epoch) = router
            .run_on_blocking(router.owner(&tp), move |s| {
                let part = s.partition(&tp).unwrap();
                (
                    part.log.log_end_offset().get(),
                    part.log.high_watermark().get(),
                    part.leader_epoch,
                )
            })
            .unwrap();
        assert_eq!((leo, hw, epoch), (5, 5, LeaderEpoch(3)));
    }
    engine.stop();
}

#[test]
fn a_long_poll_waiter_is_woken_by_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let engine = start(dir.path());
    let router = engine.router().clone();
    let tp = TopicPartition::new("t", 1);
    let (tx, rx) = flume::bounded(1);
    let tp2 = tp.clone();
    router
        .run_on_blocking(router.owner(&tp), move |s| {
            s.partition(&tp2).unwrap().watch(tx)
        })
        .unwrap();
    assert!(rx.try_recv().is_err());
    let tp2 = tp.clone();
    router
        .run_on_blocking(router.owner(&tp), move |s| {
            s.partition(&tp2)
                .unwrap()
                .append_leader(records(1), 0)
                .unwrap();
        })
        .unwrap();
    assert!(rx.recv_timeout(std::time::Duration::from_secs(2)).is_ok());
    engine.stop();
}

#[test]
fn a_task_spawned_on_a_core_reaches_its_partitions_inline() {
    let dir = tempfile::tempdir().unwrap();
    let engine = start(dir.path());
    let router = engine.router().clone();
    let tp = TopicPartition::new("t", 2);
    let owner = router.owner(&tp);
    let (tx, rx) = flume::bounded(1);
    let r2 = router.clone();
    router
        .spawn_on_blocking(owner, move || async move {
            let info = r2
                .with_partition(tp, |p| p.append_leader(records(4), 0))
                .await
                .unwrap()
                .unwrap();
            let _ = tx.send(info.last_offset.get());
        })
        .unwrap();
    assert_eq!(
        rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap(),
        3
    );
    engine.stop();
}

/// (log end, core that answered) of `tp`, read on its current owner.
fn leo_on_owner(router: &kmirror_engine::Router, tp: &TopicPartition) -> (i64, usize) {
    let tp2 = tp.clone();
    router
        .run_on_blocking(router.owner(tp), move |s| {
            let core = s.core();
            (s.partition(&tp2).unwrap().log.log_end_offset().get(), core)
        })
        .unwrap()
}

#[test]
fn pinning_at_runtime_moves_a_partition_and_keeps_its_log() {
    use kmirror_engine::{Assignment, TopicRule};
    let dir = tempfile::tempdir().unwrap();
    let engine = start(dir.path());
    let router = engine.router().clone();
    let tp = TopicPartition::new("t", 0);
    let old = router.owner(&tp);
    let tp2 = tp.clone();
    router
        .run_on_blocking(old, move |s| {
            s.partition(&tp2)
                .unwrap()
                .append_leader(records(3), 0)
                .unwrap();
        })
        .unwrap();
    // A long-poll waiter on the old core is woken by the move.
    let (tx, rx) = flume::bounded(1);
    let tp2 = tp.clone();
    router
        .run_on_blocking(old, move |s| s.partition(&tp2).unwrap().watch(tx))
        .unwrap();

    let pin = TopicRule {
        partitions: [(0, 1 - old)].into(),
        ..TopicRule::default()
    };
    let moved = router
        .set_topic_rule_blocking("t", Some(pin.clone()))
        .unwrap();
    assert_eq!(moved.len(), 1);
    assert_eq!((moved[0].from, moved[0].to), (old, 1 - old));
    assert!(rx.recv_timeout(std::time::Duration::from_secs(2)).is_ok());
    assert_eq!(router.owner(&tp), 1 - old);
    // Same log end on the new core; the old core refuses to reopen it.
    assert_eq!(leo_on_owner(&router, &tp), (3, 1 - old));
    let tp2 = tp.clone();
    let stale = router
        .run_on_blocking(old, move |s| s.partition(&tp2).map(|_| ()))
        .unwrap();
    assert!(matches!(stale, Err(EngineError::NotOwner(_))), "{stale:?}");
    // Appends continue at the next offset on the new owner.
    let tp2 = tp.clone();
    let next = router
        .run_on_blocking(1 - old, move |s| {
            s.partition(&tp2)
                .unwrap()
                .append_leader(records(2), 0)
                .unwrap()
        })
        .unwrap();
    assert_eq!(next.first_offset.get(), 3);
    // Setting the same rule again moves nothing; an out-of-range core is refused unchanged.
    assert!(router
        .set_topic_rule_blocking("t", Some(pin))
        .unwrap()
        .is_empty());
    let bad = TopicRule {
        core: Some(2),
        ..TopicRule::default()
    };
    assert!(matches!(
        router.set_topic_rule_blocking("t", Some(bad)),
        Err(EngineError::NoSuchCore(2))
    ));
    assert_eq!(router.owner(&tp), 1 - old);

    // A whole-topic pin (the topic policy puts them together too): every partition there.
    for p in 0..4 {
        leo_on_owner(&router, &TopicPartition::new("t", p));
    }
    let topic_pin = TopicRule {
        core: Some(old),
        ..TopicRule::default()
    };
    router
        .set_topic_rule_blocking("t", Some(topic_pin))
        .unwrap();
    for p in 0..4 {
        let tp = TopicPartition::new("t", p);
        assert_eq!(router.owner(&tp), old);
        let expect = if p == 0 { 5 } else { 0 };
        assert_eq!(leo_on_owner(&router, &tp), (expect, old));
    }
    let policy = TopicRule {
        policy: Some(Assignment::Topic),
        ..TopicRule::default()
    };
    router.set_topic_rule_blocking("t", Some(policy)).unwrap();
    let c = router.owner(&TopicPartition::new("t", 0));
    for p in 0..4 {
        let tp = TopicPartition::new("t", p);
        assert_eq!(leo_on_owner(&router, &tp).1, c);
    }
    // Clearing the rule returns to the broker's policy.
    router.set_topic_rule_blocking("t", None).unwrap();
    assert_eq!(router.owner(&tp), old);
    assert_eq!(leo_on_owner(&router, &tp), (5, old));
    engine.stop();

    // A restart reopens everything on the broker policy's cores, with the data.
    let engine = start(dir.path());
    let router = engine.router().clone();
    assert_eq!(leo_on_owner(&router, &tp), (5, old));
    engine.stop();
}
