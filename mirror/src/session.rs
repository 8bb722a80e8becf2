//! Shared mirror fetchers: per (core, mirror) one metadata/admin connection and, per source
//! broker, one fetch connection carrying multi-partition Fetch requests in a KIP-227
//! incremental fetch session (issue 10).
//!
//! Every mirrored partition keeps its own [`crate::fetcher::PartitionFetcher`] task (and
//! its error handling); its [`Source`] is a [`SharedSource`], which hands each fetch to the
//! [`BrokerFetcher`] loop of the partition's leader and awaits that partition's answer.
//!
//! The loop keeps one Fetch in flight per connection (as Kafka's consumer does). The request
//! contents come from [`FetchSession`], a pure state machine: a full fetch first (session id 0,
//! epoch 0; the broker assigns an id), then incremental fetches (epochs 1, 2, ..., wrapping to
//! 1 after `i32::MAX`) that carry only partitions added or whose offset / epoch / byte cap
//! changed, and forget partitions nobody waits for (stopped, leader moved, busy appending).
//! FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH reset to a full fetch, re-sent at
//! once; a connection error resets too and fails the waiters with the transport error (their
//! own backoff applies). Partitions an incremental response leaves out stay pending.
//!
//! Fairness: partitions that got data get a short linger to append and resubmit before the
//! next request, so one slow partition never holds the others; the order of the partitions
//! sent rotates every request, so none starves under the response byte cap.
//!
//! Invariants: all state is single-threaded on its core (`Rc`/`RefCell`, no borrow held across
//! an `.await`); the loop exits once the last [`SharedSource`] of its hub is dropped. Must not
//! depend on the control plane. The client id is the hub's ([`crate::fetcher::
//! fetcher_client_id`] with the core index as fetcher index), so a source operator can quota it.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::ForgottenTopic;
use kafka_protocol::messages::{FetchResponse, MetadataResponse};
use kmirror_types::{ErrorCode, LeaderEpoch, Offset};
use uuid::Uuid;

use crate::client::security::{ClientSecurity, SecurityConfigError};
use crate::client::{build, AsyncConnection, ClientError};
use crate::fetcher::{
    leader_from_metadata, now_ms, EpochEnd, FetchOutcome, FetcherConfig, KafkaSource,
    PartitionAnswer, Source, SourceError, SourceLeader,
};
use crate::keys::error as code;

/// Sessions reset (70 / 71 from the broker, or the connection lost) in this process.
static SESSION_RESETS: AtomicU64 = AtomicU64::new(0);

/// How many fetch sessions were reset to a full fetch in this process (for metrics).
pub(crate) fn session_resets_total() -> u64 {
    SESSION_RESETS.load(Ordering::Relaxed)
}

/// How long after a response the loop waits for the partitions that got data to append and
/// resubmit before it sends the next request (those still busy are forgotten, re-added later).
const LINGER: Duration = Duration::from_millis(10);
/// A fetch connection nobody used for this long is closed (Kafka's brokers close idle
/// connections after 10 minutes by default).
const IDLE_CLOSE: Duration = Duration::from_secs(120);
/// A cached topic metadata answer is reused this long for other partitions' leader lookups.
const METADATA_TTL_MS: i64 = 5_000;

type PartKey = (Uuid, i32);

fn key(p: &build::FetchPart) -> PartKey {
    (p.topic_id, p.partition)
}

fn same_fetch(a: &build::FetchPart, b: &build::FetchPart) -> bool {
    a.fetch_offset == b.fetch_offset
        && a.current_leader_epoch == b.current_leader_epoch
        && a.partition_max_bytes == b.partition_max_bytes
}

/// What one Fetch of a session carries.
#[derive(Debug, Clone)]
pub(crate) struct SessionRequest {
    pub session_id: i32,
    pub epoch: i32,
    /// Full fetch: every wanted partition; incremental: only added or altered ones.
    pub parts: Vec<build::FetchPart>,
    /// Incremental only: partitions to drop from the broker's session.
    pub forgotten: Vec<(String, Uuid, i32)>,
}

impl SessionRequest {
    pub(crate) fn is_full(&self) -> bool {
        self.epoch == 0
    }
}

