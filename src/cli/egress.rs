//! The client verbs of issue 30 against a server: `sutra egress
//! grant|show|list|revoke` (a task module's grant) and `sutra secret
//! set|list|delete` (write-only: `set` reads the value from stdin, so it is
//! never in the shell's history or the process list).

use super::channels::exec_on;
use super::client::{enc, rows, table, Body, ServerOpts};
use super::show::s;
use super::usage_error;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum EgressCommand {
    /// Set a module's grant: one rule per `--host` (`scheme://host[:port]` or `*.domain`), each with the `--method`s and `--secret`s given.
    Grant(GrantArgs),
    /// Show a module's grant.
    Show(ModuleArgs),
    /// List the tenant's grants.
    List(ServerOpts),
    /// Revoke a module's grant (its next attempt's requests are denied).
    Revoke(ModuleArgs),
}

#[derive(Debug, Args)]
pub struct GrantArgs {
    /// The task module (the registered task's name).
    pub module: String,
    /// A host the module may call (repeatable).
    #[arg(long = "host", value_name = "PATTERN", required = true)]
    pub hosts: Vec<String>,
    /// A method allowed (repeatable; none: any).
    #[arg(long = "method", value_name = "METHOD")]
    pub methods: Vec<String>,
    /// A secret its placeholders may carry to these hosts (repeatable).
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct ModuleArgs {
    /// The task module (the registered task's name).
    pub module: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Set a secret; its value is read from stdin (one line, the newline dropped).
    Set(SecretNameArgs),
    /// List the tenant's secrets (names only).
    List(ServerOpts),
    /// Delete a secret.
    Delete(SecretNameArgs),
}

#[derive(Debug, Args)]
pub struct SecretNameArgs {
    /// The secret's name (used as `{{secret:NAME}}`).
    pub name: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

fn grant_text(v: &Value) -> String {
    let rules: Vec<Vec<String>> = v["allow"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    let join = |k: &str| {
                        r[k].as_array()
                            .map(|x| x.iter().map(s).collect::<Vec<_>>().join(","))
                            .unwrap_or_default()
                    };
                    vec![
                        s(&v["module"]),
                        s(&r["host"]),
                        join("methods"),
                        join("secrets"),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    table(&["MODULE", "HOST", "METHODS", "SECRETS"], &rules)
}

pub fn exec_egress(cmd: EgressCommand) -> ExitCode {
    use reqwest::Method;
    match cmd {
        EgressCommand::Grant(a) => {
            let allow: Vec<Value> = a
                .hosts
                .iter()
                .map(|h| json!({ "host": h, "methods": a.methods, "secrets": a.secrets }))
                .collect();
            let path = format!("/v1/egress/{}", enc(&a.module));
            exec_on(
                a.server,
                Method::PUT,
                path,
                Body::Json(json!({ "allow": allow })),
                grant_text,
            )
        }
        EgressCommand::Show(a) => {
            let path = format!("/v1/egress/{}", enc(&a.module));
            exec_on(a.server, Method::GET, path, Body::None, grant_text)
        }
        EgressCommand::List(opts) => {
            exec_on(opts, Method::GET, "/v1/egress".into(), Body::None, |v| {
                v["grants"]
                    .as_array()
                    .map(|g| g.iter().map(grant_text).collect::<String>())
                    .unwrap_or_default()
            })
        }
        EgressCommand::Revoke(a) => {
            let path = format!("/v1/egress/{}", enc(&a.module));
            exec_on(a.server, Method::DELETE, path, Body::None, |_| {
                "revoked\n".into()
            })
        }
    }
}

pub fn exec_secret(cmd: SecretCommand) -> ExitCode {
    use reqwest::Method;
    match cmd {
        SecretCommand::Set(a) => {
            let mut value = String::new();
            if std::io::stdin().read_line(&mut value).is_err() {
                return usage_error("cannot read the secret's value from stdin");
            }
            let value = value.trim_end_matches(['\n', '\r']).to_string();
            if value.is_empty() {
                return usage_error("give the secret's value on stdin");
            }
            let path = format!("/v1/secrets/{}", enc(&a.name));
            exec_on(
                a.server,
                Method::PUT,
                path,
                Body::Json(json!({ "value": value })),
                |_| "set\n".into(),
            )
        }
        SecretCommand::List(opts) => {
            exec_on(opts, Method::GET, "/v1/secrets".into(), Body::None, |v| {
                table(
                    &["NAME", "UPDATED"],
                    &rows(v, "secrets", &["name", "updatedAt"]),
                )
            })
        }
        SecretCommand::Delete(a) => {
            let path = format!("/v1/secrets/{}", enc(&a.name));
            exec_on(a.server, Method::DELETE, path, Body::None, |_| {
                "deleted\n".into()
            })
        }
    }
}
