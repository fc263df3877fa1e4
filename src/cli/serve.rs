//! `sutra serve`: re-arm and drive every parked instance in a store until
//! SIGINT/SIGTERM. (The HTTP API arrives with the API issue.)
use super::run::{fail_exit, load_config, open_store, tokio};
use super::usage_error;
use crate::runtime::{Runtime, RuntimeOptions};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The datasource (`sqlite://file.db` or `postgres://...`).
    #[arg(long)]
    pub db: Option<String>,
    /// A TOML configuration file (environment variables override it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run on virtual time (tests): whenever nothing is runnable, jump to the next due park.
    #[arg(long)]
    pub virtual_clock: bool,
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub fn exec(args: ServeArgs) -> ExitCode {
    let config = match load_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    let Some(db) = args.db.clone().or(config.datasource_url.clone()) else {
        return usage_error("serve needs a datasource: --db <url> or sutra.datasource.url");
    };
    let rt = match tokio() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let (store, durable, _guard) = match open_store(Some(&db)).await {
            Ok(s) => s,
            Err(e) => return fail_exit(&e),
        };
        let mut opts = RuntimeOptions::new(config);
        opts.durable = durable;
        if args.virtual_clock {
            opts = opts.with_virtual_clock(chrono::Utc::now());
        }
        let runtime = match Runtime::new(store, opts) {
            Ok(r) => r,
            Err(e) => return fail_exit(&e.to_string()),
        };
        eprintln!("sutra serve: driving parked instances in {db}");
        match runtime.serve(shutdown_signal()).await {
            Ok(()) => {
                eprintln!("sutra serve: stopped");
                ExitCode::SUCCESS
            }
            Err(e) => fail_exit(&e.to_string()),
        }
    })
}
