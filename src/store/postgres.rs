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
//! - a step arming a park due within a second notifies `sutra_parks` in its
//!   own transaction (delivered on commit), which wakes every replica's poller
//!   (`watch_parks`, pg_listen.rs);
//! - migrations (`migrations/postgres`, then `migrations/shared`,
//!   `migrations.rs`) run on open, in the schema of the
//!   connection's `search_path` ([`PgStore::open_in_schema`] isolates tests).
//!   Requires PostgreSQL 11 or later (`hashtextextended`).
//!
//! Every query it shares with SQLite is in `queries*.rs`; this file holds
//! what differs (the [`SqlBackend`] impl): the advisory lock, the instance
//! insert that survives concurrent starts, the `SKIP LOCKED` claim, the
//! lock order of a group commit and the notifications.

use super::migrations::{migrator, Dialect};
use super::outbox_write::{self, OutboxDone, OutboxOp, OutboxPath};
use super::queries::{Claim, SqlBackend};
use super::queries_steps::{StepSql, INSERT_INSTANCE};
use super::rows::{duplicate_or_db, sort_claimed, ParkRow, PARK_COLUMNS};
use super::{Created, NewInstance, NewStart, ParkRecord, StepWrite, StoreError, StoreResult};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Postgres, Transaction};
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::sync::Notify;

// LISTEN/NOTIFY wake-ups across replicas (`src/store/pg_listen.rs`).
#[path = "pg_listen.rs"]
mod pg_listen;

// Group commit of a replica's concurrent instance writes (`src/store/pg_group.rs`).
#[path = "pg_group.rs"]
mod pg_group;

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
    /// The committer tasks of `create_instance` and `commit_step` (pg_group.rs).
    group: pg_group::Group,
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
        migrator(Dialect::Postgres).await?.run(&pool).await?;
        let group = pg_group::Group::start(pool.clone());
        Ok(PgStore { pool, group })
    }

    /// Closes the pool (waits for connections in use to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// The step writes on a PostgreSQL connection.
type Steps = StepSql<Postgres>;

/// The instance insert of [`Store::create_instance`](super::Store): a
/// concurrent start with the same key (another replica) waits for the first
/// to commit, then inserts nothing and returns no row. SQLite looks the key
/// up first instead: its single writer cannot lose that race.
static INSERT_INSTANCE_UNLESS_KEY_USED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{INSERT_INSTANCE} ON CONFLICT (tenant, idempotency_key) \
         WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id"
    )
});

/// The claim: rows another claimer holds are skipped; a row claimed and
/// committed since our snapshot is re-checked under its lock
/// (`claimed_until`) and dropped. (SQLite's claim, `sqlite_writer.rs`, needs
/// no row locks: one writer at a time.)
static CLAIM_DUE: LazyLock<String> = LazyLock::new(|| {
    let returning: Vec<String> = PARK_COLUMNS.split(", ").map(|c| format!("p.{c}")).collect();
    format!(
        "WITH due AS ( \
           SELECT instance_id, seq FROM parks \
           WHERE due_at IS NOT NULL AND due_at <= $3 AND (claimed_until IS NULL OR claimed_until <= $3) \
           ORDER BY due_at, instance_id, seq LIMIT $4 \
           FOR UPDATE SKIP LOCKED) \
         UPDATE parks AS p SET claimed_by = $1, claimed_until = $2 \
         FROM due WHERE p.instance_id = due.instance_id AND p.seq = due.seq \
         RETURNING {}",
        returning.join(", ")
    )
});

/// The outbox's frequent writes: in a pooled transaction (a fetch, one
/// statement, on a pooled connection).
impl OutboxPath for PgStore {
    async fn outbox(&self, op: OutboxOp) -> StoreResult<OutboxDone> {
        super::failpoint::refuse_write()?;
        let lock = Self::SKIP_LOCKED_O;
        if matches!(op, OutboxOp::FetchAndLock { .. }) {
            let mut conn = self.pool.acquire().await?;
            return outbox_write::run_sqlx::<Postgres>(&mut conn, &op, lock).await;
        }
        let mut tx = self.pool.begin().await?;
        let done = outbox_write::run_sqlx::<Postgres>(&mut tx, &op, lock).await?;
        tx.commit().await?;
        Ok(done)
    }
}

impl SqlBackend for PgStore {
    type Db = Postgres;
    const NAME: &'static str = "postgres";
    const SKIP_LOCKED: &'static str = "FOR UPDATE SKIP LOCKED";
    const SKIP_LOCKED_O: &'static str = "FOR UPDATE OF o SKIP LOCKED";
    const KEY_SHARE_I: &'static str = "FOR KEY SHARE OF i";
    const NODE_STATES: &'static str = "SELECT j.key, j.value, COUNT(*) FROM instances i, \
         jsonb_each_text(i.snapshot::jsonb -> 'node_states') j WHERE i.deployment_id = $1 \
         GROUP BY j.key, j.value ORDER BY j.key, j.value";

    fn reads(&self) -> &PgPool {
        &self.pool
    }

    fn writer(&self) -> &PgPool {
        &self.pool
    }

