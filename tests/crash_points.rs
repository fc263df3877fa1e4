//! A crash at every commit point (issue 20 item 2): for a representative
//! instance of each feature — retry, timer, message, compensation, channel
//! call, a States-language Map with a timer and an event wait, a BPMN inclusive
//! split whose OR-join waits across a retry and a timer, a parallel BPMN
//! multi-instance body with a retried item, a call activity whose child
//! waits on a timer — an uncrashed run counts its commits (the failpoint prints one line
//! per commit), then for every commit k and each side of it, a `sutra serve`
//! with `SUTRA_CRASH_AT_COMMIT=k:before|after` (src/store/failpoint.rs) is
//! driven until the failpoint aborts it, restarted without the failpoint,
//! driven to its end, and must end exactly as the uncrashed run did: same
//! state, variables, node states, error code, and the same attempts (each
//! number once). The start goes with an `Idempotency-Key` and is re-sent
//! after a crash, so a start whose answer died with the process is covered
//! too.
//!
//! SQLite always; PostgreSQL too when `SUTRA_TEST_POSTGRES_URL` is set. The
//! manual clock makes each run deterministic (the driver advances it), and
//! the restart starts it an hour later, past every claim the dead process
//! held. Every wait is bounded.

mod common;
#[path = "common/counterpart.rs"]
mod counterpart;
#[path = "common/server.rs"]
mod server;

use counterpart::Counterpart;
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
    Retry,
    Timer,
    Message,
    Compensation,
    Channel,
    States,
    InclusiveJoin,
    MultiInstance,
    CallActivity,
}

