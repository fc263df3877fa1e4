//! Tenant quotas and limits as the runtime applies them: the live-instance
//! quota on every start path (API start, message start, schedule fire,
//! retry), the module-size quota and the deadline ceiling on deploy, and the
//! fuel/deadline/memory ceilings on every attempt.
//!
//! Invariants:
//! - a tenant without a `tenants` row (e.g. the local `default` tenant of
//!   `sutra run`) has no quota; the server's own limits always apply;
//! - the live-instance check and the instance insert run under one
//!   per-tenant lock, so concurrent starts on one replica never overshoot the
//!   quota (across replicas the check is best effort: it may overshoot by the
//!   starts in flight on the other replicas);
//! - a replayed idempotent start is never refused by the quota: it creates nothing;
//! - limits are cached for [`CACHE_TTL`] of runtime-clock time; an update made
//!   through this runtime ([`Runtime::forget_tenant`]) is seen at once.

use super::{Runtime, RuntimeError, RuntimeResult, StartRequest};
use crate::codes::Code;
use crate::model::{NodeKind, Process};
use crate::sandbox::{CompileLimits, Limits};
use crate::store::tenancy::TenantLimits;
use crate::store::Store;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a tenant's limits are cached (runtime-clock time).
pub const CACHE_TTL: Duration = Duration::from_secs(5);

/// Cached limits and the per-tenant admission locks.
#[derive(Default)]
pub(crate) struct TenancyCache {
    /// tenant → (cached at ms, limits; `None` = no tenants row).
    limits: Mutex<HashMap<String, (i64, Option<TenantLimits>)>>,
    admit: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held from the quota check until the instance row is written.
pub(crate) type Admission = Option<tokio::sync::OwnedMutexGuard<()>>;

fn quota(message: String) -> RuntimeError {
    RuntimeError::new(Code::QuotaExceeded, message)
}

impl<S: Store> Runtime<S> {
    /// A tenant's limits (`None`: the tenant has no quota row).
    pub async fn tenant_limits(&self, tenant: &str) -> RuntimeResult<Option<TenantLimits>> {
        let now = self.inner.clock.now().timestamp_millis();
        let ttl = CACHE_TTL.as_millis() as i64;
        if let Ok(m) = self.inner.tenancy.limits.lock() {
            if let Some((at, l)) = m.get(tenant) {
                if now.saturating_sub(*at) < ttl {
                    return Ok(l.clone());
                }
            }
        }
        // Boxed: every start and attempt awaits this; the read is rare.
        let limits = Box::pin(self.inner.store.get_tenant(tenant))
            .await?
            .map(|t| t.limits);
        if let Ok(mut m) = self.inner.tenancy.limits.lock() {
            if m.len() > 10_000 {
                m.clear();
            }
            m.insert(tenant.to_string(), (now, limits.clone()));
        }
        Ok(limits)
    }

    /// Drop a tenant's cached limits (after an update through the API).
    pub fn forget_tenant(&self, tenant: &str) {
        if let Ok(mut m) = self.inner.tenancy.limits.lock() {
            m.remove(tenant);
        }
    }

    fn admission_lock(&self, tenant: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = match self.inner.tenancy.admit.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        m.entry(tenant.to_string()).or_default().clone()
    }

    /// The live-instance quota: `QuotaExceeded` when the tenant is at its
    /// ceiling. Hold the answer until the instance row is written.
    pub(crate) async fn admit(&self, req: &StartRequest) -> RuntimeResult<Admission> {
        let Some(max) = self
            .tenant_limits(&req.tenant)
            .await?
            .and_then(|l| l.max_instances)
        else {
            return Ok(None);
        };
        // Boxed: every start awaits this; a quota is the rare case.
        Box::pin(self.admit_counted(req, max)).await
    }

