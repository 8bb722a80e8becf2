//! Follower-side partition replication: Kafka's ReplicaFetcherThread on kmirror's cores. A
//! mirror's partition fetcher follows a remote cluster's leader; this one follows a leader
//! inside the cluster, with the same client stack ([`crate::client::AsyncConnection`]) and
//! the same verbatim append (the leader's batches at their own offsets, never re-encoded).
//!
//! Owns: per core, one supervisor task ([`run`], started by the node beside the leader side)
//! that finds the core's partitions in the follower role (set by [`super::apply_roles`]
//! from the published assignments) and, per leader
//! broker, one fetcher task carrying all of them in one Fetch with this node's replica id
//! (`replica_id` below v15, `ReplicaState` from v15, KIP-903). So there is one fetcher per
//! (core, leader): with one core exactly Kafka's default `num.replica.fetchers=1`; with more,
//! each core appends to its own partitions without a cross-core hop.
//!
//! Before fetching at a new leader epoch, a follower asks the leader for the end offset of
//! its own latest epoch (OffsetsForLeaderEpoch) and truncates to the answer (KIP-101 /
//! KIP-279); then it fetches from its log end. Its high watermark is min(leader's, own log
//! end). OFFSET_OUT_OF_RANGE: below the leader's log start it restarts there, otherwise it
//! truncates again.
//!
//! Must not: touch a partition except in a job on its owning core (all jobs here run on the
//! fetcher's own core, inline); hold a shard borrow across an await.
//!
//! The connection goes to the leader's inter-broker listener with the broker's own TLS and
//! SASL settings ([`crate::interbroker::InterBroker::connect`]; `serve
//! --inter-broker-listener-name`, Kafka's `inter.broker.listener.name`).
//! Gaps: no fetch session (each Fetch is a full one), no replication throttle.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_engine::{Role, Router};
use kmirror_types::{LeaderEpoch, Offset, TopicPartition};
use uuid::Uuid;

use crate::broker::Ctx;
use crate::client::{AsyncConnection, ClientError};
use crate::keys::error as code;

/// Kafka's replica.fetch.wait.max.ms, replica.fetch.min.bytes, replica.fetch.max.bytes,
/// replica.fetch.response.max.bytes.
const MAX_WAIT_MS: i32 = 500;
const MIN_BYTES: i32 = 1;
const PARTITION_MAX_BYTES: i32 = 1 << 20;
const RESPONSE_MAX_BYTES: i32 = 10 << 20;
/// Kafka's replica.fetch.backoff.ms.
const BACKOFF: Duration = Duration::from_millis(1000);
const SHORT_BACKOFF: Duration = Duration::from_millis(50);
/// A leader's fetcher with nothing to follow for this long exits.
const IDLE_EXIT: Duration = Duration::from_secs(5);

/// One followed partition as its owning core sees it now.
#[derive(Debug, Clone)]
struct Followed {
    tp: TopicPartition,
    topic_id: Uuid,
    epoch: i32,
    log_end: i64,
    log_start: i64,
    truncated: bool,
    latest_epoch: Option<i32>,
    leader: i32,
}

async fn followed(router: &Router, core: usize, leader: Option<i32>) -> Vec<Followed> {
    router
        .run_on(core, move |s| {
            s.open_partitions()
                .filter_map(|p| match p.role() {
                    Role::Follower(f) if leader.is_none_or(|l| f.leader.0 == l) => Some(Followed {
                        tp: p.tp.clone(),
                        topic_id: Uuid::from_u128(p.topic_id),
                        epoch: p.leader_epoch.get(),
                        log_end: p.log.log_end_offset().get(),
                        log_start: p.log.log_start_offset().get(),
                        truncated: f.truncated,
                        leader: f.leader.0,
                        latest_epoch: p.log.latest_epoch().map(|e| e.get()),
                    }),
                    _ => None,
                })
                .collect()
        })
        .await
        .unwrap_or_default()
}

