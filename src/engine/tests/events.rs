//! Escalation, event sub-processes and compensate throws on hand-built IR
//! (issue 32): the engine semantics the BPMN loader relies on.

use super::*;
use crate::model::{CompensateThrow, MessageRef};

fn state(r: &Run<'_>, node: &str) -> Option<NodeState> {
    r.snap.node_states.get(node).copied()
}

fn finish(r: &mut Run<'_>, node: &str, outcome: TaskOutcome) {
    let a = r
        .attempts()
        .into_iter()
        .find(|a| a.node == node)
        .unwrap_or_else(|| panic!("no attempt of {node} in {:?}", r.effects));
    r.apply(
        Event::AttemptEnded {
            token: a.token,
            attempt: a.attempt,
            outcome,
        },
        t0(),
    );
}

fn nodes_run(r: &Run<'_>) -> Vec<String> {
    let mut v: Vec<String> = r.attempts().into_iter().map(|a| a.node).collect();
    v.sort();
    v
}

/// start → sub[s → esc(LATE) → t1] → after; a boundary on sub → handler.
fn escalating(interrupting: bool, codes: Option<Vec<String>>) -> Process {
    let mut b = B::new();
    let s = b.start();
    let sub = b.node("sub", NodeKind::SubProcess);
    let inner = b.node_in("s", NodeKind::Start(StartTrigger::None), Some(sub));
    let esc = b.node_in(
        "esc",
        NodeKind::Escalate {
            code: "LATE".into(),
        },
        Some(sub),
    );
    let t1 = b.task_in("t1", "chaos", vec![], Some(sub));
    b.chain(&[inner, esc, t1]);
    let after = b.task("after", vec![]);
    b.chain(&[s, sub, after]);
    let bnd = b.boundary(
        "onLate",
        sub,
        interrupting,
        BoundaryTrigger::Escalation { codes },
    );
    let h = b.task("handler", vec![]);
    b.flow(bnd, h);
    b.build()
}

#[test]
fn a_non_interrupting_escalation_boundary_forks_and_the_thrower_goes_on() {
    let p = escalating(false, Some(vec!["LATE".into()]));
    let r = Run::start(&p, json!({}), t0());
    assert_eq!(nodes_run(&r), vec!["handler", "t1"]);
    assert_eq!(state(&r, "esc"), Some(NodeState::Succeeded));
}

#[test]
fn an_interrupting_escalation_boundary_cancels_the_sub_process() {
    let p = escalating(true, None);
    let mut r = Run::start(&p, json!({}), t0());
    assert_eq!(nodes_run(&r), vec!["handler"]);
    assert_eq!(state(&r, "sub"), Some(NodeState::Cancelled));
    finish(&mut r, "handler", completed(json!({})));
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(state(&r, "after"), None);
}

#[test]
fn an_uncaught_escalation_is_remembered_and_is_no_failure() {
    let p = escalating(true, Some(vec!["OTHER".into()]));
    let mut r = Run::start(&p, json!({}), t0());
    assert_eq!(nodes_run(&r), vec!["t1"]);
    assert_eq!(r.snap.escalations, vec!["LATE".to_string()]);
    finish(&mut r, "t1", completed(json!({})));
    finish(&mut r, "after", completed(json!({})));
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert!(r.snap.error.is_none());
}

/// start → wait(message "never") → main; event sub-process `es` started by
/// `trigger` runs `h`.
fn with_event_sub(trigger: StartTrigger, interrupting: bool) -> Process {
    let mut b = B::new();
    let s = b.start();
    let wait = b.node(
        "wait",
        NodeKind::Catch(CatchTrigger::Message(MessageRef {
            name: "never".into(),
            correlation_key: None,
            event: false,
        })),
    );
    let main = b.task("main", vec![]);
    b.chain(&[s, wait, main]);
    let es = b.node("es", NodeKind::EventSubProcess { interrupting });
    let es_start = b.node_in("es_start", NodeKind::Start(trigger), Some(es));
    let h = b.task_in("h", "chaos", vec![], Some(es));
    b.flow(es_start, h);
    b.build()
}

#[test]
fn a_timer_event_sub_process_listens_on_a_park_and_interrupts_its_scope() {
    let spec = TimerSpec::parse_duration("PT1M").unwrap();
    let p = with_event_sub(StartTrigger::Timer(spec), true);
    let mut r = Run::start(&p, json!({}), t0());
    assert_eq!(r.snap.parks.len(), 2, "the catch's and the listener's");
    r.fire(ParkKind::Timer);
    assert_eq!(nodes_run(&r), vec!["h"]);
    assert_eq!(state(&r, "wait"), Some(NodeState::Cancelled));
    assert_eq!(r.snap.parks.len(), 1, "only h's attempt park is left");
    finish(&mut r, "h", completed(json!({})));
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(state(&r, "es"), Some(NodeState::Succeeded));
}

#[test]
fn a_non_interrupting_message_event_sub_process_runs_per_message_beside_the_scope() {
    let p = with_event_sub(
        StartTrigger::Message {
            name: "ping".into(),
        },
        false,
    );
    let mut r = Run::start(&p, json!({}), t0());
    for n in 1..=2 {
        let (&seq, _) = r
            .snap
            .parks
            .iter()
            .find(|(_, p)| p.message.as_ref().is_some_and(|m| m.name == "ping"))
            .expect("the listener waits again");
        let mut vars = serde_json::Map::new();
        vars.insert("n".into(), json!(n));
        r.apply(
            Event::MessageArrived {
                park: seq,
                variables: vars,
            },
            t0(),
        );
        assert_eq!(nodes_run(&r), vec!["h"]);
        finish(&mut r, "h", completed(json!({})));
        assert_eq!(state(&r, "wait"), Some(NodeState::Running));
    }
    assert_eq!(r.snap.variables["n"], 2);
}

