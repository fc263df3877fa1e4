//! The Clock: system time in production, virtual time in tests and `--virtual-clock`.
//!
//! Invariant: every layer reads "now" through a [`Clock`]; a [`VirtualClock`]
//! never runs backwards and never panics, whatever it is told.
use super::IsoDuration;
use chrono::{DateTime, Utc};
use std::sync::{Mutex, MutexGuard};

pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;

    /// Whether this clock moves with real time (so a wall-clock alarm can
    /// stand for one of its instants). Only the system clock does.
    fn is_wall_clock(&self) -> bool {
        false
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn is_wall_clock(&self) -> bool {
        true
    }
}

/// A clock that only moves when told to.
///
/// Ordering: the time is one value behind a mutex, so all moves are totally
/// ordered and the clock is monotonic — a `now()` that returns after
/// `advance_to(t)` returned sees at least `t`, and two `now()` calls in sequence
/// (from any threads) never see time go backwards. `advance(d)` reads and moves
/// in one step, so concurrent advances add up. Moving the clock does not wake
/// anything: whoever waits on time (the timer poller) must be told to look again.
#[derive(Debug)]
pub struct VirtualClock {
    now: Mutex<DateTime<Utc>>,
}

impl VirtualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        VirtualClock {
            now: Mutex::new(start),
        }
    }

    fn lock(&self) -> MutexGuard<'_, DateTime<Utc>> {
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Move to `t` if it is later than now (time never runs backwards).
    pub fn advance_to(&self, t: DateTime<Utc>) {
        let mut now = self.lock();
        if t > *now {
            *now = t;
        }
    }

    /// Move forward by `d`, saturating at the far future.
    pub fn advance(&self, d: std::time::Duration) {
        let mut now = self.lock();
        *now = IsoDuration(d).after(*now);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_767_225_600, 0).unwrap()
    }

    #[test]
    fn virtual_time_only_moves_forward() {
        let c = VirtualClock::new(t0());
        assert_eq!(c.now(), t0());
        c.advance(Duration::from_secs(90));
        assert_eq!(c.now(), DateTime::from_timestamp(1_767_225_690, 0).unwrap());
        c.advance_to(t0());
        assert_eq!(
            c.now(),
            DateTime::from_timestamp(1_767_225_690, 0).unwrap(),
            "no going back"
        );
        c.advance(Duration::MAX);
        assert_eq!(c.now(), DateTime::<Utc>::MAX_UTC, "saturates, no panic");
        c.advance(Duration::from_secs(1));
        assert_eq!(c.now(), DateTime::<Utc>::MAX_UTC);
    }

    #[test]
    fn concurrent_advances_add_up() {
        let c = Arc::new(VirtualClock::new(t0()));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        c.advance(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(c.now(), t0() + chrono::Duration::seconds(4));
    }
}