/// What to do after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionVerdict {
    /// Dispatch the partitions in the response.
    Dispatch,
    /// The session is gone (70 / 71): send a full fetch at once; waiters keep waiting.
    Resend,
    /// Another top-level error: every waiter gets it as its partition error.
    Fail(ErrorCode),
}

/// A client-side KIP-227 fetch session: which partitions the broker's session holds and at
/// which fetch state, and the id / epoch of the next request. Pure (no I/O) so it is tested
/// on its own.
#[derive(Debug, Default)]
pub(crate) struct FetchSession {
    id: i32,
    /// Epoch of the next request: 0 = full fetch.
    epoch: i32,
    /// The broker session's partitions and the fetch state we last sent for each.
    sent: HashMap<PartKey, build::FetchPart>,
    /// Rotation of the request order (fairness under the response byte cap).
    rotation: usize,
    resets: u64,
}

impl FetchSession {
    pub(crate) fn new() -> Self {
        FetchSession::default()
    }

    pub(crate) fn id(&self) -> i32 {
        self.id
    }

    #[cfg(test)]
    pub(crate) fn resets(&self) -> u64 {
        self.resets
    }

    /// The next request for `wanted` (the partitions waiting now, in submission order).
    /// Assumes it is sent: call [`FetchSession::on_response`] or [`FetchSession::on_disconnect`]
    /// with its outcome.
    pub(crate) fn build(&mut self, wanted: &[build::FetchPart]) -> SessionRequest {
        let n = wanted.len();
        let start = if n == 0 { 0 } else { self.rotation % n };
        self.rotation = self.rotation.wrapping_add(1);
        let rotated = wanted[start..].iter().chain(wanted[..start].iter());
        let req = if self.epoch == 0 {
            SessionRequest {
                session_id: self.id,
                epoch: 0,
                parts: rotated.cloned().collect(),
                forgotten: Vec::new(),
            }
        } else {
            let parts = rotated
                .filter(|p| self.sent.get(&key(p)).is_none_or(|s| !same_fetch(s, p)))
                .cloned()
                .collect();
            let keep: HashSet<PartKey> = wanted.iter().map(key).collect();
            let mut forgotten: Vec<(String, Uuid, i32)> = self
                .sent
                .values()
                .filter(|s| !keep.contains(&key(s)))
                .map(|s| (s.topic.clone(), s.topic_id, s.partition))
                .collect();
            forgotten.sort_by_key(|f| (f.1, f.2));
            SessionRequest {
                session_id: self.id,
                epoch: self.epoch,
                parts,
                forgotten,
            }
        };
        self.sent = wanted.iter().map(|p| (key(p), p.clone())).collect();
        req
    }

    /// Apply the response to `req`: its top-level error and session id.
    pub(crate) fn on_response(
        &mut self,
        req: &SessionRequest,
        error: ErrorCode,
        session_id: i32,
    ) -> SessionVerdict {
        match error.code() {
            code::NONE => {
                if req.is_full() {
                    // A broker without a free session slot answers id 0: stay sessionless
                    // (every request full) and ask again next time.
                    self.id = session_id;
                    self.epoch = if session_id == 0 { 0 } else { 1 };
                } else {
                    self.epoch = if req.epoch == i32::MAX {
                        1
                    } else {
                        req.epoch + 1
                    };
                }
                SessionVerdict::Dispatch
            }
            code::FETCH_SESSION_ID_NOT_FOUND | code::INVALID_FETCH_SESSION_EPOCH => {
                self.reset();
                SessionVerdict::Resend
            }
            _ => {
                self.reset();
                SessionVerdict::Fail(error)
            }
        }
    }

    /// The connection was lost (or the request failed): the next request is a full fetch.
    pub(crate) fn on_disconnect(&mut self) {
        self.reset();
    }

    /// We closed the connection ourselves (idle): start over without counting a reset.
    pub(crate) fn on_close(&mut self) {
        self.id = 0;
        self.epoch = 0;
        self.sent.clear();
    }

