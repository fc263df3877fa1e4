//! Several `sutra serve` replicas on one PostgreSQL database (issue 6): due
//! work is fired exactly once across them, a killed replica's work is taken
//! over after its lease, singletons have one holder at a time, and a park
//! armed on one store wakes the poller of another (LISTEN/NOTIFY).
//!
//! PostgreSQL only: reads `SUTRA_TEST_POSTGRES_URL` (unset: each test prints
//! "skipped: ..." and passes; set but unreachable: it fails). Each test has a
//! fresh schema, dropped at the end even when the test fails; the replicas
//! reach it through the URL's `options=-c search_path=<schema>` parameter.
//!
//! Invariant: every wait polls the database (or a replica's log) with a
//! bounded deadline; nothing sleeps to synchronise. The two process tests
//! share the machine's cores, so they take turns (`HEAVY`).

mod common;

use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};
use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, StartRequest};
use sutra::store::{AnyStore, NewDeployment, NewInstance, NewPark, PgStore, StepWrite, Store};

const URL_VAR: &str = "SUTRA_TEST_POSTGRES_URL";
const TENANT: &str = "acme";
/// Instances per process test.
const INSTANCES: usize = 1_000;
/// The log line the runtime writes (at debug) after each attempt it ran.
const ATTEMPT_LINE: &str = "attempt ended";

/// The process tests each use both cores: one at a time.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// start → T (chaos: attempt 1 fails, attempt 2 completes; retry after
/// 0.2 s) → a 0.5 s timer → end.
const PROCESS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="3" initialDelay="PT0.2S"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT0.5S</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

// ------------------------------------------------------------------ database

/// One test's schema on the test server.
struct TestSchema {
    url: String,
    schema: String,
    /// Raw SQL on the schema (the test's own checks).
    sql: PgPool,
}

impl TestSchema {
    /// A second store on this schema (migrations run again: a no-op).
    async fn store(&self) -> PgStore {
        PgStore::open_in_schema(&self.url, &self.schema)
            .await
            .expect("open the test schema")
    }

