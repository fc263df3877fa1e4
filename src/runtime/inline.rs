//! Run to the next wait before committing: the attempts a step asks for run
//! *before* that step is committed, and their outcomes are applied in memory,
//! so a chain of quick tasks reaches its next wait state (or its end) in ONE
//! transaction.
//!
//! Why this is safe: a registered task runs in a deny-all sandbox — no files,
//! no network, no environment — so an attempt has no effect outside its
//! result. Running it before its step is durable changes nothing anybody can
//! observe; if the process dies first, nothing of the speculation was
//! promised: a start had not returned, and a fired park is still in the store
//! (claimed, its claim lapses, a poller fires it again). Attempts stay
//! at-least-once, exactly as before.
//!
//! Invariants:
//! - speculation is bounded by `sutra.runtime.commit-window` (wall time) and
//!   [`MAX_INLINE_STEPS`]: an attempt still running when the window closes is
//!   made durable while it runs — the step is committed with its attempt
//!   park — and its outcome is driven through the ordinary path afterwards;
//! - the merged write is exactly the sequence of the steps' writes: a park
//!   armed and withdrawn inside the window never reaches the store; a
//!   withdrawal of a park committed earlier does;
//! - a lost optimistic race (another replica advanced the instance) replays
//!   the same events on the reloaded snapshot; attempts that ran are never
//!   run again for it, attempts the replay newly asks for run afterwards.

