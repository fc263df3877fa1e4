//! Lifecycle loose ends (issue 28), on SQLite and PostgreSQL, with the
//! virtual clock: a child flow's failure its parent handled does not keep its
//! deployment DRAINING and goes with its parent; an operator closes a FAILED
//! instance; the depth of a chain of process calls is a configuration key;
//! every node of a finished instance is in a final state; an event wait is
//! shown as an event with the command that resumes it.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, Settled, StartRequest};
use sutra::store::{AnyStore, DeploymentState, InstanceFilter, Store};
use sutra::time::VirtualClock;

const TENANT: &str = "acme";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap()
}

fn runtime_with(store: AnyStore, config: Config) -> (Runtime<AnyStore>, Arc<VirtualClock>) {
    let opts = RuntimeOptions::new(Config {
        audit_sql: true,
        ..config
    })
    .with_virtual_clock(t0());
    let clock = opts.virtual_clock.clone().unwrap();
    (Runtime::new(store, opts).unwrap(), clock)
}

fn runtime(store: AnyStore) -> (Runtime<AnyStore>, Arc<VirtualClock>) {
    runtime_with(store, Config::default())
}

/// The `chaos` guest, built once per test process.
fn modules() -> BTreeMap<String, Vec<u8>> {
    let chaos = std::fs::read(common::guest("chaos")).expect("chaos.wasm");
    BTreeMap::from([("chaos".to_string(), chaos)])
}

/// Deploy a machine under `name`; the id of its deployment.
async fn deploy(rt: &Runtime<AnyStore>, name: &str, mut def: Value) -> String {
    def["Name"] = json!(name);
    let recs = rt
        .deploy(TENANT, &def.to_string(), &modules())
        .await
        .unwrap();
    recs[0].id.clone()
}

async fn run(rt: &Runtime<AnyStore>, process: &str, input: Value) -> String {
    let id = rt
        .start(StartRequest {
            tenant: TENANT.into(),
            process_id: process.into(),
            variables: input.as_object().cloned().unwrap(),
            ..StartRequest::default()
        })
        .await
        .unwrap();
    rt.settle(&id).await.unwrap();
    id
}

async fn state_of(db: &AnyStore, deployment: &str) -> DeploymentState {
    db.get_deployment(deployment).await.unwrap().unwrap().state
}