    /// What a replica is given as `--db`: the server URL plus the schema as
    /// the connection's `search_path`.
    fn replica_url(&self) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!(
            "{}{sep}options=-c%20search_path%3D{}",
            self.url, self.schema
        )
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

/// Runs `test` on a fresh schema and drops it afterwards (also when the test
/// panics, whose panic is then resumed). Unset URL: prints why and passes.
async fn with_schema<F, Fut>(test: F)
where
    F: FnOnce(Arc<TestSchema>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Ok(url) = std::env::var(URL_VAR) else {
        eprintln!("skipped: {URL_VAR} not set");
        return;
    };
    let schema = format!("sutra_replicas_{:016x}", rand::random::<u64>());
    // Creates the schema and migrates it.
    let first = match PgStore::open_in_schema(&url, &schema).await {
        Ok(s) => s,
        Err(e) => panic!("{URL_VAR}={url} is set but PostgreSQL is unusable: {e}"),
    };
    first.close().await;
    let opts = PgConnectOptions::from_str(&url)
        .expect("URL")
        .options([("search_path", schema.as_str())]);
    let sql = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(opts)
        .await
        .expect("connect");
    let db = Arc::new(TestSchema {
        url: url.clone(),
        schema: schema.clone(),
        sql: sql.clone(),
    });
    let outcome = tokio::spawn(test(db)).await;
    sql.close().await;
    let dropped = async {
        let mut conn = PgConnectOptions::from_str(&url)?.connect().await?;
        sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .execute(&mut conn)
            .await?;
        conn.close().await
    }
    .await;
    if let Err(e) = dropped {
        eprintln!("warning: could not drop test schema {schema}: {e}");
    }
    if let Err(e) = outcome {
        match e.try_into_panic() {
            Ok(p) => std::panic::resume_unwind(p),
            Err(e) => panic!("test task did not finish: {e}"),
        }
    }
}

// ------------------------------------------------------------------ replicas

/// A `sutra serve` child on the test schema; killed (SIGKILL) on drop.
struct Replica {
    child: Child,
    name: &'static str,
    ready: Arc<AtomicBool>,
    attempts: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    fn spawn(db: &TestSchema, name: &'static str) -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sutra"))
            .args(["serve", "--no-listen", "--db", &db.replica_url()])
            .env_remove("SUTRA_DATASOURCE_URL")
            .env("SUTRA_AUDIT_SQL", "true")
            // A lost claim (deadline + 5 s) comes back after ~6 s.
            .env("SUTRA_SANDBOX_DEADLINE", "PT1S")
            // The sweeper's lease lasts one interval: a short one shows takeover.
            .env("SUTRA_INSTANCE_RETENTION_SWEEP_INTERVAL", "PT2S")
            .env("SUTRA_LOG", "sutra=debug")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sutra serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let ready = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(AtomicUsize::new(0));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (r, a, l) = (ready.clone(), attempts.clone(), log.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("driving parked instances") {
                    r.store(true, Ordering::SeqCst);
                }
                if line.contains(ATTEMPT_LINE) {
                    a.fetch_add(1, Ordering::SeqCst);
                } else if let Ok(mut l) = l.lock() {
                    l.push(line);
                }
            }
        });
        Replica {
            child,
            name,
            ready,
            attempts,
            log,
        }
    }

    /// The owner name its claims and leases are held under.
    fn owner(&self) -> String {
        format!("sutra-{}", self.child.id())
    }

    fn attempts_run(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }

    /// Its stderr but the per-attempt lines.
    fn log(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// Fails the test (with its log) if it exited.
    fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("replica {} exited ({status}):\n{}", self.name, self.log());
        }
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Polls `cond` every 50 ms until it holds; fails after `limit` with `what`.
/// Every live replica in `alive` must stay alive meanwhile.
async fn wait_for<F, Fut>(what: &str, limit: Duration, alive: &mut [&mut Replica], mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        for r in alive.iter_mut() {
            r.assert_alive();
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = alive
                .iter()
                .map(|r| format!("--- {}\n{}", r.name, r.log()))
                .collect();
            panic!(
                "timed out after {limit:?} waiting for {what}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ------------------------------------------------------------------ workload

/// The starting side: a library runtime on the schema (audit on) that
/// deploys the process and starts instances; it never polls (the replicas fire).
async fn starter(db: &TestSchema) -> Runtime<AnyStore> {
    let config = Config {
        audit_sql: true,
        ..Config::default()
    };
    let mut opts = RuntimeOptions::new(config);
    opts.owner = "test-starter".into();
    // It never fires what it armed, not even from an alarm: the replicas do.
    opts.alarms = false;
    let rt = Runtime::new(AnyStore::Postgres(db.store().await), opts).expect("runtime");
    let mut modules = BTreeMap::new();
    modules.insert("chaos".to_string(), common::guest_bytes("chaos"));
    rt.deploy(TENANT, PROCESS, &modules).await.expect("deploy");
    rt
}

/// Starts `n` instances, 8 at a time. Each runs attempt 1 here (it fails) and
/// parks on its retry; the replicas do the rest.
async fn start_all(rt: &Runtime<AnyStore>, n: usize) {
    let gate = Arc::new(tokio::sync::Semaphore::new(8));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let rt = rt.clone();
        let gate = gate.clone();
        set.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("semaphore");
            rt.start(StartRequest {
                tenant: TENANT.into(),
                process_id: "p".into(),
                variables: json!({"do": "fail", "until": 2, "n": i})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                ..StartRequest::default()
            })
            .await
            .expect("start")
        });
    }
    while let Some(done) = set.join_next().await {
        done.expect("start task");
    }
}

