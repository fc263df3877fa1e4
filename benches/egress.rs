//! The egress benchmarks owed by issue 30 (outbound HTTP for WASM tasks):
//!
//! - `call`: one GET to a loopback API made (1) by the host with plain hyper
//!   on a fresh connection (what the egress session does on the wire), (2) by
//!   the host with a pooled reqwest client (keep-alive: a host's usual
//!   client), (3) by the host through the egress [`Session`] (policy, address
//!   check, connect, the call record: the HTTP task's path), (4) by the Rust
//!   `fetch` guest through wasi:http and the session (`Sandbox` attempt with
//!   egress: instantiate, the guest's JSON and wasi:http plumbing, the call),
//!   (5) the same guest attempt to a granted loopback port that refuses (the
//!   request side of (4) and a failed connect, no response), and (6) the same
//!   guest attempt with the request denied by an empty grant (everything of
//!   (4) but the network). Per call: p50 / p90 / p99 and CPU.
//! - `burst`: 1,000 instances (start → the `fetch` task → end) submitted at
//!   once, each making one call: throughput, and each instance's
//!   start → COMPLETED from the store's timestamps, on SQLite and (when
//!   `SUTRA_TEST_POSTGRES_URL` is set) PostgreSQL.
//!
//! Invariants:
//! - one process: the API is an axum server on 127.0.0.1 in the bench's own
//!   multi-threaded tokio runtime, answering a small JSON at once and
//!   counting the requests it serves;
//! - every call is checked (status 200 and the body; the guest's output; the
//!   denial's error) and every burst instance checked COMPLETED, with the
//!   server having served exactly one request per instance, before a figure
//!   is printed; a failed check aborts with a non-zero exit;
//! - the call variants are interleaved in rounds, so a change of the
//!   machine's load hits them alike;
//! - CPU is the on-CPU time of every thread of this process (the loopback
//!   server's included, the same for every variant; PostgreSQL's own CPU is
//!   not in it);
//! - `SUTRA_BENCH_SCALE` (default 1) multiplies the call and instance counts.
//!
//! Run: `cargo bench --bench egress [-- call burst]` (default: both), or
//! `cargo test --bench egress` (the test profile: Sutra unoptimised, its
//! dependencies optimised). Needs `target/guests/fetch.wasm`
//! (`guest-examples/build.sh fetch`). Figures: `benches/README.md` ("Egress").

#[path = "../tests/common/backends.rs"]
mod backends;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::egress::{Egress, Grant, Policy, Session};
use sutra::runtime::{Runtime, RuntimeOptions, Settled, StartRequest};
use sutra::sandbox::{Limits, LoadedComponent, Sandbox, SandboxConfig, Stop, TaskContext};
use sutra::store::AnyStore;

const TENANT: &str = "bench";
const ANSWER: &str = r#"{"ok":true}"#;

// ---------------------------------------------------------------- helpers

fn count(base: usize) -> usize {
    let scale = std::env::var("SUTRA_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(1.0);
    ((base as f64 * scale).round() as usize).max(1)
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Nearest-rank percentile of sorted `v`.
fn at<T: Copy>(v: &[T], q: f64) -> T {
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// On-CPU nanoseconds (`schedstat`) summed over every live thread.
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn fetch_bytes() -> Result<Vec<u8>> {
    let path = root().join("target/guests/fetch.wasm");
    std::fs::read(&path).with_context(|| {
        format!(
            "cannot read {} (build it: guest-examples/build.sh fetch)",
            path.display()
        )
    })
}

/// The loopback API: answers [`ANSWER`] to anything, counting requests.
async fn serve() -> Result<(SocketAddr, Arc<AtomicU64>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let served = Arc::new(AtomicU64::new(0));
    let seen = served.clone();
    let app = axum::Router::new().fallback(move || {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::Relaxed);
            ([(http::header::CONTENT_TYPE, "application/json")], ANSWER)
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, served))
}

fn egress_config() -> Config {
    let mut config = Config::default();
    config.egress.allowed_cidrs = vec!["127.0.0.1/32".into()];
    config
}

// ---------------------------------------------------------------- call

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hyper,
    Reqwest,
    Session,
    Guest,
    GuestRefused,
    GuestDenied,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Hyper,
        Kind::Reqwest,
        Kind::Session,
        Kind::Guest,
        Kind::GuestRefused,
        Kind::GuestDenied,
    ];

    /// Whether a call of this kind reaches the loopback server.
    fn served(self) -> bool {
        !matches!(self, Kind::GuestRefused | Kind::GuestDenied)
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Hyper => "host, plain hyper, a new connection per call",
            Kind::Reqwest => "host, reqwest, pooled (keep-alive)",
            Kind::Session => "host, through the egress session (HTTP task path)",
            Kind::Guest => "fetch guest, wasi:http + egress session (attempt)",
            Kind::GuestRefused => "fetch guest, granted, connection refused (no response)",
            Kind::GuestDenied => "fetch guest, request denied (attempt, no network)",
        }
    }
}

