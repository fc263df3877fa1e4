//! The document data flow, fan-outs and event waits, on States-language
//! definitions loaded by the real loader, without a runtime or a guest.

use super::*;
use crate::model::Process;
use chrono::TimeZone;
use serde_json::{json, Value};

fn load(def: Value) -> Process {
    let l = crate::dialect::asl::load(&def.to_string());
    assert!(l.ok(), "{:?}", l.diagnostics);
    l.definitions.processes.into_iter().next().unwrap()
}

fn inputs(s: i64) -> Inputs {
    Inputs {
        now: chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
            + chrono::Duration::seconds(s),
        draw: 0.5,
        attempt_lease: std::time::Duration::from_secs(60),
        journal: true,
    }
}

fn begin(p: &Process, vars: Value) -> Step {
    start(
        p,
        NewInstance {
            instance_id: "i1",
            tenant: "t",
            deployment_id: "d",
            start_node: None,
            variables: vars.as_object().cloned().unwrap(),
        },
        &inputs(0),
    )
    .unwrap()
}

fn fire_all(p: &Process, mut snap: Snapshot, at: i64) -> Snapshot {
    let due: Vec<u64> = snap.parks.keys().copied().collect();
    for park in due {
        snap = apply(p, snap, Event::ParkFired { park }, &inputs(at))
            .unwrap()
            .snapshot;
    }
    snap
}

#[test]
fn pass_choice_and_intrinsics_rewrite_the_document() {
    let p = load(json!({
        "StartAt": "Init",
        "States": {
            "Init": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.a, 1)", "tags.$": "States.StringSplit($.csv, ',')", "id.$": "$$.Execution.Id"}, "ResultPath": "$.init", "Next": "C"},
            "C": {"Type": "Choice", "Choices": [{"Variable": "$.init.n", "NumericEquals": 3, "Next": "Three"}], "Default": "Other"},
            "Three": {"Type": "Pass", "InputPath": "$.init", "OutputPath": "$.tags", "End": true},
            "Other": {"Type": "Fail", "Error": "Other"}
        }
    }));
    let step = begin(&p, json!({"a": 2, "csv": "x,y"}));
    assert_eq!(step.snapshot.state, InstanceState::Completed);
    assert_eq!(
        Value::Object(step.snapshot.variables),
        json!({"output": ["x", "y"]})
    );
    // A Choice that routed succeeded (it was shown CANCELLED once the
    // instance ended); the branch not taken never ran.
    let states = &step.snapshot.node_states;
    assert_eq!(states.get("C"), Some(&NodeState::Succeeded), "{states:?}");
    assert_eq!(states.get("Three"), Some(&NodeState::Succeeded));
    assert_eq!(states.get("Other"), None);
}

#[test]
fn a_map_with_waits_runs_each_item_in_its_own_document() {
    let p = load(json!({
        "StartAt": "M",
        "States": {"M": {
            "Type": "Map", "ItemsPath": "$.items", "MaxConcurrency": 1,
            "ItemSelector": {"v.$": "$$.Map.Item.Value", "i.$": "$$.Map.Item.Index", "k.$": "$.k"},
            "ItemProcessor": {"StartAt": "W", "States": {
                "W": {"Type": "Wait", "Seconds": 10, "Next": "P"},
                "P": {"Type": "Pass", "Parameters": {"out.$": "States.Format('{}-{}', $.k, $.v)"}, "End": true}
            }},
            "ResultPath": "$.r", "End": true
        }}
    }));
    let step = begin(&p, json!({"items": ["a", "b"], "k": "K"}));
    assert_eq!(step.snapshot.state, InstanceState::Waiting);
    assert_eq!(
        step.snapshot.parks.len(),
        1,
        "MaxConcurrency 1: one iteration waits"
    );
    let snap = fire_all(&p, step.snapshot, 10);
    assert_eq!(snap.parks.len(), 1, "the second iteration started");
    let snap = fire_all(&p, snap, 20);
    assert_eq!(snap.state, InstanceState::Completed, "{:?}", snap.error);
    assert_eq!(snap.variables["r"], json!([{"out": "K-a"}, {"out": "K-b"}]));
}

