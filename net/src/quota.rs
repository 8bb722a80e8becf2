//! Client quotas: DescribeClientQuotas (key 48) and AlterClientQuotas (key 49) over the
//! quotas the metadata quorum holds, and enforcement of `producer_byte_rate` and
//! `consumer_byte_rate` on Produce and Fetch, of `request_percentage` on every request, of
//! `controller_mutation_rate` on topic and partition creation and deletion, and of an IP's
//! `connection_creation_rate` on accept ([`crate::conn_quota`]).
//!
//! One [`QuotaRegistry`] per broker, shared by every core and the mirror control thread (the
//! quota sync). Changes are proposed to the quorum (`ClusterCommand::Quota`, [`alter`]) from a
//! blocking thread, never on an engine core; the Raft driver publishes each applied set as an
//! immutable snapshot (with a generation number) read without a lock.
//!
//! Enforcement follows Kafka's `ClientQuotaManager`: a quota belongs to the entity that
//! matched by precedence, and every connection resolving to the same [`BudgetKey`] charges
//! one budget, whichever core serves it. That is why a budget is one shared [`Budget`] of
//! atomic per-second buckets rather than per-core shares: SO_REUSEPORT spreads a client's
//! connections over cores unevenly (often all on one), so a per-core share of the quota would
//! throttle a single-connection client to quota/cores. Recording is a CAS on one 64-bit word
//! (window number and byte count packed together), so no lock and no lost bytes at a window
//! rollover. Finding the budget of a (user, client-id) goes through a per-core (thread-local)
//! cache keyed by the snapshot generation; only a miss takes the registry's budget-map mutex.
//!
//! Rate as Kafka measures it: `quota.window.num` 11 samples of `quota.window.size.seconds`
//! 1; the observed rate is the bytes of the live samples over the time since the oldest
//! sample started, counted as at least 10 full windows. Above the quota the throttle time is
//! `(observed - quota) / quota * that window`, at most 11 s. Produce: appended, then the
//! response carries `throttle_time_ms` and the connection is muted for that long (KIP-219:
//! the response goes out first, the client throttles itself too). Fetch: a throttled fetch
//! is answered empty (its bytes un-recorded) with `throttle_time_ms`, then muted; its
//! `max_bytes` is first capped at quota x 10 s, as Kafka does. Clients older than KIP-219
//! (Produce < v6, Fetch < v8) get the same treatment: the mute delays their next response
//! rather than this one, which is the same pacing for a client that waits for answers.
//!
//! Request quotas follow Kafka's `ClientRequestQuotaManager`: `request_percentage` is a share
//! of one thread's second (1 = 10 ms/s). Every request served past the SASL gate (ApiVersions
//! too, as in Kafka) is charged the core's working time on it ([`timed`]), in nanoseconds, to
//! its own budget with the same windows; the throttle is bounded by one window (1 s). The
//! response carries the larger of the byte-rate and request throttles and the channel is
//! muted for it; a Fetch throttled by either is answered empty.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use kafka_protocol::messages::{
    alter_client_quotas_response, describe_client_quotas_response, AlterClientQuotasRequest,
    AlterClientQuotasResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_control::quota::{
    keys, resolve_in, Alteration, BudgetKey, Entity, FilterComponent, QuotaError, QuotaStore,
    Values,
};

use kafka_protocol::messages::{
    FetchRequest, FetchResponse, ProduceResponse, RequestHeader, ResponseKind,
};

use crate::broker::Ctx;
use crate::conn_quota::{canonical, IpRates, IpSensors};
use crate::errors;
use crate::session::Session;

/// Kafka's `quota.window.num`.
const WINDOWS: u64 = 11;
/// Kafka's `quota.window.size.seconds`, in ms.
const WINDOW_MS: u64 = 1000;
/// Kafka bounds a client quota's throttle time by the whole quota window.
const MAX_THROTTLE_MS: u64 = WINDOWS * WINDOW_MS;

/// Which byte rate a request charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    Produce,
    Fetch,
    /// `request_percentage`: the broker's working time on the client's requests.
    Request,
}

/// A `request_percentage` of 1 is 1% of one thread's second: 10 ms of work per second,
/// recorded in nanoseconds (Kafka's `nanosToPercentage` is nanos x 100 / 1e9).
const NANOS_PER_PERCENT: f64 = 1e9 / 100.0;

