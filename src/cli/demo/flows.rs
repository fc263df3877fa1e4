//! The demo's flows. Each is a small description: the definition, the guests
//! it calls, the cases it starts and what to notice; `sutra demo` runs them in
//! order and tells each case's story from its journal (see `story`). Another
//! dialect's flow is one more entry in [`flows`].

use serde_json::{json, Value};

/// One flow of the demo.
pub struct Flow {
    /// Its heading, e.g. "The order flow (BPMN, examples/order-flow.bpmn)".
    pub title: &'static str,
    /// The definition's text, in any dialect `dialect::load` reads.
    pub definition: &'static str,
    /// The process to start.
    pub process: &'static str,
    /// The guests it calls by registered name; `guest-examples/build.sh` builds
    /// them into `target/guests/<name>.wasm`.
    pub guests: &'static [&'static str],
    /// What one case is called in the story ("order").
    pub noun: &'static str,
    pub cases: Vec<Case>,
    /// What to notice, printed after its summary.
    pub moral: &'static str,
}

/// One instance the demo starts.
pub struct Case {
    /// Its short name in the summary ("#1001 Ada").
    pub label: &'static str,
    /// What is special about it.
    pub about: &'static str,
    /// The start variables (a JSON object).
    pub variables: Value,
}

/// Every flow of the demo, in the order it runs them.
pub fn flows() -> Vec<Flow> {
    vec![order_flow()]
}

fn order_flow() -> Flow {
    let applicant = |name: &str, income: u32, debts: u32, missed: u32| json!({ "name": name, "income": income, "debts": debts, "age": 41, "missedPayments": missed });
    Flow {
        title: "The order flow (BPMN, examples/order-flow.bpmn)",
        definition: include_str!("../../../examples/order-flow.bpmn"),
        process: "order-flow",
        guests: &["chaos", "score"],
        noun: "order",
        cases: vec![
            Case {
                label: "#1001 Ada",
                about: "good credit, a flaky warehouse, a card that works",
                variables: json!({
                    "applicant": applicant("Ada Lovelace", 92_000, 8_000, 0),
                    "warehouse": { "do": "fail", "until": 3, "code": "WAREHOUSE_BUSY", "class": "transient" },
                    "card": { "do": "echo", "charged": 129.0 },
                    "shipping": { "do": "echo", "carrier": "bike courier" },
                }),
            },
            Case {
                label: "#1002 Grace",
                about: "good credit, but the card is declined",
                variables: json!({
                    "applicant": applicant("Grace Hopper", 71_000, 12_000, 0),
                    "warehouse": { "do": "echo", "reserved": 1 },
                    "card": { "do": "business", "code": "CARD_DECLINED" },
                    "release": { "do": "echo", "released": 1 },
                }),
            },
            Case {
                label: "#1003 Mallory",
                about: "the credit check says no",
                variables: json!({ "applicant": applicant("Mallory", 9_000, 40_000, 6) }),
            },
        ],
        moral: "Every retry and the two-hour courier wait were durable park rows in SQLite; the virtual \
                clock jumped to each one, so hours passed in milliseconds. All three orders completed, \
                each at a different end event: a business error routed to a boundary and a declined \
                credit check are outcomes the process models, not failures.",
    }
}
