//! The client verbs (`sutra deploy`, `start`, `instances`, `inspect`,
//! `history`, `send`, `cancel`, `retry`, `deployments`, `undeploy`) and
//! `sutra tenant create` against a spawned `sutra serve`.

mod common;
#[path = "common/server.rs"]
mod server;

use serde_json::Value;
use server::Server;
use std::process::{Command, Output};

const DEF: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
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

fn sutra(srv: &Server, token: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .env("SUTRA_SERVER", &srv.url)
        .env("SUTRA_TOKEN", token)
        .output()
        .expect("run sutra")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&ok(out))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_verbs_drive_a_server() {
    let srv = Server::start().await;
    let created = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["tenant", "create", "acme", "--db", &srv.db])
        .output()
        .unwrap();
    let key = ok(&created).trim().to_string();
    assert!(key.starts_with("sutra_"), "{key}");
    let again = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["tenant", "create", "acme", "--db", &srv.db])
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(1),
        "a second tenant of that name is refused"
    );

    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("order.bpmn");
    std::fs::write(&def, DEF).unwrap();
    let chaos = format!("chaos={}", server::guest_path("chaos").display());
    let deployed = ok(&sutra(
        &srv,
        &key,
        &["deploy", def.to_str().unwrap(), "--task", &chaos],
    ));
    assert!(
        deployed.contains("order") && deployed.contains("ACTIVE"),
        "{deployed}"
    );

    let started = json(&sutra(
        &srv,
        &key,
        &[
            "start",
            "order",
            "--input",
            r#"{"do": "echo", "key": "k1"}"#,
            "--format",
            "json",
        ],
    ));
    assert_eq!(started["state"], "WAITING", "{started}");
    let id = started["instance"].as_str().unwrap().to_string();

    let table = ok(&sutra(&srv, &key, &["instances"]));
    assert!(table.starts_with("ID"), "{table}");
    assert!(table.contains(&id) && table.contains("WAITING"), "{table}");
    let text = ok(&sutra(&srv, &key, &["inspect", &id]));
    assert!(
        text.contains(&format!("instance {id}")) && text.contains("T attempt 1"),
        "{text}"
    );

    let sent = ok(&sutra(&srv, &key, &["send", "go", "--key", "k1"]));
    assert_eq!(sent.trim(), format!("instance {id}"));
    let done = json(&sutra(&srv, &key, &["inspect", &id, "--format", "json"]));
    assert_eq!(done["state"], "COMPLETED");
    let history = ok(&sutra(&srv, &key, &["history", &id]));
    assert!(history.starts_with("SEQ"), "{history}");

    let second = json(&sutra(
        &srv,
        &key,
        &[
            "start",
            "order",
            "--input",
            r#"{"do": "echo", "key": "k2"}"#,
            "--format",
            "json",
        ],
    ));
    let second_id = second["instance"].as_str().unwrap();
    let cancelled = json(&sutra(
        &srv,
        &key,
        &["cancel", second_id, "--reason", "test", "--format", "json"],
    ));
    assert_eq!(cancelled["state"], "TERMINATED");
    let retried = json(&sutra(
        &srv,
        &key,
        &["retry", second_id, "--format", "json"],
    ));
    assert_eq!(retried["retryOf"], second_id);

    // Errors: the server's code on stderr, exit 1.
    let missing = sutra(&srv, &key, &["inspect", "0000000000000000000000000000"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("SUTRA.RUNTIME.INSTANCE_NOT_FOUND"));
    let refused = sutra(&srv, "sutra_wrong", &["instances"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("SUTRA.API.UNAUTHORIZED"));

    // The local inspect still reads the database directly.
    let local = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["inspect", &id, "--db", &srv.db, "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(json(&local)["state"], "COMPLETED");

    let deps = json(&sutra(&srv, &key, &["deployments", "--format", "json"]));
    let dep_id = deps["deployments"][0]["id"].as_str().unwrap().to_string();
    let undeployed = ok(&sutra(&srv, &key, &["undeploy", &dep_id]));
    assert!(
        undeployed.contains("DRAINING"),
        "the retried instance still waits: {undeployed}"
    );
}
