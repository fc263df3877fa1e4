//! The queries both backends run, written once: [`Store`] for every
//! [`SqlBackend`] (the tenancy half is in `queries_tenancy.rs`, the step
//! writes in `queries_steps.rs`).
//!
//! A backend (`sqlite.rs`, `postgres.rs`) brings its pools, its write
//! transaction and the few operations that truly differ between SQLite and
//! PostgreSQL (instance writes, claims, wake-ups); every other method is
//! implemented here, once, over sqlx's database-generic API.
//!
//! Invariants:
//! - the SQL here is the same text on both backends: `$N` placeholders
//!   (sqlx binds them on SQLite too), columns both decode alike (TEXT,
//!   64-bit integers, bytes), no syntax only one dialect knows. A statement
//!   that cannot be written so stays in its backend file, with a comment
//!   saying why;
//! - every write runs in [`SqlBackend::begin_write`]'s transaction, every
//!   read on [`SqlBackend::reads`];
//! - each SQL list of instance states exists once, below ([`LIVE`],
//!   [`SWEPT`], and [`HOLDING`], a condition rather than a list).
//!
//! Rules both backends keep: `next_due` is the earliest instant at which
//! `claim_due` could hand out a park — an unclaimed timed park's `due_at`,
//! a claimed one's `claimed_until` (when its claim lapses); message waits
//! never count. A claim with `lease_ms <= 0` lapses at once. A park armed
//! with a pre-claim ([`super::NewPark::claim`]) is stored claimed by its
//! owner until `max(until, due_at)` and is then like any claimed park (a
//! message wait ignores its pre-claim). Attempt and journal rows are
//! `INSERT .. ON CONFLICT DO NOTHING`: a replayed step never records one
//! twice. Sweep deletes attempts and journal with the instance (`ON DELETE
//! CASCADE`).

use super::rows::{
    duplicate_or_db, effective_limit, encode_modules, load_from_counts, paged_select_with,
    AttemptDbRow, DeploymentRow, InstanceRow, JournalDbRow, ParkRow, ATTEMPT_COLUMNS,
    DEPLOYMENT_COLUMNS, INSTANCE_READ_COLUMNS, JOURNAL_COLUMNS, NEXT_DUE_SQL, PARK_COLUMNS,
};
use super::{
    AttemptOutput, AttemptRow, Created, DeploymentLoad, DeploymentRecord, DeploymentState,
    InstanceFilter, InstanceRecord, JournalRow, NewDeployment, NewStart, ParkRecord, StepWrite,
    Store, StoreError, StoreResult,
};
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Transaction, Type,
};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Notify;

/// What a sweep's delete answers of each instance: what it counted for,
/// and the searchable variables' rows it names (search_rows.rs).
const SWEPT_RETURNING: &str = "RETURNING id, deployment_id, state, snapshot, tenant, search_keys";
/// A row of [`SWEPT_RETURNING`].
type SweptRow = (String, String, String, String, String, Option<String>);

/// Live instance states (as [`super::LIVE_STATES`]), as an SQL list.
pub(super) const LIVE: &str = "'RUNNING', 'WAITING'";

/// A listing's rule for one searchable variable (name, value, tenant).
const VAR_IN_TENANT: &str = "id IN (SELECT instance_id FROM instance_vars \
     WHERE name = $? AND value = $? AND tenant = $?)";
/// The same without a tenant (a local listing of every tenant).
const VAR_ANY_TENANT: &str =
    "id IN (SELECT instance_id FROM instance_vars WHERE name = $? AND value = $?)";
