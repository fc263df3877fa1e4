//! The SQLite writer thread (file databases): instance writes
//! (`create_instance`, `commit_step`, `commit_steps`), park claims
//! (`claim_due`, `release_claim`) and the outbox's frequent writes
//! (`outbox_write.rs`) run on one dedicated `std::thread` that owns
//! a `rusqlite` connection to the store's file and calls SQLite synchronously,
//! each of its statements prepared once and held (`sqlite_held.rs`).
//!
//! A caller sends its request on a channel and awaits a oneshot reply; the
//! thread blocks on the channel, drains what is queued (up to [`MAX_BATCH`]),
//! runs ONE `BEGIN IMMEDIATE` transaction holding them all, commits, then
//! replies. A write thus costs one hand-off in, the
//! SQLite work, the commit's fsync and one hand-off out (no per-statement
//! round trips to a connection worker).
//!
//! Invariants:
//! - a request's reply is sent only after the transaction holding it
//!   committed: an `Ok` is durable (as durable as the `synchronous` mode);
//! - requests are isolated: one that fails (a version conflict, a duplicate,
//!   a missing instance) answers its own error (`Conflict` / `NotFound` /
//!   `Duplicate`) and nothing of it is kept; the others in the batch still
//!   commit. A batch runs without savepoints first; if a request fails, that
//!   pass is rolled back and the batch runs again with a savepoint per
//!   request. If the transaction itself fails (`BEGIN`, `COMMIT`, a
//!   savepoint), every request of the batch answers an error and nothing of
//!   it is kept;
//! - a caller alone pays one transaction: batching only happens when
//!   requests queue up while a commit is in progress;
//! - requests run in the order they were sent, so two claims in one batch
//!   never hand out the same park, and a claim sees every step committed
//!   before it was sent;
//! - the connection has the pragmas of the sqlx pools (WAL, the
//!   `synchronous` mode of the options, `busy_timeout`, `foreign_keys=ON`):
//!   the other writes (deployments, tenancy, leases, sweep, schedules) stay
//!   on the sqlx write pool and meet this thread only through SQLite's file
//!   lock, each side waiting up to the busy timeout (both take the lock with
//!   `BEGIN IMMEDIATE`, so neither can deadlock the other); it also keeps
//!   its temporary files in memory (`temp_store = MEMORY`): a savepoint's
//!   sub-journal otherwise spills to a temp file once it holds 64 KiB, and
//!   from then on costs a `pwrite` per page (a quarter of this thread's CPU
//!   in a burst of timer fires);
//! - the thread ends on [`Writer::close`] (after the requests queued before
//!   it) or when every handle is dropped; a request after that answers
//!   "the SQLite writer stopped". A panic inside a batch is caught: the
//!   batch answers an error, the transaction is rolled back, the thread
//!   goes on.

use super::children;
use super::outbox_write::{OutboxDone, OutboxOp};
use super::queries::Claim;
use super::queries_steps as sql;
use super::rows::{park_claim_columns, sort_claimed};
use super::sqlite::Synchronous;
use super::sqlite_held::Held;
use super::{Created, NewInstance, NewStart, ParkRecord, StepWrite, StoreError, StoreResult};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::oneshot;

/// The most requests one transaction carries.
pub(super) const MAX_BATCH: usize = 512;

/// Prepared statements rusqlite's cache keeps for the helpers that take the
/// connection itself (the outbox's, the signals', the counts'); this file's
/// own statements are held by [`Held`].
const STATEMENT_CACHE: usize = 64;

/// `$1` instance id, `$2` seq: one withdrawn park. The writer deletes seq by
/// seq with this one cached statement (a call into SQLite each, no round
/// trip), where the sqlx paths send one `IN (..)` list.
const DELETE_PARK: &str = "DELETE FROM parks WHERE instance_id = $1 AND seq = $2";

