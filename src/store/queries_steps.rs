//! The step writes, written once: the SQL of an engine step (instance row,
//! parks, attempts, journal, outbox requests) and its application on an sqlx connection of
//! either backend ([`StepSql`]).
//!
//! Three paths run these statements and so write the same rows with the
//! same rules: PostgreSQL (`postgres.rs`), SQLite's sqlx group commit
//! (`sqlite_group.rs`, in-memory databases) through [`StepSql`], and the
//! SQLite writer thread (`sqlite_writer.rs`, rusqlite, file databases)
//! through the constants.
//!
//! Invariant: parameters are `$N`, bound in the order given beside each
//! constant, and every constant names its parameters in ascending order of
//! first use (`$1` before `$2` ...): rusqlite binds by position, and SQLite
//! numbers a `$N` parameter by its first use (checked by a test).

use super::children;
use super::queries::Column;
use super::rows::{duplicate_or_db, park_claim_columns};
use super::{
    AttemptOutput, AttemptRow, KeyHolder, NewInstance, StepWrite, StoreError, StoreResult,
};
use sqlx::query::Query;
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, Type};
use std::marker::PhantomData;

/// `$1` tenant, `$2` idempotency key, `$3` now → who holds that key: the
/// live instance (`ended` NULL) or, after it, the key kept for an instance
/// deleted at its end until it expires. Columns: id, fingerprint, ended
/// (state), process_id, deployment_id, started_at, ended_at; the live
/// instance first.
pub(super) const INSTANCE_BY_KEY: &str = "SELECT id, idempotency_fingerprint, \
     CAST(NULL AS TEXT) AS ended, process_id, deployment_id, started_at, ended_at, CAST(0 AS BIGINT) AS kept \
     FROM instances WHERE tenant = $1 AND idempotency_key = $2 \
     UNION ALL SELECT instance_id, fingerprint, state, process_id, deployment_id, started_at, \
     ended_at, CAST(1 AS BIGINT) AS kept FROM idempotency_keys \
     WHERE tenant = $1 AND idempotency_key = $2 AND expires_at > $3 \
     ORDER BY kept";

/// A row of [`INSTANCE_BY_KEY`].
pub(super) type KeyRow = (
    String,
    Option<String>,
    Option<String>,
    String,
    String,
    i64,
    Option<i64>,
    i64,
);

/// The holder a [`KeyRow`] names.
pub(super) fn key_holder(row: KeyRow) -> KeyHolder {
    let (id, fingerprint, ended, process_id, deployment_id, started_at, ended_at, _) = row;
    KeyHolder {
        id,
        fingerprint,
        ended: ended.map(|state| super::EndedInstance {
            state,
            process_id,
            deployment_id,
            started_at,
            ended_at,
        }),
    }
}

/// `$1` the key's window (ms), `$2` instance id (numbered as they appear,
/// for the SQLite writer's positional binding): before the instance is
/// deleted at its end, its idempotency key (if any) is kept with what it
/// ended as, until its end plus the window (a kept key of an earlier,
/// expired use is replaced).
pub(super) const KEEP_KEY: &str = "INSERT INTO idempotency_keys (tenant, idempotency_key, \
     fingerprint, instance_id, process_id, deployment_id, state, started_at, ended_at, expires_at) \
     SELECT tenant, idempotency_key, idempotency_fingerprint, id, process_id, deployment_id, state, \
     started_at, ended_at, COALESCE(ended_at, updated_at) + $1 FROM instances \
     WHERE id = $2 AND idempotency_key IS NOT NULL \
     ON CONFLICT (tenant, idempotency_key) DO UPDATE SET fingerprint = excluded.fingerprint, \
     instance_id = excluded.instance_id, process_id = excluded.process_id, \
     deployment_id = excluded.deployment_id, state = excluded.state, \
     started_at = excluded.started_at, ended_at = excluded.ended_at, expires_at = excluded.expires_at";

/// `$1` tenant, `$2` key, `$3` now → a row if the key is kept for an
/// instance deleted at its end (PostgreSQL's create checks it after its insert).
pub(super) const KEY_KEPT: &str = "SELECT instance_id FROM idempotency_keys \
     WHERE tenant = $1 AND idempotency_key = $2 AND expires_at > $3";