/// The states that keep a deployment from retiring: live, or FAILED (an
/// operator may still retry it), as a condition on `state`. Also the
/// predicate of the partial index `instances_deployment_held` (migration
/// 0026), which [`DEPLOYMENT_LOAD`] repeats (SQLite uses a partial index
/// only for a query that has its predicate): change both together. An OR
/// of equalities, as an IN list in an index's predicate costs SQLite a
/// table built on every insert.
pub(super) const HOLDING: &str = "state = 'RUNNING' OR state = 'WAITING' OR state = 'FAILED'";
/// `$1` deployment id → (state, count) of the instances holding it.
pub(super) static DEPLOYMENT_LOAD: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT state, COUNT(*) FROM instances WHERE deployment_id = $1 \
         AND ({HOLDING}) AND NOT ({RELEASED_FAILURE}) GROUP BY state"
    )
});
/// A FAILED instance that does not hold its deployment: closed by an
/// operator, or a child flow (its failure went to its parent). SQL over `instances`.
pub(super) const RELEASED_FAILURE: &str =
    "state = 'FAILED' AND (closed_at IS NOT NULL OR parent_id IS NOT NULL)";
/// The terminal states retention deletes: never FAILED (it waits for an operator).
pub(super) const SWEPT: &str = "'COMPLETED', 'TERMINATED', 'COMPENSATED'";

/// The sqlx connection of a backend.
pub(super) type Conn<B> = <<B as SqlBackend>::Db as Database>::Connection;

/// A column type the shared queries bind and decode on database `DB`.
pub trait Column<DB: Database>: Type<DB> + for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB> {}
impl<DB: Database, T> Column<DB> for T where
    T: Type<DB> + for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB>
{
}

/// How many rows a statement changed (sqlx's two results have the method,
/// no trait for it).
pub trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::sqlite::SqliteQueryResult::rows_affected(self) // the inherent method
    }
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::postgres::PgQueryResult::rows_affected(self) // the inherent method
    }
}

/// A claim as the shared code hands it to a backend: up to `limit` (> 0)
/// parks due at `now`, for `owner` until `until`.
#[derive(Debug, Clone)]
pub struct Claim {
    pub owner: String,
    pub now: i64,
    /// When the claim lapses: `now + lease_ms` (at once for a lease <= 0).
    pub until: i64,
    pub limit: i64,
}

