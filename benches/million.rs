//! The million-parked bench (issue 18): a store holding N instances parked on
//! a timer due in the future, and what `sutra serve` does on it — boot to the
//! first fire of a due park, its RSS, the latency of one more start and of
//! one due park's fire — against the same figures with 1,000 parked.
//!
//! How the rows are made quickly: the first `min(N, 1,000)` instances are
//! parked through `Runtime::start` (the engine writes their instance, park
//! and journal rows). For more, each of those templates is replicated with
//! set-based SQL: one `INSERT .. SELECT` per table and template over a
//! recursive CTE counting 1..R (the same statement text on both backends but
//! the date formatting), copying the template's rows with a new instance id
//! (the template's 12-hex-digit time prefix, then 16 digits of a counter),
//! the new id substituted in the snapshot and the journal, and a new due
//! time (the template's + i × 3.6 s, so the million dues spread over an hour
//! past the templates'), written both in `parks.due_at` and, as the engine
//! formats it, in the snapshot's park and the journal. Every replicated row
//! is thus a row the engine wrote, with another id and due time. After the
//! copy: SQLite `PRAGMA wal_checkpoint(TRUNCATE)` (the WAL a long insert
//! leaves is folded back, as a server's own checkpoints would have);
//! PostgreSQL `ANALYZE` of the copied tables (what autovacuum does after
//! such a growth).
//!
//! Invariants:
//! - `sutra serve` is the release binary (`CARGO_BIN_EXE_sutra`), run on the
//!   database as a user runs it (`--listen`); the bench reads the database
//!   beside it and starts instances through its HTTP API;
//! - a figure is printed only after its check: N instances parked, every
//!   due instance COMPLETED by the server;
//! - `SUTRA_BENCH_SCALE` (default 1) multiplies the large N (1,000,000); the
//!   small N stays 1,000. PostgreSQL runs when `SUTRA_TEST_POSTGRES_URL` (or
//!   `SUTRA_BENCH_POSTGRES_URL`) is set, in a fresh schema dropped after.
//!
//! Run: `cargo bench --bench million [-- sqlite postgres small large]`
//! (default: every backend available, both sizes). Figures and their
//! reading: `benches/README.md`, "A million parked instances (issue 18)".

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::ConnectOptions;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, StartRequest};
use sutra::store::tenancy::{TenancyStore, TenantLimits};
use sutra::store::{AnyStore, PgStore, Store};

const TENANT: &str = "bench";
/// Instances parked through `start` at most; more are replicated from them.
const TEMPLATES: usize = 1_000;
/// Spacing of the replicas' due times (one hour over 1,000 replicas).
const DUE_STEP_MS: i64 = 3_600;
/// Instances due when `sutra serve` boots.
const DUE_AT_BOOT: usize = 4;
/// Parks made due while the server idles, one at a time.
const FIRES: usize = 10;
/// Starts through the server's API, one at a time.
const STARTS: usize = 50;

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

