//! Module compilation (issue 17): upload → first attempt, and the steady
//! per-attempt cost, on the quick (Winch) and optimised (Cranelift) tiers,
//! for the Python and JavaScript example guests. Run with
//! `cargo bench --bench compile` (or `--profile dev`: the guests' code is
//! compiled by wasmtime either way); figures in benches/README.md
//! ("Module compilation (issue 17)").
//!
//! Needs `target/guests/{py-task,js-task}.wasm` (guest-examples/build.sh
//! py-task js-task) and the `sutra` binary (the compile worker).

use std::time::{Duration, Instant};
use sutra::sandbox::{
    CompileLimits, Limits, LoadedComponent, Sandbox, SandboxConfig, TaskContext, Tier,
};

const INPUT: &str = r#"{"do":"echo"}"#;
const ATTEMPTS: usize = 200;

fn ctx() -> TaskContext {
    TaskContext {
        tenant: "bench".into(),
        instance_id: "i".into(),
        task_id: "t".into(),
        attempt: 1,
        idempotency_key: "k".into(),
    }
}

fn sandbox(tiered: bool, worker: bool) -> Sandbox {
    Sandbox::new(SandboxConfig {
        pool_size: 2,
        compile_worker: worker.then(|| env!("CARGO_BIN_EXE_sutra").into()),
        tiered,
        ..SandboxConfig::default()
    })
    .unwrap()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn steady(sb: &Sandbox, c: &LoadedComponent) -> Duration {
    let limits = Limits::default();
    let mut times = Vec::new();
    for _ in 0..ATTEMPTS {
        let t = Instant::now();
        let r = sb.attempt(c, &ctx(), INPUT, &limits).await;
        assert!(r.outcome.is_completed(), "{:?}", r.outcome);
        times.push(t.elapsed());
    }
    median(times)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    for guest in ["js-task", "py-task"] {
        if only.as_deref().is_some_and(|o| o != guest) {
            continue;
        }
        let path = root.join("target/guests").join(format!("{guest}.wasm"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run guest-examples/build.sh {guest})",
                path.display()
            )
        });
        let limits = CompileLimits::default();
        rt.block_on(async {
            for (label, tiered) in [("optimised only (before)", false), ("tiered (after)", true)] {
                let sb = sandbox(tiered, true);
                let t = Instant::now();
                let c = sb.load_for("bench", &bytes, &limits).await.unwrap();
                let loaded = t.elapsed();
                let r = sb.attempt(&c, &ctx(), INPUT, &Limits::default()).await;
                assert!(r.outcome.is_completed(), "{:?}", r.outcome);
                let first = t.elapsed();
                let tier = c.tier();
                let on_first = steady(&sb, &c).await;
                println!(
                    "{guest} {label}: upload→loaded {} , →first attempt done {} ({tier:?}); steady attempt {} on {tier:?}",
                    ms(loaded), ms(first), ms(on_first)
                );
                if tier == Tier::Quick {
                    c.settled().await;
                    let optimised = t.elapsed();
                    let after = steady(&sb, &c).await;
                    println!(
                        "{guest} {label}: optimised code in after {} ; steady attempt {} on {:?}",
                        ms(optimised), ms(after), c.tier()
                    );
                }
            }
        });
    }
}
