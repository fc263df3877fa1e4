//! Deployment lifecycle (000): a new version is ACTIVE and the one it
//! replaced DRAINING; undeploy makes a deployment DRAINING too; a DRAINING
//! deployment RETIRES once it has no RUNNING, WAITING or FAILED instance.
//!
//! Invariants:
//! - the retirement gate is [`Store::deployment_load`]: a FAILED instance
//!   keeps its deployment DRAINING (it may still be repaired or retried from
//!   failure on it); COMPLETED, TERMINATED and COMPENSATED ones do not count;
//! - the gate is checked whenever it can open: after a terminal step of an
//!   instance of a DRAINING deployment, after a deploy or undeploy, and by the
//!   periodic [`Runtime::retire_drained`] pass of the serve loop (which also
//!   catches instances deleted by the sweeper or ended on another replica);
//! - a schedule of a deployment that is no longer ACTIVE is resolved before
//!   the deployment is reported drained or retired.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::store::{DeploymentRecord, DeploymentState, Store};

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
}
