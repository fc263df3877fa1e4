//! Configuration: a TOML file plus environment overrides, validated at start.
//!
//! Keys (TOML path = environment variable):
//!
//! | key | env | default |
//! |---|---|---|
//! | `sutra.datasource.url` | `SUTRA_DATASOURCE_URL` | none (the CLI's `--db` wins) |
//! | `sutra.datasource.acquire-timeout` | `SUTRA_DATASOURCE_ACQUIRE_TIMEOUT` | `PT3S` (`serve` on PostgreSQL: how long a request waits for a connection before its 503 `SUTRA.RUNTIME.STORE`) |
//! | `sutra.instance.retention` | `SUTRA_INSTANCE_RETENTION` | `P7D` |
//! | `sutra.instance.retention-sweep-interval` | `SUTRA_INSTANCE_RETENTION_SWEEP_INTERVAL` | `PT1H` |
//! | `sutra.instance.idempotency-window` | `SUTRA_INSTANCE_IDEMPOTENCY_WINDOW` | `P1D` (how long an `Idempotency-Key` outlives its instance deleted at its end) |
//! | `sutra.audit.sql` | `SUTRA_AUDIT_SQL` | `false` |
//! | `sutra.runtime.lanes` | `SUTRA_RUNTIME_LANES` | `4` |
//! | `sutra.runtime.slots` | `SUTRA_RUNTIME_SLOTS` | `32` |
//! | `sutra.runtime.tenant-slots` | `SUTRA_RUNTIME_TENANT_SLOTS` | three quarters of the slots |
//! | `sutra.runtime.commit-window` | `SUTRA_RUNTIME_COMMIT_WINDOW` | `PT0.05S` |
//! | `sutra.runtime.poll-interval` | `SUTRA_RUNTIME_POLL_INTERVAL` | `PT0.5S` |
//! | `sutra.runtime.max-call-depth` | `SUTRA_RUNTIME_MAX_CALL_DEPTH` | `16` |
//! | `sutra.batch.rate` | `SUTRA_BATCH_RATE` | `50` (items of one batch operation per second, 1 to 10,000) |
//! | `sutra.sandbox.fuel` | `SUTRA_SANDBOX_FUEL` | the sandbox default |
//! | `sutra.sandbox.deadline` | `SUTRA_SANDBOX_DEADLINE` | the sandbox default |
//! | `sutra.sandbox.memory` | `SUTRA_SANDBOX_MEMORY` | the sandbox default |
//! | `sutra.sandbox.compile.max-module-bytes` | `SUTRA_SANDBOX_COMPILE_MAX_MODULE_BYTES` | `32MiB` |
//! | `sutra.sandbox.compile.max-functions` | `SUTRA_SANDBOX_COMPILE_MAX_FUNCTIONS` | `50000` |
//! | `sutra.sandbox.compile.cpu-time` | `SUTRA_SANDBOX_COMPILE_CPU_TIME` | `PT120S` |
//! | `sutra.sandbox.compile.wall-time` | `SUTRA_SANDBOX_COMPILE_WALL_TIME` | `PT180S` |
//! | `sutra.sandbox.compile.memory` | `SUTRA_SANDBOX_COMPILE_MEMORY` | `2GiB` (address space) |
//! | `sutra.sandbox.compile.concurrency` | `SUTRA_SANDBOX_COMPILE_CONCURRENCY` | half the cores, at least 1 |
//! | `sutra.sandbox.compile.tiered` | `SUTRA_SANDBOX_COMPILE_TIERED` | `true` |
//! | `sutra.outbox.retry.max-attempts` | `SUTRA_OUTBOX_RETRY_MAX_ATTEMPTS` | none (retry forever) |
//! | `sutra.outbox.retry.initial-delay` | `SUTRA_OUTBOX_RETRY_INITIAL_DELAY` | `PT1S` |
//! | `sutra.outbox.retry.max-delay` | `SUTRA_OUTBOX_RETRY_MAX_DELAY` | `PT5M` |
//! | `sutra.outbox.allowed-hosts` | `SUTRA_OUTBOX_ALLOWED_HOSTS` | `*` (public addresses only) |
//! | `sutra.outbox.connect-timeout` | `SUTRA_OUTBOX_CONNECT_TIMEOUT` | `PT5S` |
//! | `sutra.outbox.response-timeout` | `SUTRA_OUTBOX_RESPONSE_TIMEOUT` | `PT30S` |
//! | `sutra.outbox.max-response-bytes` | `SUTRA_OUTBOX_MAX_RESPONSE_BYTES` | `64KiB` |
//! | `sutra.external-task.retries` | `SUTRA_EXTERNAL_TASK_RETRIES` | `3` |
//! | `sutra.metrics.token` | `SUTRA_METRICS_TOKEN` | none (`/metrics` takes the admin key only) |
//! | `sutra.egress.allowed-hosts` | `SUTRA_EGRESS_ALLOWED_HOSTS` | `*` (any host a grant names) |
//! | `sutra.egress.allowed-cidrs` | `SUTRA_EGRESS_ALLOWED_CIDRS` | none (no denied range is opened) |
//! | `sutra.egress.static-hosts` | `SUTRA_EGRESS_STATIC_HOSTS` | none (`NAME=IP` entries answered without DNS, still checked) |
//! | `sutra.egress.max-requests` | `SUTRA_EGRESS_MAX_REQUESTS` | `16` per attempt |
//! | `sutra.egress.max-response-bytes` | `SUTRA_EGRESS_MAX_RESPONSE_BYTES` | `1MiB` per response |
//! | `sutra.egress.max-request-bytes` | `SUTRA_EGRESS_MAX_REQUEST_BYTES` | `1MiB` per request body |
//! | `sutra.egress.connect-timeout` | `SUTRA_EGRESS_CONNECT_TIMEOUT` | `PT5S` |
//! | `sutra.egress.first-byte-timeout` | `SUTRA_EGRESS_FIRST_BYTE_TIMEOUT` | `PT30S` |
//! | `sutra.egress.ca-file` | `SUTRA_EGRESS_CA_FILE` | none (the system's roots only) |
//! | `sutra.secret.key` | `SUTRA_SECRET_KEY` | none (secrets cannot be set) |
//! | `sutra.secret.previous-keys` | `SUTRA_SECRET_PREVIOUS_KEYS` | none |
//!
//! Invariant: a bad value is refused at start with `SUTRA.CONFIG.INVALID` and
//! the key named; nothing reads configuration after start.

