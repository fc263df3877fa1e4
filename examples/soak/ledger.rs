//! The counterpart's ledger: an independent witness of what the server's
//! HTTP tasks did, recorded on the far side of the wire rather than read
//! back from the server.
//!
//! - `POST /ledger/{handler}` is called by the BPMN compensation handlers
//!   (`soak-bpmn-comp`) with `{"n"}`: the ledger keeps, per instance, each
//!   handler's calls in arrival order with their `Idempotency-Key`.
//! - `POST /attempts` is called by the States-language HTTP task
//!   (`soak-ledger`) with `{"n", "until", "retry"}` (`retry` is
//!   `$$.State.RetryCount`): it answers 503 until attempt `until`, and keeps
//!   every attempt number it saw.
//!
//! Invariant: a call is recorded before it is answered, so a call the
//! server made is in the ledger even when a kill swallowed its answer (the
//! server then makes it again: at least once, and the check allows that;
//! what it never allows is a handler that ran under two keys, a handler
//! that should not have run, or an attempt number beyond the policy).

use crate::check::{Record, Tally};
use crate::flows::{self, Kind};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct Ledger {
    /// Per instance `n`: (handler, idempotency key), in arrival order.
    pub compensations: BTreeMap<u64, Vec<(String, String)>>,
    /// Per instance `n`: every attempt number seen (1-based), in order.
    pub attempts: BTreeMap<u64, Vec<u64>>,
}

pub type Shared = Arc<Mutex<Ledger>>;

async fn handler_call(
    State(ledger): State<Shared>,
    Path(handler): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let n = body["n"].as_u64().unwrap_or(0);
    ledger
        .lock()
        .unwrap()
        .compensations
        .entry(n)
        .or_default()
        .push((handler, key));
    Json(json!({"undone": true}))
}

async fn attempt_call(
    State(ledger): State<Shared>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let n = body["n"].as_u64().unwrap_or(0);
    let until = body["until"].as_u64().unwrap_or(1);
    let attempt = body["retry"].as_u64().unwrap_or(0) + 1;
    ledger
        .lock()
        .unwrap()
        .attempts
        .entry(n)
        .or_default()
        .push(attempt);
    if attempt < until {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"busy": true})))
    } else {
        (StatusCode::OK, Json(json!({"attempt": attempt})))
    }
}

/// The ledger's routes, merged into the counterpart's server.
pub fn routes(ledger: Shared) -> Router {
    Router::new()
        .route("/ledger/{handler}", post(handler_call))
        .route("/attempts", post(attempt_call))
        .with_state(ledger)
}

/// What the ledger saw of one terminal instance, against what its input decides.
pub fn check(r: &Record, ledger: &Ledger, tally: &mut Tally) {
    let id = r.id.as_deref().unwrap_or("?");
    let who = format!("{} #{} ({id})", r.kind.name(), r.n);
    match r.kind {
        Kind::BpmnCompensation => {
            let calls = ledger.compensations.get(&r.n).cloned().unwrap_or_default();
            tally.ledger_calls += calls.len() as u64;
            if !flows::compensates(&r.input) {
                if !calls.is_empty() {
                    tally.violations.push(format!(
                        "{who}: nothing to compensate, yet the ledger saw {calls:?}"
                    ));
                }
                return;
            }
            for handler in ["refund", "unbook"] {
                let keys: BTreeSet<&String> = calls
                    .iter()
                    .filter(|(h, _)| h == handler)
                    .map(|(_, k)| k)
                    .collect();
                if keys.len() != 1 {
                    tally.violations.push(format!(
                        "{who}: the ledger saw {handler} under {} keys ({keys:?}), expected 1",
                        keys.len()
                    ));
                }
            }
            // Reverse completion order: charge (refund) before book (unbook).
            let first = |h: &str| calls.iter().position(|(c, _)| c == h);
            if let (Some(refund), Some(unbook)) = (first("refund"), first("unbook")) {
                if unbook < refund {
                    tally.violations.push(format!(
                        "{who}: the ledger saw unbook before refund: {calls:?}"
                    ));
                }
            }
        }
        Kind::Ledger => {
            let seen = ledger.attempts.get(&r.n).cloned().unwrap_or_default();
            tally.ledger_calls += seen.len() as u64;
            let until = r.input["until"].as_u64().unwrap_or(1);
            let distinct: BTreeSet<u64> = seen.iter().copied().collect();
            let want: BTreeSet<u64> = (1..=until).collect();
            if distinct != want {
                tally.violations.push(format!(
                    "{who}: the counterpart saw attempts {seen:?}, expected each of 1..={until}"
                ));
            }
            tally.ledger_repeats += (seen.len() - distinct.len()) as u64;
        }
        _ => {}
    }
}
