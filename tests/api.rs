//! The HTTP API over real HTTP against a spawned `sutra serve` (SQLite, the
//! manual virtual clock): deploy → start → inspect → history, bundles
//! refused whole, idempotent starts, hot-deploy and retirement, schedules,
//! tenants and quotas, cancel and retry, and hostile requests.

mod common;
#[path = "common/server.rs"]
mod server;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use server::Server;

const HEADER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="d" targetNamespace="https://example.com">"#;

fn definition(body: &str) -> String {
    format!("{HEADER}\n{body}\n</bpmn:definitions>")
}

/// start → T (chaos, q:retry 3 × PT10S) → a PT1H timer → end.
fn retry_and_timer(process: &str) -> String {
    definition(&format!(
        r#"<bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="3" initialDelay="PT10S"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#
    ))
}

/// start → T (chaos, q:retry 3 × PT10S) → end; `name` varies the text between versions.
fn retried(process: &str, name: &str) -> String {
    definition(&format!(
        r#"<bpmn:process id="{process}" name="{name}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T"/>
    <bpmn:serviceTask id="T" implementation="registered:chaos">
      <bpmn:extensionElements><q:retry maxAttempts="3" initialDelay="PT10S"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="T" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#
    ))
}

/// start → wait for message `go` (keyed by `$.key`) → end.
fn waits_for_message(process: &str) -> String {
    definition(&format!(
        r#"<bpmn:message id="Go" name="go"/>
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:extensionElements><q:correlation key="key"/></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="Go"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#
    ))
}

/// A timer start `cycle` → (optionally a message wait) → end.
fn scheduled(process: &str, cycle: &str, then_wait: bool) -> String {
    let (next, wait) = if then_wait {
        (
            "wait",
            r#"<bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="Go"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>"#,
        )
    } else {
        ("end", "")
    };
    definition(&format!(
        r#"<bpmn:message id="Go" name="go"/>
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="every">
      <bpmn:timerEventDefinition><bpmn:timeCycle>{cycle}</bpmn:timeCycle></bpmn:timerEventDefinition>
    </bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="every" targetRef="{next}"/>
    {wait}
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#
    ))
}

/// T1 echoes `$.first` into `$.firstOut`; T2 runs `$.second` (no retry policy).
fn two_steps(process: &str) -> String {
    definition(&format!(
        r#"<bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="T1"/>
    <bpmn:serviceTask id="T1" implementation="registered:chaos">
      <bpmn:extensionElements><q:io inputPath="$.first" resultPath="$.firstOut"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="T1" targetRef="T2"/>
    <bpmn:serviceTask id="T2" implementation="registered:chaos">
      <bpmn:extensionElements><q:io inputPath="$.second" resultPath="$.secondOut"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f3" sourceRef="T2" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#
    ))
}

fn chaos() -> Vec<u8> {
    common::guest_bytes("chaos")
}