use crate::codes::Code;
use crate::sandbox::CompileLimits;
use crate::time::IsoDuration;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub datasource_url: Option<String>,
    /// How long a caller waits for a pooled PostgreSQL connection (`serve`):
    /// while the database is away, requests fail fast with a 503.
    pub acquire_timeout: IsoDuration,
    /// How long terminal (COMPLETED/TERMINATED) snapshots stay queryable; zero
    /// deletes at completion. FAILED is always retained.
    pub retention: IsoDuration,
    pub retention_sweep_interval: IsoDuration,
    /// How long a start's `Idempotency-Key` keeps answering after its
    /// instance was deleted at its end (retention `PT0S`), from that end.
    pub idempotency_window: IsoDuration,
    /// Keep the audit journal (history) in the database.
    pub audit_sql: bool,
    /// Attempts that may execute guest code at once (CPU lanes), shared
    /// round-robin across tenants; an attempt gives its lane back while its
    /// guest waits in a host call and, when others wait, at every epoch tick.
    pub lanes: u32,
    /// Attempts that may be alive at once (the sandbox pool's instances).
    pub slots: u32,
    /// The most slots one tenant may hold; `None`: three quarters of `slots`.
    pub tenant_slots: Option<u32>,
    /// How long attempts may run before their instance's step is committed:
    /// attempts that end within it are committed together with their
    /// outcomes (one transaction); a longer one is made durable while it
    /// runs (an attempt park). `PT0S` commits before every attempt.
    pub commit_window: IsoDuration,
    /// The longest the poller goes without looking at the store for due
    /// parks (another replica may have armed one; a park this runtime armed
    /// wakes it at once). Seed 004 says 10 s; Sutra's default is 0.5 s.
    pub poll_interval: IsoDuration,
    /// The most instances one chain of process calls may hold, the
    /// top-level instance included (a flow that calls itself stops there:
    /// the call that would go deeper fails with `SUTRA.RUNTIME.CHILD.DEPTH_EXCEEDED`).
    pub max_call_depth: u32,
    /// The items of one batch operation carried out per second at most
    /// (`runtime::batches`): a batch over 10,000 instances never floods the
    /// runtime the other instances share.
    pub batch_rate: u32,
    pub fuel: Option<u64>,
    pub deadline: Option<IsoDuration>,
    pub memory_bytes: Option<u64>,
    /// Compiling uploaded components (`sutra.sandbox.compile.*`).
    pub compile: CompileConfig,
    /// Channel deliveries and external tasks (`sutra.outbox.*`, `sutra.external-task.*`).
    pub outbox: OutboxConfig,
    /// A bearer token that reads `/metrics` (and nothing else); at least 16
    /// characters. The admin key reads it too.
    pub metrics_token: Option<String>,
    /// Outbound HTTP of tasks (`sutra.egress.*`, `sutra.secret.*`).
    pub egress: EgressConfig,
}

/// The operator's ceiling on tasks' outbound HTTP (see `crate::egress`).
#[derive(Clone, PartialEq, Default)]
pub struct EgressConfig {
    /// Host patterns a grant may use (`scheme://host[:port]`, `*.domain`, or `*`).
    pub allowed_hosts: Vec<String>,
    /// CIDRs that open denied ranges (loopback, private...) to granted calls.
    pub allowed_cidrs: Vec<String>,
    /// `NAME=IP` entries answered without DNS (checked like resolved ones).
    pub static_hosts: Vec<String>,
    pub limits: crate::egress::Limits,
    /// Extra CA certificates (PEM) trusted beside the system's roots.
    pub ca_file: Option<String>,
    /// The key sealing secrets (32 bytes, hex or base64); `None`: no secrets.
    pub secret_key: Option<String>,
    /// Keys rows may still be sealed by (rotation).
    pub previous_secret_keys: Vec<String>,
}

