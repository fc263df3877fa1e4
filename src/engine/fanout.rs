//! Fan-outs (`NodeKind::Fanout`): a token at the fan-out node owns one
//! branch token per running branch or item; each branch token is the scope
//! of the tokens walking that branch and carries its own document. A branch
//! ends when its last token is consumed: its document becomes its result.
//!
//! - Parallel (`items: None`): every branch starts at once on the fan-out's
//!   effective input; the result is the array of the branches' outputs.
//! - Map (`items: Some`): one iteration of the single branch per item of the
//!   array at the items path (`States.ItemsNotArray` otherwise), at most
//!   `max_concurrency` at a time; with `fail_on_partial` false a failed
//!   iteration's `{Error, Cause}` takes its place in the results.
//! - A failure that reaches the fan-out is judged by its retriers (a retry
//!   park, then the whole fan-out runs again) before its catchers.
//!
//! Waits inside a branch are ordinary parks of the branch's tokens.
//!
//! Cost (issue 33 item 1): a fan-out's state is read and written in place
//! (never copied per iteration); at most [`window`] iterations run at once
//! (a `Map` without `MaxConcurrency` runs `model::DEFAULT_MAX_CONCURRENCY`,
//! no fan-out more than [`WINDOW_MAX`]); and one step starts at most
//! [`FANOUT_STARTS_PER_STEP`] iterations (fewer once half the step's node
//! budget is spent): then a continue park (`ParkKind::Continue`, due at
//! once) carries the rest to the next step, so a step's host work is bounded
//! whatever the number of items. BPMN multi-instance bodies (repeat.rs)
//! share the window and the budget.

use super::document::{self as doc, DocError, Scope};
use super::machine::{Machine, Raised};
use super::snapshot::{FanoutState, NodeState, Park, ParkKind, TokenStatus};
use crate::codes::Code;
use crate::model::{Bound, DataFlow, Fanout, Items, Node, NodeKind, StartTrigger};
use serde_json::{json, Value};

/// Iterations one step may start (over all the instance's fan-outs); the
/// rest are started by the next step (a continue park).
pub(super) const FANOUT_STARTS_PER_STEP: u32 = 256;

/// The most iterations of one fan-out running at once, whatever the
/// definition says (each live iteration is a token in the snapshot).
pub(super) const WINDOW_MAX: usize = 1_000;

/// How many iterations may run at once for a concurrency as written
/// (`0`: no limit given).
pub(super) fn window(written: u32) -> usize {
    match written {
        0 => crate::model::DEFAULT_MAX_CONCURRENCY as usize,
        n => (n as usize).min(WINDOW_MAX),
    }
}

impl<'a> Machine<'a> {
    fn fanout_of(&self, token: u64) -> Option<(&'a Node, &'a Fanout)> {
        let node = self.node_of(token)?;
        match &node.kind {
            NodeKind::Fanout(f) => Some((node, f)),
            _ => None,
        }
    }

    /// The fan-out's state, in place (it holds every item and result:
    /// never copied per iteration).
    pub(super) fn fan_state(&self, token: u64) -> Option<&FanoutState> {
        match self.snap.token(token).map(|t| &t.status) {
            Some(TokenStatus::Fanout(s)) => Some(s),
            _ => None,
        }
    }

    pub(super) fn fan_state_mut(&mut self, token: u64) -> Option<&mut FanoutState> {
        match self.snap.token_mut(token).map(|t| &mut t.status) {
            Some(TokenStatus::Fanout(s)) => Some(s),
            _ => None,
        }
    }

    /// Live iterations (branch tokens) of fan-out `token`.
    pub(super) fn live_branches(&self, token: u64) -> usize {
        self.snap
            .tokens
            .iter()
            .filter(|t| t.scope == Some(token) && matches!(t.status, TokenStatus::Branch { .. }))
            .count()
    }

