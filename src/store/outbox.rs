//! The SQL of [`ChannelStore`], written once for both backends, and the
//! insert of a step's requests on each of the three step-write paths (the
//! SQLite writer thread, the SQLite sqlx group commit, PostgreSQL).
//!
//! Placeholders are `$N` (sqlx binds them by number on SQLite and
//! PostgreSQL; rusqlite binds by first appearance, so the one statement it
//! runs, [`INSERT_REQUEST`], numbers them in order). The one genuine
//! difference is the row lock of a claim: PostgreSQL appends `FOR UPDATE OF o
//! SKIP LOCKED` so concurrent replicas never hand out the same row (and never
//! wait on each other's locks); SQLite serialises writers on its file lock.

use super::channels::{
    ChannelRecord, ChannelStore, DeliveryOutcome, IncidentFilter, IncidentRecord, LockedChange,
    NewRequest, RequestRecord, Transport, WorkerFailureRecord, INCIDENT_EXTERNAL_TASK_FAILED,
};
use super::outbox_write::OutboxOp;
use super::queries::{Column, Conn, RowsAffected, SqlBackend};
use super::rows::{effective_limit, paged_select};
use super::{StepWrite, StoreError, StoreResult};
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, Type};

/// Columns of `outbox` that make a [`RequestRecord`], in its field order.
pub(super) const REQUEST_COLUMNS: &str = "id, tenant, instance_id, park_seq, deployment_id, \
     channel, node, call_attempt, correlation, payload, state, due_at, claimed_by, \
     claimed_until, sent_at, deliveries, retries, last_error, created_at, updated_at";

/// Columns of `incidents` that make an [`IncidentRecord`].
const INCIDENT_COLUMNS: &str = "id, tenant, instance_id, kind, request_id, channel, node, \
     message, state, created_at, resolved_at";

/// `$1` id, `$2` tenant, `$3` instance, `$4` park seq, `$5` deployment,
/// `$6` channel, `$7` node, `$8` call attempt, `$9` correlation, `$10`
/// payload, `$11` due_at, `$12` claimed_by, `$13` claimed_until, `$14`
/// sent_at, `$15` created_at (= updated_at). In order (rusqlite).
pub(super) const INSERT_REQUEST: &str = "INSERT INTO outbox (id, tenant, instance_id, park_seq, \
     deployment_id, channel, node, call_attempt, correlation, payload, state, due_at, \
     claimed_by, claimed_until, sent_at, deliveries, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'PENDING', $11, $12, $13, $14, 0, $15, $15)";

const PUT_CHANNEL: &str = "INSERT INTO channels (tenant, name, transport, url, secret, \
     created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
     ON CONFLICT (tenant, name) DO UPDATE SET transport = excluded.transport, \
     url = excluded.url, secret = excluded.secret, updated_at = excluded.updated_at";

const CHANNEL_COLUMNS: &str = "tenant, name, transport, url, secret, created_at, updated_at";

/// A live request's call park exists.
const PARK_LIVE: &str =
    "EXISTS (SELECT 1 FROM parks p WHERE p.instance_id = o.instance_id AND p.seq = o.park_seq)";

/// `$1` now. `{lock}`: the backend's row lock.
pub(super) fn cancel_orphans_sql(lock: &str) -> String {
    format!(
        "UPDATE outbox SET state = 'CANCELLED', updated_at = $1 WHERE id IN ( \
           SELECT o.id FROM outbox o WHERE o.state = 'PENDING' AND o.due_at <= $1 \
             AND (o.claimed_until IS NULL OR o.claimed_until <= $1) AND NOT {PARK_LIVE} {lock})"
    )
}

