//! The States language end to end, on SQLite and PostgreSQL, with the
//! virtual clock: JSON definitions in, the `chaos` guest in the sandbox,
//! every step committed to the store.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::runtime::{InstanceView, Runtime, RuntimeOptions, Settled, StartRequest};
use sutra::store::{AnyStore, Store};

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

/// The `chaos` guest, built once per test process (only it).
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

fn modules() -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([("chaos".to_string(), chaos())])
}

/// Deploy `def` (a JSON state machine named `m`) and run it to rest.
async fn run(rt: &Runtime<AnyStore>, def: Value, input: Value) -> (String, Settled, InstanceView) {
    let mut def = def;
    def["Name"] = json!("m");
    rt.deploy(TENANT, &def.to_string(), &modules())
        .await
        .unwrap();
    let id = rt
        .start(StartRequest {
            tenant: TENANT.into(),
            process_id: "m".into(),
            variables: input.as_object().cloned().unwrap(),
            ..StartRequest::default()
        })
        .await
        .unwrap();
    let settled = rt.settle(&id).await.unwrap();
    let view = rt.inspect(&id).await.unwrap();
    (id, settled, view)
}

fn offsets(view: &InstanceView) -> Vec<i64> {
    view.attempts
        .iter()
        .map(|a| (a.at - t0()).num_milliseconds())
        .collect()
}

fn err_code(view: &InstanceView) -> (String, Option<String>) {
    let e = view.error.clone().expect("an error");
    (e.code, e.cause.map(|c| c.code))
}

