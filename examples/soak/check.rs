//! The end-of-soak check: every instance the harness started is compared
//! with what its input decides, and the tenant's instance list with the
//! harness's records.
//!
//! Invariant: a violation is a sentence naming the instance and what is
//! wrong; the check never stops at the first one.

use crate::flows::{Expected, Kind};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// One instance the harness started.
#[derive(Debug, Clone)]
pub struct Record {
    pub n: u64,
    pub kind: Kind,
    pub key: String,
    pub input: Value,
    pub expected: Expected,
    /// Set by the first answer to its start.
    pub id: Option<String>,
    /// Its last view, once terminal.
    pub last: Option<Value>,
}

pub fn is_terminal(state: &str) -> bool {
    matches!(state, "COMPLETED" | "FAILED" | "TERMINATED" | "COMPENSATED")
}

/// What the check counted.
#[derive(Debug, Default)]
pub struct Tally {
    pub by_kind: BTreeMap<(Kind, String), u64>,
    pub attempts: u64,
    pub compensators: u64,
    /// Journal entries read (compensation instances).
    pub journal_entries: u64,
    pub channel_calls: u64,
    /// Calls the counterpart's ledger recorded (`ledger.rs`), and attempts
    /// it saw more than once (re-run after a kill: allowed).
    pub ledger_calls: u64,
    pub ledger_repeats: u64,
    /// Signal deliveries checked in the journal (one per signal instance).
    pub signals_received: u64,
    /// Children of call activities (each one, COMPLETED).
    pub children: u64,
    pub violations: Vec<String>,
}

/// The expected attempts as a multiset of (task, number).
fn expected_attempts(e: &Expected) -> BTreeMap<(String, i64), u32> {
    let mut m = BTreeMap::new();
    for (task, n) in &e.attempts {
        for a in 1..=*n {
            *m.entry((task.to_string(), i64::from(a))).or_default() += 1;
        }
    }
    m
}

/// Checks one terminal view against its record.
pub fn check_instance(r: &Record, view: &Value, delivered: bool, tally: &mut Tally) {
    let id = r.id.as_deref().unwrap_or("?");
    let who = format!("{} #{} ({id})", r.kind.name(), r.n);
    let v = &mut tally.violations;
    let state = view["state"].as_str().unwrap_or("?").to_string();
    *tally.by_kind.entry((r.kind, state.clone())).or_default() += 1;
    if state != r.expected.state {
        v.push(format!(
            "{who}: ended {state}, its input decides {}; input {}, error {}",
            r.expected.state, r.input, view["error"]
        ));
    }
    if let Some(code) = r.expected.error {
        if view["error"]["code"] != code {
            v.push(format!("{who}: error {} (expected {code})", view["error"]));
        }
    }
    // Attempts: each number once, none beyond the policy, none missing.
    let mut actual: BTreeMap<(String, i64), u32> = BTreeMap::new();
    for a in view["attempts"].as_array().into_iter().flatten() {
        let task = a["task"].as_str().unwrap_or("?").to_string();
        let n = a["attempt"].as_i64().unwrap_or(0);
        *actual.entry((task, n)).or_default() += 1;
        tally.attempts += 1;
    }
    let expected = expected_attempts(&r.expected);
    if actual != expected {
        let mut diffs = Vec::new();
        let keys: BTreeSet<_> = actual.keys().chain(expected.keys()).collect();
        for k in keys {
            let (got, want) = (
                actual.get(k).copied().unwrap_or(0),
                expected.get(k).copied().unwrap_or(0),
            );
            if got != want {
                let what = match (got, want) {
                    (_, 0) => "beyond its policy / never expected",
                    (g, w) if g > w => "recorded twice",
                    _ => "missing",
                };
                diffs.push(format!(
                    "{} attempt {}: {got} (want {want}, {what})",
                    k.0, k.1
                ));
            }
        }
        v.push(format!("{who}: attempts wrong: {}", diffs.join("; ")));
    }
    if r.kind == Kind::Compensation {
        tally.compensators += ["refund", "release"]
            .iter()
            .map(|t| actual.get(&(t.to_string(), 1)).copied().unwrap_or(0) as u64)
            .sum::<u64>();
    }
    for (pointer, want) in &r.expected.variables {
        let got = view["variables"].pointer(pointer);
        if got != Some(want) {
            v.push(format!(
                "{who}: variables{pointer} = {got:?}, expected {want}"
            ));
        }
    }
    if r.kind == Kind::Channel {
        tally.channel_calls += 1;
        if !delivered {
            v.push(format!(
                "{who}: its channel request never reached the counterpart"
            ));
        }
    }
}

/// The journal of a compensation instance: each compensator started once
/// and each compensated node journaled once when it unwound, never otherwise.
pub fn check_compensation_journal(r: &Record, history: &Value, tally: &mut Tally) {
    let id = r.id.as_deref().unwrap_or("?");
    let entries = history["entries"].as_array().cloned().unwrap_or_default();
    tally.journal_entries += entries.len() as u64;
    let count = |kind: &str, node: &str| {
        entries
            .iter()
            .filter(|e| e["kind"] == kind && e["node"] == node)
            .count()
    };
    let unwound = r.expected.state == "COMPENSATED";
    let want = usize::from(unwound);
    for (kind, node) in [
        ("compensation_started", "refund"),
        ("compensation_started", "release"),
        ("compensated", "capture"),
        ("compensated", "reserve"),
    ] {
        let got = count(kind, node);
        if got != want {
            tally.violations.push(format!(
                "compensation #{} ({id}): journal has {got} `{kind}` of {node}, expected {want}",
                r.n
            ));
        }
    }
}

/// The journal of a signal instance: its catch received the broadcast
/// exactly once, however many kills fell around the fan-out.
pub fn check_signal_journal(r: &Record, history: &Value, tally: &mut Tally) {
    let id = r.id.as_deref().unwrap_or("?");
    let got = history["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == "signal_received" && e["node"] == "wait")
        .count();
    tally.signals_received += got as u64;
    if got != 1 {
        tally.violations.push(format!(
            "signal #{} ({id}): journal has {got} `signal_received` at wait, expected 1",
            r.n
        ));
    }
}