#[test]
fn an_event_wait_places_the_event_at_its_result_path() {
    let p = load(json!({
        "StartAt": "E",
        "States": {"E": {"Type": "Wait", "EventName": "go", "ResultPath": "$.ev", "End": true}}
    }));
    let step = begin(&p, json!({"x": 1}));
    let (&park, _) = step.snapshot.parks.iter().next().unwrap();
    let data = json!({"ok": true}).as_object().cloned().unwrap();
    let snap = apply(
        &p,
        step.snapshot,
        Event::MessageArrived {
            park,
            variables: data,
        },
        &inputs(5),
    )
    .unwrap()
    .snapshot;
    assert_eq!(
        Value::Object(snap.variables),
        json!({"x": 1, "ev": {"ok": true}})
    );
}

#[test]
fn a_parallel_branch_failure_fails_the_run_with_the_branch_error() {
    let p = load(json!({
        "StartAt": "P",
        "States": {"P": {"Type": "Parallel", "End": true, "Branches": [
            {"StartAt": "A", "States": {"A": {"Type": "Wait", "Seconds": 5, "End": true}}},
            {"StartAt": "B", "States": {"B": {"Type": "Fail", "Error": "Nope", "Cause": "b"}}}
        ]}}
    }));
    let step = begin(&p, json!({}));
    assert_eq!(step.snapshot.state, InstanceState::Failed);
    assert_eq!(step.snapshot.error.unwrap().code, "Nope");
    assert!(
        step.snapshot.parks.is_empty(),
        "the other branch's timer is withdrawn"
    );
}

#[test]
fn a_retried_parallel_runs_again_after_its_backoff() {
    let p = load(json!({
        "StartAt": "P",
        "States": {"P": {"Type": "Parallel", "End": true,
            "Retry": [{"ErrorEquals": ["Nope"], "IntervalSeconds": 3, "MaxAttempts": 1}],
            "Branches": [{"StartAt": "B", "States": {"B": {"Type": "Fail", "Error": "Nope"}}}]}}
    }));
    let step = begin(&p, json!({}));
    assert_eq!(step.snapshot.state, InstanceState::Waiting);
    let due = step.snapshot.parks.values().next().unwrap().due.unwrap();
    assert_eq!(due, inputs(3).now);
    let snap = fire_all(&p, step.snapshot, 3);
    assert_eq!(
        snap.state,
        InstanceState::Failed,
        "one retry, then the error"
    );
}

#[test]
fn a_uuid_is_drawn_from_the_inputs() {
    let p = load(json!({
        "StartAt": "U",
        "States": {"U": {"Type": "Pass", "Parameters": {"id.$": "States.UUID()"}, "End": true}}
    }));
    let a = begin(&p, json!({})).snapshot.variables["id"].clone();
    let b = begin(&p, json!({})).snapshot.variables["id"].clone();
    assert_eq!(a, b, "same inputs, same UUID");
    assert_eq!(a.as_str().unwrap().len(), 36);
}

#[test]
fn the_journal_of_a_catch_names_the_error_it_matched() {
    let p = load(json!({
        "StartAt": "T",
        "States": {
            "T": {"Type": "Task", "Resource": "chaos", "End": true,
                  "Retry": [{"ErrorEquals": ["OUT_OF_STOCK"], "MaxAttempts": 1}],
                  "Catch": [{"ErrorEquals": ["OUT_OF_STOCK"], "ResultPath": "$.error", "Next": "H"}]},
            "H": {"Type": "Pass", "End": true}
        }
    }));
    let mut step = begin(&p, json!({}));
    for attempt in 1..=2 {
        let req = step
            .effects
            .iter()
            .find_map(|e| match e {
                Effect::RunAttempt(a) => Some(a.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("attempt {attempt}"));
        let failed = Event::AttemptEnded {
            token: req.token,
            attempt: req.attempt,
            outcome: TaskOutcome::Failed {
                code: "OUT_OF_STOCK".into(),
                class: crate::codes::ErrorClass::Internal,
                retryable: true,
                message: "no pots left".into(),
                details: None,
                retry_after_ms: None,
            },
        };
        step = apply(&p, step.snapshot, failed, &inputs(attempt)).unwrap();
        if attempt == 1 {
            let retry = *step.snapshot.parks.keys().next().unwrap();
            step = apply(
                &p,
                step.snapshot,
                Event::ParkFired { park: retry },
                &inputs(2),
            )
            .unwrap();
        }
    }
    assert_eq!(step.snapshot.state, InstanceState::Completed);
    let caught = step
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Journal(j) if j.kind == "error_caught" => Some(j.data.clone()),
            _ => None,
        })
        .unwrap();
    // What `{Error, Cause}` says, not the engine code that carried it.
    assert_eq!(caught["code"], json!("OUT_OF_STOCK"));
    assert_eq!(caught["message"], json!("no pots left"));
    assert_eq!(caught["raised"], json!("SUTRA.RUNTIME.RETRY.EXHAUSTED"));
    assert_eq!(
        step.snapshot.variables["error"]["Error"],
        json!("OUT_OF_STOCK")
    );
}

