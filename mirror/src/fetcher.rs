//! The mirror fetcher: one loop per mirrored partition that copies batches from the source
//! partition leader into the local partition at their source offsets (KIP-1279 data path).
//!
//! It is written against two small traits so the broker can plug in its per-core log and tests
//! can plug in fakes:
//! - [`LocalPartition`]: the destination partition (log end, epoch, `append_mirror`,
//!   full truncation). Implemented by the broker over its per-core log handle; every method is
//!   synchronous and no borrow is held across an `.await`, so the broker keeps serving the
//!   partition while the fetcher waits on the network.
//! - [`Source`]: the source cluster (leader lookup, consumer Fetch, ListOffsets, sleeping and
//!   the clock). [`KafkaSource`] is the real one over [`crate::client::Connection`] (async on
//!   glommio; [`BlockingSource`] is the same code over blocking sockets, for dry runs).
//!
//! Rules (SPEC "Data path"): consumer Fetch (replica id -1), read_committed, topic ids, the
//! known source leader epoch (starting unknown, -1), last-fetched-epoch checks off.
//! FENCED_LEADER_EPOCH -> learn the epoch (from the response's current-leader hint, else from
//! metadata) and retry; UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER and friends -> metadata
//! refresh, follow the new leader; OFFSET_OUT_OF_RANGE because the source log start moved past
//! our end -> truncate fully, continue at the source log start, and report the gap. Batches go
//! to `append_mirror` unchanged (a trailing partial batch is held back, never cut). The local
//! leader epoch is raised so that it is never below the source's. A bad batch or a persistent
//! error fails only this partition ([`FetchEvent::Failed`]) and is retried with backoff.
//!
//! Cancellation: dropping the future is safe at any `.await` (appends are synchronous), and
//! [`PartitionFetcher::run`] also returns when its stop flag is set.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use kmirror_log::batch::{
    ATTRIBUTES_POS, BASE_TIMESTAMP_POS, LENGTH_POS, LOG_OVERHEAD, MAX_TIMESTAMP_POS,
    RECORDS_COUNT_POS,
};
use kmirror_types::{ErrorCode, LeaderEpoch, NodeId, Offset, TopicPartition};
use uuid::Uuid;

use crate::client::security::{ClientSecurity, SecurityConfigError};
use crate::client::{build, BlockingConnection, ClientError, Connection, Transport};
use crate::keys::error as code;

/// Attributes bit of a LogAppendTime batch (Kafka's RecordBatch timestampType).
const TIMESTAMP_TYPE_LOG_APPEND: i16 = 0x08;

/// What went wrong on the local side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocalError {
    /// The batch failed validation (CRC, framing): fails this partition only.
    #[error("corrupt batch: {0}")]
    Corrupt(String),
    /// The batch does not follow the local log end (logic error or divergence).
    #[error("non-monotonic append: {0}")]
    NonMonotonic(String),
    /// Disk or other local failure.
    #[error("local log error: {0}")]
    Other(String),
}

/// The end of a leader epoch in a log (Kafka's OffsetsForLeaderEpoch answer): the largest
/// epoch at or below the one asked for, and the offset where it ends (the start of the next
/// higher epoch, or the log end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    pub epoch: LeaderEpoch,
    pub end_offset: Offset,
}

/// The destination partition as the fetcher sees it. Async so the broker can implement it
/// with its engine's `Router::with_partition` (inline on the owning core): no borrow of the
/// log may be held across an `.await` in an implementation.
#[allow(async_fn_in_trait)]
pub trait LocalPartition {
    async fn log_start_offset(&self) -> Result<Offset, LocalError>;
    /// Next offset to be written (where fetching resumes after a restart).
    async fn log_end_offset(&self) -> Result<Offset, LocalError>;
    /// The destination partition's leader epoch.
    async fn leader_epoch(&self) -> Result<LeaderEpoch, LocalError>;
    /// Raise the destination leader epoch to `epoch` (called only when it is higher).
    async fn bump_leader_epoch_to(&mut self, epoch: LeaderEpoch) -> Result<(), LocalError>;
    /// Append whole batches verbatim at their own offsets (`kmirror_log::Log::append_mirror`;
    /// on a single node the high watermark follows the log end). Returns the last offset.
    async fn append_mirror(&mut self, batches: Bytes) -> Result<Offset, LocalError>;
    /// Drop everything and make `offset` the new log start and end.
    async fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LocalError>;
    /// Kafka OffsetsForLeaderEpoch on the local log (`kmirror_log::Log::end_offset_for_epoch`);
    /// None if the log holds no epoch <= `epoch` (or cannot be read).
    async fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<EpochEnd>;
    /// Drop every batch at or above `offset` (failback truncation).
    async fn truncate_to(&mut self, offset: Offset) -> Result<(), LocalError>;
    /// Raise the log start to `offset` (at most the high watermark), as DeleteRecords does, so
    /// the destination's log start follows the source's (a Kafka follower does the same).
    /// Views that cannot do it leave the log start alone.
    async fn advance_log_start_to(&mut self, offset: Offset) -> Result<(), LocalError> {
        let _ = offset;
        Ok(())
    }
}

/// [`LocalPartition`] over the engine: every call runs on the partition's owning core via
/// `Router::with_partition` (inline when the fetcher runs on that core, as it should).
///
/// The epoch bump is in memory (`Partition::leader_epoch`); the broker must make it durable
/// (cluster metadata) or, at partition open, start from `max(spec epoch, log.latest_epoch())`
/// so a restart never lowers it. The fetcher re-learns the source epoch on restart anyway.
pub struct EngineLocalPartition {
    router: kmirror_engine::Router,
    tp: TopicPartition,
}

impl EngineLocalPartition {
    pub fn new(router: kmirror_engine::Router, tp: TopicPartition) -> Self {
        EngineLocalPartition { router, tp }
    }

    async fn with<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut kmirror_engine::Partition) -> Result<R, LocalError> + Send + 'static,
    ) -> Result<R, LocalError> {
        self.router
            .with_partition(self.tp.clone(), f)
            .await
            .map_err(LocalError::from)?
    }
}

/// The engine's errors as the fetcher tells them apart (the one map at this seam).
impl From<kmirror_engine::EngineError> for LocalError {
    fn from(e: kmirror_engine::EngineError) -> LocalError {
        match e {
            kmirror_engine::EngineError::Log(l) => l.into(),
            other => LocalError::Other(other.to_string()),
        }
    }
}

impl From<kmirror_log::LogError> for LocalError {
    fn from(e: kmirror_log::LogError) -> LocalError {
        match e {
            kmirror_log::LogError::Corrupt { .. } | kmirror_log::LogError::InvalidRecord(_) => {
                LocalError::Corrupt(e.to_string())
            }
            kmirror_log::LogError::NonMonotonicMirrorOffset { .. } => {
                LocalError::NonMonotonic(e.to_string())
            }
            other => LocalError::Other(other.to_string()),
        }
    }
}

impl LocalPartition for EngineLocalPartition {
    async fn log_start_offset(&self) -> Result<Offset, LocalError> {
        self.with(|p| Ok(p.log.log_start_offset())).await
    }
    async fn log_end_offset(&self) -> Result<Offset, LocalError> {
        self.with(|p| Ok(p.log.log_end_offset())).await
    }
    async fn leader_epoch(&self) -> Result<LeaderEpoch, LocalError> {
        self.with(|p| Ok(p.leader_epoch)).await
    }
    async fn bump_leader_epoch_to(&mut self, epoch: LeaderEpoch) -> Result<(), LocalError> {
        self.with(move |p| {
            if epoch > p.leader_epoch {
                p.leader_epoch = epoch;
            }
            Ok(())
        })
        .await
    }
    async fn append_mirror(&mut self, batches: Bytes) -> Result<Offset, LocalError> {
        self.with(move |p| Ok(p.append_mirror(batches)?.last_offset))
            .await
    }
    async fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LocalError> {
        self.with(move |p| Ok(p.log.truncate_fully_and_start_at(offset)?))
            .await
    }
    async fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<EpochEnd> {
        self.with(move |p| {
            Ok(p.log
                .end_offset_for_epoch(epoch)
                .map(|(epoch, end_offset)| EpochEnd { epoch, end_offset }))
        })
        .await
        .ok()
        .flatten()
    }
    async fn truncate_to(&mut self, offset: Offset) -> Result<(), LocalError> {
        self.with(move |p| Ok(p.log.truncate_to(offset)?)).await
    }
    async fn advance_log_start_to(&mut self, offset: Offset) -> Result<(), LocalError> {
        self.with(move |p| {
            let to = offset.min(p.log.high_watermark());
            p.log.delete_records_before(to)?;
            Ok(())
        })
        .await
    }
}

/// The source partition leader as last seen in metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLeader {
    pub broker_id: i32,
    pub addr: String,
    pub leader_epoch: LeaderEpoch,
    pub topic_id: Uuid,
}

/// The leader a Fetch answer names (KIP-951 current-leader hint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CurrentLeader {
    pub leader_id: NodeId,
    pub leader_epoch: LeaderEpoch,
}

/// One partition's answer to a Fetch: its records, or the error code the source answered.
#[derive(Debug, Clone)]
pub enum FetchOutcome {
    Records(FetchedRecords),
    Refused {
        error: ErrorCode,
        /// Current leader hint (KIP-951), if the source sent one.
        current_leader: Option<CurrentLeader>,
    },
}

/// The records of a partition the source answered without error, and its offsets then.
#[derive(Debug, Clone, Default)]
pub struct FetchedRecords {
    pub high_watermark: Offset,
    /// None when the source did not say (Kafka sends -1 then).
    pub last_stable_offset: Option<Offset>,
    /// None when the source did not say (Kafka sends -1 then).
    pub log_start_offset: Option<Offset>,
    pub records: Bytes,
}

impl FetchOutcome {
    /// A partition answer refused with `error` and no leader hint.
    pub fn refused(error: ErrorCode) -> FetchOutcome {
        FetchOutcome::Refused {
            error,
            current_leader: None,
        }
    }

    /// One partition of a Fetch response (the one conversion from the wire, shared by the
    /// single-partition source and the session loop).
    pub fn from_wire(p: &kafka_protocol::messages::fetch_response::PartitionData) -> FetchOutcome {
        let error = ErrorCode::new(p.error_code);
        if !error.is_none() {
            return FetchOutcome::Refused {
                error,
                current_leader: (p.current_leader.leader_epoch >= 0).then_some(CurrentLeader {
                    leader_id: NodeId(p.current_leader.leader_id.0),
                    leader_epoch: LeaderEpoch(p.current_leader.leader_epoch),
                }),
            };
        }
        let known = |o: i64| (o >= 0).then_some(Offset(o));
        FetchOutcome::Records(FetchedRecords {
            high_watermark: Offset(p.high_watermark),
            last_stable_offset: known(p.last_stable_offset),
            log_start_offset: known(p.log_start_offset),
            records: p.records.clone().unwrap_or_default(),
        })
    }
}

/// The source's answer for one partition: the value, or the error code it answered.
pub type PartitionAnswer<T> = Result<T, ErrorCode>;

/// A source-side failure that is not a per-partition error code.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A connection error shared by every partition of a failed multi-partition request.
    #[error(transparent)]
    Shared(std::sync::Arc<ClientError>),
    /// The source refused the mirror's principal (an ACL is missing).
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    Other(String),
}

impl SourceError {
    /// Authentication or authorization failures: the partition is FAILED at once with the
    /// reason (an operator must fix credentials or ACLs); the fetcher keeps retrying.
    pub fn is_auth_failure(&self) -> bool {
        match self {
            SourceError::Client(c) => c.is_auth_failure(),
            SourceError::Shared(c) => c.is_auth_failure(),
            SourceError::Denied(_) => true,
            SourceError::Other(_) => false,
        }
    }
}

/// The source cluster as the fetcher sees it (plus time, so tests control it).
#[allow(async_fn_in_trait)]
pub trait Source {
    /// Leader, leader epoch and topic id of the partition, from fresh metadata.
    async fn leader(&mut self, topic: &str, partition: i32) -> Result<SourceLeader, SourceError>;
    /// Consumer Fetch of one partition from `leader`.
    async fn fetch(
        &mut self,
        leader: &SourceLeader,
        req: &build::FetchPart,
        cfg: &FetcherConfig,
    ) -> Result<FetchOutcome, SourceError>;
    /// ListOffsets (EARLIEST / LATEST, read_committed) of the partition.
    async fn list_offset(
        &mut self,
        leader: &SourceLeader,
        topic: &str,
        partition: i32,
        current_leader_epoch: LeaderEpoch,
        timestamp: i64,
    ) -> Result<PartitionAnswer<Offset>, SourceError>;
    /// LastMirroredEpochs of a source that is a kmirror: the last source epoch it mirrored
    /// for this partition before failing over. None when it has no record or no such API.
    async fn last_mirrored_epoch(
        &mut self,
        mirror: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<LeaderEpoch>, SourceError>;
    /// OffsetsForLeaderEpoch (consumer) on the leader; None when the source holds no epoch
    /// at or below `epoch`.
    async fn end_offset_for_epoch(
        &mut self,
        leader: &SourceLeader,
        topic: &str,
        partition: i32,
        current_leader_epoch: LeaderEpoch,
        epoch: LeaderEpoch,
    ) -> Result<PartitionAnswer<Option<EpochEnd>>, SourceError>;
    async fn sleep(&mut self, d: Duration);
    fn now_ms(&self) -> i64;
}

/// Fetcher tuning; defaults follow Kafka's consumer/replica fetcher defaults.
#[derive(Debug, Clone)]
pub struct FetcherConfig {
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// Consecutive transient errors after which the partition is reported FAILED.
    pub errors_before_failed: u32,
    /// A partition whose fetches have all failed for this long is reported FAILED even before
    /// `errors_before_failed` errors: with backoff growing to its cap (and a blackholed source
    /// costing a whole request timeout per error), 30 errors take minutes, and until then
    /// DescribeMirrors would show MIRRORING at the last lag it saw.
    pub fail_after_ms: u64,
}

impl Default for FetcherConfig {
    fn default() -> Self {
        FetcherConfig {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 50 * 1024 * 1024,
            partition_max_bytes: 10 * 1024 * 1024,
            backoff_initial_ms: 100,
            backoff_max_ms: 10_000,
            errors_before_failed: 30,
            fail_after_ms: 15_000,
        }
    }
}

/// Live numbers for DescribeMirrors and metrics. Offsets are -1 while unknown.
///
/// Lag in ms is derived from the data, not from when this fetcher started, so it survives a
/// fetcher being recreated (resume, leader move, node restart): it is the age of the oldest
/// source record the destination does not have yet, taken from the source batches' own
/// timestamps (see [`FetcherStatus::lag_ms`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FetcherStatus {
    pub source_high_watermark: i64,
    pub source_last_stable_offset: i64,
    pub source_log_start_offset: i64,
    pub destination_log_end_offset: i64,
    pub source_leader_epoch: i32,
    pub leader: Option<(i32, String)>,
    /// Last time this fetcher saw the destination have everything the source had committed
    /// (lag 0); -1 if it has not yet. Every unmirrored record was appended after it.
    pub last_caught_up_ms: i64,
    /// Timestamp of the first source record not yet mirrored, when the last fetch showed its
    /// batch header; -1 if not seen.
    pub next_unmirrored_ts_ms: i64,
    /// Largest timestamp of the batches this fetcher appended last (the newest mirrored
    /// record): the next unmirrored record is no older; -1 if none yet.
    pub newest_mirrored_ts_ms: i64,
    pub last_fetch_ms: i64,
    pub last_error: Option<String>,
    pub failed: bool,
}

