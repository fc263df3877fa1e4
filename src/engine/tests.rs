//! Engine tests: pure, no database, no guest. Processes are built directly in
//! the IR so these tests pin the engine's semantics independently of any dialect.

use super::*;
use crate::codes::ErrorClass;
use crate::diag::Pos;
use crate::model::{
    Backoff, BoundaryEvent, BoundaryTrigger, CatchTrigger, Dialect, EndKind, Expr, Flow, FlowIx,
    FlowKind, IoMapping, Jitter, MessageRef, Node, NodeIx, NodeKind, Process, RetryPolicy,
    ServiceTask, StartTrigger, TaskImpl,
};
use crate::time::{IsoDuration, TimerSpec};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use std::collections::BTreeMap;

// ------------------------------------------------------------------ builder

struct B {
    p: Process,
}

impl B {
    fn new() -> B {
        B {
            p: Process {
                id: "p".into(),
                name: None,
                executable: true,
                dialect: Dialect::Bpmn,
                pos: Pos::default(),
                nodes: vec![],
                flows: vec![],
                business_key: None,
                by_id: Default::default(),
            },
        }
    }

    fn node_in(&mut self, id: &str, kind: NodeKind, scope: Option<NodeIx>) -> NodeIx {
        let ix = NodeIx(self.p.nodes.len() as u32);
        self.p.nodes.push(Node {
            ix,
            id: id.into(),
            name: None,
            pos: Pos::default(),
            scope,
            kind,
            incoming: vec![],
            outgoing: vec![],
            boundaries: vec![],
            join: None,
            data: None,
        });
        ix
    }

    fn node(&mut self, id: &str, kind: NodeKind) -> NodeIx {
        self.node_in(id, kind, None)
    }

    fn start(&mut self) -> NodeIx {
        self.node("start", NodeKind::Start(StartTrigger::None))
    }

    fn end(&mut self, id: &str) -> NodeIx {
        self.node(id, NodeKind::End(EndKind::None))
    }

    fn task_in(
        &mut self,
        id: &str,
        name: &str,
        retries: Vec<RetryPolicy>,
        scope: Option<NodeIx>,
    ) -> NodeIx {
        self.node_in(
            id,
            NodeKind::ServiceTask(ServiceTask {
                implementation: TaskImpl::Registered(name.into()),
                retries,
                timeout: None,
                idempotent: true,
                io: IoMapping::default(),
            }),
            scope,
        )
    }

    fn task(&mut self, id: &str, retries: Vec<RetryPolicy>) -> NodeIx {
        self.task_in(id, "chaos", retries, None)
    }

    fn flow_if(&mut self, from: NodeIx, to: NodeIx, cond: Option<&str>) -> FlowIx {
        let ix = FlowIx(self.p.flows.len() as u32);
        self.p.flows.push(Flow {
            ix,
            id: format!("f{}", ix.0),
            pos: Pos::default(),
            source: from,
            target: to,
            condition: cond.map(|c| Expr::parse(c).unwrap()),
            kind: FlowKind::Sequence,
        });
        self.p.nodes[from.0 as usize].outgoing.push(ix);
        self.p.nodes[to.0 as usize].incoming.push(ix);
        ix
    }

    fn flow(&mut self, from: NodeIx, to: NodeIx) -> FlowIx {
        self.flow_if(from, to, None)
    }

    fn chain(&mut self, nodes: &[NodeIx]) {
        for w in nodes.windows(2) {
            self.flow(w[0], w[1]);
        }
    }

    fn boundary(
        &mut self,
        id: &str,
        on: NodeIx,
        interrupting: bool,
        trigger: BoundaryTrigger,
    ) -> NodeIx {
        let scope = self.p.nodes[on.0 as usize].scope;
        let b = self.node_in(
            id,
            NodeKind::Boundary(BoundaryEvent {
                attached_to: on,
                interrupting,
                trigger,
            }),
            scope,
        );
        self.p.nodes[on.0 as usize].boundaries.push(b);
        b
    }

    fn build(mut self) -> Process {
        self.p.index();
        self.p
    }
}

