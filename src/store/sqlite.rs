//! SQLite store: the embedded backend, one process owning one file.
//!
//! Invariants:
//! - every write runs in a `BEGIN IMMEDIATE` transaction. Instance writes
//!   (`create_instance`, `commit_step`, `commit_steps`) and park claims
//!   (`claim_due`, `release_claim`) of a file database go to the writer
//!   thread (`sqlite_writer.rs`: one rusqlite connection, batches of
//!   requests, one transaction and one fsync per batch); every other write
//!   (deployments, modules, tenancy, leases, sweep, schedules) uses the sqlx
//!   write pool of exactly one connection. The two writers of the process
//!   meet only on SQLite's file lock and wait for each other up to the busy
//!   timeout (as another process would); reads use a separate pool and see
//!   the last committed state (WAL);
//! - the journal is WAL with `synchronous=FULL` by default: a committed step
//!   survives kill -9 and power loss. `Synchronous::Normal` keeps the database
//!   consistent but may lose the last commits on power loss (not on kill -9);
//! - `sqlite::memory:` uses one connection for reads and writes, kept open for
//!   the life of the store (the database lives in that connection, which a
//!   writer thread could not see): its instance writes and claims take the
//!   sqlx group commit (`sqlite_group.rs`) on that connection instead (as
//!   a file database does with `SqliteOptions::writer_thread` off);
//! - migrations (`migrations/sqlite`) run on open; reopening is a no-op.
//!
//! Claims use the same columns and rules as PostgreSQL (`claimed_by`,
//! `claimed_until`; a claim is live while `now < claimed_until`), so both
//! backends answer alike even though one process owns the file.
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
    duplicate_or_db, effective_limit, encode_modules, park_claim_columns, sort_claimed,
    AttemptDbRow, DeploymentRow, InstanceRow, JournalDbRow, ParkRow, ATTEMPT_COLUMNS,
    DEPLOYMENT_COLUMNS, INSTANCE_COLUMNS, JOURNAL_COLUMNS, PARK_COLUMNS,
};
use super::sqlite_group::GroupCommit;
use super::sqlite_sql as sql;
use super::sqlite_writer::{Done, Op, Writer};
use super::{
    AttemptRow, Created, DeploymentLoad, DeploymentRecord, DeploymentState, InstanceFilter,
    InstanceRecord, JournalRow, NewDeployment, NewInstance, ParkRecord, StepWrite, Store,
    StoreError, StoreResult,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{QueryBuilder, Sqlite, Transaction};
use std::str::FromStr;
use std::time::Duration;

/// How hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// fsync the WAL on every commit: a committed step survives power loss.
    #[default]
    Full,
    /// fsync only at checkpoints: survives a process crash, may lose the
    /// last commits on power loss. Faster on slow disks.
    Normal,
}

/// Options of [`SqliteStore::open_with`].
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    pub synchronous: Synchronous,
    /// How long a statement waits for a lock held by another process.
    pub busy_timeout: Duration,
    /// Size of the read pool (ignored for `sqlite::memory:`).
    pub read_connections: u32,
    /// How long a caller waits for a pooled connection.
    pub acquire_timeout: Duration,
    /// Run the instance writes and claims of a file database on the writer
    /// thread (`sqlite_writer.rs`; the default). `false` sends them to the
    /// sqlx group commit on the write pool instead (what an in-memory
    /// database always does): slower, kept for comparison and as a fallback.
    pub writer_thread: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            read_connections: 4,
            acquire_timeout: Duration::from_secs(30),
            writer_thread: true,
        }
    }
}

/// The SQLite implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// Exactly one connection: the writer of everything [`Self::writes`] does not take.
    pub(super) write: SqlitePool,
    /// Instance writes and claims, batched into one transaction per batch.
    writes: WritePath,
    /// Readers (the same pool as `write` for an in-memory database).
    pub(super) read: SqlitePool,
}

/// Where instance writes and claims go.
#[derive(Debug, Clone)]
enum WritePath {
    /// A file database: the writer thread (`sqlite_writer.rs`).
    Thread(Writer),
    /// An in-memory database (or `writer_thread: false`): the sqlx group
    /// commit on `write`'s one connection.
    Group(GroupCommit),
}

