//! `sutra batch retry|cancel|resolve|migrate` over a filter or instance ids,
//! `sutra batch list|show|cancel`: the server's durable batch operations
//! (`POST /v1/batches`, issue 35 item 4). A batch is carried out by the
//! server at its own pace; `show` reads its progress and the outcome of
//! each instance.

use super::client::{call, enc, rows, run, table, Body, ServerOpts};
use super::show::s;
use super::usage_error;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum BatchCommand {
    /// Retry every selected terminal instance (`--mode full|from-failure`).
    Retry(CreateArgs),
    /// Cancel every selected live instance.
    Cancel(CreateArgs),
    /// Resolve the open incidents of every selected instance.
    Resolve(CreateArgs),
    /// Migrate every selected instance to `--deployment`.
    Migrate(CreateArgs),
    /// The tenant's batches, newest first.
    List(ServerOpts),
    /// A batch's progress and each instance's outcome.
    Show(BatchIdArgs),
    /// Stop a running batch: its pending instances are skipped.
    Stop(BatchIdArgs),
}

/// The selection (ids, or the listing's filters) and the action's options.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// These instances (repeatable); without any, the filters below select.
    #[arg(long = "instance", value_name = "ID")]
    pub instances: Vec<String>,
    /// Only instances in this state (RUNNING, WAITING, COMPLETED, TERMINATED, FAILED, COMPENSATED).
    #[arg(long)]
    pub state: Option<String>,
    /// Only instances of this process id.
    #[arg(long)]
    pub process: Option<String>,
    /// RFC 3339: started at or after.
    #[arg(long)]
    pub since: Option<String>,
    /// RFC 3339: started at or before.
    #[arg(long)]
    pub until: Option<String>,
    /// Only instances started with this business key.
    #[arg(long)]
    pub business_key: Option<String>,
    /// `NAME=VALUE`: a top-level variable's value (JSON scalar, else a string); repeatable.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// retry: `full` (default) or `from-failure`.
    #[arg(long)]
    pub mode: Option<String>,
    /// cancel: the reason kept with each cancellation.
    #[arg(long)]
    pub reason: Option<String>,
    /// migrate: the target deployment id.
    #[arg(long)]
    pub deployment: Option<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct BatchIdArgs {
    /// The batch id (`sutra batch list` shows them).
    pub batch: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

/// The body of `POST /v1/batches` for `action`.
fn create_body(action: &str, a: &CreateArgs) -> Result<Value, String> {
    let mut body = json!({ "action": action });
    if a.instances.is_empty() {
        let mut vars = Map::new();
        for v in &a.vars {
            let (name, value) = v
                .split_once('=')
                .filter(|(n, _)| !n.is_empty())
                .ok_or_else(|| format!("--var {v}: write NAME=VALUE"))?;
            let value = serde_json::from_str::<Value>(value)
                .ok()
                .filter(|v| v.is_number() || v.is_boolean() || v.is_string())
                .unwrap_or_else(|| Value::String(value.to_string()));
            vars.insert(name.to_string(), value);
        }
        let mut filter = json!({ "variables": vars });
        for (k, v) in [
            ("state", &a.state),
            ("process", &a.process),
            ("since", &a.since),
            ("until", &a.until),
            ("businessKey", &a.business_key),
        ] {
            if let Some(v) = v {
                filter[k] = json!(v);
            }
        }
        body["filter"] = filter;
    } else {
        if a.state.is_some()
            || a.process.is_some()
            || !a.vars.is_empty()
            || a.business_key.is_some()
        {
            return Err("give --instance ids or filters, not both".into());
        }
        body["instances"] = json!(a.instances);
    }
    for (k, v) in [
        ("mode", &a.mode),
        ("reason", &a.reason),
        ("deployment", &a.deployment),
    ] {
        if let Some(v) = v {
            body[k] = json!(v);
        }
    }
    Ok(body)
}

/// A batch's one-line summary.
fn summary(v: &Value) -> String {
    let counts = v["counts"]
        .as_object()
        .map(|c| {
            c.iter()
                .map(|(k, n)| format!("{} {}", n, k.to_lowercase()))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    format!(
        "batch {}  {}  {}  {} instance(s): {}\n",
        s(&v["id"]),
        s(&v["action"]),
        s(&v["state"]),
        s(&v["total"]),
        counts
    )
}

pub fn exec(cmd: BatchCommand) -> ExitCode {
    let (action, args) = match cmd {
        BatchCommand::Retry(a) => ("retry", a),
        BatchCommand::Cancel(a) => ("cancel", a),
        BatchCommand::Resolve(a) => ("resolve", a),
        BatchCommand::Migrate(a) => ("migrate", a),
        BatchCommand::List(opts) => {
            let o = opts.clone();
            return run(
                opts.format,
                async move { call(&o, reqwest::Method::GET, "/v1/batches", Body::None, &[]).await },
                |v| {
                    let rows = rows(
                        v,
                        "batches",
                        &["id", "action", "state", "total", "createdAt"],
                    );
                    table(&["ID", "ACTION", "STATE", "INSTANCES", "CREATED"], &rows)
                },
            );
        }
        BatchCommand::Show(a) => {
            let o = a.server.clone();
            let id = enc(&a.batch);
            return run(
                a.server.format,
                async move {
                    let mut batch = call(
                        &o,
                        reqwest::Method::GET,
                        &format!("/v1/batches/{id}"),
                        Body::None,
                        &[],
                    )
                    .await?;
                    let items = call(
                        &o,
                        reqwest::Method::GET,
                        &format!("/v1/batches/{id}/items?limit=1000"),
                        Body::None,
                        &[],
                    )
                    .await?;
                    batch["items"] = items["items"].clone();
                    Ok(batch)
                },
                |v| {
                    let rows = rows(
                        v,
                        "items",
                        &["seq", "instance", "state", "code", "message", "result"],
                    );
                    summary(v)
                        + &table(
                            &["#", "INSTANCE", "STATE", "CODE", "MESSAGE", "RESULT"],
                            &rows,
                        )
                },
            );
        }
        BatchCommand::Stop(a) => {
            let o = a.server.clone();
            let path = format!("/v1/batches/{}/cancel", enc(&a.batch));
            return run(
                a.server.format,
                async move { call(&o, reqwest::Method::POST, &path, Body::Json(json!({})), &[]).await },
                summary,
            );
        }
    };
    let body = match create_body(action, &args) {
        Ok(b) => b,
        Err(e) => return usage_error(e),
    };
    let o = args.server.clone();
    run(
        args.server.format,
        async move {
            call(
                &o,
                reqwest::Method::POST,
                "/v1/batches",
                Body::Json(body),
                &[],
            )
            .await
        },
        summary,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: BatchCommand,
    }

    #[test]
    fn a_filter_becomes_the_bodys_filter_and_ids_its_instances() {
        let Cli { cmd } = Cli::parse_from([
            "x",
            "retry",
            "--state",
            "FAILED",
            "--var",
            "n=3",
            "--var",
            "who=ada",
            "--mode",
            "from-failure",
        ]);
        let BatchCommand::Retry(a) = cmd else {
            panic!("not a retry")
        };
        assert_eq!(
            create_body("retry", &a).unwrap(),
            json!({"action": "retry", "mode": "from-failure",
                   "filter": {"state": "FAILED", "variables": {"n": 3, "who": "ada"}}})
        );
        let Cli { cmd } = Cli::parse_from(["x", "cancel", "--instance", "a", "--instance", "b"]);
        let BatchCommand::Cancel(a) = cmd else {
            panic!("not a cancel")
        };
        assert_eq!(
            create_body("cancel", &a).unwrap(),
            json!({"action": "cancel", "instances": ["a", "b"]})
        );
        let Cli { cmd } = Cli::parse_from(["x", "cancel", "--instance", "a", "--state", "FAILED"]);
        let BatchCommand::Cancel(a) = cmd else {
            panic!("not a cancel")
        };
        assert!(create_body("cancel", &a).is_err());
    }
}