/// The follower side of in-cluster replication on this core: one fetcher task per leader
/// this core follows partitions from, started when the first such partition appears; ends
/// when the engine stops.
pub(crate) async fn run(ctx: Rc<Ctx>) {
    let core = ctx.core.core;
    let running: Rc<RefCell<HashSet<i32>>> = Rc::default();
    while !ctx.core.stop.is_stopped() {
        let leaders: HashSet<i32> = followed(ctx.router(), core, None)
            .await
            .into_iter()
            .map(|f| f.leader)
            .collect();
        for leader in leaders {
            // -1: no leader elected yet; wait for one.
            if leader < 0 || !running.borrow_mut().insert(leader) {
                continue;
            }
            let (ctx, run) = (ctx.clone(), running.clone());
            glommio::spawn_local(async move {
                follow(&ctx, leader).await;
                run.borrow_mut().remove(&leader);
            })
            .detach();
        }
        futures_lite::future::or(
            async {
                glommio::timer::sleep(Duration::from_millis(100)).await;
            },
            ctx.core.stop.stopped(),
        )
        .await;
    }
}

/// The address of `leader`'s inter-broker listener.
fn leader_addr(ctx: &Ctx, leader: i32) -> Option<String> {
    ctx.config().inter_broker.peer_addr(&ctx.meta(), leader)
}

/// The fetch loop for the partitions this core follows from `leader`.
async fn follow(ctx: &Ctx, leader: i32) {
    let (router, core, node) = (ctx.router(), ctx.core.core, ctx.node_id());
    let client_id = format!("kmirror-{node}-replica-fetcher-{core}");
    let mut conn: Option<AsyncConnection> = None;
    let mut idle_since: Option<std::time::Instant> = None;
    tracing::info!(core, leader, "replica fetcher started");
    while !ctx.core.stop.is_stopped() {
        let parts = followed(router, core, Some(leader)).await;
        if parts.is_empty() {
            let since = *idle_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= IDLE_EXIT {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(100)).await;
            continue;
        }
        idle_since = None;
        // KIP-368: replace a SASL session before the leader would close it.
        if conn.as_ref().is_some_and(|c| c.session_expiring()) {
            conn = None;
        }
        if conn.is_none() {
            let Some(addr) = leader_addr(ctx, leader) else {
                glommio::timer::sleep(BACKOFF).await;
                continue;
            };
            match ctx.config().inter_broker.connect(&addr, &client_id).await {
                Ok(c) => conn = Some(c),
                Err(e) if e.is_auth_failure() => {
                    tracing::warn!(leader, %addr, error = %e, "replica fetcher refused by the leader (inter-broker credentials)");
                    glommio::timer::sleep(BACKOFF).await;
                    continue;
                }
                Err(e) => {
                    tracing::debug!(leader, %addr, error = %e, "replica fetcher cannot connect");
                    glommio::timer::sleep(BACKOFF).await;
                    continue;
                }
            }
        }
        let c = conn.as_mut().expect("connected above");
        let (todo, ready): (Vec<Followed>, Vec<Followed>) =
            parts.into_iter().partition(|p| !p.truncated);
        let mut progress = true;
        let r = async {
            if !todo.is_empty() {
                truncate(c, node, &todo, router, core).await?;
            }
            if ready.is_empty() {
                progress = false;
                return Ok(());
            }
            progress = fetch_once(c, node, &ready, router, core).await?;
            Ok::<(), ClientError>(())
        }
        .await;
        if let Err(e) = r {
            if e.is_auth_failure() {
                tracing::warn!(leader, error = %e, "replica fetch refused by the leader (the broker's principal needs CLUSTER_ACTION: list it in --super-users)");
            } else {
                tracing::debug!(leader, error = %e, "replica fetch failed; reconnecting");
            }
            conn = None;
            glommio::timer::sleep(BACKOFF).await;
        } else if !progress {
            glommio::timer::sleep(SHORT_BACKOFF).await;
        }
    }
    tracing::info!(core, leader, "replica fetcher stopped");
}

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

