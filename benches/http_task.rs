//! The HTTP-task benchmark (issue 31): an instance whose one task is an
//! HTTP task (the host makes the call) against one whose task is the Rust
//! `fetch` guest making the same call through wasi:http, both through the
//! egress session, against a loopback API that answers at once.
//!
//! Invariants:
//! - a real SQLite file in a temporary directory, the store's default
//!   durability, the system clock, a multi-threaded tokio runtime, one
//!   process (the API is an axum server in it);
//! - figures are printed only after every instance is checked COMPLETED;
//! - `SUTRA_BENCH_SCALE` (default 1) multiplies the instance counts.
//!
//! Run: `cargo bench --bench http_task`. The guest baseline needs
//! `target/guests/fetch.wasm` (`guest-examples/build.sh fetch`).

use anyhow::{bail, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::egress::Grant;
use sutra::runtime::{Runtime, RuntimeOptions, StartRequest};
use sutra::store::{AnyStore, SqliteStore};

const TENANT: &str = "bench";

fn count(base: usize) -> usize {
    let scale = std::env::var("SUTRA_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(1.0);
    ((base as f64 * scale).round() as usize).max(1)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn dist(mut v: Vec<Duration>) -> (String, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (
        format!(
            "p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms (n = {})",
            ms(at(0.5)),
            ms(at(0.9)),
            ms(at(0.99)),
            v.len()
        ),
        at(0.5),
    )
}

fn bpmn(task: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    {task}
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

async fn runtime(dir: &Path, name: &str, host: &str) -> Result<Runtime<AnyStore>> {
    let path = dir.join(format!("{name}.db"));
    let store = AnyStore::from(SqliteStore::open(&path.to_string_lossy()).await?);
    let mut config = Config::default();
    config.egress.allowed_cidrs = vec!["127.0.0.1/32".into()];
    let mut opts = RuntimeOptions::new(config);
    opts.cache_dir = Some(dir.join("component-cache"));
    let rt = Runtime::new(store, opts)?;
    let grant = Grant::allowing(&[host.to_string()]);
    for module in [sutra::model::HTTP_TASK, "fetch"] {
        rt.put_grant(TENANT, module, &grant).await?;
    }
    Ok(rt)
}

async fn measure(rt: &Runtime<AnyStore>, vars: Value, n: usize) -> Result<Vec<Duration>> {
    let mut took = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let t = Instant::now();
        let id = rt
            .start(StartRequest {
                tenant: TENANT.into(),
                process_id: "p".into(),
                variables: vars.as_object().cloned().unwrap_or_default(),
                ..StartRequest::default()
            })
            .await?;
        match rt.settle(&id).await? {
            sutra::runtime::Settled::Terminal(rec) if rec.state == "COMPLETED" => {}
            other => bail!("instance {id} did not complete: {other:?}"),
        }
        if i >= 20 {
            took.push(t.elapsed());
        }
    }
    Ok(took)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().fallback(|| async { axum::Json(json!({"ok": true})) });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let host = format!("http://{addr}");
    let url = format!("{host}/rates");
    let n = count(300);
    println!("## HTTP task vs a WASM task making the same call (loopback API, SQLite file)");
    let rt = runtime(dir.path(), "http", &host).await?;
    rt.deploy(
        TENANT,
        &bpmn(&format!(
            r#"<bpmn:serviceTask id="T" implementation="http"><bpmn:extensionElements>
                 <q:http method="GET" url="{url}"/></bpmn:extensionElements></bpmn:serviceTask>"#
        )),
        &BTreeMap::new(),
    )
    .await?;
    let (http, http_p50) = dist(measure(&rt, json!({}), n).await?);
    println!("| HTTP task (q:http): start → COMPLETED | {http} |");
    let fetch = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/guests/fetch.wasm");
    let Ok(bytes) = std::fs::read(&fetch) else {
        println!("(no {}: the guest baseline is skipped)", fetch.display());
        return Ok(());
    };
    let rt = runtime(dir.path(), "guest", &host).await?;
    rt.deploy(
        TENANT,
        &bpmn(r#"<bpmn:serviceTask id="T" implementation="registered:fetch"/>"#),
        &BTreeMap::from([("fetch".to_string(), bytes)]),
    )
    .await?;
    let (guest, guest_p50) = dist(measure(&rt, json!({ "url": url }), n).await?);
    println!("| fetch guest (wasi:http): start → COMPLETED | {guest} |");
    println!(
        "| HTTP task saves (p50) | {:.3} ms |",
        ms(guest_p50.saturating_sub(http_p50))
    );
    Ok(())
}
