//! The sandbox against the example guests built by `guest-examples/build.sh`:
//! every action of `chaos` (outcomes, codes, limits, deny-all WASI, lanes),
//! and the Python and JavaScript guests.

mod common;

use serde_json::json;
use std::sync::OnceLock;
use std::time::Duration;
use sutra::codes::{Code, ErrorClass};
use sutra::sandbox::{
    AttemptReport, Limits, LoadedComponent, Outcome, Sandbox, SandboxConfig, TaskContext,
};

/// One sandbox for the file, caching compiled guests under `target/` so the
/// big language guests compile once per checkout rather than once per run.
fn sandbox() -> &'static Sandbox {
    static SB: OnceLock<Sandbox> = OnceLock::new();
    SB.get_or_init(|| {
        let cache = common::root().join("target/sutra-test-cache");
        Sandbox::new(SandboxConfig {
            pool_size: 8,
            cache_dir: Some(cache),
            ..SandboxConfig::default()
        })
        .unwrap()
    })
}

fn guest(name: &str) -> LoadedComponent {
    sandbox()
        .load(&common::guest_bytes(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn ctx(attempt: u32) -> TaskContext {
    TaskContext {
        tenant: "acme".into(),
        instance_id: "inst-7".into(),
        task_id: "charge".into(),
        attempt,
        idempotency_key: "idem-7".into(),
    }
}

async fn chaos_with(input: serde_json::Value, attempt: u32, limits: &Limits) -> AttemptReport {
    sandbox()
        .attempt(&guest("chaos"), &ctx(attempt), &input.to_string(), limits)
        .await
}

async fn chaos(input: serde_json::Value) -> AttemptReport {
    chaos_with(input, 1, &Limits::default()).await
}

fn code(r: &AttemptReport) -> &str {
    r.outcome.code().unwrap_or("completed")
}

/// The sandbox still runs a plain chaos attempt to completion.
async fn assert_healthy() {
    let r = chaos(json!({"do": "echo", "n": 1})).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"do": "echo", "n": 1})
        }
    );
}

fn failed(r: &AttemptReport) -> (&str, ErrorClass, bool, &str) {
    match &r.outcome {
        Outcome::Failed {
            code,
            class,
            retryable,
            message,
            ..
        } => (code, *class, *retryable, message),
        o => panic!("expected a failure, got {o:?}"),
    }
}

// ---- chaos: outcomes and codes ----------------------------------------------

#[tokio::test]
async fn chaos_echo_completes_with_its_input() {
    let r = chaos(json!({"do": "echo", "x": [1, "two"]})).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"do": "echo", "x": [1, "two"]})
        }
    );
    assert!(r.fuel_used > 0);
}

#[tokio::test]
async fn chaos_sees_the_context() {
    let r = chaos_with(json!({"do": "context"}), 3, &Limits::default()).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({
                "tenant": "acme", "instanceId": "inst-7", "taskId": "charge",
                "attempt": 3, "idempotencyKey": "idem-7"
            })
        }
    );
}

#[tokio::test]
async fn chaos_fail_keeps_the_guests_code_and_class() {
    let r = chaos(json!({"do": "fail", "code": "Api.Timeout", "class": "timeout"})).await;
    assert_eq!(
        failed(&r),
        (
            "Api.Timeout",
            ErrorClass::Timeout,
            true,
            "failure requested on attempt 1"
        )
    );
}

#[tokio::test]
async fn chaos_fail_without_a_code_is_task_failed() {
    let r = chaos(json!({"do": "fail"})).await;
    let (code, class, retryable, _) = failed(&r);
    assert_eq!(
        (code, class, retryable),
        (Code::TaskFailed.as_str(), ErrorClass::Internal, true)
    );
}

