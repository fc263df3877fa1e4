//! The States language through the `sutra` binary: `sutra check` over the
//! asl-validator corpus (every file classified as its name says, no panic,
//! nothing on stderr).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const UNSUPPORTED: &str = "SUTRA.CONFIG.STATES.UNSUPPORTED";

fn sutra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .output()
        .expect("run sutra")
}

/// The asl-validator corpus, kept inside the repository (`tests/corpora/`, its
/// licence and source beside it) so that a clone's tests read nothing outside it.
fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpora/asl-validator")
}

#[test]
fn check_classifies_the_asl_validator_corpus_as_its_file_names_say() {
    let dir = corpus();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 70, "corpus has {} files", files.len());
    let mut wrong = Vec::new();
    let mut unsupported = std::collections::BTreeSet::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let o = sutra(&["check", "--format", "json", &f.display().to_string()]);
        assert!(
            o.stderr.is_empty(),
            "{name}: stderr: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{name}: {:?}",
            o.status
        );
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let diags = report[0]["diagnostics"].as_array().unwrap().clone();
        let errors: Vec<(String, String)> = diags
            .iter()
            .filter(|d| d["severity"] == "error")
            .map(|d| {
                (
                    d["code"].as_str().unwrap().to_string(),
                    d["message"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        for d in &diags {
            assert!(d["line"].as_u64().unwrap() > 0, "{name}: no position: {d}");
        }
        let ok = if name.starts_with("valid-") {
            errors.iter().all(|(c, _)| c == UNSUPPORTED)
        } else {
            errors.iter().any(|(c, _)| c != UNSUPPORTED)
        };
        if !ok {
            wrong.push(format!("{name}: {errors:?}"));
        }
        for (c, m) in &errors {
            if c == UNSUPPORTED {
                unsupported.insert(m.clone());
            }
        }
    }
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
    // The refusals name what is not supported.
    assert!(
        unsupported.iter().all(|m| m.contains("not supported")),
        "{unsupported:#?}"
    );
}

mod common;
#[path = "common/server.rs"]
mod server;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};
use sutra::store::{SqliteStore, Store};

const APPROVAL: &str = r#"{
  "Name": "approval",
  "StartAt": "Approve",
  "States": {
    "Approve": {"Type": "Wait", "EventName": "approved", "ResultPath": "$.approval", "Next": "Done"},
    "Done": {"Type": "Succeed"}
  }
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_wait_is_resumed_through_the_api_and_through_sutra_resume() {
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let (status, body) = api.deploy(APPROVAL, &[]).await;
    assert_eq!(status.as_u16(), 201, "{body}");

    // Through the API.
    let (_, started) = api.start("approval", json!({"order": 1})).await;
    assert_eq!(started["state"], "WAITING", "{started}");
    let id = started["instance"].as_str().unwrap().to_string();
    let (status, err) = api
        .post(&format!("/v1/instances/{id}/events/rejected"), json!({}))
        .await;
    assert_eq!(status.as_u16(), 409, "{err}");
    assert_eq!(err["code"], "SUTRA.RUNTIME.EVENT.NOT_AWAITED");
    assert!(
        err["message"].as_str().unwrap().contains("approved"),
        "{err}"
    );
    let (status, done) = api
        .post(
            &format!("/v1/instances/{id}/events/approved"),
            json!({"by": "api"}),
        )
        .await;
    assert_eq!(status.as_u16(), 200, "{done}");
    assert_eq!(done["state"], "COMPLETED");
    assert_eq!(
        done["variables"],
        json!({"order": 1, "approval": {"by": "api"}})
    );
    let (status, again) = api
        .post(&format!("/v1/instances/{id}/events/approved"), json!({}))
        .await;
    assert_eq!(
        (status.as_u16(), again["code"].as_str()),
        (409, Some("SUTRA.RUNTIME.EVENT.NOT_AWAITED"))
    );
    let (status, _) = api
        .post("/v1/instances/nope/events/approved", json!({}))
        .await;
    assert_eq!(status.as_u16(), 404);

    // Through `sutra resume`.
    let (_, started) = api.start("approval", json!({"order": 2})).await;
    let id = started["instance"].as_str().unwrap().to_string();
    let token = api.token.clone().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args([
            "resume",
            &id,
            "approved",
            "--data",
            r#"{"by": "cli"}"#,
            "--server",
            &srv.url,
            "--token",
            &token,
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view["state"], "COMPLETED");
    assert_eq!(view["variables"]["approval"], json!({"by": "cli"}));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args([
            "resume", &id, "approved", "--server", &srv.url, "--token", &token,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SUTRA.RUNTIME.EVENT.NOT_AWAITED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_naming_no_module_is_refused_at_deploy_with_resource_not_found() {
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let def = r#"{"StartAt": "T", "States": {"T": {"Type": "Task", "Resource": "missing", "End": true}}}"#;
    let (status, body) = api.deploy(def, &[]).await;
    assert_eq!(status.as_u16(), 422, "{body}");
    assert_eq!(body["code"], "ResourceNotFound");
    assert_eq!(body["details"]["module"], "missing");
}

/// Wait (bounded) until `cond` holds, checking every 20 ms.
async fn wait_for<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_while_parked_in_a_wait_is_finished_by_serve() {
    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("cool-off.asl.json");
    std::fs::write(
        &def,
        r#"{"Name": "cool-off", "StartAt": "Cool", "States": {
            "Cool": {"Type": "Wait", "Seconds": 2, "Next": "After"},
            "After": {"Type": "Pass", "Result": "done", "ResultPath": "$.after", "End": true}}}"#,
    )
    .unwrap();
    let db = format!("sqlite://{}", dir.path().join("w.db").display());
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args([
            "run",
            &def.display().to_string(),
            "--input",
            r#"{"n": 1}"#,
            "--db",
            &db,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(run.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let id = line.trim().strip_prefix("instance ").unwrap().to_string();
    let store = SqliteStore::open(&db).await.unwrap();
    wait_for("the timer park", || {
        let (store, id) = (store.clone(), id.clone());
        async move {
            store
                .parks_of(&id)
                .await
                .map(|p| p.iter().any(|p| p.kind == "timer"))
                .unwrap_or(false)
        }
    })
    .await;
    run.kill().unwrap(); // SIGKILL
    let _ = run.wait();
    let rec = store.load_instance(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, "WAITING", "the committed wait survived the kill");

    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["serve", "--no-listen", "--db", &db])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the instance to complete", || {
        let (store, id) = (store.clone(), id.clone());
        async move {
            store
                .load_instance(&id)
                .await
                .ok()
                .flatten()
                .is_some_and(|r| r.state == "COMPLETED")
        }
    })
    .await;
    let _ = serve.kill();
    let _ = serve.wait();
    let rec = store.load_instance(&id).await.unwrap().unwrap();
    let snap = sutra::engine::Snapshot::from_json(&rec.snapshot).unwrap();
    assert_eq!(
        Value::Object(snap.variables),
        json!({"n": 1, "after": "done"})
    );
}

/// A States-language execution takes any JSON value as its input and output
/// (as Step Functions does); a BPMN process refuses anything but an object,
/// saying why (issue 34 item 4).
#[test]
fn run_takes_any_json_value_as_a_states_language_input() {
    let dir = std::env::temp_dir().join(format!("sutra-any-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let asl = dir.join("echo.asl.json");
    std::fs::write(
        &asl,
        r#"{"StartAt": "P", "States": {"P": {"Type": "Pass", "Parameters": {"got.$": "$", "input.$": "$$.Execution.Input"}, "OutputPath": "$.got", "End": true}}}"#,
    )
    .unwrap();
    for input in ["[1,2]", "\"text\"", "42", "null", "{\"a\":1}"] {
        let o = sutra(&[
            "run",
            &asl.display().to_string(),
            "--input",
            input,
            "--virtual-clock",
            "--format",
            "json",
        ]);
        let view: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{input}: {e}: {}", String::from_utf8_lossy(&o.stderr)));
        assert_eq!(view["state"], "COMPLETED", "{input}: {view}");
        let want: serde_json::Value = serde_json::from_str(input).unwrap();
        // A non-object output is shown as {"output": value}.
        let got = match &want {
            serde_json::Value::Object(_) => view["variables"].clone(),
            _ => view["variables"]["output"].clone(),
        };
        assert_eq!(got, want, "{input}");
    }
    let bpmn = dir.join("plain.bpmn");
    std::fs::write(
        &bpmn,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:process id="plain" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#,
    )
    .unwrap();
    let o = sutra(&[
        "run",
        &bpmn.display().to_string(),
        "--input",
        "[1,2]",
        "--virtual-clock",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("SUTRA.RUNTIME.INSTANCE.INPUT_INVALID"),
        "{err}"
    );
    assert!(err.contains("JSON object of variables"), "{err}");
    let o = sutra(&[
        "run",
        &bpmn.display().to_string(),
        "--input",
        "{}",
        "--virtual-clock",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(&dir).ok();
}
