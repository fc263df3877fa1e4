//! Multi-instance, loops and call activities as a user meets them: `sutra
//! check` refusing what is wrong with a code and line:column, `sutra run`
//! of a model that uses all three, and the same model over the HTTP API of
//! a real `sutra serve` (SQLite and PostgreSQL).

mod common;
#[path = "common/server.rs"]
mod server;

use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{Db, Server};
use std::process::Command;

fn sutra() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
}

/// `orders`: a parallel multi-instance task over `items` collecting
/// `results`, then a call activity to `pack` (a loop of two tries inside).
const ORDERS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:process id="orders" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:serviceTask id="Price" implementation="registered:chaos">
      <bpmn:extensionElements><q:io inputPath="$.item"/></bpmn:extensionElements>
      <bpmn:multiInstanceLoopCharacteristics>
        <bpmn:extensionElements>
          <q:multiInstance collection="items" element="item" outputCollection="results" outputElement="sku" maxConcurrency="2"/>
        </bpmn:extensionElements>
      </bpmn:multiInstanceLoopCharacteristics>
    </bpmn:serviceTask>
    <bpmn:callActivity id="Pack" calledElement="pack">
      <bpmn:extensionElements><q:io resultPath="$.packed"/></bpmn:extensionElements>
    </bpmn:callActivity>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="Price"/>
    <bpmn:sequenceFlow id="f2" sourceRef="Price" targetRef="Pack"/>
    <bpmn:sequenceFlow id="f3" sourceRef="Pack" targetRef="end"/>
  </bpmn:process>
  <bpmn:process id="pack" isExecutable="true">
    <bpmn:startEvent id="p0"/>
    <bpmn:serviceTask id="Box" implementation="registered:chaos">
      <bpmn:standardLoopCharacteristics loopMaximum="2"><bpmn:loopCondition>true</bpmn:loopCondition></bpmn:standardLoopCharacteristics>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="p1" sourceRef="p0" targetRef="Box"/>
  </bpmn:process>
</bpmn:definitions>"#;

fn input() -> Value {
    json!({"do": "echo", "items": [{"do": "echo", "sku": "A"}, {"do": "echo", "sku": "B"}, {"do": "echo", "sku": "C"}]})
}

fn check(results: &Value, packed: &Value) {
    assert_eq!(results, &json!(["A", "B", "C"]));
    assert_eq!(packed["results"], json!(["A", "B", "C"]), "{packed}");
}

#[test]
fn sutra_run_runs_a_multi_instance_task_and_a_call_activity() {
    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("orders.bpmn");
    std::fs::write(&def, ORDERS).unwrap();
    let db = format!("sqlite://{}", dir.path().join("run.db").display());
    let out = sutra()
        .arg("run")
        .arg(&def)
        .arg("--task")
        .arg(format!("chaos={}", common::guest("chaos").display()))
        .args([
            "--process",
            "orders",
            "--db",
            &db,
            "--virtual-clock",
            "--format",
            "json",
        ])
        .args(["--input", &input().to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "COMPLETED", "{v}");
    check(&v["variables"]["results"], &v["variables"]["packed"]);
    let tasks: Vec<&str> = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["Price", "Price", "Price", "Pack"], "{v}");
}

#[test]
fn sutra_check_refuses_bad_loop_characteristics_with_code_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("bad.bpmn");
    let bad = ORDERS
        .replace(r#"maxConcurrency="2""#, r#"maxConcurrency="0" weight="3""#)
        .replace(r#"loopMaximum="2""#, r#"loopMaximum="-1""#);
    std::fs::write(&def, bad).unwrap();
    let out = sutra()
        .args(["check", "--format", "json"])
        .arg(&def)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut diags: Vec<(String, u64, u64)> = v[0]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "error")
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_string(),
                d["line"].as_u64().unwrap(),
                d["column"].as_u64().unwrap(),
            )
        })
        .collect();
    diags.sort();
    let attr = "SUTRA.CONFIG.BPMN.INVALID_ATTRIBUTE".to_string();
    // q:multiInstance at 10:11 (maxConcurrency and an unknown attribute),
    // the standardLoopCharacteristics at 25:7.
    assert_eq!(
        diags,
        vec![
            (attr.clone(), 10, 11),
            (attr.clone(), 10, 11),
            (attr, 25, 7)
        ],
        "{v}"
    );
}

async fn over_the_api(db: Db) {
    let Some(srv) = Server::start_on(db, &[]).await else {
        return;
    };
    let api = srv.tenant("acme", json!({})).await;
    let (status, body) = api
        .deploy(ORDERS, &[("chaos", common::guest_bytes("chaos"))])
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, started) = api.start("orders", input()).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let id = started["id"]
        .as_str()
        .or(started["instance"].as_str())
        .unwrap()
        .to_string();
    let mut done = Value::Null;
    for _ in 0..100 {
        let (status, body) = api.get(&format!("/v1/instances/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if body["state"] == "COMPLETED" || body["state"] == "FAILED" {
            done = body;
            break;
        }
        srv.advance("PT1S").await;
    }
    assert_eq!(done["state"], "COMPLETED", "{done}");
    check(&done["variables"]["results"], &done["variables"]["packed"]);
    let nodes = &done["nodes"];
    assert_eq!(nodes["Price#body"], "SUCCEEDED", "{done}");
    assert_eq!(nodes["Pack"], "SUCCEEDED", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_runs_a_multi_instance_task_and_a_call_activity_on_sqlite() {
    over_the_api(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_runs_a_multi_instance_task_and_a_call_activity_on_postgres() {
    over_the_api(Db::Postgres).await;
}
