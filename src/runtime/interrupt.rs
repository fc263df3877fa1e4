//! Stopping attempts whose result is no longer wanted.
//!
//! When a step removes a token whose attempt is in flight (a cancel, an
//! unwind, an interrupting boundary), the engine says so with
//! `Effect::AttemptAbandoned`. Once that step is committed, the attempt is
//! stopped through its [`Stop`] (the sandbox traps it at its next epoch check,
//! or drops it if it is blocked in a host call), which frees its lane at once
//! instead of at its deadline. An attempt of a task declared non-idempotent
//! (`interruptible: false`, HX `idempotent="false"`) is let finish; its result
//! is discarded all the same.
//!
//! Invariant: a stop is sent only after the step that abandoned the attempt is
//! committed — were it sent before and the commit lost a race, the stopped
//! attempt's outcome would reach a token that is still live.
//! On PostgreSQL the commit also asks every replica to stop them (the step
//! carries them as `StepWrite::abandoned`; `store/pg_listen.rs` sends and
//! hears `sutra_stops`), so an attempt running on another replica than the
//! one that took the cancel is stopped too. A stop heard for an attempt that
//! does not run here is ignored.

use crate::sandbox::Stop;
use crate::store::{StopSink, Store};
use std::collections::HashMap;
use std::sync::{Mutex, Weak};

/// (instance, token, attempt).
type Key = (String, u64, u32);

/// The attempts running in this process, each with its [`Stop`].
#[derive(Default)]
pub(crate) struct Running {
    /// Each attempt's stop, and when it began (real time).
    stops: Mutex<HashMap<Key, (Stop, std::time::Instant)>>,
}

impl Running {
    /// Register an attempt about to run; it stays registered while the
    /// returned guard lives.
    pub(crate) fn enter(&self, instance: &str, token: u64, attempt: u32) -> Entered<'_> {
        let key = (instance.to_string(), token, attempt);
        let stop = Stop::default();
        if let Ok(mut m) = self.stops.lock() {
            m.insert(key.clone(), (stop.clone(), std::time::Instant::now()));
        }
        Entered {
            running: self,
            key,
            stop,
        }
    }

    /// Whether an attempt running in this process now began at least `d`
    /// ago (real time).
    pub(crate) fn any_older_than(&self, d: std::time::Duration) -> bool {
        self.stops
            .lock()
            .map(|m| m.values().any(|(_, began)| began.elapsed() >= d))
            .unwrap_or(false)
    }

    /// Stop the attempt, if it runs here. Returns whether it did.
    pub(crate) fn stop(&self, instance: &str, token: u64, attempt: u32) -> bool {
        let key = (instance.to_string(), token, attempt);
        let stop = self
            .stops
            .lock()
            .ok()
            .and_then(|m| m.get(&key).map(|(s, _)| s.clone()));
        match stop {
            Some(s) => {
                s.stop();
                true
            }
            None => false,
        }
    }
}

/// An attempt registered in [`Running`]; unregistered on drop.
pub(crate) struct Entered<'a> {
    running: &'a Running,
    key: Key,
    pub(crate) stop: Stop,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.running.stops.lock() {
            m.remove(&self.key);
        }
    }
}

/// The runtime's ear for stops committed by other replicas
/// (`Store::watch_stops`).
pub(crate) struct Stopper<S: Store>(pub(crate) Weak<super::Inner<S>>);

impl<S: Store> StopSink for Stopper<S> {
    fn stop(&self, instance: &str, token: u64, attempt: u32) {
        if let Some(inner) = self.0.upgrade() {
            inner.running.stop(instance, token, attempt);
        }
    }

    fn alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}
