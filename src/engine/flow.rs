//! Leaving a node along its flows, join rules and dead paths, error flows.
//!
//! A node without a join rule (BPMN) is entered by every token that arrives
//! on a taken flow. A node with one (`Node::join`, HX) is entered once all its
//! incoming sequence and error flows are *decided*: each flow is satisfied or
//! dead (see `model::JoinRule`). Dead-path signals go only to nodes with a
//! join rule, so a BPMN process never sees one.
//!
//! Invariant: a join record (`Snapshot::joins`) exists only while some of its
//! node's incoming flows are undecided; a scope whose last token is gone while
//! a join still waits fails with `SUTRA.RUNTIME.JOIN.DEAD_EDGE` (machine.rs)
//! instead of completing as if the node did not exist.

use super::machine::{Machine, Raised};
use super::snapshot::{JoinState, NodeState};
use super::TokenStatus;
use crate::codes::Code;
use crate::model::{FlowIx, FlowKind, JoinRule, NodeIx, Process};
use serde_json::{json, Value};
use std::collections::{HashSet, VecDeque};

/// Why an instance cannot resume at `at` (a from-failure retry, which starts
/// a fresh instance with one token there): a node after it that joins also
/// waits for an edge from outside what runs after `at`, which nothing in the
/// new instance would ever decide. `None` when resuming is well-defined.
pub(super) fn resume_blocker(process: &Process, at: NodeIx) -> Option<String> {
    let mut after: HashSet<NodeIx> = HashSet::from([at]);
    let mut work = vec![at];
    while let Some(n) = work.pop() {
        for &f in &process.node(n).outgoing {
            let flow = process.flow(f);
            if flow.kind != FlowKind::Compensation && after.insert(flow.target) {
                work.push(flow.target);
            }
        }
    }
    for &n in &after {
        let node = process.node(n);
        if n == at || node.join.is_none() {
            continue;
        }
        for &f in &node.incoming {
            let flow = process.flow(f);
            if flow.kind != FlowKind::Compensation && !after.contains(&flow.source) {
                return Some(format!(
                    "`{}` also waits for edge `{}` from `{}`, which would not run again",
                    node.id,
                    flow.id,
                    process.node(flow.source).id
                ));
            }
        }
    }
    None
}

