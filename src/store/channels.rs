//! Channel storage: a tenant's channels, the transactional outbox of
//! channel-call requests (push deliveries and pull external tasks), and the
//! incidents an operator must look at. A supertrait of [`super::Store`]:
//! every store has it. The SQL is in `outbox.rs`, written once for both
//! backends.
//!
//! Invariants (identical on both backends):
//! - a request row is inserted in the transaction of the step that issued
//!   it ([`super::StepWrite::requests`]): nothing is sent before the step
//!   is durable;
//! - a request is live while its call's park `(instance_id, park_seq)`
//!   exists; a PENDING row whose park is gone (the call was answered, timed
//!   out, re-issued, or its instance ended) is never sent or handed to a
//!   worker again: the next claim marks it CANCELLED (unless a worker still
//!   holds its lock, so a late answer meets the call's own verdict);
//! - each due push delivery is handed to one sender at a time (PostgreSQL:
//!   `FOR UPDATE SKIP LOCKED`), and each fetchable pull request to one
//!   worker at a time (its lock); a claim or lock lapses at `claimed_until`;
//! - a POISONED or INCIDENT row is retained with its last error and never
//!   retried until an operator resolves its incident;
//! - an incident is inserted in the same transaction as the state change
//!   that raised it: a give-up is never silent;
//! - every worker failure ([`LockedChange::Retry`], [`LockedChange::Incident`])
//!   is recorded (`worker_failures`, [`WorkerFailureRecord`]) in the same
//!   transaction as the change it causes, while its instance exists.

use super::{ParkClaim, StoreResult};
use serde::{Deserialize, Serialize};
use std::future::Future;

/// How a channel's requests reach the counterpart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// The outbox POSTs each request to the channel's URL.
    Push,
    /// External workers fetch requests (`/v1/external-tasks/fetch-and-lock`).
    Pull,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Push => "push",
            Transport::Pull => "pull",
        }
    }

    pub fn parse(s: &str) -> Option<Transport> {
        match s {
            "push" => Some(Transport::Push),
            "pull" => Some(Transport::Pull),
            _ => None,
        }
    }
}

/// A tenant's channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelRecord {
    pub tenant: String,
    pub name: String,
    pub transport: Transport,
    /// The push URL (`None` for pull).
    pub url: Option<String>,
    /// The HMAC-SHA256 key of the request signature.
    pub secret: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Request states as stored.
pub mod request_state {
    /// Waiting to be sent (push) or fetched / locked by a worker (pull).
    pub const PENDING: &str = "PENDING";
    /// Push: the counterpart answered the POST with a 2xx.
    pub const DELIVERED: &str = "DELIVERED";
    /// Pull: a worker completed it or reported a BPMN error.
    pub const DONE: &str = "DONE";
    /// Push: `sutra.outbox.retry.max-attempts` reached; retained, never retried.
    pub const POISONED: &str = "POISONED";
    /// Pull: the worker retries are spent; waits for an operator.
    pub const INCIDENT: &str = "INCIDENT";
    /// Its call no longer waits for it (superseded, answered, ended).
    pub const CANCELLED: &str = "CANCELLED";
}

/// A request issued by a step, inserted with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewRequest {
    /// The request id (the `Idempotency-Key` on the wire).
    pub id: String,
    /// The call's park: the request is live while it exists.
    pub park_seq: i64,
    pub channel: String,
    /// The task node id.
    pub node: String,
    pub call_attempt: i64,
    pub correlation: String,
    /// The variables sent, JSON text.
    pub payload: String,
    pub created_at: i64,
    /// Written claimed: the runtime that committed it sends it right after
    /// the commit (a push channel); `sent_at` is the creation instant then.
    pub claim: Option<ParkClaim>,
}

/// A stored request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct RequestRecord {
    pub id: String,
    pub tenant: String,
    pub instance_id: String,
    pub park_seq: i64,
    pub deployment_id: String,
    pub channel: String,
    pub node: String,
    pub call_attempt: i64,
    pub correlation: String,
    pub payload: String,
    pub state: String,
    pub due_at: i64,
    pub claimed_by: Option<String>,
    pub claimed_until: Option<i64>,
    pub sent_at: Option<i64>,
    pub deliveries: i64,
    pub retries: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Incident kinds as stored.
pub const INCIDENT_DELIVERY_POISONED: &str = "delivery_poisoned";
pub const INCIDENT_EXTERNAL_TASK_FAILED: &str = "external_task_failed";
/// Incident states as stored.
pub const INCIDENT_OPEN: &str = "OPEN";
pub const INCIDENT_RESOLVED: &str = "RESOLVED";

/// An incident: something an operator must look at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct IncidentRecord {
    pub id: String,
    pub tenant: String,
    pub instance_id: String,
    /// [`INCIDENT_DELIVERY_POISONED`] or [`INCIDENT_EXTERNAL_TASK_FAILED`].
    pub kind: String,
    pub request_id: String,
    pub channel: String,
    pub node: String,
    /// The last error.
    pub message: String,
    /// [`INCIDENT_OPEN`] or [`INCIDENT_RESOLVED`].
    pub state: String,
    pub created_at: i64,
    pub resolved_at: Option<i64>,
    /// The process of its instance (a listing joins it; `None` elsewhere
    /// or once the instance is gone).
    #[sqlx(default)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<String>,
}

