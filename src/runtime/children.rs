//! Child instances (process calls; engine/child.rs) in the runtime: created
//! with their parent's step, carried on after its commit, their end handed
//! back to the parent durably.
//!
//! - **Start.** Before a step commits, every `Effect::StartChild` whose park
//!   is still armed is resolved ([`Runtime::start_children`]): the called
//!   process's ACTIVE deployment in the parent's tenant, the tenant's quota,
//!   the depth of the chain (`sutra.runtime.max-call-depth`: the most
//!   instances one chain holds, the top-level one included, so a flow that
//!   calls itself at once leaves exactly that many); then the child's first step
//!   (`engine::start`) — and, recursively, the children *it* starts. The
//!   child rows go into the parent's write (`StepWrite::children`): one
//!   transaction, so a child start is never lost nor doubled. A call that
//!   cannot start (an undeployed process, ...) is answered at once with a
//!   failed `Event::ChildEnded`, applied in memory before the commit.
//! - **Run.** After the commit the children's attempts run like any
//!   started instance's ([`Runtime::after_commit`]).
//! - **End.** A child's final step writes its outcome on its parent's child
//!   park in the same transaction (`StepWrite::wake_parent`), pre-claimed by
//!   this runtime, which then drives the parent with `Event::ChildEnded`.
//!   If it dies first, the claim lapses and any poller delivers the stored
//!   outcome ([`Runtime::fire_park`]).
//! - **Cancel.** `Effect::CancelChild` cancels the child once the step that
//!   stopped awaiting it committed; a child orphaned by a crash in between
//!   is cancelled by the next orphan pass ([`Runtime::cancel_orphans`], at
//!   boot and with every sweep).
//!
//! Invariant: nothing of a child leaves the process before the step that
//! created it committed; work after the commit runs in spawned tasks that
//! the caller awaits (so a chain of calls never nests its polls).

use super::driver::ms;
use super::inline::Spec;
use super::{Deployed, Runtime, RuntimeResult};
use crate::codes::Code;
use crate::engine::{self, ChildOutcome, ChildStart, Event, ParentLink, Snapshot};
use crate::store::children::{ChildEnd, NewChild};
use crate::store::{NewInstance, ParkClaim, StepWrite, Store};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How long the runtime that committed a child's end holds its parent's
/// park before any poller may deliver it instead.
const DELIVERY_GRACE_MS: i64 = 5_000;

/// Orphans cancelled per pass.
const ORPHAN_BATCH: i64 = 256;

/// A child created with its parent's step, carried on after the commit.
pub(crate) struct PreparedChild {
    pub(crate) new: NewInstance,
    pub(crate) parent_id: String,
    pub(crate) parent_park: i64,
    pub(crate) deployed: Arc<Deployed>,
    /// Its first step (its own children in `spec.children`).
    pub(crate) spec: Spec,
    /// The finished write of that step (its descendants' rows in `children`).
    pub(crate) write: StepWrite,
}

/// A child's end to hand to its parent once committed.
pub(crate) struct Delivery {
    pub(crate) parent: String,
    pub(crate) park: u64,
    pub(crate) outcome: ChildOutcome,
}

/// The rows of `spec`'s prepared children and of theirs, parents first.
pub(crate) fn child_rows(spec: &Spec) -> Vec<NewChild> {
    let mut rows = Vec::new();
    for c in &spec.children {
        let mut step = c.write.clone();
        let descendants = std::mem::take(&mut step.children);
        rows.push(NewChild {
            instance: c.new.clone(),
            parent_id: c.parent_id.clone(),
            parent_park: c.parent_park,
            step,
        });
        rows.extend(descendants);
    }
    rows
}

impl<S: Store> Runtime<S> {
    /// The end of instance `spec` (a child whose step is final), for its
    /// parent: written with the step, delivered after it.
    pub(crate) fn child_end(&self, spec: &mut Spec, w: &mut StepWrite) {
        let snap = &spec.snapshot;
        let Some(link) = &snap.parent else {
            return;
        };
        if !w.withdraw_all || !snap.state.is_terminal() {
            return;
        }
        let outcome = ChildOutcome::of(snap);
        let now = ms(self.inner.clock.now());
        w.wake_parent = Some(ChildEnd {
            parent_id: link.instance.clone(),
            park_seq: link.park as i64,
            payload: serde_json::to_string(&outcome).unwrap_or_default(),
            due_at: now,
            claim: Some(ParkClaim {
                owner: self.inner.owner.clone(),
                until: now.saturating_add(DELIVERY_GRACE_MS),
            }),
        });
        spec.delivery = Some(Delivery {
            parent: link.instance.clone(),
            park: link.park,
            outcome,
        });
    }

