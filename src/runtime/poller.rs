//! The timer poller and the retention sweeper.
//!
//! The poller claims due parks from the store (the truth) and fires them; an
//! in-memory wake-up (`Notify`) only makes it prompt when a step arms a park.
//! On a virtual clock, whenever nothing is runnable it jumps the clock to the
//! next due park, so a PT24H timer or a long backoff passes in milliseconds;
//! while an attempt runs past the commit window, virtual time runs at real
//! speed instead (a timer boundary due meanwhile fires, as on the real clock).

use super::{Runtime, RuntimeResult};
use crate::engine::{InstanceState, ParkKind};
use crate::store::{InstanceRecord, Store};
use futures_util::FutureExt;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Parks claimed per poll.
const CLAIM_BATCH: i64 = 256;
/// How often `settle` looks at a park past due that somebody else holds.
const HELD_PARK_POLL: Duration = Duration::from_millis(10);

/// On the virtual clock, while an attempt really runs, virtual time moves
/// with real time in steps of at most this (`settle_until`).
const VIRTUAL_TICK: Duration = Duration::from_millis(10);

/// Why `settle` returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The instance is terminal.
    Terminal(InstanceRecord),
    /// The instance waits for something only the outside world can send (a message).
    Waiting(InstanceRecord),
    /// The instance ended and was deleted at once (retention `PT0S`).
    Gone,
}

impl<S: Store> Runtime<S> {
    /// The longest the poller sleeps without looking at the store (another
    /// replica may have armed something): `sutra.runtime.poll-interval`.
    fn max_idle(&self) -> Duration {
        self.inner.config.poll_interval.as_std()
    }

    fn claim_lease_ms(&self) -> i64 {
        (self.inner.limits.deadline + super::LEASE_MARGIN).as_millis() as i64
    }

