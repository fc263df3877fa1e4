//! Incidents: a poisoned push delivery, an external task whose worker
//! retries are spent. Listed per tenant; resolving one re-arms what it
//! stopped — the delivery (its count starts again) or the external task
//! (fresh worker retries) — if its call still waits for it.
//!
//! Invariant: an incident is opened in the transaction that gave up (the
//! store's), so none is lost; resolving is idempotent-safe: a resolved
//! incident answers `SUTRA.RUNTIME.INCIDENT.RESOLVED`.

use super::driver::ms;
use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::store::channels::{IncidentFilter, IncidentRecord, INCIDENT_RESOLVED};
use crate::store::Store;

/// What resolving an incident did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveOutcome {
    /// The request is pending again (a delivery, a fetchable task).
    Rearmed,
    /// Its call no longer waits (re-driven, answered, ended): nothing to re-arm.
    Closed,
}

impl ResolveOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ResolveOutcome::Rearmed => "rearmed",
            ResolveOutcome::Closed => "closed",
        }
    }
}

impl<S: Store> Runtime<S> {
    /// A tenant's incidents (`filter.tenant` is set by the caller).
    pub async fn incidents(&self, filter: &IncidentFilter) -> RuntimeResult<Vec<IncidentRecord>> {
        Ok(self.inner.store.list_incidents(filter).await?)
    }

    /// Resolve an OPEN incident of the tenant.
    pub async fn resolve_incident(
        &self,
        tenant: &str,
        id: &str,
    ) -> RuntimeResult<(IncidentRecord, ResolveOutcome)> {
        let not_found = || RuntimeError::new(Code::IncidentNotFound, format!("no incident {id}"));
        let incident = self
            .inner
            .store
            .get_incident(id)
            .await?
            .filter(|i| i.tenant == tenant)
            .ok_or_else(not_found)?;
        let resolved = || {
            RuntimeError::new(
                Code::IncidentResolved,
                format!("incident {id} is resolved already"),
            )
        };
        if incident.state == INCIDENT_RESOLVED {
            return Err(resolved());
        }
        // Re-arm only a request whose call still waits for it.
        let live = match self.inner.store.get_request(&incident.request_id).await? {
            Some(req) => self
                .inner
                .store
                .parks_of(&req.instance_id)
                .await?
                .iter()
                .any(|p| p.seq == req.park_seq),
            None => false,
        };
        let retries = i64::from(self.inner.config.outbox.external_task_retries);
        let now = ms(self.inner.clock.now());
        if !self
            .inner
            .store
            .resolve_incident(id, now, live.then_some(retries))
            .await?
        {
            return Err(resolved());
        }
        if live {
            self.inner.wake.notify_one();
            self.inner.pull_wake.notify_waiters();
        }
        let incident = self
            .inner
            .store
            .get_incident(id)
            .await?
            .ok_or_else(not_found)?;
        let outcome = if live {
            ResolveOutcome::Rearmed
        } else {
            ResolveOutcome::Closed
        };
        Ok((incident, outcome))
    }
}
