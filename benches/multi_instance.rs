//! Multi-instance at scale (issue 29 item 1's target; issue 33 item 1).
//!
//! 1. A parallel multi-instance service task over 10,000 items (the `chaos`
//!    guest echoing, concurrency the default window of 100) through
//!    `sutra serve` on a fresh SQLite file: the wall time from the start's
//!    POST to COMPLETED, inner tasks per second, and the server's RSS (its
//!    peak, `VmHWM`, and at the end). Target: RSS under 200 MB and at least
//!    5,000 inner tasks/s.
//! 2. The same body sequential over 1,000 items.
//! 3. Per-token cost of joins, in process on SQLite: start → fork of 8 →
//!    join → end, with a parallel gateway pair, an inclusive pair (every
//!    condition true) and a parallel split into an inclusive join (the
//!    join's cost alone); the time per instance over 8 tokens.
//!
//! A figure is printed only after its check (COMPLETED, every result in
//! order). `SUTRA_BENCH_SUTRA_BIN` runs another build of `sutra` (an A/B
//! run's "before"); `SUTRA_BENCH_MI_ITEMS` changes the 10,000.
//!
//! `cargo bench --bench multi_instance`; figures in benches/README.md.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, StartRequest};
use sutra::store::tenancy::TenantLimits;
use sutra::store::AnyStore;

const TENANT: &str = "bench";

fn chaos() -> Result<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("guest-examples/build.sh"))
        .arg("chaos")
        .current_dir(root)
        .output()
        .context("run guest-examples/build.sh")?;
    if !out.status.success() {
        bail!(
            "build.sh chaos failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::read(root.join("target/guests/chaos.wasm")).context("read chaos.wasm")
}

/// A multi-instance service task `T` over `items`, each iteration's input
/// its element, the results in `out`.
fn mi(id: &str, sequential: bool) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="{id}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:io inputPath="$.item"/></bpmn:extensionElements>
      <bpmn:multiInstanceLoopCharacteristics isSequential="{sequential}"><bpmn:extensionElements><q:multiInstance collection="items" element="item" outputCollection="out" outputElement="i"/></bpmn:extensionElements></bpmn:multiInstanceLoopCharacteristics>
    </bpmn:serviceTask>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="T"/>
    <bpmn:sequenceFlow id="f1" sourceRef="T" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// start → split (8 flows) → join → end, each gateway parallel or
/// inclusive (`true`); an inclusive split's flows are each conditioned `true`.
fn joins(id: &str, inclusive_split: bool, inclusive_join: bool) -> String {
    let gw = |inclusive: bool| {
        if inclusive {
            "inclusiveGateway"
        } else {
            "parallelGateway"
        }
    };
    let (split, join) = (gw(inclusive_split), gw(inclusive_join));
    let cond = if inclusive_split {
        "<bpmn:conditionExpression>true</bpmn:conditionExpression>"
    } else {
        ""
    };
    let mut flows = String::new();
    for i in 0..8 {
        flows.push_str(&format!(
            r#"<bpmn:sequenceFlow id="a{i}" sourceRef="split" targetRef="join">{cond}</bpmn:sequenceFlow>"#
        ));
    }
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="{id}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:{split} id="split"/>
    <bpmn:{join} id="join"/>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="split"/>
    {flows}
    <bpmn:sequenceFlow id="f1" sourceRef="join" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_serve(url: &str) -> Result<Server> {
    let exe = std::env::var("SUTRA_BENCH_SUTRA_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_sutra").to_string());
    let mut child = Command::new(&exe)
        .args(["serve", "--listen", "127.0.0.1:0", "--db", url])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawn {exe}"))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow!("no stderr of sutra serve"))?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if line.contains("listening on") {
                let _ = tx.send(line.clone());
            }
            if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("sutra serve: {line}");
            }
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(120))
        .map_err(|e| anyhow!("sutra serve did not listen: {e}"))?;
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .ok_or_else(|| anyhow!("no address in {line:?}"))?
        .to_string();
    Ok(Server { child, addr })
}

