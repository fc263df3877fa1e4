//! Process calls (`NodeKind::CallProcess`: the States language's
//! `InvokeFlow`, a BPMN call activity): the node starts a child instance of
//! another deployed process of the same tenant and waits for it durably.
//!
//! - Entering the node (or re-entering it after a backoff) arms a **child
//!   park** — due at the call's timeout, or never — and emits
//!   [`Effect::StartChild`] with a child id derived from the instance id
//!   and the park ([`child_id`]): the runtime creates the child in the same
//!   transaction as this step, so a child start is never lost nor doubled.
//! - The child's end comes back as [`Event::ChildEnded`] with a
//!   [`ChildOutcome`]: COMPLETED is a completion (the child's output is the
//!   node's result, through its data flow like a task's output); any other
//!   end is a failed attempt of the node, named after the child's error,
//!   that the node's retriers judge (each retry starts a fresh child) and
//!   its catchers catch.
//! - The child park firing without an outcome is the call's timeout
//!   (`SUTRA.RUNTIME.CHILD.TIMEOUT`): the child is cancelled
//!   ([`Effect::CancelChild`]) and the node fails like on a child failure.
//! - A node token removed while its child runs (a cancel, an interrupting
//!   boundary, the instance's end) cancels the child (`Machine::discard`).
//!
//! Invariant: the child park leaves with its token like every park, so a
//! child end whose park is gone changes nothing (the event is refused).

use super::machine::Machine;
use super::outcome::{failure_names, Failure};
use super::snapshot::{NodeState, TaskPhase, TaskState};
use super::{
    vars, AttemptRecord, Effect, EngineError, InstanceError, InstanceState, Park, ParkKind,
    Snapshot, TokenStatus,
};
use crate::codes::{Code, ErrorClass};
use crate::model::{Node, NodeKind, RetryPolicy};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Instance ids are at most this long (the API's path ids).
const MAX_ID: usize = 128;

/// The id of the child started through park `park` of instance `parent`:
/// `<parent>.<park>`, or a digest of it when that would be over 128
/// characters (deeply nested children).
pub fn child_id(parent: &str, park: u64) -> String {
    let id = format!("{parent}.{park}");
    if id.len() <= MAX_ID {
        return id;
    }
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(id.as_bytes()));
    format!("c{}", &digest[..40])
}

/// A child instance to create with this step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildStart {
    /// The calling token and node.
    pub token: u64,
    pub node: String,
    /// The child park awaiting it.
    pub park: u64,
    /// The child's instance id ([`child_id`]).
    pub instance: String,
    /// The process to start (its ACTIVE deployment in the same tenant).
    pub process: String,
    /// The child's variables.
    pub input: Map<String, Value>,
    /// The call's attempt (1-based).
    pub attempt: u32,
    /// A pinned deployment version of `process` (`None`: the ACTIVE one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
}

/// How a child instance ended, as its parent receives it (also stored on
/// the parent's child park, so a restart between the child's end and the
/// parent's step still delivers it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildOutcome {
    pub instance: String,
    /// COMPLETED, FAILED, TERMINATED or COMPENSATED.
    pub state: InstanceState,
    /// Its final variables (its output).
    #[serde(default)]
    pub output: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<InstanceError>,
    /// The escalations it threw and did not catch (`Snapshot::escalations`):
    /// a BPMN call activity raises them when the child ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalations: Vec<String>,
}

impl ChildOutcome {
    /// The outcome of a terminal child snapshot.
    pub fn of(snap: &Snapshot) -> ChildOutcome {
        ChildOutcome {
            instance: snap.instance_id.clone(),
            state: snap.state,
            output: snap.variables.clone(),
            error: snap.error.clone(),
            escalations: snap.escalations.clone(),
        }
    }

