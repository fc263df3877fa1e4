//! `sutra run`, `sutra inspect`: deploy and drive one instance locally; show one.
use super::run_watch::Watched;
use super::show;
use super::usage_error;
use crate::codes::Code;
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
    /// The process definition: BPMN (with `q:` extensions), HX XML, or States-language JSON.
    pub definition: PathBuf,
    /// A task module: `NAME=component.wasm` for each task the process calls (BPMN `registered:NAME`, HX `impl="NAME"`, States `"Resource": "NAME"`).
    #[arg(long = "task", value_name = "NAME=FILE")]
    pub tasks: Vec<String>,
    /// The start variables, a JSON object (a States-language execution takes any JSON value).
    #[arg(long, default_value = "{}")]
    pub input: String,
    /// Which process to start when the file has several executable ones.
    #[arg(long)]
    pub process: Option<String>,
    /// Run on virtual time: timers and backoffs pass at once.
    #[arg(long)]
    pub virtual_clock: bool,
    /// Configure a channel the process calls: `NAME=URL` (push; loopback allowed) or `NAME=pull`.
    #[arg(long = "channel", value_name = "NAME=URL|pull")]
    pub channels: Vec<String>,
    /// Grant every task module outbound HTTP to `scheme://host[:port]` (or
    /// `*.domain`), any method (repeatable). A denied address (loopback,
    /// private...) also needs `SUTRA_EGRESS_ALLOWED_CIDRS`.
    #[arg(long = "allow-host", value_name = "PATTERN")]
    pub allow_hosts: Vec<String>,
    /// The datasource (`sqlite://file.db`, `postgres://...`, `sqlite::memory:` for an
    /// ephemeral run). Default: a temporary SQLite file.
    #[arg(long)]
    pub db: Option<String>,
    /// A TOML configuration file (environment variables override it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Output: `text` for people, `json` for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// The output format of every verb (`human` is accepted for `text`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[value(alias = "human")]
    Text,
    Json,
}

