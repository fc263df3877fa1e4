//! How every verb prints an instance (`run`, `inspect`, `start`, `cancel`,
//! `retry`), locally or from a server: one text rendering of the instance
//! view's JSON, and the one exit-code rule.
//!
//! Exit-code rule (every verb): 0 when the command did what was asked and the
//! instance it shows, if any, is not FAILED or COMPENSATED; 1 for a negative
//! result (a FAILED instance, a COMPENSATED one — its work was undone —, an
//! invalid definition, not found, a refused or failed request); 2 for a usage
//! error. A TERMINATED instance is what a cancel asked for: 0.

use super::run::Format;
use serde_json::Value;
use std::process::ExitCode;

/// A JSON value as a table cell or text: strings bare, null as `-`.
pub fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Print an instance view (the JSON shape of `InstanceView`) and exit by the rule.
pub fn print_instance(v: &Value, format: Format) -> ExitCode {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(v).unwrap_or_default()),
        Format::Text => print!("{}", instance_text(v)),
    }
    instance_exit(v)
}

/// 1 when the instance FAILED or was COMPENSATED, else 0 (see the module docs).
pub fn instance_exit(v: &Value) -> ExitCode {
    if matches!(v["state"].as_str(), Some("FAILED" | "COMPENSATED")) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// An instance view as text.
pub fn instance_text(v: &Value) -> String {
    let mut out = format!(
        "instance {}  process {}  state {}\n",
        s(&v["instance"]),
        s(&v["process"]),
        s(&v["state"])
    );
    if let Some(k) = v.get("businessKey").filter(|k| !k.is_null()) {
        out.push_str(&format!("  business key {}\n", s(k)));
    }
    if let Some(r) = v.get("retryOf").filter(|r| !r.is_null()) {
        out.push_str(&format!("  retry of {}\n", s(r)));
    }
    if let Some(c) = v.get("closedAt").filter(|c| !c.is_null()) {
        out.push_str(&format!("  closed {}\n", s(c)));
    }
    if let Some(p) = v.get("parent").filter(|p| !p.is_null()) {
        out.push_str(&format!("  child flow of {}\n", s(p)));
    }
    for a in v["attempts"].as_array().into_iter().flatten() {
        let code = a
            .get("code")
            .filter(|c| !c.is_null())
            .map(|c| format!(" {}", s(c)))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {}  {} attempt {}  {}{code}\n",
            s(&a["at"]),
            s(&a["task"]),
            s(&a["attempt"]),
            s(&a["outcome"])
        ));
        out.push_str(&calls_text(&a["calls"]));
    }
    for w in v["waits"].as_array().into_iter().flatten() {
        out.push_str(&format!("  {}\n", wait_text(w)));
    }
    if let Some(nodes) = v["nodes"].as_object().filter(|n| !n.is_empty()) {
        let nodes: Vec<String> = nodes
            .iter()
            .map(|(n, st)| format!("{n}={}", s(st)))
            .collect();
        out.push_str(&format!("  nodes {}\n", nodes.join(" ")));
    }
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        out.push_str(&format!(
            "  error {}: {}\n",
            s(&e["code"]),
            s(&e["message"])
        ));
        if let Some(c) = e.get("cause").filter(|c| !c.is_null()) {
            out.push_str(&format!(
                "  cause {}: {}\n",
                s(&c["code"]),
                s(&c["message"])
            ));
        }
        for f in e["compensationFailures"].as_array().into_iter().flatten() {
            let (code, message) = (s(&f["code"]), s(&f["message"]));
            out.push_str(&format!("  compensation failed {code}: {message}\n"));
        }
    }
    out.push_str(&format!("  variables {}\n", v["variables"]));
    out
}

/// An attempt's outbound calls (`calls` of the instance view), one line each
/// under its attempt: the request, then its status and duration, or the
/// code and reason of a denial or a failure.
fn calls_text(record: &Value) -> String {
    let mut out = String::new();
    for c in record["calls"].as_array().into_iter().flatten() {
        let port = match (c["scheme"].as_str(), c["port"].as_u64()) {
            (Some("https"), Some(443)) | (Some("http"), Some(80)) | (_, None) => String::new(),
            (_, Some(p)) => format!(":{p}"),
        };
        let target = format!(
            "{} {}://{}{port}{}",
            s(&c["method"]),
            s(&c["scheme"]),
            s(&c["host"]),
            s(&c["path"])
        );
        let took = c["duration_us"]
            .as_u64()
            .map(|us| format!("  {:.1} ms", us as f64 / 1000.0))
            .unwrap_or_default();
        let result = match (c.get("code").filter(|v| !v.is_null()), c.get("status")) {
            (Some(code), _) => format!("{} {}", s(code), s(&c["reason"])),
            (None, Some(st)) if !st.is_null() => format!("-> {}{took}", s(st)),
            _ => format!("failed: {}{took}", s(&c["reason"])),
        };
        out.push_str(&format!("      call {target}  {result}\n"));
    }
    if let Some(n) = record["dropped"].as_u64().filter(|n| *n > 0) {
        out.push_str(&format!("      (and {n} more calls, not kept)\n"));
    }
    out
}

