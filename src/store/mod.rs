//! The store: the database is the truth. A trait with two implementations
//! (SQLite embedded, PostgreSQL for several replicas) and one behaviour.
//!
//! Invariants:
//! - **one transaction per engine step**: a [`StepWrite`] (snapshot, parks,
//!   attempts, journal, terminal stamp) commits whole or not at all;
//! - an instance row is only updated with its expected `version` (optimistic
//!   concurrency): a lost race is [`StoreError::Conflict`], never a double apply;
//! - a park row exists exactly as long as its wait (a terminal step removes
//!   every park of its instance in the same transaction);
//! - `claim_due` hands out a park only when it is due and not under a live
//!   claim, whether that claim was taken by `claim_due` or written with the
//!   park ([`NewPark::claim`]); every stored claim lapses at or after its
//!   park's `due_at`, which is what lets `next_due` read the earliest lapse
//!   as `MIN(claimed_until)`;
//! - every instant is stored as integer milliseconds since the Unix epoch (UTC),
//!   so both backends order and compare identically.
//!
//! The snapshot is opaque here (JSON text written by the engine).
//!
//! Layout: this file and `tenancy.rs` hold the traits and records, `rows.rs`
//! the row shapes; `queries.rs`, `queries_tenancy.rs` and `queries_steps.rs`
//! implement both traits once for every backend ([`queries::SqlBackend`]);
//! `sqlite*.rs` and `postgres.rs` (with `pg_listen.rs`) hold only what
//! differs between the backends; `migrations.rs` the schema of each.

/// `delegate!(self, s => s.method(args).await)`: the call on the backend an
/// [`AnyStore`] holds — the one delegation of every store trait's `AnyStore`
/// impl (defined before the modules, so each of them sees it).
macro_rules! delegate {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            $crate::store::AnyStore::Sqlite($s) => $call,
            $crate::store::AnyStore::Postgres($s) => $call,
        }
    };
}

pub mod any;
pub mod batches;
pub mod channels;
pub mod children;
pub mod connections;
// Egress grants and sealed secrets (issue 30).
pub mod egress;
pub mod failpoint;
mod migrations;
mod outbox;
mod outbox_write;
pub mod postgres;
mod queries;
mod queries_steps;
mod queries_tenancy;
mod rows;
mod search_rows;
pub mod signals;
pub mod sqlite;
mod sqlite_group;
mod sqlite_held;
mod sqlite_writer;
pub mod stats;
pub mod tenancy;

use serde::{Deserialize, Serialize};
use std::future::Future;

pub use any::AnyStore;
pub use postgres::{PgOptions, PgStore};
pub use sqlite::{SqliteOptions, SqliteStore, Synchronous};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The instance was changed by someone else since it was loaded.
    #[error("instance {0} was modified concurrently")]
    Conflict(String),
    /// A uniqueness rule refused the write (e.g. an idempotency key reused).
    #[error("duplicate: {0}")]
    Duplicate(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    /// An error of the SQLite writer thread's connection (`sqlite_writer.rs`).
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Other(String),
}

