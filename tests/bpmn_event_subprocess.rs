//! BPMN event sub-processes end to end (issue 32 item 3), on SQLite and
//! PostgreSQL, with the virtual clock: error, escalation, timer and message
//! starts, interrupting and not, at process and sub-process level; the
//! listeners (parks) withdrawn when their scope ends.

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
  <bpmn:error id="Named" errorCode="NAMED"/>
  <bpmn:escalation id="Late" escalationCode="LATE"/>
  <bpmn:message id="Abort" name="abort"/>
  <bpmn:message id="Never" name="never"/>
  <bpmn:signal id="StopSignal" name="stop"/>
  <bpmn:signal id="PingSignal" name="ping"/>
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

/// An event sub-process `id` whose start (`def`, interrupting or not) runs `handler`.
fn event_sub(id: &str, def: &str, interrupting: bool, handler: &str) -> String {
    format!(
        r#"<bpmn:subProcess id="{id}" triggeredByEvent="true">
  <bpmn:startEvent id="{id}_start" isInterrupting="{interrupting}">{def}</bpmn:startEvent>
  {}
  <bpmn:endEvent id="{id}_end"/>
  {}
  {}
</bpmn:subProcess>"#,
        task(handler),
        flow(&format!("{id}_f1"), &format!("{id}_start"), handler),
        flow(&format!("{id}_f2"), handler, &format!("{id}_end")),
    )
}

async fn start(rt: &Runtime<AnyStore>, source: &str, vars: Value) -> String {
    rt.deploy(TENANT, source, &modules()).await.unwrap();
    rt.start(StartRequest {
        tenant: TENANT.into(),
        process_id: "p".into(),
        variables: vars.as_object().cloned().unwrap(),
        ..StartRequest::default()
    })
    .await
    .unwrap()
}

async fn run(rt: &Runtime<AnyStore>, source: &str, vars: Value) -> InstanceView {
    let id = start(rt, source, vars).await;
    let settled = rt.settle(&id).await.unwrap();
    assert!(matches!(settled, Settled::Terminal(_)), "{id} did not end");
    rt.inspect(&id).await.unwrap()
}

fn tasks(view: &InstanceView) -> Vec<String> {
    let mut v: Vec<String> = view.attempts.iter().map(|a| a.task.clone()).collect();
    v.sort();
    v
}

fn business(task: &str) -> Value {
    json!({"do": "echo", "by-task": {task: {"do": "business", "code": "NAMED"}}})
}

