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

use super::document::{self as doc, DocError, Scope};
use super::machine::{Machine, Raised};
use super::snapshot::{FanoutState, NodeState, TokenStatus};
use crate::codes::Code;
use crate::model::{DataFlow, Fanout, Node, NodeKind, StartTrigger};
use serde_json::{json, Value};

impl<'a> Machine<'a> {
    fn fanout_of(&self, token: u64) -> Option<(&'a Node, &'a Fanout)> {
        let node = self.node_of(token)?;
        match &node.kind {
            NodeKind::Fanout(f) => Some((node, f)),
            _ => None,
        }
    }

    fn fanout_state(&self, token: u64) -> Option<FanoutState> {
        match self.snap.token(token).map(|t| &t.status) {
            Some(TokenStatus::Fanout(s)) => Some(s.clone()),
            _ => None,
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
        let df = node.data.as_deref().cloned().unwrap_or_default();
        let raw = self.doc_of(token);
        let context = self.context_of(token, node, attempt.saturating_sub(1));
        let mut draws = self.draws(token);
        let mut scope = Scope {
            context: &context,
            draws: &mut draws,
        };
        let input = match doc::effective_input(&df, &raw, &mut scope) {
            Ok(v) => v,
            Err(e) => return self.raise_doc_error(token, node, e),
        };
        let (count, items) = match &fan.items {
            None => (fan.branches.len(), Vec::new()),
            Some(it) => match doc::select(&it.path, input.clone(), &context) {
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
        if attempt == 1 {
            self.arm_boundaries(token, node);
        }
        self.journal(
            "fanout_started",
            Some(&node.id),
            json!({ "branches": count, "attempt": attempt }),
        );
        self.set_fanout_state(
            token,
            FanoutState {
                results: vec![None; count],
                items,
                input,
                next: 0,
                attempt,
                granted,
                backoff: None,
            },
        );
        self.fanout_fill(token);
    }

    /// Start branches while the concurrency allows; finish when all ended.
    fn fanout_fill(&mut self, token: u64) {
        let Some((node, fan)) = self.fanout_of(token) else {
            return;
        };
        let Some(mut st) = self.fanout_state(token) else {
            return;
        };
        let limit = match &fan.items {
            Some(it) if it.max_concurrency > 0 => it.max_concurrency as usize,
            _ => usize::MAX,
        };
        let mut running = self
            .snap
            .tokens
            .iter()
            .filter(|t| t.scope == Some(token) && matches!(t.status, TokenStatus::Branch { .. }))
            .count();
        while (st.next as usize) < st.results.len() && running < limit {
            let slot = st.next;
            st.next += 1;
            running += 1;
            self.set_fanout_state(token, st.clone());
            if !self.start_branch(token, node, fan, &st, slot) {
                return;
            }
            match self.fanout_state(token) {
                Some(s) => st = s,
                None => return,
            }
        }
        if st.results.iter().all(Option::is_some) {
            self.fanout_finish(token, node, st);
        }
    }

    fn start_branch(
        &mut self,
        token: u64,
        node: &Node,
        fan: &Fanout,
        st: &FanoutState,
        slot: u32,
    ) -> bool {
        let i = slot as usize;
        let branch = if fan.items.is_some() {
            fan.branches.first()
        } else {
            fan.branches.get(i)
        };
        let Some(&branch) = branch else {
            return false;
        };
        let (input, item) = match &fan.items {
            None => (st.input.clone(), None),
            Some(it) => {
                let item = st.items.get(i).cloned().unwrap_or(Value::Null);
                let input = match &it.selector {
                    None => Ok(item.clone()),
                    Some(t) => {
                        let mut context = self.context_of(token, node, 0);
                        context["Map"] = json!({ "Item": { "Index": slot, "Value": item } });
                        let mut draws = self.draws(token);
                        let mut scope = Scope {
                            context: &context,
                            draws: &mut draws,
                        };
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
        self.journal(
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

    fn fanout_finish(&mut self, token: u64, node: &Node, st: FanoutState) {
        let results = Value::Array(
            st.results
                .into_iter()
                .map(Option::unwrap_or_default)
                .collect(),
        );
        let df: DataFlow = node.data.as_deref().cloned().unwrap_or_default();
        let raw = self.doc_of(token);
        let context = self.context_of(token, node, 0);
        let mut draws = self.draws(token);
        let mut scope = Scope {
            context: &context,
            draws: &mut draws,
        };
        match doc::finish(&df, raw, results, &mut scope) {
            Ok(out) => {
                self.journal("fanout_completed", Some(&node.id), json!({}));
                if let Some(t) = self.snap.token_mut(token) {
                    t.doc = Some(out);
                }
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
        self.journal(kind, node.as_deref(), json!({ "slot": slot }));
        let Some(mut st) = self.fanout_state(fan) else {
            return;
        };
        if let Some(r) = st.results.get_mut(slot as usize) {
            *r = Some(output);
        }
        self.set_fanout_state(fan, st);
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
        let absorbs = self
            .fanout_of(fan)
            .and_then(|(_, f)| f.items.as_ref())
            .is_some_and(|it| !it.fail_on_partial);
        if !absorbs {
            return false;
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
        let Some(st) = self.fanout_state(token) else {
            return false;
        };
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
        let spent = st.granted.get(ix).copied().unwrap_or(0);
        if spent + 1 >= policy.max_attempts {
            return false;
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
        let (park, _) = self.arm_retry(token, &node.id, st.attempt + 1, delay, &raised.code);
        let mut granted = st.granted.clone();
        granted.resize(fan.retries.len().max(granted.len()), 0);
        granted[ix] += 1;
        self.set_fanout_state(
            token,
            FanoutState {
                results: Vec::new(),
                items: Vec::new(),
                input: Value::Null,
                next: 0,
                attempt: st.attempt + 1,
                granted,
                backoff: Some(park),
            },
        );
        true
    }

    /// A fan-out's retry park fell due. `false` when `token` is no fan-out.
    pub(super) fn fanout_retry_due(&mut self, token: u64) -> bool {
        let Some(st) = self.fanout_state(token) else {
            return false;
        };
        if st.backoff.is_some() {
            self.fanout_enter(token, st.attempt, st.granted);
        }
        true
    }
}
