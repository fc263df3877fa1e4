//! The runtime shell: deploys definitions, starts instances, runs attempts in
//! the sandbox, commits every engine step to the store, and re-drives parks
//! when they fall due.
//!
//! Invariants:
//! - the database is the truth: every engine step is committed (snapshot,
//!   parks, attempts, journal in one transaction) before any effect that
//!   outlives the commit window — quick attempts (sandboxed, without effects
//!   outside their result) run first and are committed with their outcomes
//!   (inline.rs) — and nothing waits in memory: a backoff or a timer is a park
//!   row; an alarm (alarm.rs) only fires a short one promptly;
//! - one instance is advanced by one step at a time (a per-instance lock here,
//!   the optimistic version in the store across replicas: a lost race reloads
//!   and re-applies, never double-applies);
//! - time is read only through the `Clock`.

mod alarm;
pub mod batches;
// What a start answers: at commit on request, a deleted instance's final state (issue 33).
pub mod answer;
// Channel calls, the outbox, external tasks, incidents, migration (issue 14).
mod channel;
// Child flows (process calls, the States language's InvokeFlow).
mod children;
// Named connections of HTTP tasks and their OAuth tokens (issue 31).
pub mod connections;
mod deployed;
mod driver;
// Task egress: grants, secrets, the per-attempt session (issue 30).
mod egress;
mod events;
mod external;
mod fires;
mod hosts;
// HTTP tasks: the host makes the call (issue 31).
mod http_task;
// Idempotent starts: the request's fingerprint beside its key (issue 16).
pub mod idempotency;
mod incidents;
mod inline;
mod interrupt;
mod migrate;
mod outbox;
// What a guest wrote in an attempt, bounded for its attempt row (issue 15).
pub mod output;
// Schedules, quotas, retirement (the API issue).
mod lifecycle;
mod schedule;
pub mod signals;
mod tenancy;
pub use driver::StartRequest;
pub use poller::Settled;
pub use retry::RetryMode;
pub use schedule::SCHEDULE_LEASE;
mod poller;
mod retry;
mod view;
mod view_items;

pub use channel::{channels_of, valid_channel_name, ChannelSpec};
pub use deployed::Deployed;
pub use external::{ExternalFailure, FetchRequest};
pub use hosts::HostPolicy;
pub use incidents::ResolveOutcome;
pub use migrate::MigrateRequest;
pub use outbox::{request_body, sign, SIGNATURE_HEADER};
pub use view::{AttemptView, ChildView, ErrorView, HistoryView, InstanceView, WaitView};
pub use view_items::{ItemRef, ItemView};

use crate::codes::Code;
use crate::config::Config;
use crate::diag::Diagnostic;
use crate::sandbox::{Limits, Sandbox, SandboxConfig};
use crate::store::{Store, StoreError};
use crate::time::{Clock, VirtualClock};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A runtime failure with a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RuntimeError {
    pub code: Code,
    pub message: String,
    /// Load diagnostics, when a definition was refused.
    pub diagnostics: Vec<Diagnostic>,
}

impl RuntimeError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        RuntimeError {
            code,
            message: message.into(),
            diagnostics: Vec::new(),
        }
    }
}

impl From<StoreError> for RuntimeError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => {
                RuntimeError::new(Code::InstanceNotFound, format!("not found: {what}"))
            }
            other => RuntimeError::new(Code::StoreFailed, other.to_string()),
        }
    }
}

impl From<crate::engine::EngineError> for RuntimeError {
    fn from(e: crate::engine::EngineError) -> Self {
        RuntimeError::new(e.code, e.message)
    }
}

pub type RuntimeResult<T> = Result<T, RuntimeError>;

/// How a runtime is put together.
pub struct RuntimeOptions {
    pub config: Config,
    pub clock: Arc<dyn Clock>,
    /// Set when running on virtual time: the runtime jumps it to the next due
    /// park whenever nothing is runnable.
    pub virtual_clock: Option<Arc<VirtualClock>>,
    /// `false` for an ephemeral (in-memory) store: stateful processes are refused.
    pub durable: bool,
    /// This replica's name (claims and leases are held under it).
    pub owner: String,
    /// Where precompiled components are cached (`None` = no disk cache).
    pub cache_dir: Option<std::path::PathBuf>,
    /// The `sutra` binary whose hidden `__compile` subcommand compiles
    /// uploaded components in a bounded child process (`sutra serve` and
    /// `sutra run` pass their own executable); `None` compiles in this
    /// process (in-process tests), with the size and function-count limits only.
    pub compile_worker: Option<std::path::PathBuf>,
    /// Fire the short waits this runtime arms from an in-process alarm
    /// (alarm.rs; only on the system clock). `false` leaves every wait to the
    /// pollers — for a runtime that only starts instances.
    pub alarms: bool,
    /// Seed the random draws the engine gets (retry jitter), so a run is
    /// reproducible; `None` = seeded from the OS.
    pub seed: Option<u64>,
}

