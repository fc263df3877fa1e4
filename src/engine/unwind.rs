//! Compensation: unwinding an instance whose failure nobody handled.
//!
//! When a failure is uncaught (no error flow, no boundary), [`Machine::fail`]
//! asks [`Machine::begin_unwind`] first. If some SUCCEEDED node has a
//! compensation flow, the unwind begins: every live token is removed (its node
//! CANCELLED; an attempt in flight is abandoned, see `Effect::AttemptAbandoned`)
//! and the compensators run ONE AT A TIME, newest completion first, each an
//! ordinary task run with its own retry policy and timeout. A compensator's
//! input is the instance variables plus `compensating: {node, output}` (the
//! compensated node's id and recorded output). A compensator that succeeds
//! makes its node COMPENSATED; one that fails is recorded
//! (`compensation_failed` in the journal, `SUTRA.RUNTIME.COMPENSATION.FAILED`
//! on its last attempt and in the instance error's `compensation_failures`)
//! and the unwind goes on. At the end the instance is COMPENSATED if every
//! compensator succeeded, else FAILED; its error stays the original failure.
//!
//! **Compensate throws** (BPMN's intermediate and end compensate events,
//! [`Machine::compensate_throw`]) use the same machinery: the completed
//! activities of the throw's scope (or the one it names) that have a
//! compensator — and, for a completed sub-process without one, its own
//! completed children, recursively — are compensated one at a time, newest
//! completion first, while the throw's token waits (`Unwind::resume`); then
//! it goes on and the instance runs as before. Nothing else is cancelled.
//! A failed handler is recorded as above and the others still run. An
//! activity with a compensation boundary (`Process::explicit_compensation`)
//! is compensated only by a throw, never by a failure's unwind.
//!
//! Invariants: the unwind lives in the snapshot (`Snapshot::unwind`), so a
//! restart resumes it where the last commit left it; a compensation is popped
//! from `pending` when its compensator starts and recorded in `done` or
//! `failed` when it ends, so a committed COMPENSATED node is never compensated
//! again. Nothing here knows which dialect made the compensation flows.

use super::machine::{Machine, Raised};
use super::snapshot::{Compensation, CompensationFailure, NodeState, Unwind};
use super::{AttemptRecord, Cause, Effect, InstanceState, TokenStatus};
use crate::codes::Code;
use crate::model::{CompensateThrow, Node, NodeIx, NodeKind};
use serde_json::{json, Map, Value};
use std::collections::HashSet;