impl QuotaKind {
    fn key(self) -> &'static str {
        match self {
            QuotaKind::Produce => keys::PRODUCER_BYTE_RATE,
            QuotaKind::Fetch => keys::CONSUMER_BYTE_RATE,
            QuotaKind::Request => keys::REQUEST_PERCENTAGE,
        }
    }

    /// The configured quota in the budget's units per second (bytes, or nanoseconds of work).
    fn per_second(self, quota: f64) -> f64 {
        match self {
            QuotaKind::Produce | QuotaKind::Fetch => quota,
            QuotaKind::Request => quota * NANOS_PER_PERCENT,
        }
    }

    /// Byte-rate throttles are bounded by the whole quota window; Kafka's
    /// `ClientRequestQuotaManager` bounds a request-quota throttle by one window (1 s).
    fn max_throttle_ms(self) -> u64 {
        match self {
            QuotaKind::Produce | QuotaKind::Fetch => MAX_THROTTLE_MS,
            QuotaKind::Request => WINDOW_MS,
        }
    }
}

/// Bits of a bucket word holding the byte count; the rest hold the window number.
const BYTES_BITS: u32 = 40;
const BYTES_MASK: u64 = (1 << BYTES_BITS) - 1;

/// One (kind, budget key)'s sampled byte count: bucket `w % 11` holds window `w`'s bytes.
#[derive(Debug)]
pub struct Budget {
    buckets: [AtomicU64; WINDOWS as usize],
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

fn tag(window: u64) -> u64 {
    // 24 bits of window number: enough to tell the live windows from stale ones.
    (window & ((1 << (64 - BYTES_BITS)) - 1)) << BYTES_BITS
}

impl Budget {
    /// Adds (or with `negative`, removes) `bytes` to the window of `now_ms`.
    fn add(&self, bytes: u64, now_ms: u64, negative: bool) {
        let w = now_ms / WINDOW_MS;
        let b = &self.buckets[(w % WINDOWS) as usize];
        let _ = b.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            let count = if v & !BYTES_MASK == tag(w) {
                v & BYTES_MASK
            } else {
                0
            };
            let count = if negative {
                count.saturating_sub(bytes)
            } else {
                (count + bytes).min(BYTES_MASK)
            };
            Some(tag(w) | count)
        });
    }

    /// Kafka's `Rate.measure` over the live windows: (bytes, elapsed ms).
    fn measure(&self, now_ms: u64) -> (u64, u64) {
        let w = now_ms / WINDOW_MS;
        let (mut sum, mut oldest) = (0u64, w);
        for back in 0..WINDOWS {
            let Some(win) = w.checked_sub(back) else {
                break;
            };
            let v = self.buckets[(win % WINDOWS) as usize].load(Ordering::Acquire);
            if v & !BYTES_MASK == tag(win) && v & BYTES_MASK > 0 {
                sum += v & BYTES_MASK;
                oldest = oldest.min(win);
            }
        }
        let mut elapsed = now_ms - oldest * WINDOW_MS;
        let full = elapsed / WINDOW_MS;
        if full < WINDOWS - 1 {
            elapsed += (WINDOWS - 1 - full) * WINDOW_MS;
        }
        (sum, elapsed)
    }

    /// Records `bytes` and returns the throttle time (0 within the quota).
    pub fn record(&self, bytes: u64, quota: f64, now_ms: u64) -> u64 {
        self.record_bounded(bytes, quota, now_ms, MAX_THROTTLE_MS)
    }

    /// [`Budget::record`] with the throttle time bounded by `max_ms`.
    pub fn record_bounded(&self, n: u64, quota: f64, now_ms: u64, max_ms: u64) -> u64 {
        self.add(n, now_ms, false);
        throttle_ms(self.measure(now_ms), quota).min(max_ms)
    }

    /// Takes back bytes recorded at `now_ms` (a throttled fetch sends no data).
    pub fn unrecord(&self, bytes: u64, now_ms: u64) {
        self.add(bytes, now_ms, true);
    }
}

fn throttle_ms((sum, elapsed_ms): (u64, u64), quota: f64) -> u64 {
    let observed = sum as f64 * 1000.0 / elapsed_ms as f64;
    if quota <= 0.0 || observed <= quota {
        return 0;
    }
    let t = (observed - quota) / quota * elapsed_ms as f64;
    (t as u64).min(MAX_THROTTLE_MS)
}

struct Snapshot {
    generation: u64,
    all: Arc<std::collections::BTreeMap<Entity, Values>>,
}

