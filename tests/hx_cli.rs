//! An HX workflow as a user runs it: `sutra check`, `sutra run`, and a kill -9
//! in the middle of an unwind that `sutra serve` then finishes, every
//! compensator's success recorded once.

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

/// a → b → c → d; a, b, c compensated by ua, ub, uc. `uc` retries after 3 s.
const CHAIN: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<workflow id="chain">
  <node id="a" type="task" impl="chaos"/>
  <node id="b" type="task" impl="chaos"/>
  <node id="c" type="task" impl="chaos"/>
  <node id="d" type="task" impl="chaos"/>
  <node id="ua" type="task" impl="chaos" compensates="a"/>
  <node id="ub" type="task" impl="chaos" compensates="b"/>
  <node id="uc" type="task" impl="chaos" compensates="c">
    <retry maxAttempts="3" backoff="fixed" initialDelay="PT3S" jitter="false"/>
  </node>
  <edges>
    <edge from="a" to="b"/>
    <edge from="b" to="c"/>
    <edge from="c" to="d"/>
    <edge from="a" to="ua" type="compensation"/>
    <edge from="b" to="ub" type="compensation"/>
    <edge from="c" to="uc" type="compensation"/>
  </edges>
</workflow>"#;

/// d fails; uc fails its first attempt (a retry park, inside the unwind).
const INPUT: &str = r#"{"do": "echo", "by-task": {"d": {"do": "fail", "code": "NO_COURIER"}, "uc": {"do": "fail", "until": 2, "code": "WAREHOUSE_BUSY"}}}"#;

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

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_an_unwind_is_finished_by_serve_with_each_compensator_once() {
    let dir = tempfile::tempdir().unwrap();
    let def = write(dir.path(), "chain.hx.xml", CHAIN);
    let db = format!("sqlite://{}", dir.path().join("u.db").display());

    let mut run = sutra()
        .arg("run")
        .arg(&def)
        .arg("--task")
        .arg(format!("chaos={}", common::guest("chaos").display()))
        .args(["--input", INPUT, "--db", &db])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = read_instance_id(&mut run);

    // uc's first attempt failed and its retry is parked for 3 s: kill -9 now.
    let store = SqliteStore::open(&db).await.unwrap();
    wait_for(
        "the compensator's retry park",
        Duration::from_secs(60),
        || {
            let (store, id) = (store.clone(), id.clone());
            async move {
                store
                    .parks_of(&id)
                    .await
                    .map(|p| p.iter().any(|p| p.kind == "retry"))
                    .unwrap_or(false)
            }
        },
    )
    .await;
    run.kill().unwrap(); // SIGKILL
    let _ = run.wait();
    let rec = store.load_instance(&id).await.unwrap().unwrap();
    assert_eq!(rec.state, "WAITING", "the unwind is committed mid-way");

    let mut serve = sutra()
        .args(["serve", "--no-listen", "--db", &db])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the unwind to finish", Duration::from_secs(60), || {
        let (store, id) = (store.clone(), id.clone());
        async move {
            store
                .load_instance(&id)
                .await
                .ok()
                .flatten()
                .is_some_and(|r| r.state == "COMPENSATED")
        }
    })
    .await;
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
    assert_eq!(
        out.status.code(),
        Some(1),
        "a compensated instance is a negative result"
    );
    let view: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view["state"], "COMPENSATED");
    let attempts: Vec<(String, i64, String)> = view["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["task"].as_str().unwrap().to_string(),
                a["attempt"].as_i64().unwrap(),
                a["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect: Vec<(String, i64, String)> = [
        ("a", 1, "completed"),
        ("b", 1, "completed"),
        ("c", 1, "completed"),
        ("d", 1, "failed"),
        ("uc", 1, "failed"),
        ("uc", 2, "completed"),
        ("ub", 1, "completed"),
        ("ua", 1, "completed"),
    ]
    .iter()
    .map(|(t, n, o)| (t.to_string(), *n, o.to_string()))
    .collect();
    assert_eq!(
        attempts, expect,
        "each compensator succeeded exactly once, newest first"
    );
    for n in ["a", "b", "c"] {
        assert_eq!(view["nodes"][n], "COMPENSATED", "{n}");
    }
    assert_eq!(view["nodes"]["d"], "FAILED");
}

#[test]
fn check_reports_hx_codes_with_their_position() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.xml",
        "<workflow id=\"w\">\n  <node id=\"c\" type=\"task\" impl=\"m\" idempotent=\"false\">\n    <retry/>\n  </node>\n</workflow>\n",
    );
    let out = sutra().arg("check").arg(&bad).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("HX-3301"), "{text}");
    assert!(text.contains("2:3"), "{text}");
    let good = write(dir.path(), "good.xml", CHAIN);
    let out = sutra().arg("check").arg(&good).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn run_shows_node_states_of_a_compensated_workflow() {
    let dir = tempfile::tempdir().unwrap();
    let def = write(dir.path(), "chain.hx.xml", CHAIN);
    let out = sutra()
        .arg("run")
        .arg(&def)
        .arg("--task")
        .arg(format!("chaos={}", common::guest("chaos").display()))
        .args([
            "--input",
            r#"{"do": "echo", "by-task": {"d": {"do": "fail"}}}"#,
            "--virtual-clock",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("state COMPENSATED"), "{text}");
    assert!(
        text.contains("a=COMPENSATED") && text.contains("d=FAILED"),
        "{text}"
    );
}
