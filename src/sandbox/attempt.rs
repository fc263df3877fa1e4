//! One attempt: a fresh store with the attempt's limits, instantiate, call
//! `run`, classify.
//!
//! Invariant: the store is created here and dropped here (or, for an attempt
//! allowed to [`Reuse`] whose call returned, handed to the warm pool, see
//! `reuse.rs`); the attempt holds a
//! pool slot (semaphore permit) for its whole life; the wall-clock deadline
//! covers instantiation and the call, and is enforced twice: by the epoch
//! callback (a spinning guest traps with `Interrupt`) and by a tokio timeout
//! (a guest blocked in a host call is dropped). Both report DEADLINE_EXCEEDED.

use super::host::{HostState, LogCapture, TailCapture, TaskError, WitContext};
use super::lanes::Lane;
use super::limits::{Limits, MemoryLimiter};
use super::outcome::{self, AttemptReport, Flags, GuestError, Outcome};
use super::reuse::{Reuse, Warm};
use super::{Inner, LoadedComponent, Stop, TaskContext};
use crate::codes::Code;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wasmtime::{CallHook, Store, Trap, UpdateDeadline};

#[allow(clippy::too_many_arguments)]
pub(super) async fn run(
    inner: &Inner,
    component: &LoadedComponent,
    ctx: &TaskContext,
    input: &str,
    limits: &Limits,
    stop: &Stop,
    egress: Option<Arc<crate::egress::Session>>,
    reuse: Option<Reuse>,
) -> AttemptReport {
    let tenant: Arc<str> = Arc::from(ctx.tenant.as_str());
    // A slot of the pool, then a lane, each fairly across tenants (lanes.rs).
    let _slot = tokio::select! {
        held = inner.slots.acquire(&tenant) => held,
        _ = stop.stopped() => return report(interrupted(), Instant::now()),
    };
    let lane = tokio::select! {
        lane = Lane::acquire(&inner.lanes, &tenant) => lane,
        _ = stop.stopped() => return report(interrupted(), Instant::now()),
    };
    let started = Instant::now();
    if let (Some(session), Some(at)) = (&egress, started.checked_add(limits.deadline)) {
        session.set_deadline(at);
    }
    let calls = egress.as_ref().map(|s| s.log().clone());
    // An attempt with an egress session never reuses: its wasi:http
    // resources belong to that session.
    let reuse = reuse.filter(|_| egress.is_none());
    let logs = Arc::new(Mutex::new(LogCapture::new(limits.capture_bytes)));
    let ready = component.ready();
    let warm = reuse.and_then(|_| {
        inner
            .warm
            .checkout(&tenant, component.digest(), &ready, limits.memory_bytes)
    });
    let (mut store, task, uses, stderr) = match warm {
        Some(mut w) => {
            let stderr =
                w.store
                    .data_mut()
                    .renew(limits.memory_bytes, limits.capture_bytes, logs.clone());
            (w.store, Some(w.task), w.uses, stderr)
        }
        None => {
            let stderr = TailCapture::new(limits.capture_bytes);
            let limiter = MemoryLimiter::new(limits.memory_bytes, inner.cfg.max_table_elements);
            let store = Store::new(
                ready.pre.engine(),
                HostState::new(limiter, stderr.clone(), logs.clone(), egress),
            );
            (store, None, 0, stderr)
        }
    };
    store.limiter(|s| &mut s.limiter);
    // The lane is free while the guest is in a host call (a sleep, a poll).
    let hooked = lane.clone();
    store.call_hook(move |_, hook| {
        match hook {
            CallHook::CallingHost => hooked.leave(),
            CallHook::ReturningFromHost => hooked.back(),
            CallHook::CallingWasm | CallHook::ReturningFromWasm => {}
        }
        Ok(())
    });
    // What the guest may hand the host in one call (its output included):
    // as much as its memory may hold, so an output over the output cap is
    // lifted and refused as OUTPUT_INVALID rather than failing the lift
    // (wasmtime's own default, 128 MiB, would fail a larger one as a trap).
    store.set_hostcall_fuel(hostcall_fuel(limits));
    if let Err(e) = store.set_fuel(limits.fuel) {
        return report(
            Outcome::failed(Code::TaskTrap, format!("cannot set fuel: {e}")),
            started,
        );
    }
    let deadline_hit = Arc::new(AtomicBool::new(false));
    let deadline_at = started.checked_add(limits.deadline);
    let flag = deadline_hit.clone();
    let stop_flag = stop.clone();
    let quantum = lane.clone();
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| match deadline_at {
        _ if stop_flag.is_stopped() => Err(Trap::Interrupt.into()),
        Some(at) if Instant::now() >= at => {
            flag.store(true, Ordering::Relaxed);
            Err(Trap::Interrupt.into())
        }
        // Others wait for a lane: give this one up and queue behind them.
        _ if quantum.should_yield() => Ok(UpdateDeadline::YieldCustom(
            1,
            Box::pin(quantum.clone().requeue()),
        )),
        _ => Ok(UpdateDeadline::Yield(1)),
    });

    let wit_ctx = WitContext {
        tenant: ctx.tenant.clone(),
        instance_id: ctx.instance_id.clone(),
        task_id: ctx.task_id.clone(),
        attempt: ctx.attempt,
        idempotency_key: ctx.idempotency_key.clone(),
    };
    let call = async {
        let task = match task {
            Some(t) => t,
            None => ready.pre.instantiate_async(&mut store).await?,
        };
        let returned = task.call_run(&mut store, &wit_ctx, input).await?;
        wasmtime::Result::Ok((task, returned))
    };
    // A stop drops the call at once when the guest is blocked in a host
    // call; a spinning one traps at its next epoch check (above).
    let result = tokio::select! {
        r = tokio::time::timeout(limits.deadline, call) => Some(r),
        _ = stop.stopped() => None,
    };

    let flags = Flags {
        memory_hit: store.data().limiter.hit(),
        deadline_hit: deadline_hit.load(Ordering::Relaxed),
    };
    let fuel_used = store
        .get_fuel()
        .map(|left| limits.fuel.saturating_sub(left))
        .unwrap_or(0);
    // Only a call that returned leaves an instance fit for another attempt.
    let (task, result) = match result {
        Some(Ok(Ok((task, returned)))) => (Some(task), Some(Ok(Ok(returned)))),
        Some(Ok(Err(e))) => (None, Some(Ok(Err(e)))),
        Some(Err(elapsed)) => (None, Some(Err(elapsed))),
        None => (None, None),
    };
    match (reuse, task) {
        (Some(policy), Some(task))
            if !stop.is_stopped()
                && !flags.memory_hit
                && !flags.deadline_hit
                && uses.saturating_add(1) <= policy.max_reuses
                && store.data().limiter.held() <= policy.memory_ceiling_bytes =>
        {
            // Nothing of this attempt stays reachable from the idle store.
            store.call_hook(|_, _| Ok(()));
            store.epoch_deadline_callback(|_| Err(Trap::Interrupt.into()));
            let warm = Warm {
                store,
                task,
                ready,
                uses: uses.saturating_add(1),
            };
            inner.warm.checkin(&tenant, component.digest(), warm);
        }
        _ => drop(store),
    }
    drop(lane);
    let stderr_text = stderr.text();
    let outcome = match result {
        _ if stop.is_stopped() => interrupted(),
        None => interrupted(),
        Some(Err(_elapsed)) => outcome::deadline_exceeded(),
        Some(Ok(Err(e))) => outcome::classify_error(&e, flags, &stderr_text),
        Some(Ok(Ok(returned))) => {
            outcome::classify_return(returned.map_err(guest_error), limits.output_bytes)
        }
    };
    let calls = calls.map(|c| (c.denied(), c.snapshot()));
    let outcome = match (outcome, &calls) {
        (
            Outcome::Failed {
                code,
                message,
                details,
                ..
            },
            Some((true, _)),
        ) => egress_denied(code, message, details),
        (other, _) => other,
    };
    AttemptReport {
        outcome,
        stderr: stderr_text,
        logs: logs.lock().map(|mut l| l.take()).unwrap_or_default(),
        fuel_used,
        elapsed: started.elapsed(),
        calls: calls.map(|(_, r)| r).unwrap_or_default(),
    }
}