/// The durable store, its published snapshot and the shared budgets.
pub struct QuotaRegistry {
    id: u64,
    snapshot: ArcSwap<Snapshot>,
    budgets: Mutex<Budgets>,
    /// The mirror that wrote each synced entity's quotas (the rest are local).
    owners: ArcSwap<std::collections::BTreeMap<Entity, String>>,
    /// `controller_mutation_rate` token buckets (admin requests only: a lock is fine).
    mutations: Mutex<HashMap<BudgetKey, TokenBucket>>,
    /// `connection_creation_rate` of each IP, resolved from the published set.
    ip_rates: ArcSwap<IpRates>,
    /// The connection rate sensors of IPs that have a rate.
    ip_sensors: IpSensors,
}

/// Kafka's `TokenBucket` for controller mutations: `rate` partitions per second, holding at
/// most 11 s worth (`quota.window.num` x `quota.window.size.seconds`), starting full.
#[derive(Debug, Clone, Copy)]
struct TokenBucket {
    tokens: f64,
    at_ms: u64,
}

impl TokenBucket {
    fn refill(&mut self, rate: f64, now_ms: u64) {
        let burst = rate * (WINDOWS * WINDOW_MS) as f64 / 1000.0;
        let gained = rate * now_ms.saturating_sub(self.at_ms) as f64 / 1000.0;
        self.tokens = (self.tokens + gained).min(burst);
        self.at_ms = now_ms;
    }

    /// How long until the bucket is out of debt (0 when it is not in debt).
    fn debt_ms(&self, rate: f64) -> u64 {
        if self.tokens >= 0.0 {
            0
        } else {
            (-self.tokens / rate * 1000.0).ceil() as u64
        }
    }
}

/// The shared budgets, swept of idle ones as the map grows.
///
/// A default quota (`--entity-default` clients) gives every client-id its own budget, so a
/// client cycling client-ids would otherwise grow the map forever (Kafka expires such
/// sensors after an hour of inactivity). Dropping a budget is exact when it holds no bytes in
/// its live windows (a fresh one measures the same) and nobody else holds it: the per-core
/// caches take their clones from the map under this lock, so a count of one cannot rise
/// while the sweep runs.
#[derive(Default)]
struct Budgets {
    map: HashMap<(QuotaKind, BudgetKey), Arc<Budget>>,
    /// The map size that triggers the next sweep.
    sweep_at: usize,
}

/// The smallest map worth sweeping.
const SWEEP_MIN: usize = 1024;

impl Budgets {
    fn get(&mut self, key: (QuotaKind, BudgetKey), now_ms: u64) -> Arc<Budget> {
        if !self.map.contains_key(&key) && self.map.len() >= self.sweep_at.max(SWEEP_MIN) {
            self.map
                .retain(|_, b| Arc::strong_count(b) > 1 || b.measure(now_ms).0 > 0);
            self.sweep_at = (self.map.len() * 2).max(SWEEP_MIN);
        }
        self.map.entry(key).or_default().clone()
    }
}

impl std::fmt::Debug for QuotaRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaRegistry")
            .field("id", &self.id)
            .finish()
    }
}

impl QuotaRegistry {
    /// No quotas until the driver's first publication.
    pub fn empty() -> QuotaRegistry {
        static IDS: AtomicU64 = AtomicU64::new(1);
        QuotaRegistry {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            snapshot: ArcSwap::from_pointee(Snapshot {
                generation: 0,
                all: Arc::new(Default::default()),
            }),
            budgets: Mutex::new(Budgets::default()),
            owners: ArcSwap::from_pointee(Default::default()),
            mutations: Mutex::new(HashMap::new()),
            ip_rates: ArcSwap::from_pointee(IpRates::default()),
            ip_sensors: IpSensors::default(),
        }
    }

    /// Records a connection accepted from `ip` against its `connection_creation_rate`; the
    /// time after which the acceptor closes it unread (0: serve it). Connections from an IP
    /// without a rate are not recorded, as in Kafka.
    pub fn connection_throttle_ms(&self, ip: std::net::IpAddr) -> u64 {
        match self.ip_rates.load().of(ip) {
            None => 0,
            Some(rate) => self.ip_sensors.record(ip, rate, kmirror_engine::now_ms()),
        }
    }

    /// The (user, client-id)'s mutation bucket, refilled to `now_ms`, passed to `f`; `None`
    /// when no `controller_mutation_rate` applies.
    fn with_mutation_bucket<R>(
        &self,
        user: &str,
        client_id: &str,
        f: impl FnOnce(&mut TokenBucket, f64) -> R,
    ) -> Option<R> {
        let snap = self.snapshot.load();
        let (key, rate) = resolve_in(&snap.all, user, client_id, keys::CONTROLLER_MUTATION_RATE)?;
        if rate <= 0.0 {
            return None;
        }
        let now = kmirror_engine::now_ms().max(0) as u64;
        let burst = rate * (WINDOWS * WINDOW_MS) as f64 / 1000.0;
        let mut map = self.mutations.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = map.entry(key).or_insert(TokenBucket {
            tokens: burst,
            at_ms: now,
        });
        bucket.refill(rate, now);
        Some(f(bucket, rate))
    }

