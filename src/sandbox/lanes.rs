//! Fair sharing of the sandbox between tenants.
//!
//! Two gates stand between an attempt and the CPU, both served round-robin
//! across tenants (each tenant's own waiters in arrival order):
//! - **slots** (`SandboxConfig::pool_size`): an instance of the pool, held
//!   for the attempt's whole life. One tenant may hold at most
//!   `tenant_slots` of them, so the others always find one free.
//! - **lanes** (`SandboxConfig::lanes`): the right to execute guest code. An
//!   attempt holds a lane while its guest runs and gives it back while the
//!   guest is blocked in a host call (a sleep, a read of a pollable), and at
//!   every epoch check (the scheduling quantum, `epoch_tick`) when another
//!   attempt waits for one: it then queues again behind the other tenants.
//!   A guest returning from a host call takes its lane back at once, even
//!   over the count, and settles at its next epoch check — so a lane is never
//!   held longer than one quantum while others wait.
//!
//! So with one tenant running fifty spinning guests, another tenant's attempt
//! finds a slot free and gets a lane within one quantum.
//!
//! Invariant: every grant is matched by exactly one release (the [`Held`]
//! guard and [`Lane`]'s state); a waiter dropped while queued (its attempt
//! stopped or abandoned) is skipped and its grant passed on.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A counted resource granted round-robin across tenants, with a per-tenant cap.
pub(crate) struct Gate {
    capacity: usize,
    per_tenant: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    in_use: usize,
    held: HashMap<Arc<str>, usize>,
    waiting: HashMap<Arc<str>, VecDeque<oneshot::Sender<()>>>,
    /// Tenants with waiters, in the order they are served.
    ring: VecDeque<Arc<str>>,
}

impl Gate {
    pub(crate) fn new(capacity: usize, per_tenant: usize) -> Arc<Gate> {
        let capacity = capacity.max(1);
        Arc::new(Gate {
            capacity,
            per_tenant: per_tenant.clamp(1, capacity),
            state: Mutex::new(State::default()),
        })
    }

    /// Units in use (tests, metrics).
    pub(crate) fn in_use(&self) -> usize {
        self.state.lock().map(|s| s.in_use).unwrap_or(0)
    }

    /// Whether anybody waits.
    pub(crate) fn contended(&self) -> bool {
        self.state
            .lock()
            .map(|s| !s.ring.is_empty())
            .unwrap_or(false)
    }

    /// Wait for a unit for `tenant`; it is given back when the guard drops.
    pub(crate) async fn acquire(self: &Arc<Gate>, tenant: &Arc<str>) -> Held {
        self.take(tenant).await;
        Held {
            gate: self.clone(),
            tenant: tenant.clone(),
        }
    }

    /// Wait for a unit (no guard: the caller calls [`Gate::release`]).
    async fn take(&self, tenant: &Arc<str>) {
        let rx = {
            let Ok(mut s) = self.state.lock() else {
                return;
            };
            let held = s.held.get(tenant).copied().unwrap_or(0);
            if s.ring.is_empty() && s.in_use < self.capacity && held < self.per_tenant {
                s.grant_to(tenant);
                return;
            }
            let (tx, rx) = oneshot::channel();
            s.waiting.entry(tenant.clone()).or_default().push_back(tx);
            if !s.ring.contains(tenant) {
                s.ring.push_back(tenant.clone());
            }
            // Units may be free for this tenant while the waiters before it
            // are over their caps.
            self.dispatch(&mut s);
            rx
        };
        let mut waiting = Waiting {
            gate: self,
            rx: Some(rx),
            tenant,
        };
        if let Some(rx) = waiting.rx.as_mut() {
            // An error means the gate is gone: nothing to wait for.
            let _ = rx.await;
        }
        waiting.rx = None;
    }

    /// A unit now if one is free for `tenant` and nobody waits, else `None`.
    pub(crate) fn try_acquire(self: &Arc<Gate>, tenant: &Arc<str>) -> Option<Held> {
        let mut s = self.state.lock().ok()?;
        let held = s.held.get(tenant).copied().unwrap_or(0);
        if s.ring.is_empty() && s.in_use < self.capacity && held < self.per_tenant {
            s.grant_to(tenant);
            return Some(Held {
                gate: self.clone(),
                tenant: tenant.clone(),
            });
        }
        None
    }

    /// Take a unit now, even over the capacity (a guest back from a host call).
    fn force(&self, tenant: &Arc<str>) {
        if let Ok(mut s) = self.state.lock() {
            s.grant_to(tenant);
        }
    }

    /// Give a unit back and hand free units to waiters.
    fn release(&self, tenant: &Arc<str>) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        s.in_use = s.in_use.saturating_sub(1);
        if let Some(h) = s.held.get_mut(tenant) {
            *h = h.saturating_sub(1);
            if *h == 0 {
                s.held.remove(tenant);
            }
        }
        self.dispatch(&mut s);
    }

    /// Serve waiters round-robin while units are free: each turn, the next
    /// tenant in the ring under its cap gets one unit for its oldest waiter.
    fn dispatch(&self, s: &mut State) {
        let mut skipped = 0;
        while s.in_use < self.capacity && skipped < s.ring.len() {
            let Some(tenant) = s.ring.pop_front() else {
                break;
            };
            let held = s.held.get(&tenant).copied().unwrap_or(0);
            if held >= self.per_tenant {
                s.ring.push_back(tenant);
                skipped += 1;
                continue;
            }
            let mut granted = false;
            if let Some(q) = s.waiting.get_mut(&tenant) {
                while let Some(tx) = q.pop_front() {
                    if tx.send(()).is_ok() {
                        granted = true;
                        break;
                    }
                }
            }
            if granted {
                s.grant_to(&tenant);
                skipped = 0;
            }
            if s.waiting.get(&tenant).is_some_and(|q| !q.is_empty()) {
                s.ring.push_back(tenant);
            } else {
                s.waiting.remove(&tenant);
            }
        }
    }
}

