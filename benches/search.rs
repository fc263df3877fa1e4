//! The console's reads at scale (issue 35): with N instances (default
//! 100,000; `SUTRA_BENCH_SEARCH_N`) of one deployment — 90 % parked on a
//! message, 10 % FAILED, each with a business key and five top-level
//! variables — how long the store takes to answer what the console asks:
//! a page of the instance list newest first, the same with a variable
//! filter (one match; 100 matches), with a business key, with the error
//! code and the failed node (10,000 matches), the counts by state (from the
//! maintained aggregate, migration 0024; bounded by start time, from the
//! rows), the FAILED a retry took over, and the per-node statistics of the
//! deployment (from the aggregate; and, for comparison, counted from the
//! snapshots as before 0024 — the two must agree).
//!
//! Invariants: every instance is started through `Runtime::start` (the
//! engine writes its rows, its searchable variables included); each figure
//! is the median and the maximum of 21 calls after one warm-up call, each
//! call checked (the expected number of rows). PostgreSQL runs when
//! `SUTRA_TEST_POSTGRES_URL` (or `SUTRA_BENCH_POSTGRES_URL`) is set, in a
//! fresh schema dropped after; PostgreSQL is `ANALYZE`d after the fill (what
//! autovacuum does after such a growth).
//!
//! Run: `cargo bench --bench search [-- sqlite postgres]`; figures in
//! `benches/README.md`, "Search and the console at 100,000 instances".

use anyhow::{bail, Result};
use serde_json::{json, Map};
use sqlx::postgres::PgConnectOptions;
use sqlx::ConnectOptions;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, StartRequest};
use sutra::store::stats::Tally;
use sutra::store::tenancy::TenancyStore;
use sutra::store::{AnyStore, InstanceFilter, PgStore, SearchVar, SqliteStore, Store};

const TENANT: &str = "bench";
const CALLS: usize = 21;
/// Starts in flight at once while filling.
const CONCURRENCY: usize = 64;

const PROCESS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:message id="Paid" name="paid"/>
  <bpmn:error id="Bad" errorCode="BAD.ORDER"/>
  <bpmn:process id="orders" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="check"/>
    <bpmn:exclusiveGateway id="check" default="ok"/>
    <bpmn:sequenceFlow id="ok" sourceRef="check" targetRef="wait"/>
    <bpmn:sequenceFlow id="bad" sourceRef="check" targetRef="fail">
      <bpmn:conditionExpression>n % 10 == 0</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:endEvent id="fail"><bpmn:errorEventDefinition errorRef="Bad"/></bpmn:endEvent>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:extensionElements><q:correlation key="orderId"/></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="Paid"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