fn policy(max: u32, initial_ms: u64, coefficient: f64) -> RetryPolicy {
    RetryPolicy {
        error_equals: None,
        max_attempts: max,
        initial_delay: IsoDuration::from_millis(initial_ms),
        backoff: Backoff::Exponential { coefficient },
        max_delay: None,
        jitter: Jitter::None,
        non_retryable_codes: vec![],
        retry_on: None,
    }
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn secs(s: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(s)
}

fn inputs(now: DateTime<Utc>) -> Inputs {
    Inputs {
        now,
        draw: 0.5,
        attempt_lease: std::time::Duration::from_secs(60),
        journal: true,
    }
}

// ------------------------------------------------------------------ driver

/// Drives one instance, checking the park invariant after every step: the
/// snapshot's parks are exactly those armed and not withdrawn.
struct Run<'p> {
    process: &'p Process,
    snap: Snapshot,
    parks: BTreeMap<u64, Park>,
    effects: Vec<Effect>,
}

impl<'p> Run<'p> {
    fn start(process: &'p Process, vars: serde_json::Value, now: DateTime<Utc>) -> Run<'p> {
        let step = start(
            process,
            NewInstance {
                instance_id: "i1",
                tenant: "t",
                deployment_id: "d1",
                start_node: None,
                variables: vars.as_object().cloned().unwrap_or_default(),
            },
            &inputs(now),
        )
        .unwrap();
        let mut r = Run {
            process,
            snap: step.snapshot.clone(),
            parks: BTreeMap::new(),
            effects: vec![],
        };
        r.absorb(step);
        r
    }

    fn absorb(&mut self, step: Step) {
        for e in &step.effects {
            match e {
                Effect::Arm { seq, park } => {
                    assert!(
                        self.parks.insert(*seq, park.clone()).is_none(),
                        "park {seq} armed twice"
                    );
                }
                Effect::Withdraw { seq } => {
                    assert!(
                        self.parks.remove(seq).is_some(),
                        "park {seq} withdrawn but never armed"
                    );
                }
                _ => {}
            }
        }
        assert_eq!(
            self.parks, step.snapshot.parks,
            "effects and snapshot disagree on parks"
        );
        for (seq, p) in &step.snapshot.parks {
            let tok = step
                .snapshot
                .token(p.token)
                .unwrap_or_else(|| panic!("park {seq} has no token"));
            assert!(
                tok.parks().contains(seq),
                "park {seq} not owned by token {}",
                tok.id
            );
        }
        if step.snapshot.state.is_terminal() {
            assert!(step.snapshot.parks.is_empty() && step.snapshot.tokens.is_empty());
            // Every node of a terminal instance is in a terminal state.
            for (node, st) in &step.snapshot.node_states {
                assert!(
                    !st.is_active(),
                    "node {node} is {st:?} in a terminal instance"
                );
            }
        }
        // Round-trips through its stored form.
        let mut step = step;
        let back = Snapshot::from_json(&step.snapshot.to_json()).unwrap();
        assert_eq!(back, step.snapshot);
        self.snap = step.snapshot;
        self.effects = step.effects;
    }

    fn apply(&mut self, event: Event, now: DateTime<Utc>) {
        let step = apply(self.process, self.snap.clone(), event, &inputs(now)).unwrap();
        self.absorb(step);
    }

    fn attempts(&self) -> Vec<AttemptRequest> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::RunAttempt(a) => Some(a.clone()),
                _ => None,
            })
            .collect()
    }

    fn one_attempt(&self) -> AttemptRequest {
        let a = self.attempts();
        assert_eq!(
            a.len(),
            1,
            "expected one attempt, effects: {:?}",
            self.effects
        );
        a[0].clone()
    }

    fn end_attempt(&mut self, outcome: TaskOutcome, now: DateTime<Utc>) {
        let a = self.one_attempt();
        self.apply(
            Event::AttemptEnded {
                token: a.token,
                attempt: a.attempt,
                outcome,
            },
            now,
        );
    }

    /// The single due park (retry or timer).
    fn due_park(&self, kind: ParkKind) -> (u64, DateTime<Utc>) {
        let v: Vec<_> = self
            .snap
            .parks
            .iter()
            .filter(|(_, p)| p.kind == kind)
            .collect();
        assert_eq!(v.len(), 1, "parks: {:?}", self.snap.parks);
        (*v[0].0, v[0].1.due.unwrap())
    }

    fn fire(&mut self, kind: ParkKind) -> DateTime<Utc> {
        let (seq, due) = self.due_park(kind);
        self.apply(Event::ParkFired { park: seq }, due);
        due
    }
}