    fn reset(&mut self) {
        if self.id != 0 || self.epoch != 0 {
            self.resets += 1;
            SESSION_RESETS.fetch_add(1, Ordering::Relaxed);
        }
        self.id = 0;
        self.epoch = 0;
        self.sent.clear();
    }
}

/// The Fetch request for a session request (consumer fetch as in `build::consumer_fetch`).
fn fetch_request(
    req: &SessionRequest,
    cfg: &FetcherConfig,
) -> kafka_protocol::messages::FetchRequest {
    let mut forgotten: Vec<ForgottenTopic> = Vec::new();
    for (topic, id, p) in &req.forgotten {
        match forgotten.iter_mut().find(|f| f.topic_id == *id) {
            Some(f) => f.partitions.push(*p),
            None => forgotten.push(
                ForgottenTopic::default()
                    .with_topic(kafka_protocol::messages::TopicName(
                        kafka_protocol::protocol::StrBytes::from_string(topic.clone()),
                    ))
                    .with_topic_id(*id)
                    .with_partitions(vec![*p]),
            ),
        }
    }
    build::consumer_fetch(
        &req.parts,
        cfg.max_wait_ms,
        cfg.min_bytes,
        cfg.max_bytes,
        "",
    )
    .with_session_id(req.session_id)
    .with_session_epoch(req.epoch)
    .with_forgotten_topics_data(forgotten)
}

type Answer = Result<FetchOutcome, SourceError>;

struct Pending {
    part: build::FetchPart,
    tx: flume::Sender<Answer>,
}

#[derive(Default)]
struct BrokerState {
    /// Waiting partitions, in submission order (one per partition).
    pending: Vec<Pending>,
    /// Partitions answered with data by the last response and not resubmitted yet.
    answered: HashSet<PartKey>,
}

/// One source broker's fetch connection and session loop (per core and mirror).
pub(crate) struct BrokerFetcher {
    addr: String,
    state: RefCell<BrokerState>,
    wake: flume::Sender<()>,
    closed: Cell<bool>,
}

impl BrokerFetcher {
    fn submit(&self, part: build::FetchPart) -> flume::Receiver<Answer> {
        let (tx, rx) = flume::bounded(1);
        {
            let mut st = self.state.borrow_mut();
            let k = key(&part);
            st.pending.retain(|p| key(&p.part) != k);
            st.answered.remove(&k);
            st.pending.push(Pending { part, tx });
        }
        let _ = self.wake.try_send(());
        rx
    }
}

struct HubConfig {
    /// The mirror's evicted-session counter (metrics): FETCH_SESSION_ID_NOT_FOUND and
    /// INVALID_FETCH_SESSION_EPOCH answers.
    evictions: Arc<AtomicU64>,
    client_id: String,
    timeout: Duration,
    security: Result<ClientSecurity, SecurityConfigError>,
    fetch: FetcherConfig,
}

/// Per (core, mirror): the shared admin source, the topic metadata cache and the per-broker
/// fetchers.
pub(crate) struct SessionHub {
    cfg: Rc<HubConfig>,
    /// The admin source circulates through this channel: taking it is holding the lock.
    admin_tx: flume::Sender<KafkaSource>,
    admin_rx: flume::Receiver<KafkaSource>,
    metadata: RefCell<HashMap<String, (i64, Rc<MetadataResponse>)>>,
    brokers: RefCell<HashMap<String, Rc<BrokerFetcher>>>,
}

impl Drop for SessionHub {
    fn drop(&mut self) {
        for b in self.brokers.borrow().values() {
            b.closed.set(true);
            let _ = b.wake.try_send(());
        }
    }
}

thread_local! {
    /// This core's hubs, by mirror and connection settings.
    static HUBS: RefCell<HashMap<String, Weak<SessionHub>>> = RefCell::new(HashMap::new());
}

/// Holds the admin source; gives it back on drop (also when the future is cancelled).
struct AdminGuard<'a> {
    hub: &'a SessionHub,
    src: Option<KafkaSource>,
}

impl Drop for AdminGuard<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.src.take() {
            let _ = self.hub.admin_tx.try_send(s);
        }
    }
}

