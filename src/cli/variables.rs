//! `sutra set-variables <instance> [--set NAME=JSON]... [--unset NAME]...
//! [--by WHO]`: fix the data of a FAILED instance before a retry from its
//! failure, or of a WAITING one, through the server
//! (`POST /v1/instances/{id}/variables`). A value that is not JSON is taken
//! as a string (`--set note=late` sets `"late"`).

use super::client::{call, enc, run_instance, Body, ServerOpts};
use super::usage_error;
use clap::Args;
use serde_json::{json, Map, Value};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct SetVariablesArgs {
    /// The instance id (FAILED or WAITING).
    pub instance: String,
    /// `NAME=VALUE` to set (VALUE as JSON, else as a string); repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// A variable to remove; repeatable.
    #[arg(long = "unset", value_name = "NAME")]
    pub unset: Vec<String>,
    /// Who edits (kept in the instance's history).
    #[arg(long)]
    pub by: Option<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

/// `NAME=VALUE` pairs as variables; the first malformed one is the error.
fn parse_sets(pairs: &[String]) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for p in pairs {
        let (name, value) = p
            .split_once('=')
            .filter(|(n, _)| !n.trim().is_empty())
            .ok_or_else(|| format!("--set {p}: expected NAME=VALUE"))?;
        let value =
            serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
        out.insert(name.trim().to_string(), value);
    }
    Ok(out)
}

pub fn exec(args: SetVariablesArgs) -> ExitCode {
    let set = match parse_sets(&args.set) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    if set.is_empty() && args.unset.is_empty() {
        return usage_error("nothing to edit: give --set NAME=VALUE or --unset NAME");
    }
    let path = format!("/v1/instances/{}/variables", enc(&args.instance));
    let body = json!({ "set": set, "unset": args.unset, "by": args.by });
    let opts = args.server.clone();
    run_instance(args.server.format, async move {
        call(&opts, reqwest::Method::POST, &path, Body::Json(body), &[]).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_json_else_strings() {
        let m = parse_sets(&[
            "n=3".into(),
            "ok=true".into(),
            "note=late".into(),
            "o={\"a\":1}".into(),
        ])
        .unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"n": 3, "ok": true, "note": "late", "o": {"a": 1}})
        );
        assert!(parse_sets(&["=1".into()]).is_err());
        assert!(parse_sets(&["x".into()]).is_err());
    }
}
