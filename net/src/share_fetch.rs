//! ShareFetch (78) and ShareAcknowledge (79): share groups' records, delivered by the
//! partition leader (KIP-932, as Kafka 4.1 does it).
//!
//! Each core keeps the share partitions ([`SharePartition`], one per group and topic
//! partition) of the partitions it owns, in core-local state touched only inside the
//! partition's own closures, so a share partition and its log are read and changed together
//! without locks. A share partition is loaded from the share coordinator (ReadShareGroupState,
//! through [`persister`]) on its first fetch, with a start offset of -1 resolved by the
//! group's `share.auto.offset.reset`, and written back (WriteShareGroupState) after every
//! change that moves records out of ACQUIRED: acknowledgements, releases and expired locks.
//! A leader epoch change drops it, and the new leader term loads it again.
//!
//! Share sessions are the broker's ([`BrokerShares`]): a session is per (group, member) and a
//! member may use any connection, so they are shared by the cores behind one lock taken once
//! per request. A connection's end releases the records its sessions' members hold.
//!
//! Under `share.isolation.level=read_committed` the read stops at the last stable offset and
//! the records of aborted transactions are archived as they are acquired, as Kafka does.
//!
//! Not done (noted in COMPATIBILITY.md): a lock expires when its partition is next fetched or
//! acknowledged, not on a timer; a failed
//! state write does not roll the acknowledgement back (the next write carries the whole window
//! again).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::share_fetch_response as sf;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use kmirror_control::group_config::{ShareOffsetReset, SHARE_AUTO_OFFSET_RESET};
use kmirror_control::metadata::SHARE_STATE_TOPIC;
use kmirror_control::share::partition::{
    AckBatch, AckError, AcquireLimits, LogBatch, RecordState, ShareMemberId, SharePartition,
    StateBatch, StateWrite,
};
use kmirror_control::share::session::{SessionError, SessionKey, SessionPartition, ShareSessions};
use kmirror_engine::Partition;
use kmirror_types::{Offset, TopicPartition};
use uuid::Uuid;

use crate::authz::{table, Access};
use crate::broker::Ctx;
use crate::errors;

/// `group.share.max.share.sessions`.
const MAX_SESSIONS: usize = 2000;
/// `group.share.record.lock.duration.ms`.
const DEFAULT_LOCK_MS: i64 = 30_000;
/// `group.share.delivery.count.limit`.
const DELIVERY_LIMIT: i16 = 5;
/// `group.share.partition.max.record.locks`.
const MAX_RECORD_LOCKS: usize = 2000;
/// Largest `MaxWaitMs` honoured.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);
/// How often a waiting ShareFetch looks again without an append (records released or
/// expired elsewhere make records available without one).
const RECHECK: Duration = Duration::from_millis(100);
/// How long a state RPC may take, retries on a moving coordinator included.
const PERSIST_TIMEOUT: Duration = Duration::from_secs(5);

/// The broker's share sessions.
#[derive(Debug)]
pub struct BrokerShares {
    sessions: Mutex<ShareSessions>,
}

impl Default for BrokerShares {
    fn default() -> Self {
        BrokerShares {
            sessions: Mutex::new(ShareSessions::new(MAX_SESSIONS)),
        }
    }
}

impl BrokerShares {
    fn with<R>(&self, f: impl FnOnce(&mut ShareSessions) -> R) -> R {
        let mut g = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }
}

/// A loaded share partition on its leader's core.
struct Slot {
    part: SharePartition,
    topic_id: Uuid,
    state_epoch: i32,
    /// The partition's leader epoch when loaded (a new term loads again).
    leader_epoch: i32,
}

thread_local! {
    /// This core's share partitions, by group and topic partition.
    static SLOTS: RefCell<HashMap<(String, TopicPartition), Slot>> = RefCell::new(HashMap::new());
}

/// A state write to send to the share coordinator.
struct PendingWrite {
    group: String,
    topic_id: Uuid,
    partition: i32,
    state_epoch: i32,
    leader_epoch: i32,
    write: StateWrite,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn now_ms() -> i64 {
    kmirror_engine::now_ms()
}

/// Runs `f` on the core owning `tp`, which this node must lead (a partition is never opened
/// here for a share group otherwise); the Kafka code of a failure.
async fn on_partition<R: Send + 'static>(
    ctx: &Ctx,
    tp: TopicPartition,
    f: impl FnOnce(&mut Partition) -> R + Send + 'static,
) -> Result<R, i16> {
    if !matches!(
        ctx.cluster().role(&ctx.meta(), &tp),
        Some(crate::cluster::Role::Leader { .. }) | None
    ) {
        return Err(E::NotLeaderOrFollower.code());
    }
    match ctx.router().submit_partition(tp, f).await {
        Ok(p) => p
            .wait()
            .await
            .and_then(|r| r)
            .map_err(|e| errors::engine_error_code(&e)),
        Err(e) => Err(errors::engine_error_code(&e)),
    }
}

fn group_config(ctx: &Ctx, group: &str, key: &str) -> Option<String> {
    ctx.meta().group_configs.get(group)?.get(key).cloned()
}

fn lock_ms(ctx: &Ctx, group: &str) -> i64 {
    group_config(ctx, group, "share.record.lock.duration.ms")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_LOCK_MS)
}

fn read_committed(ctx: &Ctx, group: &str) -> bool {
    group_config(ctx, group, "share.isolation.level").as_deref() == Some("read_committed")
}

/// The share coordinator's RPCs, sent to the leader of the key's `__share_group_state`
/// partition: this node's coordinator thread, or a peer over the inter-broker listener.
pub(crate) mod persister {
    use super::*;

