//! Parks of the token walk: timers (fixed and cycles), message waits,
//! boundary events armed on an activity, and what a fired park does (a lost
//! attempt re-runs, a backoff ends, a catch or boundary event moves on, a
//! channel call or a process call times out).

use super::machine::Machine;
use super::snapshot::{CycleState, NodeState, TaskPhase, TaskState};
use super::{AttemptRecord, Effect, MessageKey, Park, ParkKind, TokenStatus};
use crate::codes::Code;
use crate::model::{BoundaryTrigger, MessageRef, Node, NodeKind};
use crate::time::TimerSpec;
use serde_json::{json, Map, Value};

impl<'a> Machine<'a> {
    pub(super) fn timer_park(&mut self, token: u64, node: &Node, spec: &TimerSpec) -> Option<u64> {
        let now = self.inputs.now;
        let due = spec.first_due(now);
        let Some(due) = due else {
            self.fail_code(
                Code::TimerUnsupported,
                format!("timer on `{}` has no slot left", node.id),
                Some(&node.id),
            );
            return None;
        };
        let cycle = matches!(spec, TimerSpec::Cycle(_)).then(|| CycleState {
            armed_at: now,
            slot: 0,
        });
        journal!(self, "timer_armed", Some(&node.id), json!({ "due": due }));
        Some(self.arm(Park {
            kind: ParkKind::Timer,
            token,
            node: node.id.clone(),
            due: Some(due),
            message: None,
            cycle,
        }))
    }

    pub(super) fn message_park(&mut self, token: u64, node: &Node, m: &MessageRef) -> Option<u64> {
        let evaluated = m
            .correlation_key
            .as_ref()
            .map(|expr| expr.eval(&self.vars_of(token)));
        let key = match evaluated {
            None => None,
            Some(r) => match r {
                Ok(Value::String(s)) => Some(s),
                Ok(Value::Null) => None,
                Ok(other) => Some(other.to_string()),
                Err(e) => {
                    self.fail_code(
                        e.code(),
                        format!("correlation key of `{}` failed: {e}", node.id),
                        Some(&node.id),
                    );
                    return None;
                }
            },
        };
        journal!(
            self,
            "message_awaited",
            Some(&node.id),
            json!({ "name": m.name, "key": key }),
        );
        Some(self.arm(Park {
            kind: ParkKind::Message,
            token,
            node: node.id.clone(),
            due: None,
            message: Some(MessageKey {
                name: m.name.clone(),
                key,
                event: m.event,
            }),
            cycle: None,
        }))
    }

    pub(super) fn arm_boundaries(&mut self, token: u64, activity: &'a Node) {
        for &b in &activity.boundaries {
            let bnode = self.process.node(b);
            let NodeKind::Boundary(ev) = &bnode.kind else {
                continue;
            };
            let park = match &ev.trigger {
                BoundaryTrigger::Error { .. }
                | BoundaryTrigger::Escalation { .. }
                | BoundaryTrigger::Compensation => None,
                BoundaryTrigger::Timer(spec) => self.timer_park(token, bnode, spec),
                BoundaryTrigger::Condition(_) => Some(self.arm_condition(token, bnode)),
                BoundaryTrigger::Message(m) => self.message_park(token, bnode, m),
                BoundaryTrigger::Signal { name } => self.signal_park(token, bnode, name),
            };
            if let (Some(p), Some(t)) = (park, self.snap.token_mut(token)) {
                t.boundary_parks.push(p);
            }
        }
    }