    /// The owning mirror of each mirror-written entity (lock-free).
    pub fn owners(&self) -> Arc<std::collections::BTreeMap<Entity, String>> {
        self.owners.load_full()
    }

    /// Publishes the applied owners (called by the Raft driver).
    pub fn publish_owners(&self, owners: std::collections::BTreeMap<Entity, String>) {
        self.owners.store(Arc::new(owners));
    }

    /// Publishes the applied quota set (called by the Raft driver).
    pub fn publish(&self, all: std::collections::BTreeMap<Entity, Values>) {
        self.ip_rates.store(Arc::new(ip_rates(&all)));
        let generation = self.snapshot.load().generation + 1;
        self.snapshot.store(Arc::new(Snapshot {
            generation,
            all: Arc::new(all),
        }));
    }

    /// Every entity's quotas as of the last completed change (lock-free).
    pub fn all(&self) -> Arc<std::collections::BTreeMap<Entity, Values>> {
        self.snapshot.load().all.clone()
    }

    /// The budget and quota charged by `kind` requests of (`user`, `client_id`), if any.
    fn budget(&self, kind: QuotaKind, user: &str, client_id: &str) -> Option<(Arc<Budget>, f64)> {
        type CacheKey = (u64, QuotaKind, String, String);
        type Cache = (u64, HashMap<CacheKey, Option<(Arc<Budget>, f64)>>);
        thread_local! {
            static CACHE: RefCell<Cache> = RefCell::new((0, HashMap::new()));
        }
        let snap = self.snapshot.load();
        if snap.all.is_empty() {
            return None;
        }
        CACHE.with(|c| {
            let mut c = c.borrow_mut();
            // One generation of one registry at a time (tests run several brokers per process).
            let stamp = self.id << 40 | snap.generation;
            if c.0 != stamp {
                *c = (stamp, HashMap::new());
            }
            let key = (self.id, kind, user.to_owned(), client_id.to_owned());
            if let Some(hit) = c.1.get(&key) {
                return hit.clone();
            }
            let found = resolve_in(&snap.all, user, client_id, kind.key()).map(|(bk, q)| {
                let mut budgets = self.budgets.lock().unwrap_or_else(|p| p.into_inner());
                let now = kmirror_engine::now_ms().max(0) as u64;
                (budgets.get((kind, bk), now), q)
            });
            if c.1.len() > 10_000 {
                c.1.clear();
            }
            c.1.insert(key, found.clone());
            found
        })
    }

    /// Charges `n` (bytes, or nanoseconds for [`QuotaKind::Request`]) to the (user,
    /// client-id)'s `kind` budget; the throttle time in ms.
    pub fn record(&self, kind: QuotaKind, user: &str, client_id: &str, n: u64) -> u64 {
        match self.budget(kind, user, client_id) {
            None => 0,
            Some((b, q)) => b.record_bounded(
                n,
                kind.per_second(q),
                kmirror_engine::now_ms().max(0) as u64,
                kind.max_throttle_ms(),
            ),
        }
    }

    /// Takes back a throttled fetch's bytes.
    pub fn unrecord(&self, kind: QuotaKind, user: &str, client_id: &str, bytes: u64) {
        if let Some((b, _)) = self.budget(kind, user, client_id) {
            b.unrecord(bytes, kmirror_engine::now_ms().max(0) as u64);
        }
    }
}

/// The `connection_creation_rate` of each `ip` entity and of the `<default>` one. A host
/// name (the store accepts resolvable ones, as Kafka does) is resolved here, once per
/// published set, never on the accept path.
fn ip_rates(all: &std::collections::BTreeMap<Entity, Values>) -> IpRates {
    use std::net::ToSocketAddrs;
    let mut rates = IpRates::default();
    for (entity, values) in all {
        let (Some(name), 1) = (entity.get(keys::IP), entity.len()) else {
            continue;
        };
        let Some(&rate) = values.get(keys::CONNECTION_CREATION_RATE) else {
            continue;
        };
        match name {
            None => rates.default = Some(rate),
            Some(host) => match host.parse::<std::net::IpAddr>() {
                Ok(ip) => {
                    rates.per_ip.insert(canonical(ip), rate);
                }
                Err(_) => {
                    for a in (host.as_str(), 0).to_socket_addrs().into_iter().flatten() {
                        rates.per_ip.insert(canonical(a.ip()), rate);
                    }
                }
            },
        }
    }
    rates
}