impl std::fmt::Debug for EgressConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressConfig")
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_cidrs", &self.allowed_cidrs)
            .field("static_hosts", &self.static_hosts)
            .field("limits", &self.limits)
            .field("ca_file", &self.ca_file)
            .field("secret_key", &self.secret_key.as_ref().map(|_| "[set]"))
            .finish_non_exhaustive()
    }
}

/// How uploaded components are compiled (see `sandbox::compile`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompileConfig {
    /// Module size, function count, CPU time, wall-clock time and address
    /// space of one compile (a tenant's limits lower them).
    pub limits: CompileLimits,
    /// Compiles running at once over all tenants (each tenant's one at a time).
    pub concurrency: usize,
    /// Compile quick (Winch) first and optimised (Cranelift) behind it.
    pub tiered: bool,
}

impl Default for CompileConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        CompileConfig {
            limits: CompileLimits::default(),
            concurrency: (cores / 2).max(1),
            tiered: true,
        }
    }
}

/// How the outbox delivers push requests and hands out pull ones.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxConfig {
    /// The opt-in poison ceiling: a delivery that failed this many times is
    /// POISONED. `None`: retry forever.
    pub max_attempts: Option<u32>,
    /// The delay after the first failed delivery; doubled after each one.
    pub initial_delay: IsoDuration,
    /// The cap of the delay between two deliveries.
    pub max_delay: IsoDuration,
    /// Where a push URL may point (see `runtime::hosts`): `*` any public
    /// address, `loopback`, `private`, a host name, `*.domain`, an IP or a CIDR.
    pub allowed_hosts: Vec<String>,
    pub connect_timeout: IsoDuration,
    /// The whole POST, from connecting to the end of the answer.
    pub response_timeout: IsoDuration,
    /// The most of an answer's body read (the rest is dropped).
    pub max_response_bytes: u64,
    /// Worker-side failures an external task may have before an incident.
    pub external_task_retries: u32,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            max_attempts: None,
            initial_delay: IsoDuration(std::time::Duration::from_secs(1)),
            max_delay: IsoDuration(std::time::Duration::from_secs(300)),
            allowed_hosts: vec!["*".to_string()],
            connect_timeout: IsoDuration(std::time::Duration::from_secs(5)),
            response_timeout: IsoDuration(std::time::Duration::from_secs(30)),
            max_response_bytes: 64 * 1024,
            external_task_retries: 3,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            datasource_url: None,
            retention: IsoDuration(std::time::Duration::from_secs(7 * 24 * 3600)),
            retention_sweep_interval: IsoDuration(std::time::Duration::from_secs(3600)),
            idempotency_window: IsoDuration(std::time::Duration::from_secs(24 * 3600)),
            acquire_timeout: IsoDuration(std::time::Duration::from_secs(3)),
            audit_sql: false,
            lanes: 4,
            slots: 32,
            tenant_slots: None,
            commit_window: IsoDuration(std::time::Duration::from_millis(50)),
            poll_interval: IsoDuration(std::time::Duration::from_millis(500)),
            max_call_depth: 16,
            batch_rate: 50,
            fuel: None,
            deadline: None,
            memory_bytes: None,
            compile: CompileConfig::default(),
            outbox: OutboxConfig::default(),
            metrics_token: None,
            egress: EgressConfig {
                allowed_hosts: vec!["*".to_string()],
                ..EgressConfig::default()
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {key}: {message}")]
pub struct ConfigError {
    pub code: Code,
    pub key: String,
    pub message: String,
}

fn bad(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        code: Code::ConfigInvalid,
        key: key.to_string(),
        message: message.into(),
    }
}

const KEYS: [&str; 43] = [
    "sutra.egress.allowed-hosts",
    "sutra.egress.allowed-cidrs",
    "sutra.egress.static-hosts",
    "sutra.egress.max-requests",
    "sutra.egress.max-response-bytes",
    "sutra.egress.max-request-bytes",
    "sutra.egress.connect-timeout",
    "sutra.egress.first-byte-timeout",
    "sutra.egress.ca-file",
    "sutra.secret.key",
    "sutra.secret.previous-keys",
    "sutra.sandbox.compile.max-module-bytes",
    "sutra.sandbox.compile.max-functions",
    "sutra.sandbox.compile.cpu-time",
    "sutra.sandbox.compile.wall-time",
    "sutra.sandbox.compile.memory",
    "sutra.sandbox.compile.concurrency",
    "sutra.sandbox.compile.tiered",
    "sutra.metrics.token",
    "sutra.outbox.retry.max-attempts",
    "sutra.outbox.retry.initial-delay",
    "sutra.outbox.retry.max-delay",
    "sutra.outbox.allowed-hosts",
    "sutra.outbox.connect-timeout",
    "sutra.outbox.response-timeout",
    "sutra.outbox.max-response-bytes",
    "sutra.external-task.retries",
    "sutra.datasource.url",
    "sutra.datasource.acquire-timeout",
    "sutra.instance.retention",
    "sutra.instance.retention-sweep-interval",
    "sutra.instance.idempotency-window",
    "sutra.audit.sql",
    "sutra.runtime.lanes",
    "sutra.runtime.slots",
    "sutra.runtime.tenant-slots",
    "sutra.runtime.commit-window",
    "sutra.runtime.poll-interval",
    "sutra.runtime.max-call-depth",
    "sutra.batch.rate",
    "sutra.sandbox.fuel",
    "sutra.sandbox.deadline",
    "sutra.sandbox.memory",
];