/// `$1` owner, `$2` claimed_until, `$3` now, `$4` limit.
pub(super) fn claim_deliveries_sql(lock: &str) -> String {
    format!(
        "UPDATE outbox SET claimed_by = $1, claimed_until = $2, sent_at = COALESCE(sent_at, $3), \
           updated_at = $3 WHERE id IN ( \
           SELECT o.id FROM outbox o JOIN channels c ON c.tenant = o.tenant AND c.name = o.channel \
           WHERE o.state = 'PENDING' AND c.transport = 'push' AND o.due_at <= $3 \
             AND (o.claimed_until IS NULL OR o.claimed_until <= $3) \
           ORDER BY o.due_at, o.id LIMIT $4 {lock}) \
         RETURNING {REQUEST_COLUMNS}"
    )
}

const NEXT_DELIVERY_DUE: &str = "SELECT MIN(CASE WHEN o.claimed_until IS NOT NULL \
       AND o.claimed_until > o.due_at THEN o.claimed_until ELSE o.due_at END) \
     FROM outbox o JOIN channels c ON c.tenant = o.tenant AND c.name = o.channel \
     WHERE o.state = 'PENDING' AND c.transport = 'push'";

/// `$1` id, `$2` owner, `$3` now.
pub(super) const RECORD_DELIVERED: &str =
    "UPDATE outbox SET state = 'DELIVERED', claimed_by = NULL, \
     claimed_until = NULL, sent_at = COALESCE(sent_at, $3), deliveries = deliveries + 1, \
     last_error = NULL, updated_at = $3 WHERE id = $1 AND claimed_by = $2 AND state = 'PENDING'";

/// `$1` id, `$2` owner, `$3` now, `$4` due_at, `$5` error.
pub(super) const RECORD_RETRY: &str = "UPDATE outbox SET claimed_by = NULL, claimed_until = NULL, \
     due_at = $4, deliveries = deliveries + 1, last_error = $5, updated_at = $3 \
     WHERE id = $1 AND claimed_by = $2 AND state = 'PENDING'";

/// `$1` id, `$2` owner, `$3` now, `$4` error.
pub(super) const RECORD_POISONED: &str =
    "UPDATE outbox SET state = 'POISONED', claimed_by = NULL, \
     claimed_until = NULL, deliveries = deliveries + 1, last_error = $4, updated_at = $3 \
     WHERE id = $1 AND claimed_by = $2 AND state = 'PENDING'";

/// `$1` incident id, `$2` kind, `$3` message, `$4` now, `$5` request id.
pub(super) const INSERT_INCIDENT: &str = "INSERT INTO incidents (id, tenant, instance_id, kind, \
     request_id, channel, node, message, state, created_at) \
     SELECT $1, tenant, instance_id, $2, id, channel, node, $3, 'OPEN', $4 FROM outbox WHERE id = $5";

/// `$1` worker, `$2` lock_until, `$3` now, `$4` tenant, `$5` limit, then
/// the channel names from `$6`.
pub(super) fn fetch_and_lock_sql(channels: usize, lock: &str) -> String {
    let names: Vec<String> = (0..channels).map(|i| format!("${}", i + 6)).collect();
    format!(
        "UPDATE outbox SET claimed_by = $1, claimed_until = $2, sent_at = COALESCE(sent_at, $3), \
           deliveries = deliveries + 1, updated_at = $3 WHERE id IN ( \
           SELECT o.id FROM outbox o JOIN channels c ON c.tenant = o.tenant AND c.name = o.channel \
           WHERE o.tenant = $4 AND c.transport = 'pull' AND o.channel IN ({}) \
             AND o.state = 'PENDING' AND o.due_at <= $3 \
             AND (o.claimed_until IS NULL OR o.claimed_until <= $3) AND {PARK_LIVE} \
           ORDER BY o.due_at, o.id LIMIT $5 {lock}) \
         RETURNING {REQUEST_COLUMNS}",
        names.join(", ")
    )
}

/// `$1` id, `$2` now: a pull request answered (DONE), if still PENDING.
pub(super) const FINISH_REQUEST: &str = "UPDATE outbox SET state = 'DONE', claimed_by = NULL, \
     claimed_until = NULL, updated_at = $2 WHERE id = $1 AND state = 'PENDING'";