#[test]
fn an_error_event_sub_process_catches_a_business_error_of_its_scope() {
    let mut b = B::new();
    let s = b.start();
    let work = b.task("work", vec![]);
    let after = b.task("after", vec![]);
    b.chain(&[s, work, after]);
    let es = b.node("es", NodeKind::EventSubProcess { interrupting: true });
    let es_start = b.node_in(
        "es_start",
        NodeKind::Start(StartTrigger::Error {
            codes: Some(vec!["NAMED".into()]),
        }),
        Some(es),
    );
    let h = b.task_in("h", "chaos", vec![], Some(es));
    b.flow(es_start, h);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    finish(&mut r, "work", business("NAMED"));
    assert_eq!(nodes_run(&r), vec!["h"]);
    finish(&mut r, "h", completed(json!({})));
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(state(&r, "work"), Some(NodeState::Failed));
    assert_eq!(state(&r, "after"), None);
}

/// start → a → b → throw → c; a, b compensated by ua, ub (with
/// compensation boundaries, BPMN-style).
fn compensating(thrown: Option<&str>) -> Process {
    let mut b = B::new();
    let s = b.start();
    let a = b.task("a", vec![]);
    let bb = b.task("b", vec![]);
    for (n, u) in [(a, "ua"), (bb, "ub")] {
        let h = b.task(u, vec![]);
        let f = b.flow(n, h);
        b.p.flows[f.0 as usize].kind = FlowKind::Compensation;
        b.boundary(&format!("c{u}"), n, true, BoundaryTrigger::Compensation);
    }
    let activity = thrown.map(|id| if id == "a" { a } else { bb });
    let throw = b.node("throw", NodeKind::Compensate(CompensateThrow { activity }));
    let c = b.task("c", vec![]);
    b.chain(&[s, a, bb, throw, c]);
    b.build()
}

#[test]
fn a_compensate_throw_runs_handlers_newest_first_one_at_a_time_then_goes_on() {
    let p = compensating(None);
    let mut r = Run::start(&p, json!({}), t0());
    finish(&mut r, "a", completed(json!({"a": 1})));
    finish(&mut r, "b", completed(json!({"b": 1})));
    let first = r.one_attempt();
    assert_eq!(first.node, "ub");
    assert_eq!(first.input["compensating"]["node"], "b");
    finish(&mut r, "ub", completed(json!({})));
    assert_eq!(r.one_attempt().node, "ua");
    finish(&mut r, "ua", completed(json!({})));
    assert_eq!(r.one_attempt().node, "c");
    assert_eq!(state(&r, "a"), Some(NodeState::Compensated));
    assert_eq!(state(&r, "b"), Some(NodeState::Compensated));
    assert!(r.snap.unwind.is_none());
    finish(&mut r, "c", completed(json!({})));
    assert_eq!(r.snap.state, InstanceState::Completed);
}

#[test]
fn a_failed_handler_is_recorded_and_the_throw_still_goes_on() {
    let p = compensating(None);
    let mut r = Run::start(&p, json!({}), t0());
    finish(&mut r, "a", completed(json!({})));
    finish(&mut r, "b", completed(json!({})));
    finish(&mut r, "ub", failed("BROKEN"));
    let recorded = r.effects.iter().any(|e| {
        matches!(e, Effect::RecordAttempt(a) if a.node == "ub"
            && a.code.as_deref() == Some(Code::CompensationFailed.as_str()))
    });
    assert!(recorded, "{:?}", r.effects);
    finish(&mut r, "ua", completed(json!({})));
    assert_eq!(r.one_attempt().node, "c");
    assert_eq!(state(&r, "b"), Some(NodeState::Succeeded));
    assert_eq!(state(&r, "a"), Some(NodeState::Compensated));
}

#[test]
fn an_uncaught_failure_does_not_unwind_explicitly_compensated_activities() {
    let p = compensating(Some("a"));
    let mut r = Run::start(&p, json!({}), t0());
    finish(&mut r, "a", completed(json!({})));
    finish(&mut r, "b", failed("DOWN"));
    assert_eq!(r.snap.state, InstanceState::Failed);
    assert!(r.snap.unwind.is_none());
    assert_eq!(state(&r, "a"), Some(NodeState::Succeeded));
}

#[test]
fn a_conditional_event_sub_process_fires_once_each_time_its_condition_becomes_true() {
    let cond = Expr::parse_condition("x >= 1").unwrap();
    let p = with_event_sub(StartTrigger::Condition(cond), false);
    let mut r = Run::start(&p, json!({"x": 0}), t0());
    assert!(r.attempts().is_empty());
    let edit = |r: &mut Run<'_>, x: i64| {
        let mut set = serde_json::Map::new();
        set.insert("x".into(), json!(x));
        r.apply(
            Event::EditVariables {
                set,
                unset: vec![],
                by: None,
            },
            t0(),
        );
        nodes_run(r)
    };
    assert_eq!(edit(&mut r, 1), vec!["h"], "false → true fires");
    finish(&mut r, "h", completed(json!({})));
    assert!(edit(&mut r, 2).is_empty(), "still true: no second start");
    assert!(edit(&mut r, 0).is_empty());
    assert_eq!(edit(&mut r, 5), vec!["h"], "true again fires again");
    assert_eq!(state(&r, "wait"), Some(NodeState::Running));
}
