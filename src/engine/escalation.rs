//! Escalation (`model::NodeKind::Escalate`, `EndKind::Escalation`,
//! `BoundaryTrigger::Escalation`, `StartTrigger::Escalation`).
//!
//! A thrown escalation travels up the thrower's scopes, as an error does:
//! at each scope, an escalation event sub-process of that scope first, then
//! an escalation boundary of the scope's activity; a catcher naming the
//! code wins over a catch-all at the same place. At process level only the
//! event sub-processes remain. An interrupting catcher ends the scope it
//! is on (the thrower with it); a non-interrupting one forks beside it and
//! the thrower goes on — along its flows for an intermediate throw, ending
//! its token for an end event. An escalation nobody catches is no failure:
//! it is journaled (`escalation_uncaught`), remembered in
//! `Snapshot::escalations` (a child hands them to its call activity when it
//! ends, `engine::child`) and the thrower goes on.

use super::event_sub::Raised;
use super::machine::Machine;
use super::snapshot::NodeState;
use crate::model::{BoundaryEvent, BoundaryTrigger, Node, NodeKind};
use serde_json::json;

impl<'a> Machine<'a> {
    /// The token at escalation throw `node` throws `code`.
    pub(super) fn escalate(&mut self, token: u64, node: &'a Node, code: &str) {
        journal!(
            self,
            "escalation_thrown",
            Some(&node.id),
            json!({ "code": code })
        );
        let scope = self.snap.token(token).and_then(|t| t.scope);
        self.route_escalation(scope, code, &node.id);
        if self.snap.state.is_terminal() || self.snap.token(token).is_none() {
            return; // an interrupting catcher ended the thrower's scope
        }
        match node.kind {
            NodeKind::End(_) => self.consume(token),
            _ => {
                self.snap.completed.push(node.id.clone());
                self.leave(token);
            }
        }
    }

    /// Deliver escalation `code` from inside scope token `current` (`None`:
    /// the process level) to its innermost catcher. Returns whether one
    /// caught it.
    pub(super) fn route_escalation(
        &mut self,
        mut current: Option<u64>,
        code: &str,
        origin: &str,
    ) -> bool {
        let mut from_event_sub = false;
        loop {
            if !from_event_sub {
                if let Some((esub, start)) = self.event_sub_for(current, &Raised::Escalation(code))
                {
                    journal!(
                        self,
                        "escalation_caught",
                        Some(&esub.id),
                        json!({ "code": code, "from": origin, "by": start.id }),
                    );
                    if matches!(esub.kind, NodeKind::EventSubProcess { interrupting: true }) {
                        self.interrupt_scope(current);
                    }
                    self.start_event_sub(esub, start, current);
                    return true;
                }
            }
            let Some(tok) = current else { break };
            let Some(activity) = self.node_of(tok) else {
                break;
            };
            if self.escalation_boundary(tok, activity, code, origin) {
                return true;
            }
            from_event_sub = matches!(activity.kind, NodeKind::EventSubProcess { .. });
            current = self.snap.token(tok).and_then(|t| t.scope);
        }
        journal!(
            self,
            "escalation_uncaught",
            Some(origin),
            json!({ "code": code })
        );
        if !self.snap.escalations.iter().any(|c| c == code) {
            self.snap.escalations.push(code.to_string());
        }
        false
    }

    /// An escalation boundary of `activity` (at `tok`) catching `code`.
    pub(super) fn escalation_boundary(
        &mut self,
        tok: u64,
        activity: &'a Node,
        code: &str,
        origin: &str,
    ) -> bool {
        let mut fallback = None;
        let mut chosen = None;
        for &b in &activity.boundaries {
            let NodeKind::Boundary(BoundaryEvent {
                trigger: BoundaryTrigger::Escalation { codes },
                interrupting,
                ..
            }) = &self.process.node(b).kind
            else {
                continue;
            };
            match codes {
                Some(list) if list.iter().any(|c| c == code) => {
                    chosen = Some((b, *interrupting));
                    break;
                }
                None if fallback.is_none() => fallback = Some((b, *interrupting)),
                _ => {}
            }
        }
        let Some((b, interrupting)) = chosen.or(fallback) else {
            return false;
        };
        let bnode = self.process.node(b);
        let scope = self.snap.token(tok).and_then(|t| t.scope);
        journal!(
            self,
            "escalation_caught",
            Some(&bnode.id),
            json!({ "code": code, "from": origin, "interrupting": interrupting }),
        );
        if interrupting {
            self.interrupt(tok, NodeState::Cancelled);
        }
        self.spawn(b, scope, None);
        true
    }
}