/// `$1` id, `$2` now: a push request answered during its POST (DELIVERED,
/// as `RECORD_DELIVERED` would have), if still PENDING.
pub(super) const ANSWERED_DELIVERY: &str = "UPDATE outbox SET state = 'DELIVERED', \
     claimed_by = NULL, claimed_until = NULL, deliveries = deliveries + 1, last_error = NULL, \
     updated_at = $2 WHERE id = $1 AND state = 'PENDING'";

/// The lock of `$2` (worker) on `$1` (id) holds at `$3` (now).
const HELD: &str = "id = $1 AND claimed_by = $2 AND claimed_until > $3 AND state = 'PENDING'";

/// `$1` request id, `$2` worker, `$3` now, `$4` message, `$5` retries left,
/// `$6` token: a worker's failure, written beside the outbox change it
/// caused, while the request's instance exists (a cancelled one may be gone
/// already: nothing is recorded then). `{lock}`: the backend's lock on that
/// instance row (PostgreSQL: `FOR KEY SHARE OF i`, so a concurrent delete
/// of the instance is waited for and seen, never a foreign-key error).
fn insert_worker_failure_sql(lock: &str) -> String {
    format!(
        "INSERT INTO worker_failures (instance_id, request_id, token, node, call_attempt, at, \
           worker, message, retries_left) \
         SELECT o.instance_id, o.id, $6, o.node, o.call_attempt, $3, $2, $4, $5 \
         FROM outbox o JOIN instances i ON i.id = o.instance_id WHERE o.id = $1 {lock}"
    )
}

/// Columns of `worker_failures` that make a [`WorkerFailureRecord`].
const WORKER_FAILURE_COLUMNS: &str =
    "request_id, token, node, call_attempt, at, worker, message, retries_left";

