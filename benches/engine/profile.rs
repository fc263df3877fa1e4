//! The profile part of the engine benchmark: the pieces of one echo instance
//! (store calls, the sandbox attempt, the engine step, an fsync), each timed
//! alone through the public API, and what sqlx's pool settings cost a read.
//!
//! Invariant: the pieces are interleaved per iteration, so a swing of the
//! shared disk hits every piece alike; nothing here changes what the runtime
//! does, it only calls what the runtime calls.

use super::*;

/// The pieces of one echo instance, in the order the runtime runs them: the
/// attempt runs before the first commit, and the instance is written once,
/// already COMPLETED (runtime::inline).
const PIECES: [&str; 5] = [
    "sandbox.attempt echo",
    "engine start+apply+1×snapshot JSON (CPU)",
    "store.create_instance (write tx, terminal)",
    "fsync: 4 KiB overwrite + fdatasync",
    "rt.start, whole instance",
];

/// Where the time of one echo instance goes: each piece timed alone through
/// the public API (interleaved, so a swing of the disk hits every piece
/// alike), on a database of its own with the default durability.
pub(super) async fn workload_profile(b: &Bench) -> Result<()> {
    header("profile: the pieces of one echo instance, each timed alone, interleaved (default durability)");
    let source = one_task("");
    let rt = b
        .runtime("profile", Synchronous::default(), &source)
        .await?;
    let store = rt.store().clone();
    let input = vars(json!({"do": "echo"}));
    let reference = rt.start(request(&input)).await?;
    let done = store
        .load_instance(&reference)
        .await?
        .ok_or_else(|| anyhow!("reference instance gone"))?;
    let dep = store
        .active_deployment(TENANT, "p")
        .await?
        .ok_or_else(|| anyhow!("no deployment"))?;
    let component = rt
        .sandbox()
        .load(&b.chaos)
        .map_err(|e| anyhow!("load chaos: {e}"))?;
    let limits = sutra::sandbox::Limits::default();
    let process = process_of(&source)?;
    let mut fsync = Overwrite::new(b.dir.path())?;
    let n = count(500);
    let mut m = Meter::new(n);
    for i in 0..n {
        let id = format!("profile-{i:08}");
        let ctx = sutra::sandbox::TaskContext {
            tenant: TENANT.into(),
            instance_id: id.clone(),
            task_id: "T".into(),
            attempt: 1,
            idempotency_key: format!("{id}/T"),
        };
        let clock = Meter::begin();
        let report = rt
            .sandbox()
            .attempt(&component, &ctx, r#"{"do":"echo"}"#, &limits)
            .await;
        m.end(0, clock);
        if !matches!(report.outcome, sutra::sandbox::Outcome::Completed { .. }) {
            bail!("echo attempt ended {:?}", report.outcome);
        }

        let clock = Meter::begin();
        engine_step(&process, &id)?;
        m.end(1, clock);

        let new = NewInstance {
            id: id.clone(),
            tenant: TENANT.into(),
            deployment_id: dep.id.clone(),
            process_id: "p".into(),
            idempotency_key: None,
            idempotency_fingerprint: None,
            retry_of: None,
            business_key: None,
            started_at: now_ms(),
        };
        let only = StepWrite {
            snapshot: done.snapshot.clone(),
            state: "COMPLETED".into(),
            updated_at: now_ms(),
            ended_at: Some(now_ms()),
            withdraw_all: true,
            attempts: vec![sutra::store::AttemptRow {
                token: 1,
                node: "T".into(),
                attempt: 1,
                started_at: now_ms(),
                ended_at: now_ms(),
                outcome: "completed".into(),
                code: None,
                class: None,
                message: None,
                calls: None,
                item_node: None,
                item_index: None,
            }],
            ..StepWrite::default()
        };
        let clock = Meter::begin();
        store.create_instance(&new, &only).await?;
        m.end(2, clock);

        let clock = Meter::begin();
        fsync.once()?;
        m.end(3, clock);

        let clock = Meter::begin();
        rt.start(request(&input)).await?;
        m.end(4, clock);
    }
    let d: Vec<Dist> = m.wall.iter().map(|v| dist_of(v)).collect();
    for (k, (label, dist)) in PIECES.iter().zip(&d).enumerate() {
        row_dist(label, dist);
        println!("  {:<44} {}", "", m.cost(k, n));
    }
    let sum: f64 = d[..3].iter().map(|x| x.mean).sum();
    let (sum50, whole) = (d[..3].iter().map(|x| x.p50).sum::<f64>(), d[4]);
    row(
        "sum of the sandbox/engine/store pieces",
        format!("mean {sum:.3} ms, p50 {sum50:.3} ms; residual (runtime glue) mean {:.3} ms, p50 {:.3} ms", whole.mean - sum, whole.p50 - sum50),
    );
    ping_cost(&b.db("profile"), &reference, n).await?;
    store.close().await;
    Ok(())
}

/// Per-piece wall times, with the context switches of the whole process over
/// each piece (less what two `cpu_now` readings cost alone).
struct Meter {
    wall: Vec<Vec<Duration>>,
    cpu: Vec<Cpu>,
    empty: Cpu,
}

impl Meter {
    fn new(n: usize) -> Meter {
        let mut empty = Cpu::default();
        for _ in 0..100 {
            let c = cpu_now();
            let d = cpu_now();
            empty.ns += d.ns.saturating_sub(c.ns);
            empty.switches += d.switches.saturating_sub(c.switches);
        }
        Meter {
            wall: vec![Vec::with_capacity(n); PIECES.len()],
            cpu: vec![Cpu::default(); PIECES.len()],
            empty,
        }
    }

    fn begin() -> (Cpu, Instant) {
        let c = cpu_now();
        (c, Instant::now())
    }

    fn end(&mut self, k: usize, (c, t): (Cpu, Instant)) {
        let wall = t.elapsed();
        let d = cpu_now();
        self.wall[k].push(wall);
        self.cpu[k].ns += d.ns.saturating_sub(c.ns);
        self.cpu[k].switches += d.switches.saturating_sub(c.switches);
    }

    /// Context switches per call. (Not CPU: `schedstat` of another thread is
    /// only brought up to date when it is switched, too lumpy for one call.)
    fn cost(&self, k: usize, n: usize) -> String {
        let n = n.max(1) as f64;
        let sw = self.cpu[k].switches as f64 / n - self.empty.switches as f64 / 100.0;
        format!("  └ {:.1} context switches (all threads)", sw.max(0.0))
    }
}

/// What sqlx's `test_before_acquire` (on by default: a ping round trip to
/// the connection's worker thread on every acquire) and a pool of several
/// connections (taken in turn: each read wakes a colder worker thread) cost
/// a point read: pools on the same file, read alternately.
async fn ping_cost(db: &Path, id: &str, n: usize) -> Result<()> {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
    let variants = [(1, true), (1, false), (4, true)];
    let mut pools = Vec::new();
    for (connections, test) in variants {
        let pool = SqlitePoolOptions::new()
            .max_connections(connections)
            .min_connections(connections)
            .test_before_acquire(test)
            .connect_with(SqliteConnectOptions::new().filename(db))
            .await?;
        pools.push(pool);
    }
    let mut wall = vec![Vec::with_capacity(n); variants.len()];
    let mut switches = vec![0u64; variants.len()];
    for _ in 0..n {
        for (k, pool) in pools.iter().enumerate() {
            let c = cpu_now();
            let t = Instant::now();
            let row: Option<(String,)> =
                sqlx::query_as("SELECT snapshot FROM instances WHERE id = ?1")
                    .bind(id)
                    .fetch_optional(pool)
                    .await?;
            wall[k].push(t.elapsed());
            switches[k] += cpu_now().switches.saturating_sub(c.switches);
            if row.is_none() {
                bail!("instance {id} not found");
            }
        }
    }
    for (k, (connections, test)) in variants.into_iter().enumerate() {
        row_dist(
            &format!("sqlx read: {connections} conn, test_before_acquire({test})"),
            &dist_of(&wall[k]),
        );
        println!(
            "  {:<44}   └ {:.1} context switches",
            "",
            switches[k] as f64 / n.max(1) as f64
        );
    }
    for pool in pools {
        pool.close().await;
    }
    Ok(())
}

/// 4 KiB overwrites of one preallocated block, each followed by
/// `fdatasync`: the fsync a reused WAL pays (no size change to journal).
struct Overwrite {
    file: std::fs::File,
    path: PathBuf,
}

impl Overwrite {
    fn new(dir: &Path) -> Result<Overwrite> {
        let path = dir.join("overwrite.tmp");
        let mut file =
            std::fs::File::create(&path).with_context(|| format!("create {}", path.display()))?;
        file.write_all(&[0u8; 4096])?;
        file.sync_all()?;
        Ok(Overwrite { file, path })
    }

    fn once(&mut self) -> Result<Duration> {
        use std::io::{Seek, SeekFrom};
        let t = Instant::now();
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&[1u8; 4096])?;
        self.file.sync_data()?;
        Ok(t.elapsed())
    }
}

