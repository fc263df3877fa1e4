//! The two-backend test harness: write a store test once, run it on SQLite
//! and on PostgreSQL.
//!
//! How to use it from any integration test file (`tests/<name>.rs`):
//!
//! ```ignore
//! #[path = "common/backends.rs"]
//! mod backends;
//! use sutra::store::Store; // trait methods on the store
//!
//! backends::store_tests! {
//!     /// Doc comments and attributes are kept.
//!     async fn my_test(db) {
//!         // `db` is a `backends::TestDb`: it derefs to `AnyStore`
//!         // (`db.load_instance(..)`), `db.store` is the store itself
//!         // (clone it into spawned tasks), `db.reopen()` opens a second
//!         // store on the same database.
//!     }
//! }
//! ```
//!
//! Each `async fn` becomes a module with two tests, `my_test::sqlite` and
//! `my_test::postgres`, on a multi-threaded tokio runtime. The body sees the
//! file's items (`use super::*`). For a hand-written test use
//! `backends::run(Backend::Sqlite, |db| async move { .. }).await`.
//!
//! - SQLite: a fresh database file in a temporary directory, removed after.
//! - PostgreSQL: reads `SUTRA_TEST_POSTGRES_URL`. Unset: the test prints
//!   "skipped: SUTRA_TEST_POSTGRES_URL not set" and passes. Set but the
//!   server unreachable: the test FAILS. Each test gets its own schema
//!   (`sutra_test_<random>`), dropped at the end, even when the body panics.
//!
//! The body runs in a spawned task so a panic is caught, the database is
//! cleaned up, then the panic is resumed (the test fails with its message).
#![allow(dead_code, unused_macros, unused_imports)]

use std::future::Future;
use std::ops::Deref;
use sutra::store::{AnyStore, NewDeployment, NewInstance, PgOptions, PgStore, SqliteStore, Store};

/// The environment variable naming the PostgreSQL test server.
pub const POSTGRES_URL_VAR: &str = "SUTRA_TEST_POSTGRES_URL";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// One test's database.
pub struct TestDb {
    pub store: AnyStore,
    pub backend: Backend,
    /// What opened `store`: the SQLite URL, or the PostgreSQL server URL.
    pub url: String,
    /// The PostgreSQL schema of this test.
    pub schema: Option<String>,
}

impl Deref for TestDb {
    type Target = AnyStore;
    fn deref(&self) -> &AnyStore {
        &self.store
    }
}

impl TestDb {
    /// Opens a second store on the same database (migrations run again).
    pub async fn reopen(&self) -> AnyStore {
        match (&self.backend, &self.schema) {
            (Backend::Postgres, Some(schema)) => AnyStore::Postgres(
                PgStore::open_with(&self.url, pg_options(schema))
                    .await
                    .expect("reopen PostgreSQL"),
            ),
            _ => AnyStore::Sqlite(SqliteStore::open(&self.url).await.expect("reopen SQLite")),
        }
    }

