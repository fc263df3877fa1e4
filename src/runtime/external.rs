//! External tasks: the pull transport of channel calls. A worker fetches and
//! locks requests of the tenant's pull channels, then completes them (the
//! call's answer), reports a BPMN error (routed to a boundary), reports a
//! failure (spending the task's worker retries, never the call's
//! `q:retry`), extends or gives back its lock.
//!
//! Invariants:
//! - a request is locked by one worker at a time; an expired lock makes it
//!   fetchable again; only the lock's holder may complete it, fail it or
//!   extend it (`SUTRA.RUNTIME.EXTERNAL_TASK.LOCK_LOST` otherwise);
//! - worker failures spend `sutra.external-task.retries` (or the count the
//!   worker reports); when none is left the request is INCIDENT and an
//!   incident is opened in the same transaction; the call keeps waiting;
//!   each failure is recorded in that transaction too (the instance's
//!   attempts list it as `worker_failed`);
//! - a long poll wakes as soon as a step of this runtime issues a pull
//!   request (or a channel, a retry timeout or an unlock makes one
//!   fetchable), and at least every 500 ms otherwise (another replica);
//! - a tenant sees only its own requests: another tenant's id is a 404.

use super::driver::ms;
use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::TaskOutcome;
use crate::store::channels::{request_state, LockedChange, RequestRecord, Transport};
use crate::store::Store;
use serde_json::{Map, Value};
use std::time::{Duration, Instant};

/// The longest a long poll re-reads nothing (work committed by another replica).
const POLL_SLICE: Duration = Duration::from_millis(500);
/// Bounds of a fetch.
pub const MAX_FETCH_TASKS: i64 = 1000;
pub const MAX_FETCH_WAIT: Duration = Duration::from_secs(300);
pub const MAX_LOCK: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a worker asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub worker_id: String,
    pub channels: Vec<String>,
    pub max_tasks: i64,
    pub lock: Duration,
    /// How long to wait for work when none is fetchable (0: answer at once).
    pub wait: Duration,
}

/// A worker-side failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalFailure {
    pub message: String,
    /// The retries left as the worker counts them; `None`: one fewer than now.
    pub retries: Option<i64>,
    /// When the task is fetchable again.
    pub retry_timeout: Duration,
}

