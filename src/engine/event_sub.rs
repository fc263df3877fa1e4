//! Event sub-processes (`model::NodeKind::EventSubProcess`): started by
//! their start event's trigger while their enclosing scope (the instance,
//! or a sub-process token) runs.
//!
//! - **Subscriptions.** When a scope starts, every event sub-process in it
//!   whose start is a timer, a message, a signal or a condition gets a
//!   *listener*: a token at that start event, in the scope, waiting on an
//!   ordinary timer, message, signal or condition park (a durable row; a
//!   signal's fan-out reaches it like any signal wait). Listeners do not keep a scope alive: when the last
//!   other token of the scope is gone, its listeners are withdrawn and the
//!   scope completes. Error and escalation starts need no row: raising one
//!   walks the scopes (`Machine::raise_from`, `engine::escalation`) and asks
//!   [`Machine::event_sub_for`] at each.
//! - **Interrupting** (the start's `isInterrupting`, BPMN's default): every
//!   other token of the scope — its listeners included — is interrupted in
//!   the same step (`Machine::interrupt`: nodes CANCELLED, attempts in flight
//!   recorded `interrupted`), then the event sub-process runs; when it ends
//!   the scope completes.
//! - **Non-interrupting**: it runs beside the scope's tokens, once per
//!   trigger; a message listener waits for the next message, a cycle timer
//!   arms its next slot, a one-off timer is spent.
//!
//! An event sub-process runs as a sub-process token (`InSubProcess`) at its
//! node, in the scope, with its own listeners for nested event
//! sub-processes; it has no outgoing flow, so when it completes its token
//! ends there. Nothing here knows a dialect.

use super::machine::Machine;
use super::snapshot::{CycleState, NodeState};
use super::{Park, TokenStatus};
use crate::model::{MessageRef, Node, NodeIx, NodeKind, StartTrigger};
use crate::time::TimerSpec;
use serde_json::json;

