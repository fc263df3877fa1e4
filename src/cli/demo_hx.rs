//! The HX part of `sutra demo`: the payment workflow (`examples/payment.hx.xml`)
//! — reserve, capture, ship — run twice: once all goes well, once the courier
//! never answers and the workflow unwinds in reverse completion order (the
//! capture refunded, then the funds released). Every task is played by the
//! `chaos` guest, registered under each `impl` name.
//!
//! [`payment`] returns the text to print, so `demo.rs` decides where it goes
//! (and tests read it). The runtime must have the audit journal on
//! (`sutra.audit.sql`), which the demo's runtime has.

use crate::runtime::{Runtime, StartRequest};
use crate::store::Store;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The HX payment workflow.
pub const PAYMENT_FLOW: &str = include_str!("../../examples/payment.hx.xml");

/// The module names the payment workflow calls (each played by `chaos`).
pub const PAYMENT_TASKS: [&str; 5] = [
    "pay.reserve",
    "pay.capture",
    "ship.book",
    "pay.refund",
    "pay.release",
];

struct Payment {
    title: &'static str,
    variables: Value,
}

fn payments() -> Vec<Payment> {
    let common = json!({
        "reserve": {"do": "emit", "output": {"reservation": "R-7"}},
        "capture": {"do": "emit", "output": {"capture": "CAP-9", "amount": 129.0}},
        "refund": {"do": "emit", "output": {"refunded": 129.0}},
        "release": {"do": "emit", "output": {"released": "R-7"}},
    });
    let with = |ship: Value| {
        let mut by_task = common.clone();
        by_task["ship"] = ship;
        json!({ "order": "#2001", "do": "echo", "by-task": by_task })
    };
    vec![
        Payment {
            title: "#2001: the courier answers",
            variables: with(json!({"do": "emit", "output": {"tracking": "TRK-42"}})),
        },
        Payment {
            title: "#2002: the courier never answers (retries spent) -> unwind",
            variables: with(json!({"do": "fail", "code": "NO_COURIER", "class": "transient"})),
        },
    ]
}

/// `+1m02.000s` relative to the payment's start.
fn offset(ms: i64) -> String {
    let (m, rest) = (ms / 60_000, ms % 60_000);
    let s = rest as f64 / 1000.0;
    if m > 0 {
        format!("+{m}m{s:06.3}s")
    } else {
        format!("+{s:.3}s")
    }
}

/// One readable line per journal entry worth a person's attention.
fn describe(kind: &str, node: &str, data: &Value) -> Option<String> {
    let code = data["code"].as_str().unwrap_or("");
    Some(match kind {
        "instance_started" => "payment started".into(),
        "attempt_ended" => match data["outcome"].as_str() {
            Some("completed") => format!("{node}: attempt {} succeeded", data["attempt"]),
            _ => format!("{node}: attempt {} failed with {code}", data["attempt"]),
        },
        "retry_scheduled" => format!(
            "{node}: retry {} parked for {:.3} s (full jitter: a durable row, nothing sleeps)",
            data["next_attempt"],
            data["delay_ms"].as_u64().unwrap_or(0) as f64 / 1000.0
        ),
        "unwind_started" => format!(
            "{node} FAILED for good: unwinding, newest first: {}",
            data["compensate"]
                .as_array()
                .map(|a| a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        ),
        "compensation_started" => format!(
            "{node}: compensating {}",
            data["compensates"].as_str().unwrap_or("")
        ),
        "compensated" => format!("{node}: COMPENSATED"),
        "compensation_failed" => format!("{node}: compensation FAILED ({code})"),
        "error_handled" => format!("{node}: failed with {code}, handled by its error edge"),
        "node_skipped" => format!("{node}: skipped (a branch not taken)"),
        "instance_completed" => "payment COMPLETED".into(),
        "instance_compensated" => "payment COMPENSATED (every step undone)".into(),
        "instance_failed" => format!("payment FAILED: {}", data["error"]["code"]),
        _ => return None,
    })
}

/// Deploy the payment workflow for `tenant` (with `chaos` as every module),
/// run both payments to the end and return what happened, step by step.
pub async fn payment<S: Store>(
    runtime: &Runtime<S>,
    tenant: &str,
    chaos: &[u8],
) -> Result<(String, Vec<super::demo::Row>), String> {
    let modules: BTreeMap<String, Vec<u8>> = PAYMENT_TASKS
        .iter()
        .map(|t| (t.to_string(), chaos.to_vec()))
        .collect();
    runtime
        .deploy(tenant, PAYMENT_FLOW, &modules)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "The HX payment workflow (examples/payment.hx.xml)\n\
         ================================================\n\n\
         reserve -> capture -> ship; refund compensates capture, release compensates reserve.\n"
    );
    let mut rows = Vec::new();
    for p in payments() {
        let started = runtime.clock().now();
        let id = runtime
            .start(StartRequest {
                tenant: tenant.into(),
                process_id: "payment".into(),
                variables: p.variables.as_object().cloned().unwrap_or_default(),
                ..StartRequest::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let _ = writeln!(out, "Payment {}  (instance {id})", p.title);
        runtime.settle(&id).await.map_err(|e| e.to_string())?;
        let history = runtime.history(&id).await.map_err(|e| e.to_string())?;
        let mut last_node = String::new();
        for entry in &history.entries {
            let at = entry["at"]
                .as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                .map(|t| (t.with_timezone(&chrono::Utc) - started).num_milliseconds())
                .unwrap_or(0);
            let node = entry["node"].as_str().unwrap_or("");
            let kind = entry["kind"].as_str().unwrap_or("");
            if let Some(line) = describe(kind, node, &entry["data"]) {
                let _ = writeln!(out, "  {:>12}  {line}", offset(at));
                if !node.is_empty() {
                    last_node = node.to_string();
                }
            }
        }
        let view = runtime.inspect(&id).await.map_err(|e| e.to_string())?;
        let order = ["reserve", "capture", "ship", "refund", "release"];
        let states: Vec<String> = order
            .iter()
            .filter_map(|n| view.nodes.get(*n).map(|s| format!("{n}={s}")))
            .collect();
        let _ = writeln!(out, "  state {}  nodes {}\n", view.state, states.join(" "));
        rows.push(super::demo::Row {
            label: p.title.split(':').next().unwrap_or("").to_string(),
            instance: id,
            state: view.state.clone(),
            ended_at: last_node,
            attempts: view.attempts.len(),
            took: view
                .ended_at
                .map(|e| offset((e - started).num_milliseconds()))
                .unwrap_or_else(|| "-".into()),
        });
    }
    Ok((out, rows))
}
