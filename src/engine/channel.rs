//! Channel calls (000): a service task `channel:<name>` issues a request and
//! waits for the counterpart's correlated answer.
//!
//! - Entering the task (or re-driving it) arms a **channel park** — the
//!   call's window: due at the route-less `q:timeout`, or never — and emits
//!   [`Effect::Request`], which the runtime commits as an outbox row in the
//!   same transaction (nothing is sent before the step is durable). Each
//!   attempt gets a fresh request id (the idempotency key on the wire) and a
//!   fresh window; the correlation stays the same for the whole call.
//! - An answer ([`Event::ChannelAnswered`]) is a completion, full stop: its
//!   variables are the task's output, or its BPMN error routes to a
//!   boundary. Never a failed attempt.
//! - The window firing is `SUTRA.DISPATCH.CHANNEL_CALL.TIMEOUT`: without a
//!   retry policy a catchable BPMN error; with one a failed attempt (class
//!   `timeout`) that the policy judges like any other.
//! - The outbox giving up ([`Event::DeliveryFailed`]) is
//!   `SUTRA.OUTBOUND.DELIVERY_ATTEMPTS_EXHAUSTED`, a failed attempt at once
//!   when the task has a retry policy; without one the call keeps waiting
//!   (the outbox opened an incident).
//! - An answer while the call is in a backoff, or while a re-issued request
//!   has not gone out yet, is refused with
//!   `SUTRA.DISPATCH.CHANNEL_CALL.RETRY_PENDING`: the correlation is alive,
//!   but a late answer must not race the new request.
//!
//! Invariant: the call's park is withdrawn with its token like every park,
//! so an outbox row whose park is gone is dead (the store cancels it).

use super::machine::Machine;
use super::snapshot::{TaskPhase, TaskState};
use super::Effect;
use super::{AttemptRecord, EngineError, Park, ParkKind, Snapshot, TaskOutcome, TokenStatus};
use crate::codes::Code;
use crate::model::{Node, NodeKind, OnTimeout, ServiceTask, TaskImpl};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A request to put in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelRequest {
    /// Unique per attempt: `<instance>.<park>`. The idempotency key on the wire.
    pub id: String,
    pub token: u64,
    /// The task node id.
    pub node: String,
    pub channel: String,
    /// Stable for the whole call: `<instance>/<token>`.
    pub correlation: String,
    /// The call's attempt (1-based).
    pub attempt: u32,
    /// The call's channel park.
    pub park: u64,
    /// The variables sent (the task's input).
    pub input: Value,
}

/// The correlation of the call at `token`.
pub fn correlation_of(instance_id: &str, token: u64) -> String {
    format!("{instance_id}/{token}")
}

/// `(instance id, token)` of a correlation.
pub fn parse_correlation(correlation: &str) -> Option<(&str, u64)> {
    let (instance, token) = correlation.rsplit_once('/')?;
    let token = token.parse().ok()?;
    (!instance.is_empty()).then_some((instance, token))
}

/// Where a channel call stands, for the runtime (answers, deliveries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallView {
    pub node: String,
    pub attempt: u32,
    /// The current request, `None` while the call waits out a backoff.
    pub request: Option<String>,
}

/// The channel call at `token` of `snap`, if the token is at one.
pub fn call_of(snap: &Snapshot, token: u64) -> Option<CallView> {
    let t = snap.token(token)?;
    let TokenStatus::Task(state) = &t.status else {
        return None;
    };
    let request = match &state.phase {
        TaskPhase::Calling { request, .. } => Some(request.clone()),
        TaskPhase::Backoff { .. } => None,
        TaskPhase::Running { .. } | TaskPhase::Child { .. } => return None,
    };
    Some(CallView {
        node: t.node.clone(),
        attempt: state.attempt,
        request,
    })
}