    /// A child that could not be started (or was refused): it failed with `code`.
    pub fn refused(instance: &str, code: Code, message: impl Into<String>) -> ChildOutcome {
        ChildOutcome {
            instance: instance.to_string(),
            state: InstanceState::Failed,
            output: Map::new(),
            error: Some(InstanceError {
                code: code.as_str().to_string(),
                message: message.into(),
                node: None,
                cause: None,
                compensation_failures: Vec::new(),
            }),
            escalations: Vec::new(),
        }
    }

    /// The uncaught business error (a BPMN error: its own code, no engine
    /// wrapper) the child FAILED with, if that is how it ended.
    fn business_error(&self) -> Option<(&str, &str)> {
        if self.state != InstanceState::Failed {
            return None;
        }
        let e = self.error.as_ref().filter(|e| e.cause.is_none())?;
        match Code::parse(&e.code) {
            None | Some(Code::BpmnUnnamedError) => Some((e.code.as_str(), e.message.as_str())),
            Some(_) => None,
        }
    }

    /// The failure this outcome is for its parent: (name, message, the
    /// child's own code when the name is its cause). `None` when it completed.
    fn failure(&self) -> Option<(String, String, Option<String>)> {
        if self.state == InstanceState::Completed {
            return None;
        }
        if self.state == InstanceState::Terminated {
            return Some((
                Code::ChildTerminated.as_str().to_string(),
                format!("child instance {} was cancelled", self.instance),
                None,
            ));
        }
        let Some(e) = &self.error else {
            return Some((
                Code::RuntimeTaskFailed.as_str().to_string(),
                format!(
                    "child instance {} ended {}",
                    self.instance,
                    self.state.as_str()
                ),
                None,
            ));
        };
        // The error name the child's own catchers would have seen: the
        // cause of an engine wrapper (a spent retry budget), else the code.
        Some(match &e.cause {
            Some(c) => (c.code.clone(), c.message.clone(), Some(e.code.clone())),
            None => (e.code.clone(), e.message.clone(), None),
        })
    }
}

/// Failures raised on the parent's side of a call: retrying cannot help.
const REFUSALS: [Code; 4] = [
    Code::ChildProcessNotFound,
    Code::ChildDepthExceeded,
    Code::ChildInputInvalid,
    Code::ChildTerminated,
];

impl<'a> Machine<'a> {
    /// The process call at `token`: its node, process, retriers, timeout.
    fn call_of(&self, token: u64) -> Option<(&'a Node, &'a str, &'a [RetryPolicy])> {
        let node = self.node_of(token)?;
        match &node.kind {
            NodeKind::CallProcess {
                process, retries, ..
            } => Some((node, process.as_str(), retries.as_slice())),
            _ => None,
        }
    }