pub type SharedQuotas = Arc<QuotaRegistry>;

/// One request's quota identity: the registry, Kafka's user (the principal's name,
/// `ANONYMOUS` unauthenticated) and the client-id of the request header.
pub struct Charge<'a> {
    registry: &'a QuotaRegistry,
    metrics: &'a crate::metrics::NetMetrics,
    user: &'a str,
    client_id: &'a str,
}

impl<'a> Charge<'a> {
    pub fn new(ctx: &'a Ctx, session: &'a Session, header: &'a RequestHeader) -> Charge<'a> {
        Charge {
            registry: ctx.quotas(),
            metrics: ctx.metrics(),
            user: &session.principal.name,
            client_id: header.client_id.as_deref().unwrap_or(""),
        }
    }

    /// Charges a Produce request's size (the records are already appended, as in Kafka);
    /// sets and returns the throttle time.
    pub fn produce(&self, request_bytes: u64, resp: Option<&mut ProduceResponse>) -> u64 {
        let r = self.registry;
        let t = r.record(QuotaKind::Produce, self.user, self.client_id, request_bytes);
        if t > 0 {
            let m = self.metrics;
            m.quota_throttled_produce.fetch_add(1, Ordering::Relaxed);
            m.quota_produce_throttle_ms.fetch_add(t, Ordering::Relaxed);
        }
        if let Some(resp) = resp {
            resp.throttle_time_ms = resp.throttle_time_ms.max(t as i32);
        }
        t
    }

    /// Kafka caps a client's Fetch `max_bytes` at what its quota allows over the window
    /// (`getMaxValueInQuotaWindow`: quota x (samples - 1) x window), so one response cannot
    /// overshoot the budget by much.
    pub fn cap_fetch(&self, req: &mut FetchRequest) {
        if let Some((_, q)) = self
            .registry
            .budget(QuotaKind::Fetch, self.user, self.client_id)
        {
            let cap = q * ((WINDOWS - 1) * WINDOW_MS) as f64 / 1000.0;
            let cap = cap.clamp(1.0, i32::MAX as f64) as i32;
            if req.max_bytes <= 0 || req.max_bytes > cap {
                req.max_bytes = cap;
            }
        }
    }

    /// Charges a Fetch response's size. Over the byte quota, or when the request quota
    /// already throttles the request (`request_throttle`), the response is emptied (its bytes
    /// taken back: they are not sent) and carries the larger throttle time, as Kafka answers
    /// a throttled fetch. Returns that throttle time.
    pub fn fetch(
        &self,
        response_bytes: u64,
        resp: &mut FetchResponse,
        request_throttle: u64,
    ) -> u64 {
        let r = self.registry;
        let t = r.record(QuotaKind::Fetch, self.user, self.client_id, response_bytes);
        if t > 0 {
            let m = self.metrics;
            m.quota_throttled_fetch.fetch_add(1, Ordering::Relaxed);
            m.quota_fetch_throttle_ms.fetch_add(t, Ordering::Relaxed);
        }
        let t = t.max(request_throttle);
        if t > 0 {
            r.unrecord(QuotaKind::Fetch, self.user, self.client_id, response_bytes);
            resp.responses.clear();
            resp.throttle_time_ms = resp.throttle_time_ms.max(t as i32);
        }
        t
    }

    /// Charges `nanos` of the broker's working time on this request to the
    /// `request_percentage` budget; the throttle time in ms (at most one window).
    pub fn request(&self, nanos: u64) -> u64 {
        self.registry
            .record(QuotaKind::Request, self.user, self.client_id, nanos)
    }
}

/// Kafka's controller mutation quota on CreateTopics, CreatePartitions and DeleteTopics:
/// each partition created or deleted takes a token from the (user, client-id)'s
/// `controller_mutation_rate` bucket. Strict (the versions whose clients know
/// THROTTLING_QUOTA_EXCEEDED: CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+): a
/// topic is refused while the bucket is in debt, with the time until it is not; one that
/// starts while it is not may take it into debt. Older versions are never refused, only
/// throttled by the debt they leave.
pub struct Mutation<'a> {
    registry: &'a QuotaRegistry,
    user: &'a str,
    client_id: &'a str,
    strict: bool,
    throttle_ms: std::cell::Cell<u64>,
}

impl<'a> Mutation<'a> {
    pub fn new(
        ctx: &'a Ctx,
        session: &'a Session,
        header: &'a RequestHeader,
        strict: bool,
    ) -> Self {
        Mutation {
            registry: ctx.quotas(),
            user: &session.principal.name,
            client_id: header.client_id.as_deref().unwrap_or(""),
            strict,
            throttle_ms: std::cell::Cell::new(0),
        }
    }

