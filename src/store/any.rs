//! `AnyStore`: the backend chosen at run time from a datasource URL.
//!
//! Invariant: a pure delegation — every [`Store`] method of [`AnyStore`]
//! behaves exactly as the wrapped backend's. `postgres://` and
//! `postgresql://` URLs open PostgreSQL; anything else is SQLite (a
//! `sqlite:` URL, `sqlite::memory:` or a plain path).

use super::{
    AttemptOutput, AttemptRow, Created, DeploymentLoad, DeploymentRecord, DeploymentState,
    InstanceFilter, InstanceRecord, JournalRow, NewDeployment, NewStart, ParkRecord, PgStore,
    SqliteStore, StepWrite, Store, StoreResult,
};

/// One of the two backends.
#[derive(Debug, Clone)]
pub enum AnyStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// Whether `url` names a PostgreSQL database.
pub fn is_postgres_url(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

impl AnyStore {
    /// Opens the store `url` names (running migrations).
    pub async fn open(url: &str) -> StoreResult<AnyStore> {
        if is_postgres_url(url) {
            Ok(AnyStore::Postgres(PgStore::open(url).await?))
        } else {
            Ok(AnyStore::Sqlite(SqliteStore::open(url).await?))
        }
    }

    /// [`Self::open`] with a bound on how long a caller waits for a pooled
    /// connection (PostgreSQL: while the database is away, a request fails
    /// with a store error after `acquire_timeout`, not after sqlx's 30 s;
    /// SQLite's pools keep their own).
    pub async fn open_with_acquire(
        url: &str,
        acquire_timeout: std::time::Duration,
    ) -> StoreResult<AnyStore> {
        if is_postgres_url(url) {
            let opts = super::PgOptions {
                acquire_timeout,
                ..super::PgOptions::default()
            };
            Ok(AnyStore::Postgres(PgStore::open_with(url, opts).await?))
        } else {
            Ok(AnyStore::Sqlite(SqliteStore::open(url).await?))
        }
    }

    /// Closes the underlying pools.
    pub async fn close(&self) {
        match self {
            AnyStore::Sqlite(s) => s.close().await,
            AnyStore::Postgres(s) => s.close().await,
        }
    }
}

impl From<SqliteStore> for AnyStore {
    fn from(s: SqliteStore) -> Self {
        AnyStore::Sqlite(s)
    }
}

impl From<PgStore> for AnyStore {
    fn from(s: PgStore) -> Self {
        AnyStore::Postgres(s)
    }
}

impl Store for AnyStore {
    fn backend(&self) -> &'static str {
        delegate!(self, s => s.backend())
    }

    async fn put_module(&self, tenant: &str, digest: &str, bytes: &[u8]) -> StoreResult<()> {
        delegate!(self, s => s.put_module(tenant, digest, bytes).await)
    }

    async fn get_module(&self, tenant: &str, digest: &str) -> StoreResult<Option<Vec<u8>>> {
        delegate!(self, s => s.get_module(tenant, digest).await)
    }

    async fn insert_deployment(&self, d: &NewDeployment) -> StoreResult<DeploymentRecord> {
        delegate!(self, s => s.insert_deployment(d).await)
    }

    async fn get_deployment(&self, id: &str) -> StoreResult<Option<DeploymentRecord>> {
        delegate!(self, s => s.get_deployment(id).await)
    }

    async fn list_deployments(&self, tenant: Option<&str>) -> StoreResult<Vec<DeploymentRecord>> {
        delegate!(self, s => s.list_deployments(tenant).await)
    }

    async fn active_deployment(
        &self,
        tenant: &str,
        process_id: &str,
    ) -> StoreResult<Option<DeploymentRecord>> {
        delegate!(self, s => s.active_deployment(tenant, process_id).await)
    }

    async fn set_deployment_state(&self, id: &str, state: DeploymentState) -> StoreResult<()> {
        delegate!(self, s => s.set_deployment_state(id, state).await)
    }

    async fn deployment_load(&self, id: &str) -> StoreResult<DeploymentLoad> {
        delegate!(self, s => s.deployment_load(id).await)
    }

    async fn close_instance(
        &self,
        id: &str,
        at: i64,
        reason: &str,
        journal: Option<JournalRow>,
    ) -> StoreResult<bool> {
        delegate!(self, s => s.close_instance(id, at, reason, journal).await)
    }

    async fn create_instance_owned(
        &self,
        start: Box<NewStart>,
    ) -> (StoreResult<Created>, Box<NewStart>) {
        match self {
            AnyStore::Sqlite(s) => s.create_instance_owned(start).await,
            // Boxed: every start's future holds this one, and PostgreSQL's
            // (its group commit's request) is kilobytes where SQLite's is not.
            AnyStore::Postgres(s) => Box::pin(s.create_instance_owned(start)).await,
        }
    }

    async fn load_instance(&self, id: &str) -> StoreResult<Option<InstanceRecord>> {
        delegate!(self, s => s.load_instance(id).await)
    }

    async fn load_instances(&self, ids: &[String]) -> StoreResult<Vec<InstanceRecord>> {
        delegate!(self, s => s.load_instances(ids).await)
    }

    async fn commit_step_owned(
        &self,
        id: &str,
        expected_version: i64,
        step: Box<StepWrite>,
    ) -> (StoreResult<()>, Box<StepWrite>) {
        match self {
            AnyStore::Sqlite(s) => s.commit_step_owned(id, expected_version, step).await,
            // Boxed, as in `create_instance_owned`: every drive's future
            // holds this one, and PostgreSQL's is kilobytes.
            AnyStore::Postgres(s) => {
                Box::pin(s.commit_step_owned(id, expected_version, step)).await
            }
        }
    }

    async fn commit_steps(&self, steps: &[(String, i64, StepWrite)]) -> StoreResult<()> {
        delegate!(self, s => s.commit_steps(steps).await)
    }

    async fn list_instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        delegate!(self, s => s.list_instances(filter).await)
    }

    async fn live_instances(&self) -> StoreResult<Vec<String>> {
        delegate!(self, s => s.live_instances().await)
    }

    async fn next_due(&self) -> StoreResult<Option<i64>> {
        delegate!(self, s => s.next_due().await)
    }

    async fn claim_due(
        &self,
        now: i64,
        limit: i64,
        owner: &str,
        lease_ms: i64,
    ) -> StoreResult<Vec<ParkRecord>> {
        delegate!(self, s => s.claim_due(now, limit, owner, lease_ms).await)
    }

    async fn release_claim(&self, instance_id: &str, seq: i64, owner: &str) -> StoreResult<()> {
        delegate!(self, s => s.release_claim(instance_id, seq, owner).await)
    }

    async fn find_message_parks(
        &self,
        tenant: &str,
        name: &str,
        correlation_key: Option<&str>,
    ) -> StoreResult<Vec<ParkRecord>> {
        delegate!(self, s => s.find_message_parks(tenant, name, correlation_key).await)
    }

    async fn child_outcome(&self, instance_id: &str, seq: i64) -> StoreResult<Option<String>> {
        delegate!(self, s => s.child_outcome(instance_id, seq).await)
    }

    async fn orphaned_children(&self, limit: i64) -> StoreResult<Vec<String>> {
        delegate!(self, s => s.orphaned_children(limit).await)
    }

    async fn parks_of(&self, instance_id: &str) -> StoreResult<Vec<ParkRecord>> {
        delegate!(self, s => s.parks_of(instance_id).await)
    }

    async fn park_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        delegate!(self, s => s.park_counts().await)
    }

    async fn attempts(&self, instance_id: &str) -> StoreResult<Vec<AttemptRow>> {
        delegate!(self, s => s.attempts(instance_id).await)
    }

    async fn attempt_outputs(&self, instance_id: &str) -> StoreResult<Vec<AttemptOutput>> {
        delegate!(self, s => s.attempt_outputs(instance_id).await)
    }

    async fn journal(&self, instance_id: &str) -> StoreResult<Vec<JournalRow>> {
        delegate!(self, s => s.journal(instance_id).await)
    }

    async fn sweep(&self, ended_before: i64, limit: i64) -> StoreResult<u64> {
        delegate!(self, s => s.sweep(ended_before, limit).await)
    }

    async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        delegate!(self, s => s.try_lease(name, holder, now, ttl_ms).await)
    }

    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<()> {
        delegate!(self, s => s.release_lease(name, holder).await)
    }

    async fn watch_parks(&self, notify: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<()> {
        delegate!(self, s => s.watch_parks(notify).await)
    }

    async fn watch_stops(&self, sink: std::sync::Arc<dyn super::StopSink>) -> StoreResult<()> {
        delegate!(self, s => s.watch_stops(sink).await)
    }
}

#[cfg(test)]
mod tests {
    use super::is_postgres_url;

    #[test]
    fn postgres_urls_are_recognised_everything_else_is_sqlite() {
        assert!(is_postgres_url("postgres://u@h:5432/db"));
        assert!(is_postgres_url("postgresql://h/db"));
        assert!(is_postgres_url("POSTGRES://h/db"));
        assert!(!is_postgres_url("sqlite://postgres://x"));
        assert!(!is_postgres_url("sqlite::memory:"));
        assert!(!is_postgres_url("/var/lib/sutra/postgres.db"));
    }
}
