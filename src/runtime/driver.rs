//! Driving instances: apply an event, commit the step, run its attempts,
//! feed their outcomes back, until every token waits.

use super::{Deployed, Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::{
    self, AttemptRequest, Effect, Event, InstanceState, Snapshot, Step, TaskOutcome,
};
use crate::sandbox::{Outcome, TaskContext};
use crate::store::{
    AttemptRow, Created, JournalRow, NewInstance, NewPark, StepWrite, Store, StoreError,
};
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How many times a step is re-applied after losing an optimistic race.
const CONFLICT_RETRIES: usize = 8;

/// What a start asks for.
#[derive(Debug, Clone, Default)]
pub struct StartRequest {
    /// The instance id to use (`None` = a fresh one).
    pub id: Option<String>,
    pub tenant: String,
    pub process_id: String,
    pub variables: Map<String, Value>,
    pub idempotency_key: Option<String>,
    /// A start event other than the none start (a message or timer start).
    pub start_node: Option<String>,
    pub retry_of: Option<String>,
}

fn ms(t: chrono::DateTime<chrono::Utc>) -> i64 {
    t.timestamp_millis()
}

fn to_outcome(o: Outcome) -> TaskOutcome {
    match o {
        Outcome::Completed { output } => TaskOutcome::Completed { output },
        Outcome::BusinessError {
            code,
            message,
            details,
        } => TaskOutcome::BusinessError {
            code,
            message,
            details,
        },
        Outcome::Failed {
            code,
            class,
            retryable,
            message,
            details,
        } => TaskOutcome::Failed {
            code,
            class,
            retryable,
            message,
            details,
        },
    }
}

impl<S: Store> Runtime<S> {
    fn inputs(&self) -> engine::Inputs {
        let draw = self
            .inner
            .rng
            .lock()
            .map(|mut r| rand::Rng::random::<f64>(&mut *r))
            .unwrap_or(0.5);
        engine::Inputs {
            now: self.inner.clock.now(),
            draw,
            attempt_lease: self.inner.limits.deadline + super::LEASE_MARGIN,
        }
    }

    /// Turn a step's effects into the one transaction that commits it.
    fn to_write(&self, step: &Step) -> StepWrite {
        let snap = &step.snapshot;
        let mut w = StepWrite {
            snapshot: snap.to_json(),
            state: snap.state.as_str().to_string(),
            updated_at: ms(self.inner.clock.now()),
            ..StepWrite::default()
        };
        for e in &step.effects {
            match e {
                Effect::Arm { seq, park } => w.arm.push(NewPark {
                    seq: *seq as i64,
                    kind: park.kind.as_str().to_string(),
                    // Rounded up: a park never becomes claimable before its instant.
                    due_at: park.due.map(crate::time::to_millis_ceil),
                    message_name: park.message.as_ref().map(|m| m.name.clone()),
                    correlation_key: park.message.as_ref().and_then(|m| m.key.clone()),
                }),
                Effect::Withdraw { seq } => w.withdraw.push(*seq as i64),
                Effect::RecordAttempt(a) => w.attempts.push(AttemptRow {
                    token: a.token as i64,
                    node: a.node.clone(),
                    attempt: i64::from(a.attempt),
                    started_at: ms(a.started_at),
                    ended_at: ms(a.ended_at),
                    outcome: a.outcome.clone(),
                    code: a.code.clone(),
                    message: a.message.clone(),
                }),
                Effect::Journal(j) if self.inner.config.audit_sql => w.journal.push(JournalRow {
                    seq: j.seq as i64,
                    at: ms(j.at),
                    kind: j.kind.clone(),
                    node: j.node.clone(),
                    data: j.data.to_string(),
                }),
                Effect::Journal(_) | Effect::RunAttempt(_) => {}
                Effect::Ended { state } => {
                    w.withdraw_all = true;
                    w.ended_at = snap.ended_at.map(ms);
                    // Retention PT0S: no history at all, but FAILED is always retained.
                    w.delete = *state != InstanceState::Failed
                        && self.inner.config.retention.as_std().is_zero();
                }
            }
        }
        w
    }

    fn attempts_of(step: &Step) -> Vec<AttemptRequest> {
        step.effects
            .iter()
            .filter_map(|e| match e {
                Effect::RunAttempt(a) => Some(a.clone()),
                _ => None,
            })
            .collect()
    }

    fn lock_for(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = match self.inner.locks.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        if m.len() > 10_000 {
            m.retain(|_, l| Arc::strong_count(l) > 1);
        }
        m.entry(id.to_string()).or_default().clone()
    }

    /// Start an instance and drive it until every token waits. Returns its id.
    pub async fn start(&self, req: StartRequest) -> RuntimeResult<String> {
        let dep = self
            .inner
            .store
            .active_deployment(&req.tenant, &req.process_id)
            .await?
            .ok_or_else(|| {
                RuntimeError::new(
                    Code::ProcessNotFound,
                    format!("no active deployment of process `{}`", req.process_id),
                )
            })?;
        let deployed = self.deployed(&dep.id).await?;
        if deployed.process.stateful() && !self.inner.durable {
            return Err(RuntimeError::new(
                Code::DatasourceRequired,
                format!("process `{}` is stateful (it can park: a timer, a message wait or a retry policy) and needs a datasource", req.process_id),
            ));
        }
        let now = self.inner.clock.now();
        let id = req.id.clone().unwrap_or_else(|| super::new_id(ms(now)));
        let inputs = self.inputs();
        let step = engine::start(
            &deployed.process,
            engine::NewInstance {
                instance_id: &id,
                tenant: &req.tenant,
                deployment_id: &dep.id,
                start_node: req.start_node.as_deref(),
                variables: req.variables.clone(),
            },
            &inputs,
        )?;
        self.create(&deployed, id, step, &req).await
    }

    /// Resume a FAILED instance from its failed node, as a new instance.
    pub async fn resume_failed(&self, failed: &Snapshot, tenant: &str) -> RuntimeResult<String> {
        let node = failed
            .error
            .as_ref()
            .and_then(|e| e.node.clone())
            .ok_or_else(|| {
                RuntimeError::new(
                    Code::InstanceState,
                    "the failed instance recorded no failed node",
                )
            })?;
        let deployed = self.deployed(&failed.deployment_id).await?;
        let id = super::new_id(ms(self.inner.clock.now()));
        let inputs = self.inputs();
        let step = engine::resume_at(
            &deployed.process,
            engine::NewInstance {
                instance_id: &id,
                tenant,
                deployment_id: &failed.deployment_id,
                start_node: None,
                variables: failed.variables.clone(),
            },
            &node,
            &inputs,
        )?;
        let req = StartRequest {
            tenant: tenant.to_string(),
            process_id: failed.process_id.clone(),
            retry_of: Some(failed.instance_id.clone()),
            ..StartRequest::default()
        };
        self.create(&deployed, id, step, &req).await
    }

    async fn create(
        &self,
        deployed: &Arc<Deployed>,
        id: String,
        step: Step,
        req: &StartRequest,
    ) -> RuntimeResult<String> {
        let write = self.to_write(&step);
        let new = NewInstance {
            id: id.clone(),
            tenant: req.tenant.clone(),
            deployment_id: deployed.record.id.clone(),
            process_id: deployed.record.process_id.clone(),
            idempotency_key: req.idempotency_key.clone(),
            retry_of: req.retry_of.clone(),
            started_at: ms(step.snapshot.started_at),
        };
        // Tenant quota (tenancy.rs): held until the instance row is written.
        let admission = self.admit(req).await?;
        let created = self.inner.store.create_instance(&new, &write).await?;
        drop(admission);
        match created {
            Created::Existing(existing) => return Ok(existing),
            Created::New => {}
        }
        if step.snapshot.state.is_terminal() {
            // Ended on its first step: its deployment may retire (lifecycle.rs).
            self.after_terminal(&deployed.record.id).await;
        }
        tracing::debug!(instance = %id, "started");
        self.inner.wake.notify_one();
        let attempts = Self::attempts_of(&step);
        self.run_attempts(id.clone(), deployed.clone(), step.snapshot, attempts)
            .await;
        Ok(id)
    }

    /// Apply one event to an instance and commit it; returns the new snapshot
    /// and the attempts to run.
    pub(crate) async fn apply_event(
        &self,
        id: &str,
        event: &Event,
    ) -> RuntimeResult<(Arc<Deployed>, Snapshot, Vec<AttemptRequest>)> {
        let lock = self.lock_for(id);
        let _guard = lock.lock().await;
        for _ in 0..CONFLICT_RETRIES {
            let rec = self.inner.store.load_instance(id).await?.ok_or_else(|| {
                RuntimeError::new(Code::InstanceNotFound, format!("no instance {id}"))
            })?;
            let snap = Snapshot::from_json(&rec.snapshot)
                .map_err(|e| RuntimeError::new(Code::SnapshotVersion, e))?;
            let deployed = self.deployed(&rec.deployment_id).await?;
            let step = engine::apply(&deployed.process, snap, event.clone(), &self.inputs())?;
            let write = self.to_write(&step);
            match self.inner.store.commit_step(id, rec.version, &write).await {
                Ok(()) => {
                    if !write.arm.is_empty() {
                        self.inner.wake.notify_one();
                    }
                    if step.snapshot.state.is_terminal() {
                        // Its deployment may retire now (lifecycle.rs).
                        self.after_terminal(&rec.deployment_id).await;
                    }
                    let attempts = Self::attempts_of(&step);
                    return Ok((deployed, step.snapshot, attempts));
                }
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(RuntimeError::new(
            Code::StoreFailed,
            format!("instance {id}: too many concurrent updates"),
        ))
    }

    /// Apply an event and run everything it makes runnable.
    pub(crate) fn drive(&self, id: String, event: Event) -> BoxFut<RuntimeResult<Snapshot>> {
        let rt = self.clone();
        Box::pin(async move {
            let (deployed, snap, attempts) = rt.apply_event(&id, &event).await?;
            rt.run_attempts(id, deployed, snap.clone(), attempts).await;
            Ok(snap)
        })
    }

    /// Run attempts concurrently (bounded by the sandbox's lanes) and feed each
    /// outcome back. A failure to commit an outcome is logged: the attempt's
    /// park stays and re-runs it when its lease falls due.
    fn run_attempts(
        &self,
        id: String,
        deployed: Arc<Deployed>,
        snap: Snapshot,
        attempts: Vec<AttemptRequest>,
    ) -> BoxFut<()> {
        let rt = self.clone();
        Box::pin(async move {
            if attempts.is_empty() {
                return;
            }
            let mut set = tokio::task::JoinSet::new();
            for req in attempts {
                let rt = rt.clone();
                let id = id.clone();
                let deployed = deployed.clone();
                let tenant = snap.tenant.clone();
                set.spawn(async move {
                    let outcome = rt.run_attempt(&deployed, &tenant, &id, &req).await;
                    let event = Event::AttemptEnded { token: req.token, attempt: req.attempt, outcome };
                    if let Err(e) = rt.drive(id.clone(), event).await {
                        tracing::error!(instance = %id, error = %e, "could not commit an attempt outcome; its lease will re-run it");
                    }
                });
            }
            while set.join_next().await.is_some() {}
        })
    }

    async fn run_attempt(
        &self,
        deployed: &Deployed,
        tenant: &str,
        id: &str,
        req: &AttemptRequest,
    ) -> TaskOutcome {
        let Some(component) = deployed.components.get(&req.task) else {
            return TaskOutcome::Failed {
                code: Code::TaskNotRegistered.as_str().into(),
                class: Code::TaskNotRegistered.class(),
                retryable: false,
                message: format!(
                    "no module `{}` in deployment {}",
                    req.task, deployed.record.id
                ),
                details: None,
            };
        };
        let ctx = TaskContext {
            tenant: tenant.to_string(),
            instance_id: id.to_string(),
            task_id: req.node.clone(),
            attempt: req.attempt,
            idempotency_key: req.idempotency_key.clone(),
        };
        // The server's limits lowered to the tenant's ceilings (tenancy.rs).
        let mut limits = self.attempt_limits(tenant).await;
        if let Some(t) = req.timeout {
            limits.deadline = limits.deadline.min(t);
        }
        let input = req.input.to_string();
        let report = self
            .inner
            .sandbox
            .attempt(component, &ctx, &input, &limits)
            .await;
        tracing::debug!(instance = %id, task = %req.node, attempt = req.attempt, outcome = ?report.outcome, "attempt ended");
        to_outcome(report.outcome)
    }

    /// Cancel a live instance: TERMINATED, every park withdrawn in the same transaction.
    pub async fn cancel(&self, id: &str, reason: Option<String>) -> RuntimeResult<Snapshot> {
        self.drive(id.to_string(), Event::Cancel { reason }).await
    }

    /// Deliver a message: to the first waiting catch or boundary with this name
    /// and key, else to a message start event of an active deployment.
    pub async fn correlate(
        &self,
        tenant: &str,
        name: &str,
        key: Option<&str>,
        variables: Map<String, Value>,
    ) -> RuntimeResult<String> {
        let parks = self
            .inner
            .store
            .find_message_parks(tenant, name, key)
            .await?;
        if let Some(p) = parks.first() {
            let seq = u64::try_from(p.seq).unwrap_or_default();
            self.drive(
                p.instance_id.clone(),
                Event::MessageArrived {
                    park: seq,
                    variables,
                },
            )
            .await?;
            return Ok(p.instance_id.clone());
        }
        for dep in self.inner.store.list_deployments(Some(tenant)).await? {
            if dep.state != crate::store::DeploymentState::Active {
                continue;
            }
            let deployed = self.deployed(&dep.id).await?;
            let start = deployed.process.starts_in(None).find(|n| {
                matches!(&n.kind, crate::model::NodeKind::Start(crate::model::StartTrigger::Message { name: m }) if m == name)
            });
            if let Some(start) = start {
                return self
                    .start(StartRequest {
                        tenant: tenant.to_string(),
                        process_id: dep.process_id.clone(),
                        variables,
                        start_node: Some(start.id.clone()),
                        ..StartRequest::default()
                    })
                    .await;
            }
        }
        Err(RuntimeError::new(
            Code::MessageNotCorrelated,
            format!(
                "no instance waits for message `{name}`{} and no process starts with it",
                key.map(|k| format!(" with key `{k}`")).unwrap_or_default()
            ),
        ))
    }
}