    /// Before mutating a topic: Err(THROTTLING_QUOTA_EXCEEDED, no message) while a strict
    /// request's bucket is in debt.
    pub fn admit(&self) -> Result<(), crate::broker::ItemError> {
        if !self.strict {
            return Ok(());
        }
        let debt = self
            .registry
            .with_mutation_bucket(self.user, self.client_id, |b, rate| b.debt_ms(rate))
            .unwrap_or(0);
        if debt == 0 {
            return Ok(());
        }
        self.throttle_ms.set(self.throttle_ms.get().max(debt));
        Err((
            kafka_protocol::ResponseError::ThrottlingQuotaExceeded.code(),
            String::new(),
        ))
    }

    /// After `partitions` were created or deleted.
    pub fn record(&self, partitions: i32) {
        let debt = self
            .registry
            .with_mutation_bucket(self.user, self.client_id, |b, rate| {
                b.tokens -= f64::from(partitions.max(0));
                b.debt_ms(rate)
            })
            .unwrap_or(0);
        if !self.strict {
            self.throttle_ms.set(self.throttle_ms.get().max(debt));
        }
    }

    /// The response's `throttle_time_ms`.
    pub fn throttle_ms(&self) -> i32 {
        self.throttle_ms.get().min(i32::MAX as u64) as i32
    }
}

/// The throttle a mutation request's handler set in its response (the connection is muted
/// for it, as for the other quotas).
pub fn mutation_throttle(resp: &ResponseKind) -> u64 {
    let t = match resp {
        ResponseKind::CreateTopics(r) => r.throttle_time_ms,
        ResponseKind::DeleteTopics(r) => r.throttle_time_ms,
        ResponseKind::CreatePartitions(r) => r.throttle_time_ms,
        _ => 0,
    };
    u64::try_from(t).unwrap_or(0)
}

/// Runs `f`, adding the time spent inside its polls to `busy` (nanoseconds).
///
/// This is kmirror's analogue of Kafka's request time (`requestThreadTimeNanos` plus the
/// network thread's time): a core is one thread doing both jobs, and a request costs it only
/// while its future is being polled. Time the future spends parked (a Fetch long poll, a
/// produce waiting for acks, a hop to another core's queue) is not work on this core, just
/// as Kafka's purgatory time is not I/O-thread time. Work done for it on another core is not
/// counted (Kafka's replica fetchers likewise do not charge the client).
pub async fn timed<F: std::future::Future>(busy: &std::cell::Cell<u64>, f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        let start = std::time::Instant::now();
        let r = f.as_mut().poll(cx);
        busy.set(busy.get() + start.elapsed().as_nanos() as u64);
        r
    })
    .await
}

