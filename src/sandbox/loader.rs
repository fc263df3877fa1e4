//! Loading a component: validation, the import policy, compilation (or the
//! disk cache), and linking against the task world.
//!
//! Invariant: a [`LoadedComponent`] exists only for bytes that are a valid
//! component, import nothing outside [`import_policy`], link against the
//! sandbox's linker and export the task world's `run`. Anything else is a
//! [`LoadError`] with `SUTRA.TASK.MODULE_INVALID` naming what is wrong.

use super::engine::Tier;
use super::host::{HostState, TaskPre};
use crate::codes::Code;
use std::sync::{Arc, RwLock};
use wasmtime::component::Component;

/// Why a component was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct LoadError {
    pub code: Code,
    pub message: String,
}

impl LoadError {
    pub(crate) fn invalid(message: impl Into<String>) -> LoadError {
        LoadError {
            code: Code::TaskModuleInvalid,
            message: message.into(),
        }
    }
}

/// A component ready to run: compiled, checked and linked. Cheap to clone.
/// A component compiled by the quick tier has its optimised code swapped in
/// when that is ready (clones share the swap).
#[derive(Clone)]
pub struct LoadedComponent {
    pub(crate) inner: Arc<LoadedInner>,
}

pub(crate) struct LoadedInner {
    pub(crate) digest: String,
    pub(crate) imports: Vec<String>,
    /// Where in `imports` the first that needs an egress grant is (found
    /// once: every attempt asks).
    egress: Option<usize>,
    ready: RwLock<Arc<Ready>>,
    /// `true` once no better code is coming (optimised, or its compile gave up).
    settled: tokio::sync::watch::Sender<bool>,
}

/// Linked code of one tier (its engine is `pre.engine()`).
pub(crate) struct Ready {
    pub(crate) pre: TaskPre<HostState>,
    pub(crate) tier: Tier,
}

impl LoadedComponent {
    pub(crate) fn new(
        digest: String,
        imports: Vec<String>,
        pre: TaskPre<HostState>,
        tier: Tier,
    ) -> Self {
        LoadedComponent {
            inner: Arc::new(LoadedInner {
                digest,
                egress: imports.iter().position(|n| needs_egress_grant(n)),
                imports,
                ready: RwLock::new(Arc::new(Ready { pre, tier })),
                settled: tokio::sync::watch::Sender::new(tier == Tier::Optimized),
            }),
        }
    }

    /// No better code is coming for this component.
    pub(crate) fn settle(&self) {
        self.inner.settled.send_replace(true);
    }

    /// Wait until the optimised code is in, or its compile gave up.
    pub async fn settled(&self) {
        let mut rx = self.inner.settled.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// The code an attempt starting now runs.
    pub(crate) fn ready(&self) -> Arc<Ready> {
        match self.inner.ready.read() {
            Ok(r) => r.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Swap in the optimised code (attempts already running keep theirs).
    pub(crate) fn upgrade(&self, pre: TaskPre<HostState>) {
        let next = Arc::new(Ready {
            pre,
            tier: Tier::Optimized,
        });
        match self.inner.ready.write() {
            Ok(mut r) => *r = next,
            Err(p) => *p.into_inner() = next,
        }
    }

    /// Which compiler's code an attempt starting now runs.
    pub fn tier(&self) -> Tier {
        self.ready().tier
    }

    /// The sha256 of the component bytes, lowercase hex.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// The names of the component's imports, in the component's order.
    pub fn imports(&self) -> &[String] {
        &self.inner.imports
    }

    /// The first import that needs an egress grant (outbound HTTP), if any.
    pub fn egress_import(&self) -> Option<&str> {
        let at = self.inner.egress?;
        self.inner.imports.get(at).map(String::as_str)
    }
}

impl std::fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("digest", &self.inner.digest)
            .finish_non_exhaustive()
    }
}

/// Refuse anything that is not a component before spending a compile on it.
/// (The header is `\0asm`, a 2-byte version, then a 2-byte layer: 0 for a core
/// module, 1 for a component.)
pub(crate) fn check_kind(bytes: &[u8]) -> Result<(), LoadError> {
    match (bytes.get(0..4), bytes.get(6..8)) {
        (Some(b"\0asm"), Some([1, 0])) => Ok(()),
        (Some(b"\0asm"), Some([0, 0])) => Err(LoadError::invalid(
            "this is a core WebAssembly module, not a component: build it for the `sutra:task/task` world \
             (e.g. `cargo build --target wasm32-wasip2`, or `wasm-tools component new`)",
        )),
        _ => Err(LoadError::invalid("this is not a WebAssembly component (bad header)")),
    }
}

/// The interfaces a task component may import.
///
/// - `sutra:task/host` and `sutra:task/types` at `0.1.x`: the task world.
/// - WASI p2 (`@0.2.x`) `cli`, `clocks`, `filesystem`, `io`, `random`,
///   `sockets`: linked, but deny-all where it matters (no preopened directory,
///   no environment, no network: socket creation and name lookup fail).
///   Sockets are allowed as imports because a language's standard library
///   may reference them; they are refused at run time.
/// - `wasi:http/outgoing-handler` and `wasi:http/types` at `0.2.x`: only for
///   a task module with an egress grant — the sandbox loads it, and the
///   deploy refuses a module whose grant is missing ([`needs_egress_grant`]);
///   every request goes through the attempt's egress session.
/// - Nothing else: not `wasi:http/incoming-handler`, not WASI p3, not a bare
///   function, not another package.
pub fn import_policy(name: &str) -> Result<(), String> {
    let (path, version) = name.split_once('@').unwrap_or((name, ""));
    let (package, interface) = path.split_once('/').unwrap_or((path, ""));
    let ok = match package {
        "sutra:task" => matches!(interface, "host" | "types") && version.starts_with("0.1."),
        "wasi:cli" | "wasi:clocks" | "wasi:filesystem" | "wasi:io" | "wasi:random"
        | "wasi:sockets" => !interface.is_empty() && version.starts_with("0.2."),
        _ => needs_egress_grant(name),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the component imports `{name}`, which a task may not use \
             (allowed: sutra:task/host@0.1, WASI 0.2 cli, clocks, filesystem, io, random, sockets, \
             and wasi:http 0.2 outgoing-handler and types under an egress grant)"
        ))
    }
}

