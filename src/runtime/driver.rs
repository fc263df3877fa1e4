//! Driving instances: apply an event, run the attempts it asks for to the
//! next wait (inline.rs), commit, and feed the outcomes of slower attempts
//! back, until every token waits.

use super::inline::Spec;
use super::output::Written;
use super::{Deployed, Kept, Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::{self, AttemptRequest, Event, Snapshot, TaskOutcome};
use crate::sandbox::{Outcome, Reuse, TaskContext};
use crate::store::{Created, NewInstance, StepWrite, Store, StoreError};
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How many times a step is re-applied after losing an optimistic race.
const CONFLICT_RETRIES: usize = 8;

/// An attempt's outcome waiting in its instance's inbox: the request, the
/// outcome, what its guest wrote.
pub(crate) type Arrived = (AttemptRequest, TaskOutcome, Option<Written>);

/// What a guest wrote, by its attempt (token, node, attempt).
type Keyed = ((u64, String, u32), Written);

/// Where a drive's first event comes from.
enum First {
    Given(Box<(Event, Option<Keyed>)>),
    /// The instance's inbox (the outcomes queued while another step held
    /// its lock); nothing to do when another drive took them.
    Inbox,
}

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
    /// Answer once the first step is committed; the rest of the start (its
    /// attempts, children, sends) runs on in a task of its own.
    pub answer_at_commit: bool,
    /// The business key to keep with the instance (searchable, shown
    /// everywhere); `None`: the process's own rule, if it has one.
    pub business_key: Option<String>,
}

/// The requests an answering step ends ([`StepWrite::finished`],
/// [`StepWrite::delivered`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Finishing {
    /// Pull requests: DONE.
    pub done: Vec<String>,
    /// Push requests answered during their POST: DELIVERED.
    pub delivered: Vec<String>,
}

/// A start variable's value as a business key: a string as itself, a
/// number or boolean as its JSON; nothing for any other value, or one the
/// key cannot be (over 256 bytes, control characters).
fn business_key_of(v: &Value) -> Option<String> {
    let key = match v {
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) => v.to_string(),
        _ => return None,
    };
    let fits = !key.is_empty()
        && key.len() <= crate::store::SEARCH_VALUE_MAX
        && !key.chars().any(char::is_control);
    fits.then_some(key)
}

pub(super) fn ms(t: chrono::DateTime<chrono::Utc>) -> i64 {
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
            retry_after_ms: None,
        },
    }
}

