//! The control-plane thread: one plain OS thread owning control state `S` (e.g. the cluster
//! metadata store). Anything — core tasks, other threads — sends it closures over a bounded
//! channel and awaits the result, so `S` needs no lock and admin operations are serialised.

use std::thread;

use crate::EngineError;

type ControlJob<S> = Box<dyn FnOnce(&mut S) + Send>;

/// Handle to the control-plane thread (cheap to clone).
pub struct ControlThread<S> {
    tx: flume::Sender<ControlJob<S>>,
}

impl<S> Clone for ControlThread<S> {
    fn clone(&self) -> Self {
        ControlThread {
            tx: self.tx.clone(),
        }
    }
}

impl<S: Send + 'static> ControlThread<S> {
    /// Starts the thread; it runs until every handle is dropped.
    pub fn spawn(
        name: &str,
        state: S,
    ) -> Result<(ControlThread<S>, thread::JoinHandle<S>), EngineError> {
        let (tx, rx) = flume::bounded::<ControlJob<S>>(1024);
        let h = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut state = state;
                while let Ok(job) = rx.recv() {
                    job(&mut state);
                }
                state
            })?;
        Ok((ControlThread { tx }, h))
    }

    /// Runs `f` on the control thread and returns its result.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let (rtx, rrx) = flume::bounded(1);
        self.tx
            .send_async(Box::new(move |s: &mut S| {
                let _ = rtx.send(f(s));
            }))
            .await
            .map_err(|_| EngineError::ShuttingDown)?;
        rrx.recv_async()
            .await
            .map_err(|_| EngineError::ShuttingDown)
    }

    /// Blocking variant for non-async threads.
    pub fn call_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let (rtx, rrx) = flume::bounded(1);
        self.tx
            .send(Box::new(move |s: &mut S| {
                let _ = rtx.send(f(s));
            }))
            .map_err(|_| EngineError::ShuttingDown)?;
        rrx.recv().map_err(|_| EngineError::ShuttingDown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_thread_serialises_calls_and_returns_state_at_end() {
        let (c, h) = ControlThread::spawn("t", 0u32).unwrap();
        for _ in 0..10 {
            c.call_blocking(|s| *s += 1).unwrap();
        }
        let seen = futures_lite::future::block_on(c.call(|s| *s)).unwrap();
        assert_eq!(seen, 10);
        drop(c);
        assert_eq!(h.join().unwrap(), 10);
    }
}
