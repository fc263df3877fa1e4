//! JSONata in the States language and variables (`Assign`), end to end on
//! SQLite and PostgreSQL with the virtual clock: one test per construct
//! (Arguments, Output, Assign, Condition, Items, Wait, Fail, `$states`),
//! variable scoping in Map and Parallel, and variables across a restart.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::runtime::{InstanceView, Runtime, RuntimeOptions, StartRequest};
use sutra::store::AnyStore;

const TENANT: &str = "acme";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap()
}

fn runtime(store: AnyStore) -> Runtime<AnyStore> {
    Runtime::new(
        store,
        RuntimeOptions::new(Config::default()).with_virtual_clock(t0()),
    )
    .unwrap()
}

/// The `chaos` guest, built once per test process.
fn chaos() -> Vec<u8> {
    static BUILT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = common::root();
            let out = std::process::Command::new("bash")
                .arg(root.join("guest-examples/build.sh"))
                .arg("chaos")
                .current_dir(root)
                .output()
                .expect("run build.sh");
            assert!(
                out.status.success(),
                "build.sh chaos: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::read(root.join("target/guests/chaos.wasm")).expect("chaos.wasm")
        })
        .clone()
}

async fn start(rt: &Runtime<AnyStore>, def: Value, input: Value) -> String {
    let mut def = def;
    def["Name"] = json!("m");
    let modules = BTreeMap::from([("chaos".to_string(), chaos())]);
    rt.deploy(TENANT, &def.to_string(), &modules).await.unwrap();
    rt.start(StartRequest {
        tenant: TENANT.into(),
        process_id: "m".into(),
        variables: input.as_object().cloned().unwrap(),
        ..StartRequest::default()
    })
    .await
    .unwrap()
}

/// Deploy `def`, run it to rest and inspect it.
async fn run(rt: &Runtime<AnyStore>, def: Value, input: Value) -> InstanceView {
    let id = start(rt, def, input).await;
    rt.settle(&id).await.unwrap();
    rt.inspect(&id).await.unwrap()
}

/// The codes a failed run reports: its error's code and its cause's.
fn raised(view: &InstanceView) -> Vec<String> {
    let e = view.error.clone().expect("an error");
    std::iter::once(e.code)
        .chain(e.cause.map(|c| c.code))
        .collect()
}

fn out(view: &InstanceView) -> Value {
    Value::Object(view.variables.clone())
}