/// `sutra.instance.retention-sweep-interval` → `SUTRA_INSTANCE_RETENTION_SWEEP_INTERVAL`.
pub fn env_name(key: &str) -> String {
    key.replace(['.', '-'], "_").to_ascii_uppercase()
}

impl Config {
    /// Load the file (if any), then apply environment overrides from `env`.
    pub fn load(
        file: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Config, ConfigError> {
        let mut values: BTreeMap<String, String> = BTreeMap::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| bad("config", format!("cannot read {}: {e}", path.display())))?;
            let table: toml::Table = toml::from_str(&text)
                .map_err(|e| bad("config", format!("{}: {e}", path.display())))?;
            flatten("", &toml::Value::Table(table), &mut values);
            if let Some(unknown) = values.keys().find(|k| !KEYS.contains(&k.as_str())) {
                return Err(bad(unknown, "unknown configuration key"));
            }
        }
        for key in KEYS {
            if let Some(v) = env.get(&env_name(key)) {
                values.insert(key.to_string(), v.clone());
            }
        }
        Config::from_values(&values)
    }

    /// Load with the process environment.
    pub fn from_env(file: Option<&Path>) -> Result<Config, ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("SUTRA_"))
            .collect();
        Config::load(file, &env)
    }

    fn from_values(values: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        let duration = |key: &str| -> Result<Option<IsoDuration>, ConfigError> {
            values
                .get(key)
                .map(|v| IsoDuration::parse(v).map_err(|e| bad(key, e.message)))
                .transpose()
        };
        if let Some(v) = values.get("sutra.datasource.url") {
            if v.trim().is_empty() {
                return Err(bad("sutra.datasource.url", "must not be empty"));
            }
            c.datasource_url = Some(v.clone());
        }
        if let Some(d) = duration("sutra.instance.retention")? {
            c.retention = d;
        }
        if let Some(d) = duration("sutra.instance.retention-sweep-interval")? {
            if d == IsoDuration::ZERO {
                return Err(bad(
                    "sutra.instance.retention-sweep-interval",
                    "must be longer than PT0S",
                ));
            }
            c.retention_sweep_interval = d;
        }
        if let Some(d) = duration("sutra.datasource.acquire-timeout")? {
            if d == IsoDuration::ZERO {
                return Err(bad(
                    "sutra.datasource.acquire-timeout",
                    "must be longer than PT0S",
                ));
            }
            c.acquire_timeout = d;
        }
        if let Some(d) = duration("sutra.instance.idempotency-window")? {
            c.idempotency_window = d;
        }
        if let Some(v) = values.get("sutra.audit.sql") {
            c.audit_sql = boolean("sutra.audit.sql", v)?;
        }
        if let Some(v) = values.get("sutra.runtime.lanes") {
            c.lanes = v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=1024).contains(n))
                .ok_or_else(|| {
                    bad(
                        "sutra.runtime.lanes",
                        format!("`{v}` is not a number from 1 to 1024"),
                    )
                })?;
        }
        for key in ["sutra.runtime.slots", "sutra.runtime.tenant-slots"] {
            if let Some(v) = values.get(key) {
                let n = v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=4096).contains(n))
                    .ok_or_else(|| bad(key, format!("`{v}` is not a number from 1 to 4096")))?;
                match key {
                    "sutra.runtime.slots" => c.slots = n,
                    _ => c.tenant_slots = Some(n),
                }
            }
        }
        if c.tenant_slots.is_some_and(|t| t > c.slots) {
            return Err(bad(
                "sutra.runtime.tenant-slots",
                format!("must not exceed sutra.runtime.slots ({})", c.slots),
            ));
        }
        if let Some(d) = duration("sutra.runtime.commit-window")? {
            if d.as_std() > std::time::Duration::from_secs(10) {
                return Err(bad(
                    "sutra.runtime.commit-window",
                    "must be at most PT10S (an attempt that runs longer is invisible until then)",
                ));
            }
            c.commit_window = d;
        }
        if let Some(d) = duration("sutra.runtime.poll-interval")? {
            let d_std = d.as_std();
            if d_std < std::time::Duration::from_millis(10)
                || d_std > std::time::Duration::from_secs(3600)
            {
                return Err(bad(
                    "sutra.runtime.poll-interval",
                    "must be from PT0.01S to PT1H",
                ));
            }
            c.poll_interval = d;
        }
        if let Some(v) = values.get("sutra.batch.rate") {
            c.batch_rate = v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| {
                    bad(
                        "sutra.batch.rate",
                        format!("`{v}` is not a number from 1 to 10000"),
                    )
                })?;
        }
        if let Some(v) = values.get("sutra.runtime.max-call-depth") {
            c.max_call_depth = v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=256).contains(n))
                .ok_or_else(|| {
                    bad(
                        "sutra.runtime.max-call-depth",
                        format!("`{v}` is not a number from 1 to 256"),
                    )
                })?;
        }
        if let Some(v) = values.get("sutra.sandbox.fuel") {
            c.fuel = Some(v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                bad(
                    "sutra.sandbox.fuel",
                    format!("`{v}` is not a positive number"),
                )
            })?);
        }
        c.deadline = duration("sutra.sandbox.deadline")?;
        if c.deadline == Some(IsoDuration::ZERO) {
            return Err(bad("sutra.sandbox.deadline", "must be longer than PT0S"));
        }
        if let Some(v) = values.get("sutra.sandbox.memory") {
            c.memory_bytes = Some(parse_bytes(v).map_err(|m| bad("sutra.sandbox.memory", m))?);
        }
        c.compile = compile_values(values, duration)?;
        c.outbox = outbox_values(values, duration)?;
        c.egress = egress_values(values, duration)?;
        if let Some(v) = values.get("sutra.metrics.token") {
            if v.chars().count() < 16 || v.chars().any(|ch| ch.is_whitespace() || ch.is_control()) {
                return Err(bad(
                    "sutra.metrics.token",
                    "must be at least 16 characters, without spaces",
                ));
            }
            c.metrics_token = Some(v.clone());
        }
        Ok(c)
    }
}

