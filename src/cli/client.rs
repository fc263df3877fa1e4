//! The client verbs: `sutra deploy`, `start`, `instances`, `inspect`,
//! `history`, `cancel`, `retry`, `send`, `deployments`, `undeploy` against a
//! running `sutra serve` (`--server`/`SUTRA_SERVER`,
//! `--token`/`SUTRA_TOKEN`); `sutra tenant` is in `tenant.rs`.
//!
//! Invariant: human-readable tables by default, the server's JSON untouched
//! with `--format json`; exit by the rule of [`super::show`]: 0 on a 2xx
//! answer (unless the instance it shows FAILED), 1 on an error answer (its
//! code and message on stderr) or when the server cannot be reached (saying
//! what to do), 2 on a usage error (a `--server` that is not an http(s) URL).

use super::run::{fail_exit, parse_input, parse_object, read_modules, tokio, Format};
use super::show::{instance_exit, instance_text, s};
use super::usage_error;
use clap::Args;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;

/// Where the server is and who we are.
#[derive(Debug, Clone, Args)]
pub struct ServerOpts {
    /// The server's base URL (`sutra serve` prints it; it listens on 127.0.0.1:8080 by default).
    #[arg(long, env = "SUTRA_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// A tenant's API key (`sutra tenant create` prints one; the admin key for admin verbs).
    #[arg(long, env = "SUTRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Output: `text` tables for people, the server's `json` for scripts.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The process definition: BPMN (with `q:` extensions), HX XML, or States-language JSON.
    pub definition: PathBuf,
    /// A task module: `NAME=component.wasm` for each task the process calls (BPMN `registered:NAME`, HX `impl="NAME"`, States `"Resource": "NAME"`).
    #[arg(long = "task", value_name = "NAME=FILE")]
    pub tasks: Vec<String>,
    /// Mark a task module reusable: its attempts may run on a warm instance that served
    /// attempts of the same tenant and module before (globals may persist between them; see
    /// README "Warm instances"). `NAME`, `NAME:MAX_REUSES` or `NAME:MAX_REUSES:MEMORY_CEILING_BYTES`.
    #[arg(long = "reusable", value_name = "NAME[:MAX_REUSES[:CEILING]]")]
    pub reusable: Vec<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// The process id.
    pub process: String,
    /// The start variables, a JSON object (a States-language execution takes any JSON value).
    #[arg(long, default_value = "{}")]
    pub input: String,
    /// A retried start with the same key returns the same instance.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// The instance's business key (searchable: `sutra instances --business-key`).
    #[arg(long)]
    pub business_key: Option<String>,
    /// Answer once the start is committed (`?wait=false`), not once every
    /// token waits: its first task may still run.
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub server: ServerOpts,
}

/// An instance state, as `--state` takes it (any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StateArg {
    Running,
    Waiting,
    Completed,
    Terminated,
    Failed,
    Compensated,
}

impl StateArg {
    fn as_str(self) -> &'static str {
        match self {
            StateArg::Running => "RUNNING",
            StateArg::Waiting => "WAITING",
            StateArg::Completed => "COMPLETED",
            StateArg::Terminated => "TERMINATED",
            StateArg::Failed => "FAILED",
            StateArg::Compensated => "COMPENSATED",
        }
    }
}

#[derive(Debug, Args)]
pub struct InstancesArgs {
    /// Only instances in this state (any case).
    #[arg(long, value_enum, ignore_case = true)]
    pub state: Option<StateArg>,
    /// Only instances of this process id.
    #[arg(long)]
    pub process: Option<String>,
    /// The `next` cursor of the previous page (printed under the table as `more: --after ...`).
    #[arg(long)]
    pub after: Option<String>,
    /// At most this many instances (1 to 500; default 50).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Only instances started with this business key.
    #[arg(long)]
    pub business_key: Option<String>,
    /// Only instances whose top-level variable NAME is VALUE (`--var orderId=A-17`; repeatable, all must hold).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Newest first.
    #[arg(long)]
    pub newest: bool,
    #[command(flatten)]
    pub server: ServerOpts,
}

