//! BPMN escalation end to end (issue 32 item 2), on SQLite and PostgreSQL,
//! with the virtual clock: intermediate and end escalation throws, caught by
//! interrupting and non-interrupting boundaries of a sub-process or a call
//! activity, codes matched like error codes, and an escalation nobody
//! catches, which is no failure.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{TimeZone, Utc};
use serde_json::json;
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

/// A BPMN document holding `processes` and two escalations.
fn defs(processes: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:escalation id="Late" escalationCode="LATE"/>
  <bpmn:escalation id="Other" escalationCode="OTHER"/>
{processes}
</bpmn:definitions>"#
    )
}

fn process(id: &str, body: &str) -> String {
    format!("<bpmn:process id=\"{id}\" isExecutable=\"true\">\n{body}\n</bpmn:process>")
}

fn task(id: &str) -> String {
    format!(r#"<bpmn:serviceTask id="{id}" implementation="registered:chaos"/>"#)
}

fn flow(id: &str, from: &str, to: &str) -> String {
    format!(r#"<bpmn:sequenceFlow id="{id}" sourceRef="{from}" targetRef="{to}"/>"#)
}

fn throw(id: &str, esc: &str) -> String {
    format!(
        r#"<bpmn:intermediateThrowEvent id="{id}"><bpmn:escalationEventDefinition escalationRef="{esc}"/></bpmn:intermediateThrowEvent>"#
    )
}

fn boundary(id: &str, on: &str, esc: Option<&str>, interrupting: bool) -> String {
    let r = esc
        .map(|e| format!(r#" escalationRef="{e}""#))
        .unwrap_or_default();
    format!(
        r#"<bpmn:boundaryEvent id="{id}" attachedToRef="{on}" cancelActivity="{interrupting}"><bpmn:escalationEventDefinition{r}/></bpmn:boundaryEvent>"#
    )
}

async fn run(rt: &Runtime<AnyStore>, source: &str, process: &str) -> InstanceView {
    rt.deploy(TENANT, source, &modules()).await.unwrap();
    let id = rt
        .start(StartRequest {
            tenant: TENANT.into(),
            process_id: process.into(),
            variables: json!({"do": "echo"}).as_object().cloned().unwrap(),
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

/// start → A → Sub[s → T1 → esc(LATE) → T2 → e] → T4 → end; a boundary on
/// Sub (`boundary`) → T3 → end3.
fn sub_with(boundaries: &[String], thrown: &str) -> String {
    let mut body = vec![
        r#"<bpmn:startEvent id="start"/>"#.to_string(),
        task("A"),
        r#"<bpmn:subProcess id="Sub">"#.to_string(),
        r#"<bpmn:startEvent id="s"/>"#.to_string(),
        task("T1"),
        throw("esc", thrown),
        task("T2"),
        r#"<bpmn:endEvent id="e"/>"#.to_string(),
        flow("s1", "s", "T1"),
        flow("s2", "T1", "esc"),
        flow("s3", "esc", "T2"),
        flow("s4", "T2", "e"),
        "</bpmn:subProcess>".to_string(),
        task("T3"),
        task("T4"),
        r#"<bpmn:endEvent id="end"/>"#.to_string(),
        r#"<bpmn:endEvent id="end3"/>"#.to_string(),
        flow("f1", "start", "A"),
        flow("f2", "A", "Sub"),
        flow("f3", "Sub", "T4"),
        flow("f4", "T4", "end"),
        flow("f6", "T3", "end3"),
    ];
    for b in boundaries {
        body.push(b.clone());
    }
    defs(&process("p", &body.join("\n")))
}

backends::store_tests! {
    async fn an_interrupting_escalation_boundary_ends_the_sub_process_and_takes_its_own_path(db) {
        let rt = runtime(db.store.clone());
        let src = sub_with(
            &[boundary("B", "Sub", Some("Late"), true), flow("f5", "B", "T3")],
            "Late",
        );
        let view = run(&rt, &src, "p").await;
        assert_eq!(view.state, "COMPLETED");
        // T2 (after the throw) and T4 (after the sub-process) never run.
        assert_eq!(tasks(&view), vec!["A", "T1", "T3"]);
        assert_eq!(view.nodes.get("Sub").map(String::as_str), Some("CANCELLED"));
    }

    async fn a_non_interrupting_escalation_boundary_forks_and_the_thrower_goes_on(db) {
        let rt = runtime(db.store.clone());
        let src = sub_with(
            &[boundary("B", "Sub", Some("Late"), false), flow("f5", "B", "T3")],
            "Late",
        );
        let view = run(&rt, &src, "p").await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(tasks(&view), vec!["A", "T1", "T2", "T3", "T4"]);
    }

    async fn a_boundary_naming_another_code_lets_a_catch_all_boundary_catch(db) {
        let rt = runtime(db.store.clone());
        let src = sub_with(
            &[
                boundary("Wrong", "Sub", Some("Other"), true),
                task("TW"),
                flow("fw", "Wrong", "TW"),
                boundary("Any", "Sub", None, true),
                flow("f5", "Any", "T3"),
            ],
            "Late",
        );
        let view = run(&rt, &src, "p").await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(tasks(&view), vec!["A", "T1", "T3"]);
    }

    async fn an_escalation_nobody_catches_is_no_failure(db) {
        let rt = runtime(db.store.clone());
        // Only a boundary for another code: LATE goes uncaught, the thrower goes on.
        let src = sub_with(
            &[boundary("B", "Sub", Some("Other"), true), flow("f5", "B", "T3")],
            "Late",
        );
        let view = run(&rt, &src, "p").await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(tasks(&view), vec!["A", "T1", "T2", "T4"]);
        assert!(view.error.is_none());
    }

    async fn an_escalation_end_event_in_a_sub_process_reaches_a_non_interrupting_boundary(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:subProcess id="Sub">"#.to_string(),
            r#"<bpmn:startEvent id="s"/>"#.to_string(),
            task("T1"),
            r#"<bpmn:endEvent id="e"><bpmn:escalationEventDefinition escalationRef="Late"/></bpmn:endEvent>"#.to_string(),
            flow("s1", "s", "T1"),
            flow("s2", "T1", "e"),
            "</bpmn:subProcess>".to_string(),
            boundary("B", "Sub", Some("Late"), false),
            task("T3"),
            task("T4"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            r#"<bpmn:endEvent id="end3"/>"#.to_string(),
            flow("f1", "start", "Sub"),
            flow("f2", "Sub", "T4"),
            flow("f3", "T4", "end"),
            flow("f4", "B", "T3"),
            flow("f5", "T3", "end3"),
        ]
        .join("\n");
        let view = run(&rt, &defs(&process("p", &body)), "p").await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(tasks(&view), vec!["T1", "T3", "T4"]);
    }

    async fn a_childs_uncaught_escalation_reaches_its_call_activitys_boundary(db) {
        let rt = runtime(db.store.clone());
        let child = [
            r#"<bpmn:startEvent id="cs"/>"#.to_string(),
            task("C1"),
            r#"<bpmn:endEvent id="ce"><bpmn:escalationEventDefinition escalationRef="Late"/></bpmn:endEvent>"#.to_string(),
            flow("c1", "cs", "C1"),
            flow("c2", "C1", "ce"),
        ]
        .join("\n");
        let parent = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:callActivity id="Call" calledElement="child"/>"#.to_string(),
            boundary("B", "Call", Some("Late"), true),
            task("Handled"),
            task("Normal"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            r#"<bpmn:endEvent id="end2"/>"#.to_string(),
            flow("f1", "start", "Call"),
            flow("f2", "Call", "Normal"),
            flow("f3", "Normal", "end"),
            flow("f4", "B", "Handled"),
            flow("f5", "Handled", "end2"),
        ]
        .join("\n");
        let src = defs(&format!("{}\n{}", process("p", &parent), process("child", &child)));
        let view = run(&rt, &src, "p").await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(tasks(&view), vec!["Call", "Handled"]);
        assert_eq!(view.nodes.get("Normal"), None);
    }
}

#[test]
fn an_escalation_throw_needs_an_escalation_it_can_name() {
    let codes = |source: &str| -> Vec<String> {
        sutra::dialect::bpmn::load(source)
            .errors()
            .map(|d| {
                format!(
                    "{} {}",
                    d.code.as_str(),
                    d.element.clone().unwrap_or_default()
                )
            })
            .collect()
    };
    let catch = [boundary("B", "Sub", None, true), flow("f5", "B", "T3")];
    let unnamed = sub_with(&catch, "Late").replace(r#" escalationRef="Late""#, "");
    assert_eq!(
        codes(&unnamed),
        vec!["SUTRA.CONFIG.BPMN.INVALID_ATTRIBUTE esc"]
    );
    let dangling = sub_with(&catch, "Nowhere");
    assert_eq!(
        codes(&dangling),
        vec!["SUTRA.CONFIG.BPMN.DANGLING_REFERENCE esc"]
    );
}