struct CallEnv {
    addr: SocketAddr,
    url: String,
    client: reqwest::Client,
    egress: Arc<Egress>,
    granted: Policy,
    denied: Policy,
    sandbox: Sandbox,
    fetch: LoadedComponent,
    limits: Limits,
    input: String,
    /// A granted loopback port nobody listens on.
    refused_input: String,
}

impl CallEnv {
    fn session(&self, policy: &Policy, key: &str) -> Arc<Session> {
        Arc::new(Session::new(
            self.egress.clone(),
            policy.clone(),
            HashMap::new(),
            Some(key.to_string()),
        ))
    }

    fn ctx(&self, i: usize) -> TaskContext {
        TaskContext {
            tenant: TENANT.into(),
            instance_id: format!("i{i}"),
            task_id: "T".into(),
            attempt: 1,
            idempotency_key: format!("k{i}"),
        }
    }

    async fn call(&self, kind: Kind, i: usize) -> Result<()> {
        match kind {
            Kind::Hyper => {
                let stream = tokio::net::TcpStream::connect(self.addr).await?;
                stream.set_nodelay(true)?;
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await?;
                let driver = tokio::spawn(conn);
                let request = http::Request::get("/rates")
                    .header(http::header::HOST, self.addr.to_string())
                    .body(Empty::<Bytes>::new())?;
                let response = sender.send_request(request).await?;
                let status = response.status();
                let body = response.into_body().collect().await?.to_bytes();
                driver.abort();
                check(status.as_u16(), &body)
            }
            Kind::Reqwest => {
                let response = self.client.get(&self.url).send().await?;
                let status = response.status().as_u16();
                let body = response.bytes().await?;
                check(status, &body)
            }
            Kind::Session => {
                let session = self.session(&self.granted, &format!("k{i}"));
                let request = http::Request::get(self.url.as_str()).body(Empty::<Bytes>::new())?;
                let (response, conn) = session
                    .send(request)
                    .await
                    .map_err(|f| anyhow!("egress session: {f:?}"))?;
                let driver = tokio::spawn(conn);
                let status = response.status().as_u16();
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| anyhow!("body: {e}"))?
                    .to_bytes();
                drop(driver);
                check(status, &body)?;
                let calls = session.log().snapshot().calls;
                if calls.len() != 1 || calls[0].status != Some(200) {
                    bail!("the session's record is not one 200 call: {calls:?}");
                }
                Ok(())
            }
            Kind::Guest | Kind::GuestRefused | Kind::GuestDenied => {
                let (policy, input) = match kind {
                    Kind::Guest => (&self.granted, &self.input),
                    Kind::GuestRefused => (&self.granted, &self.refused_input),
                    _ => (&self.denied, &self.input),
                };
                let ctx = self.ctx(i);
                let session = self.session(policy, &ctx.idempotency_key);
                let report = self
                    .sandbox
                    .attempt_with_egress(
                        &self.fetch,
                        &ctx,
                        input,
                        &self.limits,
                        &Stop::default(),
                        Some(session),
                    )
                    .await;
                match (kind, &report.outcome) {
                    (Kind::Guest, sutra::sandbox::Outcome::Completed { output })
                        if output["status"] == 200
                            && serde_json::from_str::<Value>(
                                output["body"].as_str().unwrap_or_default(),
                            )
                            .ok()
                                == Some(json!({"ok": true})) =>
                    {
                        Ok(())
                    }
                    (Kind::GuestRefused, sutra::sandbox::Outcome::Failed { message, .. })
                        if message.contains("ConnectionRefused") =>
                    {
                        Ok(())
                    }
                    (Kind::GuestDenied, sutra::sandbox::Outcome::Failed { message, .. })
                        if message.contains("HttpRequestDenied") && report.calls.any_denied() =>
                    {
                        Ok(())
                    }
                    (_, other) => bail!("{kind:?}: unexpected outcome {other:?}"),
                }
            }
        }
    }
}

