//! A crash at every commit of a signal fan-out (issue 32 item 1): a real
//! `sutra serve` with `SUTRA_CRASH_AT_COMMIT=k:before|after`
//! (src/store/failpoint.rs) aborts while `POST /v1/signals` delivers a
//! broadcast to waiting instances; restarted without the failpoint, its
//! poller finishes the fan-out from the rows (store/signals.rs), and every
//! instance must end COMPLETED with its task after the catch run exactly
//! once — no wait lost, none reached twice. Also `sutra signal` against the
//! restarted server: a second broadcast reaches nothing (nothing waits).
//!
//! SQLite always; PostgreSQL too when `SUTRA_TEST_POSTGRES_URL` is set.
//! Every wait is bounded.

mod common;
#[path = "common/server.rs"]
mod server;

use serde_json::{json, Value};
use server::{Db, Server};
use std::time::{Duration, Instant};
use sutra::store::failpoint::VAR;

const WAITERS: usize = 3;

const SOURCE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:signal id="Go" name="go"/>
  <bpmn:process id="w" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:signalEventDefinition signalRef="Go"/></bpmn:intermediateCatchEvent>
    <bpmn:serviceTask id="After" implementation="registered:chaos"/>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="wait"/>
    <bpmn:sequenceFlow id="f1" sourceRef="wait" targetRef="After"/>
    <bpmn:sequenceFlow id="f2" sourceRef="After" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"#;

/// An event-based gateway racing signal `go` against a PT1H timer.
const GATEWAY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="https://example.com">
  <bpmn:signal id="Go" name="go"/>
  <bpmn:process id="w" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:eventBasedGateway id="race"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:signalEventDefinition signalRef="Go"/></bpmn:intermediateCatchEvent>
    <bpmn:intermediateCatchEvent id="late"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
    <bpmn:serviceTask id="After" implementation="registered:chaos"/>
    <bpmn:serviceTask id="Late" implementation="registered:chaos"/>
    <bpmn:endEvent id="end"/>
    <bpmn:endEvent id="end2"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="race"/>
    <bpmn:sequenceFlow id="f1" sourceRef="race" targetRef="wait"/>
    <bpmn:sequenceFlow id="f2" sourceRef="race" targetRef="late"/>
    <bpmn:sequenceFlow id="f3" sourceRef="wait" targetRef="After"/>
    <bpmn:sequenceFlow id="f4" sourceRef="After" targetRef="end"/>
    <bpmn:sequenceFlow id="f5" sourceRef="late" targetRef="Late"/>
    <bpmn:sequenceFlow id="f6" sourceRef="Late" targetRef="end2"/>
  </bpmn:process>
</bpmn:definitions>"#;

fn commits(log: &str) -> usize {
    log.lines()
        .filter(|l| l.starts_with("failpoint: commit "))
        .count()
}

/// A server with the failpoint, a tenant, the deployment and the waiters
/// (their starts are commits 1..=WAITERS): (server, tenant key, ids).
async fn setup(db: Db, failpoint: &str) -> Option<(Server, String, Vec<String>)> {
    setup_with(db, failpoint, SOURCE).await
}

async fn setup_with(
    db: Db,
    failpoint: &str,
    source: &str,
) -> Option<(Server, String, Vec<String>)> {
    let srv = Server::start_on(db, &[(VAR, failpoint)]).await?;
    let api = srv.tenant("acme", json!({})).await;
    let (status, body) = api
        .deploy(source, &[("chaos", common::guest_bytes("chaos"))])
        .await;
    assert_eq!(status.as_u16(), 201, "{body}");
    let mut ids = Vec::new();
    for _ in 0..WAITERS {
        let (status, body) = api.start("w", json!({"do": "echo"})).await;
        assert_eq!(status.as_u16(), 201, "{body}");
        assert_eq!(body["state"], "WAITING", "{body}");
        ids.push(body["instance"].as_str().unwrap().to_string());
    }
    Some((srv, api.token.clone().unwrap(), ids))
}

