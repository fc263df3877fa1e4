//! `sutra run`, `sutra inspect`: deploy and drive one instance locally; show one.
use super::usage_error;
use crate::config::Config;
use crate::runtime::{InstanceView, Runtime, RuntimeOptions, Settled, StartRequest};
use crate::store::AnyStore;
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The tenant of local (non-server) commands.
pub const LOCAL_TENANT: &str = "default";

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The process definition (BPMN).
    pub definition: PathBuf,
    /// A task module: `name=component.wasm` for each `registered:<name>` the process calls.
    #[arg(long = "task", value_name = "NAME=FILE")]
    pub tasks: Vec<String>,
    /// The start variables, a JSON object.
    #[arg(long, default_value = "{}")]
    pub input: String,
    /// Which process to start when the file has several executable ones.
    #[arg(long)]
    pub process: Option<String>,
    /// Run on virtual time: timers and backoffs pass at once.
    #[arg(long)]
    pub virtual_clock: bool,
    /// The datasource (`sqlite://file.db`, `postgres://...`, `sqlite::memory:` for an
    /// ephemeral run). Default: a temporary SQLite file.
    #[arg(long)]
    pub db: Option<String>,
    /// A TOML configuration file (environment variables override it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The instance id.
    pub instance: String,
    #[arg(long)]
    pub db: String,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

pub(crate) fn tokio() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(1)
        })
}

/// Parse `name=file` pairs and read the files.
pub(crate) fn read_modules(pairs: &[String]) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut out = BTreeMap::new();
    for p in pairs {
        let (name, file) = p
            .split_once('=')
            .ok_or_else(|| format!("--task `{p}` must be NAME=FILE"))?;
        if name.is_empty() {
            return Err(format!("--task `{p}` has an empty name"));
        }
        let bytes =
            std::fs::read(file).map_err(|e| format!("--task {name}: cannot read {file}: {e}"))?;
        out.insert(name.to_string(), bytes);
    }
    Ok(out)
}

pub(crate) fn parse_object(
    text: &str,
    what: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!("{what} must be a JSON object")),
        Err(e) => Err(format!("{what} is not JSON: {e}")),
    }
}

pub(crate) fn load_config(path: Option<&Path>) -> Result<Config, String> {
    Config::from_env(path).map_err(|e| e.to_string())
}

/// Open the datasource; `None` → a temporary SQLite file (kept alive by the returned guard).
pub(crate) async fn open_store(
    db: Option<&str>,
) -> Result<(AnyStore, bool, Option<tempfile::TempDir>), String> {
    let (url, guard) = match db {
        Some(u) => (u.to_string(), None),
        None => {
            let dir = tempfile::tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let url = format!("sqlite://{}", dir.path().join("sutra.db").display());
            (url, Some(dir))
        }
    };
    let durable = !url.contains(":memory:");
    let store = AnyStore::open(&url)
        .await
        .map_err(|e| format!("cannot open {url}: {e}"))?;
    Ok((store, durable, guard))
}