impl AdminGuard<'_> {
    fn src(&mut self) -> &mut KafkaSource {
        self.src.as_mut().expect("held until drop")
    }
}

impl SessionHub {
    /// The hub of `mirror` on this core (created on first use; gone with its last user).
    /// Call on an engine core: the fetch loops are spawned on the current executor.
    pub(crate) fn for_mirror(
        mirror: &str,
        bootstrap: &str,
        client_id: String,
        security: Result<ClientSecurity, SecurityConfigError>,
        fetch: FetcherConfig,
        evictions: Arc<AtomicU64>,
    ) -> Rc<SessionHub> {
        let k = format!(
            "{mirror}\u{0}{bootstrap}\u{0}{client_id}\u{0}{security:?}\u{0}{}/{}/{}",
            fetch.max_wait_ms, fetch.min_bytes, fetch.max_bytes
        );
        HUBS.with(|h| {
            let mut h = h.borrow_mut();
            h.retain(|_, w| w.strong_count() > 0);
            if let Some(hub) = h.get(&k).and_then(Weak::upgrade) {
                return hub;
            }
            let timeout = Duration::from_secs(30);
            let admin = KafkaSource::new(bootstrap, client_id.clone(), timeout)
                .with_security(security.clone());
            let (admin_tx, admin_rx) = flume::bounded(1);
            let _ = admin_tx.try_send(admin);
            let hub = Rc::new(SessionHub {
                cfg: Rc::new(HubConfig {
                    evictions,
                    client_id,
                    timeout,
                    security,
                    fetch,
                }),
                admin_tx,
                admin_rx,
                metadata: RefCell::new(HashMap::new()),
                brokers: RefCell::new(HashMap::new()),
            });
            h.insert(k, Rc::downgrade(&hub));
            hub
        })
    }

    async fn admin(&self) -> AdminGuard<'_> {
        let src = self
            .admin_rx
            .recv_async()
            .await
            .expect("the hub holds a sender");
        AdminGuard {
            hub: self,
            src: Some(src),
        }
    }

    fn broker(&self, addr: &str) -> Rc<BrokerFetcher> {
        if let Some(b) = self.brokers.borrow().get(addr) {
            return b.clone();
        }
        let (wake, woken) = flume::bounded(1);
        let b = Rc::new(BrokerFetcher {
            addr: addr.to_owned(),
            state: RefCell::new(BrokerState::default()),
            wake,
            closed: Cell::new(false),
        });
        glommio::spawn_local(session_loop(b.clone(), woken, self.cfg.clone())).detach();
        self.brokers.borrow_mut().insert(addr.to_owned(), b.clone());
        b
    }

    fn cached_metadata(&self, topic: &str, newer_than: i64) -> Option<Rc<MetadataResponse>> {
        self.metadata
            .borrow()
            .get(topic)
            .filter(|(at, _)| *at >= newer_than)
            .map(|(_, m)| m.clone())
    }
}

/// Fail every waiter with `err`.
fn fail_all(st: &mut BrokerState, err: &Arc<ClientError>) {
    for p in st.pending.drain(..) {
        let _ = p.tx.try_send(Err(SourceError::Shared(err.clone())));
    }
    st.answered.clear();
}