use super::driver::ms;
use super::fires::Fire;
use super::output::Written;
use super::{Deployed, Kept, Runtime};
use crate::engine::{self, AttemptRequest, Effect, Event, InstanceState, Snapshot, Step};
use crate::store::channels::NewRequest;
use crate::store::stats::{slot_of, Tally};
use crate::store::{
    AttemptOutput, AttemptRow, JournalRow, NewPark, ParkClaim, SearchVar, StepWrite, Store,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// One attempt polled by the speculating task: its request and outcome.
type AttemptFuture = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = (AttemptRequest, (engine::TaskOutcome, Option<Written>))>
            + Send,
    >,
>;

/// The most steps merged into one commit (a loop of quick tasks still
/// commits regularly; the commit window bounds it in time). Each outcome of
/// a fan-out's iteration is a step: 64 cut a window of 100 iterations into
/// commits of 64 outcomes, each writing the whole snapshot (issue 29).
pub(crate) const MAX_INLINE_STEPS: usize = 256;

/// Waits due within this horizon get an in-process alarm (alarm.rs); later
/// ones are left to the pollers.
const ALARM_HORIZON: std::time::Duration = std::time::Duration::from_secs(60);

/// How long after its due time an alarmed park stays claimed by the runtime
/// that armed it. Past it, any poller may fire it (the process died, or the
/// fire is stuck).
const ALARM_GRACE_MS: i64 = 1_000;

/// An alarm called this much ahead of its instant (or more) warms the
/// sandbox first (a warm-up takes ~20 to 100 µs).
const WARM_MIN_LEFT: std::time::Duration = std::time::Duration::from_micros(150);

/// The most snapshots kept for the drives of attempts still out
/// (`Runtime::keep_warm`); past it the map is emptied (a drive then reads
/// its instance from the store, as without it).
const WARM_MAX: usize = 10_000;

/// An instance advanced in memory since its last commit.
pub(crate) struct Spec {
    pub(crate) snapshot: Snapshot,
    /// The merged write of every step since the last commit (its snapshot
    /// fields are filled in by [`Runtime::finish_write`]).
    pub(crate) write: StepWrite,
    /// The events applied since the last commit, in order (for a replay).
    pub(crate) events: Vec<Event>,
    /// Attempts asked for and not started.
    pub(crate) pending: Vec<AttemptRequest>,
    /// Attempts started and not yet applied: (token, attempt).
    pub(crate) inflight: HashSet<(u64, u32)>,
    /// Precise due instants of armed timed parks, by seq.
    pub(crate) dues: HashMap<i64, chrono::DateTime<chrono::Utc>>,
    pub(crate) steps: usize,
    /// The tasks of the attempts started here; those still running when the
    /// window closed drive their outcome themselves (await them after the
    /// commit, with the instance lock released).
    pub(crate) running: Vec<tokio::task::JoinHandle<()>>,
    /// The push deliveries started after the commit (channel.rs): awaited
    /// on a virtual clock (time must not jump past them), detached otherwise.
    pub(crate) sends: Vec<tokio::task::JoinHandle<()>>,
    /// What the guests of the attempts applied here wrote, by (token, node,
    /// attempt) (a token passes several tasks): written on their attempt
    /// rows by [`Runtime::finish_write`].
    pub(crate) outputs: HashMap<(u64, String, u32), Written>,
    /// Child flows asked for and not yet prepared (children.rs).
    pub(crate) child_starts: Vec<engine::ChildStart>,
    /// Child flows prepared: created with the commit, carried on after it.
    pub(crate) children: Vec<super::children::PreparedChild>,
    /// Child instances to cancel once committed: (instance, reason).
    pub(crate) cancels: Vec<(String, String)>,
    /// Attempts in flight whose tokens this step removed, to stop once
    /// committed: (token, attempt) (interrupt.rs).
    pub(crate) abandoned: Vec<(u64, u32)>,
    /// This instance's end, for its parent (a child's final step).
    pub(crate) delivery: Option<super::children::Delivery>,
    /// The searchable variables the store holds for the instance (`None`:
    /// not known, so the commit writes them): a commit rewrites them only
    /// when the snapshot's differ (migration 0020).
    pub(crate) search_base: Option<Vec<SearchVar>>,
    /// What the store counts the instance for (its last committed snapshot's
    /// tally; empty for an instance not written yet): a commit writes the
    /// difference to the new snapshot's (migration 0024, `store::stats`).
    pub(crate) stats_base: Tally,
    /// The version committed with an alarm armed: the snapshot is to be kept
    /// for the alarm's step (`Runtime::remember`), by whoever owns it once
    /// the commit is done (moved when nobody reads it after).
    pub(crate) remember: Option<i64>,
}

/// What `snap` counts for in the console's aggregates.
pub(crate) fn tally(snap: &Snapshot) -> Tally {
    Tally {
        state: Some(Cow::Borrowed(snap.state.as_str())),
        nodes: snap
            .node_states
            .iter()
            .map(|(n, s)| (n.clone(), Cow::Borrowed(s.as_str())))
            .collect(),
        error_code: snap.error.as_ref().map(|e| e.code.clone()),
    }
}

/// `a` then `b`, as one write.
pub(crate) fn merge(a: &mut StepWrite, b: StepWrite) {
    if b.withdraw_all {
        a.arm.clear();
        a.withdraw.clear();
        a.requests.clear();
        a.withdraw_all = true;
    } else {
        for seq in b.withdraw {
            let before = a.arm.len();
            a.arm.retain(|p| p.seq != seq);
            // A request whose call ended inside the window is never written.
            a.requests.retain(|r| r.park_seq != seq);
            if a.arm.len() == before {
                a.withdraw.push(seq);
            }
        }
    }
    a.requests.extend(b.requests);
    a.signals.extend(b.signals);
    a.finished.extend(b.finished);
    a.delivered.extend(b.delivered);
    a.arm.extend(b.arm);
    a.attempts.extend(b.attempts);
    a.journal.extend(b.journal);
    a.delete |= b.delete;
    a.key_window_ms = a.key_window_ms.max(b.key_window_ms);
}

impl Spec {
    pub(crate) fn new(snapshot: Snapshot) -> Spec {
        Spec {
            snapshot,
            write: StepWrite::default(),
            events: Vec::new(),
            pending: Vec::new(),
            inflight: HashSet::new(),
            dues: HashMap::new(),
            steps: 0,
            running: Vec::new(),
            sends: Vec::new(),
            outputs: HashMap::new(),
            child_starts: Vec::new(),
            children: Vec::new(),
            cancels: Vec::new(),
            abandoned: Vec::new(),
            delivery: None,
            search_base: None,
            stats_base: Tally::default(),
            remember: None,
        }
    }
}

impl<S: Store> Runtime<S> {
    /// A spec holding one step (the first since the last commit).
    pub(crate) fn spec_of(&self, step: Step, event: Option<Event>) -> Spec {
        let Step { snapshot, effects } = step;
        let mut spec = Spec::new(snapshot);
        self.fold(&mut spec, effects, event);
        spec
    }

    /// Fold one more step into `spec`.
    pub(crate) fn absorb(&self, spec: &mut Spec, step: Step, event: Option<Event>) {
        let Step { snapshot, effects } = step;
        self.fold(spec, effects, event);
        spec.snapshot = snapshot;
    }

    /// The step's effects are moved in (an attempt's request and a child's
    /// start keep what they carry, uncopied).
    fn fold(&self, spec: &mut Spec, effects: Vec<Effect>, event: Option<Event>) {
        let mut w = StepWrite::default();
        for e in effects {
            match e {
                Effect::Arm { seq, park } => {
                    let seq = seq as i64;
                    if let Some(due) = park.due {
                        spec.dues.insert(seq, due);
                    }
                    w.arm.push(NewPark {
                        seq,
                        kind: park.kind.as_str().to_string(),
                        // Rounded up: a park never becomes claimable before its instant.
                        due_at: park.due.map(crate::time::to_millis_ceil),
                        correlation_key: park.message.as_ref().and_then(|m| m.key.clone()),
                        message_name: park.message.map(|m| m.name),
                        claim: None,
                    });
                }
                Effect::Withdraw { seq } => w.withdraw.push(seq as i64),
                Effect::RecordAttempt(a) => w.attempts.push(AttemptRow {
                    token: a.token as i64,
                    node: a.node,
                    attempt: i64::from(a.attempt),
                    started_at: ms(a.started_at),
                    ended_at: ms(a.ended_at),
                    outcome: a.outcome,
                    code: a.code,
                    class: a.class.map(|c| c.as_str().to_string()),
                    message: a.message,
                    calls: None,
                    item_index: a.item.as_ref().map(|i| i64::from(i.index)),
                    item_node: a.item.map(|i| i.node),
                }),
                Effect::Journal(j) if self.inner.config.audit_sql => w.journal.push(JournalRow {
                    seq: j.seq as i64,
                    at: ms(j.at),
                    kind: j.kind,
                    node: j.node,
                    data: j.data.to_string(),
                }),
                Effect::Journal(_) => {}
                Effect::RunAttempt(a) => spec.pending.push(a),
                // Written with the step, delivered after its commit (signals.rs).
                Effect::Throw(t) => w.signals.push(crate::store::signals::NewSignal {
                    id: super::new_id(ms(self.inner.clock.now())),
                    kind: t.kind.as_str().to_string(),
                    name: t.name,
                    correlation_key: t.key,
                    variables: serde_json::Value::Object(t.variables).to_string(),
                    origin: Some(spec.snapshot.instance_id.clone()),
                    created_at: ms(self.inner.clock.now()),
                }),
                // The transactional outbox: the request is written with the step.
                Effect::Request(r) => w.requests.push(NewRequest {
                    payload: r.input.to_string(),
                    id: r.id,
                    park_seq: r.park as i64,
                    channel: r.channel,
                    node: r.node,
                    call_attempt: i64::from(r.attempt),
                    correlation: r.correlation,
                    created_at: ms(self.inner.clock.now()),
                    claim: None,
                }),
                // Child flows: created with the commit, cancelled after it (children.rs).
                Effect::StartChild(c) => spec.child_starts.push(c),
                Effect::CancelChild { instance, reason } => spec.cancels.push((instance, reason)),
                // Stopped once this step is committed (interrupt.rs); a
                // non-idempotent task's attempt runs to its end. Either way
                // its result is discarded.
                Effect::AttemptAbandoned {
                    token,
                    attempt,
                    interruptible: true,
                    ..
                } => spec.abandoned.push((token, attempt)),
                Effect::AttemptAbandoned { .. } => {}
                Effect::Ended { state } => {
                    w.withdraw_all = true;
                    // Retention PT0S: no history at all, but FAILED is always retained.
                    w.delete = state != InstanceState::Failed
                        && self.inner.config.retention.as_std().is_zero();
                    // Its idempotency key outlives it (store::KEEP_KEY).
                    w.key_window_ms =
                        i64::try_from(self.inner.config.idempotency_window.as_std().as_millis())
                            .unwrap_or(i64::MAX / 4);
                }
            }
        }
        // A request whose park the same step withdrew is dead already.
        if w.withdraw_all {
            w.requests.clear();
        } else if !w.withdraw.is_empty() {
            let gone = w.withdraw.clone();
            w.requests.retain(|r| !gone.contains(&r.park_seq));
        }
        merge(&mut spec.write, w);
        if let Some(Event::AttemptEnded { token, attempt, .. }) = &event {
            spec.inflight.remove(&(*token, *attempt));
        }
        spec.events.extend(event);
        spec.steps += 1;
    }

    /// The write to commit: the merged effects plus the final snapshot, and
    /// a claim on every short wait this runtime will fire from an alarm.
    /// The merged effects are moved out: a spec is committed once (a lost
    /// race rebuilds it by replay).
    pub(crate) fn finish_write(&self, spec: &mut Spec) -> StepWrite {
        let mut w = std::mem::take(&mut spec.write);
        w.snapshot = spec.snapshot.to_json();
        let snap = &spec.snapshot;
        w.state = snap.state.as_str().to_string();
        w.updated_at = ms(self.inner.clock.now());
        if snap.state.is_terminal() {
            w.ended_at = snap.ended_at.map(ms);
        }
        // Most attempts write nothing: then nothing to match.
        let written = (!spec.outputs.is_empty()).then_some(&w.attempts);
        w.outputs = written
            .into_iter()
            .flatten()
            .filter_map(|a| {
                let key = (
                    u64::try_from(a.token).ok()?,
                    a.node.clone(),
                    u32::try_from(a.attempt).ok()?,
                );
                let o = spec.outputs.get(&key)?;
                Some(AttemptOutput {
                    token: a.token,
                    node: a.node.clone(),
                    attempt: a.attempt,
                    stderr: o.stderr.clone(),
                    logs: o.logs.clone(),
                    calls: o.calls.clone(),
                    input: o.input.clone(),
                    output: o.output.clone(),
                })
            })
            .collect();
        let search = crate::store::search_vars(&snap.variables);
        if spec.search_base.as_ref() != Some(&search) {
            spec.search_base = Some(search.clone());
            w.search = Some(search);
        }
        // The console's counts: from what the store counts it for to this
        // snapshot (nothing once it is deleted).
        let next = if w.delete {
            Tally::default()
        } else {
            tally(snap)
        };
        w.stats = spec
            .stats_base
            .deltas(&next, &snap.deployment_id, slot_of(&snap.instance_id));
        if !w.delete {
            w.failure = spec.stats_base.failure_change(&next);
        }
        spec.stats_base = next;
        w.children = super::children::child_rows(spec);
        w.abandoned = spec.abandoned.clone();
        self.child_end(spec, &mut w);
        if self.inner.clock.is_wall_clock() && self.inner.alarms.is_some() {
            let now = self.inner.clock.now();
            for p in &mut w.arm {
                let short = matches!(p.kind.as_str(), "retry" | "timer" | "channel" | "continue")
                    && spec.dues.get(&p.seq).is_some_and(|due| {
                        (*due - now)
                            .to_std()
                            .map_or(true, |left| left <= ALARM_HORIZON)
                    });
                if let (true, Some(due_at)) = (short, p.due_at) {
                    p.claim = Some(ParkClaim {
                        owner: self.inner.owner.clone(),
                        until: due_at.saturating_add(ALARM_GRACE_MS),
                    });
                }
            }
        }
        w
    }

    /// After a commit: set an alarm for every park written claimed, and keep
    /// the committed snapshot for the fire (no reload then).
    pub(crate) fn arm_alarms(&self, id: &str, version: i64, spec: &mut Spec, write: &StepWrite) {
        let Some(alarms) = &self.inner.alarms else {
            return;
        };
        let now = self.inner.clock.now();
        let mut any = false;
        for p in write.arm.iter().filter(|p| p.claim.is_some()) {
            let Some(due) = spec.dues.get(&p.seq) else {
                continue;
            };
            let when = Instant::now() + (*due - now).to_std().unwrap_or_default();
            let weak = Arc::downgrade(&self.inner);
            let handle = tokio::runtime::Handle::current();
            let (instance, park) = (id.to_string(), p.seq);
            any |= alarms.at(when, move |not_before| {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let fire = Fire {
                    instance,
                    park,
                    not_before,
                };
                Runtime { inner }.hand_fire(&handle, fire);
            });
        }
        if any {
            spec.remember = Some(version);
        }
    }

    /// An alarm's fire (fires.rs), on a worker.
    pub(crate) async fn fire(&self, fire: Fire) {
        let Fire {
            instance,
            park,
            not_before,
        } = fire;
        // Called early so this worker is awake at the instant (alarm.rs);
        // never fire before it. The time left warms the sandbox for a
        // retry's attempt. Boxed: the warm-up's future would make every
        // fire's task as large.
        if not_before > Instant::now() + WARM_MIN_LEFT {
            Box::pin(self.prewarm(&instance, park)).await;
        }
        while Instant::now() < not_before {
            std::hint::spin_loop();
        }
        self.fire_alarm(instance, park).await
    }

    /// Keep `spec`'s committed snapshot for the alarm its commit armed, if
    /// it armed one (a copy: the caller goes on with it).
    pub(crate) fn remember_armed(&self, id: &str, spec: &mut Spec) {
        if let Some(version) = spec.remember.take() {
            self.remember(id, version, &spec.snapshot);
        }
    }

    /// Warm the sandbox for the attempt a retry park `seq` of instance `id`
    /// will run when it fires (alarm.rs calls the job early while few
    /// alarms are pending). Reads only what is in memory; does nothing for
    /// other parks.
    async fn prewarm(&self, id: &str, seq: i64) {
        let target = self.inner.hot.lock().ok().and_then(|m| {
            let (_, snap) = m.get(id)?;
            let park = snap.parks.get(&u64::try_from(seq).ok()?)?;
            (park.kind == engine::ParkKind::Retry)
                .then(|| (snap.deployment_id.clone(), park.node.clone()))
        });
        let Some((deployment, node)) = target else {
            return;
        };
        let deployed = self
            .inner
            .deployed
            .lock()
            .ok()
            .and_then(|m| m.get(&deployment).cloned());
        let component = deployed
            .as_ref()
            .and_then(|d| match &d.process.find(&node)?.kind {
                crate::model::NodeKind::ServiceTask(t) => match &t.implementation {
                    crate::model::TaskImpl::Registered(task) => d.components.get(task),
                    crate::model::TaskImpl::Channel(_) | crate::model::TaskImpl::Http(_) => None,
                },
                _ => None,
            });
        if let Some(component) = component {
            self.inner.sandbox.warm(component).await;
        }
    }

    /// An alarm rang: fire the park this runtime holds claimed.
    async fn fire_alarm(&self, id: String, seq: i64) {
        let park = u64::try_from(seq).unwrap_or_default();
        if let Err(e) = self
            .drive_discarding(id.clone(), Event::ParkFired { park })
            .await
        {
            tracing::error!(instance = %id, park = seq, error = %e, "could not fire park; a poller will");
            // Boxed: a store call's state would make every fire's task larger.
            let _ = Box::pin(self.inner.store.release_claim(&id, seq, &self.inner.owner)).await;
        }
    }

    /// Keep a committed snapshot for the next step of this instance.
    pub(crate) fn remember(&self, id: &str, version: i64, snapshot: &Snapshot) {
        self.remember_moved(id, version, Box::new(snapshot.clone()));
    }

    /// Hand the snapshot an inbox drive committed (as `version`) to the next
    /// drive of the instance: its attempts are still out, their outcomes
    /// drive it (driver.rs). Moved, never cloned; under the instance's lock,
    /// so a newer one is never replaced by an older one.
    pub(crate) fn keep_warm(&self, id: &str, version: i64, snapshot: Box<Snapshot>) {
        if let Ok(mut m) = self.inner.warm.lock() {
            if m.len() >= WARM_MAX && !m.contains_key(id) {
                // Entries left by attempts whose outcomes never came back.
                m.clear();
            }
            m.insert(id.to_string(), (version, snapshot));
        }
    }

    /// Take the snapshot [`Self::keep_warm`] kept for instance `id`.
    pub(crate) fn take_warm(&self, id: &str) -> Option<Kept> {
        self.inner.warm.lock().ok()?.remove(id)
    }

    /// Whether an alarm of this runtime is pending for instance `id`.
    pub(crate) fn alarm_pending(&self, id: &str) -> bool {
        self.inner.hot.lock().is_ok_and(|m| m.contains_key(id))
    }

    /// [`Self::remember`] without a copy: the snapshot moves in.
    pub(crate) fn remember_moved(&self, id: &str, version: i64, snapshot: Box<Snapshot>) {
        if let Ok(mut m) = self.inner.hot.lock() {
            if m.len() >= 100_000 {
                m.clear();
            }
            m.insert(id.to_string(), (version, snapshot));
        }
    }

    /// Take the kept snapshot of an instance (it is re-kept after the next commit).
    pub(crate) fn recall(&self, id: &str) -> Option<Kept> {
        self.inner.hot.lock().ok()?.remove(id)
    }

    /// Run the attempts `spec` asks for and apply their outcomes in memory,
    /// until no attempt is left, the commit window closes, or the step bound
    /// is reached. The attempts are polled right here (no task, no hand-off);
    /// those still running when the window closes are spawned and drive their
    /// outcome themselves through the ordinary path, after the caller's
    /// commit (the caller holds the instance lock; it awaits them after).
    pub(crate) async fn speculate(&self, id: &str, deployed: &Arc<Deployed>, spec: &mut Spec) {
        let window = self.inner.config.commit_window.as_std();
        if window.is_zero() || spec.pending.is_empty() {
            return;
        }
        let end0 = tokio::time::Instant::now() + window;
        let mut flying: FuturesUnordered<AttemptFuture> = FuturesUnordered::new();
        // One timer for the whole window, registered with tokio's time driver
        // (a lock shared by every worker) only when it is first polled: the
        // select below polls the attempts first, so an attempt that finishes
        // on its first poll (a quick guest) never registers it.
        let window_end = tokio::time::sleep_until(end0);
        tokio::pin!(window_end);
        let mut armed_at = end0;
        loop {
            // Never past a wait of this instance falling due: it must find the
            // step committed and the attempt in flight, as without speculation.
            let end = self.next_wait(&spec.snapshot).map_or(end0, |t| t.min(end0));
            if spec.steps < MAX_INLINE_STEPS && tokio::time::Instant::now() < end {
                // An attempt with egress (an HTTP task's too) has effects outside:
                // it runs only after its step committed it as started (its attempt park).
                let (outside, quick): (Vec<_>, Vec<_>) = std::mem::take(&mut spec.pending)
                    .into_iter()
                    .partition(|r| {
                        r.task == crate::model::HTTP_TASK
                            || deployed
                                .components
                                .get(&r.task)
                                .is_some_and(|c| c.egress_import().is_some())
                    });
                spec.pending = outside;
                for req in quick {
                    spec.inflight.insert((req.token, req.attempt));
                    let (rt, id, deployed) = (self.clone(), id.to_string(), deployed.clone());
                    let tenant = spec.snapshot.tenant.clone();
                    flying.push(Box::pin(async move {
                        let outcome = rt.run_attempt(&deployed, &tenant, &id, &req).await;
                        (req, outcome)
                    }));
                }
            }
            if flying.is_empty() {
                break;
            }
            if end != armed_at {
                window_end.as_mut().reset(end);
                armed_at = end;
            }
            tokio::select! {
                biased;
                Some((req, outcome)) = flying.next() => self.apply_outcome(deployed, spec, req, outcome),
                _ = window_end.as_mut() => break,
            }
        }
        // Still running: durable with the commit (their attempt parks), then
        // each drives its own outcome.
        for attempt in flying {
            let (rt, id) = (self.clone(), id.to_string());
            spec.running.push(tokio::spawn(async move {
                let (req, outcome) = attempt.await;
                rt.attempt_ended(id, req, outcome).await;
            }));
        }
    }

    /// When the earliest timed wait of the instance (not an attempt lease)
    /// falls due, on tokio's clock. On a virtual or manual clock time only
    /// moves when somebody moves it, so only a wait already due counts.
    fn next_wait(&self, snap: &Snapshot) -> Option<tokio::time::Instant> {
        let due = snap
            .parks
            .values()
            .filter(|p| p.kind != engine::ParkKind::Attempt)
            .filter_map(|p| p.due)
            .min()?;
        let now = self.inner.clock.now();
        if !self.inner.clock.is_wall_clock() && due > now {
            return None;
        }
        Some(tokio::time::Instant::now() + (due - now).to_std().unwrap_or_default())
    }

    pub(crate) fn apply_outcome(
        &self,
        deployed: &Deployed,
        spec: &mut Spec,
        req: AttemptRequest,
        (outcome, written): (engine::TaskOutcome, Option<Written>),
    ) {
        // What it wrote, with its input and output (the console's step view).
        let io = super::output::step_io(&req.input, &outcome);
        spec.outputs.insert(
            (req.token, req.node.clone(), req.attempt),
            Written::with_io(written, io),
        );
        let event = Event::AttemptEnded {
            token: req.token,
            attempt: req.attempt,
            outcome,
        };
        // The snapshot itself, not a copy (it may hold a fan-out's every item).
        let snap = std::mem::replace(&mut spec.snapshot, engine::Snapshot::placeholder());
        match deployed.apply_keeping(snap, event.clone(), &self.inputs()) {
            Ok(step) => self.absorb(spec, step, Some(event)),
            Err((e, snap)) => {
                spec.snapshot = snap;
                // Not applied: its attempt park stays and re-runs it at its lease.
                spec.inflight.remove(&(req.token, req.attempt));
                tracing::error!(instance = %spec.snapshot.instance_id, error = %e, "could not apply an attempt outcome; its lease will re-run it");
            }
        }
    }

    /// Replay `events` on a reloaded snapshot (after a lost race): the new
    /// spec asks only for attempts that neither ran nor are running.
    pub(crate) fn replay(
        &self,
        deployed: &Deployed,
        base: Snapshot,
        events: &[Event],
        inflight: &HashSet<(u64, u32)>,
    ) -> Spec {
        let stored = crate::store::search_vars(&base.variables);
        let counted = tally(&base);
        let mut spec = Spec::new(base);
        spec.search_base = Some(stored);
        spec.stats_base = counted;
        for event in events {
            match deployed.apply(spec.snapshot.clone(), event.clone(), &self.inputs()) {
                Ok(step) => self.absorb(&mut spec, step, Some(event.clone())),
                Err(e) => {
                    tracing::warn!(instance = %spec.snapshot.instance_id, error = %e, "an event no longer applies after a lost race");
                }
            }
        }
        let ran: HashSet<(u64, u32)> = events
            .iter()
            .filter_map(|e| match e {
                Event::AttemptEnded { token, attempt, .. } => Some((*token, *attempt)),
                _ => None,
            })
            .collect();
        spec.pending.retain(|a| {
            !ran.contains(&(a.token, a.attempt)) && !inflight.contains(&(a.token, a.attempt))
        });
        spec.inflight = inflight.clone();
        spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn park(seq: i64) -> NewPark {
        NewPark {
            seq,
            kind: "attempt".into(),
            due_at: Some(seq),
            message_name: None,
            correlation_key: None,
            claim: None,
        }
    }

    #[test]
    fn a_park_armed_and_withdrawn_inside_the_window_never_reaches_the_store() {
        let mut a = StepWrite {
            arm: vec![park(1)],
            withdraw: vec![7],
            ..StepWrite::default()
        };
        merge(
            &mut a,
            StepWrite {
                arm: vec![park(2)],
                withdraw: vec![1, 8],
                ..StepWrite::default()
            },
        );
        assert_eq!(a.arm, vec![park(2)]);
        assert_eq!(a.withdraw, vec![7, 8]);
        assert!(!a.withdraw_all);
    }

    #[test]
    fn a_terminal_step_withdraws_everything_before_it() {
        let mut a = StepWrite {
            arm: vec![park(1)],
            withdraw: vec![7],
            ..StepWrite::default()
        };
        merge(
            &mut a,
            StepWrite {
                withdraw_all: true,
                delete: true,
                ..StepWrite::default()
            },
        );
        assert!(a.arm.is_empty() && a.withdraw.is_empty());
        assert!(a.withdraw_all && a.delete);
    }
}
