//! Process calls on States-language definitions (`InvokeFlow`) loaded by
//! the real loader: the effects a call emits and how a child's end is
//! judged, without a runtime.

use super::super::{apply, start, Effect, Event, Inputs, NewInstance, Step};
use super::*;
use crate::model::Process;
use chrono::TimeZone;
use serde_json::json;

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

fn starts(step: &Step) -> Vec<ChildStart> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::StartChild(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

fn cancels(step: &Step) -> Vec<String> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelChild { instance, .. } => Some(instance.clone()),
            _ => None,
        })
        .collect()
}

fn ended(
    c: &ChildStart,
    state: InstanceState,
    output: Value,
    error: Option<InstanceError>,
) -> Event {
    Event::ChildEnded {
        park: c.park,
        outcome: ChildOutcome {
            instance: c.instance.clone(),
            state,
            output: output.as_object().cloned().unwrap_or_default(),
            error,
            escalations: Vec::new(),
        },
    }
}

/// A child that failed the way a States-language run fails on a task.
fn task_failure(name: &str, message: &str) -> Option<InstanceError> {
    Some(InstanceError {
        code: Code::RetryExhausted.as_str().into(),
        message: "task `Reserve` failed".into(),
        node: Some("Reserve".into()),
        cause: Some(super::super::Cause {
            code: name.into(),
            message: message.into(),
        }),
        compensation_failures: Vec::new(),
    })
}

fn caller(extra: Value) -> Process {
    let mut state = json!({
        "Type": "InvokeFlow", "Flow": "stock",
        "Parameters": {"sku.$": "$.sku"},
        "ResultSelector": {"reserved.$": "$.reserved"},
        "ResultPath": "$.stock",
        "Catch": [{"ErrorEquals": ["Never"], "Next": "Handled"}],
        "Next": "Done"
    });
    for (k, v) in extra.as_object().unwrap() {
        state[k] = v.clone();
    }
    load(json!({
        "StartAt": "Reserve",
        "States": {
            "Reserve": state,
            "Done": {"Type": "Succeed"},
            "Handled": {"Type": "Pass", "End": true}
        }
    }))
}

#[test]
fn a_call_starts_one_child_and_its_output_is_the_result() {
    let p = caller(json!({}));
    let step = begin(&p, json!({"sku": "TEA", "order": 7}));
    assert_eq!(step.snapshot.state, InstanceState::Waiting);
    let c = starts(&step).remove(0);
    assert_eq!(c.process, "stock");
    assert_eq!(Value::Object(c.input.clone()), json!({"sku": "TEA"}));
    assert_eq!(c.instance, child_id("i1", c.park));
    assert_eq!(c.instance, format!("i1.{}", c.park));
    let park = &step.snapshot.parks[&c.park];
    assert_eq!((park.kind, park.due), (ParkKind::Child, None));
    let done = apply(
        &p,
        step.snapshot,
        ended(
            &c,
            InstanceState::Completed,
            json!({"reserved": 2, "noise": 1}),
            None,
        ),
        &inputs(5),
    )
    .unwrap();
    assert_eq!(done.snapshot.state, InstanceState::Completed);
    assert_eq!(
        Value::Object(done.snapshot.variables.clone()),
        json!({"sku": "TEA", "order": 7, "stock": {"reserved": 2}})
    );
    assert!(done.effects.iter().any(
        |e| matches!(e, Effect::RecordAttempt(a) if a.outcome == "completed" && a.node == "Reserve")
    ));
    assert!(cancels(&done).is_empty(), "an ended child is not cancelled");
}

