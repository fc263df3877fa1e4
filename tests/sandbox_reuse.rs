//! Warm instances of reusable modules (`src/sandbox/reuse.rs`), at the
//! sandbox: an instance is reused only by the same tenant and the same
//! module digest, never after a trap, a fuel exhaustion, a deadline, a stop
//! or a memory overrun, at most `max_reuses` times, and never for a module
//! that is not reusable. The `chaos` guest's `count` action reports how many
//! `count` calls its instance has served (a global): 1 means a fresh instance.
//! Then through the API (`POST /v1/deployments` with a `reusable` part) and
//! the runtime, on SQLite and PostgreSQL.

mod common;
#[path = "common/server.rs"]
mod server;

use serde_json::{json, Value};
use std::time::Duration;
use sutra::codes::Code;
use sutra::sandbox::{
    AttemptReport, Limits, LoadedComponent, Reuse, Sandbox, SandboxConfig, Stop, TaskContext,
};

fn sandbox_with(cfg: SandboxConfig) -> Sandbox {
    Sandbox::new(SandboxConfig {
        pool_size: 8,
        cache_dir: Some(common::root().join("target/sutra-test-cache")),
        ..cfg
    })
    .unwrap()
}

fn sandbox() -> Sandbox {
    sandbox_with(SandboxConfig::default())
}

fn chaos(sb: &Sandbox) -> LoadedComponent {
    sb.load(&common::guest_bytes("chaos")).unwrap()
}

/// The chaos bytes with a custom section appended: the same code under
/// another digest (another module).
fn other_chaos(sb: &Sandbox) -> LoadedComponent {
    let mut bytes = common::guest_bytes("chaos");
    let name = b"sutra-test-other";
    let mut payload = vec![u8::try_from(name.len()).unwrap()];
    payload.extend_from_slice(name);
    payload.push(1);
    bytes.push(0);
    bytes.push(u8::try_from(payload.len()).unwrap());
    bytes.extend_from_slice(&payload);
    let other = sb.load(&bytes).unwrap();
    assert_ne!(other.digest(), chaos(sb).digest());
    other
}

fn ctx(tenant: &str) -> TaskContext {
    TaskContext {
        tenant: tenant.into(),
        instance_id: "inst-1".into(),
        task_id: "count".into(),
        attempt: 1,
        idempotency_key: "idem-1".into(),
    }
}

async fn run(
    sb: &Sandbox,
    c: &LoadedComponent,
    tenant: &str,
    input: Value,
    limits: &Limits,
    reuse: Option<Reuse>,
) -> AttemptReport {
    sb.attempt_reusing(
        c,
        &ctx(tenant),
        &input.to_string(),
        limits,
        &Stop::default(),
        None,
        reuse,
    )
    .await
}

/// The `count` of one reusable attempt.
async fn count_with(sb: &Sandbox, c: &LoadedComponent, tenant: &str, reuse: Option<Reuse>) -> u64 {
    let r = run(
        sb,
        c,
        tenant,
        json!({"do": "count"}),
        &Limits::default(),
        reuse,
    )
    .await;
    match &r.outcome {
        sutra::sandbox::Outcome::Completed { output } => output["calls"].as_u64().unwrap(),
        other => panic!("count did not complete: {other:?}"),
    }
}

async fn count(sb: &Sandbox, c: &LoadedComponent, tenant: &str) -> u64 {
    count_with(sb, c, tenant, Some(Reuse::default())).await
}

fn code(r: &AttemptReport) -> &str {
    r.outcome.code().unwrap_or("completed")
}

#[tokio::test]
async fn a_reusable_module_runs_its_attempts_on_one_warm_instance() {
    let sb = sandbox();
    let c = chaos(&sb);
    for n in 1..=5 {
        assert_eq!(count(&sb, &c, "acme").await, n);
    }
    let stats = sb.warm_stats();
    assert_eq!(stats.reused, 4);
    assert_eq!(stats.idle, 1);
}

#[tokio::test]
async fn two_tenants_never_share_an_instance() {
    let sb = sandbox();
    let c = chaos(&sb);
    for n in 1..=10 {
        assert_eq!(count(&sb, &c, "tenant-a").await, n);
    }
    // Tenant B's first attempt sees a fresh instance after A's ten.
    assert_eq!(count(&sb, &c, "tenant-b").await, 1);
    assert_eq!(count(&sb, &c, "tenant-b").await, 2);
    // And A's instance is still A's alone.
    assert_eq!(count(&sb, &c, "tenant-a").await, 11);
    assert_eq!(sb.warm_stats().idle, 2);
}