/// The local `sutra inspect --db`.
#[derive(Debug)]
pub struct InspectArgs {
    pub instance: String,
    pub db: String,
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

/// An execution input: any JSON value (an object is the start variables; any
/// other value is a States-language execution's input document, which the
/// engine refuses for a process that starts with variables).
pub(crate) fn parse_input(
    text: &str,
    what: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    serde_json::from_str::<serde_json::Value>(text)
        .map(crate::engine::document::start_variables)
        .map_err(|e| format!("{what} is not JSON: {e}"))
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
    open_store_with(db, None).await
}

/// [`open_store`], with `acquire`: how long a caller waits for a pooled
/// PostgreSQL connection (`serve`: `sutra.datasource.acquire-timeout`).
pub(crate) async fn open_store_with(
    db: Option<&str>,
    acquire: Option<std::time::Duration>,
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
    let opened = match acquire {
        Some(t) => AnyStore::open_with_acquire(&url, t).await,
        None => AnyStore::open(&url).await,
    };
    let store = opened.map_err(|e| format!("cannot open {url}: {e}"))?;
    Ok((store, durable, guard))
}

/// For verbs that only read: refuse a SQLite file that does not exist (opening
/// it would create an empty database and answer "not found").
pub(crate) fn existing_database(url: &str) -> Result<(), String> {
    if crate::store::any::is_postgres_url(url)
        || url.contains(":memory:")
        || url.contains("mode=memory")
    {
        return Ok(());
    }
    let path = if url.starts_with("sqlite:") {
        match <sqlx::sqlite::SqliteConnectOptions as std::str::FromStr>::from_str(url) {
            Ok(o) => o.get_filename().to_path_buf(),
            Err(e) => return Err(format!("cannot open {url}: {e}")),
        }
    } else {
        PathBuf::from(url)
    };
    if path.is_file() {
        Ok(())
    } else {
        Err(format!(
            "{}: no database at {} (this command only reads; check the path given to --db)",
            Code::DatasourceMissing.as_str(),
            path.display()
        ))
    }
}

pub fn exec_run(args: RunArgs) -> ExitCode {
    let modules = match read_modules(&args.tasks) {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let input = match parse_input(&args.input, "--input") {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let source = match std::fs::read_to_string(&args.definition) {
        Ok(s) => s,
        Err(e) => return usage_error(format!("cannot read {}: {e}", args.definition.display())),
    };
    let mut config = match load_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    let channels = match super::channels::parse_local_channels(&args.channels) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    // A local run may call a counterpart on this machine.
    config.outbox.allowed_hosts.push("loopback".into());
    let rt = match tokio() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let db = args.db.clone().or(config.datasource_url.clone());
        let (store, durable, guard) = match open_store(db.as_deref()).await {
            Ok(s) => s,
            Err(e) => return fail_exit(&e),
        };
        let mut opts = RuntimeOptions::new(config);
        opts.durable = durable;
        // Uploaded components compile in bounded children of this binary.
        opts.compile_worker = std::env::current_exe().ok();
        if args.virtual_clock {
            opts = opts.with_virtual_clock(chrono::Utc::now());
        }
        let runtime = match Runtime::new(store, opts) {
            Ok(r) => r,
            Err(e) => return fail_exit(&e.to_string()),
        };
        for (name, spec) in channels {
            if let Err(e) = runtime.set_channel(LOCAL_TENANT, &name, spec).await {
                return fail_exit(&format!("--channel {name}: {e}"));
            }
        }
        if !args.allow_hosts.is_empty() {
            let grant = crate::egress::Grant::allowing(&args.allow_hosts);
            // The modules' grants, and the HTTP tasks' (`model::HTTP_TASK`).
            let names = modules.keys().map(String::as_str);
            for name in names.chain([crate::model::HTTP_TASK]) {
                if let Err(e) = runtime.put_grant(LOCAL_TENANT, name, &grant).await {
                    return usage_error(format!("--allow-host: {}", e.message));
                }
            }
        }
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
        if let Err(e) = runtime.refuse_ephemeral(LOCAL_TENANT, &process_id).await {
            return fail_exit(&e.to_string());
        }
        let id = crate::runtime::new_id(runtime.clock().now().timestamp_millis());
        eprintln!("instance {id}");
        // After the id line: scripts read the id from the first line.
        if let Some(url) = db.as_deref().filter(|_| durable) {
            local_tenant_key(runtime.store(), url).await;
        }
        let started = runtime
            .start(StartRequest {
                id: Some(id.clone()),
                tenant: LOCAL_TENANT.into(),
                process_id,
                variables: input,
                // Watched from its first commit: a first attempt that runs
                // long is not waited for here, so a timer boundary on it
                // fires on the virtual clock (settle advances it while the
                // attempt runs) and Ctrl-C is heard meanwhile.
                answer_at_commit: true,
                ..StartRequest::default()
            })
            .await;
        if let Err(e) = started {
            return fail_exit(&e.to_string());
        }
        match super::run_watch::settle_watched(&runtime, &id, !args.virtual_clock).await {
            Err(e) => return fail_exit(&e.to_string()),
            Ok(Watched::Interrupted) => {
                super::say(&super::run_watch::kept_note(&id, db.as_deref(), guard));
                return ExitCode::from(130);
            }
            Ok(Watched::Settled(s)) if matches!(*s, Settled::Gone) => {
                let note = "deleted at completion (sutra.instance.retention = PT0S)";
                match args.format {
                    Format::Json => println!(
                        "{}",
                        serde_json::json!({ "instance": id, "state": "COMPLETED", "note": note })
                    ),
                    Format::Text => println!("instance {id}  state COMPLETED\n  {note}"),
                }
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
    if let Err(e) = existing_database(&args.db) {
        return fail_exit(&e);
    }
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

/// Print an instance and exit by the rule of [`show`] (1 only when it FAILED).
pub(crate) fn print_view(view: &InstanceView, format: Format) -> ExitCode {
    match serde_json::to_value(view) {
        Ok(v) => show::print_instance(&v, format),
        Err(e) => fail_exit(&e.to_string()),
    }
}

/// The local tenant's row and first API key, made the first time `sutra run`
/// writes to a database someone named, so that `sutra serve` on the same
/// database shows these runs to the console and the client verbs at once. The
/// key is printed once, on stderr; later runs say nothing.
async fn local_tenant_key(store: &AnyStore, url: &str) {
    let now = chrono::Utc::now().timestamp_millis();
    let limits = crate::store::tenancy::TenantLimits::default();
    match crate::api::auth::create_tenant(store, LOCAL_TENANT, limits, now).await {
        Ok((_, key)) => super::say(&format!(
            "tenant `{LOCAL_TENANT}` (the tenant of local runs) created in {url}; its API key for \
             `sutra serve --db {url}` (the console, --token), shown once:\n  {key}"
        )),
        Err(crate::store::StoreError::Duplicate(_)) => {}
        Err(e) => super::say(&format!(
            "warning: could not create tenant `{LOCAL_TENANT}`: {e}"
        )),
    }
}
