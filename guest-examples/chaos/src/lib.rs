//! `chaos`: a misbehaving task component for testing the Sutra sandbox and engine.
//!
//! Invariant: the input `{"do": <action>, ...}` alone decides what one attempt does
//! (with `"by-task": {"<task id>": {"do": ...}}`, the entry for `ctx.task-id`
//! is the action instead, so one module can play every task of a workflow);
//! apart from `ctx.attempt` (read by `fail` and `context`) and the clock (`sleep`),
//! the same input always ends the same way. Every action the host must contain
//! (`panic`, `loop`, `alloc`, `recurse`, `big-output`, `probe`) does exactly the
//! one bad thing it is named for.
//!
//! Actions (fields other than `do` are optional unless stated):
//! - `echo`: completes with the input text unchanged (the whole input, `by-task` included).
//! - `emit` `{output}`: completes with `output` (any JSON; default `null`).
//! - `fail` `{code, until, message, class}`: a `failure` with `code` (default empty)
//!   while `ctx.attempt < until`, then completes with `{"attempt": n}`; without
//!   `until` it always fails. `class` (e.g. `"transient"`) goes into the details.
//! - `business` `{code, message, details}`: a business error with `code`.
//! - `panic`: a Rust panic: the message goes to stderr, then it traps.
//! - `loop`: spins forever without allocating.
//! - `alloc` `{bytes}`: allocates and touches `bytes` bytes, then completes.
//! - `recurse` `{depth}`: non-tail recursion `depth` calls deep, unbounded by
//!   default (overflows the wasm call stack).
//! - `big-output` `{bytes}`: completes with a JSON string literal of `bytes` bytes.
//! - `probe`: completes with `{"files": [...], "env": [variable names],
//!   "socket": bool}`, where `files` lists every preopened directory and the
//!   entries of each (names under `/` for a preopened `/`) and `socket` says
//!   whether a TCP connection to 127.0.0.1:9 could be made; any error counts
//!   as "cannot see" / `false`.
//! - `log` `{message, level}`: logs `message` through the host (level default
//!   `info`), writes it to stderr, then completes with `{"logged": true}`.
//! - `sleep` `{ms}`: sleeps `ms` milliseconds on the WASI monotonic clock, then
//!   completes with `{"slept": ms}`.
//! - `context`: completes with the context as JSON: `tenant`, `instanceId`,
//!   `taskId`, `attempt`, `idempotencyKey`.
//!
//! - `count`: completes with `{"calls": n}`, where `n` counts the `count` calls
//!   this instance has served (a global): 1 on a fresh instance, more only when
//!   the host reused the instance (a module deployed reusable). The one action
//!   whose ending depends on an earlier attempt, on purpose.
//!
//! Unknown actions and malformed input fail with `SUTRA.TASK.VALIDATION`.
//!
//! Why `no_std`: a task component pays, on every attempt, for instantiating
//! each function it imports. Rust's `std` on `wasm32-wasip2` goes through
//! wasi-libc, whose descriptor table (reached from the panic hook's stderr
//! write alone) imports ~80 WASI functions from 24 interfaces — files, UDP,
//! terminals, exit... `chaos` instead calls WASI 0.2 directly through
//! wit-bindgen (`wit/chaos.wit`), so it imports only the ~20 functions its
//! actions use, and brings its own allocator and panic handler.

#![no_std]

extern crate alloc;

/// The bindings of the world `task` (generated code, lint-exempt).
#[allow(clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "task",
        path: "../../wit",
    });
}

/// The WASI 0.2 interfaces `chaos` calls (generated code, lint-exempt).
#[allow(clippy::too_many_arguments)]
mod wasi {
    wit_bindgen::generate!({
        world: "chaos-wasi",
        path: "wit",
        generate_all,
    });
}

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use bindings::sutra::task::host::{log, Level};
use bindings::sutra::task::types::{Context, ErrorInfo, TaskError};
use bindings::Guest;
use core::hint::black_box;
use serde_json::{json, Map, Value};

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
        // Per-task actions: the entry for this task, else the top-level action.
        let args = match args.get("by-task").and_then(|b| b.get(ctx.task_id.as_str())) {
            Some(Value::Object(action)) => action,
            Some(_) => {
                return Err(validation(format!(
                    "\"by-task\".{:?} must be an object with \"do\"",
                    ctx.task_id
                )))
            }
            None => args,
        };
        let action = args.get("do").and_then(Value::as_str).unwrap_or("");
        match action {
            "echo" => Ok(input),
            "count" => Ok(json!({ "calls": count_call() }).to_string()),
            "emit" => Ok(args.get("output").unwrap_or(&Value::Null).to_string()),
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
                sleep_ms(ms);
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
                .map(str::to_owned)
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
    let mut buf: Vec<u8> = alloc::vec![0; len];
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
    out.extend(core::iter::repeat_n('x', inner));
    out.push('"');
    out
}