impl StoreError {
    /// The wire code of a store failure (one code: the caller decides from
    /// the variant whether to reload and retry, e.g. on `Conflict`).
    pub fn code(&self) -> crate::Code {
        crate::Code::StoreFailed
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Deployment lifecycle (000): a new version is ACTIVE, the one it replaced
/// DRAINING until it has no running, waiting or FAILED instance, then RETIRED.
/// An undeployed one is DRAINING too (no new starts), then RETIRED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeploymentState {
    Active,
    Draining,
    Retired,
}

impl DeploymentState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentState::Active => "ACTIVE",
            DeploymentState::Draining => "DRAINING",
            DeploymentState::Retired => "RETIRED",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ACTIVE" => Some(DeploymentState::Active),
            "DRAINING" => Some(DeploymentState::Draining),
            "RETIRED" => Some(DeploymentState::Retired),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewDeployment {
    pub id: String,
    pub tenant: String,
    pub process_id: String,
    /// `bpmn`, `hx` or `asl`.
    pub dialect: String,
    /// The definition text exactly as deployed (re-loaded on boot).
    pub source: String,
    /// registered task name → module digest (sha256 hex).
    pub modules: std::collections::BTreeMap<String, String>,
    /// The modules deployed reusable (warm instances, `sandbox::Reuse`):
    /// kept in the same modules JSON, as `{"digest", "reusable"}` entries.
    #[serde(default)]
    pub reusable: std::collections::BTreeMap<String, ModuleReuse>,
    pub created_at: i64,
}

/// How a module deployed reusable may reuse its warm instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleReuse {
    /// Attempts one instance may serve after its first.
    pub max_reuses: u32,
    /// An instance holding more linear memory than this is dropped.
    pub memory_ceiling_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentRecord {
    pub id: String,
    pub tenant: String,
    pub process_id: String,
    /// 1, 2, 3 ... per (tenant, process_id).
    pub version: i64,
    pub dialect: String,
    pub source: String,
    pub modules: std::collections::BTreeMap<String, String>,
    /// The modules deployed reusable (see [`NewDeployment::reusable`]).
    #[serde(default)]
    pub reusable: std::collections::BTreeMap<String, ModuleReuse>,
    pub state: DeploymentState,
    pub created_at: i64,
}

/// Instance states as stored. RUNNING and WAITING are live; the rest terminal.
pub const LIVE_STATES: [&str; 2] = ["RUNNING", "WAITING"];

/// A new instance and its first step ([`Store::create_instance_owned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewStart {
    pub instance: NewInstance,
    pub step: StepWrite,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewInstance {
    pub id: String,
    pub tenant: String,
    pub deployment_id: String,
    pub process_id: String,
    /// A retried start with the same (tenant, key) returns the existing instance.
    pub idempotency_key: Option<String>,
    /// What the start asked for (`runtime::idempotency::fingerprint`), kept
    /// beside the key: a reuse of the key with another request is refused.
    pub idempotency_fingerprint: Option<String>,
    /// The instance this one retries (`retry?mode=...`), if any.
    pub retry_of: Option<String>,
    pub started_at: i64,
    /// The business key it was started with (migration 0020), if any.
    pub business_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct InstanceRecord {
    pub id: String,
    pub tenant: String,
    pub deployment_id: String,
    pub process_id: String,
    pub state: String,
    /// Optimistic-concurrency version: 1 after creation, +1 per committed step.
    pub version: i64,
    /// The engine snapshot, JSON text.
    pub snapshot: String,
    pub idempotency_key: Option<String>,
    pub retry_of: Option<String>,
    pub started_at: i64,
    pub updated_at: i64,
    pub ended_at: Option<i64>,
    /// When an operator closed this FAILED instance (migration 0011): it no
    /// longer holds its deployment and retention counts from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[sqlx(default)]
    pub closed_at: Option<i64>,
    /// The business key it was started with (migration 0020).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[sqlx(default)]
    pub business_key: Option<String>,
}

/// The instance that holds a (tenant, idempotency key), and the fingerprint
/// of the start that took the key (`None` for instances started before
/// fingerprints were kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHolder {
    pub id: String,
    pub fingerprint: Option<String>,
    /// The instance was deleted at its end (retention `PT0S`) and its key
    /// kept (`idempotency_keys`, migration 0013): what it ended as.
    pub ended: Option<EndedInstance>,
}

/// What an instance deleted at its end leaves for its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedInstance {
    pub state: String,
    pub process_id: String,
    pub deployment_id: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
}

