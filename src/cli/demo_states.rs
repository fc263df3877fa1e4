//! The States-language part of `sutra demo`: the order-lines flow
//! (`examples/order-lines.asl.json`: a Map over the order's lines with a retry
//! and a Catch per line, a two-hour Wait, a card charge with a Catch) run for
//! two orders on the runtime the demo set up, each printed step by step.
//!
//! The demo calls [`run`] with its runtime (virtual clock, audit journal on)
//! and the `chaos` guest; it returns the summary rows it printed.

use crate::runtime::{Runtime, StartRequest};
use crate::store::Store;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The flow's definition.
pub const ORDER_LINES: &str = include_str!("../../examples/order-lines.asl.json");
/// Its process id (the definition's `Name`).
pub const PROCESS: &str = "order-lines";

/// One demo order: what it shows, and its input.
pub struct Order {
    pub title: &'static str,
    pub input: Value,
}

/// The orders the demo runs.
pub fn orders() -> Vec<Order> {
    let line = |sku: &str, warehouse: Value| json!({ "sku": sku, "warehouse": warehouse });
    vec![
        Order {
            title: "#3001 three lines: one in stock, one at a busy warehouse, one out of stock",
            input: json!({
                "order": 3001,
                "lines": [
                    line("TEA-01", json!({ "do": "echo" })),
                    line("CUP-02", json!({ "do": "fail", "code": "WAREHOUSE_BUSY", "until": 3 })),
                    line("POT-03", json!({ "do": "fail", "code": "OUT_OF_STOCK", "message": "no pots left" })),
                ],
                "card": { "do": "echo" },
            }),
        },
        Order {
            title: "#3002 one line, but the card is declined",
            input: json!({
                "order": 3002,
                "lines": [line("TEA-01", json!({ "do": "echo" }))],
                "card": { "do": "fail", "code": "CARD_DECLINED", "message": "insufficient funds" },
            }),
        },
    ]
}

/// A journal entry as a line a person can follow (`None`: not worth showing).
pub fn describe(kind: &str, node: &str, data: &Value) -> Option<String> {
    let code = data["code"].as_str().unwrap_or("");
    Some(match kind {
        "instance_started" => "order received".into(),
        "fanout_started" => format!(
            "{node}: one iteration per line ({} lines)",
            data["branches"]
        ),
        "branch_started" => format!("{node}: line {} starts", data["slot"]),
        "branch_completed" => format!("{node}: line {} done", data["slot"]),
        "attempt_ended" => match data["outcome"].as_str() {
            Some("completed") => format!("{node}: attempt {} completed", data["attempt"]),
            _ => format!("{node}: attempt {} failed with {code}", data["attempt"]),
        },
        "retry_scheduled" => format!(
            "{node}: retry parked for {} s (a durable row, nothing sleeps)",
            data["delay_ms"].as_u64().unwrap_or(0) as f64 / 1000.0
        ),
        "error_caught" => format!("{node}: its Catch took {code}"),
        "timer_armed" => format!("{node}: waiting for the courier slot (a timer park)"),
        "timer_fired" => format!("{node}: the courier slot is here"),
        "fanout_completed" => format!("{node}: every line has an outcome"),
        "instance_completed" => "order COMPLETED".into(),
        "instance_failed" => format!("order FAILED: {}", data["error"]["code"]),
        _ => return None,
    })
}

/// `+2h00m07.000s`.
fn offset(ms: i64) -> String {
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let s = rest as f64 / 1000.0;
    if h > 0 {
        format!("+{h}h{m:02}m{s:06.3}s")
    } else if m > 0 {
        format!("+{m}m{s:06.3}s")
    } else {
        format!("+{s:.3}s")
    }
}

/// A node as a person reads it: a handler's or an iteration's internal name
/// (`Reserve#catch1`, `ReserveLines#iteration`) is its state's, and a step
/// inside a Map iteration names its line (`Reserve [line 1 CUP-02]`).
fn node_label(node: &str, data: &Value, input: &Value) -> String {
    let base = node.split('#').next().unwrap_or(node);
    match data["item"].as_u64() {
        Some(slot) => {
            let sku = input["lines"][slot as usize]["sku"].as_str().unwrap_or("");
            format!("{base} [line {slot} {sku}]")
        }
        None => base.to_string(),
    }
}

/// Deploy the flow for `tenant`, run the demo orders, print each step by
/// step. Returns one summary row per order.
pub async fn run<S: Store>(
    runtime: &Runtime<S>,
    tenant: &str,
    modules: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<super::demo::Row>, String> {
    runtime
        .deploy(tenant, ORDER_LINES, modules)
        .await
        .map_err(|e| e.to_string())?;
    println!("The order-lines flow (States language, examples/order-lines.asl.json)");
    println!("==============================================================\n");
    let mut summary = Vec::new();
    for order in orders() {
        let started = runtime.clock().now();
        let id = runtime
            .start(StartRequest {
                tenant: tenant.into(),
                process_id: PROCESS.into(),
                variables: order.input.as_object().cloned().unwrap_or_default(),
                ..StartRequest::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        println!("Order {}  (instance {id})", order.title);
        runtime.settle(&id).await.map_err(|e| e.to_string())?;
        let history = runtime.history(&id).await.map_err(|e| e.to_string())?;
        let mut last_node = String::new();
        for entry in &history.entries {
            let data = &entry["data"];
            let kind = entry["kind"].as_str().unwrap_or("");
            let node = node_label(entry["node"].as_str().unwrap_or(""), data, &order.input);
            let at = entry["at"]
                .as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                .map(|t| (t.with_timezone(&chrono::Utc) - started).num_milliseconds())
                .unwrap_or(0);
            if let Some(line) = describe(kind, &node, data) {
                println!("  {:>14}  {line}", offset(at));
                if !node.is_empty() && !node.contains('[') {
                    last_node = node;
                }
            }
        }
        let view = runtime.inspect(&id).await.map_err(|e| e.to_string())?;
        if let Some(reserved) = view.variables.get("reserved") {
            println!("  line outcomes: {reserved}");
        }
        let took = view
            .ended_at
            .map(|e| offset((e - started).num_milliseconds()))
            .unwrap_or_else(|| "-".into());
        println!();
        let label = order.title.split(' ').next().unwrap_or("").to_string();
        summary.push(super::demo::Row {
            label,
            instance: id,
            state: view.state.clone(),
            ended_at: last_node,
            attempts: view.attempts.len(),
            took,
        });
    }
    Ok(summary)
}