impl FetcherStatus {
    fn new() -> Self {
        FetcherStatus {
            source_high_watermark: -1,
            source_last_stable_offset: -1,
            source_log_start_offset: -1,
            destination_log_end_offset: -1,
            source_leader_epoch: -1,
            leader: None,
            last_caught_up_ms: -1,
            next_unmirrored_ts_ms: -1,
            newest_mirrored_ts_ms: -1,
            last_fetch_ms: -1,
            last_error: None,
            failed: false,
        }
    }

    /// What the local log alone tells (no fetcher yet): its end and newest record timestamp.
    pub fn from_local(destination_log_end_offset: i64, newest_mirrored_ts_ms: i64) -> Self {
        FetcherStatus {
            destination_log_end_offset,
            newest_mirrored_ts_ms,
            ..FetcherStatus::new()
        }
    }

    /// Lag in offsets against the source LSO (what read_committed can see), -1 if unknown.
    pub fn lag(&self) -> i64 {
        if self.source_last_stable_offset < 0 || self.destination_log_end_offset < 0 {
            return -1;
        }
        (self.source_last_stable_offset - self.destination_log_end_offset).max(0)
    }

    /// Lag in milliseconds: 0 when caught up, else the age of the oldest unmirrored source
    /// record. Its timestamp is exact when the last fetch showed its batch header, else the
    /// newest mirrored record's timestamp stands in (a lower bound: records are mirrored in
    /// order). It is never taken as earlier than the last time we saw lag 0, which also
    /// bounds records whose timestamp is not their append time (producer-set CreateTime,
    /// a transaction committed later). Computed at read time, so it keeps growing while
    /// paused or stalled; -1 when unknown.
    pub fn lag_ms(&self, now_ms: i64) -> i64 {
        match self.lag() {
            // Failing, the source's end is unknown: what it wrote since the last time we saw
            // lag 0 may be missing, so the age of that moment is the honest bound (a lag of 0
            // would claim an unreachable source is mirrored).
            0 if self.failed && self.last_caught_up_ms >= 0 => {
                (now_ms - self.last_caught_up_ms).max(0)
            }
            0 => 0,
            l if l < 0 => -1,
            _ => {
                let oldest = if self.next_unmirrored_ts_ms >= 0 {
                    self.next_unmirrored_ts_ms
                } else {
                    self.newest_mirrored_ts_ms
                };
                let since = oldest.max(self.last_caught_up_ms);
                if since < 0 {
                    -1
                } else {
                    (now_ms - since).max(0)
                }
            }
        }
    }

    /// This status measured against `readable_end`, the destination partition's high
    /// watermark on its leader (cluster): records above it are not yet on every in-sync
    /// replica, so no consumer can read them and a failover may not keep them. Lag is what
    /// a consumer of the destination is behind the source. -1: unknown, nothing changes.
    pub fn readable_to(&self, readable_end: i64) -> FetcherStatus {
        let mut st = self.clone();
        if readable_end >= 0 {
            if readable_end < st.destination_log_end_offset && st.lag() == 0 {
                // The first unreadable record is older than what the fetcher saw next.
                st.next_unmirrored_ts_ms = -1;
            }
            st.destination_log_end_offset = readable_end;
        }
        st
    }

    /// This status with the source's LSO moved to `end` (a paused partition whose source kept
    /// writing, learned by the sync rounds).
    pub fn with_source_end(&self, end: i64) -> FetcherStatus {
        let mut st = self.clone();
        if end > st.source_last_stable_offset {
            if st.lag() == 0 {
                // The records after `end`'s old value are unseen: only the bounds remain.
                st.next_unmirrored_ts_ms = -1;
            }
            st.source_last_stable_offset = end;
            st.source_high_watermark = st.source_high_watermark.max(end);
        }
        st
    }
}

/// Append time of a batch's first record (LogAppendTime batches carry it as max timestamp),
/// from its header; None if the header is incomplete.
fn batch_first_ts(b: &[u8]) -> Option<i64> {
    let base = b.get(BASE_TIMESTAMP_POS..BASE_TIMESTAMP_POS + 8)?;
    let max = b.get(MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8)?;
    let attrs = i16::from_be_bytes(b[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].try_into().ok()?);
    let ts = if attrs & TIMESTAMP_TYPE_LOG_APPEND != 0 {
        max
    } else {
        base
    };
    Some(i64::from_be_bytes(ts.try_into().ok()?))
}

/// Largest max timestamp over the whole batches in `batches` (-1 if none).
fn batches_max_ts(batches: &[u8]) -> i64 {
    let mut pos = 0usize;
    let mut max = -1i64;
    while let Some(b) = batches.get(pos..).filter(|b| b.len() >= LOG_OVERHEAD) {
        let len = i32::from_be_bytes(b[LENGTH_POS..LENGTH_POS + 4].try_into().expect("4"));
        if len <= 0 {
            break;
        }
        if let Some(ts) = b.get(MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8) {
            max = max.max(i64::from_be_bytes(ts.try_into().expect("8")));
        }
        pos += LOG_OVERHEAD + len as usize;
    }
    max
}

/// Records in the whole batches of `batches` (the headers' record counts).
fn batches_record_count(batches: &[u8]) -> u64 {
    let mut pos = 0usize;
    let mut n = 0u64;
    while let Some(b) = batches.get(pos..).filter(|b| b.len() >= LOG_OVERHEAD) {
        let len = i32::from_be_bytes(b[LENGTH_POS..LENGTH_POS + 4].try_into().expect("4"));
        if len <= 0 {
            break;
        }
        if let Some(c) = b.get(RECORDS_COUNT_POS..RECORDS_COUNT_POS + 4) {
            n += u64::from(i32::from_be_bytes(c.try_into().expect("4")).max(0) as u32);
        }
        pos += LOG_OVERHEAD + len as usize;
    }
    n
}

/// What the fetcher tells the broker / control plane.
#[derive(Debug, Clone, PartialEq)]
pub enum FetchEvent {
    /// After every fetch round that reached the source.
    Progress(FetcherStatus),
    LeaderChanged {
        broker_id: i32,
        addr: String,
        leader_epoch: LeaderEpoch,
    },
    /// The local leader epoch was raised to keep it >= the source's.
    EpochBumped { to: LeaderEpoch },
    /// The source log start moved past our end: `[lost_from, lost_to)` was never mirrored.
    SourceLogStartMoved { lost_from: Offset, lost_to: Offset },
    /// The partition must go FAILED (reason for DescribeMirrors); the fetcher keeps retrying
    /// with backoff.
    Failed { reason: String },
    /// A FAILED partition appended again: back to MIRRORING.
    Recovered,
    /// A transient error being retried (partition stays MIRRORING).
    Retrying { reason: String },
    /// PREPARING finished (failback truncation applied): the partition may go MIRRORING.
    Prepared(PreparePlan),
}

/// Receives fetcher events (the broker forwards them to the control plane and metrics).
/// The counting hooks default to doing nothing, so observers that only want events ignore
/// them; they are called on the fetcher's core and must not block.
pub trait FetchObserver {
    fn on_event(&mut self, tp: &TopicPartition, event: FetchEvent);
    /// Whole batches were appended: `records` (the batch headers' record counts, control
    /// records included) and `bytes` (their size in the log).
    fn on_appended(&mut self, tp: &TopicPartition, records: u64, bytes: u64) {
        let _ = (tp, records, bytes);
    }
    /// A fetch round failed (retried with backoff) or was answered with an error code.
    fn on_fetch_error(&mut self, tp: &TopicPartition, kind: FetchErrorKind) {
        let _ = (tp, kind);
    }
    /// The broker's mirror byte-rate ceiling held this fetcher back for `delay`.
    fn on_throttled(&mut self, tp: &TopicPartition, delay: Duration) {
        let _ = (tp, delay);
    }
}

/// Why a fetch round did not just append (the `kind` label of the fetch error metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FetchErrorKind {
    /// The source could not be reached or the connection broke (metadata, Fetch, ListOffsets).
    Network,
    /// Authentication or authorization refused by the source.
    Auth,
    /// The leader moved or our epoch is stale (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...).
    Leader,
    /// OFFSET_OUT_OF_RANGE (the source log start moved, or the source was truncated).
    OffsetOutOfRange,
    /// Another error code, or a source that is not what the mirror expects (topic re-created).
    Source,
    /// The destination log refused (disk, validation, epoch bump).
    Local,
}

impl FetchErrorKind {
    pub const ALL: [FetchErrorKind; 6] = [
        FetchErrorKind::Network,
        FetchErrorKind::Auth,
        FetchErrorKind::Leader,
        FetchErrorKind::OffsetOutOfRange,
        FetchErrorKind::Source,
        FetchErrorKind::Local,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FetchErrorKind::Network => "network",
            FetchErrorKind::Auth => "auth",
            FetchErrorKind::Leader => "leader",
            FetchErrorKind::OffsetOutOfRange => "offset_out_of_range",
            FetchErrorKind::Source => "source",
            FetchErrorKind::Local => "local",
        }
    }
}

/// Why `run` returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetcherExit {
    Stopped,
}

/// Result of one fetch round, for tests and the run loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Appended `bytes` of batches up to this last offset.
    Appended { last_offset: Offset, bytes: usize },
    /// Nothing new (caught up or empty response).
    Idle,
    /// Something to retry after the given backoff.
    Backoff(Duration),
}

struct Backoff {
    cur: u64,
    initial: u64,
    max: u64,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let d = self.cur;
        self.cur = (self.cur * 2).min(self.max);
        Duration::from_millis(d)
    }
    fn reset(&mut self) {
        self.cur = self.initial;
    }
}

/// The per-partition fetcher state.
pub struct PartitionFetcher {
    tp: TopicPartition,
    /// Topic id of the mirror topic (== the source's); nil = learn from metadata.
    topic_id: Uuid,
    cfg: FetcherConfig,
    leader: Option<SourceLeader>,
    /// The source leader epoch we know; None until learned (Fetch then sends -1).
    source_epoch: Option<LeaderEpoch>,
    backoff: Backoff,
    consecutive_errors: u32,
    /// When a round last succeeded (or the first round began): how long errors have lasted.
    last_ok_ms: Option<i64>,
    status: FetcherStatus,
    throttle: Option<crate::throttle::MirrorThrottle>,
    /// A new fetcher may replace one that failed (restart, a cleared sync failure): its
    /// first success is announced so a FAILED partition returns to MIRRORING.
    announce_first_success: bool,
    /// `add --start latest|<ms>`: where an empty mirror log starts, looked up on the source
    /// (ListOffsets) before the first fetch; None once placed (or for earliest).
    start_at: Option<i64>,
}

impl PartitionFetcher {
    /// No status is derived from when the fetcher started: lag in ms comes from the data, so
    /// a recreated fetcher continues it.
    pub fn new(tp: TopicPartition, topic_id: Uuid, cfg: FetcherConfig) -> Self {
        let backoff = Backoff {
            cur: cfg.backoff_initial_ms,
            initial: cfg.backoff_initial_ms,
            max: cfg.backoff_max_ms,
        };
        PartitionFetcher {
            tp,
            topic_id,
            cfg,
            leader: None,
            source_epoch: None,
            backoff,
            consecutive_errors: 0,
            last_ok_ms: None,
            status: FetcherStatus::new(),
            throttle: None,
            announce_first_success: true,
            start_at: None,
        }
    }

    /// Share a byte-rate ceiling with the other fetchers of this core.
    pub fn with_throttle(mut self, throttle: crate::throttle::MirrorThrottle) -> Self {
        self.throttle = Some(throttle);
        self
    }

    /// Where the mirror log starts when it is empty: a ListOffsets timestamp (-1 latest, or
    /// epoch ms); -2 (earliest) is the default behaviour and needs no lookup.
    pub fn with_start(mut self, timestamp: i64) -> Self {
        self.start_at = (timestamp != build::EARLIEST).then_some(timestamp);
        self
    }

    pub fn status(&self) -> &FetcherStatus {
        &self.status
    }

    pub fn source_epoch(&self) -> Option<LeaderEpoch> {
        self.source_epoch
    }

    /// The epoch to send as the current leader epoch: unknown until learned.
    fn known_source_epoch(&self) -> LeaderEpoch {
        self.source_epoch.unwrap_or(LeaderEpoch::UNKNOWN)
    }

    /// Run until `stop` is set. Never returns an error: failures are reported as events and
    /// retried with backoff.
    pub async fn run<S: Source, L: LocalPartition, O: FetchObserver>(
        mut self,
        source: &mut S,
        local: &mut L,
        observer: &mut O,
        stop: &Cell<bool>,
    ) -> FetcherExit {
        while !stop.get() {
            match self.step(source, local, observer).await {
                Step::Backoff(d) => source.sleep(d).await,
                Step::Appended { bytes, .. } => {
                    let delay = self
                        .throttle
                        .as_ref()
                        .map(|t| t.charge(bytes, crate::throttle::now_us()));
                    if let Some(d) = delay.filter(|d| !d.is_zero()) {
                        observer.on_throttled(&self.tp, d);
                        source.sleep(d).await;
                    }
                }
                Step::Idle => {}
            }
        }
        FetcherExit::Stopped
    }

    async fn learn_epoch<L: LocalPartition, O: FetchObserver>(
        &mut self,
        epoch: LeaderEpoch,
        local: &mut L,
        observer: &mut O,
    ) -> Result<(), LocalError> {
        // A -1 on the wire says nothing: only a real epoch is learned.
        if epoch.get() >= 0 && self.source_epoch.is_none_or(|known| epoch > known) {
            self.source_epoch = Some(epoch);
            self.status.source_leader_epoch = epoch.get();
        }
        self.ensure_local_epoch(epoch, local, observer).await
    }

    async fn ensure_local_epoch<L: LocalPartition, O: FetchObserver>(
        &mut self,
        epoch: LeaderEpoch,
        local: &mut L,
        observer: &mut O,
    ) -> Result<(), LocalError> {
        if epoch > local.leader_epoch().await? {
            local.bump_leader_epoch_to(epoch).await?;
            observer.on_event(&self.tp, FetchEvent::EpochBumped { to: epoch });
        }
        Ok(())
    }

    fn fail<O: FetchObserver>(
        &mut self,
        observer: &mut O,
        kind: FetchErrorKind,
        reason: String,
    ) -> Step {
        observer.on_fetch_error(&self.tp, kind);
        self.fail_counted(observer, reason)
    }

