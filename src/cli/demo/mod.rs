//! `sutra demo`: the README's main job. Builds the example guests if needed,
//! deploys each flow of [`flows::flows`] on embedded SQLite with the virtual
//! clock and the audit journal on, starts its cases and tells what happened to
//! each: the steps, the way each gateway went, the end event reached; then a
//! summary per flow. `--keep PATH` keeps the database for `sutra inspect`.
mod flows;
mod story;

use super::run::{fail_exit, tokio};
use super::usage_error;
use crate::config::Config;
use crate::engine::Snapshot;
use crate::runtime::{Runtime, RuntimeOptions, StartRequest};
use crate::store::{AnyStore, Store};
use clap::Args;
use flows::Flow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const TENANT: &str = "demo";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the demo's SQLite database at this new file (it must not exist yet), so
    /// `sutra inspect --db PATH <instance>` shows an instance afterwards.
    #[arg(long, value_name = "PATH")]
    pub keep: Option<PathBuf>,
}

fn build_guests(names: &[&str]) -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("guest-examples/build.sh");
    eprintln!("Building the example guests (first run takes a minute) ...");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .args(names)
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed:\n{}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn read_guest(name: &str) -> Result<Vec<u8>, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/guests")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Where the database goes: the `--keep` file (refused if it exists), else a temporary one.
fn database(keep: Option<&Path>) -> Result<(PathBuf, Option<tempfile::TempDir>), ExitCode> {
    match keep {
        Some(path) => {
            if path.exists() {
                return Err(usage_error(format!(
                    "--keep {}: the file exists already; give a new path (the demo creates it)",
                    path.display()
                )));
            }
            let absolute = std::path::absolute(path)
                .map_err(|e| usage_error(format!("--keep {}: {e}", path.display())))?;
            if !absolute.parent().is_some_and(Path::is_dir) {
                return Err(usage_error(format!(
                    "--keep {}: its directory does not exist",
                    path.display()
                )));
            }
            Ok((absolute, None))
        }
        None => {
            let dir = tempfile::tempdir()
                .map_err(|e| fail_exit(&format!("cannot create a temporary directory: {e}")))?;
            Ok((dir.path().join("demo.db"), Some(dir)))
        }
    }
}

/// One case's line in its flow's summary (every dialect's part makes them).
#[derive(Debug)]
pub struct Row {
    pub label: String,
    pub instance: String,
    pub state: String,
    pub ended_at: String,
    pub attempts: usize,
    pub took: String,
}

pub fn exec(args: DemoArgs) -> ExitCode {
    let flows = flows::flows();
    let mut guests: Vec<&str> = flows
        .iter()
        .flat_map(|f| f.guests.iter().copied())
        .collect();
    guests.push("chaos"); // the HX and States-language flows run on it too
    guests.sort_unstable();
    guests.dedup();
    let (path, _tmp) = match database(args.keep.as_deref()) {
        Ok(d) => d,
        Err(code) => return code,
    };
    if let Err(e) = build_guests(&guests) {
        return fail_exit(&e);
    }
    let mut modules = BTreeMap::new();
    for name in guests {
        match read_guest(name) {
            Ok(b) => {
                modules.insert(name.to_string(), b);
            }
            Err(e) => return fail_exit(&e),
        }
    }
    let rt = match tokio() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let url = format!("sqlite://{}", path.display());
        let store = match AnyStore::open(&url).await {
            Ok(s) => s,
            Err(e) => return fail_exit(&e.to_string()),
        };
        let config = Config {
            audit_sql: true,
            ..Config::default()
        };
        let opts = RuntimeOptions::new(config).with_virtual_clock(chrono::Utc::now());
        let runtime = match Runtime::new(store, opts) {
            Ok(r) => r,
            Err(e) => return fail_exit(&e.to_string()),
        };
        let where_ = match &args.keep {
            Some(_) => format!("kept at {}", path.display()),
            None => "a temporary file; `sutra demo --keep demo.db` keeps it".to_string(),
        };
        println!(
            "Sutra demo on embedded SQLite ({where_}), virtual clock, audit journal on.\n"
        );
        for flow in &flows {
            let rows = match run_flow(&runtime, flow, &modules).await {
                Ok(rows) => rows,
                Err(e) => return fail_exit(&e),
            };
            print_summary(flow.noun, &rows, flow.moral);
        }
        // The other two dialects, on the same engine: an HX payment that unwinds
        // by compensation, and a States-language Map over order lines.
        let Some(chaos) = modules.get("chaos") else {
            return fail_exit("the `chaos` guest was not built");
        };
        println!();
        match super::demo_hx::payment(&runtime, TENANT, chaos).await {
            Ok((story, rows)) => {
                print!("{story}");
                print_summary("payment", &rows, HX_MORAL);
            }
            Err(e) => return fail_exit(&e),
        }
        println!();
        let chaos_only = BTreeMap::from([("chaos".to_string(), chaos.clone())]);
        let last_instance = match super::demo_states::run(&runtime, TENANT, &chaos_only).await {
            Ok(rows) => {
                print_summary("order", &rows, STATES_MORAL);
                rows.last().map(|r| r.instance.clone())
            }
            Err(e) => return fail_exit(&e),
        };
        runtime.store().close().await;
        if let (Some(_), Some(id)) = (&args.keep, last_instance) {
            println!(
                "The database is kept at {0}; look at an instance again with\n  sutra inspect --db {0} {id}",
                path.display()
            );
        }
        ExitCode::SUCCESS
    })
}

