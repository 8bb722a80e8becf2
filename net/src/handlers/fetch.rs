//! Fetch: long polling (max_wait_ms / min_bytes), both isolation levels with the aborted
//! transactions list, topic IDs from v13, fetch sessions (KIP-227, `fetch_session`). Each
//! partition's records come with where they lie on disk, so the connection can sendfile(2)
//! them.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::*;
use kafka_protocol::messages::{FetchRequest, ProducerId as WireProducerId};
use kafka_protocol::ResponseError as E;
use kmirror_engine::{EngineError, IsrChange, Partition, Pending};
use kmirror_log::FileRegion;
use kmirror_types::{NodeId, Offset, TopicPartition};
use uuid::Uuid;

use super::{broker, topic_name};
use crate::authz::{table, Access};
use crate::broker::Ctx;
use crate::cluster::Role;
use crate::errors;
use crate::fetch_session::{changed, Cached, Mode};
use indexmap::IndexMap;

/// Largest `max_wait_ms` honoured (clients normally send 500 ms).
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

struct Want {
    denied: Option<i16>,
    topic: String,
    partition: i32,
    fetch_offset: i64,
    current_leader_epoch: i32,
    max_bytes: usize,
}

struct Got {
    error: i16,
    hw: i64,
    lso: i64,
    log_start: i64,
    aborted: Option<Vec<AbortedTransaction>>,
    records: Bytes,
    file: Option<FileRegion>,
    /// A replica's fetch earned it a place in the ISR: (change, leader epoch, partition epoch)
    /// to propose.
    isr_change: Option<(IsrChange, i32, i32)>,
}

impl Got {
    fn error(code: i16) -> Got {
        Got {
            error: code,
            hw: -1,
            lso: -1,
            log_start: -1,
            aborted: None,
            records: Bytes::new(),
            file: None,
            isr_change: None,
        }
    }
}

/// Reads one partition on its owning core. Registers `watch` for a wake-up on the next
/// append when nothing was available. A replica's fetch (`replica`: its node id) reads up to
/// the log end instead of the high watermark and is recorded in the leader's replica state.
#[allow(clippy::too_many_arguments)]
fn read_partition(
    p: &mut Partition,
    fetch_offset: i64,
    leader_epoch: i32,
    max_bytes: usize,
    read_committed: bool,
    watch: Option<flume::Sender<()>>,
    replica: Option<NodeId>,
    follower_reads: bool,
    now: i64,
) -> Got {
    let current = p.leader_epoch.get();
    if leader_epoch >= 0 && leader_epoch < current {
        return Got::error(E::FencedLeaderEpoch.code());
    }
    if leader_epoch > current {
        return Got::error(E::UnknownLeaderEpoch.code());
    }
    // A consumer may read a follower from Fetch v11 on (`read_all` decided with the metadata).
    if replica.is_none() && !p.is_leader() && !follower_reads {
        return Got::error(E::NotLeaderOrFollower.code());
    }
    let mut isr_change = None;
    if let Some(node) = replica {
        let leo = p.log.log_end_offset().get();
        if fetch_offset >= p.log.log_start_offset().get() && fetch_offset <= leo {
            match p.on_replica_fetch(node, Offset(fetch_offset), now) {
                Ok(change) => {
                    isr_change =
                        change.map(|c| (c, p.leader_epoch.get(), p.partition_epoch().unwrap_or(-1)))
                }
                Err(e) => return Got::error(errors::replica_fetch_code(e, leader_epoch >= 0)),
            }
        } else if !matches!(p.role(), kmirror_engine::Role::Leader(_)) {
            return Got::error(E::NotLeaderOrFollower.code());
        }
    }
    let log = &p.log;
    let hw = log.high_watermark().get();
    let lso = log.last_stable_offset().get();
    let log_start = log.log_start_offset().get();
    let leo = log.log_end_offset().get();
    let mut got = Got {
        error: 0,
        hw,
        lso,
        log_start,
        aborted: read_committed.then(Vec::new),
        records: Bytes::new(),
        file: None,
        isr_change,
    };
    if fetch_offset < log_start || fetch_offset > leo {
        got.error = E::OffsetOutOfRange.code();
        return got;
    }
    let upper = match (replica, read_committed) {
        (Some(_), _) => leo,
        (None, true) => lso,
        (None, false) => hw,
    };
    if fetch_offset < upper {
        match log.read(Offset(fetch_offset), max_bytes, Offset(upper)) {
            Ok(r) => {
                got.records = r.records;
                got.file = r.file;
            }
            Err(e) => {
                got.error = errors::log_error_code(&e);
                return got;
            }
        }
        if read_committed && !got.records.is_empty() {
            got.aborted = Some(
                log.aborted_transactions(Offset(fetch_offset), Offset(upper))
                    .into_iter()
                    .map(|a| {
                        AbortedTransaction::default()
                            .with_producer_id(WireProducerId(a.producer_id.0))
                            .with_first_offset(a.first_offset.get())
                    })
                    .collect(),
            );
        }
    }
    if got.records.is_empty() {
        if let Some(w) = watch {
            p.watch(w);
        }
    }
    got
}