/// An attempt that failed after its egress policy denied one of its
/// requests fails with `SUTRA.TASK.EGRESS_DENIED` (class `invalid_input`,
/// not retried: the same request meets the same policy); what the guest
/// said is kept in the details.
fn egress_denied(code: String, message: String, details: Option<serde_json::Value>) -> Outcome {
    let mut out = Outcome::failed(
        Code::TaskEgressDenied,
        format!("an outbound request was denied by the egress policy (see the attempt's calls); the attempt then failed: {code}: {message}"),
    );
    if let Outcome::Failed { details: d, .. } = &mut out {
        *d = Some(serde_json::json!({ "guest_code": code, "guest_details": details }));
    }
    out
}

/// The hostcall fuel of an attempt: its memory cap, and at least enough for
/// an output at its cap with a message and details as large (a string can
/// never be larger than the memory that holds it, so the memory cap bounds
/// what the host copies on the guest's behalf in one call).
pub(super) fn hostcall_fuel(limits: &Limits) -> usize {
    let memory = usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX);
    memory.max(limits.output_bytes.saturating_mul(3))
}

fn guest_error(e: TaskError) -> GuestError {
    match e {
        TaskError::Business(i) => GuestError::Business {
            code: i.code,
            message: i.message,
            details: i.details,
        },
        TaskError::Failure(i) => GuestError::Failure {
            code: i.code,
            message: i.message,
            details: i.details,
        },
    }
}

