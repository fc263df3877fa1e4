//! The task sandbox: one attempt of one WebAssembly component under fuel,
//! deadline and memory limits. Knows nothing of processes.
//!
//! Invariants:
//! - One engine configuration ([`engine`]), one linker, one pool per
//!   [`Sandbox`]; at most `pool_size` attempts are alive at once and at most
//!   `lanes` execute guest code, each granted round-robin across tenants
//!   with a per-tenant cap on slots ([`lanes`]).
//! - Every attempt gets a fresh store with its own fuel, epoch deadline,
//!   wall-clock deadline, memory limiter and capped captures; nothing of one
//!   attempt is visible to the next.
//! - [`Sandbox::attempt`] never panics and never returns a wasmtime error:
//!   every ending is an [`Outcome`] (see [`outcome`] for the mapping).
//! - [`Sandbox::load`] refuses, with `SUTRA.TASK.MODULE_INVALID`, anything
//!   that is not a component of the task world importing only what
//!   [`import_policy`] allows.
//!
//! Files: `lanes` (fair slots and lanes across tenants), `engine` (engines
//! per compiler tier + epoch ticker), `loader`
//! (validation, import policy, linking, the tier swap), `cache` (on-disk
//! precompiled artifacts), `compile` (compile limits, queues, the bounded
//! worker process), `tiered` ([`Sandbox::load_for`]: uploads through the
//! worker, quick first and optimised behind), `host` (WIT bindings, WASI
//! context, captures), `limits`, `outcome`, `attempt`, `reuse` (warm
//! instances of reusable modules, per tenant and digest).

mod attempt;
mod cache;
mod compile;
mod engine;
mod host;
mod lanes;
mod limits;
mod loader;
mod outcome;
mod reuse;
mod tiered;

pub use compile::{count_functions, run_worker, CompileLimits, WorkerArgs};
pub use engine::Tier;
pub use limits::Limits;
pub use loader::{import_policy, needs_egress_grant, LoadError, LoadedComponent};
pub use outcome::{AttemptReport, LogLevel, LogLine, Outcome};
pub use reuse::{Reuse, WarmStats};

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a [`Sandbox`] is built.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Component instances the pool holds: the most attempts alive at once
    /// (executing, in a host call, or waiting for a lane).
    pub pool_size: u32,
    /// The most slots one tenant holds at once; `None`: the pool less a
    /// quarter of it, rounded down (so other tenants always find one).
    pub tenant_slots: Option<u32>,
    /// The most attempts executing guest code at once (CPU lanes); an
    /// attempt gives its lane back in host calls and, when others wait, at
    /// every epoch tick.
    pub lanes: u32,
    /// Where precompiled components are cached; `None`: no disk cache.
    pub cache_dir: Option<PathBuf>,
    /// How often the engine epoch advances: the granularity of deadline checks
    /// and of a spinning guest's yields to tokio.
    pub epoch_tick: Duration,
    /// The most linear memory any single memory may ever have (a pool-wide
    /// ceiling; each attempt's own cap is [`Limits::memory_bytes`]).
    pub max_memory_bytes: u64,
    /// The most elements a table may have (pool-wide ceiling; also the per-attempt cap).
    pub max_table_elements: usize,
    /// Bytes of each linear-memory slot kept resident (reset by memset
    /// rather than returned to the OS) when a slot is reused.
    pub keep_resident_bytes: usize,
    /// Bytes of each table slot kept resident when a slot is reused.
    pub table_keep_resident_bytes: usize,
    /// Use Linux's `PAGEMAP_SCAN` (6.7+, where available) to reset only the
    /// pages an attempt dirtied within the kept-resident bytes.
    pub pagemap_scan: bool,
    /// Loaded components kept in memory, by digest.
    pub loaded_capacity: usize,
    /// The `sutra` binary whose `__compile` subcommand compiles components
    /// in a bounded child process ([`Sandbox::load_for`]); `None`: compile
    /// in this process (in-process tests).
    pub compile_worker: Option<PathBuf>,
    /// What compiling one component may cost (the server's limits).
    pub compile_limits: CompileLimits,
    /// Compiles running at once, over all tenants (each tenant's run one at a time).
    pub compile_concurrency: usize,
    /// With a compile worker: compile quick (Winch) first, optimised (Cranelift) behind.
    pub tiered: bool,
    /// With `tiered`: recompile optimised behind the quick code (a server's
    /// long-lived components); `false` keeps the quick code (`sutra task
    /// run`: one attempt, the process exits after it).
    pub optimize_behind: bool,
    /// Idle warm instances kept for reusable modules, over all tenants
    /// (`reuse.rs`; least recently used out first). Each holds an
    /// instance of the pooling allocator beyond `pool_size`.
    pub warm_capacity: usize,
    /// How long a warm instance may stay idle before it is dropped.
    pub warm_idle: Duration,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            pool_size: 32,
            tenant_slots: None,
            lanes: 4,
            cache_dir: None,
            epoch_tick: Duration::from_millis(2),
            max_memory_bytes: 4 << 30,
            max_table_elements: 100_000,
            keep_resident_bytes: 4 << 20,
            table_keep_resident_bytes: 64 << 10,
            pagemap_scan: true,
            loaded_capacity: 256,
            compile_worker: None,
            compile_limits: CompileLimits::default(),
            compile_concurrency: 1,
            tiered: true,
            optimize_behind: true,
            warm_capacity: 8,
            warm_idle: Duration::from_secs(60),
        }
    }
}