/// `$1` owner, `$2` claimed_until, `$3` now, `$4` limit → the claimed parks
/// (`rows::PARK_COLUMNS`, in no particular order). SQLite only (used by
/// both its write paths): one writer at a time needs no row locks, where
/// PostgreSQL's claim skips the rows other replicas hold (`postgres.rs`).
pub(super) const CLAIM_DUE: &str = "UPDATE parks SET claimed_by = $1, claimed_until = $2 \
     WHERE (instance_id, seq) IN ( \
       SELECT instance_id, seq FROM parks \
       WHERE due_at IS NOT NULL AND due_at <= $3 \
         AND (claimed_until IS NULL OR claimed_until <= $3) \
       ORDER BY due_at, instance_id, seq LIMIT $4) \
     RETURNING instance_id, seq, tenant, deployment_id, kind, due_at, message_name, \
       correlation_key";

/// One write request, as both SQLite write paths take it. A step stays in
/// the box it came in (a `StepWrite` is 544 bytes): the request is moved into
/// the writer's queue, out of it, into the answer and out again, and comes
/// back to the caller whole.
#[derive(Debug)]
pub(super) enum Op {
    Create(Box<NewStart>),
    Commit {
        id: String,
        version: i64,
        step: Box<StepWrite>,
    },
    /// Several steps, all or nothing (one savepoint for them all).
    CommitAll(Vec<(String, i64, StepWrite)>),
    Claim(Claim),
    /// One of the outbox's frequent writes (outbox_write.rs).
    Outbox(OutboxOp),
    Release {
        instance_id: String,
        seq: i64,
        owner: String,
    },
}

/// What a request did.
#[derive(Debug)]
pub(super) enum Done {
    Created(Created),
    Claimed(Vec<ParkRecord>),
    Outbox(OutboxDone),
    Written,
}

impl Done {
    pub(super) fn created(self) -> StoreResult<Created> {
        match self {
            Done::Created(c) => Ok(c),
            other => Err(unexpected(other)),
        }
    }
    pub(super) fn claimed(self) -> StoreResult<Vec<ParkRecord>> {
        match self {
            Done::Claimed(p) => Ok(p),
            other => Err(unexpected(other)),
        }
    }
    pub(super) fn outbox(self) -> StoreResult<OutboxDone> {
        match self {
            Done::Outbox(o) => Ok(o),
            other => Err(unexpected(other)),
        }
    }
}

fn unexpected(done: Done) -> StoreError {
    StoreError::Other(format!("the SQLite writer answered {done:?} out of turn"))
}

pub(super) fn stopped() -> StoreError {
    StoreError::Other("the SQLite writer stopped".to_string())
}

/// The answer, and the request itself handed back: its caller drops it (or
/// keeps what it carries, as a start's create does), so this thread,
/// every write's bottleneck, never frees what the callers' threads allocated.
type Reply = oneshot::Sender<(StoreResult<Done>, Op)>;
/// The receiving end of a [`Reply`].
pub(super) type Answer = oneshot::Receiver<(StoreResult<Done>, Op)>;

enum Msg {
    Run(Op, Reply),
    Close(oneshot::Sender<()>),
}

/// A handle on the writer thread (cheap to clone).
#[derive(Debug, Clone)]
pub(super) struct Writer {
    queue: mpsc::Sender<Msg>,
}