impl Machine<'_> {
    /// Begin unwinding after an uncaught failure (`snap.error` is set).
    /// Returns false when there is nothing to compensate.
    pub(super) fn begin_unwind(&mut self) -> bool {
        let mut seen = HashSet::new();
        let mut pending = Vec::new();
        for id in self.snap.completed.iter().rev() {
            if !seen.insert(id.as_str()) {
                continue;
            }
            if self.snap.node_states.get(id) != Some(&NodeState::Succeeded) {
                continue;
            }
            let Some(node) = self.process.find(id) else {
                continue;
            };
            if self.process.explicit_compensation(node.ix) {
                continue;
            }
            if let Some(c) = self.process.compensator(node.ix) {
                pending.push(Compensation {
                    node: id.clone(),
                    compensator: self.process.node(c).id.clone(),
                });
            }
        }
        if pending.is_empty() {
            return false;
        }
        // Cancel what is READY or RUNNING (attempts in flight are abandoned).
        self.cancel_active();
        self.snap.joins.clear();
        let tokens: Vec<u64> = self
            .snap
            .tokens
            .iter()
            .filter(|t| t.scope.is_none())
            .map(|t| t.id)
            .collect();
        for t in tokens {
            self.discard(t);
        }
        self.clear_queue();
        let order: Vec<&str> = pending.iter().map(|c| c.node.as_str()).collect();
        let error = self.snap.error.clone();
        journal!(
            self,
            "unwind_started",
            error.as_ref().and_then(|e| e.node.as_deref()),
            json!({ "code": error.as_ref().map(|e| e.code.clone()), "compensate": order }),
        );
        self.snap.unwind = Some(Unwind {
            pending,
            current: None,
            done: Vec::new(),
            failed: Vec::new(),
            resume: Vec::new(),
        });
        self.next_compensation();
        true
    }

    /// Start the next compensator, or end the instance when none is left.
    fn next_compensation(&mut self) {
        let Some(u) = self.snap.unwind.as_mut() else {
            return;
        };
        if u.pending.is_empty() && !u.is_failure() {
            let resume = std::mem::take(&mut u.resume);
            self.snap.unwind = None;
            for t in resume {
                self.throw_compensated(t);
            }
            return;
        }
        if u.pending.is_empty() {
            u.current = None;
            let failed = u.failed.clone();
            let state = if failed.is_empty() {
                InstanceState::Compensated
            } else {
                InstanceState::Failed
            };
            if let Some(e) = self.snap.error.as_mut() {
                e.compensation_failures = failed;
            }
            self.end(state);
            return;
        }
        let c = u.pending.remove(0);
        let Some(node) = self.process.find(&c.compensator) else {
            return;
        };
        journal!(
            self,
            "compensation_started",
            Some(&c.compensator),
            json!({ "compensates": c.node }),
        );
        let token = self.spawn(node.ix, None, None);
        if let Some(u) = self.snap.unwind.as_mut() {
            u.current = Some((c, token));
        }
    }

    /// Whether `token` runs the compensator of the unwind in progress.
    pub(super) fn is_compensating(&self, token: u64) -> bool {
        self.snap
            .unwind
            .as_ref()
            .and_then(|u| u.current.as_ref())
            .is_some_and(|(_, t)| *t == token)
    }

    /// A task's input when it takes all variables: a compensator also gets
    /// `compensating: {node, output}`.
    pub(super) fn compensator_input(&self, token: u64) -> Map<String, Value> {
        let mut input = self.vars_of(token).into_owned();
        let current = self.snap.unwind.as_ref().and_then(|u| u.current.as_ref());
        if let Some((c, _)) = current.filter(|(_, t)| *t == token) {
            let output = self
                .snap
                .outputs
                .get(&c.node)
                .cloned()
                .unwrap_or(Value::Null);
            input.insert(
                "compensating".into(),
                json!({ "node": c.node, "output": output }),
            );
        }
        input
    }

    /// The compensator in progress succeeded: its node is COMPENSATED.
    pub(super) fn compensator_succeeded(&mut self, token: u64) {
        let Some((c, _)) = self.snap.unwind.as_mut().and_then(|u| u.current.take()) else {
            return;
        };
        self.set_state(&c.compensator, NodeState::Succeeded);
        self.set_state(&c.node, NodeState::Compensated);
        journal!(
            self,
            "compensated",
            Some(&c.node),
            json!({ "compensator": c.compensator }),
        );
        if let Some(u) = self.snap.unwind.as_mut() {
            u.done.push(c.node.clone());
        }
        self.discard(token);
        self.next_compensation();
    }

    /// The compensator in progress failed (raised an error or gave up).
    pub(super) fn compensator_failed(&mut self, raised: Raised) {
        let cause = raised.failure.clone().unwrap_or(Cause {
            code: raised.code.clone(),
            message: raised.message.clone(),
        });
        self.unwind_failure(&raised.code, raised.message, Some(cause));
    }

    /// A failure during the unwind: recorded against the compensation in
    /// progress (if none, the instance ends FAILED at once); the unwind goes on.
    pub(super) fn unwind_failure(&mut self, code: &str, message: String, cause: Option<Cause>) {
        let Some((c, token)) = self.snap.unwind.as_mut().and_then(|u| u.current.take()) else {
            self.end(InstanceState::Failed);
            return;
        };
        let cause = cause.unwrap_or(Cause {
            code: code.to_string(),
            message: message.clone(),
        });
        let failure = CompensationFailure {
            node: c.node.clone(),
            compensator: c.compensator.clone(),
            code: Code::CompensationFailed.as_str().to_string(),
            message: format!(
                "compensator `{}` of `{}` failed: {message}",
                c.compensator, c.node
            ),
            cause: Some(cause.clone()),
        };
        self.set_state(&c.compensator, NodeState::Failed);
        // The compensator's last attempt carries the compensation code.
        let last = self.effects.iter_mut().rev().find_map(|e| match e {
            Effect::RecordAttempt(a) if a.token == token => Some(a),
            _ => None,
        });
        if let Some(AttemptRecord {
            outcome,
            code,
            class,
            message,
            ..
        }) = last
        {
            *outcome = "compensation_failed".into();
            *code = Some(failure.code.clone());
            *class = Some(Code::CompensationFailed.class());
            *message = Some(format!("{}: {}", cause.code, cause.message));
        }
        journal!(
            self,
            "compensation_failed",
            Some(&c.node),
            json!({
                "code": failure.code,
                "compensator": c.compensator,
                "message": failure.message,
                "cause": { "code": cause.code, "message": cause.message },
            }),
        );
        if let Some(u) = self.snap.unwind.as_mut() {
            u.failed.push(failure);
        }
        self.discard(token);
        self.next_compensation();
    }
}