    async fn begin_write(&self) -> StoreResult<Transaction<'static, Postgres>> {
        super::failpoint::refuse_write()?;
        Ok(self.pool.begin().await?)
    }

    /// A transaction-scoped advisory lock on (tenant, process): replicas
    /// deploying the same process at once never share a version.
    async fn lock_versions(
        conn: &mut PgConnection,
        tenant: &str,
        process_id: &str,
    ) -> StoreResult<()> {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!("sutra.deployments\u{1f}{tenant}\u{1f}{process_id}"))
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn delete_search_rows(
        conn: &mut PgConnection,
        rows: &super::search_rows::Keys,
    ) -> StoreResult<()> {
        super::search_rows::delete_unnest(conn, rows).await
    }

    /// Queued to the group commit (pg_group.rs): written together with
    /// the other replica's writes queued meanwhile.
    async fn create_owned(&self, start: Box<NewStart>) -> (StoreResult<Created>, Box<NewStart>) {
        // The group commit's request is a copy (its batch borrows it across
        // awaits); the start goes back whole.
        let op = pg_group::Op::Create(start.instance.clone(), start.step.clone());
        (self.group.submit(op).await, start)
    }

    /// Queued to the group commit (pg_group.rs), as `create_owned`: the
    /// request is a copy (its batch borrows it across awaits); the step goes
    /// back whole.
    async fn commit_owned(
        &self,
        id: &str,
        expected_version: i64,
        step: Box<StepWrite>,
    ) -> (StoreResult<()>, Box<StepWrite>) {
        let op = pg_group::Op::Commit {
            id: id.to_string(),
            version: expected_version,
            step: (*step).clone(),
        };
        (self.group.submit(op).await.map(|_| ()), step)
    }

    /// Locks the instances in one global order (id; steps of one instance
    /// keep theirs), so two batches never deadlock on each other.
    async fn commit_batch(&self, steps: &[(String, i64, StepWrite)]) -> StoreResult<()> {
        let mut ordered: Vec<&(String, i64, StepWrite)> = steps.iter().collect();
        ordered.sort_by(|a, b| a.0.cmp(&b.0));
        super::failpoint::refuse_write()?;
        let mut tx = self.pool.begin().await?;
        for (id, expected_version, step) in &ordered {
            Steps::commit_deferring_stats(&mut tx, id, *expected_version, step).await?;
            pg_listen::notify_abandoned(&mut tx, id, step).await?;
        }
        // The console's counts, once for the batch in key order (stats.rs).
        let deltas = super::stats::collect(ordered.iter().map(|s| &s.2));
        super::stats::write::<Postgres>(&mut *tx, &deltas).await?;
        pg_listen::notify_armed(&mut tx, steps.iter().map(|s| &s.2)).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn claim(&self, claim: Claim) -> StoreResult<Vec<ParkRecord>> {
        super::failpoint::refuse_write()?;
        let rows: Vec<ParkRow> = sqlx::query_as(&CLAIM_DUE)
            .bind(&claim.owner)
            .bind(claim.until)
            .bind(claim.now)
            .bind(claim.limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(sort_claimed(rows))
    }

    async fn release(&self, instance_id: &str, seq: i64, owner: &str) -> StoreResult<()> {
        Steps::release(&self.pool, instance_id, seq, owner).await
    }

    /// LISTEN on `sutra_parks` from a connection of its own (pg_listen.rs).
    async fn watch(&self, notify: Arc<Notify>) -> StoreResult<()> {
        pg_listen::watch(&self.pool, notify).await
    }

    /// LISTEN on `sutra_stops` from a connection of its own (pg_listen.rs).
    async fn watch_stops(&self, sink: Arc<dyn super::StopSink>) -> StoreResult<()> {
        pg_listen::watch_stops(&self.pool, sink).await
    }
}

/// A create in its own transaction (a batch of one, or after a batch failed).
async fn create_alone(pool: &PgPool, inst: &NewInstance, step: &StepWrite) -> StoreResult<Created> {
    super::failpoint::refuse_write()?;
    let mut tx = pool.begin().await?;
    let inserted = Steps::insert_instance(&INSERT_INSTANCE_UNLESS_KEY_USED, inst, step)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| duplicate_or_db(e, || format!("instance {} already exists", inst.id)))?;
    if inserted.is_none() {
        // The key is taken; the SELECT (a new snapshot) sees the winner.
        let key = inst.idempotency_key.as_deref().unwrap_or_default();
        return match Steps::instance_by_key(&mut tx, &inst.tenant, key, inst.started_at).await? {
            Some(holder) => Ok(Created::Existing(holder.id)),
            // The holder of the key was deleted between the two statements.
            None => Err(StoreError::Conflict(inst.id.clone())),
        };
    }
    if let Some(key) = &inst.idempotency_key {
        // A key kept for an instance deleted at its end (migration 0013):
        // that deletion committed before our insert could take the key,
        // so this statement (a new snapshot) sees it. Nothing is written.
        let kept: Option<(String,)> = sqlx::query_as(super::queries_steps::KEY_KEPT)
            .bind(&inst.tenant)
            .bind(key)
            .bind(inst.started_at)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some((id,)) = kept {
            return Ok(Created::Existing(id));
        }
    }
    Steps::apply(&mut tx, &inst.id, &inst.tenant, &inst.deployment_id, step).await?;
    pg_listen::notify_armed(&mut tx, [step]).await?;
    pg_listen::notify_abandoned(&mut tx, &inst.id, step).await?;
    tx.commit().await?;
    Ok(Created::New)
}

/// A commit in its own transaction (a batch of one, or after a batch failed).
async fn commit_alone(
    pool: &PgPool,
    id: &str,
    expected_version: i64,
    step: &StepWrite,
) -> StoreResult<()> {
    super::failpoint::refuse_write()?;
    let mut tx = pool.begin().await?;
    Steps::commit(&mut tx, id, expected_version, step).await?;
    pg_listen::notify_armed(&mut tx, [step]).await?;
    pg_listen::notify_abandoned(&mut tx, id, step).await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::queries_steps::INSERT_INSTANCE;

    #[test]
    fn the_keyed_insert_is_the_shared_insert_plus_its_conflict_rule() {
        assert!(super::INSERT_INSTANCE_UNLESS_KEY_USED.starts_with(INSERT_INSTANCE));
        assert!(super::CLAIM_DUE.contains("FOR UPDATE SKIP LOCKED"));
    }
}
