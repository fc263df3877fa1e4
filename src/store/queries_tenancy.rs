//! [`TenancyStore`] for every [`SqlBackend`], written once: tenants, keys,
//! schedules and metric counts have no statement that differs between
//! SQLite and PostgreSQL (see `queries.rs` for the rules).

use super::queries::{Column, Conn, RowsAffected, SqlBackend, LIVE};
use super::rows::{duplicate_or_db, fire_counts, EVENT_COLUMNS, SCHEDULE_COLUMNS, TENANT_COLUMNS};
use super::tenancy::{
    ApiKeyRecord, MetricCounts, ScheduleEvent, ScheduleRecord, TenancyStore, TenantLimits,
    TenantRecord, SCHEDULE_ARMED,
};
use super::{KeyHolder, StoreError, StoreResult};
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, Type};

/// Columns of `api_keys` that make an [`ApiKeyRecord`].
const KEY_COLUMNS: &str = "key_id, tenant, key_hash, created_at";

type KeyRow = (String, String, String, i64);

fn key_record((key_id, tenant, key_hash, created_at): KeyRow) -> ApiKeyRecord {
    ApiKeyRecord {
        key_id,
        tenant,
        key_hash,
        created_at,
    }
}

/// Inserts one key in the caller's transaction.
async fn insert_key<DB>(conn: &mut DB::Connection, key: &ApiKeyRecord) -> StoreResult<()>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: Column<DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB>,
{
    sqlx::query::<DB>(&format!(
        "INSERT INTO api_keys ({KEY_COLUMNS}) VALUES ($1, $2, $3, $4)"
    ))
    .bind(key.key_id.as_str())
    .bind(key.tenant.as_str())
    .bind(key.key_hash.as_str())
    .bind(key.created_at)
    .execute(conn)
    .await
    .map_err(|e| duplicate_or_db(e, || "API key id collision".to_string()))?;
    Ok(())
}

