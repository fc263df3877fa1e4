//! Group commit for in-memory SQLite databases (`sqlite::memory:`,
//! `mode=memory`), whose data lives in the one sqlx connection of the store
//! and so cannot be written by the writer thread of `sqlite_writer.rs` (a
//! second connection would see another, empty database), and for a file
//! database opened with `SqliteOptions::writer_thread` off. Instance writes,
//! claims and the outbox's frequent writes ([`Op`]) from concurrent callers are queued to one writer task,
//! which runs everything queued in ONE transaction on that connection, each
//! request inside its own savepoint.
//!
//! Invariants (the same as the writer thread's):
//! - a request's reply is sent only after the transaction holding it
//!   committed: an `Ok` is as durable as the `synchronous` mode (an
//!   in-memory database ends with its process);
//! - requests are isolated: one that fails (a version conflict, a duplicate)
//!   is rolled back to its savepoint and answers its own error; the others in
//!   the batch still commit;
//! - a caller alone pays one transaction, as before: batching only happens
//!   when requests queue up while a commit is in progress.

use super::queries::Claim;
use super::queries_steps::{StepSql, INSERT_INSTANCE};
use super::rows::{duplicate_or_db, sort_claimed, ParkRow};
use super::sqlite_writer::{stopped, Done, Op, CLAIM_DUE, MAX_BATCH};
use super::{Created, NewInstance, ParkRecord, StepWrite, StoreError, StoreResult};
use sqlx::{Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

/// The step writes on this path's connection.
type Steps = StepSql<Sqlite>;

struct Req {
    op: Op,
    reply: oneshot::Sender<StoreResult<Done>>,
}

#[derive(Debug, Clone)]
pub(super) struct GroupCommit {
    queue: mpsc::UnboundedSender<Req>,
}

impl GroupCommit {
    /// Spawn the writer on the current tokio runtime. It ends when every
    /// handle (every clone of the store) is dropped.
    pub(super) fn start(pool: SqlitePool) -> GroupCommit {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer(pool, rx));
        GroupCommit { queue }
    }

    pub(super) async fn submit(&self, op: Op) -> StoreResult<Done> {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Req { op, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn writer(pool: SqlitePool, mut rx: mpsc::UnboundedReceiver<Req>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        match run_batch(&pool, &batch).await {
            Ok(results) => {
                for (req, result) in batch.into_iter().zip(results) {
                    let _ = req.reply.send(result);
                }
            }
            Err(e) => {
                let message = e.to_string();
                for req in batch {
                    let _ = req.reply.send(Err(StoreError::Other(format!(
                        "group commit failed: {message}"
                    ))));
                }
            }
        }
    }
}

async fn apply(conn: &mut SqliteConnection, op: &Op) -> StoreResult<Done> {
    match op {
        Op::Create(start) => create_one(conn, &start.instance, &start.step)
            .await
            .map(Done::Created),
        Op::Commit { id, version, step } => Steps::commit(conn, id, *version, step)
            .await
            .map(|()| Done::Written),
        Op::CommitAll(steps) => {
            for (id, version, step) in steps {
                Steps::commit(conn, id, *version, step).await?;
            }
            Ok(Done::Written)
        }
        Op::Claim(claim) => claim_one(conn, claim).await.map(Done::Claimed),
        Op::Outbox(op) => super::outbox_write::run_sqlx::<Sqlite>(conn, op, "")
            .await
            .map(Done::Outbox),
        Op::Release {
            instance_id,
            seq,
            owner,
        } => Steps::release(conn, instance_id, *seq, owner)
            .await
            .map(|()| Done::Written),
    }
}

/// Inserts an instance and applies its first step. A reused idempotency key
/// writes nothing and answers `Existing` (the writer thread's rule: one
/// writer, so the key cannot be taken between the two statements).
async fn create_one(
    conn: &mut SqliteConnection,
    inst: &NewInstance,
    step: &StepWrite,
) -> StoreResult<Created> {
    if let Some(key) = &inst.idempotency_key {
        if let Some(holder) =
            Steps::instance_by_key(conn, &inst.tenant, key, inst.started_at).await?
        {
            return Ok(Created::Existing(holder.id));
        }
    }
    Steps::insert_instance(INSERT_INSTANCE, inst, step)
        .execute(&mut *conn)
        .await
        .map_err(|e| duplicate_or_db(e, || format!("instance {} already exists", inst.id)))?;
    Steps::apply(conn, &inst.id, &inst.tenant, &inst.deployment_id, step).await?;
    Ok(Created::New)
}

/// Claims up to `limit` parks due at `now`.
async fn claim_one(conn: &mut SqliteConnection, claim: &Claim) -> StoreResult<Vec<ParkRecord>> {
    let rows: Vec<ParkRow> = sqlx::query_as(CLAIM_DUE)
        .bind(&claim.owner)
        .bind(claim.until)
        .bind(claim.now)
        .bind(claim.limit)
        .fetch_all(conn)
        .await?;
    Ok(sort_claimed(rows))
}

async fn run_batch(pool: &SqlitePool, batch: &[Req]) -> StoreResult<Vec<StoreResult<Done>>> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let mut out = Vec::with_capacity(batch.len());
    for req in batch {
        sqlx::query("SAVEPOINT request").execute(&mut *tx).await?;
        let result = apply(&mut tx, &req.op).await;
        if result.is_err() {
            sqlx::query("ROLLBACK TO request").execute(&mut *tx).await?;
        }
        sqlx::query("RELEASE request").execute(&mut *tx).await?;
        out.push(result);
    }
    tx.commit().await?;
    Ok(out)
}