/// Where a follower cuts its log given the leader's OffsetsForLeaderEpoch answer
/// (`leader_epoch`, `leader_end`) for the follower's latest epoch: Kafka's
/// getOffsetTruncationState. Returns (offset, complete); not complete = ask again with the
/// epoch the log then ends in. `latest_start` is where the follower's latest epoch begins.
fn truncation_point(
    leader_epoch: i32,
    leader_end: i64,
    log_end: i64,
    hw: i64,
    latest_start: Option<i64>,
    own_end_for: impl Fn(i32) -> Option<(i32, i64)>,
) -> (i64, bool) {
    if leader_end < 0 {
        // The leader knows no epoch at or below ours: keep what is committed, as Kafka's
        // follower does. Not past where our latest epoch begins, though: the leader holds no
        // batch of that epoch. A mirror leader's failback truncation drops committed records
        // (below the high watermark) written at an epoch above every epoch of the source's
        // batches; cut them and ask again with the epoch before.
        return match latest_start {
            Some(s) if s < hw.min(log_end) => (s, false),
            _ => (hw.min(log_end), true),
        };
    }
    if leader_epoch < 0 {
        return (leader_end.min(log_end), true);
    }
    match own_end_for(leader_epoch) {
        None => (leader_end.min(log_end), true),
        Some((e, end)) if e == leader_epoch => (leader_end.min(end).min(log_end), true),
        Some((_, end)) => (end.min(log_end), false),
    }
}

/// One partition's truncation: the leader's (epoch, end offset) answer, or None for an
/// empty log (nothing to diverge).
struct Cut {
    tp: TopicPartition,
    epoch: i32,
    answer: Option<(i32, i64)>,
}

/// OffsetsForLeaderEpoch to the leader for `parts`, then the truncation on the core.
async fn truncate(
    c: &mut AsyncConnection,
    node: i32,
    parts: &[Followed],
    router: &Router,
    core: usize,
) -> Result<(), ClientError> {
    let (asks, empty): (Vec<&Followed>, Vec<&Followed>) =
        parts.iter().partition(|p| p.latest_epoch.is_some());
    let mut cuts: Vec<Cut> = empty
        .iter()
        .map(|p| Cut {
            tp: p.tp.clone(),
            epoch: p.epoch,
            answer: None,
        })
        .collect();
    if !asks.is_empty() {
        let mut topics: BTreeMap<&str, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
        for p in &asks {
            topics.entry(p.tp.topic.as_str()).or_default().push(
                OffsetForLeaderPartition::default()
                    .with_partition(p.tp.partition)
                    .with_current_leader_epoch(p.epoch)
                    .with_leader_epoch(p.latest_epoch.unwrap_or(-1)),
            );
        }
        let req = OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(node))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetForLeaderTopic::default()
                            .with_topic(topic_name(t))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let (_, resp) = c
            .send_with::<OffsetForLeaderEpochRequest>(&req, 3, i16::MAX, Duration::ZERO)
            .await?;
        for t in resp.topics {
            for r in t.partitions {
                let Some(p) = asks
                    .iter()
                    .find(|p| p.tp.topic == t.topic.as_str() && p.tp.partition == r.partition)
                else {
                    continue;
                };
                if r.error_code != code::NONE {
                    tracing::debug!(tp = %p.tp, code = r.error_code, "OffsetsForLeaderEpoch refused");
                    continue;
                }
                cuts.push(Cut {
                    tp: p.tp.clone(),
                    epoch: p.epoch,
                    answer: Some((r.leader_epoch, r.end_offset)),
                });
            }
        }
    }
    let _ = router
        .run_on(core, move |s| {
            for cut in cuts {
                let Ok(p) = s.partition(&cut.tp) else {
                    continue;
                };
                // Still following at the epoch this answer was for?
                if p.is_leader() || p.leader_epoch != LeaderEpoch(cut.epoch) {
                    continue;
                }
                let log = &p.log;
                let (at, complete) = match cut.answer {
                    None => (log.log_end_offset().get(), true),
                    Some((le, end)) => truncation_point(
                        le,
                        end,
                        log.log_end_offset().get(),
                        log.high_watermark().get(),
                        log.epoch_entries().last().map(|(_, s)| s.get()),
                        |e| {
                            log.end_offset_for_epoch(LeaderEpoch(e))
                                .map(|(e, o)| (e.get(), o.get()))
                        },
                    ),
                };
                match p.truncate_as_follower(Offset(at), complete) {
                    Ok(()) => tracing::info!(tp = %cut.tp, at, complete, "follower truncated for the leader epoch"),
                    Err(e) => tracing::error!(tp = %cut.tp, error = %e, "follower truncation failed"),
                }
            }
        })
        .await;
    Ok(())
}

