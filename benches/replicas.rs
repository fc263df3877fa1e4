//! The replica benchmark: instances/s drained by one and by two `sutra
//! serve` replicas sharing one PostgreSQL database.
//!
//! A start runs its first attempt in the process that calls `start`, so the
//! bench prepares the work and the replicas share it: in a fresh schema the
//! bench deploys start → T (chaos) → end with a one-hour retry, starts every
//! instance (attempt 1 fails here and parks on its retry), boots N replicas
//! and warms them up (a few instances made due and drained, so the component
//! is compiled), then makes every retry due at once (`UPDATE parks`, then
//! `NOTIFY sutra_parks`) and measures until every instance is COMPLETED. Per
//! instance a replica claims the due retry, commits its fire (arming the
//! attempt's lease park), runs the chaos attempt and commits the completion:
//! the engine workload's task and end steps, across processes.
//!
//! Invariants:
//! - a figure is printed only after its run is checked: every instance
//!   COMPLETED with exactly two attempts; a failed check aborts the bench;
//! - each run has its own schema (dropped after) and its own replicas
//!   (killed after); replicas run the release binary (`CARGO_BIN_EXE_sutra`);
//! - `SUTRA_BENCH_SCALE` (default 1) multiplies the instance count;
//!   `SUTRA_BENCH_SUTRA_BIN` runs another `sutra` binary as the replicas (a
//!   saved build, to compare two builds in one sitting);
//!   `SUTRA_BENCH_REPLICA_PG_OPTIONS` adds `-c name=value` settings to the
//!   replicas' connections (`log_min_duration_statement=0` to profile);
//!   `SUTRA_BENCH_POSTGRES_URL` (else `SUTRA_TEST_POSTGRES_URL`, else the
//!   local `postgres://postgres@127.0.0.1:5432/test`) names the server.
//!
//! Run: `cargo bench --bench replicas`.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, StartRequest};
use sutra::store::{AnyStore, PgStore};

const TENANT: &str = "bench";
/// Instances drained per run (times `SUTRA_BENCH_SCALE`).
const INSTANCES: usize = 3_000;
/// Instances drained before the clock starts (compiles the component).
const WARM: usize = 40;
/// Runs per replica count (the best and the median are printed).
const RUNS: usize = 3;