/// Deploy one flow, run its cases one after the other and tell each.
async fn run_flow(
    runtime: &Runtime<AnyStore>,
    flow: &Flow,
    modules: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<Row>, String> {
    let wanted: BTreeMap<String, Vec<u8>> = modules
        .iter()
        .filter(|(name, _)| flow.guests.contains(&name.as_str()))
        .map(|(n, b)| (n.clone(), b.clone()))
        .collect();
    let deployed = runtime
        .deploy(TENANT, flow.definition, &wanted)
        .await
        .map_err(|e| e.to_string())?;
    let deployment = deployed
        .iter()
        .find(|d| d.process_id == flow.process)
        .ok_or_else(|| format!("{}: no process `{}`", flow.title, flow.process))?;
    let process = runtime
        .deployed(&deployment.id)
        .await
        .map_err(|e| e.to_string())?
        .process
        .clone();
    println!("{}", flow.title);
    println!("{}\n", "=".repeat(flow.title.chars().count()));
    let mut rows = Vec::new();
    for case in &flow.cases {
        let started = runtime.clock().now();
        let id = runtime
            .start(StartRequest {
                tenant: TENANT.into(),
                process_id: flow.process.into(),
                variables: case.variables.as_object().cloned().unwrap_or_default(),
                ..StartRequest::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        println!(
            "{} {}: {}  (instance {id})",
            capitalised(flow.noun),
            case.label,
            case.about
        );
        runtime.settle(&id).await.map_err(|e| e.to_string())?;
        let history = runtime.history(&id).await.map_err(|e| e.to_string())?;
        let completed = match runtime.store().load_instance(&id).await {
            Ok(Some(rec)) => Snapshot::from_json(&rec.snapshot)
                .map(|s| s.completed)
                .map_err(|e| format!("instance {id}: {e}"))?,
            Ok(None) => Vec::new(),
            Err(e) => return Err(e.to_string()),
        };
        let told = story::tell(&process, &history.entries, &completed, started, flow.noun);
        for (at, line) in &told.lines {
            println!("  {at:>14}  {line}");
        }
        println!();
        let view = runtime.inspect(&id).await.map_err(|e| e.to_string())?;
        rows.push(Row {
            label: case.label.to_string(),
            instance: id.clone(),
            state: view.state.clone(),
            ended_at: if told.ends.is_empty() {
                "-".into()
            } else {
                told.ends.join(", ")
            },
            attempts: view.attempts.len(),
            took: view
                .ended_at
                .map(|e| story::offset((e - started).num_milliseconds()))
                .unwrap_or_else(|| "-".into()),
        });
    }
    Ok(rows)
}

/// What the HX part shows.
const HX_MORAL: &str = "Both payments ran on the same engine as the BPMN orders. The second one's retries were durable \
parks with full jitter; when they were spent, the workflow unwound newest completion first — the \
capture refunded, then the reservation released — and ended COMPENSATED, not FAILED: nothing was \
left half done.";
/// What the States-language part shows.
const STATES_MORAL: &str =
    "The Map reserved each line on its own token: a busy warehouse retried with backoff (durable \
parks), an out-of-stock line was caught and backordered instead of failing the order, and the \
two-hour Wait was one timer row. The declined card was caught by the Charge state's Catch and \
routed to a Fail state, so that order ended FAILED with the flow's own error name.";

fn print_summary(noun: &str, rows: &[Row], moral: &str) {
    println!("Summary");
    let width = rows
        .iter()
        .map(|r| r.ended_at.chars().count())
        .max()
        .unwrap_or(0)
        .max("ended at".len());
    let states = rows
        .iter()
        .map(|r| r.state.len())
        .max()
        .unwrap_or(0)
        .max(10);
    println!(
        "  {:<14} {:<states$} {:<width$}  {:>8}  {:>14}",
        noun, "state", "ended at", "attempts", "virtual time"
    );
    for r in rows {
        println!(
            "  {:<14} {:<states$} {:<width$}  {:>8}  {:>14}",
            r.label, r.state, r.ended_at, r.attempts, r.took
        );
    }
    println!("\n{moral}\n");
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
