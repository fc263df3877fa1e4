//! `sutra signal NAME [--var k=v]...`: broadcast a signal within the
//! caller's tenant through a server (`POST /v1/signals`). A `--var` value
//! is read as JSON when it parses (`n=3`, `ok=true`, `o={"a":1}`), else
//! taken as a string (`who=ann`).

use super::client::{call, run, Body, ServerOpts};
use super::usage_error;
use clap::Args;
use serde_json::{json, Map, Value};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct SignalArgs {
    /// The signal name.
    pub name: String,
    /// A variable the receivers get, `k=v` (repeatable).
    #[arg(long = "var", value_name = "K=V")]
    pub vars: Vec<String>,
    #[command(flatten)]
    pub server: ServerOpts,
}

/// `k=v` pairs into variables.
pub fn parse_vars(pairs: &[String]) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for p in pairs {
        let Some((k, v)) = p.split_once('=') else {
            return Err(format!("--var `{p}`: expected k=v"));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(format!("--var `{p}`: the name is empty"));
        }
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        out.insert(k.to_string(), value);
    }
    Ok(out)
}

pub fn exec(args: SignalArgs) -> ExitCode {
    let vars = match parse_vars(&args.vars) {
        Ok(v) => v,
        Err(e) => return usage_error(e),
    };
    if args.name.trim().is_empty() {
        return usage_error("a signal needs a name");
    }
    let body = json!({ "name": args.name, "variables": vars });
    let opts = args.server.clone();
    run(
        args.server.format,
        async move {
            call(
                &opts,
                reqwest::Method::POST,
                "/v1/signals",
                Body::Json(body),
                &[],
            )
            .await
        },
        |v| {
            let started = v["started"].as_array().map(|a| a.len()).unwrap_or(0);
            format!(
                "signal {}: {} waiting instance(s) reached, {} started\n",
                v["id"].as_str().unwrap_or_default(),
                v["delivered"],
                started
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vars_are_json_when_they_parse_else_strings() {
        let v = parse_vars(&["n=3".into(), "who=ann".into(), "o={\"a\":1}".into()]).unwrap();
        assert_eq!(v["n"], json!(3));
        assert_eq!(v["who"], json!("ann"));
        assert_eq!(v["o"], json!({"a": 1}));
        assert!(parse_vars(&["nokey".into()]).is_err());
        assert!(parse_vars(&["=1".into()]).is_err());
    }
}