backends::store_tests! {
    async fn data_flow_runs_through_a_task(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "StartAt": "Prepare",
            "States": {
                "Prepare": {"Type": "Pass", "Result": {"do": "echo", "n": 2}, "ResultPath": "$.call", "Next": "Echo"},
                "Echo": {
                    "Type": "Task", "Resource": "chaos",
                    "InputPath": "$.call",
                    "Parameters": {"do.$": "$.do", "sum.$": "States.MathAdd($.n, 40)", "who.$": "$$.Execution.Id", "tag": "fixed"},
                    "ResultSelector": {"sum.$": "$.sum", "tag.$": "$.tag"},
                    "ResultPath": "$.result",
                    "OutputPath": "$.result",
                    "End": true
                }
            }
        });
        let (id, _, view) = run(&rt, def, json!({"order": 7})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(Value::Object(view.variables.clone()), json!({"sum": 42, "tag": "fixed"}));
        assert!(!id.is_empty());
    }

    async fn ordered_retriers_keep_their_own_counters(db) {
        let rt = runtime(db.store.clone());
        // Attempt n fails with code A, B, A, B, A (by its retry count).
        let def = json!({
            "StartAt": "T",
            "States": {"T": {
                "Type": "Task", "Resource": "chaos",
                "Parameters": {"do": "fail", "code.$": "States.ArrayGetItem(States.Array('A', 'B', 'A', 'B', 'A'), $$.State.RetryCount)"},
                "Retry": [
                    {"ErrorEquals": ["A"], "IntervalSeconds": 1, "MaxAttempts": 2},
                    {"ErrorEquals": ["States.ALL"], "IntervalSeconds": 10, "MaxAttempts": 2}
                ],
                "End": true
            }}
        });
        let (_, _, view) = run(&rt, def, json!({})).await;
        assert_eq!(view.state, "FAILED");
        // A: 1 s then 2 s; B: 10 s then 20 s — each retrier doubles its own interval.
        assert_eq!(offsets(&view), vec![0, 1_000, 11_000, 13_000, 33_000]);
        let codes: Vec<_> = view.attempts.iter().map(|a| a.code.clone().unwrap()).collect();
        assert_eq!(codes, vec!["A", "B", "A", "B", "A"]);
        assert_eq!(err_code(&view), ("SUTRA.RUNTIME.RETRY.EXHAUSTED".into(), Some("A".into())));
    }

    async fn catch_places_error_and_cause_at_its_result_path_or_merges_them_at_the_root(db) {
        let rt = runtime(db.store.clone());
        let def = |rp: Value| {
            let mut catcher = json!({"ErrorEquals": ["Other", "Boom"], "Next": "Handled"});
            if !rp.is_null() {
                catcher["ResultPath"] = rp;
            }
            json!({
                "StartAt": "T",
                "States": {
                    "T": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "fail", "code": "Boom", "message": "it broke"},
                          "Catch": [catcher, {"ErrorEquals": ["States.ALL"], "Next": "Wrong"}], "End": true},
                    "Handled": {"Type": "Pass", "End": true},
                    "Wrong": {"Type": "Fail", "Error": "WrongCatcher"}
                }
            })
        };
        let (_, _, view) = run(&rt, def(json!("$.error")), json!({"keep": 1})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["keep"], json!(1));
        assert_eq!(view.variables["error"]["Error"], json!("Boom"));
        assert_eq!(view.variables["error"]["Cause"], json!("it broke"));
        // At `$` (the default, or written) seed 004 merges them into the input
        // (Step Functions would replace it): the input's fields stay.
        for rp in [Value::Null, json!("$")] {
            let (_, _, view) = run(&rt, def(rp), json!({"keep": 1, "Error": "old"})).await;
            assert_eq!(
                Value::Object(view.variables.clone()),
                json!({"keep": 1, "Error": "Boom", "Cause": "it broke"})
            );
        }
    }

    async fn error_names_follow_the_seed(db) {
        let rt = runtime(db.store.clone());
        // A failure without a code is ActionFailed; States.TaskFailed matches it.
        let def = json!({
            "StartAt": "T",
            "States": {
                "T": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "fail"},
                      "Catch": [{"ErrorEquals": ["States.TaskFailed"], "ResultPath": "$.e", "Next": "Done"}], "End": true},
                "Done": {"Type": "Succeed"}
            }
        });
        let (_, _, view) = run(&rt, def, json!({})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["e"]["Error"], json!("ActionFailed"));
        // Uncaught, the run fails with the error name as the cause.
        let def = json!({"StartAt": "T", "States": {"T": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "fail"}, "End": true}}});
        let (_, _, view) = run(&rt, def, json!({})).await;
        assert_eq!(err_code(&view), ("SUTRA.RUNTIME.TASK_FAILED".into(), Some("ActionFailed".into())));
        // A Fail state raises what it declares, computed from the input.
        let def = json!({"StartAt": "F", "States": {"F": {"Type": "Fail", "ErrorPath": "$.why", "CausePath": "States.Format('order {}', $.id)"}}});
        let (_, _, view) = run(&rt, def, json!({"why": "Custom.Error", "id": 9})).await;
        let e = view.error.unwrap();
        assert_eq!((e.code.as_str(), e.message.as_str()), ("Custom.Error", "order 9"));
    }

    async fn a_choice_without_match_or_default_fails_with_no_choice_matched(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "StartAt": "C",
            "States": {
                "C": {"Type": "Choice", "Choices": [
                    {"And": [{"Variable": "$.n", "NumericGreaterThan": 10}, {"Not": {"Variable": "$.tier", "StringEquals": "gold"}}], "Next": "Big"},
                    {"Variable": "$.n", "NumericLessThanPath": "$.limit", "Next": "Small"}
                ]},
                "Big": {"Type": "Pass", "Result": "big", "ResultPath": "$.size", "End": true},
                "Small": {"Type": "Pass", "Result": "small", "ResultPath": "$.size", "End": true}
            }
        });
        let (_, _, view) = run(&rt, def.clone(), json!({"n": 20, "tier": "silver", "limit": 5})).await;
        assert_eq!(view.variables["size"], json!("big"));
        let (_, _, view) = run(&rt, def.clone(), json!({"n": 3, "tier": "gold", "limit": 5})).await;
        assert_eq!(view.variables["size"], json!("small"));
        let (_, _, view) = run(&rt, def, json!({"n": 20, "tier": "gold", "limit": 5})).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(err_code(&view).0, "States.NoChoiceMatched");
    }

    async fn map_records_a_failed_item_or_fails_on_partial(db) {
        let rt = runtime(db.store.clone());
        let def = |fail_on_partial: bool| json!({
            "StartAt": "M",
            "States": {"M": {
                "Type": "Map", "ItemsPath": "$.lines", "MaxConcurrency": 2, "FailOnPartial": fail_on_partial,
                "ItemSelector": {"do.$": "$$.Map.Item.Value.do", "code": "Bad", "index.$": "$$.Map.Item.Index"},
                "ItemProcessor": {"StartAt": "Line", "States": {"Line": {"Type": "Task", "Resource": "chaos", "End": true}}},
                "ResultPath": "$.results",
                "End": true
            }}
        });
        let lines = json!({"lines": [{"do": "echo"}, {"do": "fail"}, {"do": "echo"}]});
        let (_, _, view) = run(&rt, def(false), lines.clone()).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        let results = view.variables["results"].as_array().unwrap().clone();
        assert_eq!(results.len(), 3);
        assert_eq!(results[0]["index"], json!(0));
        assert_eq!(results[1]["Error"], json!("Bad"));
        assert_eq!(results[2]["index"], json!(2));
        let (_, _, view) = run(&rt, def(true), lines).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(err_code(&view).1.as_deref(), Some("Bad"));
        // Items that are not an array.
        let (_, _, view) = run(&rt, def(false), json!({"lines": {"not": "an array"}})).await;
        assert_eq!(err_code(&view).0, "States.ItemsNotArray");
    }

    async fn a_failed_parallel_branch_is_caught(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "StartAt": "P",
            "States": {
                "P": {"Type": "Parallel", "Branches": [
                    {"StartAt": "Ok", "States": {"Ok": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "echo"}, "End": true}}},
                    {"StartAt": "Broke", "States": {"Broke": {"Type": "Fail", "Error": "BranchBroke", "Cause": "no"}}}
                ], "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.err", "Next": "Recover"}], "Next": "Unreached"},
                "Unreached": {"Type": "Fail", "Error": "Unreached"},
                "Recover": {"Type": "Pass", "End": true}
            }
        });
        let (_, _, view) = run(&rt, def, json!({"x": 1})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["err"]["Error"], json!("BranchBroke"));
        assert_eq!(view.variables["x"], json!(1));
        // Both branches succeed: the result is the array of their outputs.
        let def = json!({
            "StartAt": "P",
            "States": {"P": {"Type": "Parallel", "Branches": [
                {"StartAt": "A", "States": {"A": {"Type": "Pass", "Result": 1, "End": true}}},
                {"StartAt": "B", "States": {"B": {"Type": "Pass", "Result": 2, "End": true}}}
            ], "ResultPath": "$.both", "End": true}}
        });
        let (_, _, view) = run(&rt, def, json!({})).await;
        assert_eq!(view.variables["both"], json!([1, 2]));
    }

    async fn long_waits_are_parks_that_pass_at_once_on_the_virtual_clock(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "StartAt": "Cool",
            "States": {
                "Cool": {"Type": "Wait", "Seconds": 3600, "Next": "Until"},
                "Until": {"Type": "Wait", "TimestampPath": "$.due", "Next": "Stamp"},
                "Stamp": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "echo"}, "ResultPath": null, "End": true}
            }
        });
        let due = (t0() + chrono::Duration::days(2)).to_rfc3339();
        let (_, _, view) = run(&rt, def, json!({"due": due})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(offsets(&view), vec![2 * 86_400_000], "the task ran when the timestamp fell due");
    }

    async fn an_event_wait_resumes_with_its_data_at_the_result_path(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "StartAt": "Approve",
            "States": {
                "Approve": {"Type": "Wait", "EventName": "approved", "ResultPath": "$.approval", "Next": "Done"},
                "Done": {"Type": "Succeed"}
            }
        });
        let (id, settled, view) = run(&rt, def, json!({"order": 1})).await;
        assert!(matches!(settled, Settled::Waiting(_)));
        assert_eq!(view.state, "WAITING");
        let err = rt.resume_event(&id, "other", Default::default()).await.unwrap_err();
        assert_eq!(err.code.as_str(), "SUTRA.RUNTIME.EVENT.NOT_AWAITED");
        let data = json!({"by": "ops"}).as_object().cloned().unwrap();
        rt.resume_event(&id, "approved", data).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(Value::Object(view.variables), json!({"order": 1, "approval": {"by": "ops"}}));
        let err = rt.resume_event(&id, "approved", Default::default()).await.unwrap_err();
        assert_eq!(err.code.as_str(), "SUTRA.RUNTIME.EVENT.NOT_AWAITED");
    }

    async fn a_wait_inside_a_map_iteration_resumes(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "StartAt": "M",
            "States": {"M": {
                "Type": "Map", "ItemsPath": "$.items",
                "ItemProcessor": {"StartAt": "Hold", "States": {
                    "Hold": {"Type": "Wait", "SecondsPath": "$.secs", "Next": "Work"},
                    "Work": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "echo", "secs.$": "$.secs"}, "End": true}
                }},
                "End": true
            }}
        });
        let (id, _, view) = run(&rt, def, json!({"items": [{"secs": 600}, {"secs": 60}]})).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["output"], json!([{"do": "echo", "secs": 600}, {"do": "echo", "secs": 60}]));
        let mut at = offsets(&view);
        at.sort_unstable();
        assert_eq!(at, vec![60_000, 600_000]);
        assert!(db.store.parks_of(&id).await.unwrap().is_empty());
    }

    async fn a_missing_resource_is_refused_at_deploy_with_resource_not_found(db) {
        let rt = runtime(db.store.clone());
        let def = json!({"StartAt": "T", "States": {"T": {"Type": "Task", "Resource": "nowhere", "End": true}}});
        let err = rt.deploy(TENANT, &def.to_string(), &modules()).await.unwrap_err();
        assert_eq!(err.code.as_str(), "ResourceNotFound");
    }
}

