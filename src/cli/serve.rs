//! `sutra serve`: drive every parked instance in a store (the poller, the
//! retention sweeper, schedules) until SIGINT/SIGTERM, and answer the HTTP API
//! and the console on `--listen` (default `127.0.0.1:8080`, the address the
//! client verbs assume); `--no-listen` drives the store without an API.
//!
//! Clocks: the system clock by default; `--virtual-clock` jumps virtual
//! time to the next due park whenever nothing is runnable; `--manual-clock`
//! (tests) keeps virtual time still until `POST /v1/admin/clock/advance`
//! moves it, and then drives everything due on the way, so a test sees a
//! settled state when the call answers. `--clock-start` sets where virtual
//! time starts.
use super::run::{fail_exit, load_config, open_store_with, tokio};
use super::usage_error;
use crate::api::{self, ApiConfig, AppState};
use crate::runtime::{Runtime, RuntimeOptions};
use crate::time::VirtualClock;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Where `serve` answers unless told otherwise: the client verbs' default `--server`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The datasource (`sqlite://file.db` or `postgres://...`).
    #[arg(long)]
    pub db: Option<String>,
    /// A TOML configuration file (environment variables override it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Answer the HTTP API and the console on this address (port 0 picks a free one).
    #[arg(long, default_value = DEFAULT_LISTEN, conflicts_with = "no_listen")]
    pub listen: String,
    /// Serve no API: only drive the parked instances of the store (a headless replica).
    #[arg(long)]
    pub no_listen: bool,
    /// The admin key (manages tenants over the API), at least 16 characters. Unset: no admin routes.
    #[arg(long, env = "SUTRA_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,
    /// Most connections held at once (default: 4096, within the file-descriptor limit); more are answered 503.
    #[arg(long, env = "SUTRA_API_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Most connections held at once from one source address.
    #[arg(long, env = "SUTRA_API_MAX_CONNECTIONS_PER_ADDR")]
    pub max_connections_per_addr: Option<usize>,
    /// Close a connection whose request head is not complete this long after
    /// its first byte (ISO-8601 duration; default PT30S).
    #[arg(long, env = "SUTRA_API_HEADER_READ_TIMEOUT")]
    pub header_read_timeout: Option<String>,
    /// Close a connection that sends no request this long after it was
    /// accepted or last answered (ISO-8601 duration; default PT120S).
    #[arg(long, env = "SUTRA_API_IDLE_TIMEOUT")]
    pub idle_timeout: Option<String>,
    /// After SIGINT/SIGTERM, how long the server may take to stop cleanly
    /// (answer requests in flight, release leases) before it exits anyway,
    /// whatever a step is doing (ISO-8601 duration; default PT10S).
    #[arg(long, env = "SUTRA_SHUTDOWN_GRACE")]
    pub shutdown_grace: Option<String>,
    /// Cap of a JSON request body, in bytes.
    #[arg(long, default_value_t = api::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Cap of a deployment bundle (multipart), in bytes.
    #[arg(long, default_value_t = api::DEFAULT_MAX_BUNDLE_BYTES)]
    pub max_bundle_bytes: usize,
    /// Run on virtual time (tests): whenever nothing is runnable, jump to the next due park.
    #[arg(long, conflicts_with = "manual_clock")]
    pub virtual_clock: bool,
    /// Run on virtual time that moves only through `POST /v1/admin/clock/advance` (tests).
    #[arg(long)]
    pub manual_clock: bool,
    /// Where virtual time starts (ISO 8601 with offset). Default: now.
    #[arg(long)]
    pub clock_start: Option<String>,
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

