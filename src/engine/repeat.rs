//! Repeated activities (`model::Repeat`: BPMN multi-instance bodies and
//! standard loops) on the fan-out machinery of `fanout.rs`: the body's token
//! is a fan-out token (`TokenStatus::Fanout`), each iteration a branch token
//! (`TokenStatus::Branch`) scoping the tokens that walk it. Where a `Map`
//! reads documents, these read variables:
//!
//! - a multi-instance iteration's branch token holds its own variables
//!   (`Token::vars`: its element and `loopCounter`, 1-based, and what its
//!   tasks write); its result (`outputElement`, else what it wrote) takes its
//!   slot, in input order; at most `max_concurrency` run at once; after each
//!   completion the completion condition may end the body, cancelling the
//!   iterations still running (their slots stay `null`); the results go to
//!   `outputCollection` in the body's enclosing scope;
//! - a loop iteration works in the enclosing variables; the next starts when
//!   the previous completed and the condition (with `loopCounter`, the
//!   iterations so far) still holds, up to `maximum` (without one, beyond
//!   `model::LOOP_LIMIT` iterations the instance fails `SUTRA.RUNTIME.LOOP.LIMIT`).
//!
//! Errors inside an iteration travel up the scopes as anywhere else: past the
//! branch and the body to the body's boundaries (which interrupt every
//! iteration) or further.

use super::machine::Machine;
use super::snapshot::{FanoutState, NodeState, TokenStatus};
use crate::codes::Code;
use crate::model::{Expr, Fanout, Node, NodeKind, Over, Repeat, StartTrigger, LOOP_LIMIT};
use serde_json::{json, Map, Value};

pub(super) const LOOP_COUNTER: &str = "loopCounter";

/// The variable `e` is, when it is nothing but a variable's name.
fn bare_variable(e: &Expr) -> Option<&str> {
    let name = e.source().trim();
    let mut chars = name.chars();
    let ident = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    (ident && name != LOOP_COUNTER && e.variables().iter().any(|v| v == name)).then_some(name)
}

impl<'a> Machine<'a> {
    pub(super) fn repeat_of(&self, token: u64) -> Option<(&'a Node, &'a Fanout, &'a Repeat)> {
        let node = self.node_of(token)?;
        match &node.kind {
            NodeKind::Fanout(f) => f.repeat.as_deref().map(|r| (node, f, r)),
            _ => None,
        }
    }

    /// The body's state, in place (it holds the whole collection and the
    /// results: never cloned per iteration).
    fn repeat_state(&self, token: u64) -> Option<&FanoutState> {
        match self.snap.token(token).map(|t| &t.status) {
            Some(TokenStatus::Fanout(s)) => Some(s),
            _ => None,
        }
    }

    fn repeat_state_mut(&mut self, token: u64) -> Option<&mut FanoutState> {
        match self.snap.token_mut(token).map(|t| &mut t.status) {
            Some(TokenStatus::Fanout(s)) => Some(s),
            _ => None,
        }
    }