/// What one POST of a push delivery came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// A 2xx: DELIVERED.
    Delivered,
    /// Try again at `due_at`.
    Retry { due_at: i64, error: String },
    /// The ceiling is reached: POISONED, and this incident (id) is opened.
    Poisoned { error: String, incident_id: String },
}

/// A change a worker makes to a request it holds locked. Both failures are
/// recorded as a [`WorkerFailureRecord`] of the call at `token` (the token
/// of the request's correlation) in the change's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockedChange {
    /// The lock now lapses at `until`.
    Extend { until: i64 },
    /// A worker-side failure with retries left: fetchable again at `due_at`.
    Retry {
        retries: i64,
        due_at: i64,
        error: String,
        token: i64,
    },
    /// A worker-side failure with no retry left: INCIDENT, and this incident opened.
    Incident {
        error: String,
        incident_id: String,
        token: i64,
    },
}

/// One failure an external-task worker reported, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct WorkerFailureRecord {
    /// The request (external task) it failed.
    pub request_id: String,
    /// The call's token, task node and attempt.
    pub token: i64,
    pub node: String,
    pub call_attempt: i64,
    /// When it was reported (ms).
    pub at: i64,
    pub worker: String,
    pub message: String,
    /// Worker retries left after it (0: an incident was opened).
    pub retries_left: i64,
}

/// Which incidents to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IncidentFilter {
    pub tenant: Option<String>,
    pub instance_id: Option<String>,
    pub state: Option<String>,
    /// Keyset paging: ids strictly greater than this.
    pub after_id: Option<String>,
    pub limit: i64,
}