pub fn exec_run(args: RunArgs) -> ExitCode {
    let modules = match read_modules(&args.tasks) {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let input = match parse_object(&args.input, "--input") {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let source = match std::fs::read_to_string(&args.definition) {
        Ok(s) => s,
        Err(e) => return usage_error(format!("cannot read {}: {e}", args.definition.display())),
    };
    let config = match load_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    let rt = match tokio() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let db = args.db.clone().or(config.datasource_url.clone());
        let (store, durable, _guard) = match open_store(db.as_deref()).await {
            Ok(s) => s,
            Err(e) => return fail_exit(&e),
        };
        let mut opts = RuntimeOptions::new(config);
        opts.durable = durable;
        if args.virtual_clock {
            opts = opts.with_virtual_clock(chrono::Utc::now());
        }
        let runtime = match Runtime::new(store, opts) {
            Ok(r) => r,
            Err(e) => return fail_exit(&e.to_string()),
        };
        let deployments = match runtime.deploy(LOCAL_TENANT, &source, &modules).await {
            Ok(d) => d,
            Err(e) => {
                for d in &e.diagnostics {
                    eprintln!("{}:{d}", args.definition.display());
                }
                return fail_exit(&e.to_string());
            }
        };
        let process_id = match &args.process {
            Some(p) => p.clone(),
            None => deployments[0].process_id.clone(),
        };
        let id = crate::runtime::new_id(runtime.clock().now().timestamp_millis());
        eprintln!("instance {id}");
        let started = runtime
            .start(StartRequest {
                id: Some(id.clone()),
                tenant: LOCAL_TENANT.into(),
                process_id,
                variables: input,
                ..StartRequest::default()
            })
            .await;
        if let Err(e) = started {
            return fail_exit(&e.to_string());
        }
        match runtime.settle(&id).await {
            Err(e) => return fail_exit(&e.to_string()),
            Ok(Settled::Gone) => {
                println!(
                    "{}",
                    serde_json::json!({
                        "instance": id,
                        "state": "COMPLETED",
                        "note": "deleted at completion (sutra.instance.retention = PT0S)"
                    })
                );
                return ExitCode::SUCCESS;
            }
            Ok(_) => {}
        }
        match runtime.inspect(&id).await {
            Ok(view) => print_view(&view, args.format),
            Err(e) => fail_exit(&e.to_string()),
        }
    })
}

pub fn exec_inspect(args: InspectArgs) -> ExitCode {
    let rt = match tokio() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let (store, durable, _g) = match open_store(Some(&args.db)).await {
            Ok(s) => s,
            Err(e) => return fail_exit(&e),
        };
        let mut opts = RuntimeOptions::new(Config::default());
        opts.durable = durable;
        let runtime = match Runtime::new(store, opts) {
            Ok(r) => r,
            Err(e) => return fail_exit(&e.to_string()),
        };
        match runtime.inspect(&args.instance).await {
            Ok(view) => print_view(&view, args.format),
            Err(e) => fail_exit(&e.to_string()),
        }
    })
}

pub(crate) fn fail_exit(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(1)
}

/// Print an instance; exit 0 unless it FAILED, was TERMINATED or COMPENSATED.
pub(crate) fn print_view(view: &InstanceView, format: Format) -> ExitCode {
    match format {
        Format::Json => match serde_json::to_string_pretty(view) {
            Ok(s) => println!("{s}"),
            Err(e) => return fail_exit(&e.to_string()),
        },
        Format::Text => print!("{}", render(view)),
    }
    match view.state.as_str() {
        "FAILED" | "TERMINATED" | "COMPENSATED" => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    }
}

pub(crate) fn render(view: &InstanceView) -> String {
    let mut s = format!(
        "instance {}  process {}  state {}\n",
        view.instance, view.process, view.state
    );
    for a in &view.attempts {
        s.push_str(&format!(
            "  {}  {} attempt {}  {}{}\n",
            a.at.format("%H:%M:%S%.3f"),
            a.task,
            a.attempt,
            a.outcome,
            a.code.as_ref().map(|c| format!(" {c}")).unwrap_or_default()
        ));
    }
    if !view.nodes.is_empty() {
        let nodes: Vec<String> = view
            .nodes
            .iter()
            .map(|(n, st)| format!("{n}={st}"))
            .collect();
        s.push_str(&format!("  nodes {}\n", nodes.join(" ")));
    }
    if let Some(e) = &view.error {
        s.push_str(&format!("  error {}: {}\n", e.code, e.message));
        if let Some(c) = &e.cause {
            s.push_str(&format!("  cause {}: {}\n", c.code, c.message));
        }
        for f in &e.compensation_failures {
            s.push_str(&format!(
                "  compensation failed {}: {}\n",
                f.code, f.message
            ));
        }
    }
    s.push_str(&format!(
        "  variables {}\n",
        serde_json::Value::Object(view.variables.clone())
    ));
    s
}