    /// Whether this step may start one more iteration of fan-out `token`;
    /// when not, a continue park (due now) carries its fill to the next
    /// step. Counts the start when it may.
    pub(super) fn may_start_iteration(&mut self, token: u64) -> bool {
        if self.fanout_starts < FANOUT_STARTS_PER_STEP
            && self.budget_left() > super::machine::STEP_BUDGET / 2
        {
            self.fanout_starts += 1;
            return true;
        }
        if self.fan_state(token).is_some_and(|s| s.resume.is_none()) {
            let Some(node) = self.node_of(token) else {
                return false;
            };
            let park = self.arm(Park {
                kind: ParkKind::Continue,
                token,
                node: node.id.clone(),
                due: Some(self.inputs.now),
                message: None,
                cycle: None,
            });
            let next = self.fan_state(token).map_or(0, |s| s.next);
            journal!(
                self,
                "fanout_continues",
                Some(&node.id),
                json!({ "next": next, "park": park }),
            );
            if let Some(st) = self.fan_state_mut(token) {
                st.resume = Some(park);
            }
        }
        false
    }

    /// A continue park fell due: start the iterations the last step left.
    pub(super) fn fanout_continue(&mut self, token: u64, park: u64) {
        let Some(st) = self.fan_state_mut(token) else {
            return;
        };
        if st.resume != Some(park) {
            return;
        }
        st.resume = None;
        let repeated = self
            .fanout_of(token)
            .is_some_and(|(_, f)| f.repeat.is_some());
        if repeated {
            self.repeat_fill(token);
        } else {
            self.fanout_fill(token);
        }
    }