fn completed(v: serde_json::Value) -> TaskOutcome {
    TaskOutcome::Completed { output: v }
}

fn failed(code: &str) -> TaskOutcome {
    TaskOutcome::Failed {
        code: code.into(),
        class: ErrorClass::Transient,
        retryable: true,
        message: format!("{code} happened"),
        details: None,
        retry_after_ms: None,
    }
}

fn business(code: &str) -> TaskOutcome {
    TaskOutcome::BusinessError {
        code: code.into(),
        message: "no".into(),
        details: None,
    }
}

fn linear(retries: Vec<RetryPolicy>) -> Process {
    let mut b = B::new();
    let s = b.start();
    let t = b.task("T", retries);
    let e = b.end("end");
    b.chain(&[s, t, e]);
    b.build()
}

// -------------------------------------------------------------------- tests

#[test]
fn a_task_runs_and_its_output_merges_into_the_variables() {
    let p = linear(vec![]);
    let mut r = Run::start(&p, json!({"x": 1}), t0());
    assert_eq!(r.snap.state, InstanceState::Running);
    let a = r.one_attempt();
    assert_eq!(
        (a.task.as_str(), a.attempt, a.input.clone()),
        ("chaos", 1, json!({"x": 1}))
    );
    assert_eq!(a.idempotency_key, format!("i1:T:{}", a.token));
    r.end_attempt(completed(json!({"y": 2})), secs(1));
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(
        serde_json::Value::Object(r.snap.variables.clone()),
        json!({"x": 1, "y": 2})
    );
    assert!(r.effects.iter().any(|e| matches!(
        e,
        Effect::Ended {
            state: InstanceState::Completed
        }
    )));
    assert!(r
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RecordAttempt(a) if a.outcome == "completed")));
}

/// Without the journal (the runtime's default, `sutra.audit.sql` off) a
/// step carries no journal entry and leaves the very snapshot it leaves with
/// it: the entries' sequence numbers advance all the same.
#[test]
fn without_the_journal_the_steps_and_snapshots_are_the_same_but_for_its_entries() {
    let p = linear(vec![policy(2, 1_000, 2.0)]);
    let run = |journal: bool| {
        let on = |now| Inputs {
            journal,
            ..inputs(now)
        };
        let new = NewInstance {
            instance_id: "i1",
            tenant: "t",
            deployment_id: "d1",
            start_node: None,
            variables: json!({"x": 1}).as_object().cloned().unwrap(),
        };
        let mut steps = vec![start(&p, new, &on(t0())).unwrap()];
        for (n, outcome) in [(1, failed("X")), (2, completed(json!({"y": 2})))] {
            let last = steps.last().unwrap();
            let token = last.snapshot.tokens[0].id;
            let mut step = apply(
                &p,
                last.snapshot.clone(),
                Event::AttemptEnded {
                    token,
                    attempt: n,
                    outcome,
                },
                &on(secs(n as i64)),
            )
            .unwrap();
            if n == 1 {
                let park = *step.snapshot.parks.keys().next().unwrap();
                let fired = apply(&p, step.snapshot, Event::ParkFired { park }, &on(secs(2)));
                step = fired.unwrap();
            }
            steps.push(step);
        }
        steps
    };
    let (with, without) = (run(true), run(false));
    let is_journal = |e: &Effect| matches!(e, Effect::Journal(_));
    assert!(with.iter().any(|s| s.effects.iter().any(is_journal)));
    assert!(!without.iter().any(|s| s.effects.iter().any(is_journal)));
    assert_eq!(
        with.last().unwrap().snapshot.state,
        InstanceState::Completed
    );
    for (a, b) in with.iter().zip(&without) {
        assert_eq!(a.snapshot, b.snapshot);
        let kept: Vec<&Effect> = a.effects.iter().filter(|e| !is_journal(e)).collect();
        assert_eq!(kept, b.effects.iter().collect::<Vec<_>>());
    }
}