/// Raises a response's `throttle_time_ms` to `ms` (KIP-219: the client throttles itself
/// too). Every response type kmirror serves that has the field; the rest have none.
pub fn set_throttle(resp: &mut ResponseKind, ms: u64) {
    if ms == 0 {
        return;
    }
    let ms = ms.min(i32::MAX as u64) as i32;
    macro_rules! raise {
        ($($v:ident),* $(,)?) => {
            match resp {
                $(ResponseKind::$v(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    raise!(
        AddOffsetsToTxn,
        AddPartitionsToTxn,
        AlterClientQuotas,
        AlterConfigs,
        AlterPartitionReassignments,
        AlterUserScramCredentials,
        ApiVersions,
        ConsumerGroupDescribe,
        ConsumerGroupHeartbeat,
        CreateAcls,
        CreatePartitions,
        CreateTopics,
        DeleteAcls,
        DeleteGroups,
        DeleteRecords,
        DeleteTopics,
        DescribeAcls,
        DescribeClientQuotas,
        DescribeCluster,
        DescribeConfigs,
        DescribeGroups,
        DescribeLogDirs,
        DescribeProducers,
        DescribeTopicPartitions,
        DescribeTransactions,
        DescribeUserScramCredentials,
        ElectLeaders,
        EndTxn,
        Fetch,
        FindCoordinator,
        Heartbeat,
        IncrementalAlterConfigs,
        InitProducerId,
        JoinGroup,
        LeaveGroup,
        ListGroups,
        ListOffsets,
        ListPartitionReassignments,
        ListTransactions,
        Metadata,
        OffsetCommit,
        OffsetDelete,
        OffsetFetch,
        OffsetForLeaderEpoch,
        Produce,
        SyncGroup,
        TxnOffsetCommit,
        UpdateFeatures,
    );
}

/// Keeps a throttled connection muted for `ms` (or until the broker stops).
pub async fn mute(ctx: &Ctx, ms: u64) {
    futures_lite::future::or(
        glommio::timer::sleep(std::time::Duration::from_millis(ms)),
        ctx.core.stop.stopped(),
    )
    .await;
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// DescribeClientQuotas: Kafka's filter semantics; a bad filter is a top-level error.
pub fn describe_client_quotas(
    registry: &QuotaRegistry,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let components: Vec<FilterComponent> = req
        .components
        .iter()
        .map(|c| FilterComponent {
            entity_type: c.entity_type.to_string(),
            match_type: c.match_type,
            name: c._match.as_ref().map(|m| m.to_string()),
        })
        .collect();
    let found = kmirror_control::quota::validate_filter(&components).map(|()| {
        registry
            .all()
            .iter()
            .filter(|(e, _)| kmirror_control::quota::filter_matches(&components, req.strict, e))
            .map(|(e, v)| (e.clone(), v.clone()))
            .collect::<Vec<_>>()
    });
    match found {
        Err(e) => DescribeClientQuotasResponse::default()
            .with_error_code(errors::quota_error_code(&e))
            .with_error_message(Some(s(&e.to_string())))
            .with_entries(None),
        Ok(rows) => DescribeClientQuotasResponse::default().with_entries(Some(
            rows.into_iter()
                .map(|(e, v)| {
                    describe_client_quotas_response::EntryData::default()
                        .with_entity(
                            e.iter()
                                .map(|(t, n)| {
                                    describe_client_quotas_response::EntityData::default()
                                        .with_entity_type(s(t))
                                        .with_entity_name(n.as_deref().map(s))
                                })
                                .collect(),
                        )
                        .with_values(
                            v.iter()
                                .map(|(k, v)| {
                                    describe_client_quotas_response::ValueData::default()
                                        .with_key(s(k))
                                        .with_value(*v)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )),
    }
}

fn alter_entity(
    e: &kafka_protocol::messages::alter_client_quotas_request::EntryData,
) -> Vec<alter_client_quotas_response::EntityData> {
    e.entity
        .iter()
        .map(|d| {
            alter_client_quotas_response::EntityData::default()
                .with_entity_type(d.entity_type.clone())
                .with_entity_name(d.entity_name.clone())
        })
        .collect()
}

/// AlterClientQuotas; the proposal waits on a blocking thread, off the engine core.
pub async fn alter_client_quotas(
    cluster: &crate::cluster::Cluster,
    registry: &SharedQuotas,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let alts: Vec<Alteration> = req
        .entries
        .iter()
        .map(|e| Alteration {
            entity: e
                .entity
                .iter()
                .map(|d| {
                    (
                        d.entity_type.to_string(),
                        d.entity_name.as_ref().map(|n| n.to_string()),
                    )
                })
                .collect(),
            ops: e
                .ops
                .iter()
                .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
                .collect(),
        })
        .collect();
    let validate_only = req.validate_only;
    let (cluster, st) = (cluster.clone(), registry.clone());
    let results: Vec<Result<(), QuotaError>> = glommio::executor()
        .spawn_blocking(move || alter(&cluster, &st, &alts, validate_only, None))
        .await;
    let entries = req
        .entries
        .iter()
        .zip(results)
        .map(|(e, r)| {
            let out =
                alter_client_quotas_response::EntryData::default().with_entity(alter_entity(e));
            match r {
                Ok(()) => out,
                Err(err) => out
                    .with_error_code(errors::quota_error_code(&err))
                    .with_error_message(Some(s(&err.to_string()))),
            }
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

/// Alters client quotas through the quorum (`ClusterCommand::Quota`), blocking until this
/// node applied them (call from a plain thread); the host name of an ip entity is resolved
/// here, the proposer, since apply must be a pure function. One result per alteration.
/// `writer`: a mirror's quota sync (None: AlterClientQuotas).
pub fn alter(
    cluster: &crate::cluster::Cluster,
    registry: &QuotaRegistry,
    alts: &[Alteration],
    validate_only: bool,
    writer: Option<kmirror_control::mirror::MirrorWriter>,
) -> Vec<Result<(), QuotaError>> {
    use kmirror_control::quorum::{ClusterCommand, Outcome};
    let mut results: Vec<Option<Result<(), QuotaError>>> = alts
        .iter()
        .map(|a| {
            kmirror_control::quota::validate_entity(&a.entity)
                .err()
                .map(Err)
        })
        .collect();
    let send: Vec<Alteration> = alts
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_none())
        .map(|(a, _)| a.clone())
        .collect();
    let applied = if validate_only {
        let mut scratch = QuotaStore::in_memory((*registry.all()).clone());
        scratch.alter(&send, true)
    } else if send.is_empty() {
        Vec::new()
    } else {
        match cluster.propose_blocking(ClusterCommand::Quota {
            alterations: send.clone(),
            writer,
        }) {
            Ok(Outcome::Quotas(r)) => r,
            Ok(other) => {
                vec![Err(QuotaError::Invalid(format!("unexpected {other:?}"))); send.len()]
            }
            Err(e) => vec![Err(QuotaError::Io(std::io::Error::other(e.to_string()))); send.len()],
        }
    };
    let mut applied = applied.into_iter();
    for r in results.iter_mut().filter(|r| r.is_none()) {
        *r = Some(applied.next().unwrap_or(Ok(())));
    }
    results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect()
}

/// AlterClientQuotas refused (no ALTER_CONFIGS on the cluster): every entry.
pub fn alter_client_quotas_refused(
    req: &AlterClientQuotasRequest,
    code: i16,
) -> AlterClientQuotasResponse {
    AlterClientQuotasResponse::default().with_entries(
        req.entries
            .iter()
            .map(|e| {
                alter_client_quotas_response::EntryData::default()
                    .with_entity(alter_entity(e))
                    .with_error_code(code)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_within_ten_windows_of_quota_passes_and_more_is_throttled_by_the_excess() {
        let b = Budget::default();
        let t0 = 1_000_000u64;
        // 10 windows' worth at once is exactly the quota over the minimum 10 s window.
        assert_eq!(b.record(1000, 100.0, t0), 0);
        // Another 1000 bytes doubles the rate: throttled by (200-100)/100 * 10 s.
        assert_eq!(b.record(1000, 100.0, t0), 10_000);
        b.unrecord(1000, t0);
        assert_eq!(b.measure(t0), (1000, 10_000));
        // Samples older than 11 windows are forgotten.
        assert_eq!(b.measure(t0 + 11_000).0, 0);
    }

    #[test]
    fn idle_budgets_nobody_holds_are_swept_so_cycling_client_ids_stay_bounded() {
        let mut budgets = Budgets::default();
        let key = |i: usize| {
            (
                QuotaKind::Produce,
                BudgetKey {
                    user: None,
                    client_id: Some(format!("c{i}")),
                },
            )
        };
        let t0 = 5_000_000u64;
        // One busy budget held by a cache, one busy only in the map.
        let held = budgets.get(key(0), t0);
        held.record(10, 1.0, t0);
        budgets.get(key(1), t0).record(10, 1.0, t0);
        for i in 2..100_000 {
            budgets.get(key(i), t0);
        }
        assert!(
            budgets.map.len() < 3 * SWEEP_MIN,
            "{} budgets kept",
            budgets.map.len()
        );
        // Busy ones survive the sweeps: the same budget, with its bytes.
        assert!(Arc::ptr_eq(&budgets.get(key(0), t0), &held));
        assert_eq!(budgets.get(key(1), t0).measure(t0).0, 10);
        // Once their windows pass, they go too (the cache's clone keeps key 0 alive).
        let later = t0 + 20_000;
        for i in 100_000..100_000 + 4 * SWEEP_MIN {
            budgets.get(key(i), later);
        }
        assert!(budgets.map.contains_key(&key(0)));
        assert!(!budgets.map.contains_key(&key(1)));
    }

    #[test]
    fn request_time_is_charged_in_percent_of_a_second_and_throttled_at_most_one_window() {
        let b = Budget::default();
        let t0 = 7_000_000u64;
        let k = QuotaKind::Request;
        // 1% is 10 ms of work per second: 100 ms within the 10 s minimum window is the quota.
        let q = k.per_second(1.0);
        assert_eq!(q, 10_000_000.0);
        assert_eq!(b.record_bounded(100_000_000, q, t0, k.max_throttle_ms()), 0);
        // 5 ms more: (105 - 100) / 100 x 10 s = 500 ms.
        assert_eq!(b.record_bounded(5_000_000, q, t0, k.max_throttle_ms()), 500);
        // Far over: bounded by one window, as Kafka's ClientRequestQuotaManager does.
        assert_eq!(
            b.record_bounded(1_000_000_000, q, t0, k.max_throttle_ms()),
            1000
        );
    }

    #[test]
    fn throttle_time_is_bounded_by_the_quota_window() {
        let b = Budget::default();
        assert_eq!(b.record(1 << 30, 1.0, 5_000), MAX_THROTTLE_MS);
    }
}