/// What a raised event is, for matching an event sub-process's start.
pub(super) enum Raised<'c> {
    Error(&'c str),
    Escalation(&'c str),
}

impl<'a> Machine<'a> {
    /// Arm the listeners of the event sub-processes directly in scope
    /// `scope_node`, owned by the scope token `scope` (`None`: the instance).
    pub(super) fn arm_event_subs(&mut self, scope: Option<u64>, scope_node: Option<NodeIx>) {
        let starts: Vec<&'a Node> = self
            .process
            .event_subs_in(scope_node)
            .flat_map(|e| self.process.starts_in(Some(e.ix)))
            .collect();
        for start in starts {
            if matches!(
                start.kind,
                NodeKind::Start(
                    StartTrigger::Timer(_)
                        | StartTrigger::Message { .. }
                        | StartTrigger::Signal { .. }
                        | StartTrigger::Condition(_)
                )
            ) {
                self.listen(start, scope);
            }
        }
    }

    /// A listener token at `start` in `scope`, waiting on its park.
    fn listen(&mut self, start: &'a Node, scope: Option<u64>) {
        let token = self.spawn(start.ix, scope, None);
        self.queue.retain(|&q| q != token);
        let park = match &start.kind {
            NodeKind::Start(StartTrigger::Timer(spec)) => self.timer_park(token, start, spec),
            NodeKind::Start(StartTrigger::Message { name }) => {
                let m = MessageRef {
                    name: name.clone(),
                    correlation_key: None,
                    event: false,
                };
                self.message_park(token, start, &m)
            }
            NodeKind::Start(StartTrigger::Signal { name }) => self.signal_park(token, start, name),
            NodeKind::Start(StartTrigger::Condition(_)) => Some(self.arm_condition(token, start)),
            _ => None,
        };
        match (park, self.snap.token_mut(token)) {
            (Some(park), Some(t)) => t.status = TokenStatus::Waiting { park },
            _ => self.discard(token),
        }
    }

    /// Whether `t` is a listener (a token waiting at a start event).
    pub(super) fn is_listener(&self, t: &super::Token) -> bool {
        matches!(t.status, TokenStatus::Waiting { .. })
            && self
                .process
                .find(&t.node)
                .is_some_and(|n| matches!(n.kind, NodeKind::Start(_)))
    }

    /// Withdraw the listeners of a scope that ends.
    pub(super) fn withdraw_listeners(&mut self, scope: Option<u64>) {
        let listeners: Vec<u64> = self
            .snap
            .tokens
            .iter()
            .filter(|t| t.scope == scope && self.is_listener(t))
            .map(|t| t.id)
            .collect();
        for l in listeners {
            self.discard(l);
        }
    }

    /// The listener `token`'s park `fired` (withdrawn already) at `start`.
    pub(super) fn event_sub_fired(&mut self, token: u64, fired: &Park, start: &'a Node) {
        let Some(esub) = start.scope.map(|s| self.process.node(s)) else {
            return;
        };
        let NodeKind::EventSubProcess { interrupting } = esub.kind else {
            return;
        };
        let Some(scope) = self.snap.token(token).map(|t| t.scope) else {
            return;
        };
        if interrupting {
            self.interrupt_scope(scope);
        } else if !self.relisten(token, fired, start) {
            self.discard(token);
        }
        self.start_event_sub(esub, start, scope);
    }

    /// A non-interrupting listener waits again: for the next message, or
    /// the next slot of its cycle. False when its timer is spent.
    fn relisten(&mut self, token: u64, fired: &Park, start: &Node) -> bool {
        let park = match (&start.kind, &fired.cycle) {
            (
                NodeKind::Start(
                    StartTrigger::Message { .. }
                    | StartTrigger::Signal { .. }
                    | StartTrigger::Condition(_),
                ),
                _,
            ) => Some(Park {
                due: None,
                ..fired.clone()
            }),
            (NodeKind::Start(StartTrigger::Timer(TimerSpec::Cycle(c))), Some(state)) => {
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
        let Some(p) = park else {
            return false;
        };
        let seq = self.arm(p);
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Waiting { park: seq };
        }
        true
    }

    /// Interrupt every token of a scope (an interrupting event sub-process starts).
    pub(super) fn interrupt_scope(&mut self, scope: Option<u64>) {
        let tokens: Vec<u64> = self
            .snap
            .tokens
            .iter()
            .filter(|t| t.scope == scope)
            .map(|t| t.id)
            .collect();
        for t in tokens {
            if self.snap.token(t).is_some() {
                self.interrupt(t, NodeState::Cancelled);
            }
        }
        self.snap.joins.retain(|j| j.scope != scope);
    }

    /// Run event sub-process `esub` from `start` in `scope`.
    pub(super) fn start_event_sub(&mut self, esub: &'a Node, start: &'a Node, scope: Option<u64>) {
        let interrupting = matches!(esub.kind, NodeKind::EventSubProcess { interrupting: true });
        let token = self.spawn(esub.ix, scope, None);
        self.queue.retain(|&q| q != token);
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::InSubProcess;
        }
        self.set_state(&esub.id, NodeState::Running);
        journal!(
            self,
            "event_subprocess_started",
            Some(&esub.id),
            json!({ "start": start.id, "interrupting": interrupting, "token": token }),
        );
        self.arm_event_subs(Some(token), Some(esub.ix));
        self.spawn(start.ix, Some(token), None);
    }

    /// The event sub-process of the scope token `scope` (`None`: the
    /// process level) whose start catches `raised`: one naming its code
    /// first, else a catch-all. Returns it and its start event.
    pub(super) fn event_sub_for(
        &self,
        scope: Option<u64>,
        raised: &Raised<'_>,
    ) -> Option<(&'a Node, &'a Node)> {
        let scope_node = match scope {
            Some(t) => Some(self.node_of(t)?.ix),
            None => None,
        };
        let mut fallback = None;
        for esub in self.process.event_subs_in(scope_node) {
            for start in self.process.starts_in(Some(esub.ix)) {
                let (codes, code) = match (&start.kind, raised) {
                    (NodeKind::Start(StartTrigger::Error { codes }), Raised::Error(c))
                    | (
                        NodeKind::Start(StartTrigger::Escalation { codes }),
                        Raised::Escalation(c),
                    ) => (codes, *c),
                    _ => continue,
                };
                match codes {
                    Some(list) if list.iter().any(|x| x == code) => return Some((esub, start)),
                    None if fallback.is_none() => fallback = Some((esub, start)),
                    _ => {}
                }
            }
        }
        fallback
    }

    /// An error raised inside scope `scope` (not a spent retry budget):
    /// caught by an error event sub-process of that scope, which
    /// interrupts it. Returns whether one caught it.
    pub(super) fn event_sub_catches_error(
        &mut self,
        scope: Option<u64>,
        code: &str,
        origin: &str,
    ) -> bool {
        let Some((esub, start)) = self.event_sub_for(scope, &Raised::Error(code)) else {
            return false;
        };
        journal!(
            self,
            "error_caught",
            Some(&esub.id),
            json!({ "code": code, "from": origin, "by": start.id }),
        );
        self.interrupt_scope(scope);
        self.start_event_sub(esub, start, scope);
        true
    }
}
