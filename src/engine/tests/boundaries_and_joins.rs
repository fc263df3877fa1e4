//! Interrupting boundaries leave nothing running inside the activity, and an
//! instance that can never move again fails instead of waiting forever.

use super::*;

fn state(r: &Run<'_>, node: &str) -> Option<NodeState> {
    r.snap.node_states.get(node).copied()
}

fn records(r: &Run<'_>) -> Vec<AttemptRecord> {
    r.effects
        .iter()
        .filter_map(|e| match e {
            Effect::RecordAttempt(a) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

/// start → sub(subStart → Inner → subEnd) → end, a PT5S interrupting timer
/// boundary on `sub` → timedOut.
fn timed_sub_process() -> Process {
    let mut b = B::new();
    let s = b.start();
    let sub = b.node("sub", NodeKind::SubProcess);
    let e = b.end("end");
    b.chain(&[s, sub, e]);
    let ss = b.node_in("subStart", NodeKind::Start(StartTrigger::None), Some(sub));
    let st = b.task_in("Inner", "chaos", vec![], Some(sub));
    let se = b.node_in("subEnd", NodeKind::End(EndKind::None), Some(sub));
    b.chain(&[ss, st, se]);
    let bnd = b.boundary(
        "late",
        sub,
        true,
        BoundaryTrigger::Timer(TimerSpec::Duration(IsoDuration::from_millis(5000))),
    );
    let te = b.end("timedOut");
    b.flow(bnd, te);
    b.build()
}

#[test]
fn an_interrupting_timer_on_a_sub_process_cancels_every_node_inside_and_records_the_attempt() {
    let p = timed_sub_process();
    let mut r = Run::start(&p, json!({}), t0());
    let a = r.one_attempt();
    assert_eq!(state(&r, "Inner"), Some(NodeState::Running));
    r.fire(ParkKind::Timer);
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(state(&r, "sub"), Some(NodeState::Cancelled));
    assert_eq!(state(&r, "Inner"), Some(NodeState::Cancelled));
    let rec = records(&r);
    assert_eq!(rec.len(), 1, "{rec:?}");
    assert_eq!(rec[0].node, "Inner");
    assert_eq!(rec[0].attempt, a.attempt);
    assert_eq!(rec[0].outcome, "interrupted");
    assert_eq!(rec[0].code.as_deref(), Some(Code::TaskInterrupted.as_str()));
    assert_eq!(rec[0].ended_at, secs(5));
    assert!(r.effects.iter().any(|e| matches!(
        e,
        Effect::AttemptAbandoned { node, .. } if node == "Inner"
    )));
}

#[test]
fn an_error_caught_on_a_sub_process_cancels_its_other_branch() {
    // sub: subStart → fork → (Slow | Fail → errEnd); error boundary on sub.
    let mut b = B::new();
    let s = b.start();
    let sub = b.node("sub", NodeKind::SubProcess);
    let e = b.end("end");
    b.chain(&[s, sub, e]);
    let ss = b.node_in("subStart", NodeKind::Start(StartTrigger::None), Some(sub));
    let fork = b.node_in("fork", NodeKind::ParallelGateway, Some(sub));
    let slow = b.task_in("Slow", "chaos", vec![], Some(sub));
    let slow_end = b.node_in("slowEnd", NodeKind::End(EndKind::None), Some(sub));
    let err = b.node_in(
        "errEnd",
        NodeKind::End(EndKind::Error {
            code: "BAD".into(),
            message: None,
        }),
        Some(sub),
    );
    b.chain(&[ss, fork, slow, slow_end]);
    b.flow(fork, err);
    let bnd = b.boundary(
        "caught",
        sub,
        true,
        BoundaryTrigger::Error {
            codes: None,
            result_path: None,
            catch_failures: false,
        },
    );
    let ce = b.end("handled");
    b.flow(bnd, ce);
    let p = b.build();
    let r = Run::start(&p, json!({}), t0());
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert!(r.snap.completed.contains(&"handled".to_string()));
    assert_eq!(state(&r, "Slow"), Some(NodeState::Cancelled));
    assert_eq!(state(&r, "sub"), Some(NodeState::Failed));
    let rec = records(&r);
    assert_eq!(rec.len(), 1, "{rec:?}");
    assert_eq!(rec[0].node, "Slow");
    assert_eq!(rec[0].outcome, "interrupted");
}

#[test]
fn two_none_starts_into_a_parallel_join_fail_instead_of_waiting_forever() {
    let mut b = B::new();
    let s1 = b.start();
    let s2 = b.node("start2", NodeKind::Start(StartTrigger::None));
    let j = b.node("join", NodeKind::ParallelGateway);
    let t = b.task("T", vec![]);
    let e = b.end("end");
    b.flow(s1, j);
    b.flow(s2, j);
    b.chain(&[j, t, e]);
    let p = b.build();
    let r = Run::start(&p, json!({}), t0());
    assert_eq!(r.snap.state, InstanceState::Failed);
    let err = r.snap.error.as_ref().unwrap();
    assert_eq!(err.code, Code::JoinDeadEdge.as_str());
    assert_eq!(err.node.as_deref(), Some("join"));
    assert!(r.attempts().is_empty());
}

#[test]
fn a_join_waiting_beside_a_running_task_is_not_stuck_until_the_task_ends() {
    // start → fork → (A → join) and (B → end); join also fed by start2 (never).
    let mut b = B::new();
    let s = b.start();
    let s2 = b.node("start2", NodeKind::Start(StartTrigger::None));
    let fork = b.node("fork", NodeKind::ParallelGateway);
    let ta = b.task("A", vec![]);
    let j = b.node("join", NodeKind::ParallelGateway);
    let e = b.end("end");
    b.chain(&[s, fork, ta, j, e]);
    b.flow(s2, j);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    assert_eq!(r.snap.state, InstanceState::Running);
    r.end_attempt(completed(json!({})), secs(1));
    assert_eq!(r.snap.state, InstanceState::Failed);
    assert_eq!(
        r.snap.error.as_ref().unwrap().code,
        Code::JoinDeadEdge.as_str()
    );
}

/// start → split (inclusive) → [a] A, [b] B → join (inclusive) → C → end.
fn inclusive_diamond() -> Process {
    let mut b = B::new();
    let s = b.start();
    let split = b.node("split", NodeKind::InclusiveGateway);
    let ta = b.task("A", vec![]);
    let tb = b.task("B", vec![]);
    let join = b.node("join", NodeKind::InclusiveGateway);
    let tc = b.task("C", vec![]);
    let e = b.end("end");
    b.flow(s, split);
    b.flow_if(split, ta, Some("a"));
    b.flow_if(split, tb, Some("b"));
    b.flow(ta, join);
    b.flow(tb, join);
    b.chain(&[join, tc, e]);
    b.build()
}

fn finish(r: &mut Run<'_>, node: &str, now: DateTime<Utc>) {
    let a = r
        .attempts()
        .into_iter()
        .find(|a| a.node == node)
        .unwrap_or_else(|| panic!("no attempt of {node}: {:?}", r.effects));
    r.apply(
        Event::AttemptEnded {
            token: a.token,
            attempt: a.attempt,
            outcome: completed(json!({})),
        },
        now,
    );
}

fn running(r: &Run<'_>) -> Vec<String> {
    let mut v: Vec<String> = r
        .snap
        .tokens
        .iter()
        .filter(|t| matches!(t.status, TokenStatus::Task(_)))
        .map(|t| t.node.clone())
        .collect();
    v.sort();
    v
}

#[test]
fn an_inclusive_split_takes_every_true_flow_and_its_join_waits_for_both() {
    let p = inclusive_diamond();
    let mut r = Run::start(&p, json!({"a": true, "b": true}), t0());
    assert_eq!(running(&r), vec!["A", "B"]);
    // A is done; B can still reach the join: it waits.
    let b_attempt = r.attempts().into_iter().find(|a| a.node == "B").unwrap();
    finish(&mut r, "A", secs(1));
    assert_eq!(running(&r), vec!["B"]);
    assert!(r.attempts().is_empty());
    r.apply(
        Event::AttemptEnded {
            token: b_attempt.token,
            attempt: 1,
            outcome: completed(json!({})),
        },
        secs(2),
    );
    assert_eq!(running(&r), vec!["C"]);
    finish(&mut r, "C", secs(3));
    assert_eq!(r.snap.state, InstanceState::Completed);
}

#[test]
fn an_inclusive_join_fires_at_once_when_only_one_branch_was_taken() {
    let p = inclusive_diamond();
    let mut r = Run::start(&p, json!({"a": true, "b": false}), t0());
    assert_eq!(running(&r), vec!["A"]);
    finish(&mut r, "A", secs(1));
    assert_eq!(running(&r), vec!["C"]);
    finish(&mut r, "C", secs(2));
    assert_eq!(r.snap.state, InstanceState::Completed);
}

#[test]
fn an_inclusive_split_with_no_true_flow_fails_with_the_gateway_code() {
    let p = inclusive_diamond();
    let r = Run::start(&p, json!({"a": false, "b": false}), t0());
    assert_eq!(r.snap.state, InstanceState::Failed);
    assert_eq!(
        r.snap.error.as_ref().unwrap().code,
        Code::NoFlowTaken.as_str()
    );
}

#[test]
fn an_inclusive_join_waits_for_a_token_inside_an_upstream_sub_process() {
    // start → fork (parallel) → A → join; fork → sub(subStart → Inner → subEnd) → join.
    let mut b = B::new();
    let s = b.start();
    let fork = b.node("fork", NodeKind::ParallelGateway);
    let ta = b.task("A", vec![]);
    let sub = b.node("sub", NodeKind::SubProcess);
    let join = b.node("join", NodeKind::InclusiveGateway);
    let tc = b.task("C", vec![]);
    let e = b.end("end");
    b.chain(&[s, fork, ta, join, tc, e]);
    b.flow(fork, sub);
    b.flow(sub, join);
    let ss = b.node_in("subStart", NodeKind::Start(StartTrigger::None), Some(sub));
    let inner = b.task_in("Inner", "chaos", vec![], Some(sub));
    let se = b.node_in("subEnd", NodeKind::End(EndKind::None), Some(sub));
    b.chain(&[ss, inner, se]);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    assert_eq!(running(&r), vec!["A", "Inner"]);
    let inner_attempt = r
        .attempts()
        .into_iter()
        .find(|a| a.node == "Inner")
        .unwrap();
    finish(&mut r, "A", secs(1));
    assert_eq!(running(&r), vec!["Inner"], "the join must not fire early");
    r.apply(
        Event::AttemptEnded {
            token: inner_attempt.token,
            attempt: 1,
            outcome: completed(json!({})),
        },
        secs(2),
    );
    assert_eq!(running(&r), vec!["C"]);
}