backends::store_tests! {
    async fn an_error_event_sub_process_at_process_level_catches_a_tasks_error(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            task("Work"),
            task("After"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "Work"),
            flow("f2", "Work", "After"),
            flow("f3", "After", "end"),
            event_sub("OnError", r#"<bpmn:errorEventDefinition errorRef="Named"/>"#, true, "Handle"),
        ]
        .join("\n");
        let view = run(&rt, &bpmn(&body), business("Work")).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(tasks(&view), vec!["Handle", "Work"]);
        assert_eq!(view.nodes.get("Work").map(String::as_str), Some("FAILED"));
        assert_eq!(view.nodes.get("OnError").map(String::as_str), Some("SUCCEEDED"));
    }

    async fn an_error_event_sub_process_inside_a_sub_process_lets_the_sub_process_complete(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:subProcess id="Sub">"#.to_string(),
            r#"<bpmn:startEvent id="s"/>"#.to_string(),
            task("Work"),
            task("Skipped"),
            r#"<bpmn:endEvent id="e"/>"#.to_string(),
            flow("s1", "s", "Work"),
            flow("s2", "Work", "Skipped"),
            flow("s3", "Skipped", "e"),
            // A catch-all (no errorRef).
            event_sub("Fix", r#"<bpmn:errorEventDefinition/>"#, true, "Repair"),
            "</bpmn:subProcess>".to_string(),
            task("After"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "Sub"),
            flow("f2", "Sub", "After"),
            flow("f3", "After", "end"),
        ]
        .join("\n");
        let view = run(&rt, &bpmn(&body), business("Work")).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(tasks(&view), vec!["After", "Repair", "Work"]);
    }

    async fn a_shared_event_definition_starts_an_error_event_sub_process(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            task("Work"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "Work"),
            flow("f2", "Work", "end"),
            event_sub("OnError", "<bpmn:eventDefinitionRef>SharedError</bpmn:eventDefinitionRef>", true, "Handle"),
        ]
        .join("\n");
        let shared = r#"<bpmn:errorEventDefinition id="SharedError" errorRef="Named"/>
  <bpmn:process id="p""#;
        let src = bpmn(&body).replacen(r#"<bpmn:process id="p""#, shared, 1);
        let view = run(&rt, &src, business("Work")).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(tasks(&view), vec!["Handle", "Work"]);
    }

    async fn a_terminate_end_event_inside_a_sub_process_ends_that_scope_only(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:subProcess id="Sub">"#.to_string(),
            r#"<bpmn:startEvent id="s"/>"#.to_string(),
            r#"<bpmn:parallelGateway id="fork"/>"#.to_string(),
            task("A"),
            r#"<bpmn:endEvent id="stop"><bpmn:terminateEventDefinition/></bpmn:endEvent>"#.to_string(),
            r#"<bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>"#.to_string(),
            task("B"),
            r#"<bpmn:endEvent id="e"/>"#.to_string(),
            flow("s1", "s", "fork"),
            flow("s2", "fork", "A"),
            flow("s3", "A", "stop"),
            flow("s4", "fork", "wait"),
            flow("s5", "wait", "B"),
            flow("s6", "B", "e"),
            "</bpmn:subProcess>".to_string(),
            task("After"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "Sub"),
            flow("f2", "Sub", "After"),
            flow("f3", "After", "end"),
        ]
        .join("\n");
        let view = run(&rt, &bpmn(&body), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        // The terminate ended the sub-process (the timer branch with it), not the instance.
        assert_eq!(tasks(&view), vec!["A", "After"]);
        assert_eq!(view.nodes.get("wait").map(String::as_str), Some("CANCELLED"));
        assert_eq!(view.nodes.get("Sub").map(String::as_str), Some("SUCCEEDED"));
    }

    async fn a_conditional_catch_waits_until_another_branch_makes_its_condition_true(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:parallelGateway id="fork"/>"#.to_string(),
            r#"<bpmn:intermediateCatchEvent id="until"><bpmn:conditionalEventDefinition><bpmn:condition>go == true</bpmn:condition></bpmn:conditionalEventDefinition></bpmn:intermediateCatchEvent>"#.to_string(),
            task("Then"),
            r#"<bpmn:intermediateCatchEvent id="later"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1M</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>"#.to_string(),
            task("Set"),
            flow("f1", "start", "fork"),
            flow("f2", "fork", "until"),
            flow("f3", "until", "Then"),
            flow("f4", "fork", "later"),
            flow("f5", "later", "Set"),
        ]
        .join("\n");
        let vars = json!({"do": "echo", "go": false, "by-task": {"Set": {"do": "emit", "output": {"go": true}}}});
        let view = run(&rt, &bpmn(&body), vars).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        // Then ran only after Set made `go` true.
        let order: Vec<&str> = view.attempts.iter().map(|a| a.task.as_str()).collect();
        assert_eq!(order, vec!["Set", "Then"]);
    }

    async fn a_non_interrupting_conditional_boundary_fires_once_per_change_to_true(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:subProcess id="Sub">"#.to_string(),
            r#"<bpmn:startEvent id="s"/>"#.to_string(),
            task("Raise"),
            r#"<bpmn:intermediateCatchEvent id="pause"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1M</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>"#.to_string(),
            task("Higher"),
            r#"<bpmn:endEvent id="e"/>"#.to_string(),
            flow("s1", "s", "Raise"),
            flow("s2", "Raise", "pause"),
            flow("s3", "pause", "Higher"),
            flow("s4", "Higher", "e"),
            "</bpmn:subProcess>".to_string(),
            r#"<bpmn:boundaryEvent id="High" attachedToRef="Sub" cancelActivity="false"><bpmn:conditionalEventDefinition><bpmn:condition>level &gt;= 1</bpmn:condition></bpmn:conditionalEventDefinition></bpmn:boundaryEvent>"#.to_string(),
            task("Alarm"),
            task("After"),
            flow("f1", "start", "Sub"),
            flow("f2", "Sub", "After"),
            flow("f3", "High", "Alarm"),
        ]
        .join("\n");
        let vars = json!({"do": "echo", "level": 0, "by-task": {
            "Raise": {"do": "emit", "output": {"level": 1}},
            "Higher": {"do": "emit", "output": {"level": 2}}
        }});
        let view = run(&rt, &bpmn(&body), vars).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        // Still true after Higher: no second alarm.
        assert_eq!(tasks(&view), vec!["After", "Alarm", "Higher", "Raise"]);
    }

    async fn an_interrupting_conditional_event_sub_process_ends_its_scope_when_its_condition_turns_true(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            task("Stop"),
            r#"<bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>"#.to_string(),
            task("Main"),
            flow("f1", "start", "Stop"),
            flow("f2", "Stop", "wait"),
            flow("f3", "wait", "Main"),
            event_sub("Halt", r#"<bpmn:conditionalEventDefinition><bpmn:condition>stop</bpmn:condition></bpmn:conditionalEventDefinition>"#, true, "H"),
        ]
        .join("\n");
        let vars = json!({"do": "echo", "stop": false, "by-task": {"Stop": {"do": "emit", "output": {"stop": true}}}});
        let view = run(&rt, &bpmn(&body), vars).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(tasks(&view), vec!["H", "Stop"]);
        assert_eq!(view.nodes.get("wait").map(String::as_str), Some("CANCELLED"));
    }

    async fn a_non_interrupting_escalation_event_sub_process_runs_beside_its_scope(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:subProcess id="Sub">"#.to_string(),
            event_sub("Notify", r#"<bpmn:escalationEventDefinition escalationRef="Late"/>"#, false, "Tell"),
            r#"<bpmn:startEvent id="s"/>"#.to_string(),
            r#"<bpmn:intermediateThrowEvent id="esc"><bpmn:escalationEventDefinition escalationRef="Late"/></bpmn:intermediateThrowEvent>"#.to_string(),
            task("T1"),
            r#"<bpmn:endEvent id="e"/>"#.to_string(),
            flow("s1", "s", "esc"),
            flow("s2", "esc", "T1"),
            flow("s3", "T1", "e"),
            "</bpmn:subProcess>".to_string(),
            task("T3"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "Sub"),
            flow("f2", "Sub", "T3"),
            flow("f3", "T3", "end"),
        ]
        .join("\n");
        let view = run(&rt, &bpmn(&body), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(tasks(&view), vec!["T1", "T3", "Tell"]);
    }

    async fn a_non_interrupting_timer_event_sub_process_runs_at_each_slot_of_its_cycle(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>"#.to_string(),
            task("Main"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "wait"),
            flow("f2", "wait", "Main"),
            flow("f3", "Main", "end"),
            event_sub(
                "Remind",
                r#"<bpmn:timerEventDefinition><bpmn:timeCycle>R2/PT10M</bpmn:timeCycle></bpmn:timerEventDefinition>"#,
                false,
                "Tick",
            ),
        ]
        .join("\n");
        let view = run(&rt, &bpmn(&body), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(tasks(&view), vec!["Main", "Tick", "Tick"]);
        assert!(view.waits.is_empty());
    }

    async fn an_interrupting_message_event_sub_process_cancels_the_waiting_process(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Never"/></bpmn:intermediateCatchEvent>"#.to_string(),
            task("Main"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "wait"),
            flow("f2", "wait", "Main"),
            flow("f3", "Main", "end"),
            event_sub("Cancel", r#"<bpmn:messageEventDefinition messageRef="Abort"/>"#, true, "Undo"),
        ]
        .join("\n");
        let id = start(&rt, &bpmn(&body), json!({"do": "echo"})).await;
        assert!(matches!(rt.settle(&id).await.unwrap(), Settled::Waiting(_)));
        let waiting = rt.inspect(&id).await.unwrap();
        assert_eq!(waiting.waits.len(), 2, "the catch and the listener: {:?}", waiting.waits);
        let to = rt.correlate(TENANT, "abort", None, serde_json::Map::new()).await.unwrap();
        assert_eq!(to, id);
        assert!(matches!(rt.settle(&id).await.unwrap(), Settled::Terminal(_)));
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(tasks(&view), vec!["Undo"]);
        assert_eq!(view.nodes.get("wait").map(String::as_str), Some("CANCELLED"));
    }

    async fn a_signal_starts_an_event_sub_process_interrupting_or_beside_the_scope(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            r#"<bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Never"/></bpmn:intermediateCatchEvent>"#.to_string(),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "wait"),
            flow("f2", "wait", "end"),
            event_sub("OnPing", r#"<bpmn:signalEventDefinition signalRef="PingSignal"/>"#, false, "Pong"),
            event_sub("OnStop", r#"<bpmn:signalEventDefinition signalRef="StopSignal"/>"#, true, "Undo"),
        ]
        .join("\n");
        let id = start(&rt, &bpmn(&body), json!({"do": "echo"})).await;
        assert!(matches!(rt.settle(&id).await.unwrap(), Settled::Waiting(_)));
        // Non-interrupting: it runs beside the waiting process, once per signal.
        for _ in 0..2 {
            let answer = rt.signal(TENANT, "ping", serde_json::Map::new()).await.unwrap();
            assert_eq!(answer.delivered, 1, "{answer:?}");
            assert!(matches!(rt.settle(&id).await.unwrap(), Settled::Waiting(_)));
        }
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(tasks(&view), vec!["Pong", "Pong"]);
        assert_eq!(view.nodes.get("wait").map(String::as_str), Some("RUNNING"), "{:?}", view.nodes);
        // Interrupting: the waiting catch is cancelled and the handler ends the instance.
        let answer = rt.signal(TENANT, "stop", serde_json::Map::new()).await.unwrap();
        assert_eq!(answer.delivered, 1);
        assert!(matches!(rt.settle(&id).await.unwrap(), Settled::Terminal(_)));
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{:?}", view.error);
        assert_eq!(tasks(&view), vec!["Pong", "Pong", "Undo"]);
        assert_eq!(view.nodes.get("wait").map(String::as_str), Some("CANCELLED"));
        // Nobody listens any more.
        let late = rt.signal(TENANT, "ping", serde_json::Map::new()).await.unwrap();
        assert_eq!(late.delivered, 0);
    }

    async fn a_scope_that_ends_withdraws_its_event_sub_process_listeners(db) {
        let rt = runtime(db.store.clone());
        let body = [
            r#"<bpmn:startEvent id="start"/>"#.to_string(),
            task("Main"),
            r#"<bpmn:endEvent id="end"/>"#.to_string(),
            flow("f1", "start", "Main"),
            flow("f2", "Main", "end"),
            event_sub("Cancel", r#"<bpmn:messageEventDefinition messageRef="Abort"/>"#, false, "Undo"),
        ]
        .join("\n");
        let view = run(&rt, &bpmn(&body), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(tasks(&view), vec!["Main"]);
        assert!(view.waits.is_empty());
        // Nobody listens any more: the message is not correlated.
        let err = rt.correlate(TENANT, "abort", None, serde_json::Map::new()).await;
        assert!(err.is_err());
    }
}

#[test]
fn event_sub_process_mistakes_and_refusals_are_reported_at_load() {
    let codes = |body: &str| -> Vec<String> {
        sutra::dialect::bpmn::load(&bpmn(body))
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
    let main = [
        r#"<bpmn:startEvent id="start"/>"#.to_string(),
        task("Main"),
        flow("f1", "start", "Main"),
    ]
    .join("\n");
    // A sequence flow into an event sub-process.
    let entered = format!(
        "{main}\n{}\n{}",
        event_sub("E", r#"<bpmn:errorEventDefinition/>"#, true, "H"),
        flow("f9", "Main", "E")
    );
    assert_eq!(codes(&entered), vec!["SUTRA.CONFIG.BPMN.INVALID_FLOW f9"]);
    // An error start that would not interrupt.
    let soft = format!(
        "{main}\n{}",
        event_sub("E", r#"<bpmn:errorEventDefinition/>"#, false, "H")
    );
    assert_eq!(
        codes(&soft),
        vec!["SUTRA.CONFIG.BPMN.INVALID_ATTRIBUTE E_start"]
    );
    // A conditional start of the process itself: refused with its own code.
    let conditional = main.replace(
        r#"<bpmn:startEvent id="start"/>"#,
        r#"<bpmn:startEvent id="start"><bpmn:conditionalEventDefinition><bpmn:condition>x &gt; 1</bpmn:condition></bpmn:conditionalEventDefinition></bpmn:startEvent>"#,
    );
    assert_eq!(
        codes(&conditional),
        vec!["SUTRA.CONFIG.BPMN.CONDITIONAL_UNSUPPORTED start"]
    );
    // A conditional event without its condition.
    let bare = format!(
        "{main}\n{}",
        event_sub("E", r#"<bpmn:conditionalEventDefinition/>"#, true, "H")
    );
    assert_eq!(
        codes(&bare),
        vec!["SUTRA.CONFIG.BPMN.INVALID_ATTRIBUTE E_start"]
    );
}
