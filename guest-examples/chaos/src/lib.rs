//! `chaos`: a misbehaving task component for testing the Sutra sandbox and engine.
//!
//! Invariant: the input `{"do": <action>, ...}` alone decides what one attempt does;
//! apart from `ctx.attempt` (read by `fail` and `context`) and the clock (`sleep`),
//! the same input always ends the same way. Every action the host must contain
//! (`panic`, `loop`, `alloc`, `recurse`, `big-output`, `probe`) does exactly the
//! one bad thing it is named for.
//!
//! Actions (fields other than `do` are optional unless stated):
//! - `echo`: completes with the input text unchanged.
//! - `fail` `{code, until, message, class}`: a `failure` with `code` (default empty)
//!   while `ctx.attempt < until`, then completes with `{"attempt": n}`; without
//!   `until` it always fails. `class` (e.g. `"transient"`) goes into the details.
//! - `business` `{code, message, details}`: a business error with `code`.
//! - `panic`: a Rust panic, which traps.
//! - `loop`: spins forever without allocating.
//! - `alloc` `{bytes}`: allocates and touches `bytes` bytes, then completes.
//! - `recurse` `{depth}`: non-tail recursion `depth` calls deep, unbounded by
//!   default (overflows the wasm call stack).
//! - `big-output` `{bytes}`: completes with a JSON string literal of `bytes` bytes.
//! - `probe`: completes with `{"files": [names under /], "env": [variable names],
//!   "socket": bool}`; any error counts as "cannot see" / `false`.
//! - `log` `{message, level}`: logs `message` through the host (level default
//!   `info`), writes it to stderr, then completes with `{"logged": true}`.
//! - `sleep` `{ms}`: sleeps `ms` milliseconds on the WASI clock, then completes
//!   with `{"slept": ms}`.
//! - `context`: completes with the context as JSON: `tenant`, `instanceId`,
//!   `taskId`, `attempt`, `idempotencyKey`.
//!
//! Unknown actions and malformed input fail with `SUTRA.TASK.VALIDATION`.

/// The bindings of the world `task` (generated code, lint-exempt).
#[allow(clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "task",
        path: "../../wit",
    });
}

use bindings::sutra::task::host::{log, Level};
use bindings::sutra::task::types::{Context, ErrorInfo, TaskError};
use bindings::Guest;
use serde_json::{json, Map, Value};
use std::hint::black_box;
use std::io::Write;

/// The conventional code for refused input (mirrors the engine's code table).
const VALIDATION: &str = "SUTRA.TASK.VALIDATION";

struct Chaos;

impl Guest for Chaos {
    fn run(ctx: Context, input: String) -> Result<String, TaskError> {
        let value: Value = serde_json::from_str(&input)
            .map_err(|e| validation(format!("input is not JSON: {e}")))?;
        let Some(args) = value.as_object() else {
            return Err(validation("input must be a JSON object".to_string()));
        };
        let action = args.get("do").and_then(Value::as_str).unwrap_or("");
        match action {
            "echo" => Ok(input),
            "fail" => fail(&ctx, args),
            "business" => Err(TaskError::Business(info(
                str_field(args, "code"),
                args.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("business error requested"),
                args.get("details").map(Value::to_string),
            ))),
            "panic" => panic!("chaos: panic requested"),
            "loop" => spin(),
            "alloc" => Ok(alloc(u64_field(args, "bytes"))),
            "recurse" => {
                let limit = args
                    .get("depth")
                    .and_then(Value::as_u64)
                    .unwrap_or(u64::MAX);
                Ok(json!({ "result": recurse(0, black_box(limit)) }).to_string())
            }
            "big-output" => Ok(big_output(u64_field(args, "bytes"))),
            "probe" => Ok(probe()),
            "log" => Ok(log_message(args)),
            "sleep" => {
                let ms = u64_field(args, "ms");
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(json!({ "slept": ms }).to_string())
            }
            "context" => Ok(json!({
                "tenant": ctx.tenant,
                "instanceId": ctx.instance_id,
                "taskId": ctx.task_id,
                "attempt": ctx.attempt,
                "idempotencyKey": ctx.idempotency_key,
            })
            .to_string()),
            other => Err(validation(format!(
                "unknown action {other:?} in field \"do\""
            ))),
        }
    }
}

