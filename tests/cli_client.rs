//! What a new user meets first with the client verbs: error messages that say
//! what to do, help that names each argument, one exit-code rule for every
//! verb, one name per output format, and `history` with the journal off.

mod common;
#[path = "common/server.rs"]
mod server;

use serde_json::Value;
use server::Server;
use std::process::{Command, Output};

fn sutra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .env_remove("SUTRA_SERVER")
        .env_remove("SUTRA_TOKEN")
        .output()
        .expect("run sutra")
}

/// A client verb against `srv` with `token`.
fn client(srv: &Server, token: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .env("SUTRA_SERVER", &srv.url)
        .env("SUTRA_TOKEN", token)
        .output()
        .expect("run sutra")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// `order` fails at once when `x` is not 1 (its gateway has no flow to take);
/// `waits` waits for message `go`.
const DEF: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:message id="Go" name="go"/>
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="gw"/>
    <bpmn:exclusiveGateway id="gw"/>
    <bpmn:sequenceFlow id="f2" sourceRef="gw" targetRef="end">
      <bpmn:conditionExpression>x == 1</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
  <bpmn:process id="waits" isExecutable="true">
    <bpmn:startEvent id="s2"/>
    <bpmn:sequenceFlow id="g1" sourceRef="s2" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:extensionElements><q:correlation key="key"/></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="Go"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="g2" sourceRef="wait" targetRef="e2"/>
    <bpmn:endEvent id="e2"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// A server with `DEF` deployed for tenant `acme`; its key.
async fn deployed(srv: &Server) -> String {
    let api = srv.tenant("acme", serde_json::json!({})).await;
    let (status, body) = api.deploy(DEF, &[]).await;
    assert_eq!(status.as_u16(), 201, "{body}");
    api.token.clone().unwrap()
}

#[test]
fn a_server_without_a_scheme_is_a_usage_error_that_shows_the_fix() {
    let out = sutra(&["instances", "--server", "127.0.0.1:8080", "--token", "k"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("http://127.0.0.1:8080"), "{err}");
    assert!(!err.contains("builder error"), "{err}");
}

#[test]
fn a_server_that_is_not_running_is_named_with_what_to_do() {
    // A port that nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = sutra(&["instances", "--server", &url, "--token", "k"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("cannot connect to {url}: connection refused")),
        "{err}"
    );
    assert!(err.contains("sutra serve"), "{err}");
    assert!(!err.contains("error sending request"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_token_says_how_to_give_one() {
    let srv = Server::start().await;
    let out = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["instances", "--server", &srv.url])
        .env_remove("SUTRA_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("SUTRA.API.UNAUTHORIZED"), "{err}");
    assert!(
        err.contains("--token") && err.contains("SUTRA_TOKEN"),
        "{err}"
    );
}

#[test]
fn help_names_each_argument_and_lists_the_states() {
    let undeploy = stdout(&sutra(&["undeploy", "--help"]));
    assert!(undeploy.contains("The deployment id"), "{undeploy}");
    let history = stdout(&sutra(&["history", "--help"]));
    assert!(history.contains("The instance id"), "{history}");
    assert!(!history.contains("deployment"), "{history}");
    // clap wraps help at the terminal's width: compare with white space folded.
    let instances = stdout(&sutra(&["instances", "--help"]))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        instances.contains("RUNNING, WAITING, COMPLETED, TERMINATED, FAILED"),
        "{instances}"
    );
    // A wrong state is a usage error that lists the right ones.
    let out = sutra(&["instances", "--state", "done", "--token", "k"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("WAITING"), "{}", stderr(&out));
}

#[test]
fn check_takes_text_like_every_verb_and_human_as_its_alias() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/bpmn/valid/seed_retry.bpmn"
    );
    let text = sutra(&["check", file, "--format", "text"]);
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let human = sutra(&["check", file, "--format", "human"]);
    assert_eq!(human.status.code(), Some(0), "{}", stderr(&human));
    assert_eq!(stdout(&text), stdout(&human));
    assert!(
        stdout(&text).contains(": ok: 1 process"),
        "{}",
        stdout(&text)
    );
    // And `human` is accepted wherever `text` is.
    let out = sutra(&["instances", "--format", "human", "--server", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!stderr(&out).contains("invalid value"), "{}", stderr(&out));
}

/// One rule: exit 1 when the instance a verb shows FAILED, whichever verb;
/// a TERMINATED instance (what a cancel asked for) exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_that_shows_a_failed_instance_exits_1() {
    let srv = Server::start().await;
    let key = deployed(&srv).await;

    let started = client(
        &srv,
        &key,
        &[
            "start",
            "order",
            "--input",
            r#"{"x": 2}"#,
            "--format",
            "json",
        ],
    );
    assert_eq!(
        started.status.code(),
        Some(1),
        "start of a FAILED instance: {}",
        stderr(&started)
    );
    let failed = json(&started);
    assert_eq!(failed["state"], "FAILED", "{failed}");
    let id = failed["instance"].as_str().unwrap();
    let shown = client(&srv, &key, &["inspect", id]);
    assert_eq!(shown.status.code(), Some(1));
    assert!(
        stdout(&shown).contains("state FAILED"),
        "{}",
        stdout(&shown)
    );
    let retried = client(&srv, &key, &["retry", id, "--format", "json"]);
    assert_eq!(retried.status.code(), Some(1), "{}", stderr(&retried));
    assert_eq!(json(&retried)["state"], "FAILED");

    let waiting = client(
        &srv,
        &key,
        &[
            "start",
            "waits",
            "--input",
            r#"{"key": "k"}"#,
            "--format",
            "json",
        ],
    );
    assert_eq!(waiting.status.code(), Some(0), "{}", stderr(&waiting));
    let wid = json(&waiting)["instance"].as_str().unwrap().to_string();
    let cancelled = client(&srv, &key, &["cancel", &wid]);
    assert_eq!(cancelled.status.code(), Some(0), "{}", stderr(&cancelled));
    assert!(stdout(&cancelled).contains("state TERMINATED"));
    let terminated = client(&srv, &key, &["inspect", &wid]);
    assert_eq!(terminated.status.code(), Some(0));

    // Listing succeeds whatever the instances' states; `--state` takes any case.
    let listed = client(&srv, &key, &["instances", "--state", "failed"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let table = stdout(&listed);
    assert!(table.contains(id) && !table.contains(&wid), "{table}");
    let listed = client(
        &srv,
        &key,
        &["instances", "--state", "Terminated", "--format", "json"],
    );
    let ids: Vec<String> = json(&listed)["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, [wid]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_with_the_journal_off_prints_the_reason() {
    let srv = Server::start_with(&[("SUTRA_AUDIT_SQL", "false")]).await;
    let key = deployed(&srv).await;
    let started = client(
        &srv,
        &key,
        &[
            "start",
            "waits",
            "--input",
            r#"{"key": "k"}"#,
            "--format",
            "json",
        ],
    );
    let id = json(&started)["instance"].as_str().unwrap().to_string();
    let out = client(&srv, &key, &["history", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("the audit journal is off"), "{text}");
    assert!(text.contains("sutra.audit.sql"), "{text}");
    assert!(!text.contains("SEQ"), "no bare table header: {text}");
}

/// Issue 33 item 9: `sutra start --no-wait` answers once the start is
/// committed, while its first task (4 s) still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_no_wait_answers_while_the_first_task_runs() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", serde_json::json!({})).await;
    let flow = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="slow" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;
    let (status, body) = api
        .deploy(flow, &[("chaos", common::guest_bytes("chaos"))])
        .await;
    assert_eq!(status.as_u16(), 201, "{body}");
    let key = api.token.clone().unwrap();
    let asked = std::time::Instant::now();
    let out = client(
        &srv,
        &key,
        &[
            "start",
            "slow",
            "--no-wait",
            "--input",
            r#"{"do": "sleep", "ms": 4000}"#,
            "--format",
            "json",
        ],
    );
    let took = asked.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&out)["state"], "RUNNING", "{}", stdout(&out));
    assert!(
        took < std::time::Duration::from_millis(3500),
        "answered after {took:?}"
    );
}