#[tokio::test]
async fn two_modules_never_share_an_instance() {
    let sb = sandbox();
    let (c, other) = (chaos(&sb), other_chaos(&sb));
    for n in 1..=3 {
        assert_eq!(count(&sb, &c, "acme").await, n);
    }
    assert_eq!(count(&sb, &other, "acme").await, 1);
    assert_eq!(count(&sb, &c, "acme").await, 4);
}

#[tokio::test]
async fn a_trap_discards_the_instance() {
    let sb = sandbox();
    let c = chaos(&sb);
    assert_eq!(count(&sb, &c, "acme").await, 1);
    assert_eq!(count(&sb, &c, "acme").await, 2);
    let r = run(
        &sb,
        &c,
        "acme",
        json!({"do": "panic"}),
        &Limits::default(),
        Some(Reuse::default()),
    )
    .await;
    assert_eq!(code(&r), Code::TaskTrap.as_str());
    assert_eq!(
        count(&sb, &c, "acme").await,
        1,
        "a trapped instance was reused"
    );
}

#[tokio::test]
async fn a_fuel_exhaustion_discards_the_instance() {
    let sb = sandbox();
    let c = chaos(&sb);
    assert_eq!(count(&sb, &c, "acme").await, 1);
    assert_eq!(count(&sb, &c, "acme").await, 2);
    let limits = Limits {
        fuel: 50_000_000,
        ..Limits::default()
    };
    let r = run(
        &sb,
        &c,
        "acme",
        json!({"do": "loop"}),
        &limits,
        Some(Reuse::default()),
    )
    .await;
    assert_eq!(code(&r), Code::TaskFuelExhausted.as_str());
    assert_eq!(count(&sb, &c, "acme").await, 1);
}

#[tokio::test]
async fn a_deadline_discards_the_instance() {
    let sb = sandbox();
    let c = chaos(&sb);
    assert_eq!(count(&sb, &c, "acme").await, 1);
    assert_eq!(count(&sb, &c, "acme").await, 2);
    let limits = Limits {
        deadline: Duration::from_millis(50),
        ..Limits::default()
    };
    let r = run(
        &sb,
        &c,
        "acme",
        json!({"do": "loop"}),
        &limits,
        Some(Reuse::default()),
    )
    .await;
    assert_eq!(code(&r), Code::TaskDeadlineExceeded.as_str());
    assert_eq!(count(&sb, &c, "acme").await, 1);
}

#[tokio::test]
async fn a_stopped_attempt_discards_its_instance() {
    let sb = sandbox();
    let c = chaos(&sb);
    assert_eq!(count(&sb, &c, "acme").await, 1);
    assert_eq!(count(&sb, &c, "acme").await, 2);
    let stop = Stop::default();
    let attempt = {
        let (sb, c, stop) = (sb.clone(), c.clone(), stop.clone());
        tokio::spawn(async move {
            let input = json!({"do": "sleep", "ms": 600_000}).to_string();
            sb.attempt_reusing(
                &c,
                &ctx("acme"),
                &input,
                &Limits::default(),
                &stop,
                None,
                Some(Reuse::default()),
            )
            .await
        })
    };
    // Stop once the attempt has taken the warm instance.
    while sb.warm_stats().idle != 0 {
        tokio::task::yield_now().await;
    }
    stop.stop();
    let r = attempt.await.unwrap();
    assert_eq!(code(&r), Code::TaskInterrupted.as_str());
    assert_eq!(count(&sb, &c, "acme").await, 1);
}

#[tokio::test]
async fn a_memory_overrun_discards_the_instance() {
    let sb = sandbox();
    let c = chaos(&sb);
    let reuse = Reuse::default();
    assert_eq!(count(&sb, &c, "acme").await, 1);
    let small = Limits {
        memory_bytes: 8 << 20,
        ..Limits::default()
    };
    let r = run(
        &sb,
        &c,
        "acme",
        json!({"do": "alloc", "bytes": 32 << 20}),
        &small,
        Some(reuse),
    )
    .await;
    assert_eq!(code(&r), Code::TaskMemoryLimit.as_str());
    assert_eq!(count(&sb, &c, "acme").await, 1);
}

#[tokio::test]
async fn an_instance_over_the_memory_ceiling_is_not_kept() {
    let sb = sandbox();
    let c = chaos(&sb);
    let reuse = Reuse {
        memory_ceiling_bytes: 8 << 20,
        ..Reuse::default()
    };
    assert_eq!(count_with(&sb, &c, "acme", Some(reuse)).await, 1);
    assert_eq!(count_with(&sb, &c, "acme", Some(reuse)).await, 2);
    // Completes, but leaves the instance holding more than the ceiling.
    let r = run(
        &sb,
        &c,
        "acme",
        json!({"do": "alloc", "bytes": 16 << 20}),
        &Limits::default(),
        Some(reuse),
    )
    .await;
    assert_eq!(code(&r), "completed");
    assert_eq!(count_with(&sb, &c, "acme", Some(reuse)).await, 1);
}

