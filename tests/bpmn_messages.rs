//! BPMN messages (issue 29 item 5) and the events of issue 32 item 5 end to
//! end, on SQLite and PostgreSQL, with the virtual clock: receive tasks
//! (with boundaries), send tasks and message end events delivered to
//! another instance's wait of the same tenant and key, a throw nobody
//! awaits, message starts of every ACTIVE listening process, "Multiple"
//! catches, link events and a terminate end inside a sub-process. Also
//! through `sutra run` (a link and a signal thrown and caught in one run).

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{TimeZone, Utc};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use sutra::codes::Code;
use sutra::config::Config;
use sutra::runtime::{InstanceView, Runtime, RuntimeOptions, StartRequest};
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

/// One process `id` around `body`, with the message `order` and signal `go`.
fn doc(id: &str, body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:message id="Order" name="order"/>
  <bpmn:signal id="Go" name="go"/>
  <bpmn:process id="{id}" isExecutable="true">
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

async fn start(rt: &Runtime<AnyStore>, process: &str, v: Value) -> String {
    rt.start(StartRequest {
        tenant: TENANT.into(),
        process_id: process.into(),
        variables: v.as_object().cloned().unwrap(),
        ..StartRequest::default()
    })
    .await
    .unwrap()
}

async fn settled(rt: &Runtime<AnyStore>, id: &str) -> InstanceView {
    let _ = rt.settle(id).await.unwrap();
    rt.inspect(id).await.unwrap()
}

fn ran(view: &InstanceView, task: &str) -> usize {
    view.attempts.iter().filter(|a| a.task == task).count()
}

/// A receive task keyed by `orderId`, with a PT1H timer boundary.
fn receiver() -> String {
    doc(
        "r",
        &format!(
            r#"
  <bpmn:startEvent id="start"/>
  <bpmn:receiveTask id="await" messageRef="Order">
    <bpmn:extensionElements><q:correlation key="orderId"/></bpmn:extensionElements>
  </bpmn:receiveTask>
  <bpmn:boundaryEvent id="late" attachedToRef="await">
    <bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition>
  </bpmn:boundaryEvent>
  {} {} <bpmn:endEvent id="end"/> <bpmn:endEvent id="end2"/>
  {} {} {} {} {}"#,
            task("Got"),
            task("Late"),
            flow("f0", "start", "await"),
            flow("f1", "await", "Got"),
            flow("f2", "Got", "end"),
            flow("f3", "late", "Late"),
            flow("f4", "Late", "end2")
        ),
    )
}

backends::store_tests! {
    async fn a_receive_task_waits_for_its_message_and_its_boundary_fires_without_one(db) {
        let rt = runtime(db.store.clone());
        rt.deploy(TENANT, &receiver(), &modules()).await.unwrap();
        let a = start(&rt, "r", json!({"do": "echo", "orderId": "A"})).await;
        let b = start(&rt, "r", json!({"do": "echo", "orderId": "B"})).await;
        assert_eq!(rt.correlate(TENANT, "order", Some("A"), Map::new()).await.unwrap(), a);
        let va = settled(&rt, &a).await;
        assert_eq!((va.state.as_str(), ran(&va, "Got"), ran(&va, "Late")), ("COMPLETED", 1, 0), "{va:?}");
        // B gets no message: its receive task's timer boundary interrupts it.
        let vb = settled(&rt, &b).await;
        assert_eq!((vb.state.as_str(), ran(&vb, "Got"), ran(&vb, "Late")), ("COMPLETED", 0, 1), "{vb:?}");
        assert_eq!(vb.nodes["await"], "CANCELLED");
    }

    async fn a_send_task_and_a_message_end_event_reach_the_waiting_instance_of_their_key(db) {
        let rt = runtime(db.store.clone());
        rt.deploy(TENANT, &receiver(), &modules()).await.unwrap();
        rt.deploy("beta", &receiver(), &modules()).await.unwrap();
        let sender = doc("s", &format!(r#"
  <bpmn:startEvent id="start"/>
  <bpmn:sendTask id="send" messageRef="Order">
    <bpmn:extensionElements><q:correlation key="target"/><q:io inputPath="$.order"/></bpmn:extensionElements>
  </bpmn:sendTask>
  <bpmn:endEvent id="end">
    <bpmn:messageEventDefinition messageRef="Order"/>
    <bpmn:extensionElements><q:correlation key="second"/></bpmn:extensionElements>
  </bpmn:endEvent>
  {} {}"#, flow("f0", "start", "send"), flow("f1", "send", "end")));
        rt.deploy(TENANT, &sender, &modules()).await.unwrap();
        let a = start(&rt, "r", json!({"do": "echo", "orderId": "A"})).await;
        let b = start(&rt, "r", json!({"do": "echo", "orderId": "B"})).await;
        let c = start(&rt, "r", json!({"do": "echo", "orderId": "C"})).await;
        let theirs = rt.start(StartRequest {
            tenant: "beta".into(), process_id: "r".into(),
            variables: json!({"do": "echo", "orderId": "A"}).as_object().cloned().unwrap(),
            ..StartRequest::default()
        }).await.unwrap();
        let s = start(&rt, "s", json!({"target": "A", "second": "B", "order": {"sku": "x1"}})).await;
        assert_eq!(settled(&rt, &s).await.state, "COMPLETED");
        // A message thrown to nobody is no error.
        let nobody = start(&rt, "s", json!({"target": "Z", "second": "Y", "order": {}})).await;
        assert_eq!(settled(&rt, &nobody).await.state, "COMPLETED");
        let got = |v: &InstanceView| (ran(v, "Got"), ran(v, "Late"));
        let va = settled(&rt, &a).await;
        assert_eq!(got(&va), (1, 0), "the send task's message");
        assert_eq!(va.variables["sku"], json!("x1"), "it carries its q:io inputPath object");
        let vb = settled(&rt, &b).await;
        assert_eq!(got(&vb), (1, 0), "the message end event's");
        assert!(!vb.variables.contains_key("sku"), "a throw without q:io carries nothing");
        assert_eq!(got(&settled(&rt, &c).await), (0, 1), "no message for C: its boundary fired");
        let other = rt.inspect(&theirs).await.unwrap();
        assert_eq!(ran(&other, "Got"), 0, "tenant beta's wait with the same key heard nothing");
    }

    async fn a_message_no_instance_awaits_starts_every_active_process_with_its_start(db) {
        let rt = runtime(db.store.clone());
        let starter = |id: &str| doc(id, &format!(r#"
  <bpmn:startEvent id="start"><bpmn:messageEventDefinition messageRef="Order"/></bpmn:startEvent>
  {} <bpmn:endEvent id="end"/> {} {}"#, task("Started"), flow("f0", "start", "Started"), flow("f1", "Started", "end")));
        rt.deploy(TENANT, &starter("p1"), &modules()).await.unwrap();
        rt.deploy(TENANT, &starter("p2"), &modules()).await.unwrap();
        rt.correlate(TENANT, "order", None, json!({"do": "echo"}).as_object().cloned().unwrap()).await.unwrap();
        let listed = db.store.list_instances(&sutra::store::InstanceFilter {
            tenant: Some(TENANT.into()), ..Default::default()
        }).await.unwrap();
        let mut processes: Vec<String> = listed.iter().map(|r| r.process_id.clone()).collect();
        processes.sort();
        assert_eq!(processes, vec!["p1", "p2"], "one instance of each");
        let err = rt.correlate("beta", "order", None, Map::new()).await.unwrap_err();
        assert_eq!(err.code, Code::MessageNotCorrelated, "no process of beta starts with it");
    }

    async fn a_multiple_catch_moves_on_at_the_first_of_its_events(db) {
        let rt = runtime(db.store.clone());
        let src = doc("m", &format!(r#"
  <bpmn:startEvent id="start"/>
  <bpmn:intermediateCatchEvent id="either">
    <bpmn:messageEventDefinition messageRef="Order"/>
    <bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition>
    <bpmn:signalEventDefinition signalRef="Go"/>
  </bpmn:intermediateCatchEvent>
  {} <bpmn:endEvent id="end"/> {} {} {}"#, task("After"), flow("f0", "start", "either"), flow("f1", "either", "After"), flow("f2", "After", "end")));
        rt.deploy(TENANT, &src, &modules()).await.unwrap();
        let by_signal = start(&rt, "m", json!({"do": "echo"})).await;
        assert_eq!(db.store.parks_of(&by_signal).await.unwrap().len(), 3);
        assert_eq!(rt.signal(TENANT, "go", Map::new()).await.unwrap().delivered, 1);
        let v = settled(&rt, &by_signal).await;
        assert_eq!((v.state.as_str(), ran(&v, "After")), ("COMPLETED", 1));
        assert!(db.store.parks_of(&by_signal).await.unwrap().is_empty(), "the other waits went with it");
        let by_timer = start(&rt, "m", json!({"do": "echo"})).await;
        let v = settled(&rt, &by_timer).await;
        assert_eq!((v.state.as_str(), ran(&v, "After")), ("COMPLETED", 1));
        assert!(rt.correlate(TENANT, "order", None, Map::new()).await.is_err(), "nothing waits any more");
    }

    async fn links_continue_at_their_catch_and_a_terminate_in_a_sub_process_ends_it_alone(db) {
        let rt = runtime(db.store.clone());
        let src = doc("l", &format!(r#"
  <bpmn:startEvent id="start"/>
  <bpmn:intermediateThrowEvent id="jump"><bpmn:linkEventDefinition name="there"/></bpmn:intermediateThrowEvent>
  <bpmn:intermediateCatchEvent id="land"><bpmn:linkEventDefinition name="there"/></bpmn:intermediateCatchEvent>
  <bpmn:subProcess id="sub">
    <bpmn:startEvent id="s0"/>
    <bpmn:parallelGateway id="fork"/>
    <bpmn:endEvent id="stop"><bpmn:terminateEventDefinition/></bpmn:endEvent>
    <bpmn:intermediateCatchEvent id="never"><bpmn:timerEventDefinition><bpmn:timeDuration>P1D</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
    <bpmn:endEvent id="s9"/>
    {} {} {} {}
  </bpmn:subProcess>
  {} <bpmn:endEvent id="end"/>
  {} {} {} {}"#,
            flow("s1", "s0", "fork"), flow("s2", "fork", "stop"), flow("s3", "fork", "never"), flow("s4", "never", "s9"),
            task("AfterSub"),
            flow("f0", "start", "jump"), flow("f1", "land", "sub"), flow("f2", "sub", "AfterSub"), flow("f3", "AfterSub", "end")));
        rt.deploy(TENANT, &src, &modules()).await.unwrap();
        let id = start(&rt, "l", json!({"do": "echo"})).await;
        let v = settled(&rt, &id).await;
        assert_eq!(v.state, "COMPLETED", "{v:?}");
        assert_eq!(ran(&v, "AfterSub"), 1, "the terminate ended the sub-process only; the process went on");
        assert_eq!(v.nodes["never"], "CANCELLED");
        // An unmatched link is refused at load with its code.
        let bad = doc("bad", r#"
  <bpmn:startEvent id="start"/>
  <bpmn:intermediateThrowEvent id="jump"><bpmn:linkEventDefinition name="nowhere"/></bpmn:intermediateThrowEvent>
  <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="jump"/>"#);
        let err = rt.deploy(TENANT, &bad, &modules()).await.unwrap_err();
        assert!(err.diagnostics.iter().any(|d| d.code == Code::BpmnLinkUnmatched), "{err:?}");
    }
}

#[test]
fn sutra_run_throws_and_catches_a_signal_across_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.bpmn");
    std::fs::write(&path, doc("p", &format!(r#"
  <bpmn:startEvent id="start"/>
  <bpmn:parallelGateway id="fork"/>
  <bpmn:intermediateThrowEvent id="shout"><bpmn:signalEventDefinition signalRef="Go"/></bpmn:intermediateThrowEvent>
  <bpmn:endEvent id="e1"/>
  <bpmn:intermediateCatchEvent id="hear"><bpmn:signalEventDefinition signalRef="Go"/></bpmn:intermediateCatchEvent>
  <bpmn:intermediateThrowEvent id="jump"><bpmn:linkEventDefinition name="on"/></bpmn:intermediateThrowEvent>
  <bpmn:intermediateCatchEvent id="land"><bpmn:linkEventDefinition name="on"/></bpmn:intermediateCatchEvent>
  {} <bpmn:endEvent id="e2"/>
  {} {} {} {} {} {} {}"#,
        task("Heard"),
        flow("f0", "start", "fork"), flow("f1", "fork", "hear"), flow("f2", "fork", "shout"),
        flow("f3", "shout", "e1"), flow("f4", "hear", "jump"), flow("f5", "land", "Heard"), flow("f6", "Heard", "e2")))).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .arg("run")
        .arg(&path)
        .arg("--task")
        .arg(format!("chaos={}", common::guest("chaos").display()))
        .args([
            "--input",
            r#"{"do":"echo"}"#,
            "--virtual-clock",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["state"], "COMPLETED", "{v}");
    assert!(
        v["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["task"] == "Heard"),
        "{v}"
    );
}
