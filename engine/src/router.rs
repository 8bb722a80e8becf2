//! Cross-core job routing: send a closure to the core that owns a partition.
//!
//! Ownership comes from the [`Routing`] table behind an atomic pointer (`arc_swap`): `owner`
//! is a lock-free load. Changing a topic's rule at runtime moves partitions between cores
//! with [`Router::set_topic_rule_blocking`]; invariant: a partition is open on at most one
//! core at any time (two cores never hold the same segment files), because a shard opens a
//! partition only if the current table lets it ([`Routing::may_open`]).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use kmirror_types::TopicPartition;

use crate::assign::{Routing, TopicRule};
use crate::shard::{Partition, Shard};
use crate::{Assignment, EngineError};

pub(crate) type Job = Box<dyn FnOnce(&mut Shard) + Send>;

/// The text of a panic payload, for the error and the log.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// Runs a job's closure, turning a panic into [`EngineError::JobPanicked`] so it fails that
/// job only instead of unwinding through the core's executor (which would end every
/// connection and partition on the core).
///
/// Unwind safety (why `AssertUnwindSafe` is acceptable): the closure has `&mut Shard`, and a
/// panic may leave what it was changing half-updated. Partition jobs
/// ([`Router::submit_partition`]) discard their partition's in-memory state on a panic, so a
/// log between writing a batch and advancing its end offset, or with staged producer state,
/// is reopened from its files by the same recovery a crash runs. Other shard state is
/// changed by whole-map inserts and removes, which a panic in the closure cannot leave half
/// done. RefCell guards unwind, so the shard is not left borrowed.
fn run_caught<R>(core: usize, f: impl FnOnce() -> R) -> Result<R, EngineError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let message = panic_message(p.as_ref());
        tracing::error!(core, panic = %message, "a job panicked; it fails alone");
        EngineError::JobPanicked { core, message }
    })
}

thread_local! {
    /// The shard of the core running on this thread (None off the engine's threads).
    pub(crate) static LOCAL_SHARD: RefCell<Option<Rc<RefCell<Shard>>>> = const { RefCell::new(None) };
}

/// Schedules a task on the current executor without polling it now. (glommio's
/// `spawn_local` runs the new task immediately, which would re-enter the shard while the
/// spawning job still holds it.)
fn spawn_later(fut: impl std::future::Future<Output = ()> + 'static) {
    let tq = glommio::executor().current_task_queue();
    match glommio::spawn_local_into(fut, tq) {
        Ok(t) => {
            t.detach();
        }
        Err(e) => tracing::error!(error = %e, "cannot spawn task"),
    }
}

/// Routes work to partition owners. Cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

struct Inner {
    senders: Vec<flume::Sender<Job>>,
    routing: Arc<ArcSwap<Routing>>,
    /// Serializes rule changes (control path only; never taken by `owner`).
    changing: Mutex<()>,
}

/// A partition that changed cores in [`Router::set_topic_rule_blocking`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub tp: TopicPartition,
    pub from: usize,
    pub to: usize,
}

/// A submitted job's result, to be awaited later (lets a caller fan out to many cores first).
pub enum Pending<R> {
    Ready(Result<R, EngineError>),
    Waiting(flume::Receiver<Result<R, EngineError>>),
}

impl<R> Pending<R> {
    /// The job's result; [`EngineError::JobPanicked`] if it panicked.
    pub async fn wait(self) -> Result<R, EngineError> {
        match self {
            Pending::Ready(r) => r,
            Pending::Waiting(rx) => rx
                .recv_async()
                .await
                .map_err(|_| EngineError::ShuttingDown)?,
        }
    }
}

impl Router {
    pub(crate) fn new(senders: Vec<flume::Sender<Job>>, assignment: Assignment) -> Router {
        Router {
            inner: Arc::new(Inner {
                senders,
                routing: Arc::new(ArcSwap::from_pointee(Routing::new(assignment))),
                changing: Mutex::new(()),
            }),
        }
    }

    /// The table each shard checks before opening a partition.
    pub(crate) fn routing_handle(&self) -> Arc<ArcSwap<Routing>> {
        self.inner.routing.clone()
    }

    /// The broker-wide policy.
    pub fn assignment(&self) -> Assignment {
        self.inner.routing.load().default
    }

