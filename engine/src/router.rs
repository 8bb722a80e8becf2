//! Cross-core job routing: send a closure to the core that owns a partition.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use kmirror_types::TopicPartition;

use crate::shard::{Partition, Shard};
use crate::{Assignment, EngineError};

pub(crate) type Job = Box<dyn FnOnce(&mut Shard) + Send>;

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
    assignment: Assignment,
}

/// A submitted job's result, to be awaited later (lets a caller fan out to many cores first).
pub enum Pending<R> {
    Ready(R),
    Waiting(flume::Receiver<R>),
}

impl<R> Pending<R> {
    pub async fn wait(self) -> Result<R, EngineError> {
        match self {
            Pending::Ready(r) => Ok(r),
            Pending::Waiting(rx) => rx.recv_async().await.map_err(|_| EngineError::ShuttingDown),
        }
    }
}

impl Router {
    pub(crate) fn new(senders: Vec<flume::Sender<Job>>, assignment: Assignment) -> Router {
        Router {
            inner: Arc::new(Inner {
                senders,
                assignment,
            }),
        }
    }

    pub fn cores(&self) -> usize {
        self.inner.senders.len()
    }

    /// The core owning `tp`.
    pub fn owner(&self, tp: &TopicPartition) -> usize {
        self.inner.assignment.core_for(tp, self.cores())
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
            let r = f(&mut shard.borrow_mut());
            return Ok(Pending::Ready(r));
        }
        let tx = self
            .inner
            .senders
            .get(core)
            .ok_or(EngineError::NoSuchCore(core))?;
        let (rtx, rrx) = flume::bounded(1);
        tx.send_async(Box::new(move |s: &mut Shard| {
            let _ = rtx.send(f(s));
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
        self.submit(core, move |s: &mut Shard| s.partition(&tp).map(f))
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
            let _ = rtx.send(f(s));
        }))
        .map_err(|_| EngineError::ShuttingDown)?;
        rrx.recv().map_err(|_| EngineError::ShuttingDown)
    }
}
