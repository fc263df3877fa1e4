//! Judging an attempt's outcome: completion merges output and moves on; a
//! business error routes to its boundary and never consumes a retry; a failure
//! is retried as a durable park while the policy allows, else it fails the
//! instance with `SUTRA.RUNTIME.RETRY.EXHAUSTED` / `SUTRA.RUNTIME.TASK_FAILED`.

use super::machine::{Machine, Raised};
use super::snapshot::{NodeState, TaskPhase, TaskState, Token};
use super::{
    vars, AttemptItem, AttemptRecord, Cause, Effect, Park, ParkKind, TaskOutcome, TokenStatus,
};
use crate::codes::{Code, ErrorClass};
use crate::model::{Node, NodeKind, OnTimeout, RetryPolicy};
use serde_json::json;

/// A failure as the retriers judge it.
pub(super) struct Failure {
    /// The error name (after the node's renames).
    pub code: String,
    pub message: String,
    pub class: ErrorClass,
    pub retryable: bool,
    /// Further names it answers to.
    pub also: Vec<String>,
    /// The counterpart's `Retry-After`: the next delay (capped) when a retrier applies.
    pub retry_after_ms: Option<u64>,
}

/// What the retry policy says about a failure.
enum Verdict {
    Retry {
        retrier: usize,
        delay: std::time::Duration,
    },
    /// No retry: `why` explains; `policy` tells whether a policy existed.
    Stop { why: String, policy: bool },
}