/// Parses `sqlite://path`, `sqlite:path`, `sqlite::memory:`, `:memory:` or a
/// plain file path (taken literally, never URL-decoded).
fn connect_options(url: &str) -> StoreResult<SqliteConnectOptions> {
    if url.starts_with("sqlite:") || url == ":memory:" {
        let url = if url == ":memory:" {
            "sqlite::memory:"
        } else {
            url
        };
        SqliteConnectOptions::from_str(url).map_err(StoreError::Db)
    } else if url.is_empty() {
        Err(StoreError::Other("empty SQLite path".to_string()))
    } else {
        Ok(SqliteConnectOptions::new().filename(url))
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` with default options.
    pub async fn open(url: &str) -> StoreResult<Self> {
        Self::open_with(url, SqliteOptions::default()).await
    }

    /// Opens (creating if missing) the database at `url` and runs migrations.
    pub async fn open_with(url: &str, opts: SqliteOptions) -> StoreResult<Self> {
        let base = connect_options(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match opts.synchronous {
                Synchronous::Full => SqliteSynchronous::Full,
                Synchronous::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(opts.busy_timeout)
            .foreign_keys(true);
        let in_memory = base
            .get_filename()
            .to_string_lossy()
            .starts_with("file:sqlx-in-memory-")
            || url.contains("mode=memory");
        // No ping before each acquire: the connection is a local file handle
        // (the ping cost ~0.08 ms per read in the engine bench).
        let write_opts = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(opts.acquire_timeout);
        let write_opts = if in_memory {
            write_opts.idle_timeout(None).max_lifetime(None)
        } else {
            write_opts
        };
        let write = write_opts.connect_with(base.clone()).await?;
        sqlx::migrate!("migrations/sqlite").run(&write).await?;
        let read = if in_memory {
            write.clone()
        } else {
            SqlitePoolOptions::new()
                .test_before_acquire(false)
                .max_connections(opts.read_connections.max(1))
                .acquire_timeout(opts.acquire_timeout)
                .connect_with(base)
                .await?
        };
        let writes = if in_memory || !opts.writer_thread {
            WritePath::Group(GroupCommit::start(write.clone()))
        } else {
            // After the migrations: the thread's statements see the final schema.
            let path = write.connect_options().get_filename().to_path_buf();
            let writer = tokio::task::spawn_blocking(move || {
                Writer::start(&path, opts.synchronous, opts.busy_timeout)
            })
            .await
            .map_err(|e| StoreError::Other(format!("cannot start the SQLite writer: {e}")))?;
            match writer {
                Ok(w) => WritePath::Thread(w),
                Err(e) => {
                    read.close().await;
                    write.close().await;
                    return Err(e);
                }
            }
        };
        Ok(SqliteStore {
            write,
            writes,
            read,
        })
    }

    /// Stops the writer thread (after the requests queued so far) and closes
    /// both pools (waits for connections in use to be returned).
    pub async fn close(&self) {
        if let WritePath::Thread(writer) = &self.writes {
            writer.close().await;
        }
        self.read.close().await;
        self.write.close().await;
    }

    /// Runs an instance write or a claim on the write path of this database.
    async fn submit(&self, op: Op) -> StoreResult<Done> {
        match &self.writes {
            WritePath::Thread(writer) => writer.submit(op).await,
            WritePath::Group(group) => group.submit(op).await,
        }
    }

    /// A write transaction: the single writer, taken with `BEGIN IMMEDIATE`.
    pub(super) async fn begin_write(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        Ok(self.write.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// Inserts an instance and applies its first step (inside the caller's transaction).
/// A reused idempotency key writes nothing and answers `Existing`.
pub(super) async fn create_one(
    tx: &mut SqliteConnection,
    inst: &NewInstance,
    step: &StepWrite,
) -> StoreResult<Created> {
    if let Some(key) = &inst.idempotency_key {
        let existing: Option<String> = sqlx::query_scalar(sql::INSTANCE_BY_KEY)
            .bind(&inst.tenant)
            .bind(key)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(id) = existing {
            return Ok(Created::Existing(id));
        }
    }
    sqlx::query(sql::INSERT_INSTANCE)
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
        .execute(&mut *tx)
        .await
        .map_err(|e| duplicate_or_db(e, || format!("instance {} already exists", inst.id)))?;
    apply_step(tx, &inst.id, &inst.tenant, &inst.deployment_id, step).await?;
    Ok(Created::New)
}

/// Updates the instance row if it is at `expected_version`, then applies the
/// rest of the step. `Conflict` if the version moved, `NotFound` if the row is gone.
pub(super) async fn commit_one(
    conn: &mut SqliteConnection,
    id: &str,
    expected_version: i64,
    step: &StepWrite,
) -> StoreResult<()> {
    let row: Option<(String, String)> = sqlx::query_as(sql::UPDATE_INSTANCE)
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
            let exists: Option<i64> = sqlx::query_scalar(sql::INSTANCE_EXISTS)
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
    conn: &mut SqliteConnection,
    id: &str,
    tenant: &str,
    deployment_id: &str,
    step: &StepWrite,
) -> StoreResult<()> {
    if step.delete {
        for statement in sql::DELETE_INSTANCE_ALL {
            sqlx::query(statement).bind(id).execute(&mut *conn).await?;
        }
        return Ok(());
    }
    if step.withdraw_all {
        sqlx::query(sql::DELETE_PARKS_OF)
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    for seq in &step.withdraw {
        sqlx::query(sql::DELETE_PARK)
            .bind(id)
            .bind(seq)
            .execute(&mut *conn)
            .await?;
    }
    for p in &step.arm {
        let (claimed_by, claimed_until) = park_claim_columns(p);
        sqlx::query(sql::INSERT_PARK)
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
        sqlx::query(sql::INSERT_ATTEMPT)
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
        sqlx::query(sql::INSERT_JOURNAL)
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

/// Claims up to `limit` parks due at `now` (inside the caller's transaction).
pub(super) async fn claim_one(
    conn: &mut SqliteConnection,
    now: i64,
    limit: i64,
    owner: &str,
    lease_ms: i64,
) -> StoreResult<Vec<ParkRecord>> {
    if limit <= 0 {
        return Ok(Vec::new());
    }
    let rows: Vec<ParkRow> = sqlx::query_as(sql::CLAIM_DUE)
        .bind(owner)
        .bind(now.saturating_add(lease_ms.max(0)))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?;
    Ok(sort_claimed(rows))
}

/// Releases `owner`'s claim on one park (inside the caller's transaction).
pub(super) async fn release_one(
    conn: &mut SqliteConnection,
    instance_id: &str,
    seq: i64,
    owner: &str,
) -> StoreResult<()> {
    sqlx::query(sql::RELEASE_CLAIM)
        .bind(instance_id)
        .bind(seq)
        .bind(owner)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn put_module(&self, tenant: &str, digest: &str, bytes: &[u8]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO modules (tenant, digest, bytes) VALUES (?1, ?2, ?3) ON CONFLICT (tenant, digest) DO NOTHING")
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
            sqlx::query_scalar("SELECT bytes FROM modules WHERE tenant = ?1 AND digest = ?2")
                .bind(tenant)
                .bind(digest)
                .fetch_optional(&self.read)
                .await?,
        )
    }

    async fn insert_deployment(&self, d: &NewDeployment) -> StoreResult<DeploymentRecord> {
        let modules = encode_modules(&d.modules)?;
        let mut tx = self.begin_write().await?;
        let previous: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM deployments WHERE tenant = ?1 AND process_id = ?2")
                .bind(&d.tenant)
                .bind(&d.process_id)
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query("UPDATE deployments SET state = 'DRAINING' WHERE tenant = ?1 AND process_id = ?2 AND state = 'ACTIVE'")
            .bind(&d.tenant)
            .bind(&d.process_id)
            .execute(&mut *tx)
            .await?;
        let row: DeploymentRow = sqlx::query_as(&format!(
            "INSERT INTO deployments ({DEPLOYMENT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'ACTIVE', ?8) \
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
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE id = ?1"
        ))
        .bind(id)
        .fetch_optional(&self.read)
        .await?;
        row.map(DeploymentRow::into_record).transpose()
    }

    async fn list_deployments(&self, tenant: Option<&str>) -> StoreResult<Vec<DeploymentRecord>> {
        let rows: Vec<DeploymentRow> = sqlx::query_as(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE (?1 IS NULL OR tenant = ?1) \
             ORDER BY tenant, process_id, version"
        ))
        .bind(tenant)
        .fetch_all(&self.read)
        .await?;
        rows.into_iter().map(DeploymentRow::into_record).collect()
    }

    async fn active_deployment(
        &self,
        tenant: &str,
        process_id: &str,
    ) -> StoreResult<Option<DeploymentRecord>> {
        let row: Option<DeploymentRow> = sqlx::query_as(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM deployments WHERE tenant = ?1 AND process_id = ?2 AND state = 'ACTIVE'"
        ))
        .bind(tenant)
        .bind(process_id)
        .fetch_optional(&self.read)
        .await?;
        row.map(DeploymentRow::into_record).transpose()
    }

    async fn set_deployment_state(&self, id: &str, state: DeploymentState) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("UPDATE deployments SET state = ?1 WHERE id = ?2")
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
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state, COUNT(*) FROM instances WHERE deployment_id = ?1 \
             AND state IN ('RUNNING', 'WAITING', 'FAILED') GROUP BY state",
        )
        .bind(id)
        .fetch_all(&self.read)
        .await?;
        Ok(super::rows::load_from_counts(&rows))
    }

    async fn create_instance(&self, inst: &NewInstance, step: &StepWrite) -> StoreResult<Created> {
        self.submit(Op::Create(inst.clone(), step.clone()))
            .await?
            .created()
    }

    async fn load_instance(&self, id: &str) -> StoreResult<Option<InstanceRecord>> {
        let row: Option<InstanceRow> = sqlx::query_as(&format!(
            "SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = ?1"
        ))
        .bind(id)
        .fetch_optional(&self.read)
        .await?;
        Ok(row)
    }

    async fn commit_step(
        &self,
        id: &str,
        expected_version: i64,
        step: &StepWrite,
    ) -> StoreResult<()> {
        self.submit(Op::Commit {
            id: id.to_string(),
            version: expected_version,
            step: step.clone(),
        })
        .await
        .map(|_| ())
    }

    async fn commit_steps(&self, steps: &[(String, i64, StepWrite)]) -> StoreResult<()> {
        if steps.is_empty() {
            return Ok(());
        }
        self.submit(Op::CommitAll(steps.to_vec())).await.map(|_| ())
    }

    async fn list_instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        let mut q = QueryBuilder::<Sqlite>::new(format!(
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
        let rows: Vec<InstanceRow> = q.build_query_as().fetch_all(&self.read).await?;
        Ok(rows.into_iter().collect())
    }

    async fn live_instances(&self) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM instances WHERE state IN ('RUNNING', 'WAITING') ORDER BY id",
        )
        .fetch_all(&self.read)
        .await?)
    }

    async fn next_due(&self) -> StoreResult<Option<i64>> {
        Ok(sqlx::query_scalar(super::rows::NEXT_DUE_SQL)
            .fetch_one(&self.read)
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
        self.submit(Op::Claim {
            now,
            limit,
            owner: owner.to_string(),
            lease_ms,
        })
        .await?
        .claimed()
    }

    async fn release_claim(&self, instance_id: &str, seq: i64, owner: &str) -> StoreResult<()> {
        self.submit(Op::Release {
            instance_id: instance_id.to_string(),
            seq,
            owner: owner.to_string(),
        })
        .await
        .map(|_| ())
    }

    async fn find_message_parks(
        &self,
        tenant: &str,
        name: &str,
        correlation_key: Option<&str>,
    ) -> StoreResult<Vec<ParkRecord>> {
        let rows: Vec<ParkRow> = sqlx::query_as(&format!(
            "SELECT {PARK_COLUMNS} FROM parks WHERE tenant = ?1 AND message_name = ?2 AND correlation_key IS ?3 \
             ORDER BY instance_id, seq"
        ))
        .bind(tenant)
        .bind(name)
        .bind(correlation_key)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn parks_of(&self, instance_id: &str) -> StoreResult<Vec<ParkRecord>> {
        let rows: Vec<ParkRow> = sqlx::query_as(&format!(
            "SELECT {PARK_COLUMNS} FROM parks WHERE instance_id = ?1 ORDER BY seq"
        ))
        .bind(instance_id)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn park_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(
            sqlx::query_as("SELECT kind, COUNT(*) FROM parks GROUP BY kind ORDER BY kind")
                .fetch_all(&self.read)
                .await?,
        )
    }

    async fn attempts(&self, instance_id: &str) -> StoreResult<Vec<AttemptRow>> {
        let rows: Vec<AttemptDbRow> = sqlx::query_as(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE instance_id = ?1 ORDER BY id"
        ))
        .bind(instance_id)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn journal(&self, instance_id: &str) -> StoreResult<Vec<JournalRow>> {
        let rows: Vec<JournalDbRow> = sqlx::query_as(&format!(
            "SELECT {JOURNAL_COLUMNS} FROM journal WHERE instance_id = ?1 ORDER BY seq"
        ))
        .bind(instance_id)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.into_iter().collect())
    }

    async fn sweep(&self, ended_before: i64, limit: i64) -> StoreResult<u64> {
        if limit <= 0 {
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        // attempts and journal go with the instance (ON DELETE CASCADE).
        let done = sqlx::query(
            "DELETE FROM instances WHERE id IN ( \
               SELECT i.id FROM instances i \
               WHERE i.state IN ('COMPLETED', 'TERMINATED', 'COMPENSATED') AND i.ended_at IS NOT NULL AND i.ended_at <= ?1 \
                 AND NOT EXISTS (SELECT 1 FROM parks p WHERE p.instance_id = i.id) \
               ORDER BY i.ended_at, i.id LIMIT ?2)",
        )
        .bind(ended_before)
        .bind(limit)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
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
            "INSERT INTO leases (name, holder, expires_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE leases.holder = excluded.holder OR leases.expires_at <= ?4 \
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
        sqlx::query("DELETE FROM leases WHERE name = ?1 AND holder = ?2")
            .bind(name)
            .bind(holder)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