const PROCESS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="3" initialDelay="PT1H"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scale() -> f64 {
    std::env::var("SUTRA_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(1.0)
}

fn server_url() -> String {
    std::env::var("SUTRA_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("SUTRA_TEST_POSTGRES_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Builds `target/guests/chaos.wasm` (incremental) and reads it.
fn chaos() -> Result<Vec<u8>> {
    let script = root().join("guest-examples/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("chaos")
        .current_dir(root())
        .output()?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = root().join("target/guests/chaos.wasm");
    std::fs::read(&path).with_context(|| format!("read {}", path.display()))
}

/// Busy and total jiffies of the whole machine (`/proc/stat`).
fn machine_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = text
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = cpu.iter().sum();
    // idle + iowait
    let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// User + system jiffies of process `pid`.
fn process_jiffies(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// User + system jiffies of every `postgres` process (the server's backends).
fn postgres_jiffies() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .filter_map(process_jiffies)
        .sum()
}

/// One `sutra serve` replica; killed on drop.
struct Replica {
    child: Child,
    ready: Arc<AtomicBool>,
    log: Arc<Mutex<String>>,
}

impl Replica {
    fn spawn(db_url: &str) -> Result<Replica> {
        let bin = std::env::var("SUTRA_BENCH_SUTRA_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_sutra").to_string());
        let mut child = Command::new(bin)
            .args(["serve", "--no-listen", "--db", db_url])
            .env_remove("SUTRA_DATASOURCE_URL")
            .env("SUTRA_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawn sutra serve")?;
        let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let ready = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(String::new()));
        let (r, l) = (ready.clone(), log.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("driving parked instances") {
                    r.store(true, Ordering::SeqCst);
                } else if let Ok(mut l) = l.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        Ok(Replica { child, ready, log })
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
            bail!("a replica exited ({status}):\n{log}");
        }
        Ok(())
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `cond` every 10 ms until it holds, the replicas staying alive; fails after `limit`.
async fn wait_until<F, Fut>(
    what: &str,
    limit: Duration,
    replicas: &mut [Replica],
    mut cond: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await? {
            return Ok(());
        }
        for r in replicas.iter_mut() {
            r.check_alive()?;
        }
        if Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// CPU jiffies of each server process whose client named itself `app`.
async fn backend_jiffies(sql: &PgPool, app: &str) -> Result<BTreeMap<i32, u64>> {
    let pids: Vec<i32> =
        sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE application_name = $1")
            .bind(app)
            .fetch_all(sql)
            .await?;
    Ok(pids
        .into_iter()
        .filter_map(|pid| Some((pid, process_jiffies(u32::try_from(pid).ok()?)?)))
        .collect())
}

async fn completed(sql: &PgPool) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE state = 'COMPLETED'")
            .fetch_one(sql)
            .await?,
    )
}

/// Makes the retries of `ids` (every one when `None`) due now and wakes the replicas.
async fn make_due(sql: &PgPool, ids: Option<&[String]>) -> Result<()> {
    let now = now_ms();
    match ids {
        Some(ids) => {
            sqlx::query(
                "UPDATE parks SET due_at = $1 WHERE kind = 'retry' AND instance_id = ANY($2)",
            )
            .bind(now)
            .bind(ids)
            .execute(sql)
            .await?
        }
        None => {
            sqlx::query("UPDATE parks SET due_at = $1 WHERE kind = 'retry'")
                .bind(now)
                .execute(sql)
                .await?
        }
    };
    sqlx::query("SELECT pg_notify('sutra_parks', $1)")
        .bind(now.to_string())
        .execute(sql)
        .await?;
    Ok(())
}

/// What one run measured.
struct Run {
    secs: f64,
    per_sec: f64,
    machine_busy: f64,
    replica_cpu_s: Vec<f64>,
    /// CPU seconds of the PostgreSQL server's processes (0 if not local):
    /// every client's, other users' of the server included.
    postgres_cpu_s: f64,
    /// CPU seconds of the server processes serving the replicas' own
    /// connections (their `application_name` is the run's schema); the
    /// server's shared processes (WAL writer, checkpointer) are not in it.
    replica_backends_cpu_s: f64,
}

async fn run_once(url: &str, replicas: usize, n: usize, chaos: &[u8]) -> Result<Run> {
    let schema = format!("sutra_bench_{:016x}", rand::random::<u64>());
    let result = run_in(url, &schema, replicas, n, chaos).await;
    let mut conn = PgConnectOptions::from_str(url)?.connect().await?;
    sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    result
}

async fn run_in(url: &str, schema: &str, replicas: usize, n: usize, chaos: &[u8]) -> Result<Run> {
    let store = PgStore::open_in_schema(url, schema).await?;
    let rt = Runtime::new(
        AnyStore::Postgres(store.clone()),
        RuntimeOptions::new(Config::default()),
    )?;
    rt.deploy(
        TENANT,
        PROCESS,
        &BTreeMap::from([("chaos".to_string(), chaos.to_vec())]),
    )
    .await?;
    // Prepare: every instance ran attempt 1 (failed) and waits on its retry.
    let gate = Arc::new(tokio::sync::Semaphore::new(16));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n + WARM {
        let rt = rt.clone();
        let gate = gate.clone();
        set.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let vars = json!({"do": "fail", "until": 2})
                .as_object()
                .cloned()
                .unwrap_or_default();
            let req = StartRequest {
                tenant: TENANT.into(),
                process_id: "p".into(),
                variables: vars,
                ..StartRequest::default()
            };
            Ok::<String, anyhow::Error>(rt.start(req).await?)
        });
    }
    let mut ids = Vec::new();
    while let Some(id) = set.join_next().await {
        ids.push(id??);
    }
    let opts = PgConnectOptions::from_str(url)?.options([("search_path", schema)]);
    let sql = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(opts)
        .await?;
    let parked: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM parks WHERE kind = 'retry'")
        .fetch_one(&sql)
        .await?;
    if parked != (n + WARM) as i64 {
        bail!("{parked} retries parked, expected {}", n + WARM);
    }
    // Boot the replicas and warm them up.
    let sep = if url.contains('?') { '&' } else { '?' };
    // `SUTRA_BENCH_REPLICA_PG_OPTIONS` (e.g. `-c log_min_duration_statement=0`)
    // adds server settings to the replicas' connections (profiling).
    let extra = std::env::var("SUTRA_BENCH_REPLICA_PG_OPTIONS")
        .map(|o| format!(" {o}").replace(' ', "%20").replace('=', "%3D"))
        .unwrap_or_default();
    // The replicas' backends carry the schema as their application_name, so
    // their CPU is told apart from other clients' of the same server.
    let db_url = format!(
        "{url}{sep}options=-c%20search_path%3D{schema}%20-c%20application_name%3D{schema}{extra}"
    );
    let mut procs = (0..replicas)
        .map(|_| Replica::spawn(&db_url))
        .collect::<Result<Vec<_>>>()?;
    let flags: Vec<_> = procs.iter().map(|p| p.ready.clone()).collect();
    wait_until(
        "the replicas to boot",
        Duration::from_secs(60),
        &mut procs,
        || {
            let up = flags.iter().all(|f| f.load(Ordering::SeqCst));
            async move { Ok(up) }
        },
    )
    .await?;
    make_due(&sql, Some(&ids[..WARM])).await?;
    wait_until(
        "the warm-up",
        Duration::from_secs(60),
        &mut procs,
        || async { Ok(completed(&sql).await? == WARM as i64) },
    )
    .await?;
    // Measure.
    let pids: Vec<u32> = procs.iter().map(|p| p.child.id()).collect();
    let cpu0: Vec<u64> = pids
        .iter()
        .map(|p| process_jiffies(*p).unwrap_or(0))
        .collect();
    let m0 = machine_jiffies();
    let pg0 = postgres_jiffies();
    let backends0 = backend_jiffies(&sql, schema).await?;
    let t0 = Instant::now();
    make_due(&sql, None).await?;
    let total = (n + WARM) as i64;
    wait_until(
        "every instance to complete",
        Duration::from_secs(600),
        &mut procs,
        || async { Ok(completed(&sql).await? == total) },
    )
    .await?;
    let secs = t0.elapsed().as_secs_f64();
    let m1 = machine_jiffies();
    let pg1 = postgres_jiffies();
    let backends1 = backend_jiffies(&sql, schema).await?;
    let replica_backends_cpu_s = backends1
        .iter()
        .map(|(pid, j)| j.saturating_sub(backends0.get(pid).copied().unwrap_or(0)))
        .sum::<u64>() as f64
        / 100.0;
    let hz = 100.0; // USER_HZ on Linux
    let replica_cpu_s: Vec<f64> = pids
        .iter()
        .zip(&cpu0)
        .map(|(p, c0)| {
            process_jiffies(*p).map_or(f64::NAN, |c1| (c1.saturating_sub(*c0)) as f64 / hz)
        })
        .collect();
    let machine_busy = match (m0, m1) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => (b1 - b0) as f64 / (t1 - t0) as f64,
        _ => f64::NAN,
    };
    drop(procs);
    // Check before printing: two attempts each, attempt 2 completed.
    let attempts: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM attempts")
        .fetch_one(&sql)
        .await?;
    let second: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM attempts WHERE attempt = 2 AND outcome = 'completed'",
    )
    .fetch_one(&sql)
    .await?;
    if attempts != 2 * total || second != total {
        bail!("{attempts} attempts ({second} completed second ones) for {total} instances");
    }
    sql.close().await;
    drop(rt);
    store.close().await;
    let postgres_cpu_s = pg1.saturating_sub(pg0) as f64 / hz;
    Ok(Run {
        secs,
        per_sec: n as f64 / secs,
        machine_busy,
        replica_cpu_s,
        postgres_cpu_s,
        replica_backends_cpu_s,
    })
}