impl State {
    fn grant_to(&mut self, tenant: &Arc<str>) {
        self.in_use += 1;
        *self.held.entry(tenant.clone()).or_default() += 1;
    }
}

/// A waiter's queue entry; if its future is dropped after a grant was sent
/// but before it was seen, the unit is given back.
struct Waiting<'a> {
    gate: &'a Gate,
    rx: Option<oneshot::Receiver<()>>,
    tenant: &'a Arc<str>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.gate.release(self.tenant);
            }
        }
    }
}

/// One unit of a [`Gate`], given back on drop.
pub(crate) struct Held {
    gate: Arc<Gate>,
    tenant: Arc<str>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.gate.release(&self.tenant);
    }
}

/// An attempt's lane: held while its guest executes, given back while it is
/// in a host call or queued again after a quantum. Shared by the attempt,
/// its epoch callback and its call hook.
pub(crate) struct Lane {
    gate: Arc<Gate>,
    tenant: Arc<str>,
    holding: AtomicBool,
}

impl Lane {
    /// Wait for a lane.
    pub(crate) async fn acquire(gate: &Arc<Gate>, tenant: &Arc<str>) -> Arc<Lane> {
        gate.take(tenant).await;
        Arc::new(Lane {
            gate: gate.clone(),
            tenant: tenant.clone(),
            holding: AtomicBool::new(true),
        })
    }

    /// The guest calls the host: the lane is free meanwhile.
    pub(crate) fn leave(&self) {
        if self.holding.swap(false, Ordering::AcqRel) {
            self.gate.release(&self.tenant);
        }
    }

    /// The guest is back from the host: it runs on at once.
    pub(crate) fn back(&self) {
        if !self.holding.swap(true, Ordering::AcqRel) {
            self.gate.force(&self.tenant);
        }
    }

    /// At an epoch check: whether the guest should give its lane up now.
    pub(crate) fn should_yield(&self) -> bool {
        self.gate.contended()
    }

    /// Give the lane up and queue for it again (after the other tenants).
    pub(crate) async fn requeue(self: Arc<Lane>) {
        self.leave();
        self.gate.take(&self.tenant).await;
        self.holding.store(true, Ordering::Release);
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[tokio::test]
    async fn waiters_are_served_round_robin_across_tenants() {
        let gate = Gate::new(1, 1);
        let (a, b) = (t("a"), t("b"));
        let first = gate.acquire(&a).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Three waiters of `a` queue before one of `b`.
        for (tenant, n) in [(&a, 1), (&a, 2), (&a, 3), (&b, 1)] {
            let (gate, tenant, order) = (gate.clone(), tenant.clone(), order.clone());
            let label = format!("{tenant}{n}");
            tasks.push(tokio::spawn(async move {
                let _held = gate.acquire(&tenant).await;
                order.lock().unwrap().push(label);
            }));
            tokio::task::yield_now().await;
        }
        while gate
            .state
            .lock()
            .unwrap()
            .waiting
            .values()
            .map(VecDeque::len)
            .sum::<usize>()
            < 4
        {
            tokio::task::yield_now().await;
        }
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["a1", "b1", "a2", "a3"]);
        assert_eq!(gate.in_use(), 0);
    }

    #[tokio::test]
    async fn a_tenant_over_its_cap_waits_while_another_takes_a_free_unit() {
        let gate = Gate::new(4, 3);
        let (a, b) = (t("a"), t("b"));
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(gate.acquire(&a).await);
        }
        let fourth = tokio::spawn({
            let (gate, a) = (gate.clone(), a.clone());
            async move { gate.acquire(&a).await }
        });
        while !gate.contended() {
            tokio::task::yield_now().await;
        }
        // `a` is at its cap: the last free unit goes to `b` at once.
        let b_unit = gate.acquire(&b).await;
        assert_eq!(gate.in_use(), 4);
        drop(held.pop());
        let a_unit = fourth.await.unwrap();
        assert_eq!(gate.in_use(), 4);
        drop((b_unit, a_unit, held));
        assert_eq!(gate.in_use(), 0);
    }

    #[tokio::test]
    async fn a_lane_is_free_while_its_guest_is_in_the_host_and_a_dropped_waiter_passes_its_grant_on(
    ) {
        let gate = Gate::new(1, 1);
        let (a, b) = (t("a"), t("b"));
        let lane = Lane::acquire(&gate, &a).await;
        lane.leave();
        let other = Lane::acquire(&gate, &b).await;
        assert_eq!(gate.in_use(), 1);
        // Back from the host: over the count until the next epoch check.
        lane.back();
        assert_eq!(gate.in_use(), 2);
        // A waiter given up while queued does not keep a unit.
        let waiter = tokio::spawn({
            let (gate, a) = (gate.clone(), a.clone());
            async move { Lane::acquire(&gate, &a).await }
        });
        while !gate.contended() {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        drop(other);
        drop(lane);
        assert_eq!(gate.in_use(), 0);
        assert!(!gate.contended());
    }
}