impl Feature {
    /// (definition, process id, input).
    fn case(self) -> (String, &'static str, Value) {
        match self {
            // Two failed attempts, each a commit with its backoff, then success.
            Feature::Retry => (
                bpmn(
                    r#"<bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements>
        <q:retry maxAttempts="4" initialDelay="PT1S" backoffCoefficient="1.0"/>
        <q:io resultPath="$.out"/>
      </bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#,
                ),
                "p",
                json!({"do": "fail", "until": 3}),
            ),
            // An inclusive split takes both branches: one retries after a
            // backoff, one waits on a timer; the OR-join waits for both
            // across commits, then `after` runs once.
            Feature::InclusiveJoin => (
                bpmn(
                    r#"<bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:inclusiveGateway id="split"/>
    <bpmn:serviceTask id="flaky" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="3" initialDelay="PT1S"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:intermediateCatchEvent id="pause">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT2S</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:inclusiveGateway id="join"/>
    <bpmn:serviceTask id="after" implementation="registered:chaos">
      <bpmn:extensionElements><q:io resultPath="$.out"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="split"/>
    <bpmn:sequenceFlow id="a" sourceRef="split" targetRef="flaky"><bpmn:conditionExpression>left</bpmn:conditionExpression></bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="b" sourceRef="split" targetRef="pause"><bpmn:conditionExpression>right</bpmn:conditionExpression></bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="a2" sourceRef="flaky" targetRef="join"/>
    <bpmn:sequenceFlow id="b2" sourceRef="pause" targetRef="join"/>
    <bpmn:sequenceFlow id="f1" sourceRef="join" targetRef="after"/>
    <bpmn:sequenceFlow id="f2" sourceRef="after" targetRef="end"/>
  </bpmn:process>"#,
                ),
                "p",
                json!({"left": true, "right": true, "do": "echo",
                       "by-task": {"flaky": {"do": "fail", "until": 2}}}),
            ),
            // A parallel multi-instance body over three items, two at a
            // time: one item retries after a backoff; the results are
            // collected in input order.
            Feature::MultiInstance => (
                bpmn(
                    r#"<bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:serviceTask id="each" implementation="registered:chaos">
      <bpmn:extensionElements>
        <q:retry maxAttempts="3" initialDelay="PT1S"/>
        <q:io inputPath="$.item"/>
      </bpmn:extensionElements>
      <bpmn:multiInstanceLoopCharacteristics>
        <bpmn:extensionElements>
          <q:multiInstance collection="items" element="item" outputCollection="out" outputElement="n" maxConcurrency="2"/>
        </bpmn:extensionElements>
      </bpmn:multiInstanceLoopCharacteristics>
    </bpmn:serviceTask>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="each"/>
    <bpmn:sequenceFlow id="f1" sourceRef="each" targetRef="end"/>
  </bpmn:process>"#,
                ),
                "p",
                json!({"items": [
                    {"do": "echo", "n": 1},
                    {"do": "fail", "until": 2, "n": 2},
                    {"do": "echo", "n": 3}
                ]}),
            ),
            // A call activity whose child waits on a timer, then works.
            Feature::CallActivity => (
                bpmn(
                    r#"<bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:callActivity id="call" calledElement="child">
      <bpmn:extensionElements><q:io resultPath="$.child"/></bpmn:extensionElements>
    </bpmn:callActivity>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="call"/>
    <bpmn:sequenceFlow id="f1" sourceRef="call" targetRef="end"/>
  </bpmn:process>
  <bpmn:process id="child" isExecutable="true">
    <bpmn:startEvent id="c0"/>
    <bpmn:intermediateCatchEvent id="pause">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT2S</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:serviceTask id="work" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="c1" sourceRef="c0" targetRef="pause"/>
    <bpmn:sequenceFlow id="c2" sourceRef="pause" targetRef="work"/>
  </bpmn:process>"#,
                ),
                "p",
                json!({"do": "echo", "n": 7}),
            ),
            Feature::Timer => (
                bpmn(
                    r#"<bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="pause"/>
    <bpmn:intermediateCatchEvent id="pause">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT2S</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="pause" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements><q:io resultPath="$.out"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f3" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#,
                ),
                "p",
                json!({"do": "echo", "n": 1}),
            ),
            Feature::Message => (
                bpmn(
                    r#"<bpmn:message id="Go" name="go"/>
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:extensionElements><q:correlation key="key"/></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="Go"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements><q:io resultPath="$.out"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f3" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#,
                ),
                "p",
                json!({"do": "echo", "key": "k1"}),
            ),
            // ship is spent after two attempts; the unwind runs refund
            // (which fails once and waits out its backoff), then release.
            Feature::Compensation => (
                r#"<?xml version="1.0"?>
<workflow id="p">
  <node id="reserve" type="task" impl="chaos"/>
  <node id="capture" type="task" impl="chaos" idempotent="false"/>
  <node id="ship" type="task" impl="chaos">
    <retry maxAttempts="2" backoff="fixed" initialDelay="PT1S" jitter="false"/>
  </node>
  <node id="refund" type="task" impl="chaos" compensates="capture">
    <retry maxAttempts="3" backoff="fixed" initialDelay="PT1S" jitter="false"/>
  </node>
  <node id="release" type="task" impl="chaos" compensates="reserve"/>
  <edges>
    <edge from="reserve" to="capture"/>
    <edge from="capture" to="ship"/>
    <edge from="capture" to="refund" type="compensation"/>
    <edge from="reserve" to="release" type="compensation"/>
  </edges>
</workflow>"#
                    .to_string(),
                "p",
                json!({"do": "echo", "by-task": {
                    "ship": {"do": "fail"},
                    "refund": {"do": "fail", "until": 2}
                }}),
            ),
            Feature::Channel => (
                bpmn(
                    r#"<bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="call"/>
    <bpmn:serviceTask id="call" implementation="channel:payments"/>
    <bpmn:sequenceFlow id="f2" sourceRef="call" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements><q:io inputPath="$.next" resultPath="$.out"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f3" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#,
                ),
                "p",
                json!({"amount": 3, "next": {"do": "echo"}}),
            ),
            // A Map whose second item retries once, a timer, an event wait.
            Feature::States => (
                r#"{
  "Name": "p",
  "StartAt": "Lines",
  "States": {
    "Lines": {
      "Type": "Map",
      "ItemsPath": "$.lines",
      "ItemProcessor": {
        "StartAt": "Reserve",
        "States": {
          "Reserve": {
            "Type": "Task",
            "Resource": "chaos",
            "Retry": [{"ErrorEquals": ["BUSY"], "IntervalSeconds": 1, "MaxAttempts": 2}],
            "End": true
          }
        }
      },
      "ResultPath": "$.reserved",
      "Next": "Pause"
    },
    "Pause": {"Type": "Wait", "Seconds": 2, "Next": "Approve"},
    "Approve": {"Type": "Wait", "EventName": "go", "ResultPath": "$.approval", "Next": "Done"},
    "Done": {"Type": "Succeed"}
  }
}"#
                .to_string(),
                "p",
                json!({"lines": [
                    {"do": "echo"},
                    {"do": "fail", "code": "BUSY", "until": 2}
                ]}),
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
async fn drive(run: &mut Run, feature: Feature, cp: &Counterpart) -> Driven {
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
        let nudge = match feature {
            Feature::Message => {
                let msg = json!({"name": "go", "correlationKey": "k1", "variables": {"got": 1}});
                Some((token.as_str(), "/v1/messages".to_string(), msg))
            }
            Feature::States => {
                let path = format!("/v1/instances/{id}/events/go");
                Some((token.as_str(), path, json!({"by": 1})))
            }
            Feature::Channel => cp.received().last().map(|req| {
                let answer =
                    json!({"correlation": req.body["correlation"], "variables": {"paid": true}});
                let path = "/v1/channels/payments/responses".to_string();
                (token.as_str(), path, answer)
            }),
            _ => None,
        };
        let advance = (
            admin,
            "/v1/admin/clock/advance".to_string(),
            json!({"by": "PT1S"}),
        );
        for (key, path, body) in nudge.into_iter().chain([advance]) {
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
async fn setup(db: Db, feature: Feature, failpoint: &str, cp: &Counterpart) -> Option<Run> {
    let env = [(VAR, failpoint), ("SUTRA_OUTBOX_ALLOWED_HOSTS", "loopback")];
    let srv = Server::start_on(db, &env).await?;
    let api = srv.tenant("acme", json!({})).await;
    if feature == Feature::Channel {
        let (status, body) = api
            .call(
                Method::PUT,
                "/v1/channels/payments",
                Some(json!({"transport": "push", "url": cp.url})),
            )
            .await;
        assert_eq!(status.as_u16(), 201, "{body}");
    }
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
    let cp = Counterpart::start().await;
    // The uncrashed run: the reference end and the number of commits.
    let Some(mut run) = setup(db, feature, "1000000", &cp).await else {
        return;
    };
    let Driven::Ended(view) = drive(&mut run, feature, &cp).await else {
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
            let cp = Counterpart::start().await;
            let point = format!("{k}:{side}");
            let mut run = setup(db, feature, &point, &cp).await.unwrap();
            if let Driven::Ended(_) = drive(&mut run, feature, &cp).await {
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
            let Driven::Ended(view) = drive(&mut run, feature, &cp).await else {
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
            if feature == Feature::Channel {
                // Every delivery of one request carries its key; none is lost.
                assert!(
                    !cp.received().is_empty(),
                    "{feature:?} {point}: no delivery"
                );
            }
        }
    }
}

async fn both(feature: Feature) {
    walk(Db::Sqlite, feature).await;
    walk(Db::Postgres, feature).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_a_retried_task() {
    both(Feature::Retry).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_a_timer() {
    both(Feature::Timer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_a_message_wait() {
    both(Feature::Message).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_a_compensation() {
    both(Feature::Compensation).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_a_channel_call() {
    both(Feature::Channel).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_a_states_map_and_waits() {
    both(Feature::States).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_an_inclusive_join() {
    both(Feature::InclusiveJoin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_a_parallel_multi_instance_body() {
    both(Feature::MultiInstance).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_commit_of_a_call_activity() {
    both(Feature::CallActivity).await;
}