#[tokio::test]
async fn chaos_fail_until_completes_on_the_later_attempt() {
    let input = json!({"do": "fail", "code": "Flaky", "until": 2});
    let first = chaos_with(input.clone(), 1, &Limits::default()).await;
    assert_eq!(code(&first), "Flaky");
    let second = chaos_with(input, 2, &Limits::default()).await;
    assert_eq!(
        second.outcome,
        Outcome::Completed {
            output: json!({"attempt": 2})
        }
    );
}

#[tokio::test]
async fn chaos_refused_input_is_validation_and_not_retryable() {
    let r = chaos(json!({"do": "dance"})).await;
    let (code, class, retryable, _) = failed(&r);
    assert_eq!(
        (code, class, retryable),
        (
            Code::TaskValidation.as_str(),
            ErrorClass::InvalidInput,
            false
        )
    );
}

#[tokio::test]
async fn chaos_business_error_is_routed_not_failed() {
    let r =
        chaos(json!({"do": "business", "code": "CREDIT_DENIED", "details": {"score": 300}})).await;
    assert_eq!(
        r.outcome,
        Outcome::BusinessError {
            code: "CREDIT_DENIED".into(),
            message: "business error requested".into(),
            details: Some(json!({"score": 300})),
        }
    );
}

#[tokio::test]
async fn chaos_panic_is_a_trap_carrying_the_panic_message() {
    let r = chaos(json!({"do": "panic"})).await;
    let (code, class, retryable, message) = failed(&r);
    assert_eq!(
        (code, class, retryable),
        (Code::TaskTrap.as_str(), ErrorClass::Transient, true)
    );
    assert!(message.contains("chaos: panic requested"), "{message}");
    assert!(r.stderr.contains("chaos: panic requested"), "{}", r.stderr);
    assert_healthy().await;
}

#[tokio::test]
async fn chaos_log_lines_and_stderr_are_kept() {
    let r = chaos(json!({"do": "log", "message": "charging card", "level": "warn"})).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"logged": true})
        }
    );
    assert_eq!(r.logs.len(), 1);
    assert_eq!(r.logs[0].message, "charging card");
    assert_eq!(r.logs[0].level, sutra::sandbox::LogLevel::Warn);
    assert_eq!(r.stderr, "charging card\n");
}

// ---- chaos: limits ------------------------------------------------------------

#[tokio::test]
async fn chaos_loop_ends_at_the_deadline() {
    let limits = Limits {
        deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let r = chaos_with(json!({"do": "loop"}), 1, &limits).await;
    assert_eq!(code(&r), Code::TaskDeadlineExceeded.as_str());
    assert_healthy().await;
}

#[tokio::test]
async fn chaos_loop_runs_out_of_fuel() {
    let limits = Limits {
        fuel: 50_000_000,
        ..Limits::default()
    };
    let r = chaos_with(json!({"do": "loop"}), 1, &limits).await;
    assert_eq!(code(&r), Code::TaskFuelExhausted.as_str());
    assert_healthy().await;
}

#[tokio::test]
async fn chaos_sleeping_past_the_deadline_is_deadline_exceeded() {
    // Blocked in a host call (a WASI poll), not spinning: the timeout path.
    let limits = Limits {
        deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let r = chaos_with(json!({"do": "sleep", "ms": 60_000}), 1, &limits).await;
    assert_eq!(code(&r), Code::TaskDeadlineExceeded.as_str());
    assert!(r.elapsed < Duration::from_secs(30));
    assert_healthy().await;
}

#[tokio::test]
async fn chaos_alloc_of_1_gib_under_64_mib_is_memory_limit() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    let r = chaos_with(json!({"do": "alloc", "bytes": 1u64 << 30}), 1, &limits).await;
    let (code, class, retryable, _) = failed(&r);
    assert_eq!(
        (code, class, retryable),
        (
            Code::TaskMemoryLimit.as_str(),
            ErrorClass::ResourceExhausted,
            true
        )
    );
    assert_healthy().await;
}

#[tokio::test]
async fn chaos_alloc_within_the_cap_completes() {
    let r = chaos(json!({"do": "alloc", "bytes": 8u64 << 20})).await;
    assert!(r.outcome.is_completed(), "{:?}", r.outcome);
}

#[tokio::test]
async fn chaos_recurse_is_stack_overflow() {
    let r = chaos(json!({"do": "recurse"})).await;
    assert_eq!(code(&r), Code::TaskStackOverflow.as_str());
    assert_healthy().await;
}

#[tokio::test]
async fn chaos_big_output_over_the_cap_is_output_invalid() {
    let r = chaos(json!({"do": "big-output", "bytes": 2u64 << 20})).await;
    let (code, _, _, message) = failed(&r);
    assert_eq!(code, Code::TaskOutputInvalid.as_str());
    assert!(message.contains("over the cap"), "{message}");
    assert_healthy().await;
}

/// Issue 16: chaos's 200 MB output under a 1 GiB memory cap is an oversized
/// output, deterministic and so not retried, never a host-call trap.
#[tokio::test]
async fn chaos_big_output_of_200_mb_under_1_gib_is_output_invalid_not_a_trap() {
    let limits = Limits {
        memory_bytes: 1 << 30,
        ..Limits::default()
    };
    let r = chaos_with(
        json!({"do": "big-output", "bytes": 200_000_000u64}),
        1,
        &limits,
    )
    .await;
    let (code, _, retryable, message) = failed(&r);
    assert_eq!(code, Code::TaskOutputInvalid.as_str(), "{message}");
    assert!(!retryable);
    assert!(message.contains("over the cap"), "{message}");
    assert_healthy().await;
}

#[tokio::test]
async fn chaos_big_output_within_the_cap_completes() {
    let r = chaos(json!({"do": "big-output", "bytes": 1000})).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!("x".repeat(998))
        }
    );
}

