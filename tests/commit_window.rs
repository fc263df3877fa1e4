//! Commit at the wait, and alarms for short waits, on SQLite and PostgreSQL:
//! quick attempts are committed with their outcomes in one transaction, a slow
//! one is durable while it runs, and a short backoff fires from this runtime's
//! alarm — or, if the runtime died, from any poller once its claim lapses.

#[path = "common/backends.rs"]
mod backends;
mod common;

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use sutra::config::Config;
use sutra::runtime::{Runtime, RuntimeOptions, Settled, StartRequest};
use sutra::store::{AnyStore, InstanceRecord, Store};
use sutra::time::IsoDuration;

const TENANT: &str = "acme";

/// On the system clock (alarms only exist there), under `owner`.
fn runtime(store: AnyStore, config: Config, owner: &str) -> Runtime<AnyStore> {
    let mut opts = RuntimeOptions::new(config);
    opts.owner = owner.to_string();
    Runtime::new(store, opts).unwrap()
}

fn modules() -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    m.insert("chaos".to_string(), common::guest_bytes("chaos"));
    m
}

/// start → each of `tasks` (chaos, with its extension) in sequence → end.
fn chain(tasks: &[&str]) -> String {
    let mut body = String::from(r#"    <bpmn:startEvent id="start"/>"#);
    let mut prev = "start".to_string();
    for (i, ext) in tasks.iter().enumerate() {
        body.push_str(&format!(
            r#"
    <bpmn:sequenceFlow id="f{i}" sourceRef="{prev}" targetRef="T{i}"/>
    <bpmn:serviceTask id="T{i}" implementation="registered:chaos">
      <bpmn:extensionElements>{ext}</bpmn:extensionElements>
    </bpmn:serviceTask>"#
        ));
        prev = format!("T{i}");
    }
    body.push_str(&format!(
        r#"
    <bpmn:sequenceFlow id="fend" sourceRef="{prev}" targetRef="end"/>
    <bpmn:endEvent id="end"/>"#
    ));
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="defs" targetNamespace="https://example.com">
  <bpmn:process id="p" isExecutable="true">
{body}
  </bpmn:process>
</bpmn:definitions>"#
    )
}

fn request(vars: Value) -> StartRequest {
    StartRequest {
        tenant: TENANT.into(),
        process_id: "p".into(),
        variables: vars.as_object().cloned().unwrap_or_else(Map::new),
        ..StartRequest::default()
    }
}

async fn record(store: &AnyStore, id: &str) -> InstanceRecord {
    store.load_instance(id).await.unwrap().expect("instance")
}

fn window(d: &str) -> Config {
    Config {
        commit_window: IsoDuration::parse(d).unwrap(),
        ..Config::default()
    }
}

