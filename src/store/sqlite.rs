//! SQLite store: the embedded backend, one process owning one file.
//!
//! Invariants:
//! - every write runs in a `BEGIN IMMEDIATE` transaction. Instance writes
//!   (`create_instance`, `commit_step`, `commit_steps`) and park claims
//!   (`claim_due`, `release_claim`) of a file database go to the writer
//!   thread (`sqlite_writer.rs`: one rusqlite connection, batches of
//!   requests, one transaction and one fsync per batch); every other write
//!   (deployments, modules, tenancy, leases, sweep, schedules) uses the sqlx
//!   write pool of exactly one connection. The two writers of the process
//!   meet only on SQLite's file lock and wait for each other up to the busy
//!   timeout (as another process would); reads use a separate pool and see
//!   the last committed state (WAL);
//! - the journal is WAL with `synchronous=FULL` by default: a committed step
//!   survives kill -9 and power loss. `Synchronous::Normal` keeps the database
//!   consistent but may lose the last commits on power loss (not on kill -9);
//! - `sqlite::memory:` uses one connection for reads and writes, kept open for
//!   the life of the store (the database lives in that connection, which a
//!   writer thread could not see): its instance writes and claims take the
//!   sqlx group commit (`sqlite_group.rs`) on that connection instead (as
//!   a file database does with `SqliteOptions::writer_thread` off);
//! - migrations (`migrations/sqlite`, then `migrations/shared`,
//!   `migrations.rs`) run on open; reopening is a no-op.
//!
//! Claims use the same columns and rules as PostgreSQL (`claimed_by`,
//! `claimed_until`; a claim is live while `now < claimed_until`), so both
//! backends answer alike even though one process owns the file.
//!
//! Every query it shares with PostgreSQL is in `queries*.rs`; this file
//! holds what differs (the [`SqlBackend`] impl): the two write paths,
//! `BEGIN IMMEDIATE`, and the claim statement (`sqlite_writer.rs`).

use super::migrations::{migrator, Dialect};
use super::outbox_write::{OutboxDone, OutboxOp, OutboxPath};
use super::queries::{Claim, SqlBackend};
use super::sqlite_group::GroupCommit;
use super::sqlite_writer::{Done, Op, Writer};
use super::{Created, NewInstance, NewStart, ParkRecord, StepWrite, StoreError, StoreResult};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// fsync the WAL on every commit: a committed step survives power loss.
    #[default]
    Full,
    /// fsync only at checkpoints: survives a process crash, may lose the
    /// last commits on power loss. Faster on slow disks.
    Normal,
}

/// Options of [`SqliteStore::open_with`].
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    pub synchronous: Synchronous,
    /// How long a statement waits for a lock held by another process.
    pub busy_timeout: Duration,
    /// Size of the read pool (ignored for `sqlite::memory:`).
    pub read_connections: u32,
    /// How long a caller waits for a pooled connection.
    pub acquire_timeout: Duration,
    /// Run the instance writes and claims of a file database on the writer
    /// thread (`sqlite_writer.rs`; the default). `false` sends them to the
    /// sqlx group commit on the write pool instead (what an in-memory
    /// database always does): slower, kept for comparison and as a fallback.
    pub writer_thread: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            read_connections: 4,
            acquire_timeout: Duration::from_secs(30),
            writer_thread: true,
        }
    }
}

/// The SQLite implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// Exactly one connection: the writer of everything [`Self::writes`] does not take.
    pub(super) write: SqlitePool,
    /// Instance writes and claims, batched into one transaction per batch.
    writes: WritePath,
    /// Readers (the same pool as `write` for an in-memory database).
    pub(super) read: SqlitePool,
}

/// Where instance writes and claims go.
#[derive(Debug, Clone)]
enum WritePath {
    /// A file database: the writer thread (`sqlite_writer.rs`).
    Thread(Writer),
    /// An in-memory database (or `writer_thread: false`): the sqlx group
    /// commit on `write`'s one connection.
    Group(GroupCommit),
}