fn boolean(key: &str, v: &str) -> Result<bool, ConfigError> {
    match v {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        other => Err(bad(key, format!("`{other}` is not a boolean"))),
    }
}

/// The `sutra.sandbox.compile.*` keys.
fn compile_values(
    values: &BTreeMap<String, String>,
    duration: impl Fn(&str) -> Result<Option<IsoDuration>, ConfigError>,
) -> Result<CompileConfig, ConfigError> {
    let mut c = CompileConfig::default();
    let l = &mut c.limits;
    let size = |key: &str| {
        values
            .get(key)
            .map(|v| parse_bytes(v).map_err(|m| bad(key, m)))
            .transpose()
    };
    if let Some(n) = size("sutra.sandbox.compile.max-module-bytes")? {
        l.max_module_bytes = n;
    }
    if let Some(n) = size("sutra.sandbox.compile.memory")? {
        if n < 64 << 20 {
            return Err(bad(
                "sutra.sandbox.compile.memory",
                "must be at least 64MiB",
            ));
        }
        l.memory_bytes = n;
    }
    let count = |key: &str, max: u64| -> Result<Option<u64>, ConfigError> {
        values
            .get(key)
            .map(|v| {
                v.parse::<u64>()
                    .ok()
                    .filter(|n| (1..=max).contains(n))
                    .ok_or_else(|| bad(key, format!("`{v}` is not a number from 1 to {max}")))
            })
            .transpose()
    };
    if let Some(n) = count("sutra.sandbox.compile.max-functions", 10_000_000)? {
        l.max_functions = n;
    }
    if let Some(n) = count("sutra.sandbox.compile.concurrency", 64)? {
        c.concurrency = n as usize;
    }
    for (key, slot) in [
        ("sutra.sandbox.compile.cpu-time", &mut l.cpu_time),
        ("sutra.sandbox.compile.wall-time", &mut l.wall_time),
    ] {
        if let Some(d) = duration(key)? {
            if d.as_std() < std::time::Duration::from_secs(1) {
                return Err(bad(key, "must be at least PT1S"));
            }
            *slot = d.as_std();
        }
    }
    if let Some(v) = values.get("sutra.sandbox.compile.tiered") {
        c.tiered = boolean("sutra.sandbox.compile.tiered", v)?;
    }
    Ok(c)
}