backends::store_tests! {
    async fn arguments_and_output_shape_a_task_from_states_input_and_result(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "Echo",
            "States": {"Echo": {
                "Type": "Task", "Resource": "chaos",
                "Arguments": {"do": "echo", "sum": "{% $states.input.a + $states.input.b %}", "who": "{% $states.context.Execution.Id %}"},
                "Output": {"sum": "{% $states.result.sum %}", "kept": "{% $states.input.a %}", "literal": "x"},
                "End": true
            }}
        });
        let view = run(&rt, def, json!({"a": 40, "b": 2})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(out(&view), json!({"sum": 42, "kept": 40, "literal": "x"}));
        // Without Output a JSONata Task's output is its result.
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "Echo",
            "States": {"Echo": {"Type": "Task", "Resource": "chaos", "Arguments": {"do": "echo", "n": 1}, "End": true}}
        });
        let view = run(&rt, def, json!({"a": 1})).await;
        assert_eq!(out(&view), json!({"do": "echo", "n": 1}));
    }

    async fn assign_is_seen_by_later_states_in_both_query_languages(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "StartAt": "SetPath",
            "States": {
                "SetPath": {"Type": "Pass", "Result": {"v": 5}, "Assign": {"fromPath.$": "$.v", "fixed": "f"}, "Next": "SetAta"},
                "SetAta": {"Type": "Pass", "QueryLanguage": "JSONata",
                           "Assign": {"fromAta": "{% $fromPath * 2 %}", "before": "{% $fromAta %}"},
                           "Output": {"seen": "{% $fromPath %}"}, "Next": "Read"},
                "Read": {"Type": "Pass", "Parameters": {"a.$": "$fromAta", "b.$": "$fixed", "input.$": "$"}, "End": true}
            }
        });
        let view = run(&rt, def, json!({"x": 1})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        // Assign sees the variables as they were when its state was entered
        // (`before` is unset, so left out).
        assert_eq!(out(&view), json!({"a": 10, "b": "f", "input": {"seen": 5}}));
    }

    async fn a_choice_condition_reads_input_and_variables(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "Init",
            "States": {
                "Init": {"Type": "Pass", "Assign": {"limit": 20}, "Next": "C"},
                "C": {"Type": "Choice",
                      "Choices": [
                          {"Condition": "{% $states.input.value >= $limit %}", "Next": "Big"},
                          {"Condition": "{% $states.input.value = 0 %}", "Next": "Zero"}
                      ],
                      "Default": "Small", "Assign": {"chosen": true}},
                "Big": {"Type": "Pass", "Output": {"kind": "big", "chosen": "{% $chosen %}"}, "End": true},
                "Zero": {"Type": "Pass", "Output": {"kind": "zero"}, "End": true},
                "Small": {"Type": "Pass", "Output": {"kind": "small"}, "End": true}
            }
        });
        for (v, kind) in [(22, "big"), (0, "zero"), (3, "small")] {
            let view = run(&rt, def.clone(), json!({"value": v})).await;
            assert_eq!(view.variables["kind"], json!(kind), "{v}: {view:?}");
        }
        let view = run(&rt, def.clone(), json!({"value": 30})).await;
        assert_eq!(view.variables["chosen"], json!(true));
        // A condition that yields no boolean fails the state.
        let bad = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "C",
            "States": {"C": {"Type": "Choice", "Choices": [{"Condition": "{% $states.input.value %}", "Next": "D"}], "Default": "D"},
                       "D": {"Type": "Succeed"}}
        });
        let view = run(&rt, bad, json!({"value": 3})).await;
        assert_eq!(view.state, "FAILED");
        assert!(raised(&view).contains(&"States.QueryEvaluationError".to_string()), "{view:?}");
    }

    async fn map_items_and_item_selector_in_jsonata(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "M",
            "States": {"M": {
                "Type": "Map",
                "Items": "{% $states.input.animals[$ != 'Cat'] %}",
                "ItemSelector": {"name": "{% $states.context.Map.Item.Value %}", "at": "{% $states.context.Map.Item.Index %}"},
                "ItemProcessor": {"StartAt": "P", "States": {"P": {"Type": "Pass", "Output": "{% $uppercase($states.input.name) & $string($states.input.at) %}", "End": true}}},
                "FailOnPartial": true,
                "Output": {"all": "{% $states.result %}"},
                "End": true
            }}
        });
        let view = run(&rt, def, json!({"animals": ["Lion", "Cat", "Elephant"]})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(out(&view), json!({"all": ["LION0", "ELEPHANT1"]}));
        // A literal array is the items as they are.
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "M",
            "States": {"M": {"Type": "Map", "Items": [1, 2, 3], "FailOnPartial": true,
                "ItemProcessor": {"StartAt": "P", "States": {"P": {"Type": "Pass", "Output": "{% $states.input * 10 %}", "End": true}}},
                "Output": {"r": "{% $states.result %}"}, "End": true}}
        });
        let view = run(&rt, def, json!({})).await;
        assert_eq!(out(&view), json!({"r": [10, 20, 30]}));
    }

    async fn wait_seconds_and_timestamp_from_jsonata(db) {
        let rt = runtime(db.store.clone());
        let due = (t0() + chrono::Duration::hours(5)).to_rfc3339();
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "W1",
            "States": {
                "W1": {"Type": "Wait", "Seconds": "{% $states.input.delay * 60 %}", "Next": "W2"},
                "W2": {"Type": "Wait", "Timestamp": "{% $states.input.due %}", "Next": "Stamp"},
                "Stamp": {"Type": "Task", "Resource": "chaos", "Arguments": {"do": "echo", "at": "{% $now() %}"}, "End": true}
            }
        });
        let view = run(&rt, def, json!({"delay": 2, "due": due})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.attempts[0].at - t0(), chrono::Duration::hours(5));
        // `$now()` is the state's entry time on the engine's clock.
        let at: DateTime<Utc> = view.variables["at"].as_str().unwrap().parse().unwrap();
        assert_eq!(at - t0(), chrono::Duration::hours(5));
        // Seconds that are no integer fail the Wait.
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "W",
            "States": {"W": {"Type": "Wait", "Seconds": "{% 1.5 %}", "End": true}}
        });
        let view = run(&rt, def, json!({})).await;
        assert_eq!(view.state, "FAILED");
        assert!(raised(&view).contains(&"States.Runtime".to_string()), "{view:?}");
    }

    async fn fail_error_and_cause_from_jsonata(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "F",
            "States": {"F": {"Type": "Fail", "Error": "{% 'Order.' & $states.input.kind %}", "Cause": "{% 'order ' & $string($states.input.id) %}"}}
        });
        let view = run(&rt, def, json!({"kind": "Rejected", "id": 9})).await;
        assert_eq!(view.state, "FAILED");
        let e = view.error.unwrap();
        assert_eq!((e.code.as_str(), e.message.as_str()), ("Order.Rejected", "order 9"));
    }

    async fn a_catcher_sees_states_error_output(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "T",
            "States": {
                "T": {"Type": "Task", "Resource": "chaos", "Arguments": {"do": "fail", "code": "Boom", "message": "it broke"},
                      "Catch": [{"ErrorEquals": ["Boom"], "Next": "Handled",
                                 "Assign": {"lastError": "{% $states.errorOutput.Error %}"},
                                 "Output": {"why": "{% $states.errorOutput.Cause %}", "order": "{% $states.input.order %}"}}],
                      "End": true},
                "Handled": {"Type": "Pass", "Output": {"why": "{% $states.input.why %}", "order": "{% $states.input.order %}", "last": "{% $lastError %}"}, "End": true}
            }
        });
        let view = run(&rt, def, json!({"order": 3})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(out(&view), json!({"why": "it broke", "order": 3, "last": "Boom"}));
    }

    async fn branches_read_outer_variables_and_keep_their_own(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "QueryLanguage": "JSONata",
            "StartAt": "Init",
            "States": {
                "Init": {"Type": "Pass", "Assign": {"base": 100}, "Next": "Par"},
                "Par": {"Type": "Parallel", "Branches": [
                    {"StartAt": "A1", "States": {
                        "A1": {"Type": "Pass", "Assign": {"mine": 1}, "Next": "A2"},
                        "A2": {"Type": "Pass", "Output": "{% $base + $mine %}", "End": true}}},
                    {"StartAt": "B1", "States": {
                        "B1": {"Type": "Pass", "Output": "{% $base + ($exists($mine) ? 1000 : 2) %}", "End": true}}}
                ], "Assign": {"sums": "{% $states.result %}"}, "Next": "M"},
                "M": {"Type": "Map", "Items": "{% $sums %}", "FailOnPartial": true,
                      "ItemProcessor": {"StartAt": "I1", "States": {
                          "I1": {"Type": "Pass", "Assign": {"item": "{% $states.input %}"}, "Next": "I2"},
                          "I2": {"Type": "Pass", "Output": "{% $item - $base %}", "End": true}}},
                      "Next": "After"},
                "After": {"Type": "Pass", "Output": {"r": "{% $states.input %}", "sums": "{% $sums %}", "inner": "{% $exists($item) or $exists($mine) %}"}, "End": true}
            }
        });
        let view = run(&rt, def, json!({})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        // The second branch does not see the first's `mine`; no branch's variables outlive it.
        assert_eq!(out(&view), json!({"r": [1, 2], "sums": [101, 102], "inner": false}));
    }

    async fn variables_survive_a_restart(db) {
        let id = {
            let rt = runtime(db.store.clone());
            let def = json!({
                "StartAt": "Set",
                "States": {
                    "Set": {"Type": "Pass", "Result": {"token": "t-1"}, "Assign": {"token.$": "$.token"}, "Next": "Hold"},
                    "Hold": {"Type": "Wait", "EventName": "go", "Next": "Use"},
                    "Use": {"Type": "Pass", "QueryLanguage": "JSONata", "Output": {"token": "{% $token %}"}, "End": true}
                }
            });
            let id = start(&rt, def, json!({})).await;
            rt.settle(&id).await.unwrap();
            assert_eq!(rt.inspect(&id).await.unwrap().state, "WAITING");
            id
        };
        let rt = runtime(db.reopen().await);
        rt.resume_event(&id, "go", serde_json::Map::new()).await.unwrap();
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(out(&view), json!({"token": "t-1"}));
    }

    async fn a_hostile_expression_ends_its_state_with_the_budget_code(db) {
        let rt = runtime(db.store.clone());
        for hostile in ["{% $count([1..10000000].($ * 2)) %}", "{% ($f := function($x){$f($x)}; $f(1)) %}"] {
            let def = json!({
                "QueryLanguage": "JSONata",
                "StartAt": "P",
                "States": {"P": {"Type": "Pass", "Output": hostile, "End": true}}
            });
            let view = run(&rt, def, json!({})).await;
            assert_eq!(view.state, "FAILED", "{hostile}");
            assert!(
                raised(&view).contains(&"SUTRA.RUNTIME.CONDITION.BUDGET_EXCEEDED".to_string()),
                "{hostile}: {view:?}"
            );
        }
    }
}

