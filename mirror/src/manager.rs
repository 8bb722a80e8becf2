//! The mirror fetcher manager: starts one [`mirror_partition`] task per mirrored partition on
//! the partition's owning core, stops them, and keeps their live status for DescribeMirrors.
//! It is what a broker's `MirrorHost::start_fetcher` / `stop_fetcher` call.
//!
//! Live status: each task writes its partition's [`PartitionProgress`] (atomics, no lock on
//! the engine core); the progress map in [`MirrorMetrics`] is touched only at start and by
//! readers (DescribeMirrors, the metrics scrape).
//!
//! Invariants: at most one task per partition; `stop_and_wait` returns only after the task has
//! exited (so a failover may truncate the log right after); events reach the control plane
//! through one channel, in order per partition.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kmirror_engine::Router;
use kmirror_types::TopicPartition;
use uuid::Uuid;

use crate::client::security::{ClientSecurity, SecurityConfigError};
use crate::fetcher::{
    fetcher_client_id, mirror_partition, EngineLocalPartition, FetchErrorKind, FetchEvent,
    FetchObserver, FetcherConfig, FetcherStatus, PartitionFetcher,
};
use crate::metrics::{MirrorMetrics, PartitionProgress};
use crate::service::{LivePartition, MirrorLiveStatus};
use crate::session::{SessionHub, SharedSource};
use crate::throttle::{MirrorThrottle, RateCeiling};

/// What to start for one partition.
#[derive(Debug, Clone)]
pub struct FetchTask {
    pub mirror: String,
    pub source_bootstrap: String,
    pub tp: TopicPartition,
    /// The mirror topic's id (== the source's); nil = learn from metadata.
    pub topic_id: Uuid,
    /// Our own LME for failback (from `__mirror_state`).
    pub local_lme: Option<kmirror_types::LeaderEpoch>,
    /// Already MIRRORING (restart): skip the PREPARING truncation.
    pub skip_prepare: bool,
    /// The mirror's `mirror.retry.backoff.ms` / `mirror.retry.backoff.max.ms`, when set;
    /// otherwise the broker's fetcher defaults apply.
    pub retry_backoff_ms: Option<u64>,
    pub retry_backoff_max_ms: Option<u64>,
    /// The mirror's `mirror.throttled.rate` (bytes/s, 0 = none) and whether this topic is in
    /// its `mirror.priority.topics`.
    pub throttled_rate: u64,
    pub priority: bool,
    /// Whether the broker-wide ceiling throttles this partition (its topic's
    /// `mirror.replication.throttled.replicas`); [`FetcherManager::set_broker_throttled`]
    /// changes it while the fetcher runs.
    pub broker_throttled: bool,
    /// The mirror's `mirror.fetch.max.bytes` / `mirror.fetch.partition.max.bytes` /
    /// `mirror.fetch.max.wait.ms`, when set.
    pub fetch_max_bytes: Option<u64>,
    pub fetch_partition_max_bytes: Option<u64>,
    pub fetch_max_wait_ms: Option<u64>,
    /// The mirror's own source connection security (its settings, checked at create; an
    /// error here surfaces as the partition's failure reason).
    pub security: Result<ClientSecurity, SecurityConfigError>,
    /// Where an empty mirror log starts (`add --start`): a ListOffsets timestamp; -2
    /// (earliest) is the source's log start, what a fetcher does anyway.
    pub start_timestamp: i64,
}

/// How long the `slow_fetcher_stop` failpoint keeps a stopped fetcher running.
const SLOW_STOP_FAILPOINT: Duration = Duration::from_secs(40);

struct Running {
    /// A message (or the sender's drop) tells the task to stop; it wakes the task at once, so
    /// an idle fetcher costs no timer wake-ups (5,000 polling tasks cost a core).
    stop: flume::Sender<()>,
    exited: flume::Receiver<()>,
    /// Whether the broker-wide ceiling throttles it (the topic's throttled-replicas config).
    broker_throttled: Arc<std::sync::atomic::AtomicBool>,
}

/// Starts and stops fetcher tasks on the engine's cores. Cheap to share (`Arc`).
pub struct FetcherManager {
    router: Router,
    node_id: i32,
    cfg: FetcherConfig,
    /// The broker-wide mirror byte-rate ceiling, shared by every fetcher on every core.
    broker_ceiling: Arc<RateCeiling>,
    /// Each mirror's own ceiling (`mirror.throttled.rate`); touched at start only.
    mirror_ceilings: Mutex<HashMap<String, Arc<RateCeiling>>>,
    running: Mutex<HashMap<TopicPartition, Running>>,
    metrics: Arc<MirrorMetrics>,
    events: flume::Sender<(TopicPartition, FetchEvent)>,
}