    /// [`Self::fail`] for an error already counted.
    fn fail_counted<O: FetchObserver>(&mut self, observer: &mut O, reason: String) -> Step {
        tracing::warn!(tp = %self.tp, %reason, "mirror partition failed");
        self.status.failed = true;
        self.status.last_error = Some(reason.clone());
        // Publish it: DescribeMirrors' lag in ms reads the failed flag.
        observer.on_event(&self.tp, FetchEvent::Progress(self.status.clone()));
        observer.on_event(&self.tp, FetchEvent::Failed { reason });
        Step::Backoff(self.backoff.next())
    }

    fn transient<O: FetchObserver>(
        &mut self,
        observer: &mut O,
        kind: FetchErrorKind,
        reason: String,
        now_ms: i64,
    ) -> Step {
        self.consecutive_errors += 1;
        observer.on_fetch_error(&self.tp, kind);
        let failing_ms = now_ms - self.last_ok_ms.unwrap_or(now_ms);
        let too_long = failing_ms >= 0 && failing_ms as u64 >= self.cfg.fail_after_ms;
        if (self.consecutive_errors >= self.cfg.errors_before_failed || too_long)
            && !self.status.failed
        {
            return self.fail_counted(
                observer,
                format!(
                    "{reason} ({} consecutive errors, no successful fetch for {} s)",
                    self.consecutive_errors,
                    failing_ms.max(0) / 1000
                ),
            );
        }
        self.status.last_error = Some(reason.clone());
        observer.on_event(&self.tp, FetchEvent::Retrying { reason });
        Step::Backoff(self.backoff.next())
    }

    fn succeeded<O: FetchObserver>(&mut self, observer: &mut O, now_ms: i64) {
        self.backoff.reset();
        self.consecutive_errors = 0;
        self.last_ok_ms = Some(now_ms);
        if self.status.failed || self.announce_first_success {
            self.status.failed = false;
            self.announce_first_success = false;
            self.status.last_error = None;
            observer.on_event(&self.tp, FetchEvent::Recovered);
        }
    }

    /// One round: make sure we know the leader, fetch once, act on the answer.
    pub async fn step<S: Source, L: LocalPartition, O: FetchObserver>(
        &mut self,
        source: &mut S,
        local: &mut L,
        observer: &mut O,
    ) -> Step {
        self.last_ok_ms.get_or_insert_with(|| source.now_ms());
        let leader = match &self.leader {
            Some(l) => l.clone(),
            None => match source.leader(&self.tp.topic, self.tp.partition).await {
                Ok(l) => {
                    if !self.topic_id.is_nil()
                        && !l.topic_id.is_nil()
                        && l.topic_id != self.topic_id
                    {
                        return self.fail(
                            observer,
                            FetchErrorKind::Source,
                            format!(
                                "source topic id {} differs from mirror topic id {} (topic re-created on the source?)",
                                l.topic_id, self.topic_id
                            ),
                        );
                    }
                    if self.topic_id.is_nil() {
                        self.topic_id = l.topic_id;
                    }
                    if let Err(e) = self.learn_epoch(l.leader_epoch, local, observer).await {
                        return self.fail(observer, FetchErrorKind::Local, e.to_string());
                    }
                    self.status.leader = Some((l.broker_id, l.addr.clone()));
                    observer.on_event(
                        &self.tp,
                        FetchEvent::LeaderChanged {
                            broker_id: l.broker_id,
                            addr: l.addr.clone(),
                            leader_epoch: l.leader_epoch,
                        },
                    );
                    self.leader = Some(l.clone());
                    l
                }
                Err(e) if e.is_auth_failure() => {
                    return self.fail(observer, FetchErrorKind::Auth, format!("metadata: {e}"));
                }
                Err(e) => {
                    return self.transient(
                        observer,
                        FetchErrorKind::Network,
                        format!("metadata: {e}"),
                        source.now_ms(),
                    )
                }
            },
        };

        if let Some(ts) = self.start_at {
            if let Some(step) = self.place_start(ts, source, &leader, local, observer).await {
                return step;
            }
        }
        let fetch_offset = match local.log_end_offset().await {
            Ok(o) => o,
            Err(e) => return self.fail(observer, FetchErrorKind::Local, e.to_string()),
        };
        let part = build::FetchPart {
            topic: self.tp.topic.clone(),
            topic_id: self.topic_id,
            partition: self.tp.partition,
            fetch_offset,
            current_leader_epoch: self.known_source_epoch(),
            partition_max_bytes: self.cfg.partition_max_bytes,
        };
        let out = match source.fetch(&leader, &part, &self.cfg).await {
            Ok(o) => o,
            Err(e) if e.is_auth_failure() => {
                self.leader = None;
                return self.fail(
                    observer,
                    FetchErrorKind::Auth,
                    format!("fetch from {}: {e}", leader.addr),
                );
            }
            Err(e) => {
                // Connection-level trouble: the leader may be gone; look it up again.
                self.leader = None;
                return self.transient(
                    observer,
                    FetchErrorKind::Network,
                    format!("fetch from {}: {e}", leader.addr),
                    source.now_ms(),
                );
            }
        };
        self.status.last_fetch_ms = source.now_ms();

        let (error, current_leader) = match out {
            FetchOutcome::Records(data) => {
                return self
                    .on_data(data, fetch_offset, local, observer, source.now_ms())
                    .await
            }
            FetchOutcome::Refused {
                error,
                current_leader,
            } => (error, current_leader),
        };
        match error.code() {
            code::FENCED_LEADER_EPOCH => {
                // Our epoch is older than the leader's: learn it and retry at once.
                observer.on_fetch_error(&self.tp, FetchErrorKind::Leader);
                match current_leader {
                    Some(CurrentLeader {
                        leader_id,
                        leader_epoch: epoch,
                    }) if self.source_epoch.is_none_or(|known| epoch > known)
                        && leader_id.0 == leader.broker_id =>
                    {
                        if let Err(e) = self.learn_epoch(epoch, local, observer).await {
                            return self.fail(observer, FetchErrorKind::Local, e.to_string());
                        }
                    }
                    _ => self.leader = None,
                }
                Step::Idle
            }
            code::UNKNOWN_LEADER_EPOCH
            | code::NOT_LEADER_OR_FOLLOWER
            | code::LEADER_NOT_AVAILABLE
            | code::REPLICA_NOT_AVAILABLE
            | code::UNKNOWN_TOPIC_OR_PARTITION
            | code::UNKNOWN_TOPIC_ID
            | code::KAFKA_STORAGE_ERROR => {
                self.leader = None;
                self.transient(
                    observer,
                    FetchErrorKind::Leader,
                    format!(
                        "{} from {}; refreshing metadata",
                        code::name(error.code()),
                        leader.addr
                    ),
                    source.now_ms(),
                )
            }
            code::OFFSET_OUT_OF_RANGE => {
                self.on_out_of_range(source, &leader, fetch_offset, local, observer)
                    .await
            }
            code::OFFSET_MOVED_TO_TIERED_STORAGE => self.fail(
                observer,
                FetchErrorKind::OffsetOutOfRange,
                format!(
                    "offset {fetch_offset} is only in the source's tiered storage (not supported)"
                ),
            ),
            code::INCONSISTENT_TOPIC_ID => self.fail(
                observer,
                FetchErrorKind::Source,
                "INCONSISTENT_TOPIC_ID: the source topic was re-created".to_owned(),
            ),
            code::TOPIC_AUTHORIZATION_FAILED => self.fail(
                observer,
                FetchErrorKind::Auth,
                format!(
                    "TOPIC_AUTHORIZATION_FAILED from {}: the mirror's principal may not Read {} \
                     on the source",
                    leader.addr, self.tp.topic
                ),
            ),
            other => self.transient(
                observer,
                FetchErrorKind::Source,
                format!("fetch error {}", code::name(other)),
                source.now_ms(),
            ),
        }
    }

    async fn on_data<L: LocalPartition, O: FetchObserver>(
        &mut self,
        out: FetchedRecords,
        fetch_offset: Offset,
        local: &mut L,
        observer: &mut O,
        now_ms: i64,
    ) -> Step {
        self.status.source_high_watermark = out.high_watermark.get();
        self.status.source_last_stable_offset =
            out.last_stable_offset.unwrap_or(out.high_watermark).get();
        self.status.source_log_start_offset = out.log_start_offset.map_or(-1, Offset::get);

        let mut step = Step::Idle;
        let whole = kmirror_log::batch::whole_batches(&out.records);
        // The response starts at the oldest unmirrored record; after the whole batches are
        // stored, it is the first batch not stored, if the response holds its header (a
        // batch cut at the size limit).
        let whole_len = whole.as_ref().map_or(0, |w| w.bytes.len());
        let next_ts = out.records.get(whole_len..).and_then(batch_first_ts);
        if !out.records.is_empty() {
            self.status.next_unmirrored_ts_ms = batch_first_ts(&out.records).unwrap_or(-1);
        }
        if let Some(kmirror_log::batch::WholeBatches {
            bytes: batches,
            first_base,
            last_offset: last,
            max_epoch,
        }) = whole
        {
            if last < fetch_offset {
                // Entirely below what we have: nothing to do (should not happen).
            } else {
                if first_base < fetch_offset {
                    // The source log start is inside this batch (DeleteRecords / retention
                    // moved it mid-batch). Like a Kafka follower, restart the local log at the
                    // batch's base offset so the batch is stored whole.
                    let empty = match (local.log_end_offset().await, local.log_start_offset().await)
                    {
                        (Ok(end), Ok(start)) => end == start,
                        (Err(e), _) | (_, Err(e)) => {
                            return self.fail(observer, FetchErrorKind::Local, e.to_string())
                        }
                    };
                    if empty {
                        if let Err(e) = local.truncate_fully_and_start_at(first_base).await {
                            return self.fail(observer, FetchErrorKind::Local, e.to_string());
                        }
                    } else {
                        return self.fail(
                            observer,
                            FetchErrorKind::Local,
                            format!(
                                "source batch at {first_base} overlaps local data below log end {fetch_offset}"
                            ),
                        );
                    }
                }
                if let Err(e) = self
                    .ensure_local_epoch(
                        self.source_epoch.map_or(max_epoch, |s| s.max(max_epoch)),
                        local,
                        observer,
                    )
                    .await
                {
                    return self.fail(observer, FetchErrorKind::Local, e.to_string());
                }
                let appended_bytes = batches.len();
                let appended_ts = batches_max_ts(&batches);
                let appended_records = batches_record_count(&batches);
                match local.append_mirror(batches).await {
                    Ok(last_appended) => {
                        observer.on_appended(&self.tp, appended_records, appended_bytes as u64);
                        if appended_ts >= 0 {
                            self.status.newest_mirrored_ts_ms = appended_ts;
                        }
                        self.status.next_unmirrored_ts_ms = next_ts.unwrap_or(-1);
                        step = Step::Appended {
                            last_offset: last_appended,
                            bytes: appended_bytes,
                        }
                    }
                    Err(e) => {
                        // The log end did not move: publish it (and the source end just
                        // learned) so describe shows real offsets and lag while FAILED, not
                        // the -1 of a fetcher that never appended (a disk full at offset 0).
                        self.status.destination_log_end_offset =
                            local.log_end_offset().await.map_or(-1, Offset::get);
                        observer.on_event(&self.tp, FetchEvent::Progress(self.status.clone()));
                        return self.fail(
                            observer,
                            FetchErrorKind::Local,
                            format!("append at offset {first_base} failed: {e}"),
                        );
                    }
                }
            }
        }
        // Follow the source log start (DeleteRecords / retention on the source, including a
        // start inside the batch just stored whole), so log start offsets stay equal.
        if let Some(source_start) = out.log_start_offset.filter(|o| o.get() > 0) {
            let local_range = (local.log_start_offset().await, local.log_end_offset().await);
            if let (Ok(local_start), Ok(local_end)) = local_range {
                if source_start > local_start && source_start <= local_end {
                    if let Err(e) = local.advance_log_start_to(source_start).await {
                        return self.fail(
                            observer,
                            FetchErrorKind::Local,
                            format!("advance log start: {e}"),
                        );
                    }
                }
            }
        }
        self.succeeded(observer, now_ms);
        self.status.destination_log_end_offset =
            local.log_end_offset().await.map_or(-1, Offset::get);
        if self.status.lag() == 0 {
            self.status.last_caught_up_ms = now_ms;
            self.status.next_unmirrored_ts_ms = -1;
        }
        self.status.last_error = None;
        observer.on_event(&self.tp, FetchEvent::Progress(self.status.clone()));
        step
    }

    /// `add --start`: an empty mirror log (nothing mirrored yet) starts at the source offset
    /// ListOffsets gives for `ts` (latest, or the first record at or after a time; a time
    /// after every record means latest). From there it is log-equal with the source at the
    /// same offsets. A log holding anything is left as it is. None: placed (or nothing to
    /// do), go on fetching; Some: this step's outcome (a lookup error, retried).
    async fn place_start<S: Source, L: LocalPartition, O: FetchObserver>(
        &mut self,
        ts: i64,
        source: &mut S,
        leader: &SourceLeader,
        local: &mut L,
        observer: &mut O,
    ) -> Option<Step> {
        let (start, end) = match (local.log_start_offset().await, local.log_end_offset().await) {
            (Ok(s), Ok(e)) => (s, e),
            (Err(e), _) | (_, Err(e)) => {
                return Some(self.fail(observer, FetchErrorKind::Local, e.to_string()))
            }
        };
        if start != Offset(0) || end != Offset(0) {
            self.start_at = None;
            return None;
        }
        let (t, p) = (self.tp.topic.clone(), self.tp.partition);
        let epoch = self.known_source_epoch();
        let mut found = source.list_offset(leader, &t, p, epoch, ts).await;
        if matches!(found, Ok(Ok(Offset(o))) if o < 0) {
            // No record at or after that time: start at the end.
            found = source
                .list_offset(leader, &t, p, epoch, build::LATEST)
                .await;
        }
        let at = match found {
            Ok(Ok(o)) => o,
            Ok(Err(c)) => {
                self.leader = None;
                return Some(self.transient(
                    observer,
                    FetchErrorKind::Source,
                    format!(
                        "ListOffsets for the start position: {}",
                        code::name(c.code())
                    ),
                    source.now_ms(),
                ));
            }
            Err(e) => {
                self.leader = None;
                return Some(self.transient(
                    observer,
                    FetchErrorKind::Network,
                    format!("ListOffsets for the start position: {e}"),
                    source.now_ms(),
                ));
            }
        };
        if at > Offset(0) {
            if let Err(e) = local.truncate_fully_and_start_at(at).await {
                return Some(self.fail(observer, FetchErrorKind::Local, e.to_string()));
            }
            tracing::info!(tp = %self.tp, start = %at, timestamp = ts, "mirror log starts at the requested source position");
        }
        self.start_at = None;
        None
    }

