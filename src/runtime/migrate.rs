//! Instance migration: `POST /v1/instances/{id}/migrate` moves a WAITING or
//! FAILED instance onto another deployment of its process (a fixed
//! version). A FAILED one then resumes at its failed node with a fresh
//! budget; a WAITING one keeps waiting, its parks re-pinned to the target.
//! The old deployment can then retire.
//!
//! Invariants: the move is one transaction (snapshot, deployment, parks,
//! pending requests) at the instance's expected version; nothing moves
//! when a node has no counterpart (engine/migrate.rs).

use super::driver::ms;
use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::{self, Event, InstanceState, Snapshot};
use crate::store::{DeploymentState, Store};
use std::collections::BTreeMap;

/// Where to move an instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrateRequest {
    /// The target deployment id (a deployment of the same process).
    pub target: String,
    /// Source node id → target node id; unmapped nodes keep their id.
    pub mapping: BTreeMap<String, String>,
}

impl<S: Store> Runtime<S> {
    /// Migrate the tenant's instance `id`. Returns its snapshot afterwards.
    pub async fn migrate(
        &self,
        tenant: &str,
        id: &str,
        req: &MigrateRequest,
    ) -> RuntimeResult<Snapshot> {
        let rec = self
            .inner
            .store
            .load_instance(id)
            .await?
            .filter(|r| r.tenant == tenant)
            .ok_or_else(|| {
                RuntimeError::new(Code::InstanceNotFound, format!("no instance {id}"))
            })?;
        let target = self
            .inner
            .store
            .get_deployment(&req.target)
            .await?
            .filter(|d| d.tenant == tenant)
            .ok_or_else(|| {
                RuntimeError::new(
                    Code::DeploymentNotFound,
                    format!("no deployment {}", req.target),
                )
            })?;
        if target.state == DeploymentState::Retired {
            return Err(RuntimeError::new(
                Code::MigrationTargetInvalid,
                format!("deployment {} is RETIRED", target.id),
            ));
        }
        if target.id == rec.deployment_id {
            return Err(RuntimeError::new(
                Code::MigrationTargetInvalid,
                format!("instance {id} runs on deployment {} already", target.id),
            ));
        }
        let old_deployment = rec.deployment_id.clone();
        let lock = self.lock_for(id);
        let guard = lock.lock().await;
        // The store's copy: a snapshot kept for an alarm would be stale now.
        let _ = self.recall(id);
        let (version, snap) = self.load(id).await?;
        let state = snap.state;
        if rec.closed_at.is_some() {
            return Err(RuntimeError::new(
                Code::InstanceState,
                format!("instance {id} was closed: a closed instance does not resume (retry it instead)"),
            ));
        }
        if !matches!(state, InstanceState::Waiting | InstanceState::Failed) {
            return Err(RuntimeError::new(
                Code::InstanceState,
                format!(
                    "instance {id} is {}: only a WAITING or FAILED instance migrates",
                    state.as_str()
                ),
            ));
        }
        let source = self.deployed(&snap.deployment_id).await?;
        let dest = self.deployed(&target.id).await?;
        let mut moved = engine::migrate(
            &source.process,
            &dest.process,
            snap,
            &target.id,
            &req.mapping,
        )?;
        self.inner
            .store
            .repin_instance(
                id,
                version,
                &target.id,
                &moved.to_json(),
                moved.state.as_str(),
                ms(self.inner.clock.now()),
            )
            .await?;
        drop(guard);
        tracing::info!(instance = %id, from = %old_deployment, to = %target.id, "instance migrated");
        let snap = if state == InstanceState::Failed {
            self.drive(id.to_string(), Event::Resume).await?
        } else {
            moved
        };
        // The old version may retire now (lifecycle.rs).
        if let Err(e) = self.retire_if_drained(&old_deployment).await {
            tracing::warn!(deployment = %old_deployment, error = %e, "retirement check failed");
        }
        Ok(snap)
    }
}