bindings::export!(Chaos with_types_in bindings);

fn info(code: &str, message: &str, details: Option<String>) -> ErrorInfo {
    ErrorInfo {
        code: code.to_string(),
        message: message.to_string(),
        details,
    }
}

fn validation(message: String) -> TaskError {
    TaskError::Failure(info(
        VALIDATION,
        &message,
        Some(json!({ "class": "invalid_input" }).to_string()),
    ))
}

fn str_field<'a>(args: &'a Map<String, Value>, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or("")
}

fn u64_field(args: &Map<String, Value>, name: &str) -> u64 {
    args.get(name).and_then(Value::as_u64).unwrap_or(0)
}

/// `fail`: fails while `attempt < until` (always, without `until`).
fn fail(ctx: &Context, args: &Map<String, Value>) -> Result<String, TaskError> {
    let until = args.get("until").and_then(Value::as_u64);
    match until {
        Some(until) if u64::from(ctx.attempt) >= until => {
            Ok(json!({ "attempt": ctx.attempt }).to_string())
        }
        _ => {
            let details = args
                .get("class")
                .and_then(Value::as_str)
                .map(|class| json!({ "class": class }).to_string());
            let message = args
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("failure requested on attempt {}", ctx.attempt));
            Err(TaskError::Failure(info(
                str_field(args, "code"),
                &message,
                details,
            )))
        }
    }
}

/// Spins forever: no allocation, no calls out, only the loop itself.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

/// Allocates `bytes` bytes and writes one byte per 4 KiB page so it is really used.
fn alloc(bytes: u64) -> String {
    let len = usize::try_from(bytes).unwrap_or(usize::MAX);
    let mut buf: Vec<u8> = vec![0; len];
    let mut i = 0;
    while i < buf.len() {
        buf[i] = 1;
        i += 4096;
    }
    let touched = black_box(&buf).iter().step_by(4096).count();
    json!({ "allocated": buf.len(), "pagesTouched": touched }).to_string()
}

/// Non-tail recursion down to `limit` (unbounded in practice: `u64::MAX` by default).
///
/// Each frame's result depends on the frame below through two operations, so the
/// optimiser can turn it into neither a loop nor an accumulator; it keeps nothing in
/// linear memory (no address-taken locals), so it exhausts the wasm call stack
/// itself, which the host reports as a stack overflow.
#[inline(never)]
fn recurse(depth: u64, limit: u64) -> u64 {
    if depth >= limit {
        return depth;
    }
    let below = recurse(depth + 1, limit);
    below.wrapping_mul(31) ^ depth
}

/// A JSON string literal of exactly `bytes` bytes (at least the two quotes).
fn big_output(bytes: u64) -> String {
    let inner = usize::try_from(bytes.saturating_sub(2)).unwrap_or(usize::MAX);
    let mut out = String::with_capacity(inner.saturating_add(2));
    out.push('"');
    out.extend(std::iter::repeat_n('x', inner));
    out.push('"');
    out
}

/// What this attempt can see of the world outside.
fn probe() -> String {
    let files: Vec<String> = std::fs::read_dir("/")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let env: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    let socket = std::net::TcpStream::connect("127.0.0.1:9").is_ok();
    json!({ "files": files, "env": env, "socket": socket }).to_string()
}

/// Logs through the host and to stderr.
fn log_message(args: &Map<String, Value>) -> String {
    let message = str_field(args, "message");
    let level = match str_field(args, "level") {
        "trace" => Level::Trace,
        "debug" => Level::Debug,
        "warn" => Level::Warn,
        "error" => Level::Error,
        _ => Level::Info,
    };
    log(level, message);
    let mut stderr = std::io::stderr();
    // Best effort: a host that drops stderr must not fail the attempt.
    let _ = writeln!(stderr, "{message}");
    let _ = stderr.flush();
    json!({ "logged": true }).to_string()
}