/// Every instance completed exactly once, every attempt recorded once, no
/// step applied twice. Returns how many attempts were re-run after their
/// runner was lost (`attempt_lost`).
async fn assert_exactly_once(db: &TestSchema, n: usize) -> i64 {
    let n = n as i64;
    assert_eq!(db.count("SELECT COUNT(*) FROM instances").await, n);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM instances WHERE state = 'COMPLETED'")
            .await,
        n
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM parks").await,
        0,
        "a completed instance keeps no park"
    );
    // Completed exactly once: one instance_completed entry each.
    assert_eq!(
        db.count("SELECT COUNT(*) FROM journal WHERE kind = 'instance_completed'")
            .await,
        n
    );
    assert_eq!(
        db.count(
            "SELECT COUNT(DISTINCT instance_id) FROM journal WHERE kind = 'instance_completed'"
        )
        .await,
        n
    );
    // Every attempt recorded once: attempts 1 (failed) and 2 (completed), nothing else.
    assert_eq!(db.count("SELECT COUNT(*) FROM attempts").await, 2 * n);
    assert_eq!(
        db.count(
            "SELECT COUNT(*) FROM (SELECT instance_id FROM attempts GROUP BY instance_id \
             HAVING array_agg(attempt ORDER BY attempt) = ARRAY[1, 2]::bigint[] \
             AND array_agg(outcome ORDER BY attempt) = ARRAY['failed', 'completed']) t"
        )
        .await,
        n
    );
    // No step applied twice: per instance one retry fire, one timer fire,
    // attempt_started = 2 + the lost attempts re-run, no fire of a park that
    // was already gone, and the version counts the commits: three (the start
    // with attempt 1 and its retry park; the retry with attempt 2 and the
    // timer park; the timer and the end), one more for each attempt that
    // outlived the commit window (made durable while it ran) — so at most
    // five — plus one per lost attempt. (Before steps were committed at
    // waits the count was the same for every instance; it now depends on how
    // long each attempt took.)
    let rows: Vec<(String, i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT i.id, i.version, \
           COUNT(*) FILTER (WHERE j.kind = 'attempt_lost'), \
           COUNT(*) FILTER (WHERE j.kind = 'attempt_started'), \
           COUNT(*) FILTER (WHERE j.kind = 'timer_fired'), \
           COUNT(*) FILTER (WHERE j.kind = 'park_ignored') \
         FROM instances i JOIN journal j ON j.instance_id = i.id GROUP BY i.id, i.version",
    )
    .fetch_all(&db.sql)
    .await
    .expect("journal summary");
    assert_eq!(rows.len() as i64, n);
    let mut lost_total = 0;
    for (id, version, lost, started, timers, ignored) in &rows {
        assert_eq!(*timers, 1, "{id}: the timer fired {timers} times");
        assert_eq!(*ignored, 0, "{id}: a park fired after it was withdrawn");
        assert_eq!(
            *started,
            2 + lost,
            "{id}: {started} attempts started, {lost} lost"
        );
        assert!(
            (3..=5).contains(&(version - lost)),
            "{id}: version {version} with {lost} lost attempts"
        );
        lost_total += lost;
    }
    lost_total
}

/// The holder of lease `name`, if held.
async fn holder(db: &TestSchema, name: &str) -> Option<String> {
    sqlx::query_scalar("SELECT holder FROM leases WHERE name = $1")
        .bind(name)
        .fetch_optional(&db.sql)
        .await
        .expect("leases")
}

const SWEEPER: &str = "retention-sweeper";

// ------------------------------------------------------------------ tests

/// Two replicas drain 1,000 instances with retries and timers: each
/// completes exactly once, each attempt is recorded once, both replicas ran
/// attempts, and each singleton lease keeps one holder while both live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_complete_every_instance_exactly_once() {
    let _turn = HEAVY.lock().await;
    with_schema(|db| async move {
        let rt = starter(&db).await;
        let mut a = Replica::spawn(&db, "a");
        let mut b = Replica::spawn(&db, "b");
        let (ra, rb) = (a.ready.clone(), b.ready.clone());
        wait_for(
            "both replicas to boot",
            Duration::from_secs(60),
            &mut [&mut a, &mut b],
            || {
                let up = ra.load(Ordering::SeqCst) && rb.load(Ordering::SeqCst);
                async move { up }
            },
        )
        .await;
        let began = Instant::now();
        start_all(&rt, INSTANCES).await;
        let owners = [a.owner(), b.owner()];
        let db2 = db.clone();
        let seen = Arc::new(Mutex::new(Vec::<(Option<String>, Option<String>)>::new()));
        let seen2 = seen.clone();
        wait_for(
            "every instance to complete",
            Duration::from_secs(240),
            &mut [&mut a, &mut b],
            || {
                let db = db2.clone();
                let seen = seen2.clone();
                async move {
                    let sample = (
                        holder(&db, SWEEPER).await,
                        holder(&db, sutra::runtime::SCHEDULE_LEASE).await,
                    );
                    if let Ok(mut s) = seen.lock() {
                        s.push(sample);
                    }
                    db.count("SELECT COUNT(*) FROM instances WHERE state = 'COMPLETED'")
                        .await
                        == INSTANCES as i64
                }
            },
        )
        .await;
        let took = began.elapsed();
        assert_exactly_once(&db, INSTANCES).await;
        let (na, nb) = (a.attempts_run(), b.attempts_run());
        eprintln!("replica a ran {na} attempts, b {nb}; {INSTANCES} instances in {took:?}");
        assert!(
            na > 0 && nb > 0,
            "both replicas did some of the work (a {na}, b {nb})"
        );
        assert!(
            na + nb >= INSTANCES,
            "the replicas ran every second attempt (a {na} + b {nb})"
        );
        // One holder at a time: each lease had one of the two replicas as its
        // only holder while both were alive (a renewal, never a hand-over).
        for (i, name) in [SWEEPER, sutra::runtime::SCHEDULE_LEASE]
            .into_iter()
            .enumerate()
        {
            let mut distinct: Vec<String> = seen
                .lock()
                .map(|s| {
                    s.iter()
                        .filter_map(|p| if i == 0 { p.0.clone() } else { p.1.clone() })
                        .collect()
                })
                .unwrap_or_default();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                1,
                "lease {name} changed holders while both replicas lived: {distinct:?}"
            );
            assert!(
                owners.contains(&distinct[0]),
                "lease {name} held by {} (replicas {owners:?})",
                distinct[0]
            );
        }
        for r in [&a, &b] {
            let log = r.log();
            assert!(
                !log.contains("polling only"),
                "replica {} could not LISTEN:\n{log}",
                r.name
            );
        }
        drop(rt);
    })
    .await;
}