async fn session_loop(b: Rc<BrokerFetcher>, woken: flume::Receiver<()>, cfg: Rc<HubConfig>) {
    let mut conn: Option<AsyncConnection> = None;
    let mut session = FetchSession::new();
    let extra = Duration::from_millis(cfg.fetch.max_wait_ms.max(0) as u64);
    loop {
        if b.closed.get() {
            return;
        }
        let empty = {
            let mut st = b.state.borrow_mut();
            // Stopped partitions (their future dropped) are no longer wanted.
            st.pending.retain(|p| !p.tx.is_disconnected());
            st.pending.is_empty()
        };
        if empty {
            // Nobody fetches from this broker (leaders moved away): after a while close the
            // idle connection rather than let the broker time it out under a later fetch.
            let woke =
                futures_lite::future::or(async { woken.recv_async().await.is_ok() }, async {
                    glommio::timer::sleep(IDLE_CLOSE).await;
                    false
                })
                .await;
            if !woke && conn.take().is_some() {
                session.on_close();
            }
            continue;
        }
        // Let the partitions that just got data append and resubmit.
        let deadline = std::time::Instant::now() + LINGER;
        while !b.state.borrow().answered.is_empty() && !b.closed.get() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            futures_lite::future::or(
                async {
                    let _ = woken.recv_async().await;
                },
                glommio::timer::sleep(left),
            )
            .await;
        }
        let wanted: Vec<build::FetchPart> = {
            let mut st = b.state.borrow_mut();
            st.answered.clear();
            st.pending.retain(|p| !p.tx.is_disconnected());
            st.pending.iter().map(|p| p.part.clone()).collect()
        };
        if wanted.is_empty() {
            continue;
        }
        let _ = woken.try_recv();
        if conn.as_ref().is_some_and(|c| c.session_expiring()) {
            conn = None;
        }
        if conn.is_none() {
            let connected = match &cfg.security {
                Ok(sec) => {
                    AsyncConnection::connect_secured(&b.addr, &cfg.client_id, cfg.timeout, sec)
                        .await
                }
                Err(e) => Err(ClientError::Security {
                    addr: b.addr.clone(),
                    reason: e.to_string(),
                }),
            };
            match connected {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    session.on_disconnect();
                    fail_all(&mut b.state.borrow_mut(), &Arc::new(e));
                    continue;
                }
            }
        }
        let req = session.build(&wanted);
        let fetch = fetch_request(&req, &cfg.fetch);
        let c = conn.as_mut().expect("connected above");
        // Topic ids in Fetch need v13+.
        let resp: FetchResponse = match c.send_with(&fetch, 13, i16::MAX, extra).await {
            Ok((_, r)) => r,
            Err(e) => {
                if e.is_connection_fatal() {
                    conn = None;
                }
                if session.id() != 0 {
                    tracing::info!(broker = %b.addr, error = %e, "mirror fetch session lost with its connection; next fetch is full");
                }
                session.on_disconnect();
                fail_all(&mut b.state.borrow_mut(), &Arc::new(e));
                continue;
            }
        };
        match session.on_response(&req, ErrorCode::new(resp.error_code), resp.session_id) {
            SessionVerdict::Resend => {
                cfg.evictions.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    broker = %b.addr,
                    error = code::name(resp.error_code),
                    resets = session_resets_total(),
                    "mirror fetch session reset; sending a full fetch"
                );
                continue;
            }
            SessionVerdict::Fail(err) => {
                let mut st = b.state.borrow_mut();
                for p in st.pending.drain(..) {
                    let _ = p.tx.try_send(Ok(FetchOutcome::refused(err)));
                }
                st.answered.clear();
            }
            SessionVerdict::Dispatch => {
                if req.is_full() && session.id() != 0 {
                    tracing::info!(
                        broker = %b.addr,
                        session = session.id(),
                        partitions = req.parts.len(),
                        "mirror fetch session opened"
                    );
                }
                dispatch(&b, &resp, &session)
            }
        }
        if resp.throttle_time_ms > 0 {
            // The source's quota asks us to hold off (KIP-219).
            glommio::timer::sleep(Duration::from_millis(resp.throttle_time_ms as u64)).await;
        }
    }
}

/// Hand each partition of the response to its waiter, if the waiter asked for what the
/// session fetched (a waiter that replaced a cancelled one at another offset waits for the
/// next round instead of getting data for an offset it did not ask for).
fn dispatch(b: &BrokerFetcher, resp: &FetchResponse, session: &FetchSession) {
    let mut st = b.state.borrow_mut();
    for t in &resp.responses {
        for p in &t.partitions {
            let k = (t.topic_id, p.partition_index);
            let Some(i) = st.pending.iter().position(|w| {
                key(&w.part) == k && session.sent.get(&k).is_some_and(|s| same_fetch(s, &w.part))
            }) else {
                continue;
            };
            let w = st.pending.remove(i);
            if w.tx.try_send(Ok(FetchOutcome::from_wire(p))).is_ok() {
                st.answered.insert(k);
            }
        }
    }
}