    async fn on_out_of_range<S: Source, L: LocalPartition, O: FetchObserver>(
        &mut self,
        source: &mut S,
        leader: &SourceLeader,
        fetch_offset: Offset,
        local: &mut L,
        observer: &mut O,
    ) -> Step {
        let (t, p) = (self.tp.topic.clone(), self.tp.partition);
        let epoch = self.known_source_epoch();
        let start = source
            .list_offset(leader, &t, p, epoch, build::EARLIEST)
            .await;
        let end = source
            .list_offset(leader, &t, p, epoch, build::LATEST)
            .await;
        let (start, end) = match (start, end) {
            (Ok(Ok(s)), Ok(Ok(e))) => (s, e),
            (Ok(Err(c)), _) | (_, Ok(Err(c))) => {
                self.leader = None;
                return self.transient(
                    observer,
                    FetchErrorKind::OffsetOutOfRange,
                    format!("ListOffsets: {}", code::name(c.code())),
                    source.now_ms(),
                );
            }
            (Err(e), _) | (_, Err(e)) => {
                self.leader = None;
                return self.transient(
                    observer,
                    FetchErrorKind::Network,
                    format!("ListOffsets: {e}"),
                    source.now_ms(),
                );
            }
        };
        if fetch_offset < start {
            // Source retention / DeleteRecords removed data we never mirrored: restart at the
            // source log start and report the gap (never silent).
            tracing::warn!(tp = %self.tp, lost_from = %fetch_offset, lost_to = %start,
                "source log start moved past the mirror's end; truncating fully");
            if let Err(e) = local.truncate_fully_and_start_at(start).await {
                return self.fail(observer, FetchErrorKind::Local, e.to_string());
            }
            observer.on_event(
                &self.tp,
                FetchEvent::SourceLogStartMoved {
                    lost_from: fetch_offset,
                    lost_to: start,
                },
            );
            self.succeeded(observer, source.now_ms());
            Step::Idle
        } else if fetch_offset > end {
            self.fail(
                observer,
                FetchErrorKind::OffsetOutOfRange,
                format!(
                    "destination log end {fetch_offset} is beyond the source log end {end} (source truncated; unclean leader election is not supported)"
                ),
            )
        } else {
            // The range moved under us between the fetch and ListOffsets: just retry.
            self.transient(
                observer,
                FetchErrorKind::OffsetOutOfRange,
                "OFFSET_OUT_OF_RANGE raced with the source".to_owned(),
                source.now_ms(),
            )
        }
    }
}

/// Where the epoch used for failback truncation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LmeOrigin {
    /// The source (the cluster that took over) answered LastMirroredEpochs.
    Source,
    /// Our own LME, recorded when we failed over (re-adding a stopped topic to its mirror).
    Local,
    /// Nobody knows: everything local is unverifiable and is dropped.
    None,
}

/// The PREPARING decision for one partition: truncate the local log from `local_end_offset`
/// to `truncate_to` (equal = nothing to drop), then mirror from there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparePlan {
    pub local_end_offset: Offset,
    pub truncate_to: Offset,
    pub last_mirrored_epoch: Option<LeaderEpoch>,
    pub origin: LmeOrigin,
}

impl PreparePlan {
    /// Records that would be (or were) dropped.
    pub fn truncated(&self) -> i64 {
        (self.local_end_offset.get() - self.truncate_to.get()).max(0)
    }
}

/// A local failure while planning or applying the PREPARING truncation, told as the source
/// errors of that step are (the caller retries both with backoff).
fn local_prepare_error(what: &str, e: LocalError) -> SourceError {
    SourceError::Other(format!("{what}: {e}"))
}

/// Compute where the local log diverges from the source (seed 000 failback): take the last
/// mirrored epoch (LME) from the source's LastMirroredEpochs, else our own recorded LME, ask
/// the source leader for the end offset of that epoch (OffsetsForLeaderEpoch), and keep the
/// local log only up to `min(source end, local end)` for that epoch. Changes nothing.
pub(crate) async fn plan_preparation<S: Source, L: LocalPartition>(
    source: &mut S,
    local: &L,
    mirror: &str,
    tp: &TopicPartition,
    local_lme: Option<LeaderEpoch>,
) -> Result<PreparePlan, SourceError> {
    let local_end = local
        .log_end_offset()
        .await
        .map_err(|e| local_prepare_error("local log end", e))?;
    let start = local
        .log_start_offset()
        .await
        .map_err(|e| local_prepare_error("local log start", e))?;
    if local_end == start {
        return Ok(PreparePlan {
            local_end_offset: local_end,
            truncate_to: local_end,
            last_mirrored_epoch: None,
            origin: LmeOrigin::None,
        });
    }
    let remote = source
        .last_mirrored_epoch(mirror, &tp.topic, tp.partition)
        .await?;
    let (lme, origin) = match (remote, local_lme) {
        (Some(e), _) => (e, LmeOrigin::Source),
        (None, Some(e)) => (e, LmeOrigin::Local),
        (None, None) => {
            return Ok(PreparePlan {
                local_end_offset: local_end,
                truncate_to: start,
                last_mirrored_epoch: None,
                origin: LmeOrigin::None,
            })
        }
    };
    let leader = source.leader(&tp.topic, tp.partition).await?;
    let source_end = source
        .end_offset_for_epoch(&leader, &tp.topic, tp.partition, leader.leader_epoch, lme)
        .await?
        .map_err(|c| {
            SourceError::Other(format!(
                "OffsetsForLeaderEpoch({lme}) on {}: {}",
                leader.addr,
                code::name(c.code())
            ))
        })?;
    let truncate_to = match source_end {
        // The source has no data of any epoch <= LME: nothing local can be trusted.
        None => start,
        Some(source_end) => {
            let local_bound = match local.end_offset_for_epoch(source_end.epoch).await {
                Some(e) => e.end_offset,
                None => start,
            };
            source_end
                .end_offset
                .min(local_bound)
                .min(local_end)
                .max(start)
        }
    };
    Ok(PreparePlan {
        local_end_offset: local_end,
        truncate_to,
        last_mirrored_epoch: Some(lme),
        origin,
    })
}

/// Plan and apply the PREPARING truncation. The caller then moves the partition to
/// MIRRORING (`MirrorCoordinator::preparation_done`) and starts the fetcher.
pub async fn prepare_partition<S: Source, L: LocalPartition>(
    source: &mut S,
    local: &mut L,
    mirror: &str,
    tp: &TopicPartition,
    local_lme: Option<LeaderEpoch>,
) -> Result<PreparePlan, SourceError> {
    let plan = plan_preparation(source, local, mirror, tp, local_lme).await?;
    if plan.truncate_to < plan.local_end_offset {
        let start = local
            .log_start_offset()
            .await
            .map_err(|e| local_prepare_error("local truncation", e))?;
        if plan.truncate_to == start {
            local.truncate_fully_and_start_at(plan.truncate_to).await
        } else {
            local.truncate_to(plan.truncate_to).await
        }
        .map_err(|e| local_prepare_error("local truncation", e))?;
    }
    Ok(plan)
}

/// One mirrored partition's whole life on its core: PREPARING (failback truncation, retried
/// with backoff until it succeeds), then the fetch loop until `stop` is set. The observer
/// receives [`FetchEvent::Prepared`] once (move the partition to MIRRORING then) and every
/// fetch event after it. `skip_prepare` is for partitions already MIRRORING after a restart.
#[allow(clippy::too_many_arguments)]
pub async fn mirror_partition<S: Source, L: LocalPartition, O: FetchObserver>(
    source: &mut S,
    local: &mut L,
    observer: &mut O,
    stop: &Cell<bool>,
    mirror: &str,
    fetcher: PartitionFetcher,
    local_lme: Option<LeaderEpoch>,
    skip_prepare: bool,
) -> FetcherExit {
    let tp = fetcher.tp.clone();
    if !skip_prepare {
        let mut backoff = Backoff {
            cur: fetcher.cfg.backoff_initial_ms,
            initial: fetcher.cfg.backoff_initial_ms,
            max: fetcher.cfg.backoff_max_ms,
        };
        loop {
            if stop.get() {
                return FetcherExit::Stopped;
            }
            match prepare_partition(source, local, mirror, &tp, local_lme).await {
                Ok(plan) => {
                    // A failback truncation removes records the partition's followers may
                    // hold (at an epoch that can be above every epoch the source's batches
                    // carry). A new epoch before the first append fences their fetches, so
                    // they re-truncate through OffsetsForLeaderEpoch instead of appending
                    // the source's batches on top of the dropped tail.
                    let bump = if plan.truncated() > 0 {
                        let bumped = match local.leader_epoch().await {
                            Ok(e) => {
                                let to = LeaderEpoch(e.get() + 1);
                                local.bump_leader_epoch_to(to).await.map(|()| to)
                            }
                            Err(e) => Err(e),
                        };
                        let to = match bumped {
                            Ok(to) => to,
                            Err(e) => {
                                observer.on_event(
                                    &tp,
                                    FetchEvent::Failed {
                                        reason: format!(
                                            "epoch bump after failback truncation: {e}"
                                        ),
                                    },
                                );
                                return FetcherExit::Stopped;
                            }
                        };
                        Some(to)
                    } else {
                        None
                    };
                    observer.on_event(&tp, FetchEvent::Prepared(plan));
                    if let Some(to) = bump {
                        observer.on_event(&tp, FetchEvent::EpochBumped { to });
                    }
                    break;
                }
                Err(e) => {
                    let reason = format!("preparing: {e}");
                    // Credentials or ACLs will not fix themselves: say so in DescribeMirrors.
                    let event = if e.is_auth_failure() {
                        FetchEvent::Failed { reason }
                    } else {
                        FetchEvent::Retrying { reason }
                    };
                    observer.on_event(&tp, event);
                    source.sleep(backoff.next()).await;
                }
            }
        }
    }
    fetcher.run(source, local, observer, stop).await
}

/// The real source: metadata from any reachable broker, fetches from the partition leader.
/// Connections are cached per broker address and dropped on connection-level errors.
/// Transport `T` is glommio's by default; [`BlockingSource`] is the same source over
/// blocking sockets.
pub struct KafkaSource<T: Transport = glommio::net::TcpStream> {
    bootstrap: Vec<String>,
    client_id: String,
    timeout: Duration,
    conns: HashMap<String, Connection<T>>,
    security: Result<ClientSecurity, SecurityConfigError>,
}

/// [`KafkaSource`] over blocking sockets, for the admin CLI (dry runs) and tests. Its async
/// methods block the calling thread; drive it with `futures_lite::future::block_on`.
pub(crate) type BlockingSource = KafkaSource<std::net::TcpStream>;

impl KafkaSource {
    /// `client_id` should be deterministic so the source can apply client quotas; see
    /// [`fetcher_client_id`].
    pub fn new(bootstrap: &str, client_id: String, timeout: Duration) -> Self {
        Self::over(bootstrap, client_id, timeout)
    }
}

impl<T: Transport> KafkaSource<T> {
    /// A source over transport `T` (see [`KafkaSource::new`]).
    pub fn over(bootstrap: &str, client_id: String, timeout: Duration) -> Self {
        KafkaSource {
            bootstrap: bootstrap
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            client_id,
            timeout,
            conns: HashMap::new(),
            security: Ok(ClientSecurity::plaintext()),
        }
    }

    /// TLS / SASL for every connection of this source (the mirror's own settings).
    pub fn with_security(mut self, security: Result<ClientSecurity, SecurityConfigError>) -> Self {
        self.security = security;
        self
    }

    async fn conn(&mut self, addr: &str) -> Result<&mut Connection<T>, ClientError> {
        // A SASL session near its broker-set lifetime is replaced (KIP-368 by reconnecting).
        if self.conns.get(addr).is_some_and(|c| c.session_expiring()) {
            self.conns.remove(addr);
        }
        if !self.conns.contains_key(addr) {
            let security = self.security.as_ref().map_err(|e| ClientError::Security {
                addr: addr.to_owned(),
                reason: e.to_string(),
            })?;
            let c =
                Connection::connect_secured(addr, &self.client_id, self.timeout, security).await?;
            self.conns.insert(addr.to_owned(), c);
        }
        Ok(self.conns.get_mut(addr).expect("inserted above"))
    }

    fn drop_on_fatal(&mut self, addr: &str, e: &ClientError) {
        if e.is_connection_fatal() {
            self.conns.remove(addr);
        }
    }

    /// [`Self::drop_on_fatal`] for a result whose client errors come wrapped.
    fn drop_on_fatal_source<R>(
        &mut self,
        addr: &str,
        r: Result<R, SourceError>,
    ) -> Result<R, SourceError> {
        if let Err(SourceError::Client(e)) = &r {
            self.drop_on_fatal(addr, e);
        }
        r
    }
}

impl<T: Transport> KafkaSource<T> {
    /// Send to any reachable broker (known connections first, then bootstrap).
    async fn send_any<R: kafka_protocol::protocol::Request + Clone>(
        &mut self,
        req: &R,
        min_version: i16,
    ) -> Result<R::Response, SourceError> {
        self.send_any_built(min_version, |_| req.clone()).await
    }

    /// Like [`Self::send_any`], the request built for the version negotiated with the broker
    /// that answers.
    async fn send_any_built<R: kafka_protocol::protocol::Request>(
        &mut self,
        min_version: i16,
        build: impl Fn(i16) -> R,
    ) -> Result<R::Response, SourceError> {
        let mut candidates: Vec<String> = self.conns.keys().cloned().collect();
        candidates.extend(self.bootstrap.iter().cloned());
        candidates.dedup();
        let mut last_err = SourceError::Other("no bootstrap servers".to_owned());
        for addr in candidates {
            let r = match self.conn(&addr).await {
                Ok(c) => {
                    c.send_built(min_version, i16::MAX, Duration::ZERO, &build)
                        .await
                }
                Err(e) => Err(e),
            };
            match r {
                Ok((_, resp)) => return Ok(resp),
                Err(e) => {
                    self.drop_on_fatal(&addr, &e);
                    last_err = e.into();
                }
            }
        }
        Err(last_err)
    }

    async fn send_to<R: kafka_protocol::protocol::Request>(
        &mut self,
        addr: &str,
        req: &R,
        min_version: i16,
    ) -> Result<R::Response, SourceError> {
        let r = match self.conn(addr).await {
            Ok(c) => {
                c.send_with(req, min_version, i16::MAX, Duration::ZERO)
                    .await
            }
            Err(e) => Err(e),
        };
        match r {
            Ok((_, resp)) => Ok(resp),
            Err(e) => {
                self.drop_on_fatal(addr, &e);
                Err(e.into())
            }
        }
    }