/// The `sutra.outbox.*` and `sutra.external-task.*` keys.
fn outbox_values(
    values: &BTreeMap<String, String>,
    duration: impl Fn(&str) -> Result<Option<IsoDuration>, ConfigError>,
) -> Result<OutboxConfig, ConfigError> {
    let mut o = OutboxConfig::default();
    let count = |key: &str, min: u32| -> Result<Option<u32>, ConfigError> {
        values
            .get(key)
            .map(|v| {
                v.parse::<u32>().ok().filter(|n| *n >= min).ok_or_else(|| {
                    bad(
                        key,
                        format!("`{v}` is not a whole number of at least {min}"),
                    )
                })
            })
            .transpose()
    };
    o.max_attempts = count("sutra.outbox.retry.max-attempts", 1)?;
    let positive = |key: &str| -> Result<Option<IsoDuration>, ConfigError> {
        match duration(key)? {
            Some(d) if d == IsoDuration::ZERO => Err(bad(key, "must be longer than PT0S")),
            d => Ok(d),
        }
    };
    if let Some(d) = positive("sutra.outbox.retry.initial-delay")? {
        o.initial_delay = d;
    }
    if let Some(d) = positive("sutra.outbox.retry.max-delay")? {
        o.max_delay = d;
    }
    if o.max_delay < o.initial_delay {
        return Err(bad(
            "sutra.outbox.retry.max-delay",
            "must not be shorter than sutra.outbox.retry.initial-delay",
        ));
    }
    if let Some(v) = values.get("sutra.outbox.allowed-hosts") {
        let hosts: Vec<String> = v
            .split(',')
            .map(|h| {
                h.trim()
                    .trim_matches(|c| c == '[' || c == ']' || c == '"')
                    .trim()
            })
            .filter(|h| !h.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        if let Some(bad_entry) = hosts
            .iter()
            .find(|h| crate::runtime::HostPolicy::check_entry(h).is_err())
        {
            return Err(bad(
                "sutra.outbox.allowed-hosts",
                format!("`{bad_entry}` is none of *, loopback, private, a host name, *.domain, an IP or a CIDR"),
            ));
        }
        o.allowed_hosts = hosts;
    }
    if let Some(d) = positive("sutra.outbox.connect-timeout")? {
        o.connect_timeout = d;
    }
    if let Some(d) = positive("sutra.outbox.response-timeout")? {
        o.response_timeout = d;
    }
    if let Some(v) = values.get("sutra.outbox.max-response-bytes") {
        o.max_response_bytes =
            parse_bytes(v).map_err(|m| bad("sutra.outbox.max-response-bytes", m))?;
    }
    if let Some(n) = count("sutra.external-task.retries", 1)? {
        o.external_task_retries = n;
    }
    Ok(o)
}

/// A comma-separated list (a TOML array is flattened to one).
fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(|h| {
            h.trim()
                .trim_matches(|c| c == '[' || c == ']' || c == '"')
                .trim()
        })
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect()
}

/// The `sutra.egress.*` and `sutra.secret.*` keys (each checked by building
/// what it configures, so a bad value names its key at start).
fn egress_values(
    values: &BTreeMap<String, String>,
    duration: impl Fn(&str) -> Result<Option<IsoDuration>, ConfigError>,
) -> Result<EgressConfig, ConfigError> {
    let mut e = Config::default().egress;
    if let Some(v) = values.get("sutra.egress.allowed-hosts") {
        e.allowed_hosts = list(v);
        crate::egress::Ceiling::new(&e.allowed_hosts)
            .map_err(|m| bad("sutra.egress.allowed-hosts", m))?;
    }
    if let Some(v) = values.get("sutra.egress.allowed-cidrs") {
        e.allowed_cidrs = list(v);
        for c in &e.allowed_cidrs {
            crate::egress::address::Cidr::parse(c)
                .map_err(|m| bad("sutra.egress.allowed-cidrs", m))?;
        }
    }
    if let Some(v) = values.get("sutra.egress.static-hosts") {
        e.static_hosts = list(v);
        for h in &e.static_hosts {
            let ok = h.split_once('=').is_some_and(|(n, ip)| {
                !n.trim().is_empty() && ip.trim().parse::<std::net::IpAddr>().is_ok()
            });
            if !ok {
                return Err(bad(
                    "sutra.egress.static-hosts",
                    format!("`{h}` is not NAME=IP"),
                ));
            }
        }
    }
    if let Some(v) = values.get("sutra.egress.max-requests") {
        e.limits.max_requests = v
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| {
                bad(
                    "sutra.egress.max-requests",
                    format!("`{v}` is not a number from 1 to 10000"),
                )
            })?;
    }
    for (key, slot) in [
        (
            "sutra.egress.max-response-bytes",
            &mut e.limits.max_response_bytes,
        ),
        (
            "sutra.egress.max-request-bytes",
            &mut e.limits.max_request_bytes,
        ),
    ] {
        if let Some(v) = values.get(key) {
            *slot = parse_bytes(v).map_err(|m| bad(key, m))?;
        }
    }
    for (key, slot) in [
        (
            "sutra.egress.connect-timeout",
            &mut e.limits.connect_timeout,
        ),
        (
            "sutra.egress.first-byte-timeout",
            &mut e.limits.first_byte_timeout,
        ),
    ] {
        if let Some(d) = duration(key)? {
            if d == IsoDuration::ZERO {
                return Err(bad(key, "must be longer than PT0S"));
            }
            *slot = d.as_std();
        }
    }
    if let Some(v) = values.get("sutra.egress.ca-file") {
        e.ca_file = Some(v.clone());
    }
    if let Some(v) = values.get("sutra.secret.key") {
        e.secret_key = Some(v.clone());
    }
    if let Some(v) = values.get("sutra.secret.previous-keys") {
        e.previous_secret_keys = list(v);
    }
    if let Some(k) = &e.secret_key {
        crate::egress::secrets::Keyring::new(k, &e.previous_secret_keys)
            .map_err(|m| bad("sutra.secret.key", m))?;
    }
    Ok(e)
}

