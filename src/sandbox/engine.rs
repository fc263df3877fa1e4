//! The one wasmtime engine configuration, and the epoch ticker.
//!
//! Invariant: every engine Sutra runs guests on is built by [`build_engine`]:
//! component model, async, fuel, epoch interruption and the pooling allocator
//! sized from [`SandboxConfig`], on one of two compilers ([`Tier`]). The
//! compile worker's engine ([`compile_engine`]) is the same configuration
//! without the pooling allocator (which reserves address space and is not
//! part of the compatibility hash), so its artifacts load into the sandbox's
//! engine of the same tier. While a sandbox lives, an [`EpochTicker`] per
//! engine advances its epoch every `epoch_tick`, so a spinning guest reaches
//! its epoch deadline, yields to tokio and has its wall-clock deadline checked.

use super::SandboxConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
    RegallocAlgorithm, Strategy,
};

/// Which compiler an engine uses.
///
/// A freshly deployed component is compiled `Quick` (Winch, wasmtime's
/// baseline compiler: one pass, no optimisation, ~10× faster to compile) so
/// its first attempt runs soon; the `Optimized` (Cranelift) artifact is
/// compiled behind it and swapped in when ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    Quick,
    Optimized,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Quick => "quick",
            Tier::Optimized => "optimized",
        }
    }

    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "quick" => Some(Tier::Quick),
            "optimized" => Some(Tier::Optimized),
            _ => None,
        }
    }
}

/// The compiler settings every engine of `tier` shares (no allocator).
fn base_config(tier: Tier) -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        .memory_init_cow(true)
        .table_lazy_init(true)
        .strategy(match tier {
            Tier::Quick => Strategy::Winch,
            Tier::Optimized => Strategy::Cranelift,
        });
    if tier == Tier::Quick {
        // Winch compiles the functions; Cranelift still compiles the
        // trampolines of every escaping function (thousands in a language
        // runtime's table): a third of a quick compile at its default settings.
        config
            .cranelift_opt_level(OptLevel::None)
            .cranelift_regalloc_algorithm(RegallocAlgorithm::SinglePass);
    }
    config
}

/// The engine of the compile worker: `tier`'s settings, on-demand allocation
/// (it never instantiates anything).
pub(crate) fn compile_engine(tier: Tier) -> wasmtime::Result<Engine> {
    Engine::new(&base_config(tier))
}

/// Core instances one component may hold (Rust guests use a handful; language
/// runtimes such as componentize-py use a few dozen).
pub(crate) const CORE_INSTANCES_PER_COMPONENT: u32 = 64;
/// Linear memories one component may hold.
pub(crate) const MEMORIES_PER_COMPONENT: u32 = 4;
/// Tables one component may hold.
pub(crate) const TABLES_PER_COMPONENT: u32 = 32;

/// Build an engine the sandbox runs attempts on.
pub(crate) fn build_engine(cfg: &SandboxConfig, tier: Tier) -> wasmtime::Result<Engine> {
    let pool_size = cfg.pool_size.max(1);
    // Idle warm instances (reuse.rs) hold allocator slots beyond the live ones.
    let warm = u32::try_from(cfg.warm_capacity).unwrap_or(u32::MAX);
    let instances = pool_size.saturating_add(warm);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
        .total_memories(instances.saturating_mul(MEMORIES_PER_COMPONENT))
        .max_memories_per_component(MEMORIES_PER_COMPONENT)
        .total_tables(instances.saturating_mul(TABLES_PER_COMPONENT))
        .max_tables_per_component(TABLES_PER_COMPONENT)
        .max_tables_per_module(4)
        .table_elements(cfg.max_table_elements)
        .total_stacks(pool_size)
        .max_memory_size(usize::try_from(cfg.max_memory_bytes).unwrap_or(usize::MAX))
        .max_unused_warm_slots(pool_size)
        .linear_memory_keep_resident(cfg.keep_resident_bytes)
        .table_keep_resident(cfg.table_keep_resident_bytes)
        .pagemap_scan(if cfg.pagemap_scan {
            Enabled::Auto
        } else {
            Enabled::No
        });

    let mut config = base_config(tier);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config)
}

/// A thread advancing an engine's epoch; stops when dropped (or when the
/// engine is gone).
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub(crate) fn start(
        engine: &Engine,
        tick: std::time::Duration,
    ) -> std::io::Result<EpochTicker> {
        let stop = Arc::new(AtomicBool::new(false));
        let weak = engine.weak();
        let flag = stop.clone();
        let tick = tick.max(std::time::Duration::from_micros(100));
        std::thread::Builder::new()
            .name("sutra-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })?;
        Ok(EpochTicker { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::cache::engine_fingerprint;

    #[test]
    fn the_workers_artifacts_fit_the_sandboxs_engine_of_the_same_tier() {
        let cfg = SandboxConfig {
            pool_size: 1,
            ..SandboxConfig::default()
        };
        for tier in [Tier::Quick, Tier::Optimized] {
            let sandbox = build_engine(&cfg, tier).unwrap();
            let worker = compile_engine(tier).unwrap();
            assert_eq!(
                engine_fingerprint(&sandbox),
                engine_fingerprint(&worker),
                "{tier:?}: the pooling allocator is not part of the compatibility hash"
            );
            let artifact = worker
                .precompile_component(&wat::parse_str("(component (core module (func)))").unwrap())
                .unwrap();
            // SAFETY: the artifact was produced just above by a compatible engine.
            unsafe { wasmtime::component::Component::deserialize(&sandbox, &artifact) }.unwrap();
        }
        assert_ne!(
            engine_fingerprint(&compile_engine(Tier::Quick).unwrap()),
            engine_fingerprint(&compile_engine(Tier::Optimized).unwrap()),
            "a quick artifact is never taken for an optimised one"
        );
    }
}