/// Stops an attempt from outside (see [`Sandbox::attempt_until`]). Cheap to
/// clone; clones stop the same attempt.
#[derive(Clone, Default)]
pub struct Stop {
    inner: Arc<StopInner>,
}

#[derive(Default)]
struct StopInner {
    stopped: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Stop {
    /// Stop the attempt (idempotent; also before it started).
    pub fn stop(&self) {
        self.inner.stopped.store(true, Ordering::Release);
        self.inner.notify.notify_waiters();
    }

    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::Acquire)
    }

    /// Resolves once [`Stop::stop`] was called.
    pub(crate) async fn stopped(&self) {
        loop {
            // Created before the check, so a stop in between is not missed.
            let notified = self.inner.notify.notified();
            if self.is_stopped() {
                return;
            }
            notified.await;
        }
    }
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stop")
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

/// Who is calling, and which attempt this is (the WIT `context`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskContext {
    pub tenant: String,
    pub instance_id: String,
    pub task_id: String,
    /// 1-based: 1 is the first try.
    pub attempt: u32,
    /// Stable across the attempts of one task execution.
    pub idempotency_key: String,
}

/// The sandbox could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot configure the WebAssembly engine: {0}")]
    Engine(String),
    #[error("cannot use the component cache directory {dir}: {source}")]
    CacheDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the epoch ticker: {0}")]
    Ticker(std::io::Error),
}

/// Counters of what [`Sandbox::load`] did (for tests and metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SandboxStats {
    /// Components compiled from their bytes.
    pub compiled: u64,
    /// Components deserialized from the disk cache.
    pub disk_hits: u64,
    /// Loads answered from the in-memory map.
    pub memory_hits: u64,
}

/// Runs task attempts. Cheap to clone; clones share the engine and pool.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    engine: wasmtime::Engine,
    linker: wasmtime::component::Linker<host::HostState>,
    /// Pool instances, per tenant capped (lanes.rs).
    slots: Arc<lanes::Gate>,
    /// The right to execute guest code (lanes.rs).
    lanes: Arc<lanes::Gate>,
    disk: Option<cache::DiskCache>,
    loaded: Mutex<Loaded>,
    /// One lock per digest being loaded, so concurrent loads of the same
    /// bytes compile once.
    loading: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    compiled: AtomicU64,
    disk_hits: AtomicU64,
    memory_hits: AtomicU64,
    cfg: SandboxConfig,
    _ticker: engine::EpochTicker,
    /// The quick tier and the compile queues (`tiered.rs`).
    tiers: tiered::Tiers,
    /// Idle instances of reusable modules (`reuse.rs`).
    warm: reuse::WarmPool,
}

/// The in-memory map digest → component, with least-recently-used eviction.
#[derive(Default)]
struct Loaded {
    by_digest: HashMap<String, (LoadedComponent, u64)>,
    clock: u64,
}