fn postgres_url() -> Option<String> {
    std::env::var("SUTRA_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("SUTRA_TEST_POSTGRES_URL"))
        .ok()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// p50 / p99 / max of `v` (nearest rank), in ms.
fn pct(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    if v.is_empty() {
        return "no sample".into();
    }
    format!(
        "p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (n={})",
        at(0.5),
        at(0.99),
        at(1.0),
        v.len()
    )
}

fn row(label: &str, value: impl std::fmt::Display) {
    println!("  {label:<46} {value}");
}

/// `VmRSS` and `VmHWM` of process `pid`, in KiB.
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

fn bpmn(id: &str, duration: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="{id}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition><bpmn:timeDuration>{duration}</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

// ---------------------------------------------------------------- backends

/// Where a run's database is.
struct Target {
    backend: &'static str,
    /// What `sutra serve --db` and the bench's store open.
    url: String,
    /// The raw pool the rows are copied with.
    raw: Raw,
    /// PostgreSQL: the schema to drop after.
    schema: Option<(String, String)>,
}

enum Raw {
    Sqlite(SqlitePool),
    Pg(PgPool),
}

/// The new due time of replica `n.i` of a template, as the engine writes it
/// in a snapshot (RFC 3339, UTC, milliseconds): the one expression the two
/// backends spell differently. `$3` is the template's due (ms).
fn due_text(backend: &str) -> &'static str {
    if backend == "sqlite" {
        "strftime('%Y-%m-%dT%H:%M:%S', ($3 + n.i * $4) / 1000, 'unixepoch') || '.' \
         || substr('00' || (($3 + n.i * $4) % 1000), -3) || 'Z'"
    } else {
        "to_char(to_timestamp(($3 + n.i * $4) / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') \
         || '.' || lpad((($3 + n.i * $4) % 1000)::text, 3, '0') || 'Z'"
    }
}

/// The copies of one template: `$1` template id, `$2` replicas, `$3` its
/// due (ms), `$4` due step (ms), `$5` its due as written in its snapshot,
/// `$6` the first counter of the new ids.
fn copy_sql(backend: &str) -> [String; 3] {
    let series = "WITH RECURSIVE n(i) AS (SELECT CAST(1 AS BIGINT) UNION ALL \
                  SELECT i + 1 FROM n WHERE i < $2)";
    let counter = "CAST(($6 + n.i) AS TEXT)";
    let new_id = format!(
        "substr($1, 1, 12) || substr('0000000000000000' || {counter}, length({counter}) + 1, 16)"
    );
    let due = due_text(backend);
    [
        format!(
            "INSERT INTO instances (id, tenant, deployment_id, process_id, state, version, snapshot, \
               idempotency_key, retry_of, started_at, updated_at, ended_at, parent_id, parent_park, \
               idempotency_fingerprint) \
             {series} SELECT {new_id}, t.tenant, t.deployment_id, t.process_id, t.state, t.version, \
               replace(replace(t.snapshot, $1, {new_id}), $5, {due}), t.idempotency_key, t.retry_of, \
               t.started_at, t.updated_at, t.ended_at, t.parent_id, t.parent_park, t.idempotency_fingerprint \
             FROM n CROSS JOIN instances t WHERE t.id = $1"
        ),
        format!(
            "INSERT INTO parks (instance_id, seq, kind, tenant, deployment_id, due_at, message_name, \
               correlation_key, claimed_by, claimed_until, payload) \
             {series} SELECT {new_id}, p.seq, p.kind, p.tenant, p.deployment_id, \
               p.due_at - $3 + ($3 + n.i * $4), p.message_name, p.correlation_key, p.claimed_by, \
               p.claimed_until, p.payload \
             FROM n CROSS JOIN parks p WHERE p.instance_id = $1"
        ),
        format!(
            "INSERT INTO journal (instance_id, seq, at, kind, node, data) \
             {series} SELECT {new_id}, j.seq, j.at, j.kind, j.node, \
               replace(replace(j.data, $1, {new_id}), $5, {due}) \
             FROM n CROSS JOIN journal j WHERE j.instance_id = $1"
        ),
    ]
}

/// One template's copy arguments (see [`copy_sql`]).
struct Copy<'a> {
    id: &'a str,
    replicas: i64,
    due_ms: i64,
    due_text: &'a str,
    first: i64,
}

macro_rules! bind_copy {
    ($sql:expr, $c:expr) => {
        sqlx::query($sql)
            .bind($c.id)
            .bind($c.replicas)
            .bind($c.due_ms)
            .bind(DUE_STEP_MS)
            .bind($c.due_text)
            .bind($c.first)
    };
}

impl Raw {
    /// Runs the copies of `copies`, in one transaction.
    async fn copy(&self, sql: &[String; 3], copies: &[Copy<'_>]) -> Result<()> {
        match self {
            Raw::Sqlite(pool) => {
                let mut tx = pool.begin().await?;
                for c in copies {
                    for s in sql {
                        bind_copy!(s.as_str(), c).execute(&mut *tx).await?;
                    }
                }
                tx.commit().await?;
            }
            Raw::Pg(pool) => {
                let mut tx = pool.begin().await?;
                for c in copies {
                    for s in sql {
                        bind_copy!(s.as_str(), c).execute(&mut *tx).await?;
                    }
                }
                tx.commit().await?;
            }
        }
        Ok(())
    }

    /// After the copy: fold the WAL back (SQLite), refresh the planner's
    /// statistics (PostgreSQL).
    async fn settle(&self) -> Result<()> {
        match self {
            Raw::Sqlite(pool) => {
                sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                    .execute(pool)
                    .await?;
            }
            Raw::Pg(pool) => {
                sqlx::query("ANALYZE instances, parks, journal")
                    .execute(pool)
                    .await?;
            }
        }
        Ok(())
    }

    async fn count(&self, sql: &str) -> Result<i64> {
        Ok(match self {
            Raw::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await?,
            Raw::Pg(pool) => sqlx::query_scalar(sql).fetch_one(pool).await?,
        })
    }

    async fn text(&self, sql: &str) -> Result<String> {
        Ok(match self {
            Raw::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await?,
            Raw::Pg(pool) => sqlx::query_scalar(sql).fetch_one(pool).await?,
        })
    }

    async fn exec_bind(&self, sql: &str, a: i64, b: &str) -> Result<()> {
        match self {
            Raw::Sqlite(pool) => {
                sqlx::query(sql).bind(a).bind(b).execute(pool).await?;
            }
            Raw::Pg(pool) => {
                sqlx::query(sql).bind(a).bind(b).execute(pool).await?;
            }
        }
        Ok(())
    }

    async fn close(&self) {
        match self {
            Raw::Sqlite(pool) => pool.close().await,
            Raw::Pg(pool) => pool.close().await,
        }
    }
}

async fn sqlite_target(dir: &Path, name: &str) -> Result<Target> {
    let path = dir.join(format!("{name}.db"));
    // Creates the schema (migrations), then lets the raw pool in.
    let store = sutra::store::SqliteStore::open(&path.to_string_lossy()).await?;
    store.close().await;
    let raw = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&path)
                .busy_timeout(Duration::from_secs(30)),
        )
        .await?;
    Ok(Target {
        backend: "sqlite",
        url: format!("sqlite://{}", path.display()),
        raw: Raw::Sqlite(raw),
        schema: None,
    })
}