    /// Which node serves the state of (group, topic, partition): None while the topic does
    /// not exist or the partition has no leader.
    fn coordinator(ctx: &Ctx, group: &str, topic: Uuid, partition: i32) -> Option<i32> {
        let meta = ctx.meta();
        let t = meta.topics.get(SHARE_STATE_TOPIC)?;
        let n = t.partition_count();
        if n <= 0 {
            return None;
        }
        let sp = kmirror_control::share::state_record::state_partition(group, topic, partition, n);
        match ctx
            .cluster()
            .role(&meta, &TopicPartition::new(SHARE_STATE_TOPIC, sp))?
        {
            crate::cluster::Role::Leader { .. } => Some(ctx.node_id()),
            crate::cluster::Role::Follower { leader, .. }
            | crate::cluster::Role::NotReplica { leader, .. } => (leader >= 0).then_some(leader),
        }
    }

    fn retriable(code: i16) -> bool {
        code == E::NotCoordinator.code()
            || code == E::CoordinatorNotAvailable.code()
            || code == E::CoordinatorLoadInProgress.code()
    }

    /// Sends one state RPC for one key; the partition's code and its answer.
    async fn send<R>(
        ctx: &Ctx,
        key: (&str, Uuid, i32),
        api_key: ApiKey,
        req: R,
        wrap: fn(R) -> RequestKind,
        code_of: fn(&ResponseKind) -> Option<i16>,
    ) -> Result<ResponseKind, i16>
    where
        R: kafka_protocol::protocol::Request + Clone,
        R::Response: Into<ResponseKind>,
    {
        let deadline = Instant::now() + PERSIST_TIMEOUT;
        let mut wait = Duration::from_millis(50);
        loop {
            let code = match coordinator(ctx, key.0, key.1, key.2) {
                None => E::CoordinatorNotAvailable.code(),
                Some(node) if node == ctx.node_id() => match ctx.groups() {
                    None => E::CoordinatorNotAvailable.code(),
                    Some(groups) => {
                        let header = RequestHeader::default()
                            .with_request_api_key(api_key as i16)
                            .with_request_api_version(0);
                        let resp = groups.handle(api_key, 0, &header, wrap(req.clone())).await;
                        match code_of(&resp) {
                            Some(c) if retriable(c) => c,
                            _ => return Ok(resp),
                        }
                    }
                },
                Some(node) => {
                    let meta = ctx.meta();
                    let ib = &ctx.config().inter_broker;
                    match ib.peer_addr(&meta, node) {
                        None => E::CoordinatorNotAvailable.code(),
                        Some(addr) => {
                            let left = deadline.saturating_duration_since(Instant::now());
                            match ib.request_kept(&addr, &req, 0, left).await {
                                Ok(r) => {
                                    let resp = wrap_response(r);
                                    match code_of(&resp) {
                                        Some(c) if retriable(c) => c,
                                        _ => return Ok(resp),
                                    }
                                }
                                Err(e) => {
                                    tracing::debug!(error = %e, node, "share state RPC failed");
                                    E::CoordinatorNotAvailable.code()
                                }
                            }
                        }
                    }
                }
            };
            if Instant::now() + wait > deadline {
                return Err(code);
            }
            glommio::timer::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }

    /// The decoded answer of a peer as the local coordinator gives it.
    fn wrap_response<T: Into<ResponseKind>>(r: T) -> ResponseKind {
        r.into()
    }

    /// ReadShareGroupState of one key: (state epoch, start offset, batches).
    pub(crate) async fn read(
        ctx: &Ctx,
        group: &str,
        topic: Uuid,
        partition: i32,
        leader_epoch: i32,
    ) -> Result<(i32, i64, Vec<StateBatch>), i16> {
        use kafka_protocol::messages::read_share_group_state_request as rq;
        let req = ReadShareGroupStateRequest::default()
            .with_group_id(s(group))
            .with_topics(vec![rq::ReadStateData::default()
                .with_topic_id(topic)
                .with_partitions(vec![rq::PartitionData::default()
                    .with_partition(partition)
                    .with_leader_epoch(leader_epoch)])]);
        fn code(r: &ResponseKind) -> Option<i16> {
            match r {
                ResponseKind::ReadShareGroupState(r) => r
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .map(|p| p.error_code),
                _ => None,
            }
        }
        let resp = send(
            ctx,
            (group, topic, partition),
            ApiKey::ReadShareGroupState,
            req,
            RequestKind::ReadShareGroupState,
            code,
        )
        .await?;
        let ResponseKind::ReadShareGroupState(r) = resp else {
            return Err(E::UnknownServerError.code());
        };
        let Some(p) = r
            .results
            .into_iter()
            .next()
            .and_then(|t| t.partitions.into_iter().next())
        else {
            return Err(E::UnknownServerError.code());
        };
        if p.error_code != 0 {
            return Err(p.error_code);
        }
        let batches = p
            .state_batches
            .iter()
            .filter_map(|b| {
                Some(StateBatch {
                    first: Offset(b.first_offset),
                    last: Offset(b.last_offset),
                    state: RecordState::from_code(b.delivery_state)?,
                    delivery_count: b.delivery_count,
                })
            })
            .collect();
        Ok((p.state_epoch, p.start_offset, batches))
    }

    /// WriteShareGroupState of one key; NONE or the code.
    pub(super) async fn write(ctx: &Ctx, w: &PendingWrite) -> i16 {
        use kafka_protocol::messages::write_share_group_state_request as rq;
        let batches = w
            .write
            .batches
            .iter()
            .map(|b| {
                rq::StateBatch::default()
                    .with_first_offset(b.first.0)
                    .with_last_offset(b.last.0)
                    .with_delivery_state(b.state.code())
                    .with_delivery_count(b.delivery_count)
            })
            .collect();
        let req = WriteShareGroupStateRequest::default()
            .with_group_id(s(&w.group))
            .with_topics(vec![rq::WriteStateData::default()
                .with_topic_id(w.topic_id)
                .with_partitions(vec![rq::PartitionData::default()
                    .with_partition(w.partition)
                    .with_state_epoch(w.state_epoch)
                    .with_leader_epoch(w.leader_epoch)
                    .with_start_offset(w.write.start.0)
                    .with_state_batches(batches)])]);
        fn code(r: &ResponseKind) -> Option<i16> {
            match r {
                ResponseKind::WriteShareGroupState(r) => r
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .map(|p| p.error_code),
                _ => None,
            }
        }
        match send(
            ctx,
            (&w.group, w.topic_id, w.partition),
            ApiKey::WriteShareGroupState,
            req,
            RequestKind::WriteShareGroupState,
            code,
        )
        .await
        {
            Ok(r) => code(&r).unwrap_or(E::UnknownServerError.code()),
            Err(c) => c,
        }
    }

    /// ReadShareGroupStateSummary of one key: (start offset, leader epoch).
    pub(crate) async fn summary(
        ctx: &Ctx,
        group: &str,
        topic: Uuid,
        partition: i32,
    ) -> Result<(i64, i32), i16> {
        use kafka_protocol::messages::read_share_group_state_summary_request as rq;
        let req = ReadShareGroupStateSummaryRequest::default()
            .with_group_id(s(group))
            .with_topics(vec![rq::ReadStateSummaryData::default()
                .with_topic_id(topic)
                .with_partitions(vec![rq::PartitionData::default()
                    .with_partition(partition)
                    .with_leader_epoch(-1)])]);
        fn code(r: &ResponseKind) -> Option<i16> {
            match r {
                ResponseKind::ReadShareGroupStateSummary(r) => r
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .map(|p| p.error_code),
                _ => None,
            }
        }
        let resp = send(
            ctx,
            (group, topic, partition),
            ApiKey::ReadShareGroupStateSummary,
            req,
            RequestKind::ReadShareGroupStateSummary,
            code,
        )
        .await?;
        let ResponseKind::ReadShareGroupStateSummary(r) = resp else {
            return Err(E::UnknownServerError.code());
        };
        let Some(p) = r
            .results
            .into_iter()
            .next()
            .and_then(|t| t.partitions.into_iter().next())
        else {
            return Err(E::UnknownServerError.code());
        };
        if p.error_code != 0 {
            return Err(p.error_code);
        }
        Ok((p.start_offset, p.leader_epoch))
    }
}

/// A persister error as the share partition reports it (Kafka's SharePartition mapping).
fn persister_code(code: i16) -> i16 {
    if code == E::NotCoordinator.code()
        || code == E::CoordinatorNotAvailable.code()
        || code == E::CoordinatorLoadInProgress.code()
    {
        E::CoordinatorNotAvailable.code()
    } else if code == E::FencedLeaderEpoch.code() || code == E::FencedStateEpoch.code() {
        E::NotLeaderOrFollower.code()
    } else if code == E::GroupIdNotFound.code() || code == E::UnknownTopicOrPartition.code() {
        code
    } else {
        E::UnknownServerError.code()
    }
}

/// What the share partition of (group, tp) needs before it is used here: nothing (loaded
/// in this leader term), a load at this leader epoch, or the partition's error.
enum Loaded {
    Yes,
    Need(i32),
}

/// Makes sure (group, tp) has its share partition on tp's core.
async fn ensure_loaded(
    ctx: &Ctx,
    group: &str,
    tp: &TopicPartition,
    topic_id: Uuid,
) -> Result<(), i16> {
    let key = (group.to_string(), tp.clone());
    let k = key.clone();
    let state = on_partition(ctx, tp.clone(), move |p| {
        if !p.is_leader() {
            return Err(E::NotLeaderOrFollower.code());
        }
        let epoch = p.leader_epoch.get();
        SLOTS.with(|s| {
            let mut s = s.borrow_mut();
            match s.get(&k) {
                Some(slot) if slot.leader_epoch == epoch => Ok(Loaded::Yes),
                _ => {
                    s.remove(&k);
                    Ok(Loaded::Need(epoch))
                }
            }
        })
    })
    .await??;
    let Loaded::Need(leader_epoch) = state else {
        return Ok(());
    };
    let (state_epoch, start, batches) =
        persister::read(ctx, group, topic_id, tp.partition, leader_epoch)
            .await
            .map_err(persister_code)?;
    let reset = group_config(ctx, group, SHARE_AUTO_OFFSET_RESET)
        .and_then(|v| ShareOffsetReset::parse(&v))
        .unwrap_or(ShareOffsetReset::Latest);
    on_partition(ctx, tp.clone(), move |p| {
        if p.leader_epoch.get() != leader_epoch {
            return Err(E::NotLeaderOrFollower.code());
        }
        let log = &p.log;
        let start = if start >= 0 {
            start
        } else {
            match reset {
                ShareOffsetReset::Earliest => log.log_start_offset().get(),
                ShareOffsetReset::Latest => log.high_watermark().get(),
                ShareOffsetReset::ByDuration(ms) => log
                    .offset_for_timestamp(now_ms() - ms)
                    .map(|(o, _)| o.0)
                    .unwrap_or_else(|| log.high_watermark().get()),
            }
        };
        let part = SharePartition::load(Offset(start), &batches, DELIVERY_LIMIT, MAX_RECORD_LOCKS);
        SLOTS.with(|s| {
            s.borrow_mut().entry(key).or_insert(Slot {
                part,
                topic_id,
                state_epoch,
                leader_epoch,
            });
        });
        Ok(())
    })
    .await?
}

/// One whole batch of a log read: its offsets, where it ends in the read's bytes, and what
/// read_committed needs of its header.
struct ReadBatch {
    range: LogBatch,
    end: usize,
    producer_id: i64,
    transactional: bool,
    control: bool,
}

/// Whole batches of `records` (as the log returns them).
fn log_batches(records: &Bytes) -> Vec<ReadBatch> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < records.len() {
        let Ok(h) = kmirror_log::batch::BatchHeader::parse(&records[pos..]) else {
            break;
        };
        let len = h.batch_length();
        if len <= 0 {
            break;
        }
        let end = pos + 12 + len as usize;
        if end > records.len() {
            break;
        }
        out.push(ReadBatch {
            range: LogBatch {
                first: Offset(h.base_offset()),
                last: Offset(h.last_offset()),
            },
            end,
            producer_id: h.producer_id(),
            transactional: h.is_transactional(),
            control: h.is_control(),
        });
        pos = end;
    }
    out
}

