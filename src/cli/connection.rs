//! `sutra connection set|show|list|delete` (issue 31): a tenant's named
//! connections for HTTP tasks, on a server. `set` reads the credential (the
//! API key, password, bearer token or OAuth client secret) from stdin, as
//! `sutra secret set` does: never in the shell's history or the process list.

use super::channels::exec_on;
use super::client::{enc, table, Body, ServerOpts};
use super::show::s;
use super::usage_error;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum ConnectionCommand {
    /// Create or replace a connection; its credential is read from stdin (one line).
    Set(SetArgs),
    /// Show a connection (never its credential).
    Show(NameArgs),
    /// List the tenant's connections.
    List(ServerOpts),
    /// Delete a connection and its credential.
    Delete(NameArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AuthType {
    ApiKey,
    Basic,
    Bearer,
    Oauth2ClientCredentials,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// The connection's name (a task's `Authentication.ConnectionName`).
    pub name: String,
    /// How requests are authorized.
    #[arg(long = "type", value_enum)]
    pub auth: AuthType,
    /// The base a relative endpoint is joined to (e.g. https://api.example.com/v1).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// api-key: the header carrying the key.
    #[arg(long)]
    pub header: Option<String>,
    /// basic: the user name.
    #[arg(long)]
    pub username: Option<String>,
    /// oauth2-client-credentials: the token endpoint.
    #[arg(long = "token-url")]
    pub token_url: Option<String>,
    /// oauth2-client-credentials: the client id.
    #[arg(long = "client-id")]
    pub client_id: Option<String>,
    /// oauth2-client-credentials: the scope asked for.
    #[arg(long)]
    pub scope: Option<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct NameArgs {
    /// The connection's name.
    pub name: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

fn text(v: &Value) -> String {
    let a = &v["authorization"];
    let detail = match a["type"].as_str() {
        Some("api_key") => format!("header {}", s(&a["header"])),
        Some("basic") => format!("user {}", s(&a["username"])),
        Some("oauth2_client_credentials") => {
            format!("token {} client {}", s(&a["token_url"]), s(&a["client_id"]))
        }
        _ => String::new(),
    };
    table(
        &["NAME", "TYPE", "ENDPOINT", "DETAIL", "UPDATED"],
        &[vec![
            s(&v["name"]),
            s(&a["type"]),
            s(&v["endpoint"]),
            detail,
            s(&v["updatedAt"]),
        ]],
    )
}

fn authorization(a: &SetArgs) -> Result<Value, String> {
    let need = |v: &Option<String>, flag: &str| {
        v.clone()
            .ok_or_else(|| format!("--type {:?} needs {flag}", a.auth))
    };
    Ok(match a.auth {
        AuthType::ApiKey => json!({ "type": "api_key", "header": need(&a.header, "--header")? }),
        AuthType::Basic => json!({ "type": "basic", "username": need(&a.username, "--username")? }),
        AuthType::Bearer => json!({ "type": "bearer" }),
        AuthType::Oauth2ClientCredentials => {
            let mut v = json!({
                "type": "oauth2_client_credentials",
                "token_url": need(&a.token_url, "--token-url")?,
                "client_id": need(&a.client_id, "--client-id")?,
            });
            if let Some(s) = &a.scope {
                v["scope"] = json!(s);
            }
            v
        }
    })
}

pub fn exec_connection(cmd: ConnectionCommand) -> ExitCode {
    use reqwest::Method;
    match cmd {
        ConnectionCommand::Set(a) => {
            let auth = match authorization(&a) {
                Ok(v) => v,
                Err(m) => return usage_error(m),
            };
            let mut credential = String::new();
            if std::io::stdin().read_line(&mut credential).is_err() {
                return usage_error("cannot read the connection's credential from stdin");
            }
            let credential = credential.trim_end_matches(['\n', '\r']).to_string();
            if credential.is_empty() {
                return usage_error("give the connection's credential on stdin");
            }
            let mut body = json!({ "authorization": auth, "credential": credential });
            if let Some(e) = &a.endpoint {
                body["endpoint"] = json!(e);
            }
            let path = format!("/v1/connections/{}", enc(&a.name));
            exec_on(a.server, Method::PUT, path, Body::Json(body), text)
        }
        ConnectionCommand::Show(a) => {
            let path = format!("/v1/connections/{}", enc(&a.name));
            exec_on(a.server, Method::GET, path, Body::None, text)
        }
        ConnectionCommand::List(opts) => exec_on(
            opts,
            Method::GET,
            "/v1/connections".into(),
            Body::None,
            |v| {
                v["connections"]
                    .as_array()
                    .map(|c| c.iter().map(text).collect::<String>())
                    .unwrap_or_default()
            },
        ),
        ConnectionCommand::Delete(a) => {
            let path = format!("/v1/connections/{}", enc(&a.name));
            exec_on(a.server, Method::DELETE, path, Body::None, |_| {
                "deleted\n".into()
            })
        }
    }
}