/// `POST /v1/signals`; `None` when the server died answering.
async fn broadcast(srv: &Server, token: &str) -> Option<Value> {
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/signals", srv.url))
        .bearer_auth(token)
        .json(&json!({"name": "go", "variables": {"heard": true}}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .ok()?;
    resp.json().await.ok()
}

async fn view(srv: &Server, token: &str, id: &str) -> Value {
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/instances/{id}", srv.url))
        .bearer_auth(token)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    resp.json().await.unwrap()
}

/// Every waiter COMPLETED, `After` run once each, `Late` never (bounded: 60 s).
async fn all_done_once(srv: &Server, token: &str, ids: &[String], point: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in ids {
        loop {
            let v = view(srv, token, id).await;
            if v["state"] == "COMPLETED" {
                let after = v["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|a| a["task"] == "After")
                    .count();
                assert_eq!(after, 1, "{point}: {id} reached {after} times: {v}");
                let late = v["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["task"] == "Late");
                assert!(!late, "{point}: the gateway's losing branch ran: {v}");
                assert_eq!(v["variables"]["heard"], true, "{point}: {v}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{point}: {id} never completed: {v}; log:\n{}",
                srv.log()
            );
            // The poller's next pass (the manual clock's advance runs one).
            srv.advance("PT1S").await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn walk(db: Db) {
    // The uncrashed run counts the commits.
    let Some((mut srv, token, ids)) = setup(db, "1000000").await else {
        return;
    };
    let answer = broadcast(&srv, &token)
        .await
        .expect("the uncrashed broadcast");
    assert_eq!(answer["delivered"], WAITERS, "{answer}");
    all_done_once(&srv, &token, &ids, "uncrashed").await;
    let total = commits(&srv.final_log());
    assert!(total >= 2 * WAITERS, "{total} commits");
    drop(srv);
    // Every commit of the fan-out (after the starts), both sides.
    for k in WAITERS + 1..=2 * WAITERS {
        for side in ["before", "after"] {
            let point = format!("{k}:{side}");
            let (mut srv, token, ids) = setup(db, &point).await.unwrap();
            let _ = broadcast(&srv, &token).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            while srv.exited().is_none() {
                assert!(Instant::now() < deadline, "{point}: never crashed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let log = srv.final_log();
            assert!(
                log.contains(&format!("failpoint: aborting {side} commit {k}")),
                "{point}: died, but not at its failpoint; log:\n{log}"
            );
            srv = srv.restart_without(VAR, "2030-01-01T01:00:00Z").await;
            all_done_once(&srv, &token, &ids, &point).await;
            // Nothing waits any more: a second broadcast (`sutra signal`) reaches nobody.
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
                .args([
                    "signal", "go", "--var", "n=2", "--format", "json", "--server", &srv.url,
                    "--token", &token,
                ])
                .output()
                .await
                .unwrap();
            assert!(
                out.status.success(),
                "{point}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let again: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(again["delivered"], 0, "{point}: {again}");
        }
    }
}

/// The gateway's winning commit crashed on either side: after the restart
/// the signal branch has won once, the timer's park is gone with it.
async fn walk_gateway(db: Db) {
    // Commits: the start (1, WAITERS of them), then each winning delivery.
    for k in WAITERS + 1..=2 * WAITERS {
        for side in ["before", "after"] {
            let point = format!("gateway {k}:{side}");
            let Some((mut srv, token, ids)) = setup_with(db, &format!("{k}:{side}"), GATEWAY).await
            else {
                return;
            };
            let _ = broadcast(&srv, &token).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            while srv.exited().is_none() {
                assert!(Instant::now() < deadline, "{point}: never crashed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            srv = srv.restart_without(VAR, "2030-01-01T00:00:01Z").await;
            all_done_once(&srv, &token, &ids, &point).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_at_the_winning_commit_of_an_event_based_gateway() {
    walk_gateway(Db::Sqlite).await;
    walk_gateway(Db::Postgres).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_at_any_commit_of_a_signal_fan_out() {
    walk(Db::Sqlite).await;
    walk(Db::Postgres).await;
}

#[test]
fn sutra_signal_refuses_a_malformed_var() {
    // Usage errors exit 2 before any request.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["signal", "go", "--var", "novalue"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
