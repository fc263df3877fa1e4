//! Warm instances: instantiated stores kept between the attempts of a module
//! deployed *reusable*, so a heavy guest (a Python or JS runtime) pays its
//! instantiation and first-call setup once rather than on every attempt.
//!
//! Invariants:
//! - Opt-in per attempt ([`Reuse`]): an attempt without one never takes a
//!   warm instance nor leaves one, and never touches this pool.
//! - An idle instance is keyed by (tenant, module digest) and by the code it
//!   was instantiated from (the tier: a quick instance is never handed an
//!   attempt once the optimised code is in): it only ever serves attempts of
//!   that tenant and that module, never another's.
//! - Only an attempt whose call *returned* (a result, a business error or a
//!   failure the guest chose) gives its instance back; a trap, a fuel
//!   exhaustion, a memory refusal, a deadline, a stop or an egress session
//!   drop it (`attempt.rs`). An instance serves at most `1 + max_reuses`
//!   attempts and is dropped once its linear memory is over
//!   `memory_ceiling_bytes`.
//! - The pool is bounded (`SandboxConfig::warm_capacity`, least recently used
//!   out first); an instance idle for `SandboxConfig::warm_idle` is dropped at
//!   the next pool operation (or [`super::Sandbox::sweep_warm`]). Stores are
//!   dropped outside the pool's lock.
//! - Fuel, the deadline and the capture caps are set afresh for every
//!   attempt; the memory limit is the instance's (what earlier attempts grew
//!   stays counted).

use super::host::{HostState, Task};
use super::loader::Ready;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::Store;

/// How a reusable module's instances may be reused (the deployment's
/// `reusable` modules; see docs/tasks.md "Warm instances").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reuse {
    /// Attempts one instance may serve after its first (0: none).
    pub max_reuses: u32,
    /// An instance whose linear memories hold more than this after an
    /// attempt is dropped rather than kept.
    pub memory_ceiling_bytes: u64,
}

impl Reuse {
    /// Default reuses per instance.
    pub const DEFAULT_MAX_REUSES: u32 = 1000;
    /// Default memory ceiling: 64 MiB (the default attempt memory cap).
    pub const DEFAULT_MEMORY_CEILING_BYTES: u64 = 64 << 20;
}

impl Default for Reuse {
    fn default() -> Self {
        Reuse {
            max_reuses: Self::DEFAULT_MAX_REUSES,
            memory_ceiling_bytes: Self::DEFAULT_MEMORY_CEILING_BYTES,
        }
    }
}

/// What the pool did (for tests and metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WarmStats {
    /// Instances idle in the pool now.
    pub idle: usize,
    /// Attempts that ran on a warm instance.
    pub reused: u64,
    /// Instances given back to the pool.
    pub kept: u64,
    /// Idle instances dropped (evicted, expired, stale code, over a limit).
    pub evicted: u64,
}

/// An instantiated store and its exports.
pub(crate) struct Warm {
    pub(crate) store: Store<HostState>,
    pub(crate) task: Task,
    /// The code it was instantiated from.
    pub(crate) ready: Arc<Ready>,
    /// Attempts it has served.
    pub(crate) uses: u32,
}

struct Idle {
    tenant: Arc<str>,
    digest: String,
    warm: Warm,
    since: Instant,
    used: u64,
}

#[derive(Default)]
struct State {
    idle: Vec<Idle>,
    clock: u64,
    reused: u64,
    kept: u64,
    evicted: u64,
}

/// The bounded pool of idle warm instances.
pub(crate) struct WarmPool {
    capacity: usize,
    idle_after: Duration,
    state: Mutex<State>,
}

impl WarmPool {
    pub(crate) fn new(capacity: usize, idle_after: Duration) -> WarmPool {
        WarmPool {
            capacity,
            idle_after,
            state: Mutex::new(State::default()),
        }
    }

    /// Take the most recently used idle instance of (tenant, digest) built
    /// from `ready`, whose memory fits `memory_cap`; drops expired ones and
    /// this key's stale ones on the way.
    pub(crate) fn checkout(
        &self,
        tenant: &str,
        digest: &str,
        ready: &Arc<Ready>,
        memory_cap: u64,
    ) -> Option<Warm> {
        let now = Instant::now();
        let mut dropped = Vec::new();
        let found = {
            let mut s = self.state.lock().ok()?;
            let before = s.idle.len();
            let (keep, gone): (Vec<Idle>, Vec<Idle>) =
                std::mem::take(&mut s.idle).into_iter().partition(|i| {
                    let same_key = &*i.tenant == tenant && i.digest == digest;
                    let stale = same_key
                        && (!Arc::ptr_eq(&i.warm.ready, ready)
                            || i.warm.store.data().limiter.held() > memory_cap);
                    !stale && now.duration_since(i.since) < self.idle_after
                });
            s.idle = keep;
            dropped.extend(gone);
            s.evicted += (before - s.idle.len()) as u64;
            let best = s
                .idle
                .iter()
                .enumerate()
                .filter(|(_, i)| &*i.tenant == tenant && i.digest == digest)
                .max_by_key(|(_, i)| i.used)
                .map(|(n, _)| n);
            let found = best.map(|n| s.idle.swap_remove(n).warm);
            if found.is_some() {
                s.reused += 1;
            }
            found
        };
        drop(dropped);
        found
    }

    /// Keep `warm` for the next attempt of (tenant, digest), evicting the
    /// least recently used idle instance when the pool is full.
    pub(crate) fn checkin(&self, tenant: &Arc<str>, digest: &str, warm: Warm) {
        if self.capacity == 0 {
            return;
        }
        let mut evicted = None;
        if let Ok(mut s) = self.state.lock() {
            if s.idle.len() >= self.capacity {
                let oldest = s
                    .idle
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, i)| i.used)
                    .map(|(n, _)| n);
                if let Some(n) = oldest {
                    evicted = Some(s.idle.swap_remove(n));
                    s.evicted += 1;
                }
            }
            s.clock += 1;
            let used = s.clock;
            s.kept += 1;
            s.idle.push(Idle {
                tenant: tenant.clone(),
                digest: digest.to_string(),
                warm,
                since: Instant::now(),
                used,
            });
        }
        drop(evicted);
    }

    /// Drop every instance idle for longer than `warm_idle`.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        let gone: Vec<Idle> = match self.state.lock() {
            Ok(mut s) => {
                let (keep, gone): (Vec<Idle>, Vec<Idle>) = std::mem::take(&mut s.idle)
                    .into_iter()
                    .partition(|i| now.duration_since(i.since) < self.idle_after);
                s.idle = keep;
                s.evicted += gone.len() as u64;
                gone
            }
            Err(_) => Vec::new(),
        };
        drop(gone);
    }

    pub(crate) fn stats(&self) -> WarmStats {
        self.state
            .lock()
            .map(|s| WarmStats {
                idle: s.idle.len(),
                reused: s.reused,
                kept: s.kept,
                evicted: s.evicted,
            })
            .unwrap_or_default()
    }
}