// The sqlx traits that make `B::Db` a database the shared SQL runs on (see
// the Store impl in queries.rs).
impl<B> TenancyStore for B
where
    B: SqlBackend,
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    i64: Column<B::Db>,
    Option<i64>: Column<B::Db>,
    String: Column<B::Db>,
    Option<String>: Column<B::Db>,
    for<'s> &'s str: Type<B::Db> + Encode<'s, B::Db> + ColumnIndex<<B::Db as Database>::Row>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    async fn create_tenant(&self, t: &TenantRecord) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(&format!(
            "INSERT INTO tenants ({TENANT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(&t.name)
        .bind(t.created_at)
        .bind(t.limits.max_instances)
        .bind(t.limits.max_module_bytes)
        .bind(t.limits.fuel)
        .bind(t.limits.deadline_ms)
        .bind(t.limits.memory_bytes)
        .bind(t.limits.max_module_functions)
        .bind(t.limits.compile_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| duplicate_or_db(e, || format!("tenant {} exists", t.name)))?;
        tx.commit().await?;
        Ok(())
    }

    async fn get_tenant(&self, name: &str) -> StoreResult<Option<TenantRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {TENANT_COLUMNS} FROM tenants WHERE name = $1"
        ))
        .bind(name)
        .fetch_optional(self.reads())
        .await?)
    }

    async fn list_tenants(&self) -> StoreResult<Vec<TenantRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {TENANT_COLUMNS} FROM tenants ORDER BY name"
        ))
        .fetch_all(self.reads())
        .await?)
    }

    async fn set_tenant_limits(&self, name: &str, l: &TenantLimits) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE tenants SET max_instances = $1, max_module_bytes = $2, fuel = $3, \
             deadline_ms = $4, memory_bytes = $5, max_module_functions = $6, compile_ms = $7 \
             WHERE name = $8",
        )
        .bind(l.max_instances)
        .bind(l.max_module_bytes)
        .bind(l.fuel)
        .bind(l.deadline_ms)
        .bind(l.memory_bytes)
        .bind(l.max_module_functions)
        .bind(l.compile_ms)
        .bind(name)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("tenant {name}")));
        }
        tx.commit().await?;
        Ok(())
    }

    async fn insert_api_key(&self, key: &ApiKeyRecord) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        insert_key::<B::Db>(&mut tx, key).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn get_api_key(&self, key_id: &str) -> StoreResult<Option<ApiKeyRecord>> {
        let row: Option<KeyRow> = sqlx::query_as(&format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE key_id = $1"
        ))
        .bind(key_id)
        .fetch_optional(self.reads())
        .await?;
        Ok(row.map(key_record))
    }

    async fn api_keys_of(&self, tenant: &str) -> StoreResult<Vec<ApiKeyRecord>> {
        let rows: Vec<KeyRow> = sqlx::query_as(&format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE tenant = $1 ORDER BY created_at, key_id"
        ))
        .bind(tenant)
        .fetch_all(self.reads())
        .await?;
        Ok(rows.into_iter().map(key_record).collect())
    }

    async fn delete_api_key(&self, tenant: &str, key_id: &str) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM api_keys WHERE tenant = $1 AND key_id = $2")
            .bind(tenant)
            .bind(key_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn replace_api_keys(&self, key: &ApiKeyRecord) -> StoreResult<Vec<String>> {
        let mut tx = self.begin_write().await?;
        let old: Vec<String> =
            sqlx::query_scalar("SELECT key_id FROM api_keys WHERE tenant = $1 ORDER BY key_id")
                .bind(&key.tenant)
                .fetch_all(&mut *tx)
                .await?;
        sqlx::query("DELETE FROM api_keys WHERE tenant = $1")
            .bind(&key.tenant)
            .execute(&mut *tx)
            .await?;
        insert_key::<B::Db>(&mut tx, key).await?;
        tx.commit().await?;
        Ok(old)
    }

    async fn live_instance_count(&self, tenant: &str) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM instances WHERE tenant = $1 AND state IN ({LIVE})"
        ))
        .bind(tenant)
        .fetch_one(self.reads())
        .await?)
    }

    async fn instance_counts(
        &self,
        tenant: &str,
        process: Option<&str>,
        from: Option<&str>,
        before: Option<&str>,
    ) -> StoreResult<Vec<(String, i64)>> {
        if from.is_none() && before.is_none() {
            // Unbounded: the maintained counts (migration 0024, stats.rs).
            return Ok(sqlx::query_as(super::stats::STATE_COUNTS)
                .bind(tenant)
                .bind(process.map(str::to_string))
                .fetch_all(self.reads())
                .await?);
        }
        // Bounded by start time: counted from the rows (the aggregate has no
        // start times). SQLite walks the tenant's entries of
        // `instances_tenant_state` in state order, so the GROUP BY needs no
        // sort: without that index (walking `instances_tenant` and sorting)
        // this took three times as long at 100,000 instances (benches/README,
        // engine session 25), which is why the index stays whole.
        Ok(sqlx::query_as(
            "SELECT state, COUNT(*) FROM instances WHERE tenant = $1 \
             AND (CAST($2 AS TEXT) IS NULL OR process_id = CAST($2 AS TEXT)) \
             AND (CAST($3 AS TEXT) IS NULL OR id >= CAST($3 AS TEXT)) \
             AND (CAST($4 AS TEXT) IS NULL OR id < CAST($4 AS TEXT)) \
             GROUP BY state ORDER BY state",
        )
        .bind(tenant)
        .bind(process.map(str::to_string))
        .bind(from.map(str::to_string))
        .bind(before.map(str::to_string))
        .fetch_all(self.reads())
        .await?)
    }

    async fn node_states(&self, deployment: &str) -> StoreResult<Vec<(String, String, i64)>> {
        // The maintained counts (migration 0024, stats.rs), not the snapshots.
        Ok(sqlx::query_as(super::stats::NODE_COUNTS)
            .bind(deployment)
            .fetch_all(self.reads())
            .await?)
    }

    async fn node_states_scanned(
        &self,
        deployment: &str,
    ) -> StoreResult<Vec<(String, String, i64)>> {
        Ok(sqlx::query_as(B::NODE_STATES)
            .bind(deployment)
            .fetch_all(self.reads())
            .await?)
    }

    async fn open_incidents_by_node(&self, deployment: &str) -> StoreResult<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT n.node, COUNT(*) FROM incidents n JOIN instances i ON i.id = n.instance_id \
             WHERE i.deployment_id = $1 AND n.state = 'OPEN' GROUP BY n.node ORDER BY n.node",
        )
        .bind(deployment)
        .fetch_all(self.reads())
        .await?)
    }

    async fn retries_of(&self, id: &str) -> StoreResult<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT id FROM instances WHERE retry_of = $1 ORDER BY id")
                .bind(id)
                .fetch_all(self.reads())
                .await?,
        )
    }

    async fn retried_failed_count(
        &self,
        tenant: &str,
        process: Option<&str>,
        from: Option<&str>,
        before: Option<&str>,
    ) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(
            // From the retries (few, partial index instances_retry_of) to
            // what they retried by its key, never a walk of the FAILED:
            // `CROSS JOIN` keeps that order on SQLite (its planner otherwise
            // walks the tenant's instances first); PostgreSQL reads it as
            // an inner join and plans it itself.
            "SELECT COUNT(DISTINCT f.id) FROM instances r CROSS JOIN instances f \
             WHERE r.retry_of IS NOT NULL AND f.id = r.retry_of \
             AND f.tenant = $1 AND f.state = 'FAILED' \
             AND (CAST($2 AS TEXT) IS NULL OR f.process_id = CAST($2 AS TEXT)) \
             AND (CAST($3 AS TEXT) IS NULL OR f.id >= CAST($3 AS TEXT)) \
             AND (CAST($4 AS TEXT) IS NULL OR f.id < CAST($4 AS TEXT))",
        )
        .bind(tenant)
        .bind(process.map(str::to_string))
        .bind(from.map(str::to_string))
        .bind(before.map(str::to_string))
        .fetch_one(self.reads())
        .await?)
    }

    async fn instance_by_key(
        &self,
        tenant: &str,
        key: &str,
        now: i64,
    ) -> StoreResult<Option<KeyHolder>> {
        let row: Option<super::queries_steps::KeyRow> =
            sqlx::query_as(super::queries_steps::INSTANCE_BY_KEY)
                .bind(tenant)
                .bind(key)
                .bind(now)
                .fetch_optional(self.reads())
                .await?;
        Ok(row.map(super::queries_steps::key_holder))
    }

    async fn purge_kept_keys(&self, now: i64) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(super::queries_steps::PURGE_KEYS)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }

    async fn arm_schedule(&self, s: &ScheduleRecord) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(&format!(
            "INSERT INTO schedules ({SCHEDULE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 0, 0) \
             ON CONFLICT (deployment_id, start_node) DO NOTHING"
        ))
        .bind(&s.deployment_id)
        .bind(&s.start_node)
        .bind(&s.tenant)
        .bind(s.armed_at)
        .bind(s.last_slot)
        .bind(s.next_due)
        .bind(&s.state)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn resolve_inactive_schedules(&self) -> StoreResult<u64> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE schedules SET state = 'RESOLVED', next_due = NULL WHERE state = 'ARMED' \
             AND deployment_id IN (SELECT id FROM deployments WHERE state <> 'ACTIVE')",
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }

    async fn due_schedules(&self, now: i64, limit: i64) -> StoreResult<Vec<ScheduleRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE state = 'ARMED' AND next_due IS NOT NULL \
             AND next_due <= $1 ORDER BY next_due, deployment_id, start_node LIMIT $2"
        ))
        .bind(now)
        .bind(limit)
        .fetch_all(self.reads())
        .await?)
    }

    async fn next_schedule_due(&self) -> StoreResult<Option<i64>> {
        Ok(
            sqlx::query_scalar("SELECT MIN(next_due) FROM schedules WHERE state = 'ARMED'")
                .fetch_one(self.reads())
                .await?,
        )
    }

    async fn schedules_of(&self, deployment_id: &str) -> StoreResult<Vec<ScheduleRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE deployment_id = $1 ORDER BY start_node"
        ))
        .bind(deployment_id)
        .fetch_all(self.reads())
        .await?)
    }

    async fn schedule_events(&self, deployment_id: &str) -> StoreResult<Vec<ScheduleEvent>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {EVENT_COLUMNS} FROM schedule_events WHERE deployment_id = $1 ORDER BY id"
        ))
        .bind(deployment_id)
        .fetch_all(self.reads())
        .await?)
    }

    async fn record_fire(
        &self,
        deployment_id: &str,
        start_node: &str,
        next_due: Option<i64>,
        event: &ScheduleEvent,
    ) -> StoreResult<bool> {
        let (fires, refused) = fire_counts(event);
        let mut tx = self.begin_write().await?;
        let tenant: Option<String> = sqlx::query_scalar(
            "UPDATE schedules SET last_slot = $1, next_due = $2, \
             state = CASE WHEN $2 IS NULL THEN 'EXHAUSTED' ELSE 'ARMED' END, \
             fires = fires + $3, refused = refused + $4, skipped = skipped + $5 \
             WHERE deployment_id = $6 AND start_node = $7 AND state = $8 RETURNING tenant",
        )
        .bind(event.slot)
        .bind(next_due)
        .bind(fires)
        .bind(refused)
        .bind(event.skipped)
        .bind(deployment_id)
        .bind(start_node)
        .bind(SCHEDULE_ARMED)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(tenant) = tenant else {
            return Ok(false);
        };
        sqlx::query(&format!(
            "INSERT INTO schedule_events (deployment_id, start_node, tenant, {EVENT_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(deployment_id)
        .bind(start_node)
        .bind(&tenant)
        .bind(event.at)
        .bind(event.slot)
        .bind(event.skipped)
        .bind(&event.outcome)
        .bind(&event.instance_id)
        .bind(&event.code)
        .bind(&event.message)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn metric_counts(&self) -> StoreResult<MetricCounts> {
        let instances: Vec<(String, i64)> =
            sqlx::query_as("SELECT state, COUNT(*) FROM instances GROUP BY state ORDER BY state")
                .fetch_all(self.reads())
                .await?;
        let attempts: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT outcome, COALESCE(code, ''), COUNT(*) FROM attempts \
             GROUP BY outcome, COALESCE(code, '') ORDER BY 1, 2",
        )
        .fetch_all(self.reads())
        .await?;
        let earliest_due: Option<i64> =
            sqlx::query_scalar("SELECT MIN(due_at) FROM parks WHERE due_at IS NOT NULL")
                .fetch_one(self.reads())
                .await?;
        let schedules_armed: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM schedules WHERE state = 'ARMED'")
                .fetch_one(self.reads())
                .await?;
        let schedule_refusals: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM schedule_events WHERE outcome <> 'fired'")
                .fetch_one(self.reads())
                .await?;
        Ok(MetricCounts {
            instances,
            attempts,
            earliest_due,
            schedules_armed,
            schedule_refusals,
        })
    }
}
