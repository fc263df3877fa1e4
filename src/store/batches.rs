//! Batch operations (issue 35 item 4, migration 0021): a batch and its
//! items, one per selected instance. A supertrait of [`super::Store`]; the
//! SQL is written once for both backends.
//!
//! Invariants:
//! - a batch and all its items are written in one transaction, so a batch
//!   exists only with its whole selection;
//! - at most one runner works a batch at a time: [`BatchStore::claim_batch`]
//!   re-checks the lease in the `UPDATE` itself (on PostgreSQL a second
//!   claimer waits on the row, then finds it claimed);
//! - an item's outcome is written once: [`BatchStore::finish_item`] changes
//!   only a PENDING item.

use super::queries::{Column, Conn, RowsAffected, SqlBackend};
use super::StoreResult;
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, Type};
use std::future::Future;

/// A batch in progress.
pub const BATCH_RUNNING: &str = "RUNNING";
/// Every item has its outcome.
pub const BATCH_COMPLETED: &str = "COMPLETED";
/// Cancelled by the caller: the items still pending were skipped.
pub const BATCH_CANCELLED: &str = "CANCELLED";

/// An item not carried out yet.
pub const ITEM_PENDING: &str = "PENDING";
/// Carried out.
pub const ITEM_SUCCEEDED: &str = "SUCCEEDED";
/// Refused or failed (its code and message say why).
pub const ITEM_FAILED: &str = "FAILED";
/// Nothing to do (its message says why: already in the wanted state, or
/// the batch was cancelled).
pub const ITEM_SKIPPED: &str = "SKIPPED";

/// A batch as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BatchRecord {
    pub id: String,
    pub tenant: String,
    /// `retry`, `cancel`, `resolve` or `migrate`.
    pub action: String,
    /// The action's parameters, JSON (`runtime::batches::BatchParams`).
    pub params: String,
    pub state: String,
    pub total: i64,
    pub created_at: i64,
    pub ended_at: Option<i64>,
    /// When a runner may next carry out some of its items.
    pub due_at: Option<i64>,
}

/// One selected instance of a batch and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BatchItem {
    pub seq: i64,
    pub instance_id: String,
    pub state: String,
    pub code: Option<String>,
    pub message: Option<String>,
    /// What it made, if anything (a retry's new instance).
    pub result: Option<String>,
    pub ended_at: Option<i64>,
}

/// The outcome of one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemOutcome {
    pub state: &'static str,
    pub code: Option<String>,
    pub message: Option<String>,
    pub result: Option<String>,
}

