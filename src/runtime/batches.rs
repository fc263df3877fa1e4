//! Batch operations (issue 35 item 4): retry, cancel, resolve the incidents
//! of, or migrate many instances as one durable operation on the server.
//!
//! A batch is created with its whole selection (`store::batches`: one item
//! per instance, at most [`MAX_BATCH_ITEMS`]) and carried out by a runner
//! beside the poller ([`Runtime::batch_loop`]): it claims a RUNNING batch
//! whose due time has come, carries out up to `sutra.batch.rate` of its
//! PENDING items one after the other through the same runtime calls the
//! single-instance routes make, writes each item's outcome, and makes the
//! batch due again a second later — so a batch over 10,000 instances never
//! floods the runtime the other instances share.
//!
//! Invariants:
//! - safe across a restart: the claim is a lease, and an item whose outcome
//!   was not written is carried out again. A retry carries the idempotency
//!   key `batch:<batch>:<seq>`, so a second attempt answers the instance the
//!   first one made; a cancel, resolve or migrate of an instance that is
//!   already where the batch wants it is SKIPPED, not failed;
//! - a tenant's batch touches only that tenant's instances (another
//!   tenant's id is an item FAILED with `SUTRA.RUNTIME.INSTANCE_NOT_FOUND`);
//! - an item's failure never stops the batch: it is recorded with its code.

use super::retry::RetryMode;
use super::{MigrateRequest, Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::InstanceState;
use crate::store::batches::{
    BatchItem, BatchRecord, ItemOutcome, BATCH_RUNNING, ITEM_FAILED, ITEM_SKIPPED, ITEM_SUCCEEDED,
};
use crate::store::channels::IncidentFilter;
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The most instances one batch may select.
pub const MAX_BATCH_ITEMS: usize = 10_000;

/// How long a runner holds a batch it claimed (it renews it every round).
const LEASE_MS: i64 = 30_000;

/// The actions a batch may carry out.
pub const ACTIONS: [&str; 4] = ["retry", "cancel", "resolve", "migrate"];

/// What a batch's action needs, stored with it as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BatchParams {
    /// `retry`: `full` (the default) or `from-failure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `cancel`: the reason kept with each cancellation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `migrate`: the target deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// `migrate`: source node → target node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mapping: BTreeMap<String, String>,
}

impl<S: Store> Runtime<S> {
    /// Creates a RUNNING batch of `action` over `instances` (duplicates
    /// kept once, in their first place) for `tenant`; the runner starts on
    /// it at once.
    pub async fn create_batch(
        &self,
        tenant: &str,
        action: &str,
        params: BatchParams,
        instances: Vec<String>,
    ) -> RuntimeResult<BatchRecord> {
        let invalid = |m: String| RuntimeError::new(Code::ApiMalformed, m);
        if !ACTIONS.contains(&action) {
            return Err(invalid(format!(
                "action `{action}` is none of {}",
                ACTIONS.join(", ")
            )));
        }
        match action {
            "retry" => {
                let mode = params.mode.as_deref().unwrap_or("full");
                if RetryMode::parse(mode).is_none() {
                    return Err(invalid(format!(
                        "mode `{mode}` is neither `full` nor `from-failure`"
                    )));
                }
            }
            "migrate" if params.deployment.is_none() => {
                return Err(invalid(
                    "a migrate batch needs its target `deployment`".into(),
                ));
            }
            _ => {}
        }
        let mut seen = std::collections::HashSet::new();
        let instances: Vec<String> = instances
            .into_iter()
            .filter(|i| seen.insert(i.clone()))
            .collect();
        if instances.is_empty() {
            return Err(invalid("the batch selects no instance".into()));
        }
        if instances.len() > MAX_BATCH_ITEMS {
            return Err(RuntimeError::new(
                Code::BatchTooLarge,
                format!(
                    "the batch selects {} instances; one batch takes at most {MAX_BATCH_ITEMS} (narrow the filter)",
                    instances.len()
                ),
            ));
        }
        let now = self.inner.clock.now().timestamp_millis();
        let batch = BatchRecord {
            id: super::new_id(now),
            tenant: tenant.to_string(),
            action: action.to_string(),
            params: serde_json::to_string(&params).unwrap_or_else(|_| "{}".into()),
            state: BATCH_RUNNING.to_string(),
            total: instances.len() as i64,
            created_at: now,
            ended_at: None,
            due_at: Some(now),
        };
        self.inner.store.create_batch(&batch, &instances).await?;
        self.inner.batch_wake.notify_one();
        Ok(batch)
    }

    /// The tenant's batch `id` (another tenant's is not found).
    pub async fn batch(&self, tenant: &str, id: &str) -> RuntimeResult<BatchRecord> {
        self.inner
            .store
            .get_batch(id)
            .await?
            .filter(|b| b.tenant == tenant)
            .ok_or_else(|| RuntimeError::new(Code::BatchNotFound, format!("no batch {id}")))
    }

    /// Cancels the tenant's RUNNING batch `id`: its pending items are skipped.
    pub async fn cancel_batch(&self, tenant: &str, id: &str) -> RuntimeResult<BatchRecord> {
        let batch = self.batch(tenant, id).await?;
        let now = self.inner.clock.now().timestamp_millis();
        if !self.inner.store.cancel_batch(&batch.id, now).await? {
            return Err(RuntimeError::new(
                Code::BatchEnded,
                format!("batch {id} is {} already", batch.state),
            ));
        }
        self.batch(tenant, id).await
    }

    /// Every round due now (a manual clock's advance steps through them);
    /// answers the next batch's due time.
    pub async fn work_due_batches(&self) -> RuntimeResult<Option<i64>> {
        for _ in 0..1_000 {
            if !self.work_batches().await? {
                break;
            }
        }
        Ok(self.inner.store.next_batch_due().await?)
    }

