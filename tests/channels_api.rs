//! Channels over real HTTP against a spawned `sutra serve` (SQLite, the
//! manual clock) with a loopback counterpart: configure, deploy, deliver,
//! answer; refusals; external tasks; incidents in /metrics; and a kill -9
//! between the commit and the delivery.

mod common;
#[path = "common/counterpart.rs"]
mod counterpart;
#[path = "common/server.rs"]
mod server;

use counterpart::{Counterpart, Mode};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use server::Server;

fn definition(channel: &str, ext: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">
  <bpmn:process id="pay" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="Charge"/>
    <bpmn:serviceTask id="Charge" implementation="channel:{channel}">
      <bpmn:extensionElements>{ext}</bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="Charge" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

async fn server() -> Server {
    Server::start_with(&[("SUTRA_OUTBOX_ALLOWED_HOSTS", "loopback")]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_channel_round_trip_over_http() {
    let srv = server().await;
    let acme = srv.tenant("acme", json!({})).await;
    let cp = Counterpart::start().await;
    // Not configured: refused at deploy, never discovered at run time.
    let (status, body) = acme.deploy(&definition("payments", ""), &[]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "SUTRA.RUNTIME.CHANNEL.NOT_CONFIGURED");
    // Outside the allowed hosts: refused.
    let (status, body) = acme
        .call(
            Method::PUT,
            "/v1/channels/payments",
            Some(json!({"transport": "push", "url": "http://10.1.2.3/hook"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "SUTRA.OUTBOUND.HOST_NOT_ALLOWED");
    let (status, body) = acme
        .call(
            Method::PUT,
            "/v1/channels/payments",
            Some(json!({"transport": "push", "url": cp.url})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let secret = body["secret"].as_str().unwrap().to_string();
    let (status, body) = acme.get("/v1/channels/payments").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.get("secret").is_none(),
        "a GET never shows the secret: {body}"
    );
    let (status, body) = acme.deploy(&definition("payments", ""), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, started) = acme.start("pay", json!({"amount": 3})).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    assert_eq!(started["state"], "WAITING");
    let got = cp.wait_for(1).await;
    let t: i64 = got[0].signature[2..]
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        got[0].signature,
        sutra::runtime::sign(&secret, t, &got[0].raw)
    );
    let correlation = got[0].body["correlation"].clone();
    // Another tenant can neither see the channel nor answer the call.
    let globex = srv.tenant("globex", json!({})).await;
    let (status, _) = globex.get("/v1/channels/payments").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = globex
        .post(
            "/v1/channels/payments/responses",
            json!({"correlation": correlation, "variables": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "SUTRA.DISPATCH.CHANNEL_CALL.NOT_FOUND");
    // A live deployment's channel cannot be deleted.
    let (status, body) = acme
        .call(Method::DELETE, "/v1/channels/payments", None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, body) = acme
        .post(
            "/v1/channels/payments/responses",
            json!({"correlation": correlation, "variables": {"paid": true}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "COMPLETED");
    let id = started["instance"].as_str().unwrap();
    let (_, view) = acme.get(&format!("/v1/instances/{id}")).await;
    assert_eq!(view["variables"]["paid"], json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_tasks_and_incidents_over_http() {
    let srv = server().await;
    let acme = srv.tenant("acme", json!({})).await;
    acme.pull_channel("reviews").await;
    let (status, body) = acme.deploy(&definition("reviews", ""), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, started) = acme.start("pay", json!({"doc": 1})).await;
    let fetch =
        json!({"workerId": "w1", "channels": ["reviews"], "maxTasks": 5, "lockDuration": 60000});
    for left in [2, 1, 0] {
        let (status, body) = acme
            .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let task = &body["tasks"][0];
        assert_eq!(task["variables"], json!({"doc": 1}));
        let id = task["id"].as_str().unwrap();
        let (status, body) = acme
            .post(
                &format!("/v1/external-tasks/{id}/failure"),
                json!({"workerId": "w1", "errorMessage": "boom"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["retries"], json!(left));
    }
    let (status, body) = acme.get("/v1/incidents?state=OPEN").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let incidents = body["incidents"].as_array().unwrap();
    assert_eq!(incidents.len(), 1, "{body}");
    assert_eq!(incidents[0]["instance"], started["instance"]);
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", srv.url))
        .bearer_auth(server::ADMIN_KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("sutra_incidents{state=\"OPEN\"} 1"),
        "{metrics}"
    );
    let incident = incidents[0]["id"].as_str().unwrap();
    let (status, body) = acme
        .post(&format!("/v1/incidents/{incident}/resolve"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "rearmed");
    let (_, body) = acme
        .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
        .await;
    let id = body["tasks"][0]["id"].as_str().unwrap().to_string();
    // Not the holder: refused with a code.
    let (status, body) = acme
        .post(
            &format!("/v1/external-tasks/{id}/complete"),
            json!({"workerId": "w9"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["code"], "SUTRA.RUNTIME.EXTERNAL_TASK.LOCK_LOST");
    let (status, body) = acme
        .post(
            &format!("/v1/external-tasks/{id}/complete"),
            json!({"workerId": "w1", "variables": {"ok": true}}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let iid = started["instance"].as_str().unwrap();
    let (_, view) = acme.get(&format!("/v1/instances/{iid}")).await;
    assert_eq!(view["state"], "COMPLETED");
}

/// A kill -9 after the step committed its request and before the delivery
/// was recorded: after the restart the request is sent again, with the
/// same idempotency key (at least once, de-duplicable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_commit_and_delivery_resends_with_the_same_key() {
    let srv = server().await;
    let acme = srv.tenant("acme", json!({})).await;
    let cp = Counterpart::start().await;
    cp.set_mode(Mode::Hang);
    let (status, body) = acme
        .call(
            Method::PUT,
            "/v1/channels/payments",
            Some(json!({"transport": "push", "url": cp.url})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = acme.deploy(&definition("payments", ""), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // The start's answer waits for the delivery on the manual clock: do not wait for it.
    let starter = {
        let acme = acme.clone();
        tokio::spawn(async move { acme.start("pay", json!({"n": 1})).await })
    };
    let first = cp.wait_for(1).await[0].clone();
    starter.abort();
    // The request is committed; its delivery hangs. Kill -9, restart after
    // the sender's claim lapsed (connect 5 s + response 30 s + 5 s).
    cp.set_mode(Mode::Ok);
    let srv = srv.restart_at("2030-01-01T00:01:00Z").await;
    let acme = server::Api {
        base: srv.url.clone(),
        ..acme
    };
    let got = cp.wait_for(2).await;
    assert_eq!(got.len(), 2, "sent once more, not more: {:?}", got.len());
    assert_eq!(got[1].idempotency_key, first.idempotency_key);
    assert_eq!(got[1].body["requestId"], first.body["requestId"]);
    // The call still waits, and its answer completes it.
    let (status, body) = acme
        .post(
            "/v1/channels/payments/responses",
            json!({"correlation": first.body["correlation"], "variables": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}; log:\n{}", srv.log());
    assert_eq!(body["state"], "COMPLETED");
}

fn sutra(srv: &Server, token: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .env("SUTRA_SERVER", &srv.url)
        .env("SUTRA_TOKEN", token)
        .output()
        .expect("run sutra")
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `sutra channel`, `sutra incidents [resolve]`, `sutra migrate`, and
/// `sutra run --channel`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_channel_verbs() {
    let srv = server().await;
    let acme = srv.tenant("acme", json!({})).await;
    let key = acme.token.clone().unwrap();
    let set = ok(&sutra(&srv, &key, &["channel", "set", "reviews", "--pull"]));
    assert!(
        set.contains("reviews") && set.contains("pull") && set.contains("secret"),
        "{set}"
    );
    let usage = sutra(
        &srv,
        &key,
        &[
            "channel",
            "set",
            "reviews",
            "--pull",
            "--push",
            "http://127.0.0.1:1/x",
        ],
    );
    assert_eq!(
        usage.status.code(),
        Some(2),
        "--push and --pull exclude each other"
    );
    let list = ok(&sutra(&srv, &key, &["channel", "list"]));
    assert!(
        list.starts_with("NAME") && list.contains("reviews"),
        "{list}"
    );
    // A FAILED instance: the call times out (PT1S) with nobody to catch it.
    let (status, body) = acme
        .deploy(
            &definition("reviews", r#"<q:timeout duration="PT1S"/>"#),
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, started) = acme.start("pay", json!({})).await;
    let id = started["instance"].as_str().unwrap().to_string();
    // A worker fails it three times: an incident.
    let fetch = json!({"workerId": "w1", "channels": ["reviews"], "lockDuration": 60000});
    for _ in 0..3 {
        let (_, body) = acme
            .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
            .await;
        let task = body["tasks"][0]["id"].as_str().unwrap().to_string();
        acme.post(
            &format!("/v1/external-tasks/{task}/failure"),
            json!({"workerId": "w1", "errorMessage": "down"}),
        )
        .await;
    }
    let incidents = ok(&sutra(&srv, &key, &["incidents", "--instance", &id]));
    assert!(
        incidents.starts_with("ID") && incidents.contains("external_task_failed"),
        "{incidents}"
    );
    let listed: Value =
        serde_json::from_str(&ok(&sutra(&srv, &key, &["incidents", "--format", "json"]))).unwrap();
    let incident = listed["incidents"][0]["id"].as_str().unwrap().to_string();
    let resolved = ok(&sutra(&srv, &key, &["incidents", "resolve", &incident]));
    assert!(
        resolved.contains("RESOLVED") && resolved.contains("rearmed"),
        "{resolved}"
    );
    srv.advance("PT2S").await;
    let (_, view) = acme.get(&format!("/v1/instances/{id}")).await;
    assert_eq!(view["state"], "FAILED", "{view}");
    // Version 2 waits longer; the instance moves there and waits again.
    let (_, deployed) = acme
        .deploy(
            &definition("reviews", r#"<q:timeout duration="PT1H"/>"#),
            &[],
        )
        .await;
    let v2 = deployed["deployments"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let moved = ok(&sutra(&srv, &key, &["migrate", &id, "--to", &v2]));
    assert!(moved.contains("state WAITING"), "{moved}");
    let bad = sutra(
        &srv,
        &key,
        &["migrate", &id, "--to", &v2, "--map", "nonsense"],
    );
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn sutra_run_configures_its_channels() {
    let dir = tempfile::tempdir().unwrap();
    let def = dir.path().join("pay.bpmn");
    std::fs::write(&def, definition("reviews", "")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args([
            "run",
            def.to_str().unwrap(),
            "--channel",
            "reviews=pull",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let text = ok(&out);
    let view: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(view["state"], "WAITING", "{text}");
    // Without it: refused at deploy.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["run", def.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SUTRA.RUNTIME.CHANNEL.NOT_CONFIGURED"));
    // A call with a window (an hour) is the outside world's to answer: the run
    // prints the instance WAITING at once, on either clock, and returns.
    let timed = dir.path().join("timed.bpmn");
    std::fs::write(
        &timed,
        definition("reviews", r#"<q:timeout duration="PT1H"/>"#),
    )
    .unwrap();
    for clock in [None, Some("--virtual-clock")] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"));
        cmd.args([
            "run",
            timed.to_str().unwrap(),
            "--channel",
            "reviews=pull",
            "--format",
            "json",
        ]);
        cmd.args(clock);
        let text = ok(&cmd.output().unwrap());
        let view: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(view["state"], "WAITING", "{clock:?}: {text}");
        assert_eq!(view["waits"][0]["kind"], "channel", "{text}");
    }
}

/// Fetches `channel`'s one task for worker `w1` and reports a failure with
/// `message`; the task's id.
async fn fail_once(api: &server::Api, message: &str) -> String {
    let fetch =
        json!({"workerId": "w1", "channels": ["reviews"], "maxTasks": 1, "lockDuration": 60000});
    let (status, body) = api.post("/v1/external-tasks/fetch-and-lock", fetch).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let id = body["tasks"][0]["id"].as_str().expect("a task").to_string();
    let (status, body) = api
        .post(
            &format!("/v1/external-tasks/{id}/failure"),
            json!({"workerId": "w1", "errorMessage": message}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    id
}

/// What the attempts of `instance` say: (outcome, code, class, message,
/// worker, retriesLeft, attempt) per row, in order.
async fn timeline(api: &server::Api, instance: &str) -> Vec<Value> {
    let (status, body) = api.get(&format!("/v1/instances/{instance}/attempts")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            json!([
                a["task"],
                a["outcome"],
                a["code"],
                a["class"],
                a["message"],
                a["worker"],
                a["retriesLeft"],
                a["attempt"]
            ])
        })
        .collect()
}

/// A pull call's wait names its channel and request; each worker failure is
/// an attempts row, in time order, also once the retries are spent (an
/// incident). On both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_failures_and_the_channel_wait_are_shown_on_both_backends() {
    for db in [server::Db::Sqlite, server::Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[]).await else {
            continue;
        };
        let acme = srv.tenant("acme", json!({})).await;
        acme.pull_channel("reviews").await;
        let (status, body) = acme.deploy(&definition("reviews", ""), &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");

        // Fails twice (a second apart), then completes.
        let (_, started) = acme.start("pay", json!({"doc": 1})).await;
        let id = started["instance"].as_str().unwrap().to_string();
        let wait = &started["waits"][0];
        assert_eq!(
            (
                wait["kind"].as_str(),
                wait["node"].as_str(),
                wait["channel"].as_str()
            ),
            (Some("channel"), Some("Charge"), Some("reviews")),
            "{started}"
        );
        let request = wait["request"].as_str().expect("the request").to_string();
        let task = fail_once(&acme, "scanner offline").await;
        assert_eq!(
            task, request,
            "the wait names the external task it waits for"
        );
        srv.advance("PT1S").await;
        fail_once(&acme, "scanner <b>still</b> offline").await;
        srv.advance("PT1S").await;
        let fetch = json!({"workerId": "w2", "channels": ["reviews"], "lockDuration": 60000});
        let (_, body) = acme.post("/v1/external-tasks/fetch-and-lock", fetch).await;
        let (status, body) = acme
            .post(
                &format!(
                    "/v1/external-tasks/{}/complete",
                    body["tasks"][0]["id"].as_str().unwrap()
                ),
                json!({"workerId": "w2", "variables": {"ok": true}}),
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
        let failed = |message: &str, left: i64| {
            json!([
                "Charge",
                "worker_failed",
                "SUTRA.RUNTIME.EXTERNAL_TASK.FAILED",
                "transient",
                message,
                "w1",
                left,
                1
            ])
        };
        let completed = json!(["Charge", "completed", null, null, null, null, null, 1]);
        assert_eq!(
            timeline(&acme, &id).await,
            vec![
                failed("scanner offline", 2),
                failed("scanner <b>still</b> offline", 1),
                completed
            ],
            "{db:?}"
        );
        let (_, view) = acme.get(&format!("/v1/instances/{id}")).await;
        assert_eq!(view["state"], "COMPLETED", "{view}");
        assert_eq!(view["waits"], json!([]), "{view}");

        // Fails until the retries are spent, all at one instant: an incident,
        // and every failure listed, in the order reported.
        let (_, started) = acme.start("pay", json!({"doc": 2})).await;
        let id = started["instance"].as_str().unwrap().to_string();
        for n in 1..=3 {
            fail_once(&acme, &format!("failure {n}")).await;
        }
        let (_, incidents) = acme.get(&format!("/v1/incidents?instance={id}")).await;
        assert_eq!(incidents["incidents"][0]["state"], "OPEN", "{incidents}");
        assert_eq!(
            timeline(&acme, &id).await,
            vec![
                failed("failure 1", 2),
                failed("failure 2", 1),
                failed("failure 3", 0)
            ],
            "{db:?}"
        );
        let (_, view) = acme.get(&format!("/v1/instances/{id}")).await;
        assert_eq!(
            (view["state"].as_str(), view["waits"][0]["channel"].as_str()),
            (Some("WAITING"), Some("reviews")),
            "the call still waits: {view}"
        );
        let other = srv.tenant("other", json!({})).await;
        let (status, _) = other.get(&format!("/v1/instances/{id}/attempts")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // The OpenAPI document shows the worker fields.
        let (_, doc) = srv.anonymous().get("/v1/openapi.json").await;
        let props = &doc["components"]["schemas"]["AttemptBody"]["properties"];
        assert!(
            props["worker"].is_object() && props["retriesLeft"].is_object(),
            "{props}"
        );
    }
}