impl Writer {
    /// Opens a connection to the (migrated) database file at `path` and
    /// starts the thread that owns it.
    pub(super) fn start(
        path: &Path,
        synchronous: Synchronous,
        busy_timeout: Duration,
    ) -> StoreResult<Writer> {
        let conn = open(path, synchronous, busy_timeout)?;
        let (queue, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("sutra-sqlite-writer".to_string())
            .spawn(move || run(conn, rx))
            .map_err(|e| StoreError::Other(format!("cannot start the SQLite writer: {e}")))?;
        Ok(Writer { queue })
    }

    /// Runs `op` in the next transaction; answers once that committed.
    pub(super) async fn submit(&self, op: Op) -> StoreResult<Done> {
        match self.send(op) {
            Ok(answer) => Self::answer(answer).await.0,
            Err(_) => Err(stopped()),
        }
    }

    /// Queues `op` (synchronously: a future that awaits only the answer
    /// holds no request); `Err(op)` if the thread is gone (boxed: the rare case).
    pub(super) fn send(&self, op: Op) -> Result<Answer, Box<Op>> {
        let (reply, answer) = oneshot::channel();
        match self.queue.send(Msg::Run(op, reply)) {
            Ok(()) => Ok(answer),
            Err(mpsc::SendError(Msg::Run(op, _))) => Err(Box::new(op)),
            // (Only requests are sent here.)
            Err(mpsc::SendError(Msg::Close(_))) => Ok(answer),
        }
    }

    /// The answer to a request [`Self::send`] queued, and the request.
    pub(super) async fn answer(answer: Answer) -> (StoreResult<Done>, Option<Op>) {
        match answer.await {
            Ok((done, op)) => (done, Some(op)),
            Err(_) => (Err(stopped()), None),
        }
    }

    /// Stops the thread after the requests queued so far and closes its
    /// connection; returns once it is closed.
    pub(super) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.queue.send(Msg::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

/// The connection, with the flags and pragmas sqlx gives its own.
fn open(path: &Path, synchronous: Synchronous, busy_timeout: Duration) -> StoreResult<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_PRIVATE_CACHE,
    )?;
    conn.busy_timeout(busy_timeout)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Other(format!(
            "the SQLite writer could not switch {} to WAL (journal_mode {mode})",
            path.display()
        )));
    }
    conn.execute_batch(match synchronous {
        Synchronous::Full => "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
        Synchronous::Normal => "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
    })?;
    conn.execute_batch("PRAGMA temp_store = MEMORY;")?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

fn run(conn: Connection, rx: mpsc::Receiver<Msg>) {
    let held = Held::new(&conn);
    while let Ok(first) = rx.recv() {
        let mut batch = Vec::new();
        let mut close = None;
        match first {
            Msg::Run(op, reply) => batch.push((op, reply)),
            Msg::Close(done) => close = Some(done),
        }
        while close.is_none() && batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Msg::Run(op, reply)) => batch.push((op, reply)),
                Ok(Msg::Close(done)) => close = Some(done),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            execute(&held, batch);
        }
        if let Some(done) = close {
            drop(held);
            drop(conn);
            let _ = done.send(());
            return;
        }
    }
}

/// Runs one batch and answers every request of it.
fn execute(conn: &Held, batch: Vec<(Op, Reply)>) {
    let (ops, replies): (Vec<Op>, Vec<Reply>) = batch.into_iter().unzip();
    let outcome = catch_unwind(AssertUnwindSafe(|| run_batch(conn, &ops)));
    let failure = match outcome {
        Ok(Ok(results)) => {
            for ((reply, result), op) in replies.into_iter().zip(results).zip(ops) {
                let _ = reply.send((result, op));
            }
            return;
        }
        Ok(Err(e)) => format!("the SQLite write transaction failed: {e}"),
        Err(_) => "the SQLite writer panicked in a transaction".to_string(),
    };
    if !conn.is_autocommit() {
        // Nothing of the batch is kept; if even the rollback fails, the next
        // BEGIN fails and reports it.
        let _ = conn.execute_batch("ROLLBACK");
    }
    for (reply, op) in replies.into_iter().zip(ops) {
        let _ = reply.send((Err(StoreError::Other(failure.clone())), op));
    }
}

fn exec(conn: &Held, statement: &'static str) -> rusqlite::Result<()> {
    conn.with(statement, |s| s.execute([]))?;
    Ok(())
}

