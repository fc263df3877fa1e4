//! Compiling an uploaded component out of the server's heap: limits checked
//! before compiling (size, function count), then a child process (the same
//! `sutra` binary, `sutra __compile`) under CPU-time, address-space and
//! wall-clock limits writes the serialized artifact to a file; the server
//! only maps the finished artifact. Whatever the compiler allocated goes back
//! to the system when the child exits.
//!
//! Invariants:
//! - nothing is compiled before [`precheck`] passed: a module over the size
//!   or function-count limit costs one pass over its section headers;
//! - the worker sets its own limits (`setrlimit`) before it reads a byte of
//!   the module, so a hostile module never runs the compiler unbounded; the
//!   parent kills it at the wall-clock limit;
//! - every refusal is `SUTRA.TASK.MODULE_INVALID` naming the limit and its
//!   configuration key; a worker that dies otherwise is named as such;
//! - an artifact file appears only complete (written to a temporary name and
//!   renamed) and only from bytes that compiled;
//! - compiles of one tenant run one at a time ([`CompileQueue::tenant`]),
//!   and at most `concurrent` run at once over all tenants.

use super::engine::{compile_engine, Tier};
use super::loader::LoadError;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// What compiling one module may cost.
///
/// | field | default | key |
/// | --- | --- | --- |
/// | `max_module_bytes` | 32 MiB | `sutra.sandbox.compile.max-module-bytes` |
/// | `max_functions` | 50,000 (over all core modules) | `sutra.sandbox.compile.max-functions` |
/// | `cpu_time` | 120 s of CPU (all compiler threads) | `sutra.sandbox.compile.cpu-time` |
/// | `wall_time` | 180 s | `sutra.sandbox.compile.wall-time` |
/// | `memory_bytes` | 2 GiB of address space (the example guests need < 1 GiB) | `sutra.sandbox.compile.memory` |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileLimits {
    pub max_module_bytes: u64,
    pub max_functions: u64,
    pub cpu_time: Duration,
    pub wall_time: Duration,
    pub memory_bytes: u64,
}

impl CompileLimits {
    pub const DEFAULT_MAX_MODULE_BYTES: u64 = 32 << 20;
    pub const DEFAULT_MAX_FUNCTIONS: u64 = 50_000;
    pub const DEFAULT_CPU_TIME: Duration = Duration::from_secs(120);
    pub const DEFAULT_WALL_TIME: Duration = Duration::from_secs(180);
    pub const DEFAULT_MEMORY_BYTES: u64 = 2 << 30;

    /// The lower of each limit (a tenant's limits within the server's).
    pub fn min(&self, other: &CompileLimits) -> CompileLimits {
        CompileLimits {
            max_module_bytes: self.max_module_bytes.min(other.max_module_bytes),
            max_functions: self.max_functions.min(other.max_functions),
            cpu_time: self.cpu_time.min(other.cpu_time),
            wall_time: self.wall_time.min(other.wall_time),
            memory_bytes: self.memory_bytes.min(other.memory_bytes),
        }
    }
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            max_module_bytes: Self::DEFAULT_MAX_MODULE_BYTES,
            max_functions: Self::DEFAULT_MAX_FUNCTIONS,
            cpu_time: Self::DEFAULT_CPU_TIME,
            wall_time: Self::DEFAULT_WALL_TIME,
            memory_bytes: Self::DEFAULT_MEMORY_BYTES,
        }
    }
}

fn over(limit: &str, key: &str, what: String) -> LoadError {
    LoadError::invalid(format!(
        "the module is over the {limit} limit: {what} (`{key}`)"
    ))
}

/// The functions a component defines, over all its core modules, read from
/// the section headers only (no function body is parsed).
pub fn count_functions(bytes: &[u8]) -> Result<u64, String> {
    let mut functions = 0u64;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload.map_err(|e| format!("the component does not parse: {e}"))? {
            wasmparser::Payload::FunctionSection(s) => {
                functions = functions.saturating_add(u64::from(s.count()));
            }
            wasmparser::Payload::CodeSectionStart { count, .. } => {
                // A code section without a function section (malformed, but
                // counted all the same before the compiler sees it).
                functions = functions.max(u64::from(count));
            }
            _ => {}
        }
    }
    Ok(functions)
}