/// `67108864`, `64MiB`, `64 MB` → bytes.
pub fn parse_bytes(v: &str) -> Result<u64, String> {
    let n = v
        .trim()
        .parse::<bytesize::ByteSize>()
        .map_err(|e| format!("`{v}` is not a size (e.g. 64MiB): {e}"))?
        .as_u64();
    if n == 0 {
        return Err(format!("`{v}` must be more than zero bytes"));
    }
    Ok(n)
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut BTreeMap<String, String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        toml::Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn file_then_environment_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sutra.toml");
        std::fs::write(
            &path,
            "[sutra.instance]\nretention = \"P1D\"\n[sutra.audit]\nsql = true\n[sutra.runtime]\nlanes = 8\n",
        )
        .unwrap();
        let c = Config::load(Some(&path), &env(&[("SUTRA_RUNTIME_LANES", "2")])).unwrap();
        assert!(c.audit_sql);
        assert_eq!(c.lanes, 2);
        assert_eq!(c.retention.as_std().as_secs(), 86_400);
    }

    #[test]
    fn bad_values_name_their_key() {
        let e = Config::load(None, &env(&[("SUTRA_INSTANCE_RETENTION", "P1M")])).unwrap_err();
        assert_eq!(
            (e.code, e.key.as_str()),
            (Code::ConfigInvalid, "sutra.instance.retention")
        );
        let e = Config::load(None, &env(&[("SUTRA_RUNTIME_LANES", "zero")])).unwrap_err();
        assert_eq!(e.key, "sutra.runtime.lanes");
        let e = Config::load(None, &env(&[("SUTRA_AUDIT_SQL", "maybe")])).unwrap_err();
        assert_eq!(e.key, "sutra.audit.sql");
        let e = Config::load(None, &env(&[("SUTRA_SANDBOX_MEMORY", "lots")])).unwrap_err();
        assert_eq!(e.key, "sutra.sandbox.memory");
        let e = Config::load(None, &env(&[("SUTRA_RUNTIME_COMMIT_WINDOW", "PT1M")])).unwrap_err();
        assert_eq!(e.key, "sutra.runtime.commit-window");
        let c = Config::load(None, &env(&[("SUTRA_RUNTIME_COMMIT_WINDOW", "PT0S")])).unwrap();
        assert_eq!(c.commit_window, IsoDuration::ZERO);
    }

    #[test]
    fn the_poll_interval_and_the_call_depth_are_keys() {
        let c = Config::load(None, &env(&[])).unwrap();
        assert_eq!(
            c.poll_interval.as_std(),
            std::time::Duration::from_millis(500)
        );
        assert_eq!(c.max_call_depth, 16);
        let c = Config::load(
            None,
            &env(&[
                ("SUTRA_RUNTIME_POLL_INTERVAL", "PT10S"),
                ("SUTRA_RUNTIME_MAX_CALL_DEPTH", "3"),
            ]),
        )
        .unwrap();
        assert_eq!(c.poll_interval.as_std(), std::time::Duration::from_secs(10));
        assert_eq!(c.max_call_depth, 3);
        for (k, v, key) in [
            (
                "SUTRA_RUNTIME_POLL_INTERVAL",
                "PT0S",
                "sutra.runtime.poll-interval",
            ),
            (
                "SUTRA_RUNTIME_POLL_INTERVAL",
                "P1D",
                "sutra.runtime.poll-interval",
            ),
            (
                "SUTRA_RUNTIME_MAX_CALL_DEPTH",
                "0",
                "sutra.runtime.max-call-depth",
            ),
            (
                "SUTRA_RUNTIME_MAX_CALL_DEPTH",
                "many",
                "sutra.runtime.max-call-depth",
            ),
        ] {
            let e = Config::load(None, &env(&[(k, v)])).unwrap_err();
            assert_eq!(
                (e.code, e.key.as_str()),
                (Code::ConfigInvalid, key),
                "{k}={v}"
            );
        }
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sutra.toml");
        std::fs::write(&path, "[sutra.instance]\nretension = \"P1D\"\n").unwrap();
        let e = Config::load(Some(&path), &env(&[])).unwrap_err();
        assert_eq!(e.key, "sutra.instance.retension");
    }

    #[test]
    fn outbox_keys_are_read_and_checked() {
        let c = Config::load(
            None,
            &env(&[
                ("SUTRA_OUTBOX_RETRY_MAX_ATTEMPTS", "3"),
                (
                    "SUTRA_OUTBOX_ALLOWED_HOSTS",
                    "loopback, api.example.com,10.0.0.0/8",
                ),
                ("SUTRA_EXTERNAL_TASK_RETRIES", "5"),
            ]),
        )
        .unwrap();
        assert_eq!(c.outbox.max_attempts, Some(3));
        assert_eq!(
            c.outbox.allowed_hosts,
            vec!["loopback", "api.example.com", "10.0.0.0/8"]
        );
        assert_eq!(c.outbox.external_task_retries, 5);
        let d = Config::load(None, &env(&[])).unwrap();
        assert_eq!(
            d.outbox.max_attempts, None,
            "deliveries retry forever by default"
        );
        assert_eq!(d.outbox.allowed_hosts, vec!["*"]);
        assert_eq!(d.outbox.external_task_retries, 3);
        for (var, key) in [
            (
                "SUTRA_OUTBOX_RETRY_MAX_ATTEMPTS",
                "sutra.outbox.retry.max-attempts",
            ),
            ("SUTRA_OUTBOX_ALLOWED_HOSTS", "sutra.outbox.allowed-hosts"),
            (
                "SUTRA_OUTBOX_RESPONSE_TIMEOUT",
                "sutra.outbox.response-timeout",
            ),
            ("SUTRA_EXTERNAL_TASK_RETRIES", "sutra.external-task.retries"),
        ] {
            let e = Config::load(None, &env(&[(var, "0")])).unwrap_err();
            assert_eq!(e.key, key);
        }
    }

    #[test]
    fn the_metrics_token_is_read_and_checked() {
        let c = Config::load(
            None,
            &env(&[("SUTRA_METRICS_TOKEN", "scrape-0123456789abcdef")]),
        )
        .unwrap();
        assert_eq!(c.metrics_token.as_deref(), Some("scrape-0123456789abcdef"));
        assert_eq!(Config::load(None, &env(&[])).unwrap().metrics_token, None);
        for short in ["short", "has a space in it 0123"] {
            let e = Config::load(None, &env(&[("SUTRA_METRICS_TOKEN", short)])).unwrap_err();
            assert_eq!(e.key, "sutra.metrics.token");
        }
    }

    #[test]
    fn compile_keys_are_read_and_checked() {
        let c = Config::load(
            None,
            &env(&[
                ("SUTRA_SANDBOX_COMPILE_MAX_FUNCTIONS", "1000"),
                ("SUTRA_SANDBOX_COMPILE_MAX_MODULE_BYTES", "8MiB"),
                ("SUTRA_SANDBOX_COMPILE_CPU_TIME", "PT10S"),
                ("SUTRA_SANDBOX_COMPILE_MEMORY", "1GiB"),
                ("SUTRA_SANDBOX_COMPILE_CONCURRENCY", "2"),
                ("SUTRA_SANDBOX_COMPILE_TIERED", "false"),
            ]),
        )
        .unwrap();
        assert_eq!(c.compile.limits.max_functions, 1000);
        assert_eq!(c.compile.limits.max_module_bytes, 8 << 20);
        assert_eq!(c.compile.limits.cpu_time.as_secs(), 10);
        assert_eq!(c.compile.limits.memory_bytes, 1 << 30);
        assert_eq!(c.compile.concurrency, 2);
        assert!(!c.compile.tiered);
        let d = Config::load(None, &env(&[])).unwrap();
        assert_eq!(d.compile.limits, CompileLimits::default());
        assert!(d.compile.tiered && d.compile.concurrency >= 1);
        for (var, value, key) in [
            (
                "SUTRA_SANDBOX_COMPILE_MAX_FUNCTIONS",
                "0",
                "sutra.sandbox.compile.max-functions",
            ),
            (
                "SUTRA_SANDBOX_COMPILE_CPU_TIME",
                "PT0.5S",
                "sutra.sandbox.compile.cpu-time",
            ),
            (
                "SUTRA_SANDBOX_COMPILE_WALL_TIME",
                "soon",
                "sutra.sandbox.compile.wall-time",
            ),
            (
                "SUTRA_SANDBOX_COMPILE_MEMORY",
                "1MiB",
                "sutra.sandbox.compile.memory",
            ),
            (
                "SUTRA_SANDBOX_COMPILE_CONCURRENCY",
                "65",
                "sutra.sandbox.compile.concurrency",
            ),
            (
                "SUTRA_SANDBOX_COMPILE_TIERED",
                "maybe",
                "sutra.sandbox.compile.tiered",
            ),
        ] {
            let e = Config::load(None, &env(&[(var, value)])).unwrap_err();
            assert_eq!(e.key, key);
        }
    }

    #[test]
    fn defaults_follow_the_seed() {
        let c = Config::load(None, &env(&[])).unwrap();
        assert_eq!(c.retention.as_std().as_secs(), 7 * 86_400);
        assert_eq!(c.retention_sweep_interval.as_std().as_secs(), 3600);
        assert!(!c.audit_sql);
        assert_eq!(c.commit_window.as_std().as_millis(), 50);
    }
}