/// `$1` now: the kept keys that expired.
pub(super) const PURGE_KEYS: &str = "DELETE FROM idempotency_keys WHERE expires_at <= $1";

/// `$1` id, `$2` tenant, `$3` deployment_id, `$4` process_id, `$5` state,
/// `$6` snapshot, `$7` idempotency_key, `$8` retry_of, `$9` started_at,
/// `$10` updated_at, `$11` ended_at (version 1), `$12`
/// idempotency_fingerprint, `$13` business_key (migration 0020), `$14`
/// search_keys (the step's searchable variables, `search_rows::keys_text`,
/// migration 0028). The column list is `rows::INSTANCE_COLUMNS` (what reads
/// select) plus the fingerprint, the business key and the search keys
/// (checked by a test).
pub(super) const INSERT_INSTANCE: &str = "INSERT INTO instances (id, tenant, deployment_id, \
     process_id, state, version, snapshot, idempotency_key, retry_of, started_at, updated_at, \
     ended_at, idempotency_fingerprint, business_key, search_keys) \
     VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, $9, $10, $11, $12, $13, $14)";

/// `$1` snapshot, `$2` state, `$3` updated_at, `$4` ended_at (kept when
/// NULL), `$5` id, `$6` expected version → the instance's (tenant,
/// deployment_id), no row if the version moved or the instance is gone.
pub(super) const UPDATE_INSTANCE: &str = "UPDATE instances SET snapshot = $1, state = $2, \
     version = version + 1, updated_at = $3, ended_at = COALESCE($4, ended_at) \
     WHERE id = $5 AND version = $6 RETURNING tenant, deployment_id";

/// [`UPDATE_INSTANCE`] without its version check and its `RETURNING`, for
/// a writer that read the row's version (and what it returns) first
/// ([`INSTANCE_OWNER`]) under the write lock: SQLite's writer thread, where
/// `RETURNING` costs a table SQLite builds on every execution.
pub(super) const WRITE_INSTANCE: &str = "UPDATE instances SET snapshot = $1, state = $2, \
     version = version + 1, updated_at = $3, ended_at = COALESCE($4, ended_at) \
     WHERE id = $5";

/// `$1` id → the instance's (tenant, deployment_id, version).
pub(super) const INSTANCE_OWNER: &str =
    "SELECT tenant, deployment_id, version FROM instances WHERE id = $1";

/// `$1` id → a row if the instance exists.
pub(super) const INSTANCE_EXISTS: &str = "SELECT 1 FROM instances WHERE id = $1";

/// `$1` instance id: every row of it, children first (the `delete` step;
/// its searchable variables are deleted by key before these,
/// `search_rows::delete`).
pub(super) const DELETE_INSTANCE_ALL: [&str; 4] = [
    "DELETE FROM parks WHERE instance_id = $1",
    "DELETE FROM attempts WHERE instance_id = $1",
    "DELETE FROM journal WHERE instance_id = $1",
    "DELETE FROM instances WHERE id = $1",
];

/// `$1` instance id: every park of it (`withdraw_all`).
pub(super) const DELETE_PARKS_OF: &str = "DELETE FROM parks WHERE instance_id = $1";

/// `$1` instance id, `$2` seq, `$3` kind, `$4` tenant, `$5` deployment_id,
/// `$6` due_at, `$7` message_name, `$8` correlation_key, `$9` claimed_by,
/// `$10` claimed_until (a pre-claim, `rows::park_claim_columns`).
pub(super) const INSERT_PARK: &str = "INSERT INTO parks (instance_id, seq, kind, tenant, \
     deployment_id, due_at, message_name, correlation_key, claimed_by, claimed_until) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// `$1` instance id, `$2` token, `$3` node, `$4` attempt, `$5` started_at,
