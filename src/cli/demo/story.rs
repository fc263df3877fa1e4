//! Telling one case of the demo: its journal as readable lines at their
//! virtual-time offsets, plus what the journal does not say by itself — which
//! way each exclusive gateway went and which end events were reached — read
//! from the process model and the instance's completed nodes.
//!
//! Invariant: every line is derived from the model, the journal and the
//! snapshot's completed list; nothing is specific to one flow or dialect.

use crate::model::{NodeKind, Process};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::HashSet;

/// One case told.
pub struct Story {
    /// `(offset, text)` in journal order.
    pub lines: Vec<(String, String)>,
    /// The names of the end events reached, in order.
    pub ends: Vec<String>,
}

/// `+2h00m07.000s` relative to the case's start.
pub fn offset(ms: i64) -> String {
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

/// A node's name, else its id.
pub fn name_of(process: &Process, id: &str) -> String {
    process
        .find(id)
        .and_then(|n| n.name.clone())
        .unwrap_or_else(|| id.to_string())
}

/// Tell a case from its journal entries (`{"at","kind","node","data"}`) and
/// the node ids it completed, in order.
pub fn tell(
    process: &Process,
    journal: &[Value],
    completed: &[String],
    started: DateTime<Utc>,
    noun: &str,
) -> Story {
    let mut reached: HashSet<&str> = completed.iter().map(String::as_str).collect();
    reached.extend(journal.iter().filter_map(|e| e["node"].as_str()));
    let mut decisions = decisions(process, &reached);
    let ends: Vec<String> = completed
        .iter()
        .filter(|id| matches!(process.find(id).map(|n| &n.kind), Some(NodeKind::End(_))))
        .map(|id| name_of(process, id))
        .collect();
    let mut lines = Vec::new();
    for entry in journal {
        let node_id = entry["node"].as_str().unwrap_or("");
        let kind = entry["kind"].as_str().unwrap_or("");
        let at = entry["at"]
            .as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| offset((t.with_timezone(&Utc) - started).num_milliseconds()))
            .unwrap_or_default();
        if matches!(
            kind,
            "instance_completed" | "instance_failed" | "instance_terminated"
        ) {
            // The end: the decisions not told yet, then the end events reached.
            for d in decisions.drain(..) {
                lines.push((at.clone(), d.text));
            }
            for end in &ends {
                lines.push((at.clone(), format!("{end}: end event reached")));
            }
        }
        let node = name_of(process, node_id);
        if let Some(line) = describe(kind, &node, &entry["data"], noun, &ends) {
            lines.push((at.clone(), line));
        }
        if finishes(kind, &entry["data"]) {
            // The gateways right after this node decided now.
            let (now, later): (Vec<_>, Vec<_>) = decisions
                .into_iter()
                .partition(|d| d.after.iter().any(|a| a == node_id));
            decisions = later;
            for d in now {
                lines.push((at.clone(), d.text));
            }
        }
    }
    Story { lines, ends }
}

/// Whether a journal entry of this kind means its node is done and the token moved on.
fn finishes(kind: &str, data: &Value) -> bool {
    match kind {
        "attempt_ended" => data["outcome"].as_str() == Some("completed"),
        "instance_started"
        | "timer_fired"
        | "message_received"
        | "error_caught"
        | "subprocess_completed"
        | "joined" => true,
        _ => false,
    }
}

/// Which way an exclusive gateway went, told after one of the nodes that lead to it.
struct Decision {
    after: Vec<String>,
    text: String,
}

/// The way each passed exclusive gateway went: the first of its outgoing flows
/// (in model order) whose target was reached.
fn decisions(process: &Process, reached: &HashSet<&str>) -> Vec<Decision> {
    let mut out = Vec::new();
    for node in &process.nodes {
        let NodeKind::ExclusiveGateway { default } = &node.kind else {
            continue;
        };
        let Some(&taken) = node.outgoing.iter().find(|&&f| {
            let target = process.node(process.flow(f).target);
            was_reached(process, &target.id, reached, &mut HashSet::new())
        }) else {
            continue;
        };
        let flow = process.flow(taken);
        let gateway = node.name.clone().unwrap_or_else(|| node.id.clone());
        let target = name_of(process, &process.node(flow.target).id);
        let how = match (&flow.condition, Some(taken) == *default) {
            (Some(c), _) => format!("`{}` held", c.source()),
            (None, true) => "no condition held, the default flow".to_string(),
            (None, false) => "the flow without a condition".to_string(),
        };
        out.push(Decision {
            after: node
                .incoming
                .iter()
                .map(|&f| process.node(process.flow(f).source).id.clone())
                .collect(),
            text: format!("{gateway}: {how} → {target}"),
        });
    }
    out
}

/// A node was reached if it ran, or (a gateway, which leaves no trace) if a
/// node after it was reached.
fn was_reached<'a>(
    process: &'a Process,
    id: &'a str,
    reached: &HashSet<&str>,
    seen: &mut HashSet<&'a str>,
) -> bool {
    if reached.contains(id) {
        return true;
    }
    let Some(node) = process.find(id) else {
        return false;
    };
    if !matches!(
        node.kind,
        NodeKind::ExclusiveGateway { .. } | NodeKind::ParallelGateway | NodeKind::InclusiveGateway
    ) || !seen.insert(id)
    {
        return false;
    }
    node.outgoing.iter().any(|&f| {
        let target = &process.node(process.flow(f).target).id;
        was_reached(process, target, reached, seen)
    })
}

/// One readable line per journal entry worth a person's attention.
fn describe(kind: &str, node: &str, data: &Value, noun: &str, ends: &[String]) -> Option<String> {
    let code = data["code"].as_str().unwrap_or("");
    Some(match kind {
        "instance_started" => format!("{noun} received"),
        "attempt_started" => format!("{node}: attempt {}", data["attempt"]),
        "attempt_ended" => match data["outcome"].as_str() {
            Some("completed") => format!("{node}: attempt {} completed", data["attempt"]),
            Some("business_error") => format!(
                "{node}: attempt {} ended with business error {code}",
                data["attempt"]
            ),
            _ => format!("{node}: attempt {} failed with {code}", data["attempt"]),
        },
        "attempt_lost" => format!("{node}: the attempt's runner was lost; running it again"),
        "retry_scheduled" => format!(
            "{node}: retry {} parked for {} s (a durable row, nothing sleeps)",
            data["next_attempt"],
            data["delay_ms"].as_u64().unwrap_or(0) as f64 / 1000.0
        ),
        "timer_armed" => format!("{node}: timer armed"),
        "timer_fired" => format!("{node}: timer fired"),
        "message_awaited" => match data["key"].as_str() {
            Some(key) => format!(
                "{node}: waits for message `{}` with key `{key}`",
                data["name"].as_str().unwrap_or("")
            ),
            None => format!(
                "{node}: waits for message `{}`",
                data["name"].as_str().unwrap_or("")
            ),
        },
        "message_received" => format!("{node}: message received"),
        "error_caught" => format!("{node}: caught {code}, routed to its boundary"),
        "joined" => format!("{node}: every branch arrived"),
        "instance_completed" => match ends.last() {
            Some(end) => format!("{noun} COMPLETED at `{end}`"),
            None => format!("{noun} COMPLETED"),
        },
        "instance_failed" => format!(
            "{noun} FAILED: {}",
            data["error"]["code"].as_str().unwrap_or("")
        ),
        "instance_terminated" => format!("{noun} TERMINATED"),
        _ => return None,
    })
}
