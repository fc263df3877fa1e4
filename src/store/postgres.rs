//! PostgreSQL store: the backend for several replicas sharing one database.
//!
//! Invariants:
//! - each due park is handed to exactly one claimer across replicas:
//!   `claim_due` picks rows with `FOR UPDATE SKIP LOCKED` inside the UPDATE
//!   that stamps `claimed_by`/`claimed_until`, and a claim is live while
//!   `now < claimed_until` (a dead replica's claims come back after their lease);
//! - a step is applied only at its expected version: the `WHERE id = $ AND
//!   version = $` update's row count decides [`StoreError::Conflict`]; the row
//!   lock it takes serialises steps of one instance; a group commit locks its
//!   instances in id order so two batches never deadlock on each other;
//! - new versions of one process are numbered under a transaction-scoped
//!   advisory lock, so concurrent deploys never share a version;
//! - leases are an upsert guarded on expiry or holder;
//! - a step arming a park due within a second notifies `sutra_parks` in its
//!   own transaction (delivered on commit), which wakes every replica's poller
//!   (`watch_parks`, pg_listen.rs);
//! - migrations (`migrations/postgres`) run on open, in the schema of the
//!   connection's `search_path` ([`PgStore::open_in_schema`] isolates tests).
//!   Requires PostgreSQL 11 or later (`hashtextextended`).
//!
//! Shared rules (identical on both backends): `next_due` is the earliest
//! instant at which `claim_due` could hand out a park — an unclaimed timed
//! park's `due_at`, a claimed one's `claimed_until` (when its claim lapses);
//! message waits never count. A claim with `lease_ms <= 0` lapses at once.
//! A park armed with a pre-claim ([`super::NewPark::claim`]) is stored
//! claimed by its owner until `max(until, due_at)` and is then like any
//! claimed park (a message wait ignores its pre-claim).
//! Attempt and journal rows are `INSERT .. ON CONFLICT DO NOTHING`: a
//! replayed step never records one twice. Sweep deletes attempts and
//! journal with the instance (`ON DELETE CASCADE`).

use super::rows::{
    duplicate_or_db, effective_limit, encode_modules, load_from_counts, park_claim_columns,
    sort_claimed, AttemptDbRow, DeploymentRow, InstanceRow, JournalDbRow, ParkRow, ATTEMPT_COLUMNS,
    DEPLOYMENT_COLUMNS, INSTANCE_COLUMNS, JOURNAL_COLUMNS, NEXT_DUE_SQL, PARK_COLUMNS,
};
use super::{
    AttemptRow, Created, DeploymentLoad, DeploymentRecord, DeploymentState, InstanceFilter,
    InstanceRecord, JournalRow, NewDeployment, NewInstance, ParkRecord, StepWrite, Store,
    StoreError, StoreResult,
};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Postgres, QueryBuilder};
use std::str::FromStr;
use std::time::Duration;

// LISTEN/NOTIFY wake-ups across replicas (`src/store/pg_listen.rs`).
#[path = "pg_listen.rs"]
mod pg_listen;

/// Options of [`PgStore::open_with`].
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Pool size.
    pub max_connections: u32,
    /// How long a caller waits for a pooled connection.
    pub acquire_timeout: Duration,
    /// Use (and create if missing) this schema instead of the connection's
    /// default `search_path`. Letters, digits and `_` only.
    pub schema: Option<String>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
            schema: None,
        }
    }
}

/// The PostgreSQL implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct PgStore {
    pub(super) pool: PgPool,
}

/// A schema name safe to splice into DDL: an SQL identifier of letters,
/// digits and `_`, not starting with a digit, at most 63 bytes.
fn checked_schema(schema: &str) -> StoreResult<&str> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !schema.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(schema)
    } else {
        Err(StoreError::Other(format!(
            "invalid schema name {schema:?}: use letters, digits and _ (not first), at most 63"
        )))
    }
}

impl PgStore {
    /// Connects to `url` (`postgres://...`) and runs migrations.
    pub async fn open(url: &str) -> StoreResult<Self> {
        Self::open_with(url, PgOptions::default()).await
    }

    /// Connects to `url`, creates `schema` if missing, pins every pooled
    /// connection's `search_path` to it, and runs migrations there.
    pub async fn open_in_schema(url: &str, schema: &str) -> StoreResult<Self> {
        Self::open_with(
            url,
            PgOptions {
                schema: Some(schema.to_string()),
                ..PgOptions::default()
            },
        )
        .await
    }