/// The limits checked before compiling: module size, then function count.
pub(crate) fn precheck(bytes: &[u8], limits: &CompileLimits) -> Result<(), LoadError> {
    let size = bytes.len() as u64;
    if size > limits.max_module_bytes {
        return Err(over(
            "module size",
            "sutra.sandbox.compile.max-module-bytes",
            format!("{size} bytes, at most {} allowed", limits.max_module_bytes),
        ));
    }
    let functions = count_functions(bytes).map_err(LoadError::invalid)?;
    if functions > limits.max_functions {
        return Err(over(
            "function count",
            "sutra.sandbox.compile.max-functions",
            format!(
                "{functions} functions, at most {} allowed",
                limits.max_functions
            ),
        ));
    }
    Ok(())
}

/// The order compiles run in: one at a time per tenant, `concurrent` at once
/// over all tenants.
pub(crate) struct CompileQueue {
    global: Arc<Semaphore>,
    tenants: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl CompileQueue {
    pub(crate) fn new(concurrent: usize) -> CompileQueue {
        CompileQueue {
            global: Arc::new(Semaphore::new(concurrent.max(1))),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// Wait for `tenant`'s turn, then for a global one.
    pub(crate) async fn turn(&self, tenant: &str) -> Option<Turn> {
        let own = {
            let mut m = self.tenants.lock().ok()?;
            // Forget idle tenants (nobody holds or waits for their semaphore).
            m.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() == 0);
            m.entry(tenant.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(1)))
                .clone()
        };
        let tenant_permit = own.acquire_owned().await.ok()?;
        let global = self.global.clone().acquire_owned().await.ok()?;
        Some(Turn {
            _tenant: tenant_permit,
            _global: global,
        })
    }
}

/// A tenant's turn to compile (and a global slot), held while it compiles.
pub(crate) struct Turn {
    _tenant: tokio::sync::OwnedSemaphorePermit,
    _global: tokio::sync::OwnedSemaphorePermit,
}

/// Why the worker did not produce an artifact.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Over a limit (the optimising compiler would not do better).
    Limit(LoadError),
    /// Compiled, but refused after: its imports or its exports (the other
    /// compiler would compile the same component).
    Policy(LoadError),
    /// The module does not compile (or the worker failed).
    Invalid(LoadError),
}

/// How the parent runs the worker.
#[derive(Debug, Clone)]
pub(crate) struct Worker {
    /// The `sutra` binary (its `__compile` subcommand).
    pub(crate) exe: PathBuf,
}

/// Exit status of a worker whose module does not compile (message on stdout).
const EXIT_INVALID: i32 = 3;
/// Exit status of a worker that ran out of address space (message on stdout).
const EXIT_MEMORY: i32 = 4;

impl Worker {
    /// Compile `bytes` for `tier` in a child process under `limits`, writing
    /// the artifact to `out`. `background`: the worker lowers its priority
    /// (an optimised recompile must not slow attempts down).
    pub(crate) async fn compile(
        &self,
        bytes: &[u8],
        tier: Tier,
        limits: &CompileLimits,
        out: &Path,
        background: bool,
    ) -> Result<(), Refusal> {
        let cpu = limits.cpu_time.as_secs().max(1);
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("__compile")
            .arg("--tier")
            .arg(tier.as_str())
            .arg("--out")
            .arg(out)
            .arg("--cpu-seconds")
            .arg(cpu.to_string())
            .arg("--memory-bytes")
            .arg(limits.memory_bytes.to_string())
            .arg("--max-bytes")
            .arg(limits.max_module_bytes.to_string())
            .env_remove("SUTRA_LOG")
            // Its RLIMIT_AS holds with the system allocator only: mimalloc
            // reserves address space in 32 MiB segments (src/alloc.rs).
            .env(crate::alloc::ALLOCATOR_ENV, crate::alloc::SYSTEM)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if background {
            cmd.arg("--background");
        }
        let child = cmd.spawn().map_err(|e| {
            Refusal::Invalid(LoadError::invalid(format!(
                "cannot start the compile worker {}: {e}",
                self.exe.display()
            )))
        })?;
        // A worker that does not finish leaves its temporary file: remove it.
        let leftover = child.id().map(|pid| temporary_name(out, pid));
        let result = self.finish(child, bytes, limits, cpu).await;
        if result.is_err() {
            if let Some(tmp) = leftover {
                let _ = std::fs::remove_file(tmp);
            }
        }
        result
    }