    /// The rule in force for `topic`, if any.
    pub fn topic_rule(&self, topic: &str) -> Option<TopicRule> {
        self.inner
            .routing
            .load()
            .rules
            .get(topic)
            .map(|r| (**r).clone())
    }

    /// Where `tp` would live under `rule` (None = the broker-wide policy), without changing
    /// anything.
    pub fn owner_under(&self, rule: Option<&TopicRule>, tp: &TopicPartition) -> usize {
        let default = self.assignment();
        match rule {
            Some(r) => r.core_for(default, tp, self.cores()),
            None => default.core_for(tp, self.cores()),
        }
    }

    /// Sets (or with `None` clears) `topic`'s placement rule, moving the open partitions whose
    /// owner changes; returns them. A partition not open anywhere just opens on its new owner
    /// when first used.
    ///
    /// The move: (1) publish the new rule as *pending*: `owner` still answers the old core,
    /// and no core may open a partition whose owner differs under the two rules; (2) on every
    /// core, after the jobs already queued there (FIFO), flush and close the topic's open
    /// partitions it will not own (their long-poll waiters are woken); (3) publish the new
    /// rule; (4) open each moved partition on its new core (recovery reads the same files, so
    /// it continues at the same log end). A job that reaches an old core after (2), or any
    /// open between (1) and (3), gets [`EngineError::NotOwner`] (clients retry it).
    ///
    /// The caller stops what keeps a partition busy across awaits on its old core (a mirror
    /// fetcher) before, and restarts it after. Never call it on an engine core.
    pub fn set_topic_rule_blocking(
        &self,
        topic: &str,
        rule: Option<TopicRule>,
    ) -> Result<Vec<Moved>, EngineError> {
        let _serial = self
            .inner
            .changing
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let rule = rule.filter(|r| !r.is_empty());
        if let Some(r) = &rule {
            for c in r.core.iter().chain(r.partitions.values()) {
                if *c >= self.cores() {
                    return Err(EngineError::NoSuchCore(*c));
                }
            }
        }
        if self.topic_rule(topic) == rule {
            return Ok(Vec::new());
        }
        let new = Arc::new(rule.clone().unwrap_or_default());
        self.publish(|r| {
            r.pending.insert(topic.to_owned(), new.clone());
        });
        let (default, cores) = (self.assignment(), self.cores());
        let mut moves = Vec::new();
        let mut failed = None;
        for core in 0..cores {
            let (t, rule) = (topic.to_owned(), new.clone());
            let closed = self.run_on_blocking(core, move |s| {
                s.close_partitions_where(|tp| {
                    tp.topic == t && rule.core_for(default, tp, cores) != core
                })
            });
            match closed {
                Ok(Ok(tps)) => moves.extend(tps.into_iter().map(|tp| Moved {
                    to: new.core_for(default, &tp, cores),
                    tp,
                    from: core,
                })),
                Ok(Err(e)) | Err(e) => failed = Some(e),
            }
        }
        self.publish(|r| {
            r.pending.remove(topic);
            match &rule {
                Some(rule) => r.rules.insert(topic.to_owned(), Arc::new(rule.clone())),
                None => r.rules.remove(topic),
            };
        });
        for m in &moves {
            let tp = m.tp.clone();
            // A failure here is the same as at startup: the next use retries the open.
            if let Err(e) = self.run_on_blocking(m.to, move |s| s.partition(&tp).map(|_| ()))? {
                tracing::warn!(tp = %m.tp, core = m.to, error = %e, "opening moved partition");
            }
            tracing::info!(tp = %m.tp, from = m.from, to = m.to, "partition moved between cores");
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(moves),
        }
    }

    fn publish(&self, f: impl FnOnce(&mut Routing)) {
        let mut next = (**self.inner.routing.load()).clone();
        f(&mut next);
        self.inner.routing.store(Arc::new(next));
    }

    /// Topics that have a rule of their own.
    pub fn ruled_topics(&self) -> BTreeSet<String> {
        self.inner.routing.load().rules.keys().cloned().collect()
    }

    pub fn cores(&self) -> usize {
        self.inner.senders.len()
    }

    /// The core owning `tp`.
    pub fn owner(&self, tp: &TopicPartition) -> usize {
        self.inner.routing.load().owner(tp, self.cores())
    }