/// `$6` ended_at, `$7` outcome, `$8` code, `$9` message, `$10` stderr, `$11`
/// logs (its [`AttemptOutput`](super::AttemptOutput), if any: [`output_of`]),
/// `$12` class (migration 0010), `$13` calls (migration 0011), `$14` input,
/// `$15` output (migration 0024), `$16` item_node, `$17` item_index (the
/// fan-out item it ran in, migration 0025); a replay is a no-op.
pub(super) const INSERT_ATTEMPT: &str = "INSERT INTO attempts (instance_id, token, node, \
     attempt, started_at, ended_at, outcome, code, message, stderr, logs, class, calls, \
     input, output, item_node, item_index) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
     ON CONFLICT (instance_id, token, node, attempt) DO NOTHING";

/// The output of attempt `a` of `step`, if it wrote any.
pub(super) fn output_of<'s>(step: &'s StepWrite, a: &AttemptRow) -> Option<&'s AttemptOutput> {
    step.outputs
        .iter()
        .find(|o| o.token == a.token && o.attempt == a.attempt && o.node == a.node)
}

/// `$1` instance id, `$2` seq, `$3` at, `$4` kind, `$5` node, `$6` data; a
/// replay is a no-op.
pub(super) const INSERT_JOURNAL: &str = "INSERT INTO journal (instance_id, seq, at, kind, \
     node, data) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (instance_id, seq) DO NOTHING";

/// `$1` instance id, `$2` seq, `$3` owner: only the holder's claim goes.
pub(super) const RELEASE_CLAIM: &str = "UPDATE parks SET claimed_by = NULL, \
     claimed_until = NULL WHERE instance_id = $1 AND seq = $2 AND claimed_by = $3";

/// The step writes on an sqlx connection of database `DB` (called as
/// `StepSql::<Postgres>::commit(..)`).
pub(super) struct StepSql<DB>(PhantomData<DB>);

