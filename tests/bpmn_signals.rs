//! BPMN signals (issue 32 item 1) end to end, on SQLite and PostgreSQL, with
//! the virtual clock: a broadcast reaches the waits of its tenant armed when
//! it is thrown (never another tenant's, never a later wait), signal starts,
//! signal boundaries (interrupting and not), an event-based gateway whose
//! losers are withdrawn in the winning commit, a throw of one instance
//! caught by another, and a fan-out left half done by a crash finished
//! exactly once by the next runtime. Also `POST /v1/signals` through a real
//! server (SQLite): tenancy and coded refusals of bad bodies.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{TimeZone, Utc};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::runtime::{InstanceView, Runtime, RuntimeOptions, StartRequest};
use sutra::store::signals::{NewSignal, SignalStore};
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

/// A BPMN document holding `processes` (each a whole `<process>`), with the
/// signals `go` and `stop` and the message `m`.
fn doc(processes: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:signal id="Go" name="go"/>
  <bpmn:signal id="Stop" name="stop"/>
  <bpmn:message id="M" name="m"/>
  <bpmn:signalEventDefinition id="SharedGo" signalRef="Go"/>
{processes}
</bpmn:definitions>"#
    )
}

fn task(id: &str) -> String {
    format!(r#"<bpmn:serviceTask id="{id}" implementation="registered:chaos"/>"#)
}

fn flow(id: &str, from: &str, to: &str) -> String {
    format!(r#"<bpmn:sequenceFlow id="{id}" sourceRef="{from}" targetRef="{to}"/>"#)
}

/// `w`: start → catch signal `go` → After → end.
fn waiter(id: &str) -> String {
    format!(
        r#"<bpmn:process id="{id}" isExecutable="true">
  <bpmn:startEvent id="start"/>
  <bpmn:intermediateCatchEvent id="wait"><bpmn:signalEventDefinition signalRef="Go"/></bpmn:intermediateCatchEvent>
  {} <bpmn:endEvent id="end"/>
  {} {} {}
</bpmn:process>"#,
        task("After"),
        flow("f0", "start", "wait"),
        flow("f1", "wait", "After"),
        flow("f2", "After", "end")
    )
}

async fn start(rt: &Runtime<AnyStore>, tenant: &str, process: &str) -> String {
    rt.start(StartRequest {
        tenant: tenant.into(),
        process_id: process.into(),
        variables: json!({"do": "echo"}).as_object().cloned().unwrap(),
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

fn vars(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

backends::store_tests! {
    async fn a_signal_reaches_every_wait_of_its_tenant_and_no_other(db) {
        let rt = runtime(db.store.clone());
        let src = doc(&waiter("w"));
        rt.deploy(TENANT, &src, &modules()).await.unwrap();
        rt.deploy("beta", &src, &modules()).await.unwrap();
        let mine = [start(&rt, TENANT, "w").await, start(&rt, TENANT, "w").await, start(&rt, TENANT, "w").await];
        let theirs = start(&rt, "beta", "w").await;
        for id in mine.iter().chain([&theirs]) {
            assert_eq!(settled(&rt, id).await.state, "WAITING");
        }
        let answer = rt.signal(TENANT, "go", vars(json!({"seen": 1}))).await.unwrap();
        assert_eq!(answer.delivered, 3, "{answer:?}");
        for id in &mine {
            let v = settled(&rt, id).await;
            assert_eq!(v.state, "COMPLETED", "{v:?}");
            assert_eq!(ran(&v, "After"), 1);
            assert_eq!(v.variables["seen"], json!(1), "the signal's variables reach the instance");
        }
        let other = settled(&rt, &theirs).await;
        assert_eq!(other.state, "WAITING", "tenant beta never hears acme's signal");
        // beta's own signal reaches it.
        assert_eq!(rt.signal("beta", "go", Map::new()).await.unwrap().delivered, 1);
        assert_eq!(settled(&rt, &theirs).await.state, "COMPLETED");
    }

    async fn a_signal_reaches_only_the_waits_armed_when_it_is_thrown(db) {
        let rt = runtime(db.store.clone());
        rt.deploy(TENANT, &doc(&waiter("w")), &modules()).await.unwrap();
        let early = rt.signal(TENANT, "go", Map::new()).await.unwrap();
        assert_eq!(early.delivered, 0);
        assert!(early.started.is_empty());
        let id = start(&rt, TENANT, "w").await;
        assert_eq!(settled(&rt, &id).await.state, "WAITING", "a signal thrown before the wait is gone");
        assert_eq!(rt.signal(TENANT, "stop", Map::new()).await.unwrap().delivered, 0, "another name");
        assert_eq!(settled(&rt, &id).await.state, "WAITING");
        assert!(db.store.pending_signals(10).await.unwrap().is_empty(), "delivered signals leave no row");
    }

    async fn signal_starts_start_one_instance_of_each_active_listening_process(db) {
        let rt = runtime(db.store.clone());
        let listener = |id: &str| format!(
            r#"<bpmn:process id="{id}" isExecutable="true">
  <bpmn:startEvent id="s"><bpmn:signalEventDefinition signalRef="Go"/></bpmn:startEvent>
  {} <bpmn:endEvent id="e"/> {} {}
</bpmn:process>"#, task("Started"), flow("f0", "s", "Started"), flow("f1", "Started", "e"));
        // Ids are unique per document: one document per process.
        for p in [listener("l1"), listener("l2"), waiter("w")] {
            rt.deploy(TENANT, &doc(&p), &modules()).await.unwrap();
        }
        let answer = rt.signal(TENANT, "go", vars(json!({"do": "echo"}))).await.unwrap();
        assert_eq!(answer.started.len(), 2, "{answer:?}");
        let mut processes = Vec::new();
        for id in &answer.started {
            let v = settled(&rt, id).await;
            assert_eq!(v.state, "COMPLETED", "{v:?}");
            processes.push(v.process.clone());
        }
        processes.sort();
        assert_eq!(processes, vec!["l1", "l2"]);
        // Another tenant's broadcast starts nothing here.
        let none = rt.signal("beta", "go", Map::new()).await.unwrap();
        assert!(none.started.is_empty());
    }

    async fn signal_boundaries_interrupt_or_fork_and_keep_watching(db) {
        let rt = runtime(db.store.clone());
        // A sub-process waiting an hour, with an interrupting `stop` boundary
        // and a non-interrupting `go` one (through eventDefinitionRef).
        let src = doc(&format!(r#"<bpmn:process id="b" isExecutable="true">
  <bpmn:startEvent id="start"/>
  <bpmn:subProcess id="sub">
    <bpmn:startEvent id="s0"/>
    <bpmn:intermediateCatchEvent id="hour"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
    <bpmn:endEvent id="s9"/>
    {} {}
  </bpmn:subProcess>
  <bpmn:boundaryEvent id="onStop" attachedToRef="sub"><bpmn:signalEventDefinition signalRef="Stop"/></bpmn:boundaryEvent>
  <bpmn:boundaryEvent id="onGo" attachedToRef="sub" cancelActivity="false"><bpmn:eventDefinitionRef>SharedGo</bpmn:eventDefinitionRef></bpmn:boundaryEvent>
  {} {} <bpmn:endEvent id="end"/> <bpmn:endEvent id="end2"/> <bpmn:endEvent id="end3"/>
  {} {} {} {} {} {}
</bpmn:process>"#,
            flow("s1", "s0", "hour"), flow("s2", "hour", "s9"),
            task("Stopped"), task("Forked"),
            flow("f0", "start", "sub"), flow("f1", "sub", "end"),
            flow("f2", "onStop", "Stopped"), flow("f3", "Stopped", "end2"),
            flow("f4", "onGo", "Forked"), flow("f5", "Forked", "end3")));
        rt.deploy(TENANT, &src, &modules()).await.unwrap();
        let id = rt.start(StartRequest {
            tenant: TENANT.into(), process_id: "b".into(),
            variables: vars(json!({"do": "echo"})), ..StartRequest::default()
        }).await.unwrap();
        assert_eq!(rt.signal(TENANT, "go", Map::new()).await.unwrap().delivered, 1);
        assert_eq!(rt.signal(TENANT, "go", Map::new()).await.unwrap().delivered, 1, "a non-interrupting boundary keeps watching");
        assert_eq!(rt.signal(TENANT, "stop", Map::new()).await.unwrap().delivered, 1);
        let v = settled(&rt, &id).await;
        assert_eq!(v.state, "COMPLETED", "{v:?}");
        assert_eq!(ran(&v, "Forked"), 2);
        assert_eq!(ran(&v, "Stopped"), 1);
        assert_eq!(v.nodes["hour"], "CANCELLED", "the interrupting boundary ended the sub-process");
        assert!(db.store.parks_of(&id).await.unwrap().is_empty());
    }

    async fn an_event_based_gateway_takes_the_first_event_and_withdraws_the_others(db) {
        let rt = runtime(db.store.clone());
        let src = doc(&format!(r#"<bpmn:process id="g" isExecutable="true">
  <bpmn:startEvent id="start"/>
  <bpmn:eventBasedGateway id="race"/>
  <bpmn:intermediateCatchEvent id="bySignal"><bpmn:signalEventDefinition signalRef="Go"/></bpmn:intermediateCatchEvent>
  <bpmn:intermediateCatchEvent id="byTimer"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
  <bpmn:receiveTask id="byMessage" messageRef="M"/>
  {} {} {} <bpmn:endEvent id="e1"/> <bpmn:endEvent id="e2"/> <bpmn:endEvent id="e3"/>
  {} {} {} {} {} {} {} {} {} {}
</bpmn:process>"#,
            task("Signalled"), task("TimedOut"), task("Messaged"),
            flow("f0", "start", "race"), flow("f1", "race", "bySignal"), flow("f2", "race", "byTimer"),
            flow("f3", "race", "byMessage"), flow("f4", "bySignal", "Signalled"), flow("f5", "byTimer", "TimedOut"),
            flow("f6", "byMessage", "Messaged"), flow("f7", "Signalled", "e1"), flow("f8", "TimedOut", "e2"),
            flow("f9", "Messaged", "e3")));
        rt.deploy(TENANT, &src, &modules()).await.unwrap();
        // The signal wins.
        let a = start(&rt, TENANT, "g").await;
        assert_eq!(db.store.parks_of(&a).await.unwrap().len(), 3, "one wait per branch");
        assert_eq!(rt.signal(TENANT, "go", Map::new()).await.unwrap().delivered, 1);
        let v = settled(&rt, &a).await;
        assert_eq!(v.state, "COMPLETED", "{v:?}");
        assert_eq!((ran(&v, "Signalled"), ran(&v, "TimedOut"), ran(&v, "Messaged")), (1, 0, 0));
        assert!(db.store.parks_of(&a).await.unwrap().is_empty(), "the losers' waits went in the winning commit");
        // The timer wins (virtual time passes); a late signal reaches nothing.
        let b = start(&rt, TENANT, "g").await;
        let v = settled(&rt, &b).await;
        assert_eq!(v.state, "COMPLETED", "{v:?}");
        assert_eq!((ran(&v, "Signalled"), ran(&v, "TimedOut"), ran(&v, "Messaged")), (0, 1, 0));
        assert_eq!(rt.signal(TENANT, "go", Map::new()).await.unwrap().delivered, 0);
        // The message wins.
        let c = start(&rt, TENANT, "g").await;
        assert_eq!(rt.correlate(TENANT, "m", None, Map::new()).await.unwrap(), c);
        let v = settled(&rt, &c).await;
        assert_eq!((ran(&v, "Signalled"), ran(&v, "TimedOut"), ran(&v, "Messaged")), (0, 0, 1));
    }

    async fn a_signal_thrown_by_one_instance_reaches_another(db) {
        let rt = runtime(db.store.clone());
        let thrower = format!(r#"<bpmn:process id="t" isExecutable="true">
  <bpmn:startEvent id="start"/>
  <bpmn:intermediateThrowEvent id="shout"><bpmn:signalEventDefinition signalRef="Go"/></bpmn:intermediateThrowEvent>
  <bpmn:endEvent id="end"><bpmn:signalEventDefinition signalRef="Stop"/></bpmn:endEvent>
  {} {}
</bpmn:process>"#, flow("f0", "start", "shout"), flow("f1", "shout", "end"));
        let stopper = format!(r#"<bpmn:process id="s" isExecutable="true">
  <bpmn:startEvent id="start"/>
  <bpmn:intermediateCatchEvent id="wait"><bpmn:signalEventDefinition signalRef="Stop"/></bpmn:intermediateCatchEvent>
  <bpmn:endEvent id="end"/> {} {}
</bpmn:process>"#, flow("f0", "start", "wait"), flow("f1", "wait", "end"));
        for p in [thrower, stopper, waiter("w")] {
            rt.deploy(TENANT, &doc(&p), &modules()).await.unwrap();
        }
        let w = start(&rt, TENANT, "w").await;
        let s = start(&rt, TENANT, "s").await;
        let t = start(&rt, TENANT, "t").await;
        assert_eq!(settled(&rt, &t).await.state, "COMPLETED");
        for id in [&w, &s] {
            let v = settled(&rt, id).await;
            assert_eq!(v.state, "COMPLETED", "{v:?}");
        }
        assert!(db.store.pending_signals(10).await.unwrap().is_empty());
    }

    async fn a_fan_out_cut_off_half_way_is_finished_once_by_the_next_runtime(db) {
        let rt = runtime(db.store.clone());
        rt.deploy(TENANT, &doc(&waiter("w")), &modules()).await.unwrap();
        let mut ids = Vec::new();
        for _ in 0..6 {
            let id = start(&rt, TENANT, "w").await;
            assert_eq!(settled(&rt, &id).await.state, "WAITING");
            ids.push(id);
        }
        // The broadcast as the API writes it, then a crash: three
        // deliveries made, their rows not yet deleted, the rest not made.
        let signal = NewSignal {
            id: "sig-1".into(), kind: "signal".into(), name: "go".into(), correlation_key: None,
            variables: "{}".into(), origin: None, created_at: 0,
        };
        assert_eq!(db.store.throw_signal(TENANT, &signal).await.unwrap(), 6);
        let rows = db.store.signal_deliveries("sig-1", 100).await.unwrap();
        assert_eq!(rows.len(), 6);
        for (instance, seq) in rows.iter().take(3) {
            rt.deliver_signal(instance, *seq, "signal", Map::new()).await.unwrap();
        }
        drop(rt);
        // A new runtime on the same database: its poller finishes the fan-out.
        let rt = runtime(db.reopen().await);
        rt.fire_due().await.unwrap();
        for id in &ids {
            let v = settled(&rt, id).await;
            assert_eq!(v.state, "COMPLETED", "{v:?}");
            assert_eq!(ran(&v, "After"), 1, "each wait reached exactly once");
        }
        assert!(db.store.pending_signals(10).await.unwrap().is_empty());
    }
}

#[path = "common/server.rs"]
mod server;

/// `POST /v1/signals` through a real server: the caller's tenant only, and
/// a bad body is a coded 400, never a 500.
#[tokio::test(flavor = "multi_thread")]
async fn the_signal_route_broadcasts_within_the_callers_tenant_and_refuses_bad_bodies() {
    let srv = server::Server::start().await;
    let acme = srv.tenant("acme", json!({})).await;
    let beta = srv.tenant("beta", json!({})).await;
    let mut ids = Vec::new();
    for api in [&acme, &beta] {
        let (status, body) = api
            .deploy(
                &doc(&waiter("w")),
                &[("chaos", common::guest_bytes("chaos"))],
            )
            .await;
        assert_eq!(status.as_u16(), 201, "{body}");
        let (status, body) = api.start("w", json!({"do": "echo"})).await;
        assert_eq!(status.as_u16(), 201, "{body}");
        assert_eq!(body["state"], "WAITING", "{body}");
        ids.push(body["instance"].as_str().unwrap().to_string());
    }
    let (status, body) = acme
        .post("/v1/signals", json!({"name": "go", "variables": {"k": 1}}))
        .await;
    assert_eq!(status.as_u16(), 200, "{body}");
    assert_eq!(body["delivered"], 1, "{body}");
    let (_, mine) = acme.get(&format!("/v1/instances/{}", ids[0])).await;
    assert_eq!(mine["state"], "COMPLETED", "{mine}");
    assert_eq!(mine["variables"]["k"], 1, "{mine}");
    let (_, theirs) = beta.get(&format!("/v1/instances/{}", ids[1])).await;
    assert_eq!(
        theirs["state"], "WAITING",
        "beta never hears acme's signal: {theirs}"
    );
    for bad in [
        json!({"name": ""}),
        json!({"name": "x".repeat(300)}),
        json!({"name": "go", "extra": 1}),
        json!({"variables": {}}),
    ] {
        let (status, body) = acme.post("/v1/signals", bad.clone()).await;
        assert_eq!(status.as_u16(), 400, "{bad}: {body}");
        assert!(
            body["code"]
                .as_str()
                .is_some_and(|c| c.starts_with("SUTRA.")),
            "{body}"
        );
    }
}
