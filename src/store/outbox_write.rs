//! The outbox's frequent writes — a sender's claim of due push deliveries,
//! the record of a delivery, a worker's fetch-and-lock — on each backend's
//! write path ([`OutboxPath`]). The SQL is `outbox.rs`'s, the same text on
//! both backends.
//!
//! SQLite runs them where its instance writes run: the writer thread (on
//! its rusqlite connection, [`run_rusqlite`]) or the sqlx group commit
//! (`sqlite_group.rs`, [`run_sqlx`]). Run on the sqlx write connection
//! instead, they met the writer thread only on SQLite's file lock, and the
//! loser of that race sleeps in SQLite's busy handler (1 ms at least, more
//! on each retry): a channel call's delivery record after its 2xx, or a
//! worker's fetch beside a burst of completes, cost a millisecond or more
//! each time. On the writer thread they queue instead and share the batch's
//! transaction (one fsync with the steps committed beside them).
//! PostgreSQL runs them in a pooled transaction ([`run_sqlx`]), as before.
//!
//! Invariants: each op is one transaction's worth of work, isolated like
//! any other request of a batch; an op's answer is sent only after its
//! transaction committed (the delivery record is durable before the
//! sender moves on).

use super::channels::{DeliveryOutcome, RequestRecord, INCIDENT_DELIVERY_POISONED};
use super::outbox::{
    cancel_orphans_sql, claim_deliveries_sql, fetch_and_lock_sql, INSERT_INCIDENT,
    RECORD_DELIVERED, RECORD_POISONED, RECORD_RETRY,
};
use super::queries::Column;
use super::StoreResult;
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, Type};
use std::future::Future;

/// One of the outbox's frequent writes.
#[derive(Debug, Clone)]
pub enum OutboxOp {
    /// `ChannelStore::claim_deliveries`: cancel the orphans due at `now`,
    /// then claim up to `limit` due push deliveries for `owner` until `until`.
    ClaimDeliveries {
        now: i64,
        limit: i64,
        owner: String,
        until: i64,
    },
    /// `ChannelStore::record_delivery`.
    RecordDelivery {
        id: String,
        owner: String,
        now: i64,
        outcome: DeliveryOutcome,
    },
    /// `ChannelStore::fetch_and_lock` (`limit > 0`, `channels` not empty).
    FetchAndLock {
        tenant: String,
        channels: Vec<String>,
        worker: String,
        now: i64,
        lock_until: i64,
        limit: i64,
    },
}

/// What an [`OutboxOp`] did.
#[derive(Debug)]
pub enum OutboxDone {
    /// The requests claimed or locked (in no particular order).
    Requests(Vec<RequestRecord>),
    /// Whether the delivery was recorded (the sender still held it).
    Recorded(bool),
}

impl OutboxDone {
    pub(super) fn requests(self) -> Vec<RequestRecord> {
        match self {
            OutboxDone::Requests(r) => r,
            OutboxDone::Recorded(_) => Vec::new(),
        }
    }
    pub(super) fn recorded(self) -> bool {
        matches!(self, OutboxDone::Recorded(true))
    }
}

/// Where a backend runs an [`OutboxOp`].
pub trait OutboxPath {
    fn outbox(&self, op: OutboxOp) -> impl Future<Output = StoreResult<OutboxDone>> + Send;
}