impl Machine<'_> {
    /// An instance that can never move again fails instead of waiting with
    /// nothing to wait for: no park (no timer, message, attempt, call, retry),
    /// nothing queued, and every token a parallel join waiting for siblings
    /// (or a container of such tokens). Only an arriving token could complete
    /// such a join, and none can arrive (e.g. two none start events feeding one
    /// join: an instance starts at one of them). `SUTRA.RUNTIME.JOIN.DEAD_EDGE`,
    /// at the first waiting join. Returns whether it failed the instance.
    pub(super) fn fail_if_stuck(&mut self) -> bool {
        if self.snap.state.is_terminal()
            || !self.queue.is_empty()
            || !self.snap.parks.is_empty()
            || self.snap.unwind.is_some()
        {
            return false;
        }
        let mut join = None;
        for t in &self.snap.tokens {
            match t.status {
                TokenStatus::Joining => {
                    join.get_or_insert_with(|| t.node.clone());
                }
                TokenStatus::InSubProcess | TokenStatus::Fanout(_) | TokenStatus::Branch { .. } => {
                }
                _ => return false,
            }
        }
        let Some(node) = join else {
            return false;
        };
        self.fail_code(
            Code::JoinDeadEdge,
            format!(
                "parallel gateway `{node}` waits for tokens that can never arrive: nothing else in \
                 the instance runs or waits (no task, timer, message or call is left)"
            ),
            Some(&node),
        );
        true
    }

    /// Leave a node along its outgoing sequence flows: every unconditional
    /// flow and every flow whose condition holds. Flows not taken (and error
    /// flows: the node did not fail) are dead for nodes that track them. No
    /// outgoing flow ends the token; none taken and no dead-path signal
    /// delivered is `SUTRA.RUNTIME.GATEWAY.NO_FLOW_TAKEN`.
    pub(super) fn leave(&mut self, token: u64) {
        let Some(node) = self.node_of(token) else {
            return;
        };
        let Some(scope) = self.snap.token(token).map(|t| t.scope) else {
            return;
        };
        if self.state_of(&node.id).is_none_or(NodeState::is_active) {
            self.set_state(&node.id, NodeState::Succeeded);
        }
        let of_kind = |kind: FlowKind| -> Vec<FlowIx> {
            node.outgoing
                .iter()
                .copied()
                .filter(|&f| self.process.flow(f).kind == kind)
                .collect()
        };
        let forward = of_kind(FlowKind::Sequence);
        let errors = of_kind(FlowKind::Error);
        if forward.is_empty() && errors.is_empty() {
            self.consume(token);
            return;
        }
        let mut taken = Vec::new();
        let mut dead = errors;
        for &f in &forward {
            let flow = self.process.flow(f);
            let holds = flow
                .condition
                .as_ref()
                .map(|c| c.eval_bool(&self.vars_of(token)));
            match holds {
                None | Some(Ok(true)) => taken.push(f),
                Some(Ok(false)) => dead.push(f),
                Some(Err(e)) => {
                    self.fail_code(
                        e.code(),
                        format!("condition on `{}` failed: {e}", flow.id),
                        Some(&node.id),
                    );
                    return;
                }
            }
        }
        let tracked = |f: &FlowIx| {
            self.process
                .node(self.process.flow(*f).target)
                .join
                .is_some()
        };
        if taken.is_empty() && !forward.is_empty() && !dead.iter().any(tracked) {
            self.fail_code(
                Code::NoFlowTaken,
                format!("no condition on the flows out of `{}` holds", node.id),
                Some(&node.id),
            );
            return;
        }
        // The token's document (a data-flow token's state) travels along its flows.
        let doc = self.snap.token(token).and_then(|t| t.doc.clone());
        self.discard(token);
        let signals = taken
            .into_iter()
            .map(|f| (f, true))
            .chain(dead.into_iter().map(|f| (f, false)));
        self.signal_all(signals.collect(), scope, doc);
        self.complete_scope_if_empty(scope);
    }

    /// Deliver flow decisions (satisfied or dead), and those they cause: a
    /// node skipped as dead makes its own outgoing flows dead. A token spawned
    /// by a satisfied flow carries `doc` (the leaving token's document).
    pub(super) fn signal_all(
        &mut self,
        signals: Vec<(FlowIx, bool)>,
        scope: Option<u64>,
        doc: Option<Value>,
    ) {
        let mut work: VecDeque<(FlowIx, bool)> = signals.into();
        while let Some((f, satisfied)) = work.pop_front() {
            if self.snap.state.is_terminal() {
                return;
            }
            let flow = self.process.flow(f);
            let target = self.process.node(flow.target);
            let Some(rule) = target.join else {
                if satisfied {
                    self.spawn_doc(target.ix, scope, Some(f), doc.clone());
                }
                continue;
            };
            let pos = match self
                .snap
                .joins
                .iter()
                .position(|j| j.node == target.id && j.scope == scope)
            {
                Some(p) => p,
                None => {
                    self.snap.joins.push(JoinState {
                        node: target.id.clone(),
                        scope,
                        satisfied: Vec::new(),
                        dead: Vec::new(),
                    });
                    self.snap.joins.len() - 1
                }
            };
            let j = &mut self.snap.joins[pos];
            if !j.satisfied.contains(&flow.id) && !j.dead.contains(&flow.id) {
                if satisfied {
                    j.satisfied.push(flow.id.clone());
                } else {
                    j.dead.push(flow.id.clone());
                }
            }
            let expected = target
                .incoming
                .iter()
                .filter(|&&i| self.process.flow(i).kind != FlowKind::Compensation)
                .count();
            if j.satisfied.len() + j.dead.len() < expected {
                continue;
            }
            let j = self.snap.joins.remove(pos);
            if j.satisfied.is_empty() {
                self.set_state(&target.id, NodeState::Skipped);
                journal!(
                    self,
                    "node_skipped",
                    Some(&target.id),
                    json!({ "reason": "every incoming edge is dead (a branch not taken)", "dead": j.dead }),
                );
                for &o in &target.outgoing {
                    if self.process.flow(o).kind != FlowKind::Compensation {
                        work.push_back((o, false));
                    }
                }
            } else if rule == JoinRule::All && !j.dead.is_empty() {
                self.fail_code(
                    Code::JoinDeadEdge,
                    format!(
                        "node `{}` joins all its incoming edges, but edge `{}` is dead (its guard was false, or its source did not succeed): it can never run as written; use join=\"any\" if one branch is enough",
                        target.id, j.dead[0]
                    ),
                    Some(&target.id),
                );
                return;
            } else {
                self.spawn_doc(target.ix, scope, None, doc.clone());
            }
        }
    }

    /// A failure raised at an activity with outgoing error flows is handled
    /// there: the activity stays FAILED, the error goes into the variable
    /// `error`, its error flows are satisfied and its sequence flows dead. No
    /// unwind. Returns false if the activity has no error flow.
    pub(super) fn take_error_flows(&mut self, token: u64, raised: &Raised, origin: &str) -> bool {
        let Some(node) = self.node_of(token) else {
            return false;
        };
        let mut signals = Vec::new();
        for &f in &node.outgoing {
            match self.process.flow(f).kind {
                FlowKind::Error => signals.push((f, true)),
                FlowKind::Sequence => signals.push((f, false)),
                FlowKind::Compensation => {}
            }
        }
        if !signals.iter().any(|&(_, satisfied)| satisfied) {
            return false;
        }
        let scope = self.snap.token(token).and_then(|t| t.scope);
        let cause = raised
            .failure
            .as_ref()
            .map(|c| json!({ "code": c.code, "message": c.message }));
        let error = json!({
            "node": node.id,
            "code": raised.code,
            "message": raised.message,
            "cause": cause,
        });
        self.set_state(&node.id, NodeState::Failed);
        let handlers: Vec<&str> = signals
            .iter()
            .filter(|&&(_, satisfied)| satisfied)
            .map(|&(f, _)| self.process.node(self.process.flow(f).target).id.as_str())
            .collect();
        journal!(
            self,
            "error_handled",
            Some(&node.id),
            json!({ "code": raised.code, "message": raised.message, "cause": cause, "from": origin, "to": handlers }),
        );
        self.vars_home(token).insert("error".into(), error);
        let doc = self.snap.token(token).and_then(|t| t.doc.clone());
        self.discard(token);
        self.signal_all(signals, scope, doc);
        self.complete_scope_if_empty(scope);
        true
    }
}
