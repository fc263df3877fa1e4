//! Channels and channel calls, the runtime side (the semantics are in
//! `engine/channel.rs`): a tenant's channel settings (cached briefly), the
//! deploy-time check that every channel a process calls is configured, the
//! counterpart's answers, and the requests a step puts in the outbox —
//! claimed for this runtime before the commit when they go out by push, and
//! handed to the sender (outbox.rs) right after it.
//!
//! Invariants:
//! - a request is sent only after the step that issued it committed (it is
//!   written with the step; [`Runtime::dispatch_requests`] runs after);
//! - a process calling an unconfigured channel is refused at deploy
//!   (`SUTRA.RUNTIME.CHANNEL.NOT_CONFIGURED`), never discovered at run time;
//!   a channel a live deployment calls cannot be deleted;
//! - an answer reaches only the caller's own instances: another tenant's
//!   correlation answers like an unknown one.

use super::driver::{ms, Finishing};
use super::{Runtime, RuntimeError, RuntimeResult};
use crate::codes::Code;
use crate::engine::{self, Event, InstanceState, Snapshot, TaskOutcome};
use crate::model::{NodeKind, Process, TaskImpl};
use crate::store::channels::{ChannelRecord, RequestRecord, Transport};
use crate::store::{DeploymentState, ParkClaim, StepWrite, Store};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a channel's settings read from the store are trusted (a change
/// through this runtime is seen at once).
const CHANNEL_TTL: Duration = Duration::from_secs(1);

/// (tenant, name) → (read at, settings).
type ChannelMap = HashMap<(String, String), (Instant, Option<ChannelRecord>)>;

/// Channel settings read recently, and the push requests this runtime is
/// delivering right now.
#[derive(Default)]
pub(crate) struct ChannelCache {
    map: Mutex<ChannelMap>,
    /// The requests being POSTed by [`Runtime::deliver`], and whether an
    /// answer's step already recorded the delivery. Each is stored sent (its
    /// claim's commit stamped `sent_at`, which nothing clears), so an answer
    /// needs no read to know it went out.
    sending: Mutex<HashMap<String, bool>>,
}

/// A channel's settings as a caller gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSpec {
    pub transport: Transport,
    /// Required for push, refused for pull.
    pub url: Option<String>,
    /// The signing secret; `None` keeps the current one (a new channel gets a fresh one).
    pub secret: Option<String>,
}

/// Channel names: 1 to 128 of `A-Z a-z 0-9 . _ -` (they appear in URLs).
pub fn valid_channel_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The channels a process calls, sorted.
pub fn channels_of(process: &Process) -> BTreeSet<&str> {
    process
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::ServiceTask(t) => match &t.implementation {
                TaskImpl::Channel(c) => Some(c.as_str()),
                TaskImpl::Registered(_) | TaskImpl::Http(_) => None,
            },
            _ => None,
        })
        .collect()
}

fn invalid(message: impl Into<String>) -> RuntimeError {
    RuntimeError::new(Code::ChannelInvalid, message)
}

impl<S: Store> Runtime<S> {
    /// A tenant's channel (cached for [`CHANNEL_TTL`]).
    pub async fn channel(&self, tenant: &str, name: &str) -> RuntimeResult<Option<ChannelRecord>> {
        let key = (tenant.to_string(), name.to_string());
        let known = self.inner.channels.map.lock().ok().and_then(|m| {
            m.get(&key)
                .filter(|(at, _)| at.elapsed() < CHANNEL_TTL)
                .map(|(_, c)| c.clone())
        });
        if let Some(c) = known {
            return Ok(c);
        }
        let read = self.inner.store.get_channel(tenant, name).await?;
        if let Ok(mut m) = self.inner.channels.map.lock() {
            if m.len() > 10_000 {
                m.clear();
            }
            m.insert(key, (Instant::now(), read.clone()));
        }
        Ok(read)
    }

    /// `id` is being delivered by this runtime (outbox.rs).
    pub(crate) fn sending_begins(&self, id: &str) {
        if let Ok(mut s) = self.inner.channels.sending.lock() {
            s.insert(id.to_string(), false);
        }
    }

    /// The POST of `id` ended: whether an answer's step recorded it DELIVERED
    /// meanwhile (nothing left to record then).
    pub(crate) fn sending_ends(&self, id: &str) -> bool {
        self.inner
            .channels
            .sending
            .lock()
            .ok()
            .and_then(|mut s| s.remove(id))
            .unwrap_or(false)
    }

    fn is_sending(&self, id: &str) -> bool {
        self.inner
            .channels
            .sending
            .lock()
            .is_ok_and(|s| s.contains_key(id))
    }