/// Kill -9 a replica in the middle of the drain, while it holds claims and
/// both singleton leases: the other finishes everything after the claims'
/// lease (deadline 1 s + 5 s) with no attempt lost or recorded twice, and
/// takes the sweeper and schedule leases over once they expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_work_is_taken_over_after_its_lease() {
    let _turn = HEAVY.lock().await;
    with_schema(|db| async move {
        let rt = starter(&db).await;
        // The victim boots first, so it holds both singleton leases (renewing them).
        let mut victim = Replica::spawn(&db, "victim");
        let owner = victim.owner();
        let db2 = db.clone();
        let o2 = owner.clone();
        wait_for("the victim to hold both leases", Duration::from_secs(60), &mut [&mut victim], || {
            let db = db2.clone();
            let o = o2.clone();
            async move {
                holder(&db, SWEEPER).await.as_deref() == Some(o.as_str())
                    && holder(&db, sutra::runtime::SCHEDULE_LEASE).await.as_deref() == Some(o.as_str())
            }
        })
        .await;
        let mut survivor = Replica::spawn(&db, "survivor");
        let (vr, sr) = (victim.ready.clone(), survivor.ready.clone());
        wait_for("both replicas to boot", Duration::from_secs(60), &mut [&mut victim, &mut survivor], || {
            let up = vr.load(Ordering::SeqCst) && sr.load(Ordering::SeqCst);
            async move { up }
        })
        .await;
        // Start in the background; kill in the middle of the drain.
        let starting = {
            let rt = rt.clone();
            tokio::spawn(async move { start_all(&rt, INSTANCES).await })
        };
        let db2 = db.clone();
        let claims_sql = "SELECT COUNT(*) FROM parks WHERE claimed_by = $1 AND claimed_until > \
                          (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint";
        let o2 = owner.clone();
        wait_for(
            "the victim to hold claims after 100 instances completed",
            Duration::from_secs(240),
            &mut [&mut victim, &mut survivor],
            || {
                let db = db2.clone();
                let owner = o2.clone();
                async move {
                    let done = db.count("SELECT COUNT(*) FROM instances WHERE state = 'COMPLETED'").await;
                    let held: i64 = sqlx::query_scalar(claims_sql).bind(&owner).fetch_one(&db.sql).await.expect("claims");
                    done >= 100 && held > 0
                }
            },
        )
        .await;
        assert_eq!(holder(&db, SWEEPER).await.as_deref(), Some(owner.as_str()), "the victim kept the sweeper lease");
        victim.kill9();
        let killed_at = Instant::now();
        let orphaned: i64 = sqlx::query_scalar(claims_sql).bind(&owner).fetch_one(&db.sql).await.expect("claims");
        let done_at_kill = db.count("SELECT COUNT(*) FROM instances WHERE state = 'COMPLETED'").await;
        starting.await.expect("starts");
        let db2 = db.clone();
        wait_for("the survivor to complete every instance", Duration::from_secs(240), &mut [&mut survivor], || {
            let db = db2.clone();
            async move { db.count("SELECT COUNT(*) FROM instances WHERE state = 'COMPLETED'").await == INSTANCES as i64 }
        })
        .await;
        let all_done = killed_at.elapsed();
        let lost = assert_exactly_once(&db, INSTANCES).await;
        assert!(orphaned + lost > 0, "the kill interrupted work the survivor had to take over");
        assert!(survivor.attempts_run() > 0);
        // The singletons move to the survivor once the dead holder's leases
        // expire (sweeper: one 2 s interval; schedules: 30 s).
        let s_owner = survivor.owner();
        for (name, limit) in [(SWEEPER, 60), (sutra::runtime::SCHEDULE_LEASE, 90)] {
            let db2 = db.clone();
            let s2 = s_owner.clone();
            wait_for(&format!("the survivor to take lease {name}"), Duration::from_secs(limit), &mut [&mut survivor], || {
                let db = db2.clone();
                let s = s2.clone();
                async move { holder(&db, name).await.as_deref() == Some(s.as_str()) }
            })
            .await;
        }
        eprintln!(
            "killed at {done_at_kill} completed holding {orphaned} live claims; {lost} attempts re-run after their lease; \
             all done {all_done:?} after the kill, both leases taken over {:?} after it; victim ran {} attempts, survivor {}",
            killed_at.elapsed(),
            victim.attempts_run(),
            survivor.attempts_run()
        );
        drop(rt);
    })
    .await;
}