    /// Source cluster id and every non-internal topic accepted by `wanted`, with id, partition
    /// count and explicitly set (dynamic topic) configs: the metadata-sync snapshot. Fails as
    /// a whole if any part fails, so a partial view never looks like deleted topics.
    pub async fn topics_snapshot(
        &mut self,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<(String, Vec<kmirror_control::mirror::SourceTopic>), SourceError> {
        let md = self.send_any(&build::metadata(None), 10).await?;
        let cluster_id = md
            .cluster_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default();
        let mut topics = Vec::new();
        for t in &md.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                continue;
            };
            if t.is_internal || !wanted(&name) {
                continue;
            }
            if t.error_code != code::NONE {
                return Err(SourceError::Other(format!(
                    "metadata of {name}: {}",
                    code::name(t.error_code)
                )));
            }
            topics.push(kmirror_control::mirror::SourceTopic {
                name,
                topic_id: t.topic_id,
                partitions: t.partitions.len() as i32,
                configs: Default::default(),
            });
        }
        if !topics.is_empty() {
            let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
            let dc = self
                .send_any(&build::describe_topic_configs(&names), 1)
                .await?;
            for r in &dc.results {
                if r.error_code != code::NONE {
                    return Err(SourceError::Other(format!(
                        "DescribeConfigs of {}: {}",
                        r.resource_name,
                        code::name(r.error_code)
                    )));
                }
                let Some(t) = topics.iter_mut().find(|t| *t.name == *r.resource_name) else {
                    continue;
                };
                for c in &r.configs {
                    // 1 = DYNAMIC_TOPIC_CONFIG: set on the topic, not a default. The keys that
                    // decide what the source keeps are copied with their effective value even
                    // when inherited from the source broker's defaults, so the mirror keeps
                    // at least as much as the source.
                    let decides_retention = matches!(
                        &*c.name,
                        "cleanup.policy" | "retention.ms" | "retention.bytes"
                    );
                    if (c.config_source == 1 || decides_retention) && !c.is_sensitive {
                        if let Some(v) = &c.value {
                            t.configs.insert(c.name.to_string(), v.to_string());
                        }
                    }
                }
            }
        }
        Ok((cluster_id, topics))
    }

    /// Looks one mirrored topic up directly, by name and then by id, to tell a deleted topic
    /// from one the all-topics answer left out (hidden by an ACL, a partial answer).
    pub async fn lookup_topic(
        &mut self,
        name: &str,
        id: Uuid,
    ) -> kmirror_control::mirror::SourceLookup {
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        use kafka_protocol::messages::MetadataRequest;
        use kmirror_control::mirror::SourceLookup as L;
        let by_name = match self
            .send_any(&build::metadata(Some(&[name.to_owned()])), 10)
            .await
        {
            Ok(md) => md,
            Err(e) => return L::Failed(e.to_string()),
        };
        match by_name.topics.first().map(|t| (t.error_code, t.topic_id)) {
            Some((code::NONE, tid)) => return L::Present(tid),
            Some((code::TOPIC_AUTHORIZATION_FAILED, _)) => {
                return L::Unauthorized(format!("{name}: TOPIC_AUTHORIZATION_FAILED"))
            }
            Some((code::UNKNOWN_TOPIC_OR_PARTITION, _)) => {}
            Some((c, _)) => return L::Failed(format!("metadata of {name}: {}", code::name(c))),
            None => return L::Failed(format!("metadata of {name}: empty answer")),
        }
        // Topic ids in Metadata requests: v12+.
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default()
                .with_topic_id(id)
                .with_name(None)]))
            .with_allow_auto_topic_creation(false);
        match self.send_any(&req, 12).await {
            Ok(md) => match md.topics.first().map(|t| t.error_code) {
                Some(code::UNKNOWN_TOPIC_ID) => L::Gone,
                Some(code::NONE) => L::Present(id),
                Some(code::TOPIC_AUTHORIZATION_FAILED) => {
                    L::Unauthorized(format!("topic id {id}: TOPIC_AUTHORIZATION_FAILED"))
                }
                Some(c) => L::Failed(format!("metadata of topic id {id}: {}", code::name(c))),
                None => L::Failed(format!("metadata of topic id {id}: empty answer")),
            },
            Err(e) => L::Failed(e.to_string()),
        }
    }

    /// Every ACL binding on the source, or None when the source has no authorizer
    /// (SECURITY_DISABLED): then the ACL sync must leave the destination alone.
    pub async fn acls(
        &mut self,
    ) -> Result<Option<Vec<kmirror_control::mirror::AclBinding>>, SourceError> {
        use kafka_protocol::messages::DescribeAclsRequest;
        // 1 = ANY for resource type, pattern type, operation and permission type.
        // kafka-protocol defaults the nullable filters to "" (which matches nothing): null
        // them so every binding is listed.
        let req = DescribeAclsRequest::default()
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1);
        let r = self.send_any(&req, 1).await?;
        match r.error_code {
            code::NONE => {}
            code::SECURITY_DISABLED => return Ok(None),
            c => {
                return Err(SourceError::Other(format!(
                    "DescribeAcls: {}",
                    code::name(c)
                )))
            }
        }
        let mut out = Vec::new();
        for res in &r.resources {
            for a in &res.acls {
                out.push(kmirror_control::mirror::AclBinding {
                    resource_type: res.resource_type,
                    resource_name: res.resource_name.to_string(),
                    pattern_type: res.pattern_type,
                    principal: a.principal.to_string(),
                    host: a.host.to_string(),
                    operation: a.operation,
                    permission_type: a.permission_type,
                });
            }
        }
        Ok(Some(out))
    }

    /// Every client quota on the source (DescribeClientQuotas with no filter component), or
    /// None when the source does not serve the API or does not let the mirror's principal
    /// read quotas (DescribeConfigs on the cluster, which seed 000's grants do not include):
    /// then the quota sync leaves the destination alone instead of failing every round.
    pub async fn client_quotas(
        &mut self,
    ) -> Result<
        Option<BTreeMap<kmirror_control::quota::Entity, kmirror_control::quota::Values>>,
        SourceError,
    > {
        use kafka_protocol::messages::DescribeClientQuotasRequest;
        let req = DescribeClientQuotasRequest::default().with_strict(false);
        let r = match self.send_any(&req, 0).await {
            Ok(r) => r,
            Err(SourceError::Client(ClientError::UnsupportedApi { .. })) => return Ok(None),
            Err(e) => return Err(e),
        };
        match r.error_code {
            code::NONE => {}
            code::UNSUPPORTED_VERSION => return Ok(None),
            code::CLUSTER_AUTHORIZATION_FAILED => {
                tracing::debug!("source refuses DescribeClientQuotas: client quotas not synced");
                return Ok(None);
            }
            c => {
                return Err(SourceError::Other(format!(
                    "DescribeClientQuotas: {}",
                    code::name(c)
                )))
            }
        }
        let mut out = BTreeMap::new();
        for e in r.entries.iter().flatten() {
            let entity: kmirror_control::quota::Entity = e
                .entity
                .iter()
                .map(|d| {
                    (
                        d.entity_type.to_string(),
                        d.entity_name.as_ref().map(|n| n.to_string()),
                    )
                })
                .collect();
            let values: kmirror_control::quota::Values = e
                .values
                .iter()
                .map(|v| (v.key.to_string(), v.value))
                .collect();
            out.insert(entity, values);
        }
        Ok(Some(out))
    }

    /// Committed offsets of every consumer group accepted by `wanted` (classic groups and
    /// any other type the source lists), asked of each group's coordinator.
    pub async fn group_offsets(
        &mut self,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<BTreeMap<String, BTreeMap<TopicPartition, i64>>, SourceError> {
        let mut groups = std::collections::BTreeSet::new();
        for addr in &self.broker_addrs().await? {
            let lg = self.send_to(addr, &build::list_groups(), 0).await?;
            if lg.error_code != code::NONE {
                return Err(SourceError::Other(format!(
                    "ListGroups on {addr}: {}",
                    code::name(lg.error_code)
                )));
            }
            for g in &lg.groups {
                // Share groups have no committed offsets (see `share_group_offsets`).
                if wanted(&g.group_id.0) && g.group_type.as_str() != "share" {
                    groups.insert(g.group_id.0.to_string());
                }
            }
        }
        let mut out = BTreeMap::new();
        for g in groups {
            let Some(addr) = self.group_coordinator(&g).await? else {
                continue;
            };
            let of = {
                let r = match self.conn(&addr).await {
                    Ok(conn) => {
                        conn.send_built(1, i16::MAX, Duration::ZERO, |v| build::offset_fetch(&g, v))
                            .await
                    }
                    Err(e) => Err(e),
                };
                match r {
                    Ok((_, resp)) => resp,
                    Err(e) => {
                        self.drop_on_fatal(&addr, &e);
                        return Err(e.into());
                    }
                }
            };
            let mut offsets = BTreeMap::new();
            if let Some(grp) = of.groups.first() {
                for t in &grp.topics {
                    for p in &t.partitions {
                        if p.error_code == code::NONE && p.committed_offset >= 0 {
                            offsets.insert(
                                TopicPartition::new(t.name.0.to_string(), p.partition_index),
                                p.committed_offset,
                            );
                        }
                    }
                }
            } else {
                for t in &of.topics {
                    for p in &t.partitions {
                        if p.error_code == code::NONE && p.committed_offset >= 0 {
                            offsets.insert(
                                TopicPartition::new(t.name.0.to_string(), p.partition_index),
                                p.committed_offset,
                            );
                        }
                    }
                }
            }
            out.insert(g, offsets);
        }
        Ok(out)
    }
}

impl<T: Transport> KafkaSource<T> {
    /// Every broker's address, from Metadata.
    async fn broker_addrs(&mut self) -> Result<Vec<String>, SourceError> {
        let md = self.send_any(&build::metadata(Some(&[])), 4).await?;
        Ok(md
            .brokers
            .iter()
            .map(|b| format!("{}:{}", b.host, b.port))
            .collect())
    }

    /// The address of `group`'s coordinator; None while it is moving (the group is skipped
    /// this round).
    async fn group_coordinator(&mut self, group: &str) -> Result<Option<String>, SourceError> {
        let fc = self
            .send_any_built(0, |v| build::find_group_coordinator(group, v))
            .await?;
        let (c, host, port) = match fc.coordinators.first() {
            Some(c) => (c.error_code, c.host.to_string(), c.port),
            None => (fc.error_code, fc.host.to_string(), fc.port),
        };
        Ok((c == code::NONE).then(|| format!("{host}:{port}")))
    }

    /// Every share group's start offset (KIP-932's share-partition start offset) per
    /// initialized partition, for the groups `wanted` keeps: ListGroups of type share on
    /// every broker, then DescribeShareGroupOffsets at each group's coordinator. `None` when
    /// the source has no share groups to offer (older than Kafka 4.1, or `share.version`
    /// not enabled). A group whose coordinator is moving, or that is gone, is skipped this
    /// round; partitions without a start offset yet (-1) are left out.
    pub async fn share_group_offsets(
        &mut self,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Option<BTreeMap<String, BTreeMap<TopicPartition, i64>>>, SourceError> {
        let unsupported = |c: i16| c == code::UNSUPPORTED_VERSION || c == code::INVALID_REQUEST;
        let mut groups = std::collections::BTreeSet::new();
        for addr in &self.broker_addrs().await? {
            let lg = match self.send_to(addr, &build::list_share_groups(), 5).await {
                Err(SourceError::Client(ClientError::UnsupportedApi { .. })) => return Ok(None),
                r => r?,
            };
            if unsupported(lg.error_code) {
                return Ok(None);
            }
            if lg.error_code != code::NONE {
                return Err(SourceError::Other(format!(
                    "ListGroups (share) on {addr}: {}",
                    code::name(lg.error_code)
                )));
            }
            groups.extend(
                lg.groups
                    .iter()
                    .filter(|g| g.group_type.as_str() == "share" && wanted(&g.group_id.0))
                    .map(|g| g.group_id.0.to_string()),
            );
        }
        let mut out = BTreeMap::new();
        for g in groups {
            let Some(addr) = self.group_coordinator(&g).await? else {
                continue;
            };
            let r = match self.conn(&addr).await {
                Ok(conn) => {
                    conn.send_with(
                        &build::describe_share_group_offsets(&g),
                        0,
                        0,
                        Duration::ZERO,
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            let resp = match r {
                Ok((_, resp)) => resp,
                Err(ClientError::UnsupportedApi { .. }) => return Ok(None),
                Err(e) => {
                    self.drop_on_fatal(&addr, &e);
                    return Err(e.into());
                }
            };
            let Some(grp) = resp.groups.first() else {
                continue;
            };
            if unsupported(grp.error_code) {
                return Ok(None);
            }
            if grp.error_code != code::NONE {
                continue;
            }
            let starts: BTreeMap<TopicPartition, i64> = grp
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .filter(|p| p.error_code == code::NONE && p.start_offset >= 0)
                        .map(|p| {
                            (
                                TopicPartition::new(t.topic_name.0.to_string(), p.partition_index),
                                p.start_offset,
                            )
                        })
                })
                .collect();
            out.insert(g, starts);
        }
        Ok(Some(out))
    }

    /// Metadata for `topics` from any reachable broker (shared fetchers cache it per topic).
    pub(crate) async fn metadata(
        &mut self,
        topics: &[String],
    ) -> Result<kafka_protocol::messages::MetadataResponse, SourceError> {
        self.send_any(&build::metadata(Some(topics)), 10).await
    }
}

/// The leader of `topic`-`partition` in a Metadata response (errors as [`Source::leader`]).
pub(crate) fn leader_from_metadata(
    resp: &kafka_protocol::messages::MetadataResponse,
    topic: &str,
    partition: i32,
) -> Result<SourceLeader, SourceError> {
    let Some(t) = resp
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic))
    else {
        return Err(SourceError::Other(format!(
            "topic {topic} missing from metadata"
        )));
    };
    if t.error_code == code::TOPIC_AUTHORIZATION_FAILED {
        return Err(SourceError::Denied(format!(
            "metadata for {topic}: TOPIC_AUTHORIZATION_FAILED (the mirror's principal \
             lacks Describe on the source topic)"
        )));
    }
    if t.error_code != code::NONE {
        return Err(SourceError::Other(format!(
            "metadata for {topic}: {}",
            code::name(t.error_code)
        )));
    }
    let Some(p) = t.partitions.iter().find(|p| p.partition_index == partition) else {
        return Err(SourceError::Other(format!(
            "{topic}-{partition} missing on source"
        )));
    };
    if p.error_code != code::NONE || p.leader_id.0 < 0 {
        return Err(SourceError::Other(format!(
            "{topic}-{partition} has no leader ({})",
            code::name(p.error_code)
        )));
    }
    let Some(b) = resp.brokers.iter().find(|b| b.node_id == p.leader_id) else {
        return Err(SourceError::Other(format!(
            "leader {} of {topic}-{partition} not in broker list",
            p.leader_id.0
        )));
    };
    Ok(SourceLeader {
        broker_id: p.leader_id.0,
        addr: format!("{}:{}", b.host, b.port),
        leader_epoch: LeaderEpoch(p.leader_epoch),
        topic_id: t.topic_id,
    })
}

/// Deterministic client id of a mirror fetcher: broker id, fetcher id and mirror name. The
/// fetcher id is the core index (`mirror_manager`): one id per node, core and mirror.
pub fn fetcher_client_id(node_id: i32, fetcher_id: u32, mirror: &str) -> String {
    format!("kmirror-{node_id}-fetcher-{fetcher_id}-{mirror}")
}