async fn postgres_target(url: &str) -> Result<Target> {
    let schema = format!("sutra_million_{:016x}", rand::random::<u64>());
    let store = PgStore::open_in_schema(url, &schema).await?;
    store.close().await;
    let opts = PgConnectOptions::from_str(url)?.options([("search_path", schema.as_str())]);
    let raw = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(opts)
        .await?;
    let sep = if url.contains('?') { '&' } else { '?' };
    Ok(Target {
        backend: "postgres",
        url: format!("{url}{sep}options=-c%20search_path%3D{schema}"),
        raw: Raw::Pg(raw),
        schema: Some((url.to_string(), schema)),
    })
}

async fn drop_target(t: Target) -> Result<()> {
    t.raw.close().await;
    if let Some((url, schema)) = t.schema {
        let mut conn = PgConnectOptions::from_str(&url)?.connect().await?;
        sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .execute(&mut conn)
            .await?;
    }
    Ok(())
}

// ---------------------------------------------------------------- making rows

/// The due time of a template's one park, in the row and as the snapshot
/// writes it.
fn template_due(snapshot: &str) -> Result<String> {
    let v: Value = serde_json::from_str(snapshot)?;
    let parks = v["parks"]
        .as_object()
        .ok_or_else(|| anyhow!("a snapshot without parks"))?;
    let [(_, park)] = parks.iter().collect::<Vec<_>>()[..] else {
        bail!("a template with {} parks", parks.len());
    };
    park["due"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("a park without its due time"))
}

