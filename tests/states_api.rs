//! The States language over the HTTP API (a spawned `sutra serve`, SQLite):
//! any JSON value as an execution's input (issue 34 item 4).

mod common;
#[path = "common/server.rs"]
mod server;

use reqwest::StatusCode;
use serde_json::{json, Value};
use server::Server;

const PLAIN_BPMN: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="plain" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_states_language_execution_takes_any_json_input_and_bpmn_says_why_not() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let asl = json!({
        "Name": "echo", "StartAt": "P",
        "States": {"P": {"Type": "Pass", "Parameters": {"got.$": "$", "input.$": "$$.Execution.Input"}, "OutputPath": "$.got", "End": true}}
    });
    let (status, body) = api.deploy(&asl.to_string(), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for input in [
        json!([1, 2]),
        json!("text"),
        json!(42),
        Value::Null,
        json!({"a": 1}),
    ] {
        let (status, view) = api.start("echo", input.clone()).await;
        assert_eq!(status, StatusCode::CREATED, "{input}: {view}");
        assert_eq!(view["state"], "COMPLETED", "{input}: {view}");
        let got = if input.is_object() {
            view["variables"].clone()
        } else {
            view["variables"]["output"].clone()
        };
        assert_eq!(got, input);
    }
    let (status, body) = api.deploy(PLAIN_BPMN, &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = api.start("plain", json!([1, 2])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        body["code"], "SUTRA.RUNTIME.INSTANCE.INPUT_INVALID",
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("JSON object of variables"),
        "{body}"
    );
    let (status, body) = api.start("plain", json!({"x": 1})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}