    fn put_state(&mut self, token: u64, st: FanoutState) {
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Fanout(st);
        }
    }

    /// Evaluate `e` over the variables of `token` plus `extra`.
    fn eval_with(&self, token: u64, e: &Expr, extra: &[(&str, Value)]) -> Result<Value, String> {
        let mut vars = self.vars_named(token, e.variables());
        for (k, v) in extra {
            vars.insert((*k).to_string(), v.clone());
        }
        e.eval(&vars).map_err(|err| err.to_string())
    }

    fn repeat_fail(&mut self, node: &Node, code: Code, message: String) {
        self.fail_code(code, message, Some(&node.id));
    }

    /// Enter a repeated activity (its body).
    pub(super) fn repeat_enter(&mut self, token: u64) {
        let Some((node, _, rep)) = self.repeat_of(token) else {
            return;
        };
        let (count, items) = match &rep.over {
            Over::Cardinality(e) => match self.eval_with(token, e, &[]) {
                Ok(v) => match v.as_u64().or_else(|| {
                    v.as_f64()
                        .filter(|x| x.fract() == 0.0 && *x >= 0.0)
                        .map(|x| x as u64)
                }) {
                    Some(n) if n <= u64::from(u32::MAX) => (n as usize, Vec::new()),
                    _ => {
                        return self.repeat_fail(
                            node,
                            Code::MultiInstanceInvalid,
                            format!(
                            "the loopCardinality `{}` of `{}` is {v}, not a non-negative integer",
                            e.source(),
                            node.id
                        ),
                        )
                    }
                },
                Err(why) => {
                    return self.repeat_fail(
                        node,
                        Code::ConditionFailed,
                        format!("the loopCardinality of `{}` failed: {why}", node.id),
                    )
                }
            },
            Over::Collection(e) => match self.eval_with(token, e, &[]) {
                Ok(Value::Array(a)) => (a.len(), a),
                Ok(other) => {
                    return self.repeat_fail(
                        node,
                        Code::MultiInstanceInvalid,
                        format!(
                            "the collection `{}` of `{}` is {}, not an array",
                            e.source(),
                            node.id,
                            super::document::kind(&other)
                        ),
                    )
                }
                Err(why) => {
                    return self.repeat_fail(
                        node,
                        Code::ConditionFailed,
                        format!("the collection of `{}` failed: {why}", node.id),
                    )
                }
            },
            Over::Loop { .. } => (0, Vec::new()),
        };
        // A collection named as is: the stored snapshot may leave out the
        // elements not started yet while the variable still holds them.
        let items_of = match &rep.over {
            Over::Collection(e) => bare_variable(e).map(str::to_string),
            _ => None,
        };
        self.arm_boundaries(token, node);
        self.set_state(&node.id, NodeState::Running);
        journal!(
            self,
            "fanout_started",
            Some(&node.id),
            json!({ "branches": count, "attempt": 1 }),
        );
        self.put_state(
            token,
            FanoutState {
                results: vec![None; count],
                items,
                items_at: None,
                items_of,
                input: Value::Null,
                next: 0,
                attempt: 1,
                granted: Vec::new(),
                backoff: None,
                limit: Some(rep.max_concurrency.max(1)),
                failed: 0,
                tolerated: None,
                resume: None,
            },
        );
        match &rep.over {
            Over::Loop {
                condition,
                test_before,
                maximum,
            } => {
                if *maximum == Some(0) {
                    return self.repeat_finish(token);
                }
                if *test_before {
                    match self.loop_holds(token, node, condition.as_ref(), 0) {
                        Some(true) => {}
                        Some(false) => return self.repeat_finish(token),
                        None => return,
                    }
                }
                self.iteration_start(token, 0);
            }
            _ => self.repeat_fill(token),
        }
    }

    /// The loop condition with `loopCounter` = `done`; `None` when it failed
    /// (the instance has failed).
    fn loop_holds(
        &mut self,
        token: u64,
        node: &Node,
        condition: Option<&Expr>,
        done: u32,
    ) -> Option<bool> {
        let Some(c) = condition else {
            return Some(true);
        };
        match self.eval_with(token, c, &[(LOOP_COUNTER, json!(done))]) {
            Ok(Value::Bool(b)) => Some(b),
            Ok(other) => {
                self.repeat_fail(
                    node,
                    Code::ConditionFailed,
                    format!(
                        "the loopCondition `{}` of `{}` yielded {other}, not a boolean",
                        c.source(),
                        node.id
                    ),
                );
                None
            }
            Err(why) => {
                self.repeat_fail(
                    node,
                    Code::ConditionFailed,
                    format!("the loopCondition of `{}` failed: {why}", node.id),
                );
                None
            }
        }
    }

    fn running_iterations(&self, token: u64) -> usize {
        self.live_branches(token)
    }

    /// Start multi-instance iterations while the concurrency (within
    /// `fanout::window`) and the step's budget allow (fanout.rs); finish
    /// when every slot has its result.
    pub(super) fn repeat_fill(&mut self, token: u64) {
        let Some(limit) = self
            .repeat_state(token)
            .map(|s| super::fanout::window(s.limit.unwrap_or(1).max(1)))
        else {
            return;
        };
        let mut running = self.running_iterations(token);
        loop {
            let Some(st) = self.repeat_state(token) else {
                return;
            };
            let (next, total) = (st.next, st.results.len());
            if next as usize >= total {
                break;
            }
            if running >= limit || st.resume.is_some() || !self.may_start_iteration(token) {
                return;
            }
            let Some(st) = self.repeat_state_mut(token) else {
                return;
            };
            st.next += 1;
            running += 1;
            self.iteration_start(token, next);
            if self.snap.state.is_terminal() {
                return;
            }
        }
        if running == 0 {
            self.repeat_finish(token);
        }
    }

    /// Start iteration `slot` (0-based) of the body at `token`.
    fn iteration_start(&mut self, token: u64, slot: u32) {
        let Some((node, fan, rep)) = self.repeat_of(token) else {
            return;
        };
        let Some(&branch) = fan.branches.first() else {
            return;
        };
        let vars = rep.scoped().then(|| {
            let mut v = Map::new();
            // The element moves into the iteration's scope: the body keeps
            // only the elements not started yet.
            let item = self
                .repeat_state_mut(token)
                .and_then(|st| st.items.get_mut(slot as usize).map(Value::take))
                .unwrap_or(Value::Null);
            if let Some(name) = &rep.element {
                v.insert(name.clone(), item);
            }
            v.insert(LOOP_COUNTER.into(), json!(slot + 1));
            v
        });
        if !rep.scoped() {
            if let Some(st) = self.repeat_state_mut(token) {
                st.next = slot + 1;
            }
        }
        let b = self.spawn(branch, Some(token), None);
        self.queue.retain(|&q| q != b);
        if let Some(t) = self.snap.token_mut(b) {
            t.status = TokenStatus::Branch { slot, item: None };
            t.vars = vars;
        }
        let branch_id = self.process.node(branch).id.clone();
        self.set_state(&branch_id, NodeState::Running);
        journal!(
            self,
            "branch_started",
            Some(&node.id),
            json!({ "slot": slot, "token": b }),
        );
        // A multi-instance sub-process's event sub-processes, per iteration.
        self.arm_event_subs(Some(b), Some(branch));
        let starts: Vec<_> = self
            .process
            .starts_in(Some(branch))
            .filter(|n| matches!(n.kind, NodeKind::Start(StartTrigger::None)))
            .map(|n| n.ix)
            .collect();
        if starts.is_empty() {
            self.complete_scope_if_empty(Some(b));
        }
        for s in starts {
            self.spawn(s, Some(b), None);
        }
    }

    /// Branch token `branch` of a repeated body completed. `false` when its
    /// fan-out is no repeated body (the `Map`'s rules apply).
    pub(super) fn iteration_completed(&mut self, branch: u64) -> bool {
        let Some(t) = self.snap.token(branch) else {
            return false;
        };
        let TokenStatus::Branch { slot, .. } = t.status else {
            return false;
        };
        let Some(fan) = t.scope else {
            return false;
        };
        let Some((node, fan_node, rep)) = self.repeat_of(fan) else {
            return false;
        };
        let branch_id = fan_node
            .branches
            .first()
            .map(|&b| self.process.node(b).id.clone());
        if let Some(b) = &branch_id {
            self.set_state(b, NodeState::Succeeded);
        }
        if let Over::Loop {
            condition, maximum, ..
        } = &rep.over
        {
            self.discard(branch);
            journal!(
                self,
                "branch_completed",
                Some(&node.id),
                json!({ "slot": slot })
            );
            let done = slot + 1;
            if maximum.is_some_and(|m| u64::from(done) >= m) {
                self.repeat_finish(fan);
                return true;
            }
            match self.loop_holds(fan, node, condition.as_ref(), done) {
                Some(true) => {}
                Some(false) => {
                    self.repeat_finish(fan);
                    return true;
                }
                None => return true,
            }
            if maximum.is_none() && u64::from(done) >= LOOP_LIMIT {
                self.repeat_fail(
                    node,
                    Code::LoopLimit,
                    format!(
                        "the loop `{}` ran {done} iterations and has no loopMaximum: a loop that runs away (the limit is {LOOP_LIMIT})",
                        node.id
                    ),
                );
                return true;
            }
            self.iteration_start(fan, done);
            return true;
        }
        // A multi-instance iteration: its result, then the completion condition.
        let output = match &rep.output_element {
            Some(e) => match self.eval_with(branch, e, &[]) {
                Ok(v) => v,
                Err(why) => {
                    self.repeat_fail(
                        node,
                        Code::ConditionFailed,
                        format!("the outputElement of `{}` failed: {why}", node.id),
                    );
                    return true;
                }
            },
            None => {
                let mut own = self
                    .snap
                    .token(branch)
                    .and_then(|t| t.vars.clone())
                    .unwrap_or_default();
                own.remove(LOOP_COUNTER);
                if let Some(name) = &rep.element {
                    own.remove(name);
                }
                Value::Object(own)
            }
        };
        let Some(st) = self.repeat_state_mut(fan) else {
            return true;
        };
        if let Some(r) = st.results.get_mut(slot as usize) {
            *r = Some(output);
        }
        let total = st.results.len();
        // Counted only for a condition that reads them (each count walks
        // the slots or the tokens).
        let completed = rep
            .completion
            .as_ref()
            .map_or(0, |_| st.results.iter().filter(|r| r.is_some()).count());
        let done = match &rep.completion {
            None => false,
            Some(c) => {
                let active = self.running_iterations(fan).saturating_sub(1);
                let extra = [
                    ("nrOfInstances", json!(total)),
                    ("nrOfCompletedInstances", json!(completed)),
                    ("nrOfActiveInstances", json!(active)),
                ];
                match self.eval_with(branch, c, &extra) {
                    Ok(Value::Bool(b)) => b,
                    Ok(other) => {
                        self.repeat_fail(
                            node,
                            Code::ConditionFailed,
                            format!(
                                "the completionCondition `{}` of `{}` yielded {other}, not a boolean",
                                c.source(),
                                node.id
                            ),
                        );
                        return true;
                    }
                    Err(why) => {
                        self.repeat_fail(
                            node,
                            Code::ConditionFailed,
                            format!("the completionCondition of `{}` failed: {why}", node.id),
                        );
                        return true;
                    }
                }
            }
        };
        self.discard(branch);
        journal!(
            self,
            "branch_completed",
            Some(&node.id),
            json!({ "slot": slot })
        );
        if done {
            let rest: Vec<u64> = self
                .snap
                .tokens
                .iter()
                .filter(|t| t.scope == Some(fan) && matches!(t.status, TokenStatus::Branch { .. }))
                .map(|t| t.id)
                .collect();
            journal!(
                self,
                "completion_condition_met",
                Some(&node.id),
                json!({ "completed": completed, "cancelled": rest.len(), "instances": total }),
            );
            for r in rest {
                self.interrupt(r, NodeState::Cancelled);
            }
            self.repeat_finish(fan);
            return true;
        }
        self.repeat_fill(fan);
        true
    }

    /// The body ends: its results go to the output collection, its token on.
    fn repeat_finish(&mut self, token: u64) {
        let Some((node, _, rep)) = self.repeat_of(token) else {
            return;
        };
        let Some(st) = self.repeat_state_mut(token) else {
            return;
        };
        let results = std::mem::take(&mut st.results);
        st.items = Vec::new();
        if let Some(name) = &rep.output_collection {
            let results =
                Value::Array(results.into_iter().map(Option::unwrap_or_default).collect());
            self.vars_home(token).insert(name.clone(), results);
        }
        journal!(self, "fanout_completed", Some(&node.id), json!({}));
        self.complete_task(token, &node.id);
    }
}