// The sqlx traits that make `B::Db` a database the shared SQL runs on (as
// for the Store impl in queries.rs).
impl<B> ChannelStore for B
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
    async fn put_channel(&self, c: &ChannelRecord) -> StoreResult<()> {
        sqlx::query(PUT_CHANNEL)
            .bind(&c.tenant)
            .bind(&c.name)
            .bind(c.transport.as_str())
            .bind(&c.url)
            .bind(&c.secret)
            .bind(c.created_at)
            .bind(c.updated_at)
            .execute(self.writer())
            .await?;
        Ok(())
    }

    async fn get_channel(&self, tenant: &str, name: &str) -> StoreResult<Option<ChannelRecord>> {
        let row: Option<ChannelRow> = sqlx::query_as(&format!(
            "SELECT {CHANNEL_COLUMNS} FROM channels WHERE tenant = $1 AND name = $2"
        ))
        .bind(tenant)
        .bind(name)
        .fetch_optional(self.reads())
        .await?;
        row.map(ChannelRow::into_record).transpose()
    }

    async fn list_channels(&self, tenant: &str) -> StoreResult<Vec<ChannelRecord>> {
        let rows: Vec<ChannelRow> = sqlx::query_as(&format!(
            "SELECT {CHANNEL_COLUMNS} FROM channels WHERE tenant = $1 ORDER BY name"
        ))
        .bind(tenant)
        .fetch_all(self.reads())
        .await?;
        rows.into_iter().map(ChannelRow::into_record).collect()
    }

    async fn delete_channel(&self, tenant: &str, name: &str) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM channels WHERE tenant = $1 AND name = $2")
            .bind(tenant)
            .bind(name)
            .execute(self.writer())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn get_request(&self, id: &str) -> StoreResult<Option<RequestRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {REQUEST_COLUMNS} FROM outbox WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.reads())
        .await?)
    }

    async fn requests_of(&self, instance_id: &str) -> StoreResult<Vec<RequestRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {REQUEST_COLUMNS} FROM outbox WHERE instance_id = $1 \
                 ORDER BY created_at, id"
        ))
        .bind(instance_id)
        .fetch_all(self.reads())
        .await?)
    }

    async fn claim_deliveries(
        &self,
        now: i64,
        limit: i64,
        owner: &str,
        lease_ms: i64,
    ) -> StoreResult<Vec<RequestRecord>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let op = OutboxOp::ClaimDeliveries {
            now,
            limit,
            owner: owner.to_string(),
            until: now.saturating_add(lease_ms.max(0)),
        };
        let mut rows = self.outbox(op).await?.requests();
        rows.sort_by(|a, b| (a.due_at, &a.id).cmp(&(b.due_at, &b.id)));
        Ok(rows)
    }

    async fn next_delivery_due(&self) -> StoreResult<Option<i64>> {
        Ok(sqlx::query_scalar(NEXT_DELIVERY_DUE)
            .fetch_one(self.reads())
            .await?)
    }

    async fn record_delivery(
        &self,
        id: &str,
        owner: &str,
        now: i64,
        outcome: &DeliveryOutcome,
    ) -> StoreResult<bool> {
        let op = OutboxOp::RecordDelivery {
            id: id.to_string(),
            owner: owner.to_string(),
            now,
            outcome: outcome.clone(),
        };
        Ok(self.outbox(op).await?.recorded())
    }

    async fn fetch_and_lock(
        &self,
        tenant: &str,
        channels: &[String],
        worker: &str,
        now: i64,
        lock_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<RequestRecord>> {
        if limit <= 0 || channels.is_empty() {
            return Ok(Vec::new());
        }
        let op = OutboxOp::FetchAndLock {
            tenant: tenant.to_string(),
            channels: channels.to_vec(),
            worker: worker.to_string(),
            now,
            lock_until,
            limit,
        };
        let mut rows = self.outbox(op).await?.requests();
        rows.sort_by(|a, b| (a.due_at, &a.id).cmp(&(b.due_at, &b.id)));
        Ok(rows)
    }

    async fn update_locked(
        &self,
        id: &str,
        worker: &str,
        now: i64,
        change: &LockedChange,
    ) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        // A failure: (its message, the retries it leaves, the call's token).
        let (done, failure) = match change {
            LockedChange::Extend { until } => {
                let done = sqlx::query(&format!(
                    "UPDATE outbox SET claimed_until = $4, updated_at = $3 WHERE {HELD}"
                ))
                .bind(id)
                .bind(worker)
                .bind(now)
                .bind(until)
                .execute(&mut *tx)
                .await?;
                (done.rows_affected() > 0, None)
            }
            LockedChange::Retry {
                retries,
                due_at,
                error,
                token,
            } => {
                let done = sqlx::query(&format!(
                    "UPDATE outbox SET claimed_by = NULL, claimed_until = NULL, \
                         retries = $4, due_at = $5, last_error = $6, updated_at = $3 \
                         WHERE {HELD}"
                ))
                .bind(id)
                .bind(worker)
                .bind(now)
                .bind(retries)
                .bind(due_at)
                .bind(error)
                .execute(&mut *tx)
                .await?;
                (done.rows_affected() > 0, Some((error, *retries, *token)))
            }
            LockedChange::Incident {
                error,
                incident_id,
                token,
            } => {
                // Set aside for an operator, and its incident, together.
                let done = sqlx::query(&format!(
                    "UPDATE outbox SET state = 'INCIDENT', claimed_by = NULL, \
                     claimed_until = NULL, retries = 0, last_error = $4, \
                     updated_at = $3 WHERE {HELD}"
                ))
                .bind(id)
                .bind(worker)
                .bind(now)
                .bind(error.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    > 0;
                if done {
                    sqlx::query(INSERT_INCIDENT)
                        .bind(incident_id.as_str())
                        .bind(INCIDENT_EXTERNAL_TASK_FAILED)
                        .bind(error.as_str())
                        .bind(now)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                }
                (done, Some((error, 0, *token)))
            }
        };
        if let (true, Some((message, retries_left, token))) = (done, failure) {
            sqlx::query(&insert_worker_failure_sql(B::KEY_SHARE_I))
                .bind(id)
                .bind(worker)
                .bind(now)
                .bind(message.as_str())
                .bind(retries_left)
                .bind(token)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(done)
    }

    async fn unlock_request(&self, id: &str, now: i64) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE outbox SET claimed_by = NULL, claimed_until = NULL, updated_at = $2 \
                 WHERE id = $1 AND state = 'PENDING'",
        )
        .bind(id)
        .bind(now)
        .execute(self.writer())
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn finish_request(&self, id: &str, now: i64) -> StoreResult<()> {
        sqlx::query(FINISH_REQUEST)
            .bind(id)
            .bind(now)
            .execute(self.writer())
            .await?;
        Ok(())
    }

    async fn purge_requests(&self, before: i64, limit: i64) -> StoreResult<u64> {
        if limit <= 0 {
            return Ok(0);
        }
        let done = sqlx::query(
            "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox \
                 WHERE state IN ('DELIVERED', 'DONE', 'CANCELLED') AND updated_at <= $1 \
                 ORDER BY updated_at, id LIMIT $2)",
        )
        .bind(before)
        .bind(limit)
        .execute(self.writer())
        .await?;
        Ok(done.rows_affected())
    }

    async fn request_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(
            sqlx::query_as("SELECT state, COUNT(*) FROM outbox GROUP BY state ORDER BY state")
                .fetch_all(self.reads())
                .await?,
        )
    }

    async fn worker_failures(&self, instance_id: &str) -> StoreResult<Vec<WorkerFailureRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {WORKER_FAILURE_COLUMNS} FROM worker_failures WHERE instance_id = $1 \
                 ORDER BY id"
        ))
        .bind(instance_id)
        .fetch_all(self.reads())
        .await?)
    }

    async fn list_incidents(&self, filter: &IncidentFilter) -> StoreResult<Vec<IncidentRecord>> {
        let filters = [
            ("tenant =", &filter.tenant),
            ("instance_id =", &filter.instance_id),
            ("state =", &filter.state),
            ("id >", &filter.after_id),
        ];
        // Each row names its instance's process (the console groups by it):
        // one primary-key lookup per row of the page.
        let columns = format!(
            "{INCIDENT_COLUMNS}, (SELECT i.process_id FROM instances i \
             WHERE i.id = incidents.instance_id) AS process_id"
        );
        let (sql, values) = paged_select(&columns, "incidents", &filters);
        let mut q = sqlx::query_as::<_, IncidentRecord>(&sql);
        for value in values {
            q = q.bind(value);
        }
        Ok(q.bind(effective_limit(filter.limit))
            .fetch_all(self.reads())
            .await?)
    }

    async fn get_incident(&self, id: &str) -> StoreResult<Option<IncidentRecord>> {
        Ok(sqlx::query_as(&format!(
            "SELECT {INCIDENT_COLUMNS} FROM incidents WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.reads())
        .await?)
    }

    async fn resolve_incident(&self, id: &str, now: i64, rearm: Option<i64>) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE incidents SET state = 'RESOLVED', resolved_at = $2 \
                 WHERE id = $1 AND state = 'OPEN'",
        )
        .bind(id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() > 0 {
            if let Some(retries) = rearm {
                sqlx::query(
                    "UPDATE outbox SET state = 'PENDING', due_at = $2, claimed_by = NULL, \
                         claimed_until = NULL, deliveries = 0, retries = $3, updated_at = $2 \
                         WHERE id = (SELECT request_id FROM incidents WHERE id = $1) \
                           AND state IN ('POISONED', 'INCIDENT')",
                )
                .bind(id)
                .bind(now)
                .bind(retries)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn incident_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        Ok(
            sqlx::query_as("SELECT state, COUNT(*) FROM incidents GROUP BY state ORDER BY state")
                .fetch_all(self.reads())
                .await?,
        )
    }

    async fn repin_instance(
        &self,
        id: &str,
        expected_version: i64,
        deployment_id: &str,
        snapshot: &str,
        state: &str,
        now: i64,
    ) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        // What it counted for before the move (stats.rs); the version check
        // below makes this the row it replaces.
        let before: Option<(String, String, String)> = sqlx::query_as(
            "SELECT deployment_id, state, snapshot FROM instances WHERE id = $1 AND version = $2",
        )
        .bind(id)
        .bind(expected_version)
        .fetch_optional(&mut *tx)
        .await?;
        let done = sqlx::query(
            "UPDATE instances SET deployment_id = $1, snapshot = $2, state = $3, \
                 version = version + 1, updated_at = $4, ended_at = NULL \
                 WHERE id = $5 AND version = $6",
        )
        .bind(deployment_id)
        .bind(snapshot)
        .bind(state)
        .bind(now)
        .bind(id)
        .bind(expected_version)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            let exists: Option<String> =
                sqlx::query_scalar("SELECT id FROM instances WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
            return Err(match exists {
                Some(_) => StoreError::Conflict(id.to_string()),
                None => StoreError::NotFound(format!("instance {id}")),
            });
        }
        if let Some((was_deployment, was_state, was_snapshot)) = &before {
            use super::stats::{collect, moved, write, Tally, SET_FAILURE};
            let was = Tally::of_json(was_state, was_snapshot);
            let now = Tally::of_json(state, snapshot);
            let step = StepWrite {
                stats: moved(
                    id,
                    Some((was_deployment, &was)),
                    Some((deployment_id, &now)),
                ),
                ..StepWrite::default()
            };
            write::<B::Db>(&mut *tx, &collect([&step])).await?;
            if let Some(f) = was.failure_change(&now) {
                sqlx::query(SET_FAILURE)
                    .bind(f.error_code.as_deref())
                    .bind(f.failed_node.as_deref())
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        sqlx::query("UPDATE parks SET deployment_id = $1 WHERE instance_id = $2")
            .bind(deployment_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "UPDATE outbox SET deployment_id = $1 WHERE instance_id = $2 \
                 AND state = 'PENDING'",
        )
        .bind(deployment_id)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

#[derive(Debug, sqlx::FromRow)]
struct ChannelRow {
    tenant: String,
    name: String,
    transport: String,
    url: Option<String>,
    secret: String,
    created_at: i64,
    updated_at: i64,
}

impl ChannelRow {
    fn into_record(self) -> StoreResult<ChannelRecord> {
        let transport = Transport::parse(&self.transport).ok_or_else(|| {
            StoreError::Other(format!(
                "channel {} has an unknown transport {:?}",
                self.name, self.transport
            ))
        })?;
        Ok(ChannelRecord {
            tenant: self.tenant,
            name: self.name,
            transport,
            url: self.url,
            secret: self.secret,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// The columns a new request is written with: (due_at, claimed_by,
/// claimed_until, sent_at). A pre-claimed one goes out right after the
/// commit, so it counts as sent from its creation.
fn claim_columns(r: &NewRequest) -> (i64, Option<&str>, Option<i64>, Option<i64>) {
    match &r.claim {
        Some(c) => (
            r.created_at,
            Some(c.owner.as_str()),
            Some(c.until.max(r.created_at)),
            Some(r.created_at),
        ),
        None => (r.created_at, None, None, None),
    }
}

fn duplicate(id: &str) -> String {
    format!("request {id} exists already")
}

/// The requests a step answers, marked DONE (pull, [`StepWrite::finished`])
/// or DELIVERED (push, [`StepWrite::delivered`]) inside its transaction on an
/// sqlx connection of either backend (`StepSql::apply`): the answer and the
/// end of its request commit together.
pub(super) async fn finish_requests<DB>(
    conn: &mut DB::Connection,
    step: &StepWrite,
) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: Column<DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB>,
{
    let answered = step.finished.iter().map(|id| (FINISH_REQUEST, id));
    for (sql, id) in answered.chain(step.delivered.iter().map(|id| (ANSWERED_DELIVERY, id))) {
        sqlx::query(sql)
            .bind(id.as_str())
            .bind(step.updated_at)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// [`finish_requests`] on the SQLite writer thread's connection.
pub(super) fn finish_requests_rusqlite(
    conn: &rusqlite::Connection,
    step: &StepWrite,
) -> StoreResult<()> {
    let answered = step.finished.iter().map(|id| (FINISH_REQUEST, id));
    for (sql, id) in answered.chain(step.delivered.iter().map(|id| (ANSWERED_DELIVERY, id))) {
        super::outbox_write::execute(conn, sql, &[id, &step.updated_at])?;
    }
    Ok(())
}

/// The insert of a step's requests on an sqlx connection of either backend
/// (inside the step's transaction; `StepSql::apply`).
pub(super) async fn write_requests<DB>(
    conn: &mut DB::Connection,
    instance_id: &str,
    tenant: &str,
    deployment_id: &str,
    requests: &[NewRequest],
) -> StoreResult<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: Column<DB>,
    Option<i64>: Column<DB>,
    String: Column<DB>,
    for<'s> &'s str: Type<DB> + Encode<'s, DB>,
    for<'s> Option<&'s str>: Type<DB> + Encode<'s, DB>,
{
    for r in requests {
        let (due_at, claimed_by, claimed_until, sent_at) = claim_columns(r);
        sqlx::query(INSERT_REQUEST)
            .bind(&r.id)
            .bind(tenant)
            .bind(instance_id)
            .bind(r.park_seq)
            .bind(deployment_id)
            .bind(&r.channel)
            .bind(&r.node)
            .bind(r.call_attempt)
            .bind(&r.correlation)
            .bind(&r.payload)
            .bind(due_at)
            .bind(claimed_by)
            .bind(claimed_until)
            .bind(sent_at)
            .bind(r.created_at)
            .execute(&mut *conn)
            .await
            .map_err(|e| super::rows::duplicate_or_db(e, || duplicate(&r.id)))?;
    }
    Ok(())
}

/// The insert of a step's requests on the SQLite writer thread's connection.
pub(super) fn write_requests_rusqlite(
    conn: &rusqlite::Connection,
    instance_id: &str,
    tenant: &str,
    deployment_id: &str,
    requests: &[NewRequest],
) -> StoreResult<()> {
    if requests.is_empty() {
        return Ok(());
    }
    let mut insert = conn.prepare_cached(INSERT_REQUEST)?;
    for r in requests {
        let (due_at, claimed_by, claimed_until, sent_at) = claim_columns(r);
        insert
            .execute(rusqlite::params![
                r.id,
                tenant,
                instance_id,
                r.park_seq,
                deployment_id,
                r.channel,
                r.node,
                r.call_attempt,
                r.correlation,
                r.payload,
                due_at,
                claimed_by,
                claimed_until,
                sent_at,
                r.created_at,
            ])
            .map_err(|e| match &e {
                rusqlite::Error::SqliteFailure(f, _)
                    if f.code == rusqlite::ErrorCode::ConstraintViolation =>
                {
                    StoreError::Duplicate(duplicate(&r.id))
                }
                _ => StoreError::Sqlite(e),
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rusqlite_insert_numbers_its_placeholders_in_order() {
        // rusqlite binds `$N` by first appearance: they must appear as 1, 2, 3...
        let mut next = 1;
        let mut rest = INSERT_REQUEST;
        while let Some(at) = rest.find('$') {
            let digits: String = rest[at + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let n: usize = digits.parse().unwrap();
            assert!(n <= next, "${n} appears before ${next}");
            if n == next {
                next += 1;
            }
            rest = &rest[at + 1 + digits.len()..];
        }
        assert_eq!(next, 16);
    }

    #[test]
    fn fetch_numbers_the_channels_after_the_fixed_parameters() {
        let sql = fetch_and_lock_sql(2, "");
        assert!(sql.contains("IN ($6, $7)"), "{sql}");
    }
}