/// Parks `n` instances of `parked` (PT1H) in `t`: through `start`, then by copy.
async fn make_parked(rt: &Runtime<AnyStore>, t: &Target, n: usize) -> Result<()> {
    let templates = n.min(TEMPLATES);
    if !n.is_multiple_of(templates) {
        bail!("{n} is not a multiple of {templates}");
    }
    let replicas = (n / templates - 1) as i64;
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    let mut ids = Vec::with_capacity(templates);
    for _ in 0..templates {
        let rt = rt.clone();
        set.spawn(async move { rt.start(request("parked")).await });
        if set.len() >= 64 {
            if let Some(r) = set.join_next().await {
                ids.push(r??);
            }
        }
    }
    while let Some(r) = set.join_next().await {
        ids.push(r??);
    }
    let started = t0.elapsed();
    let t1 = Instant::now();
    if replicas > 0 {
        let sql = copy_sql(t.backend);
        let mut copies = Vec::with_capacity(templates);
        let mut texts = Vec::with_capacity(templates);
        for id in &ids {
            let rec = rt
                .store()
                .load_instance(id)
                .await?
                .ok_or_else(|| anyhow!("template {id} is gone"))?;
            let park = rt.store().parks_of(id).await?;
            let due_ms = park
                .first()
                .and_then(|p| p.due_at)
                .ok_or_else(|| anyhow!("template {id} has no timed park"))?;
            texts.push((id.clone(), due_ms, template_due(&rec.snapshot)?));
        }
        for (k, (id, due_ms, text)) in texts.iter().enumerate() {
            copies.push(Copy {
                id,
                replicas,
                due_ms: *due_ms,
                due_text: text,
                first: k as i64 * 1_000_000,
            });
        }
        for chunk in copies.chunks(50) {
            t.raw.copy(&sql, chunk).await?;
        }
    }
    t.raw.settle().await?;
    let copied = t1.elapsed();
    let parks = t
        .raw
        .count("SELECT COUNT(*) FROM parks WHERE kind = 'timer'")
        .await?;
    let waiting = t
        .raw
        .count("SELECT COUNT(*) FROM instances WHERE state = 'WAITING'")
        .await?;
    if parks != n as i64 || waiting != n as i64 {
        bail!("{waiting} instances WAITING, {parks} timer parks (expected {n})");
    }
    row(
        "making the rows",
        format!(
            "{templates} started in {:.2} s, {} copied in {:.2} s ({:.0} instances/s)",
            started.as_secs_f64(),
            n - templates,
            copied.as_secs_f64(),
            (n - templates) as f64 / copied.as_secs_f64().max(1e-9)
        ),
    );
    Ok(())
}

fn request(process: &str) -> StartRequest {
    StartRequest {
        tenant: TENANT.into(),
        process_id: process.into(),
        ..StartRequest::default()
    }
}

// ---------------------------------------------------------------- the server

struct Server {
    child: Child,
    addr: String,
    spawned_ms: i64,
    spawned: Instant,
    listening: Duration,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_serve(url: &str) -> Result<Server> {
    // `SUTRA_BENCH_SUTRA_BIN` runs another build (an A/B run's "before").
    let exe = std::env::var("SUTRA_BENCH_SUTRA_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_sutra").to_string());
    let spawned_ms = now_ms();
    let spawned = Instant::now();
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
    let listening = spawned.elapsed();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .ok_or_else(|| anyhow!("no address in {line:?}"))?
        .to_string();
    Ok(Server {
        child,
        addr,
        spawned_ms,
        spawned,
        listening,
    })
}

