//! Workload (a) of the engine bench on PostgreSQL (issue 36 item 1): the
//! same echo instance, one at a time and 1,000 at once, through a runtime
//! on a PostgreSQL store in a fresh schema (dropped after).

use super::{echo_on, one_task, Bench, Echo, TENANT};
use anyhow::Result;
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions};
use sutra::store::{AnyStore, PgStore};

/// The PostgreSQL server of the PostgreSQL rows: `SUTRA_BENCH_POSTGRES_URL`,
/// else `SUTRA_TEST_POSTGRES_URL`; `None` skips them.
pub(super) fn postgres_url() -> Option<String> {
    std::env::var("SUTRA_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("SUTRA_TEST_POSTGRES_URL"))
        .ok()
}

/// Workload (a) on PostgreSQL at `url`, in a fresh schema dropped after.
pub(super) async fn echo_postgres(b: &Bench, url: &str) -> Result<Echo> {
    let schema = format!("sutra_bench_engine_{:016x}", rand::random::<u64>());
    let store = PgStore::open_in_schema(url, &schema).await?;
    let mut opts = RuntimeOptions::new(Config::default());
    opts.cache_dir = Some(b.dir.path().join("component-cache"));
    let rt = Runtime::new(AnyStore::Postgres(store), opts)?;
    rt.deploy(TENANT, &one_task(""), &b.modules()).await?;
    let result = echo_on(rt).await;
    use sqlx::{ConnectOptions, Connection};
    let mut conn = url
        .parse::<sqlx::postgres::PgConnectOptions>()?
        .connect()
        .await?;
    sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    result
}