fn n_instances() -> usize {
    std::env::var("SUTRA_BENCH_SEARCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}

fn postgres_url() -> Option<String> {
    std::env::var("SUTRA_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("SUTRA_TEST_POSTGRES_URL"))
        .ok()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |b: &str| args.is_empty() || args.iter().any(|a| a == b);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let n = n_instances();
        println!(
            "search bench: {n} instances, load average {}",
            load_average()
        );
        if want("sqlite") {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("search.db");
            let store = AnyStore::from(SqliteStore::open(&path.to_string_lossy()).await?);
            run("sqlite", store, n, None).await?;
        }
        if want("postgres") {
            match postgres_url() {
                None => println!("postgres: skipped (no SUTRA_TEST_POSTGRES_URL)"),
                Some(url) => {
                    let schema = format!("sutra_search_{:016x}", rand::random::<u64>());
                    let store = AnyStore::from(PgStore::open_in_schema(&url, &schema).await?);
                    let result = run("postgres", store, n, Some((&url, &schema))).await;
                    let mut conn = PgConnectOptions::from_str(&url)?.connect().await?;
                    sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .execute(&mut conn)
                        .await?;
                    result?;
                }
            }
        }
        Ok(())
    })
}

/// Fills `store` with `n` instances and times the reads; `pg`: the
/// PostgreSQL URL and schema to `ANALYZE` after the fill.
async fn run(backend: &str, store: AnyStore, n: usize, pg: Option<(&str, &str)>) -> Result<()> {
    let mut opts = RuntimeOptions::new(Config::default());
    opts.cache_dir = None;
    let rt = Runtime::new(store.clone(), opts)?;
    let deployed = rt.deploy(TENANT, PROCESS, &BTreeMap::new()).await?;
    let deployment = deployed[0].id.clone();
    let began = Instant::now();
    let mut next = 0usize;
    while next < n {
        let batch: Vec<_> = (next..(next + CONCURRENCY).min(n))
            .map(|i| {
                let rt = rt.clone();
                tokio::spawn(async move {
                    let mut vars = Map::new();
                    vars.insert("orderId".into(), json!(format!("O-{i}")));
                    vars.insert("customer".into(), json!(format!("c{}", i % 1000)));
                    vars.insert("n".into(), json!(i));
                    vars.insert("vip".into(), json!(i % 7 == 0));
                    vars.insert("region".into(), json!(["eu", "us", "apac"][i % 3]));
                    rt.start(StartRequest {
                        tenant: TENANT.into(),
                        process_id: "orders".into(),
                        variables: vars,
                        business_key: Some(format!("PO-{i}")),
                        ..StartRequest::default()
                    })
                    .await
                })
            })
            .collect();
        for task in batch {
            task.await??;
        }
        next += CONCURRENCY;
    }
    println!(
        "{backend}: {n} instances started in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    if let Some((url, schema)) = pg {
        let mut conn = PgConnectOptions::from_str(url)?
            .options([("search_path", schema)])
            .connect()
            .await?;
        sqlx::query("ANALYZE instances, instance_vars, parks")
            .execute(&mut conn)
            .await?;
    }
    let tenant = Some(TENANT.to_string());
    let page = |f: InstanceFilter| InstanceFilter {
        tenant: tenant.clone(),
        newest_first: true,
        limit: 51,
        ..f
    };
    let var = |name: &str, value: &str| SearchVar {
        name: name.into(),
        value: value.into(),
    };
    let probe = n / 2 + 1;
    // What a FAILED instance's error code and failed node are (the filters).
    let one_failed = store
        .list_instances(&InstanceFilter {
            tenant: tenant.clone(),
            state: Some("FAILED".into()),
            limit: 1,
            ..InstanceFilter::default()
        })
        .await?;
    let tally = one_failed
        .first()
        .map(|r| Tally::of_json(&r.state, &r.snapshot))
        .unwrap_or_default();
    let cases: Vec<(&str, InstanceFilter, usize)> = vec![
        (
            "list, newest first, a page of 50",
            page(InstanceFilter::default()),
            51,
        ),
        (
            "list, var.orderId (1 match)",
            page(InstanceFilter {
                vars: vec![var("orderId", &format!("O-{probe}"))],
                ..InstanceFilter::default()
            }),
            1,
        ),
        (
            "list, var.customer (100 matches), a page of 50",
            page(InstanceFilter {
                vars: vec![var("customer", "c42")],
                ..InstanceFilter::default()
            }),
            51.min(n / 1000),
        ),
        (
            "list, var.customer + var.vip + state",
            page(InstanceFilter {
                vars: vec![var("customer", "c42"), var("vip", "true")],
                state: Some("WAITING".into()),
                ..InstanceFilter::default()
            }),
            usize::MAX,
        ),
        (
            "list, businessKey (1 match)",
            page(InstanceFilter {
                business_key: Some(format!("PO-{probe}")),
                ..InstanceFilter::default()
            }),
            1,
        ),
    ];
    let mut cases = cases;
    if let Some(code) = &tally.error_code {
        cases.push((
            "list, errorCode (10 % match), a page of 50",
            page(InstanceFilter {
                error_code: Some(code.clone()),
                ..InstanceFilter::default()
            }),
            51.min(n / 10),
        ));
    }
    if let Some(node) = tally.failed_node() {
        cases.push((
            "list, failedNode (10 % match), a page of 50",
            page(InstanceFilter {
                failed_node: Some(node.to_string()),
                ..InstanceFilter::default()
            }),
            51.min(n / 10),
        ));
    }
    println!(
        "{backend}: a FAILED instance's error code {:?}, failed node {:?}",
        tally.error_code,
        tally.failed_node()
    );
    for (what, filter, rows) in cases {
        let (median, max) = time(|| async {
            let got = store.list_instances(&filter).await?.len();
            if rows != usize::MAX && got != rows {
                bail!("{what}: {got} rows, want {rows}");
            }
            Ok(())
        })
        .await?;
        println!("{backend}: {what}: median {median:.2} ms, max {max:.2} ms");
    }
    let (median, max) = time(|| async {
        let counts = store
            .instance_counts(TENANT, Some("orders"), None, None)
            .await?;
        let total: i64 = counts.iter().map(|(_, c)| c).sum();
        if total != n as i64 {
            bail!("counts: {total}, want {n}");
        }
        Ok(())
    })
    .await?;
    println!("{backend}: counts by state: median {median:.2} ms, max {max:.2} ms");
    let (median, max) = time(|| async {
        let counts = store
            .instance_counts(TENANT, Some("orders"), Some("0"), Some("~"))
            .await?;
        let total: i64 = counts.iter().map(|(_, c)| c).sum();
        if total != n as i64 {
            bail!("bounded counts: {total}, want {n}");
        }
        Ok(())
    })
    .await?;
    println!("{backend}: counts by state, bounded by start time (from the rows): median {median:.2} ms, max {max:.2} ms");
    let (median, max) = time(|| async {
        let retried = store
            .retried_failed_count(TENANT, Some("orders"), None, None)
            .await?;
        if retried != 0 {
            bail!("retried: {retried}, want 0");
        }
        Ok(())
    })
    .await?;
    println!("{backend}: FAILED taken over by a retry: median {median:.2} ms, max {max:.2} ms");
    let (median, max) = time(|| async {
        let rows = store.node_states(&deployment).await?;
        if rows.is_empty() {
            bail!("no node states");
        }
        Ok(())
    })
    .await?;
    println!("{backend}: per-node statistics: median {median:.2} ms, max {max:.2} ms");
    let kept = store.node_states(&deployment).await?;
    let (median, max) = time(|| async {
        let scanned = store.node_states_scanned(&deployment).await?;
        if scanned != kept {
            bail!("the aggregate {kept:?} is not the snapshots' {scanned:?}");
        }
        Ok(())
    })
    .await?;
    println!("{backend}: per-node statistics counted from the snapshots (before 0024; equal to the aggregate): median {median:.2} ms, max {max:.2} ms");
    Ok(())
}

/// The median and maximum (ms) of [`CALLS`] calls after a warm-up one.
async fn time<F, Fut>(f: F) -> Result<(f64, f64)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    f().await?;
    let mut took: Vec<Duration> = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        f().await?;
        took.push(t.elapsed());
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok((ms(took[CALLS / 2]), ms(took[CALLS - 1])))
}