/// `chaos` calls WASI directly rather than through std and wasi-libc, so it
/// imports only the interfaces its actions use: every imported function costs
/// each attempt a step of instantiation (see `benches/README.md`, "Sandbox").
#[test]
fn chaos_imports_only_the_interfaces_its_actions_use() {
    let mut imports: Vec<String> = guest("chaos")
        .imports()
        .iter()
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .collect();
    imports.sort();
    assert_eq!(
        imports,
        [
            "sutra:task/host",
            "sutra:task/types",
            "wasi:cli/environment",
            "wasi:cli/stderr",
            "wasi:clocks/monotonic-clock",
            "wasi:filesystem/preopens",
            "wasi:filesystem/types",
            "wasi:io/error",
            "wasi:io/poll",
            "wasi:io/streams",
            "wasi:sockets/instance-network",
            "wasi:sockets/network",
            "wasi:sockets/tcp",
            "wasi:sockets/tcp-create-socket",
        ]
    );
}

#[tokio::test]
async fn chaos_probe_sees_no_files_no_env_no_sockets() {
    let r = chaos(json!({"do": "probe"})).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"files": [], "env": [], "socket": false})
        }
    );
}

/// On a single-threaded runtime, echo completes while `loop` spins.
#[tokio::test(flavor = "current_thread")]
async fn chaos_loop_does_not_block_the_lane() {
    let sb = Sandbox::new(SandboxConfig {
        pool_size: 2,
        ..SandboxConfig::default()
    })
    .unwrap();
    let chaos = sb.load(&common::guest_bytes("chaos")).unwrap();
    let spinner = {
        let (sb, chaos) = (sb.clone(), chaos.clone());
        tokio::spawn(async move {
            let limits = Limits {
                deadline: Duration::from_secs(20),
                ..Limits::default()
            };
            sb.attempt(&chaos, &ctx(1), r#"{"do":"loop"}"#, &limits)
                .await
        })
    };
    for _ in 0..1000 {
        if sb.running() > 0 || spinner.is_finished() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(sb.running(), 1, "the spinner should hold a slot");
    let r = sb
        .attempt(&chaos, &ctx(1), r#"{"do":"echo"}"#, &Limits::default())
        .await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"do": "echo"})
        }
    );
    assert!(
        !spinner.is_finished(),
        "the spinner should still be spinning"
    );
    spinner.abort();
    assert!(spinner.await.unwrap_err().is_cancelled());
}

