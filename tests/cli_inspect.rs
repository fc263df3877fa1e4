//! `sutra inspect` as a user runs it: what a waiting instance waits for (text
//! and JSON, locally and from a server), and a mistyped `--db` refused without
//! creating a database.

#[path = "common/backends.rs"]
mod backends;
mod common;
#[path = "common/server.rs"]
mod server;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn sutra() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A task, then a wait for message `go` correlated on the variable `key`.
const MESSAGE_WAIT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:message id="Go" name="go"/>
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:extensionElements><q:correlation key="key"/></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="Go"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// Three branches at once: a failing task retried after a minute, a one-hour
/// timer, and a message wait.
const THREE_WAITS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:message id="Go" name="go"/>
  <bpmn:process id="three" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="fork"/>
    <bpmn:parallelGateway id="fork"/>
    <bpmn:sequenceFlow id="a1" sourceRef="fork" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="3" initialDelay="PT1M"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="a2" sourceRef="T" targetRef="join"/>
    <bpmn:sequenceFlow id="b1" sourceRef="fork" targetRef="courier"/>
    <bpmn:intermediateCatchEvent id="courier">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="b2" sourceRef="courier" targetRef="join"/>
    <bpmn:sequenceFlow id="c1" sourceRef="fork" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:extensionElements><q:correlation key="key"/></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="Go"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="c2" sourceRef="wait" targetRef="join"/>
    <bpmn:parallelGateway id="join"/>
    <bpmn:sequenceFlow id="f9" sourceRef="join" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// The datasource URL a CLI process uses for this test's database.
fn cli_url(db: &backends::TestDb) -> String {
    match &db.schema {
        Some(schema) => {
            let sep = if db.url.contains('?') { '&' } else { '?' };
            format!("{}{sep}options=-c%20search_path%3D{schema}", db.url)
        }
        None => db.url.clone(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

backends::store_tests! {
    /// `sutra run` leaves the instance waiting for its message; the local
    /// inspect names the message and its correlation key, in text and JSON.
    async fn a_waiting_instance_names_its_message_and_key(db) {
        let dir = tempfile::tempdir().unwrap();
        let def = write(dir.path(), "order.bpmn", MESSAGE_WAIT);
        let url = cli_url(&db);
        let chaos = format!("chaos={}", common::guest("chaos").display());
        let run = sutra()
            .args(["run", &def, "--task", &chaos, "--db", &url, "--format", "json"])
            .args(["--input", r#"{"do": "echo", "key": "k-42"}"#])
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", stderr(&run));
        let view: Value = serde_json::from_slice(&run.stdout).unwrap();
        assert_eq!(view["state"], "WAITING");
        let id = view["instance"].as_str().unwrap().to_string();

        let json = sutra()
            .args(["inspect", &id, "--db", &url, "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
        let v: Value = serde_json::from_slice(&json.stdout).unwrap();
        let waits = v["waits"].as_array().expect("a waits list");
        assert_eq!(waits.len(), 1, "{v}");
        assert_eq!(waits[0]["kind"], "message");
        assert_eq!(waits[0]["node"], "wait");
        assert_eq!(waits[0]["message"], "go");
        assert_eq!(waits[0]["correlationKey"], "k-42");
        assert!(waits[0]["due"].is_null(), "{v}");

        let text = sutra().args(["inspect", &id, "--db", &url]).output().unwrap();
        assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
        assert!(
            stdout(&text).contains("waits at wait for message `go` with correlation key `k-42`"),
            "{}",
            stdout(&text)
        );
    }
}

/// From a server (manual clock at T0): a retry due at T0+1m, a timer due at
/// T0+1h, a message wait; in the API's JSON and in the client's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_instance_shows_its_timer_retry_and_message_waits() {
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", serde_json::json!({})).await;
    let (status, body) = api
        .deploy(THREE_WAITS, &[("chaos", common::guest_bytes("chaos"))])
        .await;
    assert_eq!(status.as_u16(), 201, "{body}");
    let (status, started) = api
        .start("three", serde_json::json!({ "do": "fail", "key": "k1" }))
        .await;
    assert_eq!(status.as_u16(), 201, "{started}");
    let id = started["instance"].as_str().unwrap().to_string();

    // The first attempt may still be running when the start answers: wait
    // (bounded) until it failed and its retry is parked.
    let mut view = started;
    for _ in 0..600 {
        if view["waits"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["kind"] == "retry"))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        view = api.get(&format!("/v1/instances/{id}")).await.1;
    }
    let waits: Vec<(String, String, Value)> = view["waits"]
        .as_array()
        .unwrap_or_else(|| panic!("no waits in {view}"))
        .iter()
        .map(|w| {
            (
                w["kind"].as_str().unwrap().to_string(),
                w["node"].as_str().unwrap().to_string(),
                w["due"].clone(),
            )
        })
        .collect();
    assert_eq!(
        waits,
        vec![
            ("retry".into(), "T".into(), "2030-01-01T00:01:00Z".into()),
            (
                "timer".into(),
                "courier".into(),
                "2030-01-01T01:00:00Z".into()
            ),
            ("message".into(), "wait".into(), Value::Null),
        ],
        "earliest due first, the message last: {view}"
    );
    assert_eq!(view["waits"][0]["attempt"], 2, "{view}");

    let key = api.token.clone().unwrap();
    let out = sutra()
        .args(["inspect", &id])
        .env("SUTRA_SERVER", &srv.url)
        .env("SUTRA_TOKEN", &key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for line in [
        "waits at T for a retry: attempt 2 due 2030-01-01T00:01:00Z",
        "waits at courier for a timer due 2030-01-01T01:00:00Z",
        "waits at wait for message `go` with correlation key `k1`",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn inspect_refuses_a_missing_sqlite_file_and_creates_none() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("mistyped.db");
    for db in [
        format!("sqlite://{}", missing.display()),
        format!("sqlite:{}", missing.display()),
        missing.display().to_string(),
    ] {
        let out = sutra()
            .args(["inspect", "--db", &db, "0000000000000000000000000000"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{db}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("SUTRA.CONFIG.DATASOURCE_MISSING"),
            "{db}: {err}"
        );
        assert!(err.contains(&missing.display().to_string()), "{db}: {err}");
        assert!(
            !missing.exists(),
            "{db}: inspect created {}",
            missing.display()
        );
    }
}