impl Sandbox {
    /// Build the engine, linker, pool and epoch ticker.
    pub fn new(cfg: SandboxConfig) -> Result<Sandbox, SandboxError> {
        let engine = engine::build_engine(&cfg, Tier::Optimized)
            .map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let tiers = tiered::Tiers::new(&cfg)?;
        let linker = host::linker(&engine).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let disk =
            match &cfg.cache_dir {
                Some(dir) => Some(cache::DiskCache::new(dir.clone(), &engine).map_err(
                    |source| SandboxError::CacheDir {
                        dir: dir.clone(),
                        source,
                    },
                )?),
                None => None,
            };
        let ticker =
            engine::EpochTicker::start(&engine, cfg.epoch_tick).map_err(SandboxError::Ticker)?;
        let permits = usize::try_from(cfg.pool_size.max(1)).unwrap_or(1);
        // By default a quarter of the pool (rounded down) is kept for the
        // other tenants: none in a pool of up to three.
        let per_tenant = cfg
            .tenant_slots
            .map_or(permits - permits / 4, |n| usize::try_from(n).unwrap_or(1));
        let lanes = usize::try_from(cfg.lanes.max(1)).unwrap_or(1);
        Ok(Sandbox {
            inner: Arc::new(Inner {
                engine,
                linker,
                slots: lanes::Gate::new(permits, per_tenant),
                lanes: lanes::Gate::new(lanes, lanes),
                disk,
                loaded: Mutex::new(Loaded::default()),
                loading: Mutex::new(HashMap::new()),
                compiled: AtomicU64::new(0),
                disk_hits: AtomicU64::new(0),
                memory_hits: AtomicU64::new(0),
                _ticker: ticker,
                tiers,
                warm: reuse::WarmPool::new(cfg.warm_capacity, cfg.warm_idle),
                cfg,
            }),
        })
    }