backends::store_tests! {
    async fn a_quick_task_is_committed_with_its_outcome_in_one_transaction(db) {
        let rt = runtime(db.store.clone(), Config::default(), "r1");
        rt.deploy(TENANT, &chain(&[""]), &modules()).await.unwrap();
        let id = rt.start(request(json!({"do": "echo"}))).await.unwrap();
        let rec = record(&db.store, &id).await;
        assert_eq!(rec.state, "COMPLETED");
        assert_eq!(rec.version, 1, "creation, attempt and end in one commit");
        assert_eq!(db.store.attempts(&id).await.unwrap().len(), 1);
        assert!(db.store.parks_of(&id).await.unwrap().is_empty());
    }

    async fn a_chain_of_quick_tasks_reaches_its_end_in_one_transaction(db) {
        let rt = runtime(db.store.clone(), Config::default(), "r1");
        rt.deploy(TENANT, &chain(&["", "", ""]), &modules()).await.unwrap();
        let id = rt.start(request(json!({"do": "echo"}))).await.unwrap();
        let rec = record(&db.store, &id).await;
        assert_eq!((rec.state.as_str(), rec.version), ("COMPLETED", 1));
        let nodes: Vec<String> = db.store.attempts(&id).await.unwrap().into_iter().map(|a| a.node).collect();
        assert_eq!(nodes, vec!["T0", "T1", "T2"]);
    }

    async fn a_zero_window_commits_before_every_attempt(db) {
        let rt = runtime(db.store.clone(), window("PT0S"), "r1");
        rt.deploy(TENANT, &chain(&[""]), &modules()).await.unwrap();
        let id = rt.start(request(json!({"do": "echo"}))).await.unwrap();
        let rec = record(&db.store, &id).await;
        assert_eq!((rec.state.as_str(), rec.version), ("COMPLETED", 2), "the attempt park, then the outcome");
    }

    async fn an_attempt_outliving_the_window_is_durable_while_it_runs(db) {
        let rt = runtime(db.store.clone(), window("PT0.02S"), "r1");
        rt.deploy(TENANT, &chain(&[""]), &modules()).await.unwrap();
        let id = "slow-instance".to_string();
        let start = {
            let rt = rt.clone();
            let mut req = request(json!({"do": "sleep", "ms": 1500}));
            req.id = Some(id.clone());
            tokio::spawn(async move { rt.start(req).await })
        };
        // The instance becomes visible while its attempt still sleeps.
        let deadline = Instant::now() + Duration::from_secs(30);
        let seen = loop {
            if let Some(rec) = db.store.load_instance(&id).await.unwrap() {
                break rec;
            }
            assert!(Instant::now() < deadline, "the instance never became visible");
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        assert_eq!(seen.state, "RUNNING");
        let parks = db.store.parks_of(&id).await.unwrap();
        assert_eq!(parks.iter().map(|p| p.kind.as_str()).collect::<Vec<_>>(), vec!["attempt"]);
        assert!(db.store.attempts(&id).await.unwrap().is_empty(), "the attempt has not ended yet");
        assert_eq!(start.await.unwrap().unwrap(), id);
        let rec = record(&db.store, &id).await;
        assert_eq!((rec.state.as_str(), rec.version), ("COMPLETED", 2));
    }

    async fn a_short_backoff_fires_from_the_alarm_at_its_instant_never_before(db) {
        let rt = runtime(db.store.clone(), Config::default(), "r1");
        let retry = r#"<q:retry maxAttempts="3" initialDelay="PT0.2S" backoffCoefficient="1"/>"#;
        rt.deploy(TENANT, &chain(&[retry]), &modules()).await.unwrap();
        let id = rt.start(request(json!({"do": "fail", "until": 2}))).await.unwrap();
        let rec = record(&db.store, &id).await;
        assert_eq!((rec.state.as_str(), rec.version), ("WAITING", 1), "the failure and its retry park in one commit");
        let Settled::Terminal(rec) = rt.settle(&id).await.unwrap() else { panic!("not terminal") };
        assert_eq!((rec.state.as_str(), rec.version), ("COMPLETED", 2), "the fire, the attempt and the end in one commit");
        let attempts = db.store.attempts(&id).await.unwrap();
        assert_eq!(attempts.len(), 2);
        assert!(attempts[1].started_at - attempts[0].ended_at >= 200, "fired before its due time: {attempts:?}");
    }

    async fn many_backoffs_due_together_each_fire_once_from_the_alarm_never_before(db) {
        // The alarm thread hands fires over in batches (fires.rs): every
        // one of a batch still fires, once, and not before its instant.
        let rt = runtime(db.store.clone(), Config::default(), "r1");
        let retry = r#"<q:retry maxAttempts="3" initialDelay="PT0.2S" backoffCoefficient="1"/>"#;
        rt.deploy(TENANT, &chain(&[retry]), &modules()).await.unwrap();
        let mut starts = tokio::task::JoinSet::new();
        for _ in 0..40 {
            let rt = rt.clone();
            starts.spawn(async move { rt.start(request(json!({"do": "fail", "until": 2}))).await });
        }
        let mut ids = Vec::new();
        while let Some(started) = starts.join_next().await {
            ids.push(started.unwrap().unwrap());
        }
        for id in &ids {
            let Settled::Terminal(rec) = rt.settle(id).await.unwrap() else { panic!("{id} not terminal") };
            assert_eq!((rec.state.as_str(), rec.version), ("COMPLETED", 2), "{id}: one fire, one commit");
            let attempts = db.store.attempts(id).await.unwrap();
            assert_eq!(attempts.len(), 2, "{id}: {attempts:?}");
            let gap = attempts[1].started_at - attempts[0].ended_at;
            assert!(gap >= 200, "{id} fired before its due time: {attempts:?}");
            // A poller could only take it once the claim lapsed (due + 1 s,
            // 1.2 s after the failure).
            assert!(gap < 1_200, "{id} was not fired by its alarm: the retry ran {gap} ms after the failure");
        }
    }

    async fn a_dead_runtimes_short_wait_is_fired_by_another_once_its_claim_lapses(db) {
        let first = runtime(db.store.clone(), Config::default(), "dies");
        let retry = r#"<q:retry maxAttempts="3" initialDelay="PT0.1S" backoffCoefficient="1"/>"#;
        first.deploy(TENANT, &chain(&[retry]), &modules()).await.unwrap();
        let id = first.start(request(json!({"do": "fail", "until": 2}))).await.unwrap();
        // The runtime that armed the retry (and its alarm) goes away before it is due.
        drop(first);
        let second = runtime(db.store.clone(), Config::default(), "survives");
        let Settled::Terminal(rec) = second.settle(&id).await.unwrap() else { panic!("not terminal") };
        assert_eq!(rec.state, "COMPLETED");
        let attempts = db.store.attempts(&id).await.unwrap();
        assert_eq!(attempts.len(), 2);
        let gap = attempts[1].started_at - attempts[0].ended_at;
        assert!(gap >= 1_100, "the claim (due + 1 s) was not honoured: the retry ran {gap} ms after the failure");
    }
}
