//! Group commit on PostgreSQL: the instance writes of one replica
//! (`create_instance`, `commit_step`) that are called concurrently queue to
//! a few committer tasks ([`LANES`]), each of which writes everything queued
//! (up to [`MAX_BATCH`]) in ONE transaction, as SQLite's writer thread does
//! (`sqlite_writer.rs`). A batch of one is written as before, alone
//! (`postgres.rs`' `create_alone`, `commit_alone`).
//!
//! Within a batch the common steps (parks armed and withdrawn, attempts,
//! journal, searchable variables) are written with one statement per table
//! for the whole batch, their rows bound as arrays (`unnest`); the
//! statements differ from the shared ones in `queries_steps.rs` only in
//! that, because PostgreSQL pays a round trip and a statement's executor
//! start-up per statement (the SQLite writer runs in process, where a
//! statement per row costs neither, and SQLite has no arrays). Every other
//! step (one that deletes its instance, starts children, wakes a parent,
//! throws, sends requests, ends requests, abandons attempts, or a second
//! step of an instance in the same batch) runs the shared statements
//! (`StepSql::commit`) inside the same transaction. A create that carries
//! an idempotency key runs alone, after the batch (it may wait for another
//! replica's start with the same key to commit).
//!
//! Invariants:
//! - a request's reply is sent only after the transaction holding it
//!   committed (an `Ok` is durable); its answer is its own: a version that
//!   moved answers [`StoreError::Conflict`] (nothing of it is written, the
//!   rest of the batch commits), an instance that is gone `NotFound`;
//! - any database error in a batch (a duplicate, a deadlock, a lost
//!   connection) rolls the whole batch back, and then every request of it
//!   runs alone, in its own transaction, and answers its own result: a
//!   failing request never fails another;
//! - instances are updated in id order (the arrays are sorted), so two
//!   batches of different replicas lock rows in one order; a deadlock the
//!   planner's order still allows is PostgreSQL's to detect, and the batch
//!   then re-runs request by request as above;
//! - the steps of one instance are written in the order they were queued
//!   (the runtime holds an instance's lock while it commits, so it never
//!   queues two at once; a second one in a batch runs after the first).

use super::{commit_alone, create_alone, Steps};
use crate::store::queries_steps::{output_of, INSERT_INSTANCE};
use crate::store::rows::{duplicate_or_db, park_claim_columns};
use crate::store::search_rows;
use crate::store::{Created, NewInstance, StepWrite, StoreError, StoreResult};
use sqlx::{PgPool, Postgres, Transaction};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Mutex};

/// Requests written in one transaction at most.
pub(super) const MAX_BATCH: usize = 256;
/// Committer tasks per store: while one batch waits for its COMMIT (the WAL
/// flush), the next one is being written.
pub(super) const LANES: usize = 2;

/// One instance write.
pub(super) enum Op {
    Create(NewInstance, StepWrite),
    Commit {
        id: String,
        version: i64,
        step: StepWrite,
    },
}

impl Op {
    fn id(&self) -> &str {
        match self {
            Op::Create(inst, _) => &inst.id,
            Op::Commit { id, .. } => id,
        }
    }

    fn step(&self) -> &StepWrite {
        match self {
            Op::Create(_, step) | Op::Commit { step, .. } => step,
        }
    }
}

struct Req {
    op: Op,
    /// A commit answers `Created::New`.
    reply: oneshot::Sender<StoreResult<Created>>,
}

/// The queue to the committer tasks (they end with the last handle).
#[derive(Debug, Clone)]
pub(super) struct Group {
    queue: mpsc::UnboundedSender<Req>,
}

impl std::fmt::Debug for Req {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.op.id())
    }
}

fn stopped() -> StoreError {
    StoreError::Other("the PostgreSQL group commit has stopped".into())
}