/// Two stores (two pools, as two replicas have) race for one lease at the
/// same instant: exactly one wins each round; the other takes over only
/// once it expired, or at once after a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_has_one_holder_across_two_stores() {
    with_schema(|db| async move {
        let (s1, s2) = (db.store().await, db.store().await);
        for round in 0..20i64 {
            let now = 1_000_000 + round * 10_000;
            let name = format!("singleton-{round}");
            let mut set = tokio::task::JoinSet::new();
            for i in 0..8 {
                let store = if i % 2 == 0 { s1.clone() } else { s2.clone() };
                let name = name.clone();
                set.spawn(async move {
                    store
                        .try_lease(&name, &format!("r{i}"), now, 5_000)
                        .await
                        .expect("try_lease")
                });
            }
            let mut winners = 0;
            while let Some(won) = set.join_next().await {
                winners += usize::from(won.expect("task"));
            }
            assert_eq!(winners, 1, "round {round}: {winners} holders");
        }
        assert!(s1.try_lease("sweeper", "a", 0, 1_000).await.unwrap());
        assert!(
            !s2.try_lease("sweeper", "b", 999, 1_000).await.unwrap(),
            "held until 1000"
        );
        assert!(
            s2.try_lease("sweeper", "b", 1_000, 1_000).await.unwrap(),
            "taken over at expiry"
        );
        assert!(!s1.try_lease("sweeper", "a", 1_500, 1_000).await.unwrap());
        s2.release_lease("sweeper", "b").await.unwrap();
        assert!(
            s1.try_lease("sweeper", "a", 1_500, 1_000).await.unwrap(),
            "free at once after a release"
        );
        s1.close().await;
        s2.close().await;
    })
    .await;
}

/// A deployment and an instance row to hang parks on, in `store`.
async fn instance_for_parks(store: &PgStore, id: &str) {
    let mut modules = BTreeMap::new();
    modules.insert("chaos".to_string(), "0".repeat(64));
    let dep = store
        .insert_deployment(&NewDeployment {
            id: format!("dep-{id}"),
            tenant: TENANT.into(),
            process_id: format!("p-{id}"),
            dialect: "bpmn".into(),
            source: "<definitions/>".into(),
            modules,
            reusable: Default::default(),
            created_at: 0,
        })
        .await
        .expect("deployment");
    let inst = NewInstance {
        id: id.into(),
        tenant: TENANT.into(),
        deployment_id: dep.id,
        process_id: format!("p-{id}"),
        idempotency_key: None,
        idempotency_fingerprint: None,
        retry_of: None,
        business_key: None,
        started_at: 0,
    };
    let step = StepWrite {
        snapshot: "{}".into(),
        state: "WAITING".into(),
        ..StepWrite::default()
    };
    store.create_instance(&inst, &step).await.expect("instance");
}