/// `sutra inspect`: local with `--db`, else against the server.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The instance id.
    pub instance: String,
    /// Read this database directly (`sqlite://file.db`, a path, `postgres://...`) instead of
    /// asking a server; a SQLite file that does not exist is refused.
    #[arg(long)]
    pub db: Option<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct InstanceIdArgs {
    /// The instance id.
    pub id: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct DeploymentIdArgs {
    /// The deployment id (`sutra deployments` lists them).
    pub id: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The instance id.
    pub id: String,
    /// Why, kept in the instance's history.
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct CloseArgs {
    /// The instance id (a FAILED instance).
    pub id: String,
    /// Why it is closed (what was done about the failure), kept in its history.
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RetryMode {
    Full,
    FromFailure,
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    /// The instance id (a terminal instance).
    pub id: String,
    /// `full` replays the start input; `from-failure` resumes a FAILED instance at its failed step.
    #[arg(long, value_enum, default_value = "full")]
    pub mode: RetryMode,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The message name.
    pub name: String,
    /// The correlation key (a waiting catch's `q:correlation` value).
    #[arg(long)]
    pub key: Option<String>,
    /// The message's variables, a JSON object.
    #[arg(long, default_value = "{}")]
    pub input: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

/// An HTTP call's outcome: the JSON answer, or the exit code already reported.
pub(super) type Answer = Result<Value, ExitCode>;

pub(crate) enum Body {
    None,
    Json(Value),
    Form(reqwest::multipart::Form),
}

/// The server's base URL, or why `--server` is not one (a usage error).
fn server_base(server: &str) -> Result<String, String> {
    let hint = if server.contains("://") {
        String::new()
    } else {
        format!(" (did you mean http://{server}?)")
    };
    match reqwest::Url::parse(server) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => {
            Ok(server.trim_end_matches('/').to_string())
        }
        _ => Err(format!(
            "--server `{server}` is not an http:// or https:// URL{hint}"
        )),
    }
}

/// Why a request got no answer, said so that a person knows what to do.
fn unreachable(base: &str, url: &str, e: &reqwest::Error) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut io_kind = None;
    let mut innermost = e.to_string();
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            io_kind = Some(io.kind());
        }
        innermost = c.to_string();
        cause = c.source();
    }
    if e.is_connect() {
        let why = match io_kind {
            Some(std::io::ErrorKind::ConnectionRefused) => "connection refused".to_string(),
            _ => innermost,
        };
        format!(
            "cannot connect to {base}: {why} — is `sutra serve` running there? \
             (--server or SUTRA_SERVER says where)"
        )
    } else if e.is_timeout() {
        format!("{url} did not answer in time")
    } else {
        format!("cannot reach {url}: {innermost}")
    }
}

