//! `InvokeFlow` end to end (child flows), on SQLite and PostgreSQL, with the
//! virtual clock: a parent flow starts a deployed child flow of its tenant,
//! waits for it durably, and takes its output or its error.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::engine::{ChildOutcome, Event, Snapshot};
use sutra::runtime::{InstanceView, Runtime, RuntimeOptions, Settled, StartRequest};
use sutra::store::children::ChildEnd;
use sutra::store::{AnyStore, StepWrite, Store};

const TENANT: &str = "acme";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap()
}

fn runtime(store: AnyStore) -> Runtime<AnyStore> {
    let config = Config {
        audit_sql: true,
        ..Config::default()
    };
    Runtime::new(store, RuntimeOptions::new(config).with_virtual_clock(t0())).unwrap()
}

/// The `chaos` guest, built once per test process.
fn modules() -> BTreeMap<String, Vec<u8>> {
    static BUILT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let chaos = BUILT.get_or_init(|| {
        let root = common::root();
        let out = std::process::Command::new("bash")
            .arg(root.join("guest-examples/build.sh"))
            .arg("chaos")
            .current_dir(root)
            .output()
            .expect("run build.sh");
        assert!(
            out.status.success(),
            "build.sh chaos: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(root.join("target/guests/chaos.wasm")).expect("chaos.wasm")
    });
    BTreeMap::from([("chaos".to_string(), chaos.clone())])
}

/// The process of machine `def` named `name`, as the engine sees it.
fn process_of(mut def: Value, name: &str) -> sutra::model::Process {
    def["Name"] = json!(name);
    sutra::dialect::load(&def.to_string())
        .definitions
        .processes
        .remove(0)
}

fn inputs() -> sutra::engine::Inputs {
    sutra::engine::Inputs {
        now: t0(),
        draw: 0.5,
        attempt_lease: std::time::Duration::from_secs(35),
        journal: true,
    }
}

/// Deploy a machine under `name`.
async fn deploy(rt: &Runtime<AnyStore>, name: &str, mut def: Value) {
    def["Name"] = json!(name);
    rt.deploy(TENANT, &def.to_string(), &modules())
        .await
        .unwrap();
}

async fn start(rt: &Runtime<AnyStore>, process: &str, input: Value) -> String {
    rt.start(StartRequest {
        tenant: TENANT.into(),
        process_id: process.into(),
        variables: input.as_object().cloned().unwrap(),
        ..StartRequest::default()
    })
    .await
    .unwrap()
}

/// The child instances of `parent`, in the order they were started.
async fn children(db: &AnyStore, rt: &Runtime<AnyStore>, parent: &str) -> Vec<InstanceView> {
    let all = db
        .list_instances(&sutra::store::InstanceFilter {
            tenant: Some(TENANT.into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut out = Vec::new();
    for rec in all {
        let view = rt.inspect(&rec.id).await.unwrap();
        if view.parent.as_deref() == Some(parent) {
            out.push(view);
        }
    }
    out.sort_by_key(|v| v.started_at);
    out
}

fn offsets(view: &InstanceView) -> Vec<i64> {
    view.attempts
        .iter()
        .map(|a| (a.at - t0()).num_milliseconds())
        .collect()
}

/// A child flow that reserves stock with one task (the chaos guest does what
/// `$.do` says) and answers `{"reserved": qty}`.
fn stock_flow() -> Value {
    json!({
        "StartAt": "Reserve",
        "States": {"Reserve": {
            "Type": "Task", "Resource": "chaos",
            "Parameters": {"do.$": "$.do", "code.$": "$.code", "message": "no pots left", "output": {"reserved.$": "$.qty"}},
            "End": true
        }}
    })
}

/// A parent flow whose `Stock` state invokes `stock` (with `extra` fields).
fn order_flow(extra: Value) -> Value {
    let mut invoke = json!({
        "Type": "InvokeFlow", "Flow": "stock",
        "Parameters": {"qty.$": "$.qty", "do.$": "$.do", "code": "OUT_OF_STOCK"},
        "ResultPath": "$.stock",
        "Catch": [{"ErrorEquals": ["OUT_OF_STOCK"], "ResultPath": "$.error", "Next": "Backorder"}],
        "Next": "Done"
    });
    for (k, v) in extra.as_object().unwrap() {
        invoke[k] = v.clone();
    }
    json!({
        "StartAt": "Stock",
        "States": {
            "Stock": invoke,
            "Backorder": {"Type": "Pass", "Result": "backorder", "ResultPath": "$.status", "End": true},
            "Done": {"Type": "Succeed"}
        }
    })
}

backends::store_tests! {
    async fn a_child_that_completes_gives_its_output_at_the_result_path(db) {
        let rt = runtime(db.store.clone());
        deploy(&rt, "stock", stock_flow()).await;
        deploy(&rt, "orders", order_flow(json!({}))).await;
        let id = start(&rt, "orders", json!({"qty": 3, "do": "emit", "order": 7})).await;
        assert!(matches!(rt.settle(&id).await.unwrap(), Settled::Terminal(_)));
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(
            Value::Object(view.variables.clone()),
            json!({"qty": 3, "do": "emit", "order": 7, "stock": {"reserved": 3}})
        );
        assert_eq!(view.attempts.len(), 1);
        assert_eq!((view.attempts[0].task.as_str(), view.attempts[0].outcome.as_str()), ("Stock", "completed"));
        let kids = children(&db.store, &rt, &id).await;
        assert_eq!(kids.len(), 1);
        assert_eq!(kids[0].process, "stock");
        assert_eq!(kids[0].state, "COMPLETED");
        assert!(db.store.parks_of(&id).await.unwrap().is_empty());
    }

    async fn a_child_failure_is_caught_with_the_child_error_name(db) {
        let rt = runtime(db.store.clone());
        deploy(&rt, "stock", stock_flow()).await;
        deploy(&rt, "orders", order_flow(json!({}))).await;
        let id = start(&rt, "orders", json!({"qty": 3, "do": "fail"})).await;
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["error"], json!({"Error": "OUT_OF_STOCK", "Cause": "no pots left"}));
        assert_eq!(view.variables["status"], json!("backorder"));
        let kids = children(&db.store, &rt, &id).await;
        assert_eq!(kids.len(), 1);
        assert_eq!(kids[0].state, "FAILED");
        // The journal names the error the catcher matched.
        let history = rt.history(&id).await.unwrap();
        let caught = history.entries.iter().find(|e| e["kind"] == "error_caught").unwrap();
        assert_eq!(caught["data"]["code"], json!("OUT_OF_STOCK"));
        // Uncaught (another name), the parent fails with the child's error as its cause.
        let other = start(&rt, "orders", json!({"qty": 3, "do": "business-nope"})).await;
        rt.settle(&other).await.unwrap();
        let view = rt.inspect(&other).await.unwrap();
        assert_eq!(view.state, "FAILED");
        let e = view.error.unwrap();
        assert_eq!(e.code, "SUTRA.RUNTIME.TASK_FAILED");
        assert_eq!(e.cause.unwrap().code, "SUTRA.TASK.VALIDATION");
    }

    async fn a_retried_call_starts_a_fresh_child_each_attempt(db) {
        let rt = runtime(db.store.clone());
        deploy(&rt, "stock", stock_flow()).await;
        // Children 1 and 2 fail with Flaky, the third reserves.
        let retry = json!({
            "Parameters": {
                "qty.$": "$.qty", "code": "Flaky",
                "do.$": "States.ArrayGetItem(States.Array('fail', 'fail', 'emit'), $$.State.RetryCount)"
            },
            "Retry": [{"ErrorEquals": ["Flaky"], "IntervalSeconds": 2, "MaxAttempts": 2}]
        });
        deploy(&rt, "orders", order_flow(retry)).await;
        let id = start(&rt, "orders", json!({"qty": 1})).await;
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["stock"], json!({"reserved": 1}));
        // Backoffs of 2 s then 4 s between the three children.
        assert_eq!(offsets(&view), vec![0, 2_000, 6_000]);
        let codes: Vec<_> = view.attempts.iter().map(|a| a.code.clone()).collect();
        assert_eq!(codes, vec![Some("Flaky".to_string()), Some("Flaky".to_string()), None]);
        let kids = children(&db.store, &rt, &id).await;
        let states: Vec<&str> = kids.iter().map(|k| k.state.as_str()).collect();
        assert_eq!(states, vec!["FAILED", "FAILED", "COMPLETED"]);
        let ids: std::collections::BTreeSet<&str> = kids.iter().map(|k| k.instance.as_str()).collect();
        assert_eq!(ids.len(), 3, "a fresh child each attempt");
    }

    async fn the_parent_stays_parked_while_its_child_waits(db) {
        let rt = runtime(db.store.clone());
        deploy(&rt, "stock", json!({
            "StartAt": "Cool",
            "States": {
                "Cool": {"Type": "Wait", "Seconds": 3600, "Next": "Reserve"},
                "Reserve": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "emit", "output": {"reserved.$": "$.qty"}}, "End": true}
            }
        })).await;
        deploy(&rt, "orders", order_flow(json!({"Parameters": {"qty.$": "$.qty"}}))).await;
        let id = start(&rt, "orders", json!({"qty": 2})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "WAITING");
        assert_eq!(view.waits.len(), 1);
        let wait = &view.waits[0];
        assert_eq!((wait.kind.as_str(), wait.node.as_str(), wait.due), ("child", "Stock", None));
        let child = wait.child.clone().unwrap();
        let kid = rt.inspect(&child).await.unwrap();
        assert_eq!(kid.state, "WAITING");
        assert_eq!(kid.parent.as_deref(), Some(id.as_str()));
        assert_eq!(kid.waits[0].kind, "timer");
        // The child's timer passes on the virtual clock; the parent follows.
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["stock"], json!({"reserved": 2}));
        assert_eq!(view.ended_at, Some(t0() + chrono::Duration::hours(1)));
        assert_eq!(offsets(&rt.inspect(&child).await.unwrap()), vec![3_600_000]);
    }

    async fn a_restarted_runtime_finishes_a_parent_whose_child_ends_later(db) {
        let first = runtime(db.store.clone());
        deploy(&first, "stock", json!({
            "StartAt": "Cool",
            "States": {
                "Cool": {"Type": "Wait", "Seconds": 600, "Next": "Reserve"},
                "Reserve": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "emit", "output": {"reserved.$": "$.qty"}}, "End": true}
            }
        })).await;
        deploy(&first, "orders", order_flow(json!({"Parameters": {"qty.$": "$.qty"}}))).await;
        let id = start(&first, "orders", json!({"qty": 5})).await;
        assert_eq!(first.inspect(&id).await.unwrap().state, "WAITING");
        drop(first);
        // A new process on the same database: the child's timer, then the parent.
        let store = db.reopen().await;
        let second = runtime(store.clone());
        assert!(matches!(second.settle(&id).await.unwrap(), Settled::Terminal(_)));
        let view = second.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["stock"], json!({"reserved": 5}));
        store.close().await;
    }

    async fn a_child_end_committed_without_its_delivery_still_wakes_the_parent(db) {
        let rt = runtime(db.store.clone());
        let stock = json!({
            "StartAt": "Approve",
            "States": {"Approve": {"Type": "Wait", "EventName": "approved", "ResultPath": "$.approval", "End": true}}
        });
        deploy(&rt, "stock", stock.clone()).await;
        deploy(&rt, "orders", order_flow(json!({"Parameters": {"qty.$": "$.qty"}}))).await;
        let id = start(&rt, "orders", json!({"qty": 4})).await;
        let child = rt.inspect(&id).await.unwrap().waits[0].child.clone().unwrap();
        drop(rt);
        // What a runtime killed right after committing the child's final step
        // leaves behind: the child COMPLETED, its end on the parent's park, no
        // delivery (and no claim: it lapsed).
        let rec = db.store.load_instance(&child).await.unwrap().unwrap();
        let snap = Snapshot::from_json(&rec.snapshot).unwrap();
        let process = process_of(stock, "stock");
        let park = *snap.parks.keys().next().unwrap();
        let data = json!({"by": "ops"}).as_object().cloned().unwrap();
        let step = sutra::engine::apply(&process, snap, Event::MessageArrived { park, variables: data }, &inputs()).unwrap();
        let mut ended = step.snapshot;
        assert_eq!(ended.state.as_str(), "COMPLETED");
        let link = ended.parent.clone().unwrap();
        let write = StepWrite {
            snapshot: ended.to_json(),
            state: "COMPLETED".into(),
            updated_at: t0().timestamp_millis(),
            ended_at: Some(t0().timestamp_millis()),
            withdraw_all: true,
            wake_parent: Some(ChildEnd {
                parent_id: link.instance.clone(),
                park_seq: link.park as i64,
                payload: serde_json::to_string(&ChildOutcome::of(&ended)).unwrap(),
                due_at: t0().timestamp_millis(),
                claim: None,
            }),
            ..StepWrite::default()
        };
        db.store.commit_step(&child, rec.version, &write).await.unwrap();
        // A new runtime's poller delivers the stored end.
        let store = db.reopen().await;
        let rt = runtime(store.clone());
        assert!(matches!(rt.settle(&id).await.unwrap(), Settled::Terminal(_)));
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["stock"], json!({"qty": 4, "approval": {"by": "ops"}}));
        store.close().await;
    }

    async fn cancelling_the_parent_cancels_its_child_and_orphans_are_cancelled(db) {
        let rt = runtime(db.store.clone());
        deploy(&rt, "stock", json!({
            "StartAt": "Approve",
            "States": {"Approve": {"Type": "Wait", "EventName": "approved", "End": true}}
        })).await;
        deploy(&rt, "orders", order_flow(json!({"Parameters": {"qty.$": "$.qty"}}))).await;
        let id = start(&rt, "orders", json!({"qty": 1})).await;
        let child = rt.inspect(&id).await.unwrap().waits[0].child.clone().unwrap();
        rt.cancel(&id, Some("customer gave up".into())).await.unwrap();
        assert_eq!(rt.inspect(&id).await.unwrap().state, "TERMINATED");
        assert_eq!(rt.inspect(&child).await.unwrap().state, "TERMINATED");
        // A parent cancelled by a runtime that died before cancelling its
        // child (its step committed, its effects lost): the orphan pass
        // cancels the child.
        let flow = order_flow(json!({"Parameters": {"qty.$": "$.qty"}}));
        let id = start(&rt, "orders", json!({"qty": 2})).await;
        let child = rt.inspect(&id).await.unwrap().waits[0].child.clone().unwrap();
        let rec = db.store.load_instance(&id).await.unwrap().unwrap();
        let snap = Snapshot::from_json(&rec.snapshot).unwrap();
        let mut step = sutra::engine::apply(&process_of(flow, "orders"), snap, Event::Cancel { reason: None }, &inputs()).unwrap();
        let write = StepWrite {
            snapshot: step.snapshot.to_json(),
            state: "TERMINATED".into(),
            updated_at: t0().timestamp_millis(),
            ended_at: Some(t0().timestamp_millis()),
            withdraw_all: true,
            ..StepWrite::default()
        };
        db.store.commit_step(&id, rec.version, &write).await.unwrap();
        assert_eq!(db.store.orphaned_children(10).await.unwrap(), vec![child.clone()]);
        assert_eq!(rt.cancel_orphans().await.unwrap(), 1);
        assert_eq!(rt.inspect(&child).await.unwrap().state, "TERMINATED");
        assert!(db.store.orphaned_children(10).await.unwrap().is_empty());
    }

    async fn on_the_system_clock_a_short_child_wait_ends_the_parent_promptly(db) {
        // The child's wait is fired by the runtime's alarm, its end handed to
        // the parent at once (no poll interval in between).
        let rt = Runtime::new(db.store.clone(), RuntimeOptions::new(Config::default())).unwrap();
        deploy(&rt, "stock", json!({
            "StartAt": "Cool",
            "States": {"Cool": {"Type": "Wait", "Seconds": 1, "End": true}}
        })).await;
        deploy(&rt, "orders", order_flow(json!({"Parameters": {"qty.$": "$.qty"}}))).await;
        let began = std::time::Instant::now();
        let id = start(&rt, "orders", json!({"qty": 6})).await;
        assert!(matches!(rt.settle(&id).await.unwrap(), Settled::Terminal(_)));
        let took = began.elapsed();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["stock"], json!({"qty": 6}));
        assert!(took >= std::time::Duration::from_secs(1), "{took:?}");
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    }

    async fn a_flow_that_is_not_deployed_fails_the_state_with_a_stable_code(db) {
        let rt = runtime(db.store.clone());
        deploy(&rt, "orders", order_flow(json!({"Flow": "nowhere"}))).await;
        let id = start(&rt, "orders", json!({"qty": 1, "do": "emit"})).await;
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "FAILED");
        let e = view.error.unwrap();
        assert_eq!(e.code, "SUTRA.RUNTIME.TASK_FAILED");
        assert_eq!(e.cause.unwrap().code, "SUTRA.RUNTIME.CHILD.PROCESS_NOT_FOUND");
        assert!(children(&db.store, &rt, &id).await.is_empty());
        // A catcher sees the same name.
        let caught = order_flow(json!({
            "Flow": "nowhere",
            "Catch": [{"ErrorEquals": ["SUTRA.RUNTIME.CHILD.PROCESS_NOT_FOUND"], "ResultPath": "$.error", "Next": "Backorder"}]
        }));
        deploy(&rt, "orders", caught).await;
        let id = start(&rt, "orders", json!({"qty": 1, "do": "emit"})).await;
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(view.variables["error"]["Error"], json!("SUTRA.RUNTIME.CHILD.PROCESS_NOT_FOUND"));
    }
}