#[tokio::test]
async fn an_instance_serves_at_most_one_plus_max_reuses_attempts() {
    let sb = sandbox();
    let c = chaos(&sb);
    let reuse = Reuse {
        max_reuses: 2,
        ..Reuse::default()
    };
    let mut seen = Vec::new();
    for _ in 0..7 {
        seen.push(count_with(&sb, &c, "acme", Some(reuse)).await);
    }
    assert_eq!(seen, [1, 2, 3, 1, 2, 3, 1]);
    let none = Reuse {
        max_reuses: 0,
        ..Reuse::default()
    };
    assert_eq!(count_with(&sb, &c, "zeta", Some(none)).await, 1);
    assert_eq!(count_with(&sb, &c, "zeta", Some(none)).await, 1);
}

#[tokio::test]
async fn a_module_that_is_not_reusable_never_reuses() {
    let sb = sandbox();
    let c = chaos(&sb);
    for _ in 0..4 {
        assert_eq!(count_with(&sb, &c, "acme", None).await, 1);
    }
    for _ in 0..2 {
        let r = sb
            .attempt(
                &c,
                &ctx("acme"),
                &json!({"do": "count"}).to_string(),
                &Limits::default(),
            )
            .await;
        assert_eq!(
            r.outcome,
            sutra::sandbox::Outcome::Completed {
                output: json!({"calls": 1})
            }
        );
    }
    // A reusable attempt finds nothing a non-reusable one left.
    assert_eq!(count(&sb, &c, "acme").await, 1);
    let stats = sb.warm_stats();
    assert_eq!((stats.kept, stats.reused), (1, 0));
}

#[tokio::test]
async fn a_returned_failure_keeps_the_instance_and_captures_are_per_attempt() {
    let sb = sandbox();
    let c = chaos(&sb);
    let reuse = Some(Reuse::default());
    assert_eq!(count(&sb, &c, "acme").await, 1);
    let r = run(
        &sb,
        &c,
        "acme",
        json!({"do": "fail", "code": "X.FAIL"}),
        &Limits::default(),
        reuse,
    )
    .await;
    assert_eq!(code(&r), "X.FAIL");
    let r = run(
        &sb,
        &c,
        "acme",
        json!({"do": "log", "message": "first"}),
        &Limits::default(),
        reuse,
    )
    .await;
    assert_eq!(r.logs.len(), 1);
    assert!(r.stderr.contains("first"), "{}", r.stderr);
    let r = run(
        &sb,
        &c,
        "acme",
        json!({"do": "log", "message": "second"}),
        &Limits::default(),
        reuse,
    )
    .await;
    assert_eq!(r.logs.len(), 1, "{:?}", r.logs);
    assert_eq!(r.logs[0].message, "second");
    assert!(
        !r.stderr.contains("first"),
        "the last attempt's stderr leaked: {}",
        r.stderr
    );
    assert_eq!(count(&sb, &c, "acme").await, 2);
}

#[tokio::test]
async fn the_pool_is_bounded_least_recently_used_out_first() {
    let sb = sandbox_with(SandboxConfig {
        warm_capacity: 1,
        ..SandboxConfig::default()
    });
    let c = chaos(&sb);
    assert_eq!(count(&sb, &c, "tenant-a").await, 1);
    assert_eq!(count(&sb, &c, "tenant-a").await, 2);
    assert_eq!(count(&sb, &c, "tenant-b").await, 1);
    // B's instance took the only place: A's was evicted.
    assert_eq!(count(&sb, &c, "tenant-a").await, 1);
    assert_eq!(sb.warm_stats().idle, 1);
}

#[tokio::test]
async fn idle_instances_are_dropped_after_warm_idle() {
    let sb = sandbox_with(SandboxConfig {
        warm_idle: Duration::ZERO,
        ..SandboxConfig::default()
    });
    let c = chaos(&sb);
    assert_eq!(count(&sb, &c, "acme").await, 1);
    assert_eq!(sb.warm_stats().idle, 1);
    sb.sweep_warm();
    assert_eq!(sb.warm_stats().idle, 0);
    assert_eq!(count(&sb, &c, "acme").await, 1);
    assert_eq!(count(&sb, &c, "acme").await, 1);
}

/// The heavy guests themselves keep their state between reused attempts and
/// still answer each attempt with its own input.
#[tokio::test]
async fn python_and_js_echo_on_a_warm_instance() {
    let sb = sandbox();
    for name in ["py-task", "js-task"] {
        let c = sb.load(&common::guest_bytes(name)).unwrap();
        for n in 0..3 {
            let input = json!({"do": "echo", "n": n});
            let r = run(
                &sb,
                &c,
                "acme",
                input.clone(),
                &Limits::default(),
                Some(Reuse::default()),
            )
            .await;
            assert!(
                r.outcome.is_completed(),
                "{name}: {:?} {}",
                r.outcome,
                r.stderr
            );
        }
        assert!(sb.warm_stats().reused >= 2, "{name}: {:?}", sb.warm_stats());
    }
}