pub(crate) async fn call(
    opts: &ServerOpts,
    method: reqwest::Method,
    path: &str,
    body: Body,
    headers: &[(&str, String)],
) -> Answer {
    let base = server_base(&opts.server).map_err(usage_error)?;
    let url = format!("{base}{path}");
    let mut req = reqwest::Client::new().request(method, &url);
    if let Some(t) = &opts.token {
        req = req.bearer_auth(t);
    }
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    req = match body {
        Body::None => req,
        Body::Json(v) => req.json(&v),
        Body::Form(f) => req.multipart(f),
    };
    let resp = req
        .send()
        .await
        .map_err(|e| fail_exit(&unreachable(&base, &url, &e)))?;
    let status = resp.status();
    let json_answer = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    let text = resp
        .text()
        .await
        .map_err(|e| fail_exit(&format!("cannot read the answer of {url}: {e}")))?;
    if status.is_success() && text.is_empty() {
        return Ok(Value::Null); // 204 No Content
    }
    let parsed = serde_json::from_str::<Value>(&text)
        .ok()
        .filter(|_| json_answer);
    let Some(value) = parsed else {
        // Every answer of the Sutra API is JSON, errors included (`{code, message}`).
        let excerpt: String = text.chars().take(80).collect();
        return Err(fail_exit(&format!(
            "{url} answered HTTP {} with something that is not the Sutra API (no JSON: {:?}): \
             is --server (or SUTRA_SERVER) the address `sutra serve` listens on?",
            status.as_u16(),
            excerpt.trim()
        )));
    };
    if status.is_success() {
        return Ok(value);
    }
    let code = value.get("code").and_then(Value::as_str).unwrap_or("?");
    let message = value.get("message").and_then(Value::as_str).unwrap_or("");
    eprintln!("error: {code}: {message} (HTTP {})", status.as_u16());
    if status == reqwest::StatusCode::UNAUTHORIZED {
        match &opts.token {
            None => eprintln!(
                "  no API key was given: pass --token <key> or set SUTRA_TOKEN \
                 (`sutra tenant create <name> --db URL` prints a tenant's key)"
            ),
            Some(_) => eprintln!(
                "  the key given by --token or SUTRA_TOKEN was refused: \
                 is it this server's tenant key (or its admin key for admin verbs)?"
            ),
        }
    }
    if let Some(diags) = value
        .pointer("/details/diagnostics")
        .and_then(Value::as_array)
    {
        for d in diags {
            eprintln!(
                "  {}:{}: {}[{}]: {}",
                d["line"],
                d["column"],
                d["severity"].as_str().unwrap_or(""),
                d["code"].as_str().unwrap_or(""),
                d["message"].as_str().unwrap_or("")
            );
        }
    }
    Err(ExitCode::from(1))
}

/// Run `f` on a fresh async runtime and print its answer; exit 0.
pub(super) fn run(
    format: Format,
    f: impl std::future::Future<Output = Answer>,
    text: impl FnOnce(&Value) -> String,
) -> ExitCode {
    run_then(format, f, text, |_| ExitCode::SUCCESS)
}

/// Like [`run`] for an answer that is an instance: exit by its state (1 when FAILED).
pub(crate) fn run_instance(
    format: Format,
    f: impl std::future::Future<Output = Answer>,
) -> ExitCode {
    run_then(format, f, instance_text, instance_exit)
}

fn run_then(
    format: Format,
    f: impl std::future::Future<Output = Answer>,
    text: impl FnOnce(&Value) -> String,
    exit: impl FnOnce(&Value) -> ExitCode,
) -> ExitCode {
    let rt = match tokio() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(f) {
        Err(code) => code,
        Ok(v) => {
            match format {
                Format::Json => {
                    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default())
                }
                Format::Text => print!("{}", text(&v)),
            }
            exit(&v)
        }
    }
}

/// Columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  "));
            }
        }
        l.trim_end().to_string() + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out.push_str(&line(r.clone()));
    }
    out
}

/// The rows of a table: for each element of the array `v[list]`, the
/// named fields rendered with [`s`] (`"data"` as raw JSON).
pub(super) fn rows(v: &Value, list: &str, fields: &[&str]) -> Vec<Vec<String>> {
    v[list]
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| {
            fields
                .iter()
                .map(|f| {
                    if *f == "data" {
                        item[*f].to_string()
                    } else {
                        s(&item[*f])
                    }
                })
                .collect()
        })
        .collect()
}

fn deployments_table(v: &Value) -> String {
    let rows = rows(v, "deployments", &["id", "process", "version", "state"]);
    table(&["ID", "PROCESS", "VERSION", "STATE"], &rows)
}