    /// [`Self::admit`] for a tenant with a quota of `max` live instances.
    async fn admit_counted(&self, req: &StartRequest, max: i64) -> RuntimeResult<Admission> {
        let guard = self.admission_lock(&req.tenant).lock_owned().await;
        if let Some(key) = &req.idempotency_key {
            if self
                .inner
                .store
                .instance_by_key(&req.tenant, key, self.inner.clock.now().timestamp_millis())
                .await?
                .is_some()
            {
                return Ok(Some(guard));
            }
        }
        let live = self.inner.store.live_instance_count(&req.tenant).await?;
        if live >= max {
            return Err(quota(format!(
                "tenant `{}` has {live} non-terminal instances; its quota is {max}",
                req.tenant
            )));
        }
        Ok(Some(guard))
    }

    /// The server's attempt limits, lowered to the tenant's ceilings.
    pub(crate) async fn attempt_limits(&self, tenant: &str) -> Limits {
        let mut limits = self.inner.limits.clone();
        let Ok(Some(t)) = self.tenant_limits(tenant).await else {
            return limits;
        };
        if let Some(f) = t.fuel.and_then(|f| u64::try_from(f).ok()) {
            limits.fuel = limits.fuel.min(f);
        }
        if let Some(d) = t.deadline_ms.and_then(|d| u64::try_from(d).ok()) {
            limits.deadline = limits.deadline.min(Duration::from_millis(d));
        }
        if let Some(m) = t.memory_bytes.and_then(|m| u64::try_from(m).ok()) {
            limits.memory_bytes = limits.memory_bytes.min(m);
        }
        limits
    }

    /// The compile limits for `tenant`'s uploads: the server's
    /// (`sutra.sandbox.compile.*`) lowered to the tenant's module size,
    /// function count and compile time (CPU and wall clock alike).
    pub(crate) async fn compile_limits(&self, tenant: &str) -> RuntimeResult<CompileLimits> {
        let mut limits = self.inner.config.compile.limits.clone();
        let Some(t) = self.tenant_limits(tenant).await? else {
            return Ok(limits);
        };
        let n = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
        if let Some(max) = n(t.max_module_bytes) {
            limits.max_module_bytes = limits.max_module_bytes.min(max);
        }
        if let Some(max) = n(t.max_module_functions) {
            limits.max_functions = limits.max_functions.min(max);
        }
        if let Some(ms) = n(t.compile_ms) {
            let d = Duration::from_millis(ms);
            limits.cpu_time = limits.cpu_time.min(d);
            limits.wall_time = limits.wall_time.min(d);
        }
        Ok(limits)
    }

    /// Deploy-time quotas: every module within the tenant's module size, and
    /// no task asking for a longer deadline than the tenant's ceiling.
    pub(crate) async fn check_bundle_quota(
        &self,
        tenant: &str,
        processes: &[&Process],
        modules: &BTreeMap<String, Vec<u8>>,
    ) -> RuntimeResult<()> {
        let Some(limits) = self.tenant_limits(tenant).await? else {
            return Ok(());
        };
        if let Some(max) = limits.max_module_bytes {
            for (name, bytes) in modules {
                if i64::try_from(bytes.len()).unwrap_or(i64::MAX) > max {
                    return Err(quota(format!(
                        "module `{name}` is {} bytes; tenant `{tenant}` may deploy modules of at most {max} bytes",
                        bytes.len()
                    )));
                }
            }
        }
        if let Some(max) = limits.deadline_ms {
            for p in processes {
                for n in &p.nodes {
                    let NodeKind::ServiceTask(t) = &n.kind else {
                        continue;
                    };
                    let Some(timeout) = &t.timeout else { continue };
                    let asked =
                        i64::try_from(timeout.duration.as_std().as_millis()).unwrap_or(i64::MAX);
                    if asked > max {
                        return Err(quota(format!(
                            "task `{}` of process `{}` asks for a {asked} ms deadline; tenant `{tenant}` allows at most {max} ms",
                            n.id, p.id
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}