    fn set_fanout_state(&mut self, token: u64, st: FanoutState) {
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Fanout(st);
        }
    }

    /// Enter (or, after a backoff, re-enter) a fan-out.
    pub(super) fn fanout_enter(&mut self, token: u64, attempt: u32, granted: Vec<u32>) {
        let Some((node, fan)) = self.fanout_of(token) else {
            return;
        };
        if fan.repeat.is_some() {
            // A repeated activity over variables (repeat.rs).
            return self.repeat_enter(token);
        }
        let df = node.data.as_deref().cloned().unwrap_or_default();
        let raw = self.doc_of(token);
        let context = self.context_of(token, node, attempt.saturating_sub(1));
        let mut draws = self.draws(token);
        let mut scope = Scope::new(&context, &mut draws);
        let input = match doc::effective_input(&df, &raw, &mut scope) {
            Ok(v) => v,
            Err(e) => return self.raise_doc_error(token, node, e),
        };
        // Items named where they are in the token's document are read there
        // (not copied into the state: a wide Map's list is stored once).
        let own = self.snap.token(token).and_then(|t| t.doc.as_ref());
        let items_at = fan
            .items
            .as_ref()
            .zip(own)
            .and_then(|(it, d)| items_pointer(&df, it, d));
        let (count, items) = match (&fan.items, &items_at) {
            (None, _) => (fan.branches.len(), Vec::new()),
            (Some(_), Some(p)) => (
                raw.pointer(p).and_then(Value::as_array).map_or(0, Vec::len),
                Vec::new(),
            ),
            (Some(it), None) => match match &it.expr {
                Some(t) => doc::template(t, &input, &mut scope),
                None => doc::select(&it.path, input.clone(), &context),
            } {
                Ok(Value::Array(a)) => (a.len(), a),
                Ok(other) => {
                    let e = DocError::new(
                        Code::StatesItemsNotArray,
                        format!(
                            "the items of `{}` are {}, not an array",
                            node.id,
                            doc::kind(&other)
                        ),
                    );
                    return self.raise_doc_error(token, node, e);
                }
                Err(e) => {
                    let e = DocError::new(Code::StatesItemsNotArray, e.message);
                    return self.raise_doc_error(token, node, e);
                }
            },
        };
        let (limit, tolerated) = match &fan.items {
            Some(it) => match bounds(it, &input, &context) {
                Ok(b) => b,
                Err(e) => return self.raise_doc_error(token, node, e),
            },
            None => (None, None),
        };
        if attempt == 1 {
            self.arm_boundaries(token, node);
        }
        journal!(
            self,
            "fanout_started",
            Some(&node.id),
            json!({ "branches": count, "attempt": attempt }),
        );
        // Only a Parallel's branches and a Map's item selector read the
        // effective input again: a Map without one does not keep a copy (of
        // every item, most often) in its state.
        let keep_input = fan.items.as_ref().is_none_or(|it| it.selector.is_some());
        let input = if keep_input { input } else { Value::Null };
        self.set_fanout_state(
            token,
            FanoutState {
                results: vec![None; count],
                items,
                items_at,
                items_of: None,
                input,
                next: 0,
                attempt,
                granted,
                backoff: None,
                limit,
                failed: 0,
                tolerated,
                resume: None,
            },
        );
        self.fanout_fill(token);
    }

    /// Start branches while the concurrency allows (and the step's budget:
    /// `may_start_iteration`); finish when all ended.
    fn fanout_fill(&mut self, token: u64) {
        let Some((node, fan)) = self.fanout_of(token) else {
            return;
        };
        let Some(st) = self.fan_state(token) else {
            return;
        };
        let limit = match &fan.items {
            Some(it) => window(st.limit.unwrap_or(it.max_concurrency)),
            // A Parallel state's branches are few and written out.
            None => usize::MAX,
        };
        let mut running = self.live_branches(token);
        loop {
            let Some(st) = self.fan_state(token) else {
                return;
            };
            if st.next as usize >= st.results.len() {
                break;
            }
            if running >= limit || st.resume.is_some() || !self.may_start_iteration(token) {
                return;
            }
            let Some(st) = self.fan_state_mut(token) else {
                return;
            };
            let slot = st.next;
            st.next += 1;
            running += 1;
            if !self.start_branch(token, node, fan, slot) {
                return;
            }
        }
        // Every slot started and none is running: each has its result.
        if running == 0 {
            if let Some(st) = self.fan_state_mut(token) {
                let results = std::mem::take(&mut st.results);
                st.items = Vec::new();
                self.fanout_finish(token, node, results);
            }
        }
    }

    fn start_branch(&mut self, token: u64, node: &Node, fan: &Fanout, slot: u32) -> bool {
        let i = slot as usize;
        let branch = if fan.items.is_some() {
            fan.branches.first()
        } else {
            fan.branches.get(i)
        };
        let Some(&branch) = branch else {
            return false;
        };
        let Some(st) = self.fan_state(token) else {
            return false;
        };
        let (input, item) = match &fan.items {
            None => (st.input.clone(), None),
            Some(it) => {
                let item = match &st.items_at {
                    Some(p) => self
                        .snap
                        .token(token)
                        .and_then(|t| t.doc.as_ref())
                        .and_then(|d| d.pointer(p))
                        .and_then(|a| a.get(i)),
                    None => st.items.get(i),
                }
                .cloned()
                .unwrap_or(Value::Null);
                let input = match &it.selector {
                    None => Ok(item.clone()),
                    Some(t) => {
                        let mut context = self.context_of(token, node, 0);
                        context["Map"] = json!({ "Item": { "Index": slot, "Value": item } });
                        let mut draws = self.draws(token);
                        let mut scope = Scope::new(&context, &mut draws);
                        doc::template(t, &st.input, &mut scope)
                    }
                };
                match input {
                    Ok(v) => (v, Some(item)),
                    Err(e) => {
                        self.raise_doc_error(token, node, e);
                        return false;
                    }
                }
            }
        };
        let b = self.spawn_doc(branch, Some(token), None, Some(input.clone()));
        if let Some(t) = self.snap.token_mut(b) {
            t.status = TokenStatus::Branch { slot, item };
        }
        journal!(
            self,
            "branch_started",
            Some(&node.id),
            json!({ "slot": slot, "token": b }),
        );
        let starts: Vec<_> = self
            .process
            .starts_in(Some(branch))
            .filter(|n| matches!(n.kind, NodeKind::Start(StartTrigger::None)))
            .map(|n| n.ix)
            .collect();
        for s in starts {
            self.spawn_doc(s, Some(b), None, Some(input.clone()));
        }
        true
    }

    fn fanout_finish(&mut self, token: u64, node: &Node, results: Vec<Option<Value>>) {
        let results = Value::Array(results.into_iter().map(Option::unwrap_or_default).collect());
        let df: DataFlow = node.data.as_deref().cloned().unwrap_or_default();
        let raw = self.doc_of(token);
        let context = self.context_of(token, node, 0);
        let mut draws = self.draws(token);
        let mut scope = Scope::new(&context, &mut draws);
        match doc::complete(&df, raw, results, &mut scope) {
            Ok((out, vars)) => {
                journal!(self, "fanout_completed", Some(&node.id), json!({}));
                if let Some(t) = self.snap.token_mut(token) {
                    t.doc = Some(out);
                }
                self.assign_vars(token, &node.id, vars);
                self.complete_task(token, &node.id);
            }
            Err(e) => self.raise_doc_error(token, node, e),
        }
    }

    /// A token ends inside a branch: its document is the branch's output.
    pub(super) fn branch_output(&mut self, token: u64) {
        let Some(t) = self.snap.token(token) else {
            return;
        };
        let (Some(scope), doc) = (t.scope, t.doc.clone()) else {
            return;
        };
        if let Some(b) = self.snap.token_mut(scope) {
            if matches!(b.status, TokenStatus::Branch { .. }) {
                b.doc = doc;
            }
        }
    }

    /// A branch token's scope emptied: record its result. `false` when
    /// `token` is no branch.
    pub(super) fn branch_completed(&mut self, token: u64) -> bool {
        if self.iteration_completed(token) {
            return true;
        }
        let Some(t) = self.snap.token(token) else {
            return false;
        };
        let TokenStatus::Branch { slot, .. } = t.status else {
            return false;
        };
        let output = t.doc.clone().unwrap_or(Value::Null);
        let Some(fan) = t.scope else {
            return false;
        };
        self.record(fan, token, slot, output, "branch_completed");
        true
    }

    fn record(&mut self, fan: u64, branch: u64, slot: u32, output: Value, kind: &str) {
        // The branch's container node ends with its branch (issue 28: it
        // stayed READY): SUCCEEDED, or FAILED for a failure a Map absorbed.
        if let Some(n) = self.node_of(branch).map(|n| n.id.clone()) {
            let state = match kind {
                "branch_completed" => NodeState::Succeeded,
                _ => NodeState::Failed,
            };
            self.set_state(&n, state);
        }
        self.discard(branch);
        let node = self.node_of(fan).map(|n| n.id.clone());
        journal!(self, kind, node.as_deref(), json!({ "slot": slot }));
        let Some(st) = self.fan_state_mut(fan) else {
            return;
        };
        if let Some(r) = st.results.get_mut(slot as usize) {
            *r = Some(output);
        }
        self.fanout_fill(fan);
    }

    /// An error reached branch token `token`: a Map that does not fail on
    /// partial failure records it as the item's result. `true` when absorbed.
    pub(super) fn branch_absorbs(&mut self, token: u64, raised: &Raised) -> bool {
        let Some(t) = self.snap.token(token) else {
            return false;
        };
        let TokenStatus::Branch { slot, .. } = t.status else {
            return false;
        };
        let Some(fan) = t.scope else {
            return false;
        };
        let Some((node, Some(it))) = self.fanout_of(fan).map(|(n, f)| (n, f.items.as_ref())) else {
            return false;
        };
        let Some(st) = self.fan_state(fan) else {
            return false;
        };
        match st.tolerated {
            // Tolerances decide (as on Step Functions), whatever FailOnPartial says.
            Some((count, milli_percent)) => {
                let failed = st.failed.saturating_add(1);
                let total = st.results.len() as u64;
                let over = count.is_some_and(|c| u64::from(failed) > c)
                    || milli_percent
                        .is_some_and(|p| u64::from(failed) * 100_000 > p.saturating_mul(total));
                if over {
                    self.discard(token);
                    journal!(
                        self,
                        "tolerance_exceeded",
                        Some(&node.id),
                        json!({ "failed": failed, "items": total }),
                    );
                    let raised = Raised {
                        code: Code::StatesExceedToleratedFailureThreshold.as_str().to_string(),
                        message: format!(
                            "{failed} of the {total} iterations of `{}` failed, more than it tolerates",
                            node.id
                        ),
                        details: None,
                        failure: None,
                        also: Vec::new(),
                    };
                    self.raise_from(Some(fan), raised, &node.id);
                    return true;
                }
                if let Some(st) = self.fan_state_mut(fan) {
                    st.failed = failed;
                }
            }
            None if it.fail_on_partial => return false,
            None => {}
        }
        let (code, cause) = match &raised.failure {
            Some(f) => (f.code.clone(), f.message.clone()),
            None => (raised.code.clone(), raised.message.clone()),
        };
        self.record(
            fan,
            token,
            slot,
            json!({ "Error": code, "Cause": cause }),
            "iteration_failed",
        );
        true
    }

    /// An error reached fan-out token `token`: a matching retrier with budget
    /// left runs the fan-out again after its backoff. `true` when retried.
    pub(super) fn fanout_retry(&mut self, token: u64, raised: &Raised) -> bool {
        let Some((node, fan)) = self.fanout_of(token) else {
            return false;
        };
        let Some(st) = self.fan_state(token) else {
            return false;
        };
        let (attempt, granted) = (st.attempt, st.granted.clone());
        let names: Vec<&str> = std::iter::once(raised.code.as_str())
            .chain(raised.failure.as_ref().map(|f| f.code.as_str()))
            .chain(raised.also.iter().map(String::as_str))
            .collect();
        let Some((ix, policy)) = fan.retries.iter().enumerate().find(|(_, p)| {
            p.error_equals
                .as_ref()
                .is_none_or(|codes| codes.iter().any(|c| names.contains(&c.as_str())))
        }) else {
            return false;
        };
        let spent = granted.get(ix).copied().unwrap_or(0);
        if spent + 1 >= policy.max_attempts {
            return false;
        }
        // Its continue park goes with the run it belonged to.
        if let Some(p) = self.fan_state_mut(token).and_then(|s| s.resume.take()) {
            self.withdraw(p);
        }
        let children: Vec<u64> = self
            .snap
            .tokens
            .iter()
            .filter(|t| t.scope == Some(token))
            .map(|t| t.id)
            .collect();
        for c in children {
            self.discard(c);
        }
        let delay = policy.delay(spent + 2, self.inputs.draw);
        let (park, _) = self.arm_retry(token, &node.id, attempt + 1, delay, &raised.code);
        let mut granted = granted;
        granted.resize(fan.retries.len().max(granted.len()), 0);
        granted[ix] += 1;
        self.set_fanout_state(
            token,
            FanoutState {
                results: Vec::new(),
                items: Vec::new(),
                items_at: None,
                items_of: None,
                input: Value::Null,
                next: 0,
                attempt: attempt + 1,
                granted,
                backoff: Some(park),
                limit: None,
                failed: 0,
                tolerated: None,
                resume: None,
            },
        );
        true
    }

    /// A fan-out's retry park fell due. `false` when `token` is no fan-out.
    pub(super) fn fanout_retry_due(&mut self, token: u64) -> bool {
        let Some(st) = self.fan_state(token) else {
            return false;
        };
        if st.backoff.is_some() {
            let (attempt, granted) = (st.attempt, st.granted.clone());
            self.fanout_enter(token, attempt, granted);
        }
        true
    }
}