impl RuntimeOptions {
    /// Options for the given config on the system clock.
    pub fn new(config: Config) -> Self {
        RuntimeOptions {
            config,
            clock: Arc::new(crate::time::SystemClock),
            virtual_clock: None,
            durable: true,
            owner: format!("sutra-{}", std::process::id()),
            cache_dir: None,
            compile_worker: None,
            alarms: true,
            seed: None,
        }
    }

    /// Seed the engine's random draws (retry jitter): the same seed and the
    /// same sequence of steps give the same delays.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Run on a virtual clock starting at `start`.
    /// The start is truncated to a whole millisecond (the store's resolution).
    pub fn with_virtual_clock(mut self, start: chrono::DateTime<chrono::Utc>) -> Self {
        let vc = Arc::new(VirtualClock::new(crate::time::from_millis(
            crate::time::to_millis(start),
        )));
        self.clock = vc.clone();
        self.virtual_clock = Some(vc);
        self
    }
}

/// A committed snapshot kept in memory with its version, boxed: a drive's
/// future holds it across its awaits, and every future holding a
/// snapshot inline is ~800 bytes larger (driver.rs).
pub(crate) type Kept = (i64, Box<crate::engine::Snapshot>);

pub(crate) struct Inner<S: Store> {
    pub(crate) store: S,
    pub(crate) sandbox: Sandbox,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) virtual_clock: Option<Arc<VirtualClock>>,
    pub(crate) config: Config,
    pub(crate) limits: Limits,
    pub(crate) durable: bool,
    pub(crate) owner: String,
    pub(crate) deployed: Mutex<HashMap<String, Arc<Deployed>>>,
    pub(crate) locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    pub(crate) wake: Arc<tokio::sync::Notify>,
    /// Told after every commit (`settle` waits on it).
    pub(crate) stepped: tokio::sync::Notify,
    /// Precise wake-ups for short waits (`None` if the thread could not start).
    pub(crate) alarms: Option<alarm::Alarms>,
    /// The committed snapshot and version of instances with an alarm pending.
    pub(crate) hot: Mutex<HashMap<String, Kept>>,
    /// Fires the alarm thread queued for the workers (fires.rs).
    pub(crate) fires: fires::FireQueue,
    /// The committed snapshot and version of instances whose attempts are
    /// still out, kept by the inbox drive that committed it for the drive of
    /// their outcomes (driver.rs, `Runtime::keep_warm`).
    pub(crate) warm: Mutex<HashMap<String, Kept>>,
    /// Attempt outcomes waiting for their instance's lock, by instance: the
    /// step that takes the lock applies them all in one commit (driver.rs).
    pub(crate) inbox: Mutex<HashMap<String, Vec<driver::Arrived>>>,
    /// (tenant, process) → its active deployment id, and when that was read.
    pub(crate) active: Mutex<HashMap<(String, String), (std::time::Instant, String)>>,
    /// Held while the active deployment is read from the store.
    pub(crate) active_refresh: tokio::sync::Mutex<()>,
    pub(crate) rng: Mutex<rand::rngs::StdRng>,
    /// Tenant limits cache and admission locks (`tenancy.rs`).
    pub(crate) tenancy: tenancy::TenancyCache,
    /// Channel settings read recently (`channel.rs`).
    pub(crate) channels: channel::ChannelCache,
    /// Where push requests may go (`hosts.rs`).
    pub(crate) hosts: Arc<hosts::HostPolicy>,
    /// The outbox's HTTP client (`outbox.rs`).
    pub(crate) http: reqwest::Client,
    /// Outbound HTTP of tasks: the ceiling, CIDRs, limits, TLS (`crate::egress`).
    pub(crate) egress: Arc<crate::egress::Egress>,
    /// The keys sealing secrets; `None`: no `SUTRA_SECRET_KEY`.
    pub(crate) keyring: Option<Arc<crate::egress::secrets::Keyring>>,
    /// Told when pull requests may have become fetchable (long polls wait on it).
    pub(crate) pull_wake: tokio::sync::Notify,
    /// The attempts running in this process, to stop abandoned ones (`interrupt.rs`).
    pub(crate) running: interrupt::Running,
    /// The starts awaiting their answer (`answer.rs`).
    pub(crate) answers: answer::Answers,
    /// Told when a batch operation was created (`batches.rs`).
    pub(crate) batch_wake: tokio::sync::Notify,
    /// Held by the batch round running in this process (`batches.rs`).
    pub(crate) batch_round: tokio::sync::Mutex<()>,
    /// OAuth 2 tokens of connections, until they expire (`connections.rs`).
    pub(crate) tokens: connections::Tokens,
    /// Held while signals are delivered (`signals.rs`): one pump at a time.
    pub(crate) signal_pump: tokio::sync::Mutex<()>,
}

/// The runtime. Cheap to clone.
pub struct Runtime<S: Store> {
    pub(crate) inner: Arc<Inner<S>>,
}