fn interrupted() -> Outcome {
    Outcome::failed(
        Code::TaskInterrupted,
        "the attempt was stopped: its result is no longer wanted (its instance was cancelled)",
    )
}

fn report(outcome: Outcome, started: Instant) -> AttemptReport {
    AttemptReport {
        outcome,
        stderr: String::new(),
        logs: Vec::new(),
        fuel_used: 0,
        elapsed: started.elapsed(),
        calls: Default::default(),
    }
}

/// Whose slots warm-ups take (capped like a tenant's; never a tenant name,
/// which are visible ASCII).
const WARM_TENANT: &str = "\u{0}warm";

/// Fuel a warm-up instantiation may burn (a start function, if any).
const WARM_FUEL: u64 = 1_000_000;

/// Instantiate `component` in a throwaway store and drop it, never calling
/// it: caches, TLB and the pool slot are warm for an attempt due shortly
/// (a retry after a short backoff ran ~3× slower cold). Skipped when no
/// slot is free; bounded by fuel and by the next epoch tick.
pub(super) async fn warm(inner: &Inner, component: &LoadedComponent) {
    let Some(_slot) = inner.slots.try_acquire(&Arc::from(WARM_TENANT)) else {
        return;
    };
    let limiter = MemoryLimiter::new(Limits::default().memory_bytes, inner.cfg.max_table_elements);
    let logs = Arc::new(Mutex::new(LogCapture::new(0)));
    let ready = component.ready();
    let mut store = Store::new(
        ready.pre.engine(),
        HostState::new(limiter, TailCapture::new(0), logs, None),
    );
    store.limiter(|s| &mut s.limiter);
    if store.set_fuel(WARM_FUEL).is_err() {
        return;
    }
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|_| Err(Trap::Interrupt.into()));
    let _ = ready.pre.instantiate_async(&mut store).await;
}
