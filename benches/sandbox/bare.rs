//! The floor of wasmtime itself for a guest: the same component instantiated
//! and called with no Sutra code around it (no slot or lane gate, no limiter,
//! no call hook, no deadline, no output classification), on two engines:
//!
//! - `sutra`: the sandbox's engine settings (Cranelift, fuel, epochs, CoW
//!   images, lazy tables, the pooling allocator as `SandboxConfig::default()`
//!   sizes it, with 8 slots as in `sandbox()`), copied from
//!   `src/sandbox/engine.rs`;
//! - `sutra_ticking`: the same, plus what the sandbox adds to every store
//!   of its own: an epoch ticker thread advancing the epoch every 2 ms and an
//!   epoch deadline of one tick whose callback yields to tokio;
//! - `defaults`: wasmtime's defaults (on-demand allocation, no fuel, no
//!   epochs), component model and async on.
//!
//! Compiled artifacts are kept under `target/bench-sandbox-cache/` keyed by
//! the bytes and the engine's compatibility hash.

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::Path;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store,
    UpdateDeadline,
};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

wasmtime::component::bindgen!({
    path: "wit/task.wit",
    world: "task",
    imports: { default: async },
    exports: { default: async },
});

use self::sutra::task::host::Level;

/// Which engine a floor runs on.
#[derive(Debug, Clone, Copy)]
pub enum Flavour {
    /// The sandbox's engine settings.
    Sutra,
    /// The sandbox's engine settings, an epoch ticker thread (2 ms) and a
    /// one-tick epoch deadline that yields.
    SutraTicking,
    /// wasmtime's defaults.
    Defaults,
}

const POOL: u32 = 8;

fn config(flavour: Flavour) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    if let Flavour::Sutra | Flavour::SutraTicking = flavour {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(POOL)
            .total_core_instances(POOL * 64)
            .max_core_instances_per_component(64)
            .total_memories(POOL * 4)
            .max_memories_per_component(4)
            .total_tables(POOL * 32)
            .max_tables_per_component(32)
            .max_tables_per_module(4)
            .table_elements(100_000)
            .total_stacks(POOL)
            .max_memory_size(4 << 30)
            .max_unused_warm_slots(POOL)
            .linear_memory_keep_resident(4 << 20)
            .table_keep_resident(64 << 10)
            .pagemap_scan(Enabled::Auto);
        config
            .consume_fuel(true)
            .epoch_interruption(true)
            .memory_init_cow(true)
            .table_lazy_init(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// What a guest's store holds: a WASI context (built on first use, as the
/// sandbox does) and nothing else.
pub struct Bare {
    wasi: Option<WasiCtx>,
    table: ResourceTable,
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: self
                .wasi
                .get_or_insert_with(|| WasiCtxBuilder::new().build()),
            table: &mut self.table,
        }
    }
}

impl self::sutra::task::types::Host for Bare {}

impl self::sutra::task::host::Host for Bare {
    async fn log(&mut self, _level: Level, _message: String) {}
}

/// A component linked on an engine of `flavour`.
pub struct Floor {
    pre: TaskPre<Bare>,
    flavour: Flavour,
}

impl Floor {
    pub fn new(bytes: &[u8], flavour: Flavour, cache_dir: &Path) -> Floor {
        let engine = Engine::new(&config(flavour)).unwrap();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let digest = Sha256::digest(bytes);
        let file = cache_dir.join(format!(
            "bare-{}-{:016x}.cwasm",
            hex::encode(&digest[..12]),
            hasher.finish()
        ));
        let component = if file.is_file() {
            // SAFETY: written just below by this same engine configuration
            // (the file name carries its compatibility hash).
            unsafe { Component::deserialize_file(&engine, &file) }.unwrap()
        } else {
            let c = Component::new(&engine, bytes).unwrap();
            std::fs::create_dir_all(cache_dir).unwrap();
            let tmp = file.with_extension("tmp");
            std::fs::write(&tmp, c.serialize().unwrap()).unwrap();
            std::fs::rename(&tmp, &file).unwrap();
            c
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        Task::add_to_linker::<Bare, HasSelf<Bare>>(&mut linker, |s| s).unwrap();
        let pre = TaskPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
        if let Flavour::SutraTicking = flavour {
            let weak = engine.weak();
            std::thread::spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_millis(2));
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            });
        }
        Floor { pre, flavour }
    }

    pub fn store(&self) -> Store<Bare> {
        let mut store = Store::new(
            self.pre.engine(),
            Bare {
                wasi: None,
                table: ResourceTable::new(),
            },
        );
        match self.flavour {
            Flavour::Sutra => {
                store.set_fuel(u64::MAX).unwrap();
                store.set_epoch_deadline(u64::MAX / 2);
            }
            Flavour::SutraTicking => {
                store.set_fuel(u64::MAX).unwrap();
                store.set_epoch_deadline(1);
                store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
            }
            Flavour::Defaults => {}
        }
        store
    }

    /// A fresh store, instantiate, call `run` once, drop: one attempt's
    /// worth of wasmtime. Returns whether `run` returned `ok`.
    pub async fn attempt(&self, input: &str) -> bool {
        let mut store = self.store();
        let task = self.pre.instantiate_async(&mut store).await.unwrap();
        let r = task.call_run(&mut store, &context(), input).await.unwrap();
        r.is_ok()
    }

    /// A fresh store, instantiate, drop, never calling `run`: what
    /// instantiation alone costs (start functions included).
    pub async fn instantiate(&self) {
        let mut store = self.store();
        self.pre.instantiate_async(&mut store).await.unwrap();
    }

    /// An instance to call `run` on again and again (the guest's own work
    /// per call, without instantiation).
    pub async fn instance(&self) -> (Store<Bare>, Task) {
        let mut store = self.store();
        let task = self.pre.instantiate_async(&mut store).await.unwrap();
        (store, task)
    }
}

pub fn context() -> Context {
    Context {
        tenant: "bench".into(),
        instance_id: "i".into(),
        task_id: "t".into(),
        attempt: 1,
        idempotency_key: "k".into(),
    }
}