#[test]
fn retries_wait_one_two_four_seconds_as_durable_parks() {
    let p = linear(vec![policy(4, 1000, 2.0)]);
    let mut r = Run::start(&p, json!({}), t0());
    let mut starts = vec![t0()];
    for _ in 0..3 {
        let now = *starts.last().unwrap();
        r.end_attempt(failed("E"), now);
        assert_eq!(
            r.snap.state,
            InstanceState::Waiting,
            "a backoff is a wait, not a running attempt"
        );
        assert!(r.attempts().is_empty());
        starts.push(r.fire(ParkKind::Retry));
    }
    assert_eq!(starts, vec![secs(0), secs(1), secs(3), secs(7)]);
    assert_eq!(r.one_attempt().attempt, 4);
    r.end_attempt(completed(json!({})), secs(7));
    assert_eq!(r.snap.state, InstanceState::Completed);
}

#[test]
fn max_delay_caps_the_backoff() {
    let mut pol = policy(5, 1000, 10.0);
    pol.max_delay = Some(IsoDuration::from_millis(5000));
    let p = linear(vec![pol]);
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(failed("E"), t0());
    assert_eq!(r.due_park(ParkKind::Retry).1, secs(1));
    let at = r.fire(ParkKind::Retry);
    r.end_attempt(failed("E"), at);
    assert_eq!(
        r.due_park(ParkKind::Retry).1,
        at + chrono::Duration::seconds(5),
        "10 s capped to 5 s"
    );
}

#[test]
fn a_requested_retry_after_replaces_the_backoff_within_the_max_delay() {
    let after = |ms: u64| match failed("E") {
        TaskOutcome::Failed {
            code,
            class,
            retryable,
            message,
            details,
            ..
        } => TaskOutcome::Failed {
            code,
            class,
            retryable,
            message,
            details,
            retry_after_ms: Some(ms),
        },
        o => o,
    };
    let mut pol = policy(5, 1000, 2.0);
    pol.max_delay = Some(IsoDuration::from_millis(5000));
    let p = linear(vec![pol]);
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(after(3000), t0());
    assert_eq!(r.due_park(ParkKind::Retry).1, secs(3), "3 s asked, not 1 s");
    let at = r.fire(ParkKind::Retry);
    r.end_attempt(after(60_000), at);
    assert_eq!(
        r.due_park(ParkKind::Retry).1,
        at + chrono::Duration::seconds(5),
        "60 s asked, capped to 5 s"
    );
}

#[test]
fn full_jitter_uses_the_draw() {
    let mut pol = policy(3, 1000, 2.0);
    pol.jitter = Jitter::Full;
    let p = linear(vec![pol]);
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(failed("E"), t0());
    // draw is 0.5 in `inputs`
    assert_eq!(
        r.due_park(ParkKind::Retry).1,
        t0() + chrono::Duration::milliseconds(500)
    );
}

#[test]
fn an_always_failing_task_fails_after_exactly_max_attempts() {
    let p = linear(vec![policy(3, 1000, 2.0)]);
    let mut r = Run::start(&p, json!({}), t0());
    let mut attempts = 0;
    loop {
        attempts += 1;
        r.end_attempt(failed("BOOM"), secs(attempts));
        if r.snap.state.is_terminal() {
            break;
        }
        r.fire(ParkKind::Retry);
    }
    assert_eq!(attempts, 3);
    assert_eq!(r.snap.state, InstanceState::Failed);
    let err = r.snap.error.clone().unwrap();
    assert_eq!(err.code, Code::RetryExhausted.as_str());
    assert_eq!(err.cause.unwrap().code, "BOOM");
    assert_eq!(err.node.as_deref(), Some("T"));
}

#[test]
fn a_non_retryable_code_fails_after_one_attempt() {
    let mut pol = policy(5, 1000, 2.0);
    pol.non_retryable_codes = vec!["SUTRA.TASK.VALIDATION".into()];
    let p = linear(vec![pol]);
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(failed("SUTRA.TASK.VALIDATION"), t0());
    assert_eq!(r.snap.state, InstanceState::Failed);
    assert_eq!(
        r.snap.error.as_ref().unwrap().code,
        "SUTRA.RUNTIME.RETRY.EXHAUSTED"
    );
}