impl Group {
    /// Spawns the committer tasks on the current tokio runtime.
    pub(super) fn start(pool: PgPool) -> Group {
        let (queue, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..LANES {
            tokio::spawn(committer(pool.clone(), rx.clone()));
        }
        Group { queue }
    }

    pub(super) async fn submit(&self, op: Op) -> StoreResult<Created> {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Req { op, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn committer(store: PgPool, rx: Arc<Mutex<mpsc::UnboundedReceiver<Req>>>) {
    loop {
        let batch = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            batch
        };
        let results = run(&store, &batch).await;
        for (req, result) in batch.into_iter().zip(results) {
            let _ = req.reply.send(result);
        }
    }
}

/// One request in its own transaction (the path of a batch of one).
async fn alone(pool: &PgPool, op: &Op) -> StoreResult<Created> {
    match op {
        Op::Create(inst, step) => create_alone(pool, inst, step).await,
        Op::Commit { id, version, step } => commit_alone(pool, id, *version, step)
            .await
            .map(|()| Created::New),
    }
}

async fn run(store: &PgPool, batch: &[Req]) -> Vec<StoreResult<Created>> {
    if batch.len() == 1 {
        return vec![alone(store, &batch[0].op).await];
    }
    let mut results: Vec<Option<StoreResult<Created>>> = batch.iter().map(|_| None).collect();
    let (keyed, shared): (Vec<usize>, Vec<usize>) = (0..batch.len()).partition(
        |i| matches!(&batch[*i].op, Op::Create(inst, _) if inst.idempotency_key.is_some()),
    );
    if !shared.is_empty() {
        let ops: Vec<&Op> = shared.iter().map(|i| &batch[*i].op).collect();
        match together(store, &ops).await {
            Ok(answers) => {
                for (i, answer) in shared.iter().zip(answers) {
                    results[*i] = Some(answer);
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, requests = ops.len(), "a group commit failed; its requests run one by one");
                for i in &shared {
                    results[*i] = Some(alone(store, &batch[*i].op).await);
                }
            }
        }
    }
    for i in keyed {
        results[i] = Some(alone(store, &batch[i].op).await);
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(stopped())))
        .collect()
}

/// Whether a step writes only what the array statements write.
fn plain(step: &StepWrite) -> bool {
    !step.delete
        && step.requests.is_empty()
        && step.finished.is_empty()
        && step.delivered.is_empty()
        && step.children.is_empty()
        && step.wake_parent.is_none()
        && step.abandoned.is_empty()
        && step.signals.is_empty()
        // The listing's failure columns change rarely (stats.rs): shared SQL.
        && step.failure.is_none()
}

/// An answer a request gets without aborting the transaction.
fn own_answer(e: &StoreError) -> bool {
    matches!(e, StoreError::Conflict(_) | StoreError::NotFound(_))
}

/// A written step: instance id, tenant, deployment, the step.
type Written<'a> = (&'a str, &'a str, &'a str, &'a StepWrite);

/// Every op in one transaction; `Err` when the transaction failed (nothing
/// of it was kept).
async fn together(pool: &PgPool, ops: &[&Op]) -> StoreResult<Vec<StoreResult<Created>>> {
    crate::store::failpoint::refuse_write()?;
    let mut order: Vec<usize> = (0..ops.len()).collect();
    // Stable: the steps of one instance keep their queue order.
    order.sort_by(|a, b| ops[*a].id().cmp(ops[*b].id()));
    let mut seen = HashSet::new();
    let (mut creates, mut commits, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    for i in order {
        let op = ops[i];
        if !seen.insert(op.id()) || !plain(op.step()) {
            rest.push(i);
        } else if matches!(op, Op::Create(..)) {
            creates.push(i);
        } else {
            commits.push(i);
        }
    }
    let mut answers: Vec<Option<StoreResult<Created>>> = ops.iter().map(|_| None).collect();
    let mut written: Vec<Written> = Vec::new();
    let mut tx = pool.begin().await?;
    let updated = if commits.is_empty() {
        Vec::new()
    } else {
        update_instances(&mut tx, ops, &commits).await?
    };
    if !creates.is_empty() {
        insert_instances(&mut tx, ops, &creates).await?;
        for i in &creates {
            if let Op::Create(inst, step) = ops[*i] {
                written.push((&inst.id, &inst.tenant, &inst.deployment_id, step));
                answers[*i] = Some(Ok(Created::New));
            }
        }
    }
    if !commits.is_empty() {
        let updated: HashMap<&str, (&str, &str)> = updated
            .iter()
            .map(|(id, t, d)| (id.as_str(), (t.as_str(), d.as_str())))
            .collect();
        let mut missed = Vec::new();
        for i in &commits {
            let Op::Commit { id, step, .. } = ops[*i] else {
                continue;
            };
            match updated.get(id.as_str()) {
                Some((tenant, deployment)) => {
                    written.push((id, tenant, deployment, step));
                    answers[*i] = Some(Ok(Created::New));
                }
                None => missed.push(*i),
            }
        }
        if !missed.is_empty() {
            let ids: Vec<&str> = missed.iter().map(|i| ops[*i].id()).collect();
            let existing: Vec<String> =
                sqlx::query_scalar("SELECT id FROM instances WHERE id = ANY($1)")
                    .bind(&ids)
                    .fetch_all(&mut *tx)
                    .await?;
            for i in missed {
                let id = ops[i].id();
                answers[i] = Some(Err(if existing.iter().any(|e| e == id) {
                    StoreError::Conflict(id.to_string())
                } else {
                    StoreError::NotFound(format!("instance {id}"))
                }));
            }
        }
    }
    write_rows(&mut tx, &written, creates.len()).await?;
    for i in rest {
        let answer = match ops[i] {
            Op::Create(inst, step) => {
                Steps::insert_instance(INSERT_INSTANCE, inst, step)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| {
                        duplicate_or_db(e, || format!("instance {} already exists", inst.id))
                    })?;
                Steps::apply_deferring_stats(
                    &mut tx,
                    &inst.id,
                    &inst.tenant,
                    &inst.deployment_id,
                    step,
                )
                .await?;
                super::pg_listen::notify_abandoned(&mut tx, &inst.id, step).await?;
                Ok(Created::New)
            }
            Op::Commit { id, version, step } => {
                match Steps::commit_deferring_stats(&mut tx, id, *version, step).await {
                    Ok(()) => {
                        super::pg_listen::notify_abandoned(&mut tx, id, step).await?;
                        Ok(Created::New)
                    }
                    Err(e) if own_answer(&e) => Err(e),
                    Err(e) => return Err(e),
                }
            }
        };
        answers[i] = Some(answer);
    }
    // The console's counts, once for the batch in key order (stats.rs): two
    // batches never lock count rows in opposite orders.
    let kept = || {
        ops.iter()
            .zip(&answers)
            .filter(|(_, a)| matches!(a, Some(Ok(_))))
            .map(|(op, _)| op.step())
    };
    let deltas = crate::store::stats::collect(kept());
    crate::store::stats::write::<Postgres>(&mut *tx, &deltas).await?;
    super::pg_listen::notify_armed(&mut tx, kept()).await?;
    tx.commit().await?;
    Ok(answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(stopped())))
        .collect())
}

