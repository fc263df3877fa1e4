//! Signals and thrown messages: the durable fan-out (store/signals.rs).
//!
//! A broadcast (`POST /v1/signals`, `sutra signal`) or a throw of a step
//! (`engine::Effect::Throw`, written with the step's commit) is a `signals`
//! row whose deliveries — the waits it reaches, fixed when it was written —
//! are rows too. [`Runtime::pump_signals`] carries them out: first the
//! starts (one instance of every ACTIVE process of the tenant with a
//! signal start of that name, or, for a thrown message that reached no
//! wait, with a message start of it — Camunda's rule), each under an
//! idempotency key naming the signal, so a restart never starts twice;
//! then the deliveries, a page at a time (`Event::SignalArrived` /
//! `Event::MessageArrived` to each instance, never more than a page in
//! memory), each page deleted once delivered; then the row. A delivery
//! replayed after a crash finds its park gone (the engine ignores it), so
//! every wait is reached exactly once. The pump runs after a commit that
//! threw, after the API's throw, and on every poll (what a crash left).
//!
//! Tenancy: a signal is written and delivered within its tenant; the
//! waits it selects are its tenant's only.

use super::{Runtime, RuntimeResult, StartRequest};
use crate::codes::Code;
use crate::engine::Event;
use crate::model::{NodeKind, StartTrigger};
use crate::store::signals::{NewSignal, SignalRecord};
use crate::store::{DeploymentState, Store};
use serde::Serialize;
use serde_json::{Map, Value};

/// Deliveries read (and in flight) at once.
const PAGE: i64 = 512;
/// Instances stepped concurrently while delivering a page.
const LANES: usize = 64;

/// What a broadcast from outside did, as the API answers it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SignalAnswer {
    /// The signal's id.
    pub id: String,
    /// The waits it reached (instances waiting when it was thrown).
    pub delivered: u64,
    /// The instances its signal start events started.
    pub started: Vec<String>,
}

impl<S: Store> Runtime<S> {
    /// Broadcast signal `name` within `tenant`: written with the waits it
    /// reaches (one transaction), then delivered before this returns. If
    /// this process dies half-way, the poller of any replica finishes it.
    pub async fn signal(
        &self,
        tenant: &str,
        name: &str,
        variables: Map<String, Value>,
    ) -> RuntimeResult<SignalAnswer> {
        let now = self.inner.clock.now().timestamp_millis();
        let signal = NewSignal {
            id: super::new_id(now),
            kind: "signal".into(),
            name: name.to_string(),
            correlation_key: None,
            variables: Value::Object(variables).to_string(),
            origin: None,
            created_at: now,
        };
        let delivered = self.inner.store.throw_signal(tenant, &signal).await?;
        let _serial = self.inner.signal_pump.lock().await;
        let rec = SignalRecord {
            id: signal.id.clone(),
            tenant: tenant.to_string(),
            kind: signal.kind,
            name: signal.name,
            correlation_key: None,
            variables: signal.variables,
            origin: None,
            starts_done: 0,
            created_at: now,
        };
        // Another replica's poller may deliver some of it at once: repeats are ignored.
        let started = self.carry_out(&rec).await?;
        Ok(SignalAnswer {
            id: signal.id,
            delivered,
            started,
        })
    }

    /// Wake a pump after a commit that threw (its rows are durable).
    pub(crate) fn kick_signals(&self) {
        let rt = self.clone();
        tokio::spawn(async move {
            if let Err(e) = rt.pump_signals().await {
                tracing::warn!(error = %e, "signal delivery pass failed; the poller retries");
            }
        });
    }

    /// Deliver every pending signal, oldest first. Serialised within this
    /// process; another replica doing the same at once only repeats
    /// deliveries the engine ignores.
    pub async fn pump_signals(&self) -> RuntimeResult<usize> {
        let serial = self.inner.signal_pump.lock().await;
        self.pump_locked(serial).await
    }

    /// [`Runtime::pump_signals`] unless a pump runs in this process already
    /// (it delivers everything pending before it stops): the poller's pass,
    /// which must not wait behind a long fan-out while timers fall due.
    pub(crate) async fn pump_signals_if_idle(&self) -> RuntimeResult<usize> {
        match self.inner.signal_pump.try_lock() {
            Ok(serial) => self.pump_locked(serial).await,
            Err(_) => Ok(0),
        }
    }

    async fn pump_locked(&self, _serial: tokio::sync::MutexGuard<'_, ()>) -> RuntimeResult<usize> {
        let mut done = 0;
        loop {
            let pending = self.inner.store.pending_signals(16).await?;
            if pending.is_empty() {
                return Ok(done);
            }
            // One signal that cannot be delivered now (a store failure) does
            // not hold the others back; it stays pending for the next pass.
            let mut failed = None;
            for rec in &pending {
                match self.carry_out(rec).await {
                    Ok(_) => done += 1,
                    Err(e) => {
                        tracing::warn!(signal = %rec.id, error = %e, "signal not fully delivered; retried on the next pass");
                        failed = Some(e);
                    }
                }
            }
            if let Some(e) = failed {
                return if done > 0 { Ok(done) } else { Err(e) };
            }
        }
    }

