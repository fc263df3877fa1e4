//! A crash at every commit point (the pattern of tests/crash_points.rs) for
//! the BPMN event constructs of issue 32: an instance whose interrupting
//! message event sub-process fires while a timer waits, after a
//! non-interrupting timer event sub-process ran, and a
//! compensate throw whose handlers run one at a time, one of them retried
//! after a backoff, and conditional events (a catch and a non-interrupting
//! boundary) waiting on condition parks across a timer. An uncrashed run counts its commits; then for every
//! commit k and each side of it a `sutra serve` with
//! `SUTRA_CRASH_AT_COMMIT=k:before|after` is driven until the failpoint
//! aborts it, restarted without it, driven to its end, and must end exactly
//! as the uncrashed run did (state, variables, node states, error, attempts).
//!
//! SQLite always; PostgreSQL too when `SUTRA_TEST_POSTGRES_URL` is set.

mod common;
#[path = "common/server.rs"]
mod server;

use reqwest::Method;
use serde_json::{json, Value};
use server::{Db, Server};
use std::time::{Duration, Instant};
use sutra::store::failpoint::VAR;

fn bpmn(body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
{body}
</bpmn:definitions>"#
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feature {
    EventSubProcess,
    Compensation,
    Conditional,
}

impl Feature {
    /// (definition, process id, input).
    fn case(self) -> (String, &'static str, Value) {
        match self {
            // `slow` waits ten hours; a non-interrupting timer event
            // sub-process runs `note` at 1 s; the message `abort` (sent once
            // `note` ran) then starts an interrupting event sub-process that
            // cancels `slow` and runs `undo`.
            Feature::EventSubProcess => (
                bpmn(
                    r#"<bpmn:message id="Abort" name="abort"/>
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:intermediateCatchEvent id="slow">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT10H</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:serviceTask id="late" implementation="registered:chaos"/>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="slow"/>
    <bpmn:sequenceFlow id="f2" sourceRef="slow" targetRef="late"/>
    <bpmn:sequenceFlow id="f3" sourceRef="late" targetRef="end"/>
    <bpmn:subProcess id="tick" triggeredByEvent="true">
      <bpmn:startEvent id="tickStart" isInterrupting="false">
        <bpmn:timerEventDefinition><bpmn:timeDuration>PT1S</bpmn:timeDuration></bpmn:timerEventDefinition>
      </bpmn:startEvent>
      <bpmn:serviceTask id="note" implementation="registered:chaos">
        <bpmn:extensionElements><q:io resultPath="$.noted"/></bpmn:extensionElements>
      </bpmn:serviceTask>
      <bpmn:endEvent id="tickEnd"/>
      <bpmn:sequenceFlow id="t1" sourceRef="tickStart" targetRef="note"/>
      <bpmn:sequenceFlow id="t2" sourceRef="note" targetRef="tickEnd"/>
    </bpmn:subProcess>
    <bpmn:subProcess id="cancel" triggeredByEvent="true">
      <bpmn:startEvent id="cancelStart"><bpmn:messageEventDefinition messageRef="Abort"/></bpmn:startEvent>
      <bpmn:serviceTask id="undo" implementation="registered:chaos">
        <bpmn:extensionElements><q:io resultPath="$.undone"/></bpmn:extensionElements>
      </bpmn:serviceTask>
      <bpmn:endEvent id="cancelEnd"/>
      <bpmn:sequenceFlow id="c1" sourceRef="cancelStart" targetRef="undo"/>
      <bpmn:sequenceFlow id="c2" sourceRef="undo" targetRef="cancelEnd"/>
    </bpmn:subProcess>
  </bpmn:process>"#,
                ),
                "p",
                json!({"do": "echo"}),
            ),
            // A conditional catch waits (a condition park) until `set`, after
            // a timer, makes `ready` true; a non-interrupting conditional
            // boundary on the sub-process fires once on the way.
            Feature::Conditional => (
                bpmn(
                    r#"<bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:parallelGateway id="fork"/>
    <bpmn:intermediateCatchEvent id="until">
      <bpmn:conditionalEventDefinition><bpmn:condition>ready</bpmn:condition></bpmn:conditionalEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:serviceTask id="then" implementation="registered:chaos">
      <bpmn:extensionElements><q:io resultPath="$.out"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:subProcess id="sub">
      <bpmn:startEvent id="s"/>
      <bpmn:intermediateCatchEvent id="later">
        <bpmn:timerEventDefinition><bpmn:timeDuration>PT2S</bpmn:timeDuration></bpmn:timerEventDefinition>
      </bpmn:intermediateCatchEvent>
      <bpmn:serviceTask id="set" implementation="registered:chaos"/>
      <bpmn:intermediateCatchEvent id="linger">
        <bpmn:timerEventDefinition><bpmn:timeDuration>PT2S</bpmn:timeDuration></bpmn:timerEventDefinition>
      </bpmn:intermediateCatchEvent>
      <bpmn:endEvent id="e"/>
      <bpmn:sequenceFlow id="s1" sourceRef="s" targetRef="later"/>
      <bpmn:sequenceFlow id="s2" sourceRef="later" targetRef="set"/>
      <bpmn:sequenceFlow id="s3" sourceRef="set" targetRef="linger"/>
      <bpmn:sequenceFlow id="s4" sourceRef="linger" targetRef="e"/>
    </bpmn:subProcess>
    <bpmn:boundaryEvent id="watch" attachedToRef="sub" cancelActivity="false">
      <bpmn:conditionalEventDefinition><bpmn:condition>ready</bpmn:condition></bpmn:conditionalEventDefinition>
    </bpmn:boundaryEvent>
    <bpmn:serviceTask id="seen" implementation="registered:chaos">
      <bpmn:extensionElements><q:io resultPath="$.seen"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="fork"/>
    <bpmn:sequenceFlow id="f2" sourceRef="fork" targetRef="until"/>
    <bpmn:sequenceFlow id="f3" sourceRef="until" targetRef="then"/>
    <bpmn:sequenceFlow id="f4" sourceRef="fork" targetRef="sub"/>
    <bpmn:sequenceFlow id="f5" sourceRef="watch" targetRef="seen"/>
  </bpmn:process>"#,
                ),
                "p",
                json!({"do": "echo", "ready": false,
                       "by-task": {"set": {"do": "emit", "output": {"ready": true}}}}),
            ),
            // reserve and charge complete; the throw compensates charge
            // (refund fails once, then succeeds after its backoff), then
            // reserve (release); then done runs.
            Feature::Compensation => (
                bpmn(
                    r#"<bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:serviceTask id="reserve" implementation="registered:chaos"/>
    <bpmn:boundaryEvent id="cReserve" attachedToRef="reserve"><bpmn:compensateEventDefinition/></bpmn:boundaryEvent>
    <bpmn:serviceTask id="release" isForCompensation="true" implementation="registered:chaos"/>
    <bpmn:association id="a1" sourceRef="cReserve" targetRef="release"/>
    <bpmn:serviceTask id="charge" implementation="registered:chaos"/>
    <bpmn:boundaryEvent id="cCharge" attachedToRef="charge"><bpmn:compensateEventDefinition/></bpmn:boundaryEvent>
    <bpmn:serviceTask id="refund" isForCompensation="true" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="3" initialDelay="PT1S" backoffCoefficient="1.0"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:association id="a2" sourceRef="cCharge" targetRef="refund"/>
    <bpmn:intermediateThrowEvent id="undoAll"><bpmn:compensateEventDefinition/></bpmn:intermediateThrowEvent>
    <bpmn:serviceTask id="done" implementation="registered:chaos">
      <bpmn:extensionElements><q:io resultPath="$.out"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="reserve"/>
    <bpmn:sequenceFlow id="f2" sourceRef="reserve" targetRef="charge"/>
    <bpmn:sequenceFlow id="f3" sourceRef="charge" targetRef="undoAll"/>
    <bpmn:sequenceFlow id="f4" sourceRef="undoAll" targetRef="done"/>
    <bpmn:sequenceFlow id="f5" sourceRef="done" targetRef="end"/>
  </bpmn:process>"#,
                ),
                "p",
                json!({"do": "echo", "by-task": {"refund": {"do": "fail", "until": 2}}}),
            ),
        }
    }
}

/// A request to a server that may have just died: `None` on a transport error.
async fn try_call(
    srv: &Server,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> Option<(u16, Value)> {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", srv.url))
        .bearer_auth(token)
        .timeout(Duration::from_secs(30));
    if let Some(b) = body {
        req = req.json(&b);
    }
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await.ok()?;
    let status = resp.status().as_u16();
    let text = resp.text().await.ok()?;
    Some((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

fn terminal(view: &Value) -> bool {
    matches!(
        view["state"].as_str(),
        Some("COMPLETED" | "FAILED" | "TERMINATED" | "COMPENSATED")
    )
}

/// A run in progress: the server, the tenant's key, the instance once started.
struct Run {
    srv: Server,
    token: String,
    id: Option<String>,
}

/// How a drive ended.
enum Driven {
    Ended(Value),
    Crashed,
}

/// Nudges the instance until it ends or the server dies: (re-)sends the
/// start, the message, the channel's answer; advances the clock a second.
/// A transport error means the failpoint is ending the process.
async fn drive(run: &mut Run, feature: Feature) -> Driven {
    let (_, process, input) = feature.case();
    let token = run.token.clone();
    let admin = server::ADMIN_KEY;
    for _ in 0..60 {
        let srv = &run.srv;
        if run.id.is_none() {
            let path = format!("/v1/processes/{process}/instances");
            let body = json!({ "variables": input });
            match try_call(
                srv,
                &token,
                Method::POST,
                &path,
                Some(body),
                Some("crash-1"),
            )
            .await
            {
                Some((200 | 201, view)) => run.id = view["instance"].as_str().map(String::from),
                Some((status, body)) => panic!("start: {status} {body}; log:\n{}", srv.log()),
                None => return crashed(run).await,
            }
        }
        let id = run.id.clone().unwrap();
        let path = format!("/v1/instances/{id}");
        let view = match try_call(srv, &token, Method::GET, &path, None, None).await {
            Some((200, view)) => view,
            Some((status, body)) => panic!("inspect: {status} {body}; log:\n{}", srv.log()),
            None => return crashed(run).await,
        };
        if terminal(&view) {
            return Driven::Ended(view);
        }
        // The event sub-process's message, once `note` ran (so every run
        // sees the same order).
        let nudge = match feature {
            Feature::EventSubProcess if view["nodes"]["note"] == "SUCCEEDED" => {
                let msg = json!({"name": "abort", "variables": {"why": "late"}});
                Some((token.as_str(), "/v1/messages".to_string(), msg))
            }
            _ => None,
        };
        let advance = (
            admin,
            "/v1/admin/clock/advance".to_string(),
            json!({"by": "PT1S"}),
        );
        for (key, path, body) in nudge.into_iter().chain([advance]) {
            // A message re-sent after its delivery committed finds no
            // listener: its answer is not looked at.
            if try_call(srv, key, Method::POST, &path, Some(body), None)
                .await
                .is_none()
            {
                return crashed(run).await;
            }
        }
    }
    panic!(
        "{feature:?}: the instance did not end; log:\n{}",
        run.srv.log()
    );
}

/// A request failed: the server must be dying (at most 30 s).
async fn crashed(run: &mut Run) -> Driven {
    assert!(
        wait_for_exit(run).await,
        "a request failed but the server runs on; log:\n{}",
        run.srv.log()
    );
    Driven::Crashed
}

/// A fresh server (with `failpoint` as `SUTRA_CRASH_AT_COMMIT`), a tenant,
/// the channel, the deployment.
async fn setup(db: Db, feature: Feature, failpoint: &str) -> Option<Run> {
    let env = [(VAR, failpoint), ("SUTRA_OUTBOX_ALLOWED_HOSTS", "loopback")];
    let srv = Server::start_on(db, &env).await?;
    let api = srv.tenant("acme", json!({})).await;
    let (definition, _, _) = feature.case();
    let (status, body) = api
        .deploy(&definition, &[("chaos", common::guest_bytes("chaos"))])
        .await;
    assert_eq!(status.as_u16(), 201, "{body}");
    Some(Run {
        srv,
        token: api.token.clone().unwrap(),
        id: None,
    })
}

/// What must be the same after any crash: state, variables, node states,
/// error code, and every attempt (task, number, outcome, code), sorted.
fn outcome(view: &Value) -> Value {
    let mut attempts: Vec<Value> = view["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| json!([a["task"], a["attempt"], a["outcome"], a["code"]]))
        .collect();
    attempts.sort_by_key(|a| a.to_string());
    json!({
        "state": view["state"],
        "variables": view["variables"],
        "nodes": view["nodes"],
        "error": view["error"]["code"],
        "attempts": attempts,
    })
}

/// The commits a server made, from its failpoint lines.
fn commits(log: &str) -> usize {
    log.lines()
        .filter(|l| l.starts_with("failpoint: commit "))
        .count()
}

/// Waits (at most 30 s) for the failpoint to end the process.
async fn wait_for_exit(run: &mut Run) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if run.srv.exited().is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// The walk for one feature on one backend.
async fn walk(db: Db, feature: Feature) {
    // The uncrashed run: the reference end and the number of commits.
    let Some(mut run) = setup(db, feature, "1000000").await else {
        return;
    };
    let Driven::Ended(view) = drive(&mut run, feature).await else {
        panic!(
            "{feature:?}: the uncrashed run died; log:\n{}",
            run.srv.log()
        );
    };
    let reference = outcome(&view);
    let log = run.srv.final_log();
    let total = commits(&log);
    assert!(total >= 2, "{feature:?}: only {total} commits; log:\n{log}");
    drop(run);
    eprintln!("{feature:?} on {db:?}: {total} commits, {reference}");
    for k in 1..=total {
        for side in ["before", "after"] {
            let point = format!("{k}:{side}");
            let mut run = setup(db, feature, &point).await.unwrap();
            if let Driven::Ended(_) = drive(&mut run, feature).await {
                // The last commit ended it: the abort follows at once.
                assert!(
                    wait_for_exit(&mut run).await,
                    "{feature:?} {point}: never crashed; log:\n{}",
                    run.srv.log()
                );
            }
            let log = run.srv.final_log();
            assert!(
                log.contains(&format!("failpoint: aborting {side} commit {k}")),
                "{feature:?} {point}: died, but not at its failpoint; log:\n{log}"
            );
            run.srv = run.srv.restart_without(VAR, "2030-01-01T01:00:00Z").await;
            let Driven::Ended(view) = drive(&mut run, feature).await else {
                panic!(
                    "{feature:?} {point}: died after the restart; log:\n{}",
                    run.srv.log()
                );
            };
            assert_eq!(
                outcome(&view),
                reference,
                "{feature:?} {point}: a restart after the crash ended differently; log:\n{}",
                run.srv.log()
            );
        }
    }
}

async fn both(feature: Feature) {
    walk(Db::Sqlite, feature).await;
    walk(Db::Postgres, feature).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_event_sub_processes() {
    both(Feature::EventSubProcess).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_conditional_events() {
    both(Feature::Conditional).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_a_bpmn_compensation() {
    both(Feature::Compensation).await;
}