/// Runs a batch in one transaction. Optimistically first, without
/// savepoints (each copies every page a request touches): almost every
/// batch succeeds whole. If a request fails, nothing of that pass is kept
/// and the batch runs again with a savepoint per request, so the failed one
/// is rolled back alone and the others commit.
///
/// The count deltas of every step the transaction applied are summed and
/// written once, just before its commit (stats.rs): a batch of a thousand
/// steps of one deployment touches a few dozen count rows, not thousands.
fn run_batch(conn: &Held, ops: &[Op]) -> rusqlite::Result<Vec<StoreResult<Done>>> {
    exec(conn, "BEGIN IMMEDIATE")?;
    let mut out = Vec::with_capacity(ops.len());
    let mut applied = Vec::with_capacity(ops.len());
    for op in ops {
        match apply(conn, op, &mut applied) {
            Ok(done) => out.push(Ok(done)),
            Err(e) => {
                // (SQLite may have rolled back already, e.g. on a full disk.)
                if !conn.is_autocommit() {
                    exec(conn, "ROLLBACK")?;
                }
                if ops.len() == 1 {
                    // Alone in its transaction: rolling that back isolated it.
                    return Ok(vec![Err(e)]);
                }
                return run_isolated(conn, ops);
            }
        }
    }
    // (A failure here fails the whole transaction: `execute` rolls it back.)
    write_counts(conn, &applied)?;
    exec(conn, "COMMIT")?;
    Ok(out)
}

/// Runs a batch in one transaction with each request in its own savepoint
/// (the counts of the requests that stay written once at the end, as
/// [`run_batch`]).
fn run_isolated(conn: &Held, ops: &[Op]) -> rusqlite::Result<Vec<StoreResult<Done>>> {
    exec(conn, "BEGIN IMMEDIATE")?;
    let mut out = Vec::with_capacity(ops.len());
    let mut applied = Vec::with_capacity(ops.len());
    for op in ops {
        exec(conn, "SAVEPOINT request")?;
        let mut mine = Vec::new();
        let result = apply(conn, op, &mut mine);
        if result.is_err() {
            exec(conn, "ROLLBACK TO request")?;
        } else {
            applied.extend(mine);
        }
        exec(conn, "RELEASE request")?;
        out.push(result);
    }
    // (A failure here fails the whole transaction: `execute` rolls it back.)
    write_counts(conn, &applied)?;
    exec(conn, "COMMIT")?;
    Ok(out)
}

/// The count deltas of `steps` (and of the children they start), summed.
fn write_counts(conn: &Held, steps: &[&StepWrite]) -> rusqlite::Result<()> {
    super::stats::write_rusqlite(conn, &super::stats::collect(steps.iter().copied()))
}

/// Runs `op`; every step it applied goes to `applied` (for its counts).
fn apply<'a>(conn: &Held, op: &'a Op, applied: &mut Vec<&'a StepWrite>) -> StoreResult<Done> {
    match op {
        Op::Create(start) => {
            let created = create_one(conn, &start.instance, &start.step)?;
            if matches!(created, Created::New) {
                applied.push(&start.step);
            }
            Ok(Done::Created(created))
        }
        Op::Commit { id, version, step } => {
            commit_one(conn, id, *version, step)?;
            applied.push(step);
            Ok(Done::Written)
        }
        Op::CommitAll(steps) => {
            for (id, version, step) in steps {
                commit_one(conn, id, *version, step)?;
                applied.push(step);
            }
            Ok(Done::Written)
        }
        Op::Claim(claim) => claim_due(conn, claim).map(Done::Claimed),
        Op::Outbox(op) => super::outbox_write::run_rusqlite(conn, op).map(Done::Outbox),
        Op::Release {
            instance_id,
            seq,
            owner,
        } => {
            conn.with(sql::RELEASE_CLAIM, |s| {
                s.execute(params![instance_id, seq, owner])
            })?;
            Ok(Done::Written)
        }
    }
}

