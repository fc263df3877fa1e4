//! BPMN multi-instance activities, standard loops and call activities (issue
//! 29 items 1–3) end to end, on SQLite and PostgreSQL, with the virtual
//! clock: results in input order, each iteration its own variables, the
//! completion condition cancelling the rest, a boundary on the body
//! interrupting every iteration, an error out of one iteration, loops and
//! their budget, a child process's output and BPMN error.

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

/// A BPMN document around `body` (process `p`) and `more` (other processes).
fn bpmn_with(body: &str, more: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:error id="Named" errorCode="NAMED"/>
  <bpmn:process id="p" isExecutable="true">
{body}
  </bpmn:process>
{more}
</bpmn:definitions>"#
    )
}

fn bpmn(body: &str) -> String {
    bpmn_with(body, "")
}

fn flow(id: &str, from: &str, to: &str) -> String {
    format!(r#"<bpmn:sequenceFlow id="{id}" sourceRef="{from}" targetRef="{to}"/>"#)
}

/// start → `activity` (id `T`) → end, plus `extra` (boundaries and what they lead to).
fn around(activity: &str, extra: &str) -> String {
    bpmn(&format!(
        r#"<bpmn:startEvent id="start"/>
{activity}
<bpmn:endEvent id="end"/>
{} {}
{extra}"#,
        flow("f0", "start", "T"),
        flow("f1", "T", "end")
    ))
}

/// A multi-instance service task `T` whose input is its element `item`.
fn mi_task(sequential: bool, mi_body: &str, ext: &str) -> String {
    format!(
        r#"<bpmn:serviceTask id="T" implementation="registered:chaos">
  <bpmn:extensionElements><q:io inputPath="$.item"/>{ext}</bpmn:extensionElements>
  <bpmn:multiInstanceLoopCharacteristics isSequential="{sequential}">{mi_body}</bpmn:multiInstanceLoopCharacteristics>
</bpmn:serviceTask>"#
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

/// Process `child`: one chaos task.
const WORK_CHILD: &str = r#"<bpmn:process id="child" isExecutable="true">
    <bpmn:startEvent id="c0"/>
    <bpmn:serviceTask id="Work" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="c1" sourceRef="c0" targetRef="Work"/>
  </bpmn:process>"#;

fn attempts_of<'v>(view: &'v InstanceView, task: &str) -> Vec<&'v str> {
    view.attempts
        .iter()
        .filter(|a| a.task == task)
        .map(|a| a.outcome.as_str())
        .collect()
}

fn echo(n: u64) -> Value {
    json!({"do": "echo", "n": n})
}

backends::store_tests! {
    async fn a_parallel_multi_instance_collects_results_in_input_order_in_scopes_of_their_own(db) {
        let rt = runtime(db.store.clone());
        let q = r#"<bpmn:extensionElements><q:multiInstance collection="items" element="item" outputCollection="results" outputElement="[n, loopCounter]" maxConcurrency="2"/></bpmn:extensionElements>"#;
        let src = around(&mi_task(false, q, ""), "");
        let items: Vec<Value> = (1..=5).map(echo).collect();
        let view = run(&rt, &src, json!({"items": items})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["results"], json!([[1, 1], [2, 2], [3, 3], [4, 4], [5, 5]]));
        assert_eq!(attempts_of(&view, "T"), vec!["completed"; 5]);
        // What an iteration wrote stayed in its scope.
        assert!(!view.variables.contains_key("n"), "{:?}", view.variables);
        assert!(!view.variables.contains_key("item"));
        assert_eq!(view.nodes["T#body"], "SUCCEEDED");
        assert!(db.store.parks_of(&view.instance).await.unwrap().is_empty());
    }

    async fn a_sequential_multi_instance_runs_loop_cardinality_times_and_stops_at_its_completion_condition(db) {
        let rt = runtime(db.store.clone());
        let task = r#"<bpmn:serviceTask id="T" implementation="registered:chaos">
  <bpmn:multiInstanceLoopCharacteristics isSequential="true">
    <bpmn:loopCardinality>count</bpmn:loopCardinality>
    <bpmn:completionCondition>nrOfCompletedInstances >= 2 &amp;&amp; nrOfInstances == 4</bpmn:completionCondition>
  </bpmn:multiInstanceLoopCharacteristics>
</bpmn:serviceTask>"#;
        let view = run(&rt, &around(task, ""), json!({"count": 4, "do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(attempts_of(&view, "T"), vec!["completed"; 2]);
        let view = run(&rt, &around(task, ""), json!({"count": 0, "do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED");
        assert!(attempts_of(&view, "T").is_empty());
        let view = run(&rt, &around(task, ""), json!({"count": "three", "do": "echo"})).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(view.error.unwrap().code, "SUTRA.RUNTIME.MULTI_INSTANCE.INVALID");
    }

    async fn a_met_completion_condition_cancels_the_iterations_still_running(db) {
        let rt = runtime(db.store.clone());
        let q = r#"<bpmn:completionCondition>nrOfCompletedInstances == 1</bpmn:completionCondition><bpmn:extensionElements><q:multiInstance collection="items" element="item"/></bpmn:extensionElements>"#;
        let retry = r#"<q:retry maxAttempts="3" initialDelay="PT10S"/>"#;
        let src = around(&mi_task(false, q, retry), "");
        let failing = json!({"do": "fail", "code": "DOWN"});
        let view = run(&rt, &src, json!({"items": [failing, echo(1), failing]})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        let got = attempts_of(&view, "T");
        // Each failing iteration failed once (or was interrupted in flight)
        // when the first completion ended the body: no retry ran.
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got.iter().filter(|o| **o == "completed").count(), 1, "{got:?}");
        assert!(view.attempts.iter().all(|a| a.attempt == 1));
        assert!(db.store.parks_of(&view.instance).await.unwrap().is_empty());
    }

    async fn a_bpmn_error_in_one_iteration_reaches_the_body_boundary_and_ends_the_others(db) {
        let rt = runtime(db.store.clone());
        let q = r#"<bpmn:extensionElements><q:multiInstance collection="items" element="item" outputCollection="results"/></bpmn:extensionElements>"#;
        let retry = r#"<q:retry maxAttempts="3" initialDelay="PT10S"/>"#;
        let extra = format!(
            r#"<bpmn:boundaryEvent id="caught" attachedToRef="T"><bpmn:errorEventDefinition errorRef="Named"/></bpmn:boundaryEvent>
<bpmn:serviceTask id="Handled" implementation="registered:chaos"/>
{} {}"#,
            flow("f2", "caught", "Handled"),
            flow("f3", "Handled", "end")
        );
        let src = around(&mi_task(false, q, retry), &extra);
        let items = json!([{"do": "fail", "code": "DOWN"}, {"do": "business", "code": "NAMED"}, echo(3)]);
        let view = run(&rt, &src, json!({"items": items, "do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(attempts_of(&view, "Handled"), vec!["completed"]);
        assert_eq!(view.nodes["T#body"], "FAILED");
        assert!(!view.variables.contains_key("results"), "the body did not complete");
        assert!(db.store.parks_of(&view.instance).await.unwrap().is_empty());
        // Uncaught, the error fails the instance with its code.
        let src = around(&mi_task(false, q, ""), "");
        let items = json!([echo(1), {"do": "business", "code": "NAMED"}, echo(3)]);
        let view = run(&rt, &src, json!({"items": items})).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(view.error.unwrap().code, "NAMED");
    }

    async fn an_interrupting_timer_on_the_body_interrupts_every_iteration(db) {
        let rt = runtime(db.store.clone());
        let q = r#"<bpmn:extensionElements><q:multiInstance collection="items" element="item"/></bpmn:extensionElements>"#;
        let retry = r#"<q:retry maxAttempts="5" initialDelay="PT10S"/>"#;
        let extra = format!(
            r#"<bpmn:boundaryEvent id="late" attachedToRef="T"><bpmn:timerEventDefinition><bpmn:timeDuration>PT2S</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:boundaryEvent>
<bpmn:serviceTask id="TimedOut" implementation="registered:chaos"/>
{} {}"#,
            flow("f2", "late", "TimedOut"),
            flow("f3", "TimedOut", "end")
        );
        let src = around(&mi_task(false, q, retry), &extra);
        let failing = json!({"do": "fail", "code": "DOWN"});
        let view = run(&rt, &src, json!({"items": [failing, failing, failing], "do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(attempts_of(&view, "T"), vec!["failed"; 3], "one attempt each, then the boundary");
        assert_eq!(attempts_of(&view, "TimedOut"), vec!["completed"]);
        assert_eq!(view.nodes["T"], "CANCELLED");
        assert_eq!(view.nodes["T#body"], "CANCELLED");
        assert!(db.store.parks_of(&view.instance).await.unwrap().is_empty());
    }

    async fn a_non_interrupting_timer_on_the_body_fires_beside_its_iterations(db) {
        let rt = runtime(db.store.clone());
        let q = r#"<bpmn:extensionElements><q:multiInstance collection="items" element="item" outputCollection="out" outputElement="attempt"/></bpmn:extensionElements>"#;
        let retry = r#"<q:retry maxAttempts="3" initialDelay="PT10S"/>"#;
        let extra = format!(
            r#"<bpmn:boundaryEvent id="nudge" attachedToRef="T" cancelActivity="false"><bpmn:timerEventDefinition><bpmn:timeDuration>PT2S</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:boundaryEvent>
<bpmn:serviceTask id="Nudge" implementation="registered:chaos"/>
{}"#,
            flow("f2", "nudge", "Nudge")
        );
        let src = around(&mi_task(false, q, retry), &extra);
        let flaky = json!({"do": "fail", "until": 2});
        let view = run(&rt, &src, json!({"items": [flaky, flaky], "do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(attempts_of(&view, "Nudge"), vec!["completed"]);
        let mut t = attempts_of(&view, "T");
        t.sort();
        assert_eq!(t, vec!["completed", "completed", "failed", "failed"]);
        assert_eq!(view.variables["out"], json!([2, 2]));
    }

    async fn a_multi_instance_sub_process_runs_its_content_once_per_element(db) {
        let rt = runtime(db.store.clone());
        let sub = format!(
            r#"<bpmn:subProcess id="T">
  <bpmn:multiInstanceLoopCharacteristics isSequential="true"><bpmn:extensionElements><q:multiInstance collection="items" element="item" outputCollection="out" outputElement="item.n + loopCounter"/></bpmn:extensionElements></bpmn:multiInstanceLoopCharacteristics>
  <bpmn:startEvent id="s0"/>
  <bpmn:serviceTask id="Inner" implementation="registered:chaos"><bpmn:extensionElements><q:io inputPath="$.item"/></bpmn:extensionElements></bpmn:serviceTask>
  <bpmn:endEvent id="s9"/>
  {} {}
</bpmn:subProcess>"#,
            flow("s1", "s0", "Inner"),
            flow("s2", "Inner", "s9")
        );
        let view = run(&rt, &around(&sub, ""), json!({"items": [echo(10), echo(20)]})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["out"], json!([11, 22]));
        assert_eq!(attempts_of(&view, "Inner"), vec!["completed"; 2]);
        assert_eq!(view.nodes["T"], "SUCCEEDED");
    }

    async fn nested_multi_instance_bodies_read_their_enclosing_iterations_scopes(db) {
        let rt = runtime(db.store.clone());
        let sub = format!(
            r#"<bpmn:subProcess id="T">
  <bpmn:multiInstanceLoopCharacteristics><bpmn:extensionElements><q:multiInstance collection="groups" element="g" outputCollection="all" outputElement="inner"/></bpmn:extensionElements></bpmn:multiInstanceLoopCharacteristics>
  <bpmn:startEvent id="s0"/>
  <bpmn:serviceTask id="Inner" implementation="registered:chaos">
    <bpmn:extensionElements><q:io inputPath="$.item"/></bpmn:extensionElements>
    <bpmn:multiInstanceLoopCharacteristics isSequential="true"><bpmn:extensionElements><q:multiInstance collection="g.items" element="item" outputCollection="inner" outputElement="[g.name, n]"/></bpmn:extensionElements></bpmn:multiInstanceLoopCharacteristics>
  </bpmn:serviceTask>
  {}
</bpmn:subProcess>"#,
            flow("s1", "s0", "Inner")
        );
        let groups = json!([
            {"name": "a", "items": [echo(1), echo(2)]},
            {"name": "b", "items": [echo(3)]},
        ]);
        let view = run(&rt, &around(&sub, ""), json!({"groups": groups})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["all"], json!([[["a", 1], ["a", 2]], [["b", 3]]]));
        assert!(!view.variables.contains_key("inner"), "the inner results stayed in each outer iteration");
        assert_eq!(attempts_of(&view, "Inner").len(), 3);
    }

    async fn a_standard_loop_repeats_while_its_condition_holds_up_to_its_maximum(db) {
        let rt = runtime(db.store.clone());
        let looped = |attrs: &str, condition: &str| format!(
            r#"<bpmn:serviceTask id="T" implementation="registered:chaos">
  <bpmn:standardLoopCharacteristics {attrs}><bpmn:loopCondition>{condition}</bpmn:loopCondition></bpmn:standardLoopCharacteristics>
</bpmn:serviceTask>"#
        );
        for (attrs, condition, want) in [
            ("", "loopCounter &lt; 3", 3),
            (r#"loopMaximum="2""#, "true", 2),
            (r#"testBefore="true""#, "false", 0),
            (r#"testBefore="false""#, "false", 1),
        ] {
            let view = run(&rt, &around(&looped(attrs, condition), ""), json!({"do": "echo"})).await;
            assert_eq!(view.state, "COMPLETED", "{attrs} {condition}: {view:?}");
            assert_eq!(attempts_of(&view, "T").len(), want, "{attrs} {condition}");
        }
        // The condition sees what the body wrote (a loop has no scope of its own).
        let vars = json!({"do": "emit", "output": {"done": true}, "done": false});
        let view = run(&rt, &around(&looped("", "loopCounter &lt; 5 &amp;&amp; !done"), ""), vars).await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(attempts_of(&view, "T").len(), 1);
        assert_eq!(view.variables["done"], json!(true));
    }

    async fn a_standard_loops_body_reads_its_iterations_loop_counter(db) {
        let rt = runtime(db.store.clone());
        let task = r#"<bpmn:serviceTask id="T" implementation="registered:chaos">
  <bpmn:extensionElements><q:io resultPath="$.last"/></bpmn:extensionElements>
  <bpmn:standardLoopCharacteristics><bpmn:loopCondition>loopCounter &lt; 3</bpmn:loopCondition></bpmn:standardLoopCharacteristics>
</bpmn:serviceTask>"#;
        let view = run(&rt, &around(task, ""), json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        // Each iteration's task saw its own number in its input (the echo of
        // one iteration is in the next one's input, as `last`).
        assert_eq!(
            view.variables["last"],
            json!({"do": "echo", "loopCounter": 3, "last": {"do": "echo", "loopCounter": 2,
                "last": {"do": "echo", "loopCounter": 1}}})
        );
        // Read-only: it never became an instance variable.
        assert!(!view.variables.contains_key("loopCounter"), "{:?}", view.variables);
    }

    async fn a_loop_that_never_waits_fails_with_the_step_budget(db) {
        let rt = runtime(db.store.clone());
        let sub = format!(
            r#"<bpmn:subProcess id="T">
  <bpmn:standardLoopCharacteristics><bpmn:loopCondition>true</bpmn:loopCondition></bpmn:standardLoopCharacteristics>
  <bpmn:startEvent id="s0"/>
  <bpmn:endEvent id="s9"/>
  {}
</bpmn:subProcess>"#,
            flow("s1", "s0", "s9")
        );
        let view = run(&rt, &around(&sub, ""), json!({})).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(view.error.unwrap().code, "SUTRA.RUNTIME.STEP_LIMIT");
    }

    async fn a_call_activity_runs_the_called_process_with_its_io_and_catches_its_bpmn_error(db) {
        let rt = runtime(db.store.clone());
        let child = r#"<bpmn:process id="child" isExecutable="true">
    <bpmn:startEvent id="c0"/>
    <bpmn:exclusiveGateway id="which" default="ok"/>
    <bpmn:serviceTask id="Work" implementation="registered:chaos"/>
    <bpmn:endEvent id="c9"/>
    <bpmn:endEvent id="boom"><bpmn:errorEventDefinition errorRef="Named"/></bpmn:endEvent>
    <bpmn:sequenceFlow id="c1" sourceRef="c0" targetRef="which"/>
    <bpmn:sequenceFlow id="bad" sourceRef="which" targetRef="boom"><bpmn:conditionExpression>fail</bpmn:conditionExpression></bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="ok" sourceRef="which" targetRef="Work"/>
    <bpmn:sequenceFlow id="c2" sourceRef="Work" targetRef="c9"/>
  </bpmn:process>"#;
        let body = format!(
            r#"<bpmn:startEvent id="start"/>
<bpmn:callActivity id="T" calledElement="child">
  <bpmn:extensionElements><q:io inputPath="$.order" resultPath="$.answer"/></bpmn:extensionElements>
</bpmn:callActivity>
<bpmn:boundaryEvent id="caught" attachedToRef="T"><bpmn:errorEventDefinition errorRef="Named"/></bpmn:boundaryEvent>
<bpmn:serviceTask id="Handled" implementation="registered:chaos"/>
<bpmn:endEvent id="end"/>
{} {} {} {}"#,
            flow("f0", "start", "T"),
            flow("f1", "T", "end"),
            flow("f2", "caught", "Handled"),
            flow("f3", "Handled", "end")
        );
        let src = bpmn_with(&body, child);
        let order = json!({"do": "echo", "fail": false, "sku": "A-1"});
        let view = run(&rt, &src, json!({"order": order, "do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["answer"]["sku"], json!("A-1"), "{:?}", view.variables);
        assert!(!view.variables.contains_key("sku"));
        assert_eq!(attempts_of(&view, "T"), vec!["completed"]);
        assert!(attempts_of(&view, "Handled").is_empty());
        let order = json!({"do": "echo", "fail": true});
        let view = run(&rt, &src, json!({"order": order, "do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(attempts_of(&view, "T"), vec!["business_error"]);
        assert_eq!(attempts_of(&view, "Handled"), vec!["completed"]);
        assert!(db.store.parks_of(&view.instance).await.unwrap().is_empty());
    }

    async fn a_multi_instance_call_activity_starts_one_child_per_element(db) {
        let rt = runtime(db.store.clone());
        let body = format!(
            r#"<bpmn:startEvent id="start"/>
<bpmn:callActivity id="T" calledElement="child">
  <bpmn:extensionElements><q:io inputPath="$.item"/></bpmn:extensionElements>
  <bpmn:multiInstanceLoopCharacteristics><bpmn:extensionElements><q:multiInstance collection="items" element="item" outputCollection="out" outputElement="n"/></bpmn:extensionElements></bpmn:multiInstanceLoopCharacteristics>
</bpmn:callActivity>
<bpmn:endEvent id="end"/>
{} {}"#,
            flow("f0", "start", "T"),
            flow("f1", "T", "end")
        );
        let view = run(&rt, &bpmn_with(&body, WORK_CHILD), json!({"items": [echo(1), echo(2), echo(3)]})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["out"], json!([1, 2, 3]));
        assert_eq!(attempts_of(&view, "T"), vec!["completed"; 3]);
    }

    async fn cancelling_the_parent_cancels_the_child_of_its_call_activity(db) {
        let rt = runtime(db.store.clone());
        let child = r#"<bpmn:message id="Go" name="go"/>
  <bpmn:process id="child" isExecutable="true">
    <bpmn:startEvent id="c0"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Go"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="c1" sourceRef="c0" targetRef="wait"/>
  </bpmn:process>"#;
        let body = format!(
            r#"<bpmn:startEvent id="start"/>
<bpmn:callActivity id="T" calledElement="child"/>
<bpmn:endEvent id="end"/>
{} {}"#,
            flow("f0", "start", "T"),
            flow("f1", "T", "end")
        );
        rt.deploy(TENANT, &bpmn_with(&body, child), &modules()).await.unwrap();
        let id = rt
            .start(StartRequest {
                tenant: TENANT.into(),
                process_id: "p".into(),
                ..StartRequest::default()
            })
            .await
            .unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "WAITING", "{view:?}");
        let kid = view.waits[0].child.clone().expect("the call waits for its child");
        assert_eq!(rt.inspect(&kid).await.unwrap().parent.as_deref(), Some(id.as_str()));
        rt.cancel(&id, Some("no longer needed".into())).await.unwrap();
        assert_eq!(rt.inspect(&id).await.unwrap().state, "TERMINATED");
        assert_eq!(rt.inspect(&kid).await.unwrap().state, "TERMINATED");
    }

    async fn a_call_activity_timeout_cancels_the_child_and_is_caught_by_a_boundary_naming_its_code(db) {
        // With the journal, which names the child each attempt ran.
        let config = Config {
            audit_sql: true,
            ..Config::default()
        };
        let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap();
        let rt = Runtime::new(db.store.clone(), RuntimeOptions::new(config).with_virtual_clock(t0)).unwrap();
        let child = r#"<bpmn:message id="Go" name="go"/>
  <bpmn:error id="Late" errorCode="SUTRA.RUNTIME.CHILD.TIMEOUT"/>
  <bpmn:process id="child" isExecutable="true">
    <bpmn:startEvent id="c0"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Go"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="c1" sourceRef="c0" targetRef="wait"/>
  </bpmn:process>"#;
        let call = |retry: &str, boundary: &str| {
            format!(
                r#"<bpmn:startEvent id="start"/>
<bpmn:callActivity id="T" calledElement="child">
  <bpmn:extensionElements><q:timeout duration="PT1M"/>{retry}</bpmn:extensionElements>
</bpmn:callActivity>
<bpmn:boundaryEvent id="caught" attachedToRef="T"><bpmn:errorEventDefinition{boundary}/></bpmn:boundaryEvent>
<bpmn:serviceTask id="Handled" implementation="registered:chaos"/>
<bpmn:endEvent id="end"/>
{} {} {} {}"#,
                flow("f0", "start", "T"),
                flow("f1", "T", "end"),
                flow("f2", "caught", "Handled"),
                flow("f3", "Handled", "end")
            )
        };
        // A boundary naming the timeout's code: the child is cancelled, the
        // boundary's path runs.
        let src = bpmn_with(&call("", r#" errorRef="Late""#), child);
        let view = run(&rt, &src, json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(attempts_of(&view, "T"), vec!["failed"]);
        assert_eq!(attempts_of(&view, "Handled"), vec!["completed"]);
        let failed = view.attempts.iter().find(|a| a.task == "T").unwrap();
        assert_eq!(failed.code.as_deref(), Some("SUTRA.RUNTIME.CHILD.TIMEOUT"));
        let history = rt.history(&view.instance).await.unwrap();
        let ended = history
            .entries
            .iter()
            .find(|e| e["kind"] == "child_ended")
            .unwrap_or_else(|| panic!("a child_ended entry: {:?}", history.entries));
        let kid = ended["data"]["child"].as_str().unwrap_or_else(|| panic!("{ended}"));
        assert_eq!(rt.inspect(kid).await.unwrap().state, "TERMINATED");
        // Under q:retry each attempt is a fresh child; a catch-all boundary
        // does not take the spent timeout: the instance fails with its code.
        let src = bpmn_with(&call(r#"<q:retry maxAttempts="2" initialDelay="PT1S"/>"#, ""), child);
        let view = run(&rt, &src, json!({"do": "echo"})).await;
        assert_eq!(view.state, "FAILED", "{view:?}");
        assert_eq!(attempts_of(&view, "T"), vec!["failed", "failed"]);
        assert!(attempts_of(&view, "Handled").is_empty());
        let error = view.error.expect("an error");
        assert!(
            [error.code.as_str(), error.cause.as_ref().map_or("", |c| c.code.as_str())]
                .contains(&"SUTRA.RUNTIME.CHILD.TIMEOUT"),
            "{error:?}"
        );
    }

    /// `sutra run` watches from the first commit (`answer_at_commit`) and
    /// settles with `settle_local`: a child that ends while settle looks
    /// (the parent's park read before its end, the child's after it) must
    /// not make the parent read as waiting for the outside world. The race
    /// is narrow, so it is run many times (before the fix about one run in
    /// thirty read WAITING).
    async fn settling_a_parent_whose_child_ends_meanwhile_waits_for_the_parent(db) {
        let rt = runtime(db.store.clone());
        let body = format!(
            r#"<bpmn:startEvent id="start"/>
<bpmn:serviceTask id="First" implementation="registered:chaos"/>
<bpmn:callActivity id="T" calledElement="child"/>
<bpmn:endEvent id="end"/>
{} {} {}"#,
            flow("f0", "start", "First"),
            flow("f1", "First", "T"),
            flow("f2", "T", "end")
        );
        rt.deploy(TENANT, &bpmn_with(&body, WORK_CHILD), &modules()).await.unwrap();
        for run in 0..60 {
            let id = rt
                .start(StartRequest {
                    tenant: TENANT.into(),
                    process_id: "p".into(),
                    variables: json!({"do": "echo"}).as_object().cloned().unwrap(),
                    answer_at_commit: true,
                    ..StartRequest::default()
                })
                .await
                .unwrap();
            match rt.settle_local(&id).await.unwrap() {
                Settled::Terminal(rec) => assert_eq!(rec.state, "COMPLETED", "run {run}"),
                Settled::Waiting(rec) => panic!(
                    "run {run}: settled WAITING: {:?}",
                    rt.inspect(&rec.id).await.unwrap()
                ),
                Settled::Gone => panic!("run {run}: gone"),
            }
        }
    }
}

/// A loop with no `loopMaximum` whose body waits every time (an attempt per
/// iteration) is stopped by the loop budget: pure engine steps, no store.
#[test]
fn a_runaway_loop_fails_with_the_loop_limit() {
    use sutra::engine::{apply, start, Effect, Event, Inputs, NewInstance, TaskOutcome};
    let src = around(
        r#"<bpmn:serviceTask id="T" implementation="registered:chaos">
  <bpmn:standardLoopCharacteristics><bpmn:loopCondition>true</bpmn:loopCondition></bpmn:standardLoopCharacteristics>
</bpmn:serviceTask>"#,
        "",
    );
    let loaded = sutra::dialect::load(&src);
    assert!(loaded.errors().next().is_none(), "{:?}", loaded.diagnostics);
    let process = loaded.definitions.processes.into_iter().next().unwrap();
    let inputs = Inputs {
        now: Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap(),
        draw: 0.5,
        attempt_lease: std::time::Duration::from_secs(35),
        journal: true,
    };
    let new = NewInstance {
        instance_id: "i",
        tenant: TENANT,
        deployment_id: "d",
        start_node: None,
        variables: Default::default(),
    };
    let mut step = start(&process, new, &inputs).unwrap();
    let mut iterations = 0u64;
    while !step.snapshot.state.is_terminal() {
        let run = step.effects.iter().find_map(|e| match e {
            Effect::RunAttempt(r) => Some((r.token, r.attempt)),
            _ => None,
        });
        let (token, attempt) = run.expect("every iteration runs an attempt");
        iterations += 1;
        let event = Event::AttemptEnded {
            token,
            attempt,
            outcome: TaskOutcome::Completed { output: json!({}) },
        };
        step = apply(&process, step.snapshot, event, &inputs).unwrap();
    }
    assert_eq!(iterations, sutra::model::LOOP_LIMIT);
    let error = step.snapshot.error.unwrap();
    assert_eq!(error.code, "SUTRA.RUNTIME.LOOP.LIMIT");
    assert_eq!(error.node.as_deref(), Some("T#body"));
}

/// A load diagnostic about a repeated activity names the element as
/// written (`T`), not the loader's synthetic body (`T#body`).
#[test]
fn a_diagnostic_on_a_repeated_activity_names_the_written_element() {
    let src = bpmn(
        r#"<bpmn:startEvent id="start"/>
<bpmn:endEvent id="end"/>
<bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="end"/>
<bpmn:serviceTask id="T" implementation="registered:chaos">
  <bpmn:multiInstanceLoopCharacteristics><bpmn:loopCardinality>2</bpmn:loopCardinality></bpmn:multiInstanceLoopCharacteristics>
</bpmn:serviceTask>"#,
    );
    let loaded = sutra::dialect::load(&src);
    let errors: Vec<_> = loaded.errors().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].code.as_str(),
        "SUTRA.CONFIG.BPMN.UNREACHABLE_NODE"
    );
    assert_eq!(errors[0].element.as_deref(), Some("T"));
    assert!(
        errors[0]
            .message
            .starts_with("repeated activity `T` is not reachable"),
        "{}",
        errors[0].message
    );
}

/// `q:multiInstance` written on the activity instead of inside its loop
/// characteristics is refused with a message saying where it belongs.
#[test]
fn a_misplaced_q_multi_instance_says_where_it_belongs() {
    let src = around(
        r#"<bpmn:serviceTask id="T" implementation="registered:chaos">
  <bpmn:extensionElements><q:multiInstance collection="items" element="item"/></bpmn:extensionElements>
  <bpmn:multiInstanceLoopCharacteristics><bpmn:loopCardinality>2</bpmn:loopCardinality></bpmn:multiInstanceLoopCharacteristics>
</bpmn:serviceTask>"#,
        "",
    );
    let loaded = sutra::dialect::load(&src);
    let errors: Vec<_> = loaded.errors().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].code.as_str(),
        "SUTRA.CONFIG.BPMN.UNSUPPORTED_ELEMENT"
    );
    assert!(
        errors[0]
            .message
            .contains("<multiInstanceLoopCharacteristics>"),
        "{}",
        errors[0].message
    );
    assert!(errors[0].line > 0 && errors[0].column > 0);
}