/// Runs `op` on an sqlx connection of either backend, inside the caller's
/// transaction. `lock` is the backend's row lock (`SKIP_LOCKED_O`).
pub(super) async fn run_sqlx<DB>(
    conn: &mut DB::Connection,
    op: &OutboxOp,
    lock: &str,
) -> StoreResult<OutboxDone>
where
    DB: Database<QueryResult: super::queries::RowsAffected>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: Column<DB>,
    Option<i64>: Column<DB>,
    String: Column<DB>,
    Option<String>: Column<DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB> + ColumnIndex<DB::Row>,
    usize: ColumnIndex<DB::Row>,
{
    use super::queries::RowsAffected;
    match op {
        OutboxOp::ClaimDeliveries {
            now,
            limit,
            owner,
            until,
        } => {
            sqlx::query(&cancel_orphans_sql(lock))
                .bind(*now)
                .execute(&mut *conn)
                .await?;
            let rows: Vec<RequestRecord> = sqlx::query_as(&claim_deliveries_sql(lock))
                .bind(owner.as_str())
                .bind(*until)
                .bind(*now)
                .bind(*limit)
                .fetch_all(&mut *conn)
                .await?;
            Ok(OutboxDone::Requests(rows))
        }
        OutboxOp::RecordDelivery {
            id,
            owner,
            now,
            outcome,
        } => {
            let (id, owner) = (id.as_str(), owner.as_str());
            let changed = match outcome {
                DeliveryOutcome::Delivered => sqlx::query(RECORD_DELIVERED)
                    .bind(id)
                    .bind(owner)
                    .bind(*now)
                    .execute(&mut *conn)
                    .await?
                    .rows_affected(),
                DeliveryOutcome::Retry { due_at, error } => sqlx::query(RECORD_RETRY)
                    .bind(id)
                    .bind(owner)
                    .bind(*now)
                    .bind(*due_at)
                    .bind(error.as_str())
                    .execute(&mut *conn)
                    .await?
                    .rows_affected(),
                DeliveryOutcome::Poisoned { error, incident_id } => {
                    let changed = sqlx::query(RECORD_POISONED)
                        .bind(id)
                        .bind(owner)
                        .bind(*now)
                        .bind(error.as_str())
                        .execute(&mut *conn)
                        .await?
                        .rows_affected();
                    if changed > 0 {
                        sqlx::query(INSERT_INCIDENT)
                            .bind(incident_id.as_str())
                            .bind(INCIDENT_DELIVERY_POISONED)
                            .bind(error.as_str())
                            .bind(*now)
                            .bind(id)
                            .execute(&mut *conn)
                            .await?;
                    }
                    changed
                }
            };
            Ok(OutboxDone::Recorded(changed > 0))
        }
        OutboxOp::FetchAndLock {
            tenant,
            channels,
            worker,
            now,
            lock_until,
            limit,
        } => {
            let sql = fetch_and_lock_sql(channels.len(), lock);
            let mut q = sqlx::query_as::<_, RequestRecord>(&sql)
                .bind(worker.as_str())
                .bind(*lock_until)
                .bind(*now)
                .bind(tenant.as_str())
                .bind(*limit);
            for c in channels {
                q = q.bind(c.as_str());
            }
            Ok(OutboxDone::Requests(q.fetch_all(&mut *conn).await?))
        }
    }
}

/// Binds `values[N - 1]` to every parameter `$N` of `statement`, wherever
/// it first appears (SQLite numbers `$N` parameters by first appearance,
/// and the outbox's statements do not use them in order).
fn bind_numbered(
    statement: &mut rusqlite::Statement<'_>,
    values: &[&dyn rusqlite::ToSql],
) -> rusqlite::Result<()> {
    for index in 1..=statement.parameter_count() {
        let name = statement.parameter_name(index).unwrap_or_default();
        let n: usize = name
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .filter(|n| (1..=values.len()).contains(n))
            .ok_or_else(|| rusqlite::Error::InvalidParameterName(name.to_string()))?;
        statement.raw_bind_parameter(index, values[n - 1])?;
    }
    Ok(())
}

/// Runs `statement` with `values` and decodes the requests it returns
/// (`REQUEST_COLUMNS`).
fn requests(
    conn: &rusqlite::Connection,
    sql: &str,
    values: &[&dyn rusqlite::ToSql],
) -> StoreResult<Vec<RequestRecord>> {
    let mut statement = conn.prepare_cached(sql)?;
    bind_numbered(&mut statement, values)?;
    let mut rows = statement.raw_query();
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(RequestRecord {
            id: r.get(0)?,
            tenant: r.get(1)?,
            instance_id: r.get(2)?,
            park_seq: r.get(3)?,
            deployment_id: r.get(4)?,
            channel: r.get(5)?,
            node: r.get(6)?,
            call_attempt: r.get(7)?,
            correlation: r.get(8)?,
            payload: r.get(9)?,
            state: r.get(10)?,
            due_at: r.get(11)?,
            claimed_by: r.get(12)?,
            claimed_until: r.get(13)?,
            sent_at: r.get(14)?,
            deliveries: r.get(15)?,
            retries: r.get(16)?,
            last_error: r.get(17)?,
            created_at: r.get(18)?,
            updated_at: r.get(19)?,
        });
    }
    Ok(out)
}