    /// An answer's step recorded `id` DELIVERED while its POST runs.
    fn delivery_answered(&self, id: &str) {
        if let Ok(mut s) = self.inner.channels.sending.lock() {
            if let Some(answered) = s.get_mut(id) {
                *answered = true;
            }
        }
    }

    fn forget_channel(&self, tenant: &str, name: &str) {
        if let Ok(mut m) = self.inner.channels.map.lock() {
            m.remove(&(tenant.to_string(), name.to_string()));
        }
    }

    /// Creates or replaces a tenant's channel. Returns it (with its secret)
    /// and whether it is new.
    pub async fn set_channel(
        &self,
        tenant: &str,
        name: &str,
        spec: ChannelSpec,
    ) -> RuntimeResult<(ChannelRecord, bool)> {
        if !valid_channel_name(name) {
            return Err(invalid(format!(
                "channel name `{name}`: use 1 to 128 of A-Z, a-z, 0-9, '.', '_' and '-'"
            )));
        }
        match (spec.transport, &spec.url) {
            (Transport::Push, None) => return Err(invalid("a push channel needs a `url`")),
            (Transport::Pull, Some(_)) => {
                return Err(invalid(
                    "a pull channel has no `url`: workers fetch its requests",
                ))
            }
            (Transport::Push, Some(url)) => self
                .inner
                .hosts
                .check_url(url)
                .await
                .map_err(|e| RuntimeError::new(Code::OutboundHostNotAllowed, e))?,
            (Transport::Pull, None) => {}
        }
        if let Some(s) = &spec.secret {
            if s.len() < 16 || s.len() > 256 || !s.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid(
                    "a channel secret is 16 to 256 visible ASCII characters",
                ));
            }
        }
        let existing = self.inner.store.get_channel(tenant, name).await?;
        let now = ms(self.inner.clock.now());
        let secret = spec
            .secret
            .or_else(|| existing.as_ref().map(|c| c.secret.clone()))
            .unwrap_or_else(|| hex::encode(rand::random::<[u8; 32]>()));
        let record = ChannelRecord {
            tenant: tenant.to_string(),
            name: name.to_string(),
            transport: spec.transport,
            url: spec.url,
            secret,
            created_at: existing.as_ref().map_or(now, |c| c.created_at),
            updated_at: now,
        };
        self.inner.store.put_channel(&record).await?;
        self.forget_channel(tenant, name);
        // Requests waiting for this channel may be sendable or fetchable now.
        self.inner.pull_wake.notify_waiters();
        Ok((record, existing.is_none()))
    }

    /// Deletes a channel no live (ACTIVE or DRAINING) deployment calls.
    pub async fn delete_channel(&self, tenant: &str, name: &str) -> RuntimeResult<()> {
        if self.inner.store.get_channel(tenant, name).await?.is_none() {
            return Err(RuntimeError::new(
                Code::ChannelNotFound,
                format!("no channel {name}"),
            ));
        }
        for dep in self.inner.store.list_deployments(Some(tenant)).await? {
            if dep.state == DeploymentState::Retired {
                continue;
            }
            let deployed = self.deployed(&dep.id).await?;
            if channels_of(&deployed.process).contains(name) {
                return Err(RuntimeError::new(
                    Code::ChannelInUse,
                    format!(
                        "deployment {} (process `{}`, {}) calls channel:{name}; undeploy it and let it retire first",
                        dep.id,
                        dep.process_id,
                        dep.state.as_str()
                    ),
                ));
            }
        }
        self.inner.store.delete_channel(tenant, name).await?;
        self.forget_channel(tenant, name);
        Ok(())
    }

    /// Deploy-time check: every channel the processes call is configured.
    pub(crate) async fn check_channels(
        &self,
        tenant: &str,
        processes: &[&Process],
    ) -> RuntimeResult<()> {
        for p in processes {
            for name in channels_of(p) {
                if self.channel(tenant, name).await?.is_none() {
                    return Err(RuntimeError::new(
                        Code::ChannelNotConfigured,
                        format!(
                            "process `{}` calls channel:{name}, which is not configured: \
                             PUT /v1/channels/{name} (or `sutra channel set {name} --push URL | --pull`) first",
                            p.id
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The counterpart's answer to the call `correlation` on `channel`:
    /// `Completed` (its variables) or `BusinessError` (routed to a boundary).
    pub async fn answer(
        &self,
        tenant: &str,
        channel: &str,
        correlation: &str,
        outcome: TaskOutcome,
    ) -> RuntimeResult<Snapshot> {
        self.answer_call(tenant, channel, correlation, outcome, None)
            .await
    }

    /// [`Self::answer`]; through `task`, an external task the worker holds
    /// (read just before): its step also marks `task` DONE.
    pub(crate) async fn answer_call(
        &self,
        tenant: &str,
        channel: &str,
        correlation: &str,
        outcome: TaskOutcome,
        task: Option<&RequestRecord>,
    ) -> RuntimeResult<Snapshot> {
        let not_found = || {
            RuntimeError::new(
                Code::ChannelCallNotFound,
                format!("no call on channel `{channel}` waits for correlation `{correlation}`"),
            )
        };
        let (instance, token) = engine::parse_correlation(correlation).ok_or_else(not_found)?;
        let rec = self
            .inner
            .store
            .load_instance(instance)
            .await?
            .filter(|r| r.tenant == tenant)
            .ok_or_else(not_found)?;
        if InstanceState::parse(&rec.state).is_none_or(InstanceState::is_terminal) {
            return Err(not_found());
        }
        let snap = Snapshot::from_json(&rec.snapshot)
            .map_err(|e| RuntimeError::new(Code::SnapshotVersion, e))?;
        let call = engine::call_of(&snap, token).ok_or_else(not_found)?;
        // Whether the call's current request has gone out (RETRY_PENDING
        // otherwise): known without a read when it is the task in hand (a
        // fetch sent it) or a delivery of this runtime in flight.
        let sent = match (&call.request, task) {
            (Some(r), Some(t)) if *r == t.id => t.sent_at.map(|_| t.id.clone()),
            (Some(r), None) if self.is_sending(r) => Some(r.clone()),
            (Some(r), _) => self
                .inner
                .store
                .get_request(r)
                .await?
                .filter(|q| q.sent_at.is_some())
                .map(|q| q.id),
            (None, _) => None,
        };
        let event = Event::ChannelAnswered {
            token,
            channel: channel.to_string(),
            sent,
            outcome,
        };
        // The answer ends its request in the same step: a pull task DONE; a
        // push request this runtime is still POSTing DELIVERED (the answer
        // proves it arrived; the sender then has nothing left to record).
        let mut finishing = Finishing::default();
        match (task, &call.request) {
            (Some(t), _) => finishing.done.push(t.id.clone()),
            (None, Some(r)) if self.is_sending(r) => finishing.delivered.push(r.clone()),
            (None, _) => {}
        }
        let delivered = finishing.delivered.first().cloned();
        let snap = self
            .drive_finishing(instance.to_string(), event, finishing)
            .await?;
        if let Some(r) = delivered {
            self.delivery_answered(&r);
        }
        Ok(snap)
    }

    /// Before a step's commit: claim its push requests for this runtime, so
    /// it sends them right after the commit (a pull request is left for the
    /// workers).
    pub(crate) async fn claim_requests(&self, tenant: &str, write: &mut StepWrite) {
        if write.requests.is_empty() {
            return;
        }
        // Boxed: every commit awaits this; most write no request.
        Box::pin(self.claim_push_requests(tenant, write)).await
    }

    /// [`Self::claim_requests`] for a step that writes requests.
    async fn claim_push_requests(&self, tenant: &str, write: &mut StepWrite) {
        let until = ms(self.inner.clock.now()).saturating_add(self.delivery_lease_ms());
        for r in &mut write.requests {
            match self.channel(tenant, &r.channel).await {
                Ok(Some(c)) if c.transport == Transport::Push => {
                    r.claim = Some(ParkClaim {
                        owner: self.inner.owner.clone(),
                        until,
                    });
                }
                Ok(_) => {}
                // Unclaimed: the outbox pass picks it up.
                Err(e) => tracing::warn!(channel = %r.channel, error = %e, "cannot read a channel"),
            }
        }
    }

    /// After a step's commit: send the requests claimed for this runtime,
    /// wake the workers waiting for pull requests. Returns the sends.
    pub(crate) fn dispatch_requests(
        &self,
        snap: &Snapshot,
        write: &StepWrite,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut sends = Vec::new();
        let mut pull = false;
        for r in &write.requests {
            let Some(claim) = &r.claim else {
                pull = true;
                continue;
            };
            let record = RequestRecord {
                id: r.id.clone(),
                tenant: snap.tenant.clone(),
                instance_id: snap.instance_id.clone(),
                park_seq: r.park_seq,
                deployment_id: snap.deployment_id.clone(),
                channel: r.channel.clone(),
                node: r.node.clone(),
                call_attempt: r.call_attempt,
                correlation: r.correlation.clone(),
                payload: r.payload.clone(),
                state: crate::store::channels::request_state::PENDING.to_string(),
                due_at: r.created_at,
                claimed_by: Some(claim.owner.clone()),
                claimed_until: Some(claim.until),
                sent_at: Some(r.created_at),
                deliveries: 0,
                retries: None,
                last_error: None,
                created_at: r.created_at,
                updated_at: r.created_at,
            };
            let rt = self.clone();
            sends.push(tokio::spawn(async move { rt.deliver(record).await }));
        }
        if pull {
            self.inner.pull_wake.notify_waiters();
        }
        sends
    }
}
