//! Log compaction scheduling: when each core's compacted partitions are cleaned, and where
//! the work runs.
//!
//! Owns: the per-core cleaner loop and the broker's one cleaner thread (Kafka's
//! `log.cleaner.threads` = 1). Must not depend on: the network layer.
//!
//! Why a thread and a handoff, not slices on the core: a cleaning pass reads every cleanable
//! segment, decompresses and recompresses batches, and fsyncs new files: long, CPU-heavy and
//! blocking work. Sliced onto the core it would need a resumable state machine over segments
//! that appends, retention and truncation may change between slices, and every slice still
//! stalls that core's produce/fetch. Instead the owning core makes a [`kmirror_log::CleanJob`]
//! (cheap: zero-copy slices of sealed, immutable segments plus copies of the transaction
//! facts), the cleaner thread runs it (writing only `*.log.cleaned` files), and the owning core
//! installs the result ([`kmirror_log::Log::install_cleaned`]: a rename per changed segment
//! and an index rebuild), which checks that the segments are still the ones cleaned. The
//! core's single-threaded ownership of the log is kept; readers holding old bytes keep them.
//! The thread is throttled ([`CleanerConfig::io_bytes_per_sec`], Kafka's
//! `log.cleaner.io.max.bytes.per.second`) and jobs are queued one per core at a time, so
//! cleaning never takes more than one CPU and never stalls a core. glommio's blocking pool is
//! not used: other work (SASL, ACL writes) shares it and must not wait behind a long pass.
//!
//! Mirror partitions are not cleaned while mirroring (the source's log drives theirs); once
//! failed over (the partition's `mirror` cleared) they are cleaned like any other.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use kmirror_log::{CleanJob, Cleaned, LogError};
use kmirror_types::TopicPartition;

use crate::runtime::StopToken;
use crate::shard::Shard;

/// Cleaner settings (Kafka broker config names in the docs).
#[derive(Debug, Clone)]
pub struct CleanerConfig {
    /// log.cleaner.backoff.ms: pause between a core's cleaning rounds (Kafka: 15 s).
    pub backoff: Duration,
    /// log.cleaner.io.max.bytes.per.second: bytes read plus written per second by the cleaner
    /// thread; 0 = unlimited.
    pub io_bytes_per_sec: u64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            backoff: Duration::from_secs(15),
            io_bytes_per_sec: 64 << 20,
        }
    }
}

type Reply = flume::Sender<Result<Cleaned, LogError>>;

/// Handle to the cleaner thread; cloned to every core.
#[derive(Clone)]
pub(crate) struct CleanerThread {
    tx: flume::Sender<(CleanJob, Reply)>,
}

impl CleanerThread {
    /// Starts the thread; it exits when every handle is dropped.
    pub(crate) fn start(io_bytes_per_sec: u64) -> std::io::Result<CleanerThread> {
        // One job per core can be queued (each core waits for its reply).
        let (tx, rx) = flume::unbounded::<(CleanJob, Reply)>();
        std::thread::Builder::new()
            .name("kmirror-cleaner".into())
            .spawn(move || {
                let mut throttle = Throttle::new(io_bytes_per_sec);
                while let Ok((job, reply)) = rx.recv() {
                    let res = job.run_throttled(&mut |bytes| throttle.account(bytes));
                    if let Err(flume::SendError(Ok(cleaned))) = reply.send(res) {
                        // The core stopped waiting (shutdown): nothing will install it.
                        cleaned.discard();
                    }
                }
            })?;
        Ok(CleanerThread { tx })
    }
}

/// Sleeps the cleaner thread so its average I/O stays under the rate.
struct Throttle {
    rate: u64,
    start: Instant,
    bytes: u64,
}

impl Throttle {
    fn new(rate: u64) -> Self {
        Throttle {
            rate,
            start: Instant::now(),
            bytes: 0,
        }
    }

    fn account(&mut self, bytes: usize) {
        if self.rate == 0 {
            return;
        }
        self.bytes += bytes as u64;
        // Measure over windows of about a second so an idle spell is not banked.
        let elapsed = self.start.elapsed();
        if elapsed > Duration::from_secs(1) && self.bytes < self.rate {
            self.start = Instant::now();
            self.bytes = 0;
            return;
        }
        let due = Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
    }
}

/// The per-core loop: every `backoff`, each compacted, writable partition of this core that
/// is dirty enough gets one pass, one partition at a time.
pub(crate) async fn run(
    shard: Rc<RefCell<Shard>>,
    thread: CleanerThread,
    backoff: Duration,
    stop: StopToken,
) {
    loop {
        let stopped = futures_lite::future::or(
            async {
                glommio::timer::sleep(backoff).await;
                false
            },
            async {
                stop.stopped().await;
                true
            },
        )
        .await;
        if stopped {
            return;
        }
        let tps = shard.borrow_mut().cleanable_partitions();
        for tp in tps {
            if stop.is_stopped() {
                return;
            }
            clean_one(&shard, &thread, &tp, &stop).await;
        }
    }
}

async fn clean_one(
    shard: &Rc<RefCell<Shard>>,
    thread: &CleanerThread,
    tp: &TopicPartition,
    stop: &StopToken,
) {
    let job = shard.borrow_mut().cleaning_job(tp, crate::now_ms());
    let Some(job) = job else { return };
    let (reply_tx, reply_rx) = flume::bounded(1);
    if thread.tx.send((job, reply_tx)).is_err() {
        return;
    }
    let res = futures_lite::future::or(async { reply_rx.recv_async().await.ok() }, async {
        stop.stopped().await;
        None
    })
    .await;
    match res {
        Some(Ok(cleaned)) => shard.borrow_mut().install_cleaned(tp, cleaned),
        Some(Err(e)) => tracing::warn!(%tp, error = %e, "log cleaning failed"),
        None => {}
    }
}