// ---- through the API and the runtime, on both backends ----

/// start → T (registered:count) → end, as process `id`.
fn counted(id: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:process id="{id}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:count"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// Deploy `counted(process)` with chaos as `count`, and a `reusable` part if given.
async fn deploy_counted(
    api: &server::Api,
    process: &str,
    reusable: Option<&str>,
) -> (reqwest::StatusCode, Value) {
    let mut form = reqwest::multipart::Form::new()
        .text("definition", counted(process))
        .part(
            "count",
            reqwest::multipart::Part::bytes(common::guest_bytes("chaos")).file_name("count.wasm"),
        );
    if let Some(r) = reusable {
        form = form.text("reusable", r.to_string());
    }
    api.send(
        api.request(reqwest::Method::POST, "/v1/deployments")
            .multipart(form),
    )
    .await
}

/// Start `process` with `input`; the `calls` it completed with.
async fn started_calls(api: &server::Api, process: &str) -> u64 {
    let (status, body) = api.start(process, json!({"do": "count"})).await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
    assert_eq!(body["state"], "COMPLETED", "{body}");
    body["variables"]["calls"]
        .as_u64()
        .unwrap_or_else(|| panic!("no calls in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reusable_modules_through_the_api_on_both_backends() {
    use reqwest::StatusCode;
    for db in [server::Db::Sqlite, server::Db::Postgres] {
        let Some(srv) = server::Server::start_on(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let beta = srv.tenant("beta", json!({})).await;

        // A `reusable` part naming no module of the bundle is refused.
        let (status, body) = deploy_counted(&acme, "warm", Some("nope")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let (status, body) = deploy_counted(&acme, "warm", Some("count:many")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

        let (status, body) = deploy_counted(&acme, "warm", Some("count:3")).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let dep = body["deployments"][0]["id"].as_str().unwrap().to_string();
        // The flag is stored with the deployment.
        let (_, shown) = acme.get(&format!("/v1/deployments/{dep}")).await;
        assert_eq!(shown["reusable"]["count"]["max_reuses"], 3, "{shown}");

        // One warm instance serves acme's attempts, up to 1 + 3.
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(started_calls(&acme, "warm").await);
        }
        assert_eq!(seen, [1, 2, 3, 4, 1], "{db:?}");

        // The same module bytes, reusable, for another tenant: never acme's instance.
        let (status, body) = deploy_counted(&beta, "warm", Some("count")).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(started_calls(&beta, "warm").await, 1, "{db:?}");
        assert_eq!(started_calls(&acme, "warm").await, 2, "{db:?}");

        // A trap drops the instance: the next attempt is on a fresh one.
        let (status, body) = acme.start("warm", json!({"do": "panic"})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(started_calls(&acme, "warm").await, 1, "{db:?}");

        // Not reusable (no part): every attempt on a fresh instance.
        let (status, body) = deploy_counted(&acme, "cold", None).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert!(body["deployments"][0].get("reusable").is_none(), "{body}");
        for _ in 0..3 {
            assert_eq!(started_calls(&acme, "cold").await, 1, "{db:?}");
        }
    }
}

/// `sutra deploy --reusable NAME:MAX_REUSES` marks the module reusable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sutra_deploy_reusable_marks_the_module() {
    use std::process::Command;
    let srv = server::Server::start().await;
    let created = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["tenant", "create", "acme", "--db", &srv.db])
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let key = String::from_utf8_lossy(&created.stdout).trim().to_string();
    let sutra = |args: &[&str]| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_sutra"))
            .args(args)
            .args(["--format", "json"])
            .env("SUTRA_SERVER", &srv.url)
            .env("SUTRA_TOKEN", &key)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("counted.bpmn");
    std::fs::write(&def, counted("counted")).unwrap();
    let task = format!("count={}", server::guest_path("chaos").display());
    let deployed = sutra(&[
        "deploy",
        def.to_str().unwrap(),
        "--task",
        &task,
        "--reusable",
        "count:2",
    ]);
    assert_eq!(
        deployed["deployments"][0]["reusable"]["count"]["max_reuses"], 2,
        "{deployed}"
    );
    let mut seen = Vec::new();
    for _ in 0..4 {
        let started = sutra(&["start", "counted", "--input", r#"{"do": "count"}"#]);
        seen.push(started["variables"]["calls"].as_u64().unwrap_or(0));
    }
    assert_eq!(seen, [1, 2, 3, 1]);
}