impl Machine<'_> {
    pub(super) fn attempt_ended(&mut self, token: u64, attempt: u32, outcome: TaskOutcome) {
        let state = match self.snap.token(token).map(|t| &t.status) {
            Some(TokenStatus::Task(s))
                if s.attempt == attempt
                    && matches!(
                        s.phase,
                        TaskPhase::Running { .. } | TaskPhase::Calling { .. }
                    ) =>
            {
                s.clone()
            }
            _ => {
                journal!(
                    self,
                    "attempt_result_discarded",
                    None,
                    json!({ "token": token, "attempt": attempt, "reason": "the attempt is no longer current" }),
                );
                return;
            }
        };
        let Some(node) = self.node_of(token) else {
            return;
        };
        let NodeKind::ServiceTask(task) = &node.kind else {
            return;
        };
        if let TaskPhase::Running { park } | TaskPhase::Calling { park, .. } = state.phase {
            self.withdraw(park);
        }
        // The attempt is over: nothing of this token is in flight any more.
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Ready;
        }
        let (code, class, message) = match &outcome {
            TaskOutcome::Completed { .. } => (None, None, None),
            TaskOutcome::BusinessError { code, message, .. } => {
                (Some(code.clone()), None, Some(message.clone()))
            }
            TaskOutcome::Failed {
                code,
                class,
                message,
                ..
            } => (Some(code.clone()), Some(*class), Some(message.clone())),
        };
        self.effects.push(Effect::RecordAttempt(AttemptRecord {
            token,
            node: node.id.clone(),
            attempt,
            started_at: state.since,
            ended_at: self.inputs.now,
            outcome: outcome.label().to_string(),
            code: code.clone(),
            class,
            message: message.clone(),
            item: self.attempt_item(token),
        }));
        journal!(
            self,
            "attempt_ended",
            Some(&node.id),
            self.with_item(token, json!({ "attempt": attempt, "outcome": outcome.label(), "code": code, "message": message })),
        );
        match outcome {
            TaskOutcome::Completed { output } if node.data.is_some() => {
                self.doc_task_completed(token, node, output);
            }
            TaskOutcome::Completed { output } => {
                let compensable =
                    self.process.compensator(node.ix).is_some() && !self.is_compensating(token);
                if compensable {
                    self.snap.outputs.insert(node.id.clone(), output.clone());
                }
                if let Err(e) = vars::merge_output(
                    self.vars_home(token),
                    &node.id,
                    task.io.result_path.as_deref(),
                    output,
                ) {
                    self.fail(
                        Code::VariablePath.as_str(),
                        format!("output of `{}`: {e}", node.id),
                        Some(&node.id),
                        None,
                    );
                    return;
                }
                self.complete_task(token, &node.id);
            }
            TaskOutcome::BusinessError {
                code,
                message,
                details,
            } => {
                self.raise_from(
                    Some(token),
                    Raised {
                        also: failure_names(node, None),
                        code,
                        message,
                        details,
                        failure: None,
                    },
                    &node.id,
                );
            }
            TaskOutcome::Failed {
                code,
                class,
                retryable,
                message,
                details,
                retry_after_ms,
            } => {
                let timed_out = code == Code::TaskDeadlineExceeded.as_str();
                // A node may raise engine codes under names of its own (ActionFailed, ...).
                let code = match &node.data {
                    Some(df) => df.error_name(&code).to_string(),
                    None => code,
                };
                let also = failure_names(node, Some(class));
                if let (true, Some(t)) = (timed_out, &task.timeout) {
                    match t.on_timeout {
                        OnTimeout::Skip if self.is_compensating(token) => {
                            // A rollback that did not happen is a failed compensation.
                            self.unwind_failure(
                                &code,
                                format!("onTimeout=\"skip\": {message}"),
                                Some(Cause {
                                    code: code.clone(),
                                    message: message.clone(),
                                }),
                            );
                            return;
                        }
                        OnTimeout::Skip => {
                            journal!(
                                self,
                                "task_skipped",
                                Some(&node.id),
                                json!({ "reason": "timeout" }),
                            );
                            self.set_state(&node.id, NodeState::Skipped);
                            self.snap.outputs.remove(&node.id);
                            self.complete_task(token, &node.id);
                            return;
                        }
                        OnTimeout::Fail => {
                            let cause = Cause { code, message };
                            self.give_up(
                                token,
                                &node.id,
                                "onTimeout=\"fail\"".into(),
                                !task.retries.is_empty(),
                                cause,
                                also,
                            );
                            return;
                        }
                        OnTimeout::Error => {
                            let message = format!(
                                "service task `{}` did not finish within its q:timeout of {} (attempt {}): \
                                 a BPMN error with code {code}, caught by an error boundary event whose \
                                 errorRef names that code or by one without errorRef; {message}",
                                node.id, t.duration, state.attempt
                            );
                            self.raise_from(
                                Some(token),
                                Raised {
                                    also: Vec::new(),
                                    code,
                                    message,
                                    details: None,
                                    failure: None,
                                },
                                &node.id,
                            );
                            return;
                        }
                        OnTimeout::Retry => {}
                    }
                }
                let _ = details;
                self.judge_failure(
                    token,
                    &node.id,
                    (&task.retries, task.idempotent),
                    &state,
                    Failure {
                        code,
                        message,
                        class,
                        retryable,
                        also,
                        retry_after_ms,
                    },
                );
            }
        }
    }

    /// A failed attempt (or child) of the activity at `token`: a durable
    /// retry park while a retrier of `policy` (its retriers, whether the
    /// activity may be retried at all) allows, else the activity fails.
    pub(super) fn judge_failure(
        &mut self,
        token: u64,
        node_id: &str,
        policy: (&[RetryPolicy], bool),
        state: &TaskState,
        f: Failure,
    ) {
        let (retries, idempotent) = policy;
        let attempt = state.attempt;
        let verdict = judge(
            retries,
            idempotent,
            state,
            &f.code,
            &f.also,
            f.class,
            f.retryable,
            self.inputs.draw,
        );
        // A `Retry-After` replaces the backoff, within the retrier's maximum delay.
        let verdict = match (verdict, f.retry_after_ms) {
            (Verdict::Retry { retrier, .. }, Some(ms)) => {
                let asked = std::time::Duration::from_millis(ms);
                let max = retries[retrier].max_delay.map(|d| d.as_std());
                Verdict::Retry {
                    retrier,
                    delay: max.map_or(asked, |m| asked.min(m)),
                }
            }
            (v, _) => v,
        };
        match verdict {
            Verdict::Retry { retrier, delay } => {
                let mut granted = state.granted.clone();
                granted.resize(retries.len().max(granted.len()), 0);
                granted[retrier] += 1;
                let (park, due) = self.arm_retry(token, node_id, attempt + 1, delay, &f.code);
                if let Some(t) = self.snap.token_mut(token) {
                    t.status = TokenStatus::Task(TaskState {
                        attempt: attempt + 1,
                        phase: TaskPhase::Backoff { park },
                        granted,
                        since: due,
                    });
                }
            }
            Verdict::Stop { why, policy } => {
                let cause = Cause {
                    code: f.code,
                    message: f.message,
                };
                self.give_up(token, node_id, why, policy, cause, f.also);
            }
        }
    }

    /// Arm the retry park of `token` due `delay` from now and journal it;
    /// returns the park and its due instant.
    /// `data` with `"item": <slot>` when `token` runs inside a Map iteration
    /// or a Parallel branch (its innermost one), so a journal entry names the
    /// item it is about.
    pub(super) fn with_item(&self, token: u64, data: serde_json::Value) -> serde_json::Value {
        tag_item(data, self.item_of(token))
    }

    /// The slot of the innermost Map iteration or Parallel branch `token` runs in.
    pub(super) fn item_of(&self, token: u64) -> Option<u64> {
        self.branch_of(token).map(|(_, slot)| u64::from(slot))
    }

    /// The fan-out item an attempt of `token` runs in (its record's
    /// `item`): the innermost branch token around it, named by its fan-out
    /// token's node and its slot.
    pub(super) fn attempt_item(&self, token: u64) -> Option<AttemptItem> {
        let (branch, index) = self.branch_of(token)?;
        let fan = self.snap.token(branch.scope?)?;
        Some(AttemptItem {
            node: fan.node.clone(),
            index,
        })
    }

    /// The innermost branch token `token` runs in (itself, if it is one)
    /// and its slot.
    fn branch_of(&self, token: u64) -> Option<(&Token, u32)> {
        let mut cur = self.snap.token(token);
        while let Some(t) = cur {
            if let TokenStatus::Branch { slot, .. } = &t.status {
                return Some((t, *slot));
            }
            cur = t.scope.and_then(|s| self.snap.token(s));
        }
        None
    }

    pub(super) fn arm_retry(
        &mut self,
        token: u64,
        node_id: &str,
        next_attempt: u32,
        delay: std::time::Duration,
        code: &str,
    ) -> (u64, chrono::DateTime<chrono::Utc>) {
        let d = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
        let due = self
            .inputs
            .now
            .checked_add_signed(d)
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
        let park = self.arm(Park {
            kind: ParkKind::Retry,
            token,
            node: node_id.to_string(),
            due: Some(due),
            message: None,
            cycle: None,
        });
        journal!(
            self,
            "retry_scheduled",
            Some(node_id),
            self.with_item(token, json!({ "next_attempt": next_attempt, "due": due, "delay_ms": delay.as_millis() as u64, "code": code })),
        );
        (park, due)
    }

    pub(super) fn complete_task(&mut self, token: u64, node_id: &str) {
        if self.is_compensating(token) {
            self.compensator_succeeded(token);
            return;
        }
        self.snap.completed.push(node_id.to_string());
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Ready;
        }
        let boundary = self
            .snap
            .token(token)
            .map(|t| t.boundary_parks.clone())
            .unwrap_or_default();
        for p in boundary {
            self.withdraw(p);
        }
        if let Some(t) = self.snap.token_mut(token) {
            t.boundary_parks.clear();
        }
        self.leave(token);
    }

    /// The policy will not retry: raise RETRY.EXHAUSTED (a policy existed) or
    /// TASK_FAILED (none did), with the last attempt as the cause.
    pub(super) fn give_up(
        &mut self,
        token: u64,
        node_id: &str,
        why: String,
        policy: bool,
        cause: Cause,
        also: Vec<String>,
    ) {
        let code = if policy {
            Code::RetryExhausted
        } else {
            Code::RuntimeTaskFailed
        };
        let message = format!(
            "task `{node_id}` failed: {why}; last error {}: {}",
            cause.code, cause.message
        );
        let raised = Raised {
            code: code.as_str().to_string(),
            message,
            details: None,
            failure: Some(cause),
            also,
        };
        self.raise_from(Some(token), raised, node_id);
    }
}