/// One Fetch for `parts` and the appends. Returns whether any partition got records.
async fn fetch_once(
    c: &mut AsyncConnection,
    node: i32,
    parts: &[Followed],
    router: &Router,
    core: usize,
) -> Result<bool, ClientError> {
    let build = |v: i16| {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for p in parts {
            let fp = FetchPartition::default()
                .with_partition(p.tp.partition)
                .with_current_leader_epoch(p.epoch)
                .with_fetch_offset(p.log_end)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(p.log_start)
                .with_partition_max_bytes(PARTITION_MAX_BYTES);
            let same = |t: &FetchTopic| {
                if v >= 13 {
                    t.topic_id == p.topic_id
                } else {
                    t.topic.as_str() == p.tp.topic
                }
            };
            match topics.iter_mut().find(|t| same(t)) {
                Some(t) => t.partitions.push(fp),
                None => {
                    let t = if v >= 13 {
                        FetchTopic::default().with_topic_id(p.topic_id)
                    } else {
                        FetchTopic::default().with_topic(topic_name(&p.tp.topic))
                    };
                    topics.push(t.with_partitions(vec![fp]));
                }
            }
        }
        let req = FetchRequest::default()
            .with_max_wait_ms(MAX_WAIT_MS)
            .with_min_bytes(MIN_BYTES)
            .with_max_bytes(RESPONSE_MAX_BYTES)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(topics);
        if v >= 15 {
            req.with_replica_state(
                ReplicaState::default()
                    .with_replica_id(BrokerId(node))
                    .with_replica_epoch(-1),
            )
        } else {
            req.with_replica_id(BrokerId(node))
        }
    };
    let wait = Duration::from_millis(MAX_WAIT_MS as u64);
    let (v, resp) = c
        .send_built::<FetchRequest>(4, i16::MAX, wait, build)
        .await?;
    if resp.error_code == code::CLUSTER_AUTHORIZATION_FAILED {
        // The broker's principal lacks CLUSTER_ACTION (not in --super-users): an operator must
        // act, so the reconnect backs off and the refusal is logged (once per attempt).
        return Err(ClientError::Kafka {
            api: "Fetch",
            code: resp.error_code.into(),
            message: None,
        });
    }
    if resp.error_code != code::NONE {
        tracing::debug!(code = resp.error_code, "replica Fetch refused");
        return Ok(false);
    }
    let mut got = Vec::new();
    for t in resp.responses {
        for pd in t.partitions {
            let Some(p) = parts.iter().find(|p| {
                p.tp.partition == pd.partition_index
                    && if v >= 13 {
                        p.topic_id == t.topic_id
                    } else {
                        p.tp.topic == t.topic.as_str()
                    }
            }) else {
                continue;
            };
            got.push((p.clone(), pd));
        }
    }
    // A leader refuses a follower without CLUSTER_ACTION with TOPIC_AUTHORIZATION_FAILED on
    // every partition, as Kafka does.
    if !got.is_empty()
        && got
            .iter()
            .all(|(_, pd)| pd.error_code == code::TOPIC_AUTHORIZATION_FAILED)
    {
        return Err(ClientError::Kafka {
            api: "Fetch",
            code: code::TOPIC_AUTHORIZATION_FAILED.into(),
            message: None,
        });
    }
    let progressed = router
        .run_on(core, move |s| {
            let mut progressed = false;
            for (f, pd) in got {
                let Ok(p) = s.partition(&f.tp) else {
                    continue;
                };
                // Answers for a fetch position or epoch that moved meanwhile are dropped.
                if p.is_leader()
                    || p.leader_epoch.get() != f.epoch
                    || p.log.log_end_offset().get() != f.log_end
                {
                    continue;
                }
                match pd.error_code {
                    code::NONE => {
                        let records = pd.records.unwrap_or_default();
                        let whole = kmirror_log::batch::whole_batches(&records)
                            .map(|w| w.bytes)
                            .unwrap_or_default();
                        progressed |= !whole.is_empty();
                        let (hw, start) = (Offset(pd.high_watermark), Offset(pd.log_start_offset));
                        if let Err(e) = p.append_follower(whole, hw, start) {
                            tracing::warn!(tp = %f.tp, error = %e, "follower append failed");
                        }
                    }
                    code::OFFSET_OUT_OF_RANGE if f.log_end < pd.log_start_offset => {
                        if let Err(e) = p.restart_follower_at(Offset(pd.log_start_offset)) {
                            tracing::warn!(tp = %f.tp, error = %e, "follower restart failed");
                        }
                    }
                    code::OFFSET_OUT_OF_RANGE => p.retruncate_as_follower(),
                    other => {
                        tracing::debug!(tp = %f.tp, code = other, "replica fetch partition error")
                    }
                }
            }
            progressed
        })
        .await
        .unwrap_or(false);
    Ok(progressed)
}

