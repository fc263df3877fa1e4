//! Alarms: in-process wake-ups at an exact instant, for the short waits a
//! runtime armed itself (a retry backoff, a timer due soon).
//!
//! A wait is still a park row, written before any alarm is set and written
//! *claimed* by this runtime until shortly after its due time
//! (`NewPark::claim`), so no poller takes it while the alarm is pending. The
//! alarm only makes firing prompt and saves the claim transaction; if this
//! process dies, the claim lapses and any replica's poller fires the park.
//!
//! Invariants:
//! - one thread (`sutra-alarms`) sleeps until the earliest alarm with a 1 ns
//!   timer slack (tokio's timer wheel has a 1 ms tick). Waking a halted vCPU
//!   and then a parked tokio worker costs ~0.1 ms each here, so while few
//!   alarms are pending the job is called [`LEAD`] early with its instant,
//!   and the task it spawns spins (not yielding) until then: the work starts
//!   within microseconds of the instant. In a burst every job is called at
//!   its instant (spinning would take the cores the burst needs), and the
//!   thread's short scheduler slice ([`short_slice`]) lets it preempt the
//!   busy cores when it wakes;
//! - nothing fires before its instant: a job gets the instant and must not
//!   act before it;
//! - a job runs on the alarm thread and must only hand work off (spawn on a
//!   tokio handle): it never blocks;
//! - the thread ends when the [`Alarms`] handle is dropped; pending jobs are
//!   dropped unrun (their parks lapse to the pollers).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::mpsc;
use std::time::Instant;

/// Called with the alarm's instant (it may be up to [`LEAD`] earlier).
type Job = Box<dyn FnOnce(Instant) + Send>;

/// How early a job is called while few alarms are pending.
pub(crate) const LEAD: std::time::Duration = std::time::Duration::from_micros(300);

/// Called early only while at most this many alarms are pending.
const LEAD_MAX_PENDING: usize = 8;

struct Entry {
    when: Instant,
    seq: u64,
    job: Job,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.when, self.seq) == (other.when, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest must come first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.when, other.seq).cmp(&(self.when, self.seq))
    }
}

/// The handle of the alarm thread.
pub(crate) struct Alarms {
    tx: mpsc::Sender<(Instant, Job)>,
}

impl Alarms {
    /// Start the alarm thread.
    pub(crate) fn start() -> std::io::Result<Alarms> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("sutra-alarms".to_string())
            .spawn(move || run(rx))?;
        Ok(Alarms { tx })
    }

    /// Call `job(when)` at `when`, or up to [`LEAD`] before it (at once if
    /// it has passed). `false` if the thread is gone.
    pub(crate) fn at(&self, when: Instant, job: impl FnOnce(Instant) + Send + 'static) -> bool {
        self.tx.send((when, Box::new(job))).is_ok()
    }
}

fn run(rx: mpsc::Receiver<(Instant, Job)>) {
    // The default slack (50 µs) would make every alarm that late.
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
    short_slice();
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        let lead = |pending: usize| {
            if pending <= LEAD_MAX_PENDING {
                LEAD
            } else {
                std::time::Duration::ZERO
            }
        };
        while heap
            .peek()
            .is_some_and(|e: &Entry| e.when <= now + lead(heap.len()))
        {
            if let Some(e) = heap.pop() {
                (e.job)(e.when);
            }
        }
        let next = match heap.peek() {
            Some(e) => rx.recv_timeout(
                e.when
                    .checked_sub(lead(heap.len()))
                    .unwrap_or(e.when)
                    .saturating_duration_since(now),
            ),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((when, job)) => {
                seq += 1;
                heap.push(Entry { when, seq, job });
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Ask the scheduler for a short time slice (Linux 6.12+, EEVDF): a
/// thread with a short slice gets an early deadline when it wakes, so it
/// preempts a busy core at once instead of queueing behind the running
/// thread's slice (up to ~1.5 ms on 2 cores). Same nice value, same
/// policy, no privilege needed; this thread runs for microseconds per
/// wake, so it takes nothing from the others. Older kernels ignore the
/// slice; a refusal is ignored too.
fn short_slice() {
    #[cfg(target_os = "linux")]
    {
        let attr = libc::sched_attr {
            size: std::mem::size_of::<libc::sched_attr>() as u32,
            sched_policy: libc::SCHED_OTHER as u32,
            sched_flags: 0,
            sched_nice: 0,
            sched_priority: 0,
            sched_runtime: SLICE.as_nanos() as u64,
            sched_deadline: 0,
            sched_period: 0,
        };
        // SAFETY: sched_setattr(0, attr, 0) changes only this thread's
        // scheduling attributes; `attr` outlives the call.
        let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr, 0) };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "alarm thread keeps the default time slice");
        }
    }
}

/// The time slice the alarm thread asks for (the kernel's minimum is 0.1 ms).
#[cfg(target_os = "linux")]
const SLICE: std::time::Duration = std::time::Duration::from_micros(100);

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn alarms_run_in_order_and_never_early() {
        let alarms = Alarms::start().unwrap();
        let (tx, rx) = mpsc::channel();
        let base = Instant::now();
        for (i, ms) in [(0, 30u64), (1, 10), (2, 20), (3, 0)] {
            let tx = tx.clone();
            let when = base + Duration::from_millis(ms);
            assert!(alarms.at(when, move |not_before| {
                assert_eq!(not_before, when);
                while Instant::now() < not_before {
                    std::hint::spin_loop();
                }
                let _ = tx.send((i, when, Instant::now()));
            }));
        }
        let got: Vec<_> = (0..4)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            vec![3, 1, 2, 0]
        );
        for (_, when, ran) in got {
            assert!(ran >= when, "an alarm ran before its instant");
        }
    }

    #[test]
    fn dropping_the_handle_stops_the_thread_without_running_pending_jobs() {
        let alarms = Alarms::start().unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        alarms.at(Instant::now() + Duration::from_secs(3600), move |_| {
            let _ = tx.send(());
        });
        drop(alarms);
        // The job (and its sender) is dropped with the thread, never run.
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_err());
    }
}
