//! Join rules, dead paths, error flows, node states and compensation, on
//! hand-built IR (no dialect): the engine semantics HX relies on.

use super::*;
use crate::model::JoinRule;

/// A node with a join rule (as HX builds every node).
fn joined(b: &mut B, ix: NodeIx, rule: JoinRule) -> NodeIx {
    b.p.nodes[ix.0 as usize].join = Some(rule);
    ix
}

fn jtask(b: &mut B, id: &str) -> NodeIx {
    let t = b.task(id, vec![]);
    joined(b, t, JoinRule::All)
}

fn kind_flow(b: &mut B, from: NodeIx, to: NodeIx, kind: FlowKind) -> FlowIx {
    let f = b.flow(from, to);
    b.p.flows[f.0 as usize].kind = kind;
    f
}

fn state(r: &Run<'_>, node: &str) -> Option<NodeState> {
    r.snap.node_states.get(node).copied()
}

/// Complete the attempt of `node` among those the last step asked for.
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

fn kinds(r: &Run<'_>) -> Vec<String> {
    r.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Journal(j) => Some(j.kind.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_false_guard_skips_the_branch_and_the_instance_completes() {
    let mut b = B::new();
    let s = b.start();
    let a = jtask(&mut b, "a");
    let x = jtask(&mut b, "x");
    let y = jtask(&mut b, "y");
    b.flow(s, a);
    b.flow_if(a, x, Some("false"));
    b.flow(x, y);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    finish(&mut r, "a", completed(json!({})));
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(state(&r, "x"), Some(NodeState::Skipped));
    assert_eq!(state(&r, "y"), Some(NodeState::Skipped));
    assert_eq!(state(&r, "a"), Some(NodeState::Succeeded));
    assert!(kinds(&r).contains(&"node_skipped".to_string()));
}

#[test]
fn a_join_all_with_a_dead_edge_fails_and_a_join_any_runs() {
    for (rule, expect) in [
        (JoinRule::All, InstanceState::Failed),
        (JoinRule::Any, InstanceState::Running),
    ] {
        let mut b = B::new();
        let s = b.start();
        let a = jtask(&mut b, "a");
        let x = jtask(&mut b, "x");
        let z = b.task("z", vec![]);
        joined(&mut b, z, rule);
        b.flow(s, a);
        b.flow_if(a, x, Some("false"));
        b.flow(a, z);
        b.flow(x, z);
        let p = b.build();
        let mut r = Run::start(&p, json!({}), t0());
        finish(&mut r, "a", completed(json!({})));
        assert_eq!(r.snap.state, expect, "{rule:?}");
        if rule == JoinRule::All {
            let e = r.snap.error.clone().unwrap();
            assert_eq!(e.code, "SUTRA.RUNTIME.JOIN.DEAD_EDGE");
            assert_eq!(e.node.as_deref(), Some("z"));
        } else {
            assert_eq!(r.one_attempt().node, "z");
            assert!(r.snap.joins.is_empty());
        }
    }
}

#[test]
fn a_join_waits_for_every_incoming_edge() {
    let mut b = B::new();
    let s = b.start();
    let a = jtask(&mut b, "a");
    let c = jtask(&mut b, "c");
    let z = jtask(&mut b, "z");
    b.flow(s, a);
    b.flow(s, c);
    b.flow(a, z);
    b.flow(c, z);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    let first = r.attempts();
    assert_eq!(first.len(), 2, "both entries start at once");
    finish(&mut r, "a", completed(json!({})));
    assert!(r.attempts().is_empty(), "z waits for c");
    assert_eq!(r.snap.joins.len(), 1);
    let c = first.iter().find(|x| x.node == "c").unwrap();
    r.apply(
        Event::AttemptEnded {
            token: c.token,
            attempt: c.attempt,
            outcome: completed(json!({})),
        },
        t0(),
    );
    assert_eq!(r.one_attempt().node, "z");
    assert!(r.snap.joins.is_empty());
}

#[test]
fn an_error_flow_handles_a_failure_without_unwinding() {
    let mut b = B::new();
    let s = b.start();
    let a = jtask(&mut b, "a");
    let ua = jtask(&mut b, "ua");
    let t = jtask(&mut b, "t");
    let next = jtask(&mut b, "next");
    let h = jtask(&mut b, "h");
    b.flow(s, a);
    kind_flow(&mut b, a, ua, FlowKind::Compensation);
    b.flow(a, t);
    b.flow(t, next);
    kind_flow(&mut b, t, h, FlowKind::Error);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    finish(&mut r, "a", completed(json!({"a": 1})));
    finish(&mut r, "t", failed("DOWN"));
    assert_eq!(r.one_attempt().node, "h");
    assert_eq!(state(&r, "t"), Some(NodeState::Failed));
    assert_eq!(state(&r, "next"), Some(NodeState::Skipped));
    assert!(r.snap.unwind.is_none());
    assert_eq!(r.snap.variables["error"]["node"], "t");
    assert_eq!(r.snap.variables["error"]["cause"]["code"], "DOWN");
    finish(&mut r, "h", completed(json!({})));
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(state(&r, "a"), Some(NodeState::Succeeded));
}

/// start → a → b → c → d; a, b, c compensated by ua, ub, uc.
fn chain() -> Process {
    let mut b = B::new();
    let s = b.start();
    let ids = ["a", "b", "c", "d"];
    let nodes: Vec<NodeIx> = ids.iter().map(|id| jtask(&mut b, id)).collect();
    b.flow(s, nodes[0]);
    b.chain(&nodes);
    for (i, id) in ids[..3].iter().enumerate() {
        let u = jtask(&mut b, &format!("u{id}"));
        kind_flow(&mut b, nodes[i], u, FlowKind::Compensation);
    }
    b.build()
}

#[test]
fn an_uncaught_failure_unwinds_newest_first_one_at_a_time() {
    let p = chain();
    let mut r = Run::start(&p, json!({}), t0());
    for n in ["a", "b", "c"] {
        finish(&mut r, n, completed(json!({ "out": n })));
    }
    finish(&mut r, "d", failed("DOWN"));
    assert!(kinds(&r).contains(&"unwind_started".to_string()));
    assert_eq!(state(&r, "d"), Some(NodeState::Failed));
    let mut order = Vec::new();
    for _ in 0..3 {
        let a = r.one_attempt();
        assert_eq!(
            a.input["compensating"]["output"]["out"], a.input["compensating"]["node"],
            "a compensator gets the compensated node's recorded output"
        );
        order.push(a.node.clone());
        finish(&mut r, &a.node, completed(json!({})));
    }
    assert_eq!(order, vec!["uc", "ub", "ua"]);
    assert_eq!(r.snap.state, InstanceState::Compensated);
    for n in ["a", "b", "c"] {
        assert_eq!(state(&r, n), Some(NodeState::Compensated));
    }
    assert_eq!(
        r.snap.error.as_ref().unwrap().cause.as_ref().unwrap().code,
        "DOWN"
    );
    assert!(r.effects.contains(&Effect::Ended {
        state: InstanceState::Compensated
    }));
}

#[test]
fn a_failed_compensator_is_recorded_and_the_unwind_goes_on() {
    let p = chain();
    let mut r = Run::start(&p, json!({}), t0());
    for n in ["a", "b", "c"] {
        finish(&mut r, n, completed(json!({})));
    }
    finish(&mut r, "d", failed("DOWN"));
    finish(&mut r, "uc", completed(json!({})));
    finish(&mut r, "ub", business("NOPE"));
    let record = r.effects.iter().find_map(|e| match e {
        Effect::RecordAttempt(a) if a.node == "ub" => Some(a.clone()),
        _ => None,
    });
    let record = record.unwrap();
    assert_eq!(record.outcome, "compensation_failed");
    assert_eq!(
        record.code.as_deref(),
        Some("SUTRA.RUNTIME.COMPENSATION.FAILED")
    );
    assert!(kinds(&r).contains(&"compensation_failed".to_string()));
    assert_eq!(r.one_attempt().node, "ua", "the unwind goes on");
    finish(&mut r, "ua", completed(json!({})));
    assert_eq!(r.snap.state, InstanceState::Failed);
    let e = r.snap.error.clone().unwrap();
    assert_eq!(e.cause.unwrap().code, "DOWN", "the original failure");
    assert_eq!(e.compensation_failures.len(), 1);
    assert_eq!(e.compensation_failures[0].compensator, "ub");
    assert_eq!(state(&r, "b"), Some(NodeState::Succeeded));
    assert_eq!(state(&r, "a"), Some(NodeState::Compensated));
}

#[test]
fn the_unwind_resumes_from_a_stored_snapshot_and_never_repeats_a_compensation() {
    let p = chain();
    let mut r = Run::start(&p, json!({}), t0());
    for n in ["a", "b", "c"] {
        finish(&mut r, n, completed(json!({})));
    }
    finish(&mut r, "d", failed("DOWN"));
    finish(&mut r, "uc", completed(json!({})));
    // A crash: the stored snapshot is all there is; ub's attempt park fires.
    let stored = Snapshot::from_json(&r.snap.to_json()).unwrap();
    assert_eq!(stored.unwind.as_ref().unwrap().done, vec!["c".to_string()]);
    r.snap = stored;
    let (seq, due) = r.due_park(ParkKind::Attempt);
    r.apply(Event::ParkFired { park: seq }, due);
    assert_eq!(
        r.one_attempt().node,
        "ub",
        "the lost attempt is re-run, uc is not"
    );
    finish(&mut r, "ub", completed(json!({})));
    finish(&mut r, "ua", completed(json!({})));
    assert_eq!(r.snap.state, InstanceState::Compensated);
}

#[test]
fn unwinding_cancels_running_work_and_spares_non_idempotent_attempts() {
    let mut b = B::new();
    let s = b.start();
    let a = jtask(&mut b, "a");
    let ua = jtask(&mut b, "ua");
    let pay = jtask(&mut b, "pay");
    let bad = jtask(&mut b, "bad");
    if let NodeKind::ServiceTask(t) = &mut b.p.nodes[pay.0 as usize].kind {
        t.idempotent = false;
    }
    b.flow(s, a);
    kind_flow(&mut b, a, ua, FlowKind::Compensation);
    b.flow(a, pay);
    b.flow(a, bad);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    finish(&mut r, "a", completed(json!({})));
    let pay_attempt = r.attempts().into_iter().find(|x| x.node == "pay").unwrap();
    finish(&mut r, "bad", failed("DOWN"));
    let abandoned: Vec<(String, bool)> = r
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::AttemptAbandoned {
                node,
                interruptible,
                ..
            } => Some((node.clone(), *interruptible)),
            _ => None,
        })
        .collect();
    assert_eq!(abandoned, vec![("pay".to_string(), false)]);
    assert_eq!(state(&r, "pay"), Some(NodeState::Cancelled));
    assert_eq!(r.one_attempt().node, "ua");
    // The non-idempotent attempt finishes later: its result is discarded.
    r.apply(
        Event::AttemptEnded {
            token: pay_attempt.token,
            attempt: pay_attempt.attempt,
            outcome: completed(json!({"charged": true})),
        },
        t0(),
    );
    assert!(kinds(&r).contains(&"attempt_result_discarded".to_string()));
    assert!(!r.snap.variables.contains_key("charged"));
    assert_eq!(state(&r, "pay"), Some(NodeState::Cancelled));
}