fn timer(seq: i64, due_at: i64) -> NewPark {
    NewPark {
        seq,
        kind: "timer".into(),
        due_at: Some(due_at),
        message_name: None,
        correlation_key: None,
        claim: None,
    }
}

/// A park due soon, committed through one store, wakes the `Notify` that
/// another store watches; the notification carries its due instant and is
/// sent on commit only for parks due within the horizon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_park_armed_on_one_store_wakes_the_poller_of_another() {
    with_schema(|db| async move {
        let (watcher, writer) = (db.store().await, db.store().await);
        instance_for_parks(&writer, "i1").await;
        let wake = Arc::new(tokio::sync::Notify::new());
        watcher.watch_parks(wake.clone()).await.expect("LISTEN");
        // A raw listener sees the payloads (other tests on this database may
        // notify too: only our distinctive instants count).
        let mut raw = PgListener::connect(&db.url).await.expect("listener");
        raw.listen("sutra_parks").await.expect("LISTEN");
        // Instants in 1970 that no real replica arms.
        let t = 1_234_567_000 + i64::from(rand::random::<u16>()) * 10_000;
        let (far, near) = (t + 5_000, t + 300);
        let far_step = StepWrite {
            snapshot: "{}".into(),
            state: "WAITING".into(),
            updated_at: t,
            arm: vec![timer(1, far)],
            ..StepWrite::default()
        };
        writer
            .commit_step("i1", 1, &far_step)
            .await
            .expect("far park");
        let near_step = StepWrite {
            updated_at: t,
            arm: vec![timer(2, near), timer(3, near + 100)],
            ..far_step.clone()
        };
        writer
            .commit_step("i1", 2, &near_step)
            .await
            .expect("near park");
        tokio::time::timeout(Duration::from_secs(10), wake.notified())
            .await
            .expect("the watcher's Notify was woken by the other store's commit");
        let first = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let n = raw.recv().await.expect("recv");
                if n.payload() == far.to_string() || n.payload() == near.to_string() {
                    return n.payload().to_string();
                }
            }
        })
        .await
        .expect("a notification for our parks");
        assert_eq!(
            first,
            near.to_string(),
            "the far park sent nothing; the near one its earliest due"
        );
        watcher.close().await;
        writer.close().await;
    })
    .await;
}

/// An abandoned attempt committed through one store reaches the stop sink
/// of another (LISTEN/NOTIFY on `sutra_stops`), on commit only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_abandoned_on_one_store_is_heard_by_another() {
    #[derive(Default)]
    struct Heard(Mutex<Vec<(String, u64, u32)>>, tokio::sync::Notify);
    impl sutra::store::StopSink for Heard {
        fn stop(&self, instance: &str, token: u64, attempt: u32) {
            if let Ok(mut h) = self.0.lock() {
                h.push((instance.to_string(), token, attempt));
            }
            self.1.notify_one();
        }
        fn alive(&self) -> bool {
            true
        }
    }
    with_schema(|db| async move {
        let (watcher, writer) = (db.store().await, db.store().await);
        // An instance id no other test on this database uses.
        let id = format!("stop-{:016x}", rand::random::<u64>());
        instance_for_parks(&writer, &id).await;
        let heard = Arc::new(Heard::default());
        watcher.watch_stops(heard.clone()).await.expect("LISTEN");
        let step = StepWrite {
            snapshot: "{}".into(),
            state: "TERMINATED".into(),
            abandoned: vec![(3, 2)],
            ..StepWrite::default()
        };
        writer.commit_step(&id, 1, &step).await.expect("commit");
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if heard.0.lock().expect("lock").iter().any(|h| h.0 == id) {
                    return;
                }
                heard.1.notified().await;
            }
        })
        .await
        .expect("the stop reached the other store's sink");
        let ours: Vec<_> = heard
            .0
            .lock()
            .expect("lock")
            .iter()
            .filter(|h| h.0 == id)
            .cloned()
            .collect();
        assert_eq!(ours, vec![(id.clone(), 3, 2)]);
        watcher.close().await;
        writer.close().await;
    })
    .await;
}

