//! The client verbs of issue 14: `sutra channel set|get|list|delete`,
//! `sutra incidents [resolve]`, `sutra migrate`, against a server (the
//! helpers and exit codes of `client.rs`).

use super::client::{call, enc, rows, run, table, Answer, Body, ServerOpts};
use super::show::s;
use super::usage_error;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum ChannelCommand {
    /// Create or replace a channel: `--push URL` (the outbox POSTs requests there) or `--pull` (workers fetch them).
    Set(ChannelSetArgs),
    /// Show a channel.
    Get(ChannelNameArgs),
    /// List the tenant's channels.
    List(ServerOpts),
    /// Delete a channel no live deployment calls.
    Delete(ChannelNameArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("transport").required(true).args(["push", "pull"])))]
pub struct ChannelSetArgs {
    /// The channel's name, as the definition calls it (`channel:<name>`).
    pub name: String,
    /// Deliver each request by POSTing it to this URL.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,
    /// Let external workers fetch the requests.
    #[arg(long)]
    pub pull: bool,
    /// The signing secret (default: keep the current one, or a fresh one).
    #[arg(long)]
    pub secret: Option<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct ChannelNameArgs {
    /// The channel's name.
    pub name: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct IncidentsArgs {
    #[command(subcommand)]
    pub command: Option<IncidentCommand>,
    /// Only this instance's incidents.
    #[arg(long)]
    pub instance: Option<String>,
    /// OPEN or RESOLVED.
    #[arg(long)]
    pub state: Option<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Subcommand)]
pub enum IncidentCommand {
    /// Resolve an incident: re-arm its delivery or external task if its call still waits.
    Resolve(IncidentIdArgs),
}

#[derive(Debug, Args)]
pub struct IncidentIdArgs {
    /// The incident's id (as `sutra incidents` lists it).
    pub id: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The instance id.
    pub instance: String,
    /// The target deployment (of the same process).
    #[arg(long = "to", value_name = "DEPLOYMENT")]
    pub to: String,
    /// Map a node onto another id in the target: `OLD=NEW` (repeatable).
    #[arg(long = "map", value_name = "OLD=NEW")]
    pub map: Vec<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

fn channel_text(v: &Value) -> String {
    let mut out = table(
        &["NAME", "TRANSPORT", "URL"],
        &[vec![s(&v["name"]), s(&v["transport"]), s(&v["url"])]],
    );
    if let Some(secret) = v.get("secret").and_then(Value::as_str) {
        out.push_str(&format!("secret {secret}\n"));
    }
    out
}

/// Call the server and render (also for `egress.rs`).
pub(super) fn exec_on(
    opts: ServerOpts,
    method: reqwest::Method,
    path: String,
    body: Body,
    text: fn(&Value) -> String,
) -> ExitCode {
    exec(opts, method, path, body, text)
}

fn exec(
    opts: ServerOpts,
    method: reqwest::Method,
    path: String,
    body: Body,
    text: fn(&Value) -> String,
) -> ExitCode {
    let format = opts.format;
    run(
        format,
        async move { call(&opts, method, &path, body, &[]).await },
        text,
    )
}

pub fn exec_channel(cmd: ChannelCommand) -> ExitCode {
    match cmd {
        ChannelCommand::Set(a) => {
            let body = match (&a.push, a.pull) {
                (Some(url), false) => {
                    json!({ "transport": "push", "url": url, "secret": a.secret })
                }
                (None, true) => json!({ "transport": "pull", "secret": a.secret }),
                _ => return usage_error("give exactly one of --push URL and --pull"),
            };
            let path = format!("/v1/channels/{}", enc(&a.name));
            exec(
                a.server,
                reqwest::Method::PUT,
                path,
                Body::Json(body),
                channel_text,
            )
        }
        ChannelCommand::Get(a) => {
            let path = format!("/v1/channels/{}", enc(&a.name));
            exec(
                a.server,
                reqwest::Method::GET,
                path,
                Body::None,
                channel_text,
            )
        }
        ChannelCommand::List(opts) => exec(
            opts,
            reqwest::Method::GET,
            "/v1/channels".into(),
            Body::None,
            |v| {
                table(
                    &["NAME", "TRANSPORT", "URL"],
                    &rows(v, "channels", &["name", "transport", "url"]),
                )
            },
        ),
        ChannelCommand::Delete(a) => {
            let path = format!("/v1/channels/{}", enc(&a.name));
            exec(a.server, reqwest::Method::DELETE, path, Body::None, |_| {
                "deleted\n".to_string()
            })
        }
    }
}

fn incidents_text(v: &Value) -> String {
    table(
        &["ID", "STATE", "KIND", "INSTANCE", "TASK", "MESSAGE"],
        &rows(
            v,
            "incidents",
            &["id", "state", "kind", "instance", "task", "message"],
        ),
    )
}

pub fn exec_incidents(args: IncidentsArgs) -> ExitCode {
    if let Some(IncidentCommand::Resolve(a)) = args.command {
        let path = format!("/v1/incidents/{}/resolve", enc(&a.id));
        return exec(a.server, reqwest::Method::POST, path, Body::None, |v| {
            format!(
                "{} {}: {}\n",
                s(&v["incident"]["id"]),
                s(&v["incident"]["state"]),
                s(&v["outcome"])
            )
        });
    }
    let mut query = Vec::new();
    if let Some(i) = &args.instance {
        query.push(format!("instance={}", enc(i)));
    }
    if let Some(st) = &args.state {
        query.push(format!("state={}", enc(st)));
    }
    let path = if query.is_empty() {
        "/v1/incidents".to_string()
    } else {
        format!("/v1/incidents?{}", query.join("&"))
    };
    exec(
        args.server,
        reqwest::Method::GET,
        path,
        Body::None,
        incidents_text,
    )
}

pub fn exec_migrate(args: MigrateArgs) -> ExitCode {
    let mut mapping = serde_json::Map::new();
    for m in &args.map {
        match m.split_once('=') {
            Some((old, new)) if !old.is_empty() && !new.is_empty() => {
                mapping.insert(old.to_string(), Value::String(new.to_string()));
            }
            _ => return usage_error(format!("--map `{m}` must be OLD=NEW")),
        }
    }
    let path = format!("/v1/instances/{}/migrate", enc(&args.instance));
    let body = json!({ "targetDeployment": args.to, "mapping": mapping });
    let opts = args.server.clone();
    run(
        args.server.format,
        async move { call(&opts, reqwest::Method::POST, &path, Body::Json(body), &[]).await as Answer },
        super::show::instance_text,
    )
}

/// `sutra run --channel NAME=URL|pull` values.
pub fn parse_local_channels(
    values: &[String],
) -> Result<Vec<(String, crate::runtime::ChannelSpec)>, String> {
    use crate::store::channels::Transport;
    values
        .iter()
        .map(|v| {
            let (name, target) = v
                .split_once('=')
                .filter(|(n, t)| !n.is_empty() && !t.is_empty())
                .ok_or_else(|| format!("--channel `{v}` must be NAME=URL or NAME=pull"))?;
            let (transport, url) = if target == "pull" {
                (Transport::Pull, None)
            } else {
                (Transport::Push, Some(target.to_string()))
            };
            Ok((
                name.to_string(),
                crate::runtime::ChannelSpec {
                    transport,
                    url,
                    secret: None,
                },
            ))
        })
        .collect()
}