impl Drop for Overwrite {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn process_of(source: &str) -> Result<sutra::model::Process> {
    let loaded = sutra::dialect::bpmn::load(source);
    if !loaded.ok() {
        bail!("definition refused: {:?}", loaded.diagnostics);
    }
    loaded
        .definitions
        .processes
        .into_iter()
        .find(|p| p.id == "p")
        .ok_or_else(|| anyhow!("no process p"))
}

/// The engine's part of one echo instance: start, apply the attempt's
/// outcome in memory, the snapshot to JSON once (for the one commit).
fn engine_step(process: &sutra::model::Process, id: &str) -> Result<()> {
    use sutra::engine::{self, Effect, Event, Inputs, TaskOutcome};
    let inputs = Inputs {
        now: chrono::Utc::now(),
        draw: 0.5,
        attempt_lease: Duration::from_secs(60),
        journal: true,
    };
    let step = engine::start(
        process,
        engine::NewInstance {
            instance_id: id,
            tenant: TENANT,
            deployment_id: "d",
            start_node: None,
            variables: vars(json!({"do": "echo"})),
        },
        &inputs,
    )?;
    let req = step
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::RunAttempt(a) => Some(a.clone()),
            _ => None,
        })
        .ok_or_else(|| anyhow!("no attempt to run"))?;
    let snap = step.snapshot;
    let event = Event::AttemptEnded {
        token: req.token,
        attempt: req.attempt,
        outcome: TaskOutcome::Completed {
            output: json!({"do": "echo"}),
        },
    };
    let mut end = engine::apply(process, snap, event, &inputs)?;
    std::hint::black_box(end.snapshot.to_json());
    Ok(())
}

/// `writes` overwrites of one block, each followed by `fdatasync`.
pub(super) fn overwrite_latency(dir: &Path, writes: usize) -> Result<Dist> {
    let mut o = Overwrite::new(dir)?;
    let mut v = Vec::with_capacity(writes);
    for _ in 0..writes {
        v.push(o.once()?);
    }
    Ok(dist_of(&v))
}