/// A partition's [`Source`] over its core's shared hub.
pub(crate) struct SharedSource {
    hub: Rc<SessionHub>,
    /// The leader this partition was last given: asking again means it failed, so the
    /// answer must come from fresh metadata, not the cache.
    last_leader: Option<SourceLeader>,
}

impl SharedSource {
    pub(crate) fn new(hub: Rc<SessionHub>) -> Self {
        SharedSource {
            hub,
            last_leader: None,
        }
    }
}

impl Source for SharedSource {
    async fn leader(&mut self, topic: &str, partition: i32) -> Result<SourceLeader, SourceError> {
        let asked = now_ms();
        let cached = self
            .hub
            .cached_metadata(topic, asked - METADATA_TTL_MS)
            .and_then(|m| leader_from_metadata(&m, topic, partition).ok())
            .filter(|l| self.last_leader.as_ref() != Some(l));
        if let Some(l) = cached {
            self.last_leader = Some(l.clone());
            return Ok(l);
        }
        let mut admin = self.hub.admin().await;
        // Another partition of the topic may have refreshed it while we waited.
        let md = match self.hub.cached_metadata(topic, asked) {
            Some(m) => m,
            None => {
                let m = Rc::new(admin.src().metadata(&[topic.to_owned()]).await?);
                self.hub
                    .metadata
                    .borrow_mut()
                    .insert(topic.to_owned(), (now_ms(), m.clone()));
                m
            }
        };
        drop(admin);
        let l = leader_from_metadata(&md, topic, partition)?;
        self.last_leader = Some(l.clone());
        Ok(l)
    }

    async fn fetch(
        &mut self,
        leader: &SourceLeader,
        req: &build::FetchPart,
        _cfg: &FetcherConfig,
    ) -> Result<FetchOutcome, SourceError> {
        let rx = self.hub.broker(&leader.addr).submit(req.clone());
        rx.recv_async()
            .await
            .map_err(|_| SourceError::Other("mirror fetch session closed".to_owned()))?
    }

    async fn list_offset(
        &mut self,
        leader: &SourceLeader,
        topic: &str,
        partition: i32,
        current_leader_epoch: LeaderEpoch,
        timestamp: i64,
    ) -> Result<PartitionAnswer<Offset>, SourceError> {
        let mut admin = self.hub.admin().await;
        admin
            .src()
            .list_offset(leader, topic, partition, current_leader_epoch, timestamp)
            .await
    }

