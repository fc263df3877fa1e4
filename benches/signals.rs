//! The signal fan-out benchmark (issue 32 item 1): one broadcast reaching
//! 10,000 waiting instances, on SQLite and on PostgreSQL.
//!
//! Workload: start → intermediate catch of signal `go` → end (no task, so
//! the figure is the fan-out's: per instance one delivery row read, one
//! instance step committed, the rows deleted a page at a time). 10,000
//! instances are started and left waiting (not timed), then
//! `Runtime::signal` is timed until it returns, i.e. until every instance
//! is COMPLETED (checked before the figures print). RSS is read from
//! `/proc/self/status` before and after the broadcast.
//!
//! Run: `cargo bench --bench signals --profile dev` (debug with optimised
//! dependencies) or `cargo bench --bench signals` (release). PostgreSQL at
//! `SUTRA_BENCH_POSTGRES_URL`, else `SUTRA_TEST_POSTGRES_URL`; unset: SQLite
//! only. `SUTRA_BENCH_SCALE` scales the instance count.

use serde_json::Map;
use std::time::Instant;
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, StartRequest};
use sutra::store::{AnyStore, InstanceFilter, PgOptions, PgStore, SqliteStore, Store};

const TENANT: &str = "bench";

const SOURCE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="defs" targetNamespace="https://example.com">
  <bpmn:signal id="Go" name="go"/>
  <bpmn:process id="w" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:signalEventDefinition signalRef="Go"/></bpmn:intermediateCatchEvent>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="wait"/>
    <bpmn:sequenceFlow id="f1" sourceRef="wait" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

async fn bench(label: &str, store: AnyStore, n: usize) {
    let rt = Runtime::new(store.clone(), RuntimeOptions::new(Config::default())).unwrap();
    rt.deploy(TENANT, SOURCE, &Default::default())
        .await
        .unwrap();
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        while set.len() >= 64 {
            set.join_next().await.unwrap().unwrap();
        }
        let rt = rt.clone();
        set.spawn(async move {
            rt.start(StartRequest {
                tenant: TENANT.into(),
                process_id: "w".into(),
                ..StartRequest::default()
            })
            .await
            .unwrap();
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    let started = t.elapsed();
    let before = rss_kib("VmRSS:");
    let t = Instant::now();
    let answer = rt.signal(TENANT, "go", Map::new()).await.unwrap();
    let fanout = t.elapsed();
    let after = rss_kib("VmRSS:");
    assert_eq!(answer.delivered as usize, n, "every wait reached");
    let waiting = store
        .list_instances(&InstanceFilter {
            tenant: Some(TENANT.into()),
            state: Some("WAITING".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(waiting.is_empty(), "{} still waiting", waiting.len());
    println!(
        "{label}: {n} waiting instances (started in {:.1} s); fan-out {:.2} s = {:.0} instances/s; RSS {} MiB before, {} MiB after (peak {} MiB)",
        started.as_secs_f64(),
        fanout.as_secs_f64(),
        n as f64 / fanout.as_secs_f64(),
        before / 1024,
        after / 1024,
        rss_kib("VmHWM:") / 1024
    );
}

fn main() {
    let scale: f64 = std::env::var("SUTRA_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let n = ((10_000.0 * scale) as usize).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        let store = AnyStore::Sqlite(SqliteStore::open(&url).await.unwrap());
        bench("sqlite", store, n).await;
        let pg = std::env::var("SUTRA_BENCH_POSTGRES_URL")
            .or_else(|_| std::env::var("SUTRA_TEST_POSTGRES_URL"))
            .ok();
        if let Some(url) = pg {
            let pool: u32 = std::env::var("SUTRA_BENCH_PG_POOL")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(PgOptions::default().max_connections);
            let schema = format!("sutra_bench_signals_{}", std::process::id());
            let store = PgStore::open_with(
                &url,
                PgOptions {
                    schema: Some(schema),
                    max_connections: pool,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            bench(
                &format!("postgres (pool {pool})"),
                AnyStore::Postgres(store),
                n,
            )
            .await;
        } else {
            println!("postgres: skipped (no SUTRA_BENCH_POSTGRES_URL / SUTRA_TEST_POSTGRES_URL)");
        }
    });
}
