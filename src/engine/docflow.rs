//! The token walk for nodes with a [`DataFlow`]: they read and rewrite the
//! document their token carries (see `model::document`) instead of the
//! instance variables. `machine.rs` and `outcome.rs` call in here through
//! small hooks; a node without a data flow never reaches this file.
//!
//! The instance variables mirror the document of the last top-level token
//! that entered a node (so `inspect` shows it and a `from-failure` retry
//! restarts from the failed node's input), and at the end the final output
//! (an object as it is; any other value as `{"output": value}`).

use super::choice;
use super::document::{self as doc, DocError, Draws, Scope};
use super::machine::{Machine, Raised};
use super::snapshot::{NodeState, Park, ParkKind, TokenStatus};
use crate::codes::Code;
use crate::model::{DataFlow, EndKind, Node, NodeKind, ResultPath, TimerFrom};
use serde_json::{json, Map, Value};

impl Machine<'_> {
    /// The context object (`$$`) `token` sees at `node`.
    pub(super) fn context_of(&self, token: u64, node: &Node, retry_count: u32) -> Value {
        let mut item = None;
        let mut cur = self.snap.token(token);
        while let Some(t) = cur {
            if let TokenStatus::Branch {
                slot,
                item: Some(v),
            } = &t.status
            {
                item = Some(json!({ "Item": { "Index": slot, "Value": v } }));
                break;
            }
            cur = t.scope.and_then(|s| self.snap.token(s));
        }
        let mut context = json!({
            "Execution": {
                "Id": self.snap.instance_id,
                "Name": self.snap.instance_id,
                "StartTime": self.snap.started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            },
            "StateMachine": {
                "Id": self.snap.process_id,
                "Name": self.process.name.clone().unwrap_or_else(|| self.process.id.clone()),
            },
            "State": {
                "Name": node.id,
                "EnteredTime": self.inputs.now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "RetryCount": retry_count,
            },
        });
        // A copy of the whole start document: only for a node that may
        // read it (context_reads.rs).
        if self.reads_execution_input(node) {
            context["Execution"]["Input"] = doc::input_document(&self.snap.input);
        }
        if let Some(m) = item {
            context["Map"] = m;
        }
        self.with_vars(token, &mut context);
        context
    }

    pub(super) fn draws(&self, token: u64) -> Draws {
        Draws::new(
            &self.snap.instance_id,
            self.inputs.draw,
            self.snap
                .next_journal
                .wrapping_mul(1_000_003)
                .wrapping_add(token),
        )
    }

    pub(super) fn doc_of(&self, token: u64) -> Value {
        self.snap
            .token(token)
            .and_then(|t| t.doc.clone())
            .unwrap_or_else(|| doc::input_document(&self.snap.variables))
    }

    fn set_doc(&mut self, token: u64, value: Value) {
        if let Some(t) = self.snap.token_mut(token) {
            t.doc = Some(value);
        }
    }

    /// Mirror a top-level document into the instance variables.
    fn mirror(&mut self, token: u64, value: &Value) {
        if self.snap.token(token).is_some_and(|t| t.scope.is_none()) {
            self.snap.variables = super::snapshot::mirror_of(value);
        }
    }

    /// Raise a data-flow error from `token` at `node` (its catchers see it).
    pub(super) fn raise_doc_error(&mut self, token: u64, node: &Node, e: DocError) {
        journal!(
            self,
            "data_flow_failed",
            Some(&node.id),
            json!({ "code": e.code.as_str(), "message": e.message }),
        );
        let raised = Raised {
            code: e.code.as_str().to_string(),
            message: e.message,
            details: None,
            failure: None,
            also: Vec::new(),
        };
        if matches!(
            node.kind,
            NodeKind::ServiceTask(_) | NodeKind::Fanout(_) | NodeKind::CallProcess { .. }
        ) {
            self.raise_from(Some(token), raised, &node.id);
        } else {
            let scope = self.snap.token(token).and_then(|t| t.scope);
            self.discard(token);
            self.raise_from(scope, raised, &node.id);
        }
    }

    /// Enter a node with a data flow. `true` when handled here; `false` lets
    /// the ordinary walk go on (tasks, catch events, starts, boundaries).
    pub(super) fn doc_enter(&mut self, token: u64, node: &Node) -> bool {
        let Some(df) = node.data.as_deref() else {
            return false;
        };
        let raw = self.doc_of(token);
        self.mirror(token, &raw);
        let context = self.context_of(token, node, 0);
        let mut draws = self.draws(token);
        let mut scope = Scope::new(&context, &mut draws);
        let result = match &node.kind {
            NodeKind::Pass { set } => {
                doc::effective_input(df, &raw, &mut scope).and_then(|input| {
                    let result = set.clone().unwrap_or(input);
                    doc::complete(df, raw.clone(), result, &mut scope)
                })
            }
            NodeKind::End(EndKind::None) if df.jsonata => {
                doc::complete(df, raw.clone(), raw.clone(), &mut scope)
            }
            NodeKind::End(EndKind::None) => doc::select(&df.input, raw.clone(), &context)
                .and_then(|v| doc::select(&df.output, v, &context))
                .map(|v| (v, None)),
            NodeKind::End(EndKind::Error { code, message }) => {
                return self.doc_throw(token, node, df, &raw, code, message.as_deref());
            }
            NodeKind::ExclusiveGateway { default } => {
                return self.doc_choose(token, node, df, &raw, *default);
            }
            _ => return false,
        };
        match result {
            Err(e) => self.raise_doc_error(token, node, e),
            Ok((out, vars)) => {
                self.set_doc(token, out);
                self.assign_vars(token, &node.id, vars);
                self.snap.completed.push(node.id.clone());
                match node.kind {
                    NodeKind::End(_) => {
                        // A Succeed state ends its path: SUCCEEDED, as an end
                        // event is (issue 28: it stayed READY).
                        self.set_state(&node.id, NodeState::Succeeded);
                        self.consume(token)
                    }
                    _ => self.leave(token),
                }
            }
        }
        true
    }

    /// An error end whose code and message may be computed from the input.
    fn doc_throw(
        &mut self,
        token: u64,
        node: &Node,
        df: &DataFlow,
        raw: &Value,
        code: &str,
        message: Option<&str>,
    ) -> bool {
        let context = self.context_of(token, node, 0);
        let mut draws = self.draws(token);
        let mut scope = Scope::new(&context, &mut draws);
        let text = |v: Value| match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let code = match &df.error {
            Some(e) => doc::compute(e, raw, &mut scope).map(text),
            None => Ok(code.to_string()),
        };
        let message = match &df.cause {
            Some(e) => doc::compute(e, raw, &mut scope).map(|v| Some(text(v))),
            None => Ok(message.map(str::to_string)),
        };
        let (code, message) = match (code, message) {
            (Ok(c), Ok(m)) => (c, m),
            (Err(e), _) | (_, Err(e)) => {
                self.raise_doc_error(token, node, e);
                return true;
            }
        };
        self.snap.completed.push(node.id.clone());
        let scope = self.snap.token(token).and_then(|t| t.scope);
        self.discard(token);
        let raised = Raised {
            message: message.unwrap_or_else(|| format!("state `{}` failed with {code}", node.id)),
            code,
            details: None,
            failure: None,
            also: Vec::new(),
        };
        self.raise_from(scope, raised, &node.id);
        true
    }

    /// A gateway whose conditions are rules over the input document.
    fn doc_choose(
        &mut self,
        token: u64,
        node: &Node,
        df: &DataFlow,
        raw: &Value,
        default: Option<crate::model::FlowIx>,
    ) -> bool {
        let context = self.context_of(token, node, 0);
        let input = match doc::select(&df.input, raw.clone(), &context) {
            Ok(v) => v,
            Err(e) => {
                self.raise_doc_error(token, node, e);
                return true;
            }
        };
        let mut chosen = None;
        for &f in &node.outgoing {
            if Some(f) == default {
                continue;
            }
            let flow = self.process.flow(f);
            let holds = match &flow.condition {
                None => Ok(true),
                Some(c) => match (c.as_rule(), c.as_jsonata()) {
                    (Some(rule), _) => choice::eval(rule, &input, &context),
                    (None, Some(j)) => {
                        let mut draws = self.draws(token);
                        let mut scope = Scope::new(&context, &mut draws);
                        super::jsonata::eval(j, &input, &mut scope).and_then(|v| match v {
                            Value::Bool(b) => Ok(b),
                            other => Err(DocError::new(
                                Code::StatesQueryEvaluationError,
                                format!(
                                    "the `Condition` {{% {} %}} yielded {}, not a boolean",
                                    j.source(),
                                    doc::kind(&other)
                                ),
                            )),
                        })
                    }
                    (None, None) => c
                        .eval_bool(&self.snap.variables)
                        .map_err(|e| DocError::new(e.code(), e.to_string())),
                },
            };
            match holds {
                Ok(true) => {
                    chosen = Some(f);
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    self.raise_doc_error(token, node, e);
                    return true;
                }
            }
        }
        let Some(f) = chosen.or(default) else {
            let e = DocError::new(
                Code::StatesNoChoiceMatched,
                format!(
                    "no choice rule of `{}` matched and it has no default",
                    node.id
                ),
            );
            self.raise_doc_error(token, node, e);
            return true;
        };
        let mut draws = self.draws(token);
        let mut scope = Scope::new(&context, &mut draws);
        let (out, vars) = match doc::complete(df, input.clone(), input, &mut scope) {
            Ok(v) => v,
            Err(e) => {
                self.raise_doc_error(token, node, e);
                return true;
            }
        };
        self.assign_vars(token, &node.id, vars);
        self.snap.completed.push(node.id.clone());
        self.set_state(&node.id, NodeState::Succeeded);
        let scope = self.snap.token(token).and_then(|t| t.scope);
        self.discard(token);
        self.spawn_doc(self.process.flow(f).target, scope, Some(f), Some(out));
        true
    }

    /// The input of a task attempt (`None`: an error was raised instead).
    pub(super) fn doc_task_input(
        &mut self,
        token: u64,
        node: &Node,
        attempt: u32,
    ) -> Option<Value> {
        let df = node.data.as_deref()?;
        let raw = self.doc_of(token);
        if attempt == 1 {
            self.mirror(token, &raw);
        }
        let context = self.context_of(token, node, attempt.saturating_sub(1));
        let mut draws = self.draws(token);
        let mut scope = Scope::new(&context, &mut draws);
        match doc::effective_input(df, &raw, &mut scope) {
            Ok(v) => Some(v),
            Err(e) => {
                self.raise_doc_error(token, node, e);
                None
            }
        }
    }

    /// A task of `node` completed with `output`.
    pub(super) fn doc_task_completed(&mut self, token: u64, node: &Node, output: Value) {
        let Some(df) = node.data.as_deref() else {
            return;
        };
        let raw = self.doc_of(token);
        let context = self.context_of(token, node, 0);
        let mut draws = self.draws(token);
        let mut scope = Scope::new(&context, &mut draws);
        match doc::complete(df, raw, output, &mut scope) {
            Ok((out, vars)) => {
                self.set_doc(token, out);
                self.assign_vars(token, &node.id, vars);
                self.complete_task(token, &node.id);
            }
            Err(e) => self.raise_doc_error(token, node, e),
        }
    }

    /// A park of a document node fired (a Wait's timer or event): its output
    /// becomes the token's document. `false` when the node has no data flow.
    pub(super) fn doc_resumed(
        &mut self,
        token: u64,
        node: &Node,
        park: &Park,
        variables: Map<String, Value>,
    ) -> bool {
        let Some(df) = node.data.as_deref() else {
            return false;
        };
        if !matches!(park.kind, ParkKind::Timer | ParkKind::Message)
            || !matches!(node.kind, NodeKind::Catch(_))
        {
            return true;
        }
        let raw = self.doc_of(token);
        let context = self.context_of(token, node, 0);
        let mut draws = self.draws(token);
        let mut scope = Scope::new(&context, &mut draws);
        // A wait passes its effective input on (with an event's data at its result path).
        let out = doc::select(&df.input, raw, &context).and_then(|input| {
            if park.kind == ParkKind::Message {
                doc::complete(df, input, Value::Object(variables), &mut scope)
            } else {
                doc::complete(df, input.clone(), input, &mut scope)
            }
        });
        match out {
            Ok((v, vars)) => {
                self.set_doc(token, v);
                self.assign_vars(token, &node.id, vars);
            }
            Err(e) => {
                // The park is gone; the wait fails where it stands.
                if let Some(t) = self.snap.token_mut(token) {
                    t.status = TokenStatus::Ready;
                }
                self.raise_doc_error(token, node, e);
            }
        }
        true
    }

    /// The document a catching boundary passes on: `{Error, Cause}` placed
    /// into the activity's input at the boundary's result path. At `$` (the
    /// default) they are *merged* into the input, as seed 004 says ("merged
    /// at ResultPath (default $)"), where Step Functions would replace the
    /// input with them; an input that is not an object is replaced (there
    /// is nothing to merge into). docs/states.md, "Where Sutra departs".
    pub(super) fn caught_doc(
        &mut self,
        activity: u64,
        boundary: &Node,
        raised: &Raised,
    ) -> Result<Option<Value>, DocError> {
        let Some(df) = boundary.data.as_deref() else {
            return Ok(self.snap.token(activity).and_then(|t| t.doc.clone()));
        };
        let raw = self.doc_of(activity);
        let (code, cause) = match &raised.failure {
            Some(f) => (f.code.clone(), f.message.clone()),
            None => (raised.code.clone(), raised.message.clone()),
        };
        let error_output = json!({ "Error": code, "Cause": cause });
        if df.jsonata || df.assign.is_some() {
            // A catcher's `Assign` (and JSONata `Output`) see the error
            // (`$states.errorOutput`; `$` in a JSONPath `Assign`).
            let context = self.context_of(activity, boundary, 0);
            let mut draws = self.draws(activity);
            let mut scope = Scope::new(&context, &mut draws);
            scope.error_output = Some(error_output.clone());
            let vars = if df.jsonata {
                doc::assign(df, &raw, &mut scope)?
            } else {
                doc::assign(df, &error_output, &mut scope)?
            };
            let out = match (&df.output_template, df.jsonata) {
                (Some(t), _) => Some(doc::template(t, &raw, &mut scope)?),
                (None, true) => Some(error_output.clone()),
                (None, false) => None,
            };
            self.assign_vars(activity, &boundary.id, vars);
            if let Some(out) = out {
                return Ok(Some(out));
            }
        }
        let raw = match (&df.result_path, raw) {
            (ResultPath::Replace, Value::Object(mut input)) => {
                input.insert("Error".into(), Value::String(code));
                input.insert("Cause".into(), Value::String(cause));
                return Ok(Some(Value::Object(input)));
            }
            (_, raw) => raw,
        };
        doc::place(&df.result_path, raw, error_output).map(Some)
    }

    /// A token with a document ends: at top level its document is the output.
    pub(super) fn doc_consumed(&mut self, token: u64) {
        if let Some(d) = self.snap.token(token).and_then(|t| t.doc.clone()) {
            self.mirror(token, &d);
        }
        self.branch_output(token);
    }

    /// Arm a timer whose due time the document gives.
    pub(super) fn timer_from_park(
        &mut self,
        token: u64,
        node: &Node,
        from: &TimerFrom,
    ) -> Option<u64> {
        let raw = self.doc_of(token);
        let context = self.context_of(token, node, 0);
        let input = match node.data.as_deref() {
            Some(df) => doc::select(&df.input, raw, &context),
            None => Ok(raw),
        };
        let mut draws = self.draws(token);
        let mut scope = Scope::new(&context, &mut draws);
        let due = input.and_then(|input| match from {
            TimerFrom::Seconds(p) => {
                let v = doc::compute(p, &input, &mut scope)?;
                // Step Functions reads an integer (a long): 1.5 and -1 are refused.
                let secs = v.as_u64().ok_or_else(|| {
                    DocError::new(
                        Code::StatesRuntime,
                        format!(
                            "`{}` must be a non-negative integer number of seconds, not {v}",
                            p.text()
                        ),
                    )
                })?;
                let d = chrono::Duration::seconds(secs.min(3_200_000_000) as i64);
                Ok(self
                    .inputs
                    .now
                    .checked_add_signed(d)
                    .unwrap_or(self.inputs.now))
            }
            TimerFrom::Timestamp(p) => {
                let v = doc::compute(p, &input, &mut scope)?;
                v.as_str().and_then(choice::timestamp).ok_or_else(|| {
                    DocError::new(
                        Code::StatesRuntime,
                        format!("`{}` must be an RFC 3339 timestamp, not {v}", p.text()),
                    )
                })
            }
        });
        let due = match due {
            Ok(d) => d,
            Err(e) => {
                self.raise_doc_error(token, node, e);
                return None;
            }
        };
        journal!(self, "timer_armed", Some(&node.id), json!({ "due": due }));
        Some(self.arm(Park {
            kind: ParkKind::Timer,
            token,
            node: node.id.clone(),
            due: Some(due),
            message: None,
            cycle: None,
        }))
    }
}