    /// Runs `sql` (one or more statements) on a connection of its own to
    /// the test's database (PostgreSQL: in the test's schema), for what the
    /// store's API does not do: a database put back as an older migration
    /// left it, say.
    pub async fn raw_execute(&self, sql: &str) {
        use sqlx::Executor;
        match self.raw().await {
            Raw::Sqlite(mut c) => c.execute(sql).await.map(drop),
            Raw::Postgres(mut c) => c.execute(sql).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The one integer `sql` answers, on a connection as [`Self::raw_execute`]'s.
    pub async fn count(&self, sql: &str) -> i64 {
        use sqlx::{Executor, Row};
        match self.raw().await {
            Raw::Sqlite(mut c) => c.fetch_one(sql).await.and_then(|r| r.try_get(0)),
            Raw::Postgres(mut c) => c.fetch_one(sql).await.and_then(|r| r.try_get(0)),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn raw(&self) -> Raw {
        use sqlx::ConnectOptions;
        use std::str::FromStr;
        match &self.schema {
            Some(schema) => Raw::Postgres(
                sqlx::postgres::PgConnectOptions::from_str(&self.url)
                    .expect("the PostgreSQL URL")
                    .options([("search_path", schema.as_str())])
                    .connect()
                    .await
                    .expect("a PostgreSQL connection of the test's own"),
            ),
            None => Raw::Sqlite(
                sqlx::sqlite::SqliteConnectOptions::from_str(&self.url)
                    .expect("the SQLite URL")
                    .connect()
                    .await
                    .expect("an SQLite connection of the test's own"),
            ),
        }
    }
}

/// The tenant of [`deployment`] and [`new_instance`].
pub const TENANT: &str = "acme";

/// Deployment `dep-1` of process `p` for [`TENANT`] (one module, `chaos`)
/// → its id: what a test of the store's rows needs before an instance.
pub async fn deployment(store: &AnyStore) -> String {
    store
        .insert_deployment(&NewDeployment {
            id: "dep-1".into(),
            tenant: TENANT.into(),
            process_id: "p".into(),
            dialect: "bpmn".into(),
            source: "<definitions/>".into(),
            modules: std::collections::BTreeMap::from([("chaos".to_string(), "0".repeat(64))]),
            reusable: Default::default(),
            created_at: 0,
        })
        .await
        .expect("deployment")
        .id
}

/// Instance `id` of `deployment` (process `p`, [`TENANT`]), started at 0,
/// without an idempotency key, a retry or a business key.
pub fn new_instance(id: &str, deployment: &str) -> NewInstance {
    NewInstance {
        id: id.into(),
        tenant: TENANT.into(),
        deployment_id: deployment.into(),
        process_id: "p".into(),
        idempotency_key: None,
        idempotency_fingerprint: None,
        retry_of: None,
        business_key: None,
        started_at: 0,
    }
}

/// A connection of a test's own ([`TestDb::raw_execute`]).
enum Raw {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

fn pg_options(schema: &str) -> PgOptions {
    PgOptions {
        max_connections: 8,
        schema: Some(schema.to_string()),
        ..PgOptions::default()
    }
}

/// Runs `test` against a fresh database of `backend`, then cleans up.
pub async fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temporary directory");
            let url = format!("sqlite://{}", dir.path().join("sutra.db").display());
            let store = SqliteStore::open(&url).await.expect("open SQLite");
            let db = TestDb {
                store: AnyStore::Sqlite(store.clone()),
                backend,
                url,
                schema: None,
            };
            let outcome = tokio::spawn(test(db)).await;
            store.close().await;
            drop(dir);
            finish(backend, outcome);
        }
        Backend::Postgres => {
            let Ok(url) = std::env::var(POSTGRES_URL_VAR) else {
                eprintln!("skipped: {POSTGRES_URL_VAR} not set");
                return;
            };
            let schema = format!("sutra_test_{:016x}", rand::random::<u64>());
            let store = match PgStore::open_with(&url, pg_options(&schema)).await {
                Ok(store) => store,
                Err(e) => panic!("{POSTGRES_URL_VAR}={url} is set but PostgreSQL is unusable: {e}"),
            };
            let db = TestDb {
                store: AnyStore::Postgres(store.clone()),
                backend,
                url: url.clone(),
                schema: Some(schema.clone()),
            };
            let outcome = tokio::spawn(test(db)).await;
            store.close().await;
            drop_schema(&url, &schema).await;
            finish(backend, outcome);
        }
    }
}

/// Drops a test schema (best effort: a leftover schema must not hide the
/// test's own verdict, so a failure here is only reported).
async fn drop_schema(url: &str, schema: &str) {
    use sqlx::{ConnectOptions, Connection};
    let result = async {
        let opts: sqlx::postgres::PgConnectOptions = url.parse()?;
        let mut conn = opts.connect().await?;
        sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .execute(&mut conn)
            .await?;
        conn.close().await
    }
    .await;
    if let Err(e) = result {
        eprintln!("warning: could not drop test schema {schema}: {e}");
    }
}

fn finish(backend: Backend, outcome: Result<(), tokio::task::JoinError>) {
    match outcome {
        Ok(()) => {}
        Err(e) if e.is_panic() => {
            eprintln!("test failed on {backend:?}");
            std::panic::resume_unwind(e.into_panic())
        }
        Err(e) => panic!("test task on {backend:?} did not finish: {e}"),
    }
}

/// `store_tests! { async fn name(db) { .. } .. }`: each test on both backends.
macro_rules! store_tests {
    ($( $(#[$meta:meta])* async fn $name:ident($db:ident) $body:block )*) => {
        $(
            $(#[$meta])*
            mod $name {
                #[allow(unused_imports)]
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    $crate::backends::run($crate::backends::Backend::Sqlite, |$db| async move $body).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    $crate::backends::run($crate::backends::Backend::Postgres, |$db| async move $body).await
                }
            }
        )*
    };
}
pub(crate) use store_tests;
