//! Deployment lifecycle (000): a new version is ACTIVE and the one it
//! replaced DRAINING; undeploy makes a deployment DRAINING too; a DRAINING
//! deployment RETIRES once it has no RUNNING, WAITING or unhandled FAILED
//! instance.
//!
//! Invariants:
//! - the retirement gate is [`Store::deployment_load`]: a FAILED instance
//!   keeps its deployment DRAINING (it may still be repaired or retried from
//!   failure on it) until an operator **closes** it ([`Runtime::close`]:
//!   journaled with a reason; it stays FAILED, and retention deletes it
//!   `sutra.instance.retention` after the close); a FAILED child flow never
//!   holds it (its failure went to its parent, which handled it or failed
//!   in turn) and goes when its parent has gone; COMPLETED, TERMINATED and
//!   COMPENSATED ones do not count;
//! - the gate is checked whenever it can open: after a terminal step of an
//!   instance of a DRAINING deployment, after a deploy or undeploy, and by the
//!   periodic [`Runtime::retire_drained`] pass of the serve loop (which also
//!   catches instances deleted by the sweeper or ended on another replica);
//! - a schedule of a deployment that is no longer ACTIVE is resolved before
//!   the deployment is reported drained or retired.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::InstanceState;
use crate::store::{DeploymentRecord, DeploymentState, JournalRow, Store};

/// The longest reason a close keeps.
pub const MAX_CLOSE_REASON: usize = 1024;

impl<S: Store> Runtime<S> {
    /// Retire deployment `id` if it is DRAINING and nothing holds it. Returns
    /// whether it is RETIRED now.
    pub async fn retire_if_drained(&self, id: &str) -> RuntimeResult<bool> {
        let Some(dep) = self.inner.store.get_deployment(id).await? else {
            return Ok(false);
        };
        self.retire_read(dep).await
    }

    /// [`Runtime::retire_if_drained`] for a deployment just read.
    async fn retire_read(&self, dep: DeploymentRecord) -> RuntimeResult<bool> {
        let id = dep.id.as_str();
        match dep.state {
            DeploymentState::Retired => return Ok(true),
            DeploymentState::Active => return Ok(false),
            DeploymentState::Draining => {}
        }
        let load = self.inner.store.deployment_load(id).await?;
        if load.running + load.waiting + load.failed > 0 {
            return Ok(false);
        }
        self.inner
            .store
            .set_deployment_state(id, DeploymentState::Retired)
            .await?;
        self.forget_active();
        tracing::info!(deployment = %id, process = %dep.process_id, version = dep.version, "deployment retired");
        Ok(true)
    }

    /// Check every DRAINING deployment (the serve loop's pass). Returns how many retired.
    pub async fn retire_drained(&self) -> RuntimeResult<usize> {
        let mut retired = 0;
        for dep in self.inner.store.list_deployments(None).await? {
            if dep.state == DeploymentState::Draining && self.retire_if_drained(&dep.id).await? {
                retired += 1;
            }
        }
        Ok(retired)
    }

    /// The hook after a terminal step: the instance's deployment may retire now.
    /// Never fails the step (it is committed already): a failure is logged and
    /// the serve loop's pass retries.
    pub(crate) async fn after_terminal(&self, deployment_id: &str) {
        // An ACTIVE deployment cannot retire: skip the read while it is known
        // so. Once that knowledge is stale, one reader refreshes it, so a
        // burst of instances ending (1,000 timers due together) reads the
        // deployment once, not once each.
        if self.known_active(deployment_id) {
            return;
        }
        // Boxed: every terminal commit awaits this, the read is rare.
        Box::pin(self.check_drained(deployment_id)).await
    }

