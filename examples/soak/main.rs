//! The kill -9 soak (issue 20): a mixed workload against the real `sutra
//! serve`, killed at random moments, then every instance checked.
//!
//! ```sh
//! cargo run --release --example soak -- --rounds 1000 --db sqlite
//! cargo run --release --example soak -- --rounds 300 --db postgres --replicas 2
//! ```
//!
//! Each round starts `--per-round` instances of the features in `flows.rs`
//! through the HTTP API with an `Idempotency-Key` (a start whose answer a
//! kill swallowed is sent again with the same key), waits a random moment,
//! kill -9s one replica (round-robin on PostgreSQL; every `--kill-all-every`
//! rounds all of them at once) and restarts it; on PostgreSQL every
//! `--pg-drop-every` rounds the database also drops every connection of the
//! replicas (as its restart would). One feature is a task that runs for up
//! to 0.9 s, so kills land during attempts. A pump
//! sends the messages and events instances wait for; a loopback counterpart
//! answers the channel calls and counts deliveries by key. At the end every
//! instance must reach the end its input decides (`check.rs`); the counts
//! are printed and any violation makes the exit code 1.
//!
//! Invariants: loopback only (servers, counterpart); bounded in rounds and
//! in time (`--max-minutes` stops the rounds early, `--settle-secs` bounds
//! the wait for the last instances); the `sutra` binary is the one cargo
//! builds for this example's profile (built first, unless `--sutra` names one).

mod check;
mod cluster;
mod counterpart;
mod flows;
mod ledger;

use anyhow::{bail, Context, Result};
use check::{is_terminal, Record, Tally};
use clap::Parser;
use cluster::{Cluster, ADMIN_KEY};
use flows::{Kind, KINDS};
use rand::{Rng, SeedableRng};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "kill -9 soak of sutra serve")]
struct Args {
    /// Kill/restart rounds.
    #[arg(long, default_value_t = 20)]
    rounds: u32,
    /// `sqlite` or `postgres`.
    #[arg(long, default_value = "sqlite")]
    db: String,
    /// Replicas (PostgreSQL only); one is killed at a time.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Instances started per round.
    #[arg(long, default_value_t = 8)]
    per_round: u32,
    /// PostgreSQL server (a fresh schema is created in it and dropped).
    #[arg(
        long,
        env = "SUTRA_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pg_url: String,
    /// The random seed (printed; the kills' timing still varies).
    #[arg(long)]
    seed: Option<u64>,
    /// Longest wait before a kill, in ms (drawn uniformly from 50..this).
    #[arg(long, default_value_t = 1200)]
    max_kill_delay_ms: u64,
    /// Stop starting rounds after this long.
    #[arg(long, default_value_t = 60)]
    max_minutes: u64,
    /// After the last round, how long instances may take to end.
    #[arg(long, default_value_t = 120)]
    settle_secs: u64,
    /// A `sutra` binary to use instead of building one.
    #[arg(long)]
    sutra: Option<PathBuf>,
    /// Keep the temporary directory (database, replica logs).
    #[arg(long)]
    keep: bool,
    /// Every this many rounds kill every replica at once (several replicas
    /// only; 0: never).
    #[arg(long, default_value_t = 5)]
    kill_all_every: u32,
    /// Every this many rounds PostgreSQL drops every connection of the soak
    /// (`pg_terminate_backend`, as a restart of the server does to its
    /// clients; PostgreSQL only; 0: never).
    #[arg(long, default_value_t = 7)]
    pg_drop_every: u32,
}

/// Answers from the replicas, tried in turn.
#[derive(Clone)]
struct Api {
    urls: Vec<String>,
    token: String,
    http: reqwest::Client,
}