/// Forwards events to the manager's channel and publishes progress to the partition's
/// atomics (lock-free: this runs on the engine core).
struct Forward {
    events: flume::Sender<(TopicPartition, FetchEvent)>,
    progress: Arc<PartitionProgress>,
}

impl FetchObserver for Forward {
    fn on_event(&mut self, tp: &TopicPartition, event: FetchEvent) {
        if let FetchEvent::Progress(st) = &event {
            self.progress.publish(st);
            // Progress is frequent and only feeds the live status.
            return;
        }
        let _ = self.events.send((tp.clone(), event));
    }

    fn on_appended(&mut self, _tp: &TopicPartition, records: u64, bytes: u64) {
        self.progress.add_appended(records, bytes);
    }

    fn on_fetch_error(&mut self, _tp: &TopicPartition, kind: FetchErrorKind) {
        self.progress.add_fetch_error(kind);
    }

    fn on_throttled(&mut self, _tp: &TopicPartition, delay: Duration) {
        self.progress.add_throttle(delay);
    }
}

impl FetcherManager {
    /// `events` receives every non-progress event (Prepared, Failed, Recovered, ...) for the
    /// control plane to apply to the coordinator.
    pub fn new(
        router: Router,
        node_id: i32,
        cfg: FetcherConfig,
        events: flume::Sender<(TopicPartition, FetchEvent)>,
    ) -> Arc<Self> {
        Self::with_metrics(router, node_id, cfg, events, Arc::default())
    }

    /// [`Self::new`] publishing progress into `metrics` (shared with the metrics endpoint).
    pub fn with_metrics(
        router: Router,
        node_id: i32,
        cfg: FetcherConfig,
        events: flume::Sender<(TopicPartition, FetchEvent)>,
        metrics: Arc<MirrorMetrics>,
    ) -> Arc<Self> {
        let owner = router.clone();
        metrics.set_core_owner(move |tp| owner.owner(tp));
        Arc::new(FetcherManager {
            router,
            node_id,
            cfg,
            broker_ceiling: Arc::new(RateCeiling::new(0)),
            mirror_ceilings: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            metrics,
            events,
        })
    }

    /// Progress, states and counters for DescribeMirrors and the metrics endpoint.
    pub fn metrics(&self) -> &Arc<MirrorMetrics> {
        &self.metrics
    }

    /// Broker-level mirror byte-rate ceiling (bytes/s, 0 = unlimited): the total of every
    /// mirror's traffic on this node. Takes effect at once, also for running fetchers.
    pub fn set_byte_rate(&self, bytes_per_sec: u64) {
        self.broker_ceiling.set_rate(bytes_per_sec);
    }

    /// The broker-level ceiling every fetcher charges.
    pub fn broker_ceiling(&self) -> Arc<RateCeiling> {
        self.broker_ceiling.clone()
    }

    /// The broker-level ceiling in force (bytes/s, 0 = unlimited).
    pub fn byte_rate(&self) -> u64 {
        self.broker_ceiling.rate()
    }

    /// A mirror's own ceiling (`mirror.throttled.rate`), for its running fetchers too.
    pub fn set_mirror_rate(&self, mirror: &str, bytes_per_sec: u64) {
        let mut ceilings = self
            .mirror_ceilings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match ceilings.get(mirror) {
            Some(c) => c.set_rate(bytes_per_sec),
            None => {
                ceilings.insert(mirror.to_owned(), Arc::new(RateCeiling::new(bytes_per_sec)));
            }
        }
    }

    /// What a fetcher of `task` charges: the broker's ceiling and its mirror's (whose rate
    /// follows the task's setting).
    fn throttle_for(&self, task: &FetchTask) -> MirrorThrottle {
        let mirror = self
            .mirror_ceilings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(task.mirror.clone())
            .or_default()
            .clone();
        mirror.set_rate(task.throttled_rate);
        MirrorThrottle {
            broker: self.broker_ceiling.clone(),
            mirror,
            priority: task.priority,
            broker_throttled: Arc::new(std::sync::atomic::AtomicBool::new(task.broker_throttled)),
        }
    }