// The sqlx traits that make `DB` a database the shared SQL runs on (see the
// Store impl in queries.rs).
impl<DB> StepSql<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: Column<DB>,
    Option<i64>: Column<DB>,
    String: Column<DB>,
    Option<String>: Column<DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB>,
    for<'s> Option<&'s str>: Type<DB> + Encode<'s, DB>,
    usize: ColumnIndex<DB::Row>,
{
    /// `sql` ([`INSERT_INSTANCE`], or a statement that starts with it) with
    /// the new instance's columns bound.
    pub(super) fn insert_instance<'q>(
        sql: &'q str,
        inst: &'q NewInstance,
        step: &'q StepWrite,
    ) -> Query<'q, DB, DB::Arguments<'q>> {
        sqlx::query(sql)
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
            .bind(&inst.idempotency_fingerprint)
            .bind(&inst.business_key)
            .bind(
                step.search
                    .as_deref()
                    .and_then(super::search_rows::keys_text),
            )
    }

    /// The instance that holds (tenant, idempotency key) at `now`, if any.
    pub(super) async fn instance_by_key(
        conn: &mut DB::Connection,
        tenant: &str,
        key: &str,
        now: i64,
    ) -> StoreResult<Option<KeyHolder>> {
        let row: Option<KeyRow> = sqlx::query_as(INSTANCE_BY_KEY)
            .bind(tenant)
            .bind(key)
            .bind(now)
            .fetch_optional(conn)
            .await?;
        Ok(row.map(key_holder))
    }

    /// Updates the instance row if it is at `expected_version`, then applies
    /// the rest of the step. `Conflict` if the version moved, `NotFound` if
    /// the row is gone.
    pub(super) async fn commit(
        conn: &mut DB::Connection,
        id: &str,
        expected_version: i64,
        step: &StepWrite,
    ) -> StoreResult<()> {
        Self::commit_deferring_stats(conn, id, expected_version, step).await?;
        super::stats::write::<DB>(conn, &super::stats::collect([step])).await
    }

    /// [`Self::commit`] but for the step's count deltas, which the caller
    /// writes ([`super::stats::collect`]) once for all the steps of its
    /// transaction, in key order (PostgreSQL's batches: two of them never
    /// lock count rows in opposite orders).
    pub(super) async fn commit_deferring_stats(
        conn: &mut DB::Connection,
        id: &str,
        expected_version: i64,
        step: &StepWrite,
    ) -> StoreResult<()> {
        let row: Option<(String, String)> = sqlx::query_as(UPDATE_INSTANCE)
            .bind(&step.snapshot)
            .bind(&step.state)
            .bind(step.updated_at)
            .bind(step.ended_at)
            .bind(id)
            .bind(expected_version)
            .fetch_optional(&mut *conn)
            .await?;
        if let Some((tenant, deployment_id)) = row {
            return Self::apply_rows_and_children(conn, id, &tenant, &deployment_id, step, false)
                .await;
        }
        let exists = sqlx::query(INSTANCE_EXISTS)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
            .is_some();
        Err(if exists {
            StoreError::Conflict(id.to_string())
        } else {
            StoreError::NotFound(format!("instance {id}"))
        })
    }

    /// Everything of a step but the instance row itself: parks, attempts,
    /// journal (or the deletion of the whole instance), then the parent's
    /// wake-up of a child's final step and the children the step starts
    /// (children.rs).
    /// Its count deltas (and its children's) are written last (stats.rs).
    pub(super) async fn apply(
        conn: &mut DB::Connection,
        id: &str,
        tenant: &str,
        deployment_id: &str,
        step: &StepWrite,
    ) -> StoreResult<()> {
        Self::apply_rows_and_children(conn, id, tenant, deployment_id, step, true).await?;
        super::stats::write::<DB>(conn, &super::stats::collect([step])).await
    }

    /// [`Self::apply`] but for the step's count deltas, which the caller
    /// writes once for its transaction (as [`Self::commit_deferring_stats`]).
    pub(super) async fn apply_deferring_stats(
        conn: &mut DB::Connection,
        id: &str,
        tenant: &str,
        deployment_id: &str,
        step: &StepWrite,
    ) -> StoreResult<()> {
        Self::apply_rows_and_children(conn, id, tenant, deployment_id, step, true).await
    }

    /// `fresh`: the instance row was inserted in this transaction (with
    /// the step's search keys).
    async fn apply_rows_and_children(
        conn: &mut DB::Connection,
        id: &str,
        tenant: &str,
        deployment_id: &str,
        step: &StepWrite,
        fresh: bool,
    ) -> StoreResult<()> {
        super::outbox::finish_requests::<DB>(conn, step).await?;
        Self::apply_rows(conn, id, tenant, deployment_id, step, fresh).await?;
        if let Some(w) = &step.wake_parent {
            Self::wake_parent(conn, w).await?;
        }
        for c in &step.children {
            let child = &c.instance;
            Self::insert_instance(INSERT_INSTANCE, child, &c.step)
                .execute(&mut *conn)
                .await
                .map_err(|e| {
                    duplicate_or_db(e, || format!("instance {} already exists", child.id))
                })?;
            sqlx::query(children::SET_PARENT)
                .bind(&c.parent_id)
                .bind(c.parent_park)
                .bind(&child.id)
                .execute(&mut *conn)
                .await?;
            Self::apply_rows(
                conn,
                &child.id,
                &child.tenant,
                &child.deployment_id,
                &c.step,
                true,
            )
            .await?;
            if let Some(w) = &c.step.wake_parent {
                Self::wake_parent(conn, w).await?;
            }
        }
        Ok(())
    }

    /// A child's end on its parent's child park (if the park still exists).
    async fn wake_parent(conn: &mut DB::Connection, w: &children::ChildEnd) -> StoreResult<()> {
        let (claimed_by, claimed_until) = children::wake_claim(w);
        sqlx::query(children::WAKE_PARENT)
            .bind(w.due_at)
            .bind(&w.payload)
            .bind(claimed_by)
            .bind(claimed_until)
            .bind(&w.parent_id)
            .bind(w.park_seq)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// The rows of one instance's step: parks, attempts, journal, outbox
    /// requests, searchable variables, or the deletion of the whole
    /// instance (`fresh`: as [`Self::apply_rows_and_children`]).
    async fn apply_rows(
        conn: &mut DB::Connection,
        id: &str,
        tenant: &str,
        deployment_id: &str,
        step: &StepWrite,
        fresh: bool,
    ) -> StoreResult<()> {
        if step.delete {
            sqlx::query(KEEP_KEY)
                .bind(step.key_window_ms)
                .bind(id)
                .execute(&mut *conn)
                .await?;
            super::search_rows::delete::<DB>(conn, id, tenant).await?;
            for statement in DELETE_INSTANCE_ALL {
                sqlx::query(statement).bind(id).execute(&mut *conn).await?;
            }
            return Ok(());
        }
        if step.withdraw_all {
            sqlx::query(DELETE_PARKS_OF)
                .bind(id)
                .execute(&mut *conn)
                .await?;
        }
        if !step.withdraw.is_empty() {
            // One statement for all the seqs (a round trip each on PostgreSQL otherwise).
            let seqs: Vec<String> = (2..step.withdraw.len() + 2)
                .map(|n| format!("${n}"))
                .collect();
            let sql = format!(
                "DELETE FROM parks WHERE instance_id = $1 AND seq IN ({})",
                seqs.join(", ")
            );
            let mut q = sqlx::query(&sql).bind(id);
            for seq in &step.withdraw {
                q = q.bind(*seq);
            }
            q.execute(&mut *conn).await?;
        }
        for p in &step.arm {
            let (claimed_by, claimed_until) = park_claim_columns(p);
            sqlx::query(INSERT_PARK)
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
                .map_err(|e| {
                    duplicate_or_db(e, || format!("park {id}/{} is already armed", p.seq))
                })?;
        }
        for a in &step.attempts {
            let out = output_of(step, a);
            sqlx::query(INSERT_ATTEMPT)
                .bind(id)
                .bind(a.token)
                .bind(&a.node)
                .bind(a.attempt)
                .bind(a.started_at)
                .bind(a.ended_at)
                .bind(&a.outcome)
                .bind(&a.code)
                .bind(&a.message)
                .bind(out.and_then(|o| o.stderr.as_deref()))
                .bind(out.and_then(|o| o.logs.as_deref()))
                .bind(&a.class)
                .bind(out.and_then(|o| o.calls.as_deref()))
                .bind(out.and_then(|o| o.input.as_deref()))
                .bind(out.and_then(|o| o.output.as_deref()))
                .bind(&a.item_node)
                .bind(a.item_index)
                .execute(&mut *conn)
                .await?;
        }
        for j in &step.journal {
            sqlx::query(INSERT_JOURNAL)
                .bind(id)
                .bind(j.seq)
                .bind(j.at)
                .bind(&j.kind)
                .bind(&j.node)
                .bind(&j.data)
                .execute(&mut *conn)
                .await?;
        }
        if let Some(vars) = &step.search {
            super::search_rows::write::<DB>(conn, id, tenant, vars, fresh).await?;
        }
        // The error code and failed node the listing filters on (stats.rs).
        if let Some(f) = &step.failure {
            sqlx::query(super::stats::SET_FAILURE)
                .bind(f.error_code.as_deref())
                .bind(f.failed_node.as_deref())
                .bind(id)
                .execute(&mut *conn)
                .await?;
        }
        // Thrown signals and messages with their deliveries (signals.rs).
        super::signals::write_signals::<DB>(conn, tenant, &step.signals).await?;
        // Channel-call requests: the transactional outbox (outbox.rs).
        super::outbox::write_requests::<DB>(conn, id, tenant, deployment_id, &step.requests).await
    }

    /// Releases `owner`'s claim on one park.
    pub(super) async fn release<'e>(
        executor: impl Executor<'e, Database = DB>,
        instance_id: &str,
        seq: i64,
        owner: &str,
    ) -> StoreResult<()> {
        sqlx::query(RELEASE_CLAIM)
            .bind(instance_id)
            .bind(seq)
            .bind(owner)
            .execute(executor)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::rows::INSTANCE_COLUMNS;
    use super::*;

    fn squash(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn the_writers_update_is_the_checked_update_less_its_check() {
        assert_eq!(
            format!(
                "{} AND version = $6 RETURNING tenant, deployment_id",
                squash(WRITE_INSTANCE)
            ),
            squash(UPDATE_INSTANCE)
        );
    }

    #[test]
    fn the_instance_insert_writes_the_shared_column_list() {
        assert!(squash(INSERT_INSTANCE).contains(&format!(
            "({INSTANCE_COLUMNS}, idempotency_fingerprint, business_key, search_keys)"
        )));
    }
}