/// What `create_instance` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    New,
    /// The idempotency key was used before: this is that instance's id.
    Existing(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewPark {
    /// Unique within the instance (the engine numbers them).
    pub seq: i64,
    /// `attempt`, `retry`, `timer`, `message`.
    pub kind: String,
    /// When it falls due (ms); `None` for a message wait.
    pub due_at: Option<i64>,
    pub message_name: Option<String>,
    pub correlation_key: Option<String>,
    /// Written already claimed: the runtime that armed it fires it from an
    /// in-process timer, and `claim_due` hands it to nobody (its owner
    /// included) before `until`, exactly as if `claim_due` had claimed it;
    /// `next_due` reports `until` for it and `release_claim` by its owner
    /// makes it claimable at once. An `until` before `due_at` is stored as
    /// `due_at`; a message wait (no `due_at`) ignores its claim.
    pub claim: Option<ParkClaim>,
}

/// A claim written with a park (see [`NewPark::claim`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkClaim {
    pub owner: String,
    /// When the claim lapses (ms); the park is then claimable by anyone.
    pub until: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ParkRecord {
    pub instance_id: String,
    pub seq: i64,
    pub tenant: String,
    pub deployment_id: String,
    pub kind: String,
    pub due_at: Option<i64>,
    pub message_name: Option<String>,
    pub correlation_key: Option<String>,
}

/// One finished task attempt, always recorded (inspect shows it even with the
/// audit journal off). Unique on (instance_id, token, node, attempt): replaying
/// a step never records an attempt twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct AttemptRow {
    pub token: i64,
    pub node: String,
    pub attempt: i64,
    pub started_at: i64,
    pub ended_at: i64,
    /// `completed`, `business_error`, `failed`.
    pub outcome: String,
    pub code: Option<String>,
    /// The error class of a failed attempt (`transient`, `rate_limit`, ...):
    /// a guest's own class for its own code. NULL for a completion, a
    /// business error, and rows written before migration 0010.
    #[serde(default)]
    pub class: Option<String>,
    pub message: Option<String>,
    /// Its outbound calls as read back (a JSON `crate::egress::CallRecord`,
    /// migration 0012), so an instance's view lists them without a second
    /// query. Read only: the attempt insert takes the calls from the step's
    /// [`AttemptOutput`], never from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[sqlx(default)]
    pub calls: Option<String>,
    /// The fan-out item it ran in (migration 0025): the fan-out node's IR id
    /// and the item's 0-based index (`engine::AttemptItem`). NULL outside
    /// any fan-out and for rows written before the migration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_index: Option<i64>,
}

impl AttemptRow {
    /// The class to show: the stored one, else (rows written before
    /// migration 0010) the class of its Sutra code, if its code is one.
    pub fn shown_class(&self) -> Option<String> {
        self.class.clone().or_else(|| {
            self.code
                .as_deref()
                .and_then(crate::codes::Code::parse)
                .map(|c| c.class().as_str().to_string())
        })
    }
}

/// What the guest wrote during one attempt (its stderr's tail, its
/// `host.log` lines), already bounded by the runtime (`runtime::output`:
/// a few KiB per attempt, whatever the guest wrote). Kept on the attempt's
/// row; an attempt that wrote nothing has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct AttemptOutput {
    pub token: i64,
    pub node: String,
    pub attempt: i64,
    /// The tail of its stderr (lossy UTF-8, a leading marker if cut).
    pub stderr: Option<String>,
    /// Its last log lines, a JSON array of `{"level", "message"}`.
    pub logs: Option<String>,
    /// Its outbound calls, a JSON `crate::egress::CallRecord` (migration 0012).
    pub calls: Option<String>,
    /// Its input, JSON text bounded to 64 KiB (migration 0024).
    #[sqlx(default)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Its output (a completion's) or a failure's details, bounded alike.
    #[sqlx(default)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct JournalRow {
    /// Unique within the instance (the engine numbers them).
    pub seq: i64,
    pub at: i64,
    pub kind: String,
    pub node: Option<String>,
    /// JSON text.
    pub data: String,
}

/// Everything one engine step writes, committed in one transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepWrite {
    pub snapshot: String,
    pub state: String,
    pub updated_at: i64,
    /// Set by the terminal step.
    pub ended_at: Option<i64>,
    pub arm: Vec<NewPark>,
    /// Park seqs to remove.
    pub withdraw: Vec<i64>,
    /// Remove every park of the instance (the terminal step).
    pub withdraw_all: bool,
    pub attempts: Vec<AttemptRow>,
    /// What the guest wrote in those of `attempts` that wrote anything,
    /// written on their rows (matched by token, node and attempt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<AttemptOutput>,
    /// Appended only when the audit journal is on (the runtime leaves it empty otherwise).
    pub journal: Vec<JournalRow>,
    /// Delete the instance row and everything of it (retention `PT0S` at completion).
    pub delete: bool,
    /// With `delete`: how long (ms) the instance's idempotency key, if it has
    /// one, outlives it from its end (`idempotency_keys`).
    #[serde(default)]
    pub key_window_ms: i64,
    /// Channel-call requests issued by the step (the transactional outbox).
    #[serde(default)]
    pub requests: Vec<channels::NewRequest>,
    /// Pull requests this step answers (an external task's complete or BPMN
    /// error): marked DONE in the same transaction, if still PENDING.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finished: Vec<String>,
    /// Push requests this step answers while this runtime is still POSTing
    /// them (the counterpart answered before its 2xx): marked DELIVERED in
    /// the same transaction, if still PENDING, as the 2xx would have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delivered: Vec<String>,
    /// Child instances the step starts (process calls), each with its first
    /// step; a grandchild follows its parent in the list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<children::NewChild>,
    /// Set on the final step of a child instance: its end, written on its
    /// parent's child park.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_parent: Option<children::ChildEnd>,
    /// Running attempts (token, attempt) the step abandoned: on PostgreSQL
    /// the commit asks every replica to stop them (`pg_listen.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abandoned: Vec<(u64, u32)>,
    /// Signals and messages the step throws, each written with the waits
    /// it reaches (signals.rs), delivered by the runtime after the commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<signals::NewSignal>,
    /// The instance's searchable variables after this step, when the step
    /// changed them (`None`: as they were): they replace the ones the store
    /// last wrote for it (which the instance row names, `search_rows.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<Vec<SearchVar>>,
    /// The changes of the console's counts this step makes (migration
    /// 0024, `stats.rs`): the runtime's tally of the last committed
    /// snapshot against this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stats: Vec<stats::StatDelta>,
    /// The instance's error code and failed node, when this step changes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<stats::FailureColumns>,
}