/// The batches of `batches` that belong to aborted transactions (`aborted`: producer id and
/// first offset of each, as Fetch lists them), by the consumer's rule: a transactional batch
/// of a producer whose aborted transaction began at or before it, until that producer's
/// control batch.
fn aborted_batches(batches: &[ReadBatch], aborted: &[kmirror_log::AbortedTxn]) -> Vec<LogBatch> {
    let mut pending: Vec<(i64, i64)> = aborted
        .iter()
        .map(|a| (a.first_offset.0, a.producer_id.0))
        .collect();
    pending.sort_unstable();
    let mut next = 0;
    let mut open = std::collections::HashSet::new();
    let mut out = Vec::new();
    for b in batches {
        while next < pending.len() && pending[next].0 <= b.range.first.0 {
            open.insert(pending[next].1);
            next += 1;
        }
        if b.control {
            open.remove(&b.producer_id);
        } else if b.transactional && open.contains(&b.producer_id) {
            out.push(b.range);
        }
    }
    out
}

/// What one acquisition on a partition gave.
struct Acquired {
    records: Bytes,
    acquired: Vec<sf::AcquiredRecords>,
    write: Option<PendingWrite>,
}

/// Acquires records of `tp` for `member` on its core (registering `watch` when there were
/// none). Expired locks are ended first.
#[allow(clippy::too_many_arguments)]
async fn acquire(
    ctx: &Ctx,
    group: &str,
    member: &ShareMemberId,
    tp: &TopicPartition,
    limits: AcquireLimits,
    max_bytes: usize,
    read_committed: bool,
    watch: flume::Sender<()>,
) -> Result<Acquired, i16> {
    let key = (group.to_string(), tp.clone());
    let member = member.clone();
    let group = group.to_string();
    on_partition(ctx, tp.clone(), move |p| {
        if !p.is_leader() {
            return Err(E::NotLeaderOrFollower.code());
        }
        let now = now_ms();
        SLOTS.with(|s| {
            let mut s = s.borrow_mut();
            let Some(slot) = s.get_mut(&key) else {
                return Err(E::UnknownTopicOrPartition.code());
            };
            let before = slot.part.start_offset();
            let expired = slot.part.expire_locks(now) > 0;
            let mut out = Acquired {
                records: Bytes::new(),
                acquired: Vec::new(),
                write: None,
            };
            if slot.part.can_acquire() {
                let log = &p.log;
                let from = slot.part.next_fetch_offset().0;
                let read_from = from.max(log.log_start_offset().get());
                let upper = if read_committed {
                    log.last_stable_offset().get()
                } else {
                    log.high_watermark().get()
                };
                if read_from < upper {
                    let read = log
                        .read(Offset(read_from), max_bytes, Offset(upper))
                        .map_err(|e| errors::log_error_code(&e))?;
                    let batches = log_batches(&read.records);
                    let logb: Vec<LogBatch> = batches.iter().map(|b| b.range).collect();
                    let mut got = slot.part.acquire(&member, Offset(from), &logb, limits, now);
                    if read_committed && !got.is_empty() {
                        // Kafka archives an aborted transaction's records as it acquires them.
                        let aborted = log.aborted_transactions(Offset(read_from), Offset(upper));
                        for b in aborted_batches(&batches, &aborted) {
                            got = slot.part.archive_acquired(&member, b.first, b.last, got);
                        }
                    }
                    if let Some(last) = got.last().map(|a| a.last) {
                        // Whole batches up to the one holding the last acquired offset.
                        let end = batches
                            .iter()
                            .find(|b| b.range.last >= last)
                            .map(|b| b.end)
                            .unwrap_or(read.records.len());
                        out.records = read.records.slice(..end);
                    }
                    out.acquired = got
                        .into_iter()
                        .map(|a| {
                            sf::AcquiredRecords::default()
                                .with_first_offset(a.first.0)
                                .with_last_offset(a.last.0)
                                .with_delivery_count(a.delivery_count)
                        })
                        .collect();
                }
            }
            if out.acquired.is_empty() {
                p.watch(watch);
            }
            if expired || slot.part.start_offset() != before {
                out.write = Some(PendingWrite {
                    group: group.clone(),
                    topic_id: slot.topic_id,
                    partition: key.1.partition,
                    state_epoch: slot.state_epoch,
                    leader_epoch: slot.leader_epoch,
                    write: slot.part.take_write(before),
                });
            }
            Ok(out)
        })
    })
    .await?
}