/// Channel, outbox and incident storage. See the module docs.
pub trait ChannelStore: Send + Sync {
    // ---- channels ----
    /// Inserts or replaces a channel (keeps the first `created_at`).
    fn put_channel(&self, c: &ChannelRecord) -> impl Future<Output = StoreResult<()>> + Send;
    fn get_channel(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = StoreResult<Option<ChannelRecord>>> + Send;
    fn list_channels(
        &self,
        tenant: &str,
    ) -> impl Future<Output = StoreResult<Vec<ChannelRecord>>> + Send;
    /// Whether a channel was deleted.
    fn delete_channel(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    // ---- requests ----
    fn get_request(
        &self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<RequestRecord>>> + Send;
    /// Every request of an instance, oldest first.
    fn requests_of(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<RequestRecord>>> + Send;
    /// Cancels due PENDING requests whose call no longer waits, then claims
    /// up to `limit` due push deliveries for `owner` until `now + lease_ms`
    /// (marking them sent).
    fn claim_deliveries(
        &self,
        now: i64,
        limit: i64,
        owner: &str,
        lease_ms: i64,
    ) -> impl Future<Output = StoreResult<Vec<RequestRecord>>> + Send;
    /// The earliest instant `claim_deliveries` could hand out a push
    /// delivery: an unclaimed one's `due_at`, a claimed one's `claimed_until`.
    fn next_delivery_due(&self) -> impl Future<Output = StoreResult<Option<i64>>> + Send;
    /// Records what `owner`'s POST came to; `false` if `owner` no longer held it.
    fn record_delivery(
        &self,
        id: &str,
        owner: &str,
        now: i64,
        outcome: &DeliveryOutcome,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Locks up to `limit` fetchable requests of the tenant's pull channels
    /// among `channels` for `worker` until `lock_until`.
    fn fetch_and_lock(
        &self,
        tenant: &str,
        channels: &[String],
        worker: &str,
        now: i64,
        lock_until: i64,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<RequestRecord>>> + Send;
    /// Applies `change` if `worker` holds the request's lock at `now`;
    /// `false` otherwise (nothing changed).
    fn update_locked(
        &self,
        id: &str,
        worker: &str,
        now: i64,
        change: &LockedChange,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Releases whatever lock a PENDING request holds; `false` if it is not PENDING.
    fn unlock_request(&self, id: &str, now: i64) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Marks a request DONE (its call was answered).
    fn finish_request(&self, id: &str, now: i64) -> impl Future<Output = StoreResult<()>> + Send;
    /// Deletes DELIVERED, DONE and CANCELLED requests last updated at or
    /// before `before` (POISONED and INCIDENT ones are retained).
    fn purge_requests(
        &self,
        before: i64,
        limit: i64,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Counts of requests by state.
    fn request_counts(&self) -> impl Future<Output = StoreResult<Vec<(String, i64)>>> + Send;
    /// The worker failures of an instance's external tasks, oldest first.
    fn worker_failures(
        &self,
        instance_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<WorkerFailureRecord>>> + Send;

    // ---- incidents ----
    fn list_incidents(
        &self,
        filter: &IncidentFilter,
    ) -> impl Future<Output = StoreResult<Vec<IncidentRecord>>> + Send;
    fn get_incident(
        &self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<IncidentRecord>>> + Send;
    /// Resolves an OPEN incident; with `rearm`, its request goes back to
    /// PENDING, due at `now`, with no delivery counted and `retries`
    /// worker retries (pull). `false` if it was not OPEN.
    fn resolve_incident(
        &self,
        id: &str,
        now: i64,
        rearm: Option<i64>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Counts of incidents by state.
    fn incident_counts(&self) -> impl Future<Output = StoreResult<Vec<(String, i64)>>> + Send;

    // ---- instance migration ----
    /// Moves instance `id` (at `expected_version`) onto `deployment_id` with
    /// this snapshot and state, clearing `ended_at`, and re-pins its parks
    /// and PENDING requests; `Conflict` if the version moved.
    fn repin_instance(
        &self,
        id: &str,
        expected_version: i64,
        deployment_id: &str,
        snapshot: &str,
        state: &str,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

impl ChannelStore for super::AnyStore {
    async fn put_channel(&self, c: &ChannelRecord) -> StoreResult<()> {
        delegate!(self, s => s.put_channel(c).await)
    }
    async fn get_channel(&self, tenant: &str, name: &str) -> StoreResult<Option<ChannelRecord>> {
        delegate!(self, s => s.get_channel(tenant, name).await)
    }
    async fn list_channels(&self, tenant: &str) -> StoreResult<Vec<ChannelRecord>> {
        delegate!(self, s => s.list_channels(tenant).await)
    }
    async fn delete_channel(&self, tenant: &str, name: &str) -> StoreResult<bool> {
        delegate!(self, s => s.delete_channel(tenant, name).await)
    }
    async fn get_request(&self, id: &str) -> StoreResult<Option<RequestRecord>> {
        delegate!(self, s => s.get_request(id).await)
    }
    async fn requests_of(&self, instance_id: &str) -> StoreResult<Vec<RequestRecord>> {
        delegate!(self, s => s.requests_of(instance_id).await)
    }
    async fn claim_deliveries(
        &self,
        now: i64,
        limit: i64,
        owner: &str,
        lease_ms: i64,
    ) -> StoreResult<Vec<RequestRecord>> {
        delegate!(self, s => s.claim_deliveries(now, limit, owner, lease_ms).await)
    }
    async fn next_delivery_due(&self) -> StoreResult<Option<i64>> {
        delegate!(self, s => s.next_delivery_due().await)
    }
    async fn record_delivery(
        &self,
        id: &str,
        owner: &str,
        now: i64,
        outcome: &DeliveryOutcome,
    ) -> StoreResult<bool> {
        delegate!(self, s => s.record_delivery(id, owner, now, outcome).await)
    }
    async fn fetch_and_lock(
        &self,
        tenant: &str,
        channels: &[String],
        worker: &str,
        now: i64,
        lock_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<RequestRecord>> {
        delegate!(self, s => s.fetch_and_lock(tenant, channels, worker, now, lock_until, limit).await)
    }
    async fn update_locked(
        &self,
        id: &str,
        worker: &str,
        now: i64,
        change: &LockedChange,
    ) -> StoreResult<bool> {
        delegate!(self, s => s.update_locked(id, worker, now, change).await)
    }
    async fn unlock_request(&self, id: &str, now: i64) -> StoreResult<bool> {
        delegate!(self, s => s.unlock_request(id, now).await)
    }
    async fn finish_request(&self, id: &str, now: i64) -> StoreResult<()> {
        delegate!(self, s => s.finish_request(id, now).await)
    }
    async fn purge_requests(&self, before: i64, limit: i64) -> StoreResult<u64> {
        delegate!(self, s => s.purge_requests(before, limit).await)
    }
    async fn request_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        delegate!(self, s => s.request_counts().await)
    }
    async fn worker_failures(&self, instance_id: &str) -> StoreResult<Vec<WorkerFailureRecord>> {
        delegate!(self, s => s.worker_failures(instance_id).await)
    }
    async fn list_incidents(&self, filter: &IncidentFilter) -> StoreResult<Vec<IncidentRecord>> {
        delegate!(self, s => s.list_incidents(filter).await)
    }
    async fn get_incident(&self, id: &str) -> StoreResult<Option<IncidentRecord>> {
        delegate!(self, s => s.get_incident(id).await)
    }
    async fn resolve_incident(&self, id: &str, now: i64, rearm: Option<i64>) -> StoreResult<bool> {
        delegate!(self, s => s.resolve_incident(id, now, rearm).await)
    }
    async fn incident_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        delegate!(self, s => s.incident_counts().await)
    }
    async fn repin_instance(
        &self,
        id: &str,
        expected_version: i64,
        deployment_id: &str,
        snapshot: &str,
        state: &str,
        now: i64,
    ) -> StoreResult<()> {
        delegate!(self, s => s.repin_instance(id, expected_version, deployment_id, snapshot, state, now).await)
    }
}