#[test]
fn a_child_failure_is_caught_under_the_child_error_name() {
    let p = caller(json!({
        "Catch": [{"ErrorEquals": ["OUT_OF_STOCK"], "ResultPath": "$.error", "Next": "Handled"}]
    }));
    let step = begin(&p, json!({"sku": "POT"}));
    let c = starts(&step).remove(0);
    let failed = ended(
        &c,
        InstanceState::Failed,
        json!({}),
        task_failure("OUT_OF_STOCK", "no pots left"),
    );
    let done = apply(&p, step.snapshot, failed, &inputs(1)).unwrap();
    assert_eq!(
        done.snapshot.state,
        InstanceState::Completed,
        "{:?}",
        done.snapshot.error
    );
    assert_eq!(
        done.snapshot.variables["error"],
        json!({"Error": "OUT_OF_STOCK", "Cause": "no pots left"})
    );
    // The journal names the error the catcher matched, not the wrapper.
    let caught = done
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Journal(j) if j.kind == "error_caught" => Some(j.data.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(caught["code"], json!("OUT_OF_STOCK"));
    assert_eq!(caught["raised"], json!("SUTRA.RUNTIME.TASK_FAILED"));
}

#[test]
fn the_child_wrapper_code_and_states_task_failed_match_too() {
    for name in ["SUTRA.RUNTIME.RETRY.EXHAUSTED", "States.TaskFailed"] {
        let p = caller(json!({
            "Catch": [{"ErrorEquals": [name], "ResultPath": "$.error", "Next": "Handled"}]
        }));
        let step = begin(&p, json!({"sku": "POT"}));
        let c = starts(&step).remove(0);
        let failed = ended(
            &c,
            InstanceState::Failed,
            json!({}),
            task_failure("OUT_OF_STOCK", "no"),
        );
        let done = apply(&p, step.snapshot, failed, &inputs(1)).unwrap();
        assert_eq!(done.snapshot.state, InstanceState::Completed, "{name}");
        assert_eq!(
            done.snapshot.variables["error"]["Error"],
            json!("OUT_OF_STOCK")
        );
    }
}

#[test]
fn a_retried_call_starts_a_fresh_child_after_its_backoff() {
    let p = caller(json!({
        "Retry": [{"ErrorEquals": ["Flaky"], "IntervalSeconds": 3, "MaxAttempts": 1}]
    }));
    let step = begin(&p, json!({"sku": "CUP"}));
    let first = starts(&step).remove(0);
    let fail = |c: &ChildStart| {
        ended(
            c,
            InstanceState::Failed,
            json!({}),
            Some(InstanceError {
                code: "Flaky".into(),
                message: "try again".into(),
                node: None,
                cause: None,
                compensation_failures: Vec::new(),
            }),
        )
    };
    let backoff = apply(&p, step.snapshot, fail(&first), &inputs(1)).unwrap();
    assert!(starts(&backoff).is_empty());
    let (&retry, park) = backoff.snapshot.parks.iter().next().unwrap();
    assert_eq!(park.kind, ParkKind::Retry);
    assert_eq!(park.due, Some(inputs(4).now));
    let again = apply(
        &p,
        backoff.snapshot,
        Event::ParkFired { park: retry },
        &inputs(4),
    )
    .unwrap();
    let second = starts(&again).remove(0);
    assert_ne!(second.instance, first.instance, "a fresh child");
    assert_eq!(second.attempt, 2);
    // A late end of the first child changes nothing.
    let late = apply(&p, again.snapshot.clone(), fail(&first), &inputs(5)).unwrap_err();
    assert_eq!(late.code, Code::InstanceState);
    // The second failure spends the budget: the run fails with the child's error as cause.
    let failed = apply(&p, again.snapshot, fail(&second), &inputs(6)).unwrap();
    let e = failed.snapshot.error.unwrap();
    assert_eq!(e.code, "SUTRA.RUNTIME.RETRY.EXHAUSTED");
    assert_eq!(e.cause.unwrap().code, "Flaky");
}

#[test]
fn the_timeout_cancels_the_child_and_raises_states_timeout() {
    let p = caller(json!({
        "TimeoutSeconds": 60,
        "Catch": [{"ErrorEquals": ["States.Timeout"], "ResultPath": "$.error", "Next": "Handled"}]
    }));
    let step = begin(&p, json!({"sku": "TEA"}));
    let c = starts(&step).remove(0);
    assert_eq!(step.snapshot.parks[&c.park].due, Some(inputs(60).now));
    let fired = apply(
        &p,
        step.snapshot,
        Event::ParkFired { park: c.park },
        &inputs(60),
    )
    .unwrap();
    assert_eq!(cancels(&fired), vec![c.instance.clone()]);
    assert_eq!(fired.snapshot.state, InstanceState::Completed);
    assert_eq!(
        fired.snapshot.variables["error"]["Error"],
        json!("States.Timeout")
    );
}

#[test]
fn cancelling_the_parent_cancels_its_child() {
    let p = caller(json!({}));
    let step = begin(&p, json!({"sku": "TEA"}));
    let c = starts(&step).remove(0);
    let cancelled = apply(
        &p,
        step.snapshot,
        Event::Cancel { reason: None },
        &inputs(1),
    )
    .unwrap();
    assert_eq!(cancelled.snapshot.state, InstanceState::Terminated);
    assert_eq!(cancels(&cancelled), vec![c.instance.clone()]);
    // Its end afterwards is refused: nothing to commit.
    let late = apply(
        &p,
        cancelled.snapshot,
        ended(&c, InstanceState::Terminated, json!({}), None),
        &inputs(2),
    )
    .unwrap_err();
    assert_eq!(late.code, Code::InstanceState);
}

#[test]
fn a_child_cancelled_by_somebody_else_fails_the_call_without_retry() {
    let p = caller(json!({
        "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 3}]
    }));
    let step = begin(&p, json!({"sku": "TEA"}));
    let c = starts(&step).remove(0);
    let done = apply(
        &p,
        step.snapshot,
        ended(&c, InstanceState::Terminated, json!({}), None),
        &inputs(1),
    )
    .unwrap();
    assert_eq!(done.snapshot.state, InstanceState::Failed);
    let e = done.snapshot.error.unwrap();
    assert_eq!(e.cause.unwrap().code, "SUTRA.RUNTIME.CHILD.TERMINATED");
}

#[test]
fn a_call_whose_input_is_no_object_fails_with_child_input_invalid() {
    let p = load(json!({
        "StartAt": "Reserve",
        "States": {"Reserve": {"Type": "InvokeFlow", "Flow": "stock", "InputPath": "$.sku", "End": true}}
    }));
    let step = begin(&p, json!({"sku": "TEA"}));
    assert!(starts(&step).is_empty());
    assert_eq!(
        step.snapshot.error.unwrap().code,
        "SUTRA.RUNTIME.CHILD.INPUT_INVALID"
    );
}

#[test]
fn child_ids_stay_within_128_characters() {
    assert_eq!(child_id("abc", 7), "abc.7");
    let deep = "x".repeat(125);
    let id = child_id(&deep, 12345);
    assert!(id.len() <= 128 && id.starts_with('c'), "{id}");
    assert_eq!(id, child_id(&deep, 12345), "deterministic");
    assert_ne!(id, child_id(&deep, 12346));
}