async fn run() -> Result<()> {
    let url = server_url();
    let n = ((INSTANCES as f64 * scale()).round() as usize).max(1);
    let chaos = chaos()?;
    let cores = std::thread::available_parallelism()
        .map(|c| c.get())
        .unwrap_or(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\n== load average at start: {}", load.trim());
    println!("\n== replicas: {n} instances drained by N `sutra serve` on one PostgreSQL ({cores} cores, {RUNS} runs each)");
    let mut medians = BTreeMap::new();
    for replicas in [1usize, 2] {
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            let r = run_once(&url, replicas, n, &chaos).await?;
            let cpu: Vec<String> = r.replica_cpu_s.iter().map(|c| format!("{c:.2}")).collect();
            println!(
                "  N={replicas}  {:>7.0} instances/s  ({:.2} s)  machine CPU busy {:>5.1}%  CPU s: replicas [{}] postgres {:.2} (the replicas' backends {:.2}: {:.0} µs/instance)",
                r.per_sec,
                r.secs,
                r.machine_busy * 100.0,
                cpu.join(", "),
                r.postgres_cpu_s,
                r.replica_backends_cpu_s,
                r.replica_backends_cpu_s * 1e6 / n as f64
            );
            runs.push(r.per_sec);
        }
        runs.sort_by(f64::total_cmp);
        let median = runs[runs.len() / 2];
        println!(
            "  N={replicas}  median {median:.0} instances/s, best {:.0}",
            runs[runs.len() - 1]
        );
        medians.insert(replicas, median);
    }
    if let (Some(one), Some(two)) = (medians.get(&1), medians.get(&2)) {
        println!(
            "  two replicas / one: {:.2}x (median over median)",
            two / one
        );
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("replicas bench: cannot build the tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replicas bench failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
