//! Timer start events are schedules (000): a row per (deployment, start
//! event), armed when the deployment becomes ACTIVE, re-armed on boot,
//! resolved when it stops being ACTIVE. A due schedule mints an instance
//! through the ordinary start path ([`Runtime::start`]) with empty variables,
//! so tenancy, quotas and audit apply; a refused fire is journaled in
//! `schedule_events` and counted, never dropped.
//!
//! Invariants:
//! - a cycle never bursts: [`crate::time::Cycle::catch_up`] coalesces every
//!   missed slot into one fire and moves to the next slot; each skipped slot
//!   spends a repeat (counted in `skipped`). A duration or date start fires once;
//! - a fire is exactly-once per slot: its instance carries the idempotency
//!   key `schedule:<deployment>:<node>:<slot>`, so a fire replayed after a
//!   crash between the start and the schedule's move creates nothing new;
//! - arming on boot and firing run under the `schedules` lease: one replica
//!   arms and fires at a time.

use super::{Runtime, RuntimeResult, StartRequest};
use crate::model::{NodeKind, StartTrigger};
use crate::store::tenancy::{ScheduleEvent, ScheduleRecord, SCHEDULE_ARMED, SCHEDULE_EXHAUSTED};
use crate::store::{DeploymentRecord, DeploymentState, Store};
use crate::time::{from_millis, to_millis, to_millis_ceil, TimerSpec};

/// The lease under which one replica arms and fires schedules.
pub const SCHEDULE_LEASE: &str = "schedules";
/// How long the lease lasts without renewal (runtime-clock time).
const LEASE_TTL_MS: i64 = 30_000;
/// Schedules fired per tick.
const TICK_BATCH: i64 = 256;

impl<S: Store> Runtime<S> {
    /// Arm the timer start events of an ACTIVE deployment (a no-op for one
    /// already armed, or a deployment that is not ACTIVE).
    pub async fn arm_schedules(&self, rec: &DeploymentRecord) -> RuntimeResult<()> {
        if rec.state != DeploymentState::Active {
            return Ok(());
        }
        let deployed = self.deployed(&rec.id).await?;
        let armed_ms = to_millis(self.inner.clock.now());
        let armed_at = from_millis(armed_ms);
        let mut armed = false;
        for n in deployed.process.starts_in(None) {
            let NodeKind::Start(StartTrigger::Timer(spec)) = &n.kind else {
                continue;
            };
            let next_due = spec.first_due(armed_at).map(to_millis_ceil);
            self.inner
                .store
                .arm_schedule(&ScheduleRecord {
                    deployment_id: rec.id.clone(),
                    start_node: n.id.clone(),
                    tenant: rec.tenant.clone(),
                    armed_at: armed_ms,
                    last_slot: None,
                    next_due,
                    state: if next_due.is_some() {
                        SCHEDULE_ARMED
                    } else {
                        SCHEDULE_EXHAUSTED
                    }
                    .to_string(),
                    fires: 0,
                    skipped: 0,
                    refused: 0,
                })
                .await?;
            armed = true;
        }
        if armed {
            self.inner.wake.notify_one();
        }
        Ok(())
    }

    /// Boot: arm the schedules of every ACTIVE deployment that lacks them and
    /// resolve those of deployments no longer ACTIVE (under the lease).
    pub async fn rearm_schedules(&self) -> RuntimeResult<()> {
        if !self.hold_schedule_lease().await? {
            return Ok(());
        }
        for dep in self.inner.store.list_deployments(None).await? {
            if dep.state == DeploymentState::Active {
                if let Err(e) = self.arm_schedules(&dep).await {
                    tracing::warn!(deployment = %dep.id, error = %e, "cannot arm the schedules of a deployment");
                }
            }
        }
        self.inner.store.resolve_inactive_schedules().await?;
        Ok(())
    }

    async fn hold_schedule_lease(&self) -> RuntimeResult<bool> {
        let now = to_millis(self.inner.clock.now());
        Ok(self
            .inner
            .store
            .try_lease(SCHEDULE_LEASE, &self.inner.owner, now, LEASE_TTL_MS)
            .await?)
    }

    /// Let the schedule lease go (on shutdown), so another replica takes over at once.
    pub async fn release_schedule_lease(&self) {
        let _ = self
            .inner
            .store
            .release_lease(SCHEDULE_LEASE, &self.inner.owner)
            .await;
    }

