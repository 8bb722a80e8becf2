//! Mirror progress and metrics: the per-partition [`PartitionProgress`] each running fetcher
//! updates lock-free, and [`MirrorMetrics`], which DescribeMirrors and the Prometheus endpoint
//! read (its [`Collector`] computes the mirror gauges at scrape time).
//!
//! Invariants: a fetcher on an engine core only touches atomics of its own
//! `Arc<PartitionProgress>` (no lock, no allocation per fetch). The mutexes here are taken
//! only by the mirror control thread (fetcher start/stop, state publication, sync errors) and
//! by readers off the data path (a scrape, DescribeMirrors), never per fetch. Nothing here
//! depends on glommio.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kmirror_control::mirror::{LinkState, PartitionState};
use kmirror_types::TopicPartition;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::fetcher::{FetchErrorKind, FetcherStatus};

/// Live numbers of one mirrored partition. The fetcher is the only writer of the status
/// fields (a sequence lock: readers retry while a publish is under way, so a reader never
/// mixes two fetch rounds); the counters are plain relaxed adds.
#[derive(Debug)]
pub struct PartitionProgress {
    /// The mirror the partition belongs to (a label; fixed for this progress).
    pub mirror: String,
    /// Odd while a publish is under way.
    seq: AtomicU64,
    published: AtomicBool,
    source_high_watermark: AtomicI64,
    source_last_stable_offset: AtomicI64,
    source_log_start_offset: AtomicI64,
    destination_log_end_offset: AtomicI64,
    source_leader_epoch: AtomicI64,
    last_caught_up_ms: AtomicI64,
    next_unmirrored_ts_ms: AtomicI64,
    newest_mirrored_ts_ms: AtomicI64,
    last_fetch_ms: AtomicI64,
    failed: AtomicBool,
    /// Source LSO learned by the sync rounds while no fetcher runs (paused); -1 otherwise.
    idle_source_end: AtomicI64,
    records: AtomicU64,
    bytes: AtomicU64,
    fetch_errors: [AtomicU64; FetchErrorKind::ALL.len()],
    throttle_us: AtomicU64,
}

impl PartitionProgress {
    pub fn new(mirror: &str) -> Self {
        PartitionProgress {
            mirror: mirror.to_owned(),
            seq: AtomicU64::new(0),
            published: AtomicBool::new(false),
            source_high_watermark: AtomicI64::new(-1),
            source_last_stable_offset: AtomicI64::new(-1),
            source_log_start_offset: AtomicI64::new(-1),
            destination_log_end_offset: AtomicI64::new(-1),
            source_leader_epoch: AtomicI64::new(-1),
            last_caught_up_ms: AtomicI64::new(-1),
            next_unmirrored_ts_ms: AtomicI64::new(-1),
            newest_mirrored_ts_ms: AtomicI64::new(-1),
            last_fetch_ms: AtomicI64::new(-1),
            failed: AtomicBool::new(false),
            idle_source_end: AtomicI64::new(-1),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            fetch_errors: Default::default(),
            throttle_us: AtomicU64::new(0),
        }
    }

