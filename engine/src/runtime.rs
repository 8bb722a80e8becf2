//! Starting and stopping the per-core executors.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};

use crate::router::{Job, LOCAL_SHARD};
use crate::shard::{Catalog, Shard};
use crate::{Assignment, EngineError, Router};

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Number of cores (executors); 0 = all online CPUs.
    pub cores: usize,
    /// Pin executor i to CPU i when there are enough CPUs.
    pub pin: bool,
    pub assignment: Assignment,
    /// Capacity of each core's inbound job channel.
    pub channel_capacity: usize,
    /// io_uring registered-buffer memory per executor. Kept small: it counts against
    /// RLIMIT_MEMLOCK, which is often only 8 MiB in containers.
    pub io_memory: usize,
    /// How often each core applies retention to its partitions.
    pub retention_check: Duration,
    /// Log compaction scheduling and throttle.
    pub cleaner: crate::cleaner::CleanerConfig,
    /// `replica.lag.time.max.ms`: a follower not caught up for this long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cores: 0,
            pin: true,
            assignment: Assignment::Spread,
            channel_capacity: 4096,
            io_memory: 512 << 10,
            retention_check: Duration::from_secs(30),
            cleaner: crate::cleaner::CleanerConfig::default(),
            replica_lag_time_max_ms: 30_000,
        }
    }
}

/// Signals shutdown to every task holding a clone; triggered when the [`Engine`] stops.
#[derive(Clone)]
pub struct StopToken(flume::Receiver<()>);

impl StopToken {
    /// Resolves once shutdown has begun.
    pub async fn stopped(&self) {
        let _ = self.0.recv_async().await;
    }

    pub fn is_stopped(&self) -> bool {
        self.0.is_disconnected()
    }

    /// A token with its trigger, for tests and embedders.
    pub fn new_pair() -> (flume::Sender<()>, StopToken) {
        let (tx, rx) = flume::bounded(1);
        (tx, StopToken(rx))
    }
}

/// What each core's service (the network server) is handed.
#[derive(Clone)]
pub struct CoreContext {
    pub core: usize,
    pub router: Router,
    pub stop: StopToken,
}

/// The running engine.
pub struct Engine {
    router: Router,
    stop_tx: Option<flume::Sender<()>>,
    handles: Vec<ExecutorJoinHandle<()>>,
}

impl Engine {
    /// Starts one executor per core. `serve` runs on each core (the network server); when it
    /// returns after the stop token fires, the core waits for all cores to finish serving
    /// (still answering cross-core jobs), then flushes and closes its logs.
    pub fn start<F, Fut>(
        cfg: EngineConfig,
        catalog: Arc<dyn Catalog>,
        serve: F,
    ) -> Result<Engine, EngineError>
    where
        F: Fn(CoreContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let online: Vec<usize> = glommio::CpuSet::online()
            .map(|s| s.into_iter().map(|l| l.cpu).collect())
            .unwrap_or_default();
        let mut online = online;
        online.sort_unstable();
        online.dedup();
        let n = if cfg.cores == 0 {
            online.len().max(1)
        } else {
            cfg.cores
        };
        let mut senders = Vec::with_capacity(n);
        let mut receivers = Vec::with_capacity(n);
        for _ in 0..n {
            let (tx, rx) = flume::bounded::<Job>(cfg.channel_capacity);
            senders.push(tx);
            receivers.push(rx);
        }
        let router = Router::new(senders, cfg.assignment);
        let (stop_tx, stop) = StopToken::new_pair();
        let serve = Arc::new(serve);
        let serving = Arc::new(AtomicUsize::new(n));
        let mut handles = Vec::with_capacity(n);
        let cleaner = crate::cleaner::CleanerThread::start(cfg.cleaner.io_bytes_per_sec)?;
        for (core, jobs) in receivers.into_iter().enumerate() {
            let placement = if cfg.pin && n <= online.len() {
                Placement::Fixed(online[core])
            } else {
                Placement::Unbound
            };
            let ctx = CoreContext {
                core,
                router: router.clone(),
                stop: stop.clone(),
            };
            let catalog = catalog.clone();
            let serve = serve.clone();
            let serving = serving.clone();
            let retention_every = cfg.retention_check;
            let cleaner = (cleaner.clone(), cfg.cleaner.backoff);
            let h = LocalExecutorBuilder::new(placement)
                .name(&format!("kmirror-core-{core}"))
                .io_memory(cfg.io_memory)
                .spawn(move || async move {
                    run_core(ctx, catalog, jobs, serve, serving, retention_every, cleaner).await
                })
                .map_err(|e| EngineError::Executor(e.to_string()))?;
            handles.push(h);
        }
        Ok(Engine {
            router,
            stop_tx: Some(stop_tx),
            handles,
        })
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Begins shutdown (stop accepting, finish in-flight work) without waiting.
    pub fn begin_stop(&mut self) {
        self.stop_tx.take();
    }

    /// Stops and waits until every core has flushed and closed its logs.
    pub fn stop(mut self) {
        self.begin_stop();
        for h in self.handles.drain(..) {
            if let Err(e) = h.join() {
                tracing::error!(error = %e, "core exited with an error");
            }
        }
    }

    /// Waits for the cores to exit (after [`Engine::begin_stop`] from elsewhere).
    pub fn join(mut self) {
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

async fn run_core<F, Fut>(
    ctx: CoreContext,
    catalog: Arc<dyn Catalog>,
    jobs: flume::Receiver<Job>,
    serve: Arc<F>,
    serving: Arc<AtomicUsize>,
    retention_every: Duration,
    cleaner: (crate::cleaner::CleanerThread, Duration),
) where
    F: Fn(CoreContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let core = ctx.core;
    let shard = Rc::new(RefCell::new(Shard::new(
        core,
        ctx.router.cores(),
        catalog,
        ctx.router.routing_handle(),
    )));
    LOCAL_SHARD.with(|s| *s.borrow_mut() = Some(shard.clone()));
    {
        let router = ctx.router.clone();
        shard.borrow_mut().open_owned(|tp| router.owner(tp) == core);
    }
    let job_shard = shard.clone();
    let job_loop = glommio::spawn_local(async move {
        while let Ok(job) = jobs.recv_async().await {
            job(&mut job_shard.borrow_mut());
            glommio::yield_if_needed().await;
        }
    })
    .detach();
    let ret_shard = shard.clone();
    let ret_stop = ctx.stop.clone();
    let retention = glommio::spawn_local(async move {
        loop {
            let stopped = futures_lite::future::or(
                async {
                    glommio::timer::sleep(retention_every).await;
                    false
                },
                async {
                    ret_stop.stopped().await;
                    true
                },
            )
            .await;
            if stopped {
                break;
            }
            ret_shard.borrow_mut().apply_retention(crate::now_ms());
        }
    })
    .detach();

    let cleaning = glommio::spawn_local(crate::cleaner::run(
        shard.clone(),
        cleaner.0,
        cleaner.1,
        ctx.stop.clone(),
    ))
    .detach();

    serve(ctx.clone()).await;

    // Other cores may still be finishing requests that need our partitions: keep answering
    // jobs until every core is done serving.
    serving.fetch_sub(1, Ordering::SeqCst);
    while serving.load(Ordering::SeqCst) > 0 {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    let _ = retention.await;
    let _ = cleaning.await;
    shard.borrow_mut().close_all();
    tracing::debug!(core, "core stopped");
    drop(job_loop);
    LOCAL_SHARD.with(|s| s.borrow_mut().take());
}