    fn local_shard(core: usize) -> Option<Rc<RefCell<Shard>>> {
        LOCAL_SHARD.with(|s| {
            s.borrow()
                .as_ref()
                .filter(|s| s.borrow().core() == core)
                .cloned()
        })
    }

    /// Starts `f` on `core` (inline if that is the current thread's core).
    pub async fn submit<R: Send + 'static>(
        &self,
        core: usize,
        f: impl FnOnce(&mut Shard) -> R + Send + 'static,
    ) -> Result<Pending<R>, EngineError> {
        if let Some(shard) = Self::local_shard(core) {
            let r = run_caught(core, || f(&mut shard.borrow_mut()));
            return Ok(Pending::Ready(r));
        }
        let tx = self
            .inner
            .senders
            .get(core)
            .ok_or(EngineError::NoSuchCore(core))?;
        let (rtx, rrx) = flume::bounded(1);
        tx.send_async(Box::new(move |s: &mut Shard| {
            let _ = rtx.send(run_caught(core, || f(s)));
        }))
        .await
        .map_err(|_| EngineError::ShuttingDown)?;
        Ok(Pending::Waiting(rrx))
    }

    /// Runs `f` on `core` and returns its result.
    pub async fn run_on<R: Send + 'static>(
        &self,
        core: usize,
        f: impl FnOnce(&mut Shard) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        self.submit(core, f).await?.wait().await
    }

    /// Starts `f` on the partition's owner (opening the partition if needed).
    pub async fn submit_partition<R: Send + 'static>(
        &self,
        tp: TopicPartition,
        f: impl FnOnce(&mut Partition) -> R + Send + 'static,
    ) -> Result<Pending<Result<R, EngineError>>, EngineError> {
        let core = self.owner(&tp);
        self.submit(core, move |s: &mut Shard| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.partition(&tp).map(f)))
            {
                Ok(r) => r,
                Err(p) => {
                    // See `run_caught`: this partition's state may be half-updated.
                    s.discard_partition(&tp);
                    std::panic::resume_unwind(p)
                }
            }
        })
        .await
    }

    /// Runs `f` on the partition, on its owning core.
    pub async fn with_partition<R: Send + 'static>(
        &self,
        tp: TopicPartition,
        f: impl FnOnce(&mut Partition) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        self.submit_partition(tp, f).await?.wait().await?
    }

    /// Starts a long-lived task (e.g. a mirror fetcher) on `core`'s executor. `make` runs on
    /// that core and builds the future there, so the future itself need not be `Send`; inside
    /// it, [`Router::with_partition`] for partitions owned by `core` runs inline.
    pub async fn spawn_on<F, Fut>(&self, core: usize, make: F) -> Result<(), EngineError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        self.run_on(core, move |_s: &mut Shard| {
            spawn_later(make());
        })
        .await
    }

    /// Blocking variant of [`Router::spawn_on`] for plain threads.
    pub fn spawn_on_blocking<F, Fut>(&self, core: usize, make: F) -> Result<(), EngineError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        self.run_on_blocking(core, move |_s: &mut Shard| {
            spawn_later(make());
        })
    }

    /// [`Router::spawn_on`] for a plain thread that must not wait for the core (a
    /// coordinator starting a job): the task is queued and this returns at once, waiting
    /// only while `core`'s queue is full (back-pressure).
    pub fn spawn_on_queued<F, Fut>(&self, core: usize, make: F) -> Result<(), EngineError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        let tx = self
            .inner
            .senders
            .get(core)
            .ok_or(EngineError::NoSuchCore(core))?;
        tx.send(Box::new(move |_s: &mut Shard| {
            let _ = run_caught(core, || spawn_later(make()));
        }))
        .map_err(|_| EngineError::ShuttingDown)
    }

    /// Blocking variant of [`Router::run_on`] for plain threads (never call it on a core).
    pub fn run_on_blocking<R: Send + 'static>(
        &self,
        core: usize,
        f: impl FnOnce(&mut Shard) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let tx = self
            .inner
            .senders
            .get(core)
            .ok_or(EngineError::NoSuchCore(core))?;
        let (rtx, rrx) = flume::bounded(1);
        tx.send(Box::new(move |s: &mut Shard| {
            let _ = rtx.send(run_caught(core, || f(s)));
        }))
        .map_err(|_| EngineError::ShuttingDown)?;
        rrx.recv().map_err(|_| EngineError::ShuttingDown)?
    }
}