/// New instances without an idempotency key (the shared `INSERT_INSTANCE`'s
/// columns; the key and its fingerprint are NULL).
const INSERT_INSTANCES: &str = "INSERT INTO instances (id, tenant, deployment_id, \
     process_id, state, version, snapshot, idempotency_key, retry_of, started_at, updated_at, \
     ended_at, idempotency_fingerprint, business_key, search_keys) \
     SELECT id, tenant, deployment_id, process_id, state, 1, snapshot, NULL, retry_of, \
     started_at, updated_at, ended_at, NULL, business_key, search_keys \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
     $7::text[], $8::int8[], $9::int8[], $10::int8[], $11::text[], $12::text[]) \
     AS t(id, tenant, deployment_id, process_id, state, snapshot, retry_of, started_at, \
     updated_at, ended_at, business_key, search_keys)";

async fn insert_instances(
    tx: &mut Transaction<'static, Postgres>,
    ops: &[&Op],
    creates: &[usize],
) -> StoreResult<()> {
    let mut c = Columns::default();
    // The search keys' texts, owned here (`Columns` borrows).
    let keys: Vec<Option<String>> = creates
        .iter()
        .map(|i| {
            ops[*i]
                .step()
                .search
                .as_deref()
                .and_then(search_rows::keys_text)
        })
        .collect();
    for (n, i) in creates.iter().enumerate() {
        if let Op::Create(inst, step) = ops[*i] {
            c.text[0].push(Some(&inst.id));
            c.text[1].push(Some(&inst.tenant));
            c.text[2].push(Some(&inst.deployment_id));
            c.text[3].push(Some(&inst.process_id));
            c.text[4].push(Some(&step.state));
            c.text[5].push(Some(&step.snapshot));
            c.text[6].push(inst.retry_of.as_deref());
            c.int[0].push(Some(inst.started_at));
            c.int[1].push(Some(step.updated_at));
            c.int[2].push(step.ended_at);
            c.text[7].push(inst.business_key.as_deref());
            c.text[8].push(keys[n].as_deref());
        }
    }
    sqlx::query(INSERT_INSTANCES)
        .bind(&c.text[0])
        .bind(&c.text[1])
        .bind(&c.text[2])
        .bind(&c.text[3])
        .bind(&c.text[4])
        .bind(&c.text[5])
        .bind(&c.text[6])
        .bind(&c.int[0])
        .bind(&c.int[1])
        .bind(&c.int[2])
        .bind(&c.text[7])
        .bind(&c.text[8])
        .execute(&mut **tx)
        .await
        .map_err(|e| duplicate_or_db(e, || "an instance of the batch already exists".into()))?;
    Ok(())
}

