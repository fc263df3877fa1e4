//! BPMN constructs of issue 29 end to end, on SQLite and PostgreSQL, with the
//! virtual clock: the inclusive gateway, implicit starts and ends, an unnamed
//! error, a join that can never fire, an interrupting boundary that leaves
//! nothing running.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::runtime::{InstanceView, Runtime, RuntimeOptions, Settled, StartRequest};
use sutra::store::{AnyStore, Store};

const TENANT: &str = "acme";

fn runtime(store: AnyStore) -> Runtime<AnyStore> {
    let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap();
    Runtime::new(
        store,
        RuntimeOptions::new(Config::default()).with_virtual_clock(t0),
    )
    .unwrap()
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
  <bpmn:error id="Named" errorCode="NAMED"/>
  <bpmn:process id="p" isExecutable="true">
{body}
  </bpmn:process>
</bpmn:definitions>"#
    )
}

fn task(id: &str) -> String {
    format!(r#"<bpmn:serviceTask id="{id}" implementation="registered:chaos"/>"#)
}

fn flow(id: &str, from: &str, to: &str) -> String {
    format!(r#"<bpmn:sequenceFlow id="{id}" sourceRef="{from}" targetRef="{to}"/>"#)
}

fn cond(id: &str, from: &str, to: &str, c: &str) -> String {
    format!(
        r#"<bpmn:sequenceFlow id="{id}" sourceRef="{from}" targetRef="{to}"><bpmn:conditionExpression>{c}</bpmn:conditionExpression></bpmn:sequenceFlow>"#
    )
}

async fn run(rt: &Runtime<AnyStore>, source: &str, vars: Value) -> InstanceView {
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
    assert!(matches!(settled, Settled::Terminal(_)), "{id} did not end");
    rt.inspect(&id).await.unwrap()
}

fn tasks(view: &InstanceView) -> Vec<String> {
    let mut v: Vec<String> = view.attempts.iter().map(|a| a.task.clone()).collect();
    v.sort();
    v
}

/// start → split (inclusive, default → Log) → [ship] Ship, [bill] Bill → join → Done → end.
fn inclusive() -> String {
    bpmn(
        &[
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:inclusiveGateway id="split" default="none"/>"#.to_string(),
            task("Ship"),
            task("Bill"),
            task("Log"),
            r#"<bpmn:inclusiveGateway id="join"/>"#.to_string(),
            task("Done"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f0", "start", "split"),
            cond("toShip", "split", "Ship", "ship"),
            cond("toBill", "split", "Bill", "bill"),
            flow("none", "split", "Log"),
            flow("f1", "Ship", "join"),
            flow("f2", "Bill", "join"),
            flow("f3", "Log", "join"),
            flow("f4", "join", "Done"),
            flow("f5", "Done", "end"),
        ]
        .join("\n"),
    )
}

backends::store_tests! {
    async fn an_inclusive_split_and_its_or_join_run_every_taken_branch_then_once_after(db) {
        let rt = runtime(db.store.clone());
        for (vars, want) in [
            (json!({"ship": true, "bill": true, "do": "echo"}), vec!["Bill", "Done", "Ship"]),
            (json!({"ship": false, "bill": true, "do": "echo"}), vec!["Bill", "Done"]),
            (json!({"ship": false, "bill": false, "do": "echo"}), vec!["Done", "Log"]),
        ] {
            let view = run(&rt, &inclusive(), vars).await;
            assert_eq!(view.state, "COMPLETED");
            assert_eq!(tasks(&view), want);
            assert_eq!(view.nodes["join"], "SUCCEEDED");
            assert!(db.store.parks_of(&view.instance).await.unwrap().is_empty());
        }
    }

    async fn a_process_without_start_or_end_events_starts_every_entry_and_ends_implicitly(db) {
        let rt = runtime(db.store.clone());
        let src = bpmn(&[task("A"), task("B"), task("C"), flow("f", "A", "C")].join("\n"));
        let view = run(&rt, &src, json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(tasks(&view), vec!["A", "B", "C"]);
    }

    async fn an_error_end_without_error_ref_is_caught_only_by_a_catch_all_boundary(db) {
        let rt = runtime(db.store.clone());
        let body = |boundary: &str| bpmn(&format!(r#"
    <bpmn:startEvent id="start"/>
    <bpmn:subProcess id="sub">
      <bpmn:startEvent id="s0"/>
      <bpmn:endEvent id="boom"><bpmn:errorEventDefinition/></bpmn:endEvent>
      {}
    </bpmn:subProcess>
    <bpmn:boundaryEvent id="caught" attachedToRef="sub"><bpmn:errorEventDefinition {boundary}/></bpmn:boundaryEvent>
    {}
    <bpmn:endEvent id="end"/>
    {} {} {}"#,
            flow("s1", "s0", "boom"), task("Handled"), flow("f0", "start", "sub"),
            flow("f1", "sub", "end"), flow("f2", "caught", "Handled")));
        let view = run(&rt, &body(""), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(tasks(&view), vec!["Handled"]);
        // A boundary naming an error does not catch the unnamed one.
        let view = run(&rt, &body(r#"errorRef="Named""#), json!({"do": "echo"})).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(view.error.unwrap().code, "SUTRA.RUNTIME.BPMN.UNNAMED_ERROR");
    }

    async fn two_none_starts_into_a_parallel_join_fail_instead_of_waiting_forever(db) {
        let rt = runtime(db.store.clone());
        let src = bpmn(&[
            r#"<bpmn:startEvent id="s1"/><bpmn:startEvent id="s2"/>"#.to_string(),
            r#"<bpmn:parallelGateway id="join"/>"#.to_string(),
            task("T"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("a", "s1", "join"), flow("b", "s2", "join"), flow("c", "join", "T"), flow("d", "T", "end"),
        ].join("\n"));
        let view = run(&rt, &src, json!({"do": "echo"})).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(view.error.unwrap().code, "SUTRA.RUNTIME.JOIN.DEAD_EDGE");
        assert!(view.attempts.is_empty());
        assert!(db.store.parks_of(&view.instance).await.unwrap().is_empty());
    }

    async fn an_interrupting_timer_on_a_sub_process_leaves_nothing_running_inside(db) {
        let rt = runtime(db.store.clone());
        // Inner fails and would retry in 10 s; the PT2S boundary interrupts first.
        let src = bpmn(&format!(r#"
    <bpmn:startEvent id="start"/>
    <bpmn:subProcess id="sub">
      <bpmn:startEvent id="s0"/>
      <bpmn:serviceTask id="Inner" implementation="registered:chaos">
        <bpmn:extensionElements><q:retry maxAttempts="3" initialDelay="PT10S"/></bpmn:extensionElements>
      </bpmn:serviceTask>
      <bpmn:endEvent id="s9"/>
      {} {}
    </bpmn:subProcess>
    <bpmn:boundaryEvent id="late" attachedToRef="sub">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT2S</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:boundaryEvent>
    {}
    <bpmn:endEvent id="end"/>
    {} {} {}"#,
            flow("s1", "s0", "Inner"), flow("s2", "Inner", "s9"), task("TimedOut"),
            flow("f0", "start", "sub"), flow("f1", "sub", "end"), flow("f2", "late", "TimedOut")));
        let vars = json!({"do": "echo", "by-task": {"Inner": {"do": "fail", "code": "DOWN"}}});
        let view = run(&rt, &src, vars).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.nodes["Inner"], "CANCELLED");
        assert_eq!(view.nodes["sub"], "CANCELLED");
        let inner: Vec<&str> = view.attempts.iter().filter(|a| a.task == "Inner").map(|a| a.outcome.as_str()).collect();
        assert_eq!(inner, vec!["failed"], "one attempt, then the boundary, never the retry");
        assert!(view.attempts.iter().any(|a| a.task == "TimedOut"));
        assert!(db.store.parks_of(&view.instance).await.unwrap().is_empty());
    }
}