fn check(status: u16, body: &[u8]) -> Result<()> {
    if status != 200 || body != ANSWER.as_bytes() {
        bail!(
            "unexpected answer {status} {:?}",
            String::from_utf8_lossy(body)
        );
    }
    Ok(())
}

async fn bench_call() -> Result<()> {
    let (addr, served) = serve().await?;
    let host = format!("http://{addr}");
    let config = egress_config();
    let egress = Arc::new(Egress::from_config(&config.egress).map_err(|e| anyhow!(e))?);
    // A loopback port that refuses: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let refused_host = format!("http://{closed}");
    let granted = Grant::allowing(&[host.clone(), refused_host.clone()]);
    granted.check(&egress.ceiling).map_err(|e| anyhow!(e))?;
    let sandbox = Sandbox::new(SandboxConfig {
        pool_size: 8,
        cache_dir: Some(root().join("target/bench-egress-cache")),
        ..SandboxConfig::default()
    })?;
    let fetch = sandbox.load(&fetch_bytes()?)?;
    if fetch.egress_import().is_none() {
        bail!("fetch.wasm imports no wasi:http");
    }
    let url = format!("{host}/rates");
    let env = CallEnv {
        addr,
        url: url.clone(),
        client: reqwest::Client::new(),
        granted: granted.policy(&egress.ceiling),
        denied: Grant::allowing(&[]).policy(&egress.ceiling),
        egress,
        sandbox,
        fetch,
        limits: Limits::default(),
        input: json!({ "url": url }).to_string(),
        refused_input: json!({ "url": format!("{refused_host}/rates") }).to_string(),
    };
    let rounds = 10;
    let per_round = count(300);
    let warm = 50;
    for kind in Kind::ALL {
        for i in 0..warm {
            env.call(kind, i).await?;
        }
    }
    let mut samples: BTreeMap<usize, Vec<Duration>> = BTreeMap::new();
    let mut cpu: BTreeMap<usize, u64> = BTreeMap::new();
    let load_before = load_average();
    let served_before = served.load(Ordering::Relaxed);
    let mut i = warm;
    for _ in 0..rounds {
        for (k, kind) in Kind::ALL.iter().enumerate() {
            let c0 = cpu_ns();
            for _ in 0..per_round {
                i += 1;
                let t = Instant::now();
                env.call(*kind, i).await?;
                samples.entry(k).or_default().push(t.elapsed());
            }
            *cpu.entry(k).or_default() += cpu_ns().saturating_sub(c0);
        }
    }
    // Every call that reaches the server reached it exactly once.
    let served_kinds = Kind::ALL.iter().filter(|k| k.served()).count();
    let expected = (rounds * per_round * served_kinds) as u64;
    let got = served.load(Ordering::Relaxed) - served_before;
    if got != expected {
        bail!("the server served {got} requests, expected {expected}");
    }
    println!("## Egress: one call, host client vs the fetch guest (loopback API)");
    println!(
        "load average before / after: {load_before} / {}; {rounds} rounds × {per_round} calls per variant, interleaved",
        load_average()
    );
    println!("| variant | p50 | p90 | p99 | CPU per call (all threads) |");
    println!("|---|---|---|---|---|");
    let mut p50 = Vec::new();
    for (k, kind) in Kind::ALL.iter().enumerate() {
        let mut v = samples.remove(&k).unwrap_or_default();
        v.sort();
        let n = v.len().max(1) as f64;
        p50.push(at(&v, 0.5));
        println!(
            "| {} | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs |",
            kind.label(),
            us(at(&v, 0.5)),
            us(at(&v, 0.9)),
            us(at(&v, 0.99)),
            cpu[&k] as f64 / 1e3 / n
        );
    }
    let diff = |a: usize, b: usize| us(p50[a]) - us(p50[b]);
    println!(
        "added at p50: session over plain hyper {:.1} µs; guest over session {:.1} µs; guest over plain hyper {:.1} µs; guest's call itself (guest − denied guest) {:.1} µs, of which up to the refused connect {:.1} µs and the exchange and response {:.1} µs",
        diff(2, 0),
        diff(3, 2),
        diff(3, 0),
        diff(3, 5),
        diff(4, 5),
        diff(3, 4)
    );
    Ok(())
}