#[test]
fn without_a_policy_a_failure_fails_the_instance_at_once() {
    let p = linear(vec![]);
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(failed("SUTRA.TASK.TRAP"), t0());
    let err = r.snap.error.clone().unwrap();
    assert_eq!(err.code, "SUTRA.RUNTIME.TASK_FAILED");
    assert_eq!(err.cause.unwrap().code, "SUTRA.TASK.TRAP");
}

#[test]
fn retry_on_classes_limit_what_is_retried() {
    let mut pol = policy(5, 1000, 2.0);
    pol.retry_on = Some(vec![ErrorClass::RateLimit]);
    let p = linear(vec![pol]);
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(failed("E"), t0()); // class transient
    assert_eq!(r.snap.state, InstanceState::Failed);
}

fn with_error_boundary(
    codes: Option<Vec<String>>,
    catch_failures: bool,
    retries: Vec<RetryPolicy>,
) -> Process {
    let mut b = B::new();
    let s = b.start();
    let t = b.task("T", retries);
    let e = b.end("end");
    b.chain(&[s, t, e]);
    let bnd = b.boundary(
        "onError",
        t,
        true,
        BoundaryTrigger::Error {
            codes,
            result_path: Some("$.err".into()),
            catch_failures,
        },
    );
    let handled = b.end("handled");
    b.flow(bnd, handled);
    b.build()
}

#[test]
fn a_business_error_goes_to_its_boundary_with_one_attempt() {
    let p = with_error_boundary(
        Some(vec!["REJECTED".into()]),
        false,
        vec![policy(5, 1000, 2.0)],
    );
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(business("REJECTED"), t0());
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert!(r.snap.completed.contains(&"handled".to_string()));
    assert_eq!(r.snap.variables["err"]["Error"], json!("REJECTED"));
    let records = r
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::RecordAttempt(_)))
        .count();
    assert_eq!(records, 1);
}

#[test]
fn an_uncaught_business_error_fails_the_instance_with_its_own_code() {
    let p = with_error_boundary(Some(vec!["OTHER".into()]), false, vec![]);
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(business("REJECTED"), t0());
    assert_eq!(r.snap.state, InstanceState::Failed);
    assert_eq!(r.snap.error.as_ref().unwrap().code, "REJECTED");
}

#[test]
fn a_bpmn_error_boundary_does_not_catch_an_exhausted_retry_but_a_catch_all_failures_one_does() {
    let p = with_error_boundary(None, false, vec![policy(1, 1000, 2.0)]);
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(failed("E"), t0());
    assert_eq!(r.snap.state, InstanceState::Failed);

    let p = with_error_boundary(Some(vec!["E".into()]), true, vec![policy(1, 1000, 2.0)]);
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(failed("E"), t0());
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(r.snap.variables["err"]["Error"], json!("E"));
}

#[test]
fn exclusive_gateway_takes_the_first_true_condition_else_default_else_fails() {
    let build = |with_default: bool| {
        let mut b = B::new();
        let s = b.start();
        let g = b.node("g", NodeKind::ExclusiveGateway { default: None });
        let big = b.end("big");
        let small = b.end("small");
        b.flow(s, g);
        b.flow_if(g, big, Some("amount > 100"));
        b.flow_if(g, small, Some("amount > 10"));
        if with_default {
            let other = b.end("other");
            let d = b.flow(g, other);
            b.p.nodes[g.0 as usize].kind = NodeKind::ExclusiveGateway { default: Some(d) };
        }
        b.build()
    };
    let p = build(true);
    for (amount, end) in [(500, "big"), (50, "small"), (1, "other")] {
        let r = Run::start(&p, json!({ "amount": amount }), t0());
        assert_eq!(r.snap.state, InstanceState::Completed);
        assert!(
            r.snap.completed.contains(&end.to_string()),
            "{amount} → {:?}",
            r.snap.completed
        );
    }
    let p = build(false);
    let r = Run::start(&p, json!({ "amount": 1 }), t0());
    assert_eq!(
        r.snap.error.as_ref().unwrap().code,
        Code::NoFlowTaken.as_str()
    );
    let r = Run::start(&p, json!({}), t0());
    assert_eq!(
        r.snap.error.as_ref().unwrap().code,
        Code::ConditionFailed.as_str()
    );
}