    pub(super) fn park_fired(&mut self, seq: u64, variables: Map<String, Value>) {
        let Some(park) = self.snap.parks.get(&seq).cloned() else {
            journal!(
                self,
                "park_ignored",
                None,
                json!({ "park": seq, "reason": "already withdrawn" }),
            );
            return;
        };
        if park.kind == ParkKind::Message && park.message.is_none() {
            return;
        }
        self.withdraw(seq);
        if let Some(t) = self.snap.token_mut(park.token) {
            t.boundary_parks.retain(|&p| p != seq);
        }
        let Some(node) = self.process.find(&park.node) else {
            return;
        };
        if !self.doc_resumed(park.token, node, &park, variables.clone()) {
            self.vars_home(park.token).extend(variables);
        }
        match park.kind {
            ParkKind::Attempt => {
                // The runner of this attempt was lost: run the same attempt again.
                journal!(
                    self,
                    "attempt_lost",
                    Some(&node.id),
                    json!({ "token": park.token }),
                );
                self.rerun_attempt(park.token);
            }
            ParkKind::Retry => {
                if !self.fanout_retry_due(park.token) {
                    self.retry_due(park.token);
                }
            }
            ParkKind::Channel => self.call_timed_out(park.token, seq),
            ParkKind::Child => self.child_timed_out(park.token, seq),
            // A fan-out goes on starting iterations (fanout.rs).
            ParkKind::Continue => self.fanout_continue(park.token, seq),
            ParkKind::Timer | ParkKind::Message | ParkKind::Condition | ParkKind::Signal => {
                let kind = match park.kind {
                    ParkKind::Timer => "timer_fired",
                    ParkKind::Signal => "signal_received",
                    ParkKind::Condition => "condition_met",
                    _ => "message_received",
                };
                journal!(self, kind, Some(&node.id), json!({ "token": park.token }));
                if self.event_gateway_fired(seq, &park, node) {
                    return;
                }
                match &node.kind {
                    NodeKind::Catch(_) => {
                        // A "Multiple" catch waits on several parks: the others go too.
                        if let Some(TokenStatus::Waiting { park: w }) =
                            self.snap.token(park.token).map(|t| t.status.clone())
                        {
                            self.withdraw(w);
                        }
                        if let Some(t) = self.snap.token_mut(park.token) {
                            t.status = TokenStatus::Ready;
                        }
                        self.snap.completed.push(node.id.clone());
                        self.leave(park.token);
                    }
                    NodeKind::Boundary(ev) => {
                        let Some(scope) = self.snap.token(park.token).map(|t| t.scope) else {
                            return;
                        };
                        if ev.interrupting {
                            self.interrupt(park.token, NodeState::Cancelled);
                        } else {
                            self.rearm_boundary(&park, node);
                        }
                        self.spawn(node.ix, scope, None);
                    }
                    // An event sub-process's listener (event_sub.rs).
                    NodeKind::Start(_) => self.event_sub_fired(park.token, &park, node),
                    _ => {}
                }
            }
        }
    }

    /// A non-interrupting boundary keeps watching: a message boundary waits
    /// for the next message, a cycle timer arms its next slot in budget.
    pub(super) fn rearm_boundary(&mut self, fired: &Park, node: &Node) {
        let NodeKind::Boundary(ev) = &node.kind else {
            return;
        };
        let park = match (&ev.trigger, &fired.cycle) {
            (
                BoundaryTrigger::Message(_)
                | BoundaryTrigger::Condition(_)
                | BoundaryTrigger::Signal { .. },
                _,
            ) => Some(Park {
                due: None,
                ..fired.clone()
            }),
            (BoundaryTrigger::Timer(TimerSpec::Cycle(c)), Some(state)) => {
                let cu = c.catch_up(state.armed_at, Some(state.slot), self.inputs.now);
                cu.next.map(|(slot, due)| Park {
                    due: Some(due),
                    cycle: Some(CycleState {
                        armed_at: state.armed_at,
                        slot,
                    }),
                    ..fired.clone()
                })
            }
            _ => None,
        };
        if let Some(p) = park {
            let token = p.token;
            let seq = self.arm(p);
            if let Some(t) = self.snap.token_mut(token) {
                t.boundary_parks.push(seq);
            }
        }
    }

    /// An interrupting boundary ends the activity at `token`: every node
    /// still READY or RUNNING inside it ends CANCELLED, the activity itself
    /// `host` (CANCELLED for a timer or message, FAILED for an error that
    /// came out of it), each attempt in flight inside gets its attempt row
    /// (`SUTRA.TASK.INTERRUPTED`; its late result is discarded), then the
    /// token goes with everything it owns (`discard`).
    pub(super) fn interrupt(&mut self, token: u64, host: NodeState) {
        let mut inside = vec![token];
        let mut i = 0;
        while i < inside.len() {
            let parent = inside[i];
            inside.extend(
                self.snap
                    .tokens
                    .iter()
                    .filter(|t| t.scope == Some(parent))
                    .map(|t| t.id),
            );
            i += 1;
        }
        for &t in &inside {
            let Some(tok) = self.snap.token(t).cloned() else {
                continue;
            };
            let state = if t == token {
                host
            } else {
                NodeState::Cancelled
            };
            if self.state_of(&tok.node).is_some_and(NodeState::is_active) {
                self.set_state(&tok.node, state);
            }
            if let TokenStatus::Task(TaskState {
                attempt,
                phase: TaskPhase::Running { .. },
                since,
                ..
            }) = &tok.status
            {
                let message =
                    format!(
                    "attempt {attempt} was interrupted: an interrupting boundary event ended `{}`",
                    self.node_of(token).map(|n| n.id.as_str()).unwrap_or_default()
                );
                self.effects.push(Effect::RecordAttempt(AttemptRecord {
                    token: t,
                    node: tok.node.clone(),
                    attempt: *attempt,
                    started_at: *since,
                    ended_at: self.inputs.now,
                    outcome: "interrupted".to_string(),
                    code: Some(Code::TaskInterrupted.as_str().to_string()),
                    class: Some(Code::TaskInterrupted.class()),
                    message: Some(message),
                    item: self.attempt_item(t),
                }));
            }
        }
        self.discard(token);
    }
}