// ---------------------------------------------------------------- burst

fn bpmn() -> String {
    r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:fetch"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
        .to_string()
}

fn request(url: &str) -> StartRequest {
    StartRequest {
        tenant: TENANT.into(),
        process_id: "p".into(),
        variables: json!({ "url": url })
            .as_object()
            .cloned()
            .unwrap_or_default(),
        ..StartRequest::default()
    }
}

async fn completed(rt: &Runtime<AnyStore>, id: &str) -> Result<sutra::store::InstanceRecord> {
    match rt.settle(id).await? {
        Settled::Terminal(rec) if rec.state == "COMPLETED" => Ok(rec),
        other => bail!("instance {id} did not complete: {other:?}"),
    }
}

async fn burst(store: AnyStore, label: &str, cache: PathBuf) -> Result<()> {
    let (addr, served) = serve().await?;
    let host = format!("http://{addr}");
    let url = format!("{host}/rates");
    let mut opts = RuntimeOptions::new(egress_config());
    opts.cache_dir = Some(cache);
    let rt = Runtime::new(store, opts)?;
    rt.put_grant(TENANT, "fetch", &Grant::allowing(&[host]))
        .await?;
    rt.deploy(
        TENANT,
        &bpmn(),
        &BTreeMap::from([("fetch".to_string(), fetch_bytes()?)]),
    )
    .await?;
    // Warm-up: the component compiled, the pool and caches filled.
    for _ in 0..20 {
        let id = rt.start(request(&url)).await?;
        completed(&rt, &id).await?;
    }
    let n = count(1000);
    let served_before = served.load(Ordering::Relaxed);
    let load_before = load_average();
    let c0 = cpu_ns();
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let rt = rt.clone();
        let req = request(&url);
        set.spawn(async move { rt.start(req).await });
    }
    let mut ids = Vec::with_capacity(n);
    while let Some(r) = set.join_next().await {
        ids.push(r??);
    }
    let submitted = t0.elapsed();
    // One waiter at a time (each `settle` wakes on every commit): the last
    // one returns when the last instance completed.
    let mut lat = Vec::with_capacity(n);
    for id in &ids {
        let rec = completed(&rt, id).await?;
        let ended = rec.ended_at.ok_or_else(|| anyhow!("{id}: no ended_at"))?;
        lat.push(ended - rec.started_at);
    }
    let took = t0.elapsed();
    let cpu = cpu_ns().saturating_sub(c0);
    let got = served.load(Ordering::Relaxed) - served_before;
    if got != n as u64 {
        bail!("{n} instances made {got} calls, expected one each");
    }
    lat.sort();
    println!(
        "| {label} | {n} | {:.0} instances/s (all COMPLETED after {:.0} ms; starts returned after {:.0} ms) | {} / {} / {} / {} ms | {:.0} µs | {load_before} / {} |",
        n as f64 / took.as_secs_f64(),
        took.as_secs_f64() * 1e3,
        submitted.as_secs_f64() * 1e3,
        at(&lat, 0.5),
        at(&lat, 0.9),
        at(&lat, 0.99),
        lat[lat.len() - 1],
        cpu as f64 / 1e3 / n as f64,
        load_average()
    );
    Ok(())
}

async fn bench_burst() -> Result<()> {
    println!("## Egress: 1,000 instances at once, each one fetch call (loopback API)");
    println!("| store | instances | throughput | start → COMPLETED p50 / p90 / p99 / max (store timestamps, ms) | CPU per instance (this process) | load average before / after |");
    println!("|---|---|---|---|---|---|");
    let cache = root().join("target/bench-egress-cache");
    for backend in [backends::Backend::Sqlite, backends::Backend::Postgres] {
        let cache = cache.clone();
        backends::run(backend, move |db| async move {
            let label = match db.backend {
                backends::Backend::Sqlite => "SQLite file",
                backends::Backend::Postgres => "PostgreSQL",
            };
            if let Err(e) = burst(db.store.clone(), label, cache).await {
                panic!("burst on {label}: {e:#}");
            }
        })
        .await;
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let selected: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |w: &str| selected.is_empty() || selected.iter().any(|s| s == w);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("egress bench: no tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        if want("call") {
            bench_call().await?;
        }
        if want("burst") {
            bench_burst().await?;
        }
        Ok::<_, anyhow::Error>(())
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("egress bench failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