impl<S: Store> Clone for Runtime<S> {
    fn clone(&self) -> Self {
        Runtime {
            inner: self.inner.clone(),
        }
    }
}

impl<S: Store> Runtime<S> {
    pub fn new(store: S, opts: RuntimeOptions) -> RuntimeResult<Self> {
        use rand::SeedableRng;
        let sandbox = Sandbox::new(SandboxConfig {
            pool_size: opts.config.slots.max(1),
            tenant_slots: opts.config.tenant_slots,
            lanes: opts.config.lanes.max(1),
            cache_dir: opts.cache_dir.clone(),
            compile_worker: opts.compile_worker.clone(),
            compile_limits: opts.config.compile.limits.clone(),
            compile_concurrency: opts.config.compile.concurrency,
            tiered: opts.config.compile.tiered,
            ..SandboxConfig::default()
        })
        .map_err(|e| RuntimeError::new(Code::ConfigInvalid, format!("sandbox: {e}")))?;
        let mut limits = Limits::default();
        if let Some(f) = opts.config.fuel {
            limits.fuel = f;
        }
        if let Some(d) = opts.config.deadline {
            limits.deadline = d.as_std();
        }
        if let Some(m) = opts.config.memory_bytes {
            limits.memory_bytes = m;
        }
        let hosts = Arc::new(
            hosts::HostPolicy::new(&opts.config.outbox.allowed_hosts).map_err(|e| {
                RuntimeError::new(
                    Code::ConfigInvalid,
                    format!("sutra.outbox.allowed-hosts: {e}"),
                )
            })?,
        );
        let http = reqwest::Client::builder()
            .connect_timeout(opts.config.outbox.connect_timeout.as_std())
            .timeout(opts.config.outbox.response_timeout.as_std())
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(hosts::PolicyResolver {
                policy: hosts.clone(),
            }))
            .user_agent(concat!("sutra/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                RuntimeError::new(Code::ConfigInvalid, format!("outbox HTTP client: {e}"))
            })?;
        let egress = Arc::new(
            crate::egress::Egress::from_config(&opts.config.egress)
                .map_err(|e| RuntimeError::new(Code::ConfigInvalid, e))?,
        );
        let keyring = opts
            .config
            .egress
            .secret_key
            .as_deref()
            .map(|k| {
                crate::egress::secrets::Keyring::new(k, &opts.config.egress.previous_secret_keys)
            })
            .transpose()
            .map_err(|e| RuntimeError::new(Code::ConfigInvalid, format!("sutra.secret.key: {e}")))?
            .map(Arc::new);
        let alarms = if opts.alarms && opts.clock.is_wall_clock() {
            alarm::Alarms::start()
                .map_err(|e| tracing::warn!(error = %e, "no alarm thread; short waits go through the poller"))
                .ok()
        } else {
            None
        };
        Ok(Runtime {
            inner: Arc::new(Inner {
                store,
                sandbox,
                clock: opts.clock,
                virtual_clock: opts.virtual_clock,
                config: opts.config,
                limits,
                durable: opts.durable,
                owner: opts.owner,
                deployed: Mutex::new(HashMap::new()),
                locks: Mutex::new(HashMap::new()),
                wake: Arc::new(tokio::sync::Notify::new()),
                stepped: tokio::sync::Notify::new(),
                alarms,
                hot: Mutex::new(HashMap::new()),
                fires: fires::FireQueue::default(),
                warm: Mutex::new(HashMap::new()),
                inbox: Mutex::new(HashMap::new()),
                active: Mutex::new(HashMap::new()),
                active_refresh: tokio::sync::Mutex::new(()),
                rng: Mutex::new(match opts.seed {
                    Some(seed) => rand::rngs::StdRng::seed_from_u64(seed),
                    None => rand::rngs::StdRng::from_os_rng(),
                }),
                tenancy: tenancy::TenancyCache::default(),
                channels: channel::ChannelCache::default(),
                hosts,
                http,
                egress,
                keyring,
                pull_wake: tokio::sync::Notify::new(),
                running: interrupt::Running::default(),
                answers: answer::Answers::default(),
                batch_wake: tokio::sync::Notify::new(),
                batch_round: tokio::sync::Mutex::new(()),
                tokens: connections::Tokens::default(),
                signal_pump: tokio::sync::Mutex::new(()),
            }),
        })
    }

    pub fn store(&self) -> &S {
        &self.inner.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.inner.sandbox
    }
}

/// A fresh, time-sortable id: 12 hex digits of milliseconds then 16 random.
pub fn new_id(now_ms: i64) -> String {
    let r: u64 = rand::random();
    format!("{:012x}{:016x}", now_ms.max(0), r)
}

/// How long past an attempt's deadline its claim (and its attempt park) is
/// kept before the attempt is presumed lost with its runner and re-run. The
/// sandbox enforces the deadline itself, so this only covers committing.
pub const LEASE_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);