/// One pending wait: what it waits for, where, and until when.
pub(crate) fn wait_text(w: &Value) -> String {
    let node = s(&w["node"]);
    let due = s(&w["due"]);
    match w["kind"].as_str().unwrap_or("") {
        "message" => {
            let key = match w.get("correlationKey").filter(|k| !k.is_null()) {
                Some(k) => format!(" with correlation key `{}`", s(k)),
                None => String::new(),
            };
            format!("waits at {node} for message `{}`{key}", s(&w["message"]))
        }
        "event" => {
            let how = match w.get("resume").filter(|r| !r.is_null()) {
                Some(r) => format!(" (resume it: {})", s(r)),
                None => String::new(),
            };
            format!("waits at {node} for event `{}`{how}", s(&w["event"]))
        }
        "timer" => format!("waits at {node} for a timer due {due}"),
        // A fan-out that spent its step's budget (engine::fanout).
        "continue" => format!("goes on at {node}: its next iterations start in the next step"),
        "retry" => format!(
            "waits at {node} for a retry: attempt {} due {due}",
            s(&w["attempt"])
        ),
        "attempt" => format!(
            "runs {node} attempt {} (re-run if its runner is lost, from {due})",
            s(&w["attempt"])
        ),
        "child" => {
            let until = match w.get("due").filter(|d| !d.is_null()) {
                Some(_) => format!(" (timeout {due})"),
                None => String::new(),
            };
            format!("waits at {node} for child flow {}{until}", s(&w["child"]))
        }
        "channel" => {
            let on = match w.get("channel").filter(|c| !c.is_null()) {
                Some(c) => format!(" on channel `{}`", s(c)),
                None => String::new(),
            };
            let until = match w.get("due").filter(|d| !d.is_null()) {
                Some(_) => format!(" (timeout {due})"),
                None => String::new(),
            };
            format!("waits at {node} for an answer{on}{until}")
        }
        other => format!("waits at {node} for {other} due {due}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_attempt_lists_its_calls_and_denials() {
        let v = json!({
            "instance": "i", "process": "p", "state": "COMPLETED", "waits": [], "variables": {},
            "attempts": [{
                "task": "Fetch", "attempt": 1, "at": "2030-01-01T00:00:00Z", "outcome": "completed",
                "calls": {
                    "calls": [
                        { "method": "GET", "scheme": "https", "host": "api.example.com", "port": 443,
                          "path": "/v1/rates", "status": 200, "bytes_out": 0, "bytes_in": 512, "duration_us": 1500 },
                        { "method": "POST", "scheme": "http", "host": "10.0.0.7", "port": 8080,
                          "path": "/", "bytes_out": 0, "bytes_in": 0, "duration_us": 0,
                          "code": "SUTRA.TASK.EGRESS_DENIED", "reason": "address 10.0.0.7 is in a denied range" },
                    ],
                    "dropped": 3,
                },
            }],
        });
        let text = instance_text(&v);
        assert!(
            text.contains("      call GET https://api.example.com/v1/rates  -> 200  1.5 ms\n"),
            "{text}"
        );
        assert!(
            text.contains("      call POST http://10.0.0.7:8080/  SUTRA.TASK.EGRESS_DENIED address 10.0.0.7 is in a denied range\n"),
            "{text}"
        );
        assert!(text.contains("(and 3 more calls, not kept)"), "{text}");
    }

    #[test]
    fn each_kind_of_wait_says_what_it_waits_for() {
        let v = json!({
            "instance": "i", "process": "p", "state": "WAITING", "attempts": [], "variables": {},
            "waits": [
                { "kind": "timer", "node": "courier", "due": "2030-01-01T02:00:00Z" },
                { "kind": "retry", "node": "T", "due": "2030-01-01T00:00:03Z", "attempt": 2 },
                { "kind": "message", "node": "wait", "due": null, "message": "go", "correlationKey": "k1" },
                { "kind": "child", "node": "Invoke", "due": null, "child": "i.4" },
                { "kind": "channel", "node": "Charge", "due": null, "channel": "payments", "request": "i.5" },
            ],
        });
        let text = instance_text(&v);
        assert!(
            text.contains("waits at courier for a timer due 2030-01-01T02:00:00Z"),
            "{text}"
        );
        assert!(
            text.contains("waits at T for a retry: attempt 2 due 2030-01-01T00:00:03Z"),
            "{text}"
        );
        assert!(
            text.contains("waits at wait for message `go` with correlation key `k1`"),
            "{text}"
        );
        assert!(
            text.contains("waits at Invoke for child flow i.4\n"),
            "{text}"
        );
        assert!(
            text.contains("waits at Charge for an answer on channel `payments`\n"),
            "{text}"
        );
    }

    #[test]
    fn only_a_failed_or_compensated_instance_exits_1() {
        for (state, code) in [
            ("FAILED", 1),
            ("COMPENSATED", 1),
            ("TERMINATED", 0),
            ("COMPLETED", 0),
            ("WAITING", 0),
        ] {
            let exit = instance_exit(&json!({ "state": state }));
            assert_eq!(
                format!("{exit:?}"),
                format!("{:?}", ExitCode::from(code)),
                "{state}"
            );
        }
    }
}