#[test]
fn load_refuses_what_cannot_run_with_line_and_column() {
    let load = |def: Value| sutra::dialect::load(&serde_json::to_string_pretty(&def).unwrap());
    let codes = |def: Value| {
        load(def)
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| (d.code.as_str().to_string(), d.message.clone(), d.line))
            .collect::<Vec<_>>()
    };
    // A syntax error.
    let c = codes(
        json!({"QueryLanguage": "JSONata", "StartAt": "P", "States": {"P": {"Type": "Pass", "Output": "{% 1 + %}", "End": true}}}),
    );
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].0, "SUTRA.CONFIG.STATES.JSONATA_SYNTAX");
    assert!(c[0].2 > 1);
    // A function jsonata-rs lacks: named.
    let c = codes(
        json!({"QueryLanguage": "JSONata", "StartAt": "P", "States": {"P": {"Type": "Pass", "Output": "{% $average([1, 2]) %}", "End": true}}}),
    );
    assert_eq!(c[0].0, "SUTRA.CONFIG.STATES.UNSUPPORTED", "{c:?}");
    assert!(c[0].1.contains("$average"), "{c:?}");
    // A branch assigning an outer variable.
    let c = codes(json!({
        "StartAt": "Init",
        "States": {
            "Init": {"Type": "Pass", "Assign": {"x": 1}, "Next": "Par"},
            "Par": {"Type": "Parallel", "End": true, "Branches": [
                {"StartAt": "B", "States": {"B": {"Type": "Pass", "Assign": {"x": 2}, "End": true}}}
            ]}
        }
    }));
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].0, "SUTRA.CONFIG.STATES.INVALID_FIELD");
    assert!(c[0].1.contains("enclosing scope"), "{c:?}");
    // JSONata fields in a JSONPath state.
    let c = codes(
        json!({"StartAt": "P", "States": {"P": {"Type": "Pass", "Output": {"a": 1}, "End": true}}}),
    );
    assert_eq!(c[0].0, "SUTRA.CONFIG.STATES.INVALID_FIELD", "{c:?}");
    // `$states` is reserved.
    let c = codes(
        json!({"StartAt": "P", "States": {"P": {"Type": "Pass", "Assign": {"states": 1}, "End": true}}}),
    );
    assert_eq!(c[0].0, "SUTRA.CONFIG.STATES.INVALID_FIELD", "{c:?}");
}
