//! `sutra resume <instance> <event> [--data JSON]`: resume an instance that
//! waits on a named event, through the server
//! (`POST /v1/instances/{id}/events/{name}`).

use super::client::{call, enc, run_instance, Body, ServerOpts};
use super::run::parse_object;
use super::usage_error;
use clap::Args;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The instance id.
    pub instance: String,
    /// The event name its `Wait` state waits for.
    pub event: String,
    /// The event's data, a JSON object (placed at the wait's `ResultPath`).
    #[arg(long, default_value = "{}")]
    pub data: String,
    #[command(flatten)]
    pub server: ServerOpts,
}

pub fn exec(args: ResumeArgs) -> ExitCode {
    let data = match parse_object(&args.data, "--data") {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let path = format!(
        "/v1/instances/{}/events/{}",
        enc(&args.instance),
        enc(&args.event)
    );
    let opts = args.server.clone();
    run_instance(args.server.format, async move {
        call(
            &opts,
            reqwest::Method::POST,
            &path,
            Body::Json(serde_json::Value::Object(data)),
            &[],
        )
        .await
    })
}