/// The version-checked update of `queries_steps::UPDATE_INSTANCE`, for
/// every instance of a batch → the (id, tenant, deployment_id) updated.
const UPDATE_INSTANCES: &str = "UPDATE instances AS i SET snapshot = u.snapshot, \
     state = u.state, version = i.version + 1, updated_at = u.updated_at, \
     ended_at = COALESCE(u.ended_at, i.ended_at) \
     FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::int8[], $6::int8[]) \
     AS u(id, version, snapshot, state, updated_at, ended_at) \
     WHERE i.id = u.id AND i.version = u.version \
     RETURNING i.id, i.tenant, i.deployment_id";

async fn update_instances(
    tx: &mut Transaction<'static, Postgres>,
    ops: &[&Op],
    commits: &[usize],
) -> StoreResult<Vec<(String, String, String)>> {
    let mut c = Columns::default();
    for i in commits {
        if let Op::Commit { id, version, step } = ops[*i] {
            c.text[0].push(Some(id));
            c.int[0].push(Some(*version));
            c.text[1].push(Some(&step.snapshot));
            c.text[2].push(Some(&step.state));
            c.int[1].push(Some(step.updated_at));
            c.int[2].push(step.ended_at);
        }
    }
    Ok(sqlx::query_as(UPDATE_INSTANCES)
        .bind(&c.text[0])
        .bind(&c.int[0])
        .bind(&c.text[1])
        .bind(&c.text[2])
        .bind(&c.int[1])
        .bind(&c.int[2])
        .fetch_all(&mut **tx)
        .await?)
}

/// Array columns of one statement.
#[derive(Default)]
struct Columns<'a> {
    text: [Vec<Option<&'a str>>; 12],
    int: [Vec<Option<i64>>; 6],
}

const DELETE_ALL_PARKS: &str = "DELETE FROM parks WHERE instance_id = ANY($1)";

const DELETE_PARKS: &str = "DELETE FROM parks AS p \
     USING unnest($1::text[], $2::int8[]) AS w(instance_id, seq) \
     WHERE p.instance_id = w.instance_id AND p.seq = w.seq";

/// `queries_steps::INSERT_PARK` for a batch.
const INSERT_PARKS: &str = "INSERT INTO parks (instance_id, seq, kind, tenant, \
     deployment_id, due_at, message_name, correlation_key, claimed_by, claimed_until) \
     SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[], \
     $6::int8[], $7::text[], $8::text[], $9::text[], $10::int8[])";