pub trait BatchStore: Send + Sync {
    /// Writes `batch` (RUNNING, due at once) and one PENDING item per
    /// instance, numbered from 1 in the given order, in one transaction.
    fn create_batch(
        &self,
        batch: &BatchRecord,
        instances: &[String],
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn get_batch(&self, id: &str) -> impl Future<Output = StoreResult<Option<BatchRecord>>> + Send;
    /// The tenant's batches, newest first.
    fn list_batches(
        &self,
        tenant: &str,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<BatchRecord>>> + Send;
    /// (item state, count) of a batch.
    fn batch_counts(
        &self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Vec<(String, i64)>>> + Send;
    /// A batch's items after `after_seq`, in order.
    fn batch_items(
        &self,
        id: &str,
        after_seq: i64,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<BatchItem>>> + Send;
    /// Claims one RUNNING batch due at `now` whose lease lapsed (or is
    /// `owner`'s), until `until`.
    fn claim_batch(
        &self,
        owner: &str,
        now: i64,
        until: i64,
    ) -> impl Future<Output = StoreResult<Option<BatchRecord>>> + Send;
    /// Its first `limit` PENDING items.
    fn pending_items(
        &self,
        id: &str,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<BatchItem>>> + Send;
    /// Writes an item's outcome if it is still PENDING; whether it was.
    fn finish_item(
        &self,
        id: &str,
        seq: i64,
        outcome: &ItemOutcome,
        at: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Hands a claimed batch back: COMPLETED (at `at`) when it has no
    /// PENDING item left, else due again at `due_at`.
    fn release_batch(
        &self,
        id: &str,
        due_at: i64,
        at: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// CANCELLED, its PENDING items SKIPPED; whether it was RUNNING.
    fn cancel_batch(&self, id: &str, at: i64) -> impl Future<Output = StoreResult<bool>> + Send;
    /// The earliest `due_at` of a RUNNING batch.
    fn next_batch_due(&self) -> impl Future<Output = StoreResult<Option<i64>>> + Send;
}

const BATCH_COLUMNS: &str =
    "id, tenant, action, params, state, total, created_at, ended_at, due_at";
const ITEM_COLUMNS: &str = "seq, instance_id, state, code, message, result, ended_at";
/// Items inserted per statement (4 binds each, under every backend's limit).
const ITEM_CHUNK: usize = 500;

impl<B> BatchStore for B
where
    B: SqlBackend,
    for<'c> &'c mut Conn<B>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    i64: Column<B::Db>,
    Option<i64>: Column<B::Db>,
    String: Column<B::Db>,
    Option<String>: Column<B::Db>,
    for<'s> &'s str: Type<B::Db> + Encode<'s, B::Db> + ColumnIndex<<B::Db as Database>::Row>,
    for<'s> Option<&'s str>: Type<B::Db> + Encode<'s, B::Db>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
{
    async fn create_batch(&self, b: &BatchRecord, instances: &[String]) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO batches (id, tenant, action, params, state, total, created_at, due_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(b.id.as_str())
        .bind(b.tenant.as_str())
        .bind(b.action.as_str())
        .bind(b.params.as_str())
        .bind(BATCH_RUNNING)
        .bind(b.total)
        .bind(b.created_at)
        .bind(b.due_at)
        .execute(&mut *tx)
        .await?;
        for (n, chunk) in instances.chunks(ITEM_CHUNK).enumerate() {
            let values: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let p = 4 * i;
                    format!("(${}, ${}, ${}, ${})", p + 1, p + 2, p + 3, p + 4)
                })
                .collect();
            let sql = format!(
                "INSERT INTO batch_items (batch_id, seq, instance_id, state) VALUES {}",
                values.join(", ")
            );
            let mut q = sqlx::query(&sql);
            for (i, instance) in chunk.iter().enumerate() {
                let seq = (n * ITEM_CHUNK + i + 1) as i64;
                q = q
                    .bind(b.id.as_str())
                    .bind(seq)
                    .bind(instance.as_str())
                    .bind(ITEM_PENDING);
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn get_batch(&self, id: &str) -> StoreResult<Option<BatchRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {BATCH_COLUMNS} FROM batches WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.reads())
        .await?)
    }

    async fn list_batches(&self, tenant: &str, limit: i64) -> StoreResult<Vec<BatchRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {BATCH_COLUMNS} FROM batches WHERE tenant = $1 ORDER BY id DESC LIMIT $2"
        ))
        .bind(tenant)
        .bind(limit.max(0))
        .fetch_all(self.reads())
        .await?)
    }

    async fn batch_counts(&self, id: &str) -> StoreResult<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT state, COUNT(*) FROM batch_items WHERE batch_id = $1 GROUP BY state ORDER BY state",
        )
        .bind(id)
        .fetch_all(self.reads())
        .await?)
    }

    async fn batch_items(
        &self,
        id: &str,
        after_seq: i64,
        limit: i64,
    ) -> StoreResult<Vec<BatchItem>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ITEM_COLUMNS} FROM batch_items WHERE batch_id = $1 AND seq > $2 \
             ORDER BY seq LIMIT $3"
        ))
        .bind(id)
        .bind(after_seq)
        .bind(limit.max(0))
        .fetch_all(self.reads())
        .await?)
    }

    async fn claim_batch(
        &self,
        owner: &str,
        now: i64,
        until: i64,
    ) -> StoreResult<Option<BatchRecord>> {
        // The lease is checked again in the UPDATE's own WHERE: a claimer that
        // waited on the row re-reads it there (PostgreSQL) and finds it taken.
        Ok(sqlx::query_as(&format!(
            "UPDATE batches SET claimed_by = $1, claimed_until = $2 \
             WHERE id = (SELECT id FROM batches WHERE state = 'RUNNING' AND due_at <= $3 \
                 AND (claimed_until IS NULL OR claimed_until < $3 OR claimed_by = $1) \
                 ORDER BY due_at, id LIMIT 1) \
               AND state = 'RUNNING' \
               AND (claimed_until IS NULL OR claimed_until < $3 OR claimed_by = $1) \
             RETURNING {BATCH_COLUMNS}"
        ))
        .bind(owner)
        .bind(until)
        .bind(now)
        .fetch_optional(self.writer())
        .await?)
    }

    async fn pending_items(&self, id: &str, limit: i64) -> StoreResult<Vec<BatchItem>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {ITEM_COLUMNS} FROM batch_items WHERE batch_id = $1 AND state = 'PENDING' \
             ORDER BY seq LIMIT $2"
        ))
        .bind(id)
        .bind(limit.max(0))
        .fetch_all(self.reads())
        .await?)
    }

    async fn finish_item(&self, id: &str, seq: i64, o: &ItemOutcome, at: i64) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE batch_items SET state = $1, code = $2, message = $3, result = $4, ended_at = $5 \
             WHERE batch_id = $6 AND seq = $7 AND state = 'PENDING'",
        )
        .bind(o.state)
        .bind(o.code.as_deref())
        .bind(o.message.as_deref())
        .bind(o.result.as_deref())
        .bind(at)
        .bind(id)
        .bind(seq)
        .execute(self.writer())
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn release_batch(&self, id: &str, due_at: i64, at: i64) -> StoreResult<()> {
        sqlx::query(
            "UPDATE batches SET claimed_by = NULL, claimed_until = NULL, \
               state = CASE WHEN EXISTS (SELECT 1 FROM batch_items i \
                   WHERE i.batch_id = batches.id AND i.state = 'PENDING') \
                 THEN state ELSE 'COMPLETED' END, \
               ended_at = CASE WHEN EXISTS (SELECT 1 FROM batch_items i \
                   WHERE i.batch_id = batches.id AND i.state = 'PENDING') \
                 THEN ended_at ELSE $1 END, \
               due_at = $2 \
             WHERE id = $3 AND state = 'RUNNING'",
        )
        .bind(at)
        .bind(due_at)
        .bind(id)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    async fn cancel_batch(&self, id: &str, at: i64) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE batches SET state = 'CANCELLED', ended_at = $1, claimed_by = NULL, \
             claimed_until = NULL WHERE id = $2 AND state = 'RUNNING'",
        )
        .bind(at)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let cancelled = done.rows_affected() > 0;
        if cancelled {
            sqlx::query(
                "UPDATE batch_items SET state = 'SKIPPED', message = 'the batch was cancelled', \
                 ended_at = $1 WHERE batch_id = $2 AND state = 'PENDING'",
            )
            .bind(at)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(cancelled)
    }

    async fn next_batch_due(&self) -> StoreResult<Option<i64>> {
        Ok(
            sqlx::query_scalar("SELECT MIN(due_at) FROM batches WHERE state = 'RUNNING'")
                .fetch_one(self.reads())
                .await?,
        )
    }
}

