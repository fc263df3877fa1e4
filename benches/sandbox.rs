//! Sandbox benchmarks: per-attempt overhead, two-lane throughput, and load
//! time (disk cache vs fresh compile). Run with `cargo bench --bench sandbox`;
//! results and what was tried are in `benches/README.md` ("Sandbox").
//!
//! Needs `target/guests/chaos.wasm` (built by `guest-examples/build.sh`, which
//! the shared test helper runs once). The big guests (`py-task`, `js-task`)
//! are compiled once and cached under `target/bench-sandbox-cache/`.

#[path = "sandbox/bare.rs"]
mod bare;
#[path = "../tests/common/mod.rs"]
mod common;

use divan::counter::ItemsCount;
use divan::Bencher;
use std::sync::OnceLock;
use sutra::sandbox::{Limits, LoadedComponent, Reuse, Sandbox, SandboxConfig, Stop, TaskContext};

fn main() {
    divan::main();
}

const ECHO: &str = r#"{"do":"echo","order":{"id":42,"lines":[1,2,3]}}"#;

fn ctx() -> TaskContext {
    TaskContext {
        tenant: "bench".into(),
        instance_id: "i".into(),
        task_id: "t".into(),
        attempt: 1,
        idempotency_key: "k".into(),
    }
}

/// `target/guests/chaos.wasm`, or the file named by `SUTRA_BENCH_CHAOS` (to
/// compare two builds of the guest).
fn chaos_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| match std::env::var_os("SUTRA_BENCH_CHAOS") {
        Some(path) => std::fs::read(&path)
            .unwrap_or_else(|e| panic!("SUTRA_BENCH_CHAOS={}: {e}", path.to_string_lossy())),
        None => common::guest_bytes("chaos"),
    })
}

/// Where the compiled big guests are kept between bench runs (a fresh
/// Cranelift compile of `py-task` costs ~20 s of CPU).
fn bench_cache_dir() -> std::path::PathBuf {
    common::root().join("target/bench-sandbox-cache")
}

fn sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| {
        Sandbox::new(SandboxConfig {
            pool_size: 8,
            cache_dir: Some(bench_cache_dir()),
            ..SandboxConfig::default()
        })
        .unwrap()
    })
}

