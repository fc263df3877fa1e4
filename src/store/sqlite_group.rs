//! Group commit for SQLite: instance writes (`create_instance`, `commit_step`)
//! from concurrent callers are queued to one writer task, which commits
//! everything queued in ONE transaction (one fsync), each request inside its
//! own savepoint.
//!
//! Invariants:
//! - a request's reply is sent only after the transaction holding it
//!   committed: an `Ok` is durable (as durable as the `synchronous` mode);
//! - requests are isolated: one that fails (a version conflict, a duplicate)
//!   is rolled back to its savepoint and answers its own error; the others in
//!   the batch still commit;
//! - a caller alone pays one transaction, as before: batching only happens
//!   when requests queue up while a commit is in progress.

use super::sqlite::{commit_one, create_one};
use super::{Created, NewInstance, StepWrite, StoreError, StoreResult};
use sqlx::SqlitePool;
use tokio::sync::{mpsc, oneshot};

/// The most requests one transaction carries.
const MAX_BATCH: usize = 512;

pub(super) enum Op {
    Create(NewInstance, StepWrite),
    Commit {
        id: String,
        version: i64,
        step: StepWrite,
    },
}

struct Req {
    op: Op,
    reply: oneshot::Sender<StoreResult<Created>>,
}

#[derive(Debug, Clone)]
pub(super) struct GroupCommit {
    queue: mpsc::UnboundedSender<Req>,
}

fn stopped() -> StoreError {
    StoreError::Other("the SQLite writer stopped".to_string())
}

impl GroupCommit {
    /// Spawn the writer on the current tokio runtime. It ends when every
    /// handle (every clone of the store) is dropped.
    pub(super) fn start(pool: SqlitePool) -> GroupCommit {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer(pool, rx));
        GroupCommit { queue }
    }

    pub(super) async fn submit(&self, op: Op) -> StoreResult<Created> {
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

async fn run_batch(pool: &SqlitePool, batch: &[Req]) -> StoreResult<Vec<StoreResult<Created>>> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let mut out = Vec::with_capacity(batch.len());
    for req in batch {
        sqlx::query("SAVEPOINT request").execute(&mut *tx).await?;
        let result = match &req.op {
            Op::Create(inst, step) => create_one(&mut tx, inst, step).await,
            Op::Commit { id, version, step } => commit_one(&mut tx, id, *version, step)
                .await
                .map(|()| Created::New),
        };
        if result.is_err() {
            sqlx::query("ROLLBACK TO request").execute(&mut *tx).await?;
        }
        sqlx::query("RELEASE request").execute(&mut *tx).await?;
        out.push(result);
    }
    tx.commit().await?;
    Ok(out)
}