impl<'a> Machine<'a> {
    /// Issue attempt `attempt` of the channel call at `token`: a fresh
    /// window (the channel park), a fresh request id, one outbox row.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_call(
        &mut self,
        token: u64,
        node: &Node,
        task: &ServiceTask,
        channel: &str,
        attempt: u32,
        granted: Vec<u32>,
        input: Value,
    ) {
        let due = task.timeout.as_ref().map(|t| {
            let d =
                chrono::Duration::from_std(t.duration.as_std()).unwrap_or(chrono::Duration::MAX);
            self.inputs
                .now
                .checked_add_signed(d)
                .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
        });
        let park = self.arm(Park {
            kind: ParkKind::Channel,
            token,
            node: node.id.clone(),
            due,
            message: None,
            cycle: None,
        });
        let id = format!("{}.{park}", self.snap.instance_id);
        let correlation = correlation_of(&self.snap.instance_id, token);
        if let Some(t) = self.snap.token_mut(token) {
            t.status = TokenStatus::Task(TaskState {
                attempt,
                phase: TaskPhase::Calling {
                    park,
                    request: id.clone(),
                },
                granted,
                since: self.inputs.now,
            });
        }
        journal!(
            self,
            "request_issued",
            Some(&node.id),
            json!({ "attempt": attempt, "token": token, "channel": channel, "request": id, "due": due }),
        );
        self.effects.push(Effect::Request(ChannelRequest {
            id,
            token,
            node: node.id.clone(),
            channel: channel.to_string(),
            correlation,
            attempt,
            park,
            input,
        }));
    }

    /// The call at `token` as (node, task, state), if it is one on `channel`
    /// (any channel when `None`).
    fn call_at(
        &self,
        token: u64,
        channel: Option<&str>,
    ) -> Option<(&'a Node, &'a ServiceTask, TaskState)> {
        let t = self.snap.token(token)?;
        let TokenStatus::Task(state) = &t.status else {
            return None;
        };
        let node = self.process.find(&t.node)?;
        let NodeKind::ServiceTask(task) = &node.kind else {
            return None;
        };
        let TaskImpl::Channel(name) = &task.implementation else {
            return None;
        };
        if channel.is_some_and(|c| c != name) {
            return None;
        }
        Some((node, task, state.clone()))
    }

    /// The counterpart answered the call at `token`.
    pub(super) fn channel_answered(
        &mut self,
        token: u64,
        channel: &str,
        sent: Option<String>,
        outcome: TaskOutcome,
    ) -> Result<(), EngineError> {
        let Some((node, _, state)) = self.call_at(token, Some(channel)) else {
            return Err(EngineError {
                code: Code::ChannelCallNotFound,
                message: format!("no call on channel `{channel}` waits for this correlation"),
            });
        };
        let pending = || {
            EngineError {
            code: Code::ChannelCallRetryPending,
            message: format!(
                "task `{}` is re-issuing its request (attempt {}): an answer to the superseded one is refused until the new one has gone out",
                node.id, state.attempt
            ),
        }
        };
        match &state.phase {
            TaskPhase::Backoff { .. } => return Err(pending()),
            // A re-issued request that has not gone out: the answer can only
            // be to a dead attempt.
            TaskPhase::Calling { request, .. }
                if state.attempt > 1 && sent.as_deref() != Some(request.as_str()) =>
            {
                return Err(pending())
            }
            TaskPhase::Calling { .. } => {}
            TaskPhase::Running { .. } | TaskPhase::Child { .. } => {
                return Err(EngineError {
                    code: Code::ChannelCallNotFound,
                    message: format!("task `{}` is not a channel call", node.id),
                })
            }
        }
        let outcome = match outcome {
            // An answer is never a failed attempt: whatever it says is the
            // process's business to route on.
            TaskOutcome::Failed {
                code,
                message,
                details,
                ..
            } => TaskOutcome::BusinessError {
                code,
                message,
                details,
            },
            o => o,
        };
        journal!(
            self,
            "response_received",
            Some(&node.id),
            json!({ "token": token, "attempt": state.attempt, "outcome": outcome.label() }),
        );
        self.attempt_ended(token, state.attempt, outcome);
        Ok(())
    }

    /// The window of the call at `token` closed before an answer came (its
    /// park `seq` fired and is withdrawn already).
    pub(super) fn call_timed_out(&mut self, token: u64, seq: u64) {
        let Some((node, task, state)) = self.call_at(token, None) else {
            return;
        };
        if !matches!(&state.phase, TaskPhase::Calling { park, .. } if *park == seq) {
            return;
        }
        let code = Code::ChannelCallTimeout;
        let message = format!(
            "no response to `{}` (attempt {}) within {}",
            node.id,
            state.attempt,
            task.timeout
                .as_ref()
                .map(|t| t.duration.to_string())
                .unwrap_or_default()
        );
        let on_timeout = task
            .timeout
            .as_ref()
            .map_or(OnTimeout::Fail, |t| t.on_timeout);
        let outcome = match on_timeout {
            // A retry policy: a failed attempt first.
            OnTimeout::Retry if !task.retries.is_empty() => TaskOutcome::Failed {
                code: code.as_str().to_string(),
                class: code.class(),
                retryable: code.retryable(),
                message,
                details: None,
                retry_after_ms: None,
            },
            OnTimeout::Skip => {
                let node_id = node.id.clone();
                self.effects.push(Effect::RecordAttempt(AttemptRecord {
                    token,
                    node: node_id.clone(),
                    attempt: state.attempt,
                    started_at: state.since,
                    ended_at: self.inputs.now,
                    outcome: "skipped".into(),
                    code: Some(code.as_str().to_string()),
                    class: Some(code.class()),
                    message: Some(message),
                    item: self.attempt_item(token),
                }));
                journal!(
                    self,
                    "task_skipped",
                    Some(&node_id),
                    json!({ "reason": "timeout" }),
                );
                self.complete_task(token, &node_id);
                return;
            }
            // Without one: a catchable BPMN error.
            _ => TaskOutcome::BusinessError {
                code: code.as_str().to_string(),
                message,
                details: None,
            },
        };
        self.attempt_ended(token, state.attempt, outcome);
    }

    /// The outbox gave up on `request` of the call at `token`.
    pub(super) fn delivery_failed(&mut self, token: u64, request: &str, message: String) {
        let current = self.call_at(token, None).filter(|(_, _, state)| {
            matches!(&state.phase, TaskPhase::Calling { request: r, .. } if r == request)
        });
        let Some((node, task, state)) = current else {
            journal!(
                self,
                "event_ignored",
                None,
                json!({ "token": token, "request": request, "reason": "the request is no longer current" }),
            );
            return;
        };
        let node_id = node.id.clone();
        if task.retries.is_empty() {
            // No policy: the call keeps waiting (its timeout, an operator).
            journal!(
                self,
                "delivery_poisoned",
                Some(&node_id),
                json!({ "request": request, "message": message }),
            );
            return;
        }
        let code = Code::DeliveryAttemptsExhausted;
        self.attempt_ended(
            token,
            state.attempt,
            TaskOutcome::Failed {
                code: code.as_str().to_string(),
                class: code.class(),
                retryable: code.retryable(),
                message,
                details: None,
                retry_after_ms: None,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Event, Inputs, NewInstance, Step};
    use super::*;
    use chrono::TimeZone;

    fn process(ext: &str) -> crate::model::Process {
        let xml = format!(
            r#"<?xml version="1.0"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="C"/>
    <bpmn:serviceTask id="C" implementation="channel:pay">
      <bpmn:extensionElements>{ext}</bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="C" targetRef="e"/>
    <bpmn:endEvent id="e"/>
  </bpmn:process>
</bpmn:definitions>"#
        );
        let loaded = crate::dialect::load(&xml);
        assert!(loaded.ok(), "{:?}", loaded.diagnostics);
        loaded.definitions.processes.into_iter().next().unwrap()
    }

    fn inputs(secs: i64) -> Inputs {
        Inputs {
            now: chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
                + chrono::Duration::seconds(secs),
            draw: 0.5,
            attempt_lease: std::time::Duration::from_secs(35),
            journal: true,
        }
    }

    fn requests(step: &Step) -> Vec<ChannelRequest> {
        step.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Request(r) => Some(r.clone()),
                _ => None,
            })
            .collect()
    }

    fn start(p: &crate::model::Process) -> Step {
        let vars = serde_json::json!({"amount": 5})
            .as_object()
            .cloned()
            .unwrap();
        super::super::start(
            p,
            NewInstance {
                instance_id: "i1",
                tenant: "t",
                deployment_id: "d",
                start_node: None,
                variables: vars,
            },
            &inputs(0),
        )
        .unwrap()
    }

    fn completed() -> TaskOutcome {
        TaskOutcome::Completed {
            output: serde_json::json!({"paid": true}),
        }
    }

    #[test]
    fn entering_a_call_issues_one_request_and_waits() {
        let p = process(r#"<q:timeout duration="PT30S"/>"#);
        let step = start(&p);
        let reqs = requests(&step);
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].input, serde_json::json!({"amount": 5}));
        assert_eq!(reqs[0].attempt, 1);
        assert_eq!(step.snapshot.state.as_str(), "WAITING");
        let park = &step.snapshot.parks[&reqs[0].park];
        assert_eq!(park.kind, ParkKind::Channel);
        assert_eq!(park.due, Some(inputs(30).now));
        let (_, token) = parse_correlation(&reqs[0].correlation).unwrap();
        let answered = super::super::apply(
            &p,
            step.snapshot,
            Event::ChannelAnswered {
                token,
                channel: "pay".into(),
                sent: None,
                outcome: completed(),
            },
            &inputs(1),
        )
        .unwrap();
        assert_eq!(answered.snapshot.state.as_str(), "COMPLETED");
        assert_eq!(answered.snapshot.variables["paid"], serde_json::json!(true));
    }

    #[test]
    fn a_redrive_issues_a_fresh_request_and_refuses_early_answers() {
        let p = process(
            r#"<q:retry maxAttempts="3" initialDelay="PT10S"/><q:timeout duration="PT30S"/>"#,
        );
        let step = start(&p);
        let first = requests(&step).remove(0);
        let (_, token) = parse_correlation(&first.correlation).unwrap();
        let answer = |snap: Snapshot, sent: Option<String>, at: i64| {
            super::super::apply(
                &p,
                snap,
                Event::ChannelAnswered {
                    token,
                    channel: "pay".into(),
                    sent,
                    outcome: completed(),
                },
                &inputs(at),
            )
        };
        // The window closes: a failed attempt, a backoff.
        let timed_out = super::super::apply(
            &p,
            step.snapshot,
            Event::ParkFired { park: first.park },
            &inputs(30),
        )
        .unwrap();
        assert!(requests(&timed_out).is_empty());
        let e = answer(timed_out.snapshot.clone(), Some(first.id.clone()), 31).unwrap_err();
        assert_eq!(e.code, Code::ChannelCallRetryPending);
        let retry = *timed_out
            .snapshot
            .parks
            .iter()
            .find(|(_, p)| p.kind == ParkKind::Retry)
            .unwrap()
            .0;
        let redriven = super::super::apply(
            &p,
            timed_out.snapshot,
            Event::ParkFired { park: retry },
            &inputs(40),
        )
        .unwrap();
        let second = requests(&redriven).remove(0);
        assert_ne!(second.id, first.id, "a fresh request id (idempotency key)");
        assert_eq!(second.correlation, first.correlation);
        assert_eq!(second.attempt, 2);
        assert_eq!(
            redriven.snapshot.parks[&second.park].due,
            Some(inputs(70).now),
            "a fresh window"
        );
        // Not gone out yet (or an answer to the dead one): refused.
        let e = answer(redriven.snapshot.clone(), None, 41).unwrap_err();
        assert_eq!(e.code, Code::ChannelCallRetryPending);
        let e = answer(redriven.snapshot.clone(), Some(first.id.clone()), 41).unwrap_err();
        assert_eq!(e.code, Code::ChannelCallRetryPending);
        // Gone out: the correlation serves.
        let done = answer(redriven.snapshot, Some(second.id.clone()), 42).unwrap();
        assert_eq!(done.snapshot.state.as_str(), "COMPLETED");
    }

    #[test]
    fn a_poisoned_delivery_fails_the_attempt_only_with_a_policy() {
        for (ext, state) in [
            (r#"<q:timeout duration="PT30S"/>"#, "WAITING"),
            (
                r#"<q:retry maxAttempts="1" initialDelay="PT1S"/><q:timeout duration="PT30S"/>"#,
                "FAILED",
            ),
        ] {
            let p = process(ext);
            let step = start(&p);
            let req = requests(&step).remove(0);
            let (_, token) = parse_correlation(&req.correlation).unwrap();
            let after = super::super::apply(
                &p,
                step.snapshot,
                Event::DeliveryFailed {
                    token,
                    request: req.id.clone(),
                    message: "HTTP 503".into(),
                },
                &inputs(3),
            )
            .unwrap();
            assert_eq!(after.snapshot.state.as_str(), state, "{ext}");
            if state == "FAILED" {
                let err = after.snapshot.error.unwrap();
                assert_eq!(err.code, "SUTRA.RUNTIME.RETRY.EXHAUSTED");
                assert_eq!(
                    err.cause.unwrap().code,
                    "SUTRA.OUTBOUND.DELIVERY_ATTEMPTS_EXHAUSTED"
                );
            }
        }
    }

    #[test]
    fn correlations_round_trip() {
        let c = correlation_of("0191abc", 7);
        assert_eq!(parse_correlation(&c), Some(("0191abc", 7)));
        assert_eq!(parse_correlation("a/b/3"), Some(("a/b", 3)));
        assert_eq!(parse_correlation("nope"), None);
        assert_eq!(parse_correlation("/3"), None);
        assert_eq!(parse_correlation("x/-1"), None);
    }
}