/// Deploy and answer the (single) deployment.
async fn deploy_ok(api: &server::Api, def: &str) -> Value {
    let (status, body) = api.deploy(def, &[("chaos", chaos())]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["deployments"][0].clone()
}

async fn deploy_plain(api: &server::Api, def: &str) -> Value {
    let (status, body) = api.deploy(def, &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["deployments"][0].clone()
}

fn id(v: &Value) -> String {
    v["instance"]
        .as_str()
        .or(v["id"].as_str())
        .unwrap_or_else(|| panic!("no id in {v}"))
        .to_string()
}

async fn state_of(api: &server::Api, instance: &str) -> Value {
    let (status, body) = api.get(&format!("/v1/instances/{instance}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn deployment_state(api: &server::Api, dep: &str) -> String {
    let (status, body) = api.get(&format!("/v1/deployments/{dep}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["state"].as_str().unwrap().to_string()
}

async fn instances(api: &server::Api, query: &str) -> Vec<Value> {
    let (status, body) = api.get(&format!("/v1/instances{query}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["instances"].as_array().unwrap().clone()
}

async fn schedules(api: &server::Api, dep: &str) -> Value {
    let (status, body) = api.get(&format!("/v1/deployments/{dep}/schedules")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_start_inspect_history_with_a_retried_task_and_a_timer() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let dep = deploy_ok(&api, &retry_and_timer("flow")).await;
    assert_eq!(dep["state"], "ACTIVE");
    assert_eq!(dep["version"], 1);

    let (status, started) = api.start("flow", json!({"do": "fail", "until": 2})).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    assert_eq!(
        started["state"], "WAITING",
        "the first attempt failed and its retry is parked: {started}"
    );
    let iid = id(&started);

    srv.advance("PT10S").await;
    let mid = state_of(&api, &iid).await;
    assert_eq!(
        mid["state"], "WAITING",
        "attempt 2 succeeded; the PT1H timer waits: {mid}"
    );
    assert_eq!(mid["attempts"].as_array().unwrap().len(), 2);

    srv.advance("PT1H").await;
    let done = state_of(&api, &iid).await;
    assert_eq!(done["state"], "COMPLETED", "{done}");
    let outcomes: Vec<&str> = done["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["failed", "completed"], "{done}");
    assert_eq!(done["deployment"], dep["id"]);

    let (status, history) = api.get(&format!("/v1/instances/{iid}/history")).await;
    assert_eq!(status, StatusCode::OK, "{history}");
    assert_eq!(history["audit"], true);
    let entries = history["entries"].as_array().unwrap();
    assert!(entries.len() >= 4, "{history}");
    let seqs: Vec<i64> = entries.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "history in order: {seqs:?}"
    );

    let listed = instances(&api, "?state=COMPLETED&process=flow").await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], iid.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_bundle_is_refused_whole_and_nothing_is_stored() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;

    // An invalid definition: 422 with the check diagnostics.
    let broken = definition(
        r#"<bpmn:process id="p" isExecutable="true"><bpmn:startEvent id="s"/></bpmn:process>"#,
    );
    let (status, body) = api.deploy(&broken, &[("chaos", chaos())]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["code"].as_str().unwrap().starts_with("SUTRA.CONFIG."),
        "{body}"
    );
    assert!(
        !body["details"]["diagnostics"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{body}"
    );

    // A missing module: 422 naming it.
    let (status, body) = api.deploy(&retried("p", "v1"), &[]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "SUTRA.RUNTIME.TASK_NOT_REGISTERED");
    assert_eq!(body["details"]["module"], "chaos");

    // An invalid module (not a component): 422 naming it.
    let (status, body) = api
        .deploy(
            &retried("p", "v1"),
            &[("chaos", b"\0asm not really".to_vec())],
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "SUTRA.TASK.MODULE_INVALID");
    assert_eq!(body["details"]["module"], "chaos");

    // No definition part at all: 400.
    let form =
        reqwest::multipart::Form::new().part("chaos", reqwest::multipart::Part::bytes(chaos()));
    let (status, body) = api
        .send(api.request(Method::POST, "/v1/deployments").multipart(form))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "SUTRA.API.MALFORMED_REQUEST");

    // Nothing was stored: no deployment, nothing to start.
    let (status, body) = api.get("/v1/deployments").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["deployments"], json!([]), "{body}");
    let (status, body) = api.start("p", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "SUTRA.RUNTIME.PROCESS_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_with_an_idempotency_key_returns_the_same_instance() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy_plain(&api, &waits_for_message("order")).await;
    let start = |key: &'static str| {
        let api = api.clone();
        async move {
            api.send(
                api.request(Method::POST, "/v1/processes/order/instances")
                    .header("Idempotency-Key", key)
                    .json(&json!({"variables": {"key": "o-1"}})),
            )
            .await
        }
    };
    let (s1, first) = start("order-1").await;
    let (s2, again) = start("order-1").await;
    let (s3, other) = start("order-2").await;
    assert_eq!(s1, StatusCode::CREATED, "{first}");
    assert_eq!(
        s2,
        StatusCode::OK,
        "a replay answers the existing instance: {again}"
    );
    assert_eq!(s3, StatusCode::CREATED);
    assert_eq!(id(&first), id(&again));
    assert_ne!(id(&first), id(&other));
    assert_eq!(instances(&api, "").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_deploy_pins_instances_and_retires_v1_only_when_they_end() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let v1 = deploy_ok(&api, &retried("hot", "v1")).await;
    let (_, a) = api.start("hot", json!({"do": "fail", "until": 2})).await;
    assert_eq!(a["state"], "WAITING", "parked in a backoff: {a}");

    let v2 = deploy_ok(&api, &retried("hot", "v2")).await;
    assert_eq!(v2["version"], 2);
    assert_eq!(
        deployment_state(&api, v1["id"].as_str().unwrap()).await,
        "DRAINING"
    );
    let (_, b) = api.start("hot", json!({"do": "echo"})).await;
    assert_eq!(b["deployment"], v2["id"], "new starts go to v2");
    assert_eq!(b["state"], "COMPLETED");

    srv.advance("PT1M").await;
    let a_done = state_of(&api, &id(&a)).await;
    assert_eq!(a_done["state"], "COMPLETED", "{a_done}");
    assert_eq!(
        a_done["deployment"], v1["id"],
        "the v1 instance finished on v1"
    );
    assert_eq!(
        deployment_state(&api, v1["id"].as_str().unwrap()).await,
        "RETIRED"
    );

    // A FAILED v2 instance keeps v2 DRAINING after v3 replaces it.
    let (_, c) = api
        .start("hot", json!({"do": "fail", "code": "DOWN"}))
        .await;
    srv.advance("PT5M").await;
    assert_eq!(state_of(&api, &id(&c)).await["state"], "FAILED");
    deploy_ok(&api, &retried("hot", "v3")).await;
    srv.advance("PT1H").await;
    assert_eq!(
        deployment_state(&api, v2["id"].as_str().unwrap()).await,
        "DRAINING"
    );

    // Undeploy: no new starts; nothing holds v3, so it retires.
    let (_, list) = api.get("/v1/deployments").await;
    let v3 = list["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["version"] == 3)
        .unwrap()
        .clone();
    let (status, body) = api
        .call(
            Method::DELETE,
            &format!("/v1/deployments/{}", v3["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "RETIRED");
    let (status, body) = api.start("hot", json!({"do": "echo"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_fires_once_per_slot_within_its_budget() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let dep = deploy_plain(&api, &scheduled("tick", "R3/PT1H", false)).await;
    let dep_id = dep["id"].as_str().unwrap();
    assert_eq!(
        instances(&api, "").await.len(),
        0,
        "a schedule has no instance until it fires"
    );
    srv.advance("PT30M").await;
    assert_eq!(instances(&api, "").await.len(), 0);
    srv.advance("PT5H").await;
    let all = instances(&api, "?process=tick").await;
    assert_eq!(all.len(), 3, "R3/PT1H fires three times: {all:?}");
    assert!(all.iter().all(|i| i["state"] == "COMPLETED"));
    let s = schedules(&api, dep_id).await;
    assert_eq!(s["schedules"][0]["state"], "EXHAUSTED", "{s}");
    assert_eq!(s["schedules"][0]["fires"], 3);
    assert_eq!(s["schedules"][0]["skipped"], 0);
    let slots: Vec<i64> = s["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["slot"].as_i64().unwrap())
        .collect();
    assert_eq!(slots, [0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_across_three_slots_fires_once_on_boot_and_spends_the_skipped_slots() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let dep = deploy_plain(&api, &scheduled("tick", "R5/PT1H", false)).await;
    let dep_id = dep["id"].as_str().unwrap().to_string();
    srv.advance("PT1H30M").await;
    assert_eq!(instances(&api, "").await.len(), 1, "slot 0 fired");

    // Down from 01:30 to 04:30: slots 1, 2 and 3 are missed.
    let srv = srv.restart_at("2030-01-01T04:30:00Z").await;
    let api = server::Api {
        base: srv.url.clone(),
        ..api
    };
    assert_eq!(
        instances(&api, "").await.len(),
        2,
        "one coalesced fire on boot, not three"
    );
    let s = schedules(&api, &dep_id).await;
    assert_eq!(s["schedules"][0]["skipped"], 2, "{s}");
    assert_eq!(s["events"][1]["slot"], 3);
    assert_eq!(s["events"][1]["skipped"], 2);

    // Budget 5 = 3 fires + 2 skipped: slot 4 is the last.
    srv.advance("PT10H").await;
    assert_eq!(instances(&api, "").await.len(), 3);
    let s = schedules(&api, &dep_id).await;
    assert_eq!(s["schedules"][0]["state"], "EXHAUSTED", "{s}");
    assert_eq!(s["schedules"][0]["fires"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeploy_and_hot_deploy_resolve_schedules() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let v1 = deploy_plain(&api, &scheduled("tick", "R/PT1H", false)).await;
    srv.advance("PT1H30M").await;
    assert_eq!(instances(&api, "").await.len(), 1);

    // Hot deploy: v1's schedule resolves, v2's is armed from now.
    let v2 = deploy_plain(&api, &scheduled("tick", "R/PT2H", false)).await;
    let s1 = schedules(&api, v1["id"].as_str().unwrap()).await;
    assert_eq!(s1["schedules"][0]["state"], "RESOLVED", "{s1}");
    assert_eq!(
        deployment_state(&api, v1["id"].as_str().unwrap()).await,
        "RETIRED"
    );
    srv.advance("PT2H30M").await;
    let all = instances(&api, "").await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1]["deployment"], v2["id"]);

    // Undeploy: resolved, never fires again.
    let (status, body) = api
        .call(
            Method::DELETE,
            &format!("/v1/deployments/{}", v2["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let s2 = schedules(&api, v2["id"].as_str().unwrap()).await;
    assert_eq!(s2["schedules"][0]["state"], "RESOLVED", "{s2}");
    srv.advance("PT10H").await;
    assert_eq!(instances(&api, "").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_never_see_each_other() {
    let srv = Server::start().await;
    let a = srv.tenant("alpha", json!({})).await;
    let b = srv.tenant("beta", json!({})).await;
    let dep = deploy_plain(&a, &waits_for_message("order")).await;
    let dep_id = dep["id"].as_str().unwrap();
    let (_, inst) = a.start("order", json!({"key": "k1"})).await;
    let iid = id(&inst);

    let not_found = |(status, body): (StatusCode, Value), code: &str, what: &str| {
        assert_eq!(status, StatusCode::NOT_FOUND, "{what}: {body}");
        assert_eq!(body["code"], code, "{what}");
    };
    not_found(
        b.get(&format!("/v1/instances/{iid}")).await,
        "SUTRA.RUNTIME.INSTANCE_NOT_FOUND",
        "inspect",
    );
    not_found(
        b.get(&format!("/v1/instances/{iid}/history")).await,
        "SUTRA.RUNTIME.INSTANCE_NOT_FOUND",
        "history",
    );
    not_found(
        b.post(&format!("/v1/instances/{iid}/cancel"), json!({}))
            .await,
        "SUTRA.RUNTIME.INSTANCE_NOT_FOUND",
        "cancel",
    );
    not_found(
        b.call(Method::POST, &format!("/v1/instances/{iid}/retry"), None)
            .await,
        "SUTRA.RUNTIME.INSTANCE_NOT_FOUND",
        "retry",
    );
    not_found(
        b.get(&format!("/v1/deployments/{dep_id}")).await,
        "SUTRA.RUNTIME.DEPLOYMENT_NOT_FOUND",
        "deployment",
    );
    not_found(
        b.get(&format!("/v1/deployments/{dep_id}/schedules")).await,
        "SUTRA.RUNTIME.DEPLOYMENT_NOT_FOUND",
        "schedules",
    );
    not_found(
        b.call(Method::DELETE, &format!("/v1/deployments/{dep_id}"), None)
            .await,
        "SUTRA.RUNTIME.DEPLOYMENT_NOT_FOUND",
        "undeploy",
    );
    not_found(
        b.start("order", json!({})).await,
        "SUTRA.RUNTIME.PROCESS_NOT_FOUND",
        "start",
    );
    not_found(
        b.post(
            "/v1/messages",
            json!({"name": "go", "correlationKey": "k1"}),
        )
        .await,
        "SUTRA.RUNTIME.MESSAGE.NOT_CORRELATED",
        "message",
    );
    // The same answer as an id that does not exist at all.
    let (_, missing) = b.get("/v1/instances/0000000000000000000000000000").await;
    let (_, foreign) = b.get(&format!("/v1/instances/{iid}")).await;
    assert_eq!(missing["code"], foreign["code"]);
    assert_eq!(instances(&b, "").await.len(), 0);
    let (_, deps) = b.get("/v1/deployments").await;
    assert_eq!(deps["deployments"], json!([]));
    // Alpha still sees and owns everything; its message correlates.
    let (status, body) = a
        .post(
            "/v1/messages",
            json!({"name": "go", "correlationKey": "k1"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(state_of(&a, &iid).await["state"], "COMPLETED");

    // No key, a bad key, a tenant key on admin routes, the admin key on tenant routes.
    let (status, body) = srv.anonymous().get("/v1/instances").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("SUTRA.API.UNAUTHORIZED"))
    );
    let forged = server::Api {
        token: Some(format!("{}0", a.token.clone().unwrap())),
        ..a.clone()
    };
    assert_eq!(
        forged.get("/v1/instances").await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(a.get("/v1/admin/tenants").await.0, StatusCode::FORBIDDEN);
    assert_eq!(
        srv.admin().get("/v1/instances").await.0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_refuse_starts_modules_and_schedule_fires() {
    let srv = Server::start().await;
    let small = srv
        .tenant("small", json!({"maxInstances": 1, "maxModuleBytes": 1000}))
        .await;
    let (status, body) = small
        .deploy(&retried("p", "v1"), &[("chaos", chaos())])
        .await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "a module over the size quota: {body}"
    );
    assert_eq!(body["code"], "SUTRA.TENANT.QUOTA_EXCEEDED");

    deploy_plain(&small, &waits_for_message("order")).await;
    let (status, first) = small.start("order", json!({"key": "a"})).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, body) = small.start("order", json!({"key": "b"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "SUTRA.TENANT.QUOTA_EXCEEDED");

    // A schedule fire over quota is refused and journaled, not dropped.
    let dep = deploy_plain(&small, &scheduled("tick", "R2/PT1H", true)).await;
    srv.advance("PT3H").await;
    let s = schedules(&small, dep["id"].as_str().unwrap()).await;
    assert_eq!(s["schedules"][0]["refused"], 2, "{s}");
    assert_eq!(s["schedules"][0]["fires"], 0, "{s}");
    let events = s["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert!(
        events
            .iter()
            .all(|e| e["outcome"] == "refused" && e["code"] == "SUTRA.TENANT.QUOTA_EXCEEDED"),
        "{s}"
    );

    // Room again: the ended instance frees the quota.
    small
        .post("/v1/messages", json!({"name": "go", "correlationKey": "a"}))
        .await;
    let (status, body) = small.start("order", json!({"key": "c"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // `/metrics` takes the admin key (issue 16).
    let (_, metrics) = srv
        .admin()
        .send(srv.admin().request(Method::GET, "/metrics"))
        .await;
    let text = metrics.as_str().unwrap();
    assert!(text.contains("sutra_schedule_refusals 2"), "{text}");
    assert!(
        text.contains("sutra_instances{state=\"WAITING\"} 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_both_retry_modes() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy_plain(&api, &waits_for_message("order")).await;
    let (_, w) = api.start("order", json!({"key": "k"})).await;
    let wid = id(&w);
    let (status, body) = api
        .call(Method::POST, &format!("/v1/instances/{wid}/retry"), None)
        .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a live instance cannot be retried: {body}"
    );
    let (status, cancelled) = api
        .post(
            &format!("/v1/instances/{wid}/cancel"),
            json!({"reason": "test"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["state"], "TERMINATED");
    let (status, body) = api
        .post(&format!("/v1/instances/{wid}/cancel"), json!({}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("SUTRA.RUNTIME.INSTANCE_STATE"))
    );
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/v1/instances/{wid}/retry?mode=from-failure"),
            None,
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "from-failure needs a FAILED instance: {body}"
    );
    let (status, again) = api
        .call(
            Method::POST,
            &format!("/v1/instances/{wid}/retry?mode=full"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_eq!(again["retryOf"], wid.as_str());
    assert_eq!(again["state"], "WAITING");
    assert_eq!(
        again["variables"]["key"], "k",
        "full replays the original input"
    );

    deploy_ok(&api, &two_steps("two")).await;
    let input = json!({"first": {"do": "echo"}, "second": {"do": "fail", "code": "BROKEN"}});
    let (_, failed) = api.start("two", input.clone()).await;
    assert_eq!(failed["state"], "FAILED", "{failed}");
    let fid = id(&failed);
    let (status, resumed) = api
        .call(
            Method::POST,
            &format!("/v1/instances/{fid}/retry?mode=from-failure"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{resumed}");
    assert_eq!(resumed["retryOf"], fid.as_str());
    let tasks: Vec<&str> = resumed["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["task"].as_str().unwrap())
        .collect();
    assert_eq!(
        tasks,
        ["T2"],
        "from-failure resumes at the failed step: {resumed}"
    );
    assert_eq!(
        resumed["variables"]["firstOut"], failed["variables"]["firstOut"],
        "with the recorded variables"
    );
    let (status, full) = api
        .call(Method::POST, &format!("/v1/instances/{fid}/retry"), None)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let tasks: Vec<&str> = full["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["T1", "T2"], "full starts over: {full}");
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/v1/instances/{fid}/retry?mode=sideways"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_health_and_paging() {
    let srv = Server::start().await;
    let anon = srv.anonymous();
    let (status, doc) = anon.get("/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        doc["paths"]["/v1/processes/{process}/instances"]["post"].is_object(),
        "{doc}"
    );
    let (status, health) = anon.get("/healthz").await;
    assert_eq!(
        (status, health["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );

    let api = srv.tenant("acme", json!({})).await;
    deploy_plain(&api, &waits_for_message("order")).await;
    for k in 0..5 {
        api.start("order", json!({"key": k.to_string()})).await;
    }
    let mut seen = Vec::new();
    let mut path = "/v1/instances?limit=2".to_string();
    loop {
        let (status, page) = api.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        for i in page["instances"].as_array().unwrap() {
            seen.push(i["id"].as_str().unwrap().to_string());
        }
        match page["next"].as_str() {
            Some(n) => path = format!("/v1/instances?limit=2&after={n}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "keyset pages are ordered and never repeat");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004s_cancel_and_retry_routes_are_aliases_and_a_failed_instance_closes() {
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let other = srv.tenant("globex", json!({})).await;
    deploy_plain(&api, &waits_for_message("order")).await;
    let (_, w) = api.start("order", json!({"key": "k"})).await;
    let wid = id(&w);
    // Same auth: no key is 401, another tenant's run is 404.
    let (status, _) = srv
        .anonymous()
        .post(&format!("/api/flows/executions/{wid}/cancel"), json!({}))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = other
        .post(&format!("/api/flows/executions/{wid}/cancel"), json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Same answers as /v1/instances/{id}/cancel and /retry.
    let (status, cancelled) = api
        .call(
            Method::POST,
            &format!("/api/flows/executions/{wid}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["state"], "TERMINATED");
    let (status, body) = api
        .post(&format!("/api/flows/executions/{wid}/cancel"), json!({}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("SUTRA.RUNTIME.INSTANCE_STATE"))
    );
    let (status, again) = api
        .call(
            Method::POST,
            &format!("/api/flows/executions/{wid}/retry?mode=full"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_eq!(again["retryOf"], wid.as_str());
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/api/flows/executions/{wid}/retry?mode=sideways"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Close: a FAILED instance releases its deployment, journaled.
    let dep = deploy_ok(&api, &two_steps("two")).await;
    let dep_id = dep["id"].as_str().unwrap().to_string();
    let input = json!({"first": {"do": "echo"}, "second": {"do": "fail", "code": "BROKEN"}});
    let (_, failed) = api.start("two", input).await;
    assert_eq!(failed["state"], "FAILED", "{failed}");
    let fid = id(&failed);
    let (status, _) = api
        .call(Method::DELETE, &format!("/v1/deployments/{dep_id}"), None)
        .await;
    assert!(status.is_success());
    assert_eq!(deployment_state(&api, &dep_id).await, "DRAINING");
    let (status, body) = api
        .post(&format!("/v1/instances/{wid}/close"), json!({}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("SUTRA.RUNTIME.INSTANCE_STATE")),
        "only a FAILED instance closes"
    );
    let (status, closed) = api
        .post(
            &format!("/v1/instances/{fid}/close"),
            json!({"reason": "fixed by hand"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{closed}");
    assert_eq!(closed["state"], "FAILED");
    assert!(closed["closedAt"].is_string(), "{closed}");
    assert_eq!(deployment_state(&api, &dep_id).await, "RETIRED");
    let (status, body) = api
        .post(&format!("/v1/instances/{fid}/close"), json!({}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (StatusCode::CONFLICT, Some("SUTRA.RUNTIME.INSTANCE_STATE"))
    );
    // The OpenAPI document lists the routes.
    let (_, doc) = api.get("/v1/openapi.json").await;
    for p in [
        "/api/flows/executions/{executionId}/cancel",
        "/api/flows/executions/{executionId}/retry",
        "/v1/instances/{id}/close",
    ] {
        assert!(
            doc["paths"].get(p).is_some(),
            "{p} is not in the OpenAPI document"
        );
    }
}