/// A top-level scalar variable as the search index keeps it (migration
/// 0020): a string as itself, a number or boolean as its JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchVar {
    pub name: String,
    pub value: String,
}

/// At most this many variables of an instance are searchable (the first by name).
pub const SEARCH_VARS_MAX: usize = 32;
/// A value longer than this (bytes) is not searchable.
pub const SEARCH_VALUE_MAX: usize = 256;

/// The searchable variables of `vars`: its top-level strings, numbers and
/// booleans, by name, each as [`SearchVar`] text, at most
/// [`SEARCH_VARS_MAX`] of them with a value of at most [`SEARCH_VALUE_MAX`]
/// bytes (null, arrays and objects are not searchable).
pub fn search_vars(vars: &serde_json::Map<String, serde_json::Value>) -> Vec<SearchVar> {
    use serde_json::Value;
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort();
    names
        .into_iter()
        .filter(|n| n.len() <= SEARCH_VALUE_MAX)
        .filter_map(|n| {
            let value = match &vars[n] {
                Value::String(s) => s.clone(),
                Value::Number(x) => x.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            (value.len() <= SEARCH_VALUE_MAX).then(|| SearchVar {
                name: n.clone(),
                value,
            })
        })
        .take(SEARCH_VARS_MAX)
        .collect()
}

/// Where a replica hands the stops it hears of ([`Store::watch_stops`]).
pub trait StopSink: Send + Sync + 'static {
    /// Stop this attempt if it runs in this process.
    fn stop(&self, instance: &str, token: u64, attempt: u32);
    /// Whether the runtime that listens still exists.
    fn alive(&self) -> bool;
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceFilter {
    pub tenant: Option<String>,
    pub state: Option<String>,
    pub process_id: Option<String>,
    pub deployment_id: Option<String>,
    /// Keyset paging: ids strictly greater than this.
    pub after_id: Option<String>,
    /// Ids strictly less than this (newest-first paging, an `until` bound).
    #[serde(default)]
    pub before_id: Option<String>,
    /// Newest first (descending ids, so by start time); else oldest first.
    #[serde(default)]
    pub newest_first: bool,
    /// Only instances started with this business key.
    #[serde(default)]
    pub business_key: Option<String>,
    /// Only instances whose searchable variable `name` has this text
    /// ([`SearchVar`]); all must hold.
    #[serde(default)]
    pub vars: Vec<SearchVar>,
    /// Only instances with this error code (migration 0024's column).
    #[serde(default)]
    pub error_code: Option<String>,
    /// Only instances whose failed node is this one (migration 0024's column).
    #[serde(default)]
    pub failed_node: Option<String>,
    pub limit: i64,
}

/// Instance counts of one deployment, for the retirement gate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeploymentLoad {
    pub running: i64,
    pub waiting: i64,
    pub failed: i64,
}