#[cfg(test)]
mod tests {
    use super::truncation_point;

    /// The follower's epoch cache: epoch 1 from 0, epoch 3 from 10, log end 15.
    fn own(e: i32) -> Option<(i32, i64)> {
        match e {
            i32::MIN..=0 => None,
            1..=2 => Some((1, 10)),
            _ => Some((3, 15)),
        }
    }

    #[test]
    fn truncation_follows_kip_279() {
        // The leader had epoch 3 too and it ended at 12: cut there.
        assert_eq!(truncation_point(3, 12, 15, 8, Some(10), own), (12, true));
        // The leader's epoch 3 ends beyond ours: nothing to cut.
        assert_eq!(truncation_point(3, 20, 15, 8, Some(10), own), (15, true));
        // The leader never had epoch 3; its largest below is 2, ending at 11. We have no
        // epoch 2: our largest below is 1, ending at 10: cut there and ask again.
        assert_eq!(truncation_point(2, 11, 15, 8, Some(10), own), (10, false));
        // Then asked for epoch 1, the leader says epoch 1 ends at 10: done at 10.
        assert_eq!(truncation_point(1, 10, 10, 8, Some(10), own), (10, true));
        // The leader has no epoch at or below ours (UNDEFINED offset): keep the HW.
        assert_eq!(truncation_point(-1, -1, 15, 8, Some(10), own), (8, true));
        // The same with the HW above the start of our epoch 3 (a mirror leader's failback
        // truncation dropped committed records of an epoch it never had): cut to where
        // epoch 3 begins and ask again.
        assert_eq!(truncation_point(-1, -1, 15, 12, Some(10), own), (10, false));
        // An answer without an epoch: the smaller end.
        assert_eq!(truncation_point(-1, 9, 15, 8, Some(10), own), (9, true));
        // We have nothing at or below the leader's epoch.
        assert_eq!(truncation_point(0, 4, 15, 8, Some(10), own), (4, true));
    }
}