    /// Fire every schedule due now (if this replica holds the lease). Returns
    /// the next instant a schedule falls due.
    ///
    /// Without the lease the answer is `None` (the holder fires; the serve
    /// loop looks again within its idle bound). A schedule still due after
    /// its fire failed answers one second from now, so no caller spins on it.
    pub async fn tick_schedules(&self) -> RuntimeResult<Option<i64>> {
        if !self.hold_schedule_lease().await? {
            return Ok(None);
        }
        let now = self.inner.clock.now();
        for s in self
            .inner
            .store
            .due_schedules(to_millis(now), TICK_BATCH)
            .await?
        {
            if let Err(e) = self.fire_schedule(&s, now).await {
                tracing::warn!(deployment = %s.deployment_id, node = %s.start_node, error = %e, "schedule fire failed; retried next tick");
            }
        }
        let now_ms = to_millis(now);
        Ok(self.inner.store.next_schedule_due().await?.map(|n| {
            if n <= now_ms {
                now_ms.saturating_add(1000)
            } else {
                n
            }
        }))
    }

    /// Fire one due schedule: mint an instance (or record why not) and move
    /// the schedule to its next slot.
    async fn fire_schedule(
        &self,
        s: &ScheduleRecord,
        now: chrono::DateTime<chrono::Utc>,
    ) -> RuntimeResult<()> {
        let at = to_millis(now);
        let dep = self.inner.store.get_deployment(&s.deployment_id).await?;
        if dep
            .as_ref()
            .is_none_or(|d| d.state != DeploymentState::Active)
        {
            self.inner.store.resolve_inactive_schedules().await?;
            return Ok(());
        }
        let deployed = self.deployed(&s.deployment_id).await?;
        let spec = deployed
            .process
            .find(&s.start_node)
            .and_then(|n| match &n.kind {
                NodeKind::Start(StartTrigger::Timer(spec)) => Some(spec.clone()),
                _ => None,
            });
        let Some(spec) = spec else {
            let event = refused(
                at,
                None,
                0,
                crate::Code::ProcessNotFound,
                "the start event is gone from the deployment",
            );
            self.inner
                .store
                .record_fire(&s.deployment_id, &s.start_node, None, &event)
                .await?;
            return Ok(());
        };
        let (slot, skipped, next_due) = match &spec {
            TimerSpec::Cycle(c) => {
                let last = s.last_slot.and_then(|l| u64::try_from(l).ok());
                let cu = c.catch_up(from_millis(s.armed_at), last, now);
                let Some(fire) = cu.fire else { return Ok(()) };
                (fire, cu.skipped, cu.next.map(|(_, t)| to_millis_ceil(t)))
            }
            TimerSpec::Duration(_) | TimerSpec::Date(_) => (0, 0, None),
        };
        let slot_i = i64::try_from(slot).unwrap_or(i64::MAX);
        let skipped_i = i64::try_from(skipped).unwrap_or(i64::MAX);
        let started = self
            .start(StartRequest {
                tenant: s.tenant.clone(),
                process_id: deployed.record.process_id.clone(),
                start_node: Some(s.start_node.clone()),
                idempotency_key: Some(format!(
                    "schedule:{}:{}:{slot}",
                    s.deployment_id, s.start_node
                )),
                ..StartRequest::default()
            })
            .await;
        let event = match started {
            Ok(id) => ScheduleEvent {
                at,
                slot: Some(slot_i),
                skipped: skipped_i,
                outcome: "fired".into(),
                instance_id: Some(id),
                code: None,
                message: None,
            },
            Err(e) => {
                tracing::warn!(deployment = %s.deployment_id, node = %s.start_node, slot, code = %e.code, "schedule fire refused: {}", e.message);
                refused(at, Some(slot_i), skipped_i, e.code, &e.message)
            }
        };
        self.inner
            .store
            .record_fire(&s.deployment_id, &s.start_node, next_due, &event)
            .await?;
        Ok(())
    }
}

fn refused(
    at: i64,
    slot: Option<i64>,
    skipped: i64,
    code: crate::Code,
    message: &str,
) -> ScheduleEvent {
    ScheduleEvent {
        at,
        slot,
        skipped,
        outcome: "refused".into(),
        instance_id: None,
        code: Some(code.as_str().to_string()),
        message: Some(message.to_string()),
    }
}
