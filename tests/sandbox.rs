//! The sandbox against WAT components: every outcome and code, the limits,
//! the import policy, the disk cache, and lanes that a spinning guest does
//! not block. (The example guests are covered in `sandbox_guests.rs`.)

mod common;

use common::{core_module, wat_component};
use serde_json::json;
use std::sync::OnceLock;
use std::time::Duration;
use sutra::codes::{Code, ErrorClass};
use sutra::sandbox::{
    Limits, LoadedComponent, LogLevel, Outcome, Sandbox, SandboxConfig, TaskContext,
};

fn sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| {
        Sandbox::new(SandboxConfig {
            pool_size: 8,
            ..SandboxConfig::default()
        })
        .unwrap()
    })
}

fn load(name: &str) -> LoadedComponent {
    sandbox()
        .load(&wat_component(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn ctx() -> TaskContext {
    TaskContext {
        tenant: "acme".into(),
        instance_id: "i-1".into(),
        task_id: "t-1".into(),
        attempt: 1,
        idempotency_key: "k-1".into(),
    }
}

async fn run(name: &str, input: &str, limits: &Limits) -> sutra::sandbox::AttemptReport {
    sandbox().attempt(&load(name), &ctx(), input, limits).await
}

fn code_of(outcome: &Outcome) -> &str {
    outcome.code().unwrap_or("completed")
}

/// The sandbox still runs a plain attempt to completion.
async fn assert_healthy() {
    let r = run("echo", r#"{"still":"fine"}"#, &Limits::default()).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"still": "fine"})
        }
    );
}

#[tokio::test]
async fn a_completed_attempt_returns_its_json_and_keeps_its_logs() {
    let r = run("ok", "{}", &Limits::default()).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"ok": true})
        }
    );
    assert_eq!(r.logs.len(), 1);
    assert_eq!(r.logs[0].level, LogLevel::Warn);
    assert_eq!(r.logs[0].message, "hello from wat");
    assert!(r.fuel_used > 0);
}

#[tokio::test]
async fn echo_passes_the_input_through() {
    let r = run("echo", r#"{"a":[1,2,3]}"#, &Limits::default()).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"a": [1, 2, 3]})
        }
    );
}

#[tokio::test]
async fn output_that_is_not_json_is_output_invalid() {
    let r = run("not_json", "{}", &Limits::default()).await;
    assert_eq!(code_of(&r.outcome), Code::TaskOutputInvalid.as_str());
    assert_healthy().await;
}

#[tokio::test]
async fn output_over_the_cap_is_output_invalid() {
    let big = format!("\"{}\"", "x".repeat(4096));
    let limits = Limits {
        output_bytes: 1024,
        ..Limits::default()
    };
    let r = run("echo", &big, &limits).await;
    assert_eq!(code_of(&r.outcome), Code::TaskOutputInvalid.as_str());
    assert_healthy().await;
}

#[tokio::test]
async fn a_failure_with_an_empty_code_is_task_failed_with_the_guests_class() {
    let r = run("failure", "{}", &Limits::default()).await;
    match r.outcome {
        Outcome::Failed {
            code,
            class,
            retryable,
            message,
            details,
        } => {
            assert_eq!(code, Code::TaskFailed.as_str());
            assert_eq!(class, ErrorClass::RateLimit);
            assert!(retryable);
            assert_eq!(message, "out of tokens");
            assert_eq!(details, Some(json!({"class": "rate_limit"})));
        }
        o => panic!("{o:?}"),
    }
}

#[tokio::test]
async fn a_business_error_keeps_the_guests_code() {
    let r = run("business", "{}", &Limits::default()).await;
    assert_eq!(
        r.outcome,
        Outcome::BusinessError {
            code: "ORDER_REJECTED".into(),
            message: "credit limit reached".into(),
            details: None
        }
    );
}