async fn instance_ids(db: &AnyStore) -> Vec<String> {
    db.list_instances(&InstanceFilter {
        tenant: Some(TENANT.into()),
        limit: 1000,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_iter()
    .map(|r| r.id)
    .collect()
}

/// A child flow whose one task does what `$.do` says (`fail`: fails with OUT_OF_STOCK).
fn stock_flow() -> Value {
    json!({
        "StartAt": "Reserve",
        "States": {"Reserve": {
            "Type": "Task", "Resource": "chaos",
            "Parameters": {"do.$": "$.do", "code": "OUT_OF_STOCK", "message": "no pots left"},
            "End": true
        }}
    })
}

/// A parent that invokes `stock` and catches its OUT_OF_STOCK.
fn order_flow() -> Value {
    json!({
        "StartAt": "Stock",
        "States": {
            "Stock": {
                "Type": "InvokeFlow", "Flow": "stock",
                "Parameters": {"do.$": "$.do"},
                "ResultPath": "$.stock",
                "Catch": [{"ErrorEquals": ["OUT_OF_STOCK"], "ResultPath": "$.error", "Next": "Backorder"}],
                "Next": "Done"
            },
            "Backorder": {"Type": "Pass", "Result": "backorder", "ResultPath": "$.status", "End": true},
            "Done": {"Type": "Succeed"}
        }
    })
}

backends::store_tests! {
    async fn a_child_failure_its_parent_handled_does_not_pin_its_deployment_and_goes_with_its_parent(db) {
        let (rt, clock) = runtime(db.store.clone());
        let v1 = deploy(&rt, "stock", stock_flow()).await;
        deploy(&rt, "orders", order_flow()).await;
        let parent = run(&rt, "orders", json!({"do": "fail"})).await;
        let view = rt.inspect(&parent).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["status"], json!("backorder"));
        let child = instance_ids(&db.store).await.into_iter().find(|i| *i != parent).unwrap();
        assert_eq!(rt.inspect(&child).await.unwrap().state, "FAILED");
        // A new version of the child's process: the old one retires at once,
        // the handled failure does not keep it DRAINING.
        deploy(&rt, "stock", stock_flow()).await;
        assert_eq!(state_of(&db.store, &v1).await, DeploymentState::Retired);
        // Retention: the child stays while its parent does, and goes after it.
        clock.advance(std::time::Duration::from_secs(8 * 86_400));
        rt.sweep_once().await.unwrap();
        let left = instance_ids(&db.store).await;
        assert!(!left.contains(&parent), "{left:?}");
        rt.sweep_once().await.unwrap();
        let left = instance_ids(&db.store).await;
        assert!(!left.contains(&child), "the handled child went with its parent: {left:?}");
    }

    async fn an_operator_closes_a_failed_instance_so_its_version_retires_and_retention_applies(db) {
        let (rt, clock) = runtime(db.store.clone());
        let v1 = deploy(&rt, "stock", stock_flow()).await;
        let failed = run(&rt, "stock", json!({"do": "fail"})).await;
        let done = run(&rt, "stock", json!({"do": "echo"})).await;
        assert_eq!(rt.inspect(&failed).await.unwrap().state, "FAILED");
        deploy(&rt, "stock", stock_flow()).await;
        assert_eq!(state_of(&db.store, &v1).await, DeploymentState::Draining, "a FAILED instance holds it");
        // Not FAILED, another tenant's, unknown: refused with stable codes.
        let err = rt.close(TENANT, &done, None).await.unwrap_err();
        assert_eq!(err.code.as_str(), "SUTRA.RUNTIME.INSTANCE_STATE");
        let err = rt.close("other", &failed, None).await.unwrap_err();
        assert_eq!(err.code.as_str(), "SUTRA.RUNTIME.INSTANCE_NOT_FOUND");
        let err = rt.close(TENANT, "nope", None).await.unwrap_err();
        assert_eq!(err.code.as_str(), "SUTRA.RUNTIME.INSTANCE_NOT_FOUND");
        // Closed: still FAILED, journaled with its reason, the version retires.
        rt.close(TENANT, &failed, Some("refunded by hand".into())).await.unwrap();
        let view = rt.inspect(&failed).await.unwrap();
        assert_eq!(view.state, "FAILED");
        assert!(view.closed_at.is_some(), "{view:?}");
        let history = rt.history(&failed).await.unwrap();
        let closed = history.entries.iter().find(|e| e["kind"] == "closed").unwrap();
        assert_eq!(closed["data"]["reason"], json!("refunded by hand"));
        assert_eq!(state_of(&db.store, &v1).await, DeploymentState::Retired);
        let err = rt.close(TENANT, &failed, None).await.unwrap_err();
        assert_eq!(err.code.as_str(), "SUTRA.RUNTIME.INSTANCE_STATE", "closed already");
        // A closed instance does not resume.
        let v2 = db.store.active_deployment(TENANT, "stock").await.unwrap().unwrap();
        let req = sutra::runtime::MigrateRequest { target: v2.id.clone(), mapping: Default::default() };
        let err = rt.migrate(TENANT, &failed, &req).await.unwrap_err();
        assert_eq!(err.code.as_str(), "SUTRA.RUNTIME.INSTANCE_STATE");
        // Retention counts from the close; an unclosed FAILED one stays.
        let kept = run(&rt, "stock", json!({"do": "fail"})).await;
        clock.advance(std::time::Duration::from_secs(8 * 86_400));
        rt.sweep_once().await.unwrap();
        let left = instance_ids(&db.store).await;
        assert!(!left.contains(&failed), "{left:?}");
        assert!(left.contains(&kept), "{left:?}");
    }

    async fn a_flow_that_invokes_itself_stops_at_the_configured_depth(db) {
        let looping = json!({
            "StartAt": "Again",
            "States": {"Again": {"Type": "InvokeFlow", "Flow": "loop", "End": true}}
        });
        for (limit, config) in [
            (16, Config::default()),
            (3, Config { max_call_depth: 3, ..Config::default() }),
        ] {
            let (rt, _) = runtime_with(db.store.clone(), config);
            deploy(&rt, "loop", looping.clone()).await;
            let before = instance_ids(&db.store).await.len();
            let top = run(&rt, "loop", json!({})).await;
            let made = instance_ids(&db.store).await.len() - before;
            assert_eq!(made, limit, "one chain holds at most {limit} instances");
            let view = rt.inspect(&top).await.unwrap();
            assert_eq!(view.state, "FAILED");
            // The deepest child names the stable code and the key.
            let mut deepest = None;
            for id in instance_ids(&db.store).await {
                let v = rt.inspect(&id).await.unwrap();
                if let Some(e) = v.error.as_ref().and_then(|e| e.cause.as_ref()) {
                    if e.code == "SUTRA.RUNTIME.CHILD.DEPTH_EXCEEDED" {
                        deepest = Some(e.message.clone());
                    }
                }
            }
            let message = deepest.expect("a DEPTH_EXCEEDED failure");
            assert!(message.contains("sutra.runtime.max-call-depth"), "{message}");
        }
    }

    async fn every_node_of_a_finished_instance_is_in_a_final_state(db) {
        let (rt, _) = runtime(db.store.clone());
        deploy(&rt, "shapes", json!({
            "StartAt": "Both",
            "States": {
                "Both": {"Type": "Parallel", "Branches": [
                    {"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}}},
                    {"StartAt": "B", "States": {"B": {"Type": "Succeed"}}}
                ], "ResultPath": "$.both", "Next": "Each"},
                "Each": {"Type": "Map", "ItemsPath": "$.items", "ItemProcessor": {
                    "StartAt": "Echo", "States": {"Echo": {"Type": "Task", "Resource": "chaos",
                        "Parameters": {"do": "echo"}, "End": true}}
                }, "ResultPath": "$.each", "Next": "Done"},
                "Done": {"Type": "Succeed"}
            }
        })).await;
        let id = run(&rt, "shapes", json!({"items": [1, 2]})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.nodes.get("Done").map(String::as_str), Some("SUCCEEDED"), "{:?}", view.nodes);
        assert_eq!(view.nodes.get("B").map(String::as_str), Some("SUCCEEDED"), "{:?}", view.nodes);
        for (node, state) in &view.nodes {
            assert!(
                !matches!(state.as_str(), "READY" | "RUNNING"),
                "{node} is {state} in a finished instance: {:?}",
                view.nodes
            );
            assert_ne!(state, "CANCELLED", "{node}: nothing was cut off: {:?}", view.nodes);
        }
        // A cancelled run: what waited is CANCELLED, nothing stays RUNNING.
        deploy(&rt, "approval", json!({
            "StartAt": "Both",
            "States": {"Both": {"Type": "Parallel", "Branches": [
                {"StartAt": "Approve", "States": {"Approve": {"Type": "Wait", "EventName": "approved", "End": true}}},
                {"StartAt": "Cool", "States": {"Cool": {"Type": "Wait", "Seconds": 3600, "End": true}}}
            ], "End": true}}
        })).await;
        let id = rt
            .start(StartRequest {
                tenant: TENANT.into(),
                process_id: "approval".into(),
                ..StartRequest::default()
            })
            .await
            .unwrap();
        rt.cancel(&id, None).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "TERMINATED");
        assert_eq!(view.nodes.get("Approve").map(String::as_str), Some("CANCELLED"), "{:?}", view.nodes);
        for (node, state) in &view.nodes {
            assert!(!matches!(state.as_str(), "READY" | "RUNNING"), "{node} is {state}: {:?}", view.nodes);
        }
    }

    async fn a_sub_process_cut_off_by_its_boundary_leaves_no_inner_event_running(db) {
        let (rt, _) = runtime(db.store.clone());
        let bpmn = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="D" targetNamespace="x">
  <bpmn:message id="Msg" name="never"/>
  <bpmn:process id="cutoff" isExecutable="true">
    <bpmn:startEvent id="Start"/>
    <bpmn:subProcess id="Sub">
      <bpmn:startEvent id="Sub_Start"/>
      <bpmn:intermediateCatchEvent id="Inner"><bpmn:messageEventDefinition messageRef="Msg"/></bpmn:intermediateCatchEvent>
      <bpmn:endEvent id="Sub_End"/>
      <bpmn:sequenceFlow id="S1" sourceRef="Sub_Start" targetRef="Inner"/>
      <bpmn:sequenceFlow id="S2" sourceRef="Inner" targetRef="Sub_End"/>
    </bpmn:subProcess>
    <bpmn:boundaryEvent id="Late" attachedToRef="Sub">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT1M</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:boundaryEvent>
    <bpmn:endEvent id="End"/>
    <bpmn:endEvent id="TimedOut"/>
    <bpmn:sequenceFlow id="F1" sourceRef="Start" targetRef="Sub"/>
    <bpmn:sequenceFlow id="F2" sourceRef="Sub" targetRef="End"/>
    <bpmn:sequenceFlow id="F3" sourceRef="Late" targetRef="TimedOut"/>
  </bpmn:process>
</bpmn:definitions>"#;
        rt.deploy(TENANT, bpmn, &BTreeMap::new()).await.unwrap();
        let id = run(&rt, "cutoff", json!({})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.nodes.get("Inner").map(String::as_str), Some("CANCELLED"), "{:?}", view.nodes);
        assert_eq!(view.nodes.get("Sub").map(String::as_str), Some("CANCELLED"), "{:?}", view.nodes);
        assert_eq!(view.nodes.get("TimedOut").map(String::as_str), Some("SUCCEEDED"), "{:?}", view.nodes);
    }

    async fn inspect_names_an_event_wait_an_event_with_the_command_that_resumes_it(db) {
        let (rt, _) = runtime(db.store.clone());
        deploy(&rt, "approval", json!({
            "StartAt": "Approve",
            "States": {
                "Approve": {"Type": "Wait", "EventName": "approved", "Next": "Done"},
                "Done": {"Type": "Succeed"}
            }
        })).await;
        let id = rt
            .start(StartRequest {
                tenant: TENANT.into(),
                process_id: "approval".into(),
                ..StartRequest::default()
            })
            .await
            .unwrap();
        assert!(matches!(rt.settle(&id).await.unwrap(), Settled::Waiting(_)));
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.waits.len(), 1);
        let w = serde_json::to_value(&view.waits[0]).unwrap();
        assert_eq!(w["kind"], "event", "{w}");
        assert_eq!(w["event"], "approved", "{w}");
        assert!(w.get("message").is_none(), "{w}");
        assert_eq!(w["resume"], json!(format!("sutra resume {id} approved")), "{w}");
        // The command it names is the one that resumes it.
        rt.resume_event(&id, "approved", Default::default()).await.unwrap();
        assert_eq!(rt.inspect(&id).await.unwrap().state, "COMPLETED");
    }
}