/// Sleeps `ms` milliseconds: one pollable on the monotonic clock, blocked on.
fn sleep_ms(ms: u64) {
    use wasi::wasi::clocks::monotonic_clock::subscribe_duration;
    subscribe_duration(ms.saturating_mul(1_000_000)).block();
}

/// What this attempt can see of the world outside: it really tries to list
/// files, read the environment and open a TCP connection.
fn probe() -> String {
    json!({ "files": visible_files(), "env": env_names(), "socket": can_connect() }).to_string()
}

/// Every preopened directory and the entries of each (the bare names for a
/// preopened `/`, else `<dir>/<name>`); a directory that cannot be read is
/// listed alone.
fn visible_files() -> Vec<String> {
    use wasi::wasi::filesystem::preopens::get_directories;
    let mut files = Vec::new();
    for (dir, path) in get_directories() {
        let prefix = if path == "/" {
            String::new()
        } else {
            files.push(path.clone());
            format!("{}/", path.trim_end_matches('/'))
        };
        let Ok(entries) = dir.read_directory() else {
            continue;
        };
        while let Ok(Some(entry)) = entries.read_directory_entry() {
            files.push(format!("{prefix}{}", entry.name));
        }
    }
    files
}

/// The names of the environment variables.
fn env_names() -> Vec<String> {
    wasi::wasi::cli::environment::get_environment()
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// Whether a TCP connection to 127.0.0.1:9 (discard) can be made.
fn can_connect() -> bool {
    use wasi::wasi::sockets::instance_network::instance_network;
    use wasi::wasi::sockets::network::{
        ErrorCode, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress,
    };
    use wasi::wasi::sockets::tcp_create_socket::create_tcp_socket;
    let network = instance_network();
    let Ok(socket) = create_tcp_socket(IpAddressFamily::Ipv4) else {
        return false;
    };
    let to = IpSocketAddress::Ipv4(Ipv4SocketAddress {
        port: 9,
        address: (127, 0, 0, 1),
    });
    if socket.start_connect(&network, to).is_err() {
        return false;
    }
    let ready = socket.subscribe();
    loop {
        match socket.finish_connect() {
            Ok(_streams) => return true,
            Err(ErrorCode::WouldBlock) => ready.block(),
            Err(_) => return false,
        }
    }
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
    write_stderr(message.as_bytes());
    write_stderr(b"\n");
    json!({ "logged": true }).to_string()
}

/// Writes to stderr, best effort: a host that drops stderr must not fail the
/// attempt. Allocates nothing (the panic handler uses it).
fn write_stderr(bytes: &[u8]) {
    let stderr = wasi::wasi::cli::stderr::get_stderr();
    // WASI's blocking-write-and-flush takes at most 4096 bytes per call.
    for chunk in bytes.chunks(4096) {
        if stderr.blocking_write_and_flush(chunk).is_err() {
            return;
        }
    }
}

/// The `count` action: this instance's `count` calls, this one included.
fn count_call() -> u64 {
    use core::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    CALLS.fetch_add(1, Ordering::Relaxed) + 1
}

/// The panic handler: what std's default hook prints (`panicked at
/// <file>:<line>:<col>:` and the message) to stderr, then a trap. Formats
/// into a fixed buffer, so a panic from a failed allocation still reports.
#[panic_handler]
fn on_panic(info: &core::panic::PanicInfo<'_>) -> ! {
    use core::fmt::Write;
    use core::sync::atomic::{AtomicBool, Ordering};
    static PANICKING: AtomicBool = AtomicBool::new(false);
    if !PANICKING.swap(true, Ordering::Relaxed) {
        let mut text = FixedText::<1024>::new();
        let _ = match info.location() {
            Some(at) => writeln!(text, "panicked at {at}:\n{}", info.message()),
            None => writeln!(text, "panicked:\n{}", info.message()),
        };
        write_stderr(text.as_bytes());
    }
    core::arch::wasm32::unreachable()
}

/// Text formatted into a fixed buffer; what does not fit is cut off.
struct FixedText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> FixedText<N> {
    fn new() -> Self {
        FixedText {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> core::fmt::Write for FixedText<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

// `memcmp` and friends, which `core` expects from the C library: wasi-libc's
// are pure functions (they import nothing).
#[link(name = "c")]
extern "C" {}

/// The canonical ABI's allocator (the host calls it to pass `input` and the
/// results of WASI calls): on `wasm32-wasip2` wit-bindgen leaves it to the C
/// library, whose `malloc` is not ours, so it is defined here over [`HEAP`].
///
/// # Safety
///
/// The canonical ABI's contract: `old` is null with `old_len` 0, or a block
/// of `old_len` bytes aligned to `align` that this function returned.
#[no_mangle]
pub unsafe extern "C" fn cabi_realloc(
    old: *mut u8,
    old_len: usize,
    align: usize,
    new_len: usize,
) -> *mut u8 {
    use alloc::alloc::{alloc, realloc, Layout};
    let p = if old_len == 0 {
        if new_len == 0 {
            return align as *mut u8;
        }
        unsafe { alloc(Layout::from_size_align_unchecked(new_len, align)) }
    } else {
        let layout = unsafe { Layout::from_size_align_unchecked(old_len, align) };
        unsafe { realloc(old, layout, new_len) }
    };
    if p.is_null() {
        // As wit-bindgen's own: no panic machinery here, whose stderr write
        // would re-enter the host in the middle of its call.
        core::arch::wasm32::unreachable()
    }
    p
}

#[global_allocator]
static HEAP: heap::Bump = heap::Bump::new();

/// A bump allocator over the linear memory (`memory.grow` under the host's
/// memory cap). An instance lives for one attempt, so freeing only the most
/// recent block (and growing it in place) is all the reuse it needs.
mod heap {
    use core::alloc::{GlobalAlloc, Layout};
    use core::arch::wasm32::{memory_grow, memory_size};
    use core::cell::Cell;
    use core::ptr;

    const PAGE: usize = 64 * 1024;

    extern "C" {
        /// Where the linker put the end of static data and stack: the heap's start.
        static __heap_base: u8;
    }

    pub struct Bump {
        /// The next free byte (0 before the first allocation).
        next: Cell<usize>,
        /// The end of the linear memory grown so far.
        end: Cell<usize>,
        /// Above this, memory has never been handed out: it is still zero.
        dirty_end: Cell<usize>,
    }

    // SAFETY: wasm32 guests are single-threaded here (no shared memory).
    unsafe impl Sync for Bump {}

    impl Bump {
        pub const fn new() -> Self {
            Bump {
                next: Cell::new(0),
                end: Cell::new(0),
                dirty_end: Cell::new(0),
            }
        }

        /// Moves `next` to `to`, growing the memory if needed; false if the
        /// host refuses the growth.
        fn bump_to(&self, to: usize) -> bool {
            if to > self.end.get() {
                let pages = (to - self.end.get()).div_ceil(PAGE);
                if memory_grow(0, pages) == usize::MAX {
                    return false;
                }
                self.end.set(memory_size(0).saturating_mul(PAGE));
            }
            self.next.set(to);
            self.dirty_end.set(self.dirty_end.get().max(to));
            true
        }

        fn start(&self) {
            if self.next.get() == 0 {
                // Only the address of the linker-defined symbol is taken.
                let base = ptr::addr_of!(__heap_base) as usize;
                self.next.set(base);
                self.dirty_end.set(base);
                self.end.set(memory_size(0).saturating_mul(PAGE));
            }
        }
    }

    unsafe impl GlobalAlloc for Bump {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            self.start();
            let Some(at) = self.next.get().checked_next_multiple_of(layout.align()) else {
                return ptr::null_mut();
            };
            match at.checked_add(layout.size()) {
                Some(to) if self.bump_to(to) => at as *mut u8,
                _ => ptr::null_mut(),
            }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            let dirty_before = self.dirty_end.get().max(self.next.get());
            let p = unsafe { self.alloc(layout) };
            if !p.is_null() {
                // Memory never handed out before is zero already (fresh pages).
                let dirty = dirty_before.saturating_sub(p as usize).min(layout.size());
                unsafe { ptr::write_bytes(p, 0, dirty) };
            }
            p
        }

        unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
            if p as usize + layout.size() == self.next.get() {
                self.next.set(p as usize);
            }
        }

        unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            if p as usize + layout.size() == self.next.get() {
                // The most recent block: grow or shrink it in place.
                return match (p as usize).checked_add(new_size) {
                    Some(to) if self.bump_to(to) => p,
                    _ => ptr::null_mut(),
                };
            }
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            let q = unsafe { self.alloc(new_layout) };
            if !q.is_null() {
                unsafe { ptr::copy_nonoverlapping(p, q, layout.size().min(new_size)) };
            }
            q
        }
    }
}