fn chaos() -> LoadedComponent {
    sandbox().load(chaos_bytes()).unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One `chaos` echo attempt: new store + instantiate + call + drop.
#[divan::bench]
fn attempt_chaos_echo(bencher: Bencher) {
    let rt = current_thread();
    let (sb, c, ctx, limits) = (sandbox(), chaos(), ctx(), Limits::default());
    let r = rt.block_on(sb.attempt(&c, &ctx, ECHO, &limits));
    assert!(r.outcome.is_completed(), "{:?}", r.outcome);
    bencher.bench_local(|| rt.block_on(sb.attempt(&c, &ctx, ECHO, &limits)));
}

/// A language guest (`py-task`, `js-task`) built as the tests build it.
fn big_guest(name: &str) -> LoadedComponent {
    sandbox().load(&common::guest_bytes(name)).unwrap()
}

fn attempt_big_echo(bencher: Bencher, name: &str) {
    let rt = current_thread();
    let (sb, c, ctx, limits) = (sandbox(), big_guest(name), ctx(), Limits::default());
    let r = rt.block_on(sb.attempt(&c, &ctx, ECHO, &limits));
    assert!(r.outcome.is_completed(), "{name}: {:?}", r.outcome);
    bencher.bench_local(|| rt.block_on(sb.attempt(&c, &ctx, ECHO, &limits)));
}

/// One `py-task` (componentize-py) echo attempt, same harness as
/// `attempt_chaos_echo`.
#[divan::bench]
fn attempt_py_echo(bencher: Bencher) {
    attempt_big_echo(bencher, "py-task");
}

/// One `js-task` (componentize-js) echo attempt, same harness as
/// `attempt_chaos_echo`.
#[divan::bench]
fn attempt_js_echo(bencher: Bencher) {
    attempt_big_echo(bencher, "js-task");
}

/// One echo attempt of a module deployed reusable (`Reuse::default()`: an
/// instance serves 1 + 1,000 attempts): after the first, the attempt runs on
/// the tenant's warm instance (refuel, new deadline, new captures, call).
fn warm_echo(bencher: Bencher, c: LoadedComponent) {
    let rt = current_thread();
    let (sb, ctx, limits) = (sandbox(), ctx(), Limits::default());
    let reuse = Some(Reuse::default());
    let stop = Stop::default();
    let run = || sb.attempt_reusing(&c, &ctx, ECHO, &limits, &stop, None, reuse);
    let r = rt.block_on(run());
    assert!(r.outcome.is_completed(), "{:?}", r.outcome);
    let before = sb.warm_stats().reused;
    bencher.bench_local(|| rt.block_on(run()));
    assert!(sb.warm_stats().reused > before, "no attempt was reused");
}

/// `attempt_py_echo` with reuse (issue 36 target: ≤ 100 µs).
#[divan::bench]
fn warm_py_echo(bencher: Bencher) {
    warm_echo(bencher, big_guest("py-task"));
}

/// `attempt_js_echo` with reuse (issue 36 target: ≤ 80 µs).
#[divan::bench]
fn warm_js_echo(bencher: Bencher) {
    warm_echo(bencher, big_guest("js-task"));
}

/// `attempt_chaos_echo` with reuse.
#[divan::bench]
fn warm_chaos_echo(bencher: Bencher) {
    warm_echo(bencher, chaos());
}

/// The floor: a WAT echo with no WASI imports at all.
#[divan::bench]
fn attempt_wat_echo(bencher: Bencher) {
    let rt = current_thread();
    let sb = sandbox();
    let c = sb.load(&common::wat_component("echo")).unwrap();
    let (ctx, limits) = (ctx(), Limits::default());
    bencher.bench_local(|| rt.block_on(sb.attempt(&c, &ctx, "{}", &limits)));
}

const PER_LANE: usize = 100;

/// Attempts per second with two lanes (two tasks, each running attempts back
/// to back) on a 2-worker runtime.
#[divan::bench(sample_count = 20)]
fn two_lanes_chaos_echo(bencher: Bencher) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (sb, c) = (sandbox().clone(), chaos());
    bencher
        .counter(ItemsCount::new(2 * PER_LANE))
        .bench_local(|| {
            rt.block_on(async {
                let lanes: Vec<_> = (0..2)
                    .map(|_| {
                        let (sb, c) = (sb.clone(), c.clone());
                        tokio::spawn(async move {
                            let (ctx, limits) = (ctx(), Limits::default());
                            for _ in 0..PER_LANE {
                                let r = sb.attempt(&c, &ctx, ECHO, &limits).await;
                                debug_assert!(r.outcome.is_completed());
                            }
                        })
                    })
                    .collect();
                for lane in lanes {
                    lane.await.unwrap();
                }
            })
        });
}

fn cache_dir() -> &'static std::path::Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        // Fill the cache once.
        let sb = Sandbox::new(SandboxConfig {
            pool_size: 1,
            cache_dir: Some(dir.path().to_path_buf()),
            ..SandboxConfig::default()
        })
        .unwrap();
        sb.load(chaos_bytes()).unwrap();
        dir
    })
    .path()
}

/// Loading `chaos` into a fresh sandbox from the disk cache (deserialize +
/// import check + link).
#[divan::bench(sample_count = 30, sample_size = 1)]
fn load_chaos_from_disk_cache(bencher: Bencher) {
    let dir = cache_dir().to_path_buf();
    bencher
        .with_inputs(|| {
            Sandbox::new(SandboxConfig {
                pool_size: 1,
                cache_dir: Some(dir.clone()),
                ..SandboxConfig::default()
            })
            .unwrap()
        })
        .bench_local_values(|sb| {
            sb.load(chaos_bytes()).unwrap();
            assert_eq!(sb.stats().compiled, 0);
            sb
        });
}

/// Loading `chaos` into a fresh sandbox with no cache: a full compile.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn load_chaos_fresh_compile(bencher: Bencher) {
    bencher
        .with_inputs(|| {
            Sandbox::new(SandboxConfig {
                pool_size: 1,
                ..SandboxConfig::default()
            })
            .unwrap()
        })
        .bench_local_values(|sb| {
            sb.load(chaos_bytes()).unwrap();
            sb
        });
}

/// Loading bytes already loaded: the in-memory map (a sha256 of the bytes).
#[divan::bench]
fn load_chaos_from_memory(bencher: Bencher) {
    let sb = sandbox();
    sb.load(chaos_bytes()).unwrap();
    bencher.bench_local(|| sb.load(chaos_bytes()).unwrap());
}

