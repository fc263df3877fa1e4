//! Signals and thrown messages (migration 0018): the durable fan-out. A
//! broadcast is a `signals` row written with the waits it reaches
//! (`signal_deliveries`, one row per signal park of its tenant and name,
//! chosen by one `INSERT .. SELECT` in the same transaction: the waits are
//! never held in memory); a thrown message reaches at most one wait (the
//! first of its name and key, as `POST /v1/messages` does). Written by a
//! step's commit (`StepWrite::signals`, both write paths) or by
//! [`SignalStore::throw_signal`] (the API). The runtime reads them back in
//! pages (runtime/signals.rs). A supertrait of [`super::Store`]; the SQL is
//! written once for both backends.

use super::queries::{Column, Conn, SqlBackend};
use super::StoreResult;
use serde::{Deserialize, Serialize};
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, Type};
use std::future::Future;

/// A signal or message to write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSignal {
    pub id: String,
    /// `signal` or `message`.
    pub kind: String,
    pub name: String,
    pub correlation_key: Option<String>,
    /// JSON object.
    pub variables: String,
    pub origin: Option<String>,
    pub created_at: i64,
}

/// A signal not fully delivered yet.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SignalRecord {
    pub id: String,
    pub tenant: String,
    pub kind: String,
    pub name: String,
    pub correlation_key: Option<String>,
    pub variables: String,
    pub origin: Option<String>,
    pub starts_done: i64,
    pub created_at: i64,
}

pub(super) const INSERT_SIGNAL: &str =
    "INSERT INTO signals (id, tenant, kind, name, correlation_key, variables, origin, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// Every signal wait of (tenant, name) armed now: `$1` signal id, `$2`
/// tenant, `$3` name, but those of `$4`, the throwing instance (its own
/// waits took the signal in the throwing step: engine/signal.rs).
pub(super) const DELIVER_SIGNAL: &str = "INSERT INTO signal_deliveries (signal_id, instance_id, seq) \
     SELECT $1, instance_id, seq FROM parks WHERE tenant = $2 AND kind = 'signal' AND message_name = $3 \
     AND instance_id <> $4";

/// The first message wait of (tenant, name, key): `$4` the key.
pub(super) const DELIVER_MESSAGE_KEYED: &str = "INSERT INTO signal_deliveries (signal_id, instance_id, seq) \
     SELECT $1, instance_id, seq FROM parks WHERE tenant = $2 AND kind = 'message' AND message_name = $3 \
     AND correlation_key = $4 ORDER BY instance_id, seq LIMIT 1";

/// The first message wait of (tenant, name) armed without a key.
pub(super) const DELIVER_MESSAGE: &str = "INSERT INTO signal_deliveries (signal_id, instance_id, seq) \
     SELECT $1, instance_id, seq FROM parks WHERE tenant = $2 AND kind = 'message' AND message_name = $3 \
     AND correlation_key IS NULL ORDER BY instance_id, seq LIMIT 1";

const SIGNAL_COLUMNS: &str =
    "id, tenant, kind, name, correlation_key, variables, origin, starts_done, created_at";

/// The fan-out statement of a signal, and its fourth parameter if any
/// (a signal's origin, a message's key).
pub(super) fn deliver_sql(s: &NewSignal) -> (&'static str, Option<&str>) {
    match (s.kind.as_str(), &s.correlation_key) {
        ("signal", _) => (DELIVER_SIGNAL, Some(s.origin.as_deref().unwrap_or(""))),
        (_, Some(k)) => (DELIVER_MESSAGE_KEYED, Some(k.as_str())),
        (_, None) => (DELIVER_MESSAGE, None),
    }
}