/// Every attempt record names the fan-out item it ran in (issue 35 item 5):
/// a Parallel's branch by its index, also the attempt in flight that the
/// Parallel's catch interrupted; a task outside the fan-out names none, and
/// a record without an item is written and read without one.
#[test]
fn each_attempt_record_names_the_item_it_ran_in() {
    let p = load(json!({
        "StartAt": "Head",
        "States": {
            "Head": {"Type": "Task", "Resource": "chaos", "Next": "P"},
            "P": {"Type": "Parallel", "Next": "Done",
                  "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Done"}],
                  "Branches": [
                      {"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "chaos", "End": true}}},
                      {"StartAt": "B", "States": {"B": {"Type": "Task", "Resource": "chaos", "End": true}}}
                  ]},
            "Done": {"Type": "Pass", "End": true}
        }
    }));
    let runs = |s: &Step| -> Vec<AttemptRequest> {
        s.effects
            .iter()
            .filter_map(|e| match e {
                Effect::RunAttempt(a) => Some(a.clone()),
                _ => None,
            })
            .collect()
    };
    let records = |s: &Step| -> Vec<AttemptRecord> {
        s.effects
            .iter()
            .filter_map(|e| match e {
                Effect::RecordAttempt(a) => Some(a.clone()),
                _ => None,
            })
            .collect()
    };
    let step = begin(&p, json!({}));
    let head = runs(&step).pop().expect("Head runs");
    let ended = Event::AttemptEnded {
        token: head.token,
        attempt: head.attempt,
        outcome: TaskOutcome::Completed { output: json!({}) },
    };
    let step = apply(&p, step.snapshot, ended, &inputs(1)).unwrap();
    let outside = records(&step);
    assert_eq!(outside.len(), 1, "{outside:?}");
    assert_eq!(
        (outside[0].node.as_str(), &outside[0].item),
        ("Head", &None)
    );
    let branches = runs(&step);
    let a = branches.iter().find(|r| r.node == "A").expect("A runs");
    assert!(branches.iter().any(|r| r.node == "B"), "{branches:?}");
    let failed = Event::AttemptEnded {
        token: a.token,
        attempt: a.attempt,
        outcome: TaskOutcome::Failed {
            code: "Boom".into(),
            class: crate::codes::ErrorClass::Internal,
            retryable: false,
            message: "no".into(),
            details: None,
            retry_after_ms: None,
        },
    };
    let step = apply(&p, step.snapshot, failed, &inputs(2)).unwrap();
    assert_eq!(step.snapshot.state, InstanceState::Completed);
    let item = |index| {
        Some(AttemptItem {
            node: "P".into(),
            index,
        })
    };
    let named: Vec<_> = records(&step)
        .into_iter()
        .map(|r| (r.node, r.outcome, r.item))
        .collect();
    assert_eq!(
        named,
        vec![
            ("A".to_string(), "failed".to_string(), item(0)),
            ("B".to_string(), "interrupted".to_string(), item(1)),
        ]
    );
    // The field is left out when there is none, and a record written
    // before it existed loads without one.
    let json = serde_json::to_value(&outside[0]).unwrap();
    assert!(json.get("item").is_none(), "{json}");
    let old: AttemptRecord = serde_json::from_value(json).unwrap();
    assert_eq!(old, outside[0]);
    let with = serde_json::to_value(&records(&step)[0]).unwrap();
    assert_eq!(with["item"], json!({"node": "P", "index": 0}));
}