/// A unique or primary-key violation becomes [`StoreError::Duplicate`]
/// (described by `what`), as `rows::duplicate_or_db` does for sqlx.
fn duplicate_or_db(e: rusqlite::Error, what: impl FnOnce() -> String) -> StoreError {
    use rusqlite::ffi::{SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE};
    match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == SQLITE_CONSTRAINT_UNIQUE
                || f.extended_code == SQLITE_CONSTRAINT_PRIMARYKEY =>
        {
            StoreError::Duplicate(what())
        }
        _ => StoreError::Sqlite(e),
    }
}

/// Inserts an instance and applies its first step. A reused idempotency key
/// writes nothing and answers `Existing`.
fn create_one(conn: &Held, inst: &NewInstance, step: &StepWrite) -> StoreResult<Created> {
    if let Some(key) = &inst.idempotency_key {
        let existing: Option<String> = conn.with(sql::INSTANCE_BY_KEY, |s| {
            s.query_row(params![inst.tenant, key, inst.started_at], |r| r.get(0))
                .optional()
        })?;
        if let Some(id) = existing {
            return Ok(Created::Existing(id));
        }
    }
    insert_instance(conn, inst, step)?;
    apply_step(
        conn,
        &inst.id,
        &inst.tenant,
        &inst.deployment_id,
        step,
        true,
    )?;
    Ok(Created::New)
}

/// The instance row of a new instance (version 1).
fn insert_instance(conn: &Held, inst: &NewInstance, step: &StepWrite) -> StoreResult<()> {
    conn.with(sql::INSERT_INSTANCE, |s| {
        s.execute(params![
            inst.id,
            inst.tenant,
            inst.deployment_id,
            inst.process_id,
            step.state,
            step.snapshot,
            inst.idempotency_key,
            inst.retry_of,
            inst.started_at,
            step.updated_at,
            step.ended_at,
            inst.idempotency_fingerprint,
            inst.business_key,
            step.search
                .as_deref()
                .and_then(super::search_rows::keys_text),
        ])
    })
    .map_err(|e| duplicate_or_db(e, || format!("instance {} already exists", inst.id)))?;
    Ok(())
}

/// Updates the instance row if it is at `expected_version`, then applies the
/// rest of the step. `Conflict` if the version moved, `NotFound` if the row is gone.
///
/// The row is read, then written, rather than updated with `RETURNING` as
/// the sqlx path does (`queries_steps::UPDATE_INSTANCE`): SQLite buffers
/// RETURNING rows in a table it builds on every execution, dearer than this
/// primary-key read (benches/README "Session 22"). Nothing moves the row
/// between the two: the writer's transaction holds the database's write lock.
fn commit_one(conn: &Held, id: &str, expected_version: i64, step: &StepWrite) -> StoreResult<()> {
    let row: Option<(String, String, i64)> = conn.with(sql::INSTANCE_OWNER, |s| {
        s.query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()
    })?;
    match row {
        Some((tenant, deployment_id, version)) if version == expected_version => {
            conn.with(sql::WRITE_INSTANCE, |s| {
                s.execute(params![
                    step.snapshot,
                    step.state,
                    step.updated_at,
                    step.ended_at,
                    id,
                ])
            })?;
            apply_step(conn, id, &tenant, &deployment_id, step, false)
        }
        Some(_) => Err(StoreError::Conflict(id.to_string())),
        None => Err(StoreError::NotFound(format!("instance {id}"))),
    }
}