/// Write signals and their deliveries on an sqlx connection of either
/// backend (inside the step's transaction, or the API's).
pub(super) async fn write_signals<DB>(
    conn: &mut DB::Connection,
    tenant: &str,
    signals: &[NewSignal],
) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: Column<DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB>,
    for<'s> Option<&'s str>: Type<DB> + Encode<'s, DB>,
{
    for s in signals {
        sqlx::query(INSERT_SIGNAL)
            .bind(s.id.as_str())
            .bind(tenant)
            .bind(s.kind.as_str())
            .bind(s.name.as_str())
            .bind(s.correlation_key.as_deref())
            .bind(s.variables.as_str())
            .bind(s.origin.as_deref())
            .bind(s.created_at)
            .execute(&mut *conn)
            .await
            .map_err(|e| super::rows::duplicate_or_db(e, || format!("signal {} exists", s.id)))?;
        let (sql, fourth) = deliver_sql(s);
        let mut q = sqlx::query(sql)
            .bind(s.id.as_str())
            .bind(tenant)
            .bind(s.name.as_str());
        if let Some(v) = fourth {
            q = q.bind(v);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

/// The same on the SQLite writer thread's connection.
pub(super) fn write_signals_rusqlite(
    conn: &rusqlite::Connection,
    tenant: &str,
    signals: &[NewSignal],
) -> StoreResult<()> {
    for s in signals {
        conn.prepare_cached(INSERT_SIGNAL)?
            .execute(rusqlite::params![
                s.id,
                tenant,
                s.kind,
                s.name,
                s.correlation_key,
                s.variables,
                s.origin,
                s.created_at,
            ])?;
        let (sql, fourth) = deliver_sql(s);
        let mut st = conn.prepare_cached(sql)?;
        if let Some(v) = fourth {
            st.execute(rusqlite::params![s.id, tenant, s.name, v])?;
        } else {
            st.execute(rusqlite::params![s.id, tenant, s.name])?;
        }
    }
    Ok(())
}

pub trait SignalStore: Send + Sync {
    /// Write a signal (or message) thrown from outside an instance with its
    /// deliveries, in one transaction; how many waits it reaches.
    fn throw_signal(
        &self,
        tenant: &str,
        signal: &NewSignal,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Signals not fully delivered, oldest first.
    fn pending_signals(
        &self,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<SignalRecord>>> + Send;
    /// Up to `limit` deliveries of a signal: (instance, park seq).
    fn signal_deliveries(
        &self,
        signal_id: &str,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<(String, i64)>>> + Send;
    /// Remove delivered rows.
    fn delete_deliveries(
        &self,
        signal_id: &str,
        done: &[(String, i64)],
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn mark_starts_done(&self, signal_id: &str) -> impl Future<Output = StoreResult<()>> + Send;
    /// The signal is fully delivered: its row (and any delivery left) goes.
    fn delete_signal(&self, signal_id: &str) -> impl Future<Output = StoreResult<()>> + Send;
}

impl<B> SignalStore for B
where
    B: SqlBackend,
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    i64: Column<B::Db>,
    String: Column<B::Db>,
    Option<String>: Column<B::Db>,
    for<'s> &'s str: Type<B::Db> + Encode<'s, B::Db> + ColumnIndex<<B::Db as Database>::Row>,
    for<'s> Option<&'s str>: Type<B::Db> + Encode<'s, B::Db>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    async fn throw_signal(&self, tenant: &str, signal: &NewSignal) -> StoreResult<u64> {
        let mut tx = self.writer().begin().await?;
        write_signals::<B::Db>(&mut tx, tenant, std::slice::from_ref(signal)).await?;
        let reached: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM signal_deliveries WHERE signal_id = $1")
                .bind(signal.id.as_str())
                .fetch_one(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(u64::try_from(reached).unwrap_or(0))
    }

    async fn pending_signals(&self, limit: i64) -> StoreResult<Vec<SignalRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {SIGNAL_COLUMNS} FROM signals ORDER BY created_at, id LIMIT $1"
        ))
        .bind(limit.max(0))
        .fetch_all(self.reads())
        .await?)
    }

    async fn signal_deliveries(
        &self,
        signal_id: &str,
        limit: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT instance_id, seq FROM signal_deliveries WHERE signal_id = $1 \
             ORDER BY instance_id, seq LIMIT $2",
        )
        .bind(signal_id)
        .bind(limit.max(0))
        .fetch_all(self.reads())
        .await?)
    }

    async fn delete_deliveries(&self, signal_id: &str, done: &[(String, i64)]) -> StoreResult<()> {
        // One statement per page: the last (instance, seq) bounds it, as
        // pages are read in that order and deleted before the next is read.
        let Some((last_instance, last_seq)) = done.last() else {
            return Ok(());
        };
        sqlx::query(
            "DELETE FROM signal_deliveries WHERE signal_id = $1 AND \
             (instance_id < $2 OR (instance_id = $3 AND seq <= $4))",
        )
        .bind(signal_id)
        .bind(last_instance.as_str())
        .bind(last_instance.as_str())
        .bind(*last_seq)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    async fn mark_starts_done(&self, signal_id: &str) -> StoreResult<()> {
        sqlx::query("UPDATE signals SET starts_done = 1 WHERE id = $1")
            .bind(signal_id)
            .execute(self.writer())
            .await?;
        Ok(())
    }

    async fn delete_signal(&self, signal_id: &str) -> StoreResult<()> {
        let mut tx = self.writer().begin().await?;
        sqlx::query("DELETE FROM signal_deliveries WHERE signal_id = $1")
            .bind(signal_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM signals WHERE id = $1")
            .bind(signal_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

impl SignalStore for super::AnyStore {
    async fn throw_signal(&self, tenant: &str, signal: &NewSignal) -> StoreResult<u64> {
        delegate!(self, s => s.throw_signal(tenant, signal).await)
    }
    async fn pending_signals(&self, limit: i64) -> StoreResult<Vec<SignalRecord>> {
        delegate!(self, s => s.pending_signals(limit).await)
    }
    async fn signal_deliveries(
        &self,
        signal_id: &str,
        limit: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        delegate!(self, s => s.signal_deliveries(signal_id, limit).await)
    }
    async fn delete_deliveries(&self, signal_id: &str, done: &[(String, i64)]) -> StoreResult<()> {
        delegate!(self, s => s.delete_deliveries(signal_id, done).await)
    }
    async fn mark_starts_done(&self, signal_id: &str) -> StoreResult<()> {
        delegate!(self, s => s.mark_starts_done(signal_id).await)
    }
    async fn delete_signal(&self, signal_id: &str) -> StoreResult<()> {
        delegate!(self, s => s.delete_signal(signal_id).await)
    }
}