impl<S: Store> Runtime<S> {
    pub(crate) fn inputs(&self) -> engine::Inputs {
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
            journal: self.inner.config.audit_sql,
        }
    }

    pub(super) fn lock_for(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = match self.inner.locks.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        // Looked up first: an instance's later steps find its lock without
        // a copy of the id.
        if let Some(l) = m.get(id) {
            return l.clone();
        }
        if m.len() > 10_000 {
            m.retain(|_, l| Arc::strong_count(l) > 1);
        }
        m.entry(id.to_string()).or_default().clone()
    }

    /// Refuses, before any instance id exists, a start that could never be
    /// kept: a stateful process on an in-memory store (`sutra run --db
    /// sqlite::memory:`). [`Runtime::start`] refuses the same.
    pub async fn refuse_ephemeral(&self, tenant: &str, process_id: &str) -> RuntimeResult<()> {
        if self.inner.durable {
            return Ok(());
        }
        match self.active_deployed(tenant, process_id).await? {
            Some(d) if d.process.stateful() => Err(stateful_without_datasource(process_id)),
            _ => Ok(()),
        }
    }

    /// Start an instance and drive it until every token waits. Returns its id.
    pub async fn start(&self, req: StartRequest) -> RuntimeResult<String> {
        let deployed = self
            .active_deployed(&req.tenant, &req.process_id)
            .await?
            .ok_or_else(|| {
                RuntimeError::new(
                    Code::ProcessNotFound,
                    format!("no active deployment of process `{}`", req.process_id),
                )
            })?;
        if deployed.process.stateful() && !self.inner.durable {
            return Err(stateful_without_datasource(&req.process_id));
        }
        let now = self.inner.clock.now();
        let id = req.id.clone().unwrap_or_else(|| super::new_id(ms(now)));
        let mut req = req;
        if req.business_key.is_none() {
            req.business_key = deployed
                .process
                .business_key
                .as_ref()
                .and_then(|var| business_key_of(req.variables.get(var)?));
        }
        let inputs = self.inputs();
        // `create` reads the request's variables only for a key's fingerprint.
        let variables = match req.idempotency_key {
            Some(_) => req.variables.clone(),
            None => std::mem::take(&mut req.variables),
        };
        let step = deployed.start(
            engine::NewInstance {
                instance_id: &id,
                tenant: &req.tenant,
                deployment_id: &deployed.record.id,
                start_node: req.start_node.as_deref(),
                variables,
            },
            &inputs,
        )?;
        // Boxed: a start's future is spawned and moved whole by its callers
        // (a task per request); boxed, they move a pointer, not the kilobytes
        // of the create's state (its attempt, its commit).
        let spec = Box::new(self.spec_of(step, None));
        Box::pin(self.create(&deployed, id, spec, &req)).await
    }

    /// Resume a FAILED instance from its failed node, as a new instance.
    pub async fn resume_failed(&self, failed: &Snapshot, tenant: &str) -> RuntimeResult<String> {
        self.resume_failed_keyed(failed, tenant, None, None).await
    }

    /// [`Self::resume_failed`], the new instance keeping `business_key`;
    /// with an idempotency key, a second call answers the first's instance.
    pub(crate) async fn resume_failed_keyed(
        &self,
        failed: &Snapshot,
        tenant: &str,
        business_key: Option<String>,
        idempotency_key: Option<String>,
    ) -> RuntimeResult<String> {
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
            business_key,
            idempotency_key,
            ..StartRequest::default()
        };
        let spec = Box::new(self.spec_of(step, None));
        Box::pin(self.create(&deployed, id, spec, &req)).await
    }

    /// Create the instance whose first step `spec` holds (boxed, as the
    /// futures holding it are moved whole), run it to its first wait.
    async fn create(
        &self,
        deployed: &Arc<Deployed>,
        id: String,
        mut spec: Box<Spec>,
        req: &StartRequest,
    ) -> RuntimeResult<String> {
        // A reused idempotency key answers the instance it started (nothing
        // runs) if it comes with the same request, else it is refused.
        let fingerprint = req.idempotency_key.as_ref().map(|_| {
            super::idempotency::fingerprint(
                &req.process_id,
                req.start_node.as_deref(),
                &req.variables,
            )
        });
        if let (Some(key), Some(f)) = (&req.idempotency_key, &fingerprint) {
            if let Some(existing) = Box::pin(self.replayed(&req.tenant, key, f)).await? {
                return Ok(existing);
            }
        }
        let lock = self.lock_for(&id);
        let guard = lock.lock().await;
        spec.search_base = Some(Vec::new());
        // Run to the first wait before the first commit (inline.rs).
        self.speculate(&id, deployed, &mut spec).await;
        // The child flows it starts are created with it (children.rs).
        self.start_children(deployed, &mut spec).await?;
        // The row and the write go to the store whole (boxed) and come back
        // with the answer: the SQLite writer thread takes them uncopied.
        let mut start = Box::new(crate::store::NewStart {
            instance: NewInstance {
                id: id.clone(),
                tenant: req.tenant.clone(),
                deployment_id: deployed.record.id.clone(),
                process_id: deployed.record.process_id.clone(),
                idempotency_key: req.idempotency_key.clone(),
                idempotency_fingerprint: fingerprint.clone(),
                retry_of: req.retry_of.clone(),
                started_at: ms(spec.snapshot.started_at),
                business_key: req.business_key.clone(),
            },
            step: self.finish_write(&mut spec),
        });
        self.claim_requests(&req.tenant, &mut start.step).await;
        // Tenant quota (tenancy.rs): held until the instance row is written.
        let admission = self.admit(req).await?;
        let (created, start) = self.inner.store.create_instance_owned(start).await;
        let created = created?;
        drop(admission);
        if let Created::Existing(existing) = created {
            // A concurrent start took the key first: the same check.
            if let (Some(key), Some(f)) = (&req.idempotency_key, &fingerprint) {
                if let Some(replayed) = Box::pin(self.replayed(&req.tenant, key, f)).await? {
                    return Ok(replayed);
                }
            }
            return Ok(existing);
        }
        tracing::debug!(instance = %id, "started");
        self.committed(&id, 1, &mut spec, &start.step).await;
        self.remember_armed(&id, &mut spec);
        drop(guard);
        if req.answer_at_commit {
            let rt = self.clone();
            let deployed = deployed.clone();
            let carried = id.clone();
            tokio::spawn(async move { rt.carry_on_start(carried, deployed, spec).await });
            return Ok(id);
        }
        self.carry_on_start(id.clone(), deployed.clone(), spec)
            .await;
        Ok(id)
    }

    /// What follows a start's first commit, until every token waits.
    async fn carry_on_start(&self, id: String, deployed: Arc<Deployed>, mut spec: Box<Spec>) {
        self.after_commit(&mut spec).await;
        // Drive until every token waits: attempts still running, then the rest.
        for task in std::mem::take(&mut spec.running) {
            let _ = task.await;
        }
        self.await_sends(&mut spec).await;
        let pending = std::mem::take(&mut spec.pending);
        let tenant = spec.snapshot.tenant.clone();
        self.run_attempts(id, deployed, tenant, pending).await;
    }

    /// What follows every commit: wake the poller for new parks, set alarms,
    /// tell `settle` waiters, let a drained deployment retire.
    pub(super) async fn committed(
        &self,
        id: &str,
        version: i64,
        spec: &mut Spec,
        write: &StepWrite,
    ) {
        // The poller only needs to look again for a park no alarm here fires.
        if write
            .arm
            .iter()
            .any(|p| p.due_at.is_some() && p.claim.is_none())
        {
            self.inner.wake.notify_one();
        }
        self.arm_alarms(id, version, spec, write);
        // Thrown signals and messages are delivered now that they are durable (signals.rs).
        if !write.signals.is_empty() {
            self.kick_signals();
        }
        // Requests go out only now that their step is durable (channel.rs).
        let sends = self.dispatch_requests(&spec.snapshot, write);
        spec.sends.extend(sends);
        self.inner.stepped.notify_waiters();
        if write.delete {
            // A start awaiting this instance answers its final state (answer.rs).
            self.inner.answers.deleted(id, &spec.snapshot);
        }
        if spec.snapshot.state.is_terminal() {
            // Its deployment may retire now (lifecycle.rs).
            self.after_terminal(&spec.snapshot.deployment_id).await;
        }
    }

    /// On a virtual clock, wait for the deliveries a commit started (time
    /// must not jump past them); on the system clock they run on their own.
    pub(super) async fn await_sends(&self, spec: &mut Spec) {
        let sends = std::mem::take(&mut spec.sends);
        if self.inner.clock.is_wall_clock() {
            return;
        }
        for send in sends {
            let _ = send.await;
        }
    }

    /// The committed snapshot of an instance and its version, from the store.
    pub(super) async fn load(&self, id: &str) -> RuntimeResult<(i64, Snapshot)> {
        let rec = self.inner.store.load_instance(id).await?.ok_or_else(|| {
            RuntimeError::new(Code::InstanceNotFound, format!("no instance {id}"))
        })?;
        let snap = Snapshot::from_json(&rec.snapshot)
            .map_err(|e| RuntimeError::new(Code::SnapshotVersion, e))?;
        Ok((rec.version, snap))
    }

    /// [`Self::load`], the snapshot boxed (as kept in memory).
    async fn load_kept(&self, id: &str) -> RuntimeResult<Kept> {
        let (version, snap) = self.load(id).await?;
        Ok((version, Box::new(snap)))
    }

    /// Apply an event, run what it makes runnable to the next wait (within
    /// the commit window), commit, and run what is left.
    pub(crate) fn drive(&self, id: String, event: Event) -> BoxFut<RuntimeResult<Snapshot>> {
        self.drive_with(id, event, None, Finishing::default())
    }

    /// [`Self::drive`] from a snapshot read beforehand (`known`: its version
    /// and snapshot, e.g. read with the other instances of a claimed batch);
    /// a step committed since is met by the version check (the step is
    /// replayed on the stored state), one kept here is used instead.
    pub(crate) fn drive_from(
        &self,
        id: String,
        event: Event,
        known: Option<(i64, Snapshot)>,
    ) -> BoxFut<RuntimeResult<Snapshot>> {
        self.drive_given(id, event, None, Finishing::default(), known)
    }

    /// [`Self::drive`], the step also ending the requests it answers (one
    /// commit for the answer and its request).
    pub(crate) fn drive_finishing(
        &self,
        id: String,
        event: Event,
        finishing: Finishing,
    ) -> BoxFut<RuntimeResult<Snapshot>> {
        self.drive_with(id, event, None, finishing)
    }

    /// [`Self::drive`] for a caller that does not read the committed
    /// snapshot (an alarm's step): it is kept for the next step (moved, not
    /// copied) or dropped.
    pub(crate) fn drive_discarding(&self, id: String, event: Event) -> BoxFut<RuntimeResult<()>> {
        let rt = self.clone();
        Box::pin(async move {
            rt.drive_queued(
                id,
                First::Given(Box::new((event, None))),
                Finishing::default(),
                None,
                false,
            )
            .await
            .map(|_| ())
        })
    }

    fn drive_with(
        &self,
        id: String,
        event: Event,
        written: Option<((u64, String, u32), Written)>,
        finishing: Finishing,
    ) -> BoxFut<RuntimeResult<Snapshot>> {
        self.drive_given(id, event, written, finishing, None)
    }

    fn drive_given(
        &self,
        id: String,
        event: Event,
        written: Option<((u64, String, u32), Written)>,
        finishing: Finishing,
        known: Option<(i64, Snapshot)>,
    ) -> BoxFut<RuntimeResult<Snapshot>> {
        let rt = self.clone();
        // Boxed: an unboxed snapshot is 800 bytes of every drive's future.
        let known = known.map(|(v, snap)| (v, Box::new(snap)));
        Box::pin(async move {
            let driven = rt
                .drive_queued(
                    id.clone(),
                    First::Given(Box::new((event, written))),
                    finishing,
                    known,
                    true,
                )
                .await?;
            driven.ok_or_else(|| {
                RuntimeError::new(
                    Code::StoreFailed,
                    format!("instance {id}: no step was applied"),
                )
            })
        })
    }

    /// The outcomes queued for instance `id`, taken.
    fn take_inbox(&self, id: &str) -> Vec<Arrived> {
        match self.inner.inbox.lock() {
            Ok(mut m) => m.remove(id).unwrap_or_default(),
            Err(p) => p.into_inner().remove(id).unwrap_or_default(),
        }
    }

    /// One drive: the first event (given, or the first queued outcome), the
    /// outcomes queued meanwhile, the attempts they make runnable within the
    /// commit window, one commit. The snapshot is the one kept here (after
    /// an alarm), else `known` (read ahead with a batch), else the stored
    /// one. The committed snapshot for a given event; `None` for an inbox
    /// drive (nobody reads it) and when `wanted` is false.
    ///
    /// Its future is created and boxed on every event and outcome, and a
    /// thousand timers falling due hold a thousand of them: what it keeps
    /// across its awaits stays small (the snapshots boxed, the first event
    /// in its box until the step applies it).
    fn drive_queued(
        &self,
        id: String,
        first: First,
        finishing: Finishing,
        known: Option<Kept>,
        wanted: bool,
    ) -> BoxFut<RuntimeResult<Option<Snapshot>>> {
        let rt = self.clone();
        Box::pin(async move {
            let lock = rt.lock_for(&id);
            let guard = lock.lock().await;
            let mut queued = rt.take_inbox(&id).into_iter();
            let given = matches!(first, First::Given(..));
            let first = match first {
                First::Given(given) => given,
                First::Inbox => match queued.next() {
                    None => return Ok(None),
                    Some((req, outcome, written)) => {
                        // What it wrote, with its input and output (the
                        // console's step view), as `apply_outcome` keeps it.
                        let io = super::output::step_io(&req.input, &outcome);
                        let written = Some((
                            (req.token, req.node.clone(), req.attempt),
                            Written::with_io(written, io),
                        ));
                        let event = Event::AttemptEnded {
                            token: req.token,
                            attempt: req.attempt,
                            outcome,
                        };
                        Box::new((event, written))
                    }
                },
            };
            // The newest of what is in memory (a step committed since by
            // another replica is met by the version check and replayed).
            let warm = rt.take_warm(&id);
            let newest = [rt.recall(&id), known, warm]
                .into_iter()
                .flatten()
                .max_by_key(|(v, _)| *v);
            let (mut version, snap) = match newest {
                Some(kept) => kept,
                // Boxed: a store read's state would make every drive's future larger.
                None => Box::pin(rt.load_kept(&id)).await?,
            };
            let mut deployed = rt.deployed(&snap.deployment_id).await?;
            let stored = crate::store::search_vars(&snap.variables);
            let counted = super::inline::tally(&snap);
            let wide = snap.is_wide();
            let (event, written) = *first;
            let step = super::deployed::off_executor(wide, || {
                deployed.apply(*snap, event.clone(), &rt.inputs())
            })?;
            // Boxed: this future is moved whole into its box, the spec is 2 KB.
            let mut spec = Box::new(rt.spec_of(step, Some(event)));
            spec.search_base = Some(stored);
            spec.stats_base = counted;
            spec.outputs.extend(written);
            // Every outcome that arrived while the lock was held: one commit
            // for all of them (a wide fan-out's iterations end together).
            for (req, outcome, written) in queued {
                rt.apply_outcome(&deployed, &mut spec, req, (outcome, written));
            }
            rt.speculate(&id, &deployed, &mut spec).await;
            let running = std::mem::take(&mut spec.running);
            let mut tries = 0;
            loop {
                rt.start_children(&deployed, &mut spec).await?;
                let wide = spec.snapshot.is_wide();
                // Boxed: it goes to the store whole and comes back (no copy).
                let mut write = Box::new(super::deployed::off_executor(wide, || {
                    rt.finish_write(&mut spec)
                }));
                write.finished.clone_from(&finishing.done);
                write.delivered.clone_from(&finishing.delivered);
                let tenant = spec.snapshot.tenant.clone();
                rt.claim_requests(&tenant, &mut write).await;
                let (done, write) = rt.inner.store.commit_step_owned(&id, version, write).await;
                match done {
                    Ok(()) => {
                        rt.committed(&id, version + 1, &mut spec, &write).await;
                        break;
                    }
                    Err(StoreError::Conflict(_)) if tries < CONFLICT_RETRIES => {
                        // Lost a race with another replica: replay on its state.
                        tries += 1;
                        let (v, snap) = Box::pin(rt.load_kept(&id)).await?;
                        version = v;
                        deployed = rt.deployed(&snap.deployment_id).await?;
                        let outputs = std::mem::take(&mut spec.outputs);
                        spec = Box::new(rt.replay(&deployed, *snap, &spec.events, &spec.inflight));
                        spec.outputs = outputs;
                    }
                    Err(StoreError::Conflict(_)) => {
                        return Err(RuntimeError::new(
                            Code::StoreFailed,
                            format!("instance {id}: too many concurrent updates"),
                        ))
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            // What follows waits for the attempts this step left running and
            // started, and their steps for theirs: a chain of drives. Only a
            // drive whose caller reads the snapshot keeps it meanwhile (a
            // wide fan-out's chains each held one: 2 GB over 10,000 items);
            // an inbox drive whose attempts are still out hands it, moved
            // under the lock, to the drive of their outcomes (`warm`: one
            // copy per instance, never parsed again from the store).
            let tenant = spec.snapshot.tenant.clone();
            let snapshot = Box::new(std::mem::replace(
                &mut spec.snapshot,
                Snapshot::placeholder(),
            ));
            // What `after_commit` reads of it.
            spec.snapshot.instance_id.clone_from(&snapshot.instance_id);
            let kept = match spec.remember.take() {
                // For the alarm its commit armed (a copy only when the
                // caller reads it too).
                Some(v) if given && wanted => {
                    rt.remember(&id, v, &snapshot);
                    Some(snapshot)
                }
                Some(v) => {
                    rt.remember_moved(&id, v, snapshot);
                    None
                }
                None if given && wanted => Some(snapshot),
                None => {
                    if !running.is_empty() || !spec.pending.is_empty() {
                        rt.keep_warm(&id, version + 1, snapshot);
                    }
                    None
                }
            };
            drop(guard);
            rt.after_commit(&mut spec).await;
            for task in running {
                let _ = task.await;
            }
            rt.await_sends(&mut spec).await;
            let pending = std::mem::take(&mut spec.pending);
            drop(spec);
            rt.run_attempts(id, deployed, tenant, pending).await;
            Ok(kept.map(|s| *s))
        })
    }

    /// Feed an attempt's outcome back; a failure to commit it is logged (the
    /// attempt's park stays and re-runs it when its lease falls due).
    pub(crate) async fn attempt_ended(
        &self,
        id: String,
        req: AttemptRequest,
        (outcome, written): (TaskOutcome, Option<Written>),
    ) {
        // Queued, then driven: whoever takes the instance's lock first
        // applies every queued outcome in one step and commit.
        match self.inner.inbox.lock() {
            Ok(mut m) => m
                .entry(id.clone())
                .or_default()
                .push((req, outcome, written)),
            Err(p) => p
                .into_inner()
                .entry(id.clone())
                .or_default()
                .push((req, outcome, written)),
        }
        if let Err(e) = self
            .drive_queued(id.clone(), First::Inbox, Finishing::default(), None, false)
            .await
        {
            tracing::error!(instance = %id, error = %e, "could not commit attempt outcomes; their leases will re-run them");
        }
    }

    /// Run attempts concurrently (bounded by the sandbox's lanes) and feed each
    /// outcome back.
    pub(super) fn run_attempts(
        &self,
        id: String,
        deployed: Arc<Deployed>,
        tenant: String,
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
                let tenant = tenant.clone();
                set.spawn(async move {
                    let outcome = rt.run_attempt(&deployed, &tenant, &id, &req).await;
                    rt.attempt_ended(id, req, outcome).await;
                });
            }
            while set.join_next().await.is_some() {}
        })
    }

    pub(crate) async fn run_attempt(
        &self,
        deployed: &Deployed,
        tenant: &str,
        id: &str,
        req: &AttemptRequest,
    ) -> (TaskOutcome, Option<Written>) {
        if req.task == crate::model::HTTP_TASK {
            return self.run_http_attempt(deployed, tenant, id, req).await;
        }
        let Some(component) = deployed.components.get(&req.task) else {
            let failed = TaskOutcome::Failed {
                code: Code::TaskNotRegistered.as_str().into(),
                class: Code::TaskNotRegistered.class(),
                retryable: false,
                message: format!(
                    "no module `{}` in deployment {}",
                    req.task, deployed.record.id
                ),
                details: None,
                retry_after_ms: None,
            };
            return (failed, None);
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
        // Stoppable once a committed step abandons it (interrupt.rs).
        // A module that calls out gets its egress session (egress.rs).
        let egress = self
            .session_for(tenant, &req.task, component, &req.idempotency_key)
            .await;
        // A module deployed reusable may run on a warm instance of this
        // tenant (sandbox/reuse.rs).
        let reuse = deployed.record.reusable.get(&req.task).map(|r| Reuse {
            max_reuses: r.max_reuses,
            memory_ceiling_bytes: r.memory_ceiling_bytes,
        });
        let entered = self.inner.running.enter(id, req.token, req.attempt);
        let report = self
            .inner
            .sandbox
            .attempt_reusing(
                component,
                &ctx,
                &input,
                &limits,
                &entered.stop,
                egress,
                reuse,
            )
            .await;
        drop(entered);
        tracing::debug!(instance = %id, task = %req.node, attempt = req.attempt, outcome = ?report.outcome, "attempt ended");
        let written = Written::of(&report);
        (to_outcome(report.outcome), written)
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
        // No wait: one instance of every ACTIVE process of the tenant with a
        // message start of this name (Camunda's rule); the first is answered.
        let mut first = None;
        for dep in self.inner.store.list_deployments(Some(tenant)).await? {
            if dep.state != crate::store::DeploymentState::Active {
                continue;
            }
            let deployed = self.deployed(&dep.id).await?;
            let start = deployed.process.starts_in(None).find(|n| {
                matches!(&n.kind, crate::model::NodeKind::Start(crate::model::StartTrigger::Message { name: m }) if m == name)
            });
            if let Some(start) = start {
                let id = self
                    .start(StartRequest {
                        tenant: tenant.to_string(),
                        process_id: dep.process_id.clone(),
                        variables: variables.clone(),
                        start_node: Some(start.id.clone()),
                        ..StartRequest::default()
                    })
                    .await?;
                first.get_or_insert(id);
            }
        }
        if let Some(id) = first {
            return Ok(id);
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

fn stateful_without_datasource(process_id: &str) -> RuntimeError {
    RuntimeError::new(
        Code::DatasourceRequired,
        format!(
            "process `{process_id}` is stateful (it can park: a timer, a message wait or a retry policy) \
             and needs a durable datasource (a SQLite file or PostgreSQL), not an in-memory one"
        ),
    )
}
