//! Loading an uploaded component for a tenant ([`Sandbox::load_for`]): the
//! compile limits, the compile queues, and — with a compile worker — two
//! tiers: a quick (Winch) compile before the deploy returns, an optimised
//! (Cranelift) one behind it, swapped in when ready.
//!
//! Invariants:
//! - every compile runs in the worker (a bounded child process) when one is
//!   configured; only a finished artifact file is mapped into this process;
//! - a component is returned only after a compile of every function passed
//!   (validation included): a module that does not compile is refused here,
//!   never later; if the quick compiler cannot compile a module the optimised
//!   one can, the optimised compile runs before the answer (a module refused
//!   for its imports or exports is refused at once);
//! - foreground compiles (a deploy waiting) and background ones (the
//!   optimised recompile, at a lower priority) have separate queues, each one
//!   at a time per tenant and bounded overall, so a tenant's uploads queue
//!   behind each other and a recompile never delays a deploy;
//! - a failed optimised recompile leaves the quick code running (and says so
//!   in the log); attempts already running keep the code they started with.

use super::cache::{self, DiskCache};
use super::compile::{self, CompileLimits, CompileQueue, Refusal, Worker};
use super::engine::{self, EpochTicker, Tier};
use super::host::{self, HostState};
use super::loader::{self, LoadError, LoadedComponent};
use super::{Sandbox, SandboxConfig, SandboxError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Names scratch artifacts apart (two tenants may compile the same bytes at once).
static SCRATCH_SEQ: AtomicU64 = AtomicU64::new(0);

/// The quick tier's engine (its own pool and epoch ticker).
struct QuickEngine {
    engine: wasmtime::Engine,
    linker: wasmtime::component::Linker<HostState>,
    disk: Option<DiskCache>,
    _ticker: EpochTicker,
}

/// The worker, the quick tier and the compile queues of a sandbox.
pub(super) struct Tiers {
    worker: Option<Worker>,
    quick: Option<QuickEngine>,
    foreground: CompileQueue,
    background: CompileQueue,
    /// Where artifacts go when there is no cache directory (deleted once mapped).
    scratch: Option<tempfile::TempDir>,
    /// Recompile optimised behind quick code (`SandboxConfig::optimize_behind`).
    optimize_behind: bool,
}

impl Tiers {
    pub(super) fn new(cfg: &SandboxConfig) -> Result<Tiers, SandboxError> {
        let worker = cfg.compile_worker.clone().map(|exe| Worker { exe });
        let quick = match (&worker, cfg.tiered) {
            (Some(_), true) => {
                let err = |e: wasmtime::Error| SandboxError::Engine(format!("{e:#}"));
                let engine = engine::build_engine(cfg, Tier::Quick).map_err(err)?;
                let linker = host::linker(&engine).map_err(err)?;
                let disk = match &cfg.cache_dir {
                    Some(dir) => Some(DiskCache::new(dir.join("quick"), &engine).map_err(
                        |source| SandboxError::CacheDir {
                            dir: dir.join("quick"),
                            source,
                        },
                    )?),
                    None => None,
                };
                let ticker =
                    EpochTicker::start(&engine, cfg.epoch_tick).map_err(SandboxError::Ticker)?;
                Some(QuickEngine {
                    engine,
                    linker,
                    disk,
                    _ticker: ticker,
                })
            }
            _ => None,
        };
        let scratch = match (&worker, &cfg.cache_dir) {
            (Some(_), None) => Some(
                tempfile::Builder::new()
                    .prefix(&format!("{SCRATCH_PREFIX}{}-", std::process::id()))
                    .tempdir_in({
                        remove_stale_scratch(&std::env::temp_dir());
                        std::env::temp_dir()
                    })
                    .map_err(|source| SandboxError::CacheDir {
                        dir: std::env::temp_dir(),
                        source,
                    })?,
            ),
            _ => None,
        };
        Ok(Tiers {
            worker,
            quick,
            foreground: CompileQueue::new(cfg.compile_concurrency),
            background: CompileQueue::new(1),
            scratch,
            optimize_behind: cfg.optimize_behind,
        })
    }
}

/// The scratch directories' names: `sutra-compile-<pid>-<random>`.
const SCRATCH_PREFIX: &str = "sutra-compile-";

/// Removes the scratch directories in `tmp` of processes that no longer run
/// (a run killed before it could clean up after itself). A directory whose
/// process is alive, or whose name carries no pid, is left alone.
fn remove_stale_scratch(tmp: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(SCRATCH_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn gone() -> LoadError {
    LoadError::invalid("the sandbox is shutting down")
}

impl Sandbox {
    /// Load `bytes` for `tenant` under `limits` (the server's, lowered to the
    /// tenant's): size and function count first, then a compile in the
    /// worker — quick, with the optimised one behind it — or in this
    /// process when there is no worker. Compiles queue per tenant.
    pub async fn load_for(
        &self,
        tenant: &str,
        bytes: &[u8],
        limits: &CompileLimits,
    ) -> Result<LoadedComponent, LoadError> {
        // The limits hold for every tenant, also for bytes loaded before.
        loader::check_kind(bytes)?;
        compile::precheck(bytes, limits)?;
        let digest = cache::digest(bytes);
        if let Some(found) = self.remembered(&digest) {
            self.inner.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(found);
        }
        let tiers = &self.inner.tiers;
        let turn = tiers.foreground.turn(tenant).await.ok_or_else(gone)?;
        let Some(worker) = tiers.worker.clone() else {
            let sandbox = self.clone();
            let owned = bytes.to_vec();
            let loaded = tokio::task::spawn_blocking(move || sandbox.load(&owned))
                .await
                .map_err(|e| LoadError::invalid(format!("the compile task failed: {e}")))?;
            drop(turn);
            return loaded;
        };
        if let Some(found) = self.remembered(&digest) {
            self.inner.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(found);
        }
        // Compiled before (a restart with a cache directory)?
        for tier in [Tier::Optimized, Tier::Quick] {
            if let Some((path, true)) = self.artifact_path(tier, &digest) {
                if path.is_file() {
                    if let Ok(loaded) = self.map_artifact(tier, path, true, &digest).await {
                        self.inner.disk_hits.fetch_add(1, Ordering::Relaxed);
                        if tier == Tier::Quick {
                            self.optimize_later(tenant, bytes, limits, &loaded);
                        } else {
                            loaded.settle();
                        }
                        self.remember(digest, loaded.clone());
                        return Ok(loaded);
                    }
                }
            }
        }
        let mut refusal = None;
        if tiers.quick.is_some() {
            match self
                .compile_to(&worker, bytes, Tier::Quick, limits, &digest, false)
                .await
            {
                Ok(loaded) => {
                    drop(turn);
                    self.optimize_later(tenant, bytes, limits, &loaded);
                    self.remember(digest, loaded.clone());
                    return Ok(loaded);
                }
                Err(Refusal::Limit(e) | Refusal::Policy(e)) => return Err(e),
                // Perhaps an instruction the quick compiler lacks: try the optimising one.
                Err(Refusal::Invalid(e)) => refusal = Some(e),
            }
        }
        match self
            .compile_to(&worker, bytes, Tier::Optimized, limits, &digest, false)
            .await
        {
            Ok(loaded) => {
                if let Some(e) = refusal {
                    tracing::info!(%digest, "the quick compiler refused a component the optimising one compiled: {}", e.message);
                }
                loaded.settle();
                self.remember(digest, loaded.clone());
                Ok(loaded)
            }
            Err(Refusal::Limit(e) | Refusal::Policy(e) | Refusal::Invalid(e)) => Err(e),
        }
    }

    /// Where `tier`'s artifact of `digest` goes, and whether it is kept (a
    /// cache directory) or deleted once mapped (the scratch directory, a
    /// fresh name each time).
    fn artifact_path(&self, tier: Tier, digest: &str) -> Option<(PathBuf, bool)> {
        let tiers = &self.inner.tiers;
        let disk = match tier {
            Tier::Optimized => self.inner.disk.as_ref(),
            Tier::Quick => tiers.quick.as_ref().and_then(|q| q.disk.as_ref()),
        };
        match (disk, &tiers.scratch) {
            (Some(d), _) => Some((d.path(digest), true)),
            (None, Some(s)) => Some((
                s.path().join(format!(
                    "{digest}-{}-{}.cwasm",
                    tier.as_str(),
                    SCRATCH_SEQ.fetch_add(1, Ordering::Relaxed)
                )),
                false,
            )),
            (None, None) => None,
        }
    }

    /// Compile in the worker, then map the artifact.
    async fn compile_to(
        &self,
        worker: &Worker,
        bytes: &[u8],
        tier: Tier,
        limits: &CompileLimits,
        digest: &str,
        background: bool,
    ) -> Result<LoadedComponent, Refusal> {
        let (path, keep) = self
            .artifact_path(tier, digest)
            .ok_or_else(|| Refusal::Invalid(gone()))?;
        worker
            .compile(bytes, tier, limits, &path, background)
            .await?;
        self.inner.compiled.fetch_add(1, Ordering::Relaxed);
        self.map_artifact(tier, path, keep, digest)
            .await
            .map_err(Refusal::Policy)
    }

    /// Deserialize an artifact the worker wrote, check its imports and link
    /// it (off the async workers).
    async fn map_artifact(
        &self,
        tier: Tier,
        path: PathBuf,
        keep: bool,
        digest: &str,
    ) -> Result<LoadedComponent, LoadError> {
        let sandbox = self.clone();
        let digest = digest.to_string();
        tokio::task::spawn_blocking(move || sandbox.map_artifact_now(tier, &path, keep, digest))
            .await
            .map_err(|e| LoadError::invalid(format!("the load task failed: {e}")))?
    }

    fn map_artifact_now(
        &self,
        tier: Tier,
        path: &Path,
        keep: bool,
        digest: String,
    ) -> Result<LoadedComponent, LoadError> {
        let inner = &self.inner;
        let (engine, linker) = match tier {
            Tier::Optimized => (&inner.engine, &inner.linker),
            Tier::Quick => {
                let q = inner.tiers.quick.as_ref().ok_or_else(gone)?;
                (&q.engine, &q.linker)
            }
        };
        // SAFETY: the file is named by the content digest (and, in a cache
        // directory, the engine's compatibility fingerprint); it is only ever
        // written by the compile worker (`compile::write_atomically`, by
        // rename) from `Engine::precompile_component` of these bytes with this
        // tier's compiler settings, or by `DiskCache::store`.
        let component = unsafe { wasmtime::component::Component::deserialize_file(engine, path) };
        if !keep {
            let _ = std::fs::remove_file(path);
        }
        let component = component.map_err(|e| {
            if keep {
                let _ = std::fs::remove_file(path);
            }
            LoadError::invalid(format!("cannot load the compiled component: {e:#}"))
        })?;
        let imports = loader::check_imports(engine, &component)?;
        let pre = loader::link(linker, &component)?;
        Ok(LoadedComponent::new(digest, imports, pre, tier))
    }

    /// Compile the optimised code behind the quick one and swap it in.
    fn optimize_later(
        &self,
        tenant: &str,
        bytes: &[u8],
        limits: &CompileLimits,
        loaded: &LoadedComponent,
    ) {
        let Some(worker) = self.inner.tiers.worker.clone() else {
            loaded.settle();
            return;
        };
        if !self.inner.tiers.optimize_behind {
            loaded.settle();
            return;
        }
        let sandbox = self.clone();
        let tenant = tenant.to_string();
        let bytes = bytes.to_vec();
        let limits = limits.clone();
        let loaded = loaded.clone();
        tokio::spawn(async move {
            let digest = loaded.digest().to_string();
            let Some(_turn) = sandbox.inner.tiers.background.turn(&tenant).await else {
                loaded.settle();
                return;
            };
            match sandbox
                .compile_to(&worker, &bytes, Tier::Optimized, &limits, &digest, true)
                .await
            {
                Ok(optimized) => loaded.upgrade(optimized.ready().pre.clone()),
                Err(Refusal::Limit(e) | Refusal::Policy(e) | Refusal::Invalid(e)) => {
                    tracing::warn!(
                        %digest,
                        "the optimised compile failed; the component keeps its quick code: {}",
                        e.message
                    )
                }
            }
            loaded.settle();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_left_by_a_dead_process_is_removed_and_a_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        // No process has this pid (above any pid_max).
        let dead = tmp.path().join(format!("{SCRATCH_PREFIX}999999999-abc"));
        let live = tmp
            .path()
            .join(format!("{SCRATCH_PREFIX}{}-def", std::process::id()));
        let other = tmp.path().join("sutra-compile-x");
        for d in [&dead, &live, &other] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("artifact"), b"x").unwrap();
        }
        remove_stale_scratch(tmp.path());
        assert!(!dead.exists());
        assert!(live.exists());
        assert!(other.exists(), "a name without a pid is not ours to judge");
    }
}
