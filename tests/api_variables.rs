//! Fixing an instance's data (issue 35 item 6), through a real `sutra
//! serve` on SQLite and PostgreSQL: a FAILED instance's variables are
//! edited, journaled with who asked, and a retry from its failure runs on
//! them; a WAITING one is edited before what it waits for comes; any other
//! state, another tenant's instance and an empty edit are refused with
//! their codes.

mod common;
#[path = "common/server.rs"]
mod server;

use reqwest::StatusCode;
use serde_json::{json, Value};
use server::{Db, Server};

const HEADER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">"#;

/// start → T (chaos, no retry policy) → end.
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

/// start → wait for message `go` (key `$.key`) → T (chaos) → end.
fn waits_then_task() -> String {
    format!(
        r#"{HEADER}
  <bpmn:message id="Go" name="go"/>
  <bpmn:process id="later" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:extensionElements><q:correlation key="key"/></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="Go"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f3" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

const WAITING_STATES: &str =
    r#"{"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 3600, "End": true}}}"#;

fn id(v: &Value) -> String {
    v["instance"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_instances_data_is_fixed_then_retried_from_its_failure() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let chaos = common::guest_bytes("chaos");
        let (status, body) = acme.deploy(&one_task(), &[("chaos", chaos.clone())]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (_, failed) = acme
            .start(
                "order",
                json!({"do": "fail", "code": "BAD.DATA", "stale": 1}),
            )
            .await;
        assert_eq!(failed["state"], "FAILED", "{failed}");
        let fid = id(&failed);
        let path = format!("/v1/instances/{fid}/variables");

        // The fix: set one variable, drop another; journaled with who.
        let (status, view) = acme
            .post(
                &path,
                json!({"set": {"do": "echo"}, "unset": ["stale"], "by": "alice"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{view}");
        assert_eq!(view["state"], "FAILED");
        assert_eq!(view["variables"], json!({"do": "echo", "code": "BAD.DATA"}));
        let (_, history) = acme.get(&format!("/v1/instances/{fid}/history")).await;
        let edits: Vec<&Value> = history["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "variables_edited")
            .collect();
        assert_eq!(edits.len(), 1, "{history}");
        assert_eq!(edits[0]["data"]["by"], "alice");
        assert_eq!(edits[0]["data"]["unset"], json!(["stale"]));
        assert_eq!(edits[0]["data"]["set"], json!({"do": "echo"}));

        // A retry from the failure runs on the fixed data.
        let (status, retried) = acme
            .post(
                &format!("/v1/instances/{fid}/retry?mode=from-failure"),
                json!({}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{retried}");
        assert_eq!(retried["state"], "COMPLETED", "{retried}");
        assert_eq!(retried["retryOf"], fid.as_str());
        // The FAILED one links to its retry, and is counted apart.
        let (_, original) = acme.get(&format!("/v1/instances/{fid}")).await;
        assert_eq!(original["retriedBy"], json!([id(&retried)]), "{original}");
        let (_, counts) = acme.get("/v1/instances/counts").await;
        assert_eq!(counts["counts"]["FAILED"], 1, "{counts}");
        assert_eq!(counts["retried"], 1, "{counts}");

        // Refused: a COMPLETED instance, an empty edit, another tenant's.
        let done = format!("/v1/instances/{}/variables", id(&retried));
        let (status, body) = acme.post(&done, json!({"set": {"x": 1}})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(body["code"], "SUTRA.RUNTIME.INSTANCE_STATE");
        let (status, body) = acme.post(&path, json!({})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let (status, body) = acme
            .post(&path, json!({"set": {"x": 1}, "unset": ["x"]}))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(body["code"], "SUTRA.RUNTIME.INSTANCE.INPUT_INVALID");
        let globex = srv.tenant("globex", json!({})).await;
        let (status, body) = globex.post(&path, json!({"set": {"x": 1}})).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        let (_, after) = acme.get(&format!("/v1/instances/{fid}")).await;
        assert_eq!(
            after["variables"],
            json!({"do": "echo", "code": "BAD.DATA"}),
            "nothing changed by a refusal"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_instance_is_edited_before_what_it_waits_for_comes() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        let chaos = common::guest_bytes("chaos");
        let (status, body) = acme.deploy(&waits_then_task(), &[("chaos", chaos)]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (_, waiting) = acme
            .start("later", json!({"key": "k1", "do": "fail"}))
            .await;
        assert_eq!(waiting["state"], "WAITING", "{waiting}");
        let wid = id(&waiting);
        let (status, view) = acme
            .post(
                &format!("/v1/instances/{wid}/variables"),
                json!({"set": {"do": "echo"}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{view}");
        assert_eq!(view["state"], "WAITING", "still waits: {view}");
        let (status, body) = acme
            .post(
                "/v1/messages",
                json!({"name": "go", "correlationKey": "k1"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (_, done) = acme.get(&format!("/v1/instances/{wid}")).await;
        assert_eq!(
            done["state"], "COMPLETED",
            "the task ran on the edit: {done}"
        );

        // A waiting States-language execution reads its state's input, not
        // the variables: refused, with what to do instead.
        let (status, body) = acme.deploy(WAITING_STATES, &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let process = body["deployments"][0]["process"]
            .as_str()
            .unwrap()
            .to_string();
        let (_, w) = acme.start(&process, json!({"a": 1})).await;
        let (status, body) = acme
            .post(
                &format!("/v1/instances/{}/variables", id(&w)),
                json!({"set": {"a": 2}}),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("retry from the failure"),
            "{body}"
        );
    }
}

/// `sutra set-variables` then `sutra retry --mode from-failure`, as an
/// operator types them (SQLite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_fixes_the_data_and_retries() {
    let srv = Server::start().await;
    let acme = srv.tenant("acme", json!({})).await;
    let (status, body) = acme
        .deploy(&one_task(), &[("chaos", common::guest_bytes("chaos"))])
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, failed) = acme.start("order", json!({"do": "fail"})).await;
    let fid = id(&failed);
    let sutra = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
            .args(args)
            .env("SUTRA_SERVER", &srv.url)
            .env("SUTRA_TOKEN", acme.token.as_deref().unwrap())
            .output()
            .unwrap()
    };
    let out = sutra(&[
        "set-variables",
        &fid,
        "--set",
        "do=echo",
        "--set",
        "n=2",
        "--by",
        "bob",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    // The instance stays FAILED (exit 1 by the rule), with the new variables.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(r#""do":"echo""#) && text.contains(r#""n":2"#),
        "{text}"
    );
    let out = sutra(&["set-variables", &fid]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "nothing to edit is a usage error"
    );
    let out = sutra(&["retry", &fid, "--mode", "from-failure"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("state COMPLETED"), "{text}");
}