    /// Feed the worker, wait for it (at most the wall-clock limit), read its status.
    async fn finish(
        &self,
        mut child: tokio::process::Child,
        bytes: &[u8],
        limits: &CompileLimits,
        cpu: u64,
    ) -> Result<(), Refusal> {
        use std::os::unix::process::ExitStatusExt;
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take();
        let feed = async {
            if let Some(s) = stdin.as_mut() {
                // A worker that died early closes its end: its status says why.
                let _ = s.write_all(bytes).await;
                let _ = s.shutdown().await;
            }
            drop(stdin);
        };
        let run = async {
            let ((), out) = tokio::join!(feed, child.wait_with_output());
            out
        };
        let output = match tokio::time::timeout(limits.wall_time, run).await {
            // Dropping the run dropped the child: killed (kill_on_drop).
            Err(_) => {
                return Err(Refusal::Limit(over(
                    "compile time",
                    "sutra.sandbox.compile.wall-time",
                    format!(
                        "still compiling after {} s of wall-clock time",
                        limits.wall_time.as_secs_f64()
                    ),
                )))
            }
            Ok(Err(e)) => {
                return Err(Refusal::Invalid(LoadError::invalid(format!(
                    "the compile worker failed: {e}"
                ))))
            }
            Ok(Ok(o)) => o,
        };
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let status = output.status;
        match (status.code(), status.signal()) {
            (Some(0), _) => Ok(()),
            (Some(EXIT_INVALID), _) => Err(Refusal::Invalid(LoadError::invalid(stdout))),
            (Some(EXIT_MEMORY), _) => Err(Refusal::Limit(memory_over(limits))),
            (_, Some(libc::SIGXCPU)) | (_, Some(libc::SIGKILL)) => Err(Refusal::Limit(over(
                "compile time",
                "sutra.sandbox.compile.cpu-time",
                format!("more than {cpu} s of CPU time"),
            ))),
            _ if mentions_memory(&stderr) => Err(Refusal::Limit(memory_over(limits))),
            _ => Err(Refusal::Invalid(LoadError::invalid(format!(
                "the compile worker failed ({status}): {}",
                stderr.lines().last().unwrap_or_default()
            )))),
        }
    }
}

fn memory_over(limits: &CompileLimits) -> LoadError {
    over(
        "compile memory",
        "sutra.sandbox.compile.memory",
        format!(
            "compiling needs more than {} bytes of address space",
            limits.memory_bytes
        ),
    )
}

/// Whether a worker's stderr (or an error) says it ran out of memory.
fn mentions_memory(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("memory allocation of")
        || t.contains("cannot allocate memory")
        || t.contains("out of memory")
        || t.contains("os error 12")
}

/// What `sutra __compile` was asked to do.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub tier: String,
    pub out: PathBuf,
    pub cpu_seconds: u64,
    pub memory_bytes: u64,
    pub max_bytes: u64,
    pub background: bool,
}

/// The worker's side (`sutra __compile`): limit itself, read the module from
/// stdin, compile it, write the artifact atomically to `out`. Exit 0 done,
/// 3 the module does not compile (why on stdout), 4 out of address space,
/// 2 a usage error; killed by SIGXCPU at the CPU limit.
pub fn run_worker(args: &WorkerArgs) -> ExitCode {
    let Some(tier) = Tier::parse(&args.tier) else {
        eprintln!("__compile: unknown tier `{}`", args.tier);
        return ExitCode::from(2);
    };
    if let Err(e) = limit_self(args.cpu_seconds, args.memory_bytes, args.background) {
        eprintln!("__compile: cannot set limits: {e}");
        return ExitCode::from(2);
    }
    let mut bytes = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(args.max_bytes.saturating_add(1))
        .read_to_end(&mut bytes);
    if let Err(e) = read {
        eprintln!("__compile: cannot read the module: {e}");
        return ExitCode::from(2);
    }
    if bytes.len() as u64 > args.max_bytes {
        return invalid(format!(
            "the module is larger than {} bytes",
            args.max_bytes
        ));
    }
    let artifact = compile_engine(tier)
        .and_then(|engine| engine.precompile_component(&bytes))
        .map_err(|e| format!("{e:#}"));
    drop(bytes);
    let artifact = match artifact {
        Ok(a) => a,
        Err(e) if mentions_memory(&e) => {
            println!("{e}");
            return ExitCode::from(EXIT_MEMORY as u8);
        }
        Err(e) => return invalid(format!("the component does not validate: {e}")),
    };
    match write_atomically(&args.out, &artifact) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("__compile: cannot write {}: {e}", args.out.display());
            ExitCode::from(1)
        }
    }
}