async fn read_all(
    ctx: &Ctx,
    wants: &[Want],
    follower_reads: bool,
    read_committed: bool,
    watch: Option<&flume::Sender<()>>,
    replica: Option<NodeId>,
) -> Vec<Got> {
    let now = kmirror_engine::now_ms();
    let meta = ctx.meta();
    let mut pending: Vec<Result<Pending<Result<Got, EngineError>>, EngineError>> =
        Vec::with_capacity(wants.len());
    for w in wants {
        if w.topic.is_empty() || w.denied.is_some() {
            pending.push(Err(EngineError::ShuttingDown)); // placeholder, replaced below
            continue;
        }
        let tp = TopicPartition::new(w.topic.clone(), w.partition);
        // As Kafka's fetchOnlyFromLeader: a consumer Fetch from v11 on (it carries client
        // metadata, KIP-392) may read a follower's log up to its high watermark; before v11,
        // or on a broker that holds no replica, NOT_LEADER_OR_FOLLOWER (which also ends a
        // long poll at once).
        let refused = match ctx.cluster().role(&meta, &tp) {
            Some(Role::Follower { .. }) => !follower_reads,
            Some(Role::NotReplica { .. }) => true,
            Some(Role::Leader { .. }) | None => false,
        };
        if refused {
            pending.push(Err(EngineError::NotOwner(tp)));
            continue;
        }
        let (off, ep, mb) = (w.fetch_offset, w.current_leader_epoch, w.max_bytes);
        let watch = watch.cloned();
        pending.push(
            ctx.router()
                .submit_partition(tp, move |p| {
                    read_partition(
                        p,
                        off,
                        ep,
                        mb,
                        read_committed,
                        watch,
                        replica,
                        follower_reads,
                        now,
                    )
                })
                .await,
        );
    }
    let mut out = Vec::with_capacity(wants.len());
    for (w, p) in wants.iter().zip(pending) {
        if let Some(code) = w.denied {
            out.push(Got::error(code));
            continue;
        }
        if w.topic.is_empty() {
            out.push(Got::error(E::UnknownTopicId.code()));
            continue;
        }
        let r = match p {
            Ok(p) => p.wait().await.and_then(|r| r),
            Err(e) => Err(e),
        };
        out.push(match r {
            Ok(g) => g,
            Err(e) => Got::error(errors::engine_error_code(&e)),
        });
    }
    out
}

/// One requested partition before session handling: its resolved name (None: unknown topic
/// id), how it was named on the wire, and the fetch position.
struct Asked {
    name: Option<String>,
    wire: kafka_protocol::messages::TopicName,
    topic_id: Uuid,
    partition: i32,
    fetch_offset: i64,
    current_leader_epoch: i32,
    max_bytes: i32,
}