backends::store_tests! {
    async fn the_demo_flow_reserves_lines_waits_and_charges(db) {
        let rt = runtime(db.store.clone());
        let summary = sutra::cli::demo_states::run(&rt, TENANT, &modules()).await.unwrap();
        let states: Vec<&str> = summary.iter().map(|r| r.state.as_str()).collect();
        assert_eq!(states, vec!["COMPLETED", "FAILED"]);
        // #3001: TEA once, CUP three times (busy twice), POT once (caught), the charge once.
        let attempts: Vec<usize> = summary.iter().map(|r| r.attempts).collect();
        assert_eq!(attempts, vec![6, 2]);
        assert!(summary[0].took.starts_with("+2h00m"), "{summary:?}");
    }
}

backends::store_tests! {
    async fn a_from_failure_retry_resumes_at_the_failed_state_with_its_input(db) {
        let rt = runtime(db.store.clone());
        let def = json!({
            "StartAt": "Prep",
            "States": {
                "Prep": {"Type": "Pass", "Result": "x", "ResultPath": "$.prep", "Next": "T"},
                "T": {"Type": "Task", "Resource": "chaos", "Parameters": {"do": "fail", "code": "Down"}, "End": true}
            }
        });
        let (id, _, view) = run(&rt, def, json!({"order": 5})).await;
        assert_eq!(view.state, "FAILED");
        let rec = db.store.load_instance(&id).await.unwrap().unwrap();
        let failed = sutra::engine::Snapshot::from_json(&rec.snapshot).unwrap();
        let again = rt.resume_failed(&failed, TENANT).await.unwrap();
        rt.settle(&again).await.unwrap();
        let view = rt.inspect(&again).await.unwrap();
        assert_eq!(view.retry_of.as_deref(), Some(id.as_str()));
        assert_eq!(view.attempts.len(), 1);
        assert_eq!(view.attempts[0].task, "T");
        let snap = sutra::engine::Snapshot::from_json(&db.store.load_instance(&again).await.unwrap().unwrap().snapshot).unwrap();
        assert_eq!(Value::Object(snap.input), json!({"order": 5, "prep": "x"}), "it restarted from T's input");
    }

    async fn a_map_tolerates_failed_items_up_to_its_threshold(db) {
        let rt = runtime(db.store.clone());
        let def = |tolerance: Value| {
            let mut m = json!({
                "Type": "Map", "ItemsPath": "$.lines",
                "ItemSelector": {"do.$": "$$.Map.Item.Value", "code": "Bad"},
                "ItemProcessor": {"StartAt": "Line", "States": {"Line": {"Type": "Task", "Resource": "chaos", "End": true}}},
                "ResultPath": "$.results",
                "Catch": [{"ErrorEquals": ["States.ExceedToleratedFailureThreshold"], "ResultPath": "$.error", "Next": "TooMany"}],
                "End": true
            });
            for (k, v) in tolerance.as_object().unwrap() {
                m[k] = v.clone();
            }
            json!({"StartAt": "M", "States": {"M": m, "TooMany": {"Type": "Pass", "End": true}}})
        };
        let one_bad = json!({"lines": ["echo", "fail", "echo"], "n": 1, "pct": 50});
        let two_bad = json!({"lines": ["echo", "fail", "fail"], "n": 1, "pct": 50});
        // One failure tolerated: the failed item's {Error, Cause} takes its place.
        let (_, _, view) = run(&rt, def(json!({"ToleratedFailureCount": 1})), one_bad.clone()).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["results"][1]["Error"], json!("Bad"));
        assert!(view.variables.get("error").is_none());
        // Two failures: over the threshold, the Map fails with the AWS name (caught here).
        let (_, _, view) = run(&rt, def(json!({"ToleratedFailureCountPath": "$.n"})), two_bad.clone()).await;
        assert_eq!(view.state, "COMPLETED", "{view:?}");
        assert_eq!(view.variables["error"]["Error"], json!("States.ExceedToleratedFailureThreshold"));
        // A percentage: 1 of 3 (33 %) is within 50 %, 2 of 3 is over.
        let (_, _, view) = run(&rt, def(json!({"ToleratedFailurePercentagePath": "$.pct"})), one_bad).await;
        assert!(view.variables.get("error").is_none(), "{view:?}");
        let (_, _, view) = run(&rt, def(json!({"ToleratedFailurePercentage": 50, "FailOnPartial": false})), two_bad.clone()).await;
        assert_eq!(view.variables["error"]["Error"], json!("States.ExceedToleratedFailureThreshold"));
        // Zero tolerated is Step Functions' default: the first failure fails the Map.
        let (_, _, view) = run(&rt, def(json!({"ToleratedFailureCount": 0, "MaxConcurrencyPath": "$.n"})), two_bad.clone()).await;
        assert_eq!(view.variables["error"]["Error"], json!("States.ExceedToleratedFailureThreshold"));
        // A path to something that is no count is States.Runtime.
        let (_, _, view) = run(&rt, def(json!({"MaxConcurrencyPath": "$.lines", "ToleratedFailureCount": 5})), two_bad).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(err_code(&view).0, "States.Runtime");
    }

    async fn a_retrier_that_names_a_non_retryable_code_applies(db) {
        let rt = runtime(db.store.clone());
        // `do: nope` is refused by the guest with SUTRA.TASK.VALIDATION (not retryable by default).
        let def = |errors: Value| json!({
            "StartAt": "T",
            "States": {"T": {
                "Type": "Task", "Resource": "chaos", "Parameters": {"do": "nope"},
                "Retry": [{"ErrorEquals": errors, "IntervalSeconds": 1, "MaxAttempts": 2}],
                "End": true
            }}
        });
        let (_, _, view) = run(&rt, def(json!(["SUTRA.TASK.VALIDATION"])), json!({})).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(offsets(&view), vec![0, 1_000, 3_000], "named explicitly, it is retried");
        let (_, _, view) = run(&rt, def(json!(["States.ALL"])), json!({})).await;
        assert_eq!(view.attempts.len(), 1, "a wildcard does not retry a non-retryable code");
    }
}
