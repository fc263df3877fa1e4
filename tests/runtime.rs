//! The runtime end to end, on SQLite and PostgreSQL, with the virtual clock:
//! BPMN in, real guests in the sandbox, every step committed to the store.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, Settled, StartRequest};
use sutra::store::{AnyStore, Store};
use sutra::time::IsoDuration;

const TENANT: &str = "acme";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap()
}

fn runtime_with(store: AnyStore, config: Config) -> Runtime<AnyStore> {
    Runtime::new(store, RuntimeOptions::new(config).with_virtual_clock(t0())).unwrap()
}

fn runtime(store: AnyStore) -> Runtime<AnyStore> {
    runtime_with(store, Config::default())
}

fn modules() -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    m.insert("chaos".to_string(), common::guest_bytes("chaos"));
    m
}

/// A BPMN document around `body` (a process `p`).
fn bpmn(body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:error id="Rejected" errorCode="REJECTED"/>
  <bpmn:message id="Paid" name="payment"/>
  <bpmn:process id="p" isExecutable="true">
{body}
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// start → T (chaos, with `extension` inside its extensionElements) → end.
fn one_task(extension: &str) -> String {
    bpmn(&format!(
        r#"    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements>{extension}</bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>"#
    ))
}

async fn run_to_rest(rt: &Runtime<AnyStore>, source: &str, vars: Value) -> (String, Settled) {
    rt.deploy(TENANT, source, &modules()).await.unwrap();
    let id = rt
        .start(StartRequest {
            tenant: TENANT.into(),
            process_id: "p".into(),
            variables: vars.as_object().cloned().unwrap(),
            ..StartRequest::default()
        })
        .await
        .unwrap();
    let settled = rt.settle(&id).await.unwrap();
    (id, settled)
}

fn offsets(view: &sutra::runtime::InstanceView) -> Vec<i64> {
    view.attempts
        .iter()
        .map(|a| (a.at - t0()).num_milliseconds())
        .collect()
}

backends::store_tests! {
    async fn retries_run_at_t_plus_0_1_3_7_seconds_then_complete(db) {
        let rt = runtime(db.store.clone());
        let src = one_task(r#"<q:retry maxAttempts="4" initialDelay="PT1S" backoffCoefficient="2.0"/>"#);
        let (id, settled) = run_to_rest(&rt, &src, json!({"do": "fail", "until": 4, "code": "FLAKY"})).await;
        assert!(matches!(settled, Settled::Terminal(_)));
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(offsets(&view), vec![0, 1000, 3000, 7000]);
        let outcomes: Vec<&str> = view.attempts.iter().map(|a| a.outcome.as_str()).collect();
        assert_eq!(outcomes, vec!["failed", "failed", "failed", "completed"]);
        assert_eq!(view.variables["attempt"], json!(4), "the guest saw attempt 4 in its context");
        assert!(db.store.parks_of(&id).await.unwrap().is_empty());
    }

    async fn max_delay_caps_every_wait(db) {
        let rt = runtime(db.store.clone());
        let src = one_task(r#"<q:retry maxAttempts="4" initialDelay="PT1S" backoffCoefficient="10" maxDelay="PT2S"/>"#);
        let (id, _) = run_to_rest(&rt, &src, json!({"do": "fail", "until": 4})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(offsets(&view), vec![0, 1000, 3000, 5000]);
    }

    async fn a_non_retryable_code_fails_after_one_attempt(db) {
        let rt = runtime(db.store.clone());
        let src = one_task(r#"<q:retry maxAttempts="5" initialDelay="PT1S" nonRetryableCodes="SUTRA.TASK.VALIDATION"/>"#);
        let (id, _) = run_to_rest(&rt, &src, json!({"do": "fail", "code": "SUTRA.TASK.VALIDATION"})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "FAILED");
        assert_eq!(view.attempts.len(), 1);
        let err = view.error.unwrap();
        assert_eq!(err.code, "SUTRA.RUNTIME.RETRY.EXHAUSTED");
        assert_eq!(err.cause.unwrap().code, "SUTRA.TASK.VALIDATION");
    }

    async fn an_always_failing_task_fails_after_exactly_max_attempts(db) {
        let rt = runtime(db.store.clone());
        let src = one_task(r#"<q:retry maxAttempts="3" initialDelay="PT5M"/>"#);
        let (id, _) = run_to_rest(&rt, &src, json!({"do": "fail", "code": "DOWN"})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "FAILED");
        assert_eq!(offsets(&view), vec![0, 300_000, 900_000]);
        let err = view.error.unwrap();
        assert_eq!(err.code, "SUTRA.RUNTIME.RETRY.EXHAUSTED");
        assert_eq!(err.cause.as_ref().unwrap().code, "DOWN");
        // FAILED is retained and inspectable after a reopen.
        let again = runtime(db.reopen().await).inspect(&id).await.unwrap();
        assert_eq!(again.state, "FAILED");
    }

    async fn without_a_policy_a_failure_fails_at_once(db) {
        let rt = runtime(db.store.clone());
        let (id, _) = run_to_rest(&rt, &one_task(""), json!({"do": "fail"})).await;
        let view = rt.inspect(&id).await.unwrap();
        let err = view.error.unwrap();
        assert_eq!(err.code, "SUTRA.RUNTIME.TASK_FAILED");
        assert_eq!(err.cause.unwrap().code, "SUTRA.TASK.FAILED", "an empty guest code becomes SUTRA.TASK.FAILED");
    }

    async fn a_business_error_goes_to_its_boundary_with_one_attempt(db) {
        let rt = runtime(db.store.clone());
        let src = bpmn(r#"
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="5" initialDelay="PT1S"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
    <bpmn:boundaryEvent id="rejected" attachedToRef="T">
      <bpmn:errorEventDefinition errorRef="Rejected"/>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="rejected" targetRef="handled"/>
    <bpmn:endEvent id="handled"/>"#);
        let (id, _) = run_to_rest(&rt, &src, json!({"do": "business", "code": "REJECTED"})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(view.attempts.len(), 1);
        assert_eq!(view.attempts[0].outcome, "business_error");
        // Uncaught, a business error fails the instance with its own code.
        let (id, _) = run_to_rest(&rt, &src, json!({"do": "business", "code": "OTHER"})).await;
        assert_eq!(rt.inspect(&id).await.unwrap().error.unwrap().code, "OTHER");
    }

    async fn traps_fuel_and_deadlines_are_failed_attempts_that_retry(db) {
        let config = Config {
            fuel: Some(50_000_000),
            deadline: Some(IsoDuration::from_millis(2_000)),
            ..Config::default()
        };
        let rt = runtime_with(db.store.clone(), config);
        let src = one_task(r#"<q:retry maxAttempts="2" initialDelay="PT1S"/>"#);
        for (input, code) in [
            (json!({"do": "panic"}), "SUTRA.TASK.TRAP"),
            (json!({"do": "loop"}), "SUTRA.TASK.FUEL_EXHAUSTED"),
        ] {
            let (id, _) = run_to_rest(&rt, &src, input).await;
            let view = rt.inspect(&id).await.unwrap();
            assert_eq!(view.attempts.len(), 2, "{code} was retried");
            assert!(view.attempts.iter().all(|a| a.code.as_deref() == Some(code)), "{:?}", view.attempts);
            assert_eq!(view.error.unwrap().code, "SUTRA.RUNTIME.RETRY.EXHAUSTED");
        }
        // A deadline: plenty of fuel, a short wall-clock bound.
        let config = Config { deadline: Some(IsoDuration::from_millis(200)), ..Config::default() };
        let rt = runtime_with(db.store.clone(), config);
        let (id, _) = run_to_rest(&rt, &src, json!({"do": "loop"})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.attempts.len(), 2);
        assert!(view.attempts.iter().all(|a| a.code.as_deref() == Some("SUTRA.TASK.DEADLINE_EXCEEDED")), "{:?}", view.attempts);
    }

    async fn timers_of_every_kind_on_catch_events(db) {
        let rt = runtime(db.store.clone());
        for (def, after_ms) in [
            ("<bpmn:timeDuration>PT24H</bpmn:timeDuration>", 86_400_000i64),
            ("<bpmn:timeDate>2026-03-02T09:00:00+00:00</bpmn:timeDate>", 86_400_000),
            ("<bpmn:timeCycle>R3/PT10M</bpmn:timeCycle>", 600_000),
        ] {
            let src = bpmn(&format!(r#"
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition>{def}</bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>"#));
            let started = rt.clock().now();
            let (id, settled) = run_to_rest(&rt, &src, json!({})).await;
            let Settled::Terminal(rec) = settled else { panic!("{def}: still waiting") };
            assert_eq!(rec.state, "COMPLETED", "{def}");
            let view = rt.inspect(&id).await.unwrap();
            let took = (view.ended_at.unwrap() - started).num_milliseconds();
            if def.contains("timeDate") {
                assert_eq!(view.ended_at.unwrap(), Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap());
            } else {
                assert_eq!(took, after_ms, "{def}");
            }
        }
    }

    async fn timer_boundaries_interrupting_and_not(db) {
        let rt = runtime(db.store.clone());
        // Interrupting: a step that retries with long backoffs, bounded as a whole by a
        // PT50M boundary on its sub-process (a routed timer boundary on the retrying task
        // itself is refused at load: RETRY_NOT_APPLICABLE). Not PT1H: the third attempt
        // would fall due at the boundary's instant, and two parks due at one instant
        // fire in either order (an attempt started then is recorded `interrupted`).
        let src = bpmn(r#"
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="step"/>
    <bpmn:subProcess id="step">
      <bpmn:startEvent id="s2"/>
      <bpmn:sequenceFlow id="g1" sourceRef="s2" targetRef="T"/>
      <bpmn:serviceTask id="T" implementation="registered:chaos">
        <bpmn:extensionElements><q:retry maxAttempts="10" initialDelay="PT30M" backoffCoefficient="1"/></bpmn:extensionElements>
      </bpmn:serviceTask>
      <bpmn:sequenceFlow id="g2" sourceRef="T" targetRef="e2"/>
      <bpmn:endEvent id="e2"/>
    </bpmn:subProcess>
    <bpmn:sequenceFlow id="f2" sourceRef="step" targetRef="end"/>
    <bpmn:endEvent id="end"/>
    <bpmn:boundaryEvent id="tooLong" attachedToRef="step">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT50M</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="tooLong" targetRef="gaveUp"/>
    <bpmn:endEvent id="gaveUp"/>"#);
        let (id, _) = run_to_rest(&rt, &src, json!({"do": "fail"})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(view.attempts.len(), 2, "attempts at 0 and 30 min; the boundary fired at 50 min: {:?}", view.attempts);
        assert!(db.store.parks_of(&id).await.unwrap().is_empty(), "the retry park went with the task");

        // Non-interrupting cycle: reminders every 10 min (R2) while a message is awaited.
        let src = bpmn(r#"
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="sub"/>
    <bpmn:subProcess id="sub">
      <bpmn:startEvent id="s2"/>
      <bpmn:sequenceFlow id="g1" sourceRef="s2" targetRef="pay"/>
      <bpmn:intermediateCatchEvent id="pay"><bpmn:messageEventDefinition messageRef="Paid"/></bpmn:intermediateCatchEvent>
      <bpmn:sequenceFlow id="g2" sourceRef="pay" targetRef="e2"/>
      <bpmn:endEvent id="e2"/>
    </bpmn:subProcess>
    <bpmn:sequenceFlow id="f2" sourceRef="sub" targetRef="end"/>
    <bpmn:endEvent id="end"/>
    <bpmn:boundaryEvent id="remind" attachedToRef="sub" cancelActivity="false">
      <bpmn:timerEventDefinition><bpmn:timeCycle>R2/PT10M</bpmn:timeCycle></bpmn:timerEventDefinition>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="remind" targetRef="R"/>
    <bpmn:serviceTask id="R" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f4" sourceRef="R" targetRef="reminded"/>
    <bpmn:endEvent id="reminded"/>"#);
        let (id, settled) = run_to_rest(&rt, &src, json!({"do": "echo"})).await;
        assert!(matches!(settled, Settled::Waiting(_)), "waits for the payment message");
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "WAITING");
        assert_eq!(offsets(&view).len(), 2, "two reminders (R2), then the cycle is spent");
        rt.correlate(TENANT, "payment", None, serde_json::Map::new()).await.unwrap();
        assert_eq!(rt.inspect(&id).await.unwrap().state, "COMPLETED");
    }

    async fn retention_keeps_terminal_instances_for_the_window_and_failed_forever(db) {
        let rt = runtime(db.store.clone());
        let (done, _) = run_to_rest(&rt, &one_task(""), json!({"do": "echo"})).await;
        let (failed, _) = run_to_rest(&rt, &one_task(""), json!({"do": "fail"})).await;
        // Six days later the completed instance still answers.
        let rt6 = Runtime::new(db.store.clone(), RuntimeOptions::new(Config::default()).with_virtual_clock(t0() + chrono::Duration::days(6))).unwrap();
        assert_eq!(rt6.sweep_once().await.unwrap(), 0);
        assert_eq!(rt6.inspect(&done).await.unwrap().state, "COMPLETED");
        // Past P7D it is swept; FAILED stays.
        let rt8 = Runtime::new(db.store.clone(), RuntimeOptions::new(Config::default()).with_virtual_clock(t0() + chrono::Duration::days(8))).unwrap();
        assert_eq!(rt8.sweep_once().await.unwrap(), 1);
        assert!(rt8.inspect(&done).await.is_err());
        assert_eq!(rt8.inspect(&failed).await.unwrap().state, "FAILED");
        // History with the journal off: an explanatory empty shape, not a not-found.
        let h = rt8.history(&failed).await.unwrap();
        assert!(!h.audit && h.entries.is_empty() && h.note.is_some());
    }

    async fn retention_pt0s_deletes_at_completion_but_keeps_failed(db) {
        let config = Config { retention: IsoDuration::ZERO, ..Config::default() };
        let rt = runtime_with(db.store.clone(), config);
        let (done, settled) = run_to_rest(&rt, &one_task(""), json!({"do": "echo"})).await;
        assert_eq!(settled, Settled::Gone);
        assert!(rt.inspect(&done).await.is_err(), "deleted at completion");
        let (failed, _) = run_to_rest(&rt, &one_task(""), json!({"do": "fail"})).await;
        assert_eq!(rt.inspect(&failed).await.unwrap().state, "FAILED");
    }

    async fn the_audit_journal_records_history_when_on(db) {
        let config = Config { audit_sql: true, ..Config::default() };
        let rt = runtime_with(db.store.clone(), config);
        let src = one_task(r#"<q:retry maxAttempts="2" initialDelay="PT1S"/>"#);
        let (id, _) = run_to_rest(&rt, &src, json!({"do": "fail", "until": 2})).await;
        let h = rt.history(&id).await.unwrap();
        assert!(h.audit);
        let kinds: Vec<&str> = h.entries.iter().filter_map(|e| e["kind"].as_str()).collect();
        for k in ["instance_started", "attempt_started", "retry_scheduled", "attempt_ended", "instance_completed"] {
            assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        }
    }

    async fn an_ephemeral_runtime_refuses_a_stateful_process(db) {
        let mut opts = RuntimeOptions::new(Config::default()).with_virtual_clock(t0());
        opts.durable = false;
        let rt = Runtime::new(db.store.clone(), opts).unwrap();
        rt.deploy(TENANT, &one_task(r#"<q:retry maxAttempts="2"/>"#), &modules()).await.unwrap();
        let err = rt
            .start(StartRequest { tenant: TENANT.into(), process_id: "p".into(), ..StartRequest::default() })
            .await
            .unwrap_err();
        assert_eq!(err.code, sutra::Code::DatasourceRequired);
    }
}