    /// The configuration this sandbox was built with.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.cfg
    }

    /// Attempts running right now (holding a pool slot).
    pub fn running(&self) -> usize {
        self.inner.slots.in_use()
    }

    /// What [`Sandbox::load`] has done so far.
    pub fn stats(&self) -> SandboxStats {
        SandboxStats {
            compiled: self.inner.compiled.load(Ordering::Relaxed),
            disk_hits: self.inner.disk_hits.load(Ordering::Relaxed),
            memory_hits: self.inner.memory_hits.load(Ordering::Relaxed),
        }
    }

    /// Load a component from its bytes: from memory if these bytes were
    /// loaded before, else from the disk cache, else by compiling (which can
    /// take a while: call it off the async runtime's workers for big
    /// components, e.g. with `spawn_blocking`).
    pub fn load(&self, bytes: &[u8]) -> Result<LoadedComponent, LoadError> {
        let digest = cache::digest(bytes);
        if let Some(found) = self.remembered(&digest) {
            self.inner.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(found);
        }
        loader::check_kind(bytes)?;
        let gate = self
            .inner
            .loading
            .lock()
            .ok()
            .map(|mut m| m.entry(digest.clone()).or_default().clone());
        let result = {
            let _held = gate.as_ref().and_then(|g| g.lock().ok());
            match self.remembered(&digest) {
                Some(found) => {
                    self.inner.memory_hits.fetch_add(1, Ordering::Relaxed);
                    Ok(found)
                }
                None => self.load_uncached(bytes, digest.clone()),
            }
        };
        if let Ok(mut m) = self.inner.loading.lock() {
            if gate.as_ref().is_some_and(|g| Arc::strong_count(g) <= 2) {
                m.remove(&digest);
            }
        }
        result
    }

    /// Load bytes not in the in-memory map: from disk, else by compiling.
    fn load_uncached(&self, bytes: &[u8], digest: String) -> Result<LoadedComponent, LoadError> {
        let inner = &self.inner;
        let mut component = None;
        if let Some(disk) = &inner.disk {
            let path = disk.path(&digest);
            if path.is_file() {
                // SAFETY: the file is named by the content digest and the
                // engine's compatibility fingerprint, and is only ever written
                // by `DiskCache::store` (atomically, by rename) from
                // `Component::serialize` of bytes that compiled and passed the
                // import policy in this same engine configuration.
                match unsafe {
                    wasmtime::component::Component::deserialize_file(&inner.engine, &path)
                } {
                    Ok(c) => {
                        inner.disk_hits.fetch_add(1, Ordering::Relaxed);
                        component = Some(c);
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), "dropping unusable cached component: {e:#}");
                        disk.remove(&path);
                    }
                }
            }
        }
        let fresh = component.is_none();
        let component = match component {
            Some(c) => c,
            None => {
                let c = wasmtime::component::Component::new(&inner.engine, bytes).map_err(|e| {
                    LoadError::invalid(format!("the component does not validate: {e:#}"))
                })?;
                inner.compiled.fetch_add(1, Ordering::Relaxed);
                c
            }
        };
        let imports = loader::check_imports(&inner.engine, &component)?;
        let pre = loader::link(&inner.linker, &component)?;
        if fresh {
            if let Some(disk) = &inner.disk {
                let stored = component
                    .serialize()
                    .map_err(|e| e.to_string())
                    .and_then(|artifact| disk.store(&digest, &artifact).map_err(|e| e.to_string()));
                if let Err(e) = stored {
                    tracing::warn!(%digest, "cannot cache the compiled component: {e}");
                }
            }
        }
        let loaded = LoadedComponent::new(digest.clone(), imports, pre, Tier::Optimized);
        self.remember(digest, loaded.clone());
        Ok(loaded)
    }

    /// Instantiate `component` and drop it without calling it, so an attempt
    /// due shortly finds caches and a pool slot warm. Runs no guest code
    /// beyond a start function (none in Rust guests); skipped when every
    /// slot is taken.
    pub async fn warm(&self, component: &LoadedComponent) {
        attempt::warm(&self.inner, component).await
    }

    /// Run one attempt. Waits for a pool slot first; the deadline counts from
    /// when the slot is granted.
    pub async fn attempt(
        &self,
        component: &LoadedComponent,
        ctx: &TaskContext,
        input: &str,
        limits: &Limits,
    ) -> AttemptReport {
        self.attempt_until(component, ctx, input, limits, &Stop::default())
            .await
    }

    /// [`Sandbox::attempt`] that [`Stop::stop`] ends at once: a spinning
    /// guest traps at its next epoch check, one blocked in a host call is
    /// dropped, one still waiting for a slot never starts; the outcome is
    /// `SUTRA.TASK.INTERRUPTED` and the slot is free again.
    pub async fn attempt_until(
        &self,
        component: &LoadedComponent,
        ctx: &TaskContext,
        input: &str,
        limits: &Limits,
        stop: &Stop,
    ) -> AttemptReport {
        attempt::run(&self.inner, component, ctx, input, limits, stop, None, None).await
    }

    /// [`Sandbox::attempt_until`] with an egress session: the guest's
    /// wasi:http requests go through it (its deadline is set to the
    /// attempt's when the attempt starts), and its calls come back in
    /// [`AttemptReport::calls`].
    pub async fn attempt_with_egress(
        &self,
        component: &LoadedComponent,
        ctx: &TaskContext,
        input: &str,
        limits: &Limits,
        stop: &Stop,
        egress: Option<Arc<crate::egress::Session>>,
    ) -> AttemptReport {
        attempt::run(
            &self.inner,
            component,
            ctx,
            input,
            limits,
            stop,
            egress,
            None,
        )
        .await
    }

    /// [`Sandbox::attempt_with_egress`] for a module deployed reusable:
    /// with `reuse`, the attempt may run on a warm instance that served
    /// attempts of the same tenant and module before, and leaves its own
    /// instance warm if its call returned (see `reuse.rs` for the rules);
    /// `None` is exactly [`Sandbox::attempt_with_egress`].
    #[allow(clippy::too_many_arguments)]
    pub async fn attempt_reusing(
        &self,
        component: &LoadedComponent,
        ctx: &TaskContext,
        input: &str,
        limits: &Limits,
        stop: &Stop,
        egress: Option<Arc<crate::egress::Session>>,
        reuse: Option<Reuse>,
    ) -> AttemptReport {
        attempt::run(
            &self.inner,
            component,
            ctx,
            input,
            limits,
            stop,
            egress,
            reuse,
        )
        .await
    }

    /// What the warm pool has done so far.
    pub fn warm_stats(&self) -> WarmStats {
        self.inner.warm.stats()
    }

    /// Drop the warm instances idle for longer than `warm_idle` (also done
    /// at every reusable attempt).
    pub fn sweep_warm(&self) {
        self.inner.warm.sweep()
    }

    fn remembered(&self, digest: &str) -> Option<LoadedComponent> {
        let mut loaded = self.inner.loaded.lock().ok()?;
        loaded.clock += 1;
        let now = loaded.clock;
        let (component, used) = loaded.by_digest.get_mut(digest)?;
        *used = now;
        Some(component.clone())
    }

    fn remember(&self, digest: String, component: LoadedComponent) {
        let Ok(mut loaded) = self.inner.loaded.lock() else {
            return;
        };
        let capacity = self.inner.cfg.loaded_capacity.max(1);
        while loaded.by_digest.len() >= capacity {
            let oldest = loaded
                .by_digest
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(d, _)| d.clone());
            match oldest {
                Some(d) => loaded.by_digest.remove(&d),
                None => break,
            };
        }
        loaded.clock += 1;
        let now = loaded.clock;
        loaded.by_digest.insert(digest, (component, now));
    }
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("cfg", &self.inner.cfg)
            .field("stats", &self.stats())
            .finish()
    }
}