    /// Claim every park due now and fire it, driving each instance until it
    /// waits again. Returns how many parks fired.
    pub async fn fire_due(&self) -> RuntimeResult<usize> {
        // Warm instances idle past `warm_idle` are dropped (sandbox/reuse.rs).
        self.inner.sandbox.sweep_warm();
        // Push deliveries due now go out first (outbox.rs); their failure
        // never holds the parks back.
        if let Err(e) = self.deliver_due().await {
            tracing::warn!(error = %e, "outbox pass failed");
        }
        // Signals a crash left half delivered, or thrown by a step (signals.rs).
        if let Err(e) = self.pump_signals_if_idle().await {
            tracing::warn!(error = %e, "signal delivery pass failed");
        }
        let mut fired = 0;
        loop {
            let now = self.inner.clock.now().timestamp_millis();
            let parks = self
                .inner
                .store
                .claim_due(now, CLAIM_BATCH, &self.inner.owner, self.claim_lease_ms())
                .await?;
            if parks.is_empty() {
                // What the fired parks threw is delivered before this returns
                // (a wait it reaches may arm a due park: look again).
                match self.pump_signals_if_idle().await {
                    Ok(0) => {}
                    Ok(_) => continue,
                    Err(e) => tracing::warn!(error = %e, "signal delivery pass failed"),
                }
                return Ok(fired);
            }
            fired += parks.len();
            let mut known = self
                .read_ahead(parks.iter().map(|p| p.instance_id.clone()).collect())
                .await;
            let mut set = tokio::task::JoinSet::new();
            for p in parks {
                let rt = self.clone();
                let known = known.remove(&p.instance_id);
                set.spawn(async move {
                    // A child park may carry its child's end (children.rs).
                    let fired = match rt.park_event(&p.instance_id, p.seq, &p.kind).await {
                        Ok(event) => rt
                            .drive_from(p.instance_id.clone(), event, known)
                            .await
                            .map(|_| ()),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = fired {
                        tracing::error!(instance = %p.instance_id, park = p.seq, error = %e, "could not fire park");
                        let _ = rt.inner.store.release_claim(&p.instance_id, p.seq, &rt.inner.owner).await;
                    }
                });
            }
            while set.join_next().await.is_some() {}
        }
    }

    /// Whether an attempt of this process has run longer than the commit
    /// window (the runtime made its step durable while it runs).
    fn slow_attempt_runs(&self) -> bool {
        let window = self.inner.config.commit_window.as_std();
        self.inner.running.any_older_than(window)
    }

    /// [`Self::fire_due`] on the virtual clock: while an attempt it fired
    /// runs past the commit window, virtual time runs at real speed and what
    /// falls due meanwhile is fired beside it, as the poller and the alarms
    /// do on the real clock. Quick work (commits, attempts within the
    /// window) takes no virtual time, so virtual runs stay exact.
    async fn fire_due_virtual(&self) -> RuntimeResult<usize> {
        let Some(vc) = self.inner.virtual_clock.clone() else {
            return self.fire_due().await;
        };
        let mut firing = tokio::task::JoinSet::new();
        let rt = self.clone();
        firing.spawn(async move { rt.fire_due().await });
        let mut fired = 0;
        loop {
            let began = std::time::Instant::now();
            tokio::select! {
                done = firing.join_next() => match done {
                    None => return Ok(fired),
                    Some(Ok(n)) => fired += n?,
                    // As `fire_due` treats its drives: what a lost task
                    // claimed lapses to the next poll.
                    Some(Err(e)) => tracing::error!(error = %e, "a firing task was lost"),
                },
                _ = tokio::time::sleep(VIRTUAL_TICK) => {
                    if !self.slow_attempt_runs() {
                        // Commits, quick attempts: no virtual time passes.
                        continue;
                    }
                    vc.advance(began.elapsed());
                    let now = self.inner.clock.now().timestamp_millis();
                    if self.next_due_work().await.is_some_and(|due| due <= now) {
                        let rt = self.clone();
                        firing.spawn(async move { rt.fire_due().await });
                    }
                }
            }
        }
    }

    /// On PostgreSQL, the instances about to be driven at once (a claimed
    /// batch of parks, a page of signal deliveries) read in one statement
    /// (each read is a round trip there, and this one replaces one per
    /// instance); an instance named twice is left to be read by its drives.
    /// SQLite reads in process: nothing is read ahead. A failed read only
    /// leaves the reads to the drives.
    pub(super) async fn read_ahead(
        &self,
        mut ids: Vec<String>,
    ) -> HashMap<String, (i64, crate::engine::Snapshot)> {
        if self.inner.store.backend() != "postgres" {
            return HashMap::new();
        }
        ids.sort_unstable();
        let twice: HashSet<String> = ids
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0].clone())
            .collect();
        ids.dedup();
        ids.retain(|id| !twice.contains(id));
        let Ok(records) = self.inner.store.load_instances(&ids).await else {
            return HashMap::new();
        };
        records
            .into_iter()
            .filter_map(|r| {
                let snap = crate::engine::Snapshot::from_json(&r.snapshot).ok()?;
                Some((r.id, (r.version, snap)))
            })
            .collect()
    }

    /// Drive everything due until instance `id` is terminal or waits only for
    /// the outside world. On a virtual clock this jumps time; on the system
    /// clock it sleeps until the next due park (a wait, not a busy loop).
    pub async fn settle(&self, id: &str) -> RuntimeResult<Settled> {
        self.settle_until(id, true).await
    }

    /// [`Runtime::settle`], except that a channel call's window is the outside
    /// world's to end (its answer comes from a counterpart or a worker): an
    /// instance whose only timed waits are channel windows is `Waiting` once
    /// its requests went out (`sutra run` prints it WAITING and returns
    /// rather than sit until the call's timeout).
    pub async fn settle_local(&self, id: &str) -> RuntimeResult<Settled> {
        self.settle_until(id, false).await
    }

    async fn settle_until(&self, id: &str, channel_windows: bool) -> RuntimeResult<Settled> {
        loop {
            // Registered before looking, so a commit in between is not missed.
            let stepped = self.inner.stepped.notified();
            tokio::pin!(stepped);
            stepped.as_mut().enable();
            // Ended already (the usual case once a commit woke us): one read.
            match self.inner.store.load_instance(id).await? {
                None => return Ok(Settled::Gone),
                Some(rec)
                    if InstanceState::parse(&rec.state).is_none_or(InstanceState::is_terminal) =>
                {
                    return Ok(Settled::Terminal(rec))
                }
                Some(_) => {}
            }
            if self.inner.virtual_clock.is_some() {
                self.fire_due_virtual().await?;
            } else {
                self.fire_due().await?;
            }
            // What a step threw is delivered (a pump running elsewhere in
            // this process is waited for), so a wait it reached shows.
            if self.pump_signals().await? > 0 {
                continue;
            }
            // Parks first, then the instance: a step committed in between (an
            // alarm here, another replica) shows in the instance, never as an
            // instance that waits with no park.
            // A child flow's waits count as the instance's own.
            let own_due = self.due_with_children(id, channel_windows).await?;
            // A delivery retry due before the instance's next timed wait is
            // work to wait for too (a delivery alone is the outside world's);
            // a delivery this runtime is making is waited for.
            let (next_send, sending) = self.next_send_of(id).await?;
            let own_due = match (own_due, next_send) {
                (Some(p), Some(d)) => Some(p.min(d)),
                (p, _) => p,
            };
            if sending {
                tokio::select! {
                    _ = stepped => {}
                    _ = tokio::time::sleep(HELD_PARK_POLL) => {}
                }
                continue;
            }
            let Some(rec) = self.inner.store.load_instance(id).await? else {
                return Ok(Settled::Gone);
            };
            if InstanceState::parse(&rec.state).is_none_or(InstanceState::is_terminal) {
                return Ok(Settled::Terminal(rec));
            }
            let Some(due) = own_due else {
                // A commit while we looked may have moved what was read: a
                // child's end writes its parent's park (read before it, with
                // no due time) and ends the child (read after it, with no
                // parks), while the parent's row waits for the delivery.
                // Look again rather than call the instance waiting.
                if stepped.as_mut().now_or_never().is_some() {
                    continue;
                }
                return Ok(Settled::Waiting(rec));
            };
            if let Some(vc) = &self.inner.virtual_clock {
                if self.slow_attempt_runs() {
                    // An attempt really runs, past the commit window: virtual
                    // time runs at real speed meanwhile, so a timer due during
                    // it (an interrupting boundary) fires when its time
                    // comes, as on the real clock, and one due after it ends
                    // is not hurried.
                    let now = self.inner.clock.now().timestamp_millis();
                    let left = Duration::from_millis(u64::try_from(due - now).unwrap_or(0));
                    let began = std::time::Instant::now();
                    tokio::select! {
                        _ = stepped => {}
                        _ = tokio::time::sleep(left.min(VIRTUAL_TICK)) => {}
                    }
                    vc.advance(began.elapsed());
                    continue;
                }
                self.wait_until(due).await;
                continue;
            }
            // On the system clock: until the park is due, or until a commit
            // (an alarm or an attempt of this runtime advanced something). A
            // park past due that no poll could claim is held by an alarm here
            // or by another replica: look again shortly.
            let now = self.inner.clock.now().timestamp_millis();
            let wait = if self.alarm_pending(id) {
                // An alarm here fires it at its instant and the commit wakes
                // us; waking at the due time too would only compete with it.
                Duration::from_millis(u64::try_from(due - now).unwrap_or(0))
                    .saturating_add(HELD_PARK_POLL)
                    .max(HELD_PARK_POLL)
                    .min(self.max_idle())
            } else if due > now {
                Duration::from_millis(u64::try_from(due - now).unwrap_or(0)).min(self.max_idle())
            } else {
                HELD_PARK_POLL
            };
            tokio::select! {
                _ = stepped => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// The earliest due instant of the parks of instance `id` and of the
    /// child flows it awaits (and theirs).
    /// Without `channel_windows`, a channel call's window does not count.
    async fn due_with_children(
        &self,
        id: &str,
        channel_windows: bool,
    ) -> RuntimeResult<Option<i64>> {
        let mut due: Option<i64> = None;
        let mut work = vec![(id.to_string(), 0)];
        while let Some((instance, depth)) = work.pop() {
            for p in self.inner.store.parks_of(&instance).await? {
                let counted = channel_windows || p.kind != ParkKind::Channel.as_str();
                if let Some(d) = p.due_at.filter(|_| counted) {
                    due = Some(due.map_or(d, |x| x.min(d)));
                }
                if p.kind == ParkKind::Child.as_str() && depth < self.inner.config.max_call_depth {
                    let seq = u64::try_from(p.seq).unwrap_or_default();
                    work.push((crate::engine::child_id(&instance, seq), depth + 1));
                }
            }
        }
        Ok(due)
    }

    /// The earliest due park or push delivery.
    pub async fn next_due_work(&self) -> Option<i64> {
        let park = self.inner.store.next_due().await.ok().flatten();
        let send = self.inner.store.next_delivery_due().await.ok().flatten();
        match (park, send) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the next delivery of instance `id`'s pending push requests is
    /// due, and whether this runtime is delivering one right now.
    async fn next_send_of(&self, id: &str) -> RuntimeResult<(Option<i64>, bool)> {
        use crate::store::channels::request_state;
        let now = self.inner.clock.now().timestamp_millis();
        let pending: Vec<_> = self
            .inner
            .store
            .requests_of(id)
            .await?
            .into_iter()
            .filter(|r| r.state == request_state::PENDING)
            .collect();
        let sending = pending.iter().any(|r| {
            r.claimed_by.as_deref() == Some(self.inner.owner.as_str())
                && r.claimed_until.is_some_and(|u| u > now)
        });
        let mut due: Option<i64> = None;
        for r in pending.iter().filter(|r| r.claimed_by.is_none()) {
            // A pull request waits for a worker: the outside world's business.
            let push = matches!(
                self.channel(&r.tenant, &r.channel).await?,
                Some(c) if c.transport == crate::store::channels::Transport::Push
            );
            if push {
                due = Some(due.map_or(r.due_at, |d| d.min(r.due_at)));
            }
        }
        Ok((due, sending))
    }

    /// Advance to `due_ms`: jump a virtual clock, or sleep on the system clock.
    async fn wait_until(&self, due_ms: i64) {
        let now = self.inner.clock.now().timestamp_millis();
        if due_ms <= now {
            return;
        }
        match &self.inner.virtual_clock {
            Some(vc) => {
                if let Some(t) = chrono::DateTime::from_timestamp_millis(due_ms) {
                    vc.advance_to(t);
                }
            }
            None => {
                let wait = Duration::from_millis(u64::try_from(due_ms - now).unwrap_or(0));
                tokio::select! {
                    _ = tokio::time::sleep(wait.min(self.max_idle())) => {}
                    _ = self.inner.wake.notified() => {}
                }
            }
        }
    }

    /// Re-arm and drive every parked instance until `shutdown` resolves: the
    /// poller loop of `sutra serve`, with the retention sweeper beside it.
    pub async fn serve(
        &self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> RuntimeResult<()> {
        tokio::pin!(shutdown);
        // Another replica arming a park wakes this poller (PostgreSQL LISTEN/NOTIFY).
        if let Err(e) = self.inner.store.watch_parks(self.inner.wake.clone()).await {
            tracing::warn!(error = %e, "cannot watch for parks armed elsewhere; polling only");
        }
        // Another replica's cancel stops the attempts running here (interrupt.rs).
        let stopper = super::interrupt::Stopper(std::sync::Arc::downgrade(&self.inner));
        if let Err(e) = self
            .inner
            .store
            .watch_stops(std::sync::Arc::new(stopper))
            .await
        {
            tracing::warn!(error = %e, "cannot watch for attempts abandoned elsewhere");
        }
        // Boot: re-arm the schedules of active deployments (schedule.rs).
        if let Err(e) = self.rearm_schedules().await {
            tracing::warn!(error = %e, "re-arming schedules failed");
        }
        // Boot: children whose parent stopped awaiting them while this
        // process was down (children.rs).
        if let Err(e) = self.cancel_orphans().await {
            tracing::warn!(error = %e, "cancelling orphaned child flows failed");
        }
        // The sweeper runs beside the poller, so a long burst of due work never
        // starves its lease renewal (the lease would change hands while its
        // holder lives).
        let sweeper = {
            let rt = self.clone();
            tokio::spawn(async move { rt.sweeper_loop().await })
        };
        // Batch operations (batches.rs) run beside it too: a long batch never
        // delays due work, and due work never starves a batch.
        let batches = {
            let rt = self.clone();
            tokio::spawn(async move { rt.batch_loop().await })
        };
        // While the store fails (a full disk, a database away), the loop backs
        // off (100 ms doubling to 5 s) instead of spinning on past-due work,
        // and says so once per step of the backoff; the first round that
        // works resets it.
        let mut failing = StoreBackoff::default();
        loop {
            let polled = self.fire_due().await;
            // Timer start events due now (schedule.rs); their next slot counts as due work.
            let ticked = self.tick_schedules().await;
            let next_schedule = match (&polled, &ticked) {
                (Ok(_), Ok(next)) => {
                    failing.reset();
                    *next
                }
                _ => {
                    let pause = failing.failed();
                    if let Err(e) = &polled {
                        tracing::warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "poll failed");
                    }
                    if let Err(e) = &ticked {
                        tracing::warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "schedule tick failed");
                    }
                    ticked.as_ref().ok().copied().flatten()
                }
            };
            let next_park = self.next_due_work().await;
            let next = match (next_park, next_schedule) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let now = self.inner.clock.now().timestamp_millis();
            let idle = match (&self.inner.virtual_clock, next) {
                // Nothing runnable on virtual time: jump to the next due park.
                (Some(_), Some(due)) => {
                    self.wait_until(due).await;
                    continue;
                }
                (_, Some(due)) => Duration::from_millis(u64::try_from(due - now).unwrap_or(0))
                    .min(self.max_idle()),
                (_, None) => self.max_idle(),
            };
            let idle = idle.max(failing.pause());
            tokio::select! {
                _ = &mut shutdown => {
                    sweeper.abort();
                    batches.abort();
                    self.release_schedule_lease().await;
                    return Ok(());
                }
                _ = tokio::time::sleep(idle) => {}
                _ = self.inner.wake.notified() => {}
            }
        }
    }

    /// Every `sutra.instance.retention-sweep-interval` (read on the runtime's
    /// clock, re-checked every second): a sweep, then a retirement pass over
    /// draining deployments (lifecycle.rs).
    async fn sweeper_loop(&self) {
        let mut next_sweep = self.inner.clock.now();
        // A pass the store failed is tried again after a backoff (100 ms
        // doubling to 5 s), not a whole interval later.
        let mut failing = StoreBackoff::default();
        loop {
            if self.inner.clock.now() >= next_sweep {
                let mut failed = false;
                if let Err(e) = self.sweep_once().await {
                    tracing::warn!(error = %e, "retention sweep failed");
                    failed = true;
                }
                if let Err(e) = self.retire_drained().await {
                    tracing::warn!(error = %e, "retirement pass failed");
                    failed = true;
                }
                if let Err(e) = self.cancel_orphans().await {
                    tracing::warn!(error = %e, "orphan pass failed");
                    failed = true;
                }
                next_sweep = match failed {
                    true => {
                        let pause = chrono::Duration::from_std(failing.failed())
                            .unwrap_or(chrono::Duration::seconds(5));
                        self.inner.clock.now() + pause
                    }
                    false => {
                        failing.reset();
                        self.inner
                            .config
                            .retention_sweep_interval
                            .after(self.inner.clock.now())
                    }
                };
            }
            let left = (next_sweep - self.inner.clock.now())
                .to_std()
                .unwrap_or_default();
            tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        }
    }

    /// One pass of the retention sweeper, if this replica holds its lease:
    /// purge COMPLETED/TERMINATED/COMPENSATED instances past `sutra.instance.retention`.
    /// FAILED instances and parked ones are never purged. Returns how many went.
    pub async fn sweep_once(&self) -> RuntimeResult<u64> {
        let now = self.inner.clock.now();
        // The holder renews once per interval; the lease lasts two, so it only
        // changes hands when the holder missed a whole renewal (it died).
        let ttl = self
            .inner
            .config
            .retention_sweep_interval
            .as_std()
            .as_millis()
            .saturating_mul(2)
            .min(i64::MAX as u128) as i64;
        if !self
            .inner
            .store
            .try_lease(
                "retention-sweeper",
                &self.inner.owner,
                now.timestamp_millis(),
                ttl.max(1000),
            )
            .await?
        {
            return Ok(0);
        }
        let window = chrono::Duration::from_std(self.inner.config.retention.as_std())
            .unwrap_or(chrono::Duration::MAX);
        let before = now
            .checked_sub_signed(window)
            .map_or(i64::MIN, |t| t.timestamp_millis());
        let mut total = 0;
        loop {
            let n = self.inner.store.sweep(before, 1000).await?;
            total += n;
            if n < 1000 {
                break;
            }
        }
        // Channel requests that are over (delivered, done, cancelled) go
        // after the same window; poisoned ones and incidents stay.
        while self.inner.store.purge_requests(before, 1000).await? == 1000 {}
        // Idempotency keys kept past their window for instances deleted at
        // their end (migration 0013).
        self.inner
            .store
            .purge_kept_keys(now.timestamp_millis())
            .await?;
        Ok(total)
    }
}

/// The poller's pause while the store fails: none while it works, then
/// 100 ms doubling to 5 s per failed round.
#[derive(Debug, Default)]
struct StoreBackoff {
    failures: u32,
}

impl StoreBackoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MOST: Duration = Duration::from_secs(5);

    /// One more failed round; the pause before the next.
    fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.pause()
    }

    fn reset(&mut self) {
        self.failures = 0;
    }

    fn pause(&self) -> Duration {
        if self.failures == 0 {
            return Duration::ZERO;
        }
        let shift = (self.failures - 1).min(16);
        Self::FIRST.saturating_mul(1 << shift).min(Self::MOST)
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn a_failing_store_is_polled_ever_less_often_and_at_once_when_it_works() {
        let mut b = StoreBackoff::default();
        assert_eq!(b.pause(), Duration::ZERO);
        let pauses: Vec<u128> = (0..8).map(|_| b.failed().as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.reset();
        assert_eq!(b.pause(), Duration::ZERO);
    }
}