impl Api {
    async fn call(
        &self,
        replica: usize,
        method: Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> reqwest::Result<(StatusCode, Value)> {
        let url = &self.urls[replica % self.urls.len()];
        let mut req = self
            .http
            .request(method, format!("{url}{path}"))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let text = resp.text().await?;
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// The first answer any replica gives (bounded: about a minute).
    async fn any(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value)> {
        for n in 0..600usize {
            match self.call(n, method.clone(), path, body, None).await {
                Ok(answer) => return Ok(answer),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        bail!("no replica answered {path}")
    }
}

#[derive(Default)]
struct Counts {
    kills: AtomicU64,
    /// Rounds that killed every replica at once.
    kills_all: AtomicU64,
    /// Times PostgreSQL dropped the soak's connections, and how many.
    pg_drops: AtomicU64,
    pg_connections_dropped: AtomicU64,
    starts_resent: AtomicU64,
    starts_replayed: AtomicU64,
    server_errors: AtomicU64,
    messages: AtomicU64,
    events: AtomicU64,
    signals: AtomicU64,
}

type Records = Arc<Mutex<Vec<Record>>>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    match run(Args::parse()).await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("soak: {e:#}");
            std::process::exit(2);
        }
    }
}

async fn run(args: Args) -> Result<bool> {
    let postgres = match args.db.as_str() {
        "sqlite" => false,
        "postgres" | "postgresql" => true,
        other => bail!("--db {other}: sqlite or postgres"),
    };
    if !postgres && args.replicas != 1 {
        bail!("--replicas > 1 needs --db postgres");
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let bin = match &args.sutra {
        Some(p) => p.clone(),
        None => build_sutra()?,
    };
    let chaos = chaos_guest()?;
    let dir = tempfile::Builder::new().prefix("sutra-soak-").tempdir()?;
    let (db, schema) = if postgres {
        let schema = format!("sutra_soak_{:016x}", rand::random::<u64>());
        pg_exec(&args.pg_url, &format!("CREATE SCHEMA \"{schema}\"")).await?;
        let sep = if args.pg_url.contains('?') { '&' } else { '?' };
        // The application name marks the replicas' connections, so that
        // `--pg-drop-every` drops those and no other client's.
        (
            format!(
                "{}{sep}options=-c%20search_path%3D{schema}&application_name={schema}",
                args.pg_url
            ),
            Some(schema),
        )
    } else {
        (
            format!("sqlite://{}", dir.path().join("soak.db").display()),
            None,
        )
    };
    println!(
        "soak: {} rounds on {} ({} replica{}), {} instances a round, seed {seed}, dir {}",
        args.rounds,
        args.db,
        args.replicas,
        if args.replicas == 1 { "" } else { "s" },
        args.per_round,
        dir.path().display()
    );
    let mut cluster = Cluster::new(bin, db, dir.path(), args.replicas)?;
    for i in 0..cluster.replicas() {
        cluster.start(i).await?;
    }
    let outcome = soak(&args, &mut cluster, &mut rng, chaos, schema.as_deref()).await;
    cluster.kill_all();
    if let Some(schema) = schema {
        if !args.keep {
            pg_exec(
                &args.pg_url,
                &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"),
            )
            .await?;
        }
    }
    if args.keep {
        let kept = dir.keep();
        println!("soak: kept {}", kept.display());
    }
    outcome
}

async fn soak(
    args: &Args,
    cluster: &mut Cluster,
    rng: &mut impl Rng,
    chaos: Vec<u8>,
    schema: Option<&str>,
) -> Result<bool> {
    let began = Instant::now();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()?;
    let admin = Api {
        urls: cluster.urls(),
        token: ADMIN_KEY.into(),
        http: http.clone(),
    };
    let (status, body) = admin
        .any(
            Method::POST,
            "/v1/admin/tenants",
            Some(&json!({"name": "soak", "limits": {}})),
        )
        .await?;
    if status != StatusCode::CREATED {
        bail!("create the tenant: {status} {body}");
    }
    let api = Api {
        urls: cluster.urls(),
        token: body["key"].as_str().context("tenant key")?.to_string(),
        http,
    };
    let counterpart = counterpart::Counterpart::start(api.urls.clone(), api.token.clone()).await?;
    let (status, body) = api
        .any(
            Method::PUT,
            "/v1/channels/soak",
            Some(&json!({"transport": "push", "url": counterpart.url})),
        )
        .await?;
    if !status.is_success() {
        bail!("configure the channel: {status} {body}");
    }
    // HTTP tasks may call the counterpart (its ledger), and nothing else.
    let (status, body) = api
        .any(
            Method::PUT,
            "/v1/egress/sutra:http",
            Some(&json!({"allow": [{"host": counterpart.base}]})),
        )
        .await?;
    if !status.is_success() {
        bail!("grant HTTP tasks the counterpart: {status} {body}");
    }
    for def in flows::definitions(&counterpart.base) {
        deploy(&api, &def, &chaos).await?;
    }

    let records: Records = Arc::new(Mutex::new(Vec::new()));
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let pump = tokio::spawn(pump(
        api.clone(),
        records.clone(),
        counts.clone(),
        stop.clone(),
    ));
    let mut starters = Vec::new();
    let mut violations = Vec::new();
    let mut rounds = 0;
    for round in 0..args.rounds {
        if began.elapsed() > Duration::from_secs(args.max_minutes * 60) {
            println!("soak: --max-minutes reached after {round} rounds");
            break;
        }
        rounds += 1;
        for _ in 0..args.per_round {
            let kind = KINDS[rng.random_range(0..KINDS.len())];
            let idx = {
                let mut recs = records.lock().unwrap();
                let n = recs.len() as u64 + 1;
                let (input, expected) = flows::draw(kind, n, rng);
                recs.push(Record {
                    n,
                    kind,
                    key: format!("soak-{n}"),
                    input,
                    expected,
                    id: None,
                    last: None,
                });
                recs.len() - 1
            };
            // Spread over the round, so that kills land among the starts.
            let after = Duration::from_millis(rng.random_range(0..args.max_kill_delay_ms));
            starters.push(tokio::spawn(start(
                api.clone(),
                records.clone(),
                idx,
                counts.clone(),
                after,
            )));
        }
        tokio::time::sleep(Duration::from_millis(
            rng.random_range(50..args.max_kill_delay_ms.max(51)),
        ))
        .await;
        let victim = round as usize % cluster.replicas();
        for i in 0..cluster.replicas() {
            if let Some(status) = cluster.exited(i) {
                violations.push(format!(
                    "replica {i} died on its own ({status}):\n{}",
                    cluster.log_tail(i, 30)
                ));
                cluster.start(i).await?;
            }
        }
        let every = |n: u32| n > 0 && (round + 1) % n == 0;
        if let (Some(schema), true) = (schema, every(args.pg_drop_every)) {
            // Every connection of the replicas is cut mid-work; they must
            // reconnect and lose nothing.
            let dropped = pg_drop_connections(&args.pg_url, schema).await?;
            counts.pg_drops.fetch_add(1, Ordering::Relaxed);
            counts
                .pg_connections_dropped
                .fetch_add(dropped, Ordering::Relaxed);
        }
        let victims: Vec<usize> = if cluster.replicas() > 1 && every(args.kill_all_every) {
            counts.kills_all.fetch_add(1, Ordering::Relaxed);
            (0..cluster.replicas()).collect()
        } else {
            vec![victim]
        };
        for &v in &victims {
            cluster.kill(v);
            counts.kills.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
        for &v in &victims {
            cluster.start(v).await?;
        }
        if (round + 1) % 50 == 0 {
            let open = records
                .lock()
                .unwrap()
                .iter()
                .filter(|r| r.last.is_none())
                .count();
            println!(
                "soak: round {} done, {open} instances still open, {:.0?}",
                round + 1,
                began.elapsed()
            );
        }
    }
    for s in starters {
        if let Err(e) = s.await? {
            violations.push(e);
        }
    }
    // Let the last instances end.
    let settle = Instant::now() + Duration::from_secs(args.settle_secs);
    while Instant::now() < settle {
        if records.lock().unwrap().iter().all(|r| r.last.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    pump.await?;
    for i in 0..cluster.replicas() {
        if let Some(status) = cluster.exited(i) {
            violations.push(format!(
                "replica {i} died on its own ({status}):\n{}",
                cluster.log_tail(i, 30)
            ));
        }
    }
    let tally = final_check(&api, &records, &counterpart, violations).await?;
    report(
        rounds,
        &records,
        &counts,
        &counterpart,
        &tally,
        began.elapsed(),
    );
    Ok(tally.violations.is_empty())
}

async fn deploy(api: &Api, definition: &str, chaos: &[u8]) -> Result<()> {
    for n in 0..600usize {
        let url = &api.urls[n % api.urls.len()];
        let mut form = reqwest::multipart::Form::new().text("definition", definition.to_string());
        if definition.contains("chaos") {
            let part = reqwest::multipart::Part::bytes(chaos.to_vec()).file_name("chaos.wasm");
            form = form.part("chaos", part);
        }
        let sent = api
            .http
            .post(format!("{url}/v1/deployments"))
            .bearer_auth(&api.token)
            .multipart(form)
            .send()
            .await;
        match sent {
            Ok(r) if r.status() == StatusCode::CREATED => return Ok(()),
            Ok(r) => bail!(
                "deploy: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    bail!("deploy: no replica answered")
}

/// Starts one instance, re-sending with the same key until a replica
/// answers; `Err` is a violation.
async fn start(
    api: Api,
    records: Records,
    idx: usize,
    counts: Arc<Counts>,
    after: Duration,
) -> Result<(), String> {
    tokio::time::sleep(after).await;
    let (kind, key, input) = {
        let r = &records.lock().unwrap()[idx];
        (r.kind, r.key.clone(), r.input.clone())
    };
    let path = format!("/v1/processes/{}/instances", kind.process());
    let body = json!({"variables": input});
    for n in 0..1200usize {
        match api
            .call(idx + n, Method::POST, &path, Some(&body), Some(&key))
            .await
        {
            Ok((status, view)) if status == StatusCode::CREATED || status == StatusCode::OK => {
                if status == StatusCode::OK {
                    counts.starts_replayed.fetch_add(1, Ordering::Relaxed);
                }
                let id = view["instance"].as_str().map(str::to_string);
                let mut recs = records.lock().unwrap();
                recs[idx].id = id;
                return match recs[idx].id {
                    Some(_) => Ok(()),
                    None => Err(format!("start {key}: answer without an instance: {view}")),
                };
            }
            Ok((status, view)) if status.is_server_error() => {
                // Not expected, but not lost either: counted, shown, sent again.
                counts.server_errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("soak: start {key} answered {status} {view}; sending it again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok((status, view)) => return Err(format!("start {key}: {status} {view}")),
            Err(e) => {
                if !e.is_connect() {
                    // Sent, but the answer was lost with the server.
                    counts.starts_resent.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Err(format!("start {key}: no replica answered in 2 minutes"))
}

/// Drives the open instances: messages, events, and a look at each until it ends.
async fn pump(api: Api, records: Records, counts: Arc<Counts>, stop: Arc<AtomicBool>) {
    let mut turn = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let open: Vec<(usize, Kind, u64, String)> = records
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.last.is_none())
            .filter_map(|(i, r)| Some((i, r.kind, r.n, r.id.clone()?)))
            .collect();
        let mut ticked = false;
        for (idx, kind, n, id) in open {
            turn += 1;
            let Ok((status, view)) = api
                .call(
                    turn,
                    Method::GET,
                    &format!("/v1/instances/{id}"),
                    None,
                    None,
                )
                .await
            else {
                continue;
            };
            if status != StatusCode::OK {
                continue;
            }
            let state = view["state"].as_str().unwrap_or_default().to_string();
            if is_terminal(&state) {
                records.lock().unwrap()[idx].last = Some(view);
                continue;
            }
            if state != "WAITING" {
                continue;
            }
            let waits = view["waits"].to_string();
            if kind == Kind::Message && waits.contains("soak-go") {
                let msg = json!({"name": "soak-go", "correlationKey": format!("k{n}"), "variables": {"got": n}});
                if let Ok((StatusCode::OK, _)) = api
                    .call(turn, Method::POST, "/v1/messages", Some(&msg), None)
                    .await
                {
                    counts.messages.fetch_add(1, Ordering::Relaxed);
                }
            }
            if kind == Kind::Signal && waits.contains("soak-tick") && !ticked {
                // One broadcast reaches every instance waiting now; those
                // that arm later wait for a later one.
                let signal = json!({"name": "soak-tick", "variables": {"ticked": true}});
                if let Ok((StatusCode::OK, _)) = api
                    .call(turn, Method::POST, "/v1/signals", Some(&signal), None)
                    .await
                {
                    counts.signals.fetch_add(1, Ordering::Relaxed);
                    ticked = true;
                }
            }
            let at_approve = view["waits"]
                .as_array()
                .is_some_and(|w| w.iter().any(|w| w["node"] == "Approve"));
            if kind == Kind::States && at_approve {
                let path = format!("/v1/instances/{id}/events/go");
                if let Ok((StatusCode::OK, _)) = api
                    .call(turn, Method::POST, &path, Some(&json!({"by": n})), None)
                    .await
                {
                    counts.events.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Every instance against its record, and the tenant's list against the records.
async fn final_check(
    api: &Api,
    records: &Records,
    counterpart: &counterpart::Counterpart,
    violations: Vec<String>,
) -> Result<Tally> {
    let mut tally = Tally {
        violations,
        ..Tally::default()
    };
    let mut listed = std::collections::BTreeSet::new();
    let mut children: Vec<(String, String)> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(a) => format!("/v1/instances?limit=500&after={a}"),
            None => "/v1/instances?limit=500".to_string(),
        };
        let (status, page) = api.any(Method::GET, &path, None).await?;
        if status != StatusCode::OK {
            bail!("list instances: {status} {page}");
        }
        for i in page["instances"].as_array().into_iter().flatten() {
            let id = i["id"]
                .as_str()
                .or(i["instance"].as_str())
                .unwrap_or_default()
                .to_string();
            if i["process"] == flows::CHILD_PROCESS {
                // Started by a call activity, not by the harness.
                children.push((id, i["state"].as_str().unwrap_or("?").to_string()));
            } else {
                listed.insert(id);
            }
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    let recs = records.lock().unwrap().clone();
    let mut ids = std::collections::BTreeSet::new();
    for r in &recs {
        let Some(id) = &r.id else {
            tally.violations.push(format!(
                "{} #{}: lost: its start never answered",
                r.kind.name(),
                r.n
            ));
            continue;
        };
        if !ids.insert(id.clone()) {
            tally
                .violations
                .push(format!("{id}: two starts got the same instance"));
        }
        if !listed.contains(id) {
            tally.violations.push(format!(
                "{} #{} ({id}): lost: not in the instance list",
                r.kind.name(),
                r.n
            ));
        }
    }
    for id in listed.difference(&ids) {
        tally.violations.push(format!(
            "{id}: an instance no start asked for (started twice?)"
        ));
    }
    // One child per call activity: a child started twice would be counted.
    let calls = recs.iter().filter(|r| r.kind == Kind::Call).count();
    if children.len() != calls {
        tally.violations.push(format!(
            "{} instances of {} for {calls} call activities",
            children.len(),
            flows::CHILD_PROCESS
        ));
    }
    for (id, state) in &children {
        if state != "COMPLETED" {
            tally
                .violations
                .push(format!("child {id} of a call activity ended {state}"));
        }
    }
    tally.children = children.len() as u64;
    let deliveries = counterpart.deliveries.lock().unwrap().by_instance.clone();
    for r in &recs {
        let Some(id) = &r.id else { continue };
        // The final word comes from the store now, not from the pump's last look.
        let (status, view) = api
            .any(Method::GET, &format!("/v1/instances/{id}"), None)
            .await?;
        if status != StatusCode::OK {
            tally.violations.push(format!(
                "{} #{} ({id}): lost: {status} {view}",
                r.kind.name(),
                r.n
            ));
            continue;
        }
        let state = view["state"].as_str().unwrap_or_default();
        if !is_terminal(state) {
            tally.violations.push(format!(
                "{} #{} ({id}): stuck {state}, waits {}",
                r.kind.name(),
                r.n,
                view["waits"]
            ));
            continue;
        }
        let delivered = deliveries.get(id).is_some_and(|k| !k.is_empty());
        check::check_instance(r, &view, delivered, &mut tally);
        if r.kind == Kind::Compensation {
            let path = format!("/v1/instances/{id}/history");
            let (status, history) = api.any(Method::GET, &path, None).await?;
            if status != StatusCode::OK {
                bail!("history of {id}: {status} {history}");
            }
            check::check_compensation_journal(r, &history, &mut tally);
        }
        if r.kind == Kind::Signal {
            let path = format!("/v1/instances/{id}/history");
            let (status, history) = api.any(Method::GET, &path, None).await?;
            if status != StatusCode::OK {
                bail!("history of {id}: {status} {history}");
            }
            check::check_signal_journal(r, &history, &mut tally);
        }
        ledger::check(r, &counterpart.ledger.lock().unwrap(), &mut tally);
    }
    Ok(tally)
}

fn report(
    rounds: u32,
    records: &Records,
    counts: &Counts,
    counterpart: &counterpart::Counterpart,
    tally: &Tally,
    took: Duration,
) {
    let n = records.lock().unwrap().len();
    let d = counterpart.deliveries.lock().unwrap();
    let total: u32 = d.by_key.values().sum();
    let redelivered = d.by_key.values().filter(|&&c| c > 1).count();
    println!(
        "soak: {rounds} rounds, {} kill -9s ({} rounds killed every replica), {n} instances in {took:.0?}",
        counts.kills.load(Ordering::Relaxed),
        counts.kills_all.load(Ordering::Relaxed)
    );
    if counts.pg_drops.load(Ordering::Relaxed) > 0 {
        println!(
            "  PostgreSQL dropped the replicas' connections {} times ({} connections)",
            counts.pg_drops.load(Ordering::Relaxed),
            counts.pg_connections_dropped.load(Ordering::Relaxed)
        );
    }
    for ((kind, state), c) in &tally.by_kind {
        println!("  {:<18} {:<12} {c}", kind.name(), state);
    }
    println!(
        "  start requests sent again after a transport error: {}, answered by a replay of their key: {}",
        counts.starts_resent.load(Ordering::Relaxed),
        counts.starts_replayed.load(Ordering::Relaxed)
    );
    println!(
        "  starts answered with a 5xx (and sent again): {}",
        counts.server_errors.load(Ordering::Relaxed)
    );
    println!(
        "  messages sent: {}, events sent: {}, signals broadcast: {} (deliveries journaled: {})",
        counts.messages.load(Ordering::Relaxed),
        counts.events.load(Ordering::Relaxed),
        counts.signals.load(Ordering::Relaxed),
        tally.signals_received
    );
    println!(
        "  call activities' children: {}; ledger calls recorded by the counterpart: {} ({} attempts seen again after a kill)",
        tally.children, tally.ledger_calls, tally.ledger_repeats
    );
    println!(
        "  attempts checked: {}, compensator runs: {} (journal entries read: {}), channel calls: {}",
        tally.attempts, tally.compensators, tally.journal_entries, tally.channel_calls
    );
    println!(
        "  outbox: {} requests, {total} deliveries ({} first ones refused with a 503, {redelivered} requests delivered more than once), {} calls answered",
        d.by_key.len(),
        d.refused,
        d.answered.len()
    );
    if tally.violations.is_empty() {
        println!("soak: OK, no violation");
    } else {
        println!("soak: {} VIOLATIONS", tally.violations.len());
        for v in tally.violations.iter().take(50) {
            println!("  - {v}");
        }
    }
}

/// The `sutra` binary of this example's profile, built (or found up to
/// date) by cargo in this example's target directory.
fn build_sutra() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // <target>/<profile>/examples/soak
    let profile_dir = exe
        .parent()
        .and_then(|p| p.parent())
        .context("where is the target directory?")?;
    let target_dir = profile_dir
        .parent()
        .context("where is the target directory?")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "--quiet", "--bin", "sutra", "--target-dir"])
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let status = cmd.status().context("run cargo build --bin sutra")?;
    if !status.success() {
        bail!("cargo build --bin sutra failed ({status})");
    }
    let bin = profile_dir.join("sutra");
    if !bin.is_file() {
        bail!("{} was not built", bin.display());
    }
    Ok(bin)
}

/// `target/guests/chaos.wasm`, built by `guest-examples/build.sh` (incremental).
fn chaos_guest() -> Result<Vec<u8>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("bash")
        .arg(root.join("guest-examples/build.sh"))
        .arg("chaos")
        .current_dir(root)
        .output()
        .context("run guest-examples/build.sh")?;
    if !out.status.success() {
        bail!(
            "guest-examples/build.sh chaos failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = root.join("target/guests/chaos.wasm");
    std::fs::read(&path).with_context(|| format!("read {}", path.display()))
}

/// Terminate every backend whose application name is `app` (the soak's
/// replicas); how many were.
async fn pg_drop_connections(url: &str, app: &str) -> Result<u64> {
    use sqlx::{ConnectOptions, Connection};
    let opts: sqlx::postgres::PgConnectOptions = url.parse()?;
    let mut conn = opts
        .connect()
        .await
        .with_context(|| format!("connect to {url}"))?;
    let (n,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = $1 AND pid <> pg_backend_pid()) t",
    )
    .bind(app)
    .fetch_one(&mut conn)
    .await?;
    conn.close().await?;
    Ok(n as u64)
}

async fn pg_exec(url: &str, sql: &str) -> Result<()> {
    use sqlx::{ConnectOptions, Connection};
    let opts: sqlx::postgres::PgConnectOptions = url.parse()?;
    let mut conn = opts
        .connect()
        .await
        .with_context(|| format!("connect to {url}"))?;
    sqlx::query(sql).execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}