impl BatchStore for super::AnyStore {
    async fn create_batch(&self, b: &BatchRecord, instances: &[String]) -> StoreResult<()> {
        delegate!(self, s => s.create_batch(b, instances).await)
    }
    async fn get_batch(&self, id: &str) -> StoreResult<Option<BatchRecord>> {
        delegate!(self, s => s.get_batch(id).await)
    }
    async fn list_batches(&self, tenant: &str, limit: i64) -> StoreResult<Vec<BatchRecord>> {
        delegate!(self, s => s.list_batches(tenant, limit).await)
    }
    async fn batch_counts(&self, id: &str) -> StoreResult<Vec<(String, i64)>> {
        delegate!(self, s => s.batch_counts(id).await)
    }
    async fn batch_items(
        &self,
        id: &str,
        after_seq: i64,
        limit: i64,
    ) -> StoreResult<Vec<BatchItem>> {
        delegate!(self, s => s.batch_items(id, after_seq, limit).await)
    }
    async fn claim_batch(
        &self,
        owner: &str,
        now: i64,
        until: i64,
    ) -> StoreResult<Option<BatchRecord>> {
        delegate!(self, s => s.claim_batch(owner, now, until).await)
    }
    async fn pending_items(&self, id: &str, limit: i64) -> StoreResult<Vec<BatchItem>> {
        delegate!(self, s => s.pending_items(id, limit).await)
    }
    async fn finish_item(&self, id: &str, seq: i64, o: &ItemOutcome, at: i64) -> StoreResult<bool> {
        delegate!(self, s => s.finish_item(id, seq, o, at).await)
    }
    async fn release_batch(&self, id: &str, due_at: i64, at: i64) -> StoreResult<()> {
        delegate!(self, s => s.release_batch(id, due_at, at).await)
    }
    async fn cancel_batch(&self, id: &str, at: i64) -> StoreResult<bool> {
        delegate!(self, s => s.cancel_batch(id, at).await)
    }
    async fn next_batch_due(&self) -> StoreResult<Option<i64>> {
        delegate!(self, s => s.next_batch_due().await)
    }
}