/// The default of `--shutdown-grace`.
const DEFAULT_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Bounds the clean stop that a signal began: a thread of its own (neither
/// a busy executor nor a request awaiting a long attempt can hold it) ends
/// the process after `grace`. Exiting then is as safe as a kill -9: every
/// answer given was committed first, and an attempt cut short is re-run
/// after its lease (its attempt park).
fn exit_after(grace: std::time::Duration) {
    let spawned = std::thread::Builder::new()
        .name("sutra-shutdown".into())
        .spawn(move || {
            std::thread::sleep(grace);
            eprintln!(
                "sutra serve: not stopped within {} ms of the signal (a request or a step \
                 still runs): exiting; what was committed stays, an attempt cut short \
                 re-runs after its lease",
                grace.as_millis()
            );
            std::process::exit(1);
        });
    if spawned.is_err() {
        std::process::exit(1);
    }
}

/// Resolves once the shutdown flag is set.
async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Uploaded modules are megabytes. glibc raises its mmap threshold to the
/// size of the first large buffer freed, after which such buffers come from
/// the heap, whose freed middle is never given back: a server's memory would
/// not come back after a large upload (issue 17). A fixed threshold keeps
/// every buffer of 256 KiB or more in its own mapping, unmapped when freed.
fn unmap_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before any
    // other thread of this process starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

pub fn exec(args: ServeArgs) -> ExitCode {
    unmap_large_buffers();
    let config = match load_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    let Some(db) = args.db.clone().or(config.datasource_url.clone()) else {
        return usage_error("serve needs a datasource: --db <url> or sutra.datasource.url");
    };
    let start = match &args.clock_start {
        None => chrono::Utc::now(),
        Some(s) => match crate::time::parse_date_time(s) {
            Ok(t) => t.with_timezone(&chrono::Utc),
            Err(e) => return usage_error(format!("--clock-start: {e}")),
        },
    };
    if args.manual_clock && args.no_listen {
        return usage_error("--manual-clock needs --listen (the clock moves through the API)");
    }
    if args.admin_key.as_deref().is_some_and(|k| k.len() < 16) {
        return usage_error("the admin key must be at least 16 characters");
    }
    let metrics_token = config.metrics_token.clone();
    let conn_timeouts = match conn_timeouts(&args) {
        Ok(t) => t,
        Err(e) => return usage_error(e),
    };
    let grace = match &args.shutdown_grace {
        None => DEFAULT_SHUTDOWN_GRACE,
        Some(v) => match crate::time::IsoDuration::parse(v) {
            Ok(d) => d.as_std(),
            Err(e) => return usage_error(format!("--shutdown-grace {v:?}: {e}")),
        },
    };
    let rt = match tokio() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let code = rt.block_on(async move {
        let acquire = config.acquire_timeout.as_std();
        let (store, durable, _guard) = match open_store_with(Some(&db), Some(acquire)).await {
            Ok(s) => s,
            Err(e) => return fail_exit(&e),
        };
        let mut opts = RuntimeOptions::new(config);
        opts.durable = durable;
        // Uploaded components compile in bounded children of this binary.
        opts.compile_worker = std::env::current_exe().ok();
        let mut manual = None;
        if args.manual_clock {
            // Virtual, but never jumped by the runtime: only the API moves it.
            let vc = Arc::new(VirtualClock::new(crate::time::from_millis(
                crate::time::to_millis(start),
            )));
            opts.clock = vc.clone();
            manual = Some(vc);
        } else if args.virtual_clock {
            opts = opts.with_virtual_clock(start);
        }
        let runtime = match Runtime::new(store, opts) {
            Ok(r) => r,
            Err(e) => return fail_exit(&e.to_string()),
        };
        // Key rotation: re-seal the secrets an old key sealed (reads work meanwhile).
        let resealing = runtime.clone();
        tokio::spawn(async move {
            match resealing.reseal_secrets().await {
                Ok(0) => {}
                // Said as "listening on" is: an operator rotating the key
                // learns when the old one may leave SUTRA_SECRET_PREVIOUS_KEYS.
                Ok(n) => eprintln!("sutra serve: re-sealed {n} secrets under the current SUTRA_SECRET_KEY"),
                Err(e) => tracing::warn!(error = %e, "re-sealing secrets failed; the next start tries again"),
            }
        });
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = stop_tx.send(true);
            exit_after(grace);
        });
        let listen = args.listen.clone();
        // Connections, the store and compiles all take descriptors: use what
        // the hard limit allows, then cap connections within it.
        crate::api::conns::raise_fd_limit();
        let defaults = crate::api::conns::ConnLimits::defaults();
        let conn_limits = crate::api::conns::ConnLimits {
            max: args.max_connections.unwrap_or(defaults.max).max(1),
            per_addr: args.max_connections_per_addr.unwrap_or(defaults.per_addr).max(1),
        };
        if args.no_listen {
            eprintln!("sutra serve: driving parked instances in {db} (no API: --no-listen)");
            return finish(
                runtime
                    .serve(stopped(stop_rx))
                    .await
                    .map_err(|e| e.to_string()),
            );
        }
        let listener = match tokio::net::TcpListener::bind(&listen).await {
            Ok(l) => l,
            Err(e) => {
                return fail_exit(&format!(
                    "cannot listen on {listen}: {e} (choose another address with --listen, or --no-listen to serve no API)"
                ))
            }
        };
        let state = Arc::new(AppState {
            runtime: runtime.clone(),
            config: ApiConfig {
                admin_key: args.admin_key.clone(),
                metrics_token,
                max_body_bytes: args.max_body_bytes,
                max_bundle_bytes: args.max_bundle_bytes,
                manual_clock: manual.clone(),
                conn_limits,
                conn_timeouts,
            },
            clock_lock: tokio::sync::Mutex::new(()),
            http: Default::default(),
        });
        let driver = match &manual {
            // Boot on a manual clock: re-arm schedules and catch up once; then only the API moves time.
            Some(vc) => {
                if let Err(e) = runtime.rearm_schedules().await {
                    eprintln!("warning: re-arming schedules failed: {e}");
                }
                if let Err(e) = api::admin::run_until(&runtime, vc, runtime.clock().now()).await {
                    eprintln!("warning: catching up failed: {}", e.message);
                }
                // Batches start at once on a manual clock too; their later
                // rounds come with the advances (run_until).
                let rt = runtime.clone();
                tokio::spawn(async move { rt.batch_loop().await });
                None
            }
            None => {
                let rt = runtime.clone();
                let rx = stop_rx.clone();
                Some(tokio::spawn(async move { rt.serve(stopped(rx)).await }))
            }
        };
        match listener.local_addr() {
            Ok(addr) => eprintln!("sutra serve: listening on http://{addr} ({db})"),
            Err(_) => eprintln!("sutra serve: listening on {listen} ({db})"),
        }
        let served = api::serve(listener, state, stopped(stop_rx)).await;
        if manual.is_some() {
            runtime.release_schedule_lease().await;
        }
        if let Some(d) = driver {
            match d.await {
                Ok(Err(e)) => return fail_exit(&e.to_string()),
                Err(e) => return fail_exit(&e.to_string()),
                Ok(Ok(())) => {}
            }
        }
        finish(served.map_err(|e| e.to_string()))
    });
    // Work still running (an attempt on its lane, a step on a worker) must
    // not hold the exit: what it would commit is re-done after its lease.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    code
}

/// `--header-read-timeout` and `--idle-timeout` (each longer than PT0S).
fn conn_timeouts(args: &ServeArgs) -> Result<crate::api::conn_timeouts::ConnTimeouts, String> {
    let mut t = crate::api::conn_timeouts::ConnTimeouts::default();
    let parse = |flag: &str, v: &str| {
        let d = crate::time::IsoDuration::parse(v).map_err(|e| format!("{flag} {v:?}: {e}"))?;
        if d.as_std().is_zero() {
            return Err(format!("{flag}: must be longer than PT0S"));
        }
        Ok(d.as_std())
    };
    if let Some(v) = &args.header_read_timeout {
        t.header_read = parse("--header-read-timeout", v)?;
    }
    if let Some(v) = &args.idle_timeout {
        t.idle = parse("--idle-timeout", v)?;
    }
    Ok(t)
}

fn finish(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => {
            eprintln!("sutra serve: stopped");
            ExitCode::SUCCESS
        }
        Err(e) => fail_exit(&e),
    }
}