pub(crate) fn enc(id: &str) -> String {
    // Path segments: ids are [A-Za-z0-9._:-]; anything else is escaped and refused by the server.
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub fn exec_deploy(args: DeployArgs) -> ExitCode {
    let modules = match read_modules(&args.tasks) {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let source = match std::fs::read_to_string(&args.definition) {
        Ok(s) => s,
        Err(e) => return usage_error(format!("cannot read {}: {e}", args.definition.display())),
    };
    let mut form = reqwest::multipart::Form::new().text("definition", source);
    if !args.reusable.is_empty() {
        form = form.text("reusable", args.reusable.join(","));
    }
    for (name, bytes) in modules {
        form = form.part(
            name.clone(),
            reqwest::multipart::Part::bytes(bytes).file_name(format!("{name}.wasm")),
        );
    }
    let opts = args.server.clone();
    run(
        args.server.format,
        async move {
            call(
                &opts,
                reqwest::Method::POST,
                "/v1/deployments",
                Body::Form(form),
                &[],
            )
            .await
        },
        deployments_table,
    )
}

pub fn exec_start(args: StartArgs) -> ExitCode {
    let input = match parse_input(&args.input, "--input") {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let headers: Vec<(&str, String)> = args
        .idempotency_key
        .iter()
        .map(|k| ("Idempotency-Key", k.clone()))
        .collect();
    let wait = if args.no_wait { "?wait=false" } else { "" };
    let path = format!("/v1/processes/{}/instances{wait}", enc(&args.process));
    let opts = args.server.clone();
    run_instance(args.server.format, async move {
        call(
            &opts,
            reqwest::Method::POST,
            &path,
            Body::Json(start_body(&input, args.business_key.as_deref())),
            &headers,
        )
        .await
    })
}

/// A start's body: the variables, and the business key when one is given.
fn start_body(input: &serde_json::Map<String, Value>, business_key: Option<&str>) -> Value {
    let mut body = json!({ "variables": crate::engine::document::input_document(input) });
    if let Some(k) = business_key {
        body["businessKey"] = json!(k);
    }
    body
}

pub fn exec_instances(args: InstancesArgs) -> ExitCode {
    let mut query = Vec::new();
    let state = args.state.map(|s| s.as_str().to_string());
    for (k, v) in [
        ("state", &state),
        ("process", &args.process),
        ("after", &args.after),
        ("businessKey", &args.business_key),
    ] {
        if let Some(v) = v {
            query.push(format!("{k}={}", enc(v)));
        }
    }
    for var in &args.vars {
        let Some((name, value)) = var.split_once('=') else {
            return usage_error(format!("--var {var}: write NAME=VALUE"));
        };
        query.push(format!("var.{}={}", enc(name), enc(value)));
    }
    if args.newest {
        query.push("order=newest".to_string());
    }
    if let Some(l) = args.limit {
        query.push(format!("limit={l}"));
    }
    let path = if query.is_empty() {
        "/v1/instances".to_string()
    } else {
        format!("/v1/instances?{}", query.join("&"))
    };
    let opts = args.server.clone();
    run(
        args.server.format,
        async move { call(&opts, reqwest::Method::GET, &path, Body::None, &[]).await },
        |v| {
            let rows = rows(
                v,
                "instances",
                &[
                    "id",
                    "process",
                    "state",
                    "businessKey",
                    "startedAt",
                    "endedAt",
                ],
            );
            let mut out = table(
                &["ID", "PROCESS", "STATE", "BUSINESS KEY", "STARTED", "ENDED"],
                &rows,
            );
            if let Some(n) = v["next"].as_str() {
                out.push_str(&format!("more: --after {n}\n"));
            }
            out
        },
    )
}

pub fn exec_inspect(args: InspectArgs) -> ExitCode {
    if let Some(db) = args.db {
        return super::run::exec_inspect(super::run::InspectArgs {
            instance: args.instance,
            db,
            format: args.server.format,
        });
    }
    let path = format!("/v1/instances/{}", enc(&args.instance));
    let opts = args.server.clone();
    run_instance(args.server.format, async move {
        call(&opts, reqwest::Method::GET, &path, Body::None, &[]).await
    })
}

/// The history as text: the journal's table, or the server's note when it keeps none.
fn history_text(v: &Value) -> String {
    if let Some(note) = v["note"].as_str() {
        return format!("{note}\n");
    }
    let rows = rows(v, "entries", &["seq", "at", "kind", "node", "data"]);
    if rows.is_empty() {
        return format!("no history entries for instance {}\n", s(&v["instance"]));
    }
    table(&["SEQ", "AT", "KIND", "NODE", "DATA"], &rows)
}

pub fn exec_history(args: InstanceIdArgs) -> ExitCode {
    let path = format!("/v1/instances/{}/history", enc(&args.id));
    let opts = args.server.clone();
    run(
        args.server.format,
        async move { call(&opts, reqwest::Method::GET, &path, Body::None, &[]).await },
        history_text,
    )
}

pub fn exec_cancel(args: CancelArgs) -> ExitCode {
    let path = format!("/v1/instances/{}/cancel", enc(&args.id));
    let opts = args.server.clone();
    let body = json!({ "reason": args.reason });
    run_instance(args.server.format, async move {
        call(&opts, reqwest::Method::POST, &path, Body::Json(body), &[]).await
    })
}

/// `sutra close`: exit 0 once closed (what was asked; the instance stays
/// FAILED), 1 when refused.
pub fn exec_close(args: CloseArgs) -> ExitCode {
    let path = format!("/v1/instances/{}/close", enc(&args.id));
    let opts = args.server.clone();
    let body = json!({ "reason": args.reason });
    run_then(
        args.server.format,
        async move { call(&opts, reqwest::Method::POST, &path, Body::Json(body), &[]).await },
        instance_text,
        |_| ExitCode::SUCCESS,
    )
}

pub fn exec_retry(args: RetryArgs) -> ExitCode {
    let mode = match args.mode {
        RetryMode::Full => "full",
        RetryMode::FromFailure => "from-failure",
    };
    let path = format!("/v1/instances/{}/retry?mode={mode}", enc(&args.id));
    let opts = args.server.clone();
    run_instance(args.server.format, async move {
        call(&opts, reqwest::Method::POST, &path, Body::None, &[]).await
    })
}

pub fn exec_send(args: SendArgs) -> ExitCode {
    let input = match parse_object(&args.input, "--input") {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let body = json!({ "name": args.name, "correlationKey": args.key, "variables": input });
    let opts = args.server.clone();
    run(
        args.server.format,
        async move {
            call(
                &opts,
                reqwest::Method::POST,
                "/v1/messages",
                Body::Json(body),
                &[],
            )
            .await
        },
        |v| format!("instance {}\n", s(&v["instance"])),
    )
}

pub fn exec_deployments(opts: ServerOpts) -> ExitCode {
    let o = opts.clone();
    run(
        opts.format,
        async move { call(&o, reqwest::Method::GET, "/v1/deployments", Body::None, &[]).await },
        deployments_table,
    )
}

pub fn exec_undeploy(args: DeploymentIdArgs) -> ExitCode {
    let path = format!("/v1/deployments/{}", enc(&args.id));
    let opts = args.server.clone();
    run(
        args.server.format,
        async move { call(&opts, reqwest::Method::DELETE, &path, Body::None, &[]).await },
        |d| {
            table(
                &["ID", "PROCESS", "VERSION", "STATE"],
                &[vec![
                    s(&d["id"]),
                    s(&d["process"]),
                    s(&d["version"]),
                    s(&d["state"]),
                ]],
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let t = table(
            &["ID", "STATE"],
            &[
                vec!["a".into(), "WAITING".into()],
                vec!["long-id".into(), "X".into()],
            ],
        );
        assert_eq!(t, "ID       STATE\na        WAITING\nlong-id  X\n");
    }

    #[test]
    fn ids_are_escaped_in_paths() {
        assert_eq!(enc("abc-1.2:x_y"), "abc-1.2:x_y");
        assert_eq!(enc("a/b c"), "a%2Fb%20c");
    }
}