    pub async fn open_with(url: &str, opts: PgOptions) -> StoreResult<Self> {
        let mut connect = PgConnectOptions::from_str(url)?;
        if let Some(schema) = &opts.schema {
            let schema = checked_schema(schema)?;
            let mut conn = connect.connect().await?;
            // Two replicas creating it at once: the loser's unique violation is harmless.
            match sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                .execute(&mut conn)
                .await
            {
                Ok(_) => {}
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
                Err(e) => return Err(e.into()),
            }
            conn.close().await?;
            connect = connect.options([("search_path", schema)]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .acquire_timeout(opts.acquire_timeout)
            .connect_with(connect)
            .await?;
        sqlx::migrate!("migrations/postgres").run(&pool).await?;
        Ok(PgStore { pool })
    }

    /// Closes the pool (waits for connections in use to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Updates the instance row if it is at `expected_version`, then applies the
/// rest of the step. `Conflict` if the version moved, `NotFound` if the row is gone.
async fn commit_one(
    conn: &mut PgConnection,
    id: &str,
    expected_version: i64,
    step: &StepWrite,
) -> StoreResult<()> {
    let row: Option<(String, String)> = sqlx::query_as(
        "UPDATE instances SET snapshot = $1, state = $2, version = version + 1, updated_at = $3, \
         ended_at = COALESCE($4, ended_at) WHERE id = $5 AND version = $6 RETURNING tenant, deployment_id",
    )
    .bind(&step.snapshot)
    .bind(&step.state)
    .bind(step.updated_at)
    .bind(step.ended_at)
    .bind(id)
    .bind(expected_version)
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        Some((tenant, deployment_id)) => apply_step(conn, id, &tenant, &deployment_id, step).await,
        None => {
            let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM instances WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *conn)
                .await?;
            Err(match exists {
                Some(_) => StoreError::Conflict(id.to_string()),
                None => StoreError::NotFound(format!("instance {id}")),
            })
        }
    }
}

/// Everything of a step but the instance row itself: parks, attempts,
/// journal, or the deletion of the whole instance.
async fn apply_step(
    conn: &mut PgConnection,
    id: &str,
    tenant: &str,
    deployment_id: &str,
    step: &StepWrite,
) -> StoreResult<()> {
    if step.delete {
        for table in ["parks", "attempts", "journal"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE instance_id = $1"))
                .bind(id)
                .execute(&mut *conn)
                .await?;
        }
        sqlx::query("DELETE FROM instances WHERE id = $1")
            .bind(id)
            .execute(&mut *conn)
            .await?;
        return Ok(());
    }
    if step.withdraw_all {
        sqlx::query("DELETE FROM parks WHERE instance_id = $1")
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    if !step.withdraw.is_empty() {
        sqlx::query("DELETE FROM parks WHERE instance_id = $1 AND seq = ANY($2)")
            .bind(id)
            .bind(&step.withdraw)
            .execute(&mut *conn)
            .await?;
    }
    for p in &step.arm {
        let (claimed_by, claimed_until) = park_claim_columns(p);
        sqlx::query(
            "INSERT INTO parks (instance_id, seq, kind, tenant, deployment_id, due_at, message_name, correlation_key, \
             claimed_by, claimed_until) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(id)
        .bind(p.seq)
        .bind(&p.kind)
        .bind(tenant)
        .bind(deployment_id)
        .bind(p.due_at)
        .bind(&p.message_name)
        .bind(&p.correlation_key)
        .bind(claimed_by)
        .bind(claimed_until)
        .execute(&mut *conn)
        .await
        .map_err(|e| duplicate_or_db(e, || format!("park {id}/{} is already armed", p.seq)))?;
    }
    for a in &step.attempts {
        sqlx::query(
            "INSERT INTO attempts (instance_id, token, node, attempt, started_at, ended_at, outcome, code, message) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (instance_id, token, node, attempt) DO NOTHING",
        )
        .bind(id)
        .bind(a.token)
        .bind(&a.node)
        .bind(a.attempt)
        .bind(a.started_at)
        .bind(a.ended_at)
        .bind(&a.outcome)
        .bind(&a.code)
        .bind(&a.message)
        .execute(&mut *conn)
        .await?;
    }
    for j in &step.journal {
        sqlx::query(
            "INSERT INTO journal (instance_id, seq, at, kind, node, data) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (instance_id, seq) DO NOTHING",
        )
        .bind(id)
        .bind(j.seq)
        .bind(j.at)
        .bind(&j.kind)
        .bind(&j.node)
        .bind(&j.data)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn put_module(&self, tenant: &str, digest: &str, bytes: &[u8]) -> StoreResult<()> {
        sqlx::query("INSERT INTO modules (tenant, digest, bytes) VALUES ($1, $2, $3) ON CONFLICT (tenant, digest) DO NOTHING")
            .bind(tenant)
            .bind(digest)
            .bind(bytes)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn get_module(&self, tenant: &str, digest: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(
            sqlx::query_scalar("SELECT bytes FROM modules WHERE tenant = $1 AND digest = $2")
                .bind(tenant)
                .bind(digest)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn insert_deployment(&self, d: &NewDeployment) -> StoreResult<DeploymentRecord> {
        let modules = encode_modules(&d.modules)?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!(
                "sutra.deployments\u{1f}{}\u{1f}{}",
                d.tenant, d.process_id
            ))
            .execute(&mut *tx)
            .await?;
        let previous: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM deployments WHERE tenant = $1 AND process_id = $2")
                .bind(&d.tenant)
                .bind(&d.process_id)
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query("UPDATE deployments SET state = 'DRAINING' WHERE tenant = $1 AND process_id = $2 AND state = 'ACTIVE'")
            .bind(&d.tenant)
            .bind(&d.process_id)
            .execute(&mut *tx)
            .await?;
        let row: DeploymentRow = sqlx::query_as(&format!(
            "INSERT INTO deployments ({DEPLOYMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, 'ACTIVE', $8) \
             RETURNING {DEPLOYMENT_COLUMNS}"
        ))
        .bind(&d.id)
        .bind(&d.tenant)
        .bind(&d.process_id)
        .bind(previous + 1)
        .bind(&d.dialect)
        .bind(&d.source)
        .bind(&modules)
        .bind(d.created_at)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| duplicate_or_db(e, || format!("deployment {} already exists", d.id)))?;
        tx.commit().await?;
        row.into_record()
    }

    async fn get_deployment(&self, id: &str) -> StoreResult<Option<DeploymentRecord>> {
        let row: Option<DeploymentRow> = sqlx::query_as(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(DeploymentRow::into_record).transpose()
    }

    async fn list_deployments(&self, tenant: Option<&str>) -> StoreResult<Vec<DeploymentRecord>> {
        let rows: Vec<DeploymentRow> = sqlx::query_as(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE ($1::text IS NULL OR tenant = $1) \
             ORDER BY tenant, process_id, version"
        ))
        .bind(tenant)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(DeploymentRow::into_record).collect()
    }

    async fn active_deployment(
        &self,
        tenant: &str,
        process_id: &str,
    ) -> StoreResult<Option<DeploymentRecord>> {
        let row: Option<DeploymentRow> = sqlx::query_as(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE tenant = $1 AND process_id = $2 AND state = 'ACTIVE'"
        ))
        .bind(tenant)
        .bind(process_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(DeploymentRow::into_record).transpose()
    }

    async fn set_deployment_state(&self, id: &str, state: DeploymentState) -> StoreResult<()> {
        let done = sqlx::query("UPDATE deployments SET state = $1 WHERE id = $2")
            .bind(state.as_str())
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(|e| {
                duplicate_or_db(e, || {
                    format!("another deployment of the process of {id} is ACTIVE")
                })
            })?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("deployment {id}")));
        }
        Ok(())
    }

    async fn deployment_load(&self, id: &str) -> StoreResult<DeploymentLoad> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state, COUNT(*) FROM instances WHERE deployment_id = $1 \
             AND state IN ('RUNNING', 'WAITING', 'FAILED') GROUP BY state",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        Ok(load_from_counts(&rows))
    }

    async fn create_instance(&self, inst: &NewInstance, step: &StepWrite) -> StoreResult<Created> {
        let mut tx = self.pool.begin().await?;
        // A concurrent start with the same key waits for the first to commit,
        // then inserts nothing; the SELECT (a new snapshot) then sees the winner.
        let inserted: Option<String> = sqlx::query_scalar(&format!(
            "INSERT INTO instances ({INSTANCE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id"
        ))
        .bind(&inst.id)
        .bind(&inst.tenant)
        .bind(&inst.deployment_id)
        .bind(&inst.process_id)
        .bind(&step.state)
        .bind(&step.snapshot)
        .bind(&inst.idempotency_key)
        .bind(&inst.retry_of)
        .bind(inst.started_at)
        .bind(step.updated_at)
        .bind(step.ended_at)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| duplicate_or_db(e, || format!("instance {} already exists", inst.id)))?;
        if inserted.is_none() {
            let existing: Option<String> = sqlx::query_scalar(
                "SELECT id FROM instances WHERE tenant = $1 AND idempotency_key = $2",
            )
            .bind(&inst.tenant)
            .bind(&inst.idempotency_key)
            .fetch_optional(&mut *tx)
            .await?;
            return match existing {
                Some(id) => Ok(Created::Existing(id)),
                // The holder of the key was deleted between the two statements.
                None => Err(StoreError::Conflict(inst.id.clone())),
            };
        }
        apply_step(&mut tx, &inst.id, &inst.tenant, &inst.deployment_id, step).await?;
        pg_listen::notify_armed(&mut tx, [step]).await?;
        tx.commit().await?;
        Ok(Created::New)
    }

