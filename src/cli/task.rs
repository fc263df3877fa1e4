//! `sutra task run`: one attempt of one component, printed as ONE JSON object
//! on stdout.
//!
//! Invariant: stdout carries exactly one JSON object (with `--format json`,
//! the default; `--format text` renders the same fields for people) — `{"outcome":"completed",
//! "output":...}` or `{"outcome":"business_error"|"failed","code","class",
//! "retryable","message","stderr"}` (plus `details` when the guest gave some).
//! Exit 0 only for completed, 1 for any other outcome (a refused component
//! included), 2 for a usage error (a malformed argument, an unreadable file).
//! Log lines, and the guest's stderr of a completed attempt, go to stderr.
//!
//! The component is compiled as `serve` and `run` compile an upload
//! (`Sandbox::load_for`): the same limits (`sutra.sandbox.compile.*`), in
//! the same bounded worker process, quick tier first; a refusal is the
//! same `SUTRA.TASK.MODULE_INVALID` naming the limit.

use super::run::Format;
use crate::sandbox::{AttemptReport, Limits, Outcome, Sandbox, SandboxConfig, TaskContext};
use crate::time::IsoDuration;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Run one attempt of a task component and print how it ended.
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The component (.wasm).
    pub component: PathBuf,
    /// The task input: JSON text.
    #[arg(long)]
    pub input: String,
    /// The attempt number the guest sees (1 is the first try).
    #[arg(long, default_value_t = 1)]
    pub attempt: u32,
    /// Fuel units the attempt may burn.
    #[arg(long)]
    pub fuel: Option<u64>,
    /// Wall-clock deadline, as an ISO-8601 duration (e.g. PT5S).
    #[arg(long)]
    pub deadline: Option<String>,
    /// Memory cap: bytes, or a size such as 64MiB.
    #[arg(long)]
    pub memory: Option<String>,
    /// Cache precompiled components in this directory.
    #[arg(long, env = "SUTRA_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// A TOML configuration file (environment variables override it): the
    /// compile limits (`sutra.sandbox.compile.*`) are the server's.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The tenant the guest sees.
    #[arg(long, default_value = "local")]
    pub tenant: String,
    /// The instance id the guest sees.
    #[arg(long, default_value = "local")]
    pub instance_id: String,
    /// The task id the guest sees (default: the file's stem).
    #[arg(long)]
    pub task_id: Option<String>,
    /// The idempotency key the guest sees (default: derived from the component and input).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Let the component call `scheme://host[:port]` (or `*.domain`), any
    /// method, under the `sutra.egress.*` ceiling of the environment (repeatable).
    #[arg(long = "allow-host", value_name = "PATTERN")]
    pub allow_hosts: Vec<String>,
    /// Output: `json` (the default here: one object on one line, for
    /// scripts) or `text` for people.
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
}

pub fn exec(cmd: TaskCommand) -> ExitCode {
    match cmd {
        TaskCommand::Run(args) => run(args),
    }
}