    /// Before `spec` (an instance of `deployed`) is committed: prepare the
    /// children its steps start, and answer the calls that cannot start.
    pub(crate) fn start_children<'a>(
        &'a self,
        deployed: &'a Deployed,
        spec: &'a mut Spec,
    ) -> BoxFut<'a, RuntimeResult<()>> {
        Box::pin(async move {
            // A refusal applied in memory may start further calls (a Catch
            // routing to another one): a bounded number of rounds.
            for _ in 0..super::inline::MAX_INLINE_STEPS {
                let armed: Vec<ChildStart> = std::mem::take(&mut spec.child_starts)
                    .into_iter()
                    .filter(|c| spec.snapshot.parks.contains_key(&c.park))
                    .collect();
                if armed.is_empty() {
                    break;
                }
                for start in armed {
                    match self.prepare_child(&spec.snapshot, &start).await? {
                        Ok(child) => spec.children.push(child),
                        Err(outcome) => {
                            let event = Event::ChildEnded {
                                park: start.park,
                                outcome,
                            };
                            let step = deployed.apply(
                                spec.snapshot.clone(),
                                event.clone(),
                                &self.inputs(),
                            )?;
                            self.absorb(spec, step, Some(event));
                        }
                    }
                }
            }
            // A later step of the window may have withdrawn a prepared call.
            spec.children
                .retain(|c| spec.snapshot.parks.contains_key(&(c.parent_park as u64)));
            Ok(())
        })
    }

    /// Version `version` of `process` in `tenant` when it is ACTIVE or
    /// DRAINING (a pinned call; a RETIRED one starts nothing). Pinned calls
    /// are rare: the tenant's deployments are read, nothing is cached.
    async fn pinned_deployed(
        &self,
        tenant: &str,
        process: &str,
        version: u32,
    ) -> RuntimeResult<Option<Arc<Deployed>>> {
        let found = self
            .inner
            .store
            .list_deployments(Some(tenant))
            .await?
            .into_iter()
            .find(|d| {
                d.process_id == process
                    && d.version == i64::from(version)
                    && d.state != crate::store::DeploymentState::Retired
            });
        match found {
            Some(d) => self.deployed(&d.id).await.map(Some),
            None => Ok(None),
        }
    }

    /// One child: `Err(outcome)` when it cannot start (the call fails).
    async fn prepare_child(
        &self,
        parent: &Snapshot,
        start: &ChildStart,
    ) -> RuntimeResult<Result<PreparedChild, ChildOutcome>> {
        let refuse = |code: Code, message: String| {
            Ok(Err(ChildOutcome::refused(&start.instance, code, message)))
        };
        // `depth` counts child levels (1 = a child of a top-level instance),
        // so the chain holds depth + 1 instances: the limit counts them all
        // (issue 28: with `depth > limit` a chain held limit + 1).
        let depth = parent.parent.as_ref().map_or(0, |l| l.depth) + 1;
        let limit = self.inner.config.max_call_depth;
        if depth + 1 > limit {
            return refuse(
                Code::ChildDepthExceeded,
                format!(
                    "`{}` would start the {}th instance of one chain of process calls; \
                     at most {limit} are allowed (sutra.runtime.max-call-depth)",
                    start.node,
                    depth + 1
                ),
            );
        }
        let tenant = &parent.tenant;
        let deployed = match start.version {
            None => self.active_deployed(tenant, &start.process).await?,
            Some(v) => self.pinned_deployed(tenant, &start.process, v).await?,
        };
        let Some(deployed) = deployed else {
            let which = match start.version {
                None => "no active deployment".to_string(),
                Some(v) => format!("no live deployment of version {v}"),
            };
            return refuse(
                Code::ChildProcessNotFound,
                format!(
                    "`{}` calls process `{}`, which has {which} in tenant `{tenant}`",
                    start.node, start.process
                ),
            );
        };
        if let Some(max) = self
            .tenant_limits(tenant)
            .await?
            .and_then(|l| l.max_instances)
        {
            let live = self.inner.store.live_instance_count(tenant).await?;
            if live >= max {
                return refuse(
                    Code::QuotaExceeded,
                    format!(
                        "tenant `{tenant}` has {live} non-terminal instances; its quota is {max}"
                    ),
                );
            }
        }
        let step = deployed.start(
            engine::NewInstance {
                instance_id: &start.instance,
                tenant,
                deployment_id: &deployed.record.id,
                start_node: None,
                variables: start.input.clone(),
            },
            &self.inputs(),
        );
        let mut step = match step {
            Ok(step) => step,
            Err(e) => return refuse(e.code, e.message),
        };
        step.snapshot.parent = Some(ParentLink {
            instance: parent.instance_id.clone(),
            park: start.park,
            depth,
        });
        let new = NewInstance {
            id: start.instance.clone(),
            tenant: tenant.clone(),
            deployment_id: deployed.record.id.clone(),
            process_id: deployed.record.process_id.clone(),
            idempotency_key: None,
            idempotency_fingerprint: None,
            retry_of: None,
            started_at: ms(step.snapshot.started_at),
            business_key: None,
        };
        let mut spec = self.spec_of(step, None);
        spec.search_base = Some(Vec::new());
        self.start_children(&deployed, &mut spec).await?;
        let mut write = self.finish_write(&mut spec);
        self.claim_requests(tenant, &mut write).await;
        Ok(Ok(PreparedChild {
            new,
            parent_id: parent.instance_id.clone(),
            parent_park: start.park as i64,
            deployed,
            spec,
            write,
        }))
    }

    /// After `spec`'s commit, with its instance's lock released: stop the
    /// attempts it abandoned (interrupt.rs), cancel the children it stopped awaiting, carry on those it started, hand its
    /// end to its parent. Each in its own task; returns when all are done.
    pub(crate) async fn after_commit(&self, spec: &mut Spec) {
        for (token, attempt) in std::mem::take(&mut spec.abandoned) {
            self.inner
                .running
                .stop(&spec.snapshot.instance_id, token, attempt);
        }
        let mut work = tokio::task::JoinSet::new();
        for (instance, reason) in std::mem::take(&mut spec.cancels) {
            let rt = self.clone();
            work.spawn(async move {
                if let Err(e) = rt.cancel(&instance, Some(reason)).await {
                    tracing::debug!(instance = %instance, error = %e, "child not cancelled (ended, or never started)");
                }
            });
        }
        for child in std::mem::take(&mut spec.children) {
            let rt = self.clone();
            work.spawn(async move { rt.carry_on(child).await });
        }
        if let Some(d) = spec.delivery.take() {
            let rt = self.clone();
            work.spawn(async move { rt.deliver_end(d).await });
        }
        while work.join_next().await.is_some() {}
    }

    /// A child committed with its parent's step: what follows its first
    /// commit, then its attempts, until it waits.
    fn carry_on(&self, child: PreparedChild) -> BoxFut<'static, ()> {
        let rt = self.clone();
        Box::pin(async move {
            let PreparedChild {
                new,
                deployed,
                mut spec,
                write,
                ..
            } = child;
            rt.committed(&new.id, 1, &mut spec, &write).await;
            rt.remember_armed(&new.id, &mut spec);
            rt.after_commit(&mut spec).await;
            rt.await_sends(&mut spec).await;
            let pending = std::mem::take(&mut spec.pending);
            rt.run_attempts(new.id, deployed, spec.snapshot.tenant.clone(), pending)
                .await;
        })
    }

    /// Hand a committed child end to its parent; on failure the parent's
    /// park is released to the pollers (they deliver the stored outcome).
    async fn deliver_end(&self, d: Delivery) {
        let event = Event::ChildEnded {
            park: d.park,
            outcome: d.outcome,
        };
        if let Err(e) = self.drive(d.parent.clone(), event).await {
            tracing::debug!(instance = %d.parent, park = d.park, error = %e, "child end not delivered here");
            let _ = self
                .inner
                .store
                .release_claim(&d.parent, d.park as i64, &self.inner.owner)
                .await;
        }
    }

    /// The event a due park of `kind` fires: a child park with an outcome
    /// stored is the child's end, without one its timeout.
    pub(crate) async fn park_event(
        &self,
        instance_id: &str,
        seq: i64,
        kind: &str,
    ) -> RuntimeResult<Event> {
        let park = u64::try_from(seq).unwrap_or_default();
        if kind != engine::ParkKind::Child.as_str() {
            return Ok(Event::ParkFired { park });
        }
        let Some(payload) = self.inner.store.child_outcome(instance_id, seq).await? else {
            return Ok(Event::ParkFired { park });
        };
        let outcome = serde_json::from_str(&payload).map_err(|e| {
            super::RuntimeError::new(
                Code::StoreFailed,
                format!("park {instance_id}/{seq}: unreadable child outcome: {e}"),
            )
        })?;
        Ok(Event::ChildEnded { park, outcome })
    }

    /// Cancel live children whose parent no longer awaits them (a crash
    /// between the parent's step and the cancel). Returns how many.
    pub async fn cancel_orphans(&self) -> RuntimeResult<usize> {
        let orphans = self.inner.store.orphaned_children(ORPHAN_BATCH).await?;
        let mut cancelled = 0;
        for id in orphans {
            match self
                .cancel(&id, Some("its parent no longer awaits it".into()))
                .await
            {
                Ok(_) => cancelled += 1,
                Err(e) => tracing::debug!(instance = %id, error = %e, "orphan not cancelled"),
            }
        }
        Ok(cancelled)
    }
}