/// What slot reuse costs: per-attempt overhead with (memory keep-resident
/// bytes, table keep-resident bytes, PAGEMAP_SCAN). The last is the default.
#[divan::bench(args = [(0, 0, false), (1 << 20, 64 << 10, false), (0, 0, true), (4 << 20, 64 << 10, true)])]
fn slot_reuse_chaos_echo(bencher: Bencher, (mem, table, scan): (usize, usize, bool)) {
    let rt = current_thread();
    let sb = Sandbox::new(SandboxConfig {
        pool_size: 8,
        keep_resident_bytes: mem,
        table_keep_resident_bytes: table,
        pagemap_scan: scan,
        ..SandboxConfig::default()
    })
    .unwrap();
    let c = sb.load(chaos_bytes()).unwrap();
    let (ctx, limits) = (ctx(), Limits::default());
    bencher.bench_local(|| rt.block_on(sb.attempt(&c, &ctx, ECHO, &limits)));
}

/// The floor of wasmtime for a big guest's echo attempt: a fresh store,
/// instantiate, call, drop, with no Sutra code around it (`bare.rs`), on the
/// sandbox's engine settings and on wasmtime's defaults.
fn bare_echo(bencher: Bencher, name: &str, flavour: bare::Flavour) {
    let rt = current_thread();
    let floor = bare::Floor::new(&common::guest_bytes(name), flavour, &bench_cache_dir());
    assert!(rt.block_on(floor.attempt(ECHO)), "{name}: not ok");
    bencher.bench_local(|| rt.block_on(floor.attempt(ECHO)));
}

#[divan::bench(args = [bare::Flavour::Sutra, bare::Flavour::SutraTicking, bare::Flavour::Defaults])]
fn bare_py_echo(bencher: Bencher, flavour: bare::Flavour) {
    bare_echo(bencher, "py-task", flavour);
}

#[divan::bench(args = [bare::Flavour::Sutra, bare::Flavour::SutraTicking, bare::Flavour::Defaults])]
fn bare_js_echo(bencher: Bencher, flavour: bare::Flavour) {
    bare_echo(bencher, "js-task", flavour);
}

/// What instantiating a big guest alone costs on the sandbox's engine
/// settings: a fresh store, instantiate, drop, with no call (`bare.rs`).
fn bare_instantiate(bencher: Bencher, name: &str) {
    let rt = current_thread();
    let floor = bare::Floor::new(
        &common::guest_bytes(name),
        bare::Flavour::Sutra,
        &bench_cache_dir(),
    );
    bencher.bench_local(|| rt.block_on(floor.instantiate()));
}

#[divan::bench]
fn bare_py_instantiate(bencher: Bencher) {
    bare_instantiate(bencher, "py-task");
}

#[divan::bench]
fn bare_js_instantiate(bencher: Bencher) {
    bare_instantiate(bencher, "js-task");
}

/// The guest's own work per call: `run` called again and again on one
/// instance (never done by the sandbox, which instantiates per attempt).
fn call_only(bencher: Bencher, name: &str) {
    let rt = current_thread();
    let floor = bare::Floor::new(
        &common::guest_bytes(name),
        bare::Flavour::Sutra,
        &bench_cache_dir(),
    );
    let (mut store, task) = rt.block_on(floor.instance());
    let ctx = bare::context();
    bencher.bench_local(|| {
        let r = rt.block_on(task.call_run(&mut store, &ctx, ECHO)).unwrap();
        assert!(r.is_ok());
    });
}

#[divan::bench]
fn call_only_py_echo(bencher: Bencher) {
    call_only(bencher, "py-task");
}

#[divan::bench]
fn call_only_js_echo(bencher: Bencher) {
    call_only(bencher, "js-task");
}

/// Slot reuse for a big guest: `py-task` echo with (memory keep-resident
/// bytes, table keep-resident bytes, PAGEMAP_SCAN). The third is the default.
#[divan::bench(args = [(0, 0, false), (4 << 20, 64 << 10, false), (4 << 20, 64 << 10, true), (64 << 20, 1 << 20, true)])]
fn slot_reuse_py_echo(bencher: Bencher, (mem, table, scan): (usize, usize, bool)) {
    let rt = current_thread();
    let sb = Sandbox::new(SandboxConfig {
        pool_size: 8,
        keep_resident_bytes: mem,
        table_keep_resident_bytes: table,
        pagemap_scan: scan,
        cache_dir: Some(bench_cache_dir()),
        ..SandboxConfig::default()
    })
    .unwrap();
    let c = sb.load(&common::guest_bytes("py-task")).unwrap();
    let (ctx, limits) = (ctx(), Limits::default());
    bencher.bench_local(|| rt.block_on(sb.attempt(&c, &ctx, ECHO, &limits)));
}