/// Parses `sqlite://path`, `sqlite:path`, `sqlite::memory:`, `:memory:` or a
/// plain file path (taken literally, never URL-decoded).
fn connect_options(url: &str) -> StoreResult<SqliteConnectOptions> {
    if url.starts_with("sqlite:") || url == ":memory:" {
        let url = if url == ":memory:" {
            "sqlite::memory:"
        } else {
            url
        };
        SqliteConnectOptions::from_str(url).map_err(StoreError::Db)
    } else if url.is_empty() {
        Err(StoreError::Other("empty SQLite path".to_string()))
    } else {
        Ok(SqliteConnectOptions::new().filename(url))
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` with default options.
    pub async fn open(url: &str) -> StoreResult<Self> {
        Self::open_with(url, SqliteOptions::default()).await
    }

    /// Opens (creating if missing) the database at `url` and runs migrations.
    pub async fn open_with(url: &str, opts: SqliteOptions) -> StoreResult<Self> {
        let base = connect_options(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match opts.synchronous {
                Synchronous::Full => SqliteSynchronous::Full,
                Synchronous::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(opts.busy_timeout)
            .foreign_keys(true);
        let in_memory = base
            .get_filename()
            .to_string_lossy()
            .starts_with("file:sqlx-in-memory-")
            || url.contains("mode=memory");
        // No ping before each acquire: the connection is a local file handle
        // (the ping cost ~0.08 ms per read in the engine bench).
        let write_opts = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(opts.acquire_timeout);
        let write_opts = if in_memory {
            write_opts.idle_timeout(None).max_lifetime(None)
        } else {
            write_opts
        };
        let write = write_opts.connect_with(base.clone()).await?;
        migrator(Dialect::Sqlite).await?.run(&write).await?;
        let read = if in_memory {
            write.clone()
        } else {
            SqlitePoolOptions::new()
                .test_before_acquire(false)
                .max_connections(opts.read_connections.max(1))
                .acquire_timeout(opts.acquire_timeout)
                .connect_with(base)
                .await?
        };
        let writes = if in_memory || !opts.writer_thread {
            WritePath::Group(GroupCommit::start(write.clone()))
        } else {
            // After the migrations: the thread's statements see the final schema.
            let path = write.connect_options().get_filename().to_path_buf();
            let writer = tokio::task::spawn_blocking(move || {
                Writer::start(&path, opts.synchronous, opts.busy_timeout)
            })
            .await
            .map_err(|e| StoreError::Other(format!("cannot start the SQLite writer: {e}")))?;
            match writer {
                Ok(w) => WritePath::Thread(w),
                Err(e) => {
                    read.close().await;
                    write.close().await;
                    return Err(e);
                }
            }
        };
        Ok(SqliteStore {
            write,
            writes,
            read,
        })
    }

    /// Stops the writer thread (after the requests queued so far) and closes
    /// both pools (waits for connections in use to be returned).
    pub async fn close(&self) {
        if let WritePath::Thread(writer) = &self.writes {
            writer.close().await;
        }
        self.read.close().await;
        self.write.close().await;
    }

    /// Runs an instance write or a claim on the write path of this database.
    async fn submit(&self, op: Op) -> StoreResult<Done> {
        super::failpoint::refuse_write()?;
        match &self.writes {
            WritePath::Thread(writer) => writer.submit(op).await,
            WritePath::Group(group) => group.submit(op).await,
        }
    }
}

/// The outbox's frequent writes go where the instance writes go (the writer
/// thread or the group commit): never racing them for the file lock.
impl OutboxPath for SqliteStore {
    async fn outbox(&self, op: OutboxOp) -> StoreResult<OutboxDone> {
        self.submit(Op::Outbox(op)).await?.outbox()
    }
}

impl SqlBackend for SqliteStore {
    type Db = Sqlite;
    const NAME: &'static str = "sqlite";
    const SKIP_LOCKED: &'static str = "";
    const SKIP_LOCKED_O: &'static str = "";
    const KEY_SHARE_I: &'static str = "";
    const NODE_STATES: &'static str = "SELECT j.key, j.value, COUNT(*) FROM instances i, \
         json_each(i.snapshot, '$.node_states') j WHERE i.deployment_id = $1 \
         GROUP BY j.key, j.value ORDER BY j.key, j.value";

    fn reads(&self) -> &SqlitePool {
        &self.read
    }

    fn writer(&self) -> &SqlitePool {
        &self.write
    }

    /// The single writer, taken with `BEGIN IMMEDIATE`: the write lock at
    /// once, so the transaction waits (busy timeout) instead of failing
    /// when it would upgrade a read.
    ///
    /// A COMMIT that failed (a full disk) can leave the one writer connection
    /// inside a transaction sqlx no longer ends — SQLite rolls a transaction
    /// back by itself on SQLITE_FULL or SQLITE_IOERR, so the ROLLBACK that
    /// sqlx's dropped `Transaction` sends fails ("no transaction is active")
    /// and sqlx, which only counts a depth down on success, keeps depth 1 —
    /// and every later begin on it
    /// would fail ("begin_with at non-zero transaction depth"): such a
    /// connection is closed and the write begins on a fresh one, so writes
    /// resume as soon as the disk has room again.
    async fn begin_write(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        super::failpoint::refuse_write()?;
        match self.write.begin_with("BEGIN IMMEDIATE").await {
            Err(sqlx::Error::InvalidSavePointStatement | sqlx::Error::BeginFailed) => {
                tracing::warn!(
                    "the SQLite writer connection was left in a transaction: reopening it"
                );
                if let Ok(conn) = self.write.acquire().await {
                    let _ = conn.close().await;
                }
                Ok(self.write.begin_with("BEGIN IMMEDIATE").await?)
            }
            other => Ok(other?),
        }
    }

    /// Nothing to lock: `BEGIN IMMEDIATE` already serialises every writer.
    async fn lock_versions(_: &mut SqliteConnection, _: &str, _: &str) -> StoreResult<()> {
        Ok(())
    }

    async fn delete_search_rows(
        conn: &mut SqliteConnection,
        rows: &super::search_rows::Keys,
    ) -> StoreResult<()> {
        super::search_rows::delete_each::<Sqlite>(conn, rows).await
    }

    async fn create_owned(&self, start: Box<NewStart>) -> (StoreResult<Created>, Box<NewStart>) {
        if let Err(e) = super::failpoint::refuse_write() {
            return (Err(e), start);
        }
        let writer = match &self.writes {
            WritePath::Thread(writer) => writer,
            WritePath::Group(group) => {
                // (In-memory databases: the group commit's connection.)
                let op = Op::Create(start.clone());
                let done = Box::pin(group.submit(op)).await;
                return (done.and_then(Done::created), start);
            }
        };
        // Queued before the await, so this future holds no copy of it.
        let (done, op) = match writer.send(Op::Create(start)) {
            Ok(answer) => Writer::answer(answer).await,
            Err(op) => (Err(super::sqlite_writer::stopped()), Some(*op)),
        };
        // `None` only if the writer died holding it: `done` is an error then.
        let back = match op {
            Some(Op::Create(start)) => start,
            _ => Box::new(NewStart {
                instance: NewInstance::default(),
                step: StepWrite::default(),
            }),
        };
        (done.and_then(Done::created), back)
    }

    async fn commit_owned(
        &self,
        id: &str,
        expected_version: i64,
        step: Box<StepWrite>,
    ) -> (StoreResult<()>, Box<StepWrite>) {
        if let Err(e) = super::failpoint::refuse_write() {
            return (Err(e), step);
        }
        let writer = match &self.writes {
            WritePath::Thread(writer) => writer,
            WritePath::Group(group) => {
                // (In-memory databases: the group commit's connection.)
                let op = Op::Commit {
                    id: id.to_string(),
                    version: expected_version,
                    step: step.clone(),
                };
                let done = Box::pin(group.submit(op)).await;
                return (done.map(|_| ()), step);
            }
        };
        let op = Op::Commit {
            id: id.to_string(),
            version: expected_version,
            step,
        };
        // Queued before the await, so this future holds no copy of it.
        let (done, op) = match writer.send(op) {
            Ok(answer) => Writer::answer(answer).await,
            Err(op) => (Err(super::sqlite_writer::stopped()), Some(*op)),
        };
        // `None` only if the writer died holding it: `done` is an error then.
        let back = match op {
            Some(Op::Commit { step, .. }) => step,
            _ => Box::default(),
        };
        (done.map(|_| ()), back)
    }

    async fn commit_batch(&self, steps: &[(String, i64, StepWrite)]) -> StoreResult<()> {
        self.submit(Op::CommitAll(steps.to_vec())).await.map(|_| ())
    }

    async fn claim(&self, claim: Claim) -> StoreResult<Vec<ParkRecord>> {
        self.submit(Op::Claim(claim)).await?.claimed()
    }

    async fn release(&self, instance_id: &str, seq: i64, owner: &str) -> StoreResult<()> {
        self.submit(Op::Release {
            instance_id: instance_id.to_string(),
            seq,
            owner: owner.to_string(),
        })
        .await
        .map(|_| ())
    }

    /// Nothing to watch: one process owns the file and wakes its own poller.
    async fn watch(&self, _: Arc<Notify>) -> StoreResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection;

    /// A writer connection left inside a transaction (as a COMMIT that failed
    /// on a full disk leaves it) does not stop writes for good.
    #[tokio::test]
    async fn a_writer_left_in_a_transaction_is_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("w.db").display());
        let store = SqliteStore::open(&url).await.unwrap();
        {
            let mut conn = store.write.acquire().await.unwrap();
            let tx = conn.begin().await.unwrap();
            // Neither committed nor rolled back: sqlx's depth stays 1.
            std::mem::forget(tx);
        }
        let tx = store.begin_write().await.expect("a fresh writer");
        tx.commit().await.unwrap();
        let again = store.begin_write().await.expect("and the next one");
        again.rollback().await.unwrap();
    }

    /// Issue 33 item 2, the cause: a database that cannot grow (a full disk;
    /// here `max_page_count` capped at its size on the writer connection)
    /// fails a write with SQLITE_FULL. The writes after it still begin —
    /// whatever SQLite rolled back by itself — and once there is room they
    /// commit.
    #[tokio::test]
    async fn writes_begin_again_after_a_full_database() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("full.db").display());
        let store = SqliteStore::open(&url).await.unwrap();
        {
            let mut conn = store.write.acquire().await.unwrap();
            sqlx::query("CREATE TABLE filler (b BLOB)")
                .execute(&mut *conn)
                .await
                .unwrap();
            let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            sqlx::query(&format!("PRAGMA max_page_count = {}", pages + 2))
                .execute(&mut *conn)
                .await
                .unwrap();
        }
        let mut full = 0;
        for _ in 0..4 {
            let mut tx = match store.begin_write().await {
                Ok(tx) => tx,
                Err(e) => panic!("a write after SQLITE_FULL could not begin: {e}"),
            };
            let wrote = sqlx::query("INSERT INTO filler (b) VALUES (zeroblob(200000))")
                .execute(&mut *tx)
                .await;
            match wrote {
                Err(e) => {
                    assert!(e.to_string().contains("full"), "{e}");
                    full += 1;
                    drop(tx);
                }
                Ok(_) => tx.commit().await.unwrap(),
            }
        }
        assert!(full >= 1, "the cap never filled the database");
        let tx = store
            .begin_write()
            .await
            .expect("a writer after the disk filled");
        tx.rollback().await.unwrap();
    }
}