#[test]
fn a_cancel_during_an_unwind_terminates() {
    let p = chain();
    let mut r = Run::start(&p, json!({}), t0());
    for n in ["a", "b", "c"] {
        finish(&mut r, n, completed(json!({})));
    }
    finish(&mut r, "d", failed("DOWN"));
    r.apply(Event::Cancel { reason: None }, t0());
    assert_eq!(r.snap.state, InstanceState::Terminated);
    assert_eq!(state(&r, "uc"), Some(NodeState::Cancelled));
}

#[test]
fn bpmn_nodes_get_states_too() {
    let p = linear(vec![]);
    let mut r = Run::start(&p, json!({}), t0());
    assert_eq!(state(&r, "T"), Some(NodeState::Running));
    r.end_attempt(completed(json!({})), t0());
    assert_eq!(state(&r, "T"), Some(NodeState::Succeeded));
    assert_eq!(state(&r, "end"), Some(NodeState::Succeeded));
    assert_eq!(state(&r, "start"), None, "start events have no state");
}

#[test]
fn resuming_inside_a_join_graph_is_refused_unless_well_defined() {
    let new = || NewInstance {
        instance_id: "i2",
        tenant: "t",
        deployment_id: "d1",
        start_node: None,
        variables: Default::default(),
    };
    // a → c, b → c: resuming at a would leave c waiting for b forever.
    let mut b = B::new();
    let s = b.start();
    let a = jtask(&mut b, "a");
    let x = jtask(&mut b, "b");
    let c = jtask(&mut b, "c");
    b.flow(s, a);
    b.flow(s, x);
    b.flow(a, c);
    b.flow(x, c);
    let p = b.build();
    let err = resume_at(&p, new(), "a", &inputs(t0())).unwrap_err();
    assert_eq!(err.code, crate::codes::Code::InstanceState);
    assert!(err.message.contains("`c`"), "{}", err.message);
    // Resuming at c itself, or anywhere in a chain, is fine.
    assert!(resume_at(&p, new(), "c", &inputs(t0())).is_ok());
    let p = chain();
    let step = resume_at(&p, new(), "c", &inputs(t0())).unwrap();
    assert!(step
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RunAttempt(a) if a.node == "c")));
}