/// The store. Both implementations pass the same test suite.
///
/// Methods return `impl Future + Send` so the runtime can be generic over the
/// store and spawn on a multi-threaded runtime.
/// Tenancy and schedule storage ([`tenancy::TenancyStore`]) and channel storage
/// ([`channels::ChannelStore`]) are supertraits.
pub trait Store:
    tenancy::TenancyStore
    + channels::ChannelStore
    + egress::EgressStore
    + signals::SignalStore
    + batches::BatchStore
    + connections::ConnectionStore
    + Send
    + Sync
    + Clone
    + 'static
{
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;

    // ---- modules (content-addressed) ----
    fn put_module(
        &self,
        tenant: &str,
        digest: &str,
        bytes: &[u8],
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn get_module(
        &self,
        tenant: &str,
        digest: &str,
    ) -> impl Future<Output = StoreResult<Option<Vec<u8>>>> + Send;

    // ---- deployments ----
    /// Inserts with version = previous max + 1 for (tenant, process_id), ACTIVE;
    /// the previously ACTIVE deployment of that process becomes DRAINING in the
    /// same transaction.
    fn insert_deployment(
        &self,
        d: &NewDeployment,
    ) -> impl Future<Output = StoreResult<DeploymentRecord>> + Send;
    fn get_deployment(
        &self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<DeploymentRecord>>> + Send;
    fn list_deployments(
        &self,
        tenant: Option<&str>,
    ) -> impl Future<Output = StoreResult<Vec<DeploymentRecord>>> + Send;
    fn active_deployment(
        &self,
        tenant: &str,
        process_id: &str,
    ) -> impl Future<Output = StoreResult<Option<DeploymentRecord>>> + Send;
    fn set_deployment_state(
        &self,
        id: &str,
        state: DeploymentState,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn deployment_load(&self, id: &str)
        -> impl Future<Output = StoreResult<DeploymentLoad>> + Send;

    // ---- instances ----
    /// Inserts the instance (version 1) and applies its first step, in one
    /// transaction. A reused (tenant, idempotency_key) writes nothing and
    /// answers `Created::Existing(id)`.
    /// (A copy of the two, through [`Self::create_instance_owned`], the one
    /// path every backend implements.)
    fn create_instance(
        &self,
        inst: &NewInstance,
        step: &StepWrite,
    ) -> impl Future<Output = StoreResult<Created>> + Send {
        let start = Box::new(NewStart {
            instance: inst.clone(),
            step: step.clone(),
        });
        async move { self.create_instance_owned(start).await.0 }
    }
    /// [`Self::create_instance`] taking the instance and its first step by
    /// value and handing them back (the caller goes on with the step): the
    /// SQLite writer thread takes them without a copy. Boxed, so the futures
    /// on the way (each holds its arguments) stay small.
    fn create_instance_owned(
        &self,
        start: Box<NewStart>,
    ) -> impl Future<Output = (StoreResult<Created>, Box<NewStart>)> + Send;
    fn load_instance(
        &self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<InstanceRecord>>> + Send;
    /// The instances of `ids` that exist, in one read (any order). The
    /// runtime reads the instances of a claimed batch of parks so on
    /// PostgreSQL, where each read is a round trip (poller.rs).
    fn load_instances(
        &self,
        ids: &[String],
    ) -> impl Future<Output = StoreResult<Vec<InstanceRecord>>> + Send;
    /// Applies a step if the stored version is `expected_version` (then it is
    /// `expected_version + 1`); otherwise `StoreError::Conflict`.
    /// (A copy of the step, through [`Self::commit_step_owned`], the one
    /// path every backend implements.)
    fn commit_step(
        &self,
        id: &str,
        expected_version: i64,
        step: &StepWrite,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        let step = Box::new(step.clone());
        async move { self.commit_step_owned(id, expected_version, step).await.0 }
    }
    /// [`Self::commit_step`] taking the step by value and handing it back
    /// (the caller goes on with it), as [`Self::create_instance_owned`]: the
    /// SQLite writer thread takes it without a copy, and the future holds
    /// no copy of it while the commit is out.
    fn commit_step_owned(
        &self,
        id: &str,
        expected_version: i64,
        step: Box<StepWrite>,
    ) -> impl Future<Output = (StoreResult<()>, Box<StepWrite>)> + Send;
    /// Several steps of different instances in one transaction (group commit);
    /// all or nothing: one conflict fails the batch.
    fn commit_steps(
        &self,
        steps: &[(String, i64, StepWrite)],
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn list_instances(
        &self,
        filter: &InstanceFilter,
    ) -> impl Future<Output = StoreResult<Vec<InstanceRecord>>> + Send;
    /// Ids of every live (RUNNING/WAITING) instance.
    fn live_instances(&self) -> impl Future<Output = StoreResult<Vec<String>>> + Send;

    // ---- parks ----
    /// The earliest due instant of any park (ms).
    fn next_due(&self) -> impl Future<Output = StoreResult<Option<i64>>> + Send;
    /// Claims up to `limit` parks due at or before `now`, for `owner` until
    /// `now + lease_ms`: each due park is handed to exactly one caller (across
    /// replicas); a claim whose holder died is claimable again after its lease.
    fn claim_due(
        &self,
        now: i64,
        limit: i64,
        owner: &str,
        lease_ms: i64,
    ) -> impl Future<Output = StoreResult<Vec<ParkRecord>>> + Send;
    /// Releases `owner`'s claims on `(instance, seq)` without firing them.
    fn release_claim(
        &self,
        instance_id: &str,
        seq: i64,
        owner: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Message waits matching (tenant, name, key): key `None` matches waits armed without a key.
    fn find_message_parks(
        &self,
        tenant: &str,
        name: &str,
        correlation_key: Option<&str>,
    ) -> impl Future<Output = StoreResult<Vec<ParkRecord>>> + Send;
    fn parks_of(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<ParkRecord>>> + Send;
    /// Count of parks by kind.
    fn park_counts(&self) -> impl Future<Output = StoreResult<Vec<(String, i64)>>> + Send;

    // ---- child instances (children.rs) ----
    /// The outcome a child wrote on park `(instance_id, seq)` of its parent
    /// (`None`: no child ended there yet).
    fn child_outcome(
        &self,
        instance_id: &str,
        seq: i64,
    ) -> impl Future<Output = StoreResult<Option<String>>> + Send;
    /// Up to `limit` live child instances whose parent's park is gone.
    fn orphaned_children(
        &self,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<String>>> + Send;

    // ---- attempts and journal ----
    fn attempts(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<AttemptRow>>> + Send;
    /// What the guest wrote in the attempts of an instance that wrote
    /// anything, in the order of `attempts`.
    fn attempt_outputs(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<AttemptOutput>>> + Send;
    fn journal(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<JournalRow>>> + Send;

    /// Close FAILED instance `id` at `at` with `reason` (an operator's):
    /// `closed_at` set, and, when `journal` is given, that entry appended
    /// (numbered after the instance's last one), in one transaction.
    /// `false` when the instance is not FAILED or is closed already.
    fn close_instance(
        &self,
        id: &str,
        at: i64,
        reason: &str,
        journal: Option<JournalRow>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    // ---- retention ----
    /// Deletes COMPLETED, TERMINATED and COMPENSATED instances (and their attempts and
    /// journal) that ended at or before `ended_before`, FAILED ones an operator
    /// closed at or before it, and FAILED child flows (their failure went to
    /// their parent) that ended at or before it once their parent is gone, up
    /// to `limit`; never an unclosed FAILED top-level instance, never one with
    /// a park. Returns how many were deleted.
    fn sweep(&self, ended_before: i64, limit: i64)
        -> impl Future<Output = StoreResult<u64>> + Send;

    // ---- leases (singletons: the sweeper, schedule arming) ----
    /// Takes or renews lease `name` for `holder` until `now + ttl_ms` if it is
    /// free, expired, or already `holder`'s. Returns whether `holder` holds it.
    fn try_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl_ms: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    fn release_lease(
        &self,
        name: &str,
        holder: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    // ---- wake-ups across processes ----
    /// Wake `notify` whenever any process arms a timed park, so a poller
    /// sleeping until its next due instant re-reads the store at once.
    /// PostgreSQL: LISTEN/NOTIFY. SQLite: nothing to do (one process owns the
    /// file and wakes itself). Returns once the subscription is in place.
    fn watch_parks(
        &self,
        notify: std::sync::Arc<tokio::sync::Notify>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        let _ = notify;
        async { Ok(()) }
    }
    /// Hand `sink` every attempt another process's commit abandoned, so the
    /// process running it stops it. PostgreSQL: LISTEN/NOTIFY. SQLite:
    /// nothing to do (one process owns the file and stops its own attempts).
    /// Returns once the subscription is in place.
    fn watch_stops(
        &self,
        sink: std::sync::Arc<dyn StopSink>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        let _ = sink;
        async { Ok(()) }
    }
}