/// Applies `member`'s acknowledgements to `tp`; the partition's code. Persisted before the
/// answer.
async fn acknowledge(
    ctx: &Ctx,
    group: &str,
    member: &ShareMemberId,
    tp: &TopicPartition,
    acks: Vec<AckBatch>,
) -> i16 {
    let key = (group.to_string(), tp.clone());
    let member = member.clone();
    let g = group.to_string();
    let r = on_partition(ctx, tp.clone(), move |p| {
        if !p.is_leader() {
            return Err(E::NotLeaderOrFollower.code());
        }
        SLOTS.with(|s| {
            let mut s = s.borrow_mut();
            let Some(slot) = s.get_mut(&key) else {
                return Err(E::UnknownTopicOrPartition.code());
            };
            let before = slot.part.start_offset();
            slot.part.expire_locks(now_ms());
            slot.part.acknowledge(&member, &acks).map_err(|e| match e {
                AckError::InvalidRequest(_) => E::InvalidRequest.code(),
                AckError::InvalidRecordState(_) => E::InvalidRecordState.code(),
            })?;
            Ok(PendingWrite {
                group: g,
                topic_id: slot.topic_id,
                partition: key.1.partition,
                state_epoch: slot.state_epoch,
                leader_epoch: slot.leader_epoch,
                write: slot.part.take_write(before),
            })
        })
    })
    .await;
    match r {
        Ok(Ok(w)) => match persister::write(ctx, &w).await {
            0 => 0,
            c => persister_code(c),
        },
        Ok(Err(c)) | Err(c) => c,
    }
}