impl<T: Transport> Source for KafkaSource<T> {
    async fn leader(&mut self, topic: &str, partition: i32) -> Result<SourceLeader, SourceError> {
        let mut last_err = SourceError::Other("no bootstrap servers".to_owned());
        let mut candidates: Vec<String> = self.conns.keys().cloned().collect();
        candidates.extend(self.bootstrap.iter().cloned());
        candidates.dedup();
        for addr in candidates {
            let req = build::metadata(Some(&[topic.to_owned()]));
            let resp = match self.conn(&addr).await {
                Ok(c) => c.send_with(&req, 10, i16::MAX, Duration::ZERO).await,
                Err(e) => Err(e),
            };
            let resp = match resp {
                Ok((_, r)) => r,
                Err(e) => {
                    self.drop_on_fatal(&addr, &e);
                    last_err = e.into();
                    continue;
                }
            };
            return leader_from_metadata(&resp, topic, partition);
        }
        Err(last_err)
    }

    async fn fetch(
        &mut self,
        leader: &SourceLeader,
        req: &build::FetchPart,
        cfg: &FetcherConfig,
    ) -> Result<FetchOutcome, SourceError> {
        let fetch = build::consumer_fetch(
            std::slice::from_ref(req),
            cfg.max_wait_ms,
            cfg.min_bytes,
            cfg.max_bytes,
            "",
        );
        let extra = Duration::from_millis(cfg.max_wait_ms.max(0) as u64);
        let addr = leader.addr.clone();
        let resp = match self.conn(&addr).await {
            // Topic ids in Fetch need v13+.
            Ok(c) => c.send_with(&fetch, 13, i16::MAX, extra).await,
            Err(e) => Err(e),
        };
        let (_, resp) = match resp {
            Ok(r) => r,
            Err(e) => {
                self.drop_on_fatal(&addr, &e);
                return Err(e.into());
            }
        };
        if resp.error_code != code::NONE {
            return Ok(FetchOutcome::refused(ErrorCode::new(resp.error_code)));
        }
        let part = resp
            .responses
            .iter()
            .filter(|t| t.topic_id == req.topic_id || &*t.topic.0 == req.topic.as_str())
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == req.partition)
            .ok_or_else(|| SourceError::Other("partition missing from fetch response".into()))?;
        Ok(FetchOutcome::from_wire(part))
    }

    async fn list_offset(
        &mut self,
        leader: &SourceLeader,
        topic: &str,
        partition: i32,
        current_leader_epoch: LeaderEpoch,
        timestamp: i64,
    ) -> Result<PartitionAnswer<Offset>, SourceError> {
        let addr = leader.addr.clone();
        let r = match self.conn(&addr).await {
            Ok(c) => {
                list_offset_over(c, topic, partition, current_leader_epoch, timestamp, true).await
            }
            Err(e) => Err(e.into()),
        };
        self.drop_on_fatal_source(&addr, r)
    }

    async fn last_mirrored_epoch(
        &mut self,
        mirror: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<LeaderEpoch>, SourceError> {
        let mut last_err = SourceError::Other("no bootstrap servers".to_owned());
        for addr in self.bootstrap.clone() {
            let conn = match self.conn(&addr).await {
                Ok(c) => c,
                Err(e) => {
                    self.drop_on_fatal(&addr, &e);
                    last_err = e.into();
                    continue;
                }
            };
            let r = lme_over(conn, mirror, topic, partition).await;
            return self.drop_on_fatal_source(&addr, r);
        }
        Err(last_err)
    }

    async fn end_offset_for_epoch(
        &mut self,
        leader: &SourceLeader,
        topic: &str,
        partition: i32,
        current_leader_epoch: LeaderEpoch,
        epoch: LeaderEpoch,
    ) -> Result<PartitionAnswer<Option<EpochEnd>>, SourceError> {
        let addr = leader.addr.clone();
        let r = match self.conn(&addr).await {
            Ok(c) => epoch_end_over(c, topic, partition, current_leader_epoch, epoch).await,
            Err(e) => Err(e.into()),
        };
        self.drop_on_fatal_source(&addr, r)
    }

    async fn sleep(&mut self, d: Duration) {
        T::sleep(d).await
    }

    fn now_ms(&self) -> i64 {
        now_ms()
    }
}

/// ListOffsets of one partition on `c`.
async fn list_offset_over<T: Transport>(
    c: &mut Connection<T>,
    topic: &str,
    partition: i32,
    current_leader_epoch: LeaderEpoch,
    timestamp: i64,
    read_committed: bool,
) -> Result<PartitionAnswer<Offset>, SourceError> {
    let req = build::list_offsets(
        topic,
        partition,
        timestamp,
        current_leader_epoch,
        read_committed,
    );
    let (_, r) = c.send_with(&req, 4, i16::MAX, Duration::ZERO).await?;
    let p = r
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| SourceError::Other("partition missing from ListOffsets".into()))?;
    Ok(ErrorCode::new(p.error_code).ok().map(|()| Offset(p.offset)))
}

/// LastMirroredEpochs of one partition on `c`; None when `c` is not a kmirror (an Apache Kafka
/// source keeps no LME) or has no record.
async fn lme_over<T: Transport>(
    c: &mut Connection<T>,
    mirror: &str,
    topic: &str,
    partition: i32,
) -> Result<Option<LeaderEpoch>, SourceError> {
    use crate::api::{LastMirroredEpochsRequest, PartitionIndex, TopicPartitionsQuery};
    if !c.versions().supports_mirroring() {
        return Ok(None);
    }
    let r = crate::client::send_mirror(
        c,
        &LastMirroredEpochsRequest {
            mirror_name: mirror.to_owned(),
            topics: vec![TopicPartitionsQuery {
                name: topic.to_owned(),
                partitions: vec![PartitionIndex {
                    partition_index: partition,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        },
    )
    .await?;
    if r.error_code != code::NONE {
        return Err(SourceError::Other(format!(
            "LastMirroredEpochs: {}",
            code::name(r.error_code)
        )));
    }
    Ok(r.topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition && p.error_code == code::NONE)
        .filter(|p| p.last_mirrored_epoch >= 0)
        .map(|p| LeaderEpoch(p.last_mirrored_epoch)))
}

/// OffsetsForLeaderEpoch (consumer) of one partition on `c`; None when `c` holds no epoch at
/// or below `epoch` (Kafka answers -1, -1).
async fn epoch_end_over<T: Transport>(
    c: &mut Connection<T>,
    topic: &str,
    partition: i32,
    current_leader_epoch: LeaderEpoch,
    epoch: LeaderEpoch,
) -> Result<PartitionAnswer<Option<EpochEnd>>, SourceError> {
    let req = build::offsets_for_leader_epoch(topic, partition, current_leader_epoch, epoch);
    // Consumer (replica id -1) OffsetsForLeaderEpoch needs v3+.
    let (_, r) = c.send_with(&req, 3, i16::MAX, Duration::ZERO).await?;
    let p = r
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition == partition)
        .ok_or_else(|| SourceError::Other("partition missing from OffsetsForLeaderEpoch".into()))?;
    Ok(ErrorCode::new(p.error_code).ok().map(|()| {
        (p.leader_epoch >= 0 && p.end_offset >= 0).then_some(EpochEnd {
            epoch: LeaderEpoch(p.leader_epoch),
            end_offset: Offset(p.end_offset),
        })
    }))
}

/// A destination partition seen over the wire (read-only): what a dry run needs.
struct RemotePartitionView<'a> {
    conn: RefCell<&'a mut BlockingConnection>,
    topic: String,
    partition: i32,
    start: Offset,
    end: Offset,
}

impl LocalPartition for RemotePartitionView<'_> {
    async fn log_start_offset(&self) -> Result<Offset, LocalError> {
        Ok(self.start)
    }
    async fn log_end_offset(&self) -> Result<Offset, LocalError> {
        Ok(self.end)
    }
    async fn leader_epoch(&self) -> Result<LeaderEpoch, LocalError> {
        Err(LocalError::Other("read-only view".into()))
    }
    async fn bump_leader_epoch_to(&mut self, _epoch: LeaderEpoch) -> Result<(), LocalError> {
        Err(LocalError::Other("read-only view".into()))
    }
    async fn append_mirror(&mut self, _batches: Bytes) -> Result<Offset, LocalError> {
        Err(LocalError::Other("read-only view".into()))
    }
    async fn truncate_fully_and_start_at(&mut self, _offset: Offset) -> Result<(), LocalError> {
        Err(LocalError::Other("read-only view".into()))
    }
    async fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<EpochEnd> {
        let mut c = self.conn.borrow_mut();
        // A blocking connection's futures complete in one poll; no borrow outlives this call.
        let r = futures_lite::future::block_on(epoch_end_over(
            c.get_mut(),
            &self.topic,
            self.partition,
            LeaderEpoch::UNKNOWN,
            epoch,
        ));
        r.ok().and_then(|answer| answer.ok()).flatten()
    }
    async fn truncate_to(&mut self, _offset: Offset) -> Result<(), LocalError> {
        Err(LocalError::Other("read-only view".into()))
    }
}

/// One partition's dry-run result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRunRow {
    pub topic: String,
    pub partition: i32,
    pub plan: PreparePlan,
}

/// `kmirror mirror add --dry-run`: for each partition of `topics` that exists on the
/// destination, what adding it to `mirror` would truncate, computed over the wire exactly as
/// the PREPARING step will (the destination's own LME, the source's LastMirroredEpochs and
/// OffsetsForLeaderEpoch on both sides, through the same [`KafkaSource`] code). Changes
/// nothing anywhere.
pub fn dry_run_plan(
    dest: &mut BlockingConnection,
    source_bootstrap: &str,
    source_security: &ClientSecurity,
    mirror: &str,
    topics: &[String],
    timeout: Duration,
) -> Result<Vec<DryRunRow>, SourceError> {
    use futures_lite::future::block_on;
    let mut source = BlockingSource::over(source_bootstrap, "kmirror-cli-dry-run".into(), timeout)
        .with_security(Ok(source_security.clone()));
    let (_, md) = dest.send_with(&build::metadata(Some(topics)), 10, i16::MAX)?;
    let mut rows = Vec::new();
    for t in topics {
        let Some(mt) = md
            .topics
            .iter()
            .find(|x| x.name.as_ref().map(|n| n.0.as_str()) == Some(t.as_str()))
            .filter(|x| x.error_code == code::NONE)
        else {
            continue; // not on the destination yet: it will be created empty
        };
        let mut parts: Vec<i32> = mt.partitions.iter().map(|p| p.partition_index).collect();
        parts.sort_unstable();
        for p in parts {
            let tp = TopicPartition::new(t.clone(), p);
            let local_lme = block_on(lme_over(dest.get_mut(), mirror, t, p))?;
            let mut bound = |ts| -> Result<Offset, SourceError> {
                block_on(list_offset_over(
                    dest.get_mut(),
                    t,
                    p,
                    LeaderEpoch::UNKNOWN,
                    ts,
                    false,
                ))?
                .map_err(|c| {
                    SourceError::Other(format!(
                        "ListOffsets {tp} on the destination: {}",
                        code::name(c.code())
                    ))
                })
            };
            let start = bound(build::EARLIEST)?;
            let end = bound(build::LATEST)?;
            let view = RemotePartitionView {
                conn: RefCell::new(&mut *dest),
                topic: t.clone(),
                partition: p,
                start,
                end,
            };
            let plan = block_on(plan_preparation(&mut source, &view, mirror, &tp, local_lme))?;
            rows.push(DryRunRow {
                topic: t.clone(),
                partition: p,
                plan,
            });
        }
    }
    Ok(rows)
}