/// `queries_steps::INSERT_ATTEMPT` for a batch (a replay is a no-op).
const INSERT_ATTEMPTS: &str = "INSERT INTO attempts (instance_id, token, node, \
     attempt, started_at, ended_at, outcome, code, message, stderr, logs, class, calls, \
     input, output, item_node, item_index) \
     SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[], \
     $6::int8[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], \
     $13::text[], $14::text[], $15::text[], $16::text[], $17::int8[]) \
     ON CONFLICT (instance_id, token, node, attempt) DO NOTHING";

/// `queries_steps::INSERT_JOURNAL` for a batch (a replay is a no-op).
const INSERT_JOURNALS: &str = "INSERT INTO journal (instance_id, seq, at, kind, node, data) \
     SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[], $5::text[], \
     $6::text[]) ON CONFLICT (instance_id, seq) DO NOTHING";

/// `search_rows::SEARCH_KEYS_OF` for a batch → (id, search_keys).
const SEARCH_KEYS_OF: &str = "SELECT id, search_keys FROM instances WHERE id = ANY($1)";

/// `search_rows::SET_SEARCH_KEYS` for a batch.
const SET_SEARCH_KEYS: &str = "UPDATE instances AS i SET search_keys = u.keys \
     FROM unnest($1::text[], $2::text[]) AS u(id, keys) WHERE i.id = u.id";

/// `search_rows::INSERT_SEARCH_VAR` for a batch.
const INSERT_SEARCH_VARS: &str = "INSERT INTO instance_vars (name, value, tenant, instance_id) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) \
     ON CONFLICT DO NOTHING";