/// Gives back what `member` holds on `tp` (its session closed or its connection dropped).
async fn release(ctx: &Ctx, group: &str, member: &ShareMemberId, tp: &TopicPartition) {
    let key = (group.to_string(), tp.clone());
    let member = member.clone();
    let g = group.to_string();
    let w = on_partition(ctx, tp.clone(), move |_p| {
        SLOTS.with(|s| {
            let mut s = s.borrow_mut();
            let slot = s.get_mut(&key)?;
            let before = slot.part.start_offset();
            (slot.part.release_member(&member) > 0).then(|| PendingWrite {
                group: g,
                topic_id: slot.topic_id,
                partition: key.1.partition,
                state_epoch: slot.state_epoch,
                leader_epoch: slot.leader_epoch,
                write: slot.part.take_write(before),
            })
        })
    })
    .await;
    if let Ok(Some(w)) = w {
        let code = persister::write(ctx, &w).await;
        if code != 0 {
            tracing::warn!(group, %tp, code, "share state write after a release failed");
        }
    }
}

fn ack_batches<'a>(batches: impl Iterator<Item = (i64, i64, &'a Vec<i8>)>) -> Vec<AckBatch> {
    batches
        .map(|(f, l, t)| AckBatch {
            first: Offset(f),
            last: Offset(l),
            types: t.clone(),
        })
        .collect()
}

/// The topic name of `id`, if the cluster has it.
fn topic_of(ctx: &Ctx, id: Uuid) -> Option<String> {
    ctx.meta().described_by_id(id).map(|t| t.name.clone())
}

/// The session's (group, member) of a request, or INVALID_REQUEST.
fn session_key(group: Option<&GroupId>, member: Option<&StrBytes>) -> Option<SessionKey> {
    let group = group.map(|g| g.0.to_string()).filter(|g| !g.is_empty())?;
    let member = member.map(|m| m.to_string()).filter(|m| !m.is_empty())?;
    Some(SessionKey {
        group,
        member: ShareMemberId(member),
    })
}

fn fetch_error(code: i16, msg: Option<String>) -> ShareFetchResponse {
    ShareFetchResponse::default()
        .with_error_code(code)
        .with_error_message(msg.as_deref().map(s))
}

/// Partition results in topic order, grouped by topic id.
type ByTopic<T> = BTreeMap<Uuid, BTreeMap<i32, T>>;

