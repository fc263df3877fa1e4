//! Prompt wake-ups across replicas on PostgreSQL: LISTEN/NOTIFY.
//!
//! A transaction that arms a timed park due soon sends `NOTIFY sutra_parks`
//! with the earliest such due instant (ms) as payload; PostgreSQL delivers it
//! only if the transaction commits. Every replica's [`watch`] task listens on
//! that channel and wakes its poller, which then re-reads the store.
//!
//! A transaction whose step abandons running attempts (a cancel, an unwind,
//! an interrupting boundary) sends `NOTIFY sutra_stops` with
//! `instance token attempt` for each, also only on commit; every replica's
//! [`watch_stops`] task hands it to the runtime, which stops the attempt if
//! it runs there (`runtime/interrupt.rs`). A lost stop notification (the
//! listener reconnecting) lets that attempt run to its deadline, as on a
//! replica that never heard of it; its result is discarded either way. As
//! for parks the channel is per database: a stop committed in another
//! schema names an attempt that does not run here and is ignored.
//!
//! Invariants:
//! - a notification is only a hint: the store stays the truth, a lost or
//!   spurious notification costs latency or one extra poll, never
//!   correctness. The channel is per database (not per schema), so replicas
//!   of another schema on the same database can wake this one for nothing;
//! - a park armed with a pre-claim ([`crate::store::NewPark::claim`]) never
//!   notifies: its owner fires it from an in-process timer and no other
//!   replica can claim it before the claim lapses (its pollers find it then,
//!   through `next_due`, within their 500 ms re-read);
//! - only parks due within [`NOTIFY_HORIZON_MS`] of the step notify: pollers
//!   re-read the store at least every 500 ms (`runtime/poller.rs`), so a park
//!   due later is seen in time without a notification. This keeps NOTIFY
//!   (which serialises the commits of notifying transactions on a
//!   database-wide lock) off the common path of arming attempt leases;
//! - the listener never panics: on any error it drops its connection, waits a
//!   bounded, doubling backoff ([`BACKOFF_MIN`]..[`BACKOFF_MAX`]), reconnects
//!   and wakes the poller once (notifications sent meanwhile were lost);
//! - it stops when the store's pool is closed or when nobody else holds the
//!   `Notify` any more (checked at least every [`OWNER_CHECK`]).

use super::{StepWrite, StoreResult};
use crate::store::StopSink;
use sqlx::postgres::{PgConnection, PgListener, PgPool, PgPoolOptions};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// The channel every replica of a database listens on.
pub const PARKS_CHANNEL: &str = "sutra_parks";
/// The channel of abandoned attempts to stop wherever they run.
pub const STOPS_CHANNEL: &str = "sutra_stops";
/// A park due later than this after its step's `updated_at` sends no
/// notification (pollers look again sooner than that anyway).
pub const NOTIFY_HORIZON_MS: i64 = 1_000;
/// The first wait after a listener error.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between reconnection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often an idle listener checks whether its poller still exists.
pub const OWNER_CHECK: Duration = Duration::from_secs(1);

/// The earliest due instant among `steps`' armed parks (pre-claimed ones
/// excepted) that falls within [`NOTIFY_HORIZON_MS`] of its step, if any.
pub fn due_soon<'a>(steps: impl IntoIterator<Item = &'a StepWrite>) -> Option<i64> {
    steps
        .into_iter()
        .flat_map(|s| {
            let horizon = s.updated_at.saturating_add(NOTIFY_HORIZON_MS);
            s.arm
                .iter()
                .filter(|p| p.claim.is_none())
                .filter_map(move |p| p.due_at.filter(|d| *d <= horizon))
        })
        .min()
}

