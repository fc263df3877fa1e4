//! The channel benchmark (issue 14): the round trip of a push channel call
//! against a loopback counterpart that answers at once, compared with an
//! instance running one registered echo task; and external-task throughput
//! with 4 workers fetching in batches.
//!
//! Invariants:
//! - a real SQLite file in a temporary directory on the real disk, the
//!   store's default durability, the system clock, a multi-threaded tokio
//!   runtime; everything in one process (the counterpart and the workers call
//!   the runtime directly, as the API handlers would);
//! - figures are printed only after every instance is checked COMPLETED;
//! - `SUTRA_BENCH_SCALE` (default 1) multiplies the instance counts.
//!
//! Run: `cargo bench --bench channels [-- roundtrip external]` (default: both).
//! The round trip's baseline needs `target/guests/chaos.wasm`
//! (`guest-examples/build.sh chaos`); without it only the channel figures print.

use anyhow::{bail, Result};
use axum::extract::State;
use axum::routing::post;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::engine::TaskOutcome;
use sutra::runtime::{ChannelSpec, FetchRequest, Runtime, RuntimeOptions, StartRequest};
use sutra::store::channels::Transport;
use sutra::store::{AnyStore, SqliteStore};

const TENANT: &str = "bench";

fn scale() -> f64 {
    std::env::var("SUTRA_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(1.0)
}

fn count(base: usize) -> usize {
    ((base as f64 * scale()).round() as usize).max(1)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// p50 / p90 / p99 / max of durations, in ms.
fn dist(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |q: f64| ms(v[((v.len() - 1) as f64 * q).round() as usize]);
    format!(
        "p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms (n = {})",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
        v.len()
    )
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bpmn(task: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="{task}"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

fn request(vars: Value) -> StartRequest {
    StartRequest {
        tenant: TENANT.into(),
        process_id: "p".into(),
        variables: vars.as_object().cloned().unwrap_or_default(),
        ..StartRequest::default()
    }
}

async fn runtime(dir: &Path, name: &str) -> Result<Runtime<AnyStore>> {
    let path = dir.join(format!("{name}.db"));
    let store = AnyStore::from(SqliteStore::open(&path.to_string_lossy()).await?);
    let mut config = Config::default();
    config.outbox.allowed_hosts = vec!["loopback".into()];
    let mut opts = RuntimeOptions::new(config);
    opts.cache_dir = Some(dir.join("component-cache"));
    Ok(Runtime::new(store, opts)?)
}

async fn wait_completed(rt: &Runtime<AnyStore>, id: &str) -> Result<()> {
    match rt.settle(id).await? {
        sutra::runtime::Settled::Terminal(rec) if rec.state == "COMPLETED" => Ok(()),
        other => bail!("instance {id} did not complete: {other:?}"),
    }
}

// ---------------------------------------------------------------- round trip

/// The counterpart: answers each request through the runtime, then 200.
async fn counterpart(
    State(rt): State<Runtime<AnyStore>>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let correlation = v["correlation"].as_str().unwrap_or_default().to_string();
    let out = TaskOutcome::Completed {
        output: json!({"paid": true}),
    };
    match rt.answer(TENANT, "payments", &correlation, out).await {
        Ok(_) => axum::http::StatusCode::OK,
        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn roundtrip(dir: &Path) -> Result<()> {
    println!("\n## (1) channel round trip (push, loopback counterpart answering at once)");
    let n = count(500);
    let rt = runtime(dir, "roundtrip").await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/hook", post(counterpart))
        .with_state(rt.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    rt.set_channel(
        TENANT,
        "payments",
        ChannelSpec {
            transport: Transport::Push,
            url: Some(url),
            secret: None,
        },
    )
    .await?;
    rt.deploy(TENANT, &bpmn("channel:payments"), &BTreeMap::new())
        .await?;
    let mut took = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let t = Instant::now();
        let id = rt.start(request(json!({"n": i}))).await?;
        wait_completed(&rt, &id).await?;
        if i >= 20 {
            took.push(t.elapsed());
        }
    }
    let channel = p50(took.clone());
    println!("| channel call: start → COMPLETED | {} |", dist(took));

    let chaos = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/guests/chaos.wasm");
    let Ok(bytes) = std::fs::read(&chaos) else {
        println!(
            "(no {}: the registered-task baseline is skipped)",
            chaos.display()
        );
        return Ok(());
    };
    let rt = runtime(dir, "registered").await?;
    rt.deploy(
        TENANT,
        &bpmn("registered:chaos"),
        &BTreeMap::from([("chaos".to_string(), bytes)]),
    )
    .await?;
    let mut took = Vec::with_capacity(n);
    for _ in 0..n + 20 {
        let t = Instant::now();
        let id = rt.start(request(json!({"do": "echo"}))).await?;
        wait_completed(&rt, &id).await?;
        took.push(t.elapsed());
    }
    let took: Vec<Duration> = took.split_off(20);
    let registered = p50(took.clone());
    println!(
        "| registered echo task: start → COMPLETED | {} |",
        dist(took)
    );
    println!(
        "| added latency of a channel call (p50) | {:.3} ms |",
        ms(channel.saturating_sub(registered))
    );
    Ok(())
}

// ---------------------------------------------------------------- external tasks

async fn external(dir: &Path) -> Result<()> {
    println!("\n## (2) external-task throughput (4 workers, batches of 64)");
    let n = count(6000);
    let rt = runtime(dir, "external").await?;
    rt.set_channel(
        TENANT,
        "work",
        ChannelSpec {
            transport: Transport::Pull,
            url: None,
            secret: None,
        },
    )
    .await?;
    rt.deploy(TENANT, &bpmn("channel:work"), &BTreeMap::new())
        .await?;
    let mut ids = Vec::with_capacity(n);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let rt = rt.clone();
        set.spawn(async move { rt.start(request(json!({"n": i}))).await });
        if set.len() >= 64 {
            if let Some(r) = set.join_next().await {
                ids.push(r??);
            }
        }
    }
    while let Some(r) = set.join_next().await {
        ids.push(r??);
    }
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..4 {
        let rt = rt.clone();
        let done = done.clone();
        workers.spawn(async move {
            let req = FetchRequest {
                worker_id: format!("w{w}"),
                channels: vec!["work".into()],
                max_tasks: 64,
                lock: Duration::from_secs(60),
                wait: Duration::from_millis(200),
            };
            loop {
                let tasks = rt.fetch_and_lock(TENANT, &req).await?;
                if tasks.is_empty() {
                    return Ok::<_, anyhow::Error>(());
                }
                let mut set = tokio::task::JoinSet::new();
                for task in tasks {
                    let rt = rt.clone();
                    let worker = req.worker_id.clone();
                    set.spawn(async move {
                        let mut out = Map::new();
                        out.insert("done".into(), Value::Bool(true));
                        rt.complete_external(TENANT, &task.id, &worker, out).await
                    });
                }
                while let Some(r) = set.join_next().await {
                    r??;
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r??;
    }
    let elapsed = t.elapsed();
    for id in &ids {
        wait_completed(&rt, id).await?;
    }
    println!(
        "| {} tasks fetched and completed by 4 workers | {:.0} tasks/s ({:.1} ms) |",
        done.load(std::sync::atomic::Ordering::Relaxed),
        n as f64 / elapsed.as_secs_f64(),
        ms(elapsed)
    );
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let all = args.is_empty();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    rt.block_on(async {
        if all || args.iter().any(|a| a == "roundtrip") {
            roundtrip(dir.path()).await?;
        }
        if all || args.iter().any(|a| a == "external") {
            external(dir.path()).await?;
        }
        Ok(())
    })
}