    /// Publish a fetcher's status (single writer: the partition's fetcher).
    pub fn publish(&self, st: &FetcherStatus) {
        use Ordering::Relaxed;
        let s = self.seq.load(Relaxed);
        self.seq.store(s.wrapping_add(1), Relaxed);
        fence(Ordering::Release);
        self.source_high_watermark
            .store(st.source_high_watermark, Relaxed);
        self.source_last_stable_offset
            .store(st.source_last_stable_offset, Relaxed);
        self.source_log_start_offset
            .store(st.source_log_start_offset, Relaxed);
        self.destination_log_end_offset
            .store(st.destination_log_end_offset, Relaxed);
        self.source_leader_epoch
            .store(i64::from(st.source_leader_epoch), Relaxed);
        self.last_caught_up_ms.store(st.last_caught_up_ms, Relaxed);
        self.next_unmirrored_ts_ms
            .store(st.next_unmirrored_ts_ms, Relaxed);
        self.newest_mirrored_ts_ms
            .store(st.newest_mirrored_ts_ms, Relaxed);
        self.last_fetch_ms.store(st.last_fetch_ms, Relaxed);
        self.failed.store(st.failed, Relaxed);
        self.published.store(true, Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The last published status (leader and error text are not kept), None before the first
    /// publish.
    pub fn status(&self) -> Option<FetcherStatus> {
        use Ordering::Relaxed;
        // The writer never waits for readers; a reader retries until it read between two
        // publishes (readers are off the data path: a scrape, DescribeMirrors).
        let mut attempt = 0u32;
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1.is_multiple_of(2) {
                let st = FetcherStatus {
                    source_high_watermark: self.source_high_watermark.load(Relaxed),
                    source_last_stable_offset: self.source_last_stable_offset.load(Relaxed),
                    source_log_start_offset: self.source_log_start_offset.load(Relaxed),
                    destination_log_end_offset: self.destination_log_end_offset.load(Relaxed),
                    source_leader_epoch: self.source_leader_epoch.load(Relaxed) as i32,
                    leader: None,
                    last_caught_up_ms: self.last_caught_up_ms.load(Relaxed),
                    next_unmirrored_ts_ms: self.next_unmirrored_ts_ms.load(Relaxed),
                    newest_mirrored_ts_ms: self.newest_mirrored_ts_ms.load(Relaxed),
                    last_fetch_ms: self.last_fetch_ms.load(Relaxed),
                    last_error: None,
                    failed: self.failed.load(Relaxed),
                };
                let published = self.published.load(Relaxed);
                fence(Ordering::Acquire);
                if self.seq.load(Relaxed) == s1 {
                    return published.then_some(st);
                }
            }
            attempt += 1;
            if attempt.is_multiple_of(64) {
                // A writer preempted mid-publish: let it run.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    pub fn add_appended(&self, records: u64, bytes: u64) {
        self.records.fetch_add(records, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn add_fetch_error(&self, kind: FetchErrorKind) {
        let i = FetchErrorKind::ALL
            .iter()
            .position(|k| *k == kind)
            .expect("every kind is in ALL");
        self.fetch_errors[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_throttle(&self, d: Duration) {
        self.throttle_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Records appended by this node's fetchers since it started.
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Batch bytes appended by this node's fetchers since it started.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn fetch_errors(&self, kind: FetchErrorKind) -> u64 {
        let i = FetchErrorKind::ALL
            .iter()
            .position(|k| *k == kind)
            .expect("every kind is in ALL");
        self.fetch_errors[i].load(Ordering::Relaxed)
    }

    pub fn throttle(&self) -> Duration {
        Duration::from_micros(self.throttle_us.load(Ordering::Relaxed))
    }

    /// The source end a sync round saw for this partition while no fetcher ran (-1 = none).
    pub fn set_idle_source_end(&self, end: i64) {
        self.idle_source_end.store(end, Ordering::Relaxed);
    }

    /// The status, with a source end learned while idle applied (so lag keeps growing while
    /// paused, as DescribeMirrors shows it).
    pub fn status_with_idle_end(&self) -> Option<FetcherStatus> {
        let st = self.status()?;
        let end = self.idle_source_end.load(Ordering::Relaxed);
        Some(
            if end > st.source_last_stable_offset && st.destination_log_end_offset >= 0 {
                st.with_source_end(end)
            } else {
                st
            },
        )
    }
}

/// Why a mirror's metadata sync failed (the `kind` label of the sync error metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SyncErrorKind {
    /// The source's topic list / metadata could not be read, or planning or applying a
    /// topic or partition change failed.
    TopicMetadata,
    /// A topic config change from the source could not be applied.
    Config,
    /// Reading the source's group offsets or committing them locally failed.
    GroupOffsets,
    /// Reading the source's ACLs or applying them locally failed.
    Acls,
    /// Reading the source's client quotas or applying them locally failed.
    Quotas,
}

impl SyncErrorKind {
    pub const ALL: [SyncErrorKind; 5] = [
        SyncErrorKind::TopicMetadata,
        SyncErrorKind::Config,
        SyncErrorKind::GroupOffsets,
        SyncErrorKind::Acls,
        SyncErrorKind::Quotas,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SyncErrorKind::TopicMetadata => "topic_metadata",
            SyncErrorKind::Config => "config",
            SyncErrorKind::GroupOffsets => "group_offsets",
            SyncErrorKind::Acls => "acls",
            SyncErrorKind::Quotas => "quotas",
        }
    }
}

/// Shared mirror numbers: progress per partition, the partition states the control thread
/// last published, sync error counts. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct MirrorMetrics {
    progress: Mutex<HashMap<TopicPartition, Arc<PartitionProgress>>>,
    /// (mirror, partition, state) of every mirror partition, as of the last reconcile.
    states: Mutex<Vec<(String, TopicPartition, PartitionState)>>,
    sync_errors: Mutex<BTreeMap<(String, SyncErrorKind), u64>>,
    /// Per mirror and kind (`acls`, `quotas`): the source entries its last sync round left
    /// to another owner (a local admin or another mirror), and a few of them to show.
    sync_clashes: Mutex<BTreeMap<(String, &'static str), Vec<String>>>,
    /// Per mirror: its health as of the last reconcile.
    link_states: Mutex<BTreeMap<String, LinkState>>,
    /// Per mirror: automatic failovers (`mirror.auto.failover.ms`) since this node started.
    auto_failovers: Mutex<BTreeMap<String, u64>>,
    /// Per mirror: fetch sessions the source evicted or reset. Fed by the fetch-session
    /// fetcher (shared per core, source broker and mirror) through [`Self::session_resets`].
    session_resets: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    /// Which engine core owns a partition (the router's lock-free lookup), once known.
    owner: CoreOwner,
}

/// The partition → core lookup, for the `kmirror_mirror_partition_core` gauge.
type OwnerFn = Arc<dyn Fn(&TopicPartition) -> usize + Send + Sync>;

#[derive(Default)]
struct CoreOwner(std::sync::OnceLock<OwnerFn>);

impl std::fmt::Debug for CoreOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CoreOwner")
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MirrorMetrics {
    /// How to learn a partition's engine core (set once, by the fetcher manager).
    pub fn set_core_owner(&self, owner: impl Fn(&TopicPartition) -> usize + Send + Sync + 'static) {
        let _ = self.owner.0.set(Arc::new(owner));
    }
    /// The progress of `tp` for a fetcher about to start (control thread only). A partition
    /// keeps its progress across fetcher restarts, so counters and the last status survive a
    /// pause/resume; a partition moved to another mirror starts afresh.
    pub fn progress_for_start(&self, mirror: &str, tp: &TopicPartition) -> Arc<PartitionProgress> {
        let mut m = lock(&self.progress);
        let p = m
            .entry(tp.clone())
            .or_insert_with(|| Arc::new(PartitionProgress::new(mirror)));
        if p.mirror != mirror {
            *p = Arc::new(PartitionProgress::new(mirror));
        }
        p.set_idle_source_end(-1);
        p.clone()
    }

    pub fn progress(&self, tp: &TopicPartition) -> Option<Arc<PartitionProgress>> {
        lock(&self.progress).get(tp).cloned()
    }

    /// Record the mirror partitions and their states (control thread, after a reconcile);
    /// progress of partitions that are no longer mirror partitions is dropped.
    pub fn publish_states(&self, states: Vec<(String, TopicPartition, PartitionState)>) {
        {
            let mut cur = lock(&self.states);
            if *cur == states {
                return;
            }
            *cur = states;
        }
        let cur = lock(&self.states);
        let known: std::collections::HashSet<&TopicPartition> =
            cur.iter().map(|(_, t, _)| t).collect();
        lock(&self.progress).retain(|tp, _| known.contains(tp));
    }

    pub fn count_sync_error(&self, mirror: &str, kind: SyncErrorKind) {
        *lock(&self.sync_errors)
            .entry((mirror.to_owned(), kind))
            .or_default() += 1;
    }

    /// Every mirror's health (control thread, after a reconcile).
    pub fn publish_link_states(&self, states: BTreeMap<String, LinkState>) {
        *lock(&self.link_states) = states;
    }

    /// `mirror` failed over automatically (`mirror.auto.failover.ms`).
    pub fn count_auto_failover(&self, mirror: &str) {
        *lock(&self.auto_failovers)
            .entry(mirror.to_owned())
            .or_default() += 1;
    }

    /// What `mirror`'s last `kind` (`acls` or `quotas`) sync round left to another owner.
    pub fn set_sync_clashes(&self, mirror: &str, kind: &'static str, clashes: Vec<String>) {
        let mut m = lock(&self.sync_clashes);
        if clashes.is_empty() {
            m.remove(&(mirror.to_owned(), kind));
        } else {
            m.insert((mirror.to_owned(), kind), clashes);
        }
    }

    /// The clashes of `mirror`'s last sync rounds, per kind.
    pub fn sync_clashes(&self, mirror: &str) -> Vec<(&'static str, Vec<String>)> {
        lock(&self.sync_clashes)
            .iter()
            .filter(|((m, _), _)| m == mirror)
            .map(|((_, k), v)| (*k, v.clone()))
            .collect()
    }

    pub fn sync_errors(&self, mirror: &str, kind: SyncErrorKind) -> u64 {
        lock(&self.sync_errors)
            .get(&(mirror.to_owned(), kind))
            .copied()
            .unwrap_or(0)
    }

    /// The counter a fetch-session fetcher of `mirror` adds to when the source evicts or
    /// resets its session (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH). Take it
    /// when the fetcher starts; incrementing it is a relaxed add.
    pub fn session_resets(&self, mirror: &str) -> Arc<AtomicU64> {
        lock(&self.session_resets)
            .entry(mirror.to_owned())
            .or_default()
            .clone()
    }

    /// Text of the mirror families alone (for tests and debugging).
    pub fn snapshot(&self, now_ms: i64) -> Snapshot {
        let states = lock(&self.states).clone();
        let progress = lock(&self.progress).clone();
        let mut mirrors: BTreeMap<String, MirrorRow> = BTreeMap::new();
        let mut partitions = Vec::with_capacity(states.len());
        for (mirror, tp, state) in states {
            let p = progress.get(&tp).filter(|p| p.mirror == mirror).cloned();
            let row = mirrors.entry(mirror.clone()).or_default();
            if let Some(p) = &p {
                row.throttle += p.throttle();
            }
            partitions.push(PartitionRow {
                core: self.owner.0.get().map(|f| f(&tp)),
                status: p.as_ref().and_then(|p| p.status_with_idle_end()),
                lag_ms_now: now_ms,
                mirror,
                tp,
                state,
                progress: p,
            });
        }
        for ((mirror, kind), n) in lock(&self.sync_errors).iter() {
            mirrors.entry(mirror.clone()).or_default().sync_errors[kind_index(*kind)] = *n;
        }
        for (mirror, st) in lock(&self.link_states).iter() {
            mirrors.entry(mirror.clone()).or_default().link_state = Some(*st);
        }
        for (mirror, n) in lock(&self.auto_failovers).iter() {
            mirrors.entry(mirror.clone()).or_default().auto_failovers = *n;
        }
        for ((mirror, kind), c) in lock(&self.sync_clashes).iter() {
            let row = mirrors.entry(mirror.clone()).or_default();
            row.sync_clashes.push((kind, c.len() as i64));
        }
        for (mirror, n) in lock(&self.session_resets).iter() {
            if let Some(row) = mirrors.get_mut(mirror) {
                row.session_resets = n.load(Ordering::Relaxed);
            }
        }
        Snapshot {
            partitions,
            mirrors,
        }
    }
}

fn kind_index(k: SyncErrorKind) -> usize {
    SyncErrorKind::ALL
        .iter()
        .position(|x| *x == k)
        .expect("every kind is in ALL")
}

/// One scrape's view of the mirrors.
pub struct Snapshot {
    pub partitions: Vec<PartitionRow>,
    pub mirrors: BTreeMap<String, MirrorRow>,
}

pub struct PartitionRow {
    pub mirror: String,
    pub tp: TopicPartition,
    pub state: PartitionState,
    pub status: Option<FetcherStatus>,
    pub progress: Option<Arc<PartitionProgress>>,
    /// The engine core owning the partition (None when no lookup is set).
    pub core: Option<usize>,
    lag_ms_now: i64,
}

impl PartitionRow {
    /// (lag in offsets, lag in ms), None while unknown (no fetch has reached the source).
    pub fn lag(&self) -> Option<(i64, i64)> {
        let st = self.status.as_ref()?;
        let lag = st.lag();
        if lag < 0 {
            return None;
        }
        Some((lag, st.lag_ms(self.lag_ms_now)))
    }
}

#[derive(Debug, Default)]
pub struct MirrorRow {
    pub throttle: Duration,
    pub sync_errors: [u64; SyncErrorKind::ALL.len()],
    /// (kind, entries) the last sync rounds left to another owner.
    pub sync_clashes: Vec<(&'static str, i64)>,
    pub link_state: Option<LinkState>,
    pub auto_failovers: u64,
    pub session_resets: u64,
}

/// The mirror metric families, computed from [`MirrorMetrics`] at each scrape. Names and
/// meanings are listed in docs/METRICS.md.
#[derive(Debug)]
pub struct MirrorCollector(pub Arc<MirrorMetrics>);

type Labels = Vec<(&'static str, String)>;

fn partition_labels(r: &PartitionRow) -> Labels {
    vec![
        ("mirror", r.mirror.clone()),
        ("topic", r.tp.topic.clone()),
        ("partition", r.tp.partition.to_string()),
    ]
}

fn gauges(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, i64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (l, v) in rows {
        ConstGauge::new(v).encode(m.encode_family(&l)?)?;
    }
    Ok(())
}

/// `name` without `_total` (the encoder appends it to counters).
fn counters<V: prometheus_client::encoding::EncodeCounterValue>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, V)>,
) -> Result<(), std::fmt::Error> {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (l, v) in rows {
        ConstCounter::new(v).encode(m.encode_family(&l)?)?;
    }
    Ok(())
}

impl Collector for MirrorCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let snap = self.0.snapshot(crate::fetcher::now_ms());
        let ps = &snap.partitions;
        gauges(
            &mut e,
            "kmirror_mirror_partition_lag_offsets",
            "Offsets the source has (last stable offset) that this partition does not have yet.",
            ps.iter()
                .filter_map(|r| r.lag().map(|(l, _)| (partition_labels(r), l))),
        )?;
        gauges(
            &mut e,
            "kmirror_mirror_partition_lag_ms",
            "Age in ms of the oldest source record not mirrored yet (0 when caught up).",
            ps.iter().filter_map(|r| {
                r.lag()
                    .filter(|(_, ms)| *ms >= 0)
                    .map(|(_, ms)| (partition_labels(r), ms))
            }),
        )?;
        gauges(
            &mut e,
            "kmirror_mirror_partition_source_end_offset",
            "The source partition's last stable offset, as last seen.",
            ps.iter().filter_map(|r| {
                let st = r.status.as_ref()?;
                (st.source_last_stable_offset >= 0)
                    .then(|| (partition_labels(r), st.source_last_stable_offset))
            }),
        )?;
        gauges(
            &mut e,
            "kmirror_mirror_partition_log_end_offset",
            "The mirror partition's log end offset, as last seen by its fetcher.",
            ps.iter().filter_map(|r| {
                let st = r.status.as_ref()?;
                (st.destination_log_end_offset >= 0)
                    .then(|| (partition_labels(r), st.destination_log_end_offset))
            }),
        )?;
        counters(
            &mut e,
            "kmirror_mirror_partition_records",
            "Records appended by mirroring since this node started (control records included).",
            ps.iter().map(|r| {
                let n = r.progress.as_ref().map_or(0, |p| p.records());
                (partition_labels(r), n)
            }),
        )?;
        counters(
            &mut e,
            "kmirror_mirror_partition_bytes",
            "Record batch bytes appended by mirroring since this node started.",
            ps.iter().map(|r| {
                let n = r.progress.as_ref().map_or(0, |p| p.bytes());
                (partition_labels(r), n)
            }),
        )?;
        gauges(
            &mut e,
            "kmirror_mirror_partition_state",
            "1 for the partition's mirror state, 0 for the other states.",
            ps.iter().flat_map(|r| {
                PartitionState::ALL.iter().map(move |s| {
                    let mut l = partition_labels(r);
                    l.push(("state", s.as_str().to_owned()));
                    (l, i64::from(*s == r.state))
                })
            }),
        )?;
        counters(
            &mut e,
            "kmirror_mirror_partition_fetch_errors",
            "Failed or refused fetch rounds since this node started, by kind.",
            ps.iter().flat_map(|r| {
                FetchErrorKind::ALL.iter().map(move |k| {
                    let mut l = partition_labels(r);
                    l.push(("kind", k.as_str().to_owned()));
                    (l, r.progress.as_ref().map_or(0, |p| p.fetch_errors(*k)))
                })
            }),
        )?;
        gauges(
            &mut e,
            "kmirror_mirror_partition_core",
            "The engine core owning the partition (its log and its fetcher) on this broker.",
            ps.iter()
                .filter_map(|r| Some((partition_labels(r), r.core? as i64))),
        )?;
        let ms = &snap.mirrors;
        counters(
            &mut e,
            "kmirror_mirror_throttle_seconds",
            "Time the mirror's fetchers waited for the broker's mirror byte-rate ceiling.",
            ms.iter()
                .map(|(m, r)| (vec![("mirror", m.clone())], r.throttle.as_secs_f64())),
        )?;
        counters(
            &mut e,
            "kmirror_mirror_sync_errors",
            "Failed metadata sync steps since this node started, by kind.",
            ms.iter().flat_map(|(m, r)| {
                SyncErrorKind::ALL.iter().map(move |k| {
                    (
                        vec![("mirror", m.clone()), ("kind", k.as_str().to_owned())],
                        r.sync_errors[kind_index(*k)],
                    )
                })
            }),
        )?;
        gauges(
            &mut e,
            "kmirror_mirror_link_state",
            "The mirror's health: 1 for its current state (ACTIVE, PAUSED, DEGRADED, SOURCE_UNAVAILABLE), 0 for the others.",
            ms.iter().flat_map(|(m, r)| {
                r.link_state.into_iter().flat_map(move |cur| {
                    LinkState::ALL.iter().map(move |st| {
                        (
                            vec![("mirror", m.clone()), ("state", st.as_str().to_owned())],
                            i64::from(*st == cur),
                        )
                    })
                })
            }),
        )?;
        counters(
            &mut e,
            "kmirror_mirror_auto_failovers",
            "Automatic failovers of the whole mirror (mirror.auto.failover.ms) since this node started.",
            ms.iter()
                .map(|(m, r)| (vec![("mirror", m.clone())], r.auto_failovers)),
        )?;
        gauges(
            &mut e,
            "kmirror_mirror_sync_clashes",
            "Source ACL bindings or quota entities the last sync round left to another owner (a local admin or another mirror), by kind.",
            ms.iter().flat_map(|(m, r)| {
                r.sync_clashes.iter().map(move |(k, n)| {
                    (vec![("mirror", m.clone()), ("kind", (*k).to_owned())], *n)
                })
            }),
        )?;
        counters(
            &mut e,
            "kmirror_mirror_fetch_session_resets",
            "Fetch sessions the source evicted or reset (fed by the fetch-session fetcher).",
            ms.iter()
                .map(|(m, r)| (vec![("mirror", m.clone())], r.session_resets)),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    fn status(lso: i64, end: i64) -> FetcherStatus {
        FetcherStatus {
            source_last_stable_offset: lso,
            source_high_watermark: lso,
            destination_log_end_offset: end,
            ..FetcherStatus::from_local(-1, -1)
        }
    }

    #[test]
    fn progress_round_trips_a_status_and_counts() {
        let p = PartitionProgress::new("m");
        assert_eq!(p.status(), None);
        let mut st = status(10, 7);
        st.newest_mirrored_ts_ms = 1_000;
        p.publish(&st);
        assert_eq!(p.status(), Some(st.clone()));
        p.add_appended(3, 300);
        p.add_appended(2, 100);
        p.add_fetch_error(FetchErrorKind::Leader);
        p.add_throttle(Duration::from_millis(1500));
        assert_eq!((p.records(), p.bytes()), (5, 400));
        assert_eq!(p.fetch_errors(FetchErrorKind::Leader), 1);
        assert_eq!(p.fetch_errors(FetchErrorKind::Network), 0);
        assert_eq!(p.throttle(), Duration::from_millis(1500));
        // Paused: a sync round saw the source move on.
        p.set_idle_source_end(15);
        assert_eq!(p.status_with_idle_end().unwrap().lag(), 8);
    }

    #[test]
    fn a_reader_never_sees_half_of_a_publish() {
        let p = Arc::new(PartitionProgress::new("m"));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, stop2) = (p.clone(), stop.clone());
        let writer = std::thread::spawn(move || {
            let mut i = 0i64;
            while !stop2.load(Ordering::Relaxed) {
                // Invariant of every published status: end == lso - 1.
                w.publish(&status(i + 1, i));
                i += 1;
            }
        });
        let mut seen = std::collections::BTreeSet::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while seen.len() < 1000 && std::time::Instant::now() < deadline {
            if let Some(st) = p.status() {
                assert_eq!(
                    st.destination_log_end_offset + 1,
                    st.source_last_stable_offset
                );
                seen.insert(st.destination_log_end_offset);
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        // At least 100 distinct publishes read while the writer ran (1000 is the aim; a
        // loaded machine that deschedules either thread gets fewer in the 20 s).
        assert!(seen.len() >= 100, "the reader saw {} publishes", seen.len());
    }

    #[test]
    fn collector_exposes_partition_and_mirror_families() {
        let m = Arc::new(MirrorMetrics::default());
        m.set_core_owner(|tp| tp.partition as usize + 2);
        let tp = TopicPartition::new("orders", 1);
        let p = m.progress_for_start("east", &tp);
        p.publish(&status(10, 10));
        p.add_appended(4, 512);
        m.publish_states(vec![("east".into(), tp.clone(), PartitionState::Mirroring)]);
        m.count_sync_error("east", SyncErrorKind::Acls);
        m.session_resets("east").fetch_add(2, Ordering::Relaxed);
        let mut reg = Registry::default();
        reg.register_collector(Box::new(MirrorCollector(m.clone())));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        let l = r#"mirror="east",topic="orders",partition="1""#;
        for line in [
            format!("kmirror_mirror_partition_lag_offsets{{{l}}} 0"),
            format!("kmirror_mirror_partition_lag_ms{{{l}}} 0"),
            format!("kmirror_mirror_partition_records_total{{{l}}} 4"),
            format!("kmirror_mirror_partition_bytes_total{{{l}}} 512"),
            format!("kmirror_mirror_partition_state{{{l},state=\"MIRRORING\"}} 1"),
            format!("kmirror_mirror_partition_state{{{l},state=\"PAUSED\"}} 0"),
            format!("kmirror_mirror_partition_fetch_errors_total{{{l},kind=\"network\"}} 0"),
            format!("kmirror_mirror_partition_core{{{l}}} 3"),
            r#"kmirror_mirror_sync_errors_total{mirror="east",kind="acls"} 1"#.to_owned(),
            r#"kmirror_mirror_sync_errors_total{mirror="east",kind="config"} 0"#.to_owned(),
            r#"kmirror_mirror_fetch_session_resets_total{mirror="east"} 2"#.to_owned(),
        ] {
            assert!(text.lines().any(|x| x == line), "{line} missing in\n{text}");
        }
        // Removed from the mirror: its series and progress go.
        m.publish_states(vec![]);
        assert!(m.progress(&tp).is_none());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(!text.contains("orders"), "{text}");
    }
}