    /// Starts, deliveries, then the row; the started instances.
    async fn carry_out(&self, rec: &SignalRecord) -> RuntimeResult<Vec<String>> {
        let variables = match serde_json::from_str::<Value>(&rec.variables) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let mut started = Vec::new();
        if rec.starts_done == 0 {
            let first = self.inner.store.signal_deliveries(&rec.id, 1).await?;
            // A message goes to one receiver: a wait, else the starts.
            if rec.kind == "signal" || first.is_empty() {
                started = self.signal_starts(rec, &variables).await?;
            }
            self.inner.store.mark_starts_done(&rec.id).await?;
        }
        loop {
            let page = self.inner.store.signal_deliveries(&rec.id, PAGE).await?;
            if page.is_empty() {
                break;
            }
            // Read in one statement on PostgreSQL (poller.rs).
            let mut known = self
                .read_ahead(page.iter().map(|(i, _)| i.clone()).collect())
                .await;
            let mut set = tokio::task::JoinSet::new();
            let mut failed = None;
            for (instance, seq) in page.iter().cloned() {
                while set.len() >= LANES {
                    if let Some(Ok(Err(e))) = set.join_next().await {
                        failed = Some(e);
                    }
                }
                let rt = self.clone();
                let variables = variables.clone();
                let kind = rec.kind.clone();
                let known = known.remove(&instance);
                set.spawn(async move {
                    rt.deliver_known(&instance, seq, &kind, variables, known)
                        .await
                });
            }
            while let Some(r) = set.join_next().await {
                if let Ok(Err(e)) = r {
                    failed = Some(e);
                }
            }
            if let Some(e) = failed {
                // Left for the next pass (delivered ones are ignored then).
                return Err(e);
            }
            self.inner.store.delete_deliveries(&rec.id, &page).await?;
        }
        self.inner.store.delete_signal(&rec.id).await?;
        Ok(started)
    }

    /// One delivery, the pump's unit of work: the signal (or message) of
    /// `kind` to park `seq` of `instance` (ignored by the engine if that
    /// wait is gone). Public for the crash tests.
    pub async fn deliver_signal(
        &self,
        instance: &str,
        seq: i64,
        kind: &str,
        variables: Map<String, Value>,
    ) -> RuntimeResult<()> {
        self.deliver_known(instance, seq, kind, variables, None)
            .await
    }

    /// [`Self::deliver_signal`] from the instance's snapshot read with its
    /// page (`known`), if it was.
    async fn deliver_known(
        &self,
        instance: &str,
        seq: i64,
        kind: &str,
        variables: Map<String, Value>,
        known: Option<(i64, crate::engine::Snapshot)>,
    ) -> RuntimeResult<()> {
        let park = u64::try_from(seq).unwrap_or_default();
        let event = if kind == "signal" {
            Event::SignalArrived { park, variables }
        } else {
            Event::MessageArrived { park, variables }
        };
        match self.drive_from(instance.to_string(), event, known).await {
            Ok(_) => Ok(()),
            // The instance went (deleted, ended): nothing waits any more.
            Err(e) if matches!(e.code, Code::InstanceNotFound | Code::InstanceState) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// One instance of every ACTIVE process of the tenant with a start of
    /// this name and kind; keyed by the signal, so a replay starts nothing new.
    async fn signal_starts(
        &self,
        rec: &SignalRecord,
        variables: &Map<String, Value>,
    ) -> RuntimeResult<Vec<String>> {
        let mut started = Vec::new();
        for dep in self.inner.store.list_deployments(Some(&rec.tenant)).await? {
            if dep.state != DeploymentState::Active {
                continue;
            }
            let deployed = self.deployed(&dep.id).await?;
            let Some(start) = deployed.process.starts_in(None).find(|n| match &n.kind {
                NodeKind::Start(StartTrigger::Signal { name }) => {
                    rec.kind == "signal" && name == &rec.name
                }
                NodeKind::Start(StartTrigger::Message { name }) => {
                    rec.kind == "message" && name == &rec.name
                }
                _ => false,
            }) else {
                continue;
            };
            let req = StartRequest {
                tenant: rec.tenant.clone(),
                process_id: dep.process_id.clone(),
                variables: variables.clone(),
                idempotency_key: Some(format!("{}:{}:{}", rec.kind, rec.id, dep.process_id)),
                start_node: Some(start.id.clone()),
                answer_at_commit: true,
                ..StartRequest::default()
            };
            match self.start(req).await {
                Ok(id) => started.push(id),
                Err(e) => {
                    tracing::warn!(signal = %rec.id, process = %dep.process_id, error = %e, "a signal start failed")
                }
            }
        }
        Ok(started)
    }
}
