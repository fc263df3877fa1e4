//! BPMN compensation end to end (issue 32 item 4), on SQLite and PostgreSQL,
//! with the virtual clock: compensation boundary events and their
//! `isForCompensation` handlers, intermediate and end compensate throws with
//! and without `activityRef`, a completed sub-process compensated through
//! its inner handlers, newest completion first, one at a time; a failed
//! handler recorded with `SUTRA.RUNTIME.COMPENSATION.FAILED`; an uncaught
//! failure that compensates nothing (BPMN compensation is explicit).

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::runtime::{InstanceView, Runtime, RuntimeOptions, Settled, StartRequest};
use sutra::store::AnyStore;

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

fn bpmn(body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
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

/// Task `id` with a compensation boundary and its handler `Undo<id>`.
fn compensable(id: &str) -> String {
    format!(
        r#"<bpmn:serviceTask id="{id}" implementation="registered:chaos"/>
<bpmn:boundaryEvent id="c{id}" attachedToRef="{id}"><bpmn:compensateEventDefinition/></bpmn:boundaryEvent>
<bpmn:serviceTask id="Undo{id}" isForCompensation="true" implementation="registered:chaos"/>
<bpmn:association id="a{id}" associationDirection="One" sourceRef="c{id}" targetRef="Undo{id}"/>"#
    )
}

fn throw(id: &str, activity: Option<&str>) -> String {
    let r = activity
        .map(|a| format!(r#" activityRef="{a}""#))
        .unwrap_or_default();
    format!(
        r#"<bpmn:intermediateThrowEvent id="{id}"><bpmn:compensateEventDefinition{r}/></bpmn:intermediateThrowEvent>"#
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

/// The tasks in the order their attempts were recorded.
fn order(view: &InstanceView) -> Vec<String> {
    view.attempts.iter().map(|a| a.task.clone()).collect()
}

/// start → A → B → throw → C → end.
fn chain(thrown: &str) -> String {
    bpmn(
        &[
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            compensable("A"),
            compensable("B"),
            thrown.to_string(),
            task("C"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "A"),
            flow("f2", "A", "B"),
            flow("f3", "B", "comp"),
            flow("f4", "comp", "C"),
            flow("f5", "C", "end"),
        ]
        .join("\n"),
    )
}

backends::store_tests! {
    async fn a_compensate_throw_runs_the_handlers_newest_first_then_goes_on(db) {
        let rt = runtime(db.store.clone());
        let view = run(&rt, &chain(&throw("comp", None)), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(order(&view), vec!["A", "B", "UndoB", "UndoA", "C"]);
        assert_eq!(view.nodes.get("A").map(String::as_str), Some("COMPENSATED"));
        assert_eq!(view.nodes.get("B").map(String::as_str), Some("COMPENSATED"));
        assert_eq!(view.nodes.get("C").map(String::as_str), Some("SUCCEEDED"));
    }

    async fn a_compensate_throw_with_an_activity_ref_compensates_that_activity_only(db) {
        let rt = runtime(db.store.clone());
        let view = run(&rt, &chain(&throw("comp", Some("A"))), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(order(&view), vec!["A", "B", "UndoA", "C"]);
        assert_eq!(view.nodes.get("B").map(String::as_str), Some("SUCCEEDED"));
    }

    async fn a_completed_sub_process_is_compensated_through_its_inner_handlers(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            compensable("Z"),
            r#"<bpmn:subProcess id="Sub">"#.to_string(),
            r#"<bpmn:startEvent id="s"/>"#.to_string(),
            compensable("A"),
            compensable("B"),
            r#"<bpmn:endEvent id="e"/>"#.to_string(),
            flow("s1", "s", "A"),
            flow("s2", "A", "B"),
            flow("s3", "B", "e"),
            "</bpmn:subProcess>".to_string(),
            r#"<bpmn:endEvent id="end"><bpmn:compensateEventDefinition activityRef="Sub"/></bpmn:endEvent>"#.to_string(),
            flow("f0", "start", "Z"),
            flow("f1", "Z", "Sub"),
            flow("f2", "Sub", "end"),
        ]
        .join("\n");
        let view = run(&rt, &bpmn(&body), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        // Z is outside the named sub-process: not compensated.
        assert_eq!(order(&view), vec!["Z", "A", "B", "UndoB", "UndoA"]);
        assert_eq!(view.nodes.get("Z").map(String::as_str), Some("SUCCEEDED"));
    }

    async fn a_throw_inside_a_sub_process_compensates_what_completed_there(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            compensable("Z"),
            r#"<bpmn:subProcess id="Sub">"#.to_string(),
            r#"<bpmn:startEvent id="s"/>"#.to_string(),
            compensable("A"),
            throw("comp", None),
            r#"<bpmn:endEvent id="e"/>"#.to_string(),
            flow("s1", "s", "A"),
            flow("s2", "A", "comp"),
            flow("s3", "comp", "e"),
            "</bpmn:subProcess>".to_string(),
            task("After"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f0", "start", "Z"),
            flow("f1", "Z", "Sub"),
            flow("f2", "Sub", "After"),
            flow("f3", "After", "end"),
        ]
        .join("\n");
        let view = run(&rt, &bpmn(&body), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(order(&view), vec!["Z", "A", "UndoA", "After"]);
    }

    async fn a_failed_handler_is_recorded_and_the_others_still_run(db) {
        let rt = runtime(db.store.clone());
        let vars = json!({"do": "echo", "by-task": {"UndoB": {"do": "fail", "code": "BROKEN"}}});
        let view = run(&rt, &chain(&throw("comp", None)), vars).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(order(&view), vec!["A", "B", "UndoB", "UndoA", "C"]);
        let undo_b = view.attempts.iter().find(|a| a.task == "UndoB").unwrap();
        assert_eq!(undo_b.code.as_deref(), Some("SUTRA.RUNTIME.COMPENSATION.FAILED"));
        assert_eq!(view.nodes.get("B").map(String::as_str), Some("SUCCEEDED"));
        assert_eq!(view.nodes.get("A").map(String::as_str), Some("COMPENSATED"));
    }

    async fn an_uncaught_failure_compensates_nothing_in_bpmn(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            compensable("A"),
            task("Boom"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "A"),
            flow("f2", "A", "Boom"),
            flow("f3", "Boom", "end"),
        ]
        .join("\n");
        let vars = json!({"do": "echo", "by-task": {"Boom": {"do": "business", "code": "NOPE"}}});
        let view = run(&rt, &bpmn(&body), vars).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(order(&view), vec!["A", "Boom"]);
    }
}

/// The codes and elements a load reports.
fn refusals(source: &str) -> Vec<(String, String)> {
    let loaded = sutra::dialect::bpmn::load(source);
    loaded
        .errors()
        .map(|d| {
            (
                d.code.as_str().to_string(),
                d.element.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn pair(code: &str, element: &str) -> (String, String) {
    (code.to_string(), element.to_string())
}

#[test]
fn compensation_mistakes_are_refused_at_load_with_their_element() {
    // A handler no association links to a compensation boundary.
    let lonely = bpmn(&[
        r#"<bpmn:startEvent id="start"/>"#.to_string(),
        task("A"),
        r#"<bpmn:serviceTask id="Undo" isForCompensation="true" implementation="registered:chaos"/>"#.to_string(),
        flow("f1", "start", "A"),
    ]
    .join("\n"));
    assert_eq!(
        refusals(&lonely),
        vec![pair("SUTRA.CONFIG.BPMN.INVALID_ATTRIBUTE", "Undo")]
    );
    // waitForCompletion="false".
    let nowait = chain(
        r#"<bpmn:intermediateThrowEvent id="comp"><bpmn:compensateEventDefinition waitForCompletion="false"/></bpmn:intermediateThrowEvent>"#,
    );
    assert_eq!(
        refusals(&nowait),
        vec![pair("SUTRA.CONFIG.BPMN.UNSUPPORTED_ELEMENT", "comp")]
    );
    // A handler on a sequence flow.
    let flowing = chain(&throw("comp", None)).replace(
        r#"<bpmn:sequenceFlow id="f5" sourceRef="C" targetRef="end"/>"#,
        r#"<bpmn:sequenceFlow id="f5" sourceRef="C" targetRef="UndoA"/>"#,
    );
    assert!(
        refusals(&flowing).contains(&pair("SUTRA.CONFIG.BPMN.INVALID_FLOW", "UndoA")),
        "{:?}",
        refusals(&flowing)
    );
    // activityRef naming nothing.
    let dangling = chain(&throw("comp", Some("Nope")));
    assert_eq!(
        refusals(&dangling),
        vec![pair("SUTRA.CONFIG.BPMN.DANGLING_REFERENCE", "comp")]
    );
}