/// The request's partitions with names resolved (topic IDs from v13), in request order.
fn asked(ctx: &Ctx, version: i16, req: &FetchRequest) -> Vec<Asked> {
    let meta = ctx.meta();
    let mut out = Vec::new();
    for t in &req.topics {
        let name = if version >= 13 {
            meta.described_by_id(t.topic_id).map(|m| m.name.clone())
        } else {
            meta.described(t.topic.as_str())
                .map(|m| m.name.clone())
                .or_else(|| Some(t.topic.to_string()))
        };
        let wire = match &name {
            Some(n) => topic_name(n),
            None => t.topic.clone(),
        };
        for p in &t.partitions {
            out.push(Asked {
                name: name.clone(),
                wire: wire.clone(),
                topic_id: t.topic_id,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                current_leader_epoch: p.current_leader_epoch,
                max_bytes: p.partition_max_bytes,
            });
        }
    }
    out
}

/// Names of the partitions an incremental request forgets.
fn forgotten(ctx: &Ctx, version: i16, req: &FetchRequest) -> Vec<(String, i32)> {
    let meta = ctx.meta();
    let mut out = Vec::new();
    for t in &req.forgotten_topics_data {
        let name = if version >= 13 {
            meta.described_by_id(t.topic_id).map(|m| m.name.to_string())
        } else {
            Some(t.topic.to_string())
        };
        if let Some(n) = name {
            out.extend(t.partitions.iter().map(|p| (n.clone(), *p)));
        }
    }
    out
}

/// How a Fetch is authorized: a consumer per topic (READ), a follower once for the whole
/// request (CLUSTER_ACTION on the cluster; whether it was denied).
#[derive(Clone, Copy)]
enum Auth {
    Consumer,
    Follower(bool),
}

fn want(access: &Access<'_>, auth: Auth, version: i16, a: &Asked) -> Want {
    // Unauthorized topics are answered TOPIC_AUTHORIZATION_FAILED without a read.
    let denied = match (auth, &a.name) {
        (Auth::Follower(false), _) => None,
        (Auth::Follower(true), _) => Some(E::TopicAuthorizationFailed.code()),
        (Auth::Consumer, Some(n)) => access.check(table::FETCH, n).err(),
        (Auth::Consumer, None) if version >= 13 => None,
        (Auth::Consumer, None) => access.check(table::FETCH, a.wire.as_str()).err(),
    };
    Want {
        denied,
        topic: a.name.clone().unwrap_or_default(),
        partition: a.partition,
        fetch_offset: a.fetch_offset,
        current_leader_epoch: a.current_leader_epoch,
        max_bytes: a.max_bytes.max(0) as usize,
    }
}

fn cached(a: &Asked) -> Cached {
    Cached {
        topic_id: a.topic_id,
        fetch_offset: a.fetch_offset,
        current_leader_epoch: a.current_leader_epoch,
        max_bytes: a.max_bytes,
        sent: None,
    }
}

/// The follower broker a Fetch comes from (replica id >= 0; v15+: ReplicaState.replica_id,
/// KIP-903), or None for a consumer.
fn follower_replica_id(version: i16, req: &FetchRequest) -> Option<NodeId> {
    let id = if version >= 15 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    (id >= 0).then_some(NodeId(id))
}