/// On a 2-worker runtime, more spinners than workers still leave room for echo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_spinners_on_every_worker_do_not_block_echo() {
    let sb = Sandbox::new(SandboxConfig {
        pool_size: 4,
        ..SandboxConfig::default()
    })
    .unwrap();
    let chaos = sb.load(&common::guest_bytes("chaos")).unwrap();
    let spinners: Vec<_> = (0..3)
        .map(|_| {
            let (sb, chaos) = (sb.clone(), chaos.clone());
            tokio::spawn(async move {
                let limits = Limits {
                    deadline: Duration::from_secs(20),
                    ..Limits::default()
                };
                sb.attempt(&chaos, &ctx(1), r#"{"do":"loop"}"#, &limits)
                    .await
            })
        })
        .collect();
    let r = sb
        .attempt(&chaos, &ctx(1), r#"{"do":"echo"}"#, &Limits::default())
        .await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"do": "echo"})
        }
    );
    assert!(
        spinners.iter().all(|s| !s.is_finished()),
        "the spinners should still be spinning"
    );
    for s in spinners {
        s.abort();
        assert!(s.await.unwrap_err().is_cancelled());
    }
}

// ---- score --------------------------------------------------------------------

#[tokio::test]
async fn score_loads_and_answers() {
    let r = sandbox()
        .attempt(&guest("score"), &ctx(1), "{}", &Limits::default())
        .await;
    // Whatever it decides about an empty applicant, it ends in a modelled way.
    assert!(
        !matches!(&r.outcome, Outcome::Failed { code, .. } if code == Code::TaskTrap.as_str()),
        "{:?}",
        r.outcome
    );
}

// ---- Python and JavaScript ----------------------------------------------------

async fn lang(name: &str, input: serde_json::Value) -> AttemptReport {
    // The default limits (64 MiB of memory) suffice for the language runtimes.
    sandbox()
        .attempt(
            &guest(name),
            &ctx(2),
            &input.to_string(),
            &Limits::default(),
        )
        .await
}

async fn language_guest_contract(name: &str) {
    let r = lang(name, json!({"do": "echo", "v": 1})).await;
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            output: json!({"do": "echo", "v": 1})
        },
        "{}",
        r.stderr
    );
    assert_eq!(r.logs.len(), 1, "{:?}", r.logs);
    assert!(
        r.logs[0].message.contains("echo on attempt 2"),
        "{:?}",
        r.logs
    );

    let r = lang(name, json!({"do": "fail", "code": "Api.Down"})).await;
    let (code, class, retryable, _) = failed(&r);
    assert_eq!(
        (code, class, retryable),
        ("Api.Down", ErrorClass::Internal, true)
    );

    let r = lang(
        name,
        json!({"do": "business", "code": "NOT_ELIGIBLE", "details": {"why": "age"}}),
    )
    .await;
    assert_eq!(
        r.outcome,
        Outcome::BusinessError {
            code: "NOT_ELIGIBLE".into(),
            message: "business error requested".into(),
            details: Some(json!({"why": "age"})),
        }
    );

    // An unexpected exception is coded with its simple class name (seed 004).
    let r = lang(name, json!({"do": "throw", "message": "boom"})).await;
    let (code, _, _, message) = failed(&r);
    let class = if name == "py-task" {
        "RuntimeError"
    } else {
        "TypeError"
    };
    assert_eq!(code, class);
    assert!(message.contains("boom"), "{message}");
}

#[tokio::test]
async fn python_guest_completes_fails_and_raises_business_errors() {
    language_guest_contract("py-task").await;
}

#[tokio::test]
async fn javascript_guest_completes_fails_and_raises_business_errors() {
    language_guest_contract("js-task").await;
}