    /// [`Self::after_terminal`] once the deployment is not known active.
    async fn check_drained(&self, deployment_id: &str) {
        let read = {
            let _refresh = self.inner.active_refresh.lock().await;
            if self.known_active(deployment_id) {
                return;
            }
            match self.inner.store.get_deployment(deployment_id).await {
                Ok(Some(dep)) if dep.state == DeploymentState::Active => {
                    self.note_active(&dep);
                    return;
                }
                other => other,
            }
        };
        let retired = match read {
            Ok(Some(dep)) => self.retire_read(dep).await,
            Ok(None) => Ok(false),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = retired {
            tracing::warn!(deployment = %deployment_id, error = %e, "retirement check failed");
        }
    }

    /// Close FAILED instance `id` of `tenant` (an operator has dealt with
    /// it): it stays FAILED, no longer holds its deployment (which retires
    /// if nothing else does) and retention applies from now. Journaled
    /// (`closed`, with the reason) when the audit journal is on. Another
    /// tenant's or a missing instance is `INSTANCE_NOT_FOUND`; one that is
    /// not FAILED, or is closed already, `INSTANCE_STATE`.
    pub async fn close(
        &self,
        tenant: &str,
        id: &str,
        reason: Option<String>,
    ) -> RuntimeResult<crate::store::InstanceRecord> {
        let not_found = || RuntimeError::new(Code::InstanceNotFound, format!("no instance {id}"));
        let rec = self
            .inner
            .store
            .load_instance(id)
            .await?
            .filter(|r| r.tenant == tenant)
            .ok_or_else(not_found)?;
        let reason = reason.unwrap_or_default();
        if reason.len() > MAX_CLOSE_REASON {
            return Err(RuntimeError::new(
                Code::ApiMalformed,
                format!("a close reason has at most {MAX_CLOSE_REASON} bytes"),
            ));
        }
        let failed = InstanceState::parse(&rec.state) == Some(InstanceState::Failed);
        if !failed || rec.closed_at.is_some() {
            let why = match failed {
                true => "closed already".to_string(),
                false => format!(
                    "{}: only a FAILED instance is closed (cancel a live one)",
                    rec.state
                ),
            };
            return Err(RuntimeError::new(
                Code::InstanceState,
                format!("instance {id} is {why}"),
            ));
        }
        let at = self.inner.clock.now().timestamp_millis();
        let journal = self.inner.config.audit_sql.then(|| JournalRow {
            seq: 0,
            at,
            kind: "closed".to_string(),
            node: None,
            data: serde_json::json!({ "reason": reason }).to_string(),
        });
        if !self
            .inner
            .store
            .close_instance(id, at, &reason, journal)
            .await?
        {
            return Err(RuntimeError::new(
                Code::InstanceState,
                format!("instance {id} is no longer an unclosed FAILED instance"),
            ));
        }
        tracing::info!(instance = %id, reason = %reason, "instance closed");
        self.retire_if_drained(&rec.deployment_id).await?;
        self.inner
            .store
            .load_instance(id)
            .await?
            .ok_or_else(not_found)
    }

    /// Undeploy: no new starts; the deployment drains (and retires when
    /// nothing holds it). Its schedules are resolved. Idempotent; a
    /// deployment of another tenant is `DeploymentNotFound`.
    pub async fn undeploy(&self, tenant: &str, id: &str) -> RuntimeResult<DeploymentRecord> {
        let dep = self
            .inner
            .store
            .get_deployment(id)
            .await?
            .filter(|d| d.tenant == tenant)
            .ok_or_else(|| {
                RuntimeError::new(Code::DeploymentNotFound, format!("no deployment {id}"))
            })?;
        if dep.state == DeploymentState::Active {
            self.inner
                .store
                .set_deployment_state(id, DeploymentState::Draining)
                .await?;
            self.forget_active();
        }
        self.inner.store.resolve_inactive_schedules().await?;
        self.retire_if_drained(id).await?;
        self.inner.store.get_deployment(id).await?.ok_or_else(|| {
            RuntimeError::new(Code::DeploymentNotFound, format!("no deployment {id}"))
        })
    }

    /// After new deployments became ACTIVE: arm their schedules, resolve the
    /// replaced versions' schedules, and retire replaced versions nothing holds.
    pub(crate) async fn activated(&self, records: &[DeploymentRecord]) -> RuntimeResult<()> {
        for r in records {
            self.arm_schedules(r).await?;
        }
        self.inner.store.resolve_inactive_schedules().await?;
        for dep in self
            .inner
            .store
            .list_deployments(records.first().map(|r| r.tenant.as_str()))
            .await?
        {
            if dep.state == DeploymentState::Draining
                && records.iter().any(|r| r.process_id == dep.process_id)
            {
                self.retire_if_drained(&dep.id).await?;
            }
        }
        Ok(())
    }

    /// Set and unset variables of instance `id` of `tenant` — a FAILED one
    /// (what a retry from its failure resumes with) or a WAITING one — as
    /// one step, journaled (`variables_edited`: who, what) when the audit
    /// journal is on (`engine::edit`). Another tenant's or a missing
    /// instance is `INSTANCE_NOT_FOUND`; `by` has at most
    /// [`MAX_CLOSE_REASON`] bytes.
    pub async fn edit_variables(
        &self,
        tenant: &str,
        id: &str,
        set: serde_json::Map<String, serde_json::Value>,
        unset: Vec<String>,
        by: Option<String>,
    ) -> RuntimeResult<crate::engine::Snapshot> {
        let owned = self
            .inner
            .store
            .load_instance(id)
            .await?
            .is_some_and(|r| r.tenant == tenant);
        if !owned {
            return Err(RuntimeError::new(
                Code::InstanceNotFound,
                format!("no instance {id}"),
            ));
        }
        if by.as_ref().is_some_and(|b| b.len() > MAX_CLOSE_REASON) {
            return Err(RuntimeError::new(
                Code::ApiMalformed,
                format!("`by` has at most {MAX_CLOSE_REASON} bytes"),
            ));
        }
        self.drive(
            id.to_string(),
            crate::engine::Event::EditVariables { set, unset, by },
        )
        .await
    }
}
