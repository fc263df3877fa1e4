//! Tenancy and schedule storage: tenants and their quotas, hashed API keys,
//! the schedule rows of timer start events and their fire journal, and the
//! counts `/metrics` shows. A supertrait of [`super::Store`]: every store has it.
//!
//! Invariants (identical on both backends):
//! - an API key is stored only as `sha256(key)` under its public `key_id`;
//!   the secret is never stored and never returned after creation;
//! - a schedule row is ARMED while its deployment is ACTIVE and has a slot
//!   left; RESOLVED once the deployment stopped being active; EXHAUSTED
//!   when its budget (or its single date) is spent. Only ARMED rows have a
//!   `next_due`;
//! - [`TenancyStore::record_fire`] moves a schedule and journals the fire (or
//!   the refused fire) in one transaction: a fire is never dropped silently.

use super::{KeyHolder, StoreResult};
use serde::{Deserialize, Serialize};
use std::future::Future;

/// A tenant's quotas. `None` is unlimited (the server's own limits still apply).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct TenantLimits {
    /// Non-terminal (RUNNING/WAITING) instances at once.
    pub max_instances: Option<i64>,
    /// Bytes of one task module.
    pub max_module_bytes: Option<i64>,
    /// Fuel ceiling of one attempt.
    pub fuel: Option<i64>,
    /// Wall-clock ceiling of one attempt, in milliseconds.
    pub deadline_ms: Option<i64>,
    /// Linear-memory ceiling of one attempt, in bytes.
    pub memory_bytes: Option<i64>,
    /// Functions one task module may define (over its core modules).
    pub max_module_functions: Option<i64>,
    /// CPU and wall-clock ceiling of compiling one task module, in milliseconds.
    pub compile_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct TenantRecord {
    pub name: String,
    pub created_at: i64,
    #[sqlx(flatten)]
    pub limits: TenantLimits,
}

/// A stored API key (the hash, never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub key_id: String,
    pub tenant: String,
    /// sha256 of the whole key, hex.
    pub key_hash: String,
    pub created_at: i64,
}

/// Schedule states as stored.
pub const SCHEDULE_ARMED: &str = "ARMED";
pub const SCHEDULE_RESOLVED: &str = "RESOLVED";
pub const SCHEDULE_EXHAUSTED: &str = "EXHAUSTED";

/// One timer start event of one deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ScheduleRecord {
    pub deployment_id: String,
    pub start_node: String,
    pub tenant: String,
    /// When it was armed (the grid of a cycle without a start is fixed by it).
    pub armed_at: i64,
    /// The last slot fired or refused (`None` = none yet).
    pub last_slot: Option<i64>,
    pub next_due: Option<i64>,
    /// `ARMED`, `RESOLVED` or `EXHAUSTED`.
    pub state: String,
    pub fires: i64,
    /// Slots coalesced into fires (each spent a repeat).
    pub skipped: i64,
    /// Fires refused (over quota, process gone): journaled in `schedule_events`.
    pub refused: i64,
}

/// What one fire did, journaled with the schedule's move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ScheduleEvent {
    pub at: i64,
    pub slot: Option<i64>,
    pub skipped: i64,
    /// `fired` or `refused`.
    pub outcome: String,
    pub instance_id: Option<String>,
    pub code: Option<String>,
    pub message: Option<String>,
}

/// Counts for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricCounts {
    /// (state, count)
    pub instances: Vec<(String, i64)>,
    /// (outcome, code or "", count)
    pub attempts: Vec<(String, String, i64)>,
    /// The earliest due instant of a timed park (ms), for lateness.
    pub earliest_due: Option<i64>,
    /// Armed schedules.
    pub schedules_armed: i64,
    /// Schedule fires refused, all time.
    pub schedule_refusals: i64,
}