/// ShareFetch (78).
pub async fn share_fetch(
    ctx: &Ctx,
    access: &Access<'_>,
    conn: u64,
    r: ShareFetchRequest,
) -> ShareFetchResponse {
    if !crate::features::share_groups_enabled(&ctx.meta()) {
        return fetch_error(E::UnsupportedVersion.code(), None);
    }
    let Some(key) = session_key(r.group_id.as_ref(), r.member_id.as_ref()) else {
        return fetch_error(E::InvalidRequest.code(), None);
    };
    if !access.allows(table::GROUP_READ, &key.group) {
        return fetch_error(E::GroupAuthorizationFailed.code(), None);
    }
    let add: Vec<SessionPartition> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.topic_id, p.partition_index))
        })
        .collect();
    let forget: Vec<SessionPartition> = r
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let has_acks = r.topics.iter().any(|t| {
        t.partitions
            .iter()
            .any(|p| !p.acknowledgement_batches.is_empty())
    });
    let plan = ctx
        .shares()
        .with(|ss| ss.fetch(&key, r.share_session_epoch, &add, &forget, has_acks, conn));
    let plan = match plan {
        Ok(p) => p,
        Err(e) => {
            if e == SessionError::LimitReached {
                // Kafka answers this one after MaxWaitMs.
                let wait = Duration::from_millis(r.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
                glommio::timer::sleep(wait).await;
            }
            let msg = match &e {
                SessionError::InvalidRequest(m) => Some(m.clone()),
                _ => None,
            };
            return fetch_error(e.code(), msg);
        }
    };
    let mut out: ByTopic<sf::PartitionData> = BTreeMap::new();
    // Piggy-backed acknowledgements first.
    for t in &r.topics {
        for p in &t.partitions {
            if p.acknowledgement_batches.is_empty() {
                continue;
            }
            let code = match topic_of(ctx, t.topic_id) {
                None => E::UnknownTopicId.code(),
                Some(name) if !access.allows(table::SHARE_FETCH_TOPIC, &name) => {
                    E::TopicAuthorizationFailed.code()
                }
                Some(name) => {
                    let acks = ack_batches(
                        p.acknowledgement_batches
                            .iter()
                            .map(|b| (b.first_offset, b.last_offset, &b.acknowledge_types)),
                    );
                    let tp = TopicPartition::new(name, p.partition_index);
                    acknowledge(ctx, &key.group, &key.member, &tp, acks).await
                }
            };
            partition_entry(&mut out, t.topic_id, p.partition_index).acknowledge_error_code = code;
        }
    }
    if plan.closing {
        close_session(ctx, &key).await;
        return finish(out, 0);
    }
    let lock = lock_ms(ctx, &key.group);
    let committed = read_committed(ctx, &key.group);
    // The partitions to read, resolved and authorized (their errors answered).
    let mut readable: Vec<(Uuid, TopicPartition)> = Vec::new();
    for (topic_id, idx) in &plan.read {
        let code = match topic_of(ctx, *topic_id) {
            None => Some(E::UnknownTopicId.code()),
            Some(name) if !access.allows(table::SHARE_FETCH_TOPIC, &name) => {
                Some(E::TopicAuthorizationFailed.code())
            }
            Some(name) => {
                let meta = ctx.meta();
                let exists = meta
                    .topics
                    .get(&name)
                    .is_some_and(|t| *idx < t.partition_count() && *idx >= 0);
                if exists {
                    let tp = TopicPartition::new(name, *idx);
                    match ensure_loaded(ctx, &key.group, &tp, *topic_id).await {
                        Ok(()) => {
                            readable.push((*topic_id, tp));
                            None
                        }
                        Err(c) => Some(c),
                    }
                } else {
                    Some(E::UnknownTopicOrPartition.code())
                }
            }
        };
        if let Some(code) = code {
            let e = partition_entry(&mut out, *topic_id, *idx);
            e.error_code = code;
            if code == E::NotLeaderOrFollower.code() {
                if let Some(name) = topic_of(ctx, *topic_id) {
                    let (leader, epoch) = current_leader(ctx, &TopicPartition::new(name, *idx));
                    e.current_leader = sf::LeaderIdAndEpoch::default()
                        .with_leader_id(leader)
                        .with_leader_epoch(epoch);
                }
            }
        }
    }
    // Long poll: until something is acquired or MaxWaitMs passed.
    let max_wait = Duration::from_millis(r.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    let deadline = Instant::now() + max_wait;
    let mut max_records = if r.max_records > 0 {
        r.max_records as usize
    } else {
        500
    };
    let batch_size = if r.batch_size > 0 {
        r.batch_size as usize
    } else {
        max_records
    };
    let mut max_bytes = if r.max_bytes > 0 {
        r.max_bytes as usize
    } else {
        i32::MAX as usize
    };
    loop {
        let (tx, rx) = flume::bounded::<()>(1);
        let mut got_any = false;
        let mut writes = Vec::new();
        for (topic_id, tp) in &readable {
            if max_records == 0 || max_bytes == 0 {
                break;
            }
            let limits = AcquireLimits {
                max_records,
                batch_size,
                lock_ms: lock,
            };
            let res = acquire(
                ctx,
                &key.group,
                &key.member,
                tp,
                limits,
                max_bytes,
                committed,
                tx.clone(),
            )
            .await;
            let e = partition_entry(&mut out, *topic_id, tp.partition);
            match res {
                Err(code) => e.error_code = code,
                Ok(a) => {
                    if let Some(w) = a.write {
                        writes.push(w);
                    }
                    if !a.acquired.is_empty() {
                        got_any = true;
                        let n: i64 = a
                            .acquired
                            .iter()
                            .map(|x| x.last_offset - x.first_offset + 1)
                            .sum();
                        max_records = max_records.saturating_sub(n as usize);
                        max_bytes = max_bytes.saturating_sub(a.records.len());
                        e.records = Some(a.records);
                        e.acquired_records = a.acquired;
                    }
                }
            }
        }
        for w in &writes {
            let code = persister::write(ctx, w).await;
            if code != 0 {
                tracing::warn!(group = %key.group, code, "share state write after lock expiry failed");
            }
        }
        let now = Instant::now();
        if got_any || readable.is_empty() || now >= deadline {
            break;
        }
        let wait = deadline.saturating_duration_since(now).min(RECHECK);
        futures_lite::future::or(
            async {
                let _ = rx.recv_async().await;
            },
            async {
                glommio::timer::sleep(wait).await;
            },
        )
        .await;
    }
    // An incremental answer names the partitions with something to say; the first names all.
    let incremental = r.share_session_epoch > 0;
    if incremental {
        for parts in out.values_mut() {
            parts.retain(|_, p| {
                p.error_code != 0
                    || p.acknowledge_error_code != 0
                    || !p.acquired_records.is_empty()
                    || r.topics.iter().any(|t| {
                        t.partitions.iter().any(|q| {
                            q.partition_index == p.partition_index
                                && !q.acknowledgement_batches.is_empty()
                        })
                    })
            });
        }
    }
    finish(out, lock as i32)
}

fn partition_entry(
    out: &mut ByTopic<sf::PartitionData>,
    t: Uuid,
    p: i32,
) -> &mut sf::PartitionData {
    out.entry(t).or_default().entry(p).or_insert_with(|| {
        sf::PartitionData::default()
            .with_partition_index(p)
            .with_records(Some(Bytes::new()))
            .with_current_leader(
                sf::LeaderIdAndEpoch::default()
                    .with_leader_id(-1)
                    .with_leader_epoch(-1),
            )
    })
}

fn current_leader(ctx: &Ctx, tp: &TopicPartition) -> (i32, i32) {
    match ctx.cluster().role(&ctx.meta(), tp) {
        Some(crate::cluster::Role::Leader { epoch }) => (ctx.node_id(), epoch),
        Some(crate::cluster::Role::Follower { leader, epoch })
        | Some(crate::cluster::Role::NotReplica { leader, epoch }) => (leader, epoch),
        None => (-1, -1),
    }
}

fn finish(out: ByTopic<sf::PartitionData>, lock_ms: i32) -> ShareFetchResponse {
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(lock_ms)
        .with_responses(
            out.into_iter()
                .filter(|(_, parts)| !parts.is_empty())
                .map(|(t, parts)| {
                    sf::ShareFetchableTopicResponse::default()
                        .with_topic_id(t)
                        .with_partitions(parts.into_values().collect())
                })
                .collect(),
        )
}

/// Closes `key`'s session (epoch -1) and releases what its member holds on its partitions.
async fn close_session(ctx: &Ctx, key: &SessionKey) {
    let Some(session) = ctx.shares().with(|ss| ss.close(key)) else {
        return;
    };
    release_all(ctx, key, session.partitions.iter().copied()).await;
    evict_if_unused(ctx, &key.group).await;
}

/// Drops `group`'s share partitions on every core once it has no session on this broker
/// (Kafka's `onGroupEmpty`): what an admin changed in its state while it was empty (its
/// start offsets altered or deleted) is read again by its next fetch.
async fn evict_if_unused(ctx: &Ctx, group: &str) {
    if ctx.shares().with(|ss| ss.of_group(group)) > 0 {
        return;
    }
    for core in 0..ctx.router().cores() {
        let g = group.to_string();
        let _ = ctx
            .router()
            .run_on(core, move |_| {
                SLOTS.with(|s| s.borrow_mut().retain(|(grp, _), _| *grp != g));
            })
            .await;
    }
}

async fn release_all(ctx: &Ctx, key: &SessionKey, parts: impl Iterator<Item = SessionPartition>) {
    for (topic_id, idx) in parts {
        if let Some(name) = topic_of(ctx, topic_id) {
            release(
                ctx,
                &key.group,
                &key.member,
                &TopicPartition::new(name, idx),
            )
            .await;
        }
    }
}

/// ShareAcknowledge (79).
pub async fn share_acknowledge(
    ctx: &Ctx,
    access: &Access<'_>,
    conn: u64,
    r: ShareAcknowledgeRequest,
) -> ShareAcknowledgeResponse {
    use kafka_protocol::messages::share_acknowledge_response as sa;
    let top = |code: i16| ShareAcknowledgeResponse::default().with_error_code(code);
    if !crate::features::share_groups_enabled(&ctx.meta()) {
        return top(E::UnsupportedVersion.code());
    }
    let Some(key) = session_key(r.group_id.as_ref(), r.member_id.as_ref()) else {
        return top(E::InvalidRequest.code());
    };
    if !access.allows(table::GROUP_READ, &key.group) {
        return top(E::GroupAuthorizationFailed.code());
    }
    let closing = match ctx
        .shares()
        .with(|ss| ss.acknowledge(&key, r.share_session_epoch, conn))
    {
        Ok(c) => c,
        Err(e) => return top(e.code()),
    };
    let mut responses = Vec::new();
    for t in &r.topics {
        let name = topic_of(ctx, t.topic_id);
        let mut parts = Vec::new();
        for p in &t.partitions {
            let code = match &name {
                None => E::UnknownTopicId.code(),
                Some(n) if !access.allows(table::SHARE_FETCH_TOPIC, n) => {
                    E::TopicAuthorizationFailed.code()
                }
                Some(n) => {
                    let acks = ack_batches(
                        p.acknowledgement_batches
                            .iter()
                            .map(|b| (b.first_offset, b.last_offset, &b.acknowledge_types)),
                    );
                    let tp = TopicPartition::new(n.clone(), p.partition_index);
                    acknowledge(ctx, &key.group, &key.member, &tp, acks).await
                }
            };
            let mut pd = sa::PartitionData::default()
                .with_partition_index(p.partition_index)
                .with_error_code(code)
                .with_current_leader(
                    sa::LeaderIdAndEpoch::default()
                        .with_leader_id(-1)
                        .with_leader_epoch(-1),
                );
            if code == E::NotLeaderOrFollower.code() {
                if let Some(n) = &name {
                    let (leader, epoch) =
                        current_leader(ctx, &TopicPartition::new(n.clone(), p.partition_index));
                    pd.current_leader = sa::LeaderIdAndEpoch::default()
                        .with_leader_id(leader)
                        .with_leader_epoch(epoch);
                }
            }
            parts.push(pd);
        }
        responses.push(
            sa::ShareAcknowledgeTopicResponse::default()
                .with_topic_id(t.topic_id)
                .with_partitions(parts),
        );
    }
    if closing {
        close_session(ctx, &key).await;
    }
    ShareAcknowledgeResponse::default().with_responses(responses)
}

/// A connection ended: the sessions it last used close and their members' records are
/// released.
pub async fn connection_closed(ctx: &Ctx, conn: u64) {
    let closed = ctx.shares().with(|ss| {
        if ss.is_empty() {
            Vec::new()
        } else {
            ss.disconnected(conn)
        }
    });
    for (key, session) in closed {
        release_all(ctx, &key, session.partitions.iter().copied()).await;
        evict_if_unused(ctx, &key.group).await;
    }
}

/// DescribeShareGroupOffsets (90): DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED)
/// and on each topic (a named one answered TOPIC_AUTHORIZATION_FAILED, an unnamed one left
/// out, as Kafka); the group coordinator answers, and partitions whose state another node
/// leads are asked of it.
pub async fn describe_offsets(
    ctx: &Ctx,
    access: &Access<'_>,
    api_key: ApiKey,
    header: &RequestHeader,
    mut r: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    use kafka_protocol::messages::describe_share_group_offsets_response as o;
    let (allowed, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.groups)
        .into_iter()
        .partition(|g| access.allows(table::DESCRIBE_GROUPS, &g.group_id));
    // Named topics the client may not describe are answered here.
    let mut refused: BTreeMap<String, Vec<o::DescribeShareGroupOffsetsResponseTopic>> =
        BTreeMap::new();
    r.groups = allowed
        .into_iter()
        .map(|mut g| {
            if let Some(ts) = g.topics.as_mut() {
                let (ok, no): (Vec<_>, Vec<_>) = std::mem::take(ts)
                    .into_iter()
                    .partition(|t| access.allows(table::METADATA, &t.topic_name));
                *ts = ok;
                refused.insert(
                    g.group_id.0.to_string(),
                    no.into_iter()
                        .map(|t| {
                            o::DescribeShareGroupOffsetsResponseTopic::default()
                                .with_topic_name(t.topic_name)
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            o::DescribeShareGroupOffsetsResponsePartition::default()
                                                .with_partition_index(*p)
                                                .with_start_offset(-1)
                                                .with_error_code(E::TopicAuthorizationFailed.code())
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            }
            g
        })
        .collect();
    let mut resp = DescribeShareGroupOffsetsResponse::default();
    if !r.groups.is_empty() {
        let topics = crate::groups::topic_view(&ctx.meta());
        let answer = match ctx.groups() {
            Some(groups) => {
                groups
                    .handle_with_topics(
                        api_key,
                        header.request_api_version,
                        header,
                        RequestKind::DescribeShareGroupOffsets(r),
                        Some(topics),
                        None,
                    )
                    .await
            }
            None => crate::groups::share_refused(
                &RequestKind::DescribeShareGroupOffsets(r),
                E::CoordinatorNotAvailable.code(),
            ),
        };
        if let ResponseKind::DescribeShareGroupOffsets(a) = answer {
            resp = a;
        }
    }
    for g in resp.groups.iter_mut() {
        for t in g.topics.iter_mut() {
            if !access.allows(table::METADATA, &t.topic_name) {
                continue;
            }
            for p in t.partitions.iter_mut() {
                if p.error_code != E::NotCoordinator.code() {
                    continue;
                }
                p.error_code = 0;
                // As Kafka: a persister error reads as "no offset", not as an error.
                (p.start_offset, p.leader_epoch) =
                    persister::summary(ctx, &g.group_id.0, t.topic_id, p.partition_index)
                        .await
                        .unwrap_or((-1, 0));
            }
        }
        // Without named topics, the ones the client may not describe are left out.
        t_retain(g, access);
        if let Some(no) = refused.remove(g.group_id.0.as_str()) {
            g.topics.extend(no);
        }
    }
    resp.groups.extend(denied.into_iter().map(|g| {
        o::DescribeShareGroupOffsetsResponseGroup::default()
            .with_group_id(g.group_id)
            .with_error_code(E::GroupAuthorizationFailed.code())
    }));
    resp
}

fn t_retain(
    g: &mut kafka_protocol::messages::describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup,
    access: &Access<'_>,
) {
    g.topics
        .retain(|t| access.allows(table::METADATA, &t.topic_name));
}

/// The group coordinator's answer to a share-offsets admin request.
async fn coordinator_answer(
    ctx: &Ctx,
    api_key: ApiKey,
    header: &RequestHeader,
    req: RequestKind,
) -> ResponseKind {
    let topics = crate::groups::topic_view(&ctx.meta());
    match ctx.groups() {
        Some(groups) => {
            groups
                .handle_with_topics(
                    api_key,
                    header.request_api_version,
                    header,
                    req,
                    Some(topics),
                    None,
                )
                .await
        }
        None => crate::groups::share_refused(&req, E::CoordinatorNotAvailable.code()),
    }
}

/// AlterShareGroupOffsets (91): READ on the group (else GROUP_AUTHORIZATION_FAILED) and on
/// each topic (else TOPIC_AUTHORIZATION_FAILED on its partitions), as Kafka.
pub async fn alter_offsets(
    ctx: &Ctx,
    access: &Access<'_>,
    api_key: ApiKey,
    header: &RequestHeader,
    mut r: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    use kafka_protocol::messages::alter_share_group_offsets_response as o;
    if !access.allows(table::GROUP_READ, &r.group_id) {
        return AlterShareGroupOffsetsResponse::default()
            .with_error_code(E::GroupAuthorizationFailed.code());
    }
    // The mirror sync's tag (which creates the group) is for brokers only.
    if !access.allows_cluster(table::SHARE_STATE_CLUSTER_ACTION) {
        r.unknown_tagged_fields
            .remove(&kmirror_control::share::MIRROR_SYNC_TAG);
    }
    let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
        .into_iter()
        .partition(|t| access.allows(table::SHARE_FETCH_TOPIC, &t.topic_name));
    r.topics = ok;
    let asked = !r.topics.is_empty();
    let mut resp = AlterShareGroupOffsetsResponse::default();
    if asked || denied.is_empty() {
        if let ResponseKind::AlterShareGroupOffsets(a) =
            coordinator_answer(ctx, api_key, header, RequestKind::AlterShareGroupOffsets(r)).await
        {
            resp = a;
        }
    }
    resp.responses.extend(denied.into_iter().map(|t| {
        o::AlterShareGroupOffsetsResponseTopic::default()
            .with_topic_name(t.topic_name)
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        o::AlterShareGroupOffsetsResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(E::TopicAuthorizationFailed.code())
                    })
                    .collect(),
            )
    }));
    resp
}

/// DeleteShareGroupOffsets (92): DELETE on the group (else GROUP_AUTHORIZATION_FAILED) and
/// READ on each topic (else a TOPIC_AUTHORIZATION_FAILED entry), as Kafka.
pub async fn delete_offsets(
    ctx: &Ctx,
    access: &Access<'_>,
    api_key: ApiKey,
    header: &RequestHeader,
    mut r: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    use kafka_protocol::messages::delete_share_group_offsets_response as o;
    if !access.allows(table::DELETE_GROUPS, &r.group_id) {
        return DeleteShareGroupOffsetsResponse::default()
            .with_error_code(E::GroupAuthorizationFailed.code());
    }
    let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.topics)
        .into_iter()
        .partition(|t| access.allows(table::SHARE_FETCH_TOPIC, &t.topic_name));
    r.topics = ok;
    let mut resp = DeleteShareGroupOffsetsResponse::default();
    if !r.topics.is_empty() || denied.is_empty() {
        if let ResponseKind::DeleteShareGroupOffsets(a) = coordinator_answer(
            ctx,
            api_key,
            header,
            RequestKind::DeleteShareGroupOffsets(r),
        )
        .await
        {
            resp = a;
        }
    }
    resp.responses.extend(denied.into_iter().map(|t| {
        o::DeleteShareGroupOffsetsResponseTopic::default()
            .with_topic_name(t.topic_name)
            .with_error_code(E::TopicAuthorizationFailed.code())
    }));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_log::AbortedTxn;
    use kmirror_types::ProducerId;

    fn b(first: i64, last: i64, pid: i64, transactional: bool, control: bool) -> ReadBatch {
        ReadBatch {
            range: LogBatch {
                first: Offset(first),
                last: Offset(last),
            },
            end: 0,
            producer_id: pid,
            transactional,
            control,
        }
    }

    #[test]
    fn only_the_aborted_producers_batches_before_their_marker_are_aborted() {
        let batches = [
            b(0, 4, 7, true, false),   // aborted txn of 7
            b(5, 9, 8, true, false),   // committed txn of 8
            b(10, 10, 7, true, true),  // 7's abort marker
            b(11, 11, 8, true, true),  // 8's commit marker
            b(12, 15, 7, true, false), // 7's next (committed) txn
            b(16, 16, 9, false, false),
        ];
        let aborted = [AbortedTxn {
            producer_id: ProducerId(7),
            first_offset: Offset(0),
        }];
        let got: Vec<(i64, i64)> = aborted_batches(&batches, &aborted)
            .iter()
            .map(|r| (r.first.0, r.last.0))
            .collect();
        assert_eq!(got, vec![(0, 4)]);
        assert!(aborted_batches(&batches, &[]).is_empty());
    }
}