    async fn load_instance(&self, id: &str) -> StoreResult<Option<InstanceRecord>> {
        let row: Option<InstanceRow> = sqlx::query_as(&format!(
            "SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row)
    }

    async fn commit_step(
        &self,
        id: &str,
        expected_version: i64,
        step: &StepWrite,
    ) -> StoreResult<()> {
        let mut tx = self.pool.begin().await?;
        commit_one(&mut tx, id, expected_version, step).await?;
        pg_listen::notify_armed(&mut tx, [step]).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn commit_steps(&self, steps: &[(String, i64, StepWrite)]) -> StoreResult<()> {
        if steps.is_empty() {
            return Ok(());
        }
        // Lock instances in one global order (stable: steps of one instance keep theirs).
        let mut ordered: Vec<&(String, i64, StepWrite)> = steps.iter().collect();
        ordered.sort_by(|a, b| a.0.cmp(&b.0));
        let mut tx = self.pool.begin().await?;
        for (id, expected_version, step) in ordered {
            commit_one(&mut tx, id, *expected_version, step).await?;
        }
        pg_listen::notify_armed(&mut tx, steps.iter().map(|s| &s.2)).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn list_instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        let mut q = QueryBuilder::<Postgres>::new(format!(
            "SELECT {INSTANCE_COLUMNS} FROM instances WHERE 1 = 1"
        ));
        if let Some(t) = &filter.tenant {
            q.push(" AND tenant = ").push_bind(t);
        }
        if let Some(s) = &filter.state {
            q.push(" AND state = ").push_bind(s);
        }
        if let Some(p) = &filter.process_id {
            q.push(" AND process_id = ").push_bind(p);
        }
        if let Some(d) = &filter.deployment_id {
            q.push(" AND deployment_id = ").push_bind(d);
        }
        if let Some(a) = &filter.after_id {
            q.push(" AND id > ").push_bind(a);
        }
        q.push(" ORDER BY id LIMIT ")
            .push_bind(effective_limit(filter.limit));
        let rows: Vec<InstanceRow> = q.build_query_as().fetch_all(&self.pool).await?;
        Ok(rows.into_iter().collect())
    }

    async fn live_instances(&self) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM instances WHERE state IN ('RUNNING', 'WAITING') ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn next_due(&self) -> StoreResult<Option<i64>> {
        Ok(sqlx::query_scalar(NEXT_DUE_SQL)
            .fetch_one(&self.pool)
            .await?)
    }

    async fn claim_due(
        &self,
        now: i64,
        limit: i64,
        owner: &str,
        lease_ms: i64,
    ) -> StoreResult<Vec<ParkRecord>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        // Rows another claimer holds are skipped; a row claimed and committed
        // since our snapshot is re-checked under its lock (claimed_until) and dropped.
        let rows: Vec<ParkRow> = sqlx::query_as(&format!(
            "WITH due AS ( \
               SELECT instance_id, seq FROM parks \
               WHERE due_at IS NOT NULL AND due_at <= $3 AND (claimed_until IS NULL OR claimed_until <= $3) \
               ORDER BY due_at, instance_id, seq LIMIT $4 \
               FOR UPDATE SKIP LOCKED) \
             UPDATE parks AS p SET claimed_by = $1, claimed_until = $2 \
             FROM due WHERE p.instance_id = due.instance_id AND p.seq = due.seq \
             RETURNING {}",
            PARK_COLUMNS.split(", ").map(|c| format!("p.{c}")).collect::<Vec<_>>().join(", ")
        ))
        .bind(owner)
        .bind(now.saturating_add(lease_ms.max(0)))
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(sort_claimed(rows.into_iter().collect()))
    }

    async fn release_claim(&self, instance_id: &str, seq: i64, owner: &str) -> StoreResult<()> {
        sqlx::query(
            "UPDATE parks SET claimed_by = NULL, claimed_until = NULL \
             WHERE instance_id = $1 AND seq = $2 AND claimed_by = $3",
        )
        .bind(instance_id)
        .bind(seq)
        .bind(owner)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn find_message_parks(
        &self,
        tenant: &str,
        name: &str,
        correlation_key: Option<&str>,
    ) -> StoreResult<Vec<ParkRecord>> {
        let key_rule = if correlation_key.is_some() {
            "correlation_key = $3"
        } else {
            "correlation_key IS NULL"
        };
        let sql = format!(
            "SELECT {PARK_COLUMNS} FROM parks WHERE tenant = $1 AND message_name = $2 AND {key_rule} \
             ORDER BY instance_id, seq"
        );
        let mut q = sqlx::query_as::<_, ParkRow>(&sql).bind(tenant).bind(name);
        if let Some(key) = correlation_key {
            q = q.bind(key);
        }
        let rows = q.fetch_all(&self.pool).await?;
        Ok(rows.into_iter().collect())
    }

    async fn parks_of(&self, instance_id: &str) -> StoreResult<Vec<ParkRecord>> {
        let rows: Vec<ParkRow> = sqlx::query_as(&format!(
            "SELECT {PARK_COLUMNS} FROM parks WHERE instance_id = $1 ORDER BY seq"
        ))
        .bind(instance_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn park_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(
            sqlx::query_as("SELECT kind, COUNT(*) FROM parks GROUP BY kind ORDER BY kind")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    async fn attempts(&self, instance_id: &str) -> StoreResult<Vec<AttemptRow>> {
        let rows: Vec<AttemptDbRow> = sqlx::query_as(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE instance_id = $1 ORDER BY id"
        ))
        .bind(instance_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn journal(&self, instance_id: &str) -> StoreResult<Vec<JournalRow>> {
        let rows: Vec<JournalDbRow> = sqlx::query_as(&format!(
            "SELECT {JOURNAL_COLUMNS} FROM journal WHERE instance_id = $1 ORDER BY seq"
        ))
        .bind(instance_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn sweep(&self, ended_before: i64, limit: i64) -> StoreResult<u64> {
        if limit <= 0 {
            return Ok(0);
        }
        // attempts and journal go with the instance (ON DELETE CASCADE).
        let done = sqlx::query(
            "DELETE FROM instances WHERE id IN ( \
               SELECT i.id FROM instances i \
               WHERE i.state IN ('COMPLETED', 'TERMINATED', 'COMPENSATED') AND i.ended_at IS NOT NULL AND i.ended_at <= $1 \
                 AND NOT EXISTS (SELECT 1 FROM parks p WHERE p.instance_id = i.id) \
               ORDER BY i.ended_at, i.id LIMIT $2 \
               FOR UPDATE SKIP LOCKED)",
        )
        .bind(ended_before)
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        let held: Option<String> = sqlx::query_scalar(
            "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at \
             WHERE leases.holder = EXCLUDED.holder OR leases.expires_at <= $4 \
             RETURNING holder",
        )
        .bind(name)
        .bind(holder)
        .bind(now.saturating_add(ttl_ms.max(0)))
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(held.is_some())
    }

    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// LISTEN on `sutra_parks` from a connection of its own (pg_listen.rs).
    async fn watch_parks(&self, notify: std::sync::Arc<tokio::sync::Notify>) -> StoreResult<()> {
        pg_listen::watch(&self.pool, notify).await
    }
}
