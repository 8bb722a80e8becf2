//! Fetch: long polling (max_wait_ms / min_bytes), both isolation levels with the aborted
//! transactions list, topic IDs from v13. Fetch sessions are declined (session id 0), which
//! Kafka clients accept by sending full fetch requests. Each partition's records come with
//! where they lie on disk, so the connection can sendfile(2) them.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::*;
use kafka_protocol::messages::{FetchRequest, ProducerId as WireProducerId};
use kafka_protocol::ResponseError as E;
use kmirror_engine::{EngineError, Partition, Pending};
use kmirror_log::FileRegion;
use kmirror_types::{Offset, TopicPartition};
use uuid::Uuid;

use super::{broker, topic_name};
use crate::authz::{table, Access};
use crate::broker::Ctx;
use crate::errors;

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
        }
    }
}

/// Reads one partition on its owning core. Registers `watch` for a wake-up on the next
/// append when nothing was available.
fn read_partition(
    p: &mut Partition,
    fetch_offset: i64,
    leader_epoch: i32,
    max_bytes: usize,
    read_committed: bool,
    watch: Option<flume::Sender<()>>,
) -> Got {
    let current = p.leader_epoch.get();
    if leader_epoch >= 0 && leader_epoch < current {
        return Got::error(E::FencedLeaderEpoch.code());
    }
    if leader_epoch > current {
        return Got::error(E::UnknownLeaderEpoch.code());
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
    };
    if fetch_offset < log_start || fetch_offset > leo {
        got.error = E::OffsetOutOfRange.code();
        return got;
    }
    let upper = if read_committed { lso } else { hw };
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
    read_committed: bool,
    watch: Option<&flume::Sender<()>>,
) -> Vec<Got> {
    let mut pending: Vec<Result<Pending<Result<Got, EngineError>>, EngineError>> =
        Vec::with_capacity(wants.len());
    for w in wants {
        if w.topic.is_empty() || w.denied.is_some() {
            pending.push(Err(EngineError::ShuttingDown)); // placeholder, replaced below
            continue;
        }
        let tp = TopicPartition::new(w.topic.clone(), w.partition);
        let (off, ep, mb) = (w.fetch_offset, w.current_leader_epoch, w.max_bytes);
        let watch = watch.cloned();
        pending.push(
            ctx.router()
                .submit_partition(tp, move |p| {
                    read_partition(p, off, ep, mb, read_committed, watch)
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

/// The response, and per partition (in response order) where its records lie on disk.
pub async fn fetch(
    ctx: &Ctx,
    access: &Access<'_>,
    version: i16,
    req: FetchRequest,
) -> (FetchResponse, Vec<Option<FileRegion>>) {
    let meta = ctx.meta();
    let read_committed = req.isolation_level == 1;
    // Resolve names (topic IDs from v13) and keep the request's topic grouping.
    let mut wants = Vec::new();
    let mut groups: Vec<(kafka_protocol::messages::TopicName, Uuid, usize)> = Vec::new();
    for t in &req.topics {
        let name = if version >= 13 {
            meta.topic_by_id(t.topic_id).map(|m| m.name.clone())
        } else {
            meta.topics
                .get(t.topic.as_str())
                .map(|m| m.name.clone())
                .or_else(|| Some(t.topic.to_string()))
        };
        // Unauthorized topics are answered TOPIC_AUTHORIZATION_FAILED without a read.
        let denied = match &name {
            Some(n) if version >= 13 => access.check(table::FETCH, n).err(),
            _ if version >= 13 => None,
            _ => access.check(table::FETCH, t.topic.as_str()).err(),
        };
        for p in &t.partitions {
            wants.push(Want {
                denied,
                topic: name.clone().unwrap_or_default(),
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                current_leader_epoch: p.current_leader_epoch,
                max_bytes: p.partition_max_bytes.max(0) as usize,
            });
        }
        let wire_name = match &name {
            Some(n) => topic_name(n),
            None => t.topic.clone(),
        };
        groups.push((wire_name, t.topic_id, t.partitions.len()));
    }
    let max_wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    let deadline = Instant::now() + max_wait;
    let min_bytes = req.min_bytes.max(0) as usize;
    let (wtx, wrx) = flume::bounded::<()>(1);
    let waiting_allowed = !max_wait.is_zero() && min_bytes > 0;
    let mut got = loop {
        let got = read_all(ctx, &wants, read_committed, waiting_allowed.then_some(&wtx)).await;
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
    let mut it = wants.iter().zip(got);
    let mut responses = Vec::with_capacity(groups.len());
    let mut files = Vec::with_capacity(wants.len());
    for (name, id, n) in groups {
        let mut parts = Vec::with_capacity(n);
        for (w, g) in it.by_ref().take(n) {
            files.push(g.file);
            parts.push(
                PartitionData::default()
                    .with_partition_index(w.partition)
                    .with_error_code(g.error)
                    .with_high_watermark(g.hw)
                    .with_last_stable_offset(g.lso)
                    .with_log_start_offset(g.log_start)
                    .with_aborted_transactions(g.aborted)
                    .with_preferred_read_replica(broker(-1))
                    .with_records(Some(g.records)),
            );
        }
        responses.push(
            FetchableTopicResponse::default()
                .with_topic(name)
                .with_topic_id(id)
                .with_partitions(parts),
        );
    }
    let resp = FetchResponse::default()
        .with_session_id(0)
        .with_responses(responses);
    (resp, files)
}