/// What a backend brings to the shared queries.
/// (Its outbox writes, `outbox_write.rs`, go where its instance writes go.)
pub trait SqlBackend: Clone + Send + Sync + super::outbox_write::OutboxPath + 'static {
    type Db: Database<QueryResult: RowsAffected>;
    /// [`Store::backend`]: `sqlite` or `postgres`.
    const NAME: &'static str;
    /// Appended to the sweep's choice of rows. PostgreSQL: `FOR UPDATE SKIP
    /// LOCKED`, so replicas sweeping at once never wait on each other's rows;
    /// SQLite: nothing (one writer at a time).
    const SKIP_LOCKED: &'static str;
    /// [`Self::SKIP_LOCKED`] for a choice that joins other tables: only the
    /// rows of the table aliased `o` are locked (the outbox's claims,
    /// outbox.rs), so claimers never skip each other's channel rows.
    const SKIP_LOCKED_O: &'static str;
    /// Appended to a read of the instance row (aliased `i`) that a new row
    /// will reference: PostgreSQL `FOR KEY SHARE OF i`, so a concurrent
    /// delete of the instance is waited for (the row is then not read)
    /// instead of failing the insert's foreign key; SQLite: nothing (one
    /// writer at a time).
    const KEY_SHARE_I: &'static str;
    /// (node, state, instances) of one deployment's instances (`$1`), read
    /// from each snapshot's `node_states` in the database: the JSON
    /// functions are the one thing the backends spell differently (SQLite
    /// `json_each`, PostgreSQL `jsonb_each_text`).
    const NODE_STATES: &'static str;

    /// The pool reads run on.
    fn reads(&self) -> &Pool<Self::Db>;
    /// The pool a single-statement write runs on outside a transaction
    /// (SQLite: the one write connection; PostgreSQL: the pool).
    fn writer(&self) -> &Pool<Self::Db>;
    /// A write transaction. SQLite: `BEGIN IMMEDIATE` on the single write
    /// connection; PostgreSQL: a pooled transaction.
    fn begin_write(
        &self,
    ) -> impl Future<Output = StoreResult<Transaction<'static, Self::Db>>> + Send;
    /// Inside a deploy's transaction, before the next version is numbered:
    /// makes concurrent deploys of (tenant, process) number one at a time.
    fn lock_versions(
        conn: &mut Conn<Self>,
        tenant: &str,
        process_id: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Deletes searchable-variable rows by key inside a write transaction
    /// (search_rows.rs). PostgreSQL: one statement for all of them, so a
    /// sweep of many instances is one round trip; SQLite: a statement per
    /// row (no round trip to save, no `unnest`).
    fn delete_search_rows(
        conn: &mut Conn<Self>,
        rows: &super::search_rows::Keys,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    // The instance writes and claims: [`Store::create_instance`],
    // [`Store::commit_step`], [`Store::commit_steps`] (never empty),
    // [`Store::claim_due`] (`limit > 0`) and [`Store::release_claim`].
    /// The create, the instance and its first step moved in and handed
    /// back: a backend whose writer is another thread sends them there
    /// instead of a copy.
    fn create_owned(
        &self,
        start: Box<NewStart>,
    ) -> impl Future<Output = (StoreResult<Created>, Box<NewStart>)> + Send;
    /// A step, moved in and handed back (as `create_owned`).
    fn commit_owned(
        &self,
        id: &str,
        expected_version: i64,
        step: Box<StepWrite>,
    ) -> impl Future<Output = (StoreResult<()>, Box<StepWrite>)> + Send;
    fn commit_batch(
        &self,
        steps: &[(String, i64, StepWrite)],
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn claim(&self, claim: Claim) -> impl Future<Output = StoreResult<Vec<ParkRecord>>> + Send;
    fn release(
        &self,
        instance_id: &str,
        seq: i64,
        owner: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// [`Store::watch_parks`].
    fn watch(&self, notify: Arc<Notify>) -> impl Future<Output = StoreResult<()>> + Send;
    /// [`Store::watch_stops`]; nothing to watch by default (SQLite: one
    /// process owns the file).
    fn watch_stops(
        &self,
        sink: Arc<dyn super::StopSink>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        let _ = sink;
        async { Ok(()) }
    }
}

// The sqlx traits that make `B::Db` a database the shared SQL runs on.
// Rust does not carry a trait's where-clauses to its users, so each generic
// impl of the shared queries states them (this one, queries_tenancy.rs,
// queries_steps.rs).
impl<B> Store for B
where
    B: SqlBackend,
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    i64: Column<B::Db>,
    Option<i64>: Column<B::Db>,
    String: Column<B::Db>,
    Option<String>: Column<B::Db>,
    Vec<u8>: Column<B::Db>,
    for<'s> &'s str: Type<B::Db> + Encode<'s, B::Db> + ColumnIndex<<B::Db as Database>::Row>,
    for<'s> Option<&'s str>: Type<B::Db> + Encode<'s, B::Db>,
    for<'s> &'s [u8]: Type<B::Db> + Encode<'s, B::Db>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    fn backend(&self) -> &'static str {
        B::NAME
    }

    async fn put_module(&self, tenant: &str, digest: &str, bytes: &[u8]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO modules (tenant, digest, bytes) VALUES ($1, $2, $3) \
             ON CONFLICT (tenant, digest) DO NOTHING",
        )
        .bind(tenant)
        .bind(digest)
        .bind(bytes)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn get_module(&self, tenant: &str, digest: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(
            sqlx::query_scalar("SELECT bytes FROM modules WHERE tenant = $1 AND digest = $2")
                .bind(tenant)
                .bind(digest)
                .fetch_optional(self.reads())
                .await?,
        )
    }

    async fn insert_deployment(&self, d: &NewDeployment) -> StoreResult<DeploymentRecord> {
        let modules = encode_modules(&d.modules, &d.reusable)?;
        let mut tx = self.begin_write().await?;
        B::lock_versions(&mut *tx, &d.tenant, &d.process_id).await?;
        let previous: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(version), 0) FROM deployments WHERE tenant = $1 AND process_id = $2",
        )
        .bind(&d.tenant)
        .bind(&d.process_id)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE deployments SET state = 'DRAINING' \
             WHERE tenant = $1 AND process_id = $2 AND state = 'ACTIVE'",
        )
        .bind(&d.tenant)
        .bind(&d.process_id)
        .execute(&mut *tx)
        .await?;
        let row: DeploymentRow = sqlx::query_as(&format!(
            "INSERT INTO deployments ({DEPLOYMENT_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'ACTIVE', $8) RETURNING {DEPLOYMENT_COLUMNS}"
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
        .fetch_optional(self.reads())
        .await?;
        row.map(DeploymentRow::into_record).transpose()
    }

    async fn list_deployments(&self, tenant: Option<&str>) -> StoreResult<Vec<DeploymentRecord>> {
        // The CAST gives PostgreSQL the parameter's type when it is NULL.
        let rows: Vec<DeploymentRow> = sqlx::query_as(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments \
             WHERE (CAST($1 AS TEXT) IS NULL OR tenant = $1) ORDER BY tenant, process_id, version"
        ))
        .bind(tenant)
        .fetch_all(self.reads())
        .await?;
        rows.into_iter().map(DeploymentRow::into_record).collect()
    }

    async fn active_deployment(
        &self,
        tenant: &str,
        process_id: &str,
    ) -> StoreResult<Option<DeploymentRecord>> {
        let row: Option<DeploymentRow> = sqlx::query_as(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments \
             WHERE tenant = $1 AND process_id = $2 AND state = 'ACTIVE'"
        ))
        .bind(tenant)
        .bind(process_id)
        .fetch_optional(self.reads())
        .await?;
        row.map(DeploymentRow::into_record).transpose()
    }

    async fn set_deployment_state(&self, id: &str, state: DeploymentState) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("UPDATE deployments SET state = $1 WHERE id = $2")
            .bind(state.as_str())
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                duplicate_or_db(e, || {
                    format!("another deployment of the process of {id} is ACTIVE")
                })
            })?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("deployment {id}")));
        }
        tx.commit().await?;
        Ok(())
    }

    async fn deployment_load(&self, id: &str) -> StoreResult<DeploymentLoad> {
        let rows: Vec<(String, i64)> = sqlx::query_as(&DEPLOYMENT_LOAD)
            .bind(id)
            .fetch_all(self.reads())
            .await?;
        Ok(load_from_counts(&rows))
    }

    async fn create_instance_owned(
        &self,
        start: Box<NewStart>,
    ) -> (StoreResult<Created>, Box<NewStart>) {
        super::failpoint::around_returning(self.create_owned(start)).await
    }

    async fn load_instance(&self, id: &str) -> StoreResult<Option<InstanceRecord>> {
        let row: Option<InstanceRow> = sqlx::query_as(&format!(
            "SELECT {INSTANCE_READ_COLUMNS} FROM instances WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.reads())
        .await?;
        Ok(row)
    }

    async fn load_instances(&self, ids: &[String]) -> StoreResult<Vec<InstanceRecord>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // One parameter per id: the same text on both backends (no arrays in
        // SQLite), the count rounded up to a power of two (the last id
        // repeated) so a connection caches a few statements, not one per count.
        let width = ids.len().next_power_of_two();
        let marks: Vec<String> = (1..=width).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT {INSTANCE_READ_COLUMNS} FROM instances WHERE id IN ({})",
            marks.join(", ")
        );
        let mut q = sqlx::query_as::<_, InstanceRow>(&sql);
        for n in 0..width {
            q = q.bind(&ids[n.min(ids.len() - 1)]);
        }
        Ok(q.fetch_all(self.reads()).await?)
    }

    async fn commit_step_owned(
        &self,
        id: &str,
        expected_version: i64,
        step: Box<StepWrite>,
    ) -> (StoreResult<()>, Box<StepWrite>) {
        super::failpoint::around_returning(self.commit_owned(id, expected_version, step)).await
    }

    async fn commit_steps(&self, steps: &[(String, i64, StepWrite)]) -> StoreResult<()> {
        if steps.is_empty() {
            return Ok(());
        }
        super::failpoint::around(self.commit_batch(steps)).await
    }

    async fn list_instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        let filters = [
            ("tenant =", &filter.tenant),
            ("state =", &filter.state),
            ("process_id =", &filter.process_id),
            ("deployment_id =", &filter.deployment_id),
            ("id >", &filter.after_id),
            ("id <", &filter.before_id),
            ("business_key =", &filter.business_key),
            ("error_code =", &filter.error_code),
            ("failed_node =", &filter.failed_node),
        ];
        // Each variable is a lookup on instance_vars' own key (migration 0028).
        let more: Vec<(&str, Vec<&String>)> = filter
            .vars
            .iter()
            .map(|v| match &filter.tenant {
                Some(t) => (VAR_IN_TENANT, vec![&v.name, &v.value, t]),
                None => (VAR_ANY_TENANT, vec![&v.name, &v.value]),
            })
            .collect();
        let (sql, values) = paged_select_with(
            INSTANCE_READ_COLUMNS,
            "instances",
            &filters,
            &more,
            filter.newest_first,
        );
        let mut q = sqlx::query_as::<_, InstanceRow>(&sql);
        for value in values {
            q = q.bind(value);
        }
        Ok(q.bind(effective_limit(filter.limit))
            .fetch_all(self.reads())
            .await?)
    }

    async fn live_instances(&self) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT id FROM instances WHERE state IN ({LIVE}) ORDER BY id"
        ))
        .fetch_all(self.reads())
        .await?)
    }

    async fn next_due(&self) -> StoreResult<Option<i64>> {
        Ok(sqlx::query_scalar(NEXT_DUE_SQL)
            .fetch_one(self.reads())
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
        self.claim(Claim {
            owner: owner.to_string(),
            now,
            until: now.saturating_add(lease_ms.max(0)),
            limit,
        })
        .await
    }

    async fn release_claim(&self, instance_id: &str, seq: i64, owner: &str) -> StoreResult<()> {
        self.release(instance_id, seq, owner).await
    }

    async fn find_message_parks(
        &self,
        tenant: &str,
        name: &str,
        correlation_key: Option<&str>,
    ) -> StoreResult<Vec<ParkRecord>> {
        // Two texts rather than a NULL-safe comparison: `=` and `IS NULL`
        // both use the index on both backends.
        let key_rule = match correlation_key {
            Some(_) => "correlation_key = $3",
            None => "correlation_key IS NULL",
        };
        let sql = format!(
            "SELECT {PARK_COLUMNS} FROM parks WHERE tenant = $1 AND message_name = $2 \
             AND {key_rule} AND kind = 'message' ORDER BY instance_id, seq"
        );
        let mut q = sqlx::query_as::<_, ParkRow>(&sql).bind(tenant).bind(name);
        if let Some(key) = correlation_key {
            q = q.bind(key);
        }
        Ok(q.fetch_all(self.reads()).await?)
    }

    async fn parks_of(&self, instance_id: &str) -> StoreResult<Vec<ParkRecord>> {
        let rows: Vec<ParkRow> = sqlx::query_as(&format!(
            "SELECT {PARK_COLUMNS} FROM parks WHERE instance_id = $1 ORDER BY seq"
        ))
        .bind(instance_id)
        .fetch_all(self.reads())
        .await?;
        Ok(rows)
    }

    async fn child_outcome(&self, instance_id: &str, seq: i64) -> StoreResult<Option<String>> {
        let payload: Option<Option<String>> = sqlx::query_scalar(super::children::CHILD_OUTCOME)
            .bind(instance_id)
            .bind(seq)
            .fetch_optional(self.reads())
            .await?;
        Ok(payload.flatten())
    }

    async fn orphaned_children(&self, limit: i64) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(&super::children::ORPHANED)
            .bind(limit.max(0))
            .fetch_all(self.reads())
            .await?)
    }

    async fn park_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(
            sqlx::query_as("SELECT kind, COUNT(*) FROM parks GROUP BY kind ORDER BY kind")
                .fetch_all(self.reads())
                .await?,
        )
    }

    async fn attempts(&self, instance_id: &str) -> StoreResult<Vec<AttemptRow>> {
        let rows: Vec<AttemptDbRow> = sqlx::query_as(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE instance_id = $1 ORDER BY id"
        ))
        .bind(instance_id)
        .fetch_all(self.reads())
        .await?;
        Ok(rows)
    }

    async fn attempt_outputs(&self, instance_id: &str) -> StoreResult<Vec<AttemptOutput>> {
        Ok(sqlx::query_as(
            "SELECT token, node, attempt, stderr, logs, calls, input, output FROM attempts \
             WHERE instance_id = $1 AND (stderr IS NOT NULL OR logs IS NOT NULL \
             OR calls IS NOT NULL OR input IS NOT NULL OR output IS NOT NULL) ORDER BY id",
        )
        .bind(instance_id)
        .fetch_all(self.reads())
        .await?)
    }

    async fn journal(&self, instance_id: &str) -> StoreResult<Vec<JournalRow>> {
        let rows: Vec<JournalDbRow> = sqlx::query_as(&format!(
            "SELECT {JOURNAL_COLUMNS} FROM journal WHERE instance_id = $1 ORDER BY seq"
        ))
        .bind(instance_id)
        .fetch_all(self.reads())
        .await?;
        Ok(rows)
    }

    async fn sweep(&self, ended_before: i64, limit: i64) -> StoreResult<u64> {
        if limit <= 0 {
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        // attempts and journal go with the instance (ON DELETE CASCADE),
        // its searchable variables by the keys it names (search_rows.rs);
        // what each deleted instance counted for goes with it (stats.rs).
        let mut gone: Vec<SweptRow> = sqlx::query_as(&format!(
            "DELETE FROM instances WHERE id IN ( \
               SELECT i.id FROM instances i \
               WHERE i.state IN ({SWEPT}) AND i.ended_at IS NOT NULL AND i.ended_at <= $1 \
                 AND NOT EXISTS (SELECT 1 FROM parks p WHERE p.instance_id = i.id) \
               ORDER BY i.ended_at, i.id LIMIT $2 {}) {SWEPT_RETURNING}",
            B::SKIP_LOCKED
        ))
        .bind(ended_before)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let left = limit.saturating_sub(i64::try_from(gone.len()).unwrap_or(i64::MAX));
        if left > 0 {
            // FAILED ones that no longer wait for an operator (issue 28), in
            // their own statement so the common one keeps its plan: closed
            // top-level instances by their closing time; child flows (closed
            // or not: their parent handled the failure) once their parent is gone.
            let released: Vec<SweptRow> = sqlx::query_as(&format!(
                "DELETE FROM instances WHERE id IN ( \
                   SELECT i.id FROM instances i \
                   WHERE i.state = 'FAILED' AND ( \
                       (i.parent_id IS NULL AND i.closed_at IS NOT NULL AND i.closed_at <= $1) \
                    OR (i.parent_id IS NOT NULL AND i.ended_at IS NOT NULL AND i.ended_at <= $1 \
                        AND NOT EXISTS (SELECT 1 FROM instances pa WHERE pa.id = i.parent_id))) \
                     AND NOT EXISTS (SELECT 1 FROM parks p WHERE p.instance_id = i.id) \
                   ORDER BY i.id LIMIT $2 {}) {SWEPT_RETURNING}",
                B::SKIP_LOCKED
            ))
            .bind(ended_before)
            .bind(left)
            .fetch_all(&mut *tx)
            .await?;
            gone.extend(released);
        }
        let (mut deltas, mut searchable) = (Vec::new(), super::search_rows::Keys::default());
        for (id, deployment_id, state, snapshot, tenant, keys) in &gone {
            searchable.add(id, tenant, keys.as_deref())?;
            let was = super::stats::Tally::of_json(state, snapshot);
            deltas.extend(super::stats::moved(id, Some((deployment_id, &was)), None));
        }
        B::delete_search_rows(&mut tx, &searchable).await?;
        let step = StepWrite {
            stats: deltas,
            ..StepWrite::default()
        };
        super::stats::write::<B::Db>(&mut *tx, &super::stats::collect([&step])).await?;
        tx.commit().await?;
        Ok(gone.len() as u64)
    }

    async fn close_instance(
        &self,
        id: &str,
        at: i64,
        reason: &str,
        journal: Option<JournalRow>,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE instances SET closed_at = $1, close_reason = $2 \
             WHERE id = $3 AND state = 'FAILED' AND closed_at IS NULL",
        )
        .bind(at)
        .bind(reason)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        if let Some(j) = journal {
            sqlx::query(
                "INSERT INTO journal (instance_id, seq, at, kind, node, data) \
                 SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, $4, $5 FROM journal WHERE instance_id = $1",
            )
            .bind(id)
            .bind(j.at)
            .bind(&j.kind)
            .bind(&j.node)
            .bind(&j.data)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
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
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(held.is_some())
    }

    async fn release_lease(&self, name: &str, holder: &str) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn watch_parks(&self, notify: Arc<Notify>) -> StoreResult<()> {
        self.watch(notify).await
    }

    async fn watch_stops(&self, sink: Arc<dyn super::StopSink>) -> StoreResult<()> {
        SqlBackend::watch_stops(self, sink).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sql_list_of_live_states_is_the_live_states() {
        let quoted: Vec<String> = super::super::LIVE_STATES
            .iter()
            .map(|s| format!("'{s}'"))
            .collect();
        assert_eq!(super::LIVE, quoted.join(", "));
        // The holding states are the live ones and FAILED.
        let held: Vec<String> = super::super::LIVE_STATES
            .iter()
            .chain(&["FAILED"])
            .map(|s| format!("state = '{s}'"))
            .collect();
        assert_eq!(super::HOLDING, held.join(" OR "));
    }

    /// The retirement gate reads the partial index of the instances holding
    /// a deployment (migration 0026), whose predicate is `HOLDING`: a
    /// predicate that drifted from the query's would leave SQLite walking
    /// another index.
    #[tokio::test]
    async fn the_deployment_load_reads_the_index_of_held_instances_on_sqlite() {
        let migration = include_str!("../../migrations/shared/0026_deployment_held_index.sql");
        assert!(
            migration.contains(&format!("WHERE {};", super::HOLDING)),
            "the index's predicate is HOLDING"
        );
        let store = super::super::SqliteStore::open("sqlite::memory:")
            .await
            .unwrap();
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(&format!("EXPLAIN QUERY PLAN {}", *super::DEPLOYMENT_LOAD))
                .bind("d1")
                .fetch_all(&store.read)
                .await
                .unwrap();
        assert!(
            plan.iter()
                .any(|r| r.3.contains("USING INDEX instances_deployment_held")),
            "{plan:?}"
        );
        // Nor does an instance's insert pay for the predicate: an IN list
        // there is a table SQLite builds on every insert (`OpenEphemeral`).
        let sql = format!("EXPLAIN {}", super::super::queries_steps::INSERT_INSTANCE);
        let mut explain = sqlx::query_as::<_, (i64, String)>(&sql);
        for _ in 0..13 {
            explain = explain.bind("x");
        }
        let program = explain.fetch_all(&store.read).await.unwrap();
        assert!(
            program.iter().all(|(_, op)| op != "OpenEphemeral"),
            "{program:?}"
        );
        store.close().await;
    }
}