/// The rows of the batch's plain steps, in `StepSql::apply_rows`' order:
/// every park withdrawn, the parks withdrawn, the parks armed, attempts,
/// journal, searchable variables. The first `fresh` of `written` are new
/// instances (their rows inserted with their search keys).
async fn write_rows(
    tx: &mut Transaction<'static, Postgres>,
    written: &[Written<'_>],
    fresh: usize,
) -> StoreResult<()> {
    let all: Vec<&str> = written
        .iter()
        .filter(|w| w.3.withdraw_all)
        .map(|w| w.0)
        .collect();
    if !all.is_empty() {
        sqlx::query(DELETE_ALL_PARKS)
            .bind(&all)
            .execute(&mut **tx)
            .await?;
    }
    let (mut ids, mut seqs): (Vec<&str>, Vec<i64>) = (Vec::new(), Vec::new());
    for (id, _, _, step) in written {
        for seq in &step.withdraw {
            ids.push(id);
            seqs.push(*seq);
        }
    }
    if !ids.is_empty() {
        sqlx::query(DELETE_PARKS)
            .bind(&ids)
            .bind(&seqs)
            .execute(&mut **tx)
            .await?;
    }
    let mut c = Columns::default();
    for (id, tenant, deployment, step) in written {
        for p in &step.arm {
            let (claimed_by, claimed_until) = park_claim_columns(p);
            c.text[0].push(Some(id));
            c.int[0].push(Some(p.seq));
            c.text[1].push(Some(&p.kind));
            c.text[2].push(Some(tenant));
            c.text[3].push(Some(deployment));
            c.int[1].push(p.due_at);
            c.text[4].push(p.message_name.as_deref());
            c.text[5].push(p.correlation_key.as_deref());
            c.text[6].push(claimed_by);
            c.int[2].push(claimed_until);
        }
    }
    if !c.text[0].is_empty() {
        sqlx::query(INSERT_PARKS)
            .bind(&c.text[0])
            .bind(&c.int[0])
            .bind(&c.text[1])
            .bind(&c.text[2])
            .bind(&c.text[3])
            .bind(&c.int[1])
            .bind(&c.text[4])
            .bind(&c.text[5])
            .bind(&c.text[6])
            .bind(&c.int[2])
            .execute(&mut **tx)
            .await
            .map_err(|e| duplicate_or_db(e, || "a park of the batch is already armed".into()))?;
    }
    let mut c = Columns::default();
    for (id, _, _, step) in written {
        for a in &step.attempts {
            let out = output_of(step, a);
            c.text[0].push(Some(id));
            c.int[0].push(Some(a.token));
            c.text[1].push(Some(&a.node));
            c.int[1].push(Some(a.attempt));
            c.int[2].push(Some(a.started_at));
            c.int[3].push(Some(a.ended_at));
            c.text[2].push(Some(&a.outcome));
            c.text[3].push(a.code.as_deref());
            c.text[4].push(a.message.as_deref());
            c.text[5].push(out.and_then(|o| o.stderr.as_deref()));
            c.text[6].push(out.and_then(|o| o.logs.as_deref()));
            c.text[7].push(a.class.as_deref());
            c.text[8].push(out.and_then(|o| o.calls.as_deref()));
            c.text[9].push(out.and_then(|o| o.input.as_deref()));
            c.text[10].push(out.and_then(|o| o.output.as_deref()));
            c.text[11].push(a.item_node.as_deref());
            c.int[4].push(a.item_index);
        }
    }
    if !c.text[0].is_empty() {
        sqlx::query(INSERT_ATTEMPTS)
            .bind(&c.text[0])
            .bind(&c.int[0])
            .bind(&c.text[1])
            .bind(&c.int[1])
            .bind(&c.int[2])
            .bind(&c.int[3])
            .bind(&c.text[2])
            .bind(&c.text[3])
            .bind(&c.text[4])
            .bind(&c.text[5])
            .bind(&c.text[6])
            .bind(&c.text[7])
            .bind(&c.text[8])
            .bind(&c.text[9])
            .bind(&c.text[10])
            .bind(&c.text[11])
            .bind(&c.int[4])
            .execute(&mut **tx)
            .await?;
    }
    let mut c = Columns::default();
    for (id, _, _, step) in written {
        for j in &step.journal {
            c.text[0].push(Some(id));
            c.int[0].push(Some(j.seq));
            c.int[1].push(Some(j.at));
            c.text[1].push(Some(&j.kind));
            c.text[2].push(j.node.as_deref());
            c.text[3].push(Some(&j.data));
        }
    }
    if !c.text[0].is_empty() {
        sqlx::query(INSERT_JOURNALS)
            .bind(&c.text[0])
            .bind(&c.int[0])
            .bind(&c.int[1])
            .bind(&c.text[1])
            .bind(&c.text[2])
            .bind(&c.text[3])
            .execute(&mut **tx)
            .await?;
    }
    // Steps that changed an existing instance's variables: the rows its
    // row names go, the row names the new ones (search_rows.rs).
    let replaced: Vec<&Written> = written[fresh..]
        .iter()
        .filter(|w| w.3.search.is_some())
        .collect();
    if !replaced.is_empty() {
        let ids: Vec<&str> = replaced.iter().map(|w| w.0).collect();
        let stored: HashMap<String, Option<String>> = sqlx::query_as(SEARCH_KEYS_OF)
            .bind(&ids)
            .fetch_all(&mut **tx)
            .await?
            .into_iter()
            .collect();
        let mut gone = search_rows::Keys::default();
        for (id, tenant, _, _) in &replaced {
            gone.add(id, tenant, stored.get(*id).and_then(Option::as_deref))?;
        }
        search_rows::delete_unnest(tx, &gone).await?;
        let keys: Vec<Option<String>> = replaced
            .iter()
            .map(|w| w.3.search.as_deref().and_then(search_rows::keys_text))
            .collect();
        sqlx::query(SET_SEARCH_KEYS)
            .bind(&ids)
            .bind(&keys)
            .execute(&mut **tx)
            .await?;
    }
    let mut c = Columns::default();
    for (id, tenant, _, step) in written {
        for v in step.search.iter().flatten() {
            c.text[0].push(Some(&v.name));
            c.text[1].push(Some(&v.value));
            c.text[2].push(Some(tenant));
            c.text[3].push(Some(id));
        }
    }
    if !c.text[0].is_empty() {
        sqlx::query(INSERT_SEARCH_VARS)
            .bind(&c.text[0])
            .bind(&c.text[1])
            .bind(&c.text[2])
            .bind(&c.text[3])
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