    /// Whether the broker-wide ceiling throttles the running fetcher of `tp` (a topic's
    /// `mirror.replication.throttled.replicas` changed); takes effect at its next charge.
    pub fn set_broker_throttled(&self, tp: &TopicPartition, throttled: bool) {
        if let Some(r) = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(tp)
        {
            r.broker_throttled
                .store(throttled, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub fn is_running(&self, tp: &TopicPartition) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(tp)
    }

    /// Start mirroring `task.tp` on its owning core (no-op if already running). Call it from
    /// a plain thread (the control thread), never from an engine core.
    pub fn start(&self, task: FetchTask) -> Result<(), kmirror_engine::EngineError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.contains_key(&task.tp) {
            return Ok(());
        }
        let (stop, stop_rx) = flume::bounded::<()>(1);
        let (exit_tx, exit_rx) = flume::bounded(1);
        let core = self.router.owner(&task.tp);
        // Fetcher index = core index: every fetch connection of this node for this mirror on
        // this core shares one stable client id (a source operator can quota it).
        let client_id = fetcher_client_id(self.node_id, core as u32, &task.mirror);
        let (router, mut cfg) = (self.router.clone(), self.cfg.clone());
        if let Some(ms) = task.retry_backoff_ms {
            cfg.backoff_initial_ms = ms.max(1);
        }
        let clamp = |v: u64| v.clamp(1, i32::MAX as u64) as i32;
        if let Some(b) = task.fetch_max_bytes {
            cfg.max_bytes = clamp(b);
        }
        if let Some(b) = task.fetch_partition_max_bytes {
            cfg.partition_max_bytes = clamp(b);
        }
        if let Some(ms) = task.fetch_max_wait_ms {
            cfg.max_wait_ms = clamp(ms);
        }
        if let Some(ms) = task.retry_backoff_max_ms {
            cfg.backoff_max_ms = ms.max(cfg.backoff_initial_ms);
        }
        let observer = Forward {
            events: self.events.clone(),
            progress: self.metrics.progress_for_start(&task.mirror, &task.tp),
        };
        let throttle = self.throttle_for(&task);
        let broker_throttled = throttle.broker_throttled.clone();
        let evictions = self.metrics.session_resets(&task.mirror);
        let key = task.tp.clone();
        self.router.spawn_on_blocking(core, move || async move {
            let mut observer = observer;
            // Shared per (core, mirror): one admin connection and one fetch session per source
            // broker for all of this mirror's partitions on this core.
            let hub = SessionHub::for_mirror(
                &task.mirror,
                &task.source_bootstrap,
                client_id,
                task.security.clone(),
                cfg.clone(),
                evictions,
            );
            let mut source = SharedSource::new(hub);
            let mut local = EngineLocalPartition::new(router, task.tp.clone());
            let fetcher = PartitionFetcher::new(task.tp.clone(), task.topic_id, cfg)
                .with_throttle(throttle)
                .with_start(task.start_timestamp);
            let never = std::cell::Cell::new(false);
            let work = mirror_partition(
                &mut source,
                &mut local,
                &mut observer,
                &never,
                &task.mirror,
                fetcher,
                task.local_lme,
                task.skip_prepare,
            );
            // Stop promptly even while the fetcher sleeps in a backoff: dropping the future at
            // an await point is safe (appends are atomic on the owning core).
            let watch = async {
                let _ = stop_rx.recv_async().await;
                // Test hook: a fetcher that keeps running long after it was told to stop
                // (a stuck core, a hung source call), to prove failover waits for it.
                if kmirror_control::mirror::failpoint::is_armed("slow_fetcher_stop") {
                    glommio::timer::sleep(SLOW_STOP_FAILPOINT).await;
                }
                crate::fetcher::FetcherExit::Stopped
            };
            let _ = futures_lite::future::or(work, watch).await;
            let _ = exit_tx.send(());
        })?;
        running.insert(
            key,
            Running {
                stop,
                exited: exit_rx,
                broker_throttled,
            },
        );
        Ok(())
    }

    /// Ask the task of `tp` to stop and wait until it has exited (or `timeout`). Returns
    /// whether it is gone. Keeps the last status (lag in ms keeps growing while stopped).
    pub fn stop_and_wait(&self, tp: &TopicPartition, timeout: Duration) -> bool {
        let r = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tp);
        match r {
            None => true,
            Some(r) => {
                let _ = r.stop.try_send(());
                if r.exited.recv_timeout(timeout).is_ok() {
                    return true;
                }
                // Still running: keep tracking it, so a retry waits for it again instead of
                // taking "not running" for "stopped" (and no second task starts beside it).
                self.running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(tp.clone())
                    .or_insert(r);
                false
            }
        }
    }

    /// Stop every task (shutdown).
    pub fn stop_all(&self, timeout: Duration) {
        let tps: Vec<TopicPartition> = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        for tp in tps {
            self.stop_and_wait(&tp, timeout);
        }
    }

    pub fn status(&self, tp: &TopicPartition) -> Option<FetcherStatus> {
        self.metrics.progress(tp)?.status()
    }
}

impl MirrorLiveStatus for FetcherManager {
    fn live(&self, tp: &TopicPartition, now_ms: i64) -> Option<LivePartition> {
        self.status(tp).map(|s| s.live(now_ms))
    }
}
