//! Alarm fires handed from the alarm thread to the runtime's workers.
//!
//! The alarm thread (alarm.rs) must only hand work off. Spawning each fire's
//! task from there made that thread allocate every task (its future held
//! the sandbox warm-up's inline) on its own heap, to be freed on a worker,
//! and push each through tokio's shared queue: with its wake-ups, 3.4 µs of
//! the alarm thread per fire when 8,000 timers fell due together, on the
//! cores the fires need (2.6 µs since). Now the alarm thread only queues the
//! fire here (the instance id, the park, the instant) and spawns one task
//! per batch, when the queue was empty; that task, on a worker, spawns the
//! batch's fires there.
//!
//! Invariants:
//! - every queued fire gets its own task (a fire awaits its commit: fires
//!   never wait on each other);
//! - a fire still never acts before its instant (inline.rs spins until it);
//! - fires queued when the runtime is gone are dropped unrun, as pending
//!   alarms are (their parks lapse to the pollers); so are those of a batch
//!   whose task was dropped unrun (its tokio runtime shut down), so the next
//!   fire starts a new batch rather than waiting behind them.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::Runtime;
use crate::store::Store;

/// One due park of an instance, and the instant it may fire.
pub(crate) struct Fire {
    pub(crate) instance: String,
    pub(crate) park: i64,
    pub(crate) not_before: Instant,
}

/// Fires queued by the alarm thread, not yet spawned on a worker.
#[derive(Default)]
pub(crate) struct FireQueue {
    queued: Mutex<Vec<Fire>>,
}

impl FireQueue {
    /// The queue (a panic while it was held left it whole: pushes and takes
    /// only).
    fn queued(&self) -> MutexGuard<'_, Vec<Fire>> {
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue a fire; true if the queue was empty (the caller spawns the
    /// task that takes it).
    fn push(&self, fire: Fire) -> bool {
        let mut q = self.queued();
        q.push(fire);
        q.len() == 1
    }

    fn take(&self) -> Vec<Fire> {
        std::mem::take(&mut *self.queued())
    }
}

impl<S: Store> Runtime<S> {
    /// Called on the alarm thread: queue the fire and, if it is the first
    /// queued, spawn the task that spawns the queue's fires on a worker.
    pub(crate) fn hand_fire(&self, handle: &tokio::runtime::Handle, fire: Fire) {
        if self.inner.fires.push(fire) {
            let mut batch = Batch(Some(self.clone()));
            handle.spawn(async move {
                if let Some(rt) = batch.0.take() {
                    rt.spawn_fires();
                }
            });
        }
    }

    /// On a worker: one task per queued fire.
    fn spawn_fires(&self) {
        for fire in self.inner.fires.take() {
            let rt = self.clone();
            tokio::spawn(async move { rt.fire(fire).await });
        }
    }
}

/// The task that spawns a batch's fires; dropped unrun, it drops the queued
/// fires (see the module's invariants).
struct Batch<S: Store>(Option<Runtime<S>>);

impl<S: Store> Drop for Batch<S> {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            drop(rt.inner.fires.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::runtime::RuntimeOptions;
    use crate::store::SqliteStore;

    fn fire(instance: &str) -> Fire {
        Fire {
            instance: instance.to_string(),
            park: 1,
            not_before: Instant::now(),
        }
    }

    fn queued<S: Store>(rt: &Runtime<S>) -> usize {
        rt.inner.fires.queued().len()
    }

    #[test]
    fn a_batch_whose_tokio_runtime_is_gone_leaves_nothing_queued_for_the_next_to_wait_behind() {
        let live = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let rt = live.block_on(async {
            let store = SqliteStore::open("sqlite::memory:").await.unwrap();
            Runtime::new(store, RuntimeOptions::new(Config::default())).unwrap()
        });
        let gone = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let handle = gone.handle().clone();
        drop(gone);
        rt.hand_fire(&handle, fire("a"));
        assert_eq!(
            queued(&rt),
            0,
            "the fire of a batch dropped unrun stays queued"
        );
        // The next fire starts a batch of its own, which takes it.
        rt.hand_fire(live.handle(), fire("b"));
        assert_eq!(queued(&rt), 1);
        live.block_on(async {
            while queued(&rt) > 0 {
                tokio::task::yield_now().await;
            }
        });
    }
}