/// Wall-clock milliseconds.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use futures_lite::future::block_on;
    use std::collections::VecDeque;

    /// A minimal v2 batch header (61 bytes) with `count` offsets, epoch and magic.
    fn batch(base: i64, count: i32, epoch: i32, magic: i8) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i64(base);
        b.put_i32(61 - 12);
        b.put_i32(epoch);
        b.put_i8(magic);
        b.put_u32(0); // crc (the fake local checks magic instead)
        b.put_i16(0);
        b.put_i32(count - 1);
        b.put_bytes(0, RECORDS_COUNT_POS - b.len());
        b.put_i32(count);
        b.freeze()
    }

    fn concat(parts: &[Bytes]) -> Bytes {
        let mut b = BytesMut::new();
        for p in parts {
            b.extend_from_slice(p);
        }
        b.freeze()
    }

    #[derive(Default)]
    struct FakeLocal {
        start: i64,
        end: i64,
        epoch: i32,
        batches: Vec<(i64, Bytes)>,
        truncations: Vec<i64>,
    }

    impl LocalPartition for FakeLocal {
        async fn log_start_offset(&self) -> Result<Offset, LocalError> {
            Ok(Offset(self.start))
        }
        async fn log_end_offset(&self) -> Result<Offset, LocalError> {
            Ok(Offset(self.end))
        }
        async fn leader_epoch(&self) -> Result<LeaderEpoch, LocalError> {
            Ok(LeaderEpoch(self.epoch))
        }
        async fn bump_leader_epoch_to(&mut self, epoch: LeaderEpoch) -> Result<(), LocalError> {
            let epoch = epoch.get();
            assert!(epoch > self.epoch, "bump must only raise the epoch");
            self.epoch = epoch;
            Ok(())
        }
        async fn append_mirror(&mut self, batches: Bytes) -> Result<Offset, LocalError> {
            let mut pos = 0;
            let mut staged = Vec::new();
            let mut end = self.end;
            while pos < batches.len() {
                let b = batches.slice(pos..pos + 61);
                let base = i64::from_be_bytes(b[0..8].try_into().unwrap());
                if b[16] != 2 {
                    return Err(LocalError::Corrupt(format!("bad magic at {base}")));
                }
                if base < end {
                    return Err(LocalError::NonMonotonic(format!("{base} < {end}")));
                }
                let epoch = i32::from_be_bytes(b[12..16].try_into().unwrap());
                assert!(
                    self.epoch >= epoch,
                    "local epoch {} below batch epoch {epoch}",
                    self.epoch
                );
                let delta = i32::from_be_bytes(b[23..27].try_into().unwrap());
                end = base + i64::from(delta) + 1;
                staged.push((base, b));
                pos += 61;
            }
            self.batches.extend(staged);
            self.end = end;
            Ok(Offset(end - 1))
        }
        async fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LocalError> {
            let offset = offset.get();
            self.batches.clear();
            self.start = offset;
            self.end = offset;
            self.truncations.push(offset);
            Ok(())
        }
        async fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<EpochEnd> {
            epoch_end(
                self.batches.iter().map(|(base, b)| {
                    let e = i32::from_be_bytes(b[12..16].try_into().unwrap());
                    let delta = i32::from_be_bytes(b[23..27].try_into().unwrap());
                    (*base, *base + i64::from(delta), e)
                }),
                epoch.get(),
                self.end,
            )
            .map(|(e, o)| EpochEnd {
                epoch: LeaderEpoch(e),
                end_offset: Offset(o),
            })
        }
        async fn truncate_to(&mut self, offset: Offset) -> Result<(), LocalError> {
            let offset = offset.get();
            assert!(
                offset == self.end || self.batches.iter().any(|(b, _)| *b == offset),
                "truncation at {offset} is not a batch boundary"
            );
            self.batches.retain(|(base, _)| *base < offset);
            self.end = offset;
            self.truncations.push(offset);
            Ok(())
        }
    }

    /// Kafka's epoch-end semantics over (base, last, epoch) batches: the largest epoch <=
    /// `epoch` and the first offset of the next higher epoch (or the log end).
    fn epoch_end(
        batches: impl Iterator<Item = (i64, i64, i32)>,
        epoch: i32,
        log_end: i64,
    ) -> Option<(i32, i64)> {
        let v: Vec<(i64, i64, i32)> = batches.collect();
        let found = v.iter().filter(|b| b.2 <= epoch).map(|b| b.2).max()?;
        let end = v
            .iter()
            .find(|b| b.2 > found)
            .map(|b| b.0)
            .unwrap_or(log_end);
        Some((found, end))
    }

    /// Source partition: batches by offset, a leader epoch, a log start, scripted errors.
    struct FakeSource {
        log: Vec<(i64, i64, Bytes)>, // (base, last, bytes)
        log_start: i64,
        leader_epoch: i32,
        leader_id: i32,
        topic_id: Uuid,
        scripted: VecDeque<FetchOutcome>,
        metadata_calls: u32,
        fetches: Vec<(String, i64, i32)>,
        slept: Vec<Duration>,
        now: i64,
        /// When set, Fetch returns only a prefix of this many bytes (cut mid-batch).
        cut_to: Option<usize>,
        /// LastMirroredEpochs answer (None = no record / not a kmirror).
        lme: Option<i32>,
    }

    impl FakeSource {
        fn new(batches: &[(i64, i32, i32)]) -> Self {
            let log = batches
                .iter()
                .map(|&(base, n, e)| (base, base + i64::from(n) - 1, batch(base, n, e, 2)))
                .collect();
            FakeSource {
                log,
                log_start: batches.first().map_or(0, |b| b.0),
                leader_epoch: 5,
                leader_id: 1,
                topic_id: Uuid::from_bytes([9; 16]),
                scripted: VecDeque::new(),
                metadata_calls: 0,
                fetches: Vec::new(),
                slept: Vec::new(),
                now: 1_000,
                cut_to: None,
                lme: None,
            }
        }
        fn end(&self) -> i64 {
            self.log.last().map_or(self.log_start, |b| b.1 + 1)
        }
    }

    impl Source for FakeSource {
        async fn leader(&mut self, _t: &str, _p: i32) -> Result<SourceLeader, SourceError> {
            self.metadata_calls += 1;
            Ok(SourceLeader {
                broker_id: self.leader_id,
                addr: format!("b{}:9092", self.leader_id),
                leader_epoch: LeaderEpoch(self.leader_epoch),
                topic_id: self.topic_id,
            })
        }
        async fn fetch(
            &mut self,
            leader: &SourceLeader,
            req: &build::FetchPart,
            _cfg: &FetcherConfig,
        ) -> Result<FetchOutcome, SourceError> {
            let (fetch_offset, current_leader_epoch) =
                (req.fetch_offset.get(), req.current_leader_epoch.get());
            self.fetches
                .push((leader.addr.clone(), fetch_offset, current_leader_epoch));
            if let Some(o) = self.scripted.pop_front() {
                return Ok(o);
            }
            let base = FetchedRecords {
                high_watermark: Offset(self.end()),
                last_stable_offset: Some(Offset(self.end())),
                log_start_offset: Some(Offset(self.log_start)),
                ..Default::default()
            };
            if leader.broker_id != self.leader_id {
                return Ok(refused(code::NOT_LEADER_OR_FOLLOWER));
            }
            if current_leader_epoch >= 0 && current_leader_epoch < self.leader_epoch {
                return Ok(FetchOutcome::Refused {
                    error: ErrorCode::new(code::FENCED_LEADER_EPOCH),
                    current_leader: Some(CurrentLeader {
                        leader_id: NodeId(self.leader_id),
                        leader_epoch: LeaderEpoch(self.leader_epoch),
                    }),
                });
            }
            if fetch_offset < self.log_start || fetch_offset > self.end() {
                return Ok(refused(code::OFFSET_OUT_OF_RANGE));
            }
            let parts: Vec<Bytes> = self
                .log
                .iter()
                .filter(|(_, last, _)| *last >= fetch_offset)
                .map(|(_, _, b)| b.clone())
                .collect();
            let mut records = concat(&parts);
            if let Some(n) = self.cut_to {
                records = records.slice(..n.min(records.len()));
            }
            Ok(FetchOutcome::Records(FetchedRecords { records, ..base }))
        }
        async fn list_offset(
            &mut self,
            _l: &SourceLeader,
            _t: &str,
            _p: i32,
            _e: LeaderEpoch,
            ts: i64,
        ) -> Result<PartitionAnswer<Offset>, SourceError> {
            Ok(Ok(Offset(if ts == build::EARLIEST {
                self.log_start
            } else {
                self.end()
            })))
        }
        async fn last_mirrored_epoch(
            &mut self,
            _m: &str,
            _t: &str,
            _p: i32,
        ) -> Result<Option<LeaderEpoch>, SourceError> {
            Ok(self.lme.map(LeaderEpoch))
        }
        async fn end_offset_for_epoch(
            &mut self,
            _l: &SourceLeader,
            _t: &str,
            _p: i32,
            _c: LeaderEpoch,
            epoch: LeaderEpoch,
        ) -> Result<PartitionAnswer<Option<EpochEnd>>, SourceError> {
            let epoch = epoch.get();
            let end = self.end();
            Ok(Ok(epoch_end(
                self.log
                    .iter()
                    .map(|(b, l, x)| (*b, *l, i32::from_be_bytes(x[12..16].try_into().unwrap()))),
                epoch,
                end,
            )
            .map(|(e, o)| EpochEnd {
                epoch: LeaderEpoch(e),
                end_offset: Offset(o),
            })))
        }
        async fn sleep(&mut self, d: Duration) {
            self.slept.push(d);
            self.now += d.as_millis() as i64;
        }
        fn now_ms(&self) -> i64 {
            self.now
        }
    }

    #[derive(Default)]
    struct Events(Vec<FetchEvent>);
    impl FetchObserver for Events {
        fn on_event(&mut self, _tp: &TopicPartition, e: FetchEvent) {
            self.0.push(e);
        }
    }
    impl Events {
        fn failed(&self) -> usize {
            self.0
                .iter()
                .filter(|e| matches!(e, FetchEvent::Failed { .. }))
                .count()
        }
    }

    /// A partition answer refused with `code`, no leader hint.
    fn refused(code: i16) -> FetchOutcome {
        FetchOutcome::refused(ErrorCode::new(code))
    }

    fn fetcher(topic_id: Uuid) -> PartitionFetcher {
        PartitionFetcher::new(
            TopicPartition::new("orders", 0),
            topic_id,
            FetcherConfig {
                errors_before_failed: 3,
                ..Default::default()
            },
        )
    }

    fn drive(
        f: &mut PartitionFetcher,
        s: &mut FakeSource,
        l: &mut FakeLocal,
        o: &mut Events,
        rounds: usize,
    ) -> Vec<Step> {
        block_on(async {
            let mut steps = Vec::new();
            for _ in 0..rounds {
                let st = f.step(s, l, o).await;
                if let Step::Backoff(d) = st {
                    s.sleep(d).await;
                }
                steps.push(st);
            }
            steps
        })
    }

    #[test]
    fn batches_land_at_source_offsets_unchanged_with_gaps() {
        // Compaction gap between 3 and 10.
        let mut s = FakeSource::new(&[(0, 3, 1), (10, 2, 2), (12, 5, 5)]);
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        drive(&mut f, &mut s, &mut l, &mut o, 2);
        let got: Vec<(i64, Bytes)> = l.batches.clone();
        let want: Vec<(i64, Bytes)> = s.log.iter().map(|(b, _, x)| (*b, x.clone())).collect();
        assert_eq!(got, want, "byte-identical batches at identical offsets");
        assert_eq!(l.end, 17);
        assert_eq!(f.status().lag(), 0);
        assert!(
            l.epoch >= s.leader_epoch,
            "destination epoch >= source epoch"
        );
    }

    #[test]
    fn unknown_epoch_is_learned_from_fenced_error_and_local_epoch_follows() {
        let mut s = FakeSource::new(&[(0, 1, 7)]);
        s.leader_epoch = 7;
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(s.fetches[0].2, 7, "epoch from metadata is sent");
        // Leader epoch moves on the source; our next fetch is fenced and learns 9.
        s.leader_epoch = 9;
        s.log.push((1, 1, batch(1, 1, 9, 2)));
        drive(&mut f, &mut s, &mut l, &mut o, 2);
        assert_eq!(f.source_epoch(), Some(LeaderEpoch(9)));
        assert_eq!(s.fetches.last().unwrap().2, 9);
        assert_eq!(l.end, 2);
        assert_eq!(l.epoch, 9);
        assert!(o
            .0
            .contains(&FetchEvent::EpochBumped { to: LeaderEpoch(9) }));
        assert_eq!(o.failed(), 0);
    }

    #[test]
    fn not_leader_refreshes_metadata_and_follows_new_leader() {
        let mut s = FakeSource::new(&[(0, 2, 1)]);
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        s.leader_id = 2;
        s.leader_epoch = 6;
        s.log.push((2, 3, batch(2, 3, 6, 2)));
        let steps = drive(&mut f, &mut s, &mut l, &mut o, 2);
        assert!(matches!(steps[0], Step::Backoff(_)));
        assert!(matches!(
            steps[1],
            Step::Appended {
                last_offset: Offset(4),
                ..
            }
        ));
        assert_eq!(s.fetches.last().unwrap().0, "b2:9092");
        assert_eq!(s.metadata_calls, 2);
        assert_eq!(l.end, 5);
    }

    #[test]
    fn source_log_start_past_our_end_truncates_fully_and_reports_gap() {
        let mut s = FakeSource::new(&[(0, 5, 1)]);
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(l.end, 5);
        // Retention on the source deletes everything and more arrives: [5, 20) never mirrored.
        s.log = vec![(20, 22, batch(20, 3, 1, 2))];
        s.log_start = 20;
        drive(&mut f, &mut s, &mut l, &mut o, 2);
        assert_eq!(l.truncations, vec![20]);
        assert_eq!(l.start, 20, "destination log start equals the source's");
        assert_eq!(l.end, 23);
        assert!(o.0.contains(&FetchEvent::SourceLogStartMoved {
            lost_from: Offset(5),
            lost_to: Offset(20)
        }));
    }

    #[test]
    fn log_start_inside_a_batch_restarts_local_log_at_batch_base() {
        let mut s = FakeSource::new(&[(0, 10, 1)]);
        s.log_start = 4; // DeleteRecords moved the start mid-batch
        let mut l = FakeLocal {
            start: 4,
            end: 4,
            ..Default::default()
        };
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(l.truncations, vec![0]);
        assert_eq!(l.batches.len(), 1);
        assert_eq!(l.end, 10);
    }

    #[test]
    fn bad_batch_fails_only_this_partition_and_recovers_after_backoff() {
        let mut s = FakeSource::new(&[(0, 2, 1)]);
        s.log[0].2 = batch(0, 2, 1, 9); // corrupt magic
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        let steps = drive(&mut f, &mut s, &mut l, &mut o, 2);
        assert!(steps.iter().all(|s| matches!(s, Step::Backoff(_))));
        assert!(o.failed() >= 1);
        assert!(f.status().failed);
        assert_eq!(l.end, 0, "nothing appended");
        // Backoff grows.
        assert!(s.slept[1] > s.slept[0]);
        // The source serves a good copy: the partition recovers.
        s.log[0].2 = batch(0, 2, 1, 2);
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(l.end, 2);
        assert!(o.0.contains(&FetchEvent::Recovered));
        assert!(!f.status().failed);
    }

    #[test]
    fn trailing_partial_batch_is_held_back() {
        let mut s = FakeSource::new(&[(0, 1, 1), (1, 1, 1)]);
        s.cut_to = Some(61 + 30);
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(l.end, 1, "only the complete first batch");
        s.cut_to = None;
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(l.end, 2);
        assert_eq!(o.failed(), 0);
    }

    #[test]
    fn re_created_source_topic_fails_the_partition() {
        let mut s = FakeSource::new(&[(0, 1, 1)]);
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let mut f = fetcher(Uuid::from_bytes([1; 16]));
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(o.failed(), 1);
        assert_eq!(l.end, 0);
    }

    #[test]
    fn destination_ahead_of_source_fails_instead_of_silently_diverging() {
        let mut s = FakeSource::new(&[(0, 3, 1)]);
        let mut l = FakeLocal {
            end: 10,
            ..Default::default()
        };
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(o.failed(), 1);
        assert!(l.truncations.is_empty());
    }

    #[test]
    fn persistent_transient_errors_eventually_fail_then_recover() {
        let mut s = FakeSource::new(&[(0, 1, 1)]);
        for _ in 0..3 {
            s.scripted.push_back(refused(code::REQUEST_TIMED_OUT));
        }
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        drive(&mut f, &mut s, &mut l, &mut o, 4);
        assert_eq!(o.failed(), 1, "third consecutive error marks FAILED once");
        assert!(o.0.contains(&FetchEvent::Recovered));
        assert_eq!(l.end, 1);
    }

    #[test]
    fn observer_counts_appended_records_bytes_and_errors_by_kind() {
        #[derive(Default)]
        struct Counting {
            records: u64,
            bytes: u64,
            errors: Vec<FetchErrorKind>,
        }
        impl FetchObserver for Counting {
            fn on_event(&mut self, _tp: &TopicPartition, _e: FetchEvent) {}
            fn on_appended(&mut self, _tp: &TopicPartition, records: u64, bytes: u64) {
                self.records += records;
                self.bytes += bytes;
            }
            fn on_fetch_error(&mut self, _tp: &TopicPartition, kind: FetchErrorKind) {
                self.errors.push(kind);
            }
        }
        let mut s = FakeSource::new(&[(0, 3, 1), (3, 4, 1)]);
        s.scripted.push_back(refused(code::NOT_LEADER_OR_FOLLOWER));
        let mut l = FakeLocal::default();
        let mut o = Counting::default();
        let mut f = fetcher(s.topic_id);
        block_on(async {
            for _ in 0..6 {
                if let Step::Backoff(d) = f.step(&mut s, &mut l, &mut o).await {
                    s.sleep(d).await;
                }
            }
        });
        assert_eq!(l.end, 7);
        assert_eq!((o.records, o.bytes), (7, 2 * 61));
        assert_eq!(o.errors, vec![FetchErrorKind::Leader]);
    }

    #[test]
    fn errors_lasting_fail_after_ms_mark_failed_before_the_error_count() {
        let mut s = FakeSource::new(&[(0, 1, 1)]);
        // Backoff 0.1 s doubling to 10 s: 8 errors span 12.7 s of sleeps, the 9th comes at
        // 22.7 s, past the 15 s limit, long before errors_before_failed (30).
        for _ in 0..9 {
            s.scripted.push_back(refused(code::REQUEST_TIMED_OUT));
        }
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let mut f = PartitionFetcher::new(
            TopicPartition::new("orders", 0),
            s.topic_id,
            FetcherConfig::default(),
        );
        drive(&mut f, &mut s, &mut l, &mut o, 8);
        assert_eq!(o.failed(), 0, "12.7 s of errors is below fail_after_ms");
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(o.failed(), 1);
        let reason = o.0.iter().find_map(|e| match e {
            FetchEvent::Failed { reason } => Some(reason.clone()),
            _ => None,
        });
        assert!(
            reason
                .as_deref()
                .is_some_and(|r| r.contains("no successful fetch for 22 s")),
            "{reason:?}"
        );
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert!(o.0.contains(&FetchEvent::Recovered));
        assert_eq!(l.end, 1);
    }

    #[test]
    fn lag_is_measured_against_the_readable_end() {
        let mut st = FetcherStatus::new();
        st.source_last_stable_offset = 100;
        st.destination_log_end_offset = 100;
        st.newest_mirrored_ts_ms = 1_000;
        st.last_caught_up_ms = 900;
        assert_eq!(st.lag(), 0, "the leader's log end has everything");
        let r = st.readable_to(80);
        assert_eq!(r.destination_log_end_offset, 80);
        assert_eq!(r.lag(), 20, "20 records not yet on the ISR: not readable");
        assert_eq!(r.lag_ms(3_000), 2_000);
        assert_eq!(
            st.readable_to(-1),
            st,
            "an unknown high watermark changes nothing"
        );
    }

    #[test]
    fn lag_ms_of_a_failed_partition_grows_from_when_it_was_last_caught_up() {
        let mut st = FetcherStatus::new();
        st.source_last_stable_offset = 10;
        st.destination_log_end_offset = 10;
        st.last_caught_up_ms = 5_000;
        assert_eq!(st.lag_ms(65_000), 0, "reachable and caught up");
        st.failed = true;
        assert_eq!(st.lag_ms(65_000), 60_000, "unreachable for a minute");
    }

    #[test]
    fn lag_ms_grows_while_behind_and_is_zero_when_caught_up() {
        let mut st = FetcherStatus::new();
        st.source_last_stable_offset = 10;
        st.destination_log_end_offset = 4;
        assert_eq!(st.lag(), 6);
        assert_eq!(st.lag_ms(6_000), -1, "no timestamp known yet");
        st.newest_mirrored_ts_ms = 1_000;
        assert_eq!(
            st.lag_ms(6_000),
            5_000,
            "bounded by the newest mirrored record"
        );
        st.next_unmirrored_ts_ms = 2_500;
        assert_eq!(
            st.lag_ms(6_000),
            3_500,
            "exact when the next record was seen"
        );
        assert!(st.lag_ms(9_000) > st.lag_ms(6_000));
        st.last_caught_up_ms = 4_000;
        assert_eq!(
            st.lag_ms(6_000),
            2_000,
            "records unmirrored now arrived after we were last caught up"
        );
        st.destination_log_end_offset = 10;
        assert_eq!(st.lag_ms(9_000), 0);
        // Paused while caught up, then the source moved on: only the bounds are left.
        let moved = st.with_source_end(15);
        assert_eq!((moved.lag(), moved.lag_ms(9_000)), (5, 5_000));
    }

    /// Sets the base and max timestamps of every batch of the fake source.
    fn stamp(s: &mut FakeSource, ts: impl Fn(i64) -> i64) {
        for (base, _, b) in s.log.iter_mut() {
            let mut m = BytesMut::from(&b[..]);
            let t = ts(*base);
            m[BASE_TIMESTAMP_POS..BASE_TIMESTAMP_POS + 8].copy_from_slice(&t.to_be_bytes());
            m[MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8].copy_from_slice(&t.to_be_bytes());
            *b = m.freeze();
        }
    }

    #[test]
    fn recreated_fetcher_reports_the_age_of_the_oldest_unmirrored_record_not_its_own_age() {
        // Three batches written at t=1000, 1100, 1200 that no fetcher has copied; a fetcher
        // (re)created at t=6000 (resume, restart, leader move) gets one batch per fetch.
        let mut s = FakeSource::new(&[(0, 2, 5), (2, 2, 5), (4, 2, 5)]);
        stamp(&mut s, |base| 1_000 + base * 50);
        s.now = 6_000;
        s.cut_to = Some(61 + 50);
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let created_now = |s: &FakeSource| {
            PartitionFetcher::new(
                TopicPartition::new("orders", 0),
                s.topic_id,
                FetcherConfig::default(),
            )
        };
        let mut f = created_now(&s);
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(l.end, 2);
        // The second batch's header was in the response: its age exactly.
        assert_eq!(f.status().lag_ms(s.now), 6_000 - 1_100);

        // Leader move: the next fetch is refused, metadata names another leader.
        s.leader_id = 2;
        s.now = 7_000;
        drive(&mut f, &mut s, &mut l, &mut o, 2);
        assert_eq!(l.end, 4, "one more batch after following the new leader");
        assert_eq!(f.status().lag_ms(s.now), s.now - 1_200);

        // A fresh fetcher (recreated after the move) continues from the data, not from 0.
        let mut f2 = created_now(&s);
        s.cut_to = Some(61);
        s.log.push((6, 6, batch(6, 1, 5, 2)));
        stamp(&mut s, |base| 1_000 + base * 50);
        drive(&mut f2, &mut s, &mut l, &mut o, 1);
        assert_eq!(l.end, 6);
        assert_eq!(
            f2.status().lag_ms(s.now),
            s.now - 1_200,
            "no header of the next batch: the newest mirrored record bounds it"
        );
        s.cut_to = None;
        drive(&mut f2, &mut s, &mut l, &mut o, 1);
        assert_eq!((f2.status().lag(), f2.status().lag_ms(s.now)), (0, 0));
    }

    #[test]
    fn log_append_time_batches_use_the_append_time() {
        let mut b = BytesMut::from(&batch(0, 1, 1, 2)[..]);
        b[BASE_TIMESTAMP_POS..BASE_TIMESTAMP_POS + 8].copy_from_slice(&5i64.to_be_bytes());
        b[MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8].copy_from_slice(&9i64.to_be_bytes());
        assert_eq!(batch_first_ts(&b), Some(5));
        b[ATTRIBUTES_POS + 1] |= TIMESTAMP_TYPE_LOG_APPEND as u8;
        assert_eq!(batch_first_ts(&b), Some(9));
        assert_eq!(batch_first_ts(&b[..40]), None);
        assert_eq!(
            batches_max_ts(&concat(&[b.clone().freeze(), batch(1, 1, 1, 2)])),
            9
        );
    }

    #[test]
    fn run_returns_when_stopped() {
        let mut s = FakeSource::new(&[(0, 1, 1)]);
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let stop = Cell::new(true);
        let exit = block_on(fetcher(s.topic_id).run(&mut s, &mut l, &mut o, &stop));
        assert_eq!(exit, FetcherExit::Stopped);
    }

    /// Local log of (base, count, epoch) batches.
    fn local_with(batches: &[(i64, i32, i32)]) -> FakeLocal {
        let mut l = FakeLocal {
            epoch: 100,
            ..Default::default()
        };
        for &(base, n, e) in batches {
            l.batches.push((base, batch(base, n, e, 2)));
            l.end = base + i64::from(n);
        }
        l
    }

    #[test]
    fn failback_truncates_exactly_the_divergent_tail_using_the_sources_lme() {
        // A (us, old source) wrote 0..10 in epoch 3 and 10..15 in epoch 4. B (the new source)
        // had mirrored A's first batch verbatim (LME 3) before failing over, then wrote 5..9
        // in epoch 5.
        let mut l = local_with(&[(0, 5, 3), (5, 5, 3), (10, 5, 4)]);
        let mut s = FakeSource::new(&[(0, 5, 3), (5, 4, 5)]);
        s.lme = Some(3);
        let tp = TopicPartition::new("orders", 0);
        let plan = block_on(prepare_partition(&mut s, &mut l, "back", &tp, None)).unwrap();
        assert_eq!(plan.origin, LmeOrigin::Source);
        assert_eq!(
            (plan.local_end_offset, plan.truncate_to),
            (Offset(15), Offset(5))
        );
        assert_eq!(plan.truncated(), 10);
        assert_eq!(l.end, 5);
        assert_eq!(l.truncations, vec![5]);
        // Mirroring then continues from B at offset 5.
        let mut o = Events::default();
        let mut f = fetcher(s.topic_id);
        drive(&mut f, &mut s, &mut l, &mut o, 1);
        assert_eq!(l.end, 9);
        assert_eq!(l.batches[1], (5, s.log[1].2.clone()));
    }

    #[test]
    fn re_adding_a_stopped_topic_uses_our_own_lme_when_the_source_has_none() {
        // We (B) mirrored A up to 10 in epoch 2, failed over, wrote 10..14 in epoch 3; A kept
        // writing 10..20 in epoch 2.
        let mut l = local_with(&[(0, 10, 2), (10, 4, 3)]);
        let mut s = FakeSource::new(&[(0, 10, 2), (10, 10, 2)]);
        let tp = TopicPartition::new("orders", 0);
        let plan = block_on(plan_preparation(
            &mut s,
            &l,
            "dr",
            &tp,
            Some(LeaderEpoch(2)),
        ))
        .unwrap();
        assert_eq!(plan.origin, LmeOrigin::Local);
        assert_eq!(plan.truncate_to, Offset(10), "only our own writes go");
        assert_eq!(l.end, 14, "planning changes nothing");
        block_on(prepare_partition(
            &mut s,
            &mut l,
            "dr",
            &tp,
            Some(LeaderEpoch(2)),
        ))
        .unwrap();
        assert_eq!(l.end, 10);
    }

    #[test]
    fn without_any_lme_local_data_is_dropped_and_empty_logs_need_nothing() {
        let mut l = local_with(&[(0, 10, 2)]);
        let mut s = FakeSource::new(&[(0, 10, 2)]);
        let tp = TopicPartition::new("orders", 0);
        let plan = block_on(prepare_partition(&mut s, &mut l, "dr", &tp, None)).unwrap();
        assert_eq!(plan.origin, LmeOrigin::None);
        assert_eq!((plan.truncate_to.get(), l.end), (0, 0));
        let mut empty = FakeLocal::default();
        let plan = block_on(prepare_partition(&mut s, &mut empty, "dr", &tp, None)).unwrap();
        assert_eq!(plan.truncated(), 0);
        assert!(empty.truncations.is_empty());
    }

    #[test]
    fn throttled_run_sleeps_between_appends() {
        let mut s = FakeSource::new(&[(0, 1, 1)]);
        let mut l = FakeLocal::default();
        let mut o = Events::default();
        let stop = Cell::new(false);
        let ceiling = std::sync::Arc::new(crate::throttle::RateCeiling::new(10));
        let f = fetcher(s.topic_id).with_throttle(crate::throttle::MirrorThrottle {
            broker: ceiling.clone(),
            mirror: ceiling,
            priority: false,
            broker_throttled: std::sync::Arc::new(true.into()),
        });
        // Stop after the first sleep: the throttle must have asked for one.
        struct StopOnSleep<'a>(&'a mut FakeSource, &'a Cell<bool>);
        impl Source for StopOnSleep<'_> {
            async fn leader(&mut self, t: &str, p: i32) -> Result<SourceLeader, SourceError> {
                self.0.leader(t, p).await
            }
            async fn fetch(
                &mut self,
                l: &SourceLeader,
                r: &build::FetchPart,
                c: &FetcherConfig,
            ) -> Result<FetchOutcome, SourceError> {
                self.0.fetch(l, r, c).await
            }
            async fn list_offset(
                &mut self,
                l: &SourceLeader,
                t: &str,
                p: i32,
                e: LeaderEpoch,
                ts: i64,
            ) -> Result<PartitionAnswer<Offset>, SourceError> {
                self.0.list_offset(l, t, p, e, ts).await
            }
            async fn last_mirrored_epoch(
                &mut self,
                m: &str,
                t: &str,
                p: i32,
            ) -> Result<Option<LeaderEpoch>, SourceError> {
                self.0.last_mirrored_epoch(m, t, p).await
            }
            async fn end_offset_for_epoch(
                &mut self,
                l: &SourceLeader,
                t: &str,
                p: i32,
                c: LeaderEpoch,
                e: LeaderEpoch,
            ) -> Result<PartitionAnswer<Option<EpochEnd>>, SourceError> {
                self.0.end_offset_for_epoch(l, t, p, c, e).await
            }
            async fn sleep(&mut self, d: Duration) {
                self.0.sleep(d).await;
                self.1.set(true);
            }
            fn now_ms(&self) -> i64 {
                self.0.now_ms()
            }
        }
        let mut src = StopOnSleep(&mut s, &stop);
        block_on(f.run(&mut src, &mut l, &mut o, &stop));
        assert_eq!(l.end, 1);
        // 61 bytes at 10 B/s with a 10-byte burst: about 5.1 s of wait.
        assert_eq!(s.slept.len(), 1);
        assert!(s.slept[0] >= Duration::from_secs(5), "{:?}", s.slept);
    }

    #[test]
    fn mirror_partition_prepares_then_fetches() {
        let mut l = local_with(&[(0, 10, 2), (10, 4, 3)]);
        let mut s = FakeSource::new(&[(0, 10, 2), (10, 3, 2)]);
        s.leader_epoch = 2;
        let mut o = Events::default();
        let stop = Cell::new(false);
        // Stop once caught up (the observer sees a Progress with lag 0).
        struct StopWhenCaughtUp<'a>(&'a mut Events, &'a Cell<bool>);
        impl FetchObserver for StopWhenCaughtUp<'_> {
            fn on_event(&mut self, tp: &TopicPartition, e: FetchEvent) {
                if let FetchEvent::Progress(st) = &e {
                    if st.lag() == 0 {
                        self.1.set(true);
                    }
                }
                self.0.on_event(tp, e);
            }
        }
        let f = fetcher(s.topic_id);
        let mut obs = StopWhenCaughtUp(&mut o, &stop);
        block_on(mirror_partition(
            &mut s,
            &mut l,
            &mut obs,
            &stop,
            "dr",
            f,
            Some(LeaderEpoch(2)),
            false,
        ));
        assert!(matches!(&o.0[0], FetchEvent::Prepared(p) if p.truncate_to == Offset(10)));
        assert_eq!(l.end, 13);
        assert_eq!(l.batches[1].1, s.log[1].2);
    }

    #[test]
    fn fetcher_client_id_is_deterministic() {
        assert_eq!(fetcher_client_id(1, 3, "dr"), "kmirror-1-fetcher-3-dr");
    }
}