#[test]
fn parallel_fork_and_join_wait_for_every_branch() {
    let mut b = B::new();
    let s = b.start();
    let fork = b.node("fork", NodeKind::ParallelGateway);
    let a = b.task("A", vec![]);
    let c = b.task("C", vec![]);
    let join = b.node("join", NodeKind::ParallelGateway);
    let e = b.end("end");
    b.flow(s, fork);
    b.flow(fork, a);
    b.flow(fork, c);
    b.flow(a, join);
    b.flow(c, join);
    b.flow(join, e);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    let atts = r.attempts();
    assert_eq!(atts.len(), 2);
    r.apply(
        Event::AttemptEnded {
            token: atts[0].token,
            attempt: 1,
            outcome: completed(json!({"a": 1})),
        },
        secs(1),
    );
    assert_eq!(r.snap.state, InstanceState::Running);
    assert!(r.snap.tokens.iter().any(|t| t.node == "join"));
    r.apply(
        Event::AttemptEnded {
            token: atts[1].token,
            attempt: 1,
            outcome: completed(json!({"c": 1})),
        },
        secs(2),
    );
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(
        r.snap.completed.iter().filter(|n| *n == "end").count(),
        1,
        "the join fires once"
    );
}

fn timer_catch(spec: TimerSpec) -> Process {
    let mut b = B::new();
    let s = b.start();
    let w = b.node("wait", NodeKind::Catch(CatchTrigger::Timer(spec)));
    let e = b.end("end");
    b.chain(&[s, w, e]);
    b.build()
}

#[test]
fn a_pt24h_timer_parks_then_completes_when_fired() {
    let p = timer_catch(TimerSpec::Duration(IsoDuration::from_millis(
        24 * 3600 * 1000,
    )));
    let mut r = Run::start(&p, json!({}), t0());
    assert_eq!(r.snap.state, InstanceState::Waiting);
    assert_eq!(r.due_park(ParkKind::Timer).1, secs(24 * 3600));
    r.fire(ParkKind::Timer);
    assert_eq!(r.snap.state, InstanceState::Completed);
}

#[test]
fn a_date_timer_is_due_at_its_instant() {
    let at = chrono::DateTime::parse_from_rfc3339("2026-01-02T00:00:00+02:00").unwrap();
    let p = timer_catch(TimerSpec::Date(at));
    let r = Run::start(&p, json!({}), t0());
    assert_eq!(r.due_park(ParkKind::Timer).1, at.with_timezone(&Utc));
}

#[test]
fn an_interrupting_timer_boundary_cancels_the_task_and_discards_its_late_result() {
    let mut b = B::new();
    let s = b.start();
    let t = b.task("T", vec![]);
    let e = b.end("end");
    b.chain(&[s, t, e]);
    let bnd = b.boundary(
        "late",
        t,
        true,
        BoundaryTrigger::Timer(TimerSpec::Duration(IsoDuration::from_millis(5000))),
    );
    let timed_out = b.end("timedOut");
    b.flow(bnd, timed_out);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    let a = r.one_attempt();
    r.fire(ParkKind::Timer);
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert!(r.snap.completed.contains(&"timedOut".to_string()));
    let step = apply(
        &p,
        r.snap.clone(),
        Event::AttemptEnded {
            token: a.token,
            attempt: 1,
            outcome: completed(json!({})),
        },
        &inputs(secs(6)),
    )
    .unwrap();
    assert_eq!(step.snapshot.state, InstanceState::Completed);
    assert!(!step
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RecordAttempt(_))));
}