/// Tenancy and schedule storage. See the module docs.
pub trait TenancyStore: Send + Sync {
    // ---- tenants and keys ----
    /// Inserts a tenant; `Duplicate` if the name is taken.
    fn create_tenant(&self, t: &TenantRecord) -> impl Future<Output = StoreResult<()>> + Send;
    fn get_tenant(
        &self,
        name: &str,
    ) -> impl Future<Output = StoreResult<Option<TenantRecord>>> + Send;
    fn list_tenants(&self) -> impl Future<Output = StoreResult<Vec<TenantRecord>>> + Send;
    /// `NotFound` if there is no such tenant.
    fn set_tenant_limits(
        &self,
        name: &str,
        limits: &TenantLimits,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn insert_api_key(&self, key: &ApiKeyRecord) -> impl Future<Output = StoreResult<()>> + Send;
    fn get_api_key(
        &self,
        key_id: &str,
    ) -> impl Future<Output = StoreResult<Option<ApiKeyRecord>>> + Send;
    /// A tenant's keys, oldest first.
    fn api_keys_of(
        &self,
        tenant: &str,
    ) -> impl Future<Output = StoreResult<Vec<ApiKeyRecord>>> + Send;
    /// Deletes one key of `tenant` (revocation); false if it has no such key.
    fn delete_api_key(
        &self,
        tenant: &str,
        key_id: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Rotation: inserts `key` and deletes every other key of its tenant, in
    /// one transaction; answers the ids deleted.
    fn replace_api_keys(
        &self,
        key: &ApiKeyRecord,
    ) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
    /// Live (RUNNING/WAITING) instances of a tenant.
    fn live_instance_count(&self, tenant: &str) -> impl Future<Output = StoreResult<i64>> + Send;
    /// A tenant's instances counted by state, optionally of one process and
    /// of ids in `from..before` (ids begin with their start instant, so this
    /// bounds the start time as the listing does) (the console's tallies).
    fn instance_counts(
        &self,
        tenant: &str,
        process: Option<&str>,
        from: Option<&str>,
        before: Option<&str>,
    ) -> impl Future<Output = StoreResult<Vec<(String, i64)>>> + Send;
    /// Per node of deployment `deployment`: how many of its instances have
    /// the node in each state (READY, RUNNING, SUCCEEDED, FAILED, ...), as
    /// (node, state, count), computed by the database from the snapshots.
    fn node_states(
        &self,
        deployment: &str,
    ) -> impl Future<Output = StoreResult<Vec<(String, String, i64)>>> + Send;
    /// [`Self::node_states`] counted from the instances' snapshots instead
    /// of the maintained counts (`SqlBackend::NODE_STATES`; a walk of every
    /// snapshot of the deployment, for checking the aggregate).
    fn node_states_scanned(
        &self,
        deployment: &str,
    ) -> impl Future<Output = StoreResult<Vec<(String, String, i64)>>> + Send;
    /// Per node of deployment `deployment`: its open incidents.
    fn open_incidents_by_node(
        &self,
        deployment: &str,
    ) -> impl Future<Output = StoreResult<Vec<(String, i64)>>> + Send;
    /// The instances retried from `id` (`retry_of = id`), oldest first
    /// (migration 0016 indexes them).
    fn retries_of(&self, id: &str) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
    /// How many FAILED instances of a tenant a retry took over, with the
    /// bounds of [`Self::instance_counts`].
    fn retried_failed_count(
        &self,
        tenant: &str,
        process: Option<&str>,
        from: Option<&str>,
        before: Option<&str>,
    ) -> impl Future<Output = StoreResult<i64>> + Send;
    /// The instance a (tenant, idempotency key) created, if any: the live
    /// one, or the key kept (unexpired at `now`) for one deleted at its end.
    fn instance_by_key(
        &self,
        tenant: &str,
        key: &str,
        now: i64,
    ) -> impl Future<Output = StoreResult<Option<KeyHolder>>> + Send;
    /// Removes the kept idempotency keys expired at `now`. Returns how many.
    fn purge_kept_keys(&self, now: i64) -> impl Future<Output = StoreResult<u64>> + Send;

    // ---- schedules ----
    /// Inserts an ARMED schedule unless one exists for (deployment, node).
    fn arm_schedule(&self, s: &ScheduleRecord) -> impl Future<Output = StoreResult<()>> + Send;
    /// Resolves every ARMED schedule whose deployment is not ACTIVE. Returns how many.
    fn resolve_inactive_schedules(&self) -> impl Future<Output = StoreResult<u64>> + Send;
    /// ARMED schedules due at or before `now`.
    fn due_schedules(
        &self,
        now: i64,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<ScheduleRecord>>> + Send;
    /// The earliest `next_due` of an ARMED schedule.
    fn next_schedule_due(&self) -> impl Future<Output = StoreResult<Option<i64>>> + Send;
    /// Every schedule of a deployment.
    fn schedules_of(
        &self,
        deployment_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<ScheduleRecord>>> + Send;
    fn schedule_events(
        &self,
        deployment_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<ScheduleEvent>>> + Send;
    /// Moves an ARMED schedule to `last_slot`/`next_due` (`None` → EXHAUSTED),
    /// bumps its counters and journals `event`, in one transaction. Answers
    /// false (and writes nothing) if the schedule is no longer ARMED.
    fn record_fire(
        &self,
        deployment_id: &str,
        start_node: &str,
        next_due: Option<i64>,
        event: &ScheduleEvent,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    // ---- metrics ----
    fn metric_counts(&self) -> impl Future<Output = StoreResult<MetricCounts>> + Send;
}

/// `AnyStore` delegates to the backend it wraps.
mod any_impl {
    use super::*;
    use crate::store::AnyStore;

    impl TenancyStore for AnyStore {
        async fn create_tenant(&self, t: &TenantRecord) -> StoreResult<()> {
            delegate!(self, s => s.create_tenant(t).await)
        }
        async fn get_tenant(&self, name: &str) -> StoreResult<Option<TenantRecord>> {
            delegate!(self, s => s.get_tenant(name).await)
        }
        async fn list_tenants(&self) -> StoreResult<Vec<TenantRecord>> {
            delegate!(self, s => s.list_tenants().await)
        }
        async fn set_tenant_limits(&self, name: &str, limits: &TenantLimits) -> StoreResult<()> {
            delegate!(self, s => s.set_tenant_limits(name, limits).await)
        }
        async fn insert_api_key(&self, key: &ApiKeyRecord) -> StoreResult<()> {
            delegate!(self, s => s.insert_api_key(key).await)
        }
        async fn get_api_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>> {
            delegate!(self, s => s.get_api_key(key_id).await)
        }
        async fn api_keys_of(&self, tenant: &str) -> StoreResult<Vec<ApiKeyRecord>> {
            delegate!(self, s => s.api_keys_of(tenant).await)
        }
        async fn delete_api_key(&self, tenant: &str, key_id: &str) -> StoreResult<bool> {
            delegate!(self, s => s.delete_api_key(tenant, key_id).await)
        }
        async fn replace_api_keys(&self, key: &ApiKeyRecord) -> StoreResult<Vec<String>> {
            delegate!(self, s => s.replace_api_keys(key).await)
        }
        async fn live_instance_count(&self, tenant: &str) -> StoreResult<i64> {
            delegate!(self, s => s.live_instance_count(tenant).await)
        }
        async fn instance_counts(
            &self,
            tenant: &str,
            process: Option<&str>,
            from: Option<&str>,
            before: Option<&str>,
        ) -> StoreResult<Vec<(String, i64)>> {
            delegate!(self, s => s.instance_counts(tenant, process, from, before).await)
        }
        async fn node_states(&self, deployment: &str) -> StoreResult<Vec<(String, String, i64)>> {
            delegate!(self, s => s.node_states(deployment).await)
        }
        async fn node_states_scanned(
            &self,
            deployment: &str,
        ) -> StoreResult<Vec<(String, String, i64)>> {
            delegate!(self, s => s.node_states_scanned(deployment).await)
        }
        async fn open_incidents_by_node(
            &self,
            deployment: &str,
        ) -> StoreResult<Vec<(String, i64)>> {
            delegate!(self, s => s.open_incidents_by_node(deployment).await)
        }
        async fn retries_of(&self, id: &str) -> StoreResult<Vec<String>> {
            delegate!(self, s => s.retries_of(id).await)
        }
        async fn retried_failed_count(
            &self,
            tenant: &str,
            process: Option<&str>,
            from: Option<&str>,
            before: Option<&str>,
        ) -> StoreResult<i64> {
            delegate!(self, s => s.retried_failed_count(tenant, process, from, before).await)
        }
        async fn instance_by_key(
            &self,
            tenant: &str,
            key: &str,
            now: i64,
        ) -> StoreResult<Option<KeyHolder>> {
            delegate!(self, s => s.instance_by_key(tenant, key, now).await)
        }
        async fn purge_kept_keys(&self, now: i64) -> StoreResult<u64> {
            delegate!(self, s => s.purge_kept_keys(now).await)
        }
        async fn arm_schedule(&self, sched: &ScheduleRecord) -> StoreResult<()> {
            delegate!(self, s => s.arm_schedule(sched).await)
        }
        async fn resolve_inactive_schedules(&self) -> StoreResult<u64> {
            delegate!(self, s => s.resolve_inactive_schedules().await)
        }
        async fn due_schedules(&self, now: i64, limit: i64) -> StoreResult<Vec<ScheduleRecord>> {
            delegate!(self, s => s.due_schedules(now, limit).await)
        }
        async fn next_schedule_due(&self) -> StoreResult<Option<i64>> {
            delegate!(self, s => s.next_schedule_due().await)
        }
        async fn schedules_of(&self, deployment_id: &str) -> StoreResult<Vec<ScheduleRecord>> {
            delegate!(self, s => s.schedules_of(deployment_id).await)
        }
        async fn schedule_events(&self, deployment_id: &str) -> StoreResult<Vec<ScheduleEvent>> {
            delegate!(self, s => s.schedule_events(deployment_id).await)
        }
        async fn record_fire(
            &self,
            deployment_id: &str,
            start_node: &str,
            next_due: Option<i64>,
            event: &ScheduleEvent,
        ) -> StoreResult<bool> {
            delegate!(self, s => s.record_fire(deployment_id, start_node, next_due, event).await)
        }
        async fn metric_counts(&self) -> StoreResult<MetricCounts> {
            delegate!(self, s => s.metric_counts().await)
        }
    }
}