/// Whether an import is outbound HTTP, which a module may use only under an
/// egress grant.
pub fn needs_egress_grant(name: &str) -> bool {
    let (path, version) = name.split_once('@').unwrap_or((name, ""));
    matches!(path, "wasi:http/outgoing-handler" | "wasi:http/types") && version.starts_with("0.2.")
}

/// Check every import of `component` against [`import_policy`]; returns the names.
pub(crate) fn check_imports(
    engine: &wasmtime::Engine,
    component: &Component,
) -> Result<Vec<String>, LoadError> {
    let ty = component.component_type();
    let mut names = Vec::new();
    for (name, _) in ty.imports(engine) {
        import_policy(name).map_err(LoadError::invalid)?;
        names.push(name.to_string());
    }
    Ok(names)
}

/// Link a checked component and make sure it exports the task world's `run`.
pub(crate) fn link(
    linker: &wasmtime::component::Linker<HostState>,
    component: &Component,
) -> Result<TaskPre<HostState>, LoadError> {
    let pre = linker.instantiate_pre(component).map_err(|e| {
        LoadError::invalid(format!(
            "the component does not link against the task host: {e:#}"
        ))
    })?;
    TaskPre::new(pre).map_err(|e| {
        LoadError::invalid(format!(
            "the component does not export the `sutra:task/task` world's `run`: {e:#}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_world_and_wasi_p2_are_allowed() {
        for name in [
            "sutra:task/host@0.1.0",
            "sutra:task/types@0.1.0",
            "wasi:cli/environment@0.2.0",
            "wasi:io/streams@0.2.6",
            "wasi:sockets/tcp@0.2.3",
            "wasi:filesystem/preopens@0.2.0",
            "wasi:random/random@0.2.0",
            "wasi:clocks/monotonic-clock@0.2.0",
        ] {
            assert_eq!(import_policy(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn everything_else_is_refused_by_name() {
        assert!(import_policy("wasi:http/outgoing-handler@0.2.0").is_ok());
        assert!(needs_egress_grant("wasi:http/types@0.2.12"));
        assert!(!needs_egress_grant("wasi:io/streams@0.2.12"));
        for name in [
            "wasi:http/incoming-handler@0.2.0",
            "wasi:http/outgoing-handler@0.3.0",
            "wasi:cli/environment@0.3.0",
            "wasi:cli/environment",
            "evil:net/raw@1.0.0",
            "sutra:task/other@0.1.0",
            "sutra:task/host@0.2.0",
            "log",
        ] {
            let err = import_policy(name).unwrap_err();
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn a_core_module_is_refused_as_not_a_component() {
        let module = wat::parse_str("(module)").unwrap();
        let err = check_kind(&module).unwrap_err();
        assert_eq!(err.code, Code::TaskModuleInvalid);
        assert!(
            err.message.contains("core WebAssembly module"),
            "{}",
            err.message
        );
        assert!(check_kind(b"not wasm").is_err());
        let component = wat::parse_str("(component)").unwrap();
        assert!(check_kind(&component).is_ok());
    }
}