#[test]
fn a_non_interrupting_timer_boundary_forks_and_the_task_goes_on() {
    let mut b = B::new();
    let s = b.start();
    let t = b.task("T", vec![]);
    let e = b.end("end");
    b.chain(&[s, t, e]);
    let bnd = b.boundary(
        "remind",
        t,
        false,
        BoundaryTrigger::Timer(TimerSpec::Duration(IsoDuration::from_millis(5000))),
    );
    let n = b.task_in("Notify", "notify", vec![], None);
    let ne = b.end("notified");
    b.chain(&[bnd, n, ne]);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    let main = r.one_attempt();
    r.fire(ParkKind::Timer);
    let notify = r.one_attempt();
    assert_eq!(notify.task, "notify");
    r.apply(
        Event::AttemptEnded {
            token: notify.token,
            attempt: 1,
            outcome: completed(json!({})),
        },
        secs(6),
    );
    assert_eq!(
        r.snap.state,
        InstanceState::Running,
        "the main task still runs"
    );
    r.apply(
        Event::AttemptEnded {
            token: main.token,
            attempt: 1,
            outcome: completed(json!({})),
        },
        secs(7),
    );
    assert_eq!(r.snap.state, InstanceState::Completed);
}

#[test]
fn a_message_catch_waits_for_its_correlation_key_and_merges_the_message() {
    let mut b = B::new();
    let s = b.start();
    let w = b.node(
        "paid",
        NodeKind::Catch(CatchTrigger::Message(MessageRef {
            name: "payment".into(),
            correlation_key: Some(Expr::parse("orderId").unwrap()),
            event: false,
        })),
    );
    let e = b.end("end");
    b.chain(&[s, w, e]);
    let p = b.build();
    let mut r = Run::start(&p, json!({"orderId": "o-7"}), t0());
    assert_eq!(r.snap.state, InstanceState::Waiting);
    let (seq, park) = r
        .snap
        .parks
        .iter()
        .next()
        .map(|(s, p)| (*s, p.clone()))
        .unwrap();
    assert_eq!(
        park.message,
        Some(MessageKey {
            name: "payment".into(),
            key: Some("o-7".into()),
            event: false,
        })
    );
    assert_eq!(park.due, None);
    r.apply(
        Event::MessageArrived {
            park: seq,
            variables: json!({"amount": 3}).as_object().cloned().unwrap(),
        },
        secs(9),
    );
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(r.snap.variables["amount"], json!(3));
}

#[test]
fn an_error_end_in_a_sub_process_is_caught_by_the_sub_process_boundary() {
    let mut b = B::new();
    let s = b.start();
    let sub = b.node("sub", NodeKind::SubProcess);
    let e = b.end("end");
    b.chain(&[s, sub, e]);
    let ss = b.node_in("subStart", NodeKind::Start(StartTrigger::None), Some(sub));
    let st = b.task_in("Inner", "chaos", vec![], Some(sub));
    let se = b.node_in(
        "subErr",
        NodeKind::End(EndKind::Error {
            code: "OUT_OF_STOCK".into(),
            message: None,
        }),
        Some(sub),
    );
    b.chain(&[ss, st, se]);
    let bnd = b.boundary(
        "caught",
        sub,
        true,
        BoundaryTrigger::Error {
            codes: Some(vec!["OUT_OF_STOCK".into()]),
            result_path: None,
            catch_failures: false,
        },
    );
    let ce = b.end("compensated");
    b.flow(bnd, ce);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    r.end_attempt(completed(json!({})), secs(1));
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert!(r.snap.completed.contains(&"compensated".to_string()));
    assert!(!r.snap.completed.contains(&"end".to_string()));
}

#[test]
fn a_sub_process_completes_when_its_last_token_ends() {
    let mut b = B::new();
    let s = b.start();
    let sub = b.node("sub", NodeKind::SubProcess);
    let e = b.end("end");
    b.chain(&[s, sub, e]);
    let ss = b.node_in("subStart", NodeKind::Start(StartTrigger::None), Some(sub));
    let st = b.task_in("Inner", "chaos", vec![], Some(sub));
    let se = b.node_in("subEnd", NodeKind::End(EndKind::None), Some(sub));
    b.chain(&[ss, st, se]);
    let p = b.build();
    let mut r = Run::start(&p, json!({}), t0());
    assert_eq!(
        r.snap.tokens.len(),
        2,
        "the sub-process token and the inner one"
    );
    r.end_attempt(completed(json!({})), secs(1));
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert_eq!(r.snap.completed, vec!["Inner", "subEnd", "sub", "end"]);
}

