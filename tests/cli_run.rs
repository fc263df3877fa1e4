//! `sutra run`, `sutra serve`, `sutra inspect` as a user runs them: real
//! processes, a real SQLite file, and a kill -9 in the middle of a backoff.

mod common;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use sutra::store::{SqliteStore, Store};

fn sutra() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
}

/// `sutra run <def> --task chaos=<chaos.wasm>` (more arguments follow).
fn sutra_run(def: &Path) -> Command {
    let mut cmd = sutra();
    cmd.arg("run")
        .arg(def)
        .arg("--task")
        .arg(format!("chaos={}", common::guest("chaos").display()));
    cmd
}

const FLAKY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:process id="flaky" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="3" initialDelay="PT3S"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

fn write_definition(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("flaky.bpmn");
    std::fs::write(&path, FLAKY).unwrap();
    path
}

/// Wait (bounded) until `cond` holds, checking the database every 20 ms.
async fn wait_for<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn read_instance_id(child: &mut Child) -> String {
    let stderr = child.stderr.take().unwrap();
    let mut line = String::new();
    BufReader::new(stderr).read_line(&mut line).unwrap();
    line.trim()
        .strip_prefix("instance ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_during_a_backoff_is_completed_by_serve_with_every_attempt_once() {
    let dir = tempfile::tempdir().unwrap();
    let def = write_definition(dir.path());
    let db = format!("sqlite://{}", dir.path().join("f.db").display());

    let mut run = sutra_run(&def)
        .args([
            "--input",
            r#"{"do": "fail", "until": 2, "code": "FLAKY"}"#,
            "--db",
            &db,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = read_instance_id(&mut run);

    // The first attempt failed and the retry is parked for 3 s: kill -9 now.
    let store = SqliteStore::open(&db).await.unwrap();
    wait_for("the retry park", Duration::from_secs(60), || {
        let (store, id) = (store.clone(), id.clone());
        async move {
            store
                .parks_of(&id)
                .await
                .map(|p| p.iter().any(|p| p.kind == "retry"))
                .unwrap_or(false)
        }
    })
    .await;
    run.kill().unwrap(); // SIGKILL
    let _ = run.wait();
    let rec = store.load_instance(&id).await.unwrap().unwrap();
    assert_eq!(
        rec.state, "WAITING",
        "the committed backoff survived the kill"
    );
    assert_eq!(store.attempts(&id).await.unwrap().len(), 1);

    let mut serve = sutra()
        .args(["serve", "--no-listen", "--db", &db])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the instance to complete", Duration::from_secs(60), || {
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
    // SIGTERM stops serve cleanly.
    let status = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        serve.wait().unwrap().success(),
        "serve stops cleanly on SIGTERM"
    );

    let out = sutra()
        .args(["inspect", "--db", &db, &id, "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view["state"], "COMPLETED");
    let attempts: Vec<(i64, String)> = view["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["attempt"].as_i64().unwrap(),
                a["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        vec![(1, "failed".to_string()), (2, "completed".to_string())]
    );
    let first =
        chrono::DateTime::parse_from_rfc3339(view["attempts"][0]["at"].as_str().unwrap()).unwrap();
    let second =
        chrono::DateTime::parse_from_rfc3339(view["attempts"][1]["at"].as_str().unwrap()).unwrap();
    assert!(
        (second - first).num_milliseconds() >= 3000,
        "the backoff was honoured across the kill"
    );
}

#[test]
fn run_prints_the_instance_shape_on_the_virtual_clock() {
    let dir = tempfile::tempdir().unwrap();
    let def = write_definition(dir.path());
    let out = sutra_run(&def)
        .args([
            "--input",
            r#"{"do": "fail", "until": 3}"#,
            "--virtual-clock",
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
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "instance",
        "process",
        "state",
        "variables",
        "error",
        "attempts",
        "startedAt",
        "endedAt",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["state"], "COMPLETED");
    assert_eq!(v["process"], "flaky");
    assert_eq!(v["attempts"].as_array().unwrap().len(), 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with(&format!("instance {}", v["instance"].as_str().unwrap())));
}

/// A task whose attempt runs for 10 s under a PT2S interrupting timer
/// boundary (issue 29 item 7).
const LATE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:process id="patient" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements><q:timeout duration="PT60S"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:boundaryEvent id="late" attachedToRef="work">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT2S</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="done"/>
    <bpmn:endEvent id="done"/>
    <bpmn:sequenceFlow id="f3" sourceRef="late" targetRef="gaveUp"/>
    <bpmn:endEvent id="gaveUp"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// `sutra run --virtual-clock` of [`LATE`] (after a PT1S timer when
/// `paused`) with a task that sleeps `ms`: (path taken, work's state, outcomes).
fn run_late(dir: &Path, paused: bool, ms: u64) -> (String, String, Vec<String>) {
    let mut text = LATE.to_string();
    if paused {
        text = text.replace(
            r#"<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work"/>"#,
            r#"<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="pause"/>
    <bpmn:intermediateCatchEvent id="pause">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT1S</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f0" sourceRef="pause" targetRef="work"/>"#,
        );
    }
    let def = dir.join(format!("late-{paused}-{ms}.bpmn"));
    std::fs::write(&def, text).unwrap();
    let out = sutra_run(&def)
        .args([
            "--input",
            &format!(r#"{{"do": "sleep", "ms": {ms}}}"#),
            "--virtual-clock",
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
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "COMPLETED", "{v}");
    let path = ["gaveUp", "done"]
        .into_iter()
        .filter(|n| v["nodes"][n] == "SUCCEEDED")
        .collect::<Vec<_>>()
        .join("+");
    let outcomes = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            format!(
                "{}:{}",
                a["task"].as_str().unwrap(),
                a["outcome"].as_str().unwrap()
            )
        })
        .collect();
    (
        path,
        v["nodes"]["work"].as_str().unwrap_or("?").to_string(),
        outcomes,
    )
}

#[test]
fn a_timer_boundary_interrupts_a_running_attempt_on_the_virtual_clock() {
    let dir = tempfile::tempdir().unwrap();
    for paused in [false, true] {
        // Virtual time runs at real speed while the attempt runs: the PT2S
        // boundary interrupts a 10 s attempt when its time comes, as on the
        // real clock (first step, and after a timer on virtual time)...
        let (path, work, outcomes) = run_late(dir.path(), paused, 10_000);
        assert_eq!(path, "gaveUp", "after a timer: {paused}");
        assert_eq!(work, "CANCELLED", "after a timer: {paused}");
        assert_eq!(outcomes, ["work:interrupted"], "after a timer: {paused}");
        // ...and never hurries past a 0.3 s one.
        let (path, work, outcomes) = run_late(dir.path(), paused, 300);
        assert_eq!(path, "done", "after a timer: {paused}");
        assert_eq!(work, "SUCCEEDED", "after a timer: {paused}");
        assert_eq!(outcomes, ["work:completed"], "after a timer: {paused}");
    }
}

#[test]
fn a_failed_run_exits_1_with_the_error_and_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let def = write_definition(dir.path());
    let out = sutra_run(&def)
        .args([
            "--input",
            r#"{"do": "fail", "code": "DOWN"}"#,
            "--virtual-clock",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "FAILED");
    assert_eq!(v["error"]["code"], "SUTRA.RUNTIME.RETRY.EXHAUSTED");
    assert_eq!(v["error"]["cause"]["code"], "DOWN");
}

#[test]
fn an_ephemeral_run_of_a_stateful_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let def = write_definition(dir.path());
    let out = sutra_run(&def)
        .args(["--db", "sqlite::memory:"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SUTRA.CONFIG.DATASOURCE_REQUIRED"),
        "{stderr}"
    );
    // Refused before an instance exists: no id is printed that nothing keeps.
    assert!(!stderr.contains("instance "), "{stderr}");
}

#[test]
fn malformed_arguments_are_usage_errors() {
    let out = sutra()
        .args(["run", "nope.bpmn", "--task", "chaos"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = sutra()
        .args(["run", "nope.bpmn", "--input", "[1]"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = sutra().args(["inspect"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