    async fn last_mirrored_epoch(
        &mut self,
        mirror: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<LeaderEpoch>, SourceError> {
        let mut admin = self.hub.admin().await;
        admin
            .src()
            .last_mirrored_epoch(mirror, topic, partition)
            .await
    }

    async fn end_offset_for_epoch(
        &mut self,
        leader: &SourceLeader,
        topic: &str,
        partition: i32,
        current_leader_epoch: LeaderEpoch,
        epoch: LeaderEpoch,
    ) -> Result<PartitionAnswer<Option<EpochEnd>>, SourceError> {
        let mut admin = self.hub.admin().await;
        admin
            .src()
            .end_offset_for_epoch(leader, topic, partition, current_leader_epoch, epoch)
            .await
    }

    async fn sleep(&mut self, d: Duration) {
        glommio::timer::sleep(d).await
    }

    fn now_ms(&self) -> i64 {
        now_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(topic: &str, id: u128, p: i32, offset: i64) -> build::FetchPart {
        build::FetchPart {
            topic: topic.to_owned(),
            topic_id: Uuid::from_u128(id),
            partition: p,
            fetch_offset: Offset(offset),
            current_leader_epoch: LeaderEpoch(3),
            partition_max_bytes: 1024,
        }
    }

    fn names(r: &SessionRequest) -> Vec<(i32, i64)> {
        r.parts
            .iter()
            .map(|p| (p.partition, p.fetch_offset.get()))
            .collect()
    }

    #[test]
    fn full_then_incremental_carries_only_added_altered_and_forgotten() {
        let mut s = FetchSession::new();
        let a = part("t", 1, 0, 10);
        let b = part("t", 1, 1, 20);
        let c = part("u", 2, 0, 30);
        let r = s.build(&[a.clone(), b.clone()]);
        assert_eq!((r.session_id, r.epoch), (0, 0));
        assert!(r.is_full());
        assert_eq!(r.parts.len(), 2);
        assert_eq!(
            s.on_response(&r, ErrorCode::new(code::NONE), 77),
            SessionVerdict::Dispatch
        );

        // a moved on, b unchanged, c new: only a and c are sent.
        let a2 = part("t", 1, 0, 15);
        let r = s.build(&[a2.clone(), b.clone(), c.clone()]);
        assert_eq!((r.session_id, r.epoch), (77, 1));
        let mut sent = names(&r);
        sent.sort();
        assert_eq!(sent, vec![(0, 15), (0, 30)]);
        assert!(r.forgotten.is_empty());
        s.on_response(&r, ErrorCode::new(code::NONE), 77);

        // Nothing changed: an empty incremental request (the idle case).
        let r = s.build(&[a2.clone(), b.clone(), c.clone()]);
        assert_eq!(r.epoch, 2);
        assert!(r.parts.is_empty() && r.forgotten.is_empty());
        s.on_response(&r, ErrorCode::new(code::NONE), 77);

        // b no longer wanted (stopped / busy / leader moved): forgotten; a new epoch re-sent.
        let mut a3 = a2.clone();
        a3.current_leader_epoch = LeaderEpoch(4);
        let r = s.build(&[a3, c.clone()]);
        assert_eq!(r.epoch, 3);
        assert_eq!(names(&r), vec![(0, 15)]);
        assert_eq!(r.forgotten, vec![("t".to_owned(), Uuid::from_u128(1), 1)]);
        s.on_response(&r, ErrorCode::new(code::NONE), 77);

        // b comes back: added again.
        let r = s.build(&[part("t", 1, 0, 15), b.clone(), c]);
        let sent = names(&r);
        assert!(sent.contains(&(1, 20)), "{sent:?}");
    }

    #[test]
    fn the_fetch_request_carries_session_and_forgotten_topics() {
        let mut s = FetchSession::new();
        let r = s.build(&[part("t", 1, 0, 1), part("t", 1, 1, 1)]);
        s.on_response(&r, ErrorCode::new(code::NONE), 5);
        let r = s.build(&[part("t", 1, 0, 2)]);
        let f = fetch_request(&r, &FetcherConfig::default());
        assert_eq!((f.session_id, f.session_epoch), (5, 1));
        assert_eq!(f.replica_id.0, -1);
        assert_eq!(f.isolation_level, 1);
        assert_eq!(f.topics.len(), 1);
        assert_eq!(f.forgotten_topics_data.len(), 1);
        assert_eq!(f.forgotten_topics_data[0].topic_id, Uuid::from_u128(1));
        assert_eq!(f.forgotten_topics_data[0].partitions, vec![1]);
    }

    #[test]
    fn epochs_count_up_and_wrap_to_one() {
        let mut s = FetchSession::new();
        let w = [part("t", 1, 0, 0)];
        let r = s.build(&w);
        s.on_response(&r, ErrorCode::new(code::NONE), 9);
        for want in 1..=5 {
            let r = s.build(&w);
            assert_eq!(r.epoch, want);
            s.on_response(&r, ErrorCode::new(code::NONE), 9);
        }
        s.epoch = i32::MAX;
        let r = s.build(&w);
        assert_eq!(r.epoch, i32::MAX);
        s.on_response(&r, ErrorCode::new(code::NONE), 9);
        assert_eq!(s.build(&w).epoch, 1);
    }

    #[test]
    fn session_errors_and_disconnects_reset_to_a_full_fetch() {
        for err in [
            code::FETCH_SESSION_ID_NOT_FOUND,
            code::INVALID_FETCH_SESSION_EPOCH,
        ] {
            let mut s = FetchSession::new();
            let w = [part("t", 1, 0, 0), part("t", 1, 1, 0)];
            let r = s.build(&w);
            s.on_response(&r, ErrorCode::new(code::NONE), 9);
            let r = s.build(&w);
            assert_eq!(r.epoch, 1);
            assert_eq!(
                s.on_response(&r, ErrorCode::new(err), 0),
                SessionVerdict::Resend
            );
            let r = s.build(&w);
            assert_eq!((r.session_id, r.epoch, r.parts.len()), (0, 0, 2));
            assert_eq!(s.resets(), 1);
        }
        let mut s = FetchSession::new();
        let w = [part("t", 1, 0, 0)];
        let r = s.build(&w);
        s.on_response(&r, ErrorCode::new(code::NONE), 9);
        let _ = s.build(&w);
        s.on_disconnect();
        let r = s.build(&w);
        assert!(r.is_full() && r.session_id == 0 && r.parts.len() == 1);
        assert_eq!(s.resets(), 1);
        // Another top-level error fails the waiters and resets as well.
        s.on_response(&r, ErrorCode::new(code::NONE), 4);
        let r = s.build(&w);
        assert_eq!(
            s.on_response(&r, ErrorCode::new(code::UNKNOWN_SERVER_ERROR), 0),
            SessionVerdict::Fail(ErrorCode::new(-1))
        );
        assert!(s.build(&w).is_full());
    }

    #[test]
    fn a_broker_without_session_slots_gets_full_fetches_every_time() {
        let mut s = FetchSession::new();
        let w = [part("t", 1, 0, 0)];
        for _ in 0..3 {
            let r = s.build(&w);
            assert!(r.is_full() && r.session_id == 0 && r.parts.len() == 1);
            assert_eq!(
                s.on_response(&r, ErrorCode::new(code::NONE), 0),
                SessionVerdict::Dispatch
            );
        }
        assert_eq!(s.resets(), 0);
    }

    #[test]
    fn request_order_rotates_so_no_partition_is_always_last() {
        let mut s = FetchSession::new();
        let w: Vec<_> = (0..3).map(|p| part("t", 1, p, 0)).collect();
        let mut firsts = Vec::new();
        for _ in 0..3 {
            let r = s.build(&w);
            firsts.push(r.parts[0].partition);
            let order: Vec<i32> = r.parts.iter().map(|p| p.partition).collect();
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, vec![0, 1, 2]);
            // Stay sessionless so every request is full and carries all three.
            s.on_response(&r, ErrorCode::new(code::NONE), 0);
        }
        assert_eq!(firsts, vec![0, 1, 2]);
    }

    #[test]
    fn responses_go_only_to_waiters_that_asked_for_what_was_fetched() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        let (wake, _woken) = flume::bounded(1);
        let b = BrokerFetcher {
            addr: "x:1".into(),
            state: RefCell::new(BrokerState::default()),
            wake,
            closed: Cell::new(false),
        };
        let mut s = FetchSession::new();
        let rx0 = b.submit(part("t", 1, 0, 10));
        let rx1 = b.submit(part("t", 1, 1, 20));
        let wanted: Vec<_> = b
            .state
            .borrow()
            .pending
            .iter()
            .map(|p| p.part.clone())
            .collect();
        let r = s.build(&wanted);
        s.on_response(&r, ErrorCode::new(code::NONE), 3);
        // Partition 1's fetcher was replaced meanwhile by one at another offset.
        drop(rx1);
        let rx1 = b.submit(part("t", 1, 1, 5));
        let resp = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic_id(Uuid::from_u128(1))
            .with_partitions(vec![
                PartitionData::default()
                    .with_partition_index(0)
                    .with_high_watermark(11),
                PartitionData::default()
                    .with_partition_index(1)
                    .with_high_watermark(21),
            ])]);
        dispatch(&b, &resp, &s);
        let out = rx0.try_recv().expect("answered").expect("ok");
        let FetchOutcome::Records(out) = out else {
            panic!("records expected, got {out:?}");
        };
        assert_eq!(out.high_watermark, Offset(11));
        assert!(
            rx1.try_recv().is_err(),
            "data for offset 20 must not reach a waiter at 5"
        );
        assert_eq!(b.state.borrow().pending.len(), 1);
        assert!(b.state.borrow().answered.contains(&(Uuid::from_u128(1), 0)));
    }
}
