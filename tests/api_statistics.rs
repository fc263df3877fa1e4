//! Per-node statistics of a deployment (issue 35 item 2), through a real
//! `sutra serve` on SQLite and PostgreSQL: instances active at a node,
//! failed at it, that completed it, and the node's open incidents, computed
//! by the database.

mod common;
#[path = "common/server.rs"]
mod server;

use reqwest::StatusCode;
use serde_json::json;
use server::{Db, Server};

const HEADER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">"#;

/// start → T (chaos) → Review (a pull channel call) → end.
fn flow() -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="Review"/>
    <bpmn:serviceTask id="Review" implementation="channel:reviews"/>
    <bpmn:sequenceFlow id="f3" sourceRef="Review" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployments_nodes_count_active_failed_completed_and_incidents() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        acme.pull_channel("reviews").await;
        let (status, body) = acme
            .deploy(&flow(), &[("chaos", common::guest_bytes("chaos"))])
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let deployment = body["deployments"][0]["id"].as_str().unwrap().to_string();
        for _ in 0..3 {
            let (_, v) = acme.start("order", json!({"do": "echo"})).await;
            assert_eq!(v["state"], "WAITING", "{v}");
        }
        let (_, v) = acme.start("order", json!({"do": "fail"})).await;
        assert_eq!(v["state"], "FAILED", "{v}");
        // One review answered (that instance completes), one given up by its
        // worker (an incident), one left waiting.
        let fetch =
            json!({"workerId": "w", "channels": ["reviews"], "maxTasks": 1, "lockDuration": 60000});
        let (_, first) = acme
            .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
            .await;
        let task = first["tasks"][0]["id"].as_str().unwrap().to_string();
        let (status, body) = acme
            .post(
                &format!("/v1/external-tasks/{task}/complete"),
                json!({"workerId": "w", "variables": {}}),
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
        let (_, second) = acme
            .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
            .await;
        let given_up = second["tasks"][0]["instance"].as_str().unwrap().to_string();
        let mut task = second["tasks"][0]["id"].as_str().map(str::to_string);
        while let Some(t) = task.take() {
            acme.post(
                &format!("/v1/external-tasks/{t}/failure"),
                json!({"workerId": "w", "errorMessage": "down"}),
            )
            .await;
            // Fetch again until the given-up one comes back (the third stays
            // locked, still active at Review) or nothing does.
            loop {
                let (_, body) = acme
                    .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
                    .await;
                let Some(next) = body["tasks"][0]["id"].as_str() else {
                    break;
                };
                if body["tasks"][0]["instance"] == given_up.as_str() {
                    task = Some(next.to_string());
                    break;
                }
            }
        }
        let (status, stats) = acme
            .get(&format!("/v1/deployments/{deployment}/statistics"))
            .await;
        assert_eq!(status, StatusCode::OK, "{stats}");
        let n = &stats["nodes"];
        assert_eq!(n["T"]["completed"], 3, "{stats}");
        assert_eq!(n["T"]["failed"], 1, "{stats}");
        assert_eq!(n["Review"]["active"], 2, "{stats}");
        assert_eq!(n["Review"]["completed"], 1, "{stats}");
        assert_eq!(n["Review"]["incidents"], 1, "{stats}");
        let globex = srv.tenant("globex", json!({})).await;
        let (status, _) = globex
            .get(&format!("/v1/deployments/{deployment}/statistics"))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's deployment");
    }
}
