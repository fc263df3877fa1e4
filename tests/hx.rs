//! HX workflows end to end on SQLite and PostgreSQL, with the virtual clock:
//! the HX loader, the same engine and runtime as BPMN, real `chaos` guests.
//! Retry delays and jitter, retry classes, per-attempt timeouts, guards and
//! dead paths, error edges, compensation (the unwind) and the node states.

#[path = "common/backends.rs"]
mod backends;
mod common;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use sutra::config::Config;
use sutra::runtime::{InstanceView, Runtime, RuntimeOptions, StartRequest};
use sutra::store::{AnyStore, Store};

const TENANT: &str = "acme";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap()
}

fn runtime(store: AnyStore) -> Runtime<AnyStore> {
    let config = Config {
        audit_sql: true,
        ..Config::default()
    };
    Runtime::new(store, RuntimeOptions::new(config).with_virtual_clock(t0())).unwrap()
}

fn modules() -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    m.insert("chaos".to_string(), common::guest_bytes("chaos"));
    m
}

/// `<workflow id="w">{body}</workflow>`.
fn wf(body: &str) -> String {
    format!("<?xml version=\"1.0\"?>\n<workflow id=\"w\">\n{body}\n</workflow>")
}

async fn start(rt: &Runtime<AnyStore>, src: &str, vars: Value) -> String {
    rt.deploy(TENANT, src, &modules()).await.unwrap();
    let process = sutra::dialect::load(src).definitions.processes[0]
        .id
        .clone();
    rt.start(StartRequest {
        tenant: TENANT.into(),
        process_id: process,
        variables: vars.as_object().cloned().unwrap(),
        ..StartRequest::default()
    })
    .await
    .unwrap()
}

async fn run(rt: &Runtime<AnyStore>, src: &str, vars: Value) -> InstanceView {
    let id = start(rt, src, vars).await;
    rt.settle(&id).await.unwrap();
    rt.inspect(&id).await.unwrap()
}

fn offsets(view: &InstanceView) -> Vec<i64> {
    view.attempts
        .iter()
        .map(|a| (a.at - view.started_at).num_milliseconds())
        .collect()
}

fn gaps(view: &InstanceView) -> Vec<i64> {
    offsets(view).windows(2).map(|w| w[1] - w[0]).collect()
}

/// (task, outcome) of every attempt, in order.
fn trail(view: &InstanceView) -> Vec<(String, String)> {
    view.attempts
        .iter()
        .map(|a| (a.task.clone(), a.outcome.clone()))
        .collect()
}

fn state(view: &InstanceView, node: &str) -> String {
    view.nodes
        .get(node)
        .cloned()
        .unwrap_or_else(|| format!("<none> in {:?}", view.nodes))
}