/// The further names a task failure of `node` answers to: its
/// `task_failure_name`, unless the failure is of class `timeout`.
pub(super) fn failure_names(node: &Node, class: Option<ErrorClass>) -> Vec<String> {
    match node.data.as_ref().and_then(|d| d.task_failure_name.clone()) {
        Some(name) if class != Some(ErrorClass::Timeout) => vec![name],
        _ => Vec::new(),
    }
}

#[allow(clippy::too_many_arguments)]
fn judge(
    retries: &[RetryPolicy],
    idempotent: bool,
    state: &TaskState,
    code: &str,
    also: &[String],
    class: ErrorClass,
    retryable: bool,
    draw: f64,
) -> Verdict {
    let Some((ix, policy)) = retries.iter().enumerate().find(|(_, p)| {
        p.error_equals
            .as_ref()
            .is_none_or(|codes| codes.iter().any(|c| c == code || also.contains(c)))
    }) else {
        let why = if retries.is_empty() {
            "no retry policy".to_string()
        } else {
            format!("no retrier matches {code}")
        };
        return Verdict::Stop {
            why,
            policy: !retries.is_empty(),
        };
    };
    let stop = |why: String| Verdict::Stop { why, policy: true };
    if !idempotent {
        return stop("the task is not idempotent".into());
    }
    if policy.non_retryable_codes.iter().any(|c| c == code) {
        return stop(format!("{code} is listed in nonRetryableCodes"));
    }
    // A policy that names the classes it retries (HX `retryOn`), or the code
    // itself (an explicit States-language `ErrorEquals`), is authoritative;
    // otherwise a code's default retryability applies.
    let named = policy
        .error_equals
        .as_ref()
        .is_some_and(|codes| codes.iter().any(|c| c == code));
    if !retryable && policy.retry_on.is_none() && !named {
        return stop(format!("{code} is not retryable"));
    }
    if let Some(classes) = &policy.retry_on {
        if !classes.contains(&class) {
            return stop(format!("class {class} is not in retryOn"));
        }
    }
    let granted = state.granted.get(ix).copied().unwrap_or(0);
    if granted + 1 >= policy.max_attempts {
        return stop(format!("{} attempts spent", policy.max_attempts));
    }
    Verdict::Retry {
        retrier: ix,
        delay: delay_for(policy, granted, draw),
    }
}

/// The delay before the retry that follows `granted` earlier retries of this retrier.
fn delay_for(policy: &RetryPolicy, granted: u32, draw: f64) -> std::time::Duration {
    policy.delay(granted + 2, draw)
}

/// `data` with `"item": slot` when there is one.
pub(super) fn tag_item(mut data: serde_json::Value, item: Option<u64>) -> serde_json::Value {
    if let Some(slot) = item {
        data["item"] = json!(slot);
    }
    data
}