fn run(args: RunArgs) -> ExitCode {
    let (limits, bytes) = match prepare(&args) {
        Ok(x) => x,
        Err(message) => return super::usage_error(message),
    };
    let config = match super::run::load_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    // The compile path of `serve` and `run` (issue 28): the size and
    // function-count limits first, then a bounded child of this binary
    // (`sutra __compile`, RLIMIT_CPU/AS and a wall-clock kill), quick tier
    // (Winch) first. The optimised compile a server would run behind it is
    // not wanted for one attempt: off.
    let cfg = SandboxConfig {
        pool_size: 1,
        cache_dir: args.cache_dir.clone(),
        compile_worker: std::env::current_exe().ok(),
        compile_limits: config.compile.limits.clone(),
        compile_concurrency: 1,
        tiered: config.compile.tiered,
        optimize_behind: false,
        ..SandboxConfig::default()
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let _entered = runtime.enter();
    let sandbox = match Sandbox::new(cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    // A cold compile takes seconds (a Python component about 2 s): say so.
    let file = args.component.display();
    let kib = bytes.len().div_ceil(1024);
    match &args.cache_dir {
        None => super::say(&format!(
            "sutra task run: compiling {file} ({kib} KiB) in a bounded worker \
             (--cache-dir DIR keeps the code for the next run) ..."
        )),
        Some(dir) => super::say(&format!(
            "sutra task run: loading {file} ({kib} KiB; compiled into {} on its first run) ...",
            dir.display()
        )),
    }
    let loaded = runtime.block_on(sandbox.load_for(&args.tenant, &bytes, &config.compile.limits));
    let component = match loaded {
        Ok(c) => c,
        Err(e) => {
            let outcome = Outcome::failed(e.code, e.message);
            print_shown(&render(&outcome, ""), args.format);
            return ExitCode::from(1);
        }
    };
    let ctx = TaskContext {
        tenant: args.tenant.clone(),
        instance_id: args.instance_id.clone(),
        task_id: args
            .task_id
            .clone()
            .unwrap_or_else(|| stem(&args.component)),
        attempt: args.attempt,
        idempotency_key: args
            .idempotency_key
            .clone()
            .unwrap_or_else(|| format!("local-{}", &key_digest(component.digest(), &args.input))),
    };
    let egress = match egress_session(&args, &component, &ctx) {
        Ok(e) => e,
        Err(message) => return super::usage_error(message),
    };
    let stop = sutra_stop();
    let report = runtime.block_on(sandbox.attempt_with_egress(
        &component,
        &ctx,
        &args.input,
        &limits,
        &stop,
        egress,
    ));
    show_on_stderr(&report);
    let mut shown = render(&report.outcome, &report.stderr);
    if !report.calls.is_empty() {
        shown["calls"] = serde_json::to_value(&report.calls).unwrap_or_default();
    }
    print_shown(&shown, args.format);
    if report.outcome.is_completed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn sutra_stop() -> crate::sandbox::Stop {
    crate::sandbox::Stop::default()
}

/// The attempt's egress session under `--allow-host` and the environment's
/// `sutra.egress.*` ceiling (`None` when the component makes no call).
fn egress_session(
    args: &RunArgs,
    component: &crate::sandbox::LoadedComponent,
    ctx: &TaskContext,
) -> Result<Option<std::sync::Arc<crate::egress::Session>>, String> {
    if component.egress_import().is_none() {
        return Ok(None);
    }
    let config = crate::config::Config::from_env(None).map_err(|e| e.to_string())?;
    let egress = crate::egress::Egress::from_config(&config.egress)?;
    let grant = crate::egress::Grant::allowing(&args.allow_hosts);
    grant
        .check(&egress.ceiling)
        .map_err(|e| format!("--allow-host: {e}"))?;
    let policy = grant.policy(&egress.ceiling);
    Ok(Some(std::sync::Arc::new(crate::egress::Session::new(
        std::sync::Arc::new(egress),
        policy,
        Default::default(),
        Some(ctx.idempotency_key.clone()),
    ))))
}

/// Check the arguments and read the component: every failure is a usage error.
fn prepare(args: &RunArgs) -> Result<(Limits, Vec<u8>), String> {
    serde_json::from_str::<Value>(&args.input).map_err(|e| format!("--input is not JSON: {e}"))?;
    if args.attempt == 0 {
        return Err("--attempt is 1-based: 1 is the first try".into());
    }
    let mut limits = Limits::default();
    if let Some(fuel) = args.fuel {
        limits.fuel = fuel;
    }
    if let Some(d) = &args.deadline {
        let d = IsoDuration::parse(d).map_err(|e| format!("--deadline {d:?}: {e}"))?;
        limits.deadline = d.as_std();
    }
    if let Some(m) = &args.memory {
        limits.memory_bytes = parse_bytes(m).map_err(|e| format!("--memory {m:?}: {e}"))?;
    }
    let bytes = std::fs::read(&args.component)
        .map_err(|e| format!("cannot read {}: {e}", args.component.display()))?;
    Ok((limits, bytes))
}

/// `1048576`, `64MiB`, `1 GiB`, `512kb`.
fn parse_bytes(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| e.to_string())
}

fn stem(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "task".into())
}

/// A short key from the component digest and the input.
fn key_digest(component: &str, input: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(component.as_bytes());
    h.update([0]);
    h.update(input.as_bytes());
    hex::encode(&h.finalize()[..8])
}

/// The one JSON object printed on stdout.
fn render(outcome: &Outcome, stderr: &str) -> Value {
    match outcome {
        Outcome::Completed { output } => json!({ "outcome": "completed", "output": output }),
        Outcome::BusinessError {
            code,
            message,
            details,
        } => {
            let mut v = json!({
                "outcome": "business_error", "code": code, "class": null, "retryable": false,
                "message": message, "stderr": stderr,
            });
            if let Some(d) = details {
                v["details"] = d.clone();
            }
            v
        }
        Outcome::Failed {
            code,
            class,
            retryable,
            message,
            details,
        } => {
            let mut v = json!({
                "outcome": "failed", "code": code, "class": class, "retryable": retryable,
                "message": message, "stderr": stderr,
            });
            if let Some(d) = details {
                v["details"] = d.clone();
            }
            v
        }
    }
}

/// The one object on stdout: as JSON on one line, or as text.
fn print_shown(v: &Value, format: Format) {
    match format {
        Format::Json => println!("{v}"),
        Format::Text => print!("{}", text(v)),
    }
}

/// The text rendering of [`render`]'s object: the outcome first, then the
/// output (completed) or the code, class, message and stderr tail.
fn text(v: &Value) -> String {
    let field = |k: &str| match &v[k] {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    };
    let mut out = format!("outcome {}\n", field("outcome"));
    if v["outcome"] == "completed" {
        let output = serde_json::to_string_pretty(&v["output"]).unwrap_or_default();
        out.push_str(&format!("  output {output}\n"));
    } else {
        out.push_str(&format!(
            "  code {}  class {}  retryable {}\n  message {}\n",
            field("code"),
            field("class"),
            field("retryable"),
            field("message")
        ));
        if let Some(d) = v.get("details") {
            out.push_str(&format!("  details {d}\n"));
        }
        let stderr = field("stderr");
        if !stderr.is_empty() && stderr != "-" {
            out.push_str("  stderr:\n");
            for line in stderr.lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    if let Some(calls) = v.get("calls").and_then(Value::as_array) {
        out.push_str(&format!("  calls {}\n", calls.len()));
    }
    out
}

fn show_on_stderr(report: &AttemptReport) {
    for line in &report.logs {
        eprintln!("[{}] {}", line.level.as_str(), line.message);
    }
    if report.outcome.is_completed() && !report.stderr.is_empty() {
        eprint!("{}", report.stderr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_bytes_and_binary_units() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn failures_render_with_code_class_and_stderr() {
        let o = Outcome::failed(crate::Code::TaskTrap, "boom");
        let v = render(&o, "tail");
        assert_eq!(v["outcome"], "failed");
        assert_eq!(v["code"], "SUTRA.TASK.TRAP");
        assert_eq!(v["class"], "transient");
        assert_eq!(v["retryable"], true);
        assert_eq!(v["stderr"], "tail");
    }
}