/// The JSON pointer of a `Map`'s items in its raw document `doc`, when the
/// items are an array there as they are: the input selection is all of it
/// or a reference path, no parameters rewrite it, and the items path is the
/// whole input or a reference path. Each step is followed as the reference
/// path would (a name only into an object, an index only into an array, no
/// negative index), so the pointer finds what the path finds.
fn items_pointer(df: &DataFlow, it: &Items, doc: &Value) -> Option<String> {
    use crate::model::{PathRoot, Selection, Step};
    fn follow<'v>(sel: &Selection, mut at: &'v Value, out: &mut String) -> Option<&'v Value> {
        match sel {
            Selection::Whole => Some(at),
            Selection::Empty => None,
            Selection::Path(p) => {
                if p.root != PathRoot::Document {
                    return None;
                }
                for step in p.steps.as_ref()? {
                    out.push('/');
                    at = match (step, at) {
                        (Step::Key(k), Value::Object(m)) => {
                            out.push_str(&k.replace('~', "~0").replace('/', "~1"));
                            m.get(k)?
                        }
                        (Step::Index(i), Value::Array(a)) => {
                            let i = usize::try_from(*i).ok()?;
                            out.push_str(&i.to_string());
                            a.get(i)?
                        }
                        _ => return None,
                    };
                }
                Some(at)
            }
        }
    }
    if df.parameters.is_some() || df.jsonata || it.expr.is_some() {
        return None;
    }
    let mut out = String::new();
    let input = follow(&df.input, doc, &mut out)?;
    follow(&it.path, input, &mut out)?.is_array().then_some(out)
}