fn t(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// a → b → c → d, each of a, b, c compensated by u<a|b|c>; every task is chaos.
const CHAIN: &str = r#"
  <node id="a" type="task" impl="chaos"/>
  <node id="b" type="task" impl="chaos"/>
  <node id="c" type="task" impl="chaos"/>
  <node id="d" type="task" impl="chaos"/>
  <node id="ua" type="task" impl="chaos" compensates="a"/>
  <node id="ub" type="task" impl="chaos" compensates="b"/>
  <node id="uc" type="task" impl="chaos" compensates="c"/>
  <edges>
    <edge from="a" to="b"/>
    <edge from="b" to="c" type="data"/>
    <edge from="c" to="d"/>
    <edge from="a" to="ua" type="compensation"/>
    <edge from="b" to="ub" type="compensation"/>
    <edge from="c" to="uc" type="compensation"/>
  </edges>"#;

fn chain_vars(by_task: Value) -> Value {
    json!({ "do": "echo", "by-task": by_task })
}

backends::store_tests! {
    async fn delays_without_jitter_match_the_formula(db) {
        let rt = runtime(db.store.clone());
        for (backoff, extra, expect) in [
            // initialDelay × multiplier^(n−2): 1 s, 3 s, 9 s.
            ("exponential", r#"multiplier="3""#, vec![1000, 3000, 9000]),
            // clamped to maxDelay.
            ("exponential", r#"multiplier="3" maxDelay="PT5S""#, vec![1000, 3000, 5000]),
            ("fixed", "", vec![1000, 1000, 1000]),
            // initialDelay × (n−1).
            ("linear", "", vec![1000, 2000, 3000]),
        ] {
            let src = wf(&format!(
                r#"<node id="t" type="task" impl="chaos"><retry maxAttempts="4" backoff="{backoff}" initialDelay="PT1S" jitter="false" {extra}/></node>"#
            ));
            let view = run(&rt, &src, json!({"do": "fail", "code": "DOWN"})).await;
            assert_eq!(view.state, "FAILED", "{backoff} {extra}");
            assert_eq!(gaps(&view), expect, "{backoff} {extra}");
            assert_eq!(view.error.unwrap().code, "SUTRA.RUNTIME.RETRY.EXHAUSTED");
        }
    }

    async fn default_full_jitter_stays_within_the_delay_and_a_seed_reproduces_it(db) {
        let src = wf(r#"<node id="t" type="task" impl="chaos"><retry maxAttempts="6" initialDelay="PT10S"/></node>"#);
        let base = [10_000i64, 20_000, 40_000, 80_000, 160_000];
        let mut runs = Vec::new();
        for _ in 0..2 {
            let opts = RuntimeOptions::new(Config::default()).with_virtual_clock(t0()).with_seed(7);
            let rt = Runtime::new(db.store.clone(), opts).unwrap();
            let view = run(&rt, &src, json!({"do": "fail"})).await;
            assert_eq!(view.attempts.len(), 6);
            let g = gaps(&view);
            for (gap, max) in g.iter().zip(base) {
                assert!((0..=max).contains(gap), "gap {gap} outside [0, {max}]: {g:?}");
            }
            assert_ne!(g, base.to_vec(), "jitter is on by default");
            runs.push(g);
        }
        assert_eq!(runs[0], runs[1], "the same seed gives the same gaps");
        let opts = RuntimeOptions::new(Config::default()).with_virtual_clock(t0()).with_seed(8);
        let rt = Runtime::new(db.store.clone(), opts).unwrap();
        let other = gaps(&run(&rt, &src, json!({"do": "fail"})).await);
        assert_ne!(other, runs[0], "another seed, other gaps");
    }

    async fn retry_on_transient_retries_a_trap_but_not_invalid_input(db) {
        let rt = runtime(db.store.clone());
        let src = wf(r#"<node id="t" type="task" impl="chaos"><retry maxAttempts="3" initialDelay="PT1S" jitter="false" retryOn="transient"/></node>"#);
        let view = run(&rt, &src, json!({"do": "panic"})).await;
        assert_eq!(view.attempts.len(), 3, "a trap is transient: retried");
        assert_eq!(view.error.unwrap().cause.unwrap().code, "SUTRA.TASK.TRAP");
        for input in [
            json!({"do": "fail", "code": "SUTRA.TASK.VALIDATION"}),
            json!({"do": "fail", "code": "BAD_ORDER", "class": "invalid_input"}),
        ] {
            let view = run(&rt, &src, input.clone()).await;
            assert_eq!(view.attempts.len(), 1, "invalid_input is not in retryOn: {input}");
            assert_eq!(view.state, "FAILED");
        }
        // retryOn names invalid_input: even Sutra's own non-retryable code is retried.
        let src = wf(r#"<node id="t" type="task" impl="chaos"><retry maxAttempts="2" initialDelay="PT1S" retryOn="invalid_input"/></node>"#);
        let view = run(&rt, &src, json!({"do": "fail", "code": "SUTRA.TASK.VALIDATION"})).await;
        assert_eq!(view.attempts.len(), 2);
    }

    async fn on_timeout_retry_fail_and_skip(db) {
        let rt = runtime(db.store.clone());
        let task = |on: &str, retry: &str| wf(&format!(
            r#"<node id="slow" type="task" impl="chaos"><timeout duration="PT0.2S" onTimeout="{on}"/>{retry}</node>
<node id="next" type="task" impl="chaos"/>
<edges><edge from="slow" to="next"/></edges>"#
        ));
        let vars = json!({"do": "echo", "by-task": {"slow": {"do": "sleep", "ms": 30000}}});
        let retry = r#"<retry maxAttempts="2" initialDelay="PT1S" retryOn="timeout"/>"#;

        let view = run(&rt, &task("retry", retry), vars.clone()).await;
        assert_eq!(trail(&view), t(&[("slow", "failed"), ("slow", "failed")]), "a timeout is a failed attempt the policy retries");
        assert!(view.attempts.iter().all(|a| a.code.as_deref() == Some("SUTRA.TASK.DEADLINE_EXCEEDED")));
        assert_eq!(view.state, "FAILED");

        let view = run(&rt, &task("fail", retry), vars.clone()).await;
        assert_eq!(trail(&view), t(&[("slow", "failed")]), "onTimeout=fail: no retry");
        let err = view.error.unwrap();
        assert!(err.message.contains("onTimeout"), "{}", err.message);
        assert_eq!(err.cause.unwrap().code, "SUTRA.TASK.DEADLINE_EXCEEDED");
        assert_eq!(state(&run(&rt, &task("fail", ""), vars.clone()).await, "slow"), "FAILED");

        let view = run(&rt, &task("skip", ""), vars).await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(trail(&view), t(&[("slow", "failed"), ("next", "completed")]));
        assert_eq!(state(&view, "slow"), "SKIPPED");
        assert_eq!(state(&view, "next"), "SUCCEEDED");
    }

    async fn compensators_run_newest_first_and_the_instance_is_compensated(db) {
        let rt = runtime(db.store.clone());
        let vars = chain_vars(json!({
            "a": {"do": "emit", "output": {"reservation": "R-1"}},
            "b": {"do": "emit", "output": {"charge": "C-1"}},
            "c": {"do": "emit", "output": {"parcel": "P-1"}},
            "d": {"do": "fail", "code": "NO_COURIER"},
        }));
        let view = run(&rt, &wf(CHAIN), vars).await;
        assert_eq!(view.state, "COMPENSATED");
        assert_eq!(
            trail(&view),
            t(&[("a", "completed"), ("b", "completed"), ("c", "completed"), ("d", "failed"),
                ("uc", "completed"), ("ub", "completed"), ("ua", "completed")])
        );
        for n in ["a", "b", "c"] {
            assert_eq!(state(&view, n), "COMPENSATED");
        }
        assert_eq!(state(&view, "d"), "FAILED");
        for n in ["ua", "ub", "uc"] {
            assert_eq!(state(&view, n), "SUCCEEDED");
        }
        let err = view.error.unwrap();
        assert_eq!(err.code, "SUTRA.RUNTIME.TASK_FAILED", "the error keeps the original failure");
        assert_eq!(err.cause.unwrap().code, "NO_COURIER");
        assert!(err.compensation_failures.is_empty());
        // The last compensator (ua, echoing its input) saw a's id and recorded output.
        assert_eq!(view.variables["compensating"], json!({"node": "a", "output": {"reservation": "R-1"}}));
        let h = rt.history(&view.instance).await.unwrap();
        let kinds: Vec<&str> = h.entries.iter().filter_map(|e| e["kind"].as_str()).collect();
        for k in ["unwind_started", "compensation_started", "compensated", "instance_compensated"] {
            assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        }
        assert!(db.store.parks_of(&view.instance).await.unwrap().is_empty());
    }

    async fn a_failing_compensator_does_not_stop_the_unwind_and_the_instance_fails(db) {
        let rt = runtime(db.store.clone());
        let vars = chain_vars(json!({
            "d": {"do": "fail", "code": "NO_COURIER"},
            "ub": {"do": "fail", "code": "REFUND_DOWN"},
        }));
        let view = run(&rt, &wf(CHAIN), vars).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(
            trail(&view),
            t(&[("a", "completed"), ("b", "completed"), ("c", "completed"), ("d", "failed"),
                ("uc", "completed"), ("ub", "compensation_failed"), ("ua", "completed")])
        );
        let ub = view.attempts.iter().find(|a| a.task == "ub").unwrap();
        assert_eq!(ub.code.as_deref(), Some("SUTRA.RUNTIME.COMPENSATION.FAILED"));
        assert_eq!(state(&view, "c"), "COMPENSATED");
        assert_eq!(state(&view, "b"), "SUCCEEDED", "not undone");
        assert_eq!(state(&view, "ub"), "FAILED");
        assert_eq!(state(&view, "a"), "COMPENSATED", "the unwind went on");
        let err = view.error.unwrap();
        assert_eq!(err.cause.unwrap().code, "NO_COURIER", "the error keeps the original failure");
        assert_eq!(err.compensation_failures.len(), 1);
        let f = &err.compensation_failures[0];
        assert_eq!((f.node.as_str(), f.compensator.as_str(), f.code.as_str()), ("b", "ub", "SUTRA.RUNTIME.COMPENSATION.FAILED"));
        assert_eq!(f.cause.as_ref().unwrap().code, "REFUND_DOWN");
        let h = rt.history(&view.instance).await.unwrap();
        let failed: Vec<&Value> = h.entries.iter().filter(|e| e["kind"] == "compensation_failed").collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0]["data"]["code"], "SUTRA.RUNTIME.COMPENSATION.FAILED");
    }

    async fn nothing_to_compensate_fails_as_before(db) {
        let rt = runtime(db.store.clone());
        let view = run(&rt, &wf(CHAIN), chain_vars(json!({"a": {"do": "fail", "code": "EARLY"}}))).await;
        assert_eq!(view.state, "FAILED");
        assert_eq!(trail(&view), t(&[("a", "failed")]));
        assert_eq!(state(&view, "a"), "FAILED");
        assert!(!view.nodes.contains_key("b"), "never reached: {:?}", view.nodes);
    }

    async fn an_error_edge_handles_a_failure_without_unwinding(db) {
        let rt = runtime(db.store.clone());
        let src = wf(r#"
  <node id="a" type="task" impl="chaos"/>
  <node id="ua" type="task" impl="chaos" compensates="a"/>
  <node id="b" type="task" impl="chaos"/>
  <node id="c" type="task" impl="chaos"/>
  <node id="handle" type="task" impl="chaos"/>
  <edges>
    <edge from="a" to="ua" type="compensation"/>
    <edge from="a" to="b"/>
    <edge from="b" to="c"/>
    <edge from="b" to="handle" type="error"/>
  </edges>"#);
        let view = run(&rt, &src, chain_vars(json!({"b": {"do": "fail", "code": "DECLINED"}}))).await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(trail(&view), t(&[("a", "completed"), ("b", "failed"), ("handle", "completed")]));
        assert_eq!(state(&view, "a"), "SUCCEEDED", "no unwind");
        assert_eq!(state(&view, "b"), "FAILED");
        assert_eq!(state(&view, "c"), "SKIPPED", "b's control edge is dead");
        assert_eq!(state(&view, "handle"), "SUCCEEDED");
        assert!(!view.nodes.contains_key("ua"));
        assert_eq!(view.variables["error"]["node"], "b");
        assert_eq!(view.variables["error"]["cause"]["code"], "DECLINED");
        // When b succeeds, the handler is skipped and c runs.
        let view = run(&rt, &src, chain_vars(json!({}))).await;
        assert_eq!(trail(&view), t(&[("a", "completed"), ("b", "completed"), ("c", "completed")]));
        assert_eq!(state(&view, "handle"), "SKIPPED");
    }

    async fn guards_branch_and_dead_paths_skip_or_fail_loudly(db) {
        let rt = runtime(db.store.clone());
        let src = |join: &str| wf(&format!(r#"
  <node id="a" type="task" impl="chaos"/>
  <node id="big" type="task" impl="chaos"/>
  <node id="small" type="pass"/>
  <node id="z" type="task" impl="chaos" join="{join}"/>
  <edges>
    <edge from="a" to="big" when="amount > 100"/>
    <edge from="a" to="small" when="amount &lt;= 100"/>
    <edge from="big" to="z"/>
    <edge from="small" to="z"/>
  </edges>"#));
        let view = run(&rt, &src("any"), json!({"do": "echo", "amount": 50})).await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!(trail(&view), t(&[("a", "completed"), ("z", "completed")]));
        assert_eq!(state(&view, "big"), "SKIPPED");
        assert_eq!(state(&view, "small"), "SUCCEEDED");
        assert_eq!(state(&view, "z"), "SUCCEEDED");
        let view = run(&rt, &src("any"), json!({"do": "echo", "amount": 500})).await;
        assert_eq!(trail(&view), t(&[("a", "completed"), ("big", "completed"), ("z", "completed")]));
        // join="all" after an if/else can never run: refused at deploy (HX-2008).
        let err = rt.deploy(TENANT, &src("all"), &modules()).await.unwrap_err();
        assert_eq!(err.code.as_str(), "HX-2008", "{err}");
        // Guards that are not each other's negation load; where one branch
        // is dead and the other not, the join cannot run as written: FAILED, named.
        let overlapping = src("all").replace("amount &lt;= 100", "amount > 50");
        let view = run(&rt, &overlapping, json!({"do": "echo", "amount": 70})).await;
        assert_eq!(view.state, "FAILED");
        let err = view.error.unwrap();
        assert_eq!(err.code, "SUTRA.RUNTIME.JOIN.DEAD_EDGE");
        assert!(err.message.contains("`z`") && err.message.contains("big->z"), "{}", err.message);
        // Every guard false: the whole branch is skipped, the instance completes.
        let src = wf(r#"
  <node id="a" type="task" impl="chaos"/>
  <node id="b" type="task" impl="chaos"/>
  <node id="c" type="task" impl="chaos"/>
  <edges><edge from="a" to="b" when="false"/><edge from="b" to="c"/></edges>"#);
        let view = run(&rt, &src, json!({"do": "echo"})).await;
        assert_eq!(view.state, "COMPLETED");
        assert_eq!((state(&view, "b"), state(&view, "c")), ("SKIPPED".into(), "SKIPPED".into()));
    }

    async fn parallel_entries_and_a_durable_wait(db) {
        let rt = runtime(db.store.clone());
        let src = wf(r#"
  <node id="x" type="task" impl="chaos"/>
  <node id="y" type="task" impl="chaos"/>
  <node id="cool" type="wait" duration="PT1H"/>
  <node id="z" type="task" impl="chaos"/>
  <edges>
    <edge from="x" to="cool"/>
    <edge from="cool" to="z"/>
    <edge from="y" to="z"/>
  </edges>"#);
        let id = start(&rt, &src, json!({"do": "echo"})).await;
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "WAITING");
        assert_eq!(state(&view, "cool"), "RUNNING");
        let parks = db.store.parks_of(&id).await.unwrap();
        assert!(parks.iter().any(|p| p.kind == "timer"), "the wait is a park row: {parks:?}");
        rt.settle(&id).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "COMPLETED");
        let mut first: Vec<&str> = view.attempts[..2].iter().map(|a| a.task.as_str()).collect();
        first.sort_unstable();
        assert_eq!(first, vec!["x", "y"], "both entry nodes start at once");
        assert_eq!(offsets(&view)[2], 3_600_000, "z ran after the hour");
    }

    async fn cancel_marks_the_waiting_node_cancelled(db) {
        let rt = runtime(db.store.clone());
        let src = wf(r#"
  <node id="a" type="task" impl="chaos"/>
  <node id="ua" type="task" impl="chaos" compensates="a"/>
  <node id="cool" type="wait" duration="PT1H"/>
  <edges><edge from="a" to="cool"/><edge from="a" to="ua" type="compensation"/></edges>"#);
        let id = start(&rt, &src, json!({"do": "echo"})).await;
        rt.cancel(&id, Some("changed my mind".into())).await.unwrap();
        let view = rt.inspect(&id).await.unwrap();
        assert_eq!(view.state, "TERMINATED", "a cancel is not a failure: no unwind");
        assert_eq!(state(&view, "cool"), "CANCELLED");
        assert_eq!(state(&view, "a"), "SUCCEEDED");
        assert!(db.store.parks_of(&id).await.unwrap().is_empty());
    }

    async fn compensated_instances_are_stored_listed_and_swept_like_completed_ones(db) {
        let rt = runtime(db.store.clone());
        let comp = run(&rt, &wf(CHAIN), chain_vars(json!({"d": {"do": "fail"}}))).await;
        assert_eq!(comp.state, "COMPENSATED");
        let failed = run(&rt, &wf(CHAIN), chain_vars(json!({"a": {"do": "fail"}}))).await;
        assert_eq!(failed.state, "FAILED");
        let rec = db.store.load_instance(&comp.instance).await.unwrap().unwrap();
        assert_eq!(rec.state, "COMPENSATED");
        assert!(rec.ended_at.is_some());
        // Reopened, the snapshot still reads (node states included).
        let again = runtime(db.reopen().await).inspect(&comp.instance).await.unwrap();
        assert_eq!(again.nodes, comp.nodes);
        // Retention sweeps COMPENSATED like COMPLETED; FAILED stays.
        let later = Runtime::new(
            db.store.clone(),
            RuntimeOptions::new(Config::default()).with_virtual_clock(t0() + chrono::Duration::days(8)),
        )
        .unwrap();
        assert_eq!(later.sweep_once().await.unwrap(), 1);
        assert!(later.inspect(&comp.instance).await.is_err());
        assert_eq!(later.inspect(&failed.instance).await.unwrap().state, "FAILED");
    }

    async fn the_demo_payment_unwinds_in_reverse_order(db) {
        let rt = runtime(db.store.clone());
        let (text, rows) = sutra::cli::demo_hx::payment(&rt, "demo", &common::guest_bytes("chaos")).await.unwrap();
        let states: Vec<&str> = rows.iter().map(|r| r.state.as_str()).collect();
        assert_eq!(states, ["COMPLETED", "COMPENSATED"], "one summary row per payment");
        assert!(text.contains("state COMPLETED"), "{text}");
        assert!(text.contains("state COMPENSATED"), "{text}");
        let second = &text[text.find("#2002").unwrap()..];
        let refund = second.find("refund: compensating capture").expect("refund ran");
        let release = second.find("release: compensating reserve").expect("release ran");
        assert!(refund < release, "the newest completion is undone first:\n{second}");
        assert!(second.contains("reserve=COMPENSATED capture=COMPENSATED ship=FAILED"), "{second}");
    }
}

/// The fixtures under tests/fixtures/hx: valid ones load clean, each invalid
/// one is refused with its code at its line:column.
#[test]
fn fixtures_load_or_are_refused_with_code_and_position() {
    let dir = common::root().join("tests/fixtures/hx");
    for entry in std::fs::read_dir(dir.join("valid")).unwrap() {
        let path = entry.unwrap().path();
        let loaded = sutra::dialect::load_bytes(&std::fs::read(&path).unwrap());
        assert!(loaded.ok(), "{}: {:?}", path.display(), loaded.diagnostics);
        assert_eq!(
            loaded.definitions.processes[0].dialect,
            sutra::model::Dialect::Hx
        );
    }
    for (file, code, line, column) in [
        ("hx-3301.hx.xml", "HX-3301", 2, 3),
        ("hx-2004.hx.xml", "HX-2004", 4, 3),
        ("hx-2005.hx.xml", "HX-2005", 6, 5),
        ("hx-3401.hx.xml", "HX-3401", 3, 5),
        ("hx-2003.hx.xml", "HX-2003", 8, 5),
        ("hx-3001.hx.xml", "HX-3001", 2, 3),
        ("hx-2008.hx.xml", "HX-2008", 5, 3),
        ("dtd.hx.xml", "SUTRA.CONFIG.XML.DTD_FORBIDDEN", 2, 1),
    ] {
        let bytes = std::fs::read(dir.join("invalid").join(file)).unwrap();
        let loaded = sutra::dialect::load_bytes(&bytes);
        let errors: Vec<(&str, u32, u32)> = loaded
            .errors()
            .map(|d| (d.code.as_str(), d.line, d.column))
            .collect();
        assert_eq!(errors, vec![(code, line, column)], "{file}");
    }
}