/// Issue 16 item 3 across replicas: an attempt looping on replica A (one
/// hour deadline, A's only sandbox slot) is stopped at once when replica B
/// cancels its instance, so the slot is free for the next attempt on A: an
/// echo started afterwards completes. Before, only a cancel on A itself
/// stopped it, and the echo waited the hour for the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_one_replica_stops_the_attempt_running_on_another() {
    with_schema(|db| async move {
        let config = Config {
            deadline: Some(sutra::time::IsoDuration(Duration::from_secs(3600))),
            // Fuel for the hour: only a stop ends the loop.
            fuel: Some(u64::MAX >> 2),
            slots: 1,
            tenant_slots: Some(1),
            ..Config::default()
        };
        let replica = |owner: &str| {
            let mut opts = RuntimeOptions::new(config.clone());
            opts.owner = owner.into();
            opts
        };
        // A's connections carry an application name, so the test can see
        // when A listens for stops.
        let app = format!("sutra-test-{:016x}", rand::random::<u64>());
        let sep = if db.url.contains('?') { '&' } else { '?' };
        let a_store = PgStore::open_in_schema(
            &format!("{}{sep}application_name={app}", db.url),
            &db.schema,
        )
        .await
        .expect("store A");
        let a = Runtime::new(AnyStore::Postgres(a_store), replica("replica-a")).expect("runtime");
        let b = Runtime::new(AnyStore::Postgres(db.store().await), replica("replica-b"))
            .expect("runtime");
        let mut modules = BTreeMap::new();
        modules.insert("chaos".to_string(), common::guest_bytes("chaos"));
        a.deploy(TENANT, SPIN, &modules).await.expect("deploy");
        let (stop_a, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = {
            let a = a.clone();
            tokio::spawn(async move {
                a.serve(async {
                    let _ = stopped.await;
                })
                .await
            })
        };
        // A stop sent before A listens would be lost: start once it does.
        wait_until_listening(&db, &app, "sutra_stops").await;
        let spinner = {
            let a = a.clone();
            tokio::spawn(async move {
                a.start(StartRequest {
                    tenant: TENANT.into(),
                    process_id: "spin".into(),
                    variables: json!({"do": "loop"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                    ..StartRequest::default()
                })
                .await
            })
        };
        let id = loop {
            let id: Option<String> = sqlx::query_scalar(
                "SELECT id FROM instances WHERE process_id = 'spin' AND state = 'RUNNING'",
            )
            .fetch_optional(&db.sql)
            .await
            .expect("query");
            if let Some(id) = id {
                break id;
            }
            // Polling an observable state, not waiting for a time to pass.
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let cancelled = b.cancel(&id, None).await.expect("cancel on B");
        assert_eq!(
            cancelled.state.as_str(),
            "TERMINATED",
            "{:?}",
            cancelled.error
        );
        // Bounded only so that a regression fails instead of waiting an hour.
        let deadline = Instant::now() + Duration::from_secs(300);
        let echo = tokio::time::timeout_at(
            deadline.into(),
            a.start(StartRequest {
                tenant: TENANT.into(),
                process_id: "spin".into(),
                variables: json!({"do": "echo"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                ..StartRequest::default()
            }),
        )
        .await
        .expect("the attempt on replica A was not stopped: the echo waits for its slot")
        .expect("start the echo on A");
        loop {
            let state = a.inspect(&echo).await.expect("inspect").state;
            if state == "COMPLETED" {
                break;
            }
            assert!(
                Instant::now() < deadline && state != "FAILED",
                "the attempt on replica A was not stopped: the echo is {state}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        spinner.await.expect("join").expect("start on A");
        assert_eq!(a.inspect(&id).await.expect("inspect").state, "TERMINATED");
        let _ = stop_a.send(());
        serving.await.expect("join").expect("serve");
    })
    .await;
}

/// start → T (chaos, whatever its input says) → end.
const SPIN: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="spin" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// Waits (polling `pg_stat_activity`, bounded) until a connection named
/// `app` LISTENs on `channel`.
async fn wait_until_listening(db: &TestSchema, app: &str, channel: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query ILIKE $2",
        )
        .bind(app)
        .bind(format!("%LISTEN%{channel}%"))
        .fetch_one(&db.sql)
        .await
        .expect("pg_stat_activity");
        if n > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "nobody LISTENs on {channel}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