/// Inside the step's transaction: notify every replica that a park falls
/// due soon (delivered on commit, dropped on rollback). No-op when none does.
pub async fn notify_armed<'a>(
    conn: &mut PgConnection,
    steps: impl IntoIterator<Item = &'a StepWrite>,
) -> StoreResult<()> {
    if let Some(due) = due_soon(steps) {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(PARKS_CHANNEL)
            .bind(due.to_string())
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Inside the step's transaction: ask every replica to stop the attempts the
/// step of instance `id` abandoned (delivered on commit, dropped on rollback).
pub async fn notify_abandoned(
    conn: &mut PgConnection,
    id: &str,
    step: &StepWrite,
) -> StoreResult<()> {
    for (token, attempt) in &step.abandoned {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(STOPS_CHANNEL)
            .bind(format!("{id} {token} {attempt}"))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The instance, token and attempt of a [`STOPS_CHANNEL`] payload (read
/// from the right: the two numbers are last, whatever the id holds).
fn parse_stop(payload: &str) -> Option<(&str, u64, u32)> {
    let mut parts = payload.rsplitn(3, ' ');
    let attempt = parts.next()?.parse().ok()?;
    let token = parts.next()?.parse().ok()?;
    let id = parts.next().filter(|id| !id.is_empty())?;
    Some((id, token, attempt))
}

/// What a listener does with what it hears on its channel.
trait Hearer: Send + Sync + 'static {
    /// Whether anybody still wants to hear (else the listener ends).
    fn alive(&self) -> bool;
    /// A notification's payload, or `None` when some may have been lost (the
    /// connection was re-established).
    fn heard(&self, payload: Option<&str>);
}

/// Parks: wake the poller, whatever the payload.
impl Hearer for Weak<Notify> {
    fn alive(&self) -> bool {
        self.strong_count() > 0
    }
    fn heard(&self, _: Option<&str>) {
        if let Some(n) = self.upgrade() {
            n.notify_one();
        }
    }
}

/// Stops: hand each to the runtime. A lost one is not recovered (see the
/// module's documentation).
struct Stops(Arc<dyn StopSink>);

impl Hearer for Stops {
    fn alive(&self) -> bool {
        self.0.alive()
    }
    fn heard(&self, payload: Option<&str>) {
        match payload.map(|p| (p, parse_stop(p))) {
            Some((_, Some((id, token, attempt)))) => self.0.stop(id, token, attempt),
            Some((p, None)) => tracing::warn!(payload = %p, "unreadable stop notification"),
            None => {}
        }
    }
}

/// A listener on its own one-connection pool (never one of the store's
/// connections), subscribed to `channel`.
async fn subscribe(pool: &PgPool, channel: &str) -> Result<(PgListener, PgPool), sqlx::Error> {
    let own = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with((*pool.connect_options()).clone())
        .await?;
    let mut listener = match PgListener::connect_with(&own).await {
        Ok(l) => l,
        Err(e) => {
            own.close().await;
            return Err(e);
        }
    };
    if let Err(e) = listener.listen(channel).await {
        drop(listener);
        own.close().await;
        return Err(e);
    }
    Ok((listener, own))
}

/// Subscribes to [`PARKS_CHANNEL`] (returns once LISTEN is in place, or the
/// error that prevented it), then wakes `notify` on every notification from
/// a background task until the pool closes or `notify` has no other owner.
pub async fn watch(pool: &PgPool, notify: Arc<Notify>) -> StoreResult<()> {
    let first = subscribe(pool, PARKS_CHANNEL).await?;
    let weak = Arc::downgrade(&notify);
    drop(notify);
    tokio::spawn(listen_loop(pool.clone(), PARKS_CHANNEL, weak, first));
    Ok(())
}

/// Subscribes to [`STOPS_CHANNEL`] (returns once LISTEN is in place), then
/// hands every stop to `sink` from a background task until the pool closes
/// or the sink is no longer alive.
pub async fn watch_stops(pool: &PgPool, sink: Arc<dyn StopSink>) -> StoreResult<()> {
    let first = subscribe(pool, STOPS_CHANNEL).await?;
    tokio::spawn(listen_loop(pool.clone(), STOPS_CHANNEL, Stops(sink), first));
    Ok(())
}

/// Why [`receive`] returned.
enum Stop {
    /// The store closed or the poller is gone: end the task.
    Done,
    /// The connection failed: reconnect after a backoff.
    Failed(sqlx::Error),
}

async fn listen_loop(
    pool: PgPool,
    channel: &'static str,
    hearer: impl Hearer,
    first: (PgListener, PgPool),
) {
    let mut current = Some(first);
    let mut backoff = BACKOFF_MIN;
    loop {
        let (mut listener, own) = match current.take() {
            Some(c) => c,
            None => match subscribe(&pool, channel).await {
                Ok(c) => {
                    // Whatever was sent while we were away is lost: look once.
                    if !hearer.alive() {
                        return;
                    }
                    hearer.heard(None);
                    c
                }
                Err(e) => {
                    tracing::warn!(error = %e, channel, backoff_ms = backoff.as_millis() as u64, "cannot LISTEN; retrying");
                    if wait_or_stop(&pool, &hearer, backoff).await {
                        return;
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            },
        };
        let stop = receive(&pool, &hearer, &mut listener, &mut backoff).await;
        drop(listener);
        own.close().await;
        match stop {
            Stop::Done => return,
            Stop::Failed(e) => {
                tracing::warn!(error = %e, channel, backoff_ms = backoff.as_millis() as u64, "listener failed; reconnecting");
                if wait_or_stop(&pool, &hearer, backoff).await {
                    return;
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// Forwards notifications to `hearer` until the listener fails or the task
/// should end. A successful receive resets `backoff`.
async fn receive(
    pool: &PgPool,
    hearer: &impl Hearer,
    listener: &mut PgListener,
    backoff: &mut Duration,
) -> Stop {
    let closed = pool.close_event();
    tokio::pin!(closed);
    let mut check = tokio::time::interval(OWNER_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut closed => return Stop::Done,
            _ = check.tick() => {
                if !hearer.alive() {
                    return Stop::Done;
                }
            }
            // `try_recv` is cancel-safe (it buffers until a whole message arrived).
            got = listener.try_recv() => match got {
                Ok(Some(n)) => {
                    *backoff = BACKOFF_MIN;
                    if !hearer.alive() {
                        return Stop::Done;
                    }
                    hearer.heard(Some(n.payload()));
                }
                // The connection dropped and was re-established: some may be lost.
                Ok(None) => {
                    if !hearer.alive() {
                        return Stop::Done;
                    }
                    hearer.heard(None);
                }
                Err(e) => return Stop::Failed(e),
            },
        }
    }
}

/// Sleeps `wait` unless the task should end first; true = end it.
async fn wait_or_stop(pool: &PgPool, hearer: &impl Hearer, wait: Duration) -> bool {
    if pool.is_closed() || !hearer.alive() {
        return true;
    }
    tokio::select! {
        _ = pool.close_event() => true,
        _ = tokio::time::sleep(wait) => pool.is_closed() || !hearer.alive(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewPark;

    fn park(seq: i64, due_at: Option<i64>) -> NewPark {
        NewPark {
            seq,
            kind: "timer".into(),
            due_at,
            message_name: None,
            correlation_key: None,
            claim: None,
        }
    }

    fn step(updated_at: i64, arm: Vec<NewPark>) -> StepWrite {
        StepWrite {
            updated_at,
            arm,
            ..StepWrite::default()
        }
    }

    #[test]
    fn only_parks_due_within_the_horizon_notify() {
        let s = step(
            10_000,
            vec![park(1, Some(10_000 + NOTIFY_HORIZON_MS + 1)), park(2, None)],
        );
        assert_eq!(
            due_soon([&s]),
            None,
            "a late park and a message wait send nothing"
        );
        let s = step(
            10_000,
            vec![
                park(1, Some(10_700)),
                park(2, Some(10_200)),
                park(3, Some(60_000)),
            ],
        );
        assert_eq!(due_soon([&s]), Some(10_200));
    }

    #[test]
    fn the_earliest_due_across_a_group_commit_is_sent() {
        let a = step(10_000, vec![park(1, Some(10_900))]);
        let b = step(20_000, vec![park(1, Some(10_500))]);
        let c = step(30_000, Vec::new());
        assert_eq!(due_soon([&a, &b, &c]), Some(10_500));
        // A park already overdue (due before its step) notifies too.
        assert_eq!(due_soon([&step(5_000, vec![park(1, Some(1))])]), Some(1));
    }

    #[test]
    fn a_stop_payload_names_instance_token_and_attempt() {
        assert_eq!(parse_stop("i-1 3 2"), Some(("i-1", 3, 2)));
        assert_eq!(parse_stop("an id 3 2"), Some(("an id", 3, 2)));
        for bad in ["", "i-1", "i-1 x 2", "3 2", " 3 2", "i-1 3 x", "i-1 -3 2"] {
            assert_eq!(parse_stop(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_pre_claimed_park_does_not_notify() {
        let claimed = NewPark {
            claim: Some(crate::store::ParkClaim {
                owner: "me".into(),
                until: 10_400,
            }),
            ..park(1, Some(10_100))
        };
        assert_eq!(due_soon([&step(10_000, vec![claimed.clone()])]), None);
        let s = step(10_000, vec![claimed, park(2, Some(10_300))]);
        assert_eq!(due_soon([&s]), Some(10_300), "the unclaimed one still does");
    }
}