impl<'a> Machine<'a> {
    /// The token at compensate throw `node` compensates what `throw` names
    /// (see the module doc) and waits for it.
    pub(super) fn compensate_throw(&mut self, token: u64, node: &'a Node, throw: &CompensateThrow) {
        // A throw inside an event sub-process compensates the scope around it.
        let mut scope = node.scope;
        if let Some(s) =
            scope.filter(|&s| matches!(self.process.node(s).kind, NodeKind::EventSubProcess { .. }))
        {
            scope = self.process.node(s).scope;
        }
        let mut pending = Vec::new();
        let mut seen = HashSet::new();
        match throw.activity {
            Some(a) => {
                let scope = self.process.node(a).scope;
                self.collect_compensations(scope, Some(a), &mut seen, &mut pending);
            }
            None => self.collect_compensations(scope, None, &mut seen, &mut pending),
        }
        let order: Vec<&str> = pending.iter().map(|c| c.node.as_str()).collect();
        journal!(
            self,
            "compensation_thrown",
            Some(&node.id),
            json!({ "compensate": order }),
        );
        if pending.is_empty() {
            self.throw_compensated(token);
            return;
        }
        if let Some(t) = self.snap.token_mut(token) {
            // It waits for its compensation, as a join waits: with no park.
            t.status = TokenStatus::Joining;
        }
        if let Some(u) = self.snap.unwind.as_mut().filter(|u| !u.is_failure()) {
            // Another throw's compensation runs: this one's joins it.
            for c in pending {
                let queued = u.pending.iter().any(|p| p.node == c.node)
                    || u.current.as_ref().is_some_and(|(p, _)| p.node == c.node);
                if !queued {
                    u.pending.push(c);
                }
            }
            u.resume.push(token);
            return;
        }
        self.snap.unwind = Some(Unwind {
            pending,
            current: None,
            done: Vec::new(),
            failed: Vec::new(),
            resume: vec![token],
        });
        self.next_compensation();
    }

    /// The compensations of scope `scope`: its SUCCEEDED nodes (only `only`,
    /// if given) newest completion first, each by its compensator, a
    /// sub-process without one by its own children's.
    fn collect_compensations(
        &self,
        scope: Option<NodeIx>,
        only: Option<NodeIx>,
        seen: &mut HashSet<String>,
        out: &mut Vec<Compensation>,
    ) {
        for id in self.snap.completed.iter().rev() {
            let Some(n) = self.process.find(id) else {
                continue;
            };
            if n.scope != scope || only.is_some_and(|a| a != n.ix) || !seen.insert(id.clone()) {
                continue;
            }
            if self.snap.node_states.get(id) != Some(&NodeState::Succeeded) {
                continue;
            }
            if let Some(c) = self.process.compensator(n.ix) {
                out.push(Compensation {
                    node: id.clone(),
                    compensator: self.process.node(c).id.clone(),
                });
            } else if matches!(n.kind, NodeKind::SubProcess) {
                self.collect_compensations(Some(n.ix), None, seen, out);
            }
        }
    }

    /// The compensation a throw waited for is over: it goes on (an end
    /// event ends its token).
    fn throw_compensated(&mut self, token: u64) {
        let Some(node) = self.node_of(token) else {
            return;
        };
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Ready;
        }
        journal!(self, "compensation_completed", Some(&node.id), json!({}));
        match node.kind {
            NodeKind::End(_) => self.consume(token),
            _ => {
                self.snap.completed.push(node.id.clone());
                self.leave(token);
            }
        }
    }
}
