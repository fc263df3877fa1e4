//! Batch operations (issue 35 item 4), through a real `sutra serve` on
//! SQLite and PostgreSQL: a retry over a filter makes exactly one retry of
//! each FAILED instance, at most `sutra.batch.rate` a second, and a kill -9
//! between two rounds loses and repeats nothing; a cancel over ids cancels
//! the live ones, skips an ended one and fails another tenant's; progress
//! and per-item outcomes are read back; a running batch stops when cancelled;
//! bad requests are refused with their codes.

mod common;
#[path = "common/server.rs"]
mod server;

use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{Api, Db, Server};
use std::time::{Duration, Instant};

const HEADER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">"#;

/// start → T (chaos) → end.
fn one_task() -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// start → wait for message `go` → end.
fn waits() -> String {
    format!(
        r#"{HEADER}
  <bpmn:message id="Go" name="go"/>
  <bpmn:process id="later" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Go"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

fn id(v: &Value) -> String {
    v["instance"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string()
}

/// Polls the batch until `done` holds of it (the server carries batches out
/// on its own; a bounded wait for a state, never a sleep standing in for one).
async fn batch_until(api: &Api, batch: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, b) = api.get(&format!("/v1/batches/{batch}")).await;
        assert_eq!(status, StatusCode::OK, "{b}");
        if done(&b) {
            return b;
        }
        assert!(Instant::now() < deadline, "{what}: {b}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn items(api: &Api, batch: &str) -> Vec<Value> {
    let (status, body) = api.get(&format!("/v1/batches/{batch}/items")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["items"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_batch_retries_each_failed_instance_once_at_its_rate_across_a_kill() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[("SUTRA_BATCH_RATE", "2")]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let (status, body) = acme
            .deploy(&one_task(), &[("chaos", common::guest_bytes("chaos"))])
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let mut failed = Vec::new();
        for n in 0..5 {
            let (_, v) = acme
                .start("order", json!({"do": "fail", "code": "BAD", "n": n}))
                .await;
            assert_eq!(v["state"], "FAILED", "{v}");
            failed.push(id(&v));
        }
        let (_, ok) = acme.start("order", json!({"do": "echo"})).await;
        assert_eq!(ok["state"], "COMPLETED");

        let (status, batch) = acme
            .post(
                "/v1/batches",
                json!({"action": "retry", "filter": {"state": "FAILED", "process": "order"}}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{batch}");
        assert_eq!(batch["total"], 5, "{batch}");
        let bid = batch["id"].as_str().unwrap().to_string();
        // The first round carries out two (the rate), then waits a second.
        let first = batch_until(&acme, &bid, "the first round", |b| {
            b["counts"]["SUCCEEDED"] == 2
        })
        .await;
        assert_eq!(first["state"], "RUNNING", "{first}");
        assert_eq!(first["counts"]["PENDING"], 3, "{first}");

        // Killed between two rounds: the next server carries on from there.
        let srv = srv.restart_at("2030-01-01T00:01:00Z").await;
        let acme = server::Api {
            base: srv.url.clone(),
            ..acme
        };
        let mut done = first;
        for _ in 0..10 {
            srv.advance("PT1S").await;
            done = batch_until(&acme, &bid, "a round a second", |b| {
                b["state"] == "COMPLETED"
                    || b["counts"]["PENDING"].as_i64() < done["counts"]["PENDING"].as_i64()
            })
            .await;
            if done["state"] == "COMPLETED" {
                break;
            }
        }
        assert_eq!(done["state"], "COMPLETED", "{done}");
        assert_eq!(done["counts"], json!({"SUCCEEDED": 5}), "{done}");
        let items = items(&acme, &bid).await;
        // In id order (oldest first; these started in one virtual millisecond).
        failed.sort();
        assert_eq!(
            items
                .iter()
                .map(|i| i["instance"].as_str().unwrap().to_string())
                .collect::<Vec<_>>(),
            failed,
        );
        for item in &items {
            let original = item["instance"].as_str().unwrap();
            let (_, view) = acme.get(&format!("/v1/instances/{original}")).await;
            let retries = view["retriedBy"]
                .as_array()
                .unwrap_or_else(|| panic!("{view}"));
            assert_eq!(retries.len(), 1, "exactly one retry of {original}: {view}");
            assert_eq!(item["result"], retries[0], "{item}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_batch_reports_each_instance_and_a_running_batch_stops() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[("SUTRA_BATCH_RATE", "2")]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let globex = srv.tenant("globex", json!({})).await;
        for api in [&acme, &globex] {
            let (status, body) = api.deploy(&waits(), &[]).await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
        }
        let mut live = Vec::new();
        for _ in 0..2 {
            let (_, v) = acme.start("later", json!({})).await;
            live.push(id(&v));
        }
        let (_, v) = acme.start("later", json!({})).await;
        let ended = id(&v);
        let (status, _) = acme
            .post(&format!("/v1/instances/{ended}/cancel"), json!({}))
            .await;
        assert_eq!(status, StatusCode::OK);
        let (_, theirs) = globex.start("later", json!({})).await;
        let theirs = id(&theirs);

        let ids = vec![
            live[0].clone(),
            ended.clone(),
            theirs.clone(),
            live[1].clone(),
        ];
        let (status, batch) = acme
            .post(
                "/v1/batches",
                json!({"action": "cancel", "instances": ids, "reason": "cleanup"}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{batch}");
        let bid = batch["id"].as_str().unwrap().to_string();
        for _ in 0..5 {
            let done = batch_until(&acme, &bid, "progress", |b| {
                b["state"] == "COMPLETED" || b["counts"]["PENDING"].as_i64().unwrap_or(0) <= 2
            })
            .await;
            if done["state"] == "COMPLETED" {
                break;
            }
            srv.advance("PT1S").await;
        }
        let done = batch_until(&acme, &bid, "the end", |b| b["state"] == "COMPLETED").await;
        assert_eq!(
            done["counts"],
            json!({"SUCCEEDED": 2, "SKIPPED": 1, "FAILED": 1}),
            "{done}"
        );
        let items = items(&acme, &bid).await;
        let states: Vec<&str> = items.iter().map(|i| i["state"].as_str().unwrap()).collect();
        assert_eq!(
            states,
            ["SUCCEEDED", "SKIPPED", "FAILED", "SUCCEEDED"],
            "{items:?}"
        );
        assert_eq!(items[1]["message"], "TERMINATED already");
        assert_eq!(items[2]["code"], "SUTRA.RUNTIME.INSTANCE_NOT_FOUND");
        for i in &live {
            let (_, v) = acme.get(&format!("/v1/instances/{i}")).await;
            assert_eq!(v["state"], "TERMINATED", "{v}");
        }
        let (_, v) = globex.get(&format!("/v1/instances/{theirs}")).await;
        assert_eq!(
            v["state"], "WAITING",
            "another tenant's instance is untouched: {v}"
        );
        // Never another tenant's batch.
        let (status, _) = globex.get(&format!("/v1/batches/{bid}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // A running batch stops when cancelled: its pending items are skipped.
        let mut more = Vec::new();
        for _ in 0..5 {
            let (_, v) = acme.start("later", json!({})).await;
            more.push(id(&v));
        }
        let (_, batch) = acme
            .post(
                "/v1/batches",
                json!({"action": "cancel", "instances": more}),
            )
            .await;
        let bid = batch["id"].as_str().unwrap().to_string();
        batch_until(&acme, &bid, "the first round", |b| {
            b["counts"]["SUCCEEDED"] == 2
        })
        .await;
        let (status, stopped) = acme
            .post(&format!("/v1/batches/{bid}/cancel"), json!({}))
            .await;
        assert_eq!(status, StatusCode::OK, "{stopped}");
        assert_eq!(stopped["state"], "CANCELLED");
        assert_eq!(
            stopped["counts"],
            json!({"SUCCEEDED": 2, "SKIPPED": 3}),
            "{stopped}"
        );
        let (status, again) = acme
            .post(&format!("/v1/batches/{bid}/cancel"), json!({}))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{again}");
        assert_eq!(again["code"], "SUTRA.RUNTIME.BATCH.ENDED");
        srv.advance("PT5S").await;
        let (_, v) = acme.get(&format!("/v1/instances/{}", more[4])).await;
        assert_eq!(v["state"], "WAITING", "a skipped item is left alone: {v}");
        let (_, list) = acme.get("/v1/batches").await;
        assert_eq!(
            list["batches"][0]["id"],
            bid.as_str(),
            "newest first: {list}"
        );

        // Refused.
        for (body, code) in [
            (
                json!({"action": "explode", "instances": [live[0]]}),
                "SUTRA.API.MALFORMED_REQUEST",
            ),
            (json!({"action": "cancel"}), "SUTRA.API.MALFORMED_REQUEST"),
            (
                json!({"action": "cancel", "instances": []}),
                "SUTRA.API.MALFORMED_REQUEST",
            ),
            (
                json!({"action": "retry", "instances": [live[0]], "mode": "sideways"}),
                "SUTRA.API.MALFORMED_REQUEST",
            ),
            (
                json!({"action": "migrate", "instances": [live[0]]}),
                "SUTRA.API.MALFORMED_REQUEST",
            ),
            (
                json!({"action": "cancel", "filter": {"state": "SLEEPING"}}),
                "SUTRA.API.MALFORMED_REQUEST",
            ),
        ] {
            let (status, answer) = acme.post("/v1/batches", body.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            assert_eq!(answer["code"], code, "{answer}");
        }
        let (status, _) = acme.get("/v1/batches/nope").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}