#[tokio::test]
async fn unreachable_is_a_trap_naming_its_kind() {
    let r = run("unreachable", "{}", &Limits::default()).await;
    match &r.outcome {
        Outcome::Failed {
            code,
            class,
            retryable,
            details,
            ..
        } => {
            assert_eq!(code, Code::TaskTrap.as_str());
            assert_eq!(*class, ErrorClass::Transient);
            assert!(*retryable);
            assert_eq!(details, &Some(json!({"trap": "UnreachableCodeReached"})));
        }
        o => panic!("{o:?}"),
    }
    assert_healthy().await;
}

#[tokio::test]
async fn division_by_zero_is_a_trap_naming_its_kind() {
    let r = run("div_zero", "{}", &Limits::default()).await;
    match &r.outcome {
        Outcome::Failed { code, details, .. } => {
            assert_eq!(code, Code::TaskTrap.as_str());
            assert_eq!(details, &Some(json!({"trap": "IntegerDivisionByZero"})));
        }
        o => panic!("{o:?}"),
    }
    assert_healthy().await;
}

#[tokio::test]
async fn unbounded_recursion_is_stack_overflow() {
    let r = run("recurse", "{}", &Limits::default()).await;
    assert_eq!(code_of(&r.outcome), Code::TaskStackOverflow.as_str());
    assert_healthy().await;
}

#[tokio::test]
async fn a_spinning_guest_ends_at_its_deadline() {
    let limits = Limits {
        deadline: Duration::from_millis(100),
        ..Limits::default()
    };
    let r = run("spin", "{}", &limits).await;
    assert_eq!(code_of(&r.outcome), Code::TaskDeadlineExceeded.as_str());
    match r.outcome {
        Outcome::Failed {
            class, retryable, ..
        } => {
            assert_eq!(class, ErrorClass::Timeout);
            assert!(retryable);
        }
        o => panic!("{o:?}"),
    }
    assert!(r.elapsed >= Duration::from_millis(100));
    assert_healthy().await;
}

#[tokio::test]
async fn a_spinning_guest_runs_out_of_fuel() {
    let limits = Limits {
        fuel: 1_000_000,
        ..Limits::default()
    };
    let r = run("spin", "{}", &limits).await;
    assert_eq!(code_of(&r.outcome), Code::TaskFuelExhausted.as_str());
    assert_eq!(r.fuel_used, 1_000_000);
    assert_healthy().await;
}

#[tokio::test]
async fn growing_past_the_memory_cap_is_memory_limit() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    let r = run("grow", "{}", &limits).await;
    match &r.outcome {
        Outcome::Failed { code, class, .. } => {
            assert_eq!(code, Code::TaskMemoryLimit.as_str());
            assert_eq!(*class, ErrorClass::ResourceExhausted);
        }
        o => panic!("{o:?}"),
    }
    assert_healthy().await;
}

/// Issue 16: a guest refused memory that keeps asking until its deadline is
/// DEADLINE_EXCEEDED (what ended it), not MEMORY_LIMIT.
#[tokio::test]
async fn retrying_a_refused_growth_until_the_deadline_is_deadline_exceeded() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let r = run("grow_loop", "{}", &limits).await;
    assert_eq!(code_of(&r.outcome), Code::TaskDeadlineExceeded.as_str());
    assert_healthy().await;
}

/// Issue 16: an output of 200 MB under a 1 GiB memory cap is an oversized
/// output (OUTPUT_INVALID, not retried: the same input answers the same
/// output), not a trap of the host-call copy.
#[tokio::test]
async fn a_200_mb_output_under_a_1_gib_cap_is_output_invalid_and_not_retryable() {
    let limits = Limits {
        memory_bytes: 1 << 30,
        ..Limits::default()
    };
    let r = run("huge_output", "{}", &limits).await;
    match &r.outcome {
        Outcome::Failed {
            code,
            retryable,
            message,
            ..
        } => {
            assert_eq!(code, Code::TaskOutputInvalid.as_str(), "{message}");
            assert!(!retryable);
            assert!(message.contains("200000000 bytes"), "{message}");
        }
        o => panic!("{o:?}"),
    }
    assert_healthy().await;
}