/// What a Map reads when it starts: its concurrency limit (`MaxConcurrencyPath`)
/// and its tolerances (failed items; percentage in thousandths of a percent).
/// A value of the wrong kind is `States.Runtime`.
#[allow(clippy::type_complexity)]
fn bounds(
    it: &Items,
    input: &Value,
    context: &Value,
) -> Result<(Option<u32>, Option<(Option<u64>, Option<u64>)>), DocError> {
    let read = |b: &Bound, what: &str, max: f64| -> Result<f64, DocError> {
        let v = match b {
            Bound::Fixed(x) => return Ok(*x),
            Bound::Path(p) => doc::read(p, input, context)?,
        };
        v.as_f64()
            .filter(|x| (0.0..=max).contains(x))
            .ok_or_else(|| {
                DocError::new(
                    Code::StatesRuntime,
                    format!("`{what}` must be a number from 0 to {max}, not {v}"),
                )
            })
    };
    let limit = match &it.max_concurrency_path {
        None => None,
        Some(p) => {
            let v = doc::read(p, input, context)?;
            Some(
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        DocError::new(
                            Code::StatesRuntime,
                            format!(
                                "`MaxConcurrencyPath` `{}` must be a non-negative integer, not {v}",
                                p.text
                            ),
                        )
                    })?,
            )
        }
    };
    let count = match &it.tolerated_count {
        None => None,
        Some(b) => {
            let n = read(b, "ToleratedFailureCount", u32::MAX as f64)?;
            if n.fract() != 0.0 {
                return Err(DocError::new(
                    Code::StatesRuntime,
                    format!("`ToleratedFailureCount` must be an integer, not {n}"),
                ));
            }
            Some(n as u64)
        }
    };
    let percent = match &it.tolerated_percentage {
        None => None,
        Some(b) => Some((read(b, "ToleratedFailurePercentage", 100.0)? * 1000.0).round() as u64),
    };
    let tolerated = (count.is_some() || percent.is_some()).then_some((count, percent));
    Ok((limit, tolerated))
}