    /// Runs batches until the task is dropped: a round whenever one is due
    /// (or was just created), else a look every second.
    pub async fn batch_loop(&self) {
        loop {
            let worked = match self.work_batches().await {
                Ok(worked) => worked,
                Err(e) => {
                    tracing::warn!(error = %e, "batch round failed");
                    false
                }
            };
            if worked {
                tokio::task::yield_now().await;
                continue;
            }
            let now = self.inner.clock.now().timestamp_millis();
            let wait = match self.inner.store.next_batch_due().await {
                Ok(Some(due)) => Duration::from_millis(u64::try_from(due - now).unwrap_or(0)),
                _ => Duration::from_secs(1),
            };
            tokio::select! {
                _ = tokio::time::sleep(wait.clamp(Duration::from_millis(10), Duration::from_secs(1))) => {}
                _ = self.inner.batch_wake.notified() => {}
            }
        }
    }

    /// One round: claims a due batch, carries out up to `sutra.batch.rate` of
    /// its pending items, hands it back due a second later (or COMPLETED).
    /// Whether it claimed one.
    pub async fn work_batches(&self) -> RuntimeResult<bool> {
        // One round at a time in this process (the loop and a manual
        // clock's advance share the runtime's lease owner).
        let _round = self.inner.batch_round.lock().await;
        let store = &self.inner.store;
        let now = self.inner.clock.now().timestamp_millis();
        let Some(batch) = store
            .claim_batch(&self.inner.owner, now, now + LEASE_MS)
            .await?
        else {
            return Ok(false);
        };
        // Written by `create_batch` itself: one that does not read back is a
        // damaged row, reported each round rather than run with defaults.
        let params: BatchParams = serde_json::from_str(&batch.params).map_err(|e| {
            crate::store::StoreError::Other(format!(
                "batch {}: its params do not read: {e}",
                batch.id
            ))
        })?;
        let rate = i64::from(self.inner.config.batch_rate.max(1));
        for item in store.pending_items(&batch.id, rate).await? {
            let outcome = self.carry_out_item(&batch, &params, &item).await;
            let at = self.inner.clock.now().timestamp_millis();
            store.finish_item(&batch.id, item.seq, &outcome, at).await?;
        }
        let at = self.inner.clock.now().timestamp_millis();
        store.release_batch(&batch.id, now + 1_000, at).await?;
        Ok(true)
    }

    /// One item's action, as the single-instance route would do it.
    async fn carry_out_item(
        &self,
        batch: &BatchRecord,
        p: &BatchParams,
        item: &BatchItem,
    ) -> ItemOutcome {
        let tenant = batch.tenant.as_str();
        let id = item.instance_id.as_str();
        let done = |result: Option<String>| ItemOutcome {
            state: ITEM_SUCCEEDED,
            code: None,
            message: None,
            result,
        };
        let skipped = |why: String| ItemOutcome {
            state: ITEM_SKIPPED,
            code: None,
            message: Some(why),
            result: None,
        };
        let failed = |e: RuntimeError| ItemOutcome {
            state: ITEM_FAILED,
            code: Some(e.code.as_str().to_string()),
            message: Some(e.message),
            result: None,
        };
        let rec = match self.inner.store.load_instance(id).await {
            Ok(Some(rec)) if rec.tenant == tenant => rec,
            Ok(_) => {
                return failed(RuntimeError::new(
                    Code::InstanceNotFound,
                    format!("no instance {id}"),
                ))
            }
            Err(e) => return failed(e.into()),
        };
        let state = InstanceState::parse(&rec.state);
        match batch.action.as_str() {
            "retry" => {
                let mode = RetryMode::parse(p.mode.as_deref().unwrap_or("full"))
                    .unwrap_or(RetryMode::Full);
                let key = format!("batch:{}:{}", batch.id, item.seq);
                match self.retry(tenant, id, mode, Some(key)).await {
                    Ok(answered) => done(Some(answered.id)),
                    Err(e) => failed(e),
                }
            }
            "cancel" => {
                if state.is_some_and(InstanceState::is_terminal) {
                    return skipped(format!("{} already", rec.state));
                }
                match self.cancel(id, p.reason.clone()).await {
                    Ok(_) => done(None),
                    Err(e) => failed(e),
                }
            }
            "resolve" => {
                let filter = IncidentFilter {
                    tenant: Some(tenant.to_string()),
                    instance_id: Some(id.to_string()),
                    state: Some("OPEN".to_string()),
                    after_id: None,
                    limit: 0,
                };
                let open = match self.inner.store.list_incidents(&filter).await {
                    Ok(open) => open,
                    Err(e) => return failed(e.into()),
                };
                if open.is_empty() {
                    return skipped("no open incident".into());
                }
                for incident in &open {
                    match self.resolve_incident(tenant, &incident.id).await {
                        Ok(_) => {}
                        Err(e) if e.code == Code::IncidentResolved => {}
                        Err(e) => return failed(e),
                    }
                }
                done(Some(format!("{} incident(s) resolved", open.len())))
            }
            "migrate" => {
                let target = p.deployment.clone().unwrap_or_default();
                if rec.deployment_id == target {
                    return skipped(format!("on deployment {target} already"));
                }
                let req = MigrateRequest {
                    target,
                    mapping: p.mapping.clone(),
                };
                match self.migrate(tenant, id, &req).await {
                    Ok(_) => done(None),
                    Err(e) => failed(e),
                }
            }
            other => failed(RuntimeError::new(
                Code::ApiMalformed,
                format!("unknown batch action `{other}`"),
            )),
        }
    }
}