/// Runs `statement` with `values` (numbered binding); the rows it changed.
pub(super) fn execute(
    conn: &rusqlite::Connection,
    sql: &str,
    values: &[&dyn rusqlite::ToSql],
) -> StoreResult<usize> {
    let mut statement = conn.prepare_cached(sql)?;
    bind_numbered(&mut statement, values)?;
    Ok(statement.raw_execute()?)
}

/// Runs `op` on the SQLite writer thread's connection, inside its batch's
/// transaction (as [`run_sqlx`]).
pub(super) fn run_rusqlite(conn: &rusqlite::Connection, op: &OutboxOp) -> StoreResult<OutboxDone> {
    match op {
        OutboxOp::ClaimDeliveries {
            now,
            limit,
            owner,
            until,
        } => {
            execute(conn, &cancel_orphans_sql(""), &[now])?;
            let rows = requests(conn, &claim_deliveries_sql(""), &[owner, until, now, limit])?;
            Ok(OutboxDone::Requests(rows))
        }
        OutboxOp::RecordDelivery {
            id,
            owner,
            now,
            outcome,
        } => {
            let changed = match outcome {
                DeliveryOutcome::Delivered => execute(conn, RECORD_DELIVERED, &[id, owner, now])?,
                DeliveryOutcome::Retry { due_at, error } => {
                    execute(conn, RECORD_RETRY, &[id, owner, now, due_at, error])?
                }
                DeliveryOutcome::Poisoned { error, incident_id } => {
                    let changed = execute(conn, RECORD_POISONED, &[id, owner, now, error])?;
                    if changed > 0 {
                        let kind = INCIDENT_DELIVERY_POISONED;
                        execute(conn, INSERT_INCIDENT, &[incident_id, &kind, error, now, id])?;
                    }
                    changed
                }
            };
            Ok(OutboxDone::Recorded(changed > 0))
        }
        OutboxOp::FetchAndLock {
            tenant,
            channels,
            worker,
            now,
            lock_until,
            limit,
        } => {
            let mut values: Vec<&dyn rusqlite::ToSql> =
                vec![worker, lock_until, now, tenant, limit];
            values.extend(channels.iter().map(|c| c as &dyn rusqlite::ToSql));
            let sql = fetch_and_lock_sql(channels.len(), "");
            Ok(OutboxDone::Requests(requests(conn, &sql, &values)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::migrations::{migrations, Dialect};
    use super::*;

    /// An in-memory database runs them on the sqlx group commit.
    #[tokio::test]
    async fn the_group_commit_runs_them_too() {
        use super::super::channels::ChannelStore;
        let store = super::super::SqliteStore::open("sqlite::memory:")
            .await
            .unwrap();
        assert!(store
            .claim_deliveries(0, 10, "me", 1000)
            .await
            .unwrap()
            .is_empty());
        let channels = ["c".to_string()];
        let fetched = store.fetch_and_lock("t", &channels, "w", 0, 1000, 10);
        assert!(fetched.await.unwrap().is_empty());
        let outcome = DeliveryOutcome::Delivered;
        assert!(!store.record_delivery("x", "me", 0, &outcome).await.unwrap());
    }

    #[test]
    fn every_statement_binds_by_number_on_the_writer_thread() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for m in migrations(Dialect::Sqlite).unwrap() {
            conn.execute_batch(&m.sql).unwrap();
        }
        let statements = [
            (cancel_orphans_sql(""), 1),
            (claim_deliveries_sql(""), 4),
            (RECORD_DELIVERED.to_string(), 3),
            (RECORD_RETRY.to_string(), 5),
            (RECORD_POISONED.to_string(), 4),
            (INSERT_INCIDENT.to_string(), 5),
            (fetch_and_lock_sql(3, ""), 8),
            (super::super::outbox::FINISH_REQUEST.to_string(), 2),
            (super::super::outbox::ANSWERED_DELIVERY.to_string(), 2),
        ];
        for (sql, count) in statements {
            let mut statement = conn.prepare(&sql).unwrap();
            assert_eq!(statement.parameter_count(), count, "{sql}");
            let values: Vec<i64> = (1..=count as i64).collect();
            let refs: Vec<&dyn rusqlite::ToSql> =
                values.iter().map(|v| v as &dyn rusqlite::ToSql).collect();
            bind_numbered(&mut statement, &refs).unwrap();
            assert!(bind_numbered(&mut statement, &refs[..count - 1]).is_err());
        }
    }
}