#[tokio::test]
async fn growing_within_the_memory_cap_is_allowed() {
    let limits = Limits {
        memory_bytes: 2 << 30,
        ..Limits::default()
    };
    let r = run("grow", "{}", &limits).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"ok": true})
        }
    );
}

#[tokio::test]
async fn a_component_importing_a_forbidden_interface_is_refused_at_load() {
    let err = sandbox().load(&wat_component("forbidden")).unwrap_err();
    assert_eq!(err.code, Code::TaskModuleInvalid);
    assert!(
        err.message.contains("wasi:http/outgoing-handler@0.2.0"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_core_module_or_garbage_is_refused_at_load() {
    let err = sandbox().load(&core_module()).unwrap_err();
    assert_eq!(err.code, Code::TaskModuleInvalid);
    assert!(err.message.contains("not a component"), "{}", err.message);
    let err = sandbox().load(b"\0asm\x0d\0\x01\0garbage").unwrap_err();
    assert_eq!(err.code, Code::TaskModuleInvalid);
    assert!(err.message.contains("does not validate"), "{}", err.message);
}

#[tokio::test]
async fn loading_the_same_bytes_twice_is_answered_from_memory() {
    let sb = Sandbox::new(SandboxConfig {
        pool_size: 1,
        ..SandboxConfig::default()
    })
    .unwrap();
    let bytes = wat_component("ok");
    let a = sb.load(&bytes).unwrap();
    let b = sb.load(&bytes).unwrap();
    assert_eq!(a.digest(), b.digest());
    assert_eq!(a.digest().len(), 64);
    let stats = sb.stats();
    assert_eq!((stats.compiled, stats.memory_hits), (1, 1));
}

#[tokio::test]
async fn a_fresh_sandbox_loads_from_the_disk_cache_without_compiling() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SandboxConfig {
        pool_size: 1,
        cache_dir: Some(dir.path().to_path_buf()),
        ..SandboxConfig::default()
    };
    let bytes = wat_component("ok");

    let first = Sandbox::new(cfg.clone()).unwrap();
    first.load(&bytes).unwrap();
    assert_eq!(first.stats().compiled, 1);
    drop(first);

    let second = Sandbox::new(cfg.clone()).unwrap();
    let loaded = second.load(&bytes).unwrap();
    assert_eq!(second.stats().compiled, 0);
    assert_eq!(second.stats().disk_hits, 1);
    let r = second
        .attempt(&loaded, &ctx(), "{}", &Limits::default())
        .await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"ok": true})
        }
    );

    drop((loaded, second));

    // A damaged artifact is dropped and the component compiled again. (It is
    // replaced by rename, as the cache itself writes: rewriting a mapped
    // artifact in place is outside the cache's contract.)
    let cached: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(cached.len(), 1);
    let tmp = dir.path().join("damaged.tmp");
    std::fs::write(&tmp, b"not an artifact").unwrap();
    std::fs::rename(&tmp, &cached[0]).unwrap();
    let third = Sandbox::new(cfg).unwrap();
    third.load(&bytes).unwrap();
    assert_eq!((third.stats().compiled, third.stats().disk_hits), (1, 0));
}

