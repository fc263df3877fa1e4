//! `sutra tenant`: `create` against a database (prints the first key once),
//! and the key verbs against a server's admin API (`--server`, the admin key
//! as `--token`/`SUTRA_TOKEN`): `keys` (ids and prefixes, never secrets),
//! `add-key`, `revoke-key <name> <key-id>` (the key stops working at once)
//! and `rotate-key` (a new key; every other key revoked in the same
//! transaction).
//!
//! Invariant: a new key is printed once, alone on stdout (so a script can
//! capture it); what it is goes to stderr.

use super::client::{call, enc, rows, run, table, Body, ServerOpts};
use super::run::{fail_exit, tokio};
use super::usage_error;
use clap::{Args, Subcommand};
use serde_json::Value;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant in a database and print its API key (once).
    Create(TenantCreateArgs),
    /// List a tenant's API keys on a server: ids and prefixes, never secrets (admin key).
    Keys(TenantNameArgs),
    /// Add an API key to a tenant on a server and print it (once) (admin key).
    AddKey(TenantNameArgs),
    /// Revoke one API key of a tenant on a server: it stops working at once (admin key).
    RevokeKey(RevokeKeyArgs),
    /// Rotate a tenant's keys on a server: print a new key (once), revoke every other one (admin key).
    RotateKey(TenantNameArgs),
}

#[derive(Debug, Args)]
pub struct TenantNameArgs {
    /// The tenant's name.
    pub name: String,
    /// The server, and the admin key as `--token` (or SUTRA_TOKEN).
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct RevokeKeyArgs {
    /// The tenant's name.
    pub name: String,
    /// The key's id (`sutra tenant keys` lists them; a key `sutra_<id>_...` has it after `sutra_`).
    pub key_id: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

#[derive(Debug, Args)]
pub struct TenantCreateArgs {
    /// The tenant's name.
    pub name: String,
    /// The server's database (`sqlite://file.db`, a path, `postgres://...`).
    #[arg(long)]
    pub db: String,
    /// Non-terminal instances at once.
    #[arg(long)]
    pub max_instances: Option<i64>,
    /// Bytes of one task module.
    #[arg(long)]
    pub max_module_bytes: Option<i64>,
    /// Fuel ceiling of one attempt.
    #[arg(long)]
    pub fuel: Option<i64>,
    /// Deadline ceiling of one attempt, in milliseconds.
    #[arg(long)]
    pub deadline_ms: Option<i64>,
    /// Memory ceiling of one attempt, in bytes.
    #[arg(long)]
    pub memory_bytes: Option<i64>,
    /// Functions one task module may define.
    #[arg(long)]
    pub max_module_functions: Option<i64>,
    /// CPU and wall-clock ceiling of compiling one module, in milliseconds.
    #[arg(long)]
    pub compile_ms: Option<i64>,
}

pub fn exec(cmd: TenantCommand) -> ExitCode {
    match cmd {
        TenantCommand::Create(args) => exec_create(args),
        TenantCommand::Keys(args) => exec_keys(args),
        TenantCommand::AddKey(args) => exec_new_key(args, false),
        TenantCommand::RotateKey(args) => exec_new_key(args, true),
        TenantCommand::RevokeKey(args) => exec_revoke(args),
    }
}

fn exec_create(args: TenantCreateArgs) -> ExitCode {
    let limits = crate::store::tenancy::TenantLimits {
        max_instances: args.max_instances,
        max_module_bytes: args.max_module_bytes,
        fuel: args.fuel,
        deadline_ms: args.deadline_ms,
        memory_bytes: args.memory_bytes,
        max_module_functions: args.max_module_functions,
        compile_ms: args.compile_ms,
    };
    if [
        limits.max_instances,
        limits.max_module_bytes,
        limits.fuel,
        limits.deadline_ms,
        limits.memory_bytes,
        limits.max_module_functions,
        limits.compile_ms,
    ]
    .iter()
    .any(|v| v.is_some_and(|v| v < 0))
    {
        return usage_error("quotas must not be negative");
    }
    let rt = match tokio() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let (store, _, _g) = match super::run::open_store(Some(&args.db)).await {
            Ok(s) => s,
            Err(e) => return fail_exit(&e),
        };
        let now = chrono::Utc::now().timestamp_millis();
        match crate::api::auth::create_tenant(&store, &args.name, limits, now).await {
            Ok((_, key)) => {
                eprintln!(
                    "tenant {} created; its API key (shown once, keep it secret):",
                    args.name
                );
                println!("{key}");
                ExitCode::SUCCESS
            }
            Err(crate::store::StoreError::Duplicate(_)) => {
                fail_exit(&format!("tenant `{}` exists already", args.name))
            }
            Err(e) => fail_exit(&e.to_string()),
        }
    })
}

fn keys_table(v: &Value) -> String {
    let rows = rows(v, "keys", &["id", "prefix", "createdAt"]);
    table(&["ID", "PREFIX", "CREATED"], &rows)
}

fn exec_keys(args: TenantNameArgs) -> ExitCode {
    let path = format!("/v1/admin/tenants/{}/keys", enc(&args.name));
    let opts = args.server.clone();
    run(
        args.server.format,
        async move { call(&opts, reqwest::Method::GET, &path, Body::None, &[]).await },
        keys_table,
    )
}

/// `add-key` and `rotate-key`: the new key alone on stdout (text), or the
/// server's JSON.
fn exec_new_key(args: TenantNameArgs, rotate: bool) -> ExitCode {
    let name = args.name.clone();
    let path = if rotate {
        format!("/v1/admin/tenants/{}/keys/rotate", enc(&name))
    } else {
        format!("/v1/admin/tenants/{}/keys", enc(&name))
    };
    let opts = args.server.clone();
    let answer = async move { call(&opts, reqwest::Method::POST, &path, Body::None, &[]).await };
    run(args.server.format, answer, move |v| {
        let revoked: Vec<String> = v["revoked"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        if rotate {
            eprintln!(
                "tenant {name}: revoked {} key(s){}; its new API key (shown once, keep it secret):",
                revoked.len(),
                if revoked.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", revoked.join(", "))
                }
            );
        } else {
            eprintln!(
                "tenant {name}: new API key {} (shown once, keep it secret):",
                v["keyId"].as_str().unwrap_or("?")
            );
        }
        format!("{}\n", v["key"].as_str().unwrap_or_default())
    })
}

fn exec_revoke(args: RevokeKeyArgs) -> ExitCode {
    let path = format!(
        "/v1/admin/tenants/{}/keys/{}",
        enc(&args.name),
        enc(&args.key_id)
    );
    let opts = args.server.clone();
    let answer = async move { call(&opts, reqwest::Method::DELETE, &path, Body::None, &[]).await };
    run(args.server.format, answer, |v| {
        format!(
            "revoked key {} of tenant {}\n",
            v["revoked"][0].as_str().unwrap_or("?"),
            v["tenant"].as_str().unwrap_or("?")
        )
    })
}