fn invalid(message: String) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{message}");
    let _ = out.flush();
    ExitCode::from(EXIT_INVALID as u8)
}

/// `RLIMIT_CPU` (SIGXCPU at the soft limit, SIGKILL a second later),
/// `RLIMIT_AS`, and a lower priority for a background compile.
fn limit_self(cpu_seconds: u64, memory_bytes: u64, background: bool) -> std::io::Result<()> {
    let set = |resource, soft: u64, hard: u64| {
        let lim = libc::rlimit {
            rlim_cur: soft as libc::rlim_t,
            rlim_max: hard as libc::rlim_t,
        };
        // SAFETY: setrlimit reads the struct we pass; no memory is shared.
        if unsafe { libc::setrlimit(resource, &lim) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    set(libc::RLIMIT_CPU, cpu_seconds, cpu_seconds.saturating_add(1))?;
    set(libc::RLIMIT_AS, memory_bytes, memory_bytes)?;
    if background {
        // SAFETY: setpriority on this process only; failure is harmless.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, 0, 10);
        }
    }
    Ok(())
}

/// The temporary name process `pid` writes `path` under.
fn temporary_name(path: &Path, pid: u32) -> PathBuf {
    path.with_extension(format!("tmp.{pid}"))
}

/// Write `bytes` to a temporary name beside `path`, then rename it.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temporary_name(path, std::process::id());
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module_with(functions: usize) -> Vec<u8> {
        let mut wat = String::from("(component (core module");
        for _ in 0..functions {
            wat.push_str(" (func)");
        }
        wat.push_str("))");
        wat::parse_str(&wat).unwrap()
    }

    #[test]
    fn functions_are_counted_over_nested_modules() {
        assert_eq!(count_functions(&module_with(0)).unwrap(), 0);
        assert_eq!(count_functions(&module_with(7)).unwrap(), 7);
        let two =
            wat::parse_str("(component (core module (func) (func)) (core module (func)))").unwrap();
        assert_eq!(count_functions(&two).unwrap(), 3);
        assert!(count_functions(b"\0asm\x0d\0\x01\0garbage").is_err());
    }

    #[test]
    fn precheck_names_the_limit_and_its_key() {
        let limits = CompileLimits {
            max_functions: 5,
            ..CompileLimits::default()
        };
        assert!(precheck(&module_with(5), &limits).is_ok());
        let e = precheck(&module_with(6), &limits).unwrap_err();
        assert!(e.message.contains("function count"), "{}", e.message);
        assert!(e.message.contains("sutra.sandbox.compile.max-functions"));
        let small = CompileLimits {
            max_module_bytes: 10,
            ..CompileLimits::default()
        };
        let e = precheck(&module_with(1), &small).unwrap_err();
        assert!(e.message.contains("module size"), "{}", e.message);
    }

    #[tokio::test]
    async fn one_tenant_queues_behind_itself_not_in_front_of_others() {
        let queue = Arc::new(CompileQueue::new(1));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let first = queue.turn("a").await.unwrap();
        for tenant in ["a", "b"] {
            let (q, tx) = (queue.clone(), tx.clone());
            tokio::spawn(async move {
                let _turn = q.turn(tenant).await;
                let _ = tx.send(tenant);
            });
            // On this current-thread runtime the task runs until it waits.
            tokio::task::yield_now().await;
        }
        drop(first);
        // `a`'s second compile waited for `a`'s first; `b` was already
        // waiting for the global slot, so it goes first.
        assert_eq!(rx.recv().await, Some("b"));
        assert_eq!(rx.recv().await, Some("a"));
    }

    #[test]
    fn tenant_limits_lower_the_servers() {
        let server = CompileLimits::default();
        let tenant = CompileLimits {
            max_functions: 10,
            cpu_time: Duration::from_secs(500),
            ..CompileLimits::default()
        };
        let l = server.min(&tenant);
        assert_eq!(l.max_functions, 10);
        assert_eq!(l.cpu_time, CompileLimits::DEFAULT_CPU_TIME);
    }
}