    /// Start attempt `attempt` of the process call at `token`: a child
    /// park, a fresh child.
    pub(super) fn start_child(&mut self, token: u64, attempt: u32, granted: Vec<u32>) {
        let Some(node) = self.node_of(token) else {
            return;
        };
        let NodeKind::CallProcess {
            process,
            timeout,
            version,
            io,
            ..
        } = &node.kind
        else {
            return;
        };
        let input = if node.data.is_some() {
            match self.doc_task_input(token, node, attempt) {
                Some(Value::Object(m)) => m,
                Some(other) => {
                    let e = super::document::DocError::new(
                        Code::ChildInputInvalid,
                        format!(
                            "the input of `{}` is {}: a child flow starts with a JSON object",
                            node.id,
                            super::document::kind(&other)
                        ),
                    );
                    self.raise_doc_error(token, node, e);
                    return;
                }
                None => return,
            }
        } else {
            let selected = match &io.input_path {
                None => Ok(Value::Object(self.vars_of(token).into_owned())),
                Some(p) => self.vars_get(token, p),
            };
            match selected {
                Ok(Value::Object(m)) => m,
                Ok(other) => {
                    self.fail_code(
                        Code::ChildInputInvalid,
                        format!(
                            "the input of `{}` is {}: a child flow starts with a JSON object",
                            node.id,
                            super::document::kind(&other)
                        ),
                        Some(&node.id),
                    );
                    return;
                }
                Err(e) => {
                    self.fail_code(
                        Code::VariablePath,
                        format!("input of `{}`: {e}", node.id),
                        Some(&node.id),
                    );
                    return;
                }
            }
        };
        let due = timeout.as_ref().map(|t| {
            let d = chrono::Duration::from_std(t.as_std()).unwrap_or(chrono::Duration::MAX);
            self.inputs
                .now
                .checked_add_signed(d)
                .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
        });
        let park = self.arm(Park {
            kind: ParkKind::Child,
            token,
            node: node.id.clone(),
            due,
            message: None,
            cycle: None,
        });
        let instance = child_id(&self.snap.instance_id, park);
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Task(TaskState {
                attempt,
                phase: TaskPhase::Child {
                    park,
                    instance: instance.clone(),
                },
                granted,
                since: self.inputs.now,
            });
        }
        self.set_state(&node.id, NodeState::Running);
        journal!(
            self,
            "child_started",
            Some(&node.id),
            json!({ "attempt": attempt, "token": token, "process": process, "child": instance, "due": due }),
        );
        self.effects.push(Effect::StartChild(ChildStart {
            token,
            node: node.id.clone(),
            park,
            instance,
            process: process.clone(),
            input,
            attempt,
            version: *version,
        }));
    }

    /// The token awaiting child park `park`, with its task state.
    fn awaiting(&self, park: u64) -> Option<(u64, TaskState, String)> {
        self.snap.tokens.iter().find_map(|t| match &t.status {
            TokenStatus::Task(s) => match &s.phase {
                TaskPhase::Child { park: p, instance } if *p == park => {
                    Some((t.id, s.clone(), instance.clone()))
                }
                _ => None,
            },
            _ => None,
        })
    }

    /// The child awaited on park `park` ended.
    pub(super) fn child_ended(
        &mut self,
        park: u64,
        outcome: ChildOutcome,
    ) -> Result<(), EngineError> {
        let Some((token, state, instance)) = self.awaiting(park) else {
            return Err(EngineError {
                code: Code::InstanceState,
                message: format!("no process call awaits a child on park {park}"),
            });
        };
        if outcome.instance != instance || !outcome.state.is_terminal() {
            return Err(EngineError {
                code: Code::InstanceState,
                message: format!(
                    "park {park} awaits child {instance}, not a {} end of {}",
                    outcome.state.as_str(),
                    outcome.instance
                ),
            });
        }
        self.withdraw(park);
        self.settle_child(token, state, outcome);
        Ok(())
    }

    /// The child park `seq` of `token` fired (and is withdrawn): the call's
    /// timeout elapsed before the child ended.
    pub(super) fn child_timed_out(&mut self, token: u64, seq: u64) {
        let Some(TokenStatus::Task(state)) = self.snap.token(token).map(|t| t.status.clone())
        else {
            return;
        };
        let TaskPhase::Child { park, instance } = &state.phase else {
            return;
        };
        if *park != seq {
            return;
        }
        let Some((node, _, _)) = self.call_of(token) else {
            return;
        };
        let message = format!(
            "child instance {instance} of `{}` did not end within its timeout",
            node.id
        );
        self.effects.push(Effect::CancelChild {
            instance: instance.clone(),
            reason: message.clone(),
        });
        let outcome = ChildOutcome::refused(instance, Code::ChildTimeout, message);
        self.settle_child(token, state.clone(), outcome);
    }

    /// Judge a child's end: a completion, or a failed attempt of the call.
    fn settle_child(&mut self, token: u64, state: TaskState, outcome: ChildOutcome) {
        let Some((node, _, retries)) = self.call_of(token) else {
            return;
        };
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Ready;
        }
        let business = matches!(
            node.kind,
            NodeKind::CallProcess {
                business_errors: true,
                ..
            }
        );
        if let Some((code, message)) = outcome.business_error().filter(|_| business) {
            // The child's BPMN error is the call's: error boundaries catch it,
            // no retry judges it.
            let (code, message) = (code.to_string(), message.to_string());
            self.effects.push(Effect::RecordAttempt(AttemptRecord {
                token,
                node: node.id.clone(),
                attempt: state.attempt,
                started_at: state.since,
                ended_at: self.inputs.now,
                outcome: "business_error".to_string(),
                code: Some(code.clone()),
                class: None,
                message: Some(message.clone()),
                item: self.attempt_item(token),
            }));
            journal!(
                self,
                "child_ended",
                Some(&node.id),
                json!({ "attempt": state.attempt, "child": outcome.instance, "state": outcome.state.as_str(), "outcome": "business_error", "code": code, "message": message }),
            );
            self.raise_from(
                Some(token),
                super::machine::Raised {
                    code,
                    message,
                    details: None,
                    failure: None,
                    also: Vec::new(),
                },
                &node.id,
            );
            return;
        }
        let failure = outcome.failure();
        let (label, code, message) = match &failure {
            None => ("completed", None, None),
            Some((name, message, _)) => ("failed", Some(name.clone()), Some(message.clone())),
        };
        // The class the call's retriers judge: the code's own, else internal.
        let known = code.as_deref().and_then(Code::parse);
        let class = known.map_or(ErrorClass::Internal, Code::class);
        self.effects.push(Effect::RecordAttempt(AttemptRecord {
            token,
            node: node.id.clone(),
            attempt: state.attempt,
            started_at: state.since,
            ended_at: self.inputs.now,
            outcome: label.to_string(),
            code: code.clone(),
            class: failure.is_some().then_some(class),
            message: message.clone(),
            item: self.attempt_item(token),
        }));
        journal!(
            self,
            "child_ended",
            Some(&node.id),
            json!({ "attempt": state.attempt, "child": outcome.instance, "state": outcome.state.as_str(), "outcome": label, "code": code, "message": message }),
        );
        let Some((name, message, wrapper)) = failure else {
            if business {
                // The child's uncaught escalations reach the call activity
                // (engine::escalation): its boundaries, then outward.
                for code in &outcome.escalations {
                    if !self.escalation_boundary(token, node, code, &node.id) {
                        let scope = self.snap.token(token).and_then(|t| t.scope);
                        self.route_escalation(scope, code, &node.id);
                    }
                    if self.snap.token(token).is_none() || self.snap.state.is_terminal() {
                        return; // an interrupting catcher ended the call
                    }
                }
            }
            let output = Value::Object(outcome.output);
            if node.data.is_some() {
                self.doc_task_completed(token, node, output);
                return;
            }
            let result_path = match &node.kind {
                NodeKind::CallProcess { io, .. } => io.result_path.as_deref(),
                _ => None,
            };
            if let Err(e) = vars::merge_output(self.vars_home(token), &node.id, result_path, output)
            {
                self.fail_code(
                    Code::VariablePath,
                    format!("output of `{}`: {e}", node.id),
                    Some(&node.id),
                );
                return;
            }
            self.complete_task(token, &node.id);
            return;
        };
        let retryable = !known.is_some_and(|c| REFUSALS.contains(&c));
        // A node may raise engine codes under names of its own (States.Timeout, ...).
        let name = match &node.data {
            Some(df) => df.error_name(&name).to_string(),
            None => name,
        };
        let mut also = failure_names(node, Some(class));
        also.extend(wrapper);
        self.judge_failure(
            token,
            &node.id,
            (retries, true),
            &state,
            Failure {
                code: name,
                message,
                class,
                retryable,
                also,
                retry_after_ms: None,
            },
        );
    }
}

#[cfg(test)]
mod tests;