fn valid_worker(w: &str) -> bool {
    !w.is_empty() && w.len() <= 128 && w.bytes().all(|b| b.is_ascii_graphic())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn bad(message: impl Into<String>) -> RuntimeError {
    RuntimeError::new(Code::ChannelInvalid, message)
}

impl<S: Store> Runtime<S> {
    /// Lock up to `max_tasks` fetchable requests for the worker, waiting up
    /// to `wait` for one to appear.
    pub async fn fetch_and_lock(
        &self,
        tenant: &str,
        req: &FetchRequest,
    ) -> RuntimeResult<Vec<RequestRecord>> {
        if !valid_worker(&req.worker_id) {
            return Err(bad("workerId: 1 to 128 visible ASCII characters"));
        }
        if req.channels.is_empty() || req.channels.len() > 64 {
            return Err(bad("channels: name 1 to 64 channels"));
        }
        if let Some(c) = req
            .channels
            .iter()
            .find(|c| !super::channel::valid_channel_name(c))
        {
            return Err(bad(format!("channel name `{c}` is invalid")));
        }
        if !(1..=MAX_FETCH_TASKS).contains(&req.max_tasks) {
            return Err(bad(format!("maxTasks: 1 to {MAX_FETCH_TASKS}")));
        }
        if req.lock.is_zero() || req.lock > MAX_LOCK {
            return Err(bad("lockDuration: more than 0 ms and at most 7 days"));
        }
        if req.wait > MAX_FETCH_WAIT {
            return Err(bad("asyncResponseTimeout: at most 300000 ms"));
        }
        let deadline = Instant::now() + req.wait;
        loop {
            // Registered before looking, so work issued in between is not missed.
            let notified = self.inner.pull_wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = ms(self.inner.clock.now());
            let locked = self
                .inner
                .store
                .fetch_and_lock(
                    tenant,
                    &req.channels,
                    &req.worker_id,
                    now,
                    now.saturating_add(millis(req.lock)),
                    req.max_tasks,
                )
                .await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !locked.is_empty() || left.is_zero() {
                return Ok(locked);
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(left.min(POLL_SLICE)) => {}
            }
        }
    }

    /// The caller's pull request `id`.
    async fn external(&self, tenant: &str, id: &str) -> RuntimeResult<RequestRecord> {
        let not_found =
            || RuntimeError::new(Code::ExternalTaskNotFound, format!("no external task {id}"));
        let req = self
            .inner
            .store
            .get_request(id)
            .await?
            .filter(|r| r.tenant == tenant)
            .ok_or_else(not_found)?;
        match self.channel(tenant, &req.channel).await? {
            Some(c) if c.transport == Transport::Pull => Ok(req),
            _ => Err(not_found()),
        }
    }

    /// `id`, if `worker` holds its lock now; else `LOCK_LOST`.
    async fn held(&self, tenant: &str, id: &str, worker: &str) -> RuntimeResult<RequestRecord> {
        let req = self.external(tenant, id).await?;
        let now = ms(self.inner.clock.now());
        let holds = req.state == request_state::PENDING
            && req.claimed_by.as_deref() == Some(worker)
            && req.claimed_until.is_some_and(|u| u > now);
        if holds {
            Ok(req)
        } else {
            Err(lock_lost(id, worker))
        }
    }

    /// The call's answer through its external task.
    async fn answer_external(
        &self,
        tenant: &str,
        req: &RequestRecord,
        outcome: TaskOutcome,
    ) -> RuntimeResult<()> {
        // The answer's step marks the task DONE (one commit for both).
        let answered = self
            .answer_call(tenant, &req.channel, &req.correlation, outcome, Some(req))
            .await;
        match answered {
            Ok(_) => Ok(()),
            // The call is over (answered otherwise, cancelled): so is this task.
            Err(e) if e.code == Code::ChannelCallNotFound => {
                self.inner
                    .store
                    .finish_request(&req.id, ms(self.inner.clock.now()))
                    .await?;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// The worker completed the task: its variables are the call's output.
    pub async fn complete_external(
        &self,
        tenant: &str,
        id: &str,
        worker: &str,
        variables: Map<String, Value>,
    ) -> RuntimeResult<()> {
        let req = self.held(tenant, id, worker).await?;
        self.answer_external(
            tenant,
            &req,
            TaskOutcome::Completed {
                output: Value::Object(variables),
            },
        )
        .await
    }

    /// The worker reports a BPMN error: routed to the task's error boundary.
    pub async fn bpmn_error_external(
        &self,
        tenant: &str,
        id: &str,
        worker: &str,
        code: &str,
        message: Option<String>,
    ) -> RuntimeResult<()> {
        if code.is_empty() || code.len() > 256 {
            return Err(bad("errorCode: 1 to 256 characters"));
        }
        let req = self.held(tenant, id, worker).await?;
        self.answer_external(
            tenant,
            &req,
            TaskOutcome::BusinessError {
                code: code.to_string(),
                message: message
                    .unwrap_or_else(|| format!("BPMN error {code} from worker {worker}")),
                details: None,
            },
        )
        .await
    }

    /// A worker-side failure: retried after `retry_timeout` while retries
    /// are left, else an incident.
    pub async fn fail_external(
        &self,
        tenant: &str,
        id: &str,
        worker: &str,
        failure: &ExternalFailure,
    ) -> RuntimeResult<RequestRecord> {
        let req = self.held(tenant, id, worker).await?;
        let now = ms(self.inner.clock.now());
        let current = req
            .retries
            .unwrap_or(i64::from(self.inner.config.outbox.external_task_retries));
        let left = failure.retries.unwrap_or(current - 1).max(0);
        let message: String = failure.message.chars().take(4096).collect();
        // The call's token, recorded with the failure (the attempts timeline).
        let token = crate::engine::parse_correlation(&req.correlation)
            .map_or(0, |(_, t)| i64::try_from(t).unwrap_or(i64::MAX));
        let change = if left == 0 {
            LockedChange::Incident {
                error: message,
                incident_id: super::new_id(now),
                token,
            }
        } else {
            LockedChange::Retry {
                retries: left,
                due_at: now.saturating_add(millis(failure.retry_timeout)),
                error: message,
                token,
            }
        };
        if !self
            .inner
            .store
            .update_locked(id, worker, now, &change)
            .await?
        {
            return Err(lock_lost(id, worker));
        }
        if matches!(change, LockedChange::Retry { .. }) {
            self.inner.pull_wake.notify_waiters();
        } else {
            tracing::warn!(task = %id, channel = %req.channel, "external task retries spent: incident");
        }
        self.external(tenant, id).await
    }

    /// The worker keeps the task for `lock` more (from now).
    pub async fn extend_lock(
        &self,
        tenant: &str,
        id: &str,
        worker: &str,
        lock: Duration,
    ) -> RuntimeResult<()> {
        if lock.is_zero() || lock > MAX_LOCK {
            return Err(bad("newDuration: more than 0 ms and at most 7 days"));
        }
        self.held(tenant, id, worker).await?;
        let now = ms(self.inner.clock.now());
        let until = now.saturating_add(millis(lock));
        if self
            .inner
            .store
            .update_locked(id, worker, now, &LockedChange::Extend { until })
            .await?
        {
            Ok(())
        } else {
            Err(lock_lost(id, worker))
        }
    }

    /// Gives the task back: fetchable again at once.
    pub async fn unlock_external(&self, tenant: &str, id: &str) -> RuntimeResult<()> {
        self.external(tenant, id).await?;
        if !self
            .inner
            .store
            .unlock_request(id, ms(self.inner.clock.now()))
            .await?
        {
            return Err(RuntimeError::new(
                Code::ExternalTaskLockLost,
                format!("external task {id} is no longer pending"),
            ));
        }
        self.inner.pull_wake.notify_waiters();
        Ok(())
    }
}

fn lock_lost(id: &str, worker: &str) -> RuntimeError {
    RuntimeError::new(
        Code::ExternalTaskLockLost,
        format!(
            "worker `{worker}` does not hold the lock of external task {id}: it expired, another worker fetched it, or the task is over"
        ),
    )
}