#[test]
fn cancel_terminates_and_withdraws_every_park() {
    let p = timer_catch(TimerSpec::Duration(IsoDuration::from_millis(1000)));
    let mut r = Run::start(&p, json!({}), t0());
    r.apply(
        Event::Cancel {
            reason: Some("user".into()),
        },
        secs(0),
    );
    assert_eq!(r.snap.state, InstanceState::Terminated);
    assert!(r.parks.is_empty());
    let again = apply(
        &p,
        r.snap.clone(),
        Event::Cancel { reason: None },
        &inputs(secs(1)),
    );
    assert_eq!(again.unwrap_err().code, Code::InstanceState);
}

#[test]
fn a_lost_attempt_is_rerun_with_the_same_number_when_its_lease_falls_due() {
    let p = linear(vec![]);
    let mut r = Run::start(&p, json!({}), t0());
    let first = r.one_attempt();
    let at = r.fire(ParkKind::Attempt);
    assert_eq!(at, secs(60));
    let again = r.one_attempt();
    assert_eq!((again.token, again.attempt), (first.token, first.attempt));
    assert_eq!(again.idempotency_key, first.idempotency_key);
}

#[test]
fn a_loop_without_wait_state_is_stopped() {
    let mut b = B::new();
    let s = b.start();
    let g = b.node("g", NodeKind::ExclusiveGateway { default: None });
    b.flow(s, g);
    b.flow_if(g, g, Some("true"));
    let p = b.build();
    let r = Run::start(&p, json!({}), t0());
    assert_eq!(
        r.snap.error.as_ref().unwrap().code,
        Code::StepLimit.as_str()
    );
}

#[test]
fn terminate_end_completes_the_instance_and_withdraws_the_other_branch() {
    let mut b = B::new();
    let s = b.start();
    let fork = b.node("fork", NodeKind::ParallelGateway);
    let w = b.node(
        "wait",
        NodeKind::Catch(CatchTrigger::Timer(TimerSpec::Duration(
            IsoDuration::from_millis(1000),
        ))),
    );
    let e = b.end("end");
    let term = b.node("stop", NodeKind::End(EndKind::Terminate));
    b.flow(s, fork);
    b.flow(fork, w);
    b.flow(w, e);
    b.flow(fork, term);
    let p = b.build();
    let r = Run::start(&p, json!({}), t0());
    assert_eq!(r.snap.state, InstanceState::Completed);
    assert!(r.parks.is_empty());
}

#[test]
fn snapshot_format_is_checked() {
    let p = linear(vec![]);
    let mut r = Run::start(&p, json!({}), t0());
    let mut v: serde_json::Value = serde_json::from_str(&r.snap.to_json()).unwrap();
    v["format"] = json!(99);
    assert!(Snapshot::from_json(&v.to_string())
        .unwrap_err()
        .contains("99"));
}

/// A snapshot written by format 1 (a task waiting out its first backoff) must
/// stay readable and resumable by every later build.
#[test]
fn a_stored_v1_snapshot_still_loads_and_resumes() {
    let text = include_str!("../../tests/fixtures/snapshots/v1-retry-backoff.json");
    let snap = Snapshot::from_json(text).expect("format 1 loads");
    assert_eq!(snap.state, InstanceState::Waiting);
    let p = linear(vec![policy(3, 1000, 2.0)]);
    let step = apply(&p, snap, Event::ParkFired { park: 2 }, &inputs(secs(1))).unwrap();
    let run = step.effects.iter().find_map(|e| match e {
        Effect::RunAttempt(a) => Some(a.clone()),
        _ => None,
    });
    let run = run.expect("the retry runs");
    assert_eq!((run.node.as_str(), run.attempt, run.token), ("T", 2, 2));
    assert_eq!(run.idempotency_key, "0194f1a2b3c4d5e6f708192a:T:2");
}

mod boundaries_and_joins;
mod events;
mod flow;