/// The response, and per partition (in response order) where its records lie on disk.
/// With a fetch session (v7+, KIP-227) an incremental request names only what changed, and
/// the response carries only partitions with news. A follower's Fetch reads up to the log
/// end and moves its position in the leader's replica state.
pub(crate) async fn fetch(
    ctx: &Ctx,
    access: &Access<'_>,
    version: i16,
    req: FetchRequest,
) -> (FetchResponse, Vec<Option<FileRegion>>) {
    let replica = follower_replica_id(version, &req);
    let read_committed = req.isolation_level == 1;
    let mode = if version >= 7 {
        ctx.fetch_sessions
            .borrow_mut()
            .begin(req.session_id, req.session_epoch)
    } else {
        Ok(Mode::Sessionless)
    };
    let mode = match mode {
        Ok(m) => m,
        Err(code) => {
            return (
                FetchResponse::default()
                    .with_error_code(code)
                    .with_session_id(0),
                Vec::new(),
            )
        }
    };
    let mut asked = asked(ctx, version, &req);
    if let Mode::Incremental(id) = mode {
        // The session's partitions, updated by what the request names, are what is read.
        let gone = forgotten(ctx, version, &req);
        let mut sessions = ctx.fetch_sessions.borrow_mut();
        let session = sessions.get_mut(id).expect("begin found the session");
        for k in gone {
            session.partitions.shift_remove(&k);
        }
        let mut unknown = Vec::new();
        for a in asked.drain(..) {
            match &a.name {
                Some(n) => {
                    let key = (n.clone(), a.partition);
                    let sent = session.partitions.get(&key).and_then(|c| c.sent);
                    let mut c = cached(&a);
                    c.sent = sent;
                    session.partitions.insert(key, c);
                }
                None => unknown.push(a),
            }
        }
        asked = session
            .partitions
            .iter()
            .map(|((name, partition), c)| Asked {
                name: Some(name.clone()),
                wire: topic_name(name),
                topic_id: c.topic_id,
                partition: *partition,
                fetch_offset: c.fetch_offset,
                current_leader_epoch: c.current_leader_epoch,
                max_bytes: c.max_bytes,
            })
            .collect();
        asked.extend(unknown);
    }
    // No partition reads more than the whole response may carry (Kafka's fetch.max.bytes):
    // a read still returns one whole batch if the first is larger.
    let response_max = if req.max_bytes <= 0 {
        usize::MAX
    } else {
        req.max_bytes as usize
    };
    let auth = match replica {
        Some(_) => Auth::Follower(access.check_cluster(table::REPLICA_CLUSTER_ACTION).is_err()),
        None => Auth::Consumer,
    };
    let wants: Vec<Want> = asked
        .iter()
        .map(|a| {
            let mut w = want(access, auth, version, a);
            w.max_bytes = w.max_bytes.min(response_max);
            w
        })
        .collect();
    let max_wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    let deadline = Instant::now() + max_wait;
    let min_bytes = req.min_bytes.max(0) as usize;
    let (wtx, wrx) = flume::bounded::<()>(1);
    let waiting_allowed = !max_wait.is_zero() && min_bytes > 0;
    let mut got = loop {
        let mut got = read_all(
            ctx,
            &wants,
            version >= 11,
            read_committed,
            waiting_allowed.then_some(&wtx),
            replica,
        )
        .await;
        for (g, w) in got.iter_mut().zip(&wants) {
            if let Some((change, le, pe)) = g.isr_change.take() {
                let tp = TopicPartition::new(w.topic.clone(), w.partition);
                crate::replication::propose_isr_change(ctx, tp, change, le, pe);
            }
        }
        let bytes: usize = got.iter().map(|g| g.records.len()).sum();
        // A refused partition does not end the wait for the others (it never changes).
        let any_error = got
            .iter()
            .zip(&wants)
            .any(|(g, w)| g.error != 0 && w.denied.is_none());
        let now = Instant::now();
        if !waiting_allowed
            || bytes >= min_bytes
            || any_error
            || now >= deadline
            || ctx.core.stop.is_stopped()
        {
            break got;
        }
        let remaining = deadline - now;
        futures_lite::future::or(
            async {
                let _ = wrx.recv_async().await;
            },
            futures_lite::future::or(
                async {
                    glommio::timer::sleep(remaining).await;
                },
                ctx.core.stop.stopped(),
            ),
        )
        .await;
    };
    // Response-level max_bytes: the first non-empty partition is always returned whole
    // (so a big batch can make progress); later ones only while under the limit.
    let max_bytes = if req.max_bytes <= 0 {
        usize::MAX
    } else {
        req.max_bytes as usize
    };
    let mut total = 0usize;
    for g in got.iter_mut() {
        if g.records.is_empty() {
            continue;
        }
        if total > 0 && total + g.records.len() > max_bytes {
            g.records = Bytes::new();
            g.file = None;
            continue;
        }
        total += g.records.len();
    }
    // Which partitions go into the response, and the session bookkeeping.
    let session_id = {
        let mut sessions = ctx.fetch_sessions.borrow_mut();
        match mode {
            Mode::Sessionless => 0,
            Mode::Open => {
                let mut parts = IndexMap::new();
                for (a, g) in asked.iter().zip(&got) {
                    if let Some(n) = &a.name {
                        let mut c = cached(a);
                        changed(&mut c, g.error, false, (g.hw, g.lso, g.log_start));
                        parts.insert((n.clone(), a.partition), c);
                    }
                }
                sessions.open(parts)
            }
            Mode::Incremental(id) => {
                // While this request waited, the client may have closed or replaced the
                // session from another connection, the cache may have evicted it, or a
                // concurrent request with the same epoch may have been served: the client
                // then starts over, as after any session error.
                let epoch = req.session_epoch;
                let Some(session) = sessions.get_mut(id).filter(|s| s.next_epoch == epoch) else {
                    let code = if sessions.get_mut(id).is_some() {
                        E::InvalidFetchSessionEpoch.code()
                    } else {
                        E::FetchSessionIdNotFound.code()
                    };
                    return (
                        FetchResponse::default()
                            .with_error_code(code)
                            .with_session_id(0),
                        Vec::new(),
                    );
                };
                let mut keep = Vec::with_capacity(got.len());
                for (a, g) in asked.iter().zip(&got) {
                    let news = match &a.name {
                        Some(n) => session
                            .partitions
                            .get_mut(&(n.clone(), a.partition))
                            .is_none_or(|c| {
                                changed(
                                    c,
                                    g.error,
                                    !g.records.is_empty(),
                                    (g.hw, g.lso, g.log_start),
                                )
                            }),
                        None => true,
                    };
                    keep.push(news);
                }
                session.advance();
                let mut k = keep.into_iter();
                let pairs: Vec<(Asked, Got)> = asked
                    .drain(..)
                    .zip(got.drain(..))
                    .filter(|_| k.next().unwrap_or(true))
                    .collect();
                for (a, g) in pairs {
                    asked.push(a);
                    got.push(g);
                }
                id
            }
        }
    };
    // Group by topic, keeping first-seen order.
    let mut topics: IndexMap<(String, Uuid), Vec<(i32, Got)>> = IndexMap::new();
    for (a, g) in asked.iter().zip(got) {
        topics
            .entry((a.wire.to_string(), a.topic_id))
            .or_default()
            .push((a.partition, g));
    }
    let mut responses = Vec::with_capacity(topics.len());
    let mut files = Vec::with_capacity(asked.len());
    let meta = ctx.meta();
    let mut leaders = Vec::new();
    for ((name, id), parts) in topics {
        let parts = parts
            .into_iter()
            .map(|(partition, g)| {
                files.push(g.file);
                // KIP-951 (v12+): a NOT_LEADER answer names the current leader.
                let current = (g.error == E::NotLeaderOrFollower.code() && version >= 12)
                    .then(|| ctx.not_leader(&meta, &name, partition))
                    .flatten();
                let mut leader = LeaderIdAndEpoch::default();
                if let Some((id, epoch)) = current {
                    leaders.push(id);
                    leader = leader.with_leader_id(broker(id)).with_leader_epoch(epoch);
                }
                PartitionData::default()
                    .with_current_leader(leader)
                    .with_partition_index(partition)
                    .with_error_code(g.error)
                    .with_high_watermark(g.hw)
                    .with_last_stable_offset(g.lso)
                    .with_log_start_offset(g.log_start)
                    .with_aborted_transactions(g.aborted)
                    .with_preferred_read_replica(broker(-1))
                    .with_records(Some(g.records))
            })
            .collect();
        responses.push(
            FetchableTopicResponse::default()
                .with_topic(topic_name(&name))
                .with_topic_id(id)
                .with_partitions(parts),
        );
    }
    // Node endpoints exist from v16 on.
    let endpoints = if version >= 16 {
        ctx.node_endpoints(&meta, leaders)
            .into_iter()
            .map(|b| {
                NodeEndpoint::default()
                    .with_node_id(broker(b.id))
                    .with_host(kafka_protocol::protocol::StrBytes::from_string(b.host))
                    .with_port(b.port)
                    .with_rack(b.rack.map(kafka_protocol::protocol::StrBytes::from_string))
            })
            .collect()
    } else {
        Vec::new()
    };
    let resp = FetchResponse::default()
        .with_session_id(session_id)
        .with_responses(responses)
        .with_node_endpoints(endpoints);
    (resp, files)
}