/// Everything of a step but the instance row itself (as
/// `queries_steps::StepSql::apply`): its rows, then the parent's wake-up of
/// a child's final step and the children the step starts (children.rs).
/// `fresh`: the instance row was inserted in this transaction (with the
/// step's search keys).
fn apply_step(
    conn: &Held,
    id: &str,
    tenant: &str,
    deployment_id: &str,
    step: &StepWrite,
    fresh: bool,
) -> StoreResult<()> {
    super::outbox::finish_requests_rusqlite(conn, step)?;
    apply_rows(conn, id, tenant, deployment_id, step, fresh)?;
    if let Some(w) = &step.wake_parent {
        wake_parent(conn, w)?;
    }
    for c in &step.children {
        insert_instance(conn, &c.instance, &c.step)?;
        conn.with(children::SET_PARENT, |s| {
            s.execute(params![c.parent_id, c.parent_park, c.instance.id])
        })?;
        let child = &c.instance;
        apply_rows(
            conn,
            &child.id,
            &child.tenant,
            &child.deployment_id,
            &c.step,
            true,
        )?;
        if let Some(w) = &c.step.wake_parent {
            wake_parent(conn, w)?;
        }
    }
    // Its count deltas (and its children's) are the transaction's to
    // write, once for all its steps ([`write_counts`]).
    Ok(())
}

/// A child's end on its parent's child park (if the park still exists).
fn wake_parent(conn: &Held, w: &children::ChildEnd) -> StoreResult<()> {
    let (claimed_by, claimed_until) = children::wake_claim(w);
    conn.with(children::WAKE_PARENT, |s| {
        s.execute(params![
            w.due_at,
            w.payload,
            claimed_by,
            claimed_until,
            w.parent_id,
            w.park_seq
        ])
    })?;
    Ok(())
}

/// The rows of one instance's step: parks, attempts, journal, searchable
/// variables, outbox requests, or the deletion of the whole instance
/// (`fresh`: as [`apply_step`]).
fn apply_rows(
    conn: &Held,
    id: &str,
    tenant: &str,
    deployment_id: &str,
    step: &StepWrite,
    fresh: bool,
) -> StoreResult<()> {
    if step.delete {
        conn.with(sql::KEEP_KEY, |s| {
            s.execute(params![step.key_window_ms, id])
        })?;
        super::search_rows::delete_rusqlite(conn, id, tenant)?;
        for statement in sql::DELETE_INSTANCE_ALL {
            conn.with(statement, |s| s.execute(params![id]))?;
        }
        return Ok(());
    }
    if step.withdraw_all {
        conn.with(sql::DELETE_PARKS_OF, |s| s.execute(params![id]))?;
    }
    if !step.withdraw.is_empty() {
        conn.with(DELETE_PARK, |delete| {
            for seq in &step.withdraw {
                delete.execute(params![id, seq])?;
            }
            Ok(())
        })?;
    }
    if !step.arm.is_empty() {
        // The park whose insert failed, if one did (not the statement's prepare).
        let mut failed = None;
        conn.with(sql::INSERT_PARK, |insert| {
            for p in &step.arm {
                let (claimed_by, claimed_until) = park_claim_columns(p);
                insert
                    .execute(params![
                        id,
                        p.seq,
                        p.kind,
                        tenant,
                        deployment_id,
                        p.due_at,
                        p.message_name,
                        p.correlation_key,
                        claimed_by,
                        claimed_until,
                    ])
                    .inspect_err(|_| failed = Some(p.seq))?;
            }
            Ok(())
        })
        .map_err(|e| match failed {
            Some(seq) => duplicate_or_db(e, || format!("park {id}/{seq} is already armed")),
            None => StoreError::from(e),
        })?;
    }
    if !step.attempts.is_empty() {
        conn.with(sql::INSERT_ATTEMPT, |insert| {
            for a in &step.attempts {
                let out = sql::output_of(step, a);
                insert.execute(params![
                    id,
                    a.token,
                    a.node,
                    a.attempt,
                    a.started_at,
                    a.ended_at,
                    a.outcome,
                    a.code,
                    a.message,
                    out.and_then(|o| o.stderr.as_deref()),
                    out.and_then(|o| o.logs.as_deref()),
                    a.class,
                    out.and_then(|o| o.calls.as_deref()),
                    out.and_then(|o| o.input.as_deref()),
                    out.and_then(|o| o.output.as_deref()),
                    a.item_node,
                    a.item_index,
                ])?;
            }
            Ok(())
        })?;
    }
    if !step.journal.is_empty() {
        conn.with(sql::INSERT_JOURNAL, |insert| {
            for j in &step.journal {
                insert.execute(params![id, j.seq, j.at, j.kind, j.node, j.data])?;
            }
            Ok(())
        })?;
    }
    if let Some(vars) = &step.search {
        super::search_rows::write_rusqlite(conn, id, tenant, vars, fresh)?;
    }
    // The error code and failed node the listing filters on (stats.rs).
    if let Some(f) = &step.failure {
        conn.with(super::stats::SET_FAILURE, |s| {
            s.execute(params![f.error_code, f.failed_node, id])
        })?;
    }
    // Thrown signals and messages with their deliveries (signals.rs).
    super::signals::write_signals_rusqlite(conn, tenant, &step.signals)?;
    // Channel-call requests: the transactional outbox (outbox.rs).
    super::outbox::write_requests_rusqlite(conn, id, tenant, deployment_id, &step.requests)
}