/// Start `process` over `n` items through the server and wait for its end:
/// (wall time, the instance's view).
async fn run_over(
    http: &reqwest::Client,
    server: &Server,
    key: &str,
    process: &str,
    n: usize,
) -> Result<(Duration, Value)> {
    let items: Vec<Value> = (0..n).map(|i| json!({"do": "echo", "i": i})).collect();
    let t0 = Instant::now();
    let resp = http
        .post(format!(
            "http://{}/v1/processes/{process}/instances",
            server.addr
        ))
        .bearer_auth(key)
        .json(&json!({ "variables": { "items": items } }))
        .timeout(Duration::from_secs(3600))
        .send()
        .await?;
    let status = resp.status();
    let body: Value = resp.json().await?;
    if !status.is_success() {
        bail!("start answered {status}: {body}");
    }
    let id = body["instance"]
        .as_str()
        .ok_or_else(|| anyhow!("no id in {body}"))?
        .to_string();
    loop {
        let view: Value = http
            .get(format!("http://{}/v1/instances/{id}", server.addr))
            .bearer_auth(key)
            .send()
            .await?
            .json()
            .await?;
        match view["state"].as_str() {
            Some("RUNNING" | "WAITING") => {}
            Some("COMPLETED") => {
                let took = t0.elapsed();
                let want: Vec<usize> = (0..n).collect();
                if view["variables"]["out"] != json!(want) {
                    bail!("{process}: the results are not the items in order");
                }
                return Ok((took, view));
            }
            other => bail!("{process} ended {other:?}: {}", view["error"]),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn through_serve(items: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("mi.db").display());
    let store = AnyStore::open(&url).await?;
    let mut opts = RuntimeOptions::new(Config::default());
    opts.alarms = false;
    opts.cache_dir = Some(dir.path().join("cache"));
    let rt = Runtime::new(store.clone(), opts)?;
    let modules = BTreeMap::from([("chaos".to_string(), chaos()?)]);
    rt.deploy(TENANT, &mi("parallel", false), &modules).await?;
    rt.deploy(TENANT, &mi("sequential", true), &modules).await?;
    let now = chrono::Utc::now().timestamp_millis();
    let (_, key) = sutra::api::auth::create_tenant(&store, TENANT, TenantLimits::default(), now)
        .await
        .map_err(|e| anyhow!("tenant: {e}"))?;
    drop(rt);
    let server = spawn_serve(&url)?;
    let pid = server.child.id();
    let http = reqwest::Client::new();
    // Warm the module and the connection.
    run_over(&http, &server, &key, "parallel", 10).await?;
    let (rss0, _) = rss_kib(pid).ok_or_else(|| anyhow!("no /proc/{pid}"))?;
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watching = {
        let peak = peak.clone();
        std::thread::spawn(move || {
            while let Some((rss, _)) = rss_kib(pid) {
                peak.fetch_max(rss, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let (took, _) = run_over(&http, &server, &key, "parallel", items).await?;
    let (rss, hwm) = rss_kib(pid).ok_or_else(|| anyhow!("no /proc/{pid}"))?;
    println!(
        "| parallel over {items} items | {:.2} s | {:.0} inner tasks/s | RSS {} before, peak {} (VmHWM {}), {} after |",
        took.as_secs_f64(),
        items as f64 / took.as_secs_f64(),
        mib(rss0),
        mib(peak.load(std::sync::atomic::Ordering::Relaxed)),
        mib(hwm),
        mib(rss)
    );
    let n = 1_000;
    let (took, _) = run_over(&http, &server, &key, "sequential", n).await?;
    let (rss, hwm) = rss_kib(pid).ok_or_else(|| anyhow!("no /proc/{pid}"))?;
    println!(
        "| sequential over {n} items | {:.2} s | {:.0} inner tasks/s | VmHWM {}, {} after |",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        mib(hwm),
        mib(rss)
    );
    drop(server);
    let _ = watching.join();
    Ok(())
}

async fn join_cost() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("joins.db").display());
    let store = AnyStore::open(&url).await?;
    let mut opts = RuntimeOptions::new(Config::default());
    opts.cache_dir = Some(dir.path().join("cache"));
    let rt = Runtime::new(store, opts)?;
    // The inclusive pair also evaluates its split's 8 conditions; the
    // parallel split into an inclusive join is the join's own cost.
    let shapes = [
        ("parallel8", false, false),
        ("inclusive8", true, true),
        ("parallel-split-inclusive-join8", false, true),
    ];
    for (id, split, join) in shapes {
        rt.deploy(TENANT, &joins(id, split, join), &BTreeMap::new())
            .await?;
    }
    const N: usize = 500;
    for (process, _, _) in shapes {
        let mut times = Vec::with_capacity(N);
        for i in 0..N + 20 {
            let t0 = Instant::now();
            let id = rt
                .start(StartRequest {
                    tenant: TENANT.into(),
                    process_id: process.into(),
                    ..StartRequest::default()
                })
                .await?;
            let took = t0.elapsed();
            if i >= 20 {
                times.push(took);
            }
            let state = rt.inspect(&id).await?.state;
            if state != "COMPLETED" {
                bail!("{process} instance {id} is {state}");
            }
        }
        times.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let median = times[times.len() / 2];
        println!(
            "| {process}: start → COMPLETED (8 tokens joined) | p50 {:.0} µs | p99 {:.0} µs | {:.1} µs per token at the median |",
            us(median),
            us(times[times.len() * 99 / 100]),
            us(median) / 8.0
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let items = std::env::var("SUTRA_BENCH_MI_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        through_serve(items).await?;
        join_cost().await
    })
}