#[tokio::test]
async fn refused_components_are_not_cached_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SandboxConfig {
        pool_size: 1,
        cache_dir: Some(dir.path().to_path_buf()),
        ..SandboxConfig::default()
    };
    let sb = Sandbox::new(cfg).unwrap();
    assert!(sb.load(&wat_component("forbidden")).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// Spawns an attempt of the `spin` component (until `deadline`) and returns
/// once it holds a pool slot.
async fn spin_in_a_slot(
    sb: &Sandbox,
    deadline: Duration,
) -> tokio::task::JoinHandle<sutra::sandbox::AttemptReport> {
    let spin = sb.load(&wat_component("spin")).unwrap();
    let spinner = {
        let sb = sb.clone();
        tokio::spawn(async move {
            let limits = Limits {
                deadline,
                ..Limits::default()
            };
            sb.attempt(&spin, &ctx(), "{}", &limits).await
        })
    };
    // Once the spinner holds its slot, this task only runs again when the
    // spinner yields from inside the guest (or when it has ended, which the
    // assertion below would catch).
    for _ in 0..1000 {
        if sb.running() > 0 || spinner.is_finished() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(sb.running(), 1, "the spinner should hold a slot");
    spinner
}

/// On a single-threaded runtime, an attempt completes while another spins:
/// the spinner yields to tokio at every epoch tick.
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_guest_does_not_block_the_lane() {
    let sb = Sandbox::new(SandboxConfig {
        pool_size: 2,
        ..SandboxConfig::default()
    })
    .unwrap();
    let echo = sb.load(&wat_component("echo")).unwrap();
    let spinner = spin_in_a_slot(&sb, Duration::from_secs(20)).await;
    let r = sb
        .attempt(&echo, &ctx(), r#"{"lane":"free"}"#, &Limits::default())
        .await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"lane": "free"})
        }
    );
    assert!(
        !spinner.is_finished(),
        "the spinner should still be spinning"
    );
    assert_eq!(sb.running(), 1);

    // Cancelling a running attempt frees its slot and leaves the sandbox healthy.
    spinner.abort();
    assert!(spinner.await.unwrap_err().is_cancelled());
    assert_eq!(sb.running(), 0);
    let r = sb.attempt(&echo, &ctx(), "[]", &Limits::default()).await;
    assert_eq!(r.outcome, Outcome::Completed { output: json!([]) });
}

#[test]
fn attempt_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let sb = sandbox();
    let c = load("ok");
    let limits = Limits::default();
    let ctx = ctx();
    let fut = sb.attempt(&c, &ctx, "{}", &limits);
    assert_send(&fut);
}

#[tokio::test]
async fn extreme_limits_do_not_panic() {
    let limits = Limits {
        deadline: Duration::MAX,
        fuel: u64::MAX,
        memory_bytes: u64::MAX,
        ..Limits::default()
    };
    let r = run("echo", "{}", &limits).await;
    assert_eq!(r.outcome, Outcome::Completed { output: json!({}) });
    let limits = Limits {
        fuel: 0,
        capture_bytes: 0,
        output_bytes: 0,
        ..Limits::default()
    };
    let r = run("ok", "{}", &limits).await;
    assert_eq!(code_of(&r.outcome), Code::TaskFuelExhausted.as_str());
    let limits = Limits {
        deadline: Duration::ZERO,
        ..Limits::default()
    };
    let r = run("spin", "{}", &limits).await;
    assert_eq!(code_of(&r.outcome), Code::TaskDeadlineExceeded.as_str());
}

/// `warm` (ahead of a retry's instant) never waits for a pool slot: with the
/// only slot held by a spinning attempt it returns at once, and the next
/// attempt of the warmed component is unaffected.
#[tokio::test(flavor = "current_thread")]
async fn warming_never_waits_for_a_slot() {
    let sb = Sandbox::new(SandboxConfig {
        pool_size: 1,
        ..SandboxConfig::default()
    })
    .unwrap();
    let echo = sb.load(&wat_component("echo")).unwrap();
    let spinner = spin_in_a_slot(&sb, Duration::from_millis(500)).await;
    sb.warm(&echo).await;
    assert_eq!(
        sb.running(),
        1,
        "warm returned while the slot was still taken"
    );
    let spun = spinner.await.unwrap();
    assert_eq!(
        spun.outcome.code(),
        Some(Code::TaskDeadlineExceeded.as_str())
    );
    sb.warm(&echo).await;
    let r = sb
        .attempt(&echo, &ctx(), r#"{"warm":true}"#, &Limits::default())
        .await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"warm": true})
        }
    );
}