/// When instance `id` ended (ms), waiting for it up to `limit`.
async fn ended_at(store: &AnyStore, id: &str, limit: Duration) -> Result<i64> {
    let until = Instant::now() + limit;
    loop {
        if let Some(rec) = store.load_instance(id).await? {
            if let Some(end) = rec.ended_at {
                if rec.state != "COMPLETED" {
                    bail!("instance {id} ended {}", rec.state);
                }
                return Ok(end);
            }
        }
        if Instant::now() > until {
            bail!("instance {id} did not end within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The due time of instance `id`'s one park.
async fn due_of(store: &AnyStore, id: &str) -> Result<i64> {
    store
        .parks_of(id)
        .await?
        .first()
        .and_then(|p| p.due_at)
        .ok_or_else(|| anyhow!("instance {id} has no timed park"))
}

// ---------------------------------------------------------------- one run

async fn run_one(t: Target, n: usize) -> Result<()> {
    println!("\n== {}: {n} parked instances (PT1H timers)", t.backend);
    let store = AnyStore::open(&t.url).await?;
    let mut opts = RuntimeOptions::new(Config::default());
    // This runtime only writes rows: every wait is left to the server.
    opts.alarms = false;
    let rt = Runtime::new(store.clone(), opts)?;
    for (process, duration) in [("parked", "PT1H"), ("due", "PT0.05S"), ("soon", "PT1S")] {
        rt.deploy(TENANT, &bpmn(process, duration), &BTreeMap::new())
            .await?;
    }
    let (_, key) =
        sutra::api::auth::create_tenant(&store, TENANT, TenantLimits::default(), now_ms())
            .await
            .map_err(|e| anyhow!("tenant: {e}"))?;
    make_parked(&rt, &t, n).await?;
    if let Raw::Sqlite(_) = t.raw {
        let file = std::fs::metadata(t.url.trim_start_matches("sqlite://"))?.len();
        row(
            "database file",
            format!("{:.1} MiB", file as f64 / (1 << 20) as f64),
        );
    }

    // Store-level, before the server: what its idle loop asks.
    let mut idle = Vec::new();
    let mut next = Vec::new();
    for _ in 0..50 {
        let t0 = Instant::now();
        let got = store.claim_due(now_ms(), 256, "bench", 60_000).await?;
        idle.push(ms(t0.elapsed()));
        if !got.is_empty() {
            bail!("{} parks were due already", got.len());
        }
        let t0 = Instant::now();
        store.next_due().await?;
        next.push(ms(t0.elapsed()));
    }
    row("claim_due, nothing due (an idle poll)", pct(idle));
    row("next_due", pct(next));

    // Due at boot: parked unclaimed 50 ms before now.
    let mut due_ids = Vec::new();
    for _ in 0..DUE_AT_BOOT {
        due_ids.push(rt.start(request("due")).await?);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let server = spawn_serve(&t.url)?;
    let pid = server.child.id();
    let mut first = i64::MAX;
    for id in &due_ids {
        first = first.min(ended_at(&store, id, Duration::from_secs(120)).await?);
    }
    let seen = server.spawned.elapsed();
    row(
        "`sutra serve`: spawn → listening",
        format!("{:.0} ms", ms(server.listening)),
    );
    row(
        "`sutra serve`: spawn → first due park fired",
        format!(
            "{} ms (its instance's ended_at; seen by the bench at {:.0} ms)",
            first - server.spawned_ms,
            ms(seen)
        ),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let booted = rss_kib(pid).ok_or_else(|| anyhow!("no /proc/{pid}/status"))?;

    // One more start, through the server's API, one at a time.
    let http = reqwest::Client::new();
    let url = format!("http://{}/v1/processes/parked/instances", server.addr);
    // The first few warm the connection and the caches.
    timed_starts(&http, &url, &key, 5).await?;
    let starts = timed_starts(&http, &url, &key, STARTS).await?;
    row("start one more (HTTP POST → 201, sequential)", pct(starts));
    // The same with a live-instance quota on the tenant: each start counts
    // the tenant's live instances (runtime/tenancy.rs). The server caches
    // a tenant's limits for 5 s.
    let quota = TenantLimits {
        max_instances: Some(100_000_000),
        ..TenantLimits::default()
    };
    store.set_tenant_limits(TENANT, &quota).await?;
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let quota_starts = timed_starts(&http, &url, &key, 20).await?;
    row("the same, the tenant under a quota", pct(quota_starts));
    store
        .set_tenant_limits(TENANT, &TenantLimits::default())
        .await?;

    // Parks falling due while the server idles: written by this process
    // (no alarm, unclaimed), claimed by the server's poller at their time.
    let mut soon = Vec::new();
    for _ in 0..FIRES {
        let id = rt.start(request("soon")).await?;
        let due = due_of(&store, &id).await?;
        soon.push((id, due));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let mut late = Vec::new();
    for (id, due) in &soon {
        let end = ended_at(&store, id, Duration::from_secs(60)).await?;
        late.push((end - due) as f64);
    }
    row("fire one due park: due_at → ended_at", pct(late));
    // A copied row fires like one the engine wrote: the latest-due park
    // (a copy when N > 1,000) made due now, then fired by the server.
    let copy = t
        .raw
        .text("SELECT instance_id FROM parks WHERE kind = 'timer' ORDER BY due_at DESC, instance_id LIMIT 1")
        .await?;
    t.raw
        .exec_bind(
            "UPDATE parks SET due_at = $1 WHERE instance_id = $2",
            now_ms(),
            &copy,
        )
        .await?;
    ended_at(&store, &copy, Duration::from_secs(60)).await?;
    let after = rss_kib(pid).ok_or_else(|| anyhow!("no /proc/{pid}/status"))?;
    row(
        "`sutra serve` RSS (VmRSS)",
        format!(
            "{} 1 s after the first fire, {} after the starts and fires (peak VmHWM {})",
            mib(booted.0),
            mib(after.0),
            mib(after.1)
        ),
    );
    drop(server);

    // Claims of due parks: every park made due by asking as of 3 h from now.
    let later = now_ms() + 3 * 3_600_000;
    let mut claims = Vec::new();
    let want = 256.min(n);
    for _ in 0..20.min(n / 256).max(1) {
        let t0 = Instant::now();
        let got = store.claim_due(later, 256, "bench", 60_000).await?;
        claims.push(ms(t0.elapsed()));
        if got.len() != want {
            bail!("claimed {} parks (expected {want})", got.len());
        }
    }
    row(&format!("claim_due 256 of {n} due"), pct(claims));
    let mut next = Vec::new();
    for _ in 0..50 {
        let t0 = Instant::now();
        store.next_due().await?;
        next.push(ms(t0.elapsed()));
    }
    row("next_due with those claimed", pct(next));
    store.close().await;
    drop_target(t).await
}

async fn run(selected: &[String]) -> Result<()> {
    // Each group (sizes, backends) defaults to all of it when none is named.
    let pick = |group: &[&str], w: &str| {
        selected.iter().any(|s| s == w) || !selected.iter().any(|s| group.contains(&s.as_str()))
    };
    let sizes_named = ["small", "large"];
    let backends = ["sqlite", "postgres"];
    let large = ((1_000_000.0 * scale()).round() as usize / TEMPLATES).max(1) * TEMPLATES;
    let mut sizes = Vec::new();
    if pick(&sizes_named, "small") {
        sizes.push(1_000);
    }
    if pick(&sizes_named, "large") && large != 1_000 {
        sizes.push(large);
    }
    let dir = tempfile::Builder::new()
        .prefix("bench-million-")
        .tempdir_in(root().join("target"))?;
    println!("Sutra million-parked bench");
    row("scale (SUTRA_BENCH_SCALE)", scale());
    row(
        "cores",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    row(
        "load (/proc/loadavg)",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim(),
    );
    for &n in &sizes {
        if pick(&backends, "sqlite") {
            let t = sqlite_target(dir.path(), &format!("parked-{n}")).await?;
            run_one(t, n).await?;
        }
        if pick(&backends, "postgres") {
            match postgres_url() {
                Some(url) => run_one(postgres_target(&url).await?, n).await?,
                None => println!("\n(postgres: set SUTRA_TEST_POSTGRES_URL to run it)"),
            }
        }
    }
    row(
        "load at the end (/proc/loadavg)",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim(),
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    // `cargo bench` passes `--bench`; anything else not starting with `-` selects.
    let selected: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("million bench: cannot build the tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&selected)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("million bench failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `n` starts through the server's API, one after another: each one's
/// latency (POST → 201), in ms.
async fn timed_starts(http: &reqwest::Client, url: &str, key: &str, n: usize) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let res = http
            .post(url)
            .bearer_auth(key)
            .json(&serde_json::json!({ "variables": {} }))
            .send()
            .await?;
        let status = res.status();
        let body = res.text().await?;
        if status.as_u16() != 201 {
            bail!("start answered {status}: {body}");
        }
        times.push(ms(t0.elapsed()));
    }
    Ok(times)
}