/// Claims up to `limit` parks due at `now` (see `Store::claim_due`).
fn claim_due(conn: &Held, claim: &Claim) -> StoreResult<Vec<ParkRecord>> {
    let binds = params![claim.owner, claim.until, claim.now, claim.limit];
    let rows = conn.with(CLAIM_DUE, |statement| {
        statement
            .query_map(binds, |r| {
                Ok(ParkRecord {
                    instance_id: r.get(0)?,
                    seq: r.get(1)?,
                    tenant: r.get(2)?,
                    deployment_id: r.get(3)?,
                    kind: r.get(4)?,
                    due_at: r.get(5)?,
                    message_name: r.get(6)?,
                    correlation_key: r.get(7)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(sort_claimed(rows))
}

#[cfg(test)]
mod tests {
    use super::super::migrations::{migrations, Dialect};
    use super::super::queries_steps as sql;
    use super::super::rows::PARK_COLUMNS;
    use super::super::search_rows;
    use super::{CLAIM_DUE, DELETE_PARK};
    use rusqlite::Connection;

    /// Every statement this thread binds by position.
    const STATEMENTS: [&str; 21] = [
        sql::KEEP_KEY,
        super::children::SET_PARENT,
        super::children::WAKE_PARENT,
        sql::INSTANCE_BY_KEY,
        sql::INSERT_INSTANCE,
        sql::WRITE_INSTANCE,
        sql::INSTANCE_OWNER,
        sql::DELETE_INSTANCE_ALL[0],
        sql::DELETE_INSTANCE_ALL[3],
        sql::DELETE_PARKS_OF,
        sql::INSERT_PARK,
        sql::INSERT_ATTEMPT,
        sql::INSERT_JOURNAL,
        search_rows::INSERT_SEARCH_VAR,
        search_rows::DELETE_SEARCH_VAR,
        search_rows::SEARCH_KEYS_OF,
        search_rows::SET_SEARCH_KEYS,
        sql::RELEASE_CLAIM,
        super::super::stats::SET_FAILURE,
        DELETE_PARK,
        CLAIM_DUE,
    ];

    fn migrated() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        for m in migrations(Dialect::Sqlite).unwrap() {
            conn.execute_batch(&m.sql).unwrap();
        }
        conn
    }

    #[test]
    fn positional_parameters_are_numbered_as_written() {
        // rusqlite binds the n-th value to parameter index n; SQLite gives a
        // `$N` parameter the next index at its first use. They agree only if
        // `$1`, `$2`, ... are first used in that order.
        let conn = migrated();
        for statement in STATEMENTS {
            let stmt = conn.prepare(statement).unwrap();
            for i in 1..=stmt.parameter_count() {
                assert_eq!(
                    stmt.parameter_name(i),
                    Some(format!("${i}").as_str()),
                    "parameter {i} of {statement}"
                );
            }
        }
    }

    /// No statement of a step makes SQLite build a table on each execution
    /// (`OpenEphemeral`: an IN list in an index's predicate, a `RETURNING`),
    /// which costs more than the row it writes (benches/README "Session 22").
    #[test]
    fn a_steps_statements_build_no_table_as_they_run() {
        let conn = migrated();
        let step = [
            sql::INSERT_INSTANCE,
            sql::INSTANCE_OWNER,
            sql::WRITE_INSTANCE,
            sql::INSERT_PARK,
            DELETE_PARK,
            sql::DELETE_PARKS_OF,
            sql::INSERT_ATTEMPT,
            sql::INSERT_JOURNAL,
            search_rows::INSERT_SEARCH_VAR,
            search_rows::DELETE_SEARCH_VAR,
            search_rows::SEARCH_KEYS_OF,
            search_rows::SET_SEARCH_KEYS,
            super::super::stats::SET_FAILURE,
        ];
        for statement in step {
            let mut explain = conn.prepare(&format!("EXPLAIN {statement}")).unwrap();
            let mut rows = explain.raw_query();
            while let Some(row) = rows.next().unwrap() {
                let op: String = row.get(1).unwrap();
                assert_ne!(op, "OpenEphemeral", "{statement}");
            }
        }
    }

    fn created(id: &str, key: Option<&str>) -> super::Op {
        use super::super::stats::StatDelta;
        let inst = super::NewInstance {
            id: id.into(),
            tenant: "t".into(),
            deployment_id: "d".into(),
            process_id: "p".into(),
            idempotency_key: key.map(str::to_string),
            idempotency_fingerprint: None,
            retry_of: None,
            started_at: 1,
            business_key: None,
        };
        let step = super::StepWrite {
            snapshot: "{}".into(),
            state: "RUNNING".into(),
            updated_at: 1,
            stats: vec![StatDelta {
                deployment_id: "d".into(),
                node: String::new(),
                state: "RUNNING".into(),
                slot: super::super::stats::slot_of(id),
                n: 1,
            }],
            ..super::StepWrite::default()
        };
        super::Op::Create(Box::new(super::NewStart {
            instance: inst,
            step,
        }))
    }

    fn counted(conn: &Connection) -> i64 {
        conn.query_row(
            "SELECT COALESCE(SUM(n), 0) FROM deployment_stats WHERE deployment_id = 'd'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    #[test]
    fn a_batch_counts_exactly_the_steps_it_kept() {
        let conn = migrated();
        // (No tenant or deployment rows: the counts are the subject here.)
        conn.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
        // Two new instances, one that repeats an id (rolled back alone) and
        // one whose idempotency key is known (answered, not applied).
        let first = [created("a", Some("k")), created("b", None)];
        let results = super::run_batch(&super::Held::new(&conn), &first).unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert_eq!(counted(&conn), 2);
        let second = [
            created("c", None),
            created("a", None),
            created("d", Some("k")),
            created("e", None),
        ];
        let results = super::run_batch(&super::Held::new(&conn), &second).unwrap();
        assert!(results[1].is_err(), "a repeated id is refused");
        assert!(matches!(
            results[2],
            Ok(super::Done::Created(super::Created::Existing(_)))
        ));
        assert_eq!(
            counted(&conn),
            4,
            "a, b, c and e; not the refused one nor the known key"
        );
        let instances: i64 = conn
            .query_row("SELECT COUNT(*) FROM instances", [], |r| r.get(0))
            .unwrap();
        assert_eq!(instances, counted(&conn));
    }

    #[test]
    fn the_claim_returns_the_park_columns() {
        let squashed = CLAIM_DUE.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(squashed.ends_with(&format!("RETURNING {PARK_COLUMNS}")));
    }
}
