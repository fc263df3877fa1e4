//! `sutra demo`: the README's main job. Builds the example guests if needed,
//! deploys the order flow (`examples/order-flow.bpmn`) on embedded SQLite with
//! the virtual clock and the audit journal on, runs three orders and prints
//! what happened to each, step by step, then a summary.
use super::run::{fail_exit, tokio};
use crate::config::Config;
use crate::runtime::{Runtime, RuntimeOptions, Settled, StartRequest};
use crate::store::AnyStore;
use clap::Args;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

const ORDER_FLOW: &str = include_str!("../../examples/order-flow.bpmn");

#[derive(Debug, Args)]
pub struct DemoArgs {}

struct Order {
    title: &'static str,
    variables: Value,
}

fn orders() -> Vec<Order> {
    let applicant = |name: &str, income: u32, debts: u32, missed: u32| json!({ "name": name, "income": income, "debts": debts, "age": 41, "missedPayments": missed });
    vec![
        Order {
            title: "#1001 Ada: good credit, a flaky warehouse, a card that works",
            variables: json!({
                "applicant": applicant("Ada Lovelace", 92_000, 8_000, 0),
                "warehouse": { "do": "fail", "until": 3, "code": "WAREHOUSE_BUSY", "class": "transient" },
                "card": { "do": "echo", "charged": 129.0 },
                "shipping": { "do": "echo", "carrier": "bike courier" },
            }),
        },
        Order {
            title: "#1002 Grace: good credit, but the card is declined",
            variables: json!({
                "applicant": applicant("Grace Hopper", 71_000, 12_000, 0),
                "warehouse": { "do": "echo", "reserved": 1 },
                "card": { "do": "business", "code": "CARD_DECLINED" },
                "release": { "do": "echo", "released": 1 },
            }),
        },
        Order {
            title: "#1003 Mallory: the credit check says no",
            variables: json!({ "applicant": applicant("Mallory", 9_000, 40_000, 6) }),
        },
    ]
}

fn build_guests() -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("guest-examples/build.sh");
    eprintln!("Building the example guests (first run takes a minute) ...");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .args(["chaos", "score"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed:\n{}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn read_guest(name: &str) -> Result<Vec<u8>, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/guests")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// `+2h00m07.000s` relative to the order's start.
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

/// One readable line per journal entry worth a person's attention.
fn describe(kind: &str, node: &str, data: &Value) -> Option<String> {
    let code = data["code"].as_str().unwrap_or("");
    Some(match kind {
        "instance_started" => "order received".into(),
        "attempt_started" => format!("{node}: attempt {}", data["attempt"]),
        "attempt_ended" => match data["outcome"].as_str() {
            Some("completed") => format!("{node}: attempt {} completed", data["attempt"]),
            Some("business_error") => format!(
                "{node}: attempt {} ended with business error {code}",
                data["attempt"]
            ),
            _ => format!("{node}: attempt {} failed with {code}", data["attempt"]),
        },
        "retry_scheduled" => format!(
            "{node}: retry {} parked for {} s (a durable row, nothing sleeps)",
            data["next_attempt"],
            data["delay_ms"].as_u64().unwrap_or(0) as f64 / 1000.0
        ),
        "timer_armed" => format!("{node}: timer armed"),
        "timer_fired" => format!("{node}: timer fired"),
        "error_caught" => format!("{node}: caught {code}, routed to its boundary"),
        "instance_completed" => "order flow COMPLETED".into(),
        "instance_failed" => format!("order flow FAILED: {}", data["error"]["code"]),
        _ => return None,
    })
}

pub fn exec(_args: DemoArgs) -> ExitCode {
    if let Err(e) = build_guests() {
        return fail_exit(&e);
    }
    let mut modules = BTreeMap::new();
    for name in ["chaos", "score"] {
        match read_guest(name) {
            Ok(b) => {
                modules.insert(name.to_string(), b);
            }
            Err(e) => return fail_exit(&e),
        }
    }
    let rt = match tokio() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => return fail_exit(&format!("cannot create a temporary directory: {e}")),
        };
        let url = format!("sqlite://{}", dir.path().join("demo.db").display());
        let store = match AnyStore::open(&url).await {
            Ok(s) => s,
            Err(e) => return fail_exit(&e.to_string()),
        };
        let config = Config { audit_sql: true, ..Config::default() };
        let opts = RuntimeOptions::new(config).with_virtual_clock(chrono::Utc::now());
        let runtime = match Runtime::new(store, opts) {
            Ok(r) => r,
            Err(e) => return fail_exit(&e.to_string()),
        };
        let deployed = match runtime.deploy("demo", ORDER_FLOW, &modules).await {
            Ok(d) => d,
            Err(e) => return fail_exit(&e.to_string()),
        };
        let process = match runtime.deployed(&deployed[0].id).await {
            Ok(d) => d.process.clone(),
            Err(e) => return fail_exit(&e.to_string()),
        };
        println!("Sutra demo: the order flow on embedded SQLite ({url}), virtual clock, audit journal on.\n");
        let mut summary = Vec::new();
        for order in orders() {
            println!("Order {}", order.title);
            let started = runtime.clock().now();
            let id = match runtime
                .start(StartRequest {
                    tenant: "demo".into(),
                    process_id: "order-flow".into(),
                    variables: order.variables.as_object().cloned().unwrap_or_default(),
                    ..StartRequest::default()
                })
                .await
            {
                Ok(id) => id,
                Err(e) => return fail_exit(&e.to_string()),
            };
            if let Err(e) = runtime.settle(&id).await.map(|s| matches!(s, Settled::Gone)) {
                return fail_exit(&e.to_string());
            }
            let history = match runtime.history(&id).await {
                Ok(h) => h,
                Err(e) => return fail_exit(&e.to_string()),
            };
            for entry in &history.entries {
                let node_id = entry["node"].as_str().unwrap_or("");
                let node = process
                    .find(node_id)
                    .and_then(|n| n.name.clone())
                    .unwrap_or_else(|| node_id.to_string());
                let kind = entry["kind"].as_str().unwrap_or("");
                let at = entry["at"]
                    .as_str()
                    .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                    .map(|t| (t.with_timezone(&chrono::Utc) - started).num_milliseconds())
                    .unwrap_or(0);
                if let Some(line) = describe(kind, &node, &entry["data"]) {
                    println!("  {:>14}  {line}", offset(at));
                }
            }
            let view = match runtime.inspect(&id).await {
                Ok(v) => v,
                Err(e) => return fail_exit(&e.to_string()),
            };
            let last = process
                .find(&view.attempts.last().map(|a| a.task.clone()).unwrap_or_default())
                .and_then(|n| n.name.clone())
                .unwrap_or_default();
            let took = view.ended_at.map(|e| offset((e - started).num_milliseconds())).unwrap_or_else(|| "-".into());
            println!();
            summary.push((order.title.split(':').next().unwrap_or("").to_string(), view.state.clone(), view.attempts.len(), took, last));
        }
        println!("Summary");
        println!("  {:<14} {:<10} {:>8}  {:>16}  last task", "order", "state", "attempts", "virtual time");
        for (order, state, attempts, took, last) in &summary {
            println!("  {order:<14} {state:<10} {attempts:>8}  {took:>16}  {last}");
        }
        println!(
            "\nEvery retry and the two-hour courier wait were durable park rows in SQLite; the virtual \
             clock jumped to each one, so hours passed in milliseconds."
        );
        ExitCode::SUCCESS
    })
}
